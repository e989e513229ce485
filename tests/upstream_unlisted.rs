//! An upstream that stops listing a tool never breaks the policy set
//! (issue 42 §1: start-up and reload never fail because of data an
//! upstream sent), against a small upstream whose tool list changes:
//!
//! - the tool's pin is kept as `unlisted` (shown with its reason in the
//!   admin API and the console), not offered and not callable (-32601),
//!   and its typed action stays declared, so a policy naming it still
//!   validates and is reported; a forbid naming it stays fail-closed;
//!   reloads for every org and a restart on the same database succeed;
//! - the tool listed again with its pinned definition is offered and
//!   typed again; with another definition it is held until approved by
//!   hash;
//! - deleting a whole server whose typed action the active set names is
//!   refused with the policies' ids; once no policy names it, the delete
//!   passes and a restart on the same database succeeds.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use common::{Tenant, TestGateway, copy_policies};
use reqwest::Method;
use serde_json::{Value, json};

/// A small Streamable HTTP upstream whose tool list the test changes.
struct Upstream {
    url: String,
    tools: Arc<Mutex<Value>>,
    calls: Arc<Mutex<Vec<Value>>>,
}

#[derive(Clone)]
struct Shared {
    tools: Arc<Mutex<Value>>,
    calls: Arc<Mutex<Vec<Value>>>,
}

impl Upstream {
    async fn start(tools: Value) -> Upstream {
        let shared = Shared {
            tools: Arc::new(Mutex::new(tools)),
            calls: Arc::default(),
        };
        let app = axum::Router::new()
            .route("/mcp", axum::routing::post(handle))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Upstream {
            url: format!("http://{addr}/mcp"),
            tools: shared.tools,
            calls: shared.calls,
        }
    }

    /// What the next `tools/list` answers.
    fn list(&self, tools: Value) {
        *self.tools.lock().unwrap() = tools;
    }

    fn calls(&self) -> Vec<Value> {
        self.calls.lock().unwrap().clone()
    }
}

