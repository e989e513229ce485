//! Upstream MCP servers run by the gateway as child processes over stdio,
//! declared in the config file (`[[upstreams]]`): the official reference
//! servers `@modelcontextprotocol/server-everything` and
//! `@modelcontextprotocol/server-filesystem` (npm, pinned in
//! `tests/upstreams/package-lock.json`), and a tiny fixture server
//! (`tests/upstreams/stdio_fixture.mjs`) that crashes, hangs, writes
//! garbage or an answer over the bound on demand.
//!
//! What a user relies on: the tools show in the declaring org's sessions
//! only, calls are decided before a byte reaches the child (its stdin is
//! recorded), a crashed child fails the call -32202 and comes back, a
//! hanging one -32201, garbage -32203, the child sees only its declared
//! environment, at most 16 calls run at once, the API never starts a
//! process, and the children end with the gateway.
//!
//! The servers are installed by `tests/upstreams/setup.sh` (run by
//! `.ci/run`, and here when missing). Without network, outside CI, the
//! tests skip loudly; with `CI=true` a failed install fails them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cedargate::config::DeclaredUpstream;
use common::setup::{upstreams_dir, upstreams_installed as installed};
use common::{Tenant, TestGateway, repo};
use reqwest::Method;
use serde_json::{Value, json};

fn package_entry(package: &str) -> String {
    upstreams_dir()
        .join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js")
        .display()
        .to_string()
}

fn declare(org: &str, name: &str, command: &str, args: &[&str]) -> DeclaredUpstream {
    DeclaredUpstream {
        org: org.into(),
        name: name.into(),
        command: command.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        env: BTreeMap::new(),
        prefix: None,
        timeout_ms: None,
        approve_new_tools: None,
    }
}

/// The fixture server, with a call budget.
fn fixture(org: &str, name: &str, timeout_ms: u64) -> DeclaredUpstream {
    let script = upstreams_dir().join("stdio_fixture.mjs");
    let mut d = declare(org, name, "node", &[script.to_str().unwrap()]);
    d.timeout_ms = Some(timeout_ms);
    d.env.insert("FIXTURE_VAR".into(), "declared".into());
    d
}

