//! Proofs about policy changes through the real binary and the real
//! solver (cvc5 1.3.1, built by `bash solver/build.sh` when absent; under
//! `CI=true` a failed build fails the tests, elsewhere they skip):
//! `policy diff --prove` on a narrowing candidate and on candidates that
//! widen through a new permit, a removed forbid, a changed `when` on a
//! typed argument and the entity hierarchy, each counterexample decided
//! again, independently, by `policy test` under both sets; `policy lint
//! --prove` on dead, redundant, shadowed and erroring policies; a timeout
//! reported as unknown; what happens without a solver; and `--upstreams`,
//! typing an upstream server's tools from a running gateway's database.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::OnceLock;

use common::cli::{bin, stderr, stdout};
use common::repo;
use serde_json::{Value, json};

/// The solver, built once per test binary; `None` (skip) outside CI when
/// it cannot be built.
fn solver() -> Option<PathBuf> {
    static BUILD: OnceLock<Result<(), String>> = OnceLock::new();
    let built = common::setup::install_once(
        &BUILD,
        &repo().join("solver/build.sh"),
        "the cvc5 solver (solver/build.sh)",
    );
    built.then(|| repo().join("target/solver/cvc5"))
}

/// Typed tools declared by hand in the schema file, as a security team
/// does for tools whose arguments it writes policies on.
const TYPED_TOOLS: &str = r#"
  action "fs.write_file" in [call_tool] appliesTo {
    principal: [Agent, User],
    resource: [Tool],
    context: { session: Session, time: datetime, args: { path: String, content: String } },
  };
  action "calc.sum" in [call_tool] appliesTo {
    principal: [Agent, User],
    resource: [Tool],
    context: { session: Session, time: datetime, args: { a: Long, b: Long, c: Long } },
  };
"#;

/// A directory with the shipped schema plus [`TYPED_TOOLS`], a live
/// policy directory (the shipped policies plus `extra`), and a config
/// naming both and the solver.
struct Workspace {
    dir: tempfile::TempDir,
    config: PathBuf,
    live: PathBuf,
}

impl Workspace {
    fn new(solver: &Path, extra: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let shipped = std::fs::read_to_string(repo().join("schemas/gateway.cedarschema")).unwrap();
        let end = shipped.rfind('}').unwrap();
        let schema = dir.path().join("gateway.cedarschema");
        std::fs::write(
            &schema,
            format!("{}{TYPED_TOOLS}{}", &shipped[..end], &shipped[end..]),
        )
        .unwrap();
        let live = dir.path().join("live");
        copy_cedar_files(&repo().join("policies"), &live);
        for (file, text) in extra {
            std::fs::write(live.join(file), text).unwrap();
        }
        let config = dir.path().join("cedargate.toml");
        std::fs::write(
            &config,
            format!(
                "data_dir = {:?}\npolicies_dir = {live:?}\nschema_file = {schema:?}\n\n[prove]\nsolver = {solver:?}\n",
                dir.path().join("data")
            ),
        )
        .unwrap();
        Workspace { dir, config, live }
    }

    /// A candidate: the live files, then `edit` applied to the directory.
    fn candidate(&self, name: &str, edit: impl FnOnce(&Path)) -> PathBuf {
        let dir = self.dir.path().join(name);
        copy_cedar_files(&self.live, &dir);
        edit(&dir);
        dir
    }

    fn run(&self, args: &[&str]) -> Output {
        bin()
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env_remove("CVC5")
            .output()
            .unwrap()
    }

