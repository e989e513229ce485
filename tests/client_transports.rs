//! The transports clients use, through the real server: the HTTP+SSE
//! transport of protocol 2024-11-05 (endpoint event, 202 + answer on the
//! stream, keep-alives, per-key bound, teardown, a client leaving mid-call),
//! the Streamable HTTP details (`Mcp-Session-Id`, SSE-only `Accept`,
//! `DELETE`), protocol-version headers on each, and the discovery
//! descriptor. Every path passes the same PEP and lands in the same trail.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::{Tenant, TestGateway};
use serde_json::{Value, json};

/// Upper bound on any wait for the server (a hang fails the test instead of
/// blocking the suite; nothing asserts how fast anything is).
const PATIENCE: Duration = Duration::from_secs(20);

/// Denies recall for everyone, so a policy deny is visible on any transport.
const DENY_RECALL: &str = r#"
@id("no-recall")
@advice("recall is disabled for this test")
forbid (principal, action in Gateway::Action::"call_tool", resource == Gateway::Tool::"af_memory_recall");
"#;

fn rpc(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})
}

fn remember(id: i64, content: &str) -> Value {
    rpc(
        id,
        "tools/call",
        json!({"name":"af_memory_remember","arguments":{"content":content,"type":"pattern"}}),
    )
}

/// One server-sent event block.
#[derive(Debug, Clone, Default)]
struct SseEvent {
    event: Option<String>,
    data: String,
    comments: Vec<String>,
}

/// A minimal SSE reader over a streaming response.
struct SseStream {
    resp: reqwest::Response,
    buf: String,
}

impl SseStream {
    /// The next event block (comments included); `None` when the stream ended.
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut ev = SseEvent::default();
                for line in block.lines() {
                    if let Some(c) = line.strip_prefix(':') {
                        ev.comments.push(c.trim().to_string());
                    } else if let Some(e) = line.strip_prefix("event:") {
                        ev.event = Some(e.trim().to_string());
                    } else if let Some(d) = line.strip_prefix("data:") {
                        if !ev.data.is_empty() {
                            ev.data.push('\n');
                        }
                        ev.data.push_str(d.strip_prefix(' ').unwrap_or(d));
                    }
                }
                return Some(ev);
            }
            let chunk = tokio::time::timeout(PATIENCE, self.resp.chunk())
                .await
                .expect("the stream stalled")
                .ok()??;
            self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// The next `message` event's JSON, skipping keep-alives.
    async fn message(&mut self) -> Value {
        loop {
            let ev = self.next().await.expect("stream ended before a message");
            if ev.event.as_deref() == Some("message") {
                return serde_json::from_str(&ev.data).unwrap();
            }
            assert!(ev.event.is_none(), "unexpected event {ev:?}");
        }
    }
}

/// Opens the legacy stream; returns it and the `endpoint` event's URL.
async fn open_stream(g: &TestGateway, t: &Tenant) -> (SseStream, String) {
    let resp = g
        .http
        .get(format!("{}/sse", t.mcp_url))
        .bearer_auth(&t.key)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut s = SseStream {
        resp,
        buf: String::new(),
    };
    let first = s.next().await.expect("an endpoint event");
    assert_eq!(first.event.as_deref(), Some("endpoint"), "{first:?}");
    let prefix = format!("/api/mcp/{}/messages?streamId=", t.session_id);
    assert!(first.data.starts_with(&prefix), "{first:?}");
    let url = format!("{}{}", g.base, first.data);
    (s, url)
}

