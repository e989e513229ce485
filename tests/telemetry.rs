//! Traces through the real server, exported to a real OTLP/HTTP receiver
//! started here (`POST /v1/traces`, decoded with the official
//! `opentelemetry-proto` definitions): a `tools/call` through an upstream
//! MCP server is one trace (server span, decision span naming the record
//! `/admin/decisions` shows, commit span, upstream client span), and the
//! upstream receives the trace context (its `traceparent` header and
//! `params._meta`); a real upstream built with the official Python SDK,
//! exporting with the OpenTelemetry SDK to the same receiver, continues
//! that context: its own server span joins the trace as a child of the
//! gateway's client span; a denied call's spans carry the deny; a collector that
//! is down or hangs fails no request and its drops are counted; sampling
//! at 0 exports nothing; every transport continues a caller's trace; a
//! trace finds its decisions and a decision links its trace; A2A calls
//! carry the context; OTLP/gRPC reaches a gRPC collector (the
//! collector's own `TraceService`). Both backends (`CG_TEST_BACKEND`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::{Tenant, TestGateway};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use reqwest::Method;
use serde_json::{Value, json};

/// The caller's trace: the agent's own span the request continues.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// A running OTLP/HTTP receiver, the spans it got and the `service.name`
/// of the resource that sent each (by span id).
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Span>>>,
    services: Arc<Mutex<HashMap<Vec<u8>, String>>>,
}

type Collected = (Arc<Mutex<Vec<Span>>>, Arc<Mutex<HashMap<Vec<u8>, String>>>);

async fn receive(State((spans, services)): State<Collected>, body: Bytes) -> Response {
    let request = ExportTraceServiceRequest::decode(body).unwrap();
    let mut got = spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                Any::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for scope in resource.scope_spans {
            let mut named = services.lock().unwrap();
            for span in &scope.spans {
                named.insert(span.span_id.clone(), service.clone());
            }
            got.extend(scope.spans);
        }
    }
    (
        [("content-type", "application/x-protobuf")],
        Vec::<u8>::new(),
    )
        .into_response()
}

