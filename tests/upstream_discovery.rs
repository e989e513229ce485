//! Registering upstream MCP servers the ways an operator does: by base
//! URL (the gateway reads `/.well-known/mcp.json` and stores the endpoint
//! it names, as servers shaped like seed 003 publish it: `GET
//! /.well-known/mcp.json`, then `POST /v1/mcp`), and with the `cedargate
//! mcp-server` commands. The upstream here is such a server, started in
//! the test; what it serves at the descriptor path is set per test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use common::TestGateway;
use common::cli::{bin, stderr, stdout};
use reqwest::Method;
use serde_json::{Value, json};

/// What the upstream serves at `/.well-known/mcp.json` (`None`: 404), and
/// how many MCP requests reached each path.
struct Relay {
    descriptor: Option<Value>,
    at_v1: AtomicUsize,
    at_root: AtomicUsize,
}

/// Starts the upstream; returns its base URL (`http://127.0.0.1:PORT`).
async fn start(descriptor: Option<Value>) -> (String, Arc<Relay>) {
    let relay = Arc::new(Relay {
        descriptor,
        at_v1: AtomicUsize::new(0),
        at_root: AtomicUsize::new(0),
    });
    let app = Router::new()
        .route("/.well-known/mcp.json", get(descriptor_of))
        .route("/v1/mcp", post(mcp_v1))
        .route("/", post(mcp_root))
        .with_state(Arc::clone(&relay));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), relay)
}