    /// `policy diff --prove CANDIDATE --json` (plus `flags`): the status and the report.
    fn diff(&self, candidate: &Path, flags: &[&str]) -> (Option<i32>, Value) {
        let mut args = vec!["policy", "diff", "--prove", "--json"];
        args.push(candidate.to_str().unwrap());
        args.extend(flags);
        let out = self.run(&args);
        let report = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)));
        (out.status.code(), report)
    }

    /// Decides `witness` with `policy test` on a copy of `policies` (their
    /// `*.cedar` files and this one case): Cedar's decision, independently
    /// of the proof.
    fn decide(&self, policies: &Path, witness: &Value) -> String {
        let dir = tempfile::tempdir_in(self.dir.path()).unwrap();
        copy_cedar_files(policies, dir.path());
        std::fs::create_dir(dir.path().join("tests")).unwrap();
        let case = json!([{
            "name": "witness",
            "request": {
                "principal": witness["principal"],
                "action": witness["action"],
                "resource": witness["resource"],
                "context": witness["context"],
            },
            "entities": witness["entities"],
            "decision": "allow",
            "reason": [],
            "num_errors": 0,
        }]);
        std::fs::write(dir.path().join("tests/witness.json"), case.to_string()).unwrap();
        let out = self.run(&[
            "policy",
            "test",
            "--json",
            "--policies",
            dir.path().to_str().unwrap(),
        ]);
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)));
        report["outcomes"][0]["decision"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The witness of `direction` in `action` for `principal`, checked to
    /// flip under the authorizer (as reported, and decided again by
    /// `policy test`): `allowed_in` allows it, the other set denies it.
    fn flipping_witness(
        &self,
        report: &Value,
        (action, principal): (&str, &str),
        direction: &str,
        (candidate, allowed_in): (&Path, &str),
    ) -> Value {
        let env = env(report, action, principal);
        let found = &env[direction];
        assert_eq!(found["status"], "found", "{env:#}");
        assert!(found["disagreement"].is_null(), "{found:#}");
        let w = found["witness"].clone();
        let decisions = w["decisions"].as_array().unwrap();
        for d in decisions {
            assert_eq!(d["allows"], d["set"] == allowed_in, "{w:#}");
        }
        let (live, cand) = (self.decide(&self.live, &w), self.decide(candidate, &w));
        let expected = match allowed_in {
            "candidate" => ("deny", "allow"),
            _ => ("allow", "deny"),
        };
        assert_eq!((live.as_str(), cand.as_str()), expected, "{w:#}");
        w
    }
}

/// The `*.cedar` files of `from` into a new directory `to`.
fn copy_cedar_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "cedar") {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// The report's environment of `action` for principal type `principal`.
fn env<'a>(report: &'a Value, action: &str, principal: &str) -> &'a Value {
    report["proof"]["envs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["env"]["action"] == action && e["env"]["principal"] == format!("Gateway::{principal}")
        })
        .unwrap_or_else(|| panic!("no environment {action} ({principal}) in {report:#}"))
}

/// The verdict of every environment other than `except`.
fn other_verdicts<'a>(report: &'a Value, except: &[(&str, &str)]) -> Vec<&'a Value> {
    report["proof"]["envs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            !except.iter().any(|(a, p)| {
                e["env"]["action"] == *a && e["env"]["principal"] == format!("Gateway::{p}")
            })
        })
        .map(|e| &e["verdict"])
        .collect()
}

/// The entity of `uid` (`Type::"id"`) among a witness's entities.
fn entity<'a>(witness: &'a Value, uid: &str) -> &'a Value {
    witness["entities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| format!("{}::{}", e["uid"]["type"].as_str().unwrap(), e["uid"]["id"]) == uid)
        .unwrap_or_else(|| panic!("no entity {uid} in {witness:#}"))
}

#[test]
fn a_narrowing_candidate_is_proved_less_permissive() {
    let Some(solver) = solver() else { return };
    let ws = Workspace::new(&solver, &[]);
    let candidate = ws.candidate("narrower", |dir| {
        std::fs::write(
            dir.join("people.cedar"),
            "@id(\"people-do-not-write-graphs\")\nforbid (principal is Gateway::User, action == Gateway::Action::\"write_node\", resource);\n",
        )
        .unwrap();
    });
    let (status, report) = ws.diff(&candidate, &[]);
    assert_eq!(status, Some(0), "{report:#}");
    assert_eq!(
        report["policies"]["added"],
        json!(["people-do-not-write-graphs"])
    );
    let narrowed = env(&report, "write_node", "User");
    assert_eq!(narrowed["verdict"], "less-permissive", "{narrowed:#}");
    assert_eq!(narrowed["widening"]["status"], "none");
    let w = ws.flipping_witness(
        &report,
        ("write_node", "User"),
        "narrowing",
        (&candidate, "live"),
    );
    assert!(
        w["principal"]
            .as_str()
            .unwrap()
            .starts_with("Gateway::User::"),
        "{w:#}"
    );
    for verdict in other_verdicts(&report, &[("write_node", "User")]) {
        assert_eq!(verdict, "equivalent", "{report:#}");
    }

    let out = ws.run(&["policy", "diff", "--prove", candidate.to_str().unwrap()]);
    let text = stdout(&out);
    assert!(
        text.contains("added    people-do-not-write-graphs"),
        "{text}"
    );
    assert!(text.contains("write_node (User → Project)"), "{text}");
    assert!(text.contains("less permissive"), "{text}");
    assert!(
        text.contains("narrows: the live set allows, the candidate denies"),
        "{text}"
    );
}