impl Receiver {
    async fn start() -> Receiver {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let services = Arc::new(Mutex::new(HashMap::new()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(receive))
            .with_state((Arc::clone(&spans), Arc::clone(&services)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            url: format!("http://{addr}"),
            spans,
            services,
        }
    }

    /// The `service.name` that exported `span`.
    fn service_of(&self, span: &Span) -> Option<String> {
        self.services.lock().unwrap().get(&span.span_id).cloned()
    }

    /// The spans of `trace`, once `wanted` of them arrived and the
    /// gateway's server span among them (or after 10 s). The server span
    /// ends after the response is written, so it may reach the collector
    /// in a later batch than the spans it contains.
    async fn trace(&self, trace: &str, wanted: usize) -> Vec<Span> {
        const SERVER: i32 = 2;
        for _ in 0..200 {
            let spans = self.of(trace);
            if spans.len() >= wanted && spans.iter().any(|s| s.kind == SERVER) {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.of(trace)
    }

    fn of(&self, trace: &str) -> Vec<Span> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| hex(&s.trace_id) == trace)
            .cloned()
            .collect()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The string (or int, as text; or string array, comma-joined) value of
/// attribute `key`.
fn attr(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?;
    match value.value.as_ref()? {
        Any::StringValue(s) => Some(s.clone()),
        Any::IntValue(i) => Some(i.to_string()),
        Any::ArrayValue(a) => Some(
            a.values
                .iter()
                .filter_map(|v| match v.value.as_ref()? {
                    Any::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(","),
        ),
        other => Some(format!("{other:?}")),
    }
}

fn named<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no span `{name}` in {:?}", names(spans)))
}

fn names(spans: &[Span]) -> Vec<String> {
    spans.iter().map(|s| s.name.clone()).collect()
}

/// A small recording MCP upstream: what each `tools/call` carried.
#[derive(Default)]
struct Seen {
    calls: Mutex<Vec<(Option<String>, Value)>>,
}

async fn upstream(State(seen): State<Arc<Seen>>, headers: HeaderMap, body: String) -> Response {
    let msg: Value = serde_json::from_str(&body).unwrap();
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match msg["method"].as_str().unwrap_or_default() {
        "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                               "serverInfo": {"name": "recorder", "version": "1"}}),
        "tools/list" => json!({"tools": [
            {"name": "echo", "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}},
             "annotations": {"readOnlyHint": true}}
        ]}),
        "tools/call" => {
            let traceparent = headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            seen.calls
                .lock()
                .unwrap()
                .push((traceparent, msg["params"]["_meta"].clone()));
            json!({"content": [{"type": "text", "text": msg["params"]["arguments"]["message"]}]})
        }
        _ => {
            return axum::Json(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}}),
            )
            .into_response();
        }
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

/// Starts the recording upstream; its URL and what it saw.
async fn start_upstream() -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let app = axum::Router::new()
        .route("/mcp", axum::routing::post(upstream))
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/mcp"), seen)
}

/// A gateway exporting to `endpoint` (tweaked by `more`), a tenant of
/// `acme` and the recording upstream registered for it as `files`.
async fn setup(
    endpoint: &str,
    policy: Option<&str>,
    more: impl FnOnce(&mut cedargate::telemetry::config::TelemetryConfig),
) -> (TestGateway, Tenant, Arc<Seen>) {
    let endpoint = endpoint.to_string();
    let tweak = move |c: &mut cedargate::config::Config| {
        c.telemetry.endpoint = Some(endpoint);
        c.telemetry.export_delay_ms = Some(50);
        more(&mut c.telemetry);
    };
    let g = match policy {
        Some(text) => {
            let dir = tempfile::tempdir().unwrap();
            let policies = common::copy_policies(dir.path());
            std::fs::write(policies.join("extra.cedar"), text).unwrap();
            let g = TestGateway::start_with(|c| {
                c.policies_dir = policies;
                tweak(c);
            })
            .await;
            std::mem::forget(dir);
            g
        }
        None => TestGateway::start_with(tweak).await,
    };
    let t = g.tenant("acme").await;
    let (url, seen) = start_upstream().await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "files", "transport": "streamable-http", "url": url, "timeoutMs": 5000})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    (g, t, seen)
}

/// A `tools/call` of `files.echo`, continuing the caller's trace when
/// `traced`.
async fn call_echo(g: &TestGateway, t: &Tenant, traced: bool) -> Value {
    let mut params = json!({"name": "files.echo", "arguments": {"message": "hi"}});
    if traced {
        params["_meta"] = json!({"traceparent": format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")});
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let (status, body) = g
        .mcp_raw(
            &t.mcp_url,
            Some(&t.key),
            &[("mcp-protocol-version", "2025-06-18")],
            body.to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn a_proxied_call_is_one_trace_from_the_agent_to_the_upstream() {
    let receiver = Receiver::start().await;
    let (g, t, seen) = setup(&receiver.url, None, |_| {}).await;
    let body = call_echo(&g, &t, true).await;
    assert_eq!(body["result"]["content"][0]["text"], "hi", "{body}");

    let spans = receiver.trace(CALLER_TRACE, 5).await;
    let server = named(&spans, "tools/call files.echo");
    assert_eq!(server.kind, 2, "server kind");
    assert_eq!(hex(&server.parent_span_id), CALLER_SPAN);
    assert_eq!(
        attr(server, "mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        attr(server, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(
        attr(server, "gen_ai.tool.name").as_deref(),
        Some("files.echo")
    );
    assert_eq!(attr(server, "jsonrpc.request.id").as_deref(), Some("7"));
    assert_eq!(attr(server, "mcp.session.id"), Some(t.session_id.clone()));
    assert_eq!(
        attr(server, "mcp.protocol.version").as_deref(),
        Some("2025-06-18")
    );
    assert_eq!(attr(server, "network.transport").as_deref(), Some("tcp"));
    assert_eq!(attr(server, "error.type"), None);
    assert_eq!(
        attr(server, "gen_ai.tool.call.arguments"),
        None,
        "not opted in"
    );

    // The decision span names the record the trail holds.
    let decision = named(&spans, "cedar call_tool");
    assert_eq!(decision.parent_span_id, server.span_id);
    assert_eq!(attr(decision, "cedar.decision").as_deref(), Some("allow"));
    assert_eq!(
        attr(decision, "cedar.policy_ids").as_deref(),
        Some("upstream-tools-for-own-org")
    );
    let record = g
        .decisions()
        .await
        .into_iter()
        .find(|d| d.record.action == "call_tool")
        .unwrap();
    assert_eq!(
        attr(decision, "cedargate.decision.id"),
        Some(record.record.id.clone())
    );
    assert_eq!(
        attr(decision, "cedargate.decision.seq"),
        Some(record.seq.to_string())
    );
    assert_eq!(
        attr(decision, "cedar.policy_set.hash"),
        Some(record.record.policy_hash.clone())
    );
    // The record names the trace and the request's span.
    let notes: Value = serde_json::from_str(&record.record.notes).unwrap();
    assert_eq!(notes["traceId"], CALLER_TRACE, "{notes}");
    assert_eq!(notes["spanId"], hex(&server.span_id), "{notes}");

    let commit = named(&spans, "cedargate.commit");
    assert_eq!(commit.parent_span_id, server.span_id);
    assert!(attr(commit, "db.system.name").is_some());

    let client = named(&spans, "tools/call echo");
    assert_eq!(client.kind, 3, "client kind");
    assert_eq!(client.parent_span_id, server.span_id);
    assert_eq!(attr(client, "server.address").as_deref(), Some("127.0.0.1"));

    // The upstream continued the same trace, as a child of the client span.
    let calls = seen.calls.lock().unwrap().clone();
    let (header, meta) = &calls[0];
    let expected = format!("00-{CALLER_TRACE}-{}-01", hex(&client.span_id));
    assert_eq!(header.as_deref(), Some(expected.as_str()));
    assert_eq!(meta["traceparent"], expected, "{meta}");
}

/// The upstream built with the official Python SDK
/// (`tests/upstreams/py_server.py`, installed by `tests/upstreams/setup.sh`
/// with the OpenTelemetry SDK pinned beside it), exporting its own spans
/// to `collector`; killed when dropped.
struct PyUpstream {
    url: String,
    _child: tokio::process::Child,
}

async fn start_py_upstream(collector: &str) -> PyUpstream {
    let dir = common::setup::upstreams_dir();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new(dir.join(".venv/bin/python"))
        .arg(dir.join("py_server.py"))
        .arg(port.to_string())
        .arg(collector)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Python server never listened"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    PyUpstream {
        url: format!("http://127.0.0.1:{port}/mcp"),
        _child: child,
    }
}

#[tokio::test]
async fn a_python_sdk_upstream_exports_its_own_span_into_the_callers_trace() {
    if !common::setup::upstreams_installed() {
        return;
    }
    let receiver = Receiver::start().await;
    let py = start_py_upstream(&receiver.url).await;
    let endpoint = receiver.url.clone();
    let g = TestGateway::start_with(move |c| {
        c.telemetry.endpoint = Some(endpoint);
        c.telemetry.export_delay_ms = Some(50);
    })
    .await;
    let t = g.tenant("acme").await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "py", "transport": "streamable-http", "url": py.url})),
        )
        .await;
    assert_eq!(status, 201, "{server}");

    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "py.add", "arguments": {"a": 2, "b": 40},
        "_meta": {"traceparent": format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")}}});
    let (status, body) = g
        .mcp_raw(
            &t.mcp_url,
            Some(&t.key),
            &[("mcp-protocol-version", "2025-06-18")],
            body.to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["structuredContent"], json!({"result": 42}));

    // The SDK's own server span (`tools/call add`, SERVER) arrives from
    // the upstream's exporter, in the caller's trace.
    let from_upstream = |spans: &[Span]| {
        spans
            .iter()
            .find(|s| s.kind == 2 && receiver.service_of(s).as_deref() == Some("py-upstream"))
            .cloned()
    };
    let mut spans = Vec::new();
    for _ in 0..200 {
        spans = receiver.of(CALLER_TRACE);
        let gateway_done = spans.iter().any(|s| s.name == "tools/call py.add");
        if gateway_done && from_upstream(&spans).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let upstream = from_upstream(&spans)
        .unwrap_or_else(|| panic!("no span of the upstream in {:?}", names(&spans)));
    // The gateway's client span has the SDK's server span's name.
    let client = spans
        .iter()
        .find(|s| s.name == "tools/call add" && s.kind == 3)
        .unwrap_or_else(|| panic!("no client span in {:?}", names(&spans)));
    assert_eq!(receiver.service_of(client).as_deref(), Some("cedargate"));
    let gateway = named(&spans, "tools/call py.add");
    assert_eq!(client.parent_span_id, gateway.span_id);

    // Parented by the gateway's client span: the context it carried on.
    assert_eq!(upstream.trace_id, client.trace_id);
    assert_eq!(hex(&upstream.parent_span_id), hex(&client.span_id));
    assert_eq!(upstream.name, "tools/call add");
    assert_eq!(
        attr(&upstream, "mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(attr(&upstream, "gen_ai.tool.name").as_deref(), Some("add"));
    assert_eq!(
        attr(&upstream, "mcp.protocol.version").as_deref(),
        server["protocolVersion"].as_str(),
        "the revision the gateway speaks to it: {server}"
    );
}

#[tokio::test]
async fn a_denied_call_carries_the_deny_on_its_spans() {
    let receiver = Receiver::start().await;
    let policy = r#"
@id("no-echo")
forbid (principal, action in Gateway::Action::"call_tool", resource == Gateway::Tool::"files.echo");
"#;
    let (g, t, seen) = setup(&receiver.url, Some(policy), |_| {}).await;
    let body = call_echo(&g, &t, true).await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    let spans = receiver.trace(CALLER_TRACE, 3).await;
    let decision = named(&spans, "cedar call_tool");
    assert_eq!(attr(decision, "cedar.decision").as_deref(), Some("deny"));
    assert_eq!(
        attr(decision, "cedar.policy_ids").as_deref(),
        Some("no-echo")
    );
    let server = named(&spans, "tools/call files.echo");
    assert_eq!(attr(server, "error.type").as_deref(), Some("-32003"));
    assert_eq!(
        server.status.as_ref().map(|s| s.code),
        Some(2),
        "status error"
    );
    assert!(
        spans.iter().all(|s| s.kind != 3),
        "no client span: {:?}",
        names(&spans)
    );
    assert!(seen.calls.lock().unwrap().is_empty());
    drop(g);
}

#[tokio::test]
async fn a_new_trace_is_started_and_noted_and_sampling_at_zero_exports_nothing() {
    let receiver = Receiver::start().await;
    let (g, t, _) = setup(&receiver.url, None, |_| {}).await;
    call_echo(&g, &t, false).await;
    let record = g
        .decisions()
        .await
        .into_iter()
        .find(|d| d.record.action == "call_tool")
        .unwrap();
    let notes: Value = serde_json::from_str(&record.record.notes).unwrap();
    let trace = notes["traceId"].as_str().unwrap().to_string();
    assert_eq!(trace.len(), 32, "{notes}");
    assert!(notes.get("traceparent").is_none(), "{notes}");
    let spans = receiver.trace(&trace, 4).await;
    assert!(
        spans.iter().any(|s| s.name == "cedar call_tool"),
        "{:?}",
        names(&spans)
    );

    let quiet = Receiver::start().await;
    let (g0, t0, _) = setup(&quiet.url, None, |c| c.sampling_ratio = Some(0.0)).await;
    for _ in 0..3 {
        call_echo(&g0, &t0, false).await;
    }
    g0.gw.telemetry.flush();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(quiet.spans.lock().unwrap().is_empty());
    let record = g0.decisions().await.into_iter().next_back().unwrap();
    assert!(
        !record.record.notes.contains("traceId"),
        "{}",
        record.record.notes
    );
}

/// A collector that accepts connections and never answers.
async fn hanging_collector() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    format!("http://{addr}")
}

/// The value of the dropped-spans counter for `reason` on `/metrics`.
async fn dropped(g: &TestGateway, reason: &str) -> u64 {
    let text = g
        .http
        .get(format!("{}/metrics", g.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!("cedargate_trace_spans_dropped_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn a_collector_that_hangs_or_is_down_fails_no_request_and_drops_are_counted() {
    // Hanging: the first export waits out its timeout; the queue of 4
    // fills behind it and the rest is dropped, never waited for.
    let hanging = hanging_collector().await;
    let (g, t, _) = setup(&hanging, None, |c| {
        c.max_queue_spans = Some(4);
        c.max_batch_spans = Some(2);
        c.export_timeout_ms = Some(30_000);
    })
    .await;
    for _ in 0..10 {
        let body = call_echo(&g, &t, true).await;
        assert_eq!(body["result"]["content"][0]["text"], "hi", "{body}");
    }
    assert!(dropped(&g, "queue_full").await > 0);

    // Down: nothing listens; every export fails, and is counted.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (g, t, _) = setup(&closed, None, |c| c.export_timeout_ms = Some(500)).await;
    for _ in 0..3 {
        call_echo(&g, &t, true).await;
    }
    let mut failed = 0;
    for _ in 0..100 {
        failed = dropped(&g, "export_failed").await;
        if failed > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(failed > 0);
}

/// A caller's `traceparent` for trace number `n` (its span `…0n`).
fn caller(n: u8) -> (String, String, String) {
    let trace = format!("{:032x}", 0xabc0_u128 + u128::from(n));
    let span = format!("{:016x}", 0x10_u64 + u64::from(n));
    (format!("00-{trace}-{span}-01"), trace, span)
}

/// The server span of `trace` and the upstream's received context for it.
async fn continued(receiver: &Receiver, seen: &Seen, trace: &str, span: &str) {
    let spans = receiver.trace(trace, 4).await;
    let server = named(&spans, "tools/call files.echo");
    assert_eq!(hex(&server.parent_span_id), span, "{:?}", names(&spans));
    let client = named(&spans, "tools/call echo");
    let expected = format!("00-{trace}-{}-01", hex(&client.span_id));
    let calls = seen.calls.lock().unwrap().clone();
    assert!(
        calls.iter().any(
            |(header, meta)| header.as_deref() == Some(expected.as_str())
                && meta["traceparent"] == expected
        ),
        "{expected} not among {calls:?}"
    );
}

#[tokio::test]
async fn every_transport_continues_the_callers_trace_and_carries_it_on() {
    let receiver = Receiver::start().await;
    let (g, t, seen) = setup(&receiver.url, None, |_| {}).await;
    let echo = json!({"name": "files.echo", "arguments": {"message": "hi"}});
    let call = |id: i64, meta: Option<&str>| {
        let mut params = echo.clone();
        if let Some(tp) = meta {
            params["_meta"] = json!({ "traceparent": tp });
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };

    // Streamable HTTP, the context in the HTTP header only.
    let (tp, trace, span) = caller(1);
    let (status, body) = g
        .mcp_raw(
            &t.mcp_url,
            Some(&t.key),
            &[("mcp-protocol-version", "2025-06-18"), ("traceparent", &tp)],
            call(1, None).to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    continued(&receiver, &seen, &trace, &span).await;

    // A batch: each message continues its own `_meta` context.
    let (tp2, trace2, span2) = caller(2);
    let (tp3, trace3, span3) = caller(3);
    let batch = json!([call(2, Some(&tp2)), call(3, Some(&tp3))]);
    let (status, body) = g
        .mcp_raw(
            &t.mcp_url,
            Some(&t.key),
            &[("mcp-protocol-version", "2025-06-18")],
            batch.to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    continued(&receiver, &seen, &trace2, &span2).await;
    continued(&receiver, &seen, &trace3, &span3).await;

    // 2026-07-28: the context in `_meta`, beside the revision's fields.
    let (tp4, trace4, span4) = caller(4);
    let mut params = echo.clone();
    params["_meta"] = json!({ "traceparent": tp4 });
    let body = common::modern::request(4, "tools/call", params);
    let answer = common::modern::modern(&g, &t, &body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    continued(&receiver, &seen, &trace4, &span4).await;
    let spans = receiver.trace(&trace4, 4).await;
    let server = named(&spans, "tools/call files.echo");
    assert_eq!(
        attr(server, "mcp.protocol.version").as_deref(),
        Some("2026-07-28")
    );
    assert_eq!(attr(server, "mcp.session.id"), None);

    // HTTP+SSE: posted to the stream's endpoint, answered on the stream.
    let resp = g
        .http
        .get(format!("{}/sse", t.mcp_url))
        .bearer_auth(&t.key)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let mut events = common::sse::Events {
        resp,
        buf: String::new(),
    };
    let endpoint = loop {
        if let Some(end) = events.buf.find("\n\n") {
            let block: String = events.buf.drain(..end + 2).collect();
            if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data:")) {
                break format!("{}{}", g.base, data.trim());
            }
            continue;
        }
        let chunk = events.resp.chunk().await.unwrap().unwrap();
        events.buf.push_str(std::str::from_utf8(&chunk).unwrap());
    };
    let (tp5, trace5, span5) = caller(5);
    let posted = g
        .http
        .post(&endpoint)
        .bearer_auth(&t.key)
        .header("content-type", "application/json")
        .body(call(5, Some(&tp5)).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status().as_u16(), 202);
    let answer = events.next().await.unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "hi", "{answer}");
    continued(&receiver, &seen, &trace5, &span5).await;
}

/// `application/x-www-form-urlencoded` of hex-and-letters values.
fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    html[at..].split('"').next().unwrap().to_string()
}

/// The console's decision page of `id`, signed in with the admin token.
async fn decision_page(g: &TestGateway, id: &str) -> String {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = http
        .get(format!("{}/console/login", g.base))
        .send()
        .await
        .unwrap();
    let login = page
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_string())
        .find(|c| c.starts_with("cg_console_login="))
        .unwrap();
    let csrf = csrf_of(&page.text().await.unwrap());
    let resp = http
        .post(format!("{}/console/login", g.base))
        .header("cookie", &login)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("token", common::ADMIN_TOKEN), ("csrf", &csrf)]))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 303);
    let session = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_string())
        .find(|c| c.starts_with("cg_console="))
        .unwrap();
    let page = http
        .get(format!("{}/console/decisions/{id}", g.base))
        .header("cookie", session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    page.text().await.unwrap()
}

#[tokio::test]
async fn a_trace_finds_its_decisions_and_a_decision_links_its_trace() {
    let receiver = Receiver::start().await;
    let (g, t, _) = setup(&receiver.url, None, |c| {
        c.trace_link = Some("http://jaeger.test:16686/trace/{trace_id}".into());
        c.record_tool_io = vec!["files.echo".into()];
    })
    .await;
    call_echo(&g, &t, true).await;
    // The operator opted this tool in: its arguments and result are on
    // its span (the first test shows they are not otherwise).
    let spans = receiver.trace(CALLER_TRACE, 4).await;
    let server = named(&spans, "tools/call files.echo");
    assert_eq!(
        attr(server, "gen_ai.tool.call.arguments").as_deref(),
        Some(r#"{"message":"hi"}"#)
    );
    assert!(
        attr(server, "gen_ai.tool.call.result")
            .unwrap()
            .contains("\"text\":\"hi\"")
    );
    call_echo(&g, &t, false).await;
    let traced: Vec<_> = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| d.record.notes.contains(CALLER_TRACE))
        .collect();
    let record = traced
        .iter()
        .find(|d| d.record.action == "call_tool")
        .unwrap();

    // The admin API and the CLI find the trace's decisions, and only them.
    let (status, page) = g
        .admin(
            Method::GET,
            &format!("/admin/decisions?trace={CALLER_TRACE}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    let ids: Vec<&str> = page["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), traced.len(), "{page}");
    assert!(ids.contains(&record.record.id.as_str()));
    let (status, _) = g
        .admin(Method::GET, "/admin/decisions?trace=xyz", None)
        .await;
    assert_eq!(status, 400);

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cedargate.toml");
    let mut text = format!("data_dir = {:?}\n", g.dir.path().join("data"));
    if let Some(url) = common::database_url_for(g.dir.path()) {
        text.push_str(&format!("[database]\nurl = {url:?}\n"));
    }
    std::fs::write(&config, text).unwrap();
    let out = common::cli::run(
        &config,
        &["audit", "query", "--trace", CALLER_TRACE, "--json"],
    );
    assert!(out.status.success(), "{}", common::cli::stderr(&out));
    let lines: Vec<Value> = common::cli::stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), traced.len());
    assert!(lines.iter().any(|d| d["id"] == record.record.id.as_str()));
    let out = common::cli::run(&config, &["audit", "query", "--trace", "not-a-trace"]);
    assert!(!out.status.success());

    // The console's decision page shows the trace and links the tracing UI.
    let html = decision_page(&g, &record.record.id).await;
    assert!(
        html.contains(&format!("id=\"trace-id\">{CALLER_TRACE}<")),
        "{html}"
    );
    // (The template escapes `/` in attributes; a browser reads it back.)
    let unescaped = html.replace("&#x2f;", "/");
    assert!(
        unescaped.contains(&format!(
            "href=\"http://jaeger.test:16686/trace/{CALLER_TRACE}\""
        )),
        "{html}"
    );
}

/// A minimal A2A 1.0 peer: its card, and `SendMessage` answered with a
/// message; records the `traceparent` header of each call.
async fn start_peer() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rpc = format!("{base}/rpc");
    let card = json!({
        "name": "Peer", "description": "Says hi.", "version": "1.0.0",
        "supportedInterfaces": [{"url": rpc, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "skills": [{"id": "say-hi", "name": "Say hi"}],
    });
    let recorded = Arc::clone(&seen);
    let app = axum::Router::new()
        .route(
            "/.well-known/agent-card.json",
            axum::routing::get(move || {
                let card = card.clone();
                async move { axum::Json(card) }
            }),
        )
        .route(
            "/rpc",
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let recorded = Arc::clone(&recorded);
                async move {
                    let traceparent = headers
                        .get("traceparent")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    recorded.lock().unwrap().push(traceparent);
                    let req: Value = serde_json::from_str(&body).unwrap();
                    axum::Json(json!({"jsonrpc": "2.0", "id": req["id"], "result":
                        {"message": {"role": "ROLE_AGENT", "parts": [{"text": "hi there"}]}}}))
                }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

#[tokio::test]
async fn an_a2a_call_is_a_client_span_whose_context_reaches_the_peer() {
    let receiver = Receiver::start().await;
    let endpoint = receiver.url.clone();
    let g = TestGateway::start_with(move |c| {
        c.telemetry.endpoint = Some(endpoint);
        c.telemetry.export_delay_ms = Some(50);
    })
    .await;
    let t = g.tenant("acme").await;
    let (peer, seen) = start_peer().await;
    let (status, agent) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/a2a-agents",
            Some(json!({"url": peer})),
        )
        .await;
    assert_eq!(status, 201, "{agent}");
    let (tp, trace, _) = caller(9);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "peer.say-hi", "arguments": {}, "_meta": {"traceparent": tp}}});
    let (status, body) = g
        .mcp_raw(
            &t.mcp_url,
            Some(&t.key),
            &[("mcp-protocol-version", "2025-06-18")],
            body.to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["result"].is_object(), "{body}");
    let spans = receiver.trace(&trace, 4).await;
    let decision = named(&spans, "cedar a2a_invoke");
    assert_eq!(attr(decision, "cedar.decision").as_deref(), Some("allow"));
    let client = named(&spans, "SendMessage");
    assert_eq!(client.kind, 3);
    assert_eq!(attr(client, "a2a.protocol.version").as_deref(), Some("1.0"));
    assert_eq!(attr(client, "gen_ai.agent.name").as_deref(), Some("Peer"));
    let expected = format!("00-{trace}-{}-01", hex(&client.span_id));
    assert_eq!(seen.lock().unwrap().clone(), vec![Some(expected)]);
}

/// An OTLP/gRPC receiver (the collector's `TraceService`); its URL and spans.
async fn grpc_receiver() -> (String, Arc<Mutex<Vec<Span>>>) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };

