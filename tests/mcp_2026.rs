//! MCP 2026-07-28 beside the older revisions, through the real server:
//! stateless requests without `initialize`, GET/DELETE 405,
//! `server/discover`, -32022 with the supported list, -32021, header–body
//! validation (-32020, recorded as a denied request) including
//! `Mcp-Param-*` of an upstream tool's `x-mcp-header` parameters and the
//! base64 form, the revision's result shapes, W3C trace context in the
//! decision records, a 2025-11-25 client left unchanged, and
//! `subscriptions/listen` (acknowledged, a tool-list change announced,
//! bounded per key, released when closed).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::modern::{V, modern, post, posting, request, standard_headers};
use common::sse::Events;

use std::sync::Arc;
use std::sync::Mutex;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use cedargate::store::decisions::StoredDecision;
use common::{Tenant, TestGateway};
use reqwest::Method;
use serde_json::{Value, json};

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";

/// `headers` with `name` replaced by `value` (removed when `None`).
fn with(headers: &[(String, String)], name: &str, value: Option<&str>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case(name))
        .cloned()
        .collect();
    if let Some(v) = value {
        out.push((name.to_string(), v.to_string()));
    }
    out
}

fn code(body: &Value) -> i64 {
    body["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no error code in {body}"))
}

fn notes(d: &StoredDecision) -> Value {
    serde_json::from_str(&d.record.notes).unwrap()
}

#[tokio::test]
async fn requests_are_served_statelessly_without_initialize() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let list = modern(&g, &t, &request(1, "tools/list", json!({}))).await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(list.body["result"]["tools"].as_array().unwrap().len() >= 2);
    assert!(
        list.headers.get("mcp-session-id").is_none(),
        "no session id is minted or echoed"
    );
    let call = request(
        2,
        "tools/call",
        json!({"name": "af_memory_remember", "arguments": {"content": "stateless"}}),
    );
    // A session id header (even one naming nothing) is ignored.
    let headers = with(&standard_headers(&call), "mcp-session-id", Some("bogus"));
    let done = post(&g, &t, &headers, &call).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(done.body["id"], 2);
    assert_eq!(done.body["result"]["resultType"], "complete");
    assert_eq!(done.body["result"]["isError"], false);
    assert!(done.body["result"]["structuredContent"].is_object());
    assert_eq!(
        done.body["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "cedargate"
    );
    assert!(done.headers.get("mcp-session-id").is_none());
    // The same key → session → isolation → access_session prelude ran.
    let trail = g.decisions().await;
    let flat = common::flat(&trail);
    let actions: Vec<&str> = flat.iter().map(|d| d.action.as_str()).collect();
    assert!(actions.contains(&"access_session"), "{actions:?}");
    assert!(actions.contains(&"call_tool"), "{actions:?}");
    assert!(
        trail
            .iter()
            .all(|d| d.record.session_id.as_deref() == Some(t.session_id.as_str()))
    );
    // Another org's key on this session is refused, as for legacy clients.
    let other = g.tenant("globex").await;
    let stranger = Tenant {
        mcp_url: t.mcp_url.clone(),
        ..other
    };
    let refused = modern(&g, &stranger, &request(3, "tools/list", json!({}))).await;
    assert_eq!((refused.status, code(&refused.body)), (403, -32003));
    // A notification is accepted.
    let note =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}});
    let accepted = post(&g, &t, &[("mcp-protocol-version".into(), V.into())], &note).await;
    assert_eq!(accepted.status, 202, "{}", accepted.body);
}

#[tokio::test]
async fn get_and_delete_answer_405_at_2026_and_legacy_ones_are_unchanged() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    for method in [Method::GET, Method::DELETE] {
        let resp = g
            .http
            .request(method.clone(), &t.mcp_url)
            .bearer_auth(&t.key)
            .header("mcp-protocol-version", V)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 405, "{method}");
        assert_eq!(resp.headers()["allow"], "POST", "{method}");
    }
    assert!(
        !g.gw.terminated.contains(&t.session_id),
        "a 2026 DELETE ends nothing"
    );
    let resp = g
        .http
        .get(&t.mcp_url)
        .bearer_auth(&t.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    assert_eq!(resp.headers()["allow"], "POST, DELETE");
    let resp = g
        .http
        .delete(&t.mcp_url)
        .bearer_auth(&t.key)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
}

