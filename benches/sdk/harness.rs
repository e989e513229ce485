//! What `sdk` and `upstream` share: servers under test as child processes
//! (their CPU read from procfs, so it is theirs and not the load
//! generator's), cedargate's release binary on a provisioned data dir,
//! closed-loop load, the fsync floor, and medians over alternating rounds.

#![allow(dead_code, reason = "each bench binary uses a different part")]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::servers;
use super::support::http::RawConn;
use super::support::stats::{Rank, Stats};
use super::support::tenant::{self, TenantSpec};
use super::support::{Res, repo};

const READ_CHUNK: usize = 64 * 1024;

/// The protocol version every request names (every server speaks it).
pub const VERSION: &str = "2025-11-25";

/// The admin token of the cedargate under test.
pub const ADMIN_TOKEN: &str = "bench-admin-token-0123456789abcdef0123";

/// A server under test: its process and where it answers MCP.
pub struct Target {
    pub name: &'static str,
    child: Child,
    pub addr: SocketAddr,
    pub path: String,
    pub auth: Option<String>,
    /// cedargate only: a second session (its own org and project) for the
    /// workloads that write, so they never fill the memory the read
    /// workloads search ("an empty recall" stays empty in every round).
    pub writes: Option<(String, String)>,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Target {
    /// A keep-alive connection sending MCP requests to the target.
    pub async fn connect(&self) -> std::io::Result<RawConn> {
        self.connect_as(&self.path, self.auth.as_deref()).await
    }

    /// A keep-alive connection to the writing session (the main one when
    /// the target has none).
    pub async fn connect_writes(&self) -> std::io::Result<RawConn> {
        match &self.writes {
            Some((path, auth)) => self.connect_as(path, Some(auth)).await,
            None => self.connect().await,
        }
    }

    async fn connect_as(&self, path: &str, auth: Option<&str>) -> std::io::Result<RawConn> {
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", VERSION),
        ];
        if let Some(auth) = auth {
            headers.push(("authorization", auth));
        }
        RawConn::post(self.addr, path, &headers, READ_CHUNK).await
    }

    /// The URL of its MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.path)
    }

    /// On-CPU nanoseconds of every thread of the process so far.
    pub fn cpu_ns(&self) -> u64 {
        let dir = format!("/proc/{}/task", self.child.id());
        let Ok(tasks) = std::fs::read_dir(dir) else {
            return 0;
        };
        tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
            .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }
}

/// Provisions one tenant in `dir/data`, writes the config (rate limits
/// off: the load is one key at full speed) and starts `cedargate serve`.
pub fn start_cedargate(dir: &Path) -> Res<Target> {
    start_cedargate_binary(
        dir,
        "cedargate",
        Path::new(env!("CARGO_BIN_EXE_cedargate")),
        "",
    )
}

/// [`start_cedargate`] as `traced`, over a data directory of its own under
/// `dir`, exporting every trace (sampling 1.0, the other `[telemetry]`
/// keys at their defaults) to the OTLP/HTTP collector at `collector`.
pub fn start_cedargate_traced(dir: &Path, collector: &str) -> Res<Target> {
    let dir = dir.join("traced");
    std::fs::create_dir_all(&dir)?;
    start_cedargate_binary(
        &dir,
        "traced",
        Path::new(env!("CARGO_BIN_EXE_cedargate")),
        &format!("\n[telemetry]\nendpoint = \"{collector}\"\nsampling_ratio = 1.0\n"),
    )
}

/// The binary named by `BENCH_BASELINE_BIN` (another build of cedargate,
/// say the commit before a change), started as the target `baseline` over
/// a data directory of its own under `dir`, so a bench measures before and
/// after in the same rounds; `None` when the variable is unset.
pub fn start_baseline(dir: &Path) -> Res<Option<Target>> {
    let Ok(bin) = std::env::var("BENCH_BASELINE_BIN") else {
        return Ok(None);
    };
    let dir = dir.join("baseline");
    std::fs::create_dir_all(&dir)?;
    Ok(Some(start_cedargate_binary(
        &dir,
        "baseline",
        Path::new(&bin),
        "",
    )?))
}

/// `extra` is appended to the config file.
fn start_cedargate_binary(dir: &Path, name: &'static str, bin: &Path, extra: &str) -> Res<Target> {
    let data = dir.join("data");
    let store = cedargate::store::Store::open(&data.join("cedargate.db"), 1024, 64)?;
    let spec = TenantSpec {
        org: "sdk",
        org_name: "SDK bench org",
        project: "sdk-proj",
        agent: "sdk-agent",
        ..TenantSpec::BENCH
    };
    let p = tenant::create_blocking(&store, &spec)?;
    let writes = tenant::create_blocking(
        &store,
        &TenantSpec {
            org: "sdk-writes",
            org_name: "SDK bench org (writes)",
            project: "sdk-writes-proj",
            agent: "sdk-writes-agent",
            ..TenantSpec::BENCH
        },
    )?;
    drop(store);
    let addr = free_port()?;
    let config = dir.join("cedargate.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"{addr}\"\ndata_dir = {data:?}\npolicies_dir = {:?}\nschema_file = {:?}\ndemo_tenant = false\nadmin_token = \"{ADMIN_TOKEN}\"\n\n[rate_limits]\nenabled = false\n{extra}",
            repo().join("policies"),
            repo().join("schemas/gateway.cedarschema"),
        ),
    )?;
    let child = Command::new(bin)
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .env("CEDARGATE_LOG", "error")
        .env_remove("CEDARGATE_ADMIN_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    Ok(Target {
        name,
        child,
        addr,
        path: format!("/api/mcp/{}", p.session.id),
        auth: Some(format!("Bearer {}", p.secret)),
        writes: Some((
            format!("/api/mcp/{}", writes.session.id),
            format!("Bearer {}", writes.secret),
        )),
    })
}