    struct Collector(Arc<Mutex<Vec<Span>>>);

    #[tonic::async_trait]
    impl TraceService for Collector {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let mut got = self.0.lock().unwrap();
            for resource in request.into_inner().resource_spans {
                for scope in resource.scope_spans {
                    got.extend(scope.spans);
                }
            }
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }

    let spans = Arc::new(Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = TraceServiceServer::new(Collector(Arc::clone(&spans)));
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (format!("http://{addr}"), spans)
}

#[tokio::test]
async fn grpc_export_reaches_a_grpc_collector() {
    let (url, spans) = grpc_receiver().await;
    let (g, t, _) = setup(&url, None, |c| {
        c.protocol = Some(cedargate::telemetry::config::Protocol::Grpc);
    })
    .await;
    call_echo(&g, &t, true).await;
    let mut names = Vec::new();
    for _ in 0..200 {
        names = spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| hex(&s.trace_id) == CALLER_TRACE)
            .map(|s| s.name.clone())
            .collect();
        if names.len() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        names.contains(&"tools/call files.echo".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&"cedar call_tool".to_string()), "{names:?}");
}

/// A gateway trusting `idp` for org `acme` (as `issuer` says), exporting
/// to `receiver`; its tenant of `acme` and the person URL of its project.
async fn person_gateway(
    receiver: &Receiver,
    issuer: cedargate::identity::IssuerConfig,
) -> (TestGateway, String) {
    let endpoint = receiver.url.clone();
    let g = TestGateway::start_with(move |c| {
        c.auth.issuers = vec![issuer];
        c.telemetry.endpoint = Some(endpoint);
        c.telemetry.export_delay_ms = Some(50);
    })
    .await;
    let t = g.tenant("acme").await;
    let url = format!("{}/mcp/acme/{}", g.base, t.project);
    (g, url)
}

