//! Typed `context.args` for upstream MCP tools, and definitions that change
//! under the gateway, against small upstreams started here (Streamable
//! HTTP answering JSON, and the legacy HTTP+SSE transport answering in the
//! POST body, with an event stream the test can push notifications on):
//!
//! - a policy on `Gateway::Action::"fs.read"` reads `context.args.path`
//!   and decides on the call's arguments; a denied call sends nothing;
//! - strict validation refuses a policy reading an argument the tool's
//!   `inputSchema` lacks, and a server whose typed action a policy names
//!   cannot be deleted until the policy is gone;
//! - a definition changed upstream is held by the background refresh
//!   without an operator asking, recorded in the trail with old and new
//!   hash (the chain verifies), and types nothing until approved;
//! - two orgs share a typed action only when their tools agree;
//! - `notifications/tools/list_changed` on the upstream's stream makes the
//!   gateway list again.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::{Tenant, TestGateway, copy_policies};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The open event streams' senders.
type Streams = Arc<Mutex<Vec<mpsc::Sender<Result<String, Infallible>>>>>;

/// What an upstream lists and what it was asked.
struct Upstream {
    url: String,
    sse_url: String,
    tools: Arc<Mutex<Value>>,
    calls: Arc<Mutex<Vec<Value>>>,
    streams: Streams,
}

#[derive(Clone)]
struct Shared {
    tools: Arc<Mutex<Value>>,
    calls: Arc<Mutex<Vec<Value>>>,
    streams: Streams,
}

fn read_tool(extra_property: bool) -> Value {
    let mut props = json!({"path": {"type": "string"}});
    let mut required = json!(["path"]);
    if extra_property {
        props["mode"] = json!({"type": "string", "enum": ["fast", "safe"]});
        required = json!(["path", "mode"]);
    }
    json!({"name": "read", "description": "Reads a file",
           "inputSchema": {"type": "object", "properties": props, "required": required},
           "annotations": {"readOnlyHint": true}})
}

impl Upstream {
    async fn start() -> Upstream {
        let shared = Shared {
            tools: Arc::new(Mutex::new(json!([read_tool(false)]))),
            calls: Arc::new(Mutex::new(Vec::new())),
            streams: Arc::default(),
        };
        let app = axum::Router::new()
            .route("/mcp", axum::routing::post(handle))
            .route("/messages", axum::routing::post(handle))
            .route("/sse", axum::routing::get(event_stream))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Upstream {
            url: format!("http://{addr}/mcp"),
            sse_url: format!("http://{addr}/sse"),
            tools: shared.tools,
            calls: shared.calls,
            streams: shared.streams,
        }
    }

    /// Sends a JSON-RPC message on every open event stream; how many.
    async fn push(&self, message: &Value) -> usize {
        let senders = self.streams.lock().unwrap().clone();
        let mut n = 0;
        for tx in senders {
            let event = format!("event: message\ndata: {message}\n\n");
            if tx.send(Ok(event)).await.is_ok() {
                n += 1;
            }
        }
        n
    }

    fn calls(&self) -> Vec<Value> {
        self.calls.lock().unwrap().clone()
    }

    fn list(&self, tools: Value) {
        *self.tools.lock().unwrap() = tools;
    }
}

async fn event_stream(State(s): State<Shared>) -> Response {
    let (tx, rx) = mpsc::channel(16);
    tx.send(Ok("event: endpoint\ndata: /messages\n\n".to_string()))
        .await
        .unwrap();
    s.streams.lock().unwrap().push(tx);
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    ([("content-type", "text/event-stream")], body).into_response()
}