/// Starts this binary as the server `role` with `env` added.
pub fn start_role(role: &'static str, env: &[(&str, String)]) -> Res<Target> {
    let addr = free_port()?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.env(servers::ROLE_VAR, role)
        .env(servers::ADDR_VAR, addr.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    Ok(Target {
        name: role,
        child: cmd.spawn()?,
        addr,
        path: servers::PATH.into(),
        auth: None,
        writes: None,
    })
}

fn free_port() -> Res<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?)
}

/// Waits until cedargate's `/readyz` answers 200.
pub async fn wait_ready(addr: SocketAddr) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(mut conn) = RawConn::get(addr, "/readyz", READ_CHUNK).await
            && let Ok((200, _)) = conn.send(None).await
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("cedargate did not become ready within 60 s".into())
}

/// Waits until `t` answers `body` with 200.
pub async fn wait_answering(t: &Target, body: &[u8]) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(mut conn) = t.connect().await
            && let Ok((200, _)) = conn.send(Some(body)).await
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("{} did not answer within 30 s", t.name).into())
}

/// A JSON-RPC request body.
pub fn rpc(method: &str, params: serde_json::Value) -> Vec<u8> {
    serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

/// `conc` connections send `body` back to back for `window`; returns the
/// answers per second, the server's CPU µs per answer and the latencies.
pub async fn throughput(
    t: &Target,
    body: &[u8],
    conc: usize,
    window: Duration,
) -> Res<(f64, f64, Stats)> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let body = Arc::new(body.to_vec());
    let mut conns = Vec::with_capacity(conc);
    for _ in 0..conc {
        conns.push(t.connect().await?);
    }
    let (cpu0, t0) = (t.cpu_ns(), Instant::now());
    let mut tasks = Vec::with_capacity(conc);
    for mut conn in conns {
        let (stop, done, body) = (stop.clone(), done.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let (status, answer) = conn.send(Some(&body)).await.map_err(|e| e.to_string())?;
                samples.push(sent.elapsed());
                if status != 200 {
                    return Err(format!(
                        "HTTP {status}: {}",
                        String::from_utf8_lossy(&answer)
                    ));
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<Vec<Duration>, String>(samples)
        }));
    }
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let (cpu1, elapsed) = (t.cpu_ns(), t0.elapsed());
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await?.map_err(|e| format!("{}: {e}", t.name))?);
    }
    let n = n.max(1) as f64;
    Ok((
        n / elapsed.as_secs_f64(),
        (cpu1 - cpu0) as f64 / 1e3 / n,
        Stats::of(samples, Rank::Nearest),
    ))
}

/// `iters` requests one after another on one connection (after a tenth as
/// many to warm up).
pub async fn latency(t: &Target, body: &[u8], iters: usize) -> Res<Stats> {
    latency_on(t, t.connect().await?, body, iters).await
}

/// [`latency`] on the target's writing session.
pub async fn latency_writes(t: &Target, body: &[u8], iters: usize) -> Res<Stats> {
    latency_on(t, t.connect_writes().await?, body, iters).await
}

async fn latency_on(t: &Target, mut conn: RawConn, body: &[u8], iters: usize) -> Res<Stats> {
    for _ in 0..iters / 10 {
        conn.send(Some(body)).await?;
    }
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        let (status, answer) = conn.send(Some(body)).await?;
        samples.push(t0.elapsed());
        if status != 200 {
            let answer = String::from_utf8_lossy(&answer);
            return Err(format!("{}: HTTP {status}: {answer}", t.name).into());
        }
    }
    Ok(Stats::of(samples, Rank::Nearest))
}

/// Every figure of every round, by server and measure.
#[derive(Default)]
pub struct Figures {
    by: BTreeMap<(String, String), Vec<f64>>,
}

impl Figures {
    pub fn push(&mut self, server: &str, measure: &str, value: f64) {
        self.by
            .entry((server.to_string(), measure.to_string()))
            .or_default()
            .push(value);
    }

    /// The median of a figure over the rounds (`NaN` when never measured).
    pub fn median(&self, server: &str, measure: &str) -> f64 {
        let Some(v) = self.by.get(&(server.into(), measure.into())) else {
            return f64::NAN;
        };
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    }

    /// `name` / `baseline` for every measure both have (medians), when a
    /// baseline binary was measured.
    pub fn against_baseline(&self, name: &str) {
        let mut measures: Vec<&String> = self
            .by
            .keys()
            .filter(|(s, _)| s == "baseline")
            .map(|(_, m)| m)
            .collect();
        measures.sort();
        measures.dedup();
        for m in measures {
            let ratio = self.median(name, m) / self.median("baseline", m);
            if ratio.is_finite() {
                println!("{name} / baseline, {m}: {ratio:.3}");
            }
        }
    }

    /// One row per measure, one column per server (medians).
    pub fn table(&self, servers: &[&str]) {
        print!("{:<36}", "measure");
        for s in servers {
            print!(" {s:>12}");
        }
        println!();
        let mut measures: Vec<&String> = self.by.keys().map(|(_, m)| m).collect();
        measures.sort();
        measures.dedup();
        for m in measures {
            print!("{m:<36}");
            for s in servers {
                let v = self.median(s, m);
                if v.is_nan() {
                    print!(" {:>12}", "-");
                } else {
                    print!(" {v:>12.1}");
                }
            }
            println!();
        }
    }
}