#[test]
fn a_new_permit_widens_with_a_counterexample_and_fails_unless_allowed() {
    let Some(solver) = solver() else { return };
    let ws = Workspace::new(&solver, &[]);
    let candidate = ws.candidate("new-permit", |dir| {
        std::fs::write(
            dir.join("deployers.cedar"),
            "@id(\"deployers-write-any-graph\")\npermit (principal in Gateway::Role::\"deployers\", action == Gateway::Action::\"write_node\", resource);\n",
        )
        .unwrap();
    });
    let (status, report) = ws.diff(&candidate, &[]);
    assert_eq!(status, Some(1), "{report:#}");
    assert_eq!(
        env(&report, "write_node", "Agent")["verdict"],
        "more-permissive"
    );
    let w = ws.flipping_witness(
        &report,
        ("write_node", "Agent"),
        "widening",
        (&candidate, "candidate"),
    );
    let decided = &w["decisions"][1];
    assert_eq!(
        decided["reasons"],
        json!(["deployers-write-any-graph"]),
        "{w:#}"
    );
    // A person is in no role: nothing widens for `User`.
    assert_eq!(env(&report, "write_node", "User")["verdict"], "equivalent");

    let (status, _) = ws.diff(&candidate, &["--allow-widening"]);
    assert_eq!(status, Some(0));

    let out = ws.run(&["policy", "diff", "--prove", candidate.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("MORE PERMISSIVE"), "{}", stdout(&out));
    assert!(stdout(&out).contains("WIDENS: the candidate allows, the live set denies"));
    assert!(
        stderr(&out).contains("pass --allow-widening"),
        "{}",
        stderr(&out)
    );

    // Without --prove: which policies changed, nothing proved.
    let out = ws.run(&["policy", "diff", candidate.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains("added    deployers-write-any-graph"),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains("proof:"));
}

#[test]
fn a_removed_forbid_widens_every_action_it_guarded() {
    let Some(solver) = solver() else { return };
    let ws = Workspace::new(&solver, &[]);
    let candidate = ws.candidate("no-forbid", |dir| {
        let text = std::fs::read_to_string(dir.join("tools.cedar")).unwrap();
        let cut = text.find("// A session acts for its agent").unwrap();
        std::fs::write(dir.join("tools.cedar"), &text[..cut]).unwrap();
    });
    let (status, report) = ws.diff(&candidate, &[]);
    assert_eq!(status, Some(1), "{report:#}");
    assert_eq!(
        report["policies"]["removed"],
        json!(["only-the-session-agent-acts"])
    );
    for action in [
        "view_tool",
        "call_tool",
        "read_node",
        "write_node",
        "af_memory_remember",
    ] {
        assert_eq!(
            env(&report, action, "Agent")["verdict"],
            "more-permissive",
            "{action}"
        );
    }
    assert_eq!(
        env(&report, "access_session", "ApiKey")["verdict"],
        "equivalent"
    );
    let w = ws.flipping_witness(
        &report,
        ("read_node", "Agent"),
        "widening",
        (&candidate, "candidate"),
    );
    // The request's agent is not the session's.
    let session = w["context"]["session"]["__entity"]["id"].clone();
    let session = entity(&w, &format!("Gateway::Session::{session}"));
    let agent = &session["attrs"]["agent"]["__entity"];
    assert_ne!(
        format!("Gateway::Agent::{}", agent["id"]),
        w["principal"].as_str().unwrap(),
        "{w:#}"
    );
    assert_eq!(
        w["decisions"][0]["reasons"],
        json!(["only-the-session-agent-acts"]),
        "{w:#}"
    );
}

#[test]
fn a_wider_pattern_on_a_typed_argument_widens_that_tool() {
    let Some(solver) = solver() else { return };
    let tmp_only = "@id(\"fs-writes-under-tmp\")\npermit (principal, action == Gateway::Action::\"fs.write_file\", resource)\nwhen { context.args.path like \"/tmp/*\" };\n";
    let ws = Workspace::new(&solver, &[("fs.cedar", tmp_only)]);
    let candidate = ws.candidate("any-path", |dir| {
        std::fs::write(
            dir.join("fs.cedar"),
            tmp_only.replace("\"/tmp/*\"", "\"/*\""),
        )
        .unwrap();
    });
    let (status, report) = ws.diff(&candidate, &[]);
    assert_eq!(status, Some(1), "{report:#}");
    assert_eq!(
        report["policies"]["changed"],
        json!(["fs-writes-under-tmp"])
    );
    let w = ws.flipping_witness(
        &report,
        ("fs.write_file", "Agent"),
        "widening",
        (&candidate, "candidate"),
    );
    let path = w["context"]["args"]["path"].as_str().unwrap();
    assert!(
        path.starts_with('/') && !path.starts_with("/tmp/"),
        "{path}"
    );
    // A typed tool is decided only under its own action, on itself.
    assert_eq!(w["resource"], "Gateway::Tool::\"fs.write_file\"");
    assert_eq!(w["action"], "Gateway::Action::\"fs.write_file\"");
    for verdict in other_verdicts(
        &report,
        &[("fs.write_file", "Agent"), ("fs.write_file", "User")],
    ) {
        assert_eq!(verdict, "equivalent", "{report:#}");
    }
}

#[test]
fn a_role_added_to_an_exemption_widens_through_the_hierarchy() {
    let Some(solver) = solver() else { return };
    let deployers_only = "@id(\"only-deployers-deploy\")\nforbid (principal, action == Gateway::Action::\"a2a_invoke\", resource in Gateway::PeerAgent::\"vercel_ops\")\nunless { principal in Gateway::Role::\"deployers\" };\n";
    let ws = Workspace::new(&solver, &[("deploy.cedar", deployers_only)]);
    let candidate = ws.candidate("oncall-too", |dir| {
        let with_oncall = deployers_only.replace(
            "principal in Gateway::Role::\"deployers\"",
            "principal in [Gateway::Role::\"deployers\", Gateway::Role::\"oncall\"]",
        );
        std::fs::write(dir.join("deploy.cedar"), with_oncall).unwrap();
    });
    let (status, report) = ws.diff(&candidate, &[]);
    assert_eq!(status, Some(1), "{report:#}");
    let w = ws.flipping_witness(
        &report,
        ("a2a_invoke", "Agent"),
        "widening",
        (&candidate, "candidate"),
    );
    // The agent is an on-call member and not a deployer; the tool is one of
    // `vercel_ops`'s, reached through the hierarchy.
    let agent = entity(&w, w["principal"].as_str().unwrap());
    let parents: Vec<String> = agent["parents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{}::{}", p["type"].as_str().unwrap(), p["id"]))
        .collect();
    assert!(
        parents.contains(&"Gateway::Role::\"oncall\"".to_string()),
        "{w:#}"
    );
    assert!(
        !parents.contains(&"Gateway::Role::\"deployers\"".to_string()),
        "{w:#}"
    );
    assert_eq!(
        w["decisions"][0]["reasons"],
        json!(["only-deployers-deploy"]),
        "{w:#}"
    );
    assert_eq!(env(&report, "a2a_invoke", "User")["verdict"], "equivalent");
}

#[test]
fn lint_finds_dead_redundant_shadowed_and_erroring_policies() {
    let Some(solver) = solver() else { return };
    let extra = r#"
@id("never-both-kinds")
permit (principal, action == Gateway::Action::"view_tool", resource)
when { resource.kind == "memory" && resource.kind == "graph" };

@id("docs-readable")
permit (principal, action == Gateway::Action::"read_node", resource)
when { resource in context.session.project && resource.type == "Doc" };

@id("x-writes")
permit (principal, action == Gateway::Action::"write_node", resource)
when { principal is Gateway::Agent && principal.name == "x" };

@id("no-x-agents")
forbid (principal, action == Gateway::Action::"write_node", resource)
when { principal.name like "x*" };

@id("busy-callers")
forbid (principal, action in [Gateway::Action::"call_tool"], resource)
when { context has usage && context.usage.callsLastMinute + context.usage.agentCallsLastMinute > 100 };
"#;
    let ws = Workspace::new(&solver, &[("extra.cedar", extra)]);
    let out = ws.run(&["policy", "lint", "--prove", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings: Vec<(String, String)> = report["lint"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["policy"].as_str().unwrap().into(),
                f["kind"].as_str().unwrap().into(),
            )
        })
        .collect();
    let expected = [
        ("busy-callers", "can-error"),
        ("docs-readable", "redundant"),
        ("never-both-kinds", "dead"),
        ("x-writes", "shadowed"),
    ];
    assert_eq!(
        findings,
        expected.map(|(p, k)| (p.to_string(), k.to_string())),
        "{report:#}"
    );
    let finding = |id: &str| {
        report["lint"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["policy"] == id)
            .unwrap()
    };
    assert_eq!(
        finding("docs-readable")["by"],
        json!(["graph-nodes-readable-in-session-project"])
    );
    let shadowed = finding("x-writes");
    assert_eq!(shadowed["by"], json!(["no-x-agents"]));
    assert_eq!(shadowed["witness"]["decisions"][0]["allows"], false);
    assert_eq!(
        shadowed["witness"]["decisions"][0]["reasons"],
        json!(["no-x-agents"])
    );
    // The erroring forbid: Cedar skips it, the gateway denies (fail closed).
    let errs = &finding("busy-callers")["witness"];
    let errors = errs["decisions"][0]["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().contains("overflow")),
        "{errs:#}"
    );
    assert_eq!(errs["decisions"][0]["gateway_allows"], false, "{errs:#}");
    assert!(report["lint"]["unsettled"].as_array().unwrap().is_empty());

    let text = stdout(&ws.run(&["policy", "lint", "--prove"]));
    assert!(
        text.contains("dead       permit `never-both-kinds`"),
        "{text}"
    );
    assert!(
        text.contains(
            "shadowed   permit `x-writes`: every request it matches is denied by `no-x-agents`"
        ),
        "{text}"
    );
    assert!(text.contains("can error  forbid `busy-callers`"), "{text}");

    // The shipped set has no finding.
    let shipped = Workspace::new(&solver, &[]);
    let out = shipped.run(&["policy", "lint", "--prove"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("summary: 0 finding(s), 0 unsettled"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_timeout_is_reported_as_unknown_never_as_equivalent() {
    let Some(solver) = solver() else { return };
    let ws = Workspace::new(&solver, &[]);
    // Allows only when a³ + b³ + c³ = 114: too hard for a second.
    let candidate = ws.candidate("cubes", |dir| {
        std::fs::write(
            dir.join("calc.cedar"),
            "@id(\"sum-of-cubes\")\npermit (principal, action == Gateway::Action::\"calc.sum\", resource)\nwhen {\n  context.args.a * context.args.a * context.args.a +\n  context.args.b * context.args.b * context.args.b +\n  context.args.c * context.args.c * context.args.c == 114\n};\n",
        )
        .unwrap();
    });
    let (status, report) = ws.diff(&candidate, &["--query-timeout-ms", "1000"]);
    assert_eq!(status, Some(3), "{report:#}");
    let cubes = env(&report, "calc.sum", "Agent");
    assert_eq!(cubes["verdict"], "unknown", "{cubes:#}");
    assert_eq!(cubes["widening"]["status"], "unknown");
    assert_eq!(
        cubes["widening"]["why"]["reason"], "query-limit",
        "{cubes:#}"
    );
    // The narrowing direction is settled: the live set allows no sum.
    assert_eq!(cubes["narrowing"]["status"], "none");
    assert_eq!(env(&report, "view_tool", "Agent")["verdict"], "equivalent");
    // `--allow-widening` accepts what was not proved not to widen.
    let (status, _) = ws.diff(
        &candidate,
        &["--query-timeout-ms", "1000", "--allow-widening"],
    );
    assert_eq!(status, Some(0));

    // The run's own limit: cut off mid-question, the rest not asked.
    let (status, report) = ws.diff(
        &candidate,
        &["--query-timeout-ms", "60000", "--run-timeout-secs", "1"],
    );
    assert_eq!(status, Some(3), "{report:#}");
    let cubes = env(&report, "calc.sum", "Agent");
    assert_eq!(cubes["widening"]["why"]["reason"], "run-limit", "{cubes:#}");
    let last = env(&report, "write_node", "User");
    assert_eq!(last["verdict"], "unknown", "{last:#}");
    assert!(cubes["millis"].as_u64().unwrap() < 5_000, "{cubes:#}");
}

#[test]
fn without_a_solver_proofs_refuse_to_run_and_serve_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-cvc5-here");
    let ws = Workspace::new(&missing, &[]);
    let out = ws.run(&["policy", "diff", "--prove", ws.live.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    let out = ws.run(&["policy", "lint", "--prove"]);
    assert_eq!(out.status.code(), Some(2));
    // The diff of policies needs no solver.
    let out = ws.run(&["policy", "diff", ws.live.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("none added, removed or changed"));

    let mut child = bin()
        .arg("--config")
        .arg(&ws.config)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("CEDARGATE_DEMO_TENANT", "false")
        .env_remove("CEDARGATE_ADMIN_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let listening = line.contains("cedargate listening");
        said.push(line);
        if listening {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let notes: Vec<&String> = said
        .iter()
        .filter(|l| l.contains("policy proofs"))
        .collect();
    assert_eq!(notes.len(), 1, "{said:#?}");
    assert!(notes[0].contains("policy proofs unavailable"), "{said:#?}");
    assert!(
        said.last().unwrap().contains("cedargate listening"),
        "{said:#?}"
    );
}

/// An upstream MCP server listing one tool, `read {path}`: enough for the
/// gateway to type `fs.read` from its approved first listing.
async fn files_upstream() -> String {
    async fn handle(body: String) -> axum::Json<Value> {
        let msg: Value = serde_json::from_str(&body).unwrap();
        let result = match msg["method"].as_str().unwrap_or_default() {
            "initialize" => json!({"protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}}, "serverInfo": {"name": "files", "version": "1"}}),
            "tools/list" => json!({"tools": [{"name": "read", "description": "Reads a file",
                "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}},
                                "required": ["path"]}}]}),
            _ => json!({}),
        };
        axum::Json(json!({"jsonrpc": "2.0", "id": msg["id"], "result": result}))
    }
    let app = axum::Router::new().route("/mcp", axum::routing::post(handle));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/mcp")
}

/// `--upstreams` proves policies on the typed actions the gateway's
/// database brings (an approved upstream tool's arguments), read while the
/// gateway runs; without it those actions are unknown to the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tools_are_proved_with_upstreams() {
    let Some(solver) = solver() else { return };
    let g = common::TestGateway::start().await;
    g.tenant("acme").await;
    let url = files_upstream().await;
    let (status, body) = g
        .admin(
            reqwest::Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "fs", "transport": "streamable-http", "url": url})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let mut typed = false;
    for _ in 0..200 {
        let (_, body) = g.admin(reqwest::Method::GET, "/admin/policies", None).await;
        typed = body["typedTools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "fs.read");
        if typed {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(typed, "fs.read was never typed");

    let tmp_only = "@id(\"reads-under-tmp\")\npermit (principal, action == Gateway::Action::\"fs.read\", resource)\nwhen { context.args.path like \"/tmp/*\" };\n";
    let ws = Workspace::new(&solver, &[("fs.cedar", tmp_only)]);
    let url = g.gw.config.database_url();
    let mut text = std::fs::read_to_string(&ws.config).unwrap();
    text = text.replace(
        "\n[prove]",
        &format!("\n[database]\nurl = {url:?}\n\n[prove]"),
    );
    std::fs::write(&ws.config, text).unwrap();
    let candidate = ws.candidate("any-read", |dir| {
        std::fs::write(
            dir.join("fs.cedar"),
            tmp_only.replace("\"/tmp/*\"", "\"/*\""),
        )
        .unwrap();
    });
    let ws = std::sync::Arc::new(ws);
    let proved = {
        let (ws, candidate) = (std::sync::Arc::clone(&ws), candidate.clone());
        tokio::task::spawn_blocking(move || {
            let without = ws.run(&["policy", "diff", "--prove", candidate.to_str().unwrap()]);
            (without, ws.diff(&candidate, &["--upstreams"]))
        })
        .await
        .unwrap()
    };
    let (without, (status, report)) = proved;
    assert_eq!(without.status.code(), Some(2));
    assert!(stderr(&without).contains("fs.read"), "{}", stderr(&without));
    assert_eq!(status, Some(1), "{report:#}");
    // (`policy test` knows no upstream tools: the report's own re-decisions.)
    let found = &env(&report, "fs.read", "Agent")["widening"];
    assert_eq!(found["status"], "found", "{report:#}");
    assert!(found["disagreement"].is_null(), "{found:#}");
    let w = &found["witness"];
    assert_eq!(w["decisions"][0]["allows"], false, "{w:#}");
    assert_eq!(w["decisions"][1]["allows"], true, "{w:#}");
    assert_eq!(
        w["decisions"][1]["reasons"],
        json!(["reads-under-tmp"]),
        "{w:#}"
    );
    let path = w["context"]["args"]["path"].as_str().unwrap();
    assert!(!path.starts_with("/tmp/"), "{w:#}");
    assert_eq!(w["resource"], "Gateway::Tool::\"fs.read\"");
}
