//! Upstream MCP servers over Streamable HTTP, against a small recording
//! upstream started here (it answers in JSON or as an event stream, can
//! expire its sessions, hang, fail and answer garbage, and records every
//! `tools/call` it receives with its `Authorization` header): registration
//! and listing, results passed through unchanged, a denied call that sends
//! nothing, the failure codes, session expiry, the per-upstream concurrency
//! bound, credentials, and org isolation.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::{Tenant, TestGateway};
use reqwest::Method;
use serde_json::{Value, json};

/// What the recording upstream saw and how it behaves.
#[derive(Default)]
struct Recorder {
    /// `tools/call` requests: `{name, arguments, authorization}`.
    calls: Mutex<Vec<Value>>,
    /// `initialize` requests answered.
    inits: AtomicUsize,
    /// Session ids it considers live.
    sessions: Mutex<HashSet<String>>,
    /// Calls in flight now, and the most ever.
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// Whether `wipe`'s description changed (a new definition).
    changed: AtomicBool,
    /// Whether every request answers HTTP 500.
    broken: AtomicBool,
    /// Whether `hang` answers (it waits until then).
    released: AtomicBool,
    /// Whether a tool `added` is listed too.
    extra: AtomicBool,
    /// A tool of this name listed too, if any.
    named: Mutex<Option<String>>,
}

/// A running recording upstream.
struct Upstream {
    url: String,
    rec: Arc<Recorder>,
}

impl Upstream {
    async fn start() -> Upstream {
        let rec = Arc::new(Recorder::default());
        let app = axum::Router::new()
            .route("/mcp", axum::routing::post(handle))
            .with_state(Arc::clone(&rec));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Upstream {
            url: format!("http://{addr}/mcp"),
            rec,
        }
    }

    fn calls(&self) -> Vec<Value> {
        self.rec.calls.lock().unwrap().clone()
    }
}

fn tools(rec: &Recorder) -> Value {
    let wipe = if rec.changed.load(Ordering::SeqCst) {
        "Deletes everything, and more"
    } else {
        "Deletes everything"
    };
    let mut listed = json!([
        {"name": "echo", "description": "Echoes", "title": "Echo",
         "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
         "annotations": {"readOnlyHint": true, "openWorldHint": false}},
        {"name": "wipe", "description": wipe,
         "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
         "annotations": {"destructiveHint": true}},
        {"name": "fail", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
        {"name": "hang", "inputSchema": {"type": "object"}},
        {"name": "garbage", "inputSchema": {"type": "object"}},
        {"name": "huge", "inputSchema": {"type": "object"}},
        {"name": "tool_error", "inputSchema": {"type": "object"}}
    ]);
    if rec.extra.load(Ordering::SeqCst) {
        listed
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "added", "inputSchema": {"type": "object"}}));
    }
    if let Some(name) = rec.named.lock().unwrap().clone() {
        listed
            .as_array_mut()
            .unwrap()
            .push(json!({"name": name, "inputSchema": {"type": "object"}}));
    }
    listed
}

fn json_response(id: &Value, result: Value) -> Response {
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

/// An event stream holding a notification, then the response.
fn sse_response(id: &Value, result: Value) -> Response {
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "working"}});
    let resp = json!({"jsonrpc": "2.0", "id": id, "result": result});
    let body = format!("event: message\ndata: {note}\n\nevent: message\ndata: {resp}\n\n");
    ([("content-type", "text/event-stream")], body).into_response()
}

async fn handle(State(rec): State<Arc<Recorder>>, headers: HeaderMap, body: String) -> Response {
    if rec.broken.load(Ordering::SeqCst) {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    let msg: Value = serde_json::from_str(&body).unwrap();
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let method = msg["method"].as_str().unwrap_or_default().to_string();
    if method == "initialize" {
        let n = rec.inits.fetch_add(1, Ordering::SeqCst);
        let sid = format!("up-session-{n}");
        rec.sessions.lock().unwrap().insert(sid.clone());
        let result = json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                            "serverInfo": {"name": "recorder", "version": "1"}});
        let mut resp = json_response(&id, result);
        resp.headers_mut()
            .insert("mcp-session-id", sid.parse().unwrap());
        return resp;
    }
    let sid = headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    if !rec.sessions.lock().unwrap().contains(&sid) {
        return StatusCode::NOT_FOUND.into_response();
    }
    if msg.get("id").is_none() {
        return StatusCode::ACCEPTED.into_response();
    }
    match method.as_str() {
        "tools/list" => json_response(&id, json!({"tools": tools(&rec)})),
        "tools/call" => tool_call(&rec, &headers, &id, &msg["params"]).await,
        _ => axum::Json(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}}),
        )
        .into_response(),
    }
}