/// Waits (the declaration is stored within a second of its org) until
/// the tenant's `tools/list` shows `tool`.
async fn wait_for_tool(g: &TestGateway, t: &Tenant, tool: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let names = g.tool_names(t).await;
        if names.iter().any(|n| n == tool) {
            return names;
        }
        assert!(
            Instant::now() < deadline,
            "`{tool}` never listed: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn server(g: &TestGateway, org: &str, id: &str) -> Value {
    let (status, body) = g
        .admin(
            Method::GET,
            &format!("/admin/orgs/{org}/mcp-servers/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Waits until the server's child is in `state`; returns the server view.
async fn wait_for_state(g: &TestGateway, org: &str, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = server(g, org, id).await;
        if s["process"]["state"] == state {
            return s;
        }
        assert!(Instant::now() < deadline, "never {state}: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Calls `tool` until it answers a result (the child restarting).
async fn call_until_answered(g: &TestGateway, t: &Tenant, tool: &str, args: Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let body = g.call_tool(t, tool, args.clone()).await;
        if body["result"].is_object() {
            return body;
        }
        assert_eq!(body["error"]["code"], -32202, "{body}");
        assert!(Instant::now() < deadline, "never answered again: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether any process is left in the process group `pgid` (zombies
/// included).
fn group_alive(pgid: u64) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // pid (comm) state ppid pgrp ...
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(2).map(str::to_string))
            .is_some_and(|pgrp| pgrp == pgid.to_string())
    })
}

async fn wait_group_gone(pgid: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while group_alive(pgid) {
        assert!(
            Instant::now() < deadline,
            "processes of group {pgid} outlived it"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn text_of(body: &Value) -> String {
    body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

const FORBID_SUM: &str = r#"
@id("no-sums")
@advice("sums are not for agents")
forbid (principal, action in Gateway::Action::"call_tool", resource == Gateway::Tool::"everything.get-sum");
"#;

#[tokio::test]
async fn server_everything_over_stdio_is_governed_isolated_and_restarted() {
    if !installed() {
        return;
    }
    let held = tempfile::tempdir().unwrap();
    let stdin_log = held.path().join("stdin.log");
    // The child's stdin is recorded on its way in: what the gateway sent.
    let script = format!(
        "tee -a \"$STDIN_LOG\" | node '{}' stdio",
        package_entry("server-everything")
    );
    let mut everything = declare("acme", "everything", "sh", &["-c", &script]);
    everything
        .env
        .insert("STDIN_LOG".into(), stdin_log.display().to_string());
    let policies = tempfile::tempdir().unwrap();
    let dir = common::copy_policies(policies.path());
    std::fs::write(dir.join("extra.cedar"), FORBID_SUM).unwrap();
    let g = TestGateway::start_with(move |c| {
        c.policies_dir = dir;
        c.upstreams = vec![everything];
        // The server announces list changes of its own; a listing while
        // its child is down would mark it unreachable and hide its tools
        // (-32601), which is not what the crash below checks.
        c.upstream_refresh.list_changed_debounce_ms = 3_600_000;
    })
    .await;
    let t = g.tenant("acme").await;
    let other = g.tenant("globex").await;
    let names = wait_for_tool(&g, &t, "everything.echo").await;
    assert!(
        names.contains(&"everything.get-sum".to_string()),
        "{names:?}"
    );

    // The registry shows it to its org only, healthy, with its child.
    let (status, list) = g
        .admin(Method::GET, "/admin/orgs/acme/mcp-servers", None)
        .await;
    assert_eq!(status, 200, "{list}");
    let row = &list["servers"][0];
    assert_eq!(row["id"], "stdio-acme-everything", "{list}");
    assert_eq!(row["transport"], "stdio");
    assert_eq!(row["health"], "healthy", "{row}");
    assert!(row["toolCount"].as_u64().unwrap() >= 2, "{row}");
    assert_eq!(row["protocolVersion"], "2025-11-25");
    assert_eq!(row["process"]["state"], "up", "{row}");
    assert_eq!(row["process"]["envNames"], json!(["STDIN_LOG"]));
    let (_, theirs) = g
        .admin(Method::GET, "/admin/orgs/globex/mcp-servers", None)
        .await;
    assert_eq!(theirs["servers"], json!([]), "{theirs}");
    assert!(
        g.tool_names(&other)
            .await
            .iter()
            .all(|n| !n.starts_with("everything.")),
        "another org sees nothing of it"
    );
    let body = g
        .call_tool(&other, "everything.echo", json!({"message": "x"}))
        .await;
    assert_eq!(body["error"]["code"], -32601, "{body}");

    let body = g
        .call_tool(&t, "everything.echo", json!({"message": "hello"}))
        .await;
    assert_eq!(
        body["result"],
        json!({"content": [{"type": "text", "text": "Echo: hello"}]}),
        "{body}"
    );

    // A denied call writes nothing to the child.
    let body = g
        .call_tool(&t, "everything.get-sum", json!({"a": 1, "b": 2}))
        .await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    assert_eq!(body["error"]["data"]["reasons"], json!(["no-sums"]));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = std::fs::read_to_string(&stdin_log).unwrap();
    assert!(sent.contains("\"echo\""), "{sent}");
    assert!(
        !sent.contains("get-sum"),
        "the denied call reached the child"
    );
    assert!(!sent.contains("rsk_live_"), "the agent's key went upstream");

    // Refresh lists again; the config owns the row, so the API cannot
    // delete it.
    let (status, refreshed) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers/stdio-acme-everything/refresh",
            None,
        )
        .await;
    assert_eq!(status, 200, "{refreshed}");
    assert_eq!(refreshed["heldChanges"], json!([]));
    let (status, body) = g
        .admin(
            Method::DELETE,
            "/admin/orgs/acme/mcp-servers/stdio-acme-everything",
            None,
        )
        .await;
    assert_eq!(status, 409, "{body}");

    // The child dies: health says so, calls fail fast with the transport
    // code, then it is started again and answers.
    let pid = row["process"]["pid"].as_u64().unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let down = wait_for_state(&g, "acme", "stdio-acme-everything", "down").await;
    assert_eq!(down["health"], "unreachable", "{down}");
    wait_group_gone(pid).await;
    let body = g
        .call_tool(&t, "everything.echo", json!({"message": "down"}))
        .await;
    assert_eq!(body["error"]["code"], -32202, "{body}");
    assert_eq!(body["error"]["data"]["class"], "transport", "{body}");
    let body = call_until_answered(&g, &t, "everything.echo", json!({"message": "back"})).await;
    assert_eq!(text_of(&body), "Echo: back");
    let up = server(&g, "acme", "stdio-acme-everything").await;
    assert_eq!(up["process"]["state"], "up", "{up}");
    assert_eq!(up["process"]["starts"], 2, "{up}");
    let new_pid = up["process"]["pid"].as_u64().unwrap();
    assert_ne!(new_pid, pid);

    // The gateway stops: its children end with it, none left behind.
    drop(g.stop().await);
    wait_group_gone(new_pid).await;
}

#[tokio::test]
async fn the_api_never_starts_a_process() {
    let g = TestGateway::start().await;
    let _t = g.tenant("acme").await;
    let (status, body) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "shell", "transport": "stdio", "command": "sh", "args": ["-c", "touch /tmp/x"]})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string().contains("config file"),
        "the refusal says where stdio servers are declared: {body}"
    );
    let (status, body) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "shell", "transport": "streamable-http", "url": "http://127.0.0.1:9/mcp", "command": "sh"})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (_, list) = g
        .admin(Method::GET, "/admin/orgs/acme/mcp-servers", None)
        .await;
    assert_eq!(list["servers"], json!([]), "nothing stored: {list}");
}

#[tokio::test]
async fn a_child_that_crashes_hangs_or_writes_garbage_is_contained() {
    if !installed() {
        return;
    }
    let g = TestGateway::start_with(|c| {
        c.upstreams = vec![fixture("acme", "fixture", 1500), {
            let mut slow = fixture("acme", "slow", 20_000);
            slow.prefix = Some("slow".into());
            slow
        }];
    })
    .await;
    let t = g.tenant("acme").await;
    wait_for_tool(&g, &t, "fixture.echo").await;
    wait_for_tool(&g, &t, "slow.sleep").await;
    let id = "stdio-acme-fixture";
    let s = server(&g, "acme", id).await;
    assert_eq!(
        s["protocolVersion"], "2025-06-18",
        "an older version is accepted"
    );

    // Only the declared environment and the safe set reach the child
    // (this test process has CARGO_* and more).
    let body = g.call_tool(&t, "fixture.env", json!({})).await;
    let keys: Vec<String> = serde_json::from_str(&text_of(&body)).unwrap();
    assert!(keys.contains(&"FIXTURE_VAR".to_string()), "{keys:?}");
    assert!(keys.contains(&"PATH".to_string()), "{keys:?}");
    let allowed = [
        "FIXTURE_VAR",
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TZ",
        "TMPDIR",
    ];
    assert!(
        keys.iter().all(|k| allowed.contains(&k.as_str())),
        "the child saw more than its declared environment: {keys:?}"
    );

    // A hanging call times out; the child stays up.
    let started = Instant::now();
    let body = g.call_tool(&t, "fixture.hang", json!({})).await;
    assert_eq!(body["error"]["code"], -32201, "{body}");
    assert!(started.elapsed() >= Duration::from_millis(1400));
    let body = g
        .call_tool(&t, "fixture.echo", json!({"message": "a"}))
        .await;
    assert_eq!(text_of(&body), "echo a", "{body}");
    let pid = server(&g, "acme", id).await["process"]["pid"].clone();

    // Garbage on stdout: -32203, the child is replaced.
    let body = g.call_tool(&t, "fixture.garbage", json!({})).await;
    assert_eq!(body["error"]["code"], -32203, "{body}");
    assert_eq!(body["error"]["data"]["class"], "invalid-response");
    let body = call_until_answered(&g, &t, "fixture.echo", json!({"message": "b"})).await;
    assert_eq!(text_of(&body), "echo b");
    assert_ne!(server(&g, "acme", id).await["process"]["pid"], pid);

    // One answer line over the 4 MiB bound: -32203, and back again.
    let body = g.call_tool(&t, "fixture.big", json!({})).await;
    assert_eq!(body["error"]["code"], -32203, "{body}");
    call_until_answered(&g, &t, "fixture.echo", json!({"message": "c"})).await;

    // A crash during the call: -32202, never resent, then restarted.
    let body = g.call_tool(&t, "fixture.crash", json!({})).await;
    assert_eq!(body["error"]["code"], -32202, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exited"),
        "{body}"
    );
    let body = call_until_answered(&g, &t, "fixture.echo", json!({"message": "d"})).await;
    assert_eq!(text_of(&body), "echo d");
    let s = server(&g, "acme", id).await;
    assert_eq!(s["process"]["starts"], 4, "{s}");
    let crashes = s["process"]["stderrTail"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| *l == "call crash")
        .count();
    assert_eq!(crashes, 1, "the crashed call was not sent again: {s}");

    // stderr lines are bounded.
    g.call_tool(&t, "fixture.shout", json!({})).await;
    let tail = server(&g, "acme", id).await["process"]["stderrTail"].clone();
    let tail = tail.as_array().unwrap();
    assert!(
        tail.iter()
            .any(|l| l == "[a line longer than 1024 bytes was left out]"),
        "{tail:?}"
    );
    assert!(tail.iter().all(|l| l.as_str().unwrap().len() <= 1024));

    // 20 calls at once: at most 16 reach the child together. Each call
    // sleeps long enough for all 20 to arrive on a loaded machine.
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let (url, key) = (t.mcp_url.clone(), t.key.clone());
            tokio::spawn(async move {
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "slow.sleep", "arguments": {"ms": 2000}}});
                reqwest::Client::new()
                    .post(url)
                    .bearer_auth(key)
                    .json(&body)
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut most = 0;
    for call in calls {
        let body = call.await.unwrap();
        let seen: u64 = text_of(&body).parse().unwrap_or_else(|_| panic!("{body}"));
        most = most.max(seen);
    }
    assert_eq!(most, 16, "the per-upstream slots bound the child's calls");

    let fixture_pid = server(&g, "acme", id).await["process"]["pid"]
        .as_u64()
        .unwrap();
    let slow_pid = server(&g, "acme", "stdio-acme-slow").await["process"]["pid"]
        .as_u64()
        .unwrap();
    drop(g.stop().await);
    wait_group_gone(fixture_pid).await;
    wait_group_gone(slow_pid).await;
}

/// The schema with typed actions for two of the filesystem server's tools
/// (upstream tools are registered at run time, so the schema file types
/// them by hand).
fn schema_with_typed_files(dir: &Path) -> PathBuf {
    let base = std::fs::read_to_string(repo().join("schemas/gateway.cedarschema")).unwrap();
    let typed = r#"
  action "files.read_text_file" in [call_tool] appliesTo {
    principal: [Agent],
    resource: [Tool],
    context: { session: Session, time: datetime, usage?: Usage, args: { path: String, head?: Long, tail?: Long } },
  };
  action "files.write_file" in [call_tool] appliesTo {
    principal: [Agent],
    resource: [Tool],
    context: { session: Session, time: datetime, usage?: Usage, args: { path: String, content: String } },
  };
}
"#;
    let end = base.rfind('}').unwrap();
    let path = dir.join("gateway.cedarschema");
    std::fs::write(&path, format!("{}{typed}", &base[..end])).unwrap();
    path
}