#[tokio::test]
async fn server_discover_describes_the_gateway() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let a = modern(&g, &t, &request(1, "server/discover", json!({}))).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let r = &a.body["result"];
    assert_eq!(r["resultType"], "complete");
    assert_eq!(
        r["supportedVersions"],
        json!([
            "2026-07-28",
            "2025-11-25",
            "2025-06-18",
            "2025-03-26",
            "2024-11-05"
        ])
    );
    assert!(r["capabilities"]["tools"].is_object());
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "cedargate"
    );
    assert!(r["instructions"].as_str().unwrap().contains("Cedar"));
    assert_eq!(r["ttlMs"], 3_600_000);
    assert_eq!(r["cacheScope"], "public");
    // Unknown methods answer 404 with -32601; the removed ones too.
    for method in ["initialize", "ping", "completion/complete"] {
        let a = modern(&g, &t, &request(2, method, json!({}))).await;
        assert_eq!((a.status, code(&a.body)), (404, -32601), "{method}");
        assert_eq!(a.body["id"], 2);
    }
}

#[tokio::test]
async fn an_unsupported_version_answers_32022_with_the_supported_list() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    // In the header.
    let body = request(1, "server/discover", json!({}));
    let headers = with(
        &standard_headers(&body),
        "mcp-protocol-version",
        Some("2099-01-01"),
    );
    let a = post(&g, &t, &headers, &body).await;
    assert_eq!((a.status, code(&a.body)), (400, -32022), "{}", a.body);
    assert_eq!(a.body["error"]["data"]["requested"], "2099-01-01");
    let supported = a.body["error"]["data"]["supported"].as_array().unwrap();
    assert!(supported.contains(&json!(V)) && supported.contains(&json!("2025-11-25")));
    // In `_meta`, without the header.
    let mut body = request(2, "server/discover", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let headers = with(&standard_headers(&body), "mcp-protocol-version", None);
    let a = post(&g, &t, &headers, &body).await;
    assert_eq!((a.status, code(&a.body)), (400, -32022), "{}", a.body);
    assert_eq!(a.body["error"]["data"]["requested"], "2099-01-01");
}

#[tokio::test]
async fn refusals_before_the_session_carry_the_request_id() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    // An unsupported header version, with the body's id.
    let body = request(101, "server/discover", json!({}));
    let headers = with(
        &standard_headers(&body),
        "mcp-protocol-version",
        Some("2099-01-01"),
    );
    let a = post(&g, &t, &headers, &body).await;
    assert_eq!((a.status, code(&a.body)), (400, -32022), "{}", a.body);
    assert_eq!(a.body["id"], 101, "{}", a.body);
    // The same for an older client.
    let legacy = json!({"jsonrpc": "2.0", "id": "x", "method": "ping"});
    let a = post(
        &g,
        &t,
        &[("mcp-protocol-version".into(), "2099-01-01".into())],
        &legacy,
    )
    .await;
    assert_eq!(
        (a.status, code(&a.body), &a.body["id"]),
        (400, -32022, &json!("x"))
    );
    // A missing `_meta` field.
    let mut body = request(102, "server/discover", json!({}));
    body["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/protocolVersion");
    let a = modern(&g, &t, &body).await;
    assert_eq!((a.status, code(&a.body)), (400, -32602), "{}", a.body);
    assert_eq!(a.body["id"], 102, "{}", a.body);
}

#[tokio::test]
async fn a_meta_version_that_contradicts_the_header_is_a_recorded_mismatch() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let mut body = request(302, "server/discover", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let a = modern(&g, &t, &body).await;
    assert_eq!((a.status, code(&a.body)), (400, -32020), "{}", a.body);
    assert_eq!(a.body["id"], 302, "{}", a.body);
    assert_eq!(a.body["error"]["data"]["header"], "MCP-Protocol-Version");
    assert_eq!(header_refusals(&g).await.len(), 1);
}

#[tokio::test]
async fn missing_meta_fields_answer_32602_with_400() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let mut body = request(1, "tools/list", json!({}));
    body["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let a = modern(&g, &t, &body).await;
    assert_eq!((a.status, code(&a.body)), (400, -32602), "{}", a.body);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let a = modern(&g, &t, &body).await;
    assert_eq!((a.status, code(&a.body)), (400, -32602), "{}", a.body);
    // A batch is not a 2026-07-28 body.
    let batch = json!([request(1, "tools/list", json!({}))]);
    let a = post(&g, &t, &[("mcp-protocol-version".into(), V.into())], &batch).await;
    assert_eq!((a.status, code(&a.body)), (400, -32600), "{}", a.body);
}

