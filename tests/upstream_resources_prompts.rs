//! Resources and prompts of a real upstream, the official reference server
//! `@modelcontextprotocol/server-everything` (npm, pinned in
//! `tests/upstreams/package-lock.json`, installed by
//! `tests/upstreams/setup.sh`) over Streamable HTTP, through a governed
//! session in both protocol eras: listed under the server's prefix and
//! read as the upstream answers; a `forbid` on `read_resource` /
//! `get_prompt` hides one resource and one prompt (absent from the lists,
//! and a read answers exactly like a name no server has), a denied read
//! sends nothing upstream, and every decision is in the trail. A read
//! larger than the answer bound is refused (-32203) and an upstream error
//! keeps its code and message (a small in-test upstream).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::setup::{upstreams_dir, upstreams_installed as installed};
use common::{Tenant, TestGateway};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

/// `server-everything` over Streamable HTTP, with its log lines.
struct Everything {
    url: String,
    log: Arc<Mutex<Vec<String>>>,
    _child: tokio::process::Child,
}

impl Everything {
    async fn start() -> Everything {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let entry = upstreams_dir()
            .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        let mut child = tokio::process::Command::new("node")
            .arg(entry)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    log.lock().unwrap().push(line);
                }
            });
        }
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Everything {
                    url: format!("http://127.0.0.1:{port}/mcp"),
                    log,
                    _child: child,
                };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "server-everything did not listen: {:?}",
            log.lock().unwrap()
        );
    }

    /// POSTs the server has logged so far.
    fn posts(&self) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("Received MCP POST request"))
            .count()
    }
}

const HIDDEN_URI: &str = "everything+demo://resource/static/document/architecture.md";
const SHOWN_URI: &str = "everything+demo://resource/static/document/features.md";

const FORBID_ONE_OF_EACH: &str = r#"
@id("no-architecture")
@advice("the architecture notes are not for agents")
forbid (principal, action == Gateway::Action::"read_resource",
        resource == Gateway::Resource::"everything+demo://resource/static/document/architecture.md");

@id("no-args-prompt")
@advice("that prompt is not for agents")
forbid (principal, action == Gateway::Action::"get_prompt",
        resource == Gateway::Prompt::"everything.args-prompt");
"#;

