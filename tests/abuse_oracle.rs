//! Bounded under abuse, the endpoint's part: a hidden tool cannot be told
//! from an unknown one, a key refused on another org's session leaves a
//! decision in its own org's trail, request ids come back exactly as
//! written, and error bodies repeat only a short prefix of bad input.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::{Tenant, TestGateway};
use serde_json::{Value, json};

/// POSTs `body` as is to `url` with `key` and extra headers; returns the
/// status and the body text.
async fn post_raw(
    g: &TestGateway,
    url: &str,
    key: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut req = g
        .http
        .post(url)
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body.to_string());
    for (h, v) in headers {
        req = req.header(*h, *v);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

async fn post(g: &TestGateway, t: &Tenant, body: &str) -> (u16, String) {
    post_raw(g, &t.mcp_url, &t.key, &[], body).await
}

/// The trail as committed so far, without flushing anything queued: a
/// record found here was durable before the answer that follows it.
async fn committed(g: &TestGateway) -> Vec<cedargate::store::decisions::StoredDecision> {
    g.gw.store
        .read(|c| cedargate::store::decisions::tail(c, 1_000_000))
        .await
        .unwrap()
}

const HIDE_REMEMBER: &str = "@id(\"hide-remember\")\nforbid (principal, action == Gateway::Action::\"view_tool\", resource == Gateway::Tool::\"af_memory_remember\");\n";

#[tokio::test]
async fn a_hidden_tool_and_an_unknown_one_answer_byte_identically_and_both_are_recorded() {
    let g = TestGateway::start_with_policy("hide.cedar", HIDE_REMEMBER).await;
    // In acme the tool exists and a forbid hides it; in globex (memory
    // off) no tool has the name.
    let hidden_in = g.tenant("acme").await;
    let unknown_in = g.tenant_with("globex", false, &[]).await;
    let body = r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"tools/call","params":{"name":"af_memory_remember","arguments":{"content":"x"}}}"#;
    let hidden = post(&g, &hidden_in, body).await;
    let unknown = post(&g, &unknown_in, body).await;
    assert_eq!(hidden, unknown);
    assert_eq!(hidden.0, 200);
    let answer: Value = serde_json::from_str(&hidden.1).unwrap();
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    assert!(
        hidden.1.contains(r#""id":123456789012345678901234567890"#),
        "{}",
        hidden.1
    );

    // Both refusals were committed before their answers.
    let records = committed(&g).await;
    let view_of = |org: &str| {
        records
            .iter()
            .find(|d| {
                d.record.action == "view_tool"
                    && d.record.org_id.as_deref() == Some(org)
                    && d.record.resource == r#"Gateway::Tool::"af_memory_remember""#
            })
            .unwrap_or_else(|| panic!("no view_tool record in {org}"))
    };
    let hidden_record = view_of("acme");
    assert_eq!(hidden_record.record.decision, "deny");
    assert!(hidden_record.record.reasons.contains("hide-remember"));
    let unknown_record = view_of("globex");
    assert_eq!(unknown_record.record.decision, "deny");
    // The forbid names the tool, so it decides the unknown name too.
    assert!(unknown_record.record.reasons.contains("hide-remember"));
    let notes: Value = serde_json::from_str(&unknown_record.record.notes).unwrap();
    assert_eq!(notes["unknownTool"], true);
    let outcome: Value = serde_json::from_str(&unknown_record.record.outcome).unwrap();
    assert_eq!(outcome["status"], "denied");

    // A made-up name in the session that has the hidden tool: the same
    // answer shape, and recorded too.
    let (_, made_up) = post(
        &g,
        &hidden_in,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"no_such_tool"}}"#,
    )
    .await;
    assert_eq!(
        made_up,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"unknown tool `no_such_tool`","data":{"tool":"no_such_tool"}}}"#
    );
    let records = committed(&g).await;
    let made_up = records
        .iter()
        .find(|d| {
            d.record.action == "view_tool"
                && d.record.resource == r#"Gateway::Tool::"no_such_tool""#
        })
        .expect("the unknown name's refusal is committed before its answer");
    // No policy permits a tool outside the slice: denied by default.
    assert_eq!(made_up.record.decision, "deny");
    assert_eq!(made_up.record.reasons, "[]");
}