#[tokio::test]
async fn a_required_client_capability_that_is_missing_answers_32021() {
    let g = TestGateway::start_with(|c| {
        c.mcp
            .required_client_capabilities
            .insert("tools/call".into(), vec!["elicitation".into()]);
    })
    .await;
    let t = g.tenant("acme").await;
    let call = request(
        1,
        "tools/call",
        json!({"name": "af_memory_remember", "arguments": {"content": "x"}}),
    );
    let a = modern(&g, &t, &call).await;
    assert_eq!((a.status, code(&a.body)), (400, -32021), "{}", a.body);
    assert_eq!(
        a.body["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {}})
    );
    let mut declared = call.clone();
    declared["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({"elicitation": {}});
    let a = modern(&g, &t, &declared).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["result"]["isError"], false, "{}", a.body);
    // Other methods need nothing.
    let a = modern(&g, &t, &request(2, "tools/list", json!({}))).await;
    assert_eq!(a.status, 200, "{}", a.body);
}

/// The refusal records of header validation, oldest first.
async fn header_refusals(g: &TestGateway) -> Vec<StoredDecision> {
    g.decisions()
        .await
        .into_iter()
        .filter(|d| notes(d)["refusedBy"] == "header_validation")
        .collect()
}

#[tokio::test]
async fn mismatched_or_missing_standard_headers_answer_32020_and_are_recorded() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let call = request(
        1,
        "tools/call",
        json!({"name": "af_memory_remember", "arguments": {"content": "x"}}),
    );
    let std = standard_headers(&call);
    let cases: Vec<(&str, Vec<(String, String)>)> = vec![
        ("Mcp-Method", with(&std, "mcp-method", None)),
        ("Mcp-Method", with(&std, "mcp-method", Some("tools/list"))),
        ("Mcp-Name", with(&std, "mcp-name", None)),
        ("Mcp-Name", with(&std, "mcp-name", Some("af_memory_recall"))),
        // base64 of "af_memory_recall": decoded, then compared.
        (
            "Mcp-Name",
            with(
                &std,
                "mcp-name",
                Some("=?base64?YWZfbWVtb3J5X3JlY2FsbA==?="),
            ),
        ),
        ("Mcp-Name", with(&std, "mcp-name", Some("=?base64?%%%?="))),
        (
            "MCP-Protocol-Version",
            with(&std, "mcp-protocol-version", None),
        ),
        (
            "MCP-Protocol-Version",
            with(&std, "mcp-protocol-version", Some("2025-11-25")),
        ),
    ];
    for (i, (header, headers)) in cases.iter().enumerate() {
        let a = post(&g, &t, headers, &call).await;
        assert_eq!(
            (a.status, code(&a.body)),
            (400, -32020),
            "{header}: {}",
            a.body
        );
        assert_eq!(a.body["id"], 1);
        assert_eq!(a.body["error"]["data"]["header"], *header);
        let refusals = header_refusals(&g).await;
        assert_eq!(refusals.len(), i + 1, "{header}: one record per refusal");
        let last = refusals.last().unwrap();
        assert_eq!(
            a.body["error"]["data"]["decisionId"],
            last.record.id.as_str()
        );
        assert_eq!(last.record.action, "access_session");
        assert_eq!(last.record.decision, "deny");
        assert_eq!(
            last.record.session_id.as_deref(),
            Some(t.session_id.as_str())
        );
        assert_eq!(
            serde_json::from_str::<Value>(&last.record.outcome).unwrap(),
            json!({"status": "denied", "deniedBy": "header_validation"})
        );
        assert_eq!(notes(last)["header"], *header);
    }
    // Nothing reached a decision of the session: no tool was decided or run.
    let trail = g.decisions().await;
    assert!(
        trail
            .iter()
            .all(|d| d.record.action == "access_session" && d.record.decision == "deny"),
        "{:?}",
        trail.iter().map(|d| &d.record.action).collect::<Vec<_>>()
    );
    // The base64 form of the right name is accepted.
    let encoded = with(
        &std,
        "mcp-name",
        Some("=?base64?YWZfbWVtb3J5X3JlbWVtYmVy?="),
    );
    let a = post(&g, &t, &encoded, &call).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body["result"].is_object(), "{}", a.body);
    // A long header value is not echoed at length.
    let long = "x".repeat(5000);
    let a = post(&g, &t, &with(&std, "mcp-name", Some(&long)), &call).await;
    assert_eq!(a.status, 400);
    assert!(a.body.to_string().len() < 2000, "{}", a.body);
}

/// What the small upstream below saw.
#[derive(Default)]
struct Seen {
    calls: Mutex<Vec<Value>>,
}

/// A minimal upstream MCP server (2025-06-18, JSON answers) with one tool
/// whose `region` and `limits.count` parameters are mirrored into headers.
async fn upstream() -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let app = axum::Router::new()
        .route("/mcp", axum::routing::post(upstream_handle))
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/mcp"), seen)
}

