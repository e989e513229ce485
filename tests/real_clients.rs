//! End to end with the MCP clients people run, against the real gateway:
//! the official TypeScript SDK (`@modelcontextprotocol/sdk`) over Streamable
//! HTTP and over HTTP+SSE, the official Python SDK (`mcp` 2.x, which probes
//! `server/discover` and speaks 2026-07-28 where it is answered, else falls
//! back to `initialize`) over both, and the MCP Inspector CLI over
//! Streamable HTTP with an `Authorization` header.
//! Each reaches the gateway, lists tools, stores an observation with its bearer key,
//! and sees -32003 for a recall a policy forbids; the gateway's trail holds
//! the matching deny.
//!
//! The clients are installed at pinned versions by `tests/clients/install.sh`
//! (run by `.ci/run`, and here when missing). Without network, outside CI,
//! the tests skip loudly; with `CI=true` a failed install fails them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::clients::{Run, run, summary};
use common::setup::{clients_dir, clients_installed as installed};

use std::path::PathBuf;

use common::{Tenant, TestGateway};
use serde_json::Value;

/// Denies recall for everyone: the call every client must see fail with -32003.
const DENY_RECALL: &str = r#"
@id("no-recall")
@advice("recall is disabled for this test")
forbid (principal, action in Gateway::Action::"call_tool", resource == Gateway::Tool::"af_memory_recall");
"#;

/// A gateway whose policies deny recall, and one tenant.
async fn gateway() -> (TestGateway, Tenant) {
    let g = TestGateway::start_with_policy("deny-recall.cedar", DENY_RECALL).await;
    let t = g.tenant("acme").await;
    (g, t)
}

/// The gateway side of a client's run: the deny the client was told about
/// is in the trail, citing the policy, and the allowed write was stored.
async fn assert_trail(g: &TestGateway, decision_id: &str) {
    let decisions = g.decisions().await;
    let deny = decisions
        .iter()
        .find(|d| d.record.id == decision_id)
        .unwrap_or_else(|| panic!("decision {decision_id} is not in the trail"));
    assert_eq!(deny.record.action, "call_tool");
    assert_eq!(deny.record.decision, "deny");
    assert!(
        deny.record.resource.contains("af_memory_recall"),
        "{deny:?}"
    );
    assert!(deny.record.reasons.contains("no-recall"), "{deny:?}");
    assert!(
        decisions.iter().any(|d| d.record.action == "call_tool"
            && d.record.decision == "allow"
            && d.record.resource.contains("af_memory_remember")),
        "the remember call is recorded"
    );
    assert_eq!(g.count("observations").await, 1);
}

