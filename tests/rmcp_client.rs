//! End to end with a third-party MCP client: the official Rust SDK (`rmcp`)
//! speaks Streamable HTTP to the real gateway, authenticating with the
//! tenant's bearer key, and sees both allowed tool calls and a Cedar deny
//! surfaced as a JSON-RPC -32003 error carrying the decision id and advice.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::{Tenant, TestGateway, copy_policies};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ErrorCode, ProtocolVersion, ServerPeerInfo, Tool,
};
use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::{Map, Value, json};

/// The observation stored and then recalled.
const CONTENT: &str =
    "Retry the flaky websocket handshake with exponential backoff before filing a connection bug.";

/// A policy that freezes memory writes while leaving the tool visible.
const FREEZE_POLICY: &str = r#"
@id("no-remember")
@advice("memory writes are frozen")
forbid (principal, action in Gateway::Action::"call_tool", resource == Gateway::Tool::"af_memory_remember");
"#;

/// Connects an rmcp client to the tenant's session: `initialize` and
/// `notifications/initialized` over Streamable HTTP with the bearer key.
async fn connect(t: &Tenant) -> Result<RunningService<RoleClient, ()>, ClientInitializeError> {
    // rmcp adds the `Bearer ` prefix itself.
    let config =
        StreamableHttpClientTransportConfig::with_uri(t.mcp_url.clone()).auth_header(t.key.clone());
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
}

/// What `initialize` answered, as rmcp recorded it.
fn assert_initialized(info: Option<&ServerPeerInfo>) {
    assert!(info.is_some(), "rmcp recorded no initialize result");
    if let Some(info) = info {
        // rmcp asks for a newer revision than the gateway speaks; the
        // gateway answers with its newest one, which rmcp accepts.
        assert_eq!(
            info.protocol_version,
            ProtocolVersion::V_2025_11_25,
            "{info:?}"
        );
        assert_eq!(
            info.server_info.as_ref().map(|s| s.name.as_str()),
            Some("cedargate"),
            "{info:?}"
        );
        assert!(info.capabilities.tools.is_some(), "{info:?}");
    }
}

fn args<const N: usize>(pairs: [(&str, Value); N]) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn remember_params() -> CallToolRequestParams {
    CallToolRequestParams::new("af_memory_remember").with_arguments(args([
        ("content", json!(CONTENT)),
        ("type", json!("pattern")),
        ("confidence", json!(0.8)),
    ]))
}

fn recall_params() -> CallToolRequestParams {
    CallToolRequestParams::new("af_memory_recall").with_arguments(args([
        ("query", json!("websocket handshake backoff")),
        ("workType", json!("bug_fix")),
    ]))
}