async fn descriptor_of(State(relay): State<Arc<Relay>>) -> Response {
    match &relay.descriptor {
        Some(d) => axum::Json(d.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn mcp_v1(State(relay): State<Arc<Relay>>, body: String) -> Response {
    relay.at_v1.fetch_add(1, Ordering::SeqCst);
    mcp(&body)
}

async fn mcp_root(State(relay): State<Arc<Relay>>, body: String) -> Response {
    relay.at_root.fetch_add(1, Ordering::SeqCst);
    mcp(&body)
}

/// A tools-only MCP server speaking 2025-11-25.
fn mcp(body: &str) -> Response {
    let msg: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let id = msg["id"].clone();
    let result = match msg["method"].as_str() {
        Some("initialize") => json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "relay", "version": "1"}}),
        Some("tools/list") => json!({"tools": [{
            "name": "capabilities_v1",
            "description": "What this instance supports.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": true}}]}),
        Some("tools/call") => json!({"content": [{"type": "text", "text": "continuity: on"}]}),
        // Notifications (`notifications/initialized`): accepted, as seed 003 does.
        _ => return StatusCode::NO_CONTENT.into_response(),
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

async fn register(g: &TestGateway, url: &str) -> (u16, Value) {
    g.admin(
        Method::POST,
        "/admin/orgs/acme/mcp-servers",
        Some(
            json!({"name": "Relay", "transport": "streamable-http", "url": url, "timeoutMs": 2000}),
        ),
    )
    .await
}

#[tokio::test]
async fn a_base_url_is_registered_through_its_well_known_descriptor() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let (base, relay) = start(Some(json!({
        "name": "relay", "endpoint": "/v1/mcp", "protocolVersions": ["2025-11-25"]})))
    .await;

    let (status, server) = register(&g, &format!("{base}/")).await;
    assert_eq!(status, 201, "{server}");
    assert_eq!(
        server["url"],
        format!("{base}/v1/mcp"),
        "the endpoint is stored"
    );
    assert_eq!(
        server["discoveredFrom"],
        format!("{base}/.well-known/mcp.json")
    );
    assert_eq!(server["toolCount"], 1);

    let answer = g.call_tool(&t, "relay.capabilities_v1", json!({})).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "continuity: on",
        "{answer}"
    );
    assert!(relay.at_v1.load(Ordering::SeqCst) > 0);
    assert_eq!(relay.at_root.load(Ordering::SeqCst), 0);

    // A URL with a path is the endpoint itself: no descriptor involved.
    let (status, direct) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(
                json!({"name": "Relay Direct", "transport": "streamable-http",
                        "url": format!("{base}/v1/mcp")}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{direct}");
    assert!(direct.get("discoveredFrom").is_none(), "{direct}");
}

#[tokio::test]
async fn a_descriptor_on_the_transports_list_shape_is_read_for_its_transport() {
    let g = TestGateway::start().await;
    g.tenant("acme").await;
    let (base, _relay) = start(Some(json!({"transports": [
        {"type": "sse", "endpoint": "/sse"},
        {"type": "streamable-http", "url": "/v1/mcp"}]})))
    .await;
    let (status, server) = register(&g, &base).await;
    assert_eq!(status, 201, "{server}");
    assert_eq!(server["url"], format!("{base}/v1/mcp"));
}

#[tokio::test]
async fn without_a_descriptor_the_base_url_is_the_endpoint() {
    let g = TestGateway::start().await;
    g.tenant("acme").await;
    let (base, relay) = start(None).await;
    let (status, server) = register(&g, &base).await;
    assert_eq!(status, 201, "{server}");
    assert_eq!(server["url"], format!("{base}/"));
    assert!(server.get("discoveredFrom").is_none());
    assert!(relay.at_root.load(Ordering::SeqCst) > 0);
}

#[tokio::test]
async fn a_descriptor_that_points_elsewhere_or_nowhere_is_refused_and_nothing_is_stored() {
    let g = TestGateway::start().await;
    g.tenant("acme").await;
    let refused = [
        json!({"endpoint": "https://collector.example/v1/mcp"}),
        json!({"endpoint": "/api/mcp/{sessionId}"}),
        json!({"name": "names no endpoint"}),
        json!({"transports": [{"type": "sse", "endpoint": "/sse"}]}),
    ];
    for descriptor in refused {
        let (base, relay) = start(Some(descriptor.clone())).await;
        let (status, body) = register(&g, &base).await;
        assert_eq!(status, 400, "{descriptor}: {body}");
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
            + body["message"].as_str().unwrap_or_default()
            + body.as_str().unwrap_or_default();
        assert!(message.contains(".well-known/mcp.json"), "{message}");
        assert_eq!(
            relay.at_v1.load(Ordering::SeqCst),
            0,
            "nothing was sent to MCP"
        );
        assert_eq!(relay.at_root.load(Ordering::SeqCst), 0);
    }
    // A base URL whose descriptor cannot be read at all.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let (status, body) = register(&g, &dead).await;
    assert_eq!(status, 400, "{body}");

    let (status, list) = g
        .admin(Method::GET, "/admin/orgs/acme/mcp-servers", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(list["servers"], json!([]), "nothing stored");
}

/// Runs `cedargate mcp-server ARGS --gateway <g>` with `token` as the
/// admin token; returns the exit code, the JSON printed and stderr.
fn cli(g: &TestGateway, token: Option<&str>, args: &[&str]) -> (i32, Value, String) {
    let mut cmd = bin();
    cmd.arg("mcp-server")
        .args(args)
        .args(["--gateway", &g.base])
        .env_remove("CEDARGATE_ADMIN_TOKEN")
        .env_remove("CEDARGATE_CONFIG");
    if let Some(t) = token {
        cmd.env("CEDARGATE_ADMIN_TOKEN", t);
    }
    let out = cmd.output().unwrap();
    let json = serde_json::from_str(&stdout(&out)).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), json, stderr(&out))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_server_commands_register_list_show_refresh_approve_and_remove() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let (base, _relay) = start(Some(json!({"endpoint": "/v1/mcp"}))).await;
    let token = Some(common::ADMIN_TOKEN);
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(&g, token, &args)
    };
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();

    let (code, added, err) = tokio::task::block_in_place(|| {
        run(s(&[
            "add",
            "--org",
            "acme",
            "--name",
            "Relay",
            "--url",
            &base,
            "--timeout-ms",
            "2000",
        ]))
    });
    assert_eq!(code, 0, "{err}");
    assert_eq!(added["url"], format!("{base}/v1/mcp"));
    assert_eq!(added["toolCount"], 1);
    let id = added["id"].as_str().unwrap().to_string();
    assert_eq!(
        g.tool_names(&t)
            .await
            .iter()
            .filter(|n| *n == "relay.capabilities_v1")
            .count(),
        1
    );

    let (code, listed, err) = tokio::task::block_in_place(|| run(s(&["list", "--org", "acme"])));
    assert_eq!(code, 0, "{err}");
    assert_eq!(listed["servers"][0]["id"], id.as_str());

    let (code, shown, err) =
        tokio::task::block_in_place(|| run(s(&["show", "--org", "acme", "--id", &id])));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        shown["tools"][0]["tool"], "relay.capabilities_v1",
        "{shown}"
    );
    assert_eq!(shown["tools"][0]["status"], "approved", "{shown}");
    assert_eq!(
        shown["tools"][0]["hash"].as_str().map(str::len),
        Some(64),
        "{shown}"
    );

    let (code, refreshed, err) =
        tokio::task::block_in_place(|| run(s(&["refresh", "--org", "acme", "--id", &id])));
    assert_eq!(code, 0, "{err}");
    assert_eq!(refreshed["heldChanges"], json!([]));

    // Nothing is held: the API's refusal is the command's error.
    let (code, _, err) = tokio::task::block_in_place(|| {
        run(s(&[
            "approve",
            "--org",
            "acme",
            "--id",
            &id,
            "--tool",
            "capabilities_v1",
        ]))
    });
    assert_eq!(code, 1);
    assert!(
        err.contains("400") && err.contains("capabilities_v1"),
        "{err}"
    );

    // Without the admin token nothing is sent; with a wrong one, 401.
    let (code, _, err) = tokio::task::block_in_place(|| cli(&g, None, &["list", "--org", "acme"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("CEDARGATE_ADMIN_TOKEN"), "{err}");
    let (code, _, err) =
        tokio::task::block_in_place(|| cli(&g, Some("wrong"), &["list", "--org", "acme"]));
    assert_eq!(code, 1);
    assert!(err.contains("401"), "{err}");

    let (code, _, err) =
        tokio::task::block_in_place(|| run(s(&["remove", "--org", "acme", "--id", &id])));
    assert_eq!(code, 0, "{err}");
    assert!(
        !g.tool_names(&t)
            .await
            .iter()
            .any(|n| n.starts_with("relay."))
    );
    let (_, listed, _) = tokio::task::block_in_place(|| run(s(&["list", "--org", "acme"])));
    assert_eq!(listed["servers"], json!([]));
}
