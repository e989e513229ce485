//! The gateway fronting an upstream built with the official Python SDK
//! (`mcp` 2.x, `tests/upstreams/py_server.py`, installed with its pinned
//! requirements by `tests/upstreams/setup.sh`) over Streamable HTTP,
//! stateless with JSON answers, as a Python team would deploy one, spoken
//! to in the newest revision both sides support (2026-07-28): its
//! tools are listed through a governed session with their schemas, calls
//! answer the upstream's own results (`structuredContent` included), a
//! call a policy denies never reaches it, an argument the tool's schema
//! refuses is refused by the gateway before anything is sent, and an
//! argument the tool marks `x-mcp-header` travels as the header the
//! revision requires.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::setup::{upstreams_dir, upstreams_installed as installed};
use common::{Tenant, TestGateway};
use reqwest::Method;
use serde_json::{Value, json};

/// The Python server on a free port; killed when dropped.
struct PyServer {
    url: String,
    _child: tokio::process::Child,
}

impl PyServer {
    async fn start() -> PyServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = tokio::process::Command::new(upstreams_dir().join(".venv/bin/python"))
            .arg(upstreams_dir().join("py_server.py"))
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}/mcp");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the Python server never listened"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        PyServer { url, _child: child }
    }
}

const DENY_SHOUT: &str = r#"
@id("no-shouting")
forbid (principal, action, resource == Gateway::Tool::"py.shout");
"#;

async fn call(g: &TestGateway, t: &Tenant, name: &str, args: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": name, "arguments": args}});
    let (status, body) = g.mcp(t, body).await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn a_python_sdk_server_is_fronted_with_its_results_unchanged_and_denials_never_sent() {
    if !installed() {
        return;
    }
    let py = PyServer::start().await;
    let g = TestGateway::start_with_policy("no-shouting.cedar", DENY_SHOUT).await;
    let t = g.tenant("acme").await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "py", "transport": "streamable-http", "url": py.url})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    assert_eq!(server["health"], "healthy", "{server}");
    assert_eq!(server["toolCount"], 4);
    // The newest revision both sides speak: the SDK answers
    // `server/discover`, so the gateway speaks 2026-07-28 to it.
    assert_eq!(server["protocolVersion"], "2026-07-28", "{server}");

    // Listed with the upstream's schemas; the denied tool is not offered.
    let (status, list) = g
        .mcp(
            &t,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    assert_eq!(status, 200, "{list}");
    let tools = list["result"]["tools"].as_array().unwrap();
    let add = tools
        .iter()
        .find(|t| t["name"] == "py.add")
        .expect("py.add listed");
    assert_eq!(add["inputSchema"]["required"], json!(["a", "b"]));
    assert_eq!(add["inputSchema"]["properties"]["a"]["type"], "integer");
    assert!(tools.iter().any(|t| t["name"] == "py.calls_seen"));
    assert!(!tools.iter().any(|t| t["name"] == "py.shout"), "{list}");

    // The upstream's own result, structured content included.
    let sum = call(&g, &t, "py.add", json!({"a": 2, "b": 40})).await;
    assert_eq!(
        sum["result"]["structuredContent"],
        json!({"result": 42}),
        "{sum}"
    );
    assert_eq!(sum["result"]["content"][0]["text"], "42", "{sum}");

    // Denied: answered like an unknown tool, and never sent.
    let denied = call(&g, &t, "py.shout", json!({"text": "hi"})).await;
    assert_eq!(denied["error"]["code"], -32601, "{denied}");
    // Refused by the tool's schema before anything is sent.
    let invalid = call(&g, &t, "py.add", json!({"a": "two", "b": 40})).await;
    assert_eq!(invalid["error"]["code"], -32602, "{invalid}");
    let seen = call(&g, &t, "py.calls_seen", json!({})).await;
    assert_eq!(
        seen["result"]["structuredContent"],
        json!({"result": 1}),
        "only the allowed add reached the upstream: {seen}"
    );

    // An argument the tool marks `x-mcp-header` is mirrored as the
    // `Mcp-Param-Region` header the SDK checks (base64 when not ASCII).
    for region in ["eu-west", "zürich"] {
        let located = call(&g, &t, "py.locate", json!({"region": region})).await;
        assert_eq!(
            located["result"]["content"][0]["text"],
            format!("served from {region}"),
            "{located}"
        );
    }

    // Each call's decision is in the trail: the allowed call under
    // `call_tool`, the hidden tool's refusal under `view_tool`.
    let decided: Vec<_> = g
        .decisions()
        .await
        .into_iter()
        .map(|d| {
            (
                d.record.action.clone(),
                d.record.resource.clone(),
                d.record.decision.clone(),
            )
        })
        .collect();
    let has = |action: &str, tool: &str, decision: &str| {
        decided
            .iter()
            .any(|(a, r, d)| a == action && r.contains(tool) && d == decision)
    };
    assert!(has("call_tool", "\"py.add\"", "allow"), "{decided:?}");
    assert!(has("view_tool", "\"py.shout\"", "deny"), "{decided:?}");
    assert!(!has("call_tool", "\"py.shout\"", "allow"), "{decided:?}");
}
