//! `cargo bench --bench identity`: what a person's access token costs the
//! gateway next to a daemon key.
//!
//! A real OpenID provider (`tests/oidc/provider.mjs`; run
//! `bash tests/oidc/setup.sh` once) issues ES256 RFC 9068 tokens for the
//! bench org's project URL; the gateway runs in-process with that issuer.
//! Two doors into one org: the daemon key at its session's URL, and a
//! token at `/mcp/bench/bench-proj` (the person's session, opened once
//! before measuring). Each round sends `BENCH_ITERS` requests (default
//! 2000) through each door on one keep-alive connection, alternating the
//! doors, for `ping` and for `tools/call af_memory_recall` (an empty
//! memory). Printed: the server's CPU per request (every thread but the
//! load generator's, from `/proc/self/task/*/schedstat`) for each door, and
//! their ratio (medians over `BENCH_ROUNDS`, default 5); then the latency
//! of a token's first request (its signature checked) against its second
//! (served from the validated-token cache), each the first request of a
//! fresh connection, over `BENCH_TOKENS` fresh tokens (default 200), as
//! p50s and their difference.
//!
//! `BENCH_ONLY=key` (or `token`) sends only that door's `tools/call`,
//! `BENCH_ITERS` times, and prints its CPU: run under a profiler (`perf
//! record`, `valgrind --tool=callgrind`) to see where one door's cost goes.
//! `BENCH_ONLY=first` sends only the first `ping` of `BENCH_TOKENS` fresh
//! tokens, each on a fresh connection (a token's first use, for a profiler).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark fails loudly"
)]

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cedargate::identity::IssuerConfig;
use serde_json::Value;
use support::http::RawConn;
use support::procfs::{Clock, Threads, runtime_roles};
use support::stats::{Rank, Stats};
use support::tenant::{self, TenantSpec};
use support::{Res, env_num, repo};

const READ_CHUNK: usize = 64 * 1024;
const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
const RECALL: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"af_memory_recall","arguments":{"query":"x","workType":"feature"}}}"#;
const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;

