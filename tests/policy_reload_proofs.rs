//! A reload gated by its proof (`[lifecycle] prove`), through the real
//! server and the real solver (built by `bash solver/build.sh` when absent;
//! under `CI=true` a failed build fails the tests, elsewhere they skip):
//!
//! - `refuse-widening`: a narrowing candidate is proved less permissive and
//!   applied; a widening one is refused with its counterexample, the active
//!   set stays and keeps deciding, the refusal (with the counterexample and
//!   the candidate's text) is in the trail, until an admin accepts that
//!   exact hash (also in the trail);
//! - `report`: the candidate is applied at once and the proof reported
//!   after it; the reload answers before the proof ends and requests keep
//!   being decided on the active set while it runs;
//! - an acceptance is kept in the store: a second instance on the database
//!   and the first after a restart load the accepted candidate without a
//!   refusal; a hash no proof refused cannot be accepted (409);
//! - `refuse-widening` without a solver refuses to start;
//! - a restart proves the policy files against the set last active on the
//!   database: widened files are refused (the last set decides, the
//!   refusal is recorded and listed) until their hash is accepted,
//!   narrowed ones start; an unsettled proof (its limit reached) refuses
//!   as a reload's does; under `report` the files start and the proof
//!   follows; a last set that no longer loads (its text edited) refuses
//!   the start.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use cedargate::config::ProveMode;
use common::setup::solver;
use common::{TestGateway, copy_policies};
use reqwest::Method;
use serde_json::{Value, json};

/// A narrowing change: people may not write graphs.
const NARROWER: &str = "@id(\"people-do-not-write-graphs\")\nforbid (principal is Gateway::User, action == Gateway::Action::\"write_node\", resource);\n";

/// A widening change: deployers may write any project's graph.
const WIDER: &str = "@id(\"deployers-write-any-graph\")\npermit (principal in Gateway::Role::\"deployers\", action == Gateway::Action::\"write_node\", resource);\n";

/// A gateway on a writable copy of the shipped policies (no file watch:
/// the test reloads) proving reloads in `mode` with `solver`.
async fn gateway(mode: ProveMode, solver: PathBuf) -> (TestGateway, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    let dir_for_config = policies.clone();
    let g = TestGateway::start_with(move |c| {
        c.policies_dir = dir_for_config;
        c.lifecycle.watch = false;
        c.lifecycle.prove = mode;
        c.prove.solver = Some(solver);
    })
    .await;
    (g, dir, policies)
}

async fn reload(g: &TestGateway) -> (u16, Value) {
    g.admin(Method::POST, "/admin/policies/reload", None).await
}