#[tokio::test]
async fn server_filesystem_over_stdio_keeps_reads_and_writes_to_one_directory() {
    if !installed() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let public = root_path.join("public");
    let private = root_path.join("private");
    std::fs::create_dir_all(&public).unwrap();
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(public.join("notes.txt"), "public notes").unwrap();
    std::fs::write(private.join("secret.txt"), "the secret").unwrap();

    let holder = tempfile::tempdir().unwrap();
    let policies = common::copy_policies(holder.path());
    let schema = schema_with_typed_files(holder.path());
    let policy = format!(
        r#"
@id("files-public-only-read")
forbid (principal, action == Gateway::Action::"files.read_text_file", resource)
unless {{ context.args.path like "{public}/*" }};

@id("files-public-only-write")
forbid (principal, action == Gateway::Action::"files.write_file", resource)
unless {{ context.args.path like "{public}/*" }};
"#,
        public = public.display()
    );
    std::fs::write(policies.join("files.cedar"), policy).unwrap();
    let entry = package_entry("server-filesystem");
    let root_arg = root_path.display().to_string();
    let files = declare("acme", "files", "node", &[&entry, &root_arg]);
    let g = TestGateway::start_with(move |c| {
        c.policies_dir = policies;
        c.schema_file = schema;
        c.lifecycle.watch = false;
        c.upstreams = vec![files];
    })
    .await;
    let t = g.tenant("acme").await;
    let names = wait_for_tool(&g, &t, "files.list_directory").await;
    assert!(
        names.contains(&"files.read_text_file".to_string()),
        "{names:?}"
    );

    let body = g
        .call_tool(&t, "files.list_directory", json!({"path": root_arg}))
        .await;
    let listing = text_of(&body);
    assert!(
        listing.contains("[DIR] public") && listing.contains("[DIR] private"),
        "{body}"
    );
    let body = g
        .call_tool(
            &t,
            "files.read_text_file",
            json!({"path": public.join("notes.txt")}),
        )
        .await;
    assert_eq!(text_of(&body), "public notes", "{body}");

    // Outside the one directory: denied by the policy on `context.args`,
    // before the server sees it.
    let body = g
        .call_tool(
            &t,
            "files.read_text_file",
            json!({"path": private.join("secret.txt")}),
        )
        .await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    assert_eq!(
        body["error"]["data"]["reasons"],
        json!(["files-public-only-read"])
    );
    assert!(!body.to_string().contains("the secret"));
    let body = g
        .call_tool(
            &t,
            "files.write_file",
            json!({"path": private.join("planted.txt"), "content": "x"}),
        )
        .await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    assert!(
        !private.join("planted.txt").exists(),
        "a denied write reached the server"
    );
    let body = g
        .call_tool(
            &t,
            "files.write_file",
            json!({"path": public.join("new.txt"), "content": "written"}),
        )
        .await;
    assert!(body["result"].is_object(), "{body}");
    assert_eq!(
        std::fs::read_to_string(public.join("new.txt")).unwrap(),
        "written"
    );
    let decided: Vec<Value> = g
        .decisions()
        .await
        .iter()
        .filter(|d| d.record.action == "call_tool")
        .map(|d| json!([d.record.resource, d.record.decision]))
        .collect();
    assert_eq!(
        decided,
        [
            json!([r#"Gateway::Tool::"files.list_directory""#, "allow"]),
            json!([r#"Gateway::Tool::"files.read_text_file""#, "allow"]),
            json!([r#"Gateway::Tool::"files.read_text_file""#, "deny"]),
            json!([r#"Gateway::Tool::"files.write_file""#, "deny"]),
            json!([r#"Gateway::Tool::"files.write_file""#, "allow"]),
        ]
    );
}

#[tokio::test]
async fn two_instances_with_one_config_share_the_pins_and_run_their_own_child() {
    if !installed() {
        return;
    }
    // Always on PostgreSQL: the instances share its database.
    let schema = match common::pg::FreshSchema::new(&common::pg::shared_url()) {
        Ok(s) => s,
        Err(e) => {
            common::pg::skip_unless_ci(&e);
            return;
        }
    };
    let mut declared = fixture("acme", "fixture", 5000);
    declared.approve_new_tools = Some(false);
    let start = |url: String, d: DeclaredUpstream| {
        TestGateway::start_with(move |c| {
            c.database.url = Some(url);
            c.upstreams = vec![d];
        })
    };
    let a = start(schema.url.clone(), declared.clone()).await;
    let b = start(schema.url.clone(), declared).await;
    let t = a.tenant("acme").await;
    let tb = Tenant {
        mcp_url: t.mcp_url.replace(&a.base, &b.base),
        ..t.clone()
    };
    let id = "stdio-acme-fixture";
    // Both store the one row; nothing is offered before an approval.
    let deadline = Instant::now() + Duration::from_secs(15);
    let listed = loop {
        let (status, body) = b
            .admin(
                Method::GET,
                &format!("/admin/orgs/acme/mcp-servers/{id}"),
                None,
            )
            .await;
        if status == 200 && body["heldCount"] == 8 {
            break body;
        }
        assert!(Instant::now() < deadline, "never listed: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(listed["toolCount"], 8, "{listed}");
    assert!(
        a.tool_names(&t)
            .await
            .iter()
            .all(|n| !n.starts_with("fixture.")),
        "held tools are not offered"
    );
    let (_, servers) = b
        .admin(Method::GET, "/admin/orgs/acme/mcp-servers", None)
        .await;
    assert_eq!(servers["servers"].as_array().unwrap().len(), 1, "{servers}");

    // Approved on one instance: offered by both (pins in the database).
    let held: serde_json::Map<String, Value> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().into(),
                t["held"]["hash"].clone(),
            )
        })
        .collect();
    let (status, approved) = a
        .admin(
            Method::POST,
            &format!("/admin/orgs/acme/mcp-servers/{id}/approve"),
            Some(json!({ "heldHashes": held })),
        )
        .await;
    assert_eq!(status, 200, "{approved}");
    assert_eq!(approved["approved"], 8);
    wait_for_tool(&a, &t, "fixture.echo").await;
    wait_for_tool(&b, &tb, "fixture.echo").await;
    for (g, tenant) in [(&a, &t), (&b, &tb)] {
        let body = g
            .call_tool(tenant, "fixture.echo", json!({"message": "hi"}))
            .await;
        assert_eq!(text_of(&body), "echo hi", "{body}");
    }
    // Each instance runs its own child.
    let pid_a = server(&a, "acme", id).await["process"]["pid"].clone();
    let pid_b = server(&b, "acme", id).await["process"]["pid"].clone();
    assert!(pid_a.is_u64() && pid_b.is_u64(), "{pid_a} {pid_b}");
    assert_ne!(pid_a, pid_b);
}
