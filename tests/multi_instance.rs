//! Several gateway instances on one PostgreSQL database, and a database
//! that goes away: the shared decision chain under interleaved load, peer
//! changes seen by every instance within a second, which policy set each
//! instance runs, and clean failures (never a lost acknowledgement) while
//! the database restarts.
//!
//! These tests always run on PostgreSQL (whatever `CG_TEST_BACKEND` says):
//! the shared server for the two-instance tests, a private throwaway
//! cluster for the restart tests. Outside CI they skip when PostgreSQL is
//! missing; with `CI=true` they fail.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::time::{Duration, Instant};

use cedargate::store::decisions;
use common::pg::{self, FreshSchema, PrivateCluster};
use common::sdk_peer::{SdkPeer, installed};
use common::{Tenant, TestGateway, copy_policies};
use reqwest::Method;
use serde_json::{Value, json};

/// A fresh schema on the shared server, or `None` (skipped) outside CI.
fn shared_schema() -> Option<FreshSchema> {
    match FreshSchema::new(&pg::shared_url()) {
        Ok(s) => Some(s),
        Err(e) => {
            pg::skip_unless_ci(&e);
            None
        }
    }
}

/// A private cluster, or `None` (skipped) outside CI.
fn private_cluster() -> Option<PrivateCluster> {
    match PrivateCluster::start() {
        Ok(c) => Some(c),
        Err(e) => {
            pg::skip_unless_ci(&e);
            None
        }
    }
}

async fn on(url: &str) -> TestGateway {
    let url = url.to_string();
    TestGateway::start_with(move |c| c.database.url = Some(url)).await
}