async fn upstream_handle(State(seen): State<Arc<Seen>>, _h: HeaderMap, body: String) -> Response {
    let msg: Value = serde_json::from_str(&body).unwrap();
    let Some(id) = msg.get("id").cloned() else {
        return axum::http::StatusCode::ACCEPTED.into_response();
    };
    let result = match msg["method"].as_str().unwrap_or_default() {
        "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                               "serverInfo": {"name": "geo", "version": "1"}}),
        "tools/list" => json!({"tools": [{
            "name": "route",
            "description": "Routes a query to a region",
            "inputSchema": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "limits": {"type": "object", "properties": {
                    "count": {"type": "integer", "x-mcp-header": "Count"}}},
                "query": {"type": "string"}
            }, "required": ["query"]}
        }]}),
        "tools/call" => {
            seen.calls.lock().unwrap().push(msg["params"].clone());
            json!({"content": [{"type": "text", "text": "routed"}], "isError": false})
        }
        _ => json!({}),
    };
    let mut resp =
        axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response();
    resp.headers_mut()
        .insert("mcp-session-id", "up-1".parse().unwrap());
    resp
}

#[tokio::test]
async fn x_mcp_header_parameters_must_match_their_headers() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let (url, seen) = upstream().await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "Geo", "transport": "streamable-http", "url": url, "timeoutMs": 2000})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    let call = |args: Value| {
        request(
            1,
            "tools/call",
            json!({"name": "geo.route", "arguments": args}),
        )
    };
    let body = call(json!({"region": "eu-west1", "limits": {"count": 7}, "query": "q"}));
    let std = standard_headers(&body);
    let full = with(
        &with(&std, "mcp-param-region", Some("eu-west1")),
        "mcp-param-count",
        Some("7.0"),
    );
    let refused: Vec<(&str, Vec<(String, String)>)> = vec![
        ("Mcp-Param-Region", with(&full, "mcp-param-region", None)),
        (
            "Mcp-Param-Region",
            with(&full, "mcp-param-region", Some("us-east1")),
        ),
        ("Mcp-Param-Count", with(&full, "mcp-param-count", Some("8"))),
        // base64 of "us-east1"
        (
            "Mcp-Param-Region",
            with(&full, "mcp-param-region", Some("=?base64?dXMtZWFzdDE=?=")),
        ),
    ];
    for (header, headers) in &refused {
        let a = post(&g, &t, headers, &body).await;
        assert_eq!(
            (a.status, code(&a.body)),
            (400, -32020),
            "{header}: {}",
            a.body
        );
        assert_eq!(a.body["error"]["data"]["header"], *header);
    }
    assert_eq!(header_refusals(&g).await.len(), refused.len());
    assert!(
        seen.calls.lock().unwrap().is_empty(),
        "nothing reached the upstream"
    );
    // Matching headers (the count compared as a number, the region in base64
    // of "eu-west1") pass, and the body's values are what the upstream gets.
    let encoded = with(&full, "mcp-param-region", Some("=?base64?ZXUtd2VzdDE=?="));
    let a = post(&g, &t, &encoded, &body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        a.body["result"]["content"][0]["text"], "routed",
        "{}",
        a.body
    );
    assert_eq!(
        seen.calls.lock().unwrap()[0]["arguments"]["region"],
        "eu-west1"
    );
    // Without a value in the body, the header must be absent.
    let bare = call(json!({"query": "q"}));
    let a = post(&g, &t, &standard_headers(&bare), &bare).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let stray = with(
        &standard_headers(&bare),
        "mcp-param-region",
        Some("eu-west1"),
    );
    let a = post(&g, &t, &stray, &bare).await;
    assert_eq!((a.status, code(&a.body)), (400, -32020), "{}", a.body);
    // A list with an org's own tools is private.
    let list = modern(&g, &t, &request(2, "tools/list", json!({}))).await;
    assert_eq!(
        list.body["result"]["cacheScope"], "private",
        "{}",
        list.body
    );
}

const HIDE_REMEMBER: &str = "@id(\"hide-remember\")\nforbid (principal, action == Gateway::Action::\"view_tool\", resource == Gateway::Tool::\"af_memory_remember\");\n";

