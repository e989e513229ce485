//! Upstream MCP servers over the legacy HTTP+SSE transport, against a
//! small legacy server started here, shaped like the `GET /sse` +
//! `POST /messages/` servers in the wild: its `endpoint` event names
//! `/messages/?session_id=…`; it answers most requests in the POST's own
//! body (JSON) and some on the event stream after a 202. It records every
//! `tools/call`. Covered: listing and calls both ways, a denied call that
//! sends nothing, an answer larger than the bound (the stream is closed,
//! the next call opens a new session), and an `endpoint` on another origin
//! (refused, nothing stored). `tests/upstream_everything.rs` runs the
//! reference server over SSE (stream drop, recovery, timeout).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use common::{Tenant, TestGateway};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

/// The legacy server's state.
#[derive(Default)]
struct Legacy {
    /// Open streams by session id.
    streams: Mutex<HashMap<String, UnboundedSender<Result<Bytes, std::io::Error>>>>,
    /// Streams opened.
    opened: AtomicUsize,
    /// `tools/call` names received.
    calls: Mutex<Vec<String>>,
    /// Whether the `endpoint` event names another origin.
    elsewhere: AtomicBool,
}

struct Server {
    url: String,
    state: Arc<Legacy>,
}

impl Server {
    async fn start() -> Server {
        let state = Arc::new(Legacy::default());
        let app = axum::Router::new()
            .route("/sse", axum::routing::get(stream))
            .route("/messages/", axum::routing::post(message))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Server {
            url: format!("http://{addr}/sse"),
            state,
        }
    }

    fn calls(&self) -> Vec<String> {
        self.state.calls.lock().unwrap().clone()
    }
}

fn event(name: &str, data: &str) -> Result<Bytes, std::io::Error> {
    Ok(Bytes::from(format!("event: {name}\ndata: {data}\n\n")))
}

async fn stream(State(s): State<Arc<Legacy>>) -> Response {
    let n = s.opened.fetch_add(1, Ordering::SeqCst);
    let sid = format!("s{n}");
    let (tx, rx) = unbounded_channel();
    let endpoint = if s.elsewhere.load(Ordering::SeqCst) {
        format!("http://127.0.0.2:1/messages/?session_id={sid}")
    } else {
        format!("/messages/?session_id={sid}")
    };
    tx.send(event("endpoint", &endpoint)).unwrap();
    s.streams.lock().unwrap().insert(sid, tx);
    let body = Body::from_stream(tokio_stream::wrappers::UnboundedReceiverStream::new(rx));
    ([("content-type", "text/event-stream")], body).into_response()
}

fn tools() -> Value {
    json!([
        {"name": "echo", "description": "Echoes",
         "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}},
         "annotations": {"readOnlyHint": true}},
        {"name": "streamed", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
        {"name": "wipe", "inputSchema": {"type": "object"}},
        {"name": "big", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}
    ])
}

async fn message(
    State(s): State<Arc<Legacy>>,
    Query(q): Query<HashMap<String, String>>,
    body: String,
) -> Response {
    let sid = q.get("session_id").cloned().unwrap_or_default();
    let Some(tx) = s.streams.lock().unwrap().get(&sid).cloned() else {
        return (StatusCode::NOT_FOUND, "Could not find session").into_response();
    };
    let msg: Value = serde_json::from_str(&body).unwrap();
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let answer = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
    let result = match msg["method"].as_str().unwrap() {
        "initialize" => json!({"protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                               "serverInfo": {"name": "legacy", "version": "1"}}),
        "tools/list" => json!({"tools": tools()}),
        "tools/call" => {
            let name = msg["params"]["name"].as_str().unwrap().to_string();
            s.calls.lock().unwrap().push(name.clone());
            let text = match name.as_str() {
                "big" => "x".repeat(5 * 1024 * 1024),
                _ => format!("{name}: {}", msg["params"]["arguments"]["message"]),
            };
            let result = json!({"content": [{"type": "text", "text": text}]});
            if name != "echo" {
                // Accepted here; answered on the stream.
                tx.send(event("message", &answer(result).to_string()))
                    .unwrap();
                return (StatusCode::ACCEPTED, "Accepted").into_response();
            }
            result
        }
        _ => {
            return axum::Json(json!({"jsonrpc": "2.0", "id": id,
                                      "error": {"code": -32601, "message": "Method not found"}}))
            .into_response();
        }
    };
    axum::Json(answer(result)).into_response()
}

const FORBID_WIPE: &str = r#"
@id("no-wipe")
forbid (principal, action in Gateway::Action::"call_tool", resource == Gateway::Tool::"legacy.wipe");
"#;

async fn setup() -> (TestGateway, Tenant, Server, Value) {
    let g = TestGateway::start_with_policy("extra.cedar", FORBID_WIPE).await;
    let t = g.tenant("acme").await;
    let up = Server::start().await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "legacy", "transport": "sse", "url": up.url, "timeoutMs": 5000})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    (g, t, up, server)
}

#[tokio::test]
async fn a_legacy_server_is_listed_and_called_in_the_post_body_and_on_the_stream() {
    let (g, t, up, server) = setup().await;
    assert_eq!(server["health"], "healthy", "{server}");
    assert_eq!(server["protocolVersion"], "2024-11-05");
    assert_eq!(server["toolCount"], 4);
    let names = g.tool_names(&t).await;
    for tool in ["legacy.echo", "legacy.streamed", "legacy.wipe"] {
        assert!(names.contains(&tool.to_string()), "{names:?}");
    }
    let body = g
        .call_tool(&t, "legacy.echo", json!({"message": "hi"}))
        .await;
    assert_eq!(
        body["result"],
        json!({"content": [{"type": "text", "text": "echo: \"hi\""}]}),
        "{body}"
    );
    let body = g
        .call_tool(&t, "legacy.streamed", json!({"message": "on"}))
        .await;
    assert_eq!(
        body["result"]["content"][0]["text"], "streamed: \"on\"",
        "{body}"
    );
    // A denied call sends nothing.
    let body = g.call_tool(&t, "legacy.wipe", json!({})).await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    assert_eq!(up.calls(), ["echo", "streamed"]);
    // One stream for the registration's listing, one for the calls.
    assert_eq!(up.state.opened.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_answer_larger_than_the_bound_fails_and_the_next_call_opens_a_new_session() {
    let (g, t, up, _) = setup().await;
    let body = g.call_tool(&t, "legacy.big", json!({})).await;
    assert_eq!(body["error"]["code"], -32203, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("larger than"),
        "{body}"
    );
    let body = g
        .call_tool(&t, "legacy.streamed", json!({"message": "again"}))
        .await;
    assert_eq!(
        body["result"]["content"][0]["text"], "streamed: \"again\"",
        "{body}"
    );
    assert_eq!(up.state.opened.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_endpoint_on_another_origin_is_refused_and_nothing_is_stored() {
    let g = TestGateway::start().await;
    g.tenant("acme").await;
    let up = Server::start().await;
    up.state.elsewhere.store(true, Ordering::SeqCst);
    let (status, body) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "legacy", "transport": "sse", "url": up.url})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("origin"), "{body}");
    let (_, listed) = g
        .admin(Method::GET, "/admin/orgs/acme/mcp-servers", None)
        .await;
    assert_eq!(listed["servers"], json!([]));
}
