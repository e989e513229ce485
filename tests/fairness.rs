//! Fairness between tenants: one org sending as fast as it can does not
//! starve another org. The flooding org is held to its buckets (small ones,
//! set through the admin API's per-org override, so the test runs fast),
//! its refusals are cheap (no Cedar decision, no durable write), and the
//! other org, on the default buckets, has all its calls succeed with a
//! latency that stays within a generous multiple of its idle latency. The real
//! ratio, with the default limits and the release build, is measured by
//! `cargo bench --bench abuse` (figures in `benches/README.md`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Tenant, TestGateway};
use reqwest::Method;
use serde_json::json;

/// Sequential durable writes by `t`; returns each one's latency.
async fn remember_calls(gw: &TestGateway, t: &Tenant, n: usize) -> Vec<Duration> {
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let body = gw
            .call_tool(
                t,
                "af_memory_remember",
                json!({"content": format!("steady note {i}"), "type": "constraint", "confidence": 0.9}),
            )
            .await;
        assert!(
            body["result"].is_object(),
            "the steady org's call {i} failed: {body}"
        );
        lat.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    lat
}

fn p99(mut lat: Vec<Duration>) -> Duration {
    lat.sort();
    let i = ((lat.len() as f64 * 0.99).ceil() as usize).clamp(1, lat.len()) - 1;
    lat[i]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_org_at_full_speed_does_not_starve_another() {
    let (per_second, burst) = (20u32, 40u32);
    let gw = TestGateway::start().await;
    let flood_org = gw.tenant("flood").await;
    let steady = gw.tenant("steady").await;
    let small = json!({"perSecond": per_second, "burst": burst});
    let (status, body) = gw
        .admin(
            Method::PUT,
            "/admin/orgs/flood/rate-limits",
            Some(json!({"key": small, "agent": small, "org": small})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    remember_calls(&gw, &steady, 10).await;
    let idle = p99(remember_calls(&gw, &steady, 60).await);

    let stop = Arc::new(AtomicBool::new(false));
    let (answered, limited) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let batch: Vec<_> = (0..16)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "tools/list"}))
        .collect();
    let batch = serde_json::Value::from(batch).to_string();
    let mut flooders = Vec::new();
    for _ in 0..8 {
        let (http, t, body) = (gw.http.clone(), flood_org.clone(), batch.clone());
        let (stop, answered, limited) = (stop.clone(), answered.clone(), limited.clone());
        flooders.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let resp = http
                    .post(&t.mcp_url)
                    .header("authorization", format!("Bearer {}", t.key))
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                let resp = match resp {
                    Ok(resp) => resp,
                    Err(e) => panic!("the flood's request failed: {e}"),
                };
                match resp.status().as_u16() {
                    // A batch is charged element by element: count the
                    // listings that ran (the rest answered -32029).
                    200 => {
                        let answers: Vec<serde_json::Value> = resp.json().await.unwrap();
                        let ran = answers.iter().filter(|a| a.get("result").is_some()).count();
                        answered.fetch_add(ran as u64, Ordering::Relaxed)
                    }
                    429 => limited.fetch_add(1, Ordering::Relaxed),
                    other => panic!("the flood got HTTP {other}"),
                };
            }
        }));
    }
    let flood_started = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let flooded = p99(remember_calls(&gw, &steady, 60).await);
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.await.unwrap();
    }
    let flood_secs = flood_started.elapsed().as_secs_f64();

    let (answered, limited) = (
        answered.load(Ordering::Relaxed),
        limited.load(Ordering::Relaxed),
    );
    eprintln!(
        "steady p99: idle {idle:?}, under flood {flooded:?}; flood: {answered} listings served, {limited} batches limited in {flood_secs:.1} s"
    );
    assert!(limited > 0, "the flood was never limited");
    // A listing costs its two view_tool decisions: the bucket admits its
    // burst and then 20 tokens a second.
    let admitted_tokens = answered * 2;
    let budget = f64::from(burst) + f64::from(per_second) * (flood_secs + 1.0);
    assert!(
        admitted_tokens as f64 <= budget,
        "the flood spent {admitted_tokens} tokens in {flood_secs:.1} s, over its budget {budget}"
    );
    // Generous on purpose: the test build is unoptimised and shares the
    // machine with the flood's own client.
    let bound = idle * 3 + Duration::from_millis(250);
    assert!(
        flooded <= bound,
        "the steady org's p99 went from {idle:?} idle to {flooded:?} under the flood (bound {bound:?}; {answered} batches served, {limited} limited)"
    );
}