#[tokio::test]
async fn tools_list_has_the_revision_shape_and_is_always_private() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let a = modern(&g, &t, &request(1, "tools/list", json!({}))).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let r = &a.body["result"];
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["ttlMs"], g.gw.config.cache_ttl_secs * 1000);
    assert_eq!(
        r["cacheScope"], "private",
        "a list Cedar decided for this principal, even with nothing hidden"
    );
    let names: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "ordered by name");
    assert!(names.contains(&"af_memory_remember"));

    let g = TestGateway::start_with_policy("hide.cedar", HIDE_REMEMBER).await;
    let t = g.tenant("acme").await;
    let a = modern(&g, &t, &request(1, "tools/list", json!({}))).await;
    let r = &a.body["result"];
    assert_eq!(r["cacheScope"], "private", "{}", a.body);
    assert!(
        !r["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "af_memory_remember")
    );
    // The revision's code for an unknown tool is -32602, and a hidden tool
    // answers exactly like an unknown one.
    let hidden = modern(
        &g,
        &t,
        &request(
            3,
            "tools/call",
            json!({"name": "af_memory_remember", "arguments": {}}),
        ),
    )
    .await;
    let unknown = modern(
        &g,
        &t,
        &request(
            3,
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
        ),
    )
    .await;
    assert_eq!((hidden.status, code(&hidden.body)), (200, -32602));
    assert_eq!((unknown.status, code(&unknown.body)), (200, -32602));
    assert_eq!(
        hidden.body["error"]["message"]
            .as_str()
            .unwrap()
            .replace("af_memory_remember", "N"),
        unknown.body["error"]["message"]
            .as_str()
            .unwrap()
            .replace("no_such_tool", "N")
    );
}

#[tokio::test]
async fn trace_context_reaches_every_decision_record_of_the_request() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let call = request(
        1,
        "tools/call",
        json!({"name": "af_memory_remember", "arguments": {"content": "traced"},
               "_meta": {"traceparent": TRACEPARENT, "tracestate": "vendor=abc"}}),
    );
    let a = modern(&g, &t, &call).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let trail = g.decisions().await;
    let flat = common::flat(&trail);
    assert!(flat.len() >= 3, "access_session, view_tool, call_tool");
    for d in &flat {
        let notes: Value = serde_json::from_str(&d.notes).unwrap();
        assert_eq!(notes["traceparent"], TRACEPARENT, "{}", d.action);
        assert_eq!(notes["tracestate"], "vendor=abc");
    }
    // Notes a step wrote are kept beside it.
    let call_tool = trail
        .iter()
        .find(|d| d.record.action == "call_tool")
        .unwrap();
    assert!(notes(call_tool).is_object());

    // A refusal carries it too.
    let headers = with(&standard_headers(&call), "mcp-name", Some("other"));
    let a = post(&g, &t, &headers, &call).await;
    assert_eq!(a.status, 400);
    let refusal = header_refusals(&g).await.pop().unwrap();
    assert_eq!(notes(&refusal)["traceparent"], TRACEPARENT);

    // Malformed values are ignored and never echoed.
    let before = g.decisions().await.len();
    let bad = "00-".to_string() + &"Z".repeat(3000);
    let call = request(
        2,
        "tools/call",
        json!({"name": "af_memory_remember", "arguments": {"content": "traced again"},
               "_meta": {"traceparent": bad, "tracestate": "x=1"}}),
    );
    let a = modern(&g, &t, &call).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(!a.body.to_string().contains("ZZZZ"));
    let trail = g.decisions().await;
    for d in &trail[before..] {
        let n = notes(d);
        assert!(
            n.get("traceparent").is_none() && n.get("tracestate").is_none(),
            "{n}"
        );
    }
}