/// The concatenated text parts of a tool result.
fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text())
        .map(|t| t.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn tool_names(tools: &[Tool]) -> Vec<&str> {
    tools.iter().map(|t| t.name.as_ref()).collect()
}

#[tokio::test]
async fn rmcp_client_initializes_lists_remembers_and_recalls() {
    let gw = TestGateway::start().await;
    let t = gw.tenant("acme").await;

    // Without the key the gateway refuses the handshake: 401 with
    // `WWW-Authenticate: Bearer`, which rmcp reports as AuthRequired.
    let anonymous = ().serve(StreamableHttpClientTransport::from_uri(t.mcp_url.clone())).await;
    let refused = match anonymous {
        Ok(_) => panic!("initialize without a key must fail"),
        Err(e) => format!("{e:?}"),
    };
    assert!(refused.contains("AuthRequired"), "{refused}");

    let client = connect(&t).await.unwrap();
    assert_initialized(client.peer_info().as_deref());

    let tools = client.list_all_tools().await.unwrap();
    let names = tool_names(&tools);
    assert!(names.contains(&"af_memory_recall"), "{names:?}");
    assert!(names.contains(&"af_memory_remember"), "{names:?}");

    let stored = client.call_tool(remember_params()).await.unwrap();
    assert_ne!(stored.is_error, Some(true), "{stored:?}");
    assert!(
        text_of(&stored).starts_with("Stored observation "),
        "{stored:?}"
    );
    let sc = stored
        .structured_content
        .as_ref()
        .expect("structuredContent on 2025-11-25");
    assert_eq!(sc["stored"], json!(true), "{sc}");
    assert_eq!(sc["type"], json!("pattern"), "{sc}");
    assert_eq!(sc["confidence"], json!(0.8), "{sc}");
    let id = sc["id"].as_str().expect("observation id").to_string();

    let recalled = client.call_tool(recall_params()).await.unwrap();
    assert_ne!(recalled.is_error, Some(true), "{recalled:?}");
    let text = text_of(&recalled);
    assert!(
        text.contains(CONTENT),
        "recall text lacks the stored content: {text}"
    );
    let sc = recalled
        .structured_content
        .as_ref()
        .expect("structuredContent on 2025-11-25");
    assert_eq!(sc["workType"], json!("bug_fix"), "{sc}");
    assert_eq!(sc["tokenBudget"], json!(2000), "{sc}");
    assert_eq!(sc["observations"][0]["id"], json!(id), "{sc}");
    assert_eq!(sc["observations"][0]["content"], json!(CONTENT), "{sc}");

    client.cancel().await.unwrap();
    gw.stop().await;
}

#[tokio::test]
async fn rmcp_client_sees_a_cedar_deny_as_32003_with_decision_and_advice() {
    let policies_root = tempfile::tempdir().unwrap();
    let policies = copy_policies(policies_root.path());
    std::fs::write(policies.join("freeze-memory.cedar"), FREEZE_POLICY).unwrap();
    let gw = TestGateway::start_with(|c| c.policies_dir = policies.clone()).await;
    let t = gw.tenant("acme").await;

    let client = connect(&t).await.unwrap();
    assert_initialized(client.peer_info().as_deref());

    // The forbid covers call_tool only: the tool stays listed.
    let tools = client.list_all_tools().await.unwrap();
    let names = tool_names(&tools);
    assert!(names.contains(&"af_memory_remember"), "{names:?}");

    let err = match client.call_tool(remember_params()).await {
        Err(ServiceError::McpError(e)) => e,
        other => panic!("expected a JSON-RPC error from af_memory_remember, got {other:?}"),
    };
    assert_eq!(err.code, ErrorCode(-32003), "{err:?}");
    assert!(err.message.contains("not authorized"), "{err:?}");
    let data = err.data.as_ref().expect("error.data");
    let decision_id = data["decisionId"]
        .as_str()
        .expect("error.data.decisionId")
        .to_string();
    assert!(!decision_id.is_empty(), "{data}");
    assert_eq!(data["tool"], json!("af_memory_remember"), "{data}");
    let advice = data["advice"].as_array().expect("error.data.advice array");
    assert!(
        advice.iter().any(|a| a == "memory writes are frozen"),
        "{data}"
    );
    let reasons = data["reasons"]
        .as_array()
        .expect("error.data.reasons array");
    assert!(reasons.iter().any(|r| r == "no-remember"), "{data}");

    // The session survives the error and nothing was stored.
    let recalled = client.call_tool(recall_params()).await.unwrap();
    assert_ne!(recalled.is_error, Some(true), "{recalled:?}");
    assert!(!text_of(&recalled).contains(CONTENT), "{recalled:?}");

    client.cancel().await.unwrap();

    let decisions = gw.decisions().await;
    let deny = decisions
        .iter()
        .find(|d| d.record.id == decision_id)
        .unwrap_or_else(|| panic!("no decision record {decision_id}"));
    assert_eq!(deny.record.action, "call_tool", "{deny:?}");
    assert_eq!(deny.record.decision, "deny", "{deny:?}");
    assert!(
        deny.record.resource.contains("af_memory_remember"),
        "{deny:?}"
    );
    let deny_reasons: Vec<String> = serde_json::from_str(&deny.record.reasons).unwrap();
    assert!(deny_reasons.iter().any(|r| r == "no-remember"), "{deny:?}");
    assert!(
        decisions.iter().any(|d| d.record.action == "call_tool"
            && d.record.decision == "deny"
            && d.record.reasons.contains("no-remember")),
        "no call_tool deny citing no-remember in {decisions:?}"
    );

    gw.stop().await;
}
