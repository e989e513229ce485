//! An upstream that changes its tools and announces it with
//! `notifications/tools/list_changed` is listed again without an operator
//! and without the background timer (turned off here): the changed tool
//! is held (gone from `tools/list`, -32601 like an unknown tool, a trail
//! event with trigger `list-changed`) and the new one is offered, within
//! about a second. The upstream is a real server built with the official
//! TypeScript SDK (`tests/upstreams/changing_server.mjs`), over Streamable
//! HTTP (the announcement travels on the session's standing `GET` stream)
//! and over stdio (declared in the config). An event on the standing
//! stream larger than the answer bound closes it; the gateway opens it
//! again and still hears the next announcement. A stream the upstream
//! closes is opened again after the upstream's `retry`, with
//! `Last-Event-ID`, so an announcement made meanwhile is replayed and
//! heard; an upstream answering 405 is asked once; deleting the server
//! or the upstream ending the session ends its stream, and the next
//! session opens a new one. An upstream announcing that its prompts
//! changed wakes a 2026-07-28 agent's `subscriptions/listen` stream, which
//! tells it `notifications/prompts/list_changed`.
//!
//! The server is installed by `tests/upstreams/setup.sh` (run by `.ci/run`,
//! and here when missing). Without network, outside CI, the tests skip
//! loudly; with `CI=true` a failed install fails them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cedargate::config::DeclaredUpstream;
use common::modern::listen;
use common::setup::{upstreams_dir, upstreams_installed as installed};
use common::{Tenant, TestGateway};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

/// Longest wait for a change to show. The debounce is the default 500 ms
/// and it shows in well under a second here; the margin is for a loaded CI
/// machine. The timer is off, so only the notification can show it.
const WITHIN: Duration = Duration::from_secs(10);

fn script() -> String {
    upstreams_dir()
        .join("changing_server.mjs")
        .display()
        .to_string()
}

/// The fixture over Streamable HTTP, with its stderr lines.
struct Changing {
    url: String,
    log: Arc<Mutex<Vec<String>>>,
    _child: tokio::process::Child,
}

impl Changing {
    async fn start() -> Changing {
        Changing::start_as(&["http"]).await
    }