/// A legacy client that sends a trace context in a message's `_meta` is
/// traced too; in a batch, each message's records carry that message's
/// own trace context, and the request's own records (the session's
/// admission, shared by every message) carry none.
#[tokio::test]
async fn a_legacy_request_with_a_trace_context_is_traced() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "af_memory_remember", "arguments": {"content": "traced"},
        "_meta": {"traceparent": TRACEPARENT}}});
    let (status, body) = g.mcp(&t, call.clone()).await;
    assert_eq!(status, 200, "{body}");
    let trail = g.decisions().await;
    let flat = common::flat(&trail);
    assert!(flat.len() >= 3, "access_session, view_tool, call_tool");
    for d in &flat {
        let notes: Value = serde_json::from_str(&d.notes).unwrap();
        assert_eq!(notes["traceparent"], TRACEPARENT, "{}", d.action);
    }

    let other = "00-1bf7651916cd43dd8448eb211c80319c-00f067aa0ba902b8-01";
    let before = trail.len();
    let second = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "af_memory_remember", "arguments": {"content": "traced twice"},
        "_meta": {"traceparent": other}}});
    let untraced = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "af_memory_remember", "arguments": {"content": "not traced"}}});
    let (status, body) = g.mcp(&t, json!([call, second, untraced])).await;
    assert_eq!(status, 200, "{body}");
    let trail = g.decisions().await;
    let batch = &trail[before..];
    let traced_with = |content: &str| -> Vec<Option<String>> {
        batch
            .iter()
            .filter(|d| d.record.action == "call_tool")
            .filter(|d| d.record.context.contains(content))
            .map(|d| notes(d)["traceparent"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(traced_with("\"traced\""), [Some(TRACEPARENT.to_string())]);
    assert_eq!(traced_with("traced twice"), [Some(other.to_string())]);
    assert_eq!(traced_with("not traced"), [None]);
    // The request's access_session has no trace of its own: its row, or
    // the record it rides in, carries none.
    let admission: Vec<_> = common::flat(batch)
        .into_iter()
        .filter(|d| d.action == "access_session")
        .collect();
    assert_eq!(admission.len(), 1);
    for d in admission {
        let notes: Value = serde_json::from_str(&d.notes).unwrap();
        assert!(notes.get("traceparent").is_none(), "{}", d.notes);
    }
}

#[tokio::test]
async fn a_2025_11_25_client_is_unchanged() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}});
    let a = post(&g, &t, &[], &init).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(a.headers["mcp-session-id"], t.session_id.as_str());
    let old = [("mcp-protocol-version".to_string(), "2025-11-25".to_string())];
    let list = post(
        &g,
        &t,
        &old,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    assert_eq!(list.status, 200);
    let r = list.body["result"].as_object().unwrap();
    assert_eq!(
        r.keys().collect::<Vec<_>>(),
        vec!["tools"],
        "no 2026 fields"
    );
    let unknown = post(
        &g,
        &t,
        &old,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "nope"}}),
    )
    .await;
    assert_eq!((unknown.status, code(&unknown.body)), (200, -32601));
    let discover = post(
        &g,
        &t,
        &old,
        &json!({"jsonrpc": "2.0", "id": 4, "method": "server/discover", "params": {}}),
    )
    .await;
    assert_eq!((discover.status, code(&discover.body)), (200, -32601));
    let call = post(
        &g,
        &t,
        &old,
        &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": {"name": "af_memory_remember", "arguments": {"content": "old"}}}),
    )
    .await;
    assert_eq!(call.status, 200);
    assert!(call.body["result"].get("resultType").is_none());
    // A session id naming another session is still refused at this revision.
    let wrong = with(&old, "mcp-session-id", Some("another"));
    let a = post(
        &g,
        &t,
        &wrong,
        &json!({"jsonrpc": "2.0", "id": 6, "method": "ping"}),
    )
    .await;
    assert_eq!(a.status, 400);
}

/// Opens `subscriptions/listen` (request id 9) for tool-list changes.
async fn listen(g: &TestGateway, t: &Tenant) -> (u16, Option<Events>) {
    let body = request(
        9,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true, "resourceSubscriptions": ["x://y"]}}),
    );
    let resp = posting(g, t, &standard_headers(&body), &body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    if status != 200 {
        return (status, None);
    }
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    (
        status,
        Some(Events {
            resp,
            buf: String::new(),
        }),
    )
}

#[tokio::test]
async fn subscriptions_listen_announces_tool_list_changes_and_is_bounded_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let policies = common::copy_policies(dir.path());
    let policies_dir = policies.clone();
    let g = TestGateway::start_with(move |c| {
        c.policies_dir = policies_dir;
        c.sse.max_streams_per_key = 1;
        c.lifecycle.watch = false;
    })
    .await;
    let t = g.tenant("acme").await;
    let (status, events) = listen(&g, &t).await;
    assert_eq!(status, 200);
    let mut events = events.unwrap();
    let ack = events.next().await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        9
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "only what the gateway honours"
    );
    // The stream counts against the key's bound (as HTTP+SSE streams do).
    let (second, _) = listen(&g, &t).await;
    assert_eq!(second, 429);

    // A reload that hides a tool from this agent is announced.
    std::fs::write(policies.join("hide.cedar"), HIDE_REMEMBER).unwrap();
    let (status, reload) = g.admin(Method::POST, "/admin/policies/reload", None).await;
    assert_eq!(status, 200, "{reload}");
    let changed = events.next().await.unwrap();
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        9
    );
    // The re-check was decided and recorded like a tools/list.
    let denied_views = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| {
            common::listed_verdicts(&d.record)
                .iter()
                .any(|(tool, decision)| tool == "af_memory_remember" && decision == "deny")
        })
        .count();
    assert!(denied_views >= 1);

    // Closing the stream cancels it and frees the key's slot.
    drop(events);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while g.gw.streams.stats().open > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream was never released"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (again, _) = listen(&g, &t).await;
    assert_eq!(again, 200);
}