/// A person's `initialize` at `url` with `token`, continuing `traceparent`
/// from the HTTP headers (as an instrumented HTTP client sends it).
async fn person_initialize(url: &str, token: &str, traceparent: &str) {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "traced", "version": "1"}}});
    let resp = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("traceparent", traceparent)
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        200,
        "{}",
        resp.text().await.unwrap()
    );
}

/// The client span of the provider request to `url` in `trace` (waiting
/// for it and the gateway's server span).
async fn provider_span(receiver: &Receiver, trace: &str, method: &str, url: &str) -> Span {
    let find = |spans: &[Span]| {
        spans
            .iter()
            .find(|s| s.name == method && attr(s, "url.full").as_deref() == Some(url))
            .cloned()
    };
    let spans = receiver.trace(trace, 2).await;
    find(&spans).unwrap_or_else(|| {
        let urls: Vec<_> = spans
            .iter()
            .map(|s| (s.name.clone(), attr(s, "url.full")))
            .collect();
        panic!("no {method} {url} in {urls:?}")
    })
}

/// What every provider span shows: an HTTP client span answered 200,
/// a child of the caller's span, beside the gateway's server span.
fn assert_provider_span(span: &Span, caller_span: &str, method: &str, issuer: &str) {
    assert_eq!(span.kind, 3, "client kind");
    assert_eq!(hex(&span.parent_span_id), caller_span);
    assert_eq!(attr(span, "http.request.method").as_deref(), Some(method));
    assert_eq!(
        attr(span, "http.response.status_code").as_deref(),
        Some("200")
    );
    let port = reqwest::Url::parse(issuer).unwrap().port().unwrap();
    assert_eq!(attr(span, "server.address").as_deref(), Some("127.0.0.1"));
    assert_eq!(attr(span, "server.port"), Some(port.to_string()));
    assert_eq!(attr(span, "error.type"), None);
}