    /// `args`: the mode, then (after the port) its own arguments.
    async fn start_as(args: &[&str]) -> Changing {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = tokio::process::Command::new("node")
            .arg(script())
            .arg(args[0])
            .arg(port.to_string())
            .args(&args[1..])
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::clone(&log);
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                lines.lock().unwrap().push(line);
            }
        });
        let up = Changing {
            url: format!("http://127.0.0.1:{port}/mcp"),
            log,
            _child: child,
        };
        up.wait_for_lines("listening", 1).await;
        up
    }

    fn lines(&self, prefix: &str) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|l| l.starts_with(prefix))
            .cloned()
            .collect()
    }

    fn count(&self, prefix: &str) -> usize {
        let log = self.log.lock().unwrap();
        log.iter().filter(|l| l.starts_with(prefix)).count()
    }

    /// Waits until the server logged `n` lines starting with `prefix`.
    async fn wait_for_lines(&self, prefix: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.count(prefix) < n {
            assert!(
                Instant::now() < deadline,
                "never {n} × `{prefix}`: {:?}",
                self.log.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A gateway without the background refresh: only an announcement (or an
/// operator) lists an upstream again.
async fn gateway(declared: Vec<DeclaredUpstream>) -> TestGateway {
    TestGateway::start_with(move |c| {
        c.upstream_refresh.interval_secs = 0;
        c.upstreams = declared;
    })
    .await
}

/// Calls `mutate`, then waits until `reword` is held (and `fresh`, new
/// since the first listing, with it); returns how long that took.
async fn mutate_and_wait(g: &TestGateway, t: &Tenant, prefix: &str) -> Duration {
    mutate(g, t, prefix).await;
    wait_changed(g, t, prefix).await
}

async fn mutate(g: &TestGateway, t: &Tenant, prefix: &str) {
    let body = g.call_tool(t, &format!("{prefix}.mutate"), json!({})).await;
    assert_eq!(body["result"]["content"][0]["text"], "mutated", "{body}");
}

/// Waits until `reword` is held (`fresh`, new since the first listing, is
/// never offered); returns how long that took.
async fn wait_changed(g: &TestGateway, t: &Tenant, prefix: &str) -> Duration {
    let started = Instant::now();
    let (reword, fresh) = (format!("{prefix}.reword"), format!("{prefix}.fresh"));
    loop {
        let names = g.tool_names(t).await;
        assert!(!names.contains(&fresh), "a new tool is held: {names:?}");
        if !names.contains(&reword) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < WITHIN,
            "the change was not picked up within {WITHIN:?}: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// What a user sees once the change was listed: the changed tool and the
/// new one (held until approved) answer like unknown ones, and the trail
/// holds their events with the announcement as their trigger.
async fn assert_held(g: &TestGateway, t: &Tenant, prefix: &str) {
    let held = g
        .call_tool(t, &format!("{prefix}.reword"), json!({"message": "hi"}))
        .await;
    assert_eq!(held["error"]["code"], -32601, "{held}");
    let fresh = g
        .call_tool(t, &format!("{prefix}.fresh"), json!({"message": "hi"}))
        .await;
    assert_eq!(fresh["error"]["code"], -32601, "{fresh}");
    let events: Vec<Value> = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| d.record.action == "upstream_tool_held")
        .map(|d| serde_json::from_str(&d.record.outcome).unwrap())
        .collect();
    let mut tools: Vec<&str> = events.iter().map(|e| e["tool"].as_str().unwrap()).collect();
    tools.sort_unstable();
    assert_eq!(tools, ["fresh", "reword"], "{events:?}");
    assert!(
        events.iter().all(|e| e["trigger"] == "list-changed"),
        "{events:?}"
    );
}

async fn register(g: &TestGateway, url: &str) -> String {
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(json!({"name": "changing", "transport": "streamable-http", "url": url})),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    assert_eq!(server["protocolVersion"], "2025-11-25", "{server}");
    server["id"].as_str().unwrap().to_string()
}

/// A gateway with `up` registered for `acme`, after a first call opened
/// the upstream session, and with it the standing stream.
async fn connected(up: &Changing) -> (TestGateway, Tenant) {
    let g = gateway(Vec::new()).await;
    let t = g.tenant("acme").await;
    register(&g, &up.url).await;
    let body = g
        .call_tool(&t, "changing.reword", json!({"message": "a"}))
        .await;
    assert_eq!(body["result"]["content"][0]["text"], "reword a", "{body}");
    up.wait_for_lines("standing stream open", 1).await;
    (g, t)
}

#[tokio::test]
async fn a_streamable_http_upstream_announcing_a_change_has_it_held_without_an_operator() {
    if !installed() {
        return;
    }
    let up = Changing::start().await;
    let (g, t) = connected(&up).await;

    let took = mutate_and_wait(&g, &t, "changing").await;
    eprintln!("list_changed over Streamable HTTP held the tool after {took:?}");
    assert_held(&g, &t, "changing").await;
    assert_eq!(
        up.count("standing stream open"),
        1,
        "one stream per session"
    );
}

#[tokio::test]
async fn an_oversized_event_closes_the_standing_stream_and_it_is_opened_again() {
    if !installed() {
        return;
    }
    let up = Changing::start().await;
    let g = gateway(Vec::new()).await;
    let t = g.tenant("acme").await;
    register(&g, &up.url).await;
    let body = g.call_tool(&t, "changing.flood", json!({})).await;
    assert_eq!(body["result"]["content"][0]["text"], "flooded", "{body}");
    up.wait_for_lines("standing stream open", 1).await;
    // The 5 MiB notification went out before the stream was open: flood
    // again now that it is.
    let body = g.call_tool(&t, "changing.flood", json!({})).await;
    assert!(body["result"].is_object(), "{body}");
    // Over the 4 MiB bound: the gateway closes the stream, then reconnects
    // after its first backoff (0.5 s).
    up.wait_for_lines("standing stream open", 2).await;

    mutate_and_wait(&g, &t, "changing").await;
    assert_held(&g, &t, "changing").await;
}

#[tokio::test]
async fn a_stdio_upstream_announcing_a_change_has_it_held_without_an_operator() {
    if !installed() {
        return;
    }
    let declared = DeclaredUpstream {
        org: "acme".into(),
        name: "changing".into(),
        command: "node".into(),
        args: vec![script(), "stdio".into()],
        env: BTreeMap::new(),
        prefix: None,
        timeout_ms: None,
        approve_new_tools: None,
    };
    let g = gateway(vec![declared]).await;
    let t = g.tenant("acme").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !g
        .tool_names(&t)
        .await
        .contains(&"changing.reword".to_string())
    {
        assert!(
            Instant::now() < deadline,
            "the declared server never listed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = mutate_and_wait(&g, &t, "changing").await;
    eprintln!("list_changed over stdio held the tool after {took:?}");
    assert_held(&g, &t, "changing").await;
}

#[tokio::test]
async fn a_closed_stream_is_resumed_after_its_retry_and_hears_what_was_missed() {
    if !installed() {
        return;
    }
    let up = Changing::start_as(&["http-resumable", "1500"]).await;
    let g = gateway(Vec::new()).await;
    let t = g.tenant("acme").await;
    register(&g, &up.url).await;
    g.call_tool(&t, "changing.reword", json!({})).await;
    up.wait_for_lines("standing stream open", 1).await;
    assert_eq!(
        up.lines("standing stream open")[0],
        "standing stream open last-event-id="
    );

    // An event gives the stream an id to resume from (and the `retry`).
    let body = g.call_tool(&t, "changing.note", json!({})).await;
    assert_eq!(body["result"]["content"][0]["text"], "noted", "{body}");
    let body = g.call_tool(&t, "changing.drop", json!({})).await;
    assert_eq!(body["result"]["content"][0]["text"], "dropped", "{body}");
    let dropped = Instant::now();
    up.wait_for_lines("standing stream closed", 1).await;
    // Announced while no stream is open: kept by the upstream for replay.
    mutate(&g, &t, "changing").await;
    up.wait_for_lines("standing stream open", 2).await;
    let waited = dropped.elapsed();
    assert!(
        waited >= Duration::from_millis(1400),
        "reconnected after {waited:?}, before the upstream's retry of 1.5 s"
    );
    let resumed = &up.lines("standing stream open")[1];
    assert!(
        resumed.len() > "standing stream open last-event-id=".len(),
        "no Last-Event-ID: {resumed}"
    );
    // Only the replay can bring the announcement: the timer is off.
    wait_changed(&g, &t, "changing").await;
    assert_held(&g, &t, "changing").await;
}

#[tokio::test]
async fn an_upstream_offering_no_standing_stream_is_asked_once() {
    if !installed() {
        return;
    }
    let up = Changing::start_as(&["http-noget"]).await;
    let g = gateway(Vec::new()).await;
    let t = g.tenant("acme").await;
    register(&g, &up.url).await;
    let body = g
        .call_tool(&t, "changing.reword", json!({"message": "a"}))
        .await;
    assert_eq!(body["result"]["content"][0]["text"], "reword a", "{body}");
    up.wait_for_lines("GET refused", 1).await;
    // Longer than the first backoffs (0.5 s, 1 s): no retry after a 405.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert_eq!(up.count("GET refused"), 1);
    let body = g
        .call_tool(&t, "changing.reword", json!({"message": "b"}))
        .await;
    assert_eq!(body["result"]["content"][0]["text"], "reword b", "{body}");
}

#[tokio::test]
async fn deleting_the_server_ends_its_standing_stream() {
    if !installed() {
        return;
    }
    let up = Changing::start().await;
    let g = gateway(Vec::new()).await;
    let t = g.tenant("acme").await;
    let id = register(&g, &up.url).await;
    g.call_tool(&t, "changing.reword", json!({})).await;
    up.wait_for_lines("standing stream open", 1).await;
    assert_eq!(up.count("standing stream closed"), 0);
    let (status, body) = g
        .admin(
            Method::DELETE,
            &format!("/admin/orgs/acme/mcp-servers/{id}"),
            None,
        )
        .await;
    assert!(status == 200 || status == 204, "{status} {body}");
    up.wait_for_lines("standing stream closed", 1).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(up.count("standing stream open"), 1, "reopened after delete");
}

#[tokio::test]
async fn an_expired_session_ends_its_stream_and_the_next_session_opens_one() {
    if !installed() {
        return;
    }
    let up = Changing::start().await;
    let g = gateway(Vec::new()).await;
    let t = g.tenant("acme").await;
    register(&g, &up.url).await;
    g.call_tool(&t, "changing.reword", json!({})).await;
    up.wait_for_lines("standing stream open", 1).await;
    let body = g.call_tool(&t, "changing.expire", json!({})).await;
    assert_eq!(body["result"]["content"][0]["text"], "expiring", "{body}");
    // The upstream ended the session: the stream closes, the reconnect is
    // answered 404, and the expired session's stream is not tried again.
    up.wait_for_lines("standing stream closed", 1).await;
    up.wait_for_lines("GET expired", 1).await;
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert_eq!(
        up.count("GET expired"),
        1,
        "an expired session's stream was retried"
    );

    // The next call initializes a new session, which opens a new stream.
    let body = g
        .call_tool(&t, "changing.reword", json!({"message": "again"}))
        .await;
    assert_eq!(
        body["result"]["content"][0]["text"], "reword again",
        "{body}"
    );
    up.wait_for_lines("standing stream open", 2).await;
    mutate_and_wait(&g, &t, "changing").await;
    assert_held(&g, &t, "changing").await;
}

/// The upstream adds a prompt and says so on its standing stream: an
/// agent listening for prompt-list changes hears of it, without an
/// operator and with the timer off.
#[tokio::test]
async fn an_upstream_announcing_new_prompts_is_heard_by_a_listening_agent() {
    if !installed() {
        return;
    }
    let up = Changing::start().await;
    let (g, t) = connected(&up).await;
    // The registration's own wake-up (its tools becoming typed actions)
    // is over before the agent listens, so only the upstream's
    // announcement can wake the stream below.
    wait_typed(&g, "changing.reprompt").await;
    let (_, mut events) = listen(&g, &t, 7, json!({"promptsListChanged": true})).await;

    let started = Instant::now();
    let body = g.call_tool(&t, "changing.reprompt", json!({})).await;
    assert_eq!(body["result"]["content"][0]["text"], "reprompted", "{body}");
    let heard = tokio::time::timeout(WITHIN, events.next())
        .await
        .expect("no announcement within the bound")
        .expect("the stream ended");
    eprintln!(
        "prompts/list_changed reached the listener after {:?}",
        started.elapsed()
    );
    assert_eq!(
        heard["method"], "notifications/prompts/list_changed",
        "{heard}"
    );
    assert_eq!(
        heard["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 7,
        "{heard}"
    );
    let (status, prompts) = g
        .mcp(
            &t,
            json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/list"}),
        )
        .await;
    assert_eq!(status, 200, "{prompts}");
    let names: Vec<&str> = prompts["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["changing.first", "changing.later"], "{prompts}");
}

/// Waits until `tool` is a typed action of the effective schema.
async fn wait_typed(g: &TestGateway, tool: &str) {
    let started = Instant::now();
    loop {
        let (status, policies) = g.admin(Method::GET, "/admin/policies", None).await;
        assert_eq!(status, 200, "{policies}");
        if policies["typedTools"]
            .as_array()
            .is_some_and(|t| t.contains(&json!(tool)))
        {
            return;
        }
        assert!(
            started.elapsed() < WITHIN,
            "{tool} never became typed: {policies}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