/// `arguments`, `inputResponses` and `requestState` of a `tools/call` of
/// the wrong type answer -32602 naming the field, before any tool is
/// decided or run.
#[tokio::test]
async fn tools_call_params_of_the_wrong_type_answer_32602_and_run_nothing() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let cases = [
        ("arguments", json!({"arguments": "content"})),
        (
            "inputResponses",
            json!({"arguments": {"content": "x"}, "inputResponses": ["yes"]}),
        ),
        (
            "requestState",
            json!({"arguments": {"content": "x"}, "requestState": 7}),
        ),
    ];
    for (field, extra) in cases {
        let mut params = json!({"name": "af_memory_remember"});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let a = modern(&g, &t, &request(1, "tools/call", params)).await;
        assert_eq!(code(&a.body), -32602, "{field}: {}", a.body);
        assert_eq!(a.body["error"]["data"]["field"], field, "{}", a.body);
    }
    let decided: Vec<String> = g
        .decisions()
        .await
        .into_iter()
        .map(|d| d.record.action)
        .filter(|a| a != "access_session")
        .collect();
    assert!(decided.is_empty(), "no tool was decided: {decided:?}");
    assert_eq!(g.count("observations").await, 0, "nothing was remembered");
}

/// A 2026-07-28 upstream whose prompt and resource ask the caller to
/// confirm first, as an `input_required` result (-32021 with HTTP 400 for
/// a caller that did not declare `elicitation`), and answer once the
/// retry carries `inputResponses.confirm` and the state they sent.
async fn asking_upstream() -> String {
    async fn handle(body: String) -> Response {
        let msg: Value = serde_json::from_str(&body).unwrap();
        let Some(id) = msg.get("id").cloned() else {
            return axum::http::StatusCode::ACCEPTED.into_response();
        };
        let params = &msg["params"];
        let done = match msg["method"].as_str().unwrap_or_default() {
            "server/discover" => json!({"supportedVersions": [V], "capabilities":
                {"tools": {}, "prompts": {}, "resources": {}}}),
            "tools/list" => json!({"tools": []}),
            "prompts/list" => json!({"prompts": [{"name": "farewell"}]}),
            "resources/list" => json!({"resources": [{"uri": "note://a", "name": "a"}]}),
            "prompts/get" => json!({"messages": [
                {"role": "user", "content": {"type": "text", "text": "Goodbye"}}]}),
            "resources/read" => json!({"contents": [{"uri": "note://a", "text": "a note"}]}),
            _ => json!({}),
        };
        let asks = matches!(params["name"].as_str(), Some("farewell"))
            || matches!(params["uri"].as_str(), Some("note://a"));
        let declared = params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["elicitation"]
            .is_object();
        let (status, answer) = if !asks || params["inputResponses"]["confirm"].is_object() {
            (200, json!({"result": done}))
        } else if !declared {
            (
                400,
                json!({"error": {"code": -32021, "message": "elicitation is required",
                         "data": {"requiredCapabilities": {"elicitation": {}}}}}),
            )
        } else {
            (
                200,
                json!({"result": {"resultType": "input_required", "requestState": "s1",
                "inputRequests": {"confirm": {"method": "elicitation/create",
                                              "params": {"message": "Sure?"}}}}}),
            )
        };
        let mut answer = answer;
        answer["jsonrpc"] = json!("2.0");
        answer["id"] = id;
        let status = axum::http::StatusCode::from_u16(status).unwrap();
        (status, axum::Json(answer)).into_response()
    }
    let app = axum::Router::new().route("/mcp", axum::routing::post(handle));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/mcp")
}

