//! `cargo bench --bench abuse`: one org floods, another org trickles, and
//! the trickle's latency is compared with its idle baseline while the
//! gateway's memory is watched.
//!
//! The gateway is the release binary itself (`cedargate serve`, a child
//! process on its defaults: SQLite, shipped policies, default limits), so
//! its resident memory is its own and not the load generator's. Two orgs
//! are provisioned in its database before it starts:
//! - `flood` (memory and graph on): `BENCH_FLOOD_CONNS` connections
//!   (default 32) each send batches of `BENCH_BATCH` `tools/list` requests
//!   (default 64) back to back, ignoring `Retry-After`, as an attacker would;
//! - `steady`: one connection sends an `af_memory_remember` call every
//!   `BENCH_TRICKLE_MS` ms (default 10), a durable write each.
//!
//! Phases: a warm-up, the trickle alone for `BENCH_IDLE_SECS` (default 10),
//! then the trickle under the flood for `BENCH_SECS` (default 30). Printed:
//! the trickle's p50/p99 idle and under flood and their ratio, the flood's
//! answers by HTTP status and the messages they carried, the gateway's peak
//! RSS (`VmHWM`) and its RSS sampled during the flood, and the database and
//! WAL sizes afterwards.
//!
//! The load generator shares the machine's cores with the gateway (on a
//! 2-core machine it takes a good part of one), so the ratio is an upper
//! bound of what the gateway alone would show.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark fails loudly"
)]

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use support::http::RawConn;
use support::stats::{Rank, Stats};
use support::tenant::{self, TenantSpec};
use support::{Res, env_num, repo};

const READ_CHUNK: usize = 64 * 1024;

const FLOOD: TenantSpec<'static> = TenantSpec {
    org: "flood",
    org_name: "Flooding org",
    project: "flood-proj",
    graph: true,
    agent: "flood-agent",
    ..TenantSpec::BENCH
};

const STEADY: TenantSpec<'static> = TenantSpec {
    org: "steady",
    org_name: "Steady org",
    project: "steady-proj",
    agent: "steady-agent",
    ..TenantSpec::BENCH
};

/// A tenant's way in: the session's path and its bearer header.
#[derive(Clone)]
struct Door {
    addr: SocketAddr,
    path: String,
    auth: String,
}

impl Door {
    async fn connect(&self) -> std::io::Result<RawConn> {
        let headers = [
            ("authorization", self.auth.as_str()),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", cedargate::mcp::protocol::LATEST),
        ];
        RawConn::post(self.addr, &self.path, &headers, READ_CHUNK).await
    }
}

/// The gateway child process; killed when dropped.
struct Gateway {
    child: Child,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gateway {
    /// Stops it with SIGTERM, as an operator would, so the database files
    /// are measured after a clean shutdown; kills it after 60 s. Returns how
    /// long it took and how it ended.
    fn stop(mut self) -> (Duration, String) {
        let asked = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        while asked.elapsed() < Duration::from_secs(60) {
            if let Ok(Some(status)) = self.child.try_wait() {
                return (asked.elapsed(), status.to_string());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (
            asked.elapsed(),
            "still running 60 s after SIGTERM; killed".into(),
        )
    }

    /// `VmRSS` and `VmHWM` of the process, in KiB.
    fn memory_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

fn main() -> Res<()> {
    if !support::bench_requested("abuse") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let (flood, steady, config) = prepare(dir.path(), &data)?;
    let gateway = start(&config)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(wait_ready(flood.addr))?;
    let report = rt.block_on(run(&gateway, flood, steady))?;
    let stopped = gateway.stop();
    report.print(&data);
    println!(
        "  SIGTERM after the flood: stopped in {:.2} s ({})",
        stopped.0.as_secs_f64(),
        stopped.1
    );
    Ok(())
}

/// Provisions both orgs and writes the config; returns their doors.
fn prepare(dir: &Path, data: &Path) -> Res<(Door, Door, PathBuf)> {
    let store = cedargate::store::Store::open(&data.join("cedargate.db"), 1024, 64)?;
    let addr = free_port()?;
    let door = |spec: &TenantSpec<'_>| -> Res<Door> {
        let p = tenant::create_blocking(&store, spec)?;
        Ok(Door {
            addr,
            path: format!("/api/mcp/{}", p.session.id),
            auth: format!("Bearer {}", p.secret),
        })
    };
    let (flood, steady) = (door(&FLOOD)?, door(&STEADY)?);
    drop(store);
    let config = dir.join("cedargate.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"{addr}\"\ndata_dir = {data:?}\npolicies_dir = {:?}\nschema_file = {:?}\ndemo_tenant = false\n",
            repo().join("policies"),
            repo().join("schemas/gateway.cedarschema"),
        ),
    )?;
    Ok((flood, steady, config))
}

fn free_port() -> Res<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?)
}

