//! The MCP endpoint's wire contract, through the real server: every status
//! and JSON-RPC error code of the endpoint seed, version negotiation,
//! batches, limits, origin checks and tenant isolation.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::TestGateway;
use serde_json::{Value, json};

fn rpc(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})
}

fn code(body: &Value) -> i64 {
    body["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no error code in {body}"))
}

#[tokio::test]
async fn initialize_negotiates_every_supported_version() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let cases = [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
    ];
    for (asked, answered) in cases {
        let (status, body) = g
            .mcp(
                &t,
                rpc(
                    1,
                    "initialize",
                    json!({"protocolVersion": asked, "clientInfo": {"name":"t","version":"1"}}),
                ),
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(body["result"]["protocolVersion"], answered, "asked {asked}");
        assert_eq!(body["result"]["serverInfo"]["name"], "cedargate");
        assert_eq!(
            body["result"]["serverInfo"]["version"],
            env!("CARGO_PKG_VERSION")
        );
        assert!(body["result"]["capabilities"]["tools"].is_object());
    }
}

#[tokio::test]
async fn notifications_get_202_without_body() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let (status, body) = g
        .mcp(
            &t,
            json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        )
        .await;
    assert_eq!((status, body), (202, Value::Null));
    let (status, body) =
        g.mcp(&t, json!([{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}])).await;
    assert_eq!((status, body), (202, Value::Null));
}