#[tokio::test]
async fn introspecting_an_opaque_token_is_a_client_span_in_the_requests_trace() {
    if !common::oidc::installed() {
        return;
    }
    let receiver = Receiver::start().await;
    let idp = common::oidc::OidcProvider::start(common::oidc::Options {
        opaque_resource_prefix: Some("http://127.0.0.1:".into()),
        ..common::oidc::Options::default()
    })
    .await;
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "cg-gateway-secret\n").unwrap();
    let issuer = cedargate::identity::IssuerConfig {
        issuer: idp.issuer.clone(),
        org: Some("acme".into()),
        introspection_client_id: Some("cg-gateway".into()),
        introspection_secret_file: Some(secret.path().to_path_buf()),
        ..cedargate::identity::IssuerConfig::default()
    };
    let (g, url) = person_gateway(&receiver, issuer).await;
    let token = idp
        .sign_in(
            "bob",
            "cg-ide",
            "openid mcp:tools",
            &url,
            "http://127.0.0.1:49152/callback",
        )
        .await;
    assert!(!token.access_token.contains('.'), "an opaque token");
    let (tp, trace, span) = caller(21);
    person_initialize(&url, &token.access_token, &tp).await;

    // Discovery (the introspection endpoint is the metadata's), then the
    // introspection itself, each a client span of the caller's trace.
    let discovery_url = format!("{}/.well-known/openid-configuration", idp.issuer);
    let discovery = provider_span(&receiver, &trace, "GET", &discovery_url).await;
    assert_provider_span(&discovery, &span, "GET", &idp.issuer);
    let endpoint = idp.discovery().await["introspection_endpoint"]
        .as_str()
        .unwrap()
        .to_string();
    let introspection = provider_span(&receiver, &trace, "POST", &endpoint).await;
    assert_provider_span(&introspection, &span, "POST", &idp.issuer);
    assert!(introspection.start_time_unix_nano >= discovery.end_time_unix_nano);
    let server = named(&receiver.of(&trace), "initialize").clone();
    assert_eq!(hex(&server.parent_span_id), span);
    assert!(
        server.start_time_unix_nano >= introspection.end_time_unix_nano,
        "authenticated before the request is served"
    );

    // A second request is served from the validated-token cache: no call.
    let (tp, trace, _) = caller(22);
    person_initialize(&url, &token.access_token, &tp).await;
    let spans = receiver.trace(&trace, 1).await;
    assert!(spans.iter().all(|s| s.kind != 3), "{:?}", names(&spans));
    drop(g);
}