fn start(config: &Path) -> Res<Gateway> {
    let child = Command::new(env!("CARGO_BIN_EXE_cedargate"))
        .arg("--config")
        .arg(config)
        .arg("serve")
        .env("CEDARGATE_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    Ok(Gateway { child })
}

async fn wait_ready(addr: SocketAddr) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(mut conn) = RawConn::get(addr, "/readyz", READ_CHUNK).await
            && let Ok((200, _)) = conn.send(None).await
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the gateway did not become ready within 60 s".into())
}

/// What the flood's answers were.
#[derive(Default)]
struct FloodCount {
    ok: AtomicU64,
    limited: AtomicU64,
    other: AtomicU64,
    reconnects: AtomicU64,
}

struct Report {
    idle: Stats,
    flooded: Stats,
    trickle_errors: u64,
    flood: FloodCount,
    batch: usize,
    secs: f64,
    rss_samples_kib: Vec<u64>,
    peak_kib: u64,
}

async fn run(gateway: &Gateway, flood: Door, steady: Door) -> Res<Report> {
    let every = Duration::from_millis(env_num("BENCH_TRICKLE_MS", 10));
    let idle_for = Duration::from_secs(env_num("BENCH_IDLE_SECS", 10));
    let flood_for = Duration::from_secs(env_num("BENCH_SECS", 30));
    let conns: usize = env_num("BENCH_FLOOD_CONNS", 32);
    let batch: usize = env_num("BENCH_BATCH", 64);

    trickle(&steady, every, Duration::from_secs(2)).await?;
    let (idle, _) = trickle(&steady, every, idle_for).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(FloodCount::default());
    let body = Arc::new(batch_body(batch));
    let mut flooders = Vec::new();
    for _ in 0..conns {
        let (door, stop, count, body) = (flood.clone(), stop.clone(), count.clone(), body.clone());
        flooders.push(tokio::spawn(flood_one(door, stop, count, body)));
    }
    let started = Instant::now();
    let sampler = sample_rss(gateway, flood_for);
    let (trickled, sampled) = tokio::join!(trickle(&steady, every, flood_for), sampler);
    let secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        let _ = f.await;
    }
    let (flooded, trickle_errors) = trickled?;
    let (_, peak_kib) = gateway.memory_kib();
    Ok(Report {
        idle,
        flooded,
        trickle_errors,
        flood: Arc::try_unwrap(count).unwrap_or_default(),
        batch,
        secs,
        rss_samples_kib: sampled,
        peak_kib,
    })
}

fn batch_body(n: usize) -> Vec<u8> {
    let batch: Vec<_> = (0..n)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "tools/list"}))
        .collect();
    serde_json::to_vec(&batch).unwrap_or_default()
}