#[tokio::test]
async fn batch_answers_requests_and_omits_notifications() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let (status, body) = g
        .mcp(
            &t,
            json!([
                {"jsonrpc":"2.0","id":1,"method":"tools/list"},
                {"jsonrpc":"2.0","method":"notifications/initialized"},
                {"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"af_memory_recall","arguments":{"query":"auth patterns","workType":"feature"}}},
                {"jsonrpc":"2.0","id":3,"method":"nope"},
                {"id":4,"method":"ping"}
            ]),
        )
        .await;
    assert_eq!(status, 200);
    let items = body.as_array().expect("array response");
    assert_eq!(items.len(), 4, "{body}");
    assert_eq!(items[0]["id"], 1);
    assert_eq!(
        items[0]["result"]["tools"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(items[1]["id"], "two");
    assert!(items[1]["result"]["content"][0]["text"].is_string());
    assert_eq!(
        (items[2]["id"].clone(), code(&items[2])),
        (json!(3), -32601)
    );
    assert_eq!(
        (items[3]["id"].clone(), code(&items[3])),
        (json!(4), -32600)
    );
}

#[tokio::test]
async fn json_rpc_error_codes() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let url = t.mcp_url.clone();
    // (body, expected HTTP status, expected JSON-RPC code)
    let cases: Vec<(String, u16, i64)> = vec![
        ("{not json".into(), 400, -32700),
        ("".into(), 400, -32700),
        (json!({"id":1,"method":"ping"}).to_string(), 400, -32600),
        (json!({"jsonrpc":"2.0","id":1}).to_string(), 400, -32600),
        (
            json!({"jsonrpc":"2.0","id":1,"method":7}).to_string(),
            400,
            -32600,
        ),
        ("[]".into(), 400, -32600),
        (
            rpc(1, "completion/complete", json!({})).to_string(),
            200,
            -32601,
        ),
        (
            rpc(1, "server/discover", json!({})).to_string(),
            200,
            -32601,
        ),
        (rpc(1, "tools/call", json!({})).to_string(), 200, -32602),
        (
            rpc(1, "tools/call", json!({"name": 5})).to_string(),
            200,
            -32602,
        ),
        (
            rpc(
                1,
                "tools/call",
                json!({"name":"af_memory_recall","arguments":[1]}),
            )
            .to_string(),
            200,
            -32602,
        ),
        (
            rpc(
                1,
                "tools/call",
                json!({"name":"af_memory_recall","arguments":{"query":1,"workType":"x"}}),
            )
            .to_string(),
            200,
            -32602,
        ),
        (
            rpc(
                1,
                "tools/call",
                json!({"name":"no_such_tool","arguments":{}}),
            )
            .to_string(),
            200,
            -32601,
        ),
    ];
    for (body, want_status, want_code) in cases {
        let (status, resp) = g.mcp_raw(&url, Some(&t.key), &[], body.clone()).await;
        assert_eq!(
            (status, code(&resp)),
            (want_status, want_code),
            "body {body} -> {resp}"
        );
        assert!(
            resp["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        assert!(resp["error"]["data"].is_object(), "data for {body}: {resp}");
    }
}

#[tokio::test]
async fn invalid_arguments_name_the_offending_field() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let cases = [
        (json!({"content": "x", "confidence": 1.5}), "confidence"),
        (json!({"content": "x", "confidence": -0.1}), "confidence"),
        (json!({"content": 42}), "content"),
        (json!({"type": "pattern"}), "content"),
    ];
    for (args, field) in cases {
        let body = g.call_tool(&t, "af_memory_remember", args.clone()).await;
        assert_eq!(code(&body), -32602, "{args}");
        assert_eq!(body["error"]["data"]["field"], field, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(field));
    }
    let body = g
        .call_tool(&t, "af_memory_recall", json!({"query": "x"}))
        .await;
    assert_eq!(body["error"]["data"]["field"], "workType");
    // Nothing was stored by any rejected call.
    let count = g.count("observations").await;
    assert_eq!(count, 0);
}

/// (url, key, extra headers, expected status)
type AuthCase<'a> = (&'a str, Option<&'a str>, Vec<(&'a str, &'a str)>, u16);

#[tokio::test]
async fn authentication_and_tenant_isolation_statuses() {
    let g = TestGateway::start().await;
    let a = g.tenant("acme").await;
    let b = g.tenant("globex").await;
    let ping = rpc(1, "ping", json!({})).to_string();
    let (id, _) = a
        .key
        .trim_start_matches("rsk_live_")
        .split_once('_')
        .unwrap();
    let wrong_secret = format!("rsk_live_{id}_{}", "0".repeat(48));
    let unknown_key = format!("rsk_live_{}_{}", "f".repeat(16), "0".repeat(48));
    let cookie = format!("session={}", a.key);
    let cases: Vec<AuthCase<'_>> = vec![
        (&a.mcp_url, Some(&a.key), vec![], 200),
        (&a.mcp_url, None, vec![], 401),
        (&a.mcp_url, None, vec![("cookie", cookie.as_str())], 401),
        (&a.mcp_url, Some("not-a-key"), vec![], 401),
        (&a.mcp_url, Some(&wrong_secret), vec![], 401),
        (&a.mcp_url, Some(&unknown_key), vec![], 401),
        (&a.mcp_url, Some(&b.key), vec![], 403),
        (&b.mcp_url, Some(&a.key), vec![], 403),
    ];
    for (url, key, headers, want) in cases {
        let (status, body) = g.mcp_raw(url, key, &headers, ping.clone()).await;
        assert_eq!(status, want, "{url} {key:?} {headers:?} -> {body}");
        if want != 200 {
            assert!(body["error"]["message"].is_string(), "{body}");
        }
    }
    let unknown_session = format!("{}/api/mcp/00000000-0000-4000-8000-000000000000", g.base);
    let (status, body) = g.mcp_raw(&unknown_session, Some(&a.key), &[], ping).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn protocol_header_get_and_origin_checks() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let ping = rpc(1, "ping", json!({})).to_string();
    let cases: Vec<(Vec<(&str, &str)>, u16)> = vec![
        (vec![("mcp-protocol-version", "2025-06-18")], 200),
        (vec![("mcp-protocol-version", "2024-11-05")], 200),
        (vec![("mcp-protocol-version", "2031-01-01")], 400),
        (vec![("mcp-protocol-version", "banana")], 400),
        (vec![("origin", "http://localhost:6274")], 200),
        (vec![("origin", "http://127.0.0.1")], 200),
        (vec![("origin", "https://evil.example")], 403),
        (vec![("origin", "null")], 403),
        (vec![("host", "evil.example:80")], 403),
    ];
    for (headers, want) in cases {
        let (status, body) = g
            .mcp_raw(&t.mcp_url, Some(&t.key), &headers, ping.clone())
            .await;
        assert_eq!(status, want, "{headers:?} -> {body}");
    }
    let resp = g
        .http
        .get(&t.mcp_url)
        .bearer_auth(&t.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
}

#[tokio::test]
async fn limits_on_body_batch_and_depth() {
    let g = TestGateway::start_with(|c| {
        c.limits.max_body_bytes = 4096;
        c.limits.max_batch_len = 3;
        c.limits.max_json_depth = 16;
    })
    .await;
    let t = g.tenant("acme").await;
    let big = rpc(
        1,
        "tools/call",
        json!({"name":"af_memory_remember","arguments":{"content":"x".repeat(5000)}}),
    )
    .to_string();
    let (status, body) = g.mcp_raw(&t.mcp_url, Some(&t.key), &[], big).await;
    assert_eq!(status, 413, "{body}");
    let batch = json!([
        rpc(1, "ping", json!({})),
        rpc(2, "ping", json!({})),
        rpc(3, "ping", json!({})),
        rpc(4, "ping", json!({}))
    ]);
    let (status, body) = g.mcp(&t, batch).await;
    assert_eq!((status, code(&body)), (400, -32600), "{body}");
    let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
    let (status, body) = g.mcp_raw(&t.mcp_url, Some(&t.key), &[], deep).await;
    assert_eq!((status, code(&body)), (400, -32600), "{body}");
    // Within the limits everything still works.
    let (status, _) = g.mcp(&t, rpc(1, "ping", json!({}))).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn structured_content_only_from_2025_06_18() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let call = rpc(
        1,
        "tools/call",
        json!({"name":"af_memory_remember","arguments":{"content":"structured test"}}),
    )
    .to_string();
    for (version, structured) in [
        ("2024-11-05", false),
        ("2025-03-26", false),
        ("2025-06-18", true),
        ("2025-11-25", true),
    ] {
        let (status, body) = g
            .mcp_raw(
                &t.mcp_url,
                Some(&t.key),
                &[("mcp-protocol-version", version)],
                call.clone(),
            )
            .await;
        assert_eq!(status, 200);
        let result = &body["result"];
        assert_eq!(result["content"][0]["type"], "text");
        assert_eq!(result["isError"], false);
        assert_eq!(
            result.get("structuredContent").is_some(),
            structured,
            "{version}: {body}"
        );
    }
    // Without the header, the version negotiated at initialize governs.
    g.mcp(
        &t,
        rpc(1, "initialize", json!({"protocolVersion":"2025-06-18"})),
    )
    .await;
    g.gw.store.writer().flush().await.unwrap();
    g.gw.invalidate_caches();
    let (_, body) = g.mcp_raw(&t.mcp_url, Some(&t.key), &[], call).await;
    assert!(
        body["result"]["structuredContent"]["id"].is_string(),
        "{body}"
    );
}

#[tokio::test]
async fn memory_round_trip_and_project_isolation() {
    let g = TestGateway::start().await;
    let a = g.tenant("acme").await;
    let b = g.tenant("globex").await;
    let notes = [
        "Auth uses WorkOS AuthKit for SSO; rsk_live bearer keys for the CLI",
        "The billing service retries Stripe webhooks three times with backoff",
        "Prefer sqlx migrations over hand-written DDL in the orders service",
    ];
    for n in notes {
        let body = g
            .call_tool(
                &a,
                "af_memory_remember",
                json!({"content": n, "type": "pattern", "confidence": 0.9}),
            )
            .await;
        assert!(
            body["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("Stored observation"),
            "{body}"
        );
    }
    let body = g
        .call_tool(
            &a,
            "af_memory_recall",
            json!({"query": "how does SSO authentication work?", "workType": "bug_fix"}),
        )
        .await;
    let text = body["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("WorkOS AuthKit"), "{text}");
    assert!(!text.contains("Stripe"), "{text}");
    // Another org's agent sees none of it.
    let body = g
        .call_tool(
            &b,
            "af_memory_recall",
            json!({"query": "SSO authentication WorkOS", "workType": "bug_fix"}),
        )
        .await;
    assert_eq!(
        body["result"]["content"][0]["text"],
        "No relevant observations found."
    );
}

#[tokio::test]
async fn caller_supplied_context_is_replaced_and_recorded() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let forged =
        json!({"orgId": "globex", "projectId": "globex-proj", "sessionId": "x", "agentId": "root"});
    let body = g
        .call_tool(
            &t,
            "af_memory_remember",
            json!({"content": "context override attempt", "context": forged}),
        )
        .await;
    assert!(body["result"].is_object(), "{body}");
    let (org, project, agent): (String, String, String) =
        g.gw.store
            .read(|c| {
                c.query_row(
                    "SELECT org_id, project_id, agent_id FROM observations",
                    cedargate::params![],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
            })
            .await
            .unwrap();
    assert_eq!(
        (org.as_str(), project.as_str(), agent.as_str()),
        ("acme", "acme-proj", "acme-agent")
    );
    let records = g.decisions().await;
    let call = records
        .iter()
        .rev()
        .find(|d| d.record.action == "call_tool")
        .unwrap();
    let notes: Value = serde_json::from_str(&call.record.notes).unwrap();
    assert_eq!(notes["callerContextReplaced"], true);
    assert_eq!(notes["callerContext"], forged);
}

#[tokio::test]
async fn memory_disabled_project_hides_memory_tools() {
    let g = TestGateway::start().await;
    let t = g.tenant_with("acme", false, &[]).await;
    let (_, body) = g.mcp(&t, rpc(1, "tools/list", json!({}))).await;
    assert_eq!(body["result"]["tools"], json!([]));
    let body = g
        .call_tool(
            &t,
            "af_memory_recall",
            json!({"query":"x","workType":"chore"}),
        )
        .await;
    assert_eq!(code(&body), -32601);
}

#[tokio::test]
async fn cedar_hidden_tool_is_absent_and_answers_as_unknown() {
    let g = TestGateway::start_with_policy("hide.cedar", "@id(\"hide-remember\")\nforbid (principal, action == Gateway::Action::\"view_tool\", resource == Gateway::Tool::\"af_memory_remember\");\n").await;
    let t = g.tenant("acme").await;
    let (_, body) = g.mcp(&t, rpc(1, "tools/list", json!({}))).await;
    let names: Vec<&str> = body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["af_memory_recall"]);
    let hidden = g
        .call_tool(&t, "af_memory_remember", json!({"content":"x"}))
        .await;
    let unknown = g.call_tool(&t, "no_such_tool", json!({})).await;
    assert_eq!(code(&hidden), -32601);
    assert_eq!(
        hidden["error"]["message"],
        "unknown tool `af_memory_remember`"
    );
    assert_eq!(unknown["error"]["message"], "unknown tool `no_such_tool`");
    // The hiding decision is on record with the deciding policy.
    let records = g.decisions().await;
    assert!(records.iter().any(|d| d.record.action == "view_tool"
        && d.record.decision == "deny"
        && d.record.reasons.contains("hide-remember")));
}

#[tokio::test]
async fn policy_forbid_answers_32003_with_decision_and_advice() {
    let g = TestGateway::start_with_policy("freeze.cedar", "@id(\"freeze-memory-writes\")\n@advice(\"memory is read-only during the incident\")\nforbid (principal, action in Gateway::Action::\"call_tool\", resource == Gateway::Tool::\"af_memory_remember\");\n").await;
    let t = g.tenant("acme").await;
    let body = g
        .call_tool(
            &t,
            "af_memory_remember",
            json!({"content": "should not land"}),
        )
        .await;
    assert_eq!(code(&body), -32003, "{body}");
    let data = &body["error"]["data"];
    assert_eq!(
        data["advice"],
        json!(["memory is read-only during the incident"])
    );
    assert_eq!(data["reasons"], json!(["freeze-memory-writes"]));
    let decision_id = data["decisionId"].as_str().unwrap();
    // The record is durable before the answer, and names the policy.
    let stored =
        g.gw.store
            .read({
                let id = decision_id.to_string();
                move |c| cedargate::store::decisions::get(c, &id)
            })
            .await
            .unwrap()
            .expect("deny record committed before the response");
    assert_eq!(stored.record.decision, "deny");
    assert_eq!(stored.record.action, "call_tool");
    assert_eq!(stored.record.reasons, "[\"freeze-memory-writes\"]");
    let count = g.count("observations").await;
    assert_eq!(count, 0, "a denied call stores nothing");
    // Recall is still allowed.
    let ok = g
        .call_tool(
            &t,
            "af_memory_recall",
            json!({"query":"x","workType":"chore"}),
        )
        .await;
    assert!(ok["result"].is_object());
}

#[tokio::test]
async fn tool_failure_answers_32603_and_acknowledges_nothing() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    // One observation first: a project with none answers a recall
    // without searching.
    let body = g
        .call_tool(&t, "af_memory_remember", json!({"content":"kept"}))
        .await;
    assert_eq!(body["result"]["isError"], false, "{body}");
    // Break the full-text index (recall's search fails inside the store)
    // and the observations' table (so does remember's insert: on SQLite
    // it no longer touches the index in its own transaction).
    g.gw.store
        .read(|c| {
            c.execute_batch(match c.backend() {
                cedargate::store::Backend::Sqlite => {
                    "DROP TABLE observations_fts;
                     CREATE TRIGGER observations_broken BEFORE INSERT ON observations
                     BEGIN SELECT RAISE(ABORT, 'broken'); END;"
                }
                cedargate::store::Backend::Postgres => {
                    "DROP TABLE recall_scopes CASCADE;
                     ALTER TABLE observations ADD CONSTRAINT broken CHECK (false) NOT VALID;"
                }
            })
        })
        .await
        .unwrap();
    let body = g
        .call_tool(
            &t,
            "af_memory_recall",
            json!({"query":"anything","workType":"chore"}),
        )
        .await;
    assert_eq!(code(&body), -32603, "{body}");
    let body = g
        .call_tool(&t, "af_memory_remember", json!({"content":"lost?"}))
        .await;
    assert_eq!(code(&body), -32603, "{body}");
    let count = g.count("observations").await;
    assert_eq!(count, 1, "only the observation stored before the break");
    // The failed recall is on record with its failure.
    let records = g.decisions().await;
    assert!(
        records
            .iter()
            .any(|d| d.record.action == "call_tool" && d.record.outcome.contains("\"failed\""))
    );
}

#[tokio::test]
async fn revoked_key_is_refused_at_once() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let (status, _) = g.mcp(&t, rpc(1, "ping", json!({}))).await;
    assert_eq!(status, 200);
    let (status, _) = g
        .admin(
            reqwest::Method::DELETE,
            &format!("/admin/orgs/acme/keys/{}", t.key_id),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = g.mcp(&t, rpc(1, "ping", json!({}))).await;
    assert_eq!(status, 401);
}