/// `prompts/get` and `resources/read` of a fronted server relay its
/// questions as `tools/call` does: the `input_required` result (with no
/// cache hints) to a 2026-07-28 caller, the answers of its retry back,
/// each round decided and recorded; an older caller gets the server's
/// -32021.
#[tokio::test]
async fn prompts_and_resources_that_ask_for_input_round_trip() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let url = asking_upstream().await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "asker", "transport": "streamable-http", "url": url})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    let cases = [
        ("prompts/get", json!({"name": "asker.farewell"}), "messages"),
        (
            "resources/read",
            json!({"uri": "asker+note://a"}),
            "contents",
        ),
    ];
    for (method, params, answer) in cases {
        let mut ask = request(1, method, params.clone());
        ask["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"elicitation": {}});
        let mut headers = standard_headers(&ask);
        if method == "resources/read" {
            headers.push(("mcp-name".into(), "asker+note://a".into()));
        }
        let asked = post(&g, &t, &headers, &ask).await;
        assert_eq!(asked.status, 200, "{method}: {}", asked.body);
        let result = &asked.body["result"];
        assert_eq!(result["resultType"], "input_required", "{}", asked.body);
        assert_eq!(
            result["inputRequests"]["confirm"]["method"],
            "elicitation/create"
        );
        assert!(result.get("cacheScope").is_none(), "{result}");
        let mut retry = ask.clone();
        retry["id"] = json!(2);
        retry["params"]["inputResponses"] = json!({"confirm": {"action": "accept"}});
        retry["params"]["requestState"] = result["requestState"].clone();
        let done = post(&g, &t, &headers, &retry).await;
        assert_eq!(done.status, 200, "{method}: {}", done.body);
        assert_eq!(
            done.body["result"]["resultType"], "complete",
            "{}",
            done.body
        );
        assert!(done.body["result"][answer].is_array(), "{}", done.body);
        // Without the capability: the server's own refusal, as HTTP 400.
        let bare = request(3, method, params.clone());
        let refused = post(&g, &t, &headers, &bare).await;
        assert_eq!(
            (refused.status, code(&refused.body)),
            (400, -32021),
            "{method}: {}",
            refused.body
        );
        assert!(
            refused.body["error"]["data"]["requiredCapabilities"]["elicitation"].is_object(),
            "{}",
            refused.body
        );
    }
    let outcomes: Vec<(String, String, Value)> = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| d.record.action == "get_prompt" || d.record.action == "read_resource")
        .map(|d| {
            let o: Value = serde_json::from_str(&d.record.outcome).unwrap();
            (d.record.action.clone(), d.record.decision.clone(), o)
        })
        .collect();
    for action in ["get_prompt", "read_resource"] {
        let rounds: Vec<&Value> = outcomes
            .iter()
            .filter(|(a, d, _)| a == action && d == "allow")
            .map(|(_, _, o)| o)
            .collect();
        assert_eq!(rounds.len(), 3, "{action}: {outcomes:?}");
        assert_eq!(rounds[0]["inputRequired"], true, "{action}: {outcomes:?}");
        assert_eq!(rounds[1]["inputResponses"], json!(["confirm"]), "{action}");
        assert_eq!(rounds[2]["error"]["code"], -32021, "{action}");
    }
    // A 2025-11-25 caller declares nothing per request: the server refuses.
    let (status, legacy) = g
        .mcp(
            &t,
            json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/get",
                   "params": {"name": "asker.farewell"}}),
        )
        .await;
    assert_eq!(status, 200, "{legacy}");
    assert_eq!(legacy["error"]["code"], -32021, "{legacy}");
}

/// A 2026-07-28 upstream listing eight resources and eight prompts.
async fn listing_upstream() -> String {
    async fn handle(body: String) -> Response {
        let msg: Value = serde_json::from_str(&body).unwrap();
        let Some(id) = msg.get("id").cloned() else {
            return axum::http::StatusCode::ACCEPTED.into_response();
        };
        let result = match msg["method"].as_str().unwrap_or_default() {
            "server/discover" => json!({"supportedVersions": [V], "capabilities":
                {"tools": {}, "prompts": {}, "resources": {}}}),
            "resources/list" => json!({"resources": (0..8)
                .map(|i| json!({"uri": format!("note://{i}"), "name": format!("n{i}")}))
                .collect::<Vec<_>>()}),
            "prompts/list" => json!({"prompts": (0..8)
                .map(|i| json!({"name": format!("p{i}")}))
                .collect::<Vec<_>>()}),
            "tools/list" => json!({"tools": []}),
            _ => json!({}),
        };
        axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
    }
    let app = axum::Router::new().route("/mcp", axum::routing::post(handle));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/mcp")
}

/// A resources or prompts listing spends its element, the server it asks
/// and the eight entries it decides: ten tokens, the key's whole burst,
/// so the next listing is refused (429) and decides nothing.
#[tokio::test]
async fn resources_and_prompts_listings_cost_what_they_fetch_and_decide() {
    let g = TestGateway::start_with(|c| {
        c.rate_limits.key = cedargate::config::Bucket {
            per_second: 1,
            burst: 10,
        };
    })
    .await;
    let t = g.tenant("acme").await;
    let url = listing_upstream().await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "lister", "transport": "streamable-http", "url": url})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    for (method, key, action) in [
        ("resources/list", "resources", "read_resource"),
        ("prompts/list", "prompts", "get_prompt"),
    ] {
        if method == "prompts/list" {
            // Ten seconds refill the bucket.
            tokio::time::sleep(std::time::Duration::from_millis(10_500)).await;
        }
        let a = modern(&g, &t, &request(1, method, json!({}))).await;
        assert_eq!(a.status, 200, "{method}: {}", a.body);
        assert_eq!(a.body["result"][key].as_array().unwrap().len(), 8);
        let decided =
            |trail: &[StoredDecision]| trail.iter().filter(|d| d.record.action == action).count();
        let before = decided(&g.decisions().await);
        assert_eq!(before, 8, "{method}");
        let a = modern(&g, &t, &request(2, method, json!({}))).await;
        assert_eq!(
            (a.status, code(&a.body)),
            (429, -32029),
            "{method}: {}",
            a.body
        );
        assert_eq!(
            decided(&g.decisions().await),
            before,
            "{method}: nothing decided"
        );
    }
}