/// Polls `g`'s tool list until `want(has the tool)` holds; the time it took.
async fn until_listed(g: &TestGateway, t: &Tenant, tool: &str, want: bool) -> Duration {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if g.tool_names(t).await.iter().any(|n| n == tool) == want {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("`{tool}` listed = {want} not reached within 5 s");
}

#[tokio::test]
async fn a_peer_registered_on_one_instance_is_called_through_the_other() {
    let Some(schema) = shared_schema() else {
        return;
    };
    if installed().is_none() {
        return;
    }
    let peer = SdkPeer::python().await;
    let a = on(&schema.url).await;
    let b = on(&schema.url).await;
    let t = a.tenant("acme").await;
    // B caches the org's (empty) peer set before the registration…
    assert!(!b.tool_names(&t).await.iter().any(|n| n.contains('.')));

    let (status, agent) = a
        .admin(
            Method::POST,
            "/admin/orgs/acme/a2a-agents",
            Some(json!({"url": peer.base, "name": "Ticket Desk"})),
        )
        .await;
    assert_eq!(status, 201, "{agent}");
    // …and sees the new tools within a second (its cache TTL is 30 s).
    let seen = until_listed(&b, &t, "ticket_desk.lookup", true).await;
    assert!(seen < Duration::from_secs(1), "took {seen:?}");

    let (status, body) = b
        .mcp(
            &t,
            json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
                "name":"ticket_desk.lookup","arguments":{"ticket":"T-7"}}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("error").is_none(), "{body}");
    let text = body["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("T-7"), "{body}");

    // Deregistration on A hides the tools on B just as fast.
    let id = agent["id"].as_str().unwrap();
    let (status, _) = a
        .admin(
            Method::DELETE,
            &format!("/admin/orgs/acme/a2a-agents/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let gone = until_listed(&b, &t, "ticket_desk.lookup", false).await;
    assert!(gone < Duration::from_secs(1), "took {gone:?}");
}

#[tokio::test]
async fn a_key_revoked_on_one_instance_is_refused_by_the_other_at_once() {
    let Some(schema) = shared_schema() else {
        return;
    };
    let a = on(&schema.url).await;
    let b = on(&schema.url).await;
    let t = a.tenant("acme").await;
    assert_eq!(b.tool_names(&t).await.len(), 2);
    let (status, _) = a
        .admin(
            Method::DELETE,
            &format!("/admin/orgs/acme/keys/{}", t.key_id),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let start = Instant::now();
    loop {
        let (status, _) = b
            .mcp(&t, json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
            .await;
        if status == 401 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "B still accepts the revoked key"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sum of `cedargate_decisions_total` on an instance's `/metrics`.
async fn decisions_made(g: &TestGateway) -> u64 {
    counted(g, "cedargate_decisions_total{").await
}

/// Sum of the samples of the metric lines starting with `prefix`.
async fn counted(g: &TestGateway, prefix: &str) -> u64 {
    g.metrics_text()
        .await
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

#[tokio::test]
async fn interleaved_load_on_two_instances_keeps_one_gap_free_chain() {
    let Some(schema) = shared_schema() else {
        return;
    };
    let a = on(&schema.url).await;
    let b = on(&schema.url).await;
    let t = a.tenant("acme").await;
    let mut calls = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let base = if worker % 2 == 0 { &a.base } else { &b.base };
        let url = format!("{base}/api/mcp/{}", t.session_id);
        let (http, key) = (a.http.clone(), t.key.clone());
        calls.spawn(async move {
            for i in 0..15 {
                let body = if i % 3 == 0 {
                    json!({"jsonrpc":"2.0","id":i,"method":"tools/list"})
                } else {
                    json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{
                        "name":"af_memory_remember",
                        "arguments":{"content": format!("worker {worker} note {i}")}}})
                };
                let r = http
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                let body: Value = r.json().await.unwrap();
                assert!(body.get("error").is_none(), "{body}");
            }
        });
    }
    while let Some(done) = calls.join_next().await {
        done.unwrap();
    }
    a.gw.store.writer().flush().await.unwrap();
    b.gw.store.writer().flush().await.unwrap();

    let report = a.gw.store.read(decisions::verify).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let made = decisions_made(&a).await + decisions_made(&b).await;
    // Both instances appended to it.
    let rows = a.decisions().await;
    assert_eq!(report.checked as usize, rows.len());
    // Every decision is on record: one record per request, holding its
    // prelude decisions, and a tools/list's record the verdicts of its
    // tools.
    let held: u64 = rows
        .iter()
        .map(|d| {
            let own = if cedargate::audit::tool_list::is_tool_list(&d.record) {
                let notes: Value = serde_json::from_str(&d.record.notes).unwrap();
                notes["toolList"]["tools"].as_array().unwrap().len() as u64
            } else {
                1
            };
            own + cedargate::audit::prelude::preludes(&d.record)
                .unwrap()
                .len() as u64
        })
        .sum();
    // A listing that repeated its session's last recorded one on the same
    // instance is not written again (`audit::repeated_listing`): its
    // access_session and one view_tool per tool are the recorded ones'.
    let listed = rows
        .iter()
        .find(|d| cedargate::audit::tool_list::is_tool_list(&d.record))
        .map(|d| {
            let notes: Value = serde_json::from_str(&d.record.notes).unwrap();
            notes["toolList"]["tools"].as_array().unwrap().len() as u64
        })
        .unwrap();
    let repeated = counted(&a, "cedargate_listings_repeated_total").await
        + counted(&b, "cedargate_listings_repeated_total").await;
    assert!(repeated > 0, "a session listing again repeats its listing");
    assert_eq!(
        held + repeated * (1 + listed),
        made,
        "every decision on record, or in a listing it repeats"
    );
    assert!(made >= 8 * 15, "{made}");
    let notes = rows
        .iter()
        .filter(|d| d.record.action == "call_tool")
        .count();
    assert_eq!(notes, 8 * 10);
    assert_eq!(a.count("observations").await, 8 * 10);
}

#[tokio::test]
async fn admin_policies_shows_the_hash_each_instance_runs() {
    let Some(schema) = shared_schema() else {
        return;
    };
    let a = on(&schema.url).await;
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    std::fs::write(
        policies.join("extra.cedar"),
        "@id(\"hide-boom\")\nforbid (principal, action == Gateway::Action::\"view_tool\", resource == Gateway::Tool::\"vercel_ops.boom\");\n",
    )
    .unwrap();
    let url = schema.url.clone();
    let b = TestGateway::start_with(move |c| {
        c.database.url = Some(url);
        c.policies_dir = policies;
    })
    .await;
    let (status, body) = a.admin(Method::GET, "/admin/policies", None).await;
    assert_eq!(status, 200, "{body}");
    let ha = a.gw.pep.current().hash.clone();
    let hb = b.gw.pep.current().hash.clone();
    assert_ne!(ha, hb);
    assert_eq!(body["instanceId"], a.gw.cluster.instance_id.as_str());
    let instances = body["instances"].as_array().unwrap();
    let hash_of = |id: &str| {
        instances
            .iter()
            .find(|i| i["id"] == id)
            .map(|i| i["policyHash"].clone())
    };
    assert_eq!(
        hash_of(&a.gw.cluster.instance_id),
        Some(json!(ha)),
        "{body}"
    );
    assert_eq!(
        hash_of(&b.gw.cluster.instance_id),
        Some(json!(hb)),
        "{body}"
    );

    // A stopped instance leaves the list.
    let id_b = b.gw.cluster.instance_id.clone();
    drop(b.stop().await);
    let (_, body) = a.admin(Method::GET, "/admin/policies", None).await;
    assert!(
        !body["instances"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["id"] == id_b.as_str()),
        "{body}"
    );
}

async fn ready(g: &TestGateway) -> u16 {
    g.http
        .get(format!("{}/readyz", g.base))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_gateway_started_without_its_database_is_not_ready_until_it_answers() {
    let Some(cluster) = private_cluster() else {
        return;
    };
    cluster.stop().unwrap();
    let url = cluster.url();
    let g = TestGateway::start_with(move |c| {
        c.database.url = Some(url);
        c.database.acquire_timeout_ms = 500;
    })
    .await;
    assert_eq!(ready(&g).await, 503);
    // The operator API answers 503 too, and nothing is half-done.
    let (status, body) = g.admin(Method::GET, "/admin/orgs", None).await;
    assert_eq!(status, 503, "{body}");

    cluster.start_again().unwrap();
    let start = Instant::now();
    while ready(&g).await != 200 {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "not ready 15 s after the database came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let t = g.tenant("acme").await;
    let body = g
        .call_tool(
            &t,
            "af_memory_remember",
            json!({"content": "the database is back"}),
        )
        .await;
    assert!(body.get("error").is_none(), "{body}");
}

#[tokio::test]
async fn a_database_restart_mid_load_fails_calls_cleanly_and_loses_nothing_acknowledged() {
    let Some(cluster) = private_cluster() else {
        return;
    };
    let url = cluster.url();
    let g = TestGateway::start_with(move |c| {
        c.database.url = Some(url);
        c.database.acquire_timeout_ms = 500;
    })
    .await;
    let t = g.tenant("acme").await;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4 {
        let (g_http, t, stop) = (g.http.clone(), t.clone(), std::sync::Arc::clone(&stop));
        workers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut failures = Vec::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                i += 1;
                let content = format!("w{w}-n{i}");
                let res = g_http
                    .post(&t.mcp_url)
                    .bearer_auth(&t.key)
                    .json(
                        &json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{
                        "name":"af_memory_remember","arguments":{"content": content}}}),
                    )
                    .send()
                    .await;
                match res {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let body: Value = r.json().await.unwrap_or(Value::Null);
                        if status == 200 && body.get("error").is_none() {
                            acked.push(content);
                        } else {
                            failures.push((status, body["error"]["code"].clone()));
                        }
                    }
                    Err(e) => panic!("the gateway itself must stay up: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (acked, failures)
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    cluster.stop().unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    cluster.start_again().unwrap();
    // Service resumes: wait for a call to succeed after the restart.
    let start = Instant::now();
    loop {
        let (status, body) = g
            .mcp(
                &t,
                json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
                    "name":"af_memory_remember","arguments":{"content":"after the restart"}}}),
            )
            .await;
        if status == 200 && body.get("error").is_none() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no success 15 s after the restart: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    let mut acked = Vec::new();
    let mut failures = Vec::new();
    for w in workers {
        let (a, f) = w.await.unwrap();
        acked.extend(a);
        failures.extend(f);
    }
    assert!(!failures.is_empty(), "the outage was not noticed");
    for (status, code) in &failures {
        assert!(
            (*status == 200 && *code == json!(-32603)) || *status == 503,
            "unclean failure: {status} {code}"
        );
    }
    // Every acknowledged call's observation and record are stored.
    let stored: std::collections::HashSet<String> = g
        .texts("SELECT content FROM observations")
        .await
        .into_iter()
        .collect();
    assert!(acked.len() > 10, "{}", acked.len());
    for content in &acked {
        assert!(
            stored.contains(content),
            "acknowledged `{content}` was lost"
        );
    }
    g.gw.store.writer().flush().await.unwrap();
    let report = g.gw.store.read(decisions::verify).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// `DELETE` of the MCP session on one instance; `(status, body)` of a
/// request carrying `Mcp-Session-Id` on `g`.
async fn with_session_header(g: &TestGateway, t: &Tenant, body: Value) -> (u16, Value) {
    let url = format!("{}/api/mcp/{}", g.base, t.session_id);
    g.mcp_raw(
        &url,
        Some(&t.key),
        &[("mcp-session-id", t.session_id.as_str())],
        body.to_string(),
    )
    .await
}

#[tokio::test]
async fn an_mcp_session_ended_on_one_instance_is_ended_on_every_instance() {
    let Some(schema) = shared_schema() else {
        return;
    };
    let a = on(&schema.url).await;
    let b = on(&schema.url).await;
    let t = a.tenant("acme").await;
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"});
    assert_eq!(with_session_header(&b, &t, list.clone()).await.0, 200);

    let url = format!("{}/api/mcp/{}", a.base, t.session_id);
    let resp = a
        .http
        .delete(&url)
        .bearer_auth(&t.key)
        .header("mcp-session-id", &t.session_id)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let start = Instant::now();
    loop {
        let (status, body) = with_session_header(&b, &t, list.clone()).await;
        if status == 404 {
            assert_eq!(body["error"]["code"], -32002, "{body}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "B still serves the ended MCP session"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A gateway started afterwards on the same database knows it too.
    let c = on(&schema.url).await;
    assert_eq!(with_session_header(&c, &t, list.clone()).await.0, 404);

    // `initialize` (without the header) on B starts a new MCP session that
    // A and C accept.
    let init = json!({"jsonrpc":"2.0","id":2,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let (status, body) = b.mcp(&t, init).await;
    assert_eq!(status, 200, "{body}");
    for g in [&a, &c] {
        let start = Instant::now();
        while with_session_header(g, &t, list.clone()).await.0 != 200 {
            assert!(
                start.elapsed() < Duration::from_secs(1),
                "the new MCP session is refused"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Polls until `g` counts `n` live instances sharing its rate limits.
async fn until_sharing(g: &TestGateway, n: u32) {
    let start = Instant::now();
    while g.gw.rate_limits.instances() != n {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{n} instances never counted (still {})",
            g.gw.rate_limits.instances()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A ping's status through `g` on `t`'s session.
async fn ping_through(g: &TestGateway, t: &Tenant, id: u64) -> u16 {
    let url = t
        .mcp_url
        .replace(&t.mcp_url[..t.mcp_url.find("/api/").unwrap()], &g.base);
    let (status, body) = g
        .mcp_raw(
            &url,
            Some(&t.key),
            &[],
            json!({"jsonrpc":"2.0","id":id,"method":"ping"}).to_string(),
        )
        .await;
    assert!(status == 200 || status == 429, "{status}: {body}");
    status
}

#[tokio::test]
async fn an_orgs_rate_is_shared_by_the_live_instances_not_multiplied() {
    let Some(schema) = shared_schema() else {
        return;
    };
    let wide = cedargate::config::Bucket {
        per_second: 100_000,
        burst: 100_000,
    };
    let on_shared = |url: String| {
        move |c: &mut cedargate::config::Config| {
            c.database.url = Some(url);
            c.database.heartbeat_secs = 1;
            c.rate_limits.key = wide;
            c.rate_limits.agent = wide;
            c.rate_limits.org = cedargate::config::Bucket {
                per_second: 1,
                burst: 6,
            };
        }
    };
    let a = TestGateway::start_with(on_shared(schema.url.clone())).await;
    let b = TestGateway::start_with(on_shared(schema.url.clone())).await;
    let t = a.tenant("acme").await;
    until_sharing(&a, 2).await;
    until_sharing(&b, 2).await;
    // Alternating instances, as a load balancer would: the org's burst of
    // 6 in all (3 each), not 6 on each.
    let mut passed = 0;
    for i in 0..30 {
        let via = if i % 2 == 0 { &a } else { &b };
        if ping_through(via, &t, i).await == 200 {
            passed += 1;
        }
    }
    assert!(
        (6..=7).contains(&passed),
        "the org's burst of 6 (and a token refilled at most): {passed}"
    );

    // An instance that leaves gives its share back: the other enforces
    // the whole bucket again, starting full.
    drop(b.stop().await);
    until_sharing(&a, 1).await;
    let mut passed = 0;
    for i in 0..12 {
        if ping_through(&a, &t, 100 + i).await == 200 {
            passed += 1;
        }
    }
    assert!(
        (6..=7).contains(&passed),
        "the whole burst on one instance: {passed}"
    );
}

#[tokio::test]
async fn context_usage_counts_for_every_live_instance() {
    let Some(schema) = shared_schema() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    std::fs::write(
        policies.join("usage.cedar"),
        "@id(\"recall-rate\")\nforbid (principal, action in [Gateway::Action::\"call_tool\"], resource == Gateway::Tool::\"af_memory_recall\")\nwhen { context has usage && context.usage.callsLastMinute >= 3 };\n",
    )
    .unwrap();
    let on_shared = |url: String, policies: std::path::PathBuf| {
        move |c: &mut cedargate::config::Config| {
            c.database.url = Some(url);
            c.database.heartbeat_secs = 1;
            c.policies_dir = policies;
        }
    };
    let a = TestGateway::start_with(on_shared(schema.url.clone(), policies.clone())).await;
    let _b = TestGateway::start_with(on_shared(schema.url.clone(), policies)).await;
    let t = a.tenant("acme").await;
    until_sharing(&a, 2).await;
    // Calls through one instance count twice: each stands for the calls
    // the other instance takes under an even spread, so the third is over
    // a threshold of 3 (on one instance alone, the fourth would be).
    let recall = json!({"query": "deploy", "workType": "feature"});
    let mut codes = Vec::new();
    for _ in 0..3 {
        let body = a.call_tool(&t, "af_memory_recall", recall.clone()).await;
        codes.push(body["error"]["code"].as_i64().unwrap_or(0));
    }
    assert_eq!(codes, [0, 0, -32003]);
    let counted: Vec<Value> = a
        .decisions()
        .await
        .iter()
        .filter(|d| d.record.action == "call_tool")
        .map(|d| {
            serde_json::from_str::<Value>(&d.record.context).unwrap()["usage"]["callsLastMinute"]
                .clone()
        })
        .collect();
    assert_eq!(counted, [json!(0), json!(2), json!(4)]);
}