/// POSTs a message to a stream's endpoint; returns status and body text.
async fn post(
    g: &TestGateway,
    url: &str,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, String) {
    let mut req = g
        .http
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    for (h, v) in headers {
        req = req.header(*h, *v);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Waits until `cond` holds on the gateway's stream counters.
async fn until(
    g: &TestGateway,
    what: &str,
    cond: impl Fn(cedargate::mcp::streams::StreamStats) -> bool,
) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let stats = g.gw.streams.stats();
        if cond(stats) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never reached: {what}; last {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn sse_transport_answers_on_the_stream_behind_the_same_pep() {
    let g = TestGateway::start_with_policy("deny-recall.cedar", DENY_RECALL).await;
    let t = g.tenant("acme").await;
    let (mut s, url) = open_stream(&g, &t).await;

    let init = rpc(
        1,
        "initialize",
        json!({"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"1"}}),
    );
    let (status, body) = post(&g, &url, Some(&t.key), &[], &init).await;
    assert_eq!((status, body.as_str()), (202, ""));
    let answer = s.message().await;
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["result"]["protocolVersion"], "2024-11-05");
    assert_eq!(answer["result"]["serverInfo"]["name"], "cedargate");

    let note = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    assert_eq!(post(&g, &url, Some(&t.key), &[], &note).await.0, 202);

    assert_eq!(
        post(
            &g,
            &url,
            Some(&t.key),
            &[],
            &rpc(2, "tools/list", json!({}))
        )
        .await
        .0,
        202
    );
    let listed = s.message().await;
    assert_eq!(listed["id"], 2, "the notification got no answer: {listed}");
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"af_memory_remember"), "{names:?}");

    // A 2024-11-05 stream gets results without structuredContent.
    post(&g, &url, Some(&t.key), &[], &remember(3, "sse remembers")).await;
    let stored = s.message().await;
    assert_eq!(stored["id"], 3);
    assert_eq!(stored["result"]["isError"], false, "{stored}");
    assert!(
        stored["result"].get("structuredContent").is_none(),
        "{stored}"
    );

    // The policy deny arrives as -32003 with the decision id.
    let recall = rpc(
        4,
        "tools/call",
        json!({"name":"af_memory_recall","arguments":{"query":"sse","workType":"feature"}}),
    );
    post(&g, &url, Some(&t.key), &[], &recall).await;
    let denied = s.message().await;
    assert_eq!(denied["id"], 4);
    assert_eq!(denied["error"]["code"], -32003, "{denied}");
    let decision_id = denied["error"]["data"]["decisionId"].as_str().unwrap();

    // A batch is answered as one array on the stream.
    let batch = json!([rpc(5, "ping", json!({})), rpc(6, "nope", json!({}))]);
    assert_eq!(post(&g, &url, Some(&t.key), &[], &batch).await.0, 202);
    let answers = s.message().await;
    assert_eq!(answers[0]["id"], 5);
    assert_eq!(answers[1]["error"]["code"], -32601);

    let decisions = g.decisions().await;
    let deny = decisions
        .iter()
        .find(|d| d.record.id == decision_id)
        .expect("the deny is recorded");
    assert_eq!(deny.record.action, "call_tool");
    assert_eq!(deny.record.decision, "deny");
    assert!(deny.record.reasons.contains("no-recall"), "{deny:?}");
    // The stream's GET and each of the six POSTs decided access_session.
    let access = common::flat(&decisions)
        .iter()
        .filter(|d| d.action == "access_session" && d.decision == "allow")
        .count();
    assert_eq!(access, 7, "{decisions:?}");
    assert!(
        decisions
            .iter()
            .any(|d| d.record.action == "call_tool" && d.record.decision == "allow"),
        "the remember call is recorded"
    );
    drop(s);
    g.stop().await;
}

/// A message posted to an HTTP+SSE stream's endpoint with a W3C trace
/// context in its `_meta` carries it into its decision records, as a
/// Streamable HTTP or 2026-07-28 request does.
#[tokio::test]
async fn a_message_posted_to_a_stream_carries_its_trace_context_into_the_trail() {
    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let (mut s, url) = open_stream(&g, &t).await;
    let call = rpc(
        7,
        "tools/call",
        json!({"name": "af_memory_remember", "arguments": {"content": "over sse"},
               "_meta": {"traceparent": TRACEPARENT, "tracestate": "vendor=sse"}}),
    );
    let (status, _) = post(&g, &url, Some(&t.key), &[], &call).await;
    assert_eq!(status, 202);
    let answer = s.message().await;
    assert_eq!(answer["id"], 7, "{answer}");
    assert!(answer.get("result").is_some(), "{answer}");
    let trail = g.decisions().await;
    let call_tool: Vec<_> = trail
        .iter()
        .filter(|d| d.record.action == "call_tool")
        .collect();
    assert_eq!(call_tool.len(), 1);
    let notes: Value = serde_json::from_str(&call_tool[0].record.notes).unwrap();
    assert_eq!(notes["traceparent"], TRACEPARENT, "{notes}");
    assert_eq!(notes["tracestate"], "vendor=sse", "{notes}");
}

#[tokio::test]
async fn sse_requests_are_authenticated_isolated_and_validated() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let other = g.tenant("globex").await;
    let sse = format!("{}/sse", t.mcp_url);

    let resp = g.http.get(&sse).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer");
    let resp = g
        .http
        .get(&sse)
        .bearer_auth(&other.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403, "cross-org stream");
    let resp = g
        .http
        .get(format!("{}/api/mcp/no-such-session/sse", g.base))
        .bearer_auth(&t.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let resp = g
        .http
        .get(&sse)
        .bearer_auth(&t.key)
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403, "DNS-rebinding check");
    assert_eq!(
        g.gw.streams.stats().open,
        0,
        "no refused stream is registered"
    );

    let (_s, url) = open_stream(&g, &t).await;
    let ping = rpc(1, "ping", json!({}));
    assert_eq!(post(&g, &url, None, &[], &ping).await.0, 401);
    let evil = [("origin", "https://evil.example")];
    assert_eq!(post(&g, &url, Some(&t.key), &evil, &ping).await.0, 403);
    // A second key of the same org may use the session, but not post into
    // a stream the first key opened.
    let (status, minted) = g
        .admin(
            reqwest::Method::POST,
            "/admin/orgs/acme/keys",
            Some(json!({"label": "second daemon"})),
        )
        .await;
    assert_eq!(status, 201, "{minted}");
    let second = minted["key"].as_str().unwrap();
    let (status, body) = post(&g, &url, Some(second), &[], &ping).await;
    assert_eq!(status, 404, "{body}");
    // Another org's key cannot post into the stream.
    let other_url = url.replace(&t.session_id, &other.session_id);
    assert_eq!(
        post(&g, &other_url, Some(&other.key), &[], &ping).await.0,
        404
    );
    assert_eq!(post(&g, &url, Some(&other.key), &[], &ping).await.0, 403);
    let unknown = format!(
        "{}/messages?streamId=00000000-0000-4000-8000-000000000000",
        t.mcp_url
    );
    let (status, body) = post(&g, &unknown, Some(&t.key), &[], &ping).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("-32002"), "{body}");
    let (status, body) = post(
        &g,
        &format!("{}/messages", t.mcp_url),
        Some(&t.key),
        &[],
        &ping,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("streamId"), "{body}");
    let resp = g
        .http
        .post(&url)
        .bearer_auth(&t.key)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32700);
    g.stop().await;
}

