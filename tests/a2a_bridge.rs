//! A2A peers as MCP tools, against a local peer whose behaviour each skill
//! chooses (well-behaved, slow, HTTP 500, garbage, no envelope, failed
//! task): registry API, naming, Cedar gating, the wire, every error code,
//! hook events and their subscribers.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use common::{Tenant, TestGateway};
use reqwest::Method;
use serde_json::{Value, json};

/// One request the peer received.
#[derive(Debug, Clone)]
struct Seen {
    version: Option<String>,
    authorization: Option<String>,
    body: Value,
}

/// Which card the peer serves.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CardShape {
    /// 1.0 `supportedInterfaces` (1.0 and 0.3 on `/rpc`).
    Both,
    /// 0.3 only: top-level `url`, served at the legacy `agent.json` path.
    LegacyOnly,
    /// A card with no skills array (invalid).
    Broken,
}

struct PeerState {
    base: String,
    shape: CardShape,
    card_available: AtomicBool,
    seen: Mutex<Vec<Seen>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A local A2A peer whose skills misbehave on purpose.
struct LocalPeer {
    base: String,
    state: Arc<PeerState>,
    handle: tokio::task::JoinHandle<()>,
}

impl LocalPeer {
    async fn start(shape: CardShape) -> LocalPeer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(PeerState {
            base: base.clone(),
            shape,
            card_available: AtomicBool::new(true),
            seen: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let card_path = match shape {
            CardShape::LegacyOnly => "/.well-known/agent.json",
            _ => "/.well-known/agent-card.json",
        };
        let app = axum::Router::new()
            .route(card_path, get(card))
            .route("/rpc", post(rpc))
            .with_state(Arc::clone(&state));
        let handle = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        LocalPeer {
            base,
            state,
            handle,
        }
    }

    fn rpcs(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    fn stop(&self) {
        self.handle.abort();
    }
}

impl Drop for LocalPeer {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

fn skills() -> Value {
    json!([
        {"id": "echo", "name": "Echo", "description": "Echoes its arguments.",
         "inputSchema": {"type": "object", "properties": {"branch": {"type": "string"}, "n": {"type": "integer"}},
                         "required": ["branch"]}},
        {"id": "say-hi", "name": "Say hi"},
        {"id": "multi", "name": "Multi"},
        {"id": "slow", "name": "Slow"},
        {"id": "sleepy", "name": "Sleepy"},
        {"id": "boom", "name": "HTTP 500"},
        {"id": "garbage", "name": "Not JSON"},
        {"id": "noenvelope", "name": "No envelope"},
        {"id": "fail", "name": "Failed task"}
    ])
}

async fn card(State(s): State<Arc<PeerState>>) -> Response {
    if !s.card_available.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let rpc = format!("{}/rpc", s.base);
    let body = match s.shape {
        CardShape::Both => json!({
            "name": "Vercel Ops",
            "description": "Deploys things.",
            "supportedInterfaces": [
                {"url": rpc, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                {"url": rpc, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}
            ],
            "version": "1.0.0",
            "skills": skills(),
        }),
        CardShape::LegacyOnly => json!({
            "name": "Linear (prod)",
            "url": rpc,
            "preferredTransport": "JSONRPC",
            "protocolVersion": "0.3.0",
            "skills": [{"id": "create-issue", "name": "Create issue"}, {"id": "echo", "name": "Echo"}],
        }),
        CardShape::Broken => json!({ "name": "Broken", "url": rpc }),
    };
    axum::Json(body).into_response()
}

fn task_result(v1: bool, state_ok: bool, parts: Value) -> Value {
    match (v1, state_ok) {
        (true, true) => json!({"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"},
                                "artifacts": [{"artifactId": "a", "parts": parts}]}}),
        (true, false) => json!({"task": {"id": "t", "status": {"state": "TASK_STATE_FAILED",
                                "message": {"role": "ROLE_AGENT", "parts": [{"text": "disk full"}]}}}}),
        (false, true) => json!({"kind": "task", "id": "t", "status": {"state": "completed"},
                                 "artifacts": [{"artifactId": "a", "parts": parts}]}),
        (false, false) => json!({"kind": "task", "id": "t", "status": {"state": "failed",
                                 "message": {"kind": "message", "role": "agent", "parts": [{"kind": "text", "text": "disk full"}]}}}),
    }
}

async fn rpc(State(s): State<Arc<PeerState>>, headers: HeaderMap, body: String) -> Response {
    let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    s.seen.lock().unwrap().push(Seen {
        version: headers
            .get("a2a-version")
            .map(|v| v.to_str().unwrap().to_string()),
        authorization: headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_string()),
        body: parsed.clone(),
    });
    let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    s.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let resp = answer(&parsed).await;
    s.in_flight.fetch_sub(1, Ordering::SeqCst);
    resp
}

async fn answer(req: &Value) -> Response {
    let v1 = req["method"] == "SendMessage";
    let skill = req["params"]["metadata"]["skillId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // A data part's payload sits under `data` in both generations.
    let args = req["params"]["message"]["parts"][0]["data"].clone();
    let text_part = |t: &str| {
        if v1 {
            json!({"text": t})
        } else {
            json!({"kind": "text", "text": t})
        }
    };
    let data_part = |d: Value| {
        if v1 {
            json!({"data": d})
        } else {
            json!({"kind": "data", "data": d})
        }
    };
    let result = match skill.as_str() {
        // Integers come back as floats, as protobuf-based peers do.
        "echo" => {
            let mut d = args.clone();
            if let Some(n) = d.get("n").and_then(Value::as_i64) {
                d["n"] = json!(n as f64);
            }
            task_result(v1, true, json!([data_part(d)]))
        }
        "say-hi" => {
            if v1 {
                json!({"message": {"role": "ROLE_AGENT", "parts": [text_part("hi there")]}})
            } else {
                json!({"kind": "message", "role": "agent", "parts": [text_part("hi there")]})
            }
        }
        "multi" => task_result(
            v1,
            true,
            json!([text_part("two parts"), data_part(json!({"k": 1}))]),
        ),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            task_result(v1, true, json!([text_part("late")]))
        }
        "sleepy" => {
            tokio::time::sleep(Duration::from_millis(150)).await;
            task_result(v1, true, json!([text_part("rested")]))
        }
        "boom" => return (StatusCode::INTERNAL_SERVER_ERROR, "upstream exploded").into_response(),
        "garbage" => return (StatusCode::OK, "<html>definitely not json").into_response(),
        "noenvelope" => {
            return axum::Json(json!({"result": {"kind": "message", "parts": []}})).into_response();
        }
        "fail" => task_result(v1, false, json!([])),
        other => {
            return axum::Json(json!({"jsonrpc": "2.0", "id": req["id"],
                "error": {"code": -32601, "message": format!("no skill {other}")}}))
            .into_response();
        }
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": req["id"], "result": result})).into_response()
}

/// `tools/call` as a client on 2025-06-18 (results carry `structuredContent`).
async fn call(g: &TestGateway, t: &Tenant, name: &str, args: Value) -> Value {
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":name,"arguments":args}});
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

async fn register(g: &TestGateway, org: &str, body: Value) -> (u16, Value) {
    g.admin(
        Method::POST,
        &format!("/admin/orgs/{org}/a2a-agents"),
        Some(body),
    )
    .await
}

/// A gateway, a tenant, and a registered well-behaved local peer.
async fn setup() -> (TestGateway, Tenant, LocalPeer, Value) {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let peer = LocalPeer::start(CardShape::Both).await;
    let (status, agent) = register(&g, "acme", json!({"url": peer.base})).await;
    assert_eq!(status, 201, "{agent}");
    (g, t, peer, agent)
}

#[tokio::test]
async fn registration_exposes_one_tool_per_skill_with_the_published_names() {
    let (g, t, peer, agent) = setup().await;
    assert_eq!(agent["slug"], "vercel_ops");
    assert_eq!(agent["health"], "healthy");
    assert_eq!(agent["protocolVersion"], "1.0");
    assert_eq!(agent["interfaceUrl"], format!("{}/rpc", peer.base));
    assert_eq!(
        agent["cardUrl"],
        format!("{}/.well-known/agent-card.json", peer.base)
    );
    assert_eq!(agent["skills"][1]["tool"], "vercel_ops.say-hi");
    assert_eq!(agent["skills"][1]["legacyAlias"], "a2a_vercel_ops_say_hi");

    let (_, list) = g
        .mcp(&t, json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    let tools = list["result"]["tools"].as_array().unwrap();
    let echo = tools
        .iter()
        .find(|t| t["name"] == "vercel_ops.echo")
        .unwrap();
    // The skill's inputSchema verbatim; without one, any object.
    assert_eq!(echo["inputSchema"], skills()[0]["inputSchema"]);
    assert_eq!(
        echo["description"],
        "Invokes the echo skill on remote A2A agent Vercel Ops. Echoes its arguments."
    );
    let hi = tools
        .iter()
        .find(|t| t["name"] == "vercel_ops.say-hi")
        .unwrap();
    assert_eq!(
        hi["inputSchema"],
        json!({"type": "object", "additionalProperties": true})
    );
    let names = g.tool_names(&t).await;
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with("vercel_ops."))
            .count(),
        9
    );
    assert!(names.iter().all(|n| !n.starts_with("a2a_")), "{names:?}");
    // Registering no request to the peer's RPC endpoint.
    assert!(peer.rpcs().is_empty());

    // Another org does not see them.
    let other = g.tenant("globex").await;
    let names = g.tool_names(&other).await;
    assert!(names.iter().all(|n| !n.contains('.')), "{names:?}");
}

#[tokio::test]
async fn a_call_speaks_1_0_to_the_declared_interface_and_translates_the_task() {
    let (g, t, peer, agent) = setup().await;
    let body = call(
        &g,
        &t,
        "vercel_ops.echo",
        json!({"branch": "main", "n": 2, "context": {"orgId": "evil"}}),
    )
    .await;
    let result = &body["result"];
    assert_eq!(result["isError"], false, "{body}");
    // Integers may come back as floats; the object is passed through.
    assert_eq!(
        result["structuredContent"],
        json!({"branch": "main", "n": 2.0})
    );
    let rpcs = peer.rpcs();
    assert_eq!(rpcs.len(), 1);
    let seen = &rpcs[0];
    assert_eq!(seen.version.as_deref(), Some("1.0"));
    assert_eq!(seen.body["method"], "SendMessage");
    let params = &seen.body["params"];
    assert_eq!(params["correlationId"], t.session_id);
    assert_eq!(params["taskId"], t.session_id);
    assert_eq!(params["message"]["role"], "ROLE_USER");
    // The arguments as one data part; the gateway's context is not forwarded.
    assert_eq!(
        params["message"]["parts"],
        json!([{"data": {"branch": "main", "n": 2}, "mediaType": "application/json"}])
    );
    assert_eq!(params["metadata"]["skillId"], "echo");

    // The decision record names the canonical tool and the call's outcome.
    let decisions = g.decisions().await;
    let d = decisions
        .iter()
        .rev()
        .find(|d| d.record.action == "a2a_invoke")
        .unwrap();
    assert_eq!(d.record.decision, "allow");
    assert_eq!(d.record.resource, r#"Gateway::Tool::"vercel_ops.echo""#);
    assert_eq!(
        serde_json::from_str::<Value>(&d.record.reasons).unwrap(),
        json!(["a2a-peer-tools-for-own-org"])
    );
    let outcome: Value = serde_json::from_str(&d.record.outcome).unwrap();
    assert_eq!(outcome["status"], "completed");
    assert_eq!(outcome["protocolVersion"], "1.0");
    // The slice the decision used holds the peer and its tool.
    let slice = g.entity_snapshot(&d.record.entities_hash).await;
    assert!(
        slice.contains(r#""type":"Gateway::PeerAgent","id":"vercel_ops""#),
        "{slice}"
    );
    assert!(slice.contains(&peer.base), "{slice}");
    assert_eq!(agent["id"].as_str().unwrap().len(), 36);
}

#[tokio::test]
async fn text_message_and_multi_part_results_translate_per_the_table() {
    let (g, t, _peer, _) = setup().await;
    let hi = call(&g, &t, "vercel_ops.say-hi", json!({})).await;
    assert_eq!(hi["result"]["content"][0]["text"], "hi there", "{hi}");
    let multi = call(&g, &t, "vercel_ops.multi", json!({})).await;
    let artifact = &multi["result"]["structuredContent"];
    assert_eq!(artifact["artifactId"], "a", "{multi}");
    assert_eq!(
        artifact["parts"],
        json!([{"text": "two parts"}, {"data": {"k": 1}}])
    );
}

#[tokio::test]
async fn a_pinned_0_3_peer_gets_message_send_with_kinds_and_no_version_header() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let peer = LocalPeer::start(CardShape::Both).await;
    let (status, agent) = register(
        &g,
        "acme",
        json!({"url": peer.base, "name": "code-reviewer", "protocolVersion": "0.3"}),
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    assert_eq!(agent["slug"], "code_reviewer");
    assert_eq!(agent["protocolVersion"], "0.3");
    let body = call(&g, &t, "code_reviewer.echo", json!({"branch": "dev"})).await;
    assert_eq!(
        body["result"]["structuredContent"],
        json!({"branch": "dev"})
    );
    let hi = call(&g, &t, "code_reviewer.say-hi", json!({})).await;
    assert_eq!(hi["result"]["content"][0]["text"], "hi there");
    let seen = &peer.rpcs()[0];
    assert_eq!(seen.version, None);
    assert_eq!(seen.body["method"], "message/send");
    let message = &seen.body["params"]["message"];
    assert_eq!(message["kind"], "message");
    assert_eq!(message["role"], "user");
    assert_eq!(
        message["parts"],
        json!([{"kind": "data", "data": {"branch": "dev"}}])
    );
    assert_eq!(message["skill"]["skillId"], "echo");
    assert_eq!(seen.body["params"]["correlationId"], t.session_id);
}

#[tokio::test]
async fn a_legacy_card_at_agent_json_is_found_and_its_alias_calls_the_same_handler() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let peer = LocalPeer::start(CardShape::LegacyOnly).await;
    let (status, agent) = register(&g, "acme", json!({"url": format!("{}/", peer.base)})).await;
    assert_eq!(status, 201, "{agent}");
    assert_eq!(
        agent["cardUrl"],
        format!("{}/.well-known/agent.json", peer.base)
    );
    assert_eq!(agent["slug"], "linear_prod");
    assert_eq!(agent["protocolVersion"], "0.3");
    let names = g.tool_names(&t).await;
    assert!(
        names.contains(&"linear_prod.create-issue".to_string()),
        "{names:?}"
    );

    let body = call(
        &g,
        &t,
        "a2a_linear_prod_create_issue",
        json!({"title": "x"}),
    )
    .await;
    assert!(body.get("error").is_some(), "{body}");
    // `create-issue` answers a JSON-RPC error from this peer: a remote failure.
    assert_eq!(body["error"]["code"], -32204);
    assert_eq!(body["error"]["data"]["tool"], "linear_prod.create-issue");

    let body = call(&g, &t, "a2a_linear_prod_echo", json!({"branch": "x"})).await;
    assert_eq!(
        body["result"]["structuredContent"],
        json!({"branch": "x"}),
        "{body}"
    );
    assert_eq!(peer.rpcs()[1].body["params"]["metadata"]["skillId"], "echo");

    // Records and events carry the canonical name.
    let decisions = g.decisions().await;
    let d = decisions
        .iter()
        .rev()
        .find(|d| d.record.action == "a2a_invoke")
        .unwrap();
    assert_eq!(d.record.resource, r#"Gateway::Tool::"linear_prod.echo""#);
    let notes: Value = serde_json::from_str(&d.record.notes).unwrap();
    assert_eq!(notes["calledAs"], "a2a_linear_prod_echo");
    let verbs = wait_rows(
        &g,
        "SELECT COUNT(*) FROM a2a_hook_events WHERE verb = 'linear_prod.echo'",
        2,
    )
    .await;
    // pre-verb and post-verb
    assert_eq!(verbs, 2);
    let aliased: i64 = query_one(
        &g,
        "SELECT COUNT(*) FROM a2a_hook_events WHERE verb LIKE 'a2a_%'",
    )
    .await;
    assert_eq!(aliased, 0);
}

/// Polls a count until it reaches `want` (subscribers write asynchronously).
async fn wait_rows(g: &TestGateway, sql: &'static str, want: i64) -> i64 {
    let mut n = 0;
    for _ in 0..200 {
        g.gw.store.writer().flush().await.unwrap();
        n = query_one(g, sql).await;
        if n >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    n
}

/// The stored hook events of one phase, parsed.
async fn hook_events(g: &TestGateway, phase: &'static str) -> Vec<Value> {
    let texts: Vec<String> =
        g.gw.store
            .read(move |c| {
                c.query_map(
                    "SELECT event FROM a2a_hook_events WHERE phase = ?1 ORDER BY seq",
                    cedargate::params![phase],
                    |r| r.get(0),
                )
            })
            .await
            .unwrap();
    texts
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect()
}

/// Sets org `acme`'s bridge timeout.
async fn set_timeout(g: &TestGateway, ms: u64) {
    let (status, set) = g
        .admin(
            Method::PUT,
            "/admin/orgs/acme/a2a-settings",
            Some(json!({ "timeoutMs": ms })),
        )
        .await;
    assert_eq!(status, 200, "{set}");
}

async fn query_one(g: &TestGateway, sql: &'static str) -> i64 {
    g.gw.store
        .read(move |c| c.query_row(sql, cedargate::params![], |r| r.get(0)))
        .await
        .unwrap()
}

#[tokio::test]
async fn every_failure_has_its_code_and_a_record() {
    let (g, t, _peer, _) = setup().await;
    set_timeout(&g, 300).await;
    let cases = [
        ("vercel_ops.slow", -32201, "RemoteA2ATimeoutError"),
        ("vercel_ops.boom", -32202, "RemoteA2ATransportError"),
        (
            "vercel_ops.garbage",
            -32203,
            "RemoteA2AInvalidResponseError",
        ),
        (
            "vercel_ops.noenvelope",
            -32203,
            "RemoteA2AInvalidResponseError",
        ),
        ("vercel_ops.fail", -32204, "RemoteA2ATaskFailedError"),
    ];
    for (tool, code, class) in cases {
        let body = call(&g, &t, tool, json!({})).await;
        assert_eq!(body["error"]["code"], code, "{tool}: {body}");
        assert_eq!(body["error"]["data"]["class"], class, "{tool}");
        assert!(!body["error"]["message"].as_str().unwrap().is_empty());
        let decision_id = body["error"]["data"]["decisionId"]
            .as_str()
            .unwrap()
            .to_string();
        let (_, d) = g
            .admin(
                Method::GET,
                &format!("/admin/decisions/{decision_id}"),
                None,
            )
            .await;
        let outcome: Value = serde_json::from_str(d["outcome"].as_str().unwrap()).unwrap();
        assert_eq!(outcome["status"], "failed", "{tool}");
        assert_eq!(outcome["error"]["code"], code, "{tool}");
    }
    let body = call(&g, &t, "vercel_ops.fail", json!({})).await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("disk full"),
        "{body}"
    );
    let body = call(&g, &t, "vercel_ops.boom", json!({})).await;
    assert_eq!(body["error"]["data"]["detail"]["httpStatus"], 500);

    // Each failure: post-verb (failed) and verb-error with the code.
    let errors = wait_rows(
        &g,
        "SELECT COUNT(*) FROM a2a_hook_events WHERE phase = 'verb-error'",
        7,
    )
    .await;
    assert_eq!(errors, 7);
    let timeout_events = hook_events(&g, "verb-error")
        .await
        .iter()
        .filter(|e| e["error"]["code"] == -32201)
        .count();
    assert_eq!(timeout_events, 1);
    let failed = wait_rows(
        &g,
        "SELECT COUNT(*) FROM a2a_task_instances WHERE status = 'failed' AND error_code IS NOT NULL",
        7,
    )
    .await;
    assert_eq!(failed, 7);
}

/// Load tracking: a call in flight has a `running` row (subscribers batch
/// their rows for a moment, never for the length of a call), finished with
/// its outcome and error code when the call ends.
#[tokio::test]
async fn a_call_in_flight_is_tracked_as_running_until_it_ends() {
    let (g, t, _peer, _) = setup().await;
    set_timeout(&g, 2500).await;
    let running = async {
        wait_rows(
            &g,
            "SELECT COUNT(*) FROM a2a_task_instances WHERE verb = 'vercel_ops.slow' AND status = 'running'",
            1,
        )
        .await
    };
    let (body, seen_running) = tokio::join!(call(&g, &t, "vercel_ops.slow", json!({})), running);
    assert_eq!(
        seen_running, 1,
        "the row was running while the call was in flight"
    );
    assert_eq!(body["error"]["code"], -32201, "{body}");
    let finished = wait_rows(
        &g,
        "SELECT COUNT(*) FROM a2a_task_instances WHERE verb = 'vercel_ops.slow' AND status = 'failed' AND error_code = -32201 AND duration_ms >= 2500",
        1,
    )
    .await;
    assert_eq!(finished, 1);
    let rows = query_one(&g, "SELECT COUNT(*) FROM a2a_task_instances").await;
    assert_eq!(rows, 1, "one row per call");
}

#[tokio::test]
async fn a_peer_that_went_away_is_a_transport_error() {
    let (g, t, peer, _) = setup().await;
    peer.stop();
    tokio::task::yield_now().await;
    let mut body = Value::Null;
    // The listener closes once the aborted server task is dropped.
    for _ in 0..50 {
        body = call(&g, &t, "vercel_ops.echo", json!({"branch": "x"})).await;
        if body.get("error").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(body["error"]["code"], -32202, "{body}");
}

#[tokio::test]
async fn arguments_are_checked_against_the_skill_schema_before_anything_is_sent() {
    let (g, t, peer, _) = setup().await;
    let body = call(&g, &t, "vercel_ops.echo", json!({"n": 1})).await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    assert_eq!(body["error"]["data"]["field"], "branch");
    assert!(peer.rpcs().is_empty());
}

#[tokio::test]
async fn a_cedar_deny_sends_nothing_and_answers_32003() {
    let g = TestGateway::start_with_policy(
        "no-friday.cedar",
        r#"@id("no-deploys")
@advice("deploys are frozen")
forbid (principal, action == Gateway::Action::"a2a_invoke", resource == Gateway::Tool::"vercel_ops.echo");
"#,
    )
    .await;
    let t = g.tenant("acme").await;
    let peer = LocalPeer::start(CardShape::Both).await;
    let (status, _) = register(&g, "acme", json!({"url": peer.base})).await;
    assert_eq!(status, 201);
    // Still visible (view_tool is allowed), but not invocable.
    assert!(
        g.tool_names(&t)
            .await
            .contains(&"vercel_ops.echo".to_string())
    );
    let body = call(&g, &t, "vercel_ops.echo", json!({"branch": "main"})).await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    assert_eq!(body["error"]["data"]["reasons"], json!(["no-deploys"]));
    assert_eq!(
        body["error"]["data"]["advice"],
        json!(["deploys are frozen"])
    );
    assert!(peer.rpcs().is_empty(), "the peer saw {:?}", peer.rpcs());
    let d = g
        .decisions()
        .await
        .into_iter()
        .rev()
        .find(|d| d.record.action == "a2a_invoke")
        .unwrap();
    assert_eq!(d.record.decision, "deny");
    let denied = wait_rows(
        &g,
        "SELECT COUNT(*) FROM a2a_task_instances WHERE status = 'denied'",
        1,
    )
    .await;
    assert_eq!(denied, 1);
    let pre = hook_events(&g, "pre-verb")
        .await
        .iter()
        .filter(|e| e["context"]["denied"] == true)
        .count();
    assert_eq!(pre, 1);
    let post: i64 = query_one(
        &g,
        "SELECT COUNT(*) FROM a2a_hook_events WHERE phase <> 'pre-verb'",
    )
    .await;
    assert_eq!(post, 0);
    // The other skills still work.
    let ok = call(&g, &t, "vercel_ops.say-hi", json!({})).await;
    assert_eq!(ok["result"]["content"][0]["text"], "hi there", "{ok}");
    assert_eq!(peer.rpcs().len(), 1);
}

#[tokio::test]
async fn a_hidden_peer_tool_answers_as_unknown() {
    let g = TestGateway::start_with_policy(
        "hide.cedar",
        r#"@id("hide-vercel")
forbid (principal, action in [Gateway::Action::"view_tool", Gateway::Action::"a2a_invoke"], resource in Gateway::PeerAgent::"vercel_ops");
"#,
    )
    .await;
    let t = g.tenant("acme").await;
    let peer = LocalPeer::start(CardShape::Both).await;
    register(&g, "acme", json!({"url": peer.base})).await;
    assert!(
        g.tool_names(&t)
            .await
            .iter()
            .all(|n| !n.starts_with("vercel_ops."))
    );
    for name in ["vercel_ops.echo", "a2a_vercel_ops_echo"] {
        let body = call(&g, &t, name, json!({"branch": "main"})).await;
        assert_eq!(body["error"]["code"], -32601, "{body}");
    }
    assert!(peer.rpcs().is_empty());
}

#[tokio::test]
async fn deregistration_removes_the_tools_at_once() {
    let (g, t, peer, agent) = setup().await;
    assert!(
        g.tool_names(&t)
            .await
            .contains(&"vercel_ops.echo".to_string())
    );
    // Warm the call path too.
    call(&g, &t, "vercel_ops.say-hi", json!({})).await;
    let id = agent["id"].as_str().unwrap();
    let (status, _) = g
        .admin(
            Method::DELETE,
            &format!("/admin/orgs/acme/a2a-agents/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert!(
        g.tool_names(&t)
            .await
            .iter()
            .all(|n| !n.starts_with("vercel_ops."))
    );
    for name in ["vercel_ops.say-hi", "a2a_vercel_ops_say_hi"] {
        let body = call(&g, &t, name, json!({})).await;
        assert_eq!(body["error"]["code"], -32601, "{name}: {body}");
    }
    assert_eq!(peer.rpcs().len(), 1);
    let (status, err) = g
        .admin(
            Method::DELETE,
            &format!("/admin/orgs/acme/a2a-agents/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(err["error"]["code"], "not_found");
}

#[tokio::test]
async fn an_unreachable_peer_is_recorded_without_tools_and_exposed_once_it_recovers() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    // Nothing listens on a port just released.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (status, agent) = register(
        &g,
        "acme",
        json!({"url": format!("http://{closed}"), "name": "Ghost"}),
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    assert_eq!(agent["health"], "unreachable");
    assert_eq!(agent["exposed"], false);
    assert!(
        agent["lastError"]
            .as_str()
            .unwrap()
            .contains("cannot fetch")
    );

    // A peer that is down (503 on its card), then recovers.
    let peer = LocalPeer::start(CardShape::Both).await;
    peer.state.card_available.store(false, Ordering::SeqCst);
    let (status, agent) =
        register(&g, "acme", json!({"url": peer.base, "name": "Vercel Ops"})).await;
    assert_eq!(status, 201);
    assert_eq!(agent["health"], "unreachable");
    assert!(
        agent["lastError"].as_str().unwrap().contains("503"),
        "{agent}"
    );
    assert!(g.tool_names(&t).await.iter().all(|n| !n.contains('.')));
    let body = call(&g, &t, "vercel_ops.say-hi", json!({})).await;
    assert_eq!(body["error"]["code"], -32601);

    peer.state.card_available.store(true, Ordering::SeqCst);
    let id = agent["id"].as_str().unwrap();
    let (status, refreshed) = g
        .admin(
            Method::POST,
            &format!("/admin/orgs/acme/a2a-agents/{id}/refresh"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{refreshed}");
    assert_eq!(refreshed["health"], "healthy");
    assert_eq!(refreshed["lastError"], Value::Null);
    let body = call(&g, &t, "vercel_ops.say-hi", json!({})).await;
    assert_eq!(body["result"]["content"][0]["text"], "hi there", "{body}");

    // Going down again hides the tools on the next refresh.
    peer.state.card_available.store(false, Ordering::SeqCst);
    let (_, refreshed) = g
        .admin(
            Method::POST,
            &format!("/admin/orgs/acme/a2a-agents/{id}/refresh"),
            None,
        )
        .await;
    assert_eq!(refreshed["health"], "unreachable");
    assert!(
        g.tool_names(&t)
            .await
            .iter()
            .all(|n| !n.starts_with("vercel_ops."))
    );
}

#[tokio::test]
async fn the_background_refresh_exposes_a_recovered_peer() {
    let g = TestGateway::start_with(|c| c.a2a.refresh_interval_secs = 1).await;
    let t = g.tenant("acme").await;
    let peer = LocalPeer::start(CardShape::Both).await;
    peer.state.card_available.store(false, Ordering::SeqCst);
    let (_, agent) = register(&g, "acme", json!({"url": peer.base, "name": "Vercel Ops"})).await;
    assert_eq!(agent["health"], "unreachable");
    peer.state.card_available.store(true, Ordering::SeqCst);
    let mut names = Vec::new();
    for _ in 0..100 {
        names = g.tool_names(&t).await;
        if names.contains(&"vercel_ops.echo".to_string()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(names.contains(&"vercel_ops.echo".to_string()), "{names:?}");
}

#[tokio::test]
async fn bad_registrations_are_refused_and_change_nothing() {
    let g = TestGateway::start().await;
    g.tenant("acme").await;
    let broken = LocalPeer::start(CardShape::Broken).await;
    let legacy = LocalPeer::start(CardShape::LegacyOnly).await;
    let cases = [
        (json!({"url": "not a url"}), 400, "not a URL"),
        (json!({"url": "ftp://127.0.0.1/"}), 400, "http(s)"),
        (
            json!({"url": "http://user:pw@127.0.0.1/"}),
            400,
            "credentials",
        ),
        (json!({"name": "x"}), 400, "url"),
        (json!({"url": broken.base}), 400, "`skills`"),
        (
            json!({"url": legacy.base, "protocolVersion": "1.0"}),
            400,
            "`1.0`",
        ),
        (
            json!({"url": legacy.base, "protocolVersion": "2"}),
            400,
            "`0.3` or `1.0`",
        ),
        (json!({"url": legacy.base, "name": "()"}), 400, "no letters"),
        (
            json!({"url": legacy.base, "auth": {"type": "bearer", "token": "s3cr3t"}}),
            400,
            "token",
        ),
        (
            json!({"url": legacy.base, "auth": {"type": "basic", "secretEnv": "X"}}),
            400,
            "bearer",
        ),
        (
            json!({"url": legacy.base, "auth": {"type": "bearer", "secretEnv": "CEDARGATE_TEST_SURELY_UNSET_VAR"}}),
            400,
            "not set",
        ),
        (
            json!({"url": legacy.base, "auth": {"type": "bearer", "secretFile": "relative/path"}}),
            400,
            "absolute",
        ),
    ];
    for (body, status, needle) in cases {
        let (got, err) = register(&g, "acme", body.clone()).await;
        assert_eq!(got, status, "{body}: {err}");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
    }
    assert_eq!(g.count("agent_cards").await, 0);

    let (status, _) = register(&g, "nope", json!({"url": legacy.base})).await;
    assert_eq!(status, 404);
    let (status, _) = register(&g, "acme", json!({"url": legacy.base})).await;
    assert_eq!(status, 201);
    let (status, err) = register(&g, "acme", json!({"url": legacy.base})).await;
    assert_eq!(status, 409, "{err}");
    assert_eq!(g.count("agent_cards").await, 1);

    for body in [
        json!({"timeoutMs": 0}),
        json!({"timeoutMs": 600_001}),
        json!({"timeout": 5}),
    ] {
        let (status, _) = g
            .admin(
                Method::PUT,
                "/admin/orgs/acme/a2a-settings",
                Some(body.clone()),
            )
            .await;
        assert_eq!(status, 400, "{body}");
    }
    let (_, settings) = g
        .admin(Method::GET, "/admin/orgs/acme/a2a-settings", None)
        .await;
    assert_eq!(settings["timeoutMs"], 30_000);
    assert_eq!(settings["default"], true);
    let (status, _) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/a2a-agents/nope/refresh",
            None,
        )
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn peer_secrets_are_resolved_by_name_and_never_stored_or_shown() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let peer = LocalPeer::start(CardShape::Both).await;
    let secret_dir = tempfile::tempdir().unwrap();
    let secret_path = secret_dir.path().join("vercel.token");
    let token = "tok-7f3a9c1e-file";
    std::fs::write(&secret_path, format!("{token}\n")).unwrap();
    let (status, agent) = register(
        &g,
        "acme",
        json!({"url": peer.base, "auth": {"type": "bearer", "secretFile": secret_path.to_str().unwrap()}}),
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    assert_eq!(agent["auth"]["secretFile"], secret_path.to_str().unwrap());
    call(&g, &t, "vercel_ops.say-hi", json!({})).await;
    assert_eq!(
        peer.rpcs()[0].authorization.as_deref(),
        Some(format!("Bearer {token}").as_str())
    );
    // The token is in no API answer and in no stored row.
    let (_, listed) = g
        .admin(Method::GET, "/admin/orgs/acme/a2a-agents", None)
        .await;
    assert!(!listed.to_string().contains(token));
    let dump: String = g
        .gw
        .store
        .read(|c| {
            let rows: Vec<String> = c.query_map(
                "SELECT coalesce(secret_env,'') || coalesce(secret_file,'') || coalesce(card,'') || url FROM agent_cards",
                cedargate::params![],
                |r| r.get(0),
            )?;
            Ok(rows.join("|"))
        })
        .await
        .unwrap();
    assert!(!dump.contains(token));
    let decisions = g.decisions().await;
    assert!(
        decisions
            .iter()
            .all(|d| !format!("{:?}", d.record).contains(token))
    );

    // Rotation: the file is read per call.
    std::fs::write(&secret_path, "rotated-token").unwrap();
    call(&g, &t, "vercel_ops.say-hi", json!({})).await;
    assert_eq!(
        peer.rpcs()[1].authorization.as_deref(),
        Some("Bearer rotated-token")
    );
    // A secret that disappears fails the call as a transport error, sending nothing.
    std::fs::remove_file(&secret_path).unwrap();
    let body = call(&g, &t, "vercel_ops.say-hi", json!({})).await;
    assert_eq!(body["error"]["code"], -32202, "{body}");
    assert_eq!(peer.rpcs().len(), 2);

    // From an environment variable, by name (one the test runner sets).
    let env_value = std::env::var("CARGO_PKG_NAME").unwrap();
    let peer2 = LocalPeer::start(CardShape::Both).await;
    let (status, _) = register(
        &g,
        "acme",
        json!({"url": peer2.base, "name": "Env Peer", "auth": {"type": "bearer", "secretEnv": "CARGO_PKG_NAME"}}),
    )
    .await;
    assert_eq!(status, 201);
    call(&g, &t, "env_peer.say-hi", json!({})).await;
    assert_eq!(
        peer2.rpcs()[0].authorization.as_deref(),
        Some(format!("Bearer {env_value}").as_str())
    );
}

#[tokio::test]
async fn concurrent_calls_to_one_peer_are_bounded() {
    let g = TestGateway::start_with(|c| c.a2a.max_concurrent_per_peer = 2).await;
    let t = g.tenant("acme").await;
    let peer = LocalPeer::start(CardShape::Both).await;
    register(&g, "acme", json!({"url": peer.base})).await;
    let g = Arc::new(g);
    let mut calls = Vec::new();
    for _ in 0..6 {
        let (g, t) = (Arc::clone(&g), t.clone());
        calls.push(tokio::spawn(async move {
            call(&g, &t, "vercel_ops.sleepy", json!({})).await
        }));
    }
    for c in calls {
        let body = c.await.unwrap();
        assert_eq!(body["result"]["content"][0]["text"], "rested", "{body}");
    }
    assert_eq!(peer.rpcs().len(), 6);
    assert!(peer.state.max_in_flight.load(Ordering::SeqCst) <= 2);
}

struct Stuck;

impl cedargate::a2a::hooks::Subscriber for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }
    async fn handle(
        &self,
        _events: Vec<Arc<cedargate::a2a::hooks::VerbEvent>>,
    ) -> Result<(), cedargate::a2a::hooks::SubscriberError> {
        std::future::pending::<()>().await;
        Ok(())
    }
}

#[tokio::test]
async fn a_stuck_subscriber_never_blocks_a_call_and_the_others_still_write() {
    let (g, t, _peer, _) = setup().await;
    g.gw.a2a.bus.subscribe(Stuck, 1);
    for _ in 0..3 {
        let body = call(&g, &t, "vercel_ops.say-hi", json!({})).await;
        assert_eq!(body["result"]["content"][0]["text"], "hi there");
    }
    let dropped = g.gw.a2a.bus.dropped();
    let stuck = dropped.iter().find(|(n, _)| n == "stuck").unwrap();
    // Six events (pre- and post-verb of three calls). A subscriber stuck in
    // its handler absorbs at most three of them: the one that woke it, the
    // one it took when its linger window closed, and one waiting in its
    // queue of one; every other event is dropped, whatever the timing.
    assert!(stuck.1 >= 3, "{dropped:?}");
    assert!(
        dropped
            .iter()
            .filter(|(n, _)| n != "stuck")
            .all(|(_, d)| *d == 0)
    );
    let done = wait_rows(
        &g,
        "SELECT COUNT(*) FROM a2a_task_instances WHERE status = 'completed' AND duration_ms IS NOT NULL",
        3,
    )
    .await;
    assert_eq!(done, 3);
    let costs = wait_rows(
        &g,
        "SELECT COUNT(*) FROM a2a_cost_events WHERE outcome = 'completed' AND response_bytes > 0",
        3,
    )
    .await;
    assert_eq!(costs, 3);
    // Events carry the published fields.
    let events = g
        .texts("SELECT event FROM a2a_hook_events WHERE phase = 'post-verb' LIMIT 1")
        .await;
    let event: Value = serde_json::from_str(&events[0]).unwrap();
    for field in [
        "verb",
        "legacyAlias",
        "orgId",
        "agentCardId",
        "agentUrl",
        "skillId",
        "sessionId",
        "args",
        "emittedAt",
        "durationMs",
        "outcome",
    ] {
        assert!(event.get(field).is_some(), "{field} missing from {event}");
    }
    assert_eq!(event["verb"], "vercel_ops.say-hi");
    assert_eq!(event["legacyAlias"], "a2a_vercel_ops_say_hi");
    assert_eq!(event["outcome"], "completed");
    assert_eq!(event["sessionId"], t.session_id);
}

#[tokio::test]
async fn tools_list_decides_once_per_peer_unless_a_policy_names_a_tool() {
    let g = TestGateway::start_with_policy(
        "hide-one.cedar",
        r#"@id("hide-boom")
forbid (principal, action == Gateway::Action::"view_tool", resource == Gateway::Tool::"vercel_ops.boom");
"#,
    )
    .await;
    let t = g.tenant("acme").await;
    let peer = LocalPeer::start(CardShape::Both).await;
    register(&g, "acme", json!({"url": peer.base})).await;
    let before = g.decisions().await.len();
    let names = g.tool_names(&t).await;
    assert!(!names.contains(&"vercel_ops.boom".to_string()), "{names:?}");
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with("vercel_ops."))
            .count(),
        8
    );
    let lists: Vec<_> = g
        .decisions()
        .await
        .into_iter()
        .skip(before)
        .filter(|d| d.record.action == "view_tool")
        .collect();
    // One record for the list; in it, one class of 8 interchangeable tools
    // decided once, and the named tool decided alone.
    assert_eq!(lists.len(), 1, "{lists:?}");
    let notes: Value = serde_json::from_str(&lists[0].record.notes).unwrap();
    let list = &notes["toolList"];
    let classes = list["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 1, "{list}");
    assert_eq!(classes[0]["peerAgent"], "vercel_ops");
    assert_eq!(classes[0]["tools"], 8);
    let verdict_of = |name: &str| {
        let entry = list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e[0] == name)
            .unwrap_or_else(|| panic!("{name} not in {list}"));
        list["verdicts"][entry[1].as_u64().unwrap() as usize]["decision"].clone()
    };
    assert_eq!(verdict_of("vercel_ops.boom"), "deny");
    // What a list costs against the rate limits is the decisions it makes:
    // one per tool decided alone (the built-in ones and the named one), one
    // for the class.
    let tools = list["tools"].as_array().unwrap().len() as u32;
    let decided = tools - 8 + 1;
    assert_eq!(list_cost(&g, &t).await, decided);
    assert_eq!(
        verdict_of(classes[0]["decidedOn"].as_str().unwrap()),
        "allow"
    );
    // Replay decides each listed tool alone and finds every verdict again.
    let report = g.replay_recorded().await;
    assert_eq!(report.identical, report.records, "{report:?}");
    // A call to the hidden tool answers as unknown; the others work.
    let body = call(&g, &t, "vercel_ops.boom", json!({})).await;
    assert_eq!(body["error"]["code"], -32601);
    let body = call(&g, &t, "vercel_ops.say-hi", json!({})).await;
    assert_eq!(body["result"]["content"][0]["text"], "hi there");
}

/// What one `tools/list` of the tenant's session costs against the rate
/// limits.
async fn list_cost(g: &TestGateway, t: &Tenant) -> u32 {
    use cedargate::mcp::jsonrpc::{Id, Message};
    let key_id = t.key_id.clone();
    let (key, _) =
        g.gw.store
            .read(move |c| cedargate::store::tenants::find_key(c, &key_id))
            .await
            .unwrap()
            .unwrap();
    let bundle = g.gw.pep.current();
    let view =
        g.gw.session_view(&t.session_id, &key, &bundle)
            .await
            .unwrap();
    let list = Message::Request {
        id: Id::null(),
        method: "tools/list".into(),
        params: Value::Null,
    };
    cedargate::mcp::cost::of(&g.gw, &bundle, &view, &list)
}

/// Telemetry rows emitted before 2001 (the rows the test backdates), in
/// the three tables.
async fn backdated(g: &TestGateway) -> i64 {
    query_one(
        g,
        "SELECT (SELECT COUNT(*) FROM a2a_task_instances WHERE started_at < '2001')
              + (SELECT COUNT(*) FROM a2a_hook_events WHERE emitted_at < '2001')
              + (SELECT COUNT(*) FROM a2a_cost_events WHERE emitted_at < '2001')",
    )
    .await
}

/// Backdated rows in each telemetry table, with the highest ids (so only
/// their age can prune them).
async fn insert_backdated(g: &TestGateway) {
    g.gw.store
        .read(|c| {
            c.execute(
                "INSERT INTO a2a_task_instances (id, org_id, agent_card_id, verb, skill_id,
                     session_id, status, started_at)
                 VALUES ('ffffffff-old', 'acme', 'x', 'v', 's', 'sess', 'completed',
                         '2000-01-01T00:00:00.000Z')",
                cedargate::params![],
            )?;
            c.execute(
                "INSERT INTO a2a_hook_events (call_id, org_id, phase, verb, event, emitted_at)
                 VALUES ('ffffffff-old', 'acme', 'pre-verb', 'v', '{}', '2000-01-01T00:00:00.000Z')",
                cedargate::params![],
            )?;
            c.execute(
                "INSERT INTO a2a_cost_events (call_id, org_id, agent_card_id, verb, session_id,
                     outcome, duration_ms, request_bytes, response_bytes, emitted_at)
                 VALUES ('ffffffff-old', 'acme', 'x', 'v', 'sess', 'completed', 1, 1, 1,
                         '2000-01-01T00:00:00.000Z')",
                cedargate::params![],
            )
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn the_telemetry_rows_are_bounded_by_count_and_age_and_read_per_peer() {
    let g = TestGateway::start_with(|c| {
        c.a2a_telemetry.max_rows = 3;
        c.a2a_telemetry.prune_interval_secs = 1;
    })
    .await;
    let t = g.tenant("acme").await;
    let peer = LocalPeer::start(CardShape::Both).await;
    let (status, agent) = register(&g, "acme", json!({"url": peer.base})).await;
    assert_eq!(status, 201, "{agent}");
    let slug = agent["slug"].as_str().unwrap().to_string();
    // Eight calls, then a failing one: 9 task and cost rows, 27 events.
    for i in 0..8 {
        let body = call(
            &g,
            &t,
            &format!("{slug}.echo"),
            json!({"branch": format!("b{i}")}),
        )
        .await;
        assert!(body.get("error").is_none(), "{body}");
    }
    let failed = call(&g, &t, &format!("{slug}.boom"), json!({})).await;
    assert!(failed["error"]["code"].is_i64(), "{failed}");
    g.gw.a2a.bus.drain().await;
    insert_backdated(&g).await;

    // Within a few prunes: 3 rows per table, the newest, none backdated.
    let mut counts = Vec::new();
    for _ in 0..100 {
        g.gw.store.writer().flush().await.unwrap();
        counts = vec![
            g.count("a2a_task_instances").await,
            g.count("a2a_hook_events").await,
            g.count("a2a_cost_events").await,
        ];
        if counts == [3, 3, 3] && backdated(&g).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(counts, [3, 3, 3]);
    assert_eq!(backdated(&g).await, 0, "rows past the retention are pruned");

    // The reader: the peer's load over what is kept, in the store and in
    // /metrics; the newest events are the failed call's.
    let load =
        g.gw.store
            .read(cedargate::store::a2a_hooks::peer_load)
            .await
            .unwrap();
    let mine = load
        .iter()
        .find(|l| l.peer == slug)
        .expect("the peer's load");
    assert_eq!(mine.completed + mine.failed, 3, "{mine:?}");
    assert_eq!(mine.failed, 1, "{mine:?}");
    assert!(mine.response_bytes > 0, "{mine:?}");
    let error: Value = serde_json::from_str(mine.last_error.as_deref().unwrap()).unwrap();
    assert_eq!(error["phase"], "verb-error");
    assert_eq!(error["verb"], format!("{slug}.boom"));
    let metrics = g.metrics_text().await;
    let completed = format!(
        "cedargate_a2a_peer_calls{{peer=\"acme/{slug}\",status=\"completed\"}} {}",
        mine.completed
    );
    assert!(metrics.contains(&completed), "{completed} not in {metrics}");
    assert!(
        metrics.contains(&format!(
            "cedargate_a2a_peer_calls{{peer=\"acme/{slug}\",status=\"failed\"}} 1"
        )),
        "{metrics}"
    );
}