/// What every SDK client must have seen.
fn assert_sdk_summary(s: &Value) {
    assert_eq!(s["serverInfo"]["name"], "cedargate", "{s}");
    let tools: Vec<&str> = s["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{s}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(tools.contains(&"af_memory_recall"), "{s}");
    assert!(tools.contains(&"af_memory_remember"), "{s}");
    assert_eq!(s["remember"]["isError"], false, "{s}");
    assert!(
        s["remember"]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Stored observation ")),
        "{s}"
    );
    assert_eq!(s["recall"]["code"], -32003, "{s}");
    assert!(
        s["recall"]["data"]["reasons"]
            .as_array()
            .is_some_and(|r| r.iter().any(|x| x == "no-recall")),
        "{s}"
    );
}

fn decision_id(s: &Value) -> String {
    s["recall"]["data"]["decisionId"]
        .as_str()
        .unwrap_or_else(|| panic!("no decision id in {s}"))
        .to_string()
}

async fn typescript(transport: &str) {
    if !installed() {
        return;
    }
    let (g, t) = gateway().await;
    let home = tempfile::tempdir().unwrap();
    let node = PathBuf::from("node");
    let run = run(
        &node,
        &["ts_client.mjs", transport, &t.mcp_url, &t.key],
        &[],
        home.path(),
    )
    .await;
    let s = summary(&run);
    assert_sdk_summary(&s);
    // The SDK asks for the newest revision, which the gateway speaks.
    assert_eq!(s["protocolVersion"], "2025-11-25", "{s}");
    assert!(s["remember"]["structured"]["id"].is_string(), "{s}");
    if transport == "http" {
        assert_eq!(s["sessionId"], t.session_id.as_str(), "Mcp-Session-Id: {s}");
        assert_eq!(s["terminated"], true, "DELETE accepted: {s}");
    }
    assert_trail(&g, &decision_id(&s)).await;
    g.stop().await;
}

#[tokio::test]
async fn typescript_sdk_over_streamable_http() {
    typescript("http").await;
}

#[tokio::test]
async fn typescript_sdk_over_http_sse() {
    typescript("sse").await;
}

async fn python(transport: &str, version: &str) -> Value {
    let (g, t) = gateway().await;
    let home = tempfile::tempdir().unwrap();
    let python = clients_dir().join(".venv/bin/python");
    let run = run(
        &python,
        &["py_client.py", transport, &t.mcp_url, &t.key],
        &[],
        home.path(),
    )
    .await;
    let s = summary(&run);
    assert_sdk_summary(&s);
    assert_eq!(s["protocolVersion"], version, "{s}");
    assert_trail(&g, &decision_id(&s)).await;
    g.stop().await;
    s
}

/// The JSON-RPC methods a Python run POSTed, with the status each got.
fn posts(s: &Value) -> Vec<(String, u64)> {
    s["posts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| Some((p["rpc"].as_str()?.to_string(), p["status"].as_u64()?)))
        .collect()
}

#[tokio::test]
async fn python_sdk_over_streamable_http_speaks_2026_07_28() {
    if !installed() {
        return;
    }
    let s = python("http", "2026-07-28").await;
    let posts = posts(&s);
    // mcp 2.x probes `server/discover` at 2026-07-28 first; the gateway
    // answers it, so the client stays at that revision: no `initialize`,
    // every request carries the version, and no session is ended.
    assert_eq!(
        posts.first(),
        Some(&("server/discover".to_string(), 200)),
        "{s}"
    );
    assert!(
        posts.iter().all(|p| p.0 != "initialize" && p.1 == 200),
        "{s}"
    );
    for p in s["posts"].as_array().unwrap() {
        if p["rpc"].is_string() {
            assert_eq!(p["protocolHeader"], "2026-07-28", "{p}");
        }
    }
    assert!(
        !s["posts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["method"] == "DELETE"),
        "{s}"
    );
}

#[tokio::test]
async fn python_sdk_over_http_sse_falls_back_from_discover() {
    if !installed() {
        return;
    }
    let s = python("sse", "2025-11-25").await;
    let posts = posts(&s);
    // On the stream the probe is answered -32601 (unknown method); every
    // POST is accepted with 202.
    assert_eq!(
        posts.first().map(|p| p.0.as_str()),
        Some("server/discover"),
        "{s}"
    );
    assert_eq!(
        posts.get(1).map(|p| p.0.as_str()),
        Some("initialize"),
        "{s}"
    );
    assert!(posts.iter().all(|p| p.1 == 202), "{s}");
}

#[tokio::test]
async fn inspector_cli_over_streamable_http_with_an_authorization_header() {
    if !installed() {
        return;
    }
    let (g, t) = gateway().await;
    let home = tempfile::tempdir().unwrap();
    let inspector = clients_dir().join("node_modules/.bin/mcp-inspector");
    let auth = format!("Authorization: Bearer {}", t.key);
    let base = [
        "--cli",
        t.mcp_url.as_str(),
        "--transport",
        "http",
        "--header",
        auth.as_str(),
    ];
    let with = |extra: &[&'static str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        a
    };

    let listed = run(
        &inspector,
        &with(&["--method", "tools/list"]),
        &[],
        home.path(),
    )
    .await;
    let tools: Value = serde_json::from_str(&summary_text(&listed)).unwrap();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"af_memory_remember"), "{tools}");
    assert!(names.contains(&"af_memory_recall"), "{tools}");

    let stored = run(
        &inspector,
        &with(&[
            "--method",
            "tools/call",
            "--tool-name",
            "af_memory_remember",
            "--tool-arg",
            "content=the inspector was here",
            "type=pattern",
        ]),
        &[],
        home.path(),
    )
    .await;
    let result: Value = serde_json::from_str(&summary_text(&stored)).unwrap();
    assert_eq!(result["isError"], false, "{result}");
    assert!(result["structuredContent"]["id"].is_string(), "{result}");

    // The Inspector CLI prints a denied call's message but not its code, so
    // its HTTP responses are recorded as it received them (wiretap.mjs).
    let tap = home.path().join("wire.jsonl");
    let tap_str = tap.to_str().unwrap();
    let preload = format!("--import={}", clients_dir().join("wiretap.mjs").display());
    let denied = run(
        &inspector,
        &with(&[
            "--method",
            "tools/call",
            "--tool-name",
            "af_memory_recall",
            "--tool-arg",
            "query=inspector",
            "workType=feature",
        ]),
        &[
            ("NODE_OPTIONS", preload.as_str()),
            ("WIRETAP_FILE", tap_str),
        ],
        home.path(),
    )
    .await;
    assert!(!denied.status.success(), "a denied call fails the command");
    assert!(
        denied
            .stderr
            .contains("call to `af_memory_recall` is not authorized for this session"),
        "{}",
        denied.stderr
    );
    let wire = std::fs::read_to_string(&tap).expect("the wiretap recorded the responses");
    let error = wire
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|l| serde_json::from_str::<Value>(l["body"].as_str()?).ok())
        .find(|b| b.get("error").is_some() && b["id"].is_number())
        .unwrap_or_else(|| panic!("no JSON-RPC error received: {wire}"));
    assert_eq!(error["error"]["code"], -32003, "{error}");
    let id = error["error"]["data"]["decisionId"].as_str().unwrap();
    assert_trail(&g, id).await;
    g.stop().await;
}

/// The stdout of a successful Inspector command.
fn summary_text(run: &Run) -> String {
    assert!(
        run.status.success(),
        "inspector failed ({}):\nstdout: {}\nstderr: {}",
        run.status,
        run.stdout,
        run.stderr
    );
    run.stdout.clone()
}
