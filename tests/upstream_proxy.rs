//! An upstream the environment routes through a proxy is still reached
//! through it: POSTs to upstreams normally skip reqwest (`src/upstream/
//! http.rs`), and those an `HTTP_PROXY` intercepts must not. The real
//! binary runs with `HTTP_PROXY` naming a forwarding proxy started here,
//! in front of a small MCP upstream also started here; registration and
//! a governed call must both go through the proxy.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::cli::{banner, bin, write_config};
use common::repo;
use serde_json::{Value, json};

const ADMIN: &str = "proxy-test-admin-0123456789abcdef0123";

/// A minimal MCP server of the 2025-06-18 revision with one tool, `echo`.
async fn upstream(body: String) -> Response {
    let msg: Value = serde_json::from_str(&body).unwrap();
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response(); // a notification
    };
    let result = match msg["method"].as_str().unwrap() {
        "initialize" => json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "behind-a-proxy", "version": "1"},
        }),
        "tools/list" => json!({"tools": [{
            "name": "echo",
            "description": "Echoes its text.",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        }]}),
        "tools/call" => json!({
            "content": [{"type": "text", "text": msg["params"]["arguments"]["text"]}],
        }),
        other => {
            let error = json!({"code": -32601, "message": format!("no method {other}")});
            return axum::Json(json!({"jsonrpc": "2.0", "id": id, "error": error})).into_response();
        }
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

/// A forwarding HTTP proxy: records each request line it is asked for
/// (absolute-form, as clients send to a proxy) and forwards it.
async fn proxy(State(seen): State<Arc<Mutex<Vec<String>>>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body: Bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let method = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|m| m["method"].as_str().map(str::to_string))
        .unwrap_or_default();
    seen.lock()
        .unwrap()
        .push(format!("{} {} {method}", parts.method, parts.uri));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut out = client
        .request(parts.method, parts.uri.to_string())
        .body(body);
    for name in [
        "content-type",
        "accept",
        "mcp-protocol-version",
        "mcp-session-id",
    ] {
        if let Some(v) = parts.headers.get(name) {
            out = out.header(name, v);
        }
    }
    let answer = out.send().await.unwrap();
    let mut headers = HeaderMap::new();
    for name in ["content-type", "mcp-session-id"] {
        if let Some(v) = answer.headers().get(name) {
            headers.insert(name, v.clone());
        }
    }
    let status = answer.status();
    (status, headers, answer.bytes().await.unwrap()).into_response()
}

/// Serves `app` on an ephemeral port; its `http://127.0.0.1:PORT`.
async fn start(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test]
async fn an_upstream_behind_the_environments_proxy_is_reached_through_it() {
    let up = start(axum::Router::new().route("/mcp", axum::routing::post(upstream))).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let via = start(axum::Router::new().fallback(proxy).with_state(seen.clone())).await;

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &repo().join("policies"));
    let mut cmd = bin();
    for var in [
        "NO_PROXY",
        "no_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env_remove(var);
    }
    let mut child = cmd
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .env("HTTP_PROXY", &via)
        .env("http_proxy", &via)
        .env("CEDARGATE_ADMIN_TOKEN", ADMIN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (mcp_url, key) = banner(&mut child);
    let served = Guard(child);
    let base = mcp_url.split("/api/mcp/").next().unwrap().to_string();

    // The gateway lists the upstream's tools as it registers it.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let registered = http
        .post(format!("{base}/admin/orgs/demo/mcp-servers"))
        .bearer_auth(ADMIN)
        .json(
            &json!({"name": "proxied", "transport": "streamable-http", "url": format!("{up}/mcp")}),
        )
        .send()
        .await
        .unwrap();
    let status = registered.status();
    let body: Value = registered.json().await.unwrap();
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["health"], "healthy", "{body}");

    let answer: Value = http
        .post(&mcp_url)
        .bearer_auth(&key)
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "proxied.echo", "arguments": {"text": "via the proxy"}}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        answer["result"]["content"][0]["text"], "via the proxy",
        "{answer}"
    );

    // The messages went through the proxy, addressed to the upstream.
    let seen = seen.lock().unwrap().clone();
    for method in ["initialize", "tools/list", "tools/call"] {
        let line = format!("POST {up}/mcp {method}");
        assert!(seen.contains(&line), "no `{line}` in {seen:?}");
    }
    drop(served);
    common::drop_database_of(dir.path());
}

/// Kills the served binary when the test ends, passed or not.
struct Guard(std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