async fn policies(g: &TestGateway) -> Value {
    let (status, body) = g.admin(Method::GET, "/admin/policies", None).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The trail's events of `action`, each outcome parsed.
async fn events(g: &TestGateway, action: &str) -> Vec<Value> {
    use cedargate::store::audit_query::{DecisionFilter, Order, page_filtered};
    g.gw.store.writer().flush().await.unwrap();
    let rows =
        g.gw.store
            .read(|c| page_filtered(c, &DecisionFilter::default(), None, Order::Asc, 1000))
            .await
            .unwrap();
    rows.iter()
        .filter(|d| d.record.action == action)
        .map(|d| {
            assert_eq!(d.record.decision, "event");
            json!({
                "principal": d.record.principal,
                "resource": d.record.resource,
                "outcome": serde_json::from_str::<Value>(&d.record.outcome).unwrap(),
            })
        })
        .collect()
}

fn write(dir: &Path, file: &str, text: &str) {
    std::fs::write(dir.join(file), text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_widening_refuses_a_widening_reload_until_its_hash_is_accepted() {
    let Some(solver) = solver() else { return };
    let (g, _dir, dir) = gateway(ProveMode::RefuseWidening, solver).await;
    let shipped = g.gw.pep.current().hash.clone();

    // Narrower: proved, applied.
    write(&dir, "people.cedar", NARROWER);
    let (status, body) = reload(&g).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(body["result"], "applied");
    let narrowed = body["hash"].as_str().unwrap().to_string();
    let proof = &policies(&g).await["lastProof"];
    assert_eq!(proof["outcome"], "narrower", "{proof:#}");
    assert_eq!(
        (proof["liveHash"].as_str(), proof["candidateHash"].as_str()),
        (Some(shipped.as_str()), Some(narrowed.as_str()))
    );
    assert_eq!(
        proof["counterexamples"][0]["direction"], "narrowing",
        "{proof:#}"
    );

    // Wider: refused with its counterexample; the active set stays.
    write(&dir, "deployers.cedar", WIDER);
    let (status, body) = reload(&g).await;
    assert_eq!(status, 422, "{body:#}");
    assert_eq!(body["error"]["code"], "policy_set_refused", "{body:#}");
    assert_eq!(body["activeHash"], narrowed.as_str());
    let candidate = body["attempt"]["hash"].as_str().unwrap().to_string();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&candidate),
        "{body:#}"
    );
    assert_eq!(body["proof"]["outcome"], "widens");
    let example = &body["proof"]["counterexamples"][0];
    assert_eq!(example["direction"], "widening");
    assert_eq!(example["env"], "write_node (Agent → Project)");
    assert_live_denies_candidate_allows(example);
    assert_eq!(
        g.gw.pep.current().hash,
        narrowed,
        "the active set keeps deciding"
    );
    let status = policies(&g).await;
    assert_eq!(status["lastError"]["result"], "refused", "{status:#}");
    let (ready, body) = g.admin(Method::GET, "/readyz", None).await;
    let set = body["policySet"].as_str().unwrap_or_default();
    assert!(set.starts_with("stale"), "{ready} {body:#}");

    // The refusal is evidence: in the trail with its counterexample, and
    // the candidate's text recorded under its hash.
    let refused = events(&g, "policy_set_refused").await;
    assert_eq!(refused.len(), 1, "{refused:#?}");
    let outcome = &refused[0]["outcome"];
    assert_eq!(outcome["candidateHash"], candidate.as_str());
    assert_eq!(outcome["liveHash"], narrowed.as_str());
    assert_eq!(
        outcome["counterexamples"][0]["principal"],
        example["witness"]["principal"]
    );
    assert!(
        outcome["counterexamples"][0]["entities"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
    );
    let recorded =
        g.gw.store
            .read({
                let c = candidate.clone();
                move |conn| cedargate::store::audit_query::policy_set(conn, &c)
            })
            .await
            .unwrap();
    assert!(
        recorded.is_some(),
        "the refused candidate's text is recorded"
    );

    // Accepting another hash changes nothing; accepting it activates it.
    let (status, _) = g
        .admin(
            Method::POST,
            "/admin/policies/accept",
            Some(json!({"hash": "nope"})),
        )
        .await;
    assert_eq!(status, 400);
    let (status, body) = g
        .admin(
            Method::POST,
            "/admin/policies/accept",
            Some(json!({"hash": candidate})),
        )
        .await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(body["result"], "applied");
    assert_eq!(g.gw.pep.current().hash, candidate);
    let accepted = events(&g, "policy_set_accepted").await;
    assert_eq!(accepted.len(), 1, "{accepted:#?}");
    assert_eq!(accepted[0]["outcome"]["candidateHash"], candidate.as_str());
    assert_eq!(policies(&g).await["acceptedHash"], candidate.as_str());
    assert_eq!(
        accepted[0]["principal"],
        format!("Gateway::PolicySet::\"{candidate}\"")
    );
    let verified =
        g.gw.store
            .read(cedargate::store::decisions::verify)
            .await
            .unwrap();
    assert!(verified.problems.is_empty(), "{:?}", verified.problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_applies_at_once_and_reports_the_proof_after() {
    let Some(solver) = solver() else { return };
    let (g, _dir, dir) = gateway(ProveMode::Report, solver).await;
    write(&dir, "deployers.cedar", WIDER);
    let (status, body) = reload(&g).await;
    assert_eq!(status, 200, "{body:#}");
    let applied = body["hash"].as_str().unwrap().to_string();
    assert_eq!(g.gw.pep.current().hash, applied);
    let mut proof = Value::Null;
    for _ in 0..300 {
        proof = policies(&g).await["lastProof"].clone();
        if proof["candidateHash"] == applied.as_str() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(proof["outcome"], "widens", "{proof:#}");
    assert_eq!(proof["mode"], "report");
    assert_eq!(
        proof["counterexamples"][0]["env"],
        "write_node (Agent → Project)"
    );
    assert!(events(&g, "policy_set_refused").await.is_empty());
}

#[tokio::test]
async fn refuse_widening_without_a_solver_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = cedargate::config::Config {
        data_dir: dir.path().join("data"),
        policies_dir: common::repo().join("policies"),
        schema_file: common::repo().join("schemas/gateway.cedarschema"),
        demo_tenant: false,
        ..cedargate::config::Config::default()
    };
    config.database.url = common::database_url_for(dir.path());
    config.lifecycle.prove = ProveMode::RefuseWidening;
    config.prove.solver = Some(dir.path().join("no-cvc5-here"));
    let Err(e) = cedargate::server::prepare(config).await else {
        panic!("started without a solver")
    };
    assert!(e.to_string().contains("needs the SMT solver"), "{e}");
}

/// A candidate the solver cannot settle within the limits: allowed tool
/// calls only when the caller's three usage counters' cubes sum to 114.
const UNSETTLED: &str = "@id(\"sum-of-cubes\")\npermit (principal, action in [Gateway::Action::\"call_tool\"], resource)\nwhen {\n  context has usage &&\n  context.usage.callsLastMinute * context.usage.callsLastMinute * context.usage.callsLastMinute +\n  context.usage.agentCallsLastMinute * context.usage.agentCallsLastMinute * context.usage.agentCallsLastMinute +\n  context.usage.orgCallsLastMinute * context.usage.orgCallsLastMinute * context.usage.orgCallsLastMinute == 114\n};\n";

/// While a reload's proof runs (here until its 3 s limit), requests are
/// decided on the active set without waiting; a proof that ends unsettled
/// refuses the candidate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_proof_never_delays_requests_and_an_unsettled_one_refuses() {
    let Some(solver) = solver() else { return };
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    let for_config = policies.clone();
    let g = std::sync::Arc::new(
        TestGateway::start_with(move |c| {
            c.policies_dir = for_config;
            c.lifecycle.watch = false;
            c.lifecycle.prove = ProveMode::RefuseWidening;
            c.prove.solver = Some(solver);
            c.prove.query_timeout_ms = 2_000;
            c.prove.run_timeout_secs = 3;
        })
        .await,
    );
    let t = g.tenant("acme").await;
    let active = g.gw.pep.current().hash.clone();
    write(&policies, "cubes.cedar", UNSETTLED);
    let started = std::time::Instant::now();
    let reloading = tokio::spawn({
        let g = std::sync::Arc::clone(&g);
        async move { reload(&g).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (mut slowest, mut asked_during) = (Duration::ZERO, 0);
    while !reloading.is_finished() {
        asked_during += 1;
        let asked = std::time::Instant::now();
        let (status, body) = g
            .mcp(
                &t,
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body["result"]["tools"]
                .as_array()
                .is_some_and(|t| !t.is_empty()),
            "{body}"
        );
        slowest = slowest.max(asked.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = reloading.await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "the proof ran to its limit"
    );
    assert!(
        asked_during >= 5,
        "only {asked_during} requests while it proved"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a request waited {slowest:?}"
    );
    assert_eq!(status, 422, "{body:#}");
    assert_eq!(body["proof"]["outcome"], "unknown", "{body:#}");
    assert!(body["proof"]["unsettled"].as_u64().unwrap() > 0);
    assert_eq!(g.gw.pep.current().hash, active);
}

/// A gateway over `data` (a fresh or a stopped gateway's directory) on
/// `policies`, proving reloads under `refuse-widening`, on the database
/// `database` when given (a second instance) or its directory's own.
async fn proving_in(
    data: tempfile::TempDir,
    policies: &Path,
    solver: &Path,
    database: Option<String>,
) -> TestGateway {
    started_in(data, policies, solver, move |c| {
        if database.is_some() {
            c.database.url = database;
        }
    })
    .await
}

/// A first run on a copy of the shipped policies, stopped: the copy's
/// keeper and folder, the shipped set's hash, and the run's data directory
/// for the restart.
async fn a_stopped_run_on_the_shipped_set(
    solver: &Path,
    tweak: impl FnOnce(&mut cedargate::config::Config),
) -> (tempfile::TempDir, PathBuf, String, tempfile::TempDir) {
    let files = tempfile::tempdir().unwrap();
    let dir = copy_policies(files.path());
    let g = started_in(tempfile::tempdir().unwrap(), &dir, solver, tweak).await;
    let shipped = g.gw.pep.current().hash.clone();
    (files, dir, shipped, g.stop().await.into_dir())
}

/// A gateway over `data` on `policies`, proving under `refuse-widening`
/// unless `tweak` says otherwise.
async fn started_in(
    data: tempfile::TempDir,
    policies: &Path,
    solver: &Path,
    tweak: impl FnOnce(&mut cedargate::config::Config),
) -> TestGateway {
    let (policies, solver) = (policies.to_path_buf(), solver.to_path_buf());
    TestGateway::start_in(data, move |c| {
        c.policies_dir = policies;
        c.lifecycle.watch = false;
        c.lifecycle.prove = ProveMode::RefuseWidening;
        c.prove.solver = Some(solver);
        tweak(c);
    })
    .await
}

async fn accept(g: &TestGateway, hash: &str) -> (u16, Value) {
    g.admin(
        Method::POST,
        "/admin/policies/accept",
        Some(json!({ "hash": hash })),
    )
    .await
}

/// An acceptance is kept in the store: a second instance on the same
/// database loads the accepted candidate without a refusal, and so does
/// the first after a restart; accepting a hash no proof refused is a 409
/// that changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_candidate_holds_on_every_instance_and_after_a_restart() {
    let Some(solver) = solver() else { return };
    // Both instances read one policy directory (a set's hash names its
    // files' paths).
    let files = tempfile::tempdir().unwrap();
    let pa = copy_policies(files.path());
    let pb = pa.clone();
    let a = proving_in(tempfile::tempdir().unwrap(), &pa, &solver, None).await;
    let b = proving_in(
        tempfile::tempdir().unwrap(),
        &pb,
        &solver,
        Some(a.database_url()),
    )
    .await;
    let shipped = a.gw.pep.current().hash.clone();
    assert_eq!(b.gw.pep.current().hash, shipped);

    // The same widening candidate, refused by both instances.
    write(&pa, "deployers.cedar", WIDER);
    let (status, body) = reload(&a).await;
    assert_eq!(status, 422, "{body:#}");
    let candidate = body["attempt"]["hash"].as_str().unwrap().to_string();
    let (status, body) = reload(&b).await;
    assert_eq!(status, 422, "{body:#}");
    assert_eq!(body["attempt"]["hash"], candidate.as_str());

    // A hash no proof refused: 409, nothing accepted, nothing recorded.
    let (status, body) = accept(&a, &"ab".repeat(32)).await;
    assert_eq!(status, 409, "{body:#}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only a refused candidate"),
        "{body:#}"
    );
    assert_eq!(a.gw.pep.current().hash, shipped);
    assert_eq!(policies(&a).await["acceptedHash"], Value::Null);
    assert!(events(&a, "policy_set_accepted").await.is_empty());

    // Accepted on A: A activates it, and B's next reload loads it.
    let (status, body) = accept(&a, &candidate).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(a.gw.pep.current().hash, candidate);
    assert_eq!(policies(&b).await["acceptedHash"], candidate.as_str());
    let (status, body) = reload(&b).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(body["result"], "applied");
    assert_eq!(b.gw.pep.current().hash, candidate);
    assert_eq!(events(&b, "policy_set_refused").await.len(), 2);

    // A goes back to the shipped set (narrower: applied), restarts on the
    // same database, and takes the candidate again without a refusal.
    std::fs::remove_file(pa.join("deployers.cedar")).unwrap();
    let (status, body) = reload(&a).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(a.gw.pep.current().hash, shipped);
    let data = a.stop().await.into_dir();
    let a = proving_in(data, &pa, &solver, None).await;
    assert_eq!(a.gw.pep.current().hash, shipped);
    write(&pa, "deployers.cedar", WIDER);
    let (status, body) = reload(&a).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(body["result"], "applied");
    assert_eq!(a.gw.pep.current().hash, candidate);
    assert_eq!(
        policies(&a).await["lastProof"]["outcome"],
        "widens",
        "proved again, and let through as accepted"
    );
    assert_eq!(events(&a, "policy_set_refused").await.len(), 2);
    assert_eq!(events(&a, "policy_set_accepted").await.len(), 1);
}

/// Under `report`, the reload answers before its proof ends (here a proof
/// that runs to its 3 s limit), and requests keep being decided on the
/// active set, the candidate just applied, while the proof runs; the proof
/// is reported after it (unknown) and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_keeps_deciding_on_the_active_set_while_the_proof_runs() {
    let Some(solver) = solver() else { return };
    let dir = tempfile::tempdir().unwrap();
    let files = copy_policies(dir.path());
    let for_config = files.clone();
    let g = TestGateway::start_with(move |c| {
        c.policies_dir = for_config;
        c.lifecycle.watch = false;
        c.lifecycle.prove = ProveMode::Report;
        c.prove.solver = Some(solver);
        c.prove.query_timeout_ms = 2_000;
        c.prove.run_timeout_secs = 3;
    })
    .await;
    let t = g.tenant("acme").await;
    write(&files, "cubes.cedar", UNSETTLED);
    let (status, body) = reload(&g).await;
    assert_eq!(status, 200, "{body:#}");
    let applied = body["hash"].as_str().unwrap().to_string();
    assert_eq!(g.gw.pep.current().hash, applied);
    let proved = |p: &Value| p["lastProof"]["candidateHash"] == applied.as_str();
    assert!(
        !proved(&policies(&g).await),
        "the reload answered before its proof ended"
    );
    let mut asked_during = 0;
    let mut last = Value::Null;
    while !proved(&last) {
        let body = g
            .call_tool(
                &t,
                "af_memory_recall",
                json!({"query": "x", "workType": "chore"}),
            )
            .await;
        assert!(body.get("result").is_some() || body.get("error").is_some());
        asked_during += 1;
        last = policies(&g).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        asked_during >= 5,
        "only {asked_during} requests while it proved"
    );
    let proof = &last["lastProof"];
    assert_eq!(proof["mode"], "report", "{proof:#}");
    assert_eq!(proof["outcome"], "unknown", "{proof:#}");
    assert_eq!(g.gw.pep.current().hash, applied, "a report changes nothing");
    let decided: Vec<_> = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| d.record.action.contains("call_tool"))
        .collect();
    assert!(decided.len() >= asked_during, "{} decisions", decided.len());
    assert!(
        decided.iter().all(|d| d.record.policy_hash == applied),
        "every call was decided on the active set"
    );
}

/// The refused start-ups the trail lists (`GET /admin/decisions`), each
/// outcome parsed.
async fn listed_refusals(g: &TestGateway) -> Vec<Value> {
    let (status, body) = g
        .admin(Method::GET, "/admin/decisions?limit=1000", None)
        .await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(body["nextCursor"], Value::Null, "one page holds the trail");
    body["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["action"] == "policy_set_refused")
        .map(|d| serde_json::from_str(d["outcome"].as_str().unwrap()).unwrap())
        .collect()
}

/// Whether `/readyz` says the active set is not the one on disk.
async fn stale(g: &TestGateway) -> bool {
    let (_, body) = g.admin(Method::GET, "/readyz", None).await;
    body["policySet"]
        .as_str()
        .unwrap_or_default()
        .starts_with("stale")
}

/// A restart on widened files, on the same database: the proof against
/// the set last active there refuses them, the last set decides, the
/// refusal is recorded (with its counterexample) and listed, and accepting
/// the files' hash activates them, for this run and the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_widened_files_runs_the_last_active_set_until_they_are_accepted() {
    let Some(solver) = solver() else { return };
    let (_files, dir, shipped, data) = a_stopped_run_on_the_shipped_set(&solver, |_| {}).await;

    write(&dir, "deployers.cedar", WIDER);
    let g = proving_in(data, &dir, &solver, None).await;
    assert_eq!(
        g.gw.pep.current().hash,
        shipped,
        "the last active set decides"
    );
    let status = policies(&g).await;
    let start = &status["lastError"];
    assert_eq!(
        (&start["result"], &start["trigger"]),
        (&json!("refused"), &json!("startup")),
        "{status:#}"
    );
    let candidate = start["hash"].as_str().unwrap().to_string();
    assert_ne!(candidate, shipped);
    assert!(
        start["message"].as_str().unwrap().contains(&candidate),
        "{status:#}"
    );
    let proof = &status["lastProof"];
    assert_eq!(proof["outcome"], "widens", "{proof:#}");
    assert_eq!(proof["trigger"], "startup");
    assert_eq!(
        (proof["liveHash"].as_str(), proof["candidateHash"].as_str()),
        (Some(shipped.as_str()), Some(candidate.as_str()))
    );
    let example = &proof["counterexamples"][0];
    assert_eq!(example["env"], "write_node (Agent → Project)");
    assert_live_denies_candidate_allows(example);
    assert!(stale(&g).await, "/readyz says the files are not active");

    // Recorded and listed like a reload's refusal, the files' text with it.
    let listed = listed_refusals(&g).await;
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(listed[0]["candidateHash"], candidate.as_str());
    assert_eq!(listed[0]["liveHash"], shipped.as_str());
    assert_eq!(listed[0]["trigger"], "startup");
    assert_eq!(
        listed[0]["counterexamples"][0]["principal"],
        example["witness"]["principal"]
    );
    let recorded =
        g.gw.store
            .read({
                let c = candidate.clone();
                move |conn| cedargate::store::audit_query::policy_set(conn, &c)
            })
            .await
            .unwrap();
    assert!(recorded.is_some(), "the refused files' text is recorded");

    // Accepted: activated at once, and what a restart starts on.
    let (status, body) = accept(&g, &candidate).await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(body["result"], "applied");
    assert_eq!(g.gw.pep.current().hash, candidate);
    assert!(!stale(&g).await);
    let data = g.stop().await.into_dir();
    let g = proving_in(data, &dir, &solver, None).await;
    assert_eq!(g.gw.pep.current().hash, candidate);
    assert_eq!(policies(&g).await["lastError"], Value::Null);
    assert_eq!(listed_refusals(&g).await.len(), 1, "no second refusal");
}

/// A restart on narrowed files starts on them: proved less permissive than
/// the set last active on the database, nothing refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_narrowed_files_starts_on_them() {
    let Some(solver) = solver() else { return };
    let (_files, dir, shipped, data) = a_stopped_run_on_the_shipped_set(&solver, |_| {}).await;

    write(&dir, "people.cedar", NARROWER);
    let g = proving_in(data, &dir, &solver, None).await;
    let narrowed = g.gw.pep.current().hash.clone();
    assert_ne!(narrowed, shipped, "the files decide");
    let status = policies(&g).await;
    assert_eq!(status["lastError"], Value::Null, "{status:#}");
    assert_eq!(status["lastReload"]["result"], "applied");
    let proof = &status["lastProof"];
    assert_eq!(proof["outcome"], "narrower", "{proof:#}");
    assert_eq!(proof["trigger"], "startup");
    assert_eq!(
        (proof["liveHash"].as_str(), proof["candidateHash"].as_str()),
        (Some(shipped.as_str()), Some(narrowed.as_str()))
    );
    assert!(!stale(&g).await);
    assert!(listed_refusals(&g).await.is_empty());
}

/// A restart whose proof reaches its run limit (3 s) unsettled is refused
/// as an unsettled reload is: the start-up ends, the last active set
/// decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_whose_proof_is_unsettled_runs_the_last_active_set() {
    let Some(solver) = solver() else { return };
    let limits = |c: &mut cedargate::config::Config| {
        c.prove.query_timeout_ms = 2_000;
        c.prove.run_timeout_secs = 3;
    };
    let (_files, dir, shipped, data) = a_stopped_run_on_the_shipped_set(&solver, limits).await;

    write(&dir, "cubes.cedar", UNSETTLED);
    let g = started_in(data, &dir, &solver, limits).await;
    assert_eq!(g.gw.pep.current().hash, shipped);
    let status = policies(&g).await;
    let proof = &status["lastProof"];
    assert_eq!(proof["outcome"], "unknown", "{proof:#}");
    assert!(proof["unsettled"].as_u64().unwrap() > 0, "{proof:#}");
    assert_eq!(status["lastError"]["result"], "refused", "{status:#}");
    assert_eq!(listed_refusals(&g).await.len(), 1);
}

/// Under `report`, a restart on widened files starts on them and reports
/// their proof against the last active set after; nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_starts_on_widened_files_and_reports_their_proof() {
    let Some(solver) = solver() else { return };
    let report = |c: &mut cedargate::config::Config| c.lifecycle.prove = ProveMode::Report;
    let (_files, dir, shipped, data) = a_stopped_run_on_the_shipped_set(&solver, report).await;

    write(&dir, "deployers.cedar", WIDER);
    let g = started_in(data, &dir, &solver, report).await;
    let widened = g.gw.pep.current().hash.clone();
    assert_ne!(widened, shipped, "the files decide");
    let mut proof = Value::Null;
    for _ in 0..300 {
        proof = policies(&g).await["lastProof"].clone();
        if proof["candidateHash"] == widened.as_str() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(proof["outcome"], "widens", "{proof:#}");
    assert_eq!(
        (proof["trigger"].as_str(), proof["liveHash"].as_str()),
        (Some("startup"), Some(shipped.as_str()))
    );
    assert_eq!(policies(&g).await["lastError"], Value::Null);
    assert!(listed_refusals(&g).await.is_empty());
}

/// When the last active set cannot be loaded again (its recorded text was
/// edited), nothing proved can start under `refuse-widening`: the start
/// fails with the reason and the refusal is recorded; a start under
/// `report` (the documented way out) runs the files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unloadable_last_set_refuses_to_start_on_unproved_files() {
    let Some(solver) = solver() else { return };
    let files = tempfile::tempdir().unwrap();
    let dir = copy_policies(files.path());
    let g = proving_in(tempfile::tempdir().unwrap(), &dir, &solver, None).await;
    let shipped = g.gw.pep.current().hash.clone();
    let unguard = match g.gw.store.read(|c| Ok(c.backend())).await.unwrap() {
        cedargate::store::Backend::Sqlite => "DROP TRIGGER policy_sets_no_update;",
        cedargate::store::Backend::Postgres => {
            "ALTER TABLE policy_sets DISABLE TRIGGER policy_sets_no_update;"
        }
    };
    let forge = format!(
        "{unguard} UPDATE policy_sets SET files = replace(files, 'forbid', 'permit') WHERE hash = '{shipped}';"
    );
    g.gw.store
        .read(move |c| c.execute_batch(&forge))
        .await
        .unwrap();
    let data = g.stop().await.into_dir();

    write(&dir, "deployers.cedar", WIDER);
    let mut config = cedargate::config::Config {
        data_dir: data.path().join("data"),
        policies_dir: dir.clone(),
        schema_file: common::repo().join("schemas/gateway.cedarschema"),
        demo_tenant: false,
        ..cedargate::config::Config::default()
    };
    config.database.url = common::database_url_for(data.path());
    config.lifecycle.prove = ProveMode::RefuseWidening;
    config.prove.solver = Some(solver.clone());
    let Err(e) = cedargate::server::prepare(config).await else {
        panic!("started on files proved against nothing")
    };
    let e = e.to_string();
    assert!(e.contains("not proved against the last active set"), "{e}");
    assert!(e.contains("was altered"), "{e}");

    let report = |c: &mut cedargate::config::Config| c.lifecycle.prove = ProveMode::Report;
    let g = started_in(data, &dir, &solver, report).await;
    let files_hash = g.gw.pep.current().hash.clone();
    assert_ne!(files_hash, shipped);
    let listed = listed_refusals(&g).await;
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(
        (
            listed[0]["candidateHash"].as_str(),
            listed[0]["trigger"].as_str()
        ),
        (Some(files_hash.as_str()), Some("startup"))
    );
    assert_eq!(listed[0]["outcome"], "failed");
}

/// The authorizer's decisions on a counterexample: the live set denies,
/// the candidate allows.
fn assert_live_denies_candidate_allows(example: &Value) {
    let decided: Vec<(Value, Value)> = example["witness"]["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["set"].clone(), d["allows"].clone()))
        .collect();
    assert_eq!(
        decided,
        [
            (json!("live"), json!(false)),
            (json!("candidate"), json!(true))
        ],
        "{example:#}"
    );
}
