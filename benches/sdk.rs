//! `cargo bench --bench sdk`: cedargate side by side with a server built
//! on the official Rust SDK (`rmcp`) and a bare JSON-RPC floor, in one run,
//! alternating in rounds, with the ratios the governance goals are stated
//! in.
//!
//! Three processes serve the same two tools (`af_memory_recall` and
//! `af_memory_remember`, the gateway's own names, descriptions and input
//! schemas):
//! - **cedargate**: the release binary (`cedargate serve`) over a fresh
//!   SQLite data directory with the shipped policies, rate limits off (the
//!   load is one key at full speed);
//! - **rmcp**: this binary again (`SDK_BENCH_ROLE=rmcp`), an `rmcp`
//!   `StreamableHttpService` in stateless mode with JSON answers, whose
//!   handler lists the same tools and answers a call with the bytes the
//!   gateway answered an empty recall with;
//! - **floor**: this binary again (`SDK_BENCH_ROLE=floor`), a bare axum
//!   route that parses the JSON-RPC request and answers the same results:
//!   what HTTP and JSON cost on this machine.
//!
//! Each server runs a tokio runtime with 2 workers. Each round runs every
//! workload against every server, in an order that rotates per round:
//! `tools/list` and `tools/call` (`af_memory_recall`, empty memory) at
//! concurrency `BENCH_CONCURRENCY` (32) for `BENCH_SECS` (3) each, then the
//! same call at concurrency 1 (`BENCH_ITERS` requests, 2000). The server's
//! CPU is read from `/proc/<pid>/task/*/schedstat` around each window
//! (ns, every thread of the process), so CPU per request is the server's
//! own, not the load generator's. cedargate alone also runs the durable
//! `af_memory_remember` at concurrency 1, in a session of another org and
//! project (so the recall's memory stays empty in every round; an earlier
//! version wrote into it and measured a recall over thousands of matches
//! from the second round on), and every round measures the
//! machine's fsync floor: a bare SQLite WAL `INSERT` + `COMMIT` with
//! `synchronous=FULL` in the same directory.
//!
//! Printed: per workload and server the median over `BENCH_ROUNDS` (5)
//! rounds of req/s, CPU µs per request and c=1 p50/p99, then the ratios
//! against rmcp and the c=1 durable-call margin over the fsync floor,
//! each next to its goal.
//!
//! `BENCH_BASELINE_BIN=<another cedargate binary>` adds it as a fourth
//! server, `baseline`, measured in the same rounds (before and after a
//! change in one run); the report then ends with cedargate / baseline for
//! every figure.

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
use support::env_num;

use harness::{Figures, Target, rpc};

/// The request bodies of the workloads.
struct Bodies {
    list: Vec<u8>,
    recall: Vec<u8>,
    remember: Vec<u8>,
}

fn bodies() -> Bodies {
    Bodies {
        list: rpc("tools/list", json!({})),
        recall: rpc(
            "tools/call",
            json!({"name": "af_memory_recall", "arguments": {"query": "how do we deploy on fridays", "workType": "feature"}}),
        ),
        remember: rpc(
            "tools/call",
            json!({"name": "af_memory_remember", "arguments": {"content": "we deploy on Tuesdays", "type": "constraint", "confidence": 0.9}}),
        ),
    }
}