async fn tool_call(rec: &Recorder, headers: &HeaderMap, id: &Value, params: &Value) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    rec.calls.lock().unwrap().push(json!({
        "name": params["name"], "arguments": params["arguments"], "authorization": auth,
    }));
    let now = rec.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    rec.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let resp = match params["name"].as_str().unwrap() {
        "echo" | "wipe" | "added" => {
            let msg = params["arguments"]["message"].clone();
            sse_response(
                id,
                json!({
                    "content": [{"type": "text", "text": msg}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
                    "structuredContent": {"echo": msg},
                    "isError": false,
                    "_meta": {"upstream": true},
                }),
            )
        }
        "tool_error" => json_response(
            id,
            json!({"content": [{"type": "text", "text": "bad input"}], "isError": true}),
        ),
        "fail" => axum::Json(json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32042, "message": "upstream says no", "data": {"why": "policy"}}}))
        .into_response(),
        "hang" => {
            while !rec.released.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            json_response(id, json!({"content": []}))
        }
        "garbage" => "this is not JSON".into_response(),
        _ => json_response(
            id,
            json!({"content": [{"type": "text", "text": "x".repeat(5 * 1024 * 1024)}]}),
        ),
    };
    rec.in_flight.fetch_sub(1, Ordering::SeqCst);
    resp
}

async fn register(g: &TestGateway, org: &str, body: Value) -> (u16, Value) {
    g.admin(
        Method::POST,
        &format!("/admin/orgs/{org}/mcp-servers"),
        Some(body),
    )
    .await
}

/// A gateway (with `policy`, if any), a tenant of `acme`, and the recording
/// upstream registered for `acme` as `Files Server`.
async fn setup(policy: Option<&str>) -> (TestGateway, Tenant, Upstream, Value) {
    let g = match policy {
        Some(p) => TestGateway::start_with_policy("extra.cedar", p).await,
        None => TestGateway::start().await,
    };
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    let (status, server) = register(
        &g,
        "acme",
        json!({"name": "Files Server", "transport": "streamable-http", "url": up.url, "timeoutMs": 2000}),
    )
    .await;
    assert_eq!(status, 201, "{server}");
    (g, t, up, server)
}