#[tokio::test]
async fn protocol_version_headers_on_each_transport() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;

    // Streamable HTTP: a supported header shapes the result, others are 400.
    for (version, status) in [
        ("2025-06-18", 200),
        ("2024-11-05", 200),
        ("2031-01-01", 400),
    ] {
        let (got, body) = g
            .mcp_raw(
                &t.mcp_url,
                Some(&t.key),
                &[("mcp-protocol-version", version)],
                rpc(1, "ping", json!({})).to_string(),
            )
            .await;
        assert_eq!(got, status, "{version}: {body}");
    }

    // HTTP+SSE: the stream's GET and the POSTs check the header too.
    let resp = g
        .http
        .get(format!("{}/sse", t.mcp_url))
        .bearer_auth(&t.key)
        .header("mcp-protocol-version", "banana")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let (mut s, url) = open_stream(&g, &t).await;
    let (status, body) = post(
        &g,
        &url,
        Some(&t.key),
        &[("mcp-protocol-version", "2031-01-01")],
        &rpc(1, "ping", json!({})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("2025-11-25"),
        "names the supported versions: {body}"
    );

    // Without a header or initialize, the stream speaks 2024-11-05...
    post(&g, &url, Some(&t.key), &[], &remember(2, "plain")).await;
    let plain = s.message().await;
    assert!(
        plain["result"].get("structuredContent").is_none(),
        "{plain}"
    );
    // ...a header governs the one request it is on...
    post(
        &g,
        &url,
        Some(&t.key),
        &[("mcp-protocol-version", "2025-06-18")],
        &remember(3, "structured"),
    )
    .await;
    let structured = s.message().await;
    assert!(
        structured["result"]["structuredContent"]["id"].is_string(),
        "{structured}"
    );
    // ...and an initialize on the stream sets the version for the rest.
    let init = rpc(4, "initialize", json!({"protocolVersion":"2025-11-25"}));
    post(&g, &url, Some(&t.key), &[], &init).await;
    assert_eq!(s.message().await["result"]["protocolVersion"], "2025-11-25");
    post(&g, &url, Some(&t.key), &[], &remember(5, "negotiated")).await;
    let negotiated = s.message().await;
    assert!(
        negotiated["result"]["structuredContent"]["id"].is_string(),
        "{negotiated}"
    );
    drop(s);
    g.stop().await;
}

