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
//! revision requires. A tool that asks its user for input (the SDK's
//! `Elicit` resolver) round-trips through the gateway to the official
//! Python client: the caller's capabilities reach the server (-32021, as
//! HTTP 400, when it declared none), the `input_required` result reaches
//! the caller, and its retry is decided by Cedar again before its answer
//! travels upstream.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::modern::{modern, request};
use common::setup::{
    clients_dir, clients_installed, upstreams_dir, upstreams_installed as installed,
};
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
    let (g, t, server) = fronting(&py, DENY_SHOUT).await;
    assert_eq!(server["health"], "healthy", "{server}");
    assert_eq!(server["toolCount"], 5);
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

/// A gateway on the shipped policies plus `policy` in `extra.cedar`, with
/// the Python server registered for `acme` as `py` (its registration).
async fn fronting(py: &PyServer, policy: &str) -> (TestGateway, Tenant, Value) {
    let g = TestGateway::start_with_policy("extra.cedar", policy).await;
    let t = g.tenant("acme").await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "py", "transport": "streamable-http", "url": py.url})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    (g, t, server)
}

/// The `call_tool` records of `tool`, oldest first: (decision, outcome).
async fn calls_of(g: &TestGateway, tool: &str) -> Vec<(String, Value)> {
    let resource = format!("Gateway::Tool::\"{tool}\"");
    let mut calls: Vec<_> = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| d.record.action.contains("call_tool") && d.record.resource == resource)
        .map(|d| {
            let outcome = serde_json::from_str(&d.record.outcome).unwrap_or(Value::Null);
            (d.record.time.clone(), d.record.decision.clone(), outcome)
        })
        .collect();
    calls.sort_by(|a, b| a.0.cmp(&b.0));
    calls.into_iter().map(|(_, d, o)| (d, o)).collect()
}

/// The official Python client, declaring no elicitation and then answering
/// the server's question, calls `py.archive` through the gateway.
#[tokio::test]
async fn a_question_of_the_upstream_round_trips_to_the_python_client() {
    if !installed() || !clients_installed() {
        return;
    }
    let py = PyServer::start().await;
    let (g, t, _) = fronting(&py, "// none yet\n").await;
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(clients_dir().join(".venv/bin/python"))
            .arg(clients_dir().join("py_elicit.py"))
            .args([t.mcp_url.as_str(), t.key.as_str(), "py.archive"])
            .env("NO_PROXY", "127.0.0.1,localhost")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the Python client hung")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(s["protocolVersion"], "2026-07-28", "{s}");
    // Undeclared: the server's own -32021 reaches the client, naming what
    // it needs.
    assert_eq!(s["undeclared"]["code"], -32021, "{s}");
    assert!(
        s["undeclared"]["data"]["requiredCapabilities"]["elicitation"].is_object(),
        "{s}"
    );
    // Declared: the server's question reached the client's callback, and
    // its answer reached the server.
    assert_eq!(s["asked"], json!(["Archive n1?"]), "{s}");
    assert_eq!(s["declared"]["text"], "archived n1", "{s}");

    // Three allowed calls on the record: the refused one, the one that
    // asked, and the retry that carried the answer.
    let calls = calls_of(&g, "py.archive").await;
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(calls.iter().all(|(d, _)| d == "allow"), "{calls:?}");
    assert_eq!(calls[0].1["error"]["code"], -32021, "{calls:?}");
    assert_eq!(calls[1].1["inputRequired"], true, "{calls:?}");
    assert_eq!(
        calls[1].1["inputRequests"][0]["method"], "elicitation/create",
        "{calls:?}"
    );
    assert_eq!(
        calls[2].1["inputResponses"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(calls[2].1["status"], "completed", "{calls:?}");
}

const NO_ARCHIVING: &str = r#"
@id("no-archiving")
@advice("archiving is frozen")
forbid (principal, action in Gateway::Action::"call_tool", resource == Gateway::Tool::"py.archive");
"#;

/// Each round of a round trip is a call of its own: a policy that lands
/// between the question and the answer denies the retry, which never
/// reaches the server; and a caller of an older revision, which cannot be
/// asked, gets the server's refusal, not a question.
#[tokio::test]
async fn the_retry_carrying_an_answer_is_decided_again() {
    if !installed() {
        return;
    }
    let py = PyServer::start().await;
    let (g, t, _) = fronting(&py, "// none yet\n").await;
    let mut ask = request(
        1,
        "tools/call",
        json!({"name": "py.archive", "arguments": {"name": "n1"}}),
    );
    // Without the capability: the server's -32021, as HTTP 400.
    let refused = modern(&g, &t, &ask).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], -32021, "{}", refused.body);
    assert!(
        refused.body["error"]["data"]["requiredCapabilities"]["elicitation"].is_object(),
        "{}",
        refused.body
    );
    // With it: the question, as the server asked it.
    ask["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({"elicitation": {}});
    let asked = modern(&g, &t, &ask).await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    let result = &asked.body["result"];
    assert_eq!(result["resultType"], "input_required", "{}", asked.body);
    let (key, question) = result["inputRequests"]
        .as_object()
        .and_then(|r| r.iter().next())
        .expect("one input request");
    assert_eq!(question["method"], "elicitation/create");
    assert_eq!(question["params"]["message"], "Archive n1?");

    // Archiving is frozen before the answer comes back.
    std::fs::write(g.gw.config.policies_dir.join("extra.cedar"), NO_ARCHIVING).unwrap();
    let (status, body) = g.admin(Method::POST, "/admin/policies/reload", None).await;
    assert_eq!(status, 200, "{body}");
    let mut retry = ask.clone();
    retry["id"] = json!(2);
    retry["params"]["inputResponses"] =
        json!({ key.as_str(): {"action": "accept", "content": {"ok": true}} });
    retry["params"]["requestState"] = result["requestState"].clone();
    let denied = modern(&g, &t, &retry).await;
    assert_eq!(denied.body["error"]["code"], -32003, "{}", denied.body);
    assert_eq!(
        denied.body["error"]["data"]["reasons"],
        json!(["no-archiving"]),
        "{}",
        denied.body
    );
    let seen = call(&g, &t, "py.calls_seen", json!({})).await;
    assert_eq!(
        seen["result"]["structuredContent"],
        json!({"result": 0}),
        "the answer never reached the server: {seen}"
    );
    let calls = calls_of(&g, "py.archive").await;
    let verdicts: Vec<&str> = calls.iter().map(|(d, _)| d.as_str()).collect();
    assert_eq!(verdicts, ["allow", "allow", "deny"], "{calls:?}");

    // Thawed, the same retry completes.
    std::fs::write(g.gw.config.policies_dir.join("extra.cedar"), "// thawed\n").unwrap();
    let (status, body) = g.admin(Method::POST, "/admin/policies/reload", None).await;
    assert_eq!(status, 200, "{body}");
    let done = modern(&g, &t, &retry).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(
        done.body["result"]["resultType"], "complete",
        "{}",
        done.body
    );
    assert_eq!(
        done.body["result"]["content"][0]["text"], "archived n1",
        "{}",
        done.body
    );

    // A 2025-11-25 caller cannot be asked: it declares nothing per request,
    // so the server refuses it, and the refusal is what it gets.
    let legacy = call(&g, &t, "py.archive", json!({"name": "n2"})).await;
    assert_eq!(legacy["error"]["code"], -32021, "{legacy}");
}