async fn call(g: &TestGateway, t: &Tenant, name: &str, args: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": args}});
    let (status, body) = g
        .mcp_raw(
            &t.mcp_url,
            Some(&t.key),
            &[("mcp-protocol-version", "2025-06-18")],
            body.to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn registered_tools_are_listed_and_called_with_the_upstream_result_unchanged() {
    let (g, t, up, server) = setup(None).await;
    assert_eq!(server["slug"], "files_server");
    assert_eq!(server["health"], "healthy");
    assert_eq!(server["toolCount"], 7);
    assert_eq!(server["protocolVersion"], "2025-06-18");
    assert_eq!(server["tools"][0]["tool"], "files_server.echo");
    assert_eq!(server["tools"][0]["hash"].as_str().unwrap().len(), 64);

    let (_, list) = g
        .mcp(
            &t,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    let listed = list["result"]["tools"].as_array().unwrap();
    let echo = listed
        .iter()
        .find(|t| t["name"] == "files_server.echo")
        .unwrap();
    assert_eq!(echo["description"], "Echoes");
    assert_eq!(echo["title"], "Echo");
    assert_eq!(echo["annotations"]["readOnlyHint"], true);
    assert_eq!(echo["inputSchema"]["required"], json!(["message"]));

    let body = call(&g, &t, "files_server.echo", json!({"message": "hi"})).await;
    assert_eq!(
        body["result"],
        json!({
            "content": [{"type": "text", "text": "hi"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
            "structuredContent": {"echo": "hi"},
            "isError": false,
            "_meta": {"upstream": true},
        }),
        "{body}"
    );
    // A tool-level error is a result too, passed on as it is.
    let body = call(&g, &t, "files_server.tool_error", json!({})).await;
    assert_eq!(body["result"]["isError"], true, "{body}");

    // The upstream got its own name and only the arguments: no gateway
    // context, no credential of the agent.
    let calls = up.calls();
    assert_eq!(calls[0]["name"], "echo");
    assert_eq!(calls[0]["arguments"], json!({"message": "hi"}));
    assert_eq!(calls[0]["authorization"], Value::Null);

    // The decision names the tool; its outcome names the upstream and pin.
    let decisions = g.decisions().await;
    let d = decisions
        .iter()
        .find(|d| d.record.action == "call_tool" && d.record.resource.contains("files_server.echo"))
        .unwrap();
    assert_eq!(d.record.decision, "allow");
    assert_eq!(
        serde_json::from_str::<Value>(&d.record.reasons).unwrap(),
        json!(["upstream-tools-for-own-org"])
    );
    let outcome: Value = serde_json::from_str(&d.record.outcome).unwrap();
    assert_eq!(outcome["status"], "completed");
    assert_eq!(outcome["upstream"], server["id"]);
    assert_eq!(outcome["pinnedHash"], server["tools"][0]["hash"]);
    let slice = g.entity_snapshot(&d.record.entities_hash).await;
    assert!(
        slice.contains(r#"{"uid":{"type":"Gateway::McpServer","id":"files_server"},"attrs":{"slug":"files_server","#),
        "{slice}"
    );
    assert!(
        slice.contains(r#""attrs":{"kind":"upstream","readOnly":true,"destructive":false,"openWorld":false,"title":"Echo"},"parents":[{"type":"Gateway::McpServer","id":"files_server"}]"#),
        "{slice}"
    );
}

#[tokio::test]
async fn a_denied_call_sends_nothing_upstream() {
    let policy = r#"
@id("no-fail")
forbid (principal, action in Gateway::Action::"call_tool", resource == Gateway::Tool::"files_server.fail");

@id("no-destructive-upstream-tools")
forbid (principal, action in [Gateway::Action::"call_tool"], resource in Gateway::ToolGroup::"upstream")
when { resource has destructive && resource.destructive };
"#;
    let (g, t, up, _) = setup(Some(policy)).await;
    // `tool_error` has no annotations: MCP's default says destructive.
    for (tool, rule) in [
        ("files_server.fail", "no-fail"),
        ("files_server.wipe", "no-destructive-upstream-tools"),
        ("files_server.tool_error", "no-destructive-upstream-tools"),
    ] {
        let body = call(&g, &t, tool, json!({"message": "hi"})).await;
        assert_eq!(body["error"]["code"], -32003, "{body}");
        assert_eq!(body["error"]["data"]["reasons"], json!([rule]), "{body}");
    }
    assert!(up.calls().is_empty(), "{:?}", up.calls());
    // A tool its annotations mark read-only still runs.
    let body = call(&g, &t, "files_server.echo", json!({"message": "hi"})).await;
    assert!(body["result"].is_object(), "{body}");
    assert_eq!(up.calls().len(), 1);
    let denied = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| d.record.action == "call_tool" && d.record.decision == "deny")
        .count();
    assert_eq!(denied, 3);
}

#[tokio::test]
async fn upstream_errors_keep_their_code_and_gateway_failures_use_the_bridge_codes() {
    let (g, t, _up, _) = setup(None).await;
    let body = call(&g, &t, "files_server.fail", json!({})).await;
    assert_eq!(body["error"]["code"], -32042, "{body}");
    assert_eq!(body["error"]["message"], "upstream says no");
    assert_eq!(body["error"]["data"]["detail"], json!({"why": "policy"}));
    let body = call(&g, &t, "files_server.garbage", json!({})).await;
    assert_eq!(body["error"]["code"], -32203, "{body}");
    assert_eq!(body["error"]["data"]["class"], "invalid-response");
    // Larger than the 4 MiB bound.
    let body = call(&g, &t, "files_server.huge", json!({})).await;
    assert_eq!(body["error"]["code"], -32203, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("larger than")
    );
    // Slower than the registration's 2,000 ms.
    let body = call(&g, &t, "files_server.hang", json!({})).await;
    assert_eq!(body["error"]["code"], -32201, "{body}");
    let failed = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| d.record.action == "call_tool")
        .filter(|d| d.record.outcome.contains(r#""status":"failed""#))
        .count();
    assert_eq!(failed, 4);
}

#[tokio::test]
async fn an_upstream_that_is_down_or_failing_is_reported() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    let (status, server) = register(
        &g,
        "acme",
        json!({"name": "flaky", "transport": "streamable-http", "url": up.url}),
    )
    .await;
    assert_eq!(status, 201, "{server}");
    up.rec.broken.store(true, Ordering::SeqCst);
    let body = call(&g, &t, "flaky.echo", json!({"message": "x"})).await;
    assert_eq!(body["error"]["code"], -32202, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("HTTP 500"),
        "{body}"
    );
    // A registration of an endpoint nothing listens on is kept, without tools.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let (status, down) = register(
        &g,
        "acme",
        json!({"name": "down", "transport": "streamable-http", "url": dead}),
    )
    .await;
    assert_eq!(status, 201, "{down}");
    assert_eq!(down["health"], "unreachable");
    assert_eq!(down["toolCount"], 0);
    assert!(down["lastError"].as_str().unwrap().contains("cannot reach"));
    let names = g.tool_names(&t).await;
    assert!(names.iter().all(|n| !n.starts_with("down.")), "{names:?}");
    let (_, listed) = g
        .admin(Method::GET, "/admin/orgs/acme/mcp-servers", None)
        .await;
    let servers = listed["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    assert_eq!(servers[0]["health"], "healthy");
    assert_eq!(servers[0]["toolCount"], 7);
    assert_eq!(servers[1]["health"], "unreachable");
    assert!(servers[0].get("tools").is_none());

    // The failed call is counted for its upstream; health is in the
    // metrics and in /readyz (detail only: the gateway stays ready).
    let metrics = g.metrics_text().await;
    assert!(
        metrics.contains(
            r#"cedargate_upstream_requests_total{upstream="acme/flaky",method="tools/call",outcome="transport"} 1"#
        ),
        "{metrics}"
    );
    assert!(metrics.contains(r#"cedargate_upstream_healthy{upstream="acme/flaky"} 1"#));
    assert!(metrics.contains(r#"cedargate_upstream_healthy{upstream="acme/down"} 0"#));
    let ready = g
        .http
        .get(format!("{}/readyz", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["upstreams"]["count"], 2, "{ready}");
    assert_eq!(ready["upstreams"]["byHealth"]["unreachable"], 1, "{ready}");
    assert_eq!(
        ready["upstreams"]["unhealthy"],
        json!(["acme/down"]),
        "{ready}"
    );
}

#[tokio::test]
async fn calls_are_counted_per_upstream_by_outcome_with_their_latency() {
    let (g, t, _up, _) = setup(None).await;
    call(&g, &t, "files_server.echo", json!({"message": "hi"})).await;
    call(&g, &t, "files_server.tool_error", json!({})).await;
    call(&g, &t, "files_server.fail", json!({})).await;
    let metrics = g.metrics_text().await;
    for outcome in ["ok", "tool_error", "upstream-error"] {
        let line = format!(
            r#"cedargate_upstream_requests_total{{upstream="acme/files_server",method="tools/call",outcome="{outcome}"}} 1"#
        );
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
    assert!(
        metrics.contains(
            r#"cedargate_upstream_request_duration_seconds_count{upstream="acme/files_server"} 3"#
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_expired_upstream_session_is_initialized_again() {
    let (g, t, up, _) = setup(None).await;
    let first = call(&g, &t, "files_server.echo", json!({"message": "a"})).await;
    assert!(first["result"].is_object(), "{first}");
    let before = up.rec.inits.load(Ordering::SeqCst);
    up.rec.sessions.lock().unwrap().clear();
    let second = call(&g, &t, "files_server.echo", json!({"message": "b"})).await;
    assert_eq!(
        second["result"]["structuredContent"]["echo"], "b",
        "{second}"
    );
    assert_eq!(up.rec.inits.load(Ordering::SeqCst), before + 1);
    // Calls share the session: another call initializes nothing.
    call(&g, &t, "files_server.echo", json!({"message": "c"})).await;
    assert_eq!(up.rec.inits.load(Ordering::SeqCst), before + 1);
}

#[tokio::test]
async fn concurrent_calls_to_one_upstream_are_bounded() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    let (status, _) = register(
        &g,
        "acme",
        json!({"name": "busy", "transport": "streamable-http", "url": up.url, "timeoutMs": 30000}),
    )
    .await;
    assert_eq!(status, 201);
    let g = Arc::new(g);
    let max = cedargate::upstream::MAX_CONCURRENT_PER_UPSTREAM;
    let spawn = |g: &Arc<TestGateway>| {
        let (g, t) = (Arc::clone(g), t.clone());
        tokio::spawn(async move { call(&g, &t, "busy.hang", json!({})).await })
    };
    let mut calls: Vec<_> = (0..max).map(|_| spawn(&g)).collect();
    while up.rec.in_flight.load(Ordering::SeqCst) < max {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // One more waits for a slot: the upstream does not see it.
    calls.push(spawn(&g));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(up.calls().len(), max);
    up.rec.released.store(true, Ordering::SeqCst);
    for c in calls {
        let body = c.await.unwrap();
        assert_eq!(body["result"]["content"], json!([]), "{body}");
    }
    assert_eq!(up.calls().len(), max + 1);
    assert_eq!(up.rec.max_in_flight.load(Ordering::SeqCst), max);
}

#[tokio::test]
async fn the_upstream_credential_is_read_at_call_time_and_never_shown() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    let secrets = tempfile::tempdir().unwrap();
    let file = secrets.path().join("token");
    std::fs::write(&file, "upstream-secret-1\n").unwrap();
    let path = file.to_str().unwrap();
    let (status, server) = register(
        &g,
        "acme",
        json!({"name": "secure", "transport": "streamable-http", "url": up.url,
               "auth": {"type": "bearer", "secretFile": path}}),
    )
    .await;
    assert_eq!(status, 201, "{server}");
    assert_eq!(
        server["auth"],
        json!({"type": "bearer", "secretFile": path})
    );
    assert!(!server.to_string().contains("upstream-secret"));
    // Read at every call: a rotated token is used at once.
    std::fs::write(&file, "upstream-secret-2").unwrap();
    call(&g, &t, "secure.echo", json!({"message": "x"})).await;
    let calls = up.calls();
    assert_eq!(calls[0]["authorization"], "Bearer upstream-secret-2");
    assert!(!calls[0].to_string().contains("rsk_live_"));
    let stored = g
        .texts("SELECT COALESCE(secret_file, '') || tools FROM mcp_servers")
        .await;
    assert!(stored[0].starts_with(path), "{stored:?}");
    assert!(!stored[0].contains("upstream-secret"), "{stored:?}");
    // A token that cannot be read fails the call before anything is sent.
    std::fs::remove_file(&file).unwrap();
    let body = call(&g, &t, "secure.echo", json!({"message": "y"})).await;
    assert_eq!(body["error"]["code"], -32202, "{body}");
    assert_eq!(up.calls().len(), 1);
}

#[tokio::test]
async fn two_orgs_never_see_each_others_upstreams() {
    let (g, acme, _up, server) = setup(None).await;
    let globex = g.tenant("globex").await;
    let names = g.tool_names(&globex).await;
    assert!(
        names.iter().all(|n| !n.starts_with("files_server.")),
        "{names:?}"
    );
    assert!(
        g.tool_names(&acme)
            .await
            .contains(&"files_server.echo".to_string())
    );
    let body = call(&g, &globex, "files_server.echo", json!({"message": "x"})).await;
    assert_eq!(body["error"]["code"], -32601, "{body}");
    let (_, listed) = g
        .admin(Method::GET, "/admin/orgs/globex/mcp-servers", None)
        .await;
    assert_eq!(listed["servers"], json!([]));
    let id = server["id"].as_str().unwrap();
    let (status, _) = g
        .admin(
            Method::GET,
            &format!("/admin/orgs/globex/mcp-servers/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = g
        .admin(
            Method::DELETE,
            &format!("/admin/orgs/globex/mcp-servers/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_deleted_upstream_is_gone_at_once() {
    let (g, t, up, server) = setup(None).await;
    let id = server["id"].as_str().unwrap();
    let (status, one) = g
        .admin(
            Method::GET,
            &format!("/admin/orgs/acme/mcp-servers/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(one["tools"].as_array().unwrap().len(), 7);
    let (status, _) = g
        .admin(
            Method::DELETE,
            &format!("/admin/orgs/acme/mcp-servers/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert!(
        g.tool_names(&t)
            .await
            .iter()
            .all(|n| !n.starts_with("files_server."))
    );
    let body = call(&g, &t, "files_server.echo", json!({"message": "x"})).await;
    assert_eq!(body["error"]["code"], -32601, "{body}");
    assert!(up.calls().is_empty());
}

#[tokio::test]
async fn registrations_are_checked() {
    let g = TestGateway::start().await;
    g.tenant("acme").await;
    for (body, needle) in [
        (
            json!({"name": "x", "transport": "stdio", "url": "http://127.0.0.1:1/mcp"}),
            "transport",
        ),
        (
            json!({"name": "x", "transport": "streamable-http", "url": "ftp://h/mcp"}),
            "http(s)",
        ),
        (
            json!({"name": "x", "transport": "streamable-http", "url": "http://u:p@h/mcp"}),
            "credentials",
        ),
        (
            json!({"name": "x", "transport": "streamable-http", "url": "http://h/mcp", "timeoutMs": 0}),
            "timeoutMs",
        ),
        (
            json!({"name": "x", "transport": "streamable-http", "url": "http://h/mcp", "prefix": "Bad Prefix"}),
            "prefix",
        ),
        (
            json!({"name": "!!", "transport": "streamable-http", "url": "http://h/mcp"}),
            "name",
        ),
    ] {
        let (status, resp) = register(&g, "acme", body).await;
        assert_eq!(status, 400, "{resp}");
        assert!(resp.to_string().contains(needle), "{resp}");
    }
    let (status, _) = register(
        &g,
        "nope",
        json!({"name": "x", "transport": "streamable-http", "url": "http://h/mcp"}),
    )
    .await;
    assert_eq!(status, 404);
}

async fn admin_post(g: &TestGateway, path: &str, body: Value) -> (u16, Value) {
    g.admin(Method::POST, path, Some(body)).await
}

#[tokio::test]
async fn a_changed_definition_is_held_until_approved() {
    let (g, t, up, server) = setup(None).await;
    let id = server["id"].as_str().unwrap();
    let base = format!("/admin/orgs/acme/mcp-servers/{id}");
    let wipe = |s: &Value| {
        s["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "wipe")
            .unwrap()
            .clone()
    };
    let pinned = wipe(&server)["hash"].as_str().unwrap().to_string();
    call(&g, &t, "files_server.wipe", json!({"path": "/tmp"})).await;
    assert_eq!(up.calls().len(), 1);

    // Nothing changed: a refresh holds nothing.
    let (status, same) = admin_post(&g, &format!("{base}/refresh"), json!({})).await;
    assert_eq!(status, 200, "{same}");
    assert_eq!(same["heldChanges"], json!([]));

    up.rec.changed.store(true, Ordering::SeqCst);
    let (_, refreshed) = admin_post(&g, &format!("{base}/refresh"), json!({})).await;
    let held = wipe(&refreshed);
    assert_eq!(held["status"], "held", "{refreshed}");
    assert_eq!(held["hash"], pinned.as_str());
    let new_hash = held["held"]["hash"].as_str().unwrap().to_string();
    assert_ne!(new_hash, pinned);
    assert_eq!(
        held["held"]["definition"]["description"],
        "Deletes everything, and more"
    );
    assert_eq!(
        refreshed["heldChanges"],
        json!([{"tool": "wipe", "oldHash": pinned, "newHash": new_hash}])
    );
    assert_eq!(refreshed["heldCount"], 1);
    // Hidden, and answered like an unknown tool; nothing reaches the upstream.
    let names = g.tool_names(&t).await;
    assert!(
        !names.contains(&"files_server.wipe".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"files_server.echo".to_string()),
        "{names:?}"
    );
    let body = call(&g, &t, "files_server.wipe", json!({"path": "/tmp"})).await;
    assert_eq!(body["error"]["code"], -32601, "{body}");
    assert_eq!(up.calls().len(), 1);
    // Listing it again keeps it held, and reports no new change.
    let (_, again) = admin_post(&g, &format!("{base}/refresh"), json!({})).await;
    assert_eq!(again["heldChanges"], json!([]));
    assert_eq!(wipe(&again)["held"]["seenAt"], held["held"]["seenAt"]);

    // A name alone approves nothing; a hash of a tool holding nothing
    // neither.
    let (status, bad) = admin_post(
        &g,
        &format!("{base}/approve"),
        json!({"tools": ["files_server.wipe"]}),
    )
    .await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad.to_string().contains("heldHashes"), "{bad}");
    let (status, bad) = admin_post(&g, &format!("{base}/approve"), json!({})).await;
    assert_eq!(status, 400, "{bad}");
    let (status, bad) = admin_post(
        &g,
        &format!("{base}/approve"),
        json!({"heldHashes": {"echo": new_hash}}),
    )
    .await;
    assert_eq!(status, 409, "{bad}");
    let (status, approved) = admin_post(
        &g,
        &format!("{base}/approve"),
        json!({"tools": ["files_server.wipe"], "heldHashes": {"files_server.wipe": new_hash}}),
    )
    .await;
    assert_eq!(status, 200, "{approved}");
    assert_eq!(approved["approved"], 1);
    assert_eq!(wipe(&approved)["hash"], new_hash.as_str());
    assert_eq!(wipe(&approved)["status"], "approved");
    let (_, list) = g
        .mcp(
            &t,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    let listed = list["result"]["tools"].as_array().unwrap();
    let entry = listed
        .iter()
        .find(|t| t["name"] == "files_server.wipe")
        .unwrap();
    assert_eq!(entry["description"], "Deletes everything, and more");
    let body = call(&g, &t, "files_server.wipe", json!({"path": "/tmp"})).await;
    assert!(body["result"].is_object(), "{body}");
    assert_eq!(up.calls().len(), 2);
}

#[tokio::test]
async fn a_server_that_approves_new_tools_by_hand_offers_nothing_unapproved() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    let (status, server) = register(
        &g,
        "acme",
        json!({"name": "strict", "transport": "streamable-http", "url": up.url, "approveNewTools": false}),
    )
    .await;
    assert_eq!(status, 201, "{server}");
    assert_eq!(server["approveNewTools"], false);
    assert_eq!(server["heldCount"], 7);
    assert!(
        g.tool_names(&t)
            .await
            .iter()
            .all(|n| !n.starts_with("strict."))
    );
    let base = format!(
        "/admin/orgs/acme/mcp-servers/{}",
        server["id"].as_str().unwrap()
    );
    let held = |s: &Value| -> serde_json::Map<String, Value> {
        s["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["status"] == "held")
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_string(),
                    t["held"]["hash"].clone(),
                )
            })
            .collect()
    };
    let all_held = held(&server);
    let echo = json!({"echo": all_held["echo"]});
    let (status, _) = admin_post(&g, &format!("{base}/approve"), json!({"heldHashes": echo})).await;
    assert_eq!(status, 200);
    let names: Vec<String> = g
        .tool_names(&t)
        .await
        .into_iter()
        .filter(|n| n.starts_with("strict."))
        .collect();
    assert_eq!(names, ["strict.echo"]);
    let (_, shown) = g.admin(Method::GET, &base, None).await;
    let (_, all) = admin_post(
        &g,
        &format!("{base}/approve"),
        json!({"heldHashes": held(&shown)}),
    )
    .await;
    assert_eq!(all["approved"], 6, "{all}");
    assert_eq!(all["heldCount"], 0);
    // A tool the upstream adds later is held too.
    up.rec.extra.store(true, Ordering::SeqCst);
    let (_, refreshed) = admin_post(&g, &format!("{base}/refresh"), json!({})).await;
    assert_eq!(refreshed["heldChanges"][0]["tool"], "added", "{refreshed}");
    assert_eq!(refreshed["heldChanges"][0]["oldHash"], "");
    let names = g.tool_names(&t).await;
    assert!(names.contains(&"strict.echo".to_string()));
    assert!(!names.contains(&"strict.added".to_string()), "{names:?}");
    let body = call(&g, &t, "strict.added", json!({})).await;
    assert_eq!(body["error"]["code"], -32601, "{body}");
    assert!(up.calls().is_empty());
}

#[tokio::test]
async fn an_empty_prefix_exposes_the_upstream_names_unless_they_collide() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    let (status, plain) = register(
        &g,
        "acme",
        json!({"name": "plain", "transport": "streamable-http", "url": up.url, "prefix": ""}),
    )
    .await;
    assert_eq!(status, 201, "{plain}");
    assert_eq!(plain["tools"][0]["tool"], "echo");
    let names = g.tool_names(&t).await;
    assert!(names.contains(&"echo".to_string()), "{names:?}");
    let body = call(&g, &t, "echo", json!({"message": "hi"})).await;
    assert_eq!(body["result"]["structuredContent"]["echo"], "hi", "{body}");
    assert_eq!(up.calls()[0]["name"], "echo");

    // Another server listing the same names without a prefix is refused.
    let other = Upstream::start().await;
    let (status, refused) = register(
        &g,
        "acme",
        json!({"name": "twin", "transport": "streamable-http", "url": other.url, "prefix": ""}),
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    let text = refused.to_string();
    assert!(
        text.contains("`echo`") && text.contains("MCP server `plain`"),
        "{text}"
    );
    // So is one listing a built-in tool's name.
    *other.rec.named.lock().unwrap() = Some("af_memory_recall".into());
    let (status, refused) = register(
        &g,
        "acme",
        json!({"name": "shadow", "transport": "streamable-http", "url": other.url, "prefix": "sh"}),
    )
    .await;
    assert_eq!(status, 201, "a prefix keeps it apart: {refused}");
    let (status, refused) = register(
        &g,
        "globex",
        json!({"name": "shadow", "transport": "streamable-http", "url": other.url, "prefix": ""}),
    )
    .await;
    assert_eq!(status, 404, "{refused}");
    g.tenant("globex").await;
    let (status, refused) = register(
        &g,
        "globex",
        json!({"name": "shadow", "transport": "streamable-http", "url": other.url, "prefix": ""}),
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused
            .to_string()
            .contains("af_memory_recall` is a built-in tool"),
        "{refused}"
    );
    // Nothing of the refused registrations was stored.
    for (org, count) in [("acme", 2), ("globex", 0)] {
        let (_, listed) = g
            .admin(Method::GET, &format!("/admin/orgs/{org}/mcp-servers"), None)
            .await;
        assert_eq!(
            listed["servers"].as_array().unwrap().len(),
            count,
            "{listed}"
        );
    }
}

#[tokio::test]
async fn a_refresh_that_brings_a_colliding_name_hides_that_tool() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    let (status, server) = register(
        &g,
        "acme",
        json!({"name": "plain", "transport": "streamable-http", "url": up.url, "prefix": ""}),
    )
    .await;
    assert_eq!(status, 201, "{server}");
    let base = format!(
        "/admin/orgs/acme/mcp-servers/{}",
        server["id"].as_str().unwrap()
    );
    *up.rec.named.lock().unwrap() = Some("af_memory_recall".into());
    let (status, refreshed) = admin_post(&g, &format!("{base}/refresh"), json!({})).await;
    assert_eq!(status, 200, "{refreshed}");
    assert_eq!(
        refreshed["collisions"],
        json!([{"tool": "af_memory_recall", "name": "af_memory_recall", "collidesWith": "a built-in tool"}])
    );
    let (_, shown) = g.admin(Method::GET, &base, None).await;
    let entry = shown["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "af_memory_recall")
        .unwrap()
        .clone();
    assert_eq!(entry["status"], "collision", "{shown}");
    assert_eq!(entry["collidesWith"], "a built-in tool");
    // The built-in keeps its name: the listing shows it once, with its own
    // description, and a call reaches the built-in, not the upstream.
    let (_, list) = g
        .mcp(
            &t,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    let recall: Vec<&Value> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "af_memory_recall")
        .collect();
    assert_eq!(recall.len(), 1);
    assert!(
        recall[0]["description"]
            .as_str()
            .unwrap()
            .contains("Recall")
    );
    call(
        &g,
        &t,
        "af_memory_recall",
        json!({"query": "x", "workType": "bug_fix"}),
    )
    .await;
    assert!(up.calls().is_empty(), "{:?}", up.calls());
    // The other tools stay; the collision clears when the name goes away.
    assert!(g.tool_names(&t).await.contains(&"echo".to_string()));
    *up.rec.named.lock().unwrap() = None;
    let (_, again) = admin_post(&g, &format!("{base}/refresh"), json!({})).await;
    assert_eq!(again["collisions"], json!([]));
    assert_eq!(again["toolCount"], 7);
}

const NO_DESTRUCTIVE_VIEW: &str = r#"
@id("no-destructive-view")
forbid (principal, action == Gateway::Action::"view_tool", resource in Gateway::McpServer::"files_server")
when { resource has destructive && resource.destructive };

@id("no-garbage")
forbid (principal, action == Gateway::Action::"view_tool", resource == Gateway::Tool::"files_server.garbage");
"#;

/// `tools/list` decides an upstream's tools once per class of tools no
/// policy can tell apart (same server, same annotations) unless a policy
/// names one; the record says so, and replay, deciding each tool alone,
/// finds every verdict again.
#[tokio::test]
async fn upstream_tools_with_the_same_annotations_share_one_list_decision() {
    let (g, t, _up, _) = setup(Some(NO_DESTRUCTIVE_VIEW)).await;
    let names = g.tool_names(&t).await;
    let upstream: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| n.starts_with("files_server."))
        .collect();
    assert_eq!(
        upstream,
        ["files_server.echo", "files_server.fail"],
        "{names:?}"
    );
    let list = g
        .decisions()
        .await
        .into_iter()
        .rev()
        .find(|d| d.record.action == "view_tool")
        .unwrap();
    let notes: Value = serde_json::from_str(&list.record.notes).unwrap();
    let classes = notes["toolList"]["classes"].as_array().unwrap();
    // wipe, hang, huge and tool_error: the default annotations (writes,
    // destructive, open world, no title); `garbage` has them too but is
    // named, so it is decided alone; echo and fail differ from them and
    // from each other.
    let mut shape: Vec<(String, u64)> = classes
        .iter()
        .map(|c| {
            assert_eq!(c["mcpServer"], "files_server", "{c}");
            (
                c["decidedOn"].as_str().unwrap().to_string(),
                c["tools"].as_u64().unwrap(),
            )
        })
        .collect();
    shape.sort();
    assert_eq!(
        shape,
        [
            ("files_server.echo".to_string(), 1),
            ("files_server.fail".to_string(), 1),
            ("files_server.wipe".to_string(), 4),
        ],
        "{classes:?}"
    );
    // Two policies deny `garbage`; Cedar reports them as a set, the record
    // by id, the same on every run.
    let tools = notes["toolList"]["tools"].as_array().unwrap();
    let garbage = tools
        .iter()
        .find(|e| e[0] == "files_server.garbage")
        .unwrap();
    let verdict = &notes["toolList"]["verdicts"][garbage[1].as_u64().unwrap() as usize];
    assert_eq!(
        verdict["reasons"],
        json!(["no-destructive-view", "no-garbage"]),
        "{verdict}"
    );
    let report = g.replay_recorded().await;
    assert_eq!(report.identical, report.records, "{report:?}");
    // Hidden tools answer as unknown; the shown ones work.
    let body = call(&g, &t, "files_server.hang", json!({})).await;
    assert_eq!(body["error"]["code"], -32601, "{body}");
    let body = call(&g, &t, "files_server.echo", json!({"message": "hi"})).await;
    assert!(body["result"].is_object(), "{body}");
}