#[tokio::test]
async fn open_streams_are_bounded_per_key() {
    let g = TestGateway::start_with(|c| c.sse.max_streams_per_key = 2).await;
    let t = g.tenant("acme").await;
    let other = g.tenant("globex").await;
    let (first, _) = open_stream(&g, &t).await;
    let (_second, _) = open_stream(&g, &t).await;
    let resp = g
        .http
        .get(format!("{}/sse", t.mcp_url))
        .bearer_auth(&t.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    assert!(resp.headers().contains_key("retry-after"));
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["data"]["maxStreamsPerKey"], 2, "{body}");
    // Another key has its own allowance.
    let (_third, _) = open_stream(&g, &other).await;
    // Closing a stream gives its slot back.
    drop(first);
    until(&g, "the closed stream is released", |s| s.open == 2).await;
    let (_again, _) = open_stream(&g, &t).await;
    g.stop().await;
}

#[tokio::test]
async fn idle_streams_get_keep_alives() {
    let g = TestGateway::start_with(|c| c.sse.keepalive_secs = 1).await;
    let t = g.tenant("acme").await;
    let (mut s, _) = open_stream(&g, &t).await;
    let ev = s.next().await.expect("the stream stays open");
    assert_eq!(ev.event, None, "{ev:?}");
    assert_eq!(ev.comments, vec!["keep-alive".to_string()], "{ev:?}");
    drop(s);
    g.stop().await;
}

#[tokio::test]
async fn a_stream_is_torn_down_when_its_client_goes_away() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let (s, url) = open_stream(&g, &t).await;
    assert_eq!(g.gw.streams.stats().open, 1);
    drop(s);
    until(&g, "the stream is unregistered", |s| s.open == 0).await;
    let (status, body) = post(&g, &url, Some(&t.key), &[], &rpc(1, "ping", json!({}))).await;
    assert_eq!(status, 404, "a closed stream takes no messages: {body}");
    g.stop().await;
}

#[tokio::test]
async fn a_client_leaving_mid_call_leaks_nothing_and_its_decisions_are_recorded() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let (s, url) = open_stream(&g, &t).await;
    const CALLS: i64 = 32;
    let batch = Value::Array(
        (1..=CALLS)
            .map(|i| remember(i, &format!("note {i}")))
            .collect(),
    );
    let (status, _) = post(&g, &url, Some(&t.key), &[], &batch).await;
    assert_eq!(status, 202);
    // Leave while the batch is being answered.
    drop(s);
    until(&g, "stream closed and every answering task finished", |s| {
        s.open == 0 && s.in_flight == 0
    })
    .await;
    let decisions = g.decisions().await;
    let completed = decisions
        .iter()
        .filter(|d| {
            d.record.action == "call_tool"
                && d.record.decision == "allow"
                && d.record.outcome.contains("completed")
        })
        .count();
    assert_eq!(
        completed, CALLS as usize,
        "every call's decision and outcome are recorded"
    );
    assert_eq!(g.count("observations").await, CALLS);
    g.stop().await;
}

