//! `cargo bench --bench upstream`: what governing an upstream MCP server
//! costs, in one run, alternating in rounds.
//!
//! The upstream is an `rmcp` server (this binary as `SDK_BENCH_ROLE=rmcp`,
//! stateless, JSON answers) listing `BENCH_TOOLS` tools (100) and
//! answering every call with one short text. It is reached three ways:
//! - **direct**: the client talks to the upstream itself;
//! - **forwarder**: through a bare proxy (this binary as `forwarder`) that
//!   forwards each POST as it is: the least any gateway adds;
//! - **cedargate**: the release binary, with the upstream registered five
//!   times (prefixes `u0`…`u4`, so an org of 5 × 100 upstream tools), each
//!   call decided by Cedar, recorded durably, and forwarded.
//!
//! Each round measures, per way, `tools/call` at concurrency 1
//! (`BENCH_ITERS` calls, 2000) and at `BENCH_CONCURRENCY` (16) for
//! `BENCH_SECS` (6; 3-second windows moved a build's CPU per call by more
//! than a change under test): p50/p99 and the serving process's CPU per
//! call (for cedargate and the forwarder; the upstream's own CPU is the
//! same in both and not counted). Then cedargate's `tools/list` of the
//! 500 tools at concurrency 1, and the machine's fsync floor (a bare
//! SQLite WAL `INSERT` + `COMMIT`, `synchronous=FULL`).
//!
//! Printed: the medians over `BENCH_ROUNDS` (5) rounds, then the goals: the
//! p50 cedargate adds at c=1 over direct (≤ fsync floor + 150 µs), the
//! p50/p99 ratios at c=1 and c=16, cedargate's CPU per call against the
//! forwarder's (≤ 4×), and `tools/list` p99 with 500 upstream tools (≤ 2 ms).
//!
//! `BENCH_BASELINE_BIN=<another cedargate binary>` adds it as a fourth way,
//! `baseline` (registered the same way), measured in the same rounds; the
//! report then ends with cedargate / baseline for every figure.
//!
//! `BENCH_TRACES=1` adds the way `traced`: the same release binary with
//! trace export on at sampling 1.0 (`[telemetry]` defaults otherwise) to
//! an OTLP/HTTP collector of its own (this binary as `collector`, which
//! reads each export and keeps nothing; its CPU is not counted), measured
//! in the same rounds; the report then gives traced / cedargate for the
//! CPU per call (goal <= 1.15x) and the spans the traced gateway exported
//! and dropped (`/metrics`), so a figure bought by dropping shows.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark fails loudly"
)]

mod support;

#[path = "sdk/harness.rs"]
mod harness;
#[path = "sdk/servers.rs"]
mod servers;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Res, env_num};

use harness::{ADMIN_TOKEN, Figures, Target, rpc};

/// Registrations of the upstream (each a prefix of its own).
const REGISTRATIONS: usize = 5;

