//! What one org's upstream MCP server declares can never break the policy
//! set every org shares (issue 42 §1), against small upstreams started
//! here:
//!
//! - a tool name or `inputSchema` property name holding a control
//!   character (`\b`, `\u0000`, `\u0001`) is refused (held with a reason in
//!   the admin API and the console), never typed; reloads for every org and
//!   a restart on the same database keep working;
//! - two orgs listing one tool name with different argument types drop that
//!   name's typed action: reloads and restarts keep working, the tool stays
//!   callable under `call_tool`, a policy naming the dropped action is
//!   reported, and a forbid naming it denies the calls rather than stop
//!   protecting them;
//! - `/readyz` says when the latest reload was refused.

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

/// A small Streamable HTTP upstream listing the tools it was started with.
struct Upstream {
    url: String,
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
            calls: shared.calls,
        }
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

/// Tools whose names Cedar cannot hold, and one it can (`ok`).
fn poisoned_tools() -> Value {
    json!([
        tool("back\u{8}space", "string"),
        tool("nul\u{0}", "string"),
        {"name": "ctrl", "inputSchema": {"type": "object",
            "properties": {"pa\u{1}th": {"type": "string"}}}},
        {"name": "nested", "inputSchema": {"type": "object", "properties": {
            "opts": {"type": "object", "properties": {"de\u{8}pth": {"type": "integer"}}}}}},
        tool("ok", "string"),
    ])
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

async fn typed(g: &TestGateway) -> Vec<String> {
    policies(g).await["typedTools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
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

const NO_ETC_FOR_GLOBEX: &str = r#"
@id("globex-no-etc")
forbid (principal in Gateway::Org::"globex", action == Gateway::Action::"fs.read", resource)
when { context.args.path like "/etc/*" };
"#;

#[tokio::test]
async fn control_characters_in_upstream_tool_and_property_names_are_refused_and_never_break_reloads_or_restarts()
 {
    let (g, _policies) = gateway().await;
    let acme = g.tenant("acme").await;
    let globex = g.tenant("globex").await;
    let files = Upstream::start(json!([tool("read", "string")])).await;
    register(&g, "globex", "fs", &files.url).await;
    let evil = Upstream::start(poisoned_tools()).await;
    let evil_path = register(&g, "acme", "evil", &evil.url).await;
    wait_typed(&g, "evil.ok").await;
    wait_typed(&g, "fs.read").await;

    // Each tool Cedar cannot name is held as refused, with an escaped
    // reason; the writable one is offered and typed.
    let (status, shown) = g.admin(Method::GET, &evil_path, None).await;
    assert_eq!(status, 200, "{shown}");
    let tools = shown["tools"].as_array().unwrap();
    for t in tools {
        let refused = t["name"] != "ok";
        assert_eq!(t["status"] == "refused", refused, "{t}");
        if refused {
            let reason = t["reason"].as_str().unwrap();
            assert!(reason.contains("cannot be written in Cedar"), "{reason}");
            assert!(!reason.chars().any(char::is_control), "{reason:?}");
        }
    }
    assert_eq!(tools.len(), 5, "{shown}");
    let listed = g.tool_names(&acme).await;
    assert!(listed.contains(&"evil.ok".to_string()), "{listed:?}");
    assert!(
        !listed
            .iter()
            .any(|n| n.starts_with("evil.") && n != "evil.ok"),
        "{listed:?}"
    );
    assert_eq!(
        code_of(&g, &acme, "evil.back\u{8}space", json!({"path": "/x"})).await,
        -32601
    );
    let typed_now = typed(&g).await;
    assert!(!typed_now.iter().any(|t| t.chars().any(char::is_control)));
    let attempt = &policies(&g).await["lastReload"];
    assert_ne!(attempt["result"], "rejected", "{attempt}");

    // A new forbid for another org takes effect at once.
    let (status, body) = reload_with(&g, "globex.cedar", NO_ETC_FOR_GLOBEX).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"], "applied", "{body}");
    assert_eq!(
        code_of(&g, &globex, "fs.read", json!({"path": "/etc/passwd"})).await,
        -32003
    );
    assert_eq!(
        code_of(&g, &globex, "fs.read", json!({"path": "/tmp/a"})).await,
        0
    );
    assert_eq!(files.calls().len(), 1);

    // The console's remote tools page shows the refusals, escaped.
    let html = console_peers(&g).await;
    assert!(html.contains("Refused: back\\u{8}space"), "{html}");
    assert!(html.contains("cannot be written in Cedar"));

    // Restarted on the same database (the poisoned pins are stored): it
    // starts, serves, and keeps the forbid.
    let hash = g.gw.pep.current().hash.clone();
    let old_base = g.base.clone();
    let g = restart(g).await;
    assert_eq!(g.gw.pep.current().hash, hash);
    let globex = moved(&globex, &old_base, &g);
    let acme = moved(&acme, &old_base, &g);
    let (status, ready) = readyz(&g).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["policySet"], "current", "{ready}");
    assert_eq!(
        code_of(&g, &globex, "fs.read", json!({"path": "/etc/shadow"})).await,
        -32003
    );
    assert_eq!(
        code_of(&g, &acme, "evil.ok", json!({"path": "/tmp/b"})).await,
        0
    );
    assert!(!g.tool_names(&acme).await.iter().any(|n| n == "evil.ctrl"));
    // And another org's new forbid still takes effect after the restart.
    let (status, body) = reload_with(
        &g,
        "acme.cedar",
        r#"@id("acme-no-ok") forbid (principal in Gateway::Org::"acme", action == Gateway::Action::"evil.ok", resource);"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        code_of(&g, &acme, "evil.ok", json!({"path": "/tmp/b"})).await,
        -32003
    );
    assert_eq!(evil.calls().len(), 1, "{:?}", evil.calls());
}

const NO_ETC: &str = r#"
@id("no-etc-reads")
forbid (principal, action == Gateway::Action::"fs.read", resource)
when { context.args.path like "/etc/*" };
"#;

#[tokio::test]
async fn one_tool_name_with_different_argument_types_in_two_orgs_drops_its_typed_action_without_failing_reloads_or_restarts()
 {
    let (g, _policies) = gateway().await;
    let acme = g.tenant("acme").await;
    let globex = g.tenant("globex").await;
    let acme_fs = Upstream::start(json!([tool("read", "string")])).await;
    register(&g, "acme", "fs", &acme_fs.url).await;
    wait_typed(&g, "fs.read").await;
    let (status, body) = reload_with(&g, "args.cedar", NO_ETC).await;
    assert_eq!(status, 200, "{body}");

    // globex lists `fs.read` with an integer `path`: the name's typed
    // action is dropped, the rebuild applies, and the forbid naming it is
    // reported.
    let globex_fs = Upstream::start(json!([tool("read", "integer")])).await;
    register(&g, "globex", "fs", &globex_fs.url).await;
    let active = wait_policies(&g, "fs.read dropped", |p| {
        !p["typedTools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "fs.read")
    })
    .await;
    assert_eq!(active["lastReload"]["result"], "applied", "{active}");
    let warned = |p: &Value| p["warnings"].to_string().contains("no-etc-reads");
    assert!(warned(&active), "{active}");
    assert!(warned(&active["lastReload"]), "{active}");

    // Fail closed: the forbid would no longer match, so the calls it named
    // are denied (for both orgs), and nothing reaches either upstream.
    for (t, args) in [
        (&acme, json!({"path": "/tmp/a"})),
        (&globex, json!({"path": 7})),
    ] {
        let body = g.call_tool(t, "fs.read", args).await;
        assert_eq!(body["error"]["code"], -32003, "{body}");
    }
    assert!(acme_fs.calls().is_empty() && globex_fs.calls().is_empty());
    let denied = fs_read_decisions(&g).await;
    assert_eq!(denied.len(), 2);
    for d in &denied {
        assert_eq!(d.decision, "deny");
        assert!(d.errors.contains("no-etc-reads"), "{}", d.errors);
        assert!(d.errors.contains("dropped"), "{}", d.errors);
    }
    // Replay under the recorded sets decides every record alike.
    let report = g.replay_recorded().await;
    assert_eq!(report.identical, report.records, "{report:?}");
    assert!(report.unreplayable.is_empty(), "{report:?}");

    // A reload adding another org's forbid takes effect.
    let (status, body) = reload_with(
        &g,
        "globex.cedar",
        r#"@id("globex-no-send") forbid (principal in Gateway::Org::"globex", action in Gateway::Action::"call_tool", resource == Gateway::Tool::"fs.write");"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"], "applied", "{body}");

    // Restarted on the same database: it starts with the same set.
    let hash = g.gw.pep.current().hash.clone();
    let old_base = g.base.clone();
    let g = restart(g).await;
    assert_eq!(g.gw.pep.current().hash, hash);
    let acme = moved(&acme, &old_base, &g);
    let globex = moved(&globex, &old_base, &g);
    assert_eq!(
        code_of(&g, &acme, "fs.read", json!({"path": "/tmp/a"})).await,
        -32003
    );

    // Without the forbid the tool stays callable for both orgs, under
    // `call_tool`; a permit naming the dropped action is reported too.
    std::fs::remove_file(g.gw.config.policies_dir.join("args.cedar")).unwrap();
    let (status, body) = reload_with(
        &g,
        "permit.cedar",
        r#"@id("read-typed") permit (principal, action == Gateway::Action::"fs.read", resource) when { context.args.path like "/srv/*" };"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["warnings"].to_string().contains("read-typed"),
        "{body}"
    );
    assert_eq!(
        code_of(&g, &acme, "fs.read", json!({"path": "/etc/a"})).await,
        0
    );
    assert_eq!(code_of(&g, &globex, "fs.read", json!({"path": 7})).await, 0);
    assert_eq!(acme_fs.calls().len(), 1);
    assert_eq!(globex_fs.calls().len(), 1);
    let calls = fs_read_decisions(&g).await;
    let last = calls.last().unwrap();
    assert_eq!(last.decision, "allow");
    let context: Value = serde_json::from_str(&last.context).unwrap();
    assert!(context.get("args").is_none(), "decided untyped: {context}");
}

/// The decision records of `fs.read` calls, oldest first.
async fn fs_read_decisions(g: &TestGateway) -> Vec<cedargate::store::decisions::NewDecision> {
    g.decisions()
        .await
        .into_iter()
        .map(|d| d.record)
        .filter(|r| r.action == "call_tool" && r.resource.contains("fs.read"))
        .collect()
}

#[tokio::test]
async fn readyz_says_when_the_latest_reload_was_refused() {
    let (g, _policies) = gateway().await;
    let (status, ready) = readyz(&g).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["policySet"], "current", "{ready}");

    let (status, _) = reload_with(
        &g,
        "bad.cedar",
        r#"@id("bad") permit (principal, action == Gateway::Action::"no_such_action", resource);"#,
    )
    .await;
    assert_eq!(status, 422);
    let (status, ready) = readyz(&g).await;
    assert_eq!(status, 200, "the last good set still serves: {ready}");
    assert!(
        ready["policySet"].as_str().unwrap().starts_with("stale"),
        "{ready}"
    );
    assert!(
        ready["policyReloadRejected"]
            .to_string()
            .contains("no_such_action"),
        "{ready}"
    );

    std::fs::remove_file(g.gw.config.policies_dir.join("bad.cedar")).unwrap();
    let (status, _) = g.admin(Method::POST, "/admin/policies/reload", None).await;
    assert_eq!(status, 200);
    let (_, ready) = readyz(&g).await;
    assert_eq!(ready["policySet"], "current", "{ready}");
    assert!(ready.get("policyReloadRejected").is_none(), "{ready}");
}

/// The console's remote tools page, signed in with the admin token.
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