#[tokio::test]
async fn shutdown_ends_open_streams() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let (mut s, _) = open_stream(&g, &t).await;
    let stopping = tokio::spawn(async move {
        g.stop().await;
    });
    assert!(s.next().await.is_none(), "the stream ends at shutdown");
    tokio::time::timeout(PATIENCE, stopping)
        .await
        .expect("shutdown completes with a stream open")
        .unwrap();
}

#[tokio::test]
async fn mcp_session_id_is_returned_and_checked_and_delete_terminates() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let init = rpc(1, "initialize", json!({"protocolVersion":"2025-06-18"})).to_string();
    let ping = rpc(2, "ping", json!({})).to_string();
    let send =
        |method: reqwest::Method, headers: Vec<(&'static str, String)>, body: Option<String>| {
            let mut req = g
                .http
                .request(method, &t.mcp_url)
                .bearer_auth(&t.key)
                .header("content-type", "application/json");
            for (h, v) in headers {
                req = req.header(h, v);
            }
            if let Some(b) = body {
                req = req.body(b);
            }
            req.send()
        };
    let sid = || vec![("mcp-session-id", t.session_id.clone())];

    let resp = send(reqwest::Method::POST, vec![], Some(init.clone()))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["mcp-session-id"], t.session_id.as_str());
    // Only initialize answers carry it.
    let resp = send(reqwest::Method::POST, sid(), Some(ping.clone()))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(!resp.headers().contains_key("mcp-session-id"));
    // A header naming another session is refused: the path is authoritative.
    let resp = send(
        reqwest::Method::POST,
        vec![("mcp-session-id", "someone-else".into())],
        Some(ping.clone()),
    )
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 400);

    // DELETE needs the key like any request.
    let resp = g.http.delete(&t.mcp_url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let (mut stream, _) = open_stream(&g, &t).await;
    let resp = send(
        reqwest::Method::DELETE,
        vec![("mcp-session-id", "someone-else".into())],
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        400,
        "DELETE of another session's id"
    );
    let resp = send(
        reqwest::Method::DELETE,
        vec![("mcp-protocol-version", "2031-01-01".into())],
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        400,
        "DELETE checks the version header"
    );
    assert_eq!(g.gw.streams.stats().open, 1, "refused DELETEs end nothing");
    let resp = send(reqwest::Method::DELETE, sid(), None).await.unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    assert!(
        stream.next().await.is_none(),
        "the session's SSE streams end"
    );
    // The terminated id answers 404 (the spec's signal to initialize again)...
    let resp = send(reqwest::Method::POST, sid(), Some(ping.clone()))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32002, "{body}");
    let resp = send(reqwest::Method::DELETE, sid(), None).await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    // ...the gateway session itself lives on: without the header it works,
    let resp = send(reqwest::Method::POST, vec![], Some(ping.clone()))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    // and a new initialize starts a new MCP session under the same id.
    let resp = send(reqwest::Method::POST, vec![], Some(init))
        .await
        .unwrap();
    assert_eq!(resp.headers()["mcp-session-id"], t.session_id.as_str());
    let resp = send(reqwest::Method::POST, sid(), Some(ping.clone()))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    // A termination notification that arrives after the resume (another
    // instance's, or this one's own, delayed) leaves a mark the store
    // overrules: the live MCP session is still served.
    g.gw.terminated.remember(&t.session_id);
    let resp = send(reqwest::Method::POST, sid(), Some(ping))
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        200,
        "a stale mark refused a live session"
    );

    // GET on the endpoint still offers no stream, and says what it allows.
    let resp = g
        .http
        .get(&t.mcp_url)
        .bearer_auth(&t.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    assert_eq!(resp.headers()["allow"], "POST, DELETE");
    let decisions = g.decisions().await;
    assert!(
        common::flat(&decisions)
            .iter()
            .filter(|d| d.action == "access_session")
            .count()
            >= 9,
        "every request, DELETE included, decided access_session"
    );
    g.stop().await;
}