/// The provider process; killed on drop.
struct Provider {
    child: Child,
    issuer: String,
    _dir: tempfile::TempDir,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Provider {
    fn start() -> Res<Provider> {
        let dir = tempfile::tempdir()?;
        let info = dir.path().join("info.json");
        let child = Command::new("node")
            .arg(repo().join("tests/oidc/provider.mjs"))
            .arg(&info)
            .current_dir(repo().join("tests/oidc"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        for _ in 0..500 {
            if let Ok(text) = std::fs::read_to_string(&info) {
                let v: Value = serde_json::from_str(&text)?;
                let issuer = v["issuer"].as_str().unwrap().to_string();
                return Ok(Provider {
                    child,
                    issuer,
                    _dir: dir,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err("the provider did not start: run `bash tests/oidc/setup.sh`".into())
    }

    /// A client-credentials token for `resource`.
    async fn token(&self, http: &reqwest::Client, resource: &str) -> Res<String> {
        let resp = http
            .post(format!("{}/token", self.issuer))
            .basic_auth("cg-service", Some("cg-service-secret"))
            .form(&[
                ("grant_type", "client_credentials"),
                ("scope", "mcp:tools"),
                ("resource", resource),
            ])
            .send()
            .await?;
        let body: Value = resp.json().await?;
        Ok(body["access_token"]
            .as_str()
            .ok_or("no access_token")?
            .to_string())
    }
}

/// A keep-alive connection through one door.
async fn door(addr: SocketAddr, path: &str, bearer: &str) -> Res<RawConn> {
    let auth = format!("Bearer {bearer}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    Ok(RawConn::post(addr, path, &headers, READ_CHUNK).await?)
}

/// Server CPU ns (every thread but the client's) and wall time of `n`
/// requests of `body` on `conn`.
async fn measure(conn: &mut RawConn, body: &str, n: usize) -> Res<u64> {
    let threads = Threads {
        clock: Clock::Schedstat,
        group: runtime_roles,
    };
    let mark = threads.mark();
    for _ in 0..n {
        let (status, answer) = conn.send(Some(body.as_bytes())).await?;
        if status != 200 {
            return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&answer)).into());
        }
    }
    let window = mark.since();
    let client = window.groups.get("client").copied().unwrap_or(0);
    Ok(window.ours().saturating_sub(client))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Res<()> {
    if !support::bench_requested("identity") {
        return Ok(());
    }
    let (iters, rounds, fresh) = (
        env_num("BENCH_ITERS", 2000usize),
        env_num("BENCH_ROUNDS", 5usize),
        env_num("BENCH_TOKENS", 200usize),
    );
    let provider = Provider::start()?;
    let srv = support::runtime("srv", support::cores().saturating_sub(1).max(1))?;
    let cli = support::runtime("cli", 1)?;
    let dir = tempfile::tempdir()?;
    let issuer = IssuerConfig {
        issuer: provider.issuer.clone(),
        org: Some("bench".into()),
        require_at_jwt: true,
        algorithms: vec!["ES256".into()],
        ..IssuerConfig::default()
    };
    let server = srv.block_on(support::server::start(dir.path().join("data"), |c| {
        c.auth.issuers = vec![issuer];
        c.rate_limits.enabled = false;
        // A door waits while the other runs its round: on a slow or busy
        // machine that outlasts the default 5 s idle and header timeouts.
        c.http.idle_timeout_ms = 600_000;
        c.http.header_read_timeout_ms = 600_000;
    }))?;
    let made = srv.block_on(tenant::create(&server.gw, &TenantSpec::BENCH))?;
    let addr = server.addr;
    let key_path = format!("/api/mcp/{}", made.session.id);
    let person_path = "/mcp/bench/bench-proj".to_string();
    let resource = format!("http://{addr}{person_path}");

    cli.block_on(async {
        let http = reqwest::Client::new();
        let token = provider.token(&http, &resource).await?;
        let mut key = door(addr, &key_path, &made.secret).await?;
        let mut person = door(addr, &person_path, &token).await?;
        key.send(Some(INIT.as_bytes())).await?;
        person.send(Some(INIT.as_bytes())).await?;
        println!("identity bench: {iters} requests per door and round, {rounds} rounds");
        println!("| request | key: server CPU µs | token: server CPU µs | token / key |");
        println!("|---|---|---|---|");
        if std::env::var("BENCH_ONLY").is_ok_and(|d| d == "first") {
            // Fresh tokens' first requests alone, for a profiler.
            for _ in 0..fresh {
                let token = provider.token(&http, &resource).await?;
                let mut conn = door(addr, &person_path, &token).await?;
                conn.send(Some(PING.as_bytes())).await?;
            }
            println!("first: {fresh} fresh tokens' first ping");
            return Ok(());
        }
        if let Ok(door) = std::env::var("BENCH_ONLY") {
            // One door's `tools/call` alone, for a profiler.
            let conn = if door == "key" { &mut key } else { &mut person };
            let cpu = measure(conn, RECALL, iters).await?;
            println!(
                "{door}: tools/call server CPU {:.1} µs",
                cpu as f64 / 1e3 / iters as f64
            );
            return Ok(());
        }
        for (name, body) in [("ping", PING), ("tools/call af_memory_recall", RECALL)] {
            let (mut k, mut t) = (Vec::new(), Vec::new());
            measure(&mut key, body, iters / 10).await?;
            measure(&mut person, body, iters / 10).await?;
            for _ in 0..rounds {
                k.push(measure(&mut key, body, iters).await? as f64 / 1e3 / iters as f64);
                t.push(measure(&mut person, body, iters).await? as f64 / 1e3 / iters as f64);
            }
            let (k, t) = (median(k), median(t));
            println!("| {name} | {k:.1} | {t:.1} | {:.3} |", t / k);
        }
        let (mut first, mut second) = (Vec::new(), Vec::new());
        for _ in 0..fresh {
            // Each on a fresh connection, so both pay what a connection's
            // first request costs and the difference is the token's.
            let token = provider.token(&http, &resource).await?;
            for times in [&mut first, &mut second] {
                let mut conn = door(addr, &person_path, &token).await?;
                let at = Instant::now();
                conn.send(Some(PING.as_bytes())).await?;
                times.push(at.elapsed());
            }
        }
        let (first, second) = (
            Stats::of(first, Rank::Nearest),
            Stats::of(second, Rank::Nearest),
        );
        println!(
            "ping with a token: first use (signature checked) p50 {:.0} µs, second use (cached) \
             p50 {:.0} µs: +{:.0} µs ({fresh} tokens)",
            first.p50,
            second.p50,
            first.p50 - second.p50
        );
        Ok::<(), support::Error>(())
    })?;
    drop(server);
    Ok(())
}