async fn handle(State(s): State<Shared>, _headers: HeaderMap, body: String) -> Response {
    let msg: Value = serde_json::from_str(&body).unwrap();
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match msg["method"].as_str().unwrap_or_default() {
        "initialize" => json!({"protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "files", "version": "1"}}),
        "tools/list" => json!({"tools": s.tools.lock().unwrap().clone()}),
        "tools/call" => {
            s.calls.lock().unwrap().push(msg["params"].clone());
            json!({"content": [{"type": "text", "text": "read"}]})
        }
        _ => json!({}),
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

/// A gateway on a writable copy of the shipped policies (no file watch:
/// the test reloads), refreshing upstreams every `refresh_secs` (0: never).
async fn gateway(refresh_secs: u64) -> (TestGateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    let g = TestGateway::start_with(|c| {
        c.policies_dir = policies;
        c.lifecycle.watch = false;
        c.upstream_refresh.interval_secs = refresh_secs;
        c.upstream_refresh.list_changed_debounce_ms = 50;
    })
    .await;
    (g, dir)
}

async fn register(g: &TestGateway, org: &str, name: &str, transport: &str, url: &str) -> Value {
    let (status, body) = g
        .admin(
            Method::POST,
            &format!("/admin/orgs/{org}/mcp-servers"),
            Some(json!({"name": name, "transport": transport, "url": url, "timeoutMs": 3000})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body
}

/// A gateway (no background refresh) with org `acme`'s tenant and one
/// upstream `fs` registered: the gateway, its directory, the tenant, the
/// upstream and the registration's admin path.
async fn with_fs() -> (TestGateway, tempfile::TempDir, Tenant, Upstream, String) {
    let (g, dir) = gateway(0).await;
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    let server = register(&g, "acme", "fs", "streamable-http", &up.url).await;
    let id = server["id"].as_str().unwrap_or_default();
    let path = format!("/admin/orgs/acme/mcp-servers/{id}");
    (g, dir, t, up, path)
}

async fn typed_tools(g: &TestGateway) -> Vec<String> {
    let (status, body) = g.admin(Method::GET, "/admin/policies", None).await;
    assert_eq!(status, 200, "{body}");
    body["typedTools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Waits (up to 10 s) until the active set types `tool` or not.
async fn wait_typed(g: &TestGateway, tool: &str, typed: bool) {
    for _ in 0..200 {
        if typed_tools(g).await.iter().any(|t| t == tool) == typed {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "`{tool}` typed should be {typed}; typed: {:?}",
        typed_tools(g).await
    );
}

/// Writes a policy file and reloads: the reload's status and answer.
async fn reload_with(g: &TestGateway, file: &str, text: &str) -> (u16, Value) {
    std::fs::write(g.gw.config.policies_dir.join(file), text).unwrap();
    g.admin(Method::POST, "/admin/policies/reload", None).await
}

async fn call(g: &TestGateway, t: &Tenant, name: &str, args: Value) -> Value {
    let (status, body) = g
        .mcp(
            t,
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                   "params": {"name": name, "arguments": args}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

const NO_ETC: &str = r#"
@id("no-etc-reads")
forbid (principal, action == Gateway::Action::"fs.read", resource)
when { context.args.path like "/etc/*" };
"#;

#[tokio::test]
async fn a_context_args_policy_decides_on_the_upstream_tool_arguments() {
    let (g, _dir) = gateway(0).await;
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    register(&g, "acme", "fs", "streamable-http", &up.url).await;
    wait_typed(&g, "fs.read", true).await;
    let (status, body) = reload_with(&g, "args.cedar", NO_ETC).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"], "applied", "{body}");

    let denied = call(&g, &t, "fs.read", json!({"path": "/etc/passwd"})).await;
    assert_eq!(denied["error"]["code"], -32003, "{denied}");
    assert!(up.calls().is_empty(), "a denied call sent {:?}", up.calls());

    let allowed = call(&g, &t, "fs.read", json!({"path": "/tmp/notes"})).await;
    assert_eq!(allowed["result"]["content"][0]["text"], "read", "{allowed}");
    assert_eq!(
        up.calls(),
        vec![json!({"name": "read", "arguments": {"path": "/tmp/notes"}})]
    );

    // Both decisions carry the typed arguments; the deny names the policy.
    let decisions = g.decisions().await;
    let calls: Vec<_> = decisions
        .iter()
        .filter(|d| d.record.action == "call_tool" && d.record.resource.contains("fs.read"))
        .collect();
    assert_eq!(calls.len(), 2);
    let ctx: Value = serde_json::from_str(&calls[0].record.context).unwrap();
    assert_eq!(ctx["args"], json!({"path": "/etc/passwd"}));
    assert_eq!(calls[0].record.decision, "deny");
    assert!(
        calls[0].record.reasons.contains("no-etc-reads"),
        "{}",
        calls[0].record.reasons
    );
    assert_eq!(calls[1].record.decision, "allow");

    // A call whose arguments do not fit the tool's type fails closed.
    let unfit = call(&g, &t, "fs.read", json!({"path": 7})).await;
    assert!(unfit.get("error").is_some(), "{unfit}");
    assert_eq!(up.calls().len(), 1);
}

#[tokio::test]
async fn strict_validation_refuses_unknown_arguments_and_a_server_a_policy_names_is_not_deleted() {
    let (g, _dir) = gateway(0).await;
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    let server = register(&g, "acme", "fs", "streamable-http", &up.url).await;
    wait_typed(&g, "fs.read", true).await;

    // `mode` is not in the tool's inputSchema: refused, nothing changes.
    let before = g.gw.pep.current().hash.clone();
    let bad = r#"@id("mode") forbid (principal, action == Gateway::Action::"fs.read", resource)
                 when { context.args.mode == "fast" };"#;
    let (status, body) = reload_with(&g, "args.cedar", bad).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.to_string().contains("mode"), "{body}");
    assert_eq!(g.gw.pep.current().hash, before);

    let (status, body) = reload_with(&g, "args.cedar", NO_ETC).await;
    assert_eq!(status, 200, "{body}");
    let good = g.gw.pep.current().hash.clone();

    // Deleting the server would remove the action the policy names, so
    // the next reload or start-up would fail: the delete is refused,
    // naming the policy, and nothing changes.
    let path = format!(
        "/admin/orgs/acme/mcp-servers/{}",
        server["id"].as_str().unwrap()
    );
    let (status, body) = g.admin(Method::DELETE, &path, None).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("fs.read"), "{body}");
    assert!(body.to_string().contains("no-etc-reads"), "{body}");
    assert_eq!(g.gw.pep.current().hash, good);
    assert!(g.gw.pep.current().typed.contains_key("fs.read"));

    // Removing the policy lets the delete through; the tool is gone for
    // the org and its action from the set.
    std::fs::remove_file(g.gw.config.policies_dir.join("args.cedar")).unwrap();
    let (status, body) = g.admin(Method::POST, "/admin/policies/reload", None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = g.admin(Method::DELETE, &path, None).await;
    assert_eq!(status, 204, "{body}");
    wait_typed(&g, "fs.read", false).await;
    let gone = call(&g, &t, "fs.read", json!({"path": "/tmp/x"})).await;
    assert_eq!(gone["error"]["code"], -32601, "{gone}");
    let ready: Value = g
        .http
        .get(format!("{}/readyz", g.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(ready.get("policyReloadRejected").is_none(), "{ready}");
}

#[tokio::test]
async fn a_changed_definition_is_held_by_the_background_refresh_and_recorded() {
    let (g, _dir) = gateway(1).await;
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    let server = register(&g, "acme", "fs", "streamable-http", &up.url).await;
    let id = server["id"].as_str().unwrap().to_string();
    let old_hash = server["tools"][0]["hash"].as_str().unwrap().to_string();
    wait_typed(&g, "fs.read", true).await;

    // The upstream adds an argument; nobody asks for a refresh.
    up.list(json!([read_tool(true)]));
    let path = format!("/admin/orgs/acme/mcp-servers/{id}");
    let mut shown = Value::Null;
    for _ in 0..100 {
        shown = g.admin(Method::GET, &path, None).await.1;
        if shown["tools"][0]["status"] == "held" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(shown["tools"][0]["status"], "held", "{shown}");
    let new_hash = shown["tools"][0]["held"]["hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new_hash, old_hash);
    let held = call(&g, &t, "fs.read", json!({"path": "/tmp/x"})).await;
    assert_eq!(held["error"]["code"], -32601, "{held}");
    assert!(up.calls().is_empty());

    // One trail event, however many refreshes saw the change.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let events: Vec<_> = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| d.record.action == "upstream_tool_held")
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0].record;
    assert_eq!(e.decision, "event");
    assert_eq!(e.principal, r#"Gateway::McpServer::"fs""#);
    assert_eq!(e.resource, r#"Gateway::Tool::"fs.read""#);
    assert_eq!(e.org_id.as_deref(), Some("acme"));
    let outcome: Value = serde_json::from_str(&e.outcome).unwrap();
    assert_eq!(outcome["oldHash"], old_hash.as_str());
    assert_eq!(outcome["newHash"], new_hash.as_str());
    assert_eq!(outcome["trigger"], "background-refresh");
    assert_eq!(outcome["upstream"], id.as_str());

    // Held, the new argument types nothing: a policy on it is refused.
    let on_mode = r#"@id("no-fast") forbid (principal, action == Gateway::Action::"fs.read", resource)
                     when { context.args.mode == "fast" };"#;
    let (status, body) = reload_with(&g, "mode.cedar", on_mode).await;
    assert_eq!(status, 422, "{body}");

    // Approved, it is recorded too, and the new type arrives.
    let (status, body) = approve_all(&g, &path).await;
    assert_eq!(status, 200, "{body}");
    for _ in 0..200 {
        if g.admin(Method::POST, "/admin/policies/reload", None)
            .await
            .0
            == 200
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let denied = call(&g, &t, "fs.read", json!({"path": "/tmp/x", "mode": "fast"})).await;
    assert_eq!(denied["error"]["code"], -32003, "{denied}");
    let allowed = call(&g, &t, "fs.read", json!({"path": "/tmp/x", "mode": "safe"})).await;
    assert!(allowed.get("result").is_some(), "{allowed}");
    assert_eq!(up.calls().len(), 1);

    let decisions = g.decisions().await;
    let approved: Vec<_> = decisions
        .iter()
        .filter(|d| d.record.action == "upstream_tool_approved")
        .collect();
    assert_eq!(approved.len(), 1);
    let outcome: Value = serde_json::from_str(&approved[0].record.outcome).unwrap();
    assert_eq!(outcome["oldHash"], old_hash.as_str());
    assert_eq!(outcome["newHash"], new_hash.as_str());
    assert_eq!(outcome["trigger"], "approve");

    // The chain holds the events and verifies; replay skips them.
    let verified =
        g.gw.store
            .read(cedargate::store::decisions::verify)
            .await
            .unwrap();
    assert!(verified.problems.is_empty(), "{:?}", verified.problems);
    let report =
        g.gw.store
            .read(|c| {
                Ok(cedargate::replay::replay(
                    c,
                    &cedargate::store::audit_query::DecisionFilter::default(),
                    &cedargate::replay::Against::Recorded,
                ))
            })
            .await
            .unwrap()
            .unwrap();
    assert_eq!(report.events, 2);
    assert!(report.unreplayable.is_empty(), "{:?}", report.unreplayable);
    assert_eq!(report.flip_count(), 0);
}

/// An approval and refreshes that overlap it: every refresh read the row
/// before or after the approval, and none may put the approved definition
/// back on hold (a refresh that read the pins before the approval and
/// stored after it used to). Ten rounds, each holding a new definition
/// and approving it while four refreshes run back to back.
#[tokio::test]
async fn an_approval_is_not_undone_by_refreshes_that_overlap_it() {
    let (g, _dir, t, up, path) = with_fs().await;
    let refresh = format!("{path}/refresh");
    for round in 0..10 {
        up.list(json!([read_tool(round % 2 == 0)]));
        let (status, held) = g.admin(Method::POST, &refresh, None).await;
        assert_eq!(status, 200, "{held}");
        assert_eq!(held["tools"][0]["status"], "held", "round {round}: {held}");
        let new_hash = held["tools"][0]["held"]["hash"].clone();

        let approved = std::sync::atomic::AtomicBool::new(false);
        let racer = || async {
            let mut refreshed = 0;
            while !approved.load(std::sync::atomic::Ordering::SeqCst) || refreshed == 0 {
                let (status, body) = g.admin(Method::POST, &refresh, None).await;
                assert_eq!(status, 200, "{body}");
                refreshed += 1;
            }
        };
        let approve = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let (status, body) = approve_all(&g, &path).await;
            approved.store(true, std::sync::atomic::Ordering::SeqCst);
            (status, body)
        };
        let (_, _, _, _, (status, body)) =
            tokio::join!(racer(), racer(), racer(), racer(), approve);
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["approved"], 1, "{body}");

        let (_, shown) = g.admin(Method::GET, &path, None).await;
        assert_eq!(
            shown["tools"][0]["status"], "approved",
            "round {round}: {shown}"
        );
        assert_eq!(
            shown["tools"][0]["hash"], new_hash,
            "round {round}: {shown}"
        );
    }
    // Once the policies are typed with the last approved definition (the
    // registry change retypes them in the background; a call whose
    // arguments do not fit the active types fails closed), it answers.
    let mut answered = Value::Null;
    for _ in 0..100 {
        g.admin(Method::POST, "/admin/policies/reload", None).await;
        answered = call(&g, &t, "fs.read", json!({"path": "/tmp/x"})).await;
        if answered.get("result").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered.get("result").is_some(), "{answered}");
}

/// An approval naming the held hash it reviewed approves only that
/// definition: once a refresh holds a newer one, it is refused (409) and
/// nothing is approved until the newer one is named.
#[tokio::test]
async fn an_approval_naming_a_reviewed_hash_refuses_a_newer_held_definition() {
    let (g, _dir, t, up, path) = with_fs().await;
    let held_hash = |body: &Value| {
        body["tools"][0]["held"]["hash"]
            .as_str()
            .unwrap()
            .to_string()
    };

    up.list(json!([read_tool(true)]));
    let (_, reviewed) = g
        .admin(Method::POST, &format!("{path}/refresh"), None)
        .await;
    let reviewed = held_hash(&reviewed);
    let mut newer = read_tool(true);
    newer["description"] = "Reads a file and sends it elsewhere".into();
    up.list(json!([newer]));
    let (_, now) = g
        .admin(Method::POST, &format!("{path}/refresh"), None)
        .await;
    let now = held_hash(&now);
    assert_ne!(now, reviewed);

    let approve = format!("{path}/approve");
    let body = json!({"tools": ["fs.read"], "heldHashes": {"fs.read": reviewed}});
    let (status, refused) = g.admin(Method::POST, &approve, Some(body)).await;
    assert_eq!(status, 409, "{refused}");
    assert!(refused.to_string().contains(&now), "{refused}");
    let (_, shown) = g.admin(Method::GET, &path, None).await;
    assert_eq!(shown["tools"][0]["status"], "held", "{shown}");
    let held = call(&g, &t, "fs.read", json!({"path": "/tmp/x"})).await;
    assert_eq!(held["error"]["code"], -32601, "{held}");
    let approved_events = |d: &[cedargate::store::decisions::StoredDecision]| {
        d.iter()
            .filter(|d| d.record.action == "upstream_tool_approved")
            .count()
    };
    assert_eq!(approved_events(&g.decisions().await), 0);

    // A tool that holds nothing refuses any hash.
    let body = json!({"heldHashes": {"nope": now}});
    let (status, refused) = g.admin(Method::POST, &approve, Some(body)).await;
    assert_eq!(status, 409, "{refused}");

    let body = json!({"tools": ["read"], "heldHashes": {"read": now}});
    let (status, body) = g.admin(Method::POST, &approve, Some(body)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["approved"], 1, "{body}");
    assert_eq!(body["tools"][0]["hash"], now.as_str(), "{body}");
    assert_eq!(approved_events(&g.decisions().await), 1);
}

#[tokio::test]
async fn two_orgs_share_a_typed_action_only_when_their_tools_agree() {
    let (g, _dir) = gateway(0).await;
    g.tenant("acme").await;
    g.tenant("globex").await;
    let a = Upstream::start().await;
    let b = Upstream::start().await;
    register(&g, "acme", "fs", "streamable-http", &a.url).await;
    register(&g, "globex", "fs", "streamable-http", &b.url).await;
    wait_typed(&g, "fs.read", true).await;

    // globex's server now types `read` differently: the name is untyped
    // for both (neither org's arguments are read with the other's types).
    b.list(json!([read_tool(true)]));
    let (status, body) = g
        .admin(Method::GET, "/admin/orgs/globex/mcp-servers", None)
        .await;
    assert_eq!(status, 200, "{body}");
    let id = body["servers"][0]["id"].as_str().unwrap().to_string();
    let path = format!("/admin/orgs/globex/mcp-servers/{id}");
    g.admin(Method::POST, &format!("{path}/refresh"), None)
        .await;
    // Held: nothing changes yet.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(typed_tools(&g).await.contains(&"fs.read".to_string()));
    let (status, body) = approve_all(&g, &path).await;
    assert_eq!(status, 200, "{body}");
    wait_typed(&g, "fs.read", false).await;
}

#[tokio::test]
async fn list_changed_on_the_upstream_stream_triggers_a_refresh() {
    let (g, _dir) = gateway(0).await;
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    let server = register(&g, "acme", "fs", "sse", &up.sse_url).await;
    let id = server["id"].as_str().unwrap().to_string();
    // A call opens the upstream session and its stream.
    let first = call(&g, &t, "fs.read", json!({"path": "/tmp/a"})).await;
    assert!(first.get("result").is_some(), "{first}");

    up.list(json!([read_tool(true)]));
    let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    for _ in 0..3 {
        assert!(up.push(&note).await >= 1, "no open stream");
    }
    let path = format!("/admin/orgs/acme/mcp-servers/{id}");
    let mut shown = Value::Null;
    for _ in 0..100 {
        shown = g.admin(Method::GET, &path, None).await.1;
        if shown["tools"][0]["status"] == "held" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(shown["tools"][0]["status"], "held", "{shown}");
    let events: Vec<_> = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| d.record.action == "upstream_tool_held")
        .collect();
    assert_eq!(events.len(), 1);
    let outcome: Value = serde_json::from_str(&events[0].record.outcome).unwrap();
    assert_eq!(outcome["trigger"], "list-changed");
}

#[tokio::test]
async fn a_restart_types_the_stored_pins_before_the_first_set_is_loaded() {
    let (g, policies_dir) = gateway(0).await;
    let t = g.tenant("acme").await;
    let up = Upstream::start().await;
    register(&g, "acme", "fs", "streamable-http", &up.url).await;
    wait_typed(&g, "fs.read", true).await;
    let (status, body) = reload_with(&g, "args.cedar", NO_ETC).await;
    assert_eq!(status, 200, "{body}");
    let hash = g.gw.pep.current().hash.clone();

    // The set names `fs.read`: it loads at start-up only if the stored pins
    // are typed before it is validated.
    let policies = g.gw.config.policies_dir.clone();
    let old_base = g.base.clone();
    let dir = g.stop().await.into_dir();
    let g = TestGateway::start_in(dir, move |c| {
        c.policies_dir = policies;
        c.lifecycle.watch = false;
        c.upstream_refresh.interval_secs = 0;
    })
    .await;
    assert_eq!(g.gw.pep.current().hash, hash);
    assert!(g.gw.pep.current().typed.contains_key("fs.read"));
    let t = Tenant {
        mcp_url: t.mcp_url.replace(&old_base, &g.base),
        ..t
    };
    let denied = call(&g, &t, "fs.read", json!({"path": "/etc/shadow"})).await;
    assert_eq!(denied["error"]["code"], -32003, "{denied}");
    assert!(up.calls().is_empty());
    drop(policies_dir);
}

/// Two instances on one PostgreSQL database: a registration and a deletion
/// through one retype the other's policy set within seconds.
#[tokio::test]
async fn a_registry_change_on_one_instance_retypes_the_other() {
    let schema = match common::pg::FreshSchema::new(&common::pg::shared_url()) {
        Ok(s) => s,
        Err(e) => {
            common::pg::skip_unless_ci(&e);
            return;
        }
    };
    let on = |url: String| {
        TestGateway::start_with(move |c| {
            c.database.url = Some(url);
            c.upstream_refresh.interval_secs = 0;
        })
    };
    let a = on(schema.url.clone()).await;
    let b = on(schema.url.clone()).await;
    a.tenant("acme").await;
    let up = Upstream::start().await;
    let server = register(&a, "acme", "fs", "streamable-http", &up.url).await;
    wait_typed(&b, "fs.read", true).await;
    let (status, _) = a
        .admin(
            Method::DELETE,
            &format!(
                "/admin/orgs/acme/mcp-servers/{}",
                server["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(status, 204);
    wait_typed(&b, "fs.read", false).await;
}

/// Approves every definition `path`'s server holds now, naming each held
/// hash (as an approval must).
async fn approve_all(g: &TestGateway, path: &str) -> (u16, Value) {
    let (_, shown) = g.admin(Method::GET, path, None).await;
    let held: serde_json::Map<String, Value> = shown["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["held"].is_object())
        .map(|t| {
            (
                t["name"].as_str().unwrap().into(),
                t["held"]["hash"].clone(),
            )
        })
        .collect();
    let body = json!({ "heldHashes": held });
    g.admin(Method::POST, &format!("{path}/approve"), Some(body))
        .await
}