/// Sends `af_memory_remember` every `every` for `how_long`; returns the
/// latencies of the calls that succeeded and how many did not.
async fn trickle(door: &Door, every: Duration, how_long: Duration) -> Res<(Stats, u64)> {
    let mut conn = door.connect().await?;
    let mut lat = Vec::new();
    let mut errors = 0u64;
    let end = Instant::now() + how_long;
    let mut tick = tokio::time::interval(every);
    let mut i = 0u64;
    while Instant::now() < end {
        tick.tick().await;
        i += 1;
        let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
            "name": "af_memory_remember",
            "arguments": {"content": format!("steady note {i}"), "type": "constraint", "confidence": 0.9}
        }});
        let body = serde_json::to_vec(&body)?;
        let sent = Instant::now();
        match conn.send(Some(&body)).await {
            Ok((200, answer)) if answer.windows(8).any(|w| w == b"\"result\"") => {
                lat.push(sent.elapsed())
            }
            Ok(_) => errors += 1,
            Err(_) => {
                errors += 1;
                conn = door.connect().await?;
            }
        }
    }
    Ok((Stats::of(lat, Rank::Nearest), errors))
}

/// One flooding connection: batches back to back until `stop`.
async fn flood_one(door: Door, stop: Arc<AtomicBool>, count: Arc<FloodCount>, body: Arc<Vec<u8>>) {
    let mut conn = None;
    while !stop.load(Ordering::Relaxed) {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match door.connect().await {
                Ok(c) => conn.insert(c),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            },
        };
        match c.send(Some(&body)).await {
            Ok((200, _)) => count.ok.fetch_add(1, Ordering::Relaxed),
            Ok((429, _)) => count.limited.fetch_add(1, Ordering::Relaxed),
            Ok(_) => count.other.fetch_add(1, Ordering::Relaxed),
            Err(_) => {
                conn = None;
                count.reconnects.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

/// The gateway's `VmRSS` every 250 ms for `how_long`.
async fn sample_rss(gateway: &Gateway, how_long: Duration) -> Vec<u64> {
    let mut samples = Vec::new();
    let end = Instant::now() + how_long;
    while Instant::now() < end {
        samples.push(gateway.memory_kib().0);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    samples
}

impl Report {
    fn print(&self, data: &Path) {
        let ms = |us: f64| us / 1000.0;
        println!(
            "abuse bench: trickle of af_memory_remember (org steady) against a tools/list flood (org flood)"
        );
        println!(
            "  machine: {} cores, {}, load {}",
            support::cores(),
            support::procfs::cpu_model(),
            support::procfs::loadavg()
        );
        println!("  phase           n     p50 ms   p99 ms");
        for (name, s) in [("idle", &self.idle), ("under flood", &self.flooded)] {
            println!(
                "  {name:<12} {:>6} {:>9.2} {:>8.2}",
                s.n,
                ms(s.p50),
                ms(s.p99)
            );
        }
        println!(
            "  p99 ratio (flood / idle): {:.2}   p50 ratio: {:.2}   trickle failures under flood: {}",
            self.flooded.p99 / self.idle.p99,
            self.flooded.p50 / self.idle.p50,
            self.trickle_errors
        );
        let answers = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (ok, limited) = (answers(&self.flood.ok), answers(&self.flood.limited));
        println!(
            "  flood over {:.1} s: {ok} batches answered 200 ({:.0} tools/list per s), {limited} answered 429, {} other, {} reconnects",
            self.secs,
            (ok as f64 * self.batch as f64) / self.secs,
            answers(&self.flood.other),
            answers(&self.flood.reconnects),
        );
        let max_sample = self.rss_samples_kib.iter().copied().max().unwrap_or(0);
        let last = self.rss_samples_kib.last().copied().unwrap_or(0);
        println!(
            "  gateway RSS: peak (VmHWM) {:.1} MiB, highest sample {:.1} MiB, last sample {:.1} MiB",
            self.peak_kib as f64 / 1024.0,
            max_sample as f64 / 1024.0,
            last as f64 / 1024.0
        );
        let size = |name: &str| std::fs::metadata(data.join(name)).map_or(0, |m| m.len());
        println!(
            "  database after the run: cedargate.db {:.1} MiB, WAL {:.1} MiB",
            size("cedargate.db") as f64 / 1048576.0,
            size("cedargate.db-wal") as f64 / 1048576.0
        );
    }
}
