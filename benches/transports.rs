//! `cargo bench --bench transports`: what each client transport costs per
//! request on this machine, through the real server on loopback with the
//! shipped policies (the full PEP and trail path, `tools/list`, one
//! `access_session` and two `view_tool` decisions, in two records, per request).
//!
//! Scenarios, each sequential (one request in flight, like one agent):
//! - `streamable-json`: POST, JSON answer;
//! - `streamable-sse`: POST with `Accept: text/event-stream`, SSE answer;
//! - `http+sse`: POST to the stream's endpoint (202), answer read from the
//!   open stream;
//! - `sse-open`: GET `/sse` until the `endpoint` event (stream set-up).
//!
//! Knob: `BENCH_ITERS` requests per scenario (default 2000, after 200 of
//! warm-up). Without `--bench` (under `cargo test --all-targets`) the binary
//! exits at once, so it never adds to test time.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark fails loudly"
)]

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::server::{self, Server, Stopped};
use support::stats::{Rank, Stats};
use support::tenant::{self, TenantSpec};
use support::{Res, env_num};

const WARMUP: usize = 200;

/// The tenant the figures were taken with: memory on, role `developers`.
const TENANT: TenantSpec<'static> = TenantSpec {
    org_name: "Org bench",
    agent_name: "Agent",
    ..TenantSpec::BENCH
};

/// The server and the tenant's way in.
struct Target {
    http: reqwest::Client,
    server: Server,
    mcp_url: String,
    key: String,
}

/// Reads a streaming response until `needle` has arrived; returns what
/// was read after it is found (the rest of the buffer).
async fn read_until(resp: &mut reqwest::Response, buf: &mut String, needle: &str) -> String {
    loop {
        if let Some(i) = buf.find(needle) {
            let end = buf[i..]
                .find("\n\n")
                .map(|e| i + e + 2)
                .unwrap_or(buf.len());
            return buf.drain(..end).collect();
        }
        let chunk = resp.chunk().await.unwrap().expect("stream ended");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

fn report(name: &str, samples: Vec<Duration>) {
    let s = Stats::of(samples, Rank::Floor);
    println!(
        "{name:<18} n={:<6} p50={:>7.3} ms  p99={:>7.3} ms  mean={:>7.3} ms  {:>7.0} req/s (sequential)",
        s.n,
        s.p50 / 1e3,
        s.p99 / 1e3,
        s.mean / 1e3,
        1e6 / s.mean
    );
}

async fn streamable(t: &Target, accept: &str, iters: usize) -> Vec<Duration> {
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}).to_string();
    let mut out = Vec::with_capacity(iters);
    for i in 0..WARMUP + iters {
        let started = Instant::now();
        let resp = t
            .http
            .post(&t.mcp_url)
            .bearer_auth(&t.key)
            .header("content-type", "application/json")
            .header("accept", accept)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let text = resp.text().await.unwrap();
        assert!(text.contains("af_memory_recall"));
        if i >= WARMUP {
            out.push(started.elapsed());
        }
    }
    out
}

async fn legacy(t: &Target, iters: usize) -> Vec<Duration> {
    let mut stream = t
        .http
        .get(format!("{}/sse", t.mcp_url))
        .bearer_auth(&t.key)
        .send()
        .await
        .unwrap();
    let mut buf = String::new();
    let endpoint = read_until(&mut stream, &mut buf, "event: endpoint").await;
    let path = endpoint
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap()
        .to_string();
    let url = format!("{}{path}", t.server.base());
    let mut out = Vec::with_capacity(iters);
    for i in 0..WARMUP + iters {
        let id = format!("\"id\":{i},");
        let body = json!({"jsonrpc":"2.0","id":i,"method":"tools/list"}).to_string();
        let started = Instant::now();
        let resp = t
            .http
            .post(&url)
            .bearer_auth(&t.key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 202);
        let event = read_until(&mut stream, &mut buf, &id).await;
        assert!(event.contains("af_memory_recall"));
        if i >= WARMUP {
            out.push(started.elapsed());
        }
    }
    out
}

async fn open_close(t: &Target, iters: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(iters);
    for i in 0..WARMUP + iters {
        let started = Instant::now();
        let mut stream = t
            .http
            .get(format!("{}/sse", t.mcp_url))
            .bearer_auth(&t.key)
            .send()
            .await
            .unwrap();
        let mut buf = String::new();
        read_until(&mut stream, &mut buf, "event: endpoint").await;
        if i >= WARMUP {
            out.push(started.elapsed());
        }
        drop(stream);
        // Stay under the per-key bound: wait until the server let go.
        while t.server.gw.streams.stats().open > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    out
}

fn main() -> Res<()> {
    if !support::bench_requested("transports") {
        return Ok(());
    }
    let iters: usize = env_num("BENCH_ITERS", 2000);
    let rt = support::runtime("bench", 2)?;
    rt.block_on(async {
        let dir = tempfile::tempdir()?;
        let server = server::start(dir.path().join("data"), |_| {}).await?;
        let made = tenant::create(&server.gw, &TENANT).await?;
        let t = Target {
            http: reqwest::Client::new(),
            mcp_url: cedargate::operator::mcp_url(&server.base(), &made.session.id),
            key: made.secret,
            server,
        };
        println!("tools/list round trips, {iters} per scenario, loopback, shipped policies");
        report(
            "streamable-json",
            streamable(&t, "application/json, text/event-stream", iters).await,
        );
        report(
            "streamable-sse",
            streamable(&t, "text/event-stream", iters).await,
        );
        report("http+sse", legacy(&t, iters).await);
        report("sse-open", open_close(&t, iters).await);
        match t.server.stop().await {
            Stopped::Cleanly => Ok(()),
            stopped => Err(format!("server stopped {stopped}").into()),
        }
    })
}