async fn rpc(g: &TestGateway, t: &Tenant, method: &str, params: Value) -> Value {
    let (status, body) = g
        .mcp(
            t,
            json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

fn ids(list: &Value, key: &str, field: &str) -> Vec<String> {
    list["result"][key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {list}"))
        .iter()
        .map(|e| e[field].as_str().unwrap().to_string())
        .collect()
}

/// A gateway with the forbid policy and `everything` registered for
/// `acme` (tenant `t`), and `globex` (tenant `other`) with nothing.
async fn governed() -> (Everything, TestGateway, Tenant, Tenant) {
    let up = Everything::start().await;
    let g = TestGateway::start_with_policy("extra.cedar", FORBID_ONE_OF_EACH).await;
    let t = g.tenant("acme").await;
    let other = g.tenant("globex").await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "everything", "transport": "streamable-http", "url": up.url})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    (up, g, t, other)
}

#[tokio::test]
async fn resources_are_listed_read_and_hidden_through_the_gateway() {
    if !installed() {
        return;
    }
    let (up, g, t, other) = governed().await;

    let init = rpc(&g, &t, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})).await;
    let caps = &init["result"]["capabilities"];
    assert!(
        caps["resources"].is_object() && caps["prompts"].is_object(),
        "{init}"
    );

    let list = rpc(&g, &t, "resources/list", json!({})).await;
    let uris = ids(&list, "resources", "uri");
    assert!(uris.contains(&SHOWN_URI.to_string()), "{uris:?}");
    assert!(!uris.contains(&HIDDEN_URI.to_string()), "hidden: {uris:?}");
    assert!(
        uris.iter().all(|u| u.starts_with("everything+demo://")),
        "{uris:?}"
    );
    let shown = list["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["uri"] == SHOWN_URI)
        .unwrap();
    assert_eq!(
        shown["name"], "features.md",
        "the entry passes through: {shown}"
    );
    assert_eq!(shown["mimeType"], "text/markdown");
    let others = rpc(&g, &other, "resources/list", json!({})).await;
    assert_eq!(
        others["result"]["resources"],
        json!([]),
        "another org sees none"
    );

    let templates = rpc(&g, &t, "resources/templates/list", json!({})).await;
    let names = ids(&templates, "resourceTemplates", "uriTemplate");
    assert!(
        names.contains(&"everything+demo://resource/dynamic/text/{resourceId}".to_string()),
        "{names:?}"
    );

    let read = rpc(&g, &t, "resources/read", json!({"uri": SHOWN_URI})).await;
    let contents = &read["result"]["contents"];
    assert_eq!(contents[0]["uri"], SHOWN_URI, "{read}");
    assert!(contents[0]["text"].as_str().unwrap().len() > 10, "{read}");
    let dynamic = "everything+demo://resource/dynamic/text/3";
    let read = rpc(&g, &t, "resources/read", json!({"uri": dynamic})).await;
    assert_eq!(read["result"]["contents"][0]["uri"], dynamic, "{read}");

    // Hidden answers exactly like a URI no server has, and sends nothing.
    let before = up.posts();
    let hidden = rpc(&g, &t, "resources/read", json!({"uri": HIDDEN_URI})).await;
    let unknown_uri = "nosuch+demo://resource/static/document/architecture.md";
    let unknown = rpc(&g, &t, "resources/read", json!({"uri": unknown_uri})).await;
    assert_eq!(hidden["error"]["code"], -32002, "{hidden}");
    assert_eq!(
        hidden.to_string().replace(HIDDEN_URI, "X"),
        unknown.to_string().replace(unknown_uri, "X"),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.posts(), before, "the denied read reached the upstream");

    // A name longer than the bound is refused before any decision.
    let reads = |ds: Vec<cedargate::store::decisions::StoredDecision>| {
        ds.iter()
            .filter(|d| d.record.action == "read_resource")
            .count()
    };
    let records = reads(g.decisions().await);
    let long = format!("everything+demo://{}", "a".repeat(5000));
    let refused = rpc(&g, &t, "resources/read", json!({"uri": long})).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(reads(g.decisions().await), records, "nothing decided");

    let trail: Vec<Value> = g
        .decisions()
        .await
        .iter()
        .filter(|d| d.record.action == "read_resource")
        .map(|d| {
            let outcome: Value = serde_json::from_str(&d.record.outcome).unwrap();
            let notes = common::own_notes(&d.record);
            json!([
                d.record.resource,
                d.record.decision,
                outcome["status"],
                notes
            ])
        })
        .collect();
    let resource = |uri: &str| format!("Gateway::Resource::\"{uri}\"");
    assert!(
        trail
            .contains(&json!([resource(HIDDEN_URI), "deny", "denied", {"list": "resources/list"}])),
        "{trail:#?}"
    );
    assert!(
        trail.contains(&json!([resource(SHOWN_URI), "allow", "completed", null])),
        "{trail:#?}"
    );
    assert!(
        trail.contains(&json!([resource(HIDDEN_URI), "deny", "denied", null])),
        "{trail:#?}"
    );
    assert!(
        trail.contains(&json!([resource(unknown_uri), "deny", "denied", {"unknownEntry": true}])),
        "{trail:#?}"
    );
    let read = g
        .decisions()
        .await
        .into_iter()
        .find(|d| {
            d.record.action == "read_resource"
                && d.record.resource == resource(SHOWN_URI)
                && common::own_notes(&d.record).is_null()
        })
        .unwrap();
    let outcome: Value = serde_json::from_str(&read.record.outcome).unwrap();
    assert_eq!(outcome["server"], "everything", "{outcome}");
    assert!(outcome["upstream"].is_string(), "{outcome}");
    g.stop().await;
}