#[tokio::test]
async fn a_first_use_key_set_fetch_is_a_client_span_in_the_requests_trace() {
    let Some(idp) = common::oidc::default_provider().await else {
        return;
    };
    let receiver = Receiver::start().await;
    let (g, url) = person_gateway(&receiver, common::oidc::acme_issuer(&idp)).await;
    let token = idp
        .sign_in(
            "bob",
            "cg-ide",
            "mcp:tools",
            &url,
            "http://127.0.0.1:49152/callback",
        )
        .await;
    assert!(token.access_token.contains('.'), "a JWT");
    let (tp, trace, span) = caller(23);
    person_initialize(&url, &token.access_token, &tp).await;
    let jwks = idp.discovery().await["jwks_uri"]
        .as_str()
        .unwrap()
        .to_string();
    let fetch = provider_span(&receiver, &trace, "GET", &jwks).await;
    assert_provider_span(&fetch, &span, "GET", &idp.issuer);
    drop(g);
}

#[tokio::test]
async fn a_traces_decisions_are_read_through_the_trace_index() {
    use cedargate::store::audit_query::{DecisionFilter, Order, page_filtered, plan_filtered};
    let receiver = Receiver::start().await;
    let (g, t, _) = setup(&receiver.url, None, |_| {}).await;
    call_echo(&g, &t, true).await;
    call_echo(&g, &t, false).await;
    let records = g.decisions().await;
    let started = records
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(&d.record.notes).ok())
        .filter_map(|n| n["traceId"].as_str().map(str::to_string))
        .find(|id| id != CALLER_TRACE)
        .expect("a trace the gateway started");

    // Each trace finds its own records (the caller's, and the one the
    // gateway started), and only them.
    for trace in [CALLER_TRACE.to_string(), started] {
        let mut expected: Vec<String> = records
            .iter()
            .filter(|d| d.record.notes.contains(&trace))
            .map(|d| d.record.id.clone())
            .collect();
        assert!(!expected.is_empty());
        let filter = DecisionFilter {
            trace: Some(trace.to_uppercase()),
            ..DecisionFilter::default()
        }
        .normalized()
        .unwrap();
        let found =
            g.gw.store
                .read(move |c| page_filtered(c, &filter, None, Order::Asc, 1000))
                .await
                .unwrap();
        let mut found: Vec<String> = found.into_iter().map(|d| d.record.id).collect();
        expected.sort();
        found.sort();
        assert_eq!(found, expected, "trace {trace}");
    }

    // By key in the trace index: no scan of the notes.
    let filter = DecisionFilter {
        trace: Some(CALLER_TRACE.into()),
        ..DecisionFilter::default()
    };
    let plan =
        g.gw.store
            .read(move |c| plan_filtered(c, &filter))
            .await
            .unwrap();
    assert!(
        plan.iter().any(|step| step.contains("decision_traces")
            && (step.starts_with("SEARCH") || step.contains("Index"))),
        "{plan:#?}"
    );
    assert!(!plan.iter().any(|step| step.contains("notes")), "{plan:#?}");
}