#[tokio::test]
async fn event_stream_only_clients_get_an_sse_answer() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let body = rpc(7, "tools/list", json!({})).to_string();
    let ask = |accept: &'static str| {
        g.http
            .post(&t.mcp_url)
            .bearer_auth(&t.key)
            .header("content-type", "application/json")
            .header("accept", accept)
            .body(body.clone())
            .send()
    };
    let resp = ask("text/event-stream").await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let text = resp.text().await.unwrap();
    let data = text
        .strip_prefix("event: message\ndata: ")
        .and_then(|r| r.strip_suffix("\n\n"))
        .unwrap_or_else(|| panic!("one message event: {text:?}"));
    let answer: Value = serde_json::from_str(data).unwrap();
    assert_eq!(answer["id"], 7);
    assert!(answer["result"]["tools"].is_array());

    for accept in [
        "application/json, text/event-stream",
        "application/json",
        "*/*",
    ] {
        let resp = ask(accept).await.unwrap();
        assert_eq!(
            resp.headers()["content-type"],
            "application/json",
            "{accept}"
        );
    }
    // Errors before dispatch stay plain JSON with their status.
    let resp = g
        .http
        .post(&t.mcp_url)
        .header("accept", "text/event-stream")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    g.stop().await;
}

#[tokio::test]
async fn discovery_descriptor_describes_the_server_without_credentials() {
    let g = TestGateway::start().await;
    let resp = g
        .http
        .get(format!("{}/.well-known/mcp.json", g.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let d: Value = resp.json().await.unwrap();
    assert_eq!(d["name"], "cedargate");
    assert_eq!(d["version"], env!("CARGO_PKG_VERSION"));
    let endpoint = format!("{}/api/mcp/{{sessionId}}", g.base);
    assert_eq!(d["endpoint"], endpoint.as_str());
    assert_eq!(
        d["protocolVersions"],
        json!([
            "2026-07-28",
            "2025-11-25",
            "2025-06-18",
            "2025-03-26",
            "2024-11-05"
        ])
    );
    assert_eq!(d["preferredProtocolVersion"], "2025-11-25");
    let transports = d["transports"].as_array().unwrap();
    let streamable = transports
        .iter()
        .find(|t| t["type"] == "streamable-http")
        .unwrap();
    assert_eq!(streamable["endpoint"], endpoint.as_str());
    let sse = transports.iter().find(|t| t["type"] == "sse").unwrap();
    assert_eq!(sse["endpoint"], format!("{endpoint}/sse").as_str());
    assert_eq!(sse["protocolVersions"], json!(["2024-11-05"]));
    assert_eq!(d["authentication"]["type"], "bearer");
    assert_eq!(d["authentication"]["header"], "Authorization");
    assert_eq!(d["authentication"]["cookies"], false);

    // Clients can fetch it cross-origin (browser-based tools do).
    let resp = g
        .http
        .get(format!("{}/.well-known/mcp.json", g.base))
        .header("origin", "https://elsewhere.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);

    // The advertised template, filled in, is a working endpoint.
    let t = g.tenant("acme").await;
    let url = endpoint.replace("{sessionId}", &t.session_id);
    let (status, _) = g
        .mcp_raw(
            &url,
            Some(&t.key),
            &[],
            rpc(1, "ping", json!({})).to_string(),
        )
        .await;
    assert_eq!(status, 200);
    g.stop().await;
}

#[tokio::test]
async fn discovery_base_url_follows_public_url_else_an_allowed_host() {
    let g = TestGateway::start_with(|c| c.public_url = None).await;
    let port = g.gw.config.listen.port();
    let fetch = |host: String| {
        g.http
            .get(format!("{}/.well-known/mcp.json", g.base))
            .header("host", host)
            .send()
    };
    let d: Value = fetch(format!("localhost:{port}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        d["endpoint"],
        format!("http://localhost:{port}/api/mcp/{{sessionId}}").as_str(),
        "the name the client used, when allowed"
    );
    let d: Value = fetch("evil.example".into())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        d["endpoint"],
        format!("http://127.0.0.1:{port}/api/mcp/{{sessionId}}").as_str(),
        "a Host outside the allow-list is never echoed"
    );
    g.stop().await;
}