fn main() -> support::Res<()> {
    if let Ok(role) = std::env::var(servers::ROLE_VAR) {
        return servers::serve(&role);
    }
    if !support::bench_requested("sdk") {
        return Ok(());
    }
    let rounds: usize = env_num("BENCH_ROUNDS", 5);
    let dir = tempfile::tempdir()?;
    let rt = support::runtime("cli", 2)?;
    let gateway = harness::start_cedargate(dir.path())?;
    rt.block_on(harness::wait_ready(gateway.addr))?;
    let (list, call) = rt.block_on(answers(&gateway))?;
    let results = dir.path().join("results.json");
    std::fs::write(&results, json!({"list": list, "call": call}).to_string())?;
    let env = [(servers::RESULTS_VAR, results.display().to_string())];
    let rmcp = harness::start_role("rmcp", &env)?;
    let floor = harness::start_role("floor", &env)?;
    let bodies = bodies();
    rt.block_on(harness::wait_answering(&rmcp, &bodies.list))?;
    rt.block_on(harness::wait_answering(&floor, &bodies.list))?;
    let baseline = harness::start_baseline(dir.path())?;
    if let Some(b) = &baseline {
        rt.block_on(harness::wait_ready(b.addr))?;
    }
    let mut targets = vec![gateway, rmcp, floor];
    targets.extend(baseline);
    let mut figures = Figures::default();
    for round in 0..rounds {
        for i in 0..targets.len() {
            let t = &targets[(i + round) % targets.len()];
            rt.block_on(measure_round(t, &bodies, &mut figures))?;
        }
        figures.push(
            "fsync floor",
            "p50",
            support::fsync::fsync_floor(dir.path(), 500)?,
        );
        eprintln!("round {} of {rounds} done", round + 1);
    }
    report(&figures, rounds);
    Ok(())
}

/// cedargate's `tools/list` result (the two memory tools) and its answer
/// to an empty recall, which the other servers answer with.
async fn answers(gateway: &Target) -> support::Res<(Value, Value)> {
    let b = bodies();
    let mut conn = gateway.connect().await?;
    let (status, list) = conn.send(Some(&b.list)).await?;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&list));
    let mut list: Value = serde_json::from_slice(&list)?;
    let (status, call) = conn.send(Some(&b.recall)).await?;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&call));
    let call: Value = serde_json::from_slice(&call)?;
    let tools = list["result"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["af_memory_recall", "af_memory_remember"], "{list}");
    Ok((list["result"].take(), call["result"].clone()))
}

/// One round of every workload against `t`.
async fn measure_round(t: &Target, b: &Bodies, figures: &mut Figures) -> support::Res<()> {
    let secs: u64 = env_num("BENCH_SECS", 3);
    let conc: usize = env_num("BENCH_CONCURRENCY", 32);
    let iters: usize = env_num("BENCH_ITERS", 2000);
    let window = Duration::from_secs(secs);
    for (workload, body) in [("tools/list", &b.list), ("tools/call", &b.recall)] {
        let (rps, cpu_us, _) = harness::throughput(t, body, conc, window).await?;
        figures.push(t.name, &format!("{workload} c={conc} req/s"), rps);
        figures.push(t.name, &format!("{workload} c={conc} CPU µs/req"), cpu_us);
    }
    let s = harness::latency(t, &b.recall, iters).await?;
    figures.push(t.name, "tools/call c=1 p50 µs", s.p50);
    figures.push(t.name, "tools/call c=1 p99 µs", s.p99);
    if t.writes.is_some() {
        let s = harness::latency_writes(t, &b.remember, iters / 4).await?;
        figures.push(t.name, "durable call c=1 p50 µs", s.p50);
    }
    Ok(())
}

/// The table, then the ratios against the goals.
fn report(figures: &Figures, rounds: usize) {
    let conc: usize = env_num("BENCH_CONCURRENCY", 32);
    println!(
        "sdk: medians of {rounds} alternating rounds ({})",
        support::procfs::cpu_model()
    );
    figures.table(&["cedargate", "rmcp", "floor", "baseline"]);
    let fsync = figures.median("fsync floor", "p50");
    println!("fsync floor (SQLite WAL commit, synchronous=FULL) p50: {fsync:.1} µs");
    let ratio = |m: &str| {
        let m = format!("{m} c={conc} CPU µs/req");
        figures.median("cedargate", &m) / figures.median("rmcp", &m)
    };
    println!(
        "CPU per request, cedargate / rmcp: tools/list {:.2}x (goal <= 1.1x), tools/call {:.2}x (goal <= 3x)",
        ratio("tools/list"),
        ratio("tools/call")
    );
    let durable = figures.median("cedargate", "durable call c=1 p50 µs");
    println!(
        "durable tools/call c=1 p50 {durable:.1} µs = fsync floor + {:.1} µs (goal <= floor + 150 µs)",
        durable - fsync
    );
    figures.against_baseline("cedargate");
}