#[tokio::test]
async fn a_key_refused_on_another_orgs_session_leaves_a_decision_in_its_own_orgs_trail() {
    let g = TestGateway::start().await;
    let a = g.tenant("acme").await;
    let b = g.tenant("globex").await;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let (status, text) = post_raw(&g, &b.mcp_url, &a.key, &[], ping).await;
    assert_eq!(status, 403, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["code"], -32003, "{body}");
    assert_eq!(
        body["error"]["message"],
        format!(
            "this key's organization does not own session `{}`",
            b.session_id
        )
    );
    let decision_id = body["error"]["data"]["decisionId"].as_str().unwrap();

    // Durable before the 403, in the caller's org.
    let records = committed(&g).await;
    let refusal = records
        .iter()
        .find(|d| d.record.id == decision_id)
        .expect("the refusal is committed before the answer");
    let r = &refusal.record;
    assert_eq!(r.org_id.as_deref(), Some("acme"));
    assert_eq!(r.session_id, None);
    assert_eq!(r.principal, format!(r#"Gateway::ApiKey::"{}""#, a.key_id));
    assert_eq!(r.action, "access_session");
    assert_eq!(
        r.resource,
        format!(r#"Gateway::Session::"{}""#, b.session_id)
    );
    assert_eq!(r.decision, "deny");
    let notes: Value = serde_json::from_str(&r.notes).unwrap();
    assert_eq!(notes["refusedBy"], "tenant_isolation");
    assert!(notes["reason"].as_str().unwrap().contains("does not own"));
    // Nothing of the other org is in the record or its entity snapshot,
    // and the other org's trail holds nothing of the stranger's request.
    let snapshot = g.entity_snapshot(&r.entities_hash).await;
    assert!(!snapshot.contains("globex"), "{snapshot}");
    assert!(!records.iter().any(|d| {
        d.record.org_id.as_deref() == Some("globex") && d.record.principal.contains(&a.key_id)
    }));
    // The trail still verifies with the refusal in it.
    let report =
        g.gw.store
            .read(cedargate::store::decisions::verify)
            .await
            .unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
}

/// The data of the first `message` event of an SSE body.
fn sse_message(text: &str) -> &str {
    let block = text
        .split("\n\n")
        .find(|b| b.lines().any(|l| l == "event: message"))
        .unwrap_or_else(|| panic!("no message event in {text}"));
    block
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or_else(|| panic!("no data in {block}"))
}

#[tokio::test]
async fn request_ids_come_back_exactly_as_written() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let ids = [
        "123456789012345678901234567890",
        "-0",
        "1.50",
        "1e400",
        r#""\u0041b""#,
    ];
    for id in ids {
        let (status, text) = post(
            &g,
            &t,
            &format!(r#"{{"jsonrpc":"2.0","id": {id} ,"method":"ping"}}"#),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            text,
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
        );
    }

    // A batch: each answer carries its own id as written; an id of the
    // wrong type is still -32600 with a null id.
    let batch = r#"[{"jsonrpc":"2.0","id":1.50,"method":"ping"},{"jsonrpc":"2.0","id":-0,"method":"ping"},{"jsonrpc":"2.0","id":true,"method":"ping"},{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"nope"}]"#;
    let (status, text) = post(&g, &t, batch).await;
    assert_eq!(status, 200);
    assert!(
        text.starts_with(r#"[{"jsonrpc":"2.0","id":1.50,"result":{}},{"jsonrpc":"2.0","id":-0,"result":{}},{"jsonrpc":"2.0","id":null,"error":{"code":-32600"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"error":{"code":-32601"#
        ),
        "{text}"
    );

    // A single invalid request answers 400 with its id as written.
    let (status, text) = post(
        &g,
        &t,
        r#"{"jsonrpc":"1.0","id":123456789012345678901234567890,"method":"ping"}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        text.starts_with(r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"error":"#),
        "{text}"
    );

    // The SSE framing of Streamable HTTP carries the same text.
    let (status, text) = post_raw(
        &g,
        &t.mcp_url,
        &t.key,
        &[("accept", "text/event-stream")],
        r#"{"jsonrpc":"2.0","id":1.50,"method":"ping"}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        sse_message(&text),
        r#"{"jsonrpc":"2.0","id":1.50,"result":{}}"#
    );

    // The HTTP+SSE transport answers on its stream with the same text.
    let mut stream = g
        .http
        .get(format!("{}/sse", t.mcp_url))
        .bearer_auth(&t.key)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let mut seen = String::new();
    let endpoint = loop {
        let chunk = stream.chunk().await.unwrap().expect("an endpoint event");
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
        if let Some(path) = seen
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .filter(|_| seen.contains("\n\n"))
        {
            break format!("{}{}", g.base, path);
        }
    };
    let (status, _) = post_raw(
        &g,
        &endpoint,
        &t.key,
        &[],
        r#"[{"jsonrpc":"2.0","id":-0,"method":"ping"},{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}]"#,
    )
    .await;
    assert_eq!(status, 202);
    let mut seen = String::new();
    let data = loop {
        let chunk = stream.chunk().await.unwrap().expect("a message event");
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
        if seen.contains("event: message") && seen.ends_with("\n\n") {
            break sse_message(&seen).to_string();
        }
    };
    assert_eq!(
        data,
        r#"[{"jsonrpc":"2.0","id":-0,"result":{}},{"jsonrpc":"2.0","id":123456789012345678901234567890,"result":{}}]"#
    );
}

/// Most bytes an error body may take, whatever the request carried.
const SMALL_ERROR_BODY: usize = 4096;

#[tokio::test]
async fn errors_repeat_only_a_short_prefix_of_bad_input() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;

    // A 900 KB value failing `maxLength`: named, but not repeated.
    let huge = "a".repeat(900_000);
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"af_memory_remember","arguments":{"content": huge}}});
    let (status, text) = post(&g, &t, &call.to_string()).await;
    assert_eq!(status, 200);
    assert!(text.len() < SMALL_ERROR_BODY, "{} bytes", text.len());
    let body: Value = serde_json::from_str(&text).unwrap();
    let error = &body["error"];
    assert_eq!(error["code"], -32602, "{body}");
    assert_eq!(error["data"]["field"], "content");
    assert_eq!(error["data"]["errors"][0]["field"], "content");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("invalid arguments for `af_memory_remember`: `content`: \"aaaa"),
        "{message}"
    );
    assert!(
        message.ends_with("… is longer than 32768 characters"),
        "{message}"
    );
    let detail = error["data"]["errors"][0]["message"].as_str().unwrap();
    assert!(detail.chars().count() < 200, "{detail}");

    // A 900 KB tool name: a prefix in the message and data, and a prefix in
    // the record of its refusal.
    let name = "n".repeat(900_000);
    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name": name}});
    let (_, text) = post(&g, &t, &call.to_string()).await;
    assert!(text.len() < SMALL_ERROR_BODY, "{} bytes", text.len());
    let body: Value = serde_json::from_str(&text).unwrap();
    let shown = format!("{}…", "n".repeat(128));
    assert_eq!(body["error"]["message"], format!("unknown tool `{shown}`"));
    assert_eq!(body["error"]["data"]["tool"], shown.as_str());
    let records = committed(&g).await;
    let refusal = records
        .iter()
        .find(|d| d.record.action == "view_tool" && d.record.resource.contains("nnnn"))
        .expect("the refusal is recorded");
    assert!(refusal.record.resource.len() < 300);

    // A 900 KB method name.
    let call = json!({"jsonrpc":"2.0","id":3,"method": "m".repeat(900_000)});
    let (_, text) = post(&g, &t, &call.to_string()).await;
    assert!(text.len() < SMALL_ERROR_BODY, "{} bytes", text.len());
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["code"], -32601);
    assert_eq!(
        body["error"]["data"]["method"],
        format!("{}…", "m".repeat(128)).as_str()
    );
}

#[tokio::test]
async fn many_bad_values_report_a_bounded_number_of_errors() {
    let g = TestGateway::start().await;
    let t = g
        .tenant_full("acme", true, true, &[], &["developers"])
        .await;
    // 2,000 node ids each over `maxLength` (and the array over `maxItems`).
    let ids: Vec<String> = (0..2000).map(|i| format!("{i:0>200}")).collect();
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"graph_improve","arguments":{"sessionId":"s","outcome":"accepted","usedNodeIds": ids}}});
    let (status, text) = post(&g, &t, &call.to_string()).await;
    assert_eq!(status, 200);
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["code"], -32602, "{body}");
    let errors = body["error"]["data"]["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 8, "{body}");
    assert!(text.len() < 8 * SMALL_ERROR_BODY, "{} bytes", text.len());
}