async fn handle(State(s): State<Shared>, body: String) -> Response {
    let msg: Value = serde_json::from_str(&body).unwrap();
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match msg["method"].as_str().unwrap_or_default() {
        "initialize" => json!({"protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "files", "version": "1"}}),
        "tools/list" => json!({"tools": s.tools.lock().unwrap().clone()}),
        "tools/call" => {
            s.calls.lock().unwrap().push(msg["params"].clone());
            json!({"content": [{"type": "text", "text": "done"}]})
        }
        _ => json!({}),
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

/// A tool `name` whose one required argument `path` has JSON type `ty`.
fn tool(name: &str, ty: &str) -> Value {
    json!({"name": name, "description": "files",
           "inputSchema": {"type": "object", "required": ["path"],
                           "properties": {"path": {"type": ty}}}})
}

fn config(c: &mut cedargate::config::Config, policies: &std::path::Path) {
    c.policies_dir = policies.to_path_buf();
    c.lifecycle.watch = false;
    c.upstream_refresh.interval_secs = 0;
}

/// A gateway on a writable copy of the shipped policies (no file watch, no
/// background refresh), and the directory holding them.
async fn gateway() -> (TestGateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    let g = TestGateway::start_with(|c| config(c, &policies)).await;
    (g, dir)
}

/// The same data directory and database, started again.
async fn restart(g: TestGateway) -> TestGateway {
    let policies = g.gw.config.policies_dir.clone();
    let dir = g.stop().await.into_dir();
    TestGateway::start_in(dir, move |c| config(c, &policies)).await
}

/// The tenant's session on a restarted gateway.
fn moved(t: &Tenant, old_base: &str, g: &TestGateway) -> Tenant {
    Tenant {
        mcp_url: t.mcp_url.replace(old_base, &g.base),
        ..t.clone()
    }
}

async fn register(g: &TestGateway, org: &str, name: &str, url: &str) -> String {
    let (status, body) = g
        .admin(
            Method::POST,
            &format!("/admin/orgs/{org}/mcp-servers"),
            Some(
                json!({"name": name, "transport": "streamable-http", "url": url,
                        "timeoutMs": 3000}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    format!(
        "/admin/orgs/{org}/mcp-servers/{}",
        body["id"].as_str().unwrap()
    )
}

async fn policies(g: &TestGateway) -> Value {
    let (status, body) = g.admin(Method::GET, "/admin/policies", None).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Waits (up to 10 s) until `done` holds of `GET /admin/policies`.
async fn wait_policies(g: &TestGateway, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..200 {
        last = policies(g).await;
        if done(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: {last}");
}

async fn wait_typed(g: &TestGateway, tool: &str) {
    wait_policies(g, &format!("`{tool}` typed"), |p| {
        p["typedTools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == tool)
    })
    .await;
}

/// Writes a policy file and reloads: the reload's status and answer.
async fn reload_with(g: &TestGateway, file: &str, text: &str) -> (u16, Value) {
    std::fs::write(g.gw.config.policies_dir.join(file), text).unwrap();
    g.admin(Method::POST, "/admin/policies/reload", None).await
}

async fn readyz(g: &TestGateway) -> (u16, Value) {
    let resp = g
        .http
        .get(format!("{}/readyz", g.base))
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

/// A call's JSON-RPC error code, or 0 when it succeeded.
async fn code_of(g: &TestGateway, t: &Tenant, name: &str, args: Value) -> i64 {
    let body = g.call_tool(t, name, args).await;
    match body.get("error") {
        Some(e) => e["code"].as_i64().unwrap(),
        None => {
            assert!(body.get("result").is_some(), "{body}");
            0
        }
    }
}

/// A forbid that names `fs.write`'s typed action and reads its argument.
const NO_ETC_WRITES: &str = r#"
@id("acme-no-etc-writes")
forbid (principal in Gateway::Org::"acme", action == Gateway::Action::"fs.write", resource)
when { context.args.path like "/etc/*" };
"#;

/// A forbid naming nothing of the upstream's.
const GLOBEX_NO_TIME: &str = r#"
@id("globex-no-time")
forbid (principal in Gateway::Org::"globex", action, resource == Gateway::Tool::"time.now");
"#;

fn read_write() -> Value {
    json!([tool("read", "string"), tool("write", "string")])
}

/// The admin view of the server's tool `name`.
async fn pinned(g: &TestGateway, path: &str, name: &str) -> Value {
    let (status, shown) = g.admin(Method::GET, path, None).await;
    assert_eq!(status, 200, "{shown}");
    shown["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

async fn refresh(g: &TestGateway, path: &str) -> Value {
    let (status, body) = g
        .admin(Method::POST, &format!("{path}/refresh"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Waits until the latest reload was run by the registry's rebuild.
async fn wait_rebuilt(g: &TestGateway, before: &Value) {
    wait_policies(g, "a reload after the registry changed", |p| {
        p["lastReload"] != *before && p["lastReload"]["trigger"] == "upstream-registry"
    })
    .await;
}

#[tokio::test]
async fn a_tool_the_upstream_stops_listing_keeps_its_typed_action_declared_so_reloads_and_restarts_succeed()
 {
    let (g, _policies) = gateway().await;
    let acme = g.tenant("acme").await;
    let files = Upstream::start(read_write()).await;
    let path = register(&g, "acme", "fs", &files.url).await;
    wait_typed(&g, "fs.write").await;
    let (status, body) = reload_with(&g, "acme.cedar", NO_ETC_WRITES).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"], "applied", "{body}");

    // The upstream stops listing `write`.
    files.list(json!([tool("read", "string")]));
    let before = policies(&g).await["lastReload"].clone();
    refresh(&g, &path).await;
    wait_rebuilt(&g, &before).await;
    let rebuilt = policies(&g).await["lastReload"].clone();
    // An unrelated new forbid for another org, then a restart on the same
    // database (both failed while the tool's action left the schema).
    let (status, body) = reload_with(&g, "globex.cedar", GLOBEX_NO_TIME).await;
    eprintln!("after `write` went: rebuild {rebuilt}; unrelated forbid: {status} {body}");
    let hash = g.gw.pep.current().hash.clone();
    let old_base = g.base.clone();
    let g = restart(g).await;
    assert_ne!(rebuilt["result"], "rejected", "{rebuilt}");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"], "applied", "{body}");
    let warnings = body["warnings"].to_string();
    assert!(warnings.contains("acme-no-etc-writes"), "{warnings}");
    assert!(warnings.contains("no longer lists"), "{warnings}");
    assert_eq!(g.gw.pep.current().hash, hash);
    let acme = moved(&acme, &old_base, &g);
    let (status, ready) = readyz(&g).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["policySet"], "current", "{ready}");
    let warnings = policies(&g).await["warnings"].to_string();
    assert!(warnings.contains("acme-no-etc-writes"), "{warnings}");

    // The tool is kept as unlisted, with its reason, and is not offered.
    let write = pinned(&g, &path, "write").await;
    assert_eq!(write["status"], "unlisted", "{write}");
    let reason = write["reason"].as_str().unwrap();
    assert!(reason.contains("no longer lists"), "{write}");
    assert!(!g.tool_names(&acme).await.contains(&"fs.write".to_string()));
    assert_eq!(
        code_of(&g, &acme, "fs.write", json!({"path": "/tmp/a"})).await,
        -32601
    );
    assert_eq!(
        code_of(&g, &acme, "fs.read", json!({"path": "/tmp/a"})).await,
        0
    );
    let html = console_peers(&g).await;
    assert!(html.contains("Unlisted: write"), "{html}");

    // Listed again as pinned: offered, typed, and the forbid holds.
    files.list(read_write());
    let before = policies(&g).await["lastReload"].clone();
    refresh(&g, &path).await;
    wait_rebuilt(&g, &before).await;
    wait_typed(&g, "fs.write").await;
    assert_eq!(pinned(&g, &path, "write").await["status"], "approved");
    assert_eq!(
        code_of(&g, &acme, "fs.write", json!({"path": "/etc/passwd"})).await,
        -32003
    );
    assert_eq!(
        code_of(&g, &acme, "fs.write", json!({"path": "/tmp/b"})).await,
        0
    );
    let warnings = policies(&g).await["warnings"].to_string();
    assert!(!warnings.contains("acme-no-etc-writes"), "{warnings}");

    // Gone, then back with another definition: held until approved by hash.
    files.list(json!([tool("read", "string")]));
    refresh(&g, &path).await;
    assert_eq!(pinned(&g, &path, "write").await["status"], "unlisted");
    let changed = json!({"name": "write", "description": "writes anything",
        "inputSchema": {"type": "object", "required": ["path"],
                        "properties": {"path": {"type": "string"}}},
        "annotations": {"readOnlyHint": true}});
    files.list(json!([tool("read", "string"), changed]));
    let body = refresh(&g, &path).await;
    let write = pinned(&g, &path, "write").await;
    assert_eq!(write["status"], "held", "{write} {body}");
    assert_eq!(
        code_of(&g, &acme, "fs.write", json!({"path": "/tmp/c"})).await,
        -32601
    );
    let hash = write["held"]["hash"].as_str().unwrap().to_string();
    let (status, body) = g
        .admin(
            Method::POST,
            &format!("{path}/approve"),
            Some(json!({"heldHashes": {"write": hash}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        code_of(&g, &acme, "fs.write", json!({"path": "/tmp/c"})).await,
        0
    );
    assert_eq!(
        code_of(&g, &acme, "fs.write", json!({"path": "/etc/hosts"})).await,
        -32003
    );
    assert_eq!(files.calls().len(), 3, "{:?}", files.calls());
}

#[tokio::test]
async fn a_forbid_naming_a_tool_while_it_is_unlisted_still_denies_it_when_it_comes_back_changed_and_approved()
 {
    let (g, _policies) = gateway().await;
    let acme = g.tenant("acme").await;
    let files = Upstream::start(read_write()).await;
    let path = register(&g, "acme", "fs", &files.url).await;
    wait_typed(&g, "fs.write").await;
    let (status, body) = reload_with(
        &g,
        "acme.cedar",
        r#"@id("acme-never-write") forbid (principal, action == Gateway::Action::"fs.write", resource);"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    files.list(json!([tool("read", "string")]));
    let before = policies(&g).await["lastReload"].clone();
    refresh(&g, &path).await;
    wait_rebuilt(&g, &before).await;
    assert!(
        policies(&g).await["warnings"]
            .to_string()
            .contains("acme-never-write")
    );
    // Listed again with another definition and approved: the forbid still
    // names it, so calls stay denied.
    files.list(json!([tool("read", "string"), tool("write", "integer")]));
    let write = refresh(&g, &path).await;
    let held = write["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "write")
        .unwrap()
        .clone();
    let hash = held["held"]["hash"].as_str().unwrap().to_string();
    let (status, body) = g
        .admin(
            Method::POST,
            &format!("{path}/approve"),
            Some(json!({"heldHashes": {"write": hash}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    wait_typed(&g, "fs.write").await;
    assert_eq!(
        code_of(&g, &acme, "fs.write", json!({"path": 1})).await,
        -32003
    );
    assert!(files.calls().is_empty(), "{:?}", files.calls());
}

#[tokio::test]
async fn deleting_a_server_whose_typed_action_a_policy_names_is_refused_and_a_restart_after_a_delete_succeeds()
 {
    let (g, _policies) = gateway().await;
    g.tenant("acme").await;
    let files = Upstream::start(read_write()).await;
    let path = register(&g, "acme", "fs", &files.url).await;
    let other = Upstream::start(read_write()).await;
    let spare = register(&g, "acme", "spare", &other.url).await;
    wait_typed(&g, "fs.write").await;
    wait_typed(&g, "spare.write").await;
    let (status, body) = reload_with(&g, "acme.cedar", NO_ETC_WRITES).await;
    assert_eq!(status, 200, "{body}");

    // Named by the active set: refused, naming the policy; nothing changes.
    let (status, body) = g.admin(Method::DELETE, &path, None).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("acme-no-etc-writes"), "{body}");
    assert!(body.to_string().contains("fs.write"), "{body}");
    let (status, _) = g.admin(Method::GET, &path, None).await;
    assert_eq!(status, 200);

    // A server no policy names is deleted; a restart on the same database
    // starts on the same set.
    let (status, body) = g.admin(Method::DELETE, &spare, None).await;
    assert_eq!(status, 204, "{body}");
    wait_policies(&g, "`spare.write` untyped", |p| {
        !p["typedTools"].to_string().contains("spare.write")
    })
    .await;
    let hash = g.gw.pep.current().hash.clone();
    let g = restart(g).await;
    assert_eq!(g.gw.pep.current().hash, hash);

    // Once the policy is gone, the delete passes, and so does a restart.
    let (status, body) = reload_with(&g, "acme.cedar", "").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = g.admin(Method::DELETE, &path, None).await;
    assert_eq!(status, 204, "{body}");
    let g = restart(g).await;
    let (status, ready) = readyz(&g).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["policySet"], "current", "{ready}");
}
async fn console_peers(g: &TestGateway) -> String {
    use reqwest::header::{COOKIE, SET_COOKIE};
    let csrf_of = |html: &str| {
        let at = html.find("name=\"csrf\" value=\"").unwrap() + 19;
        html[at..].split('"').next().unwrap().to_string()
    };
    let cookie = |resp: &reqwest::Response, name: &str| {
        resp.headers()
            .get_all(SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .find(|c| c.starts_with(&format!("{name}=")))
            .map(|c| c.split(';').next().unwrap().to_string())
            .unwrap()
    };
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = http
        .get(format!("{}/console/login", g.base))
        .send()
        .await
        .unwrap();
    let login = cookie(&page, "cg_console_login");
    let csrf = csrf_of(&page.text().await.unwrap());
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let body = format!("token={}&csrf={}", enc(common::ADMIN_TOKEN), enc(&csrf));
    let resp = http
        .post(format!("{}/console/login", g.base))
        .header(COOKIE, &login)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    let session = cookie(&resp, "cg_console");
    let page = http
        .get(format!("{}/console/peers", g.base))
        .header(COOKIE, &session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    page.text().await.unwrap()
}