fn main() -> Res<()> {
    if let Ok(role) = std::env::var(servers::ROLE_VAR) {
        return servers::serve(&role);
    }
    if !support::bench_requested("upstream") {
        return Ok(());
    }
    let rounds: usize = env_num("BENCH_ROUNDS", 5);
    let dir = tempfile::tempdir()?;
    let rt = support::runtime("cli", 2)?;
    let results = dir.path().join("results.json");
    std::fs::write(
        &results,
        upstream_results(env_num("BENCH_TOOLS", 100)).to_string(),
    )?;
    let upstream = harness::start_role(
        "rmcp",
        &[(servers::RESULTS_VAR, results.display().to_string())],
    )?;
    rt.block_on(harness::wait_answering(
        &upstream,
        &rpc("tools/list", json!({})),
    ))?;
    let forwarder = harness::start_role("forwarder", &[(servers::UPSTREAM_VAR, upstream.url())])?;
    rt.block_on(harness::wait_answering(
        &forwarder,
        &rpc("tools/list", json!({})),
    ))?;
    let gateway = harness::start_cedargate(dir.path())?;
    rt.block_on(harness::wait_ready(gateway.addr))?;
    rt.block_on(register(&gateway, &upstream.url()))?;
    let baseline = harness::start_baseline(dir.path())?;
    let traced = match std::env::var("BENCH_TRACES").is_ok_and(|v| v == "1") {
        true => Some(start_traced(dir.path(), &upstream.url(), &rt)?),
        false => None,
    };
    let mut ways = vec![
        ("direct", &upstream, call_body("tool_000")),
        ("forwarder", &forwarder, call_body("tool_000")),
        ("cedargate", &gateway, call_body("u0.tool_000")),
    ];
    if let Some(b) = &baseline {
        rt.block_on(harness::wait_ready(b.addr))?;
        rt.block_on(register(b, &upstream.url()))?;
        ways.push(("baseline", b, call_body("u0.tool_000")));
    }
    if let Some((_, t)) = &traced {
        ways.push(("traced", t, call_body("u0.tool_000")));
    }
    let gateways: Vec<&Target> = std::iter::once(&gateway)
        .chain(&baseline)
        .chain(traced.as_ref().map(|(_, t)| t))
        .collect();
    let mut figures = Figures::default();
    for round in 0..rounds {
        for i in 0..ways.len() {
            let (name, target, body) = &ways[(i + round) % ways.len()];
            rt.block_on(measure(name, target, body, &mut figures))?;
        }
        for g in &gateways {
            let list = rt.block_on(harness::latency(g, &rpc("tools/list", json!({})), 500))?;
            figures.push(g.name, "tools/list (every tool) c=1 p50 µs", list.p50);
            figures.push(g.name, "tools/list (every tool) c=1 p99 µs", list.p99);
        }
        figures.push(
            "fsync floor",
            "p50",
            support::fsync::fsync_floor(dir.path(), 500)?,
        );
        eprintln!("round {} of {rounds} done", round + 1);
    }
    report(&figures, rounds);
    if let Some((_, t)) = &traced {
        rt.block_on(report_traced(&figures, t))?;
    }
    Ok(())
}