#[tokio::test]
async fn prompts_are_listed_fetched_and_hidden_through_the_gateway() {
    if !installed() {
        return;
    }
    let (up, g, t, _other) = governed().await;

    let list = rpc(&g, &t, "prompts/list", json!({})).await;
    let names = ids(&list, "prompts", "name");
    assert!(
        names.contains(&"everything.simple-prompt".to_string()),
        "{names:?}"
    );
    assert!(
        !names.contains(&"everything.args-prompt".to_string()),
        "hidden: {names:?}"
    );

    let got = rpc(
        &g,
        &t,
        "prompts/get",
        json!({"name": "everything.simple-prompt"}),
    )
    .await;
    assert_eq!(
        got["result"]["messages"],
        json!([{"role": "user", "content": {"type": "text", "text": "This is a simple prompt without arguments."}}]),
        "{got}"
    );

    let before = up.posts();
    let hidden = rpc(
        &g,
        &t,
        "prompts/get",
        json!({"name": "everything.args-prompt", "arguments": {"city": "Paris"}}),
    )
    .await;
    let unknown = rpc(
        &g,
        &t,
        "prompts/get",
        json!({"name": "nosuch.args-prompt", "arguments": {"city": "Paris"}}),
    )
    .await;
    assert_eq!(hidden["error"]["code"], -32602, "{hidden}");
    assert_eq!(
        hidden.to_string().replace("everything.args-prompt", "X"),
        unknown.to_string().replace("nosuch.args-prompt", "X"),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.posts(), before, "the denied get reached the upstream");

    // An upstream error keeps its code and message.
    let missing = rpc(
        &g,
        &t,
        "prompts/get",
        json!({"name": "everything.no-such-prompt"}),
    )
    .await;
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no-such-prompt"),
        "{missing}"
    );
    assert!(
        missing["error"]["data"]["decisionId"].is_string(),
        "{missing}"
    );

    let decided: Vec<Value> = g
        .decisions()
        .await
        .iter()
        .filter(|d| d.record.action == "get_prompt" && common::own_notes(&d.record).is_null())
        .map(|d| json!([d.record.resource, d.record.decision]))
        .collect();
    assert_eq!(
        decided,
        [
            json!([r#"Gateway::Prompt::"everything.simple-prompt""#, "allow"]),
            json!([r#"Gateway::Prompt::"everything.args-prompt""#, "deny"]),
            json!([r#"Gateway::Prompt::"everything.no-such-prompt""#, "allow"]),
        ]
    );
    g.stop().await;
}

/// A 2026-07-28 request body with the `_meta` every request carries.
fn modern_body(method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params})
}

async fn modern(
    g: &TestGateway,
    t: &Tenant,
    method: &str,
    params: Value,
    name: Option<&str>,
) -> (u16, Value) {
    let mut headers = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    if let Some(n) = name {
        headers.push(("mcp-name", n));
    }
    g.mcp_raw(
        &t.mcp_url,
        Some(&t.key),
        &headers,
        modern_body(method, params).to_string(),
    )
    .await
}

#[tokio::test]
async fn resources_and_prompts_at_2026_07_28_carry_the_revision_shapes() {
    if !installed() {
        return;
    }
    let (_up, g, t, _other) = governed().await;
    let (_, discover) = modern(&g, &t, "server/discover", json!({}), None).await;
    let caps = &discover["result"]["capabilities"];
    assert!(
        caps["resources"].is_object() && caps["prompts"].is_object(),
        "{discover}"
    );

    for (method, key) in [
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
        ("prompts/list", "prompts"),
    ] {
        let (status, body) = modern(&g, &t, method, json!({}), None).await;
        assert_eq!(status, 200, "{body}");
        let r = &body["result"];
        assert_eq!(r["resultType"], "complete", "{body}");
        assert_eq!(r["cacheScope"], "private", "{body}");
        assert!(r["ttlMs"].as_u64().is_some(), "{body}");
        assert!(!r[key].as_array().unwrap().is_empty(), "{body}");
    }
    let (status, body) = modern(
        &g,
        &t,
        "resources/read",
        json!({"uri": SHOWN_URI}),
        Some(SHOWN_URI),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["resultType"], "complete");
    assert_eq!(body["result"]["cacheScope"], "private");
    assert!(body["result"]["ttlMs"].as_u64().is_some(), "{body}");
    assert_eq!(body["result"]["contents"][0]["uri"], SHOWN_URI);

    // Hidden is -32602 at this revision, as for a URI no server has.
    let (_, hidden) = modern(
        &g,
        &t,
        "resources/read",
        json!({"uri": HIDDEN_URI}),
        Some(HIDDEN_URI),
    )
    .await;
    assert_eq!(hidden["error"]["code"], -32602, "{hidden}");

    // `Mcp-Name` must mirror the URI and the prompt name.
    let (status, body) = modern(
        &g,
        &t,
        "resources/read",
        json!({"uri": SHOWN_URI}),
        Some(HIDDEN_URI),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!(-32020)),
        "{body}"
    );
    let (status, body) = modern(
        &g,
        &t,
        "prompts/get",
        json!({"name": "everything.simple-prompt"}),
        Some("everything.other"),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!(-32020)),
        "{body}"
    );
    let (status, body) = modern(
        &g,
        &t,
        "prompts/get",
        json!({"name": "everything.simple-prompt"}),
        Some("everything.simple-prompt"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["resultType"], "complete", "{body}");
    assert!(body["result"]["messages"].is_array(), "{body}");
    g.stop().await;
}

/// A minimal upstream whose `resources/read` answers more than the
/// gateway's 4 MiB answer bound for `big://`, and a JSON-RPC error for
/// anything else.
async fn oversized_upstream() -> String {
    async fn answer(body: String) -> axum::response::Response {
        use axum::response::IntoResponse;
        let msg: Value = serde_json::from_str(&body).unwrap();
        let Some(id) = msg.get("id").cloned() else {
            return axum::http::StatusCode::ACCEPTED.into_response();
        };
        let uri = msg["params"]["uri"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let reply = match msg["method"].as_str().unwrap_or_default() {
            "initialize" => json!({"result": {"protocolVersion": "2025-06-18",
                "capabilities": {"resources": {}}, "serverInfo": {"name": "big", "version": "1"}}}),
            "resources/read" if uri.starts_with("big://") => json!({"result": {"contents": [
                {"uri": uri, "text": "x".repeat(5 * 1024 * 1024)}
            ]}}),
            "resources/read" => {
                json!({"error": {"code": -32002, "message": "Resource gone", "data": {"uri": uri}}})
            }
            _ => json!({"result": {"tools": [], "resources": []}}),
        };
        let mut reply = reply;
        reply["jsonrpc"] = json!("2.0");
        reply["id"] = id;
        axum::Json(reply).into_response()
    }
    let app = axum::Router::new().route("/mcp", axum::routing::post(answer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/mcp")
}

#[tokio::test]
async fn an_oversized_read_is_refused_and_an_upstream_error_keeps_its_code() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(
                json!({"name": "big", "transport": "streamable-http", "prefix": "",
                        "url": oversized_upstream().await}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{server}");

    let big = rpc(&g, &t, "resources/read", json!({"uri": "big://file"})).await;
    assert_eq!(big["error"]["code"], -32203, "{big}");
    assert_eq!(big["error"]["data"]["class"], "invalid-response", "{big}");

    let gone = rpc(&g, &t, "resources/read", json!({"uri": "file:///gone"})).await;
    assert_eq!(gone["error"]["code"], -32002, "{gone}");
    assert_eq!(gone["error"]["message"], "Resource gone", "{gone}");
    assert_eq!(
        gone["error"]["data"]["detail"],
        json!({"uri": "file:///gone"})
    );

    let outcomes: Vec<Value> = g
        .decisions()
        .await
        .iter()
        .filter(|d| d.record.action == "read_resource")
        .map(|d| {
            let o: Value = serde_json::from_str(&d.record.outcome).unwrap();
            json!([d.record.decision, o["status"], o["error"]["code"]])
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            json!(["allow", "failed", -32203]),
            json!(["allow", "failed", -32002])
        ]
    );
    g.stop().await;
}

/// `subscriptions/listen` (2026-07-28) following the resources and prompts
/// lists: a policy reload that hides one resource and one prompt from the
/// agent is announced on each list, and the tools list, not followed,
/// announces nothing.
#[tokio::test]
async fn a_listen_stream_announces_resource_and_prompt_list_changes() {
    if !installed() {
        return;
    }
    let up = Everything::start().await;
    let dir = tempfile::tempdir().unwrap();
    let policies = common::copy_policies(dir.path());
    let policies_dir = policies.clone();
    let g = TestGateway::start_with(move |c| {
        c.policies_dir = policies_dir;
        c.lifecycle.watch = false;
    })
    .await;
    let t = g.tenant("acme").await;
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "everything", "transport": "streamable-http", "url": up.url})),
        )
        .await;
    assert_eq!(status, 201, "{server}");

    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen", "params": {
        "notifications": {"resourcesListChanged": true, "promptsListChanged": true},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        },
    }});
    let resp = g
        .http
        .post(&t.mcp_url)
        .bearer_auth(&t.key)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut events = common::sse::Events {
        resp,
        buf: String::new(),
    };
    let ack = events.next().await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourcesListChanged": true, "promptsListChanged": true}),
        "{ack}"
    );

    std::fs::write(policies.join("hide.cedar"), FORBID_ONE_OF_EACH).unwrap();
    let (status, reload) = g.admin(Method::POST, "/admin/policies/reload", None).await;
    assert_eq!(status, 200, "{reload}");
    let mut announced = Vec::new();
    for _ in 0..2 {
        let note = events.next().await.unwrap();
        assert_eq!(
            note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 5,
            "{note}"
        );
        announced.push(note["method"].as_str().unwrap().to_string());
    }
    assert_eq!(
        announced,
        [
            "notifications/resources/list_changed",
            "notifications/prompts/list_changed"
        ]
    );
    // The re-check decided the lists again and recorded the hidden entries.
    let hidden = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| {
            d.record.action == "read_resource"
                && d.record.decision == "deny"
                && d.record.resource.contains("architecture.md")
        })
        .count();
    assert!(hidden >= 1, "the re-check's decisions are in the trail");

    // A reload that changes nothing these lists show announces nothing.
    std::fs::write(policies.join("noop.cedar"), "").unwrap();
    let (status, _) = g.admin(Method::POST, "/admin/policies/reload", None).await;
    assert_eq!(status, 200);
    let quiet = tokio::time::timeout(Duration::from_millis(1500), events.next()).await;
    assert!(quiet.is_err(), "announced without a change: {quiet:?}");
    drop(events);
    g.stop().await;
}