/// The collector and the traced gateway (ready, the upstream registered).
fn start_traced(
    dir: &std::path::Path,
    upstream: &str,
    rt: &tokio::runtime::Runtime,
) -> Res<(Target, Target)> {
    let collector = harness::start_role("collector", &[])?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(collector.addr).is_err() {
        if std::time::Instant::now() > deadline {
            return Err("the collector did not listen within 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let traced = harness::start_cedargate_traced(dir, &format!("http://{}", collector.addr))?;
    rt.block_on(harness::wait_ready(traced.addr))?;
    rt.block_on(register(&traced, upstream))?;
    Ok((collector, traced))
}

/// Export on against off, and what the traced gateway's exporter did.
async fn report_traced(f: &Figures, traced: &Target) -> Res<()> {
    let conc: usize = env_num("BENCH_CONCURRENCY", 16);
    for c in [1, conc] {
        let cpu = format!("tools/call c={c} CPU µs/call");
        println!(
            "CPU per proxied call at c={c}, traced / cedargate: {:.1} / {:.1} µs = {:.3}x (goal <= 1.15x)",
            f.median("traced", &cpu),
            f.median("cedargate", &cpu),
            f.median("traced", &cpu) / f.median("cedargate", &cpu)
        );
    }
    // The last batches leave within the export delay (5 s by default).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let metrics = reqwest::get(format!("http://{}/metrics", traced.addr))
        .await?
        .text()
        .await?;
    let counters: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("cedargate_trace_spans_"))
        .collect();
    println!("traced gateway's exporter: {}", counters.join("; "));
    Ok(())
}

/// The upstream's listing (`tools` tools) and its answer to every call.
fn upstream_results(tools: usize) -> Value {
    let tools: Vec<Value> = (0..tools)
        .map(|i| {
            json!({
                "name": format!("tool_{i:03}"),
                "description": format!("Tool number {i} of the bench upstream."),
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
                "annotations": {"readOnlyHint": true},
            })
        })
        .collect();
    json!({
        "list": {"tools": tools},
        "call": {"content": [{"type": "text", "text": "ok"}]},
    })
}

fn call_body(name: &str) -> Vec<u8> {
    rpc(
        "tools/call",
        json!({"name": name, "arguments": {"text": "hello"}}),
    )
}

/// Registers the upstream `REGISTRATIONS` times for the bench org.
async fn register(gateway: &Target, url: &str) -> Res<()> {
    let client = reqwest::Client::new();
    for i in 0..REGISTRATIONS {
        let resp = client
            .post(format!(
                "http://{}/admin/orgs/sdk/mcp-servers",
                gateway.addr
            ))
            .bearer_auth(ADMIN_TOKEN)
            .json(
                &json!({"name": format!("Bench upstream {i}"), "transport": "streamable-http",
                          "url": url, "prefix": format!("u{i}")}),
            )
            .send()
            .await?;
        let status = resp.status();
        let body = resp.text().await?;
        if !status.is_success() {
            return Err(format!("registering upstream {i}: {status}: {body}").into());
        }
    }
    Ok(())
}

/// One way's round: c=1 latency, then load at the configured concurrency.
async fn measure(name: &str, t: &Target, body: &[u8], figures: &mut Figures) -> Res<()> {
    let iters: usize = env_num("BENCH_ITERS", 2000);
    let conc: usize = env_num("BENCH_CONCURRENCY", 16);
    let window = Duration::from_secs(env_num("BENCH_SECS", 6));
    let cpu = t.cpu_ns();
    let one = harness::latency(t, body, iters).await?;
    // The warm-up's calls (a tenth) are in the window too.
    let calls = (iters + iters / 10) as f64;
    if name != "direct" {
        let per_call = t.cpu_ns().saturating_sub(cpu) as f64 / 1e3 / calls;
        figures.push(name, "tools/call c=1 CPU µs/call", per_call);
    }
    figures.push(name, "tools/call c=1 p50 µs", one.p50);
    figures.push(name, "tools/call c=1 p99 µs", one.p99);
    let (rps, cpu, many) = harness::throughput(t, body, conc, window).await?;
    figures.push(name, &format!("tools/call c={conc} p50 µs"), many.p50);
    figures.push(name, &format!("tools/call c={conc} p99 µs"), many.p99);
    figures.push(name, &format!("tools/call c={conc} req/s"), rps);
    if name != "direct" {
        figures.push(name, &format!("tools/call c={conc} CPU µs/call"), cpu);
    }
    Ok(())
}

/// The table, then the goals.
fn report(f: &Figures, rounds: usize) {
    let conc: usize = env_num("BENCH_CONCURRENCY", 16);
    println!(
        "upstream: medians of {rounds} alternating rounds ({})",
        support::procfs::cpu_model()
    );
    f.table(&["direct", "forwarder", "cedargate", "baseline", "traced"]);
    let fsync = f.median("fsync floor", "p50");
    println!("fsync floor (SQLite WAL commit, synchronous=FULL) p50: {fsync:.1} µs");
    let added = f.median("cedargate", "tools/call c=1 p50 µs")
        - f.median("direct", "tools/call c=1 p50 µs");
    println!(
        "cedargate adds {added:.1} µs p50 at c=1 over direct = fsync floor + {:.1} µs (goal <= floor + 150 µs)",
        added - fsync
    );
    // What the goal's budget must also hold: the hop itself. A bare
    // forwarder that then waited for one floor commit would add this much.
    let hop = f.median("forwarder", "tools/call c=1 p50 µs")
        - f.median("direct", "tools/call c=1 p50 µs");
    println!(
        "  the forwarder alone adds {hop:.1} µs: forwarding plus one floor commit adds floor + {hop:.1} µs; cedargate's own work adds {:.1} µs more",
        added - fsync - hop
    );
    for c in [1, conc] {
        for p in ["p50", "p99"] {
            let m = format!("tools/call c={c} {p} µs");
            println!(
                "  {m}: cedargate / direct {:.2}x, forwarder / direct {:.2}x",
                f.median("cedargate", &m) / f.median("direct", &m),
                f.median("forwarder", &m) / f.median("direct", &m)
            );
        }
    }
    let cpu = format!("tools/call c={conc} CPU µs/call");
    println!(
        "CPU per proxied call, cedargate / forwarder: {:.2}x (goal <= 4x)",
        f.median("cedargate", &cpu) / f.median("forwarder", &cpu)
    );
    println!(
        "tools/list with {} upstream tools: p99 {:.0} µs (goal <= 2000 µs)",
        REGISTRATIONS * env_num::<usize>("BENCH_TOOLS", 100),
        f.median("cedargate", "tools/list (every tool) c=1 p99 µs")
    );
    f.against_baseline("cedargate");
}
