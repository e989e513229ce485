//! Throughput of `af_memory_remember` (durable: answered after its commit)
//! and `tools/list` on one SQLite instance, one PostgreSQL instance and two
//! PostgreSQL instances sharing one database, under the same client load
//! (concurrent HTTP clients spread evenly over the instances).
//!
//! `cargo bench --bench backends`. Settings: `BENCH_SECS` (per run, default
//! 5), `BENCH_CONC` (clients, default 32), `BENCH_PG_URL` (default the
//! local server, database `test`; each run gets a fresh schema, dropped
//! afterwards).
//!
//! Without `--bench` (under `cargo test --all-targets`) it exits at once.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    reason = "a benchmark binary"
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::stats::{Rank, Stats};
use support::tenant::{self, TenantSpec};
use support::{Res, env_num, server};

/// The tenant every instance serves (made through the first one).
const TENANT: TenantSpec<'static> = TenantSpec {
    project: "p",
    agent: "a",
    agent_name: "A",
    key_label: "k",
    ..TenantSpec::BENCH
};

struct Outcome {
    rps: f64,
    lat: Stats,
    errors: usize,
}

/// `conc` clients for `secs`, client `i` on instance `i % urls.len()`.
async fn drive(
    urls: &[String],
    key: &str,
    body: fn(usize) -> Value,
    conc: usize,
    secs: u64,
) -> Outcome {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(conc)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..conc {
        let (http, url, key, stop) = (
            http.clone(),
            urls[i % urls.len()].clone(),
            key.to_string(),
            Arc::clone(&stop),
        );
        tasks.spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0;
            let mut n = i * 1_000_000;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let t0 = Instant::now();
                let r = http
                    .post(&url)
                    .bearer_auth(&key)
                    .header("accept", "application/json, text/event-stream")
                    .json(&body(n))
                    .send()
                    .await;
                let ok = match r {
                    Ok(r) if r.status() == 200 => r
                        .json::<Value>()
                        .await
                        .is_ok_and(|v| v.get("error").is_none()),
                    _ => false,
                };
                if ok {
                    lat.push(t0.elapsed());
                } else {
                    errors += 1;
                }
            }
            (lat, errors)
        });
    }
    // Warm-up second, then the measured window.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    // Latencies cover warm-up and window alike; so does the rate.
    let elapsed = started.elapsed() + Duration::from_secs(1);
    let mut all = Vec::new();
    let mut errors = 0;
    while let Some(done) = tasks.join_next().await {
        let (lat, e) = done.unwrap();
        all.extend(lat);
        errors += e;
    }
    Outcome {
        rps: all.len() as f64 / elapsed.as_secs_f64(),
        lat: Stats::of(all, Rank::Floor),
        errors,
    }
}

fn remember(n: usize) -> Value {
    json!({"jsonrpc":"2.0","id":n,"method":"tools/call","params":{"name":"af_memory_remember",
        "arguments":{"content": format!("benchmark note {n}: the deploy window is Tuesday")}}})
}

fn list(n: usize) -> Value {
    json!({"jsonrpc":"2.0","id":n,"method":"tools/list"})
}

fn fresh_schema(base: &str) -> Res<String> {
    let name = format!("bench_{}", cedargate::ids::random_hex(6)?);
    let (plain, sep) = match base.split_once('?') {
        Some((p, _)) => (p.to_string(), '&'),
        None => (base.to_string(), '?'),
    };
    let sql = format!("CREATE SCHEMA {name}");
    std::thread::spawn(move || -> Result<(), String> {
        let mut c =
            postgres::Client::connect(&plain, postgres::NoTls).map_err(|e| e.to_string())?;
        c.batch_execute(&sql).map_err(|e| e.to_string())
    })
    .join()
    .map_err(|_| "schema thread panicked")??;
    Ok(format!("{base}{sep}schema={name}"))
}

fn drop_schema(base: &str, url: &str) {
    let plain = base.split_once('?').map_or(base, |(p, _)| p).to_string();
    let Some(name) = url.rsplit("schema=").next().map(str::to_string) else {
        return;
    };
    let _ = std::thread::spawn(move || {
        if let Ok(mut c) = postgres::Client::connect(&plain, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"));
        }
    })
    .join();
}

fn main() -> Res<()> {
    if !support::bench_requested("backends") {
        return Ok(());
    }
    let secs: u64 = env_num("BENCH_SECS", 5);
    let conc: usize = env_num("BENCH_CONC", 32);
    let pg = std::env::var("BENCH_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let rt = support::runtime("bench", support::cores())?;
    rt.block_on(async {
        println!("cedargate backends: {conc} clients, {secs} s per run (+1 s warm-up)\n");
        println!(
            "{:<28} {:<20} {:>10} {:>10} {:>10} {:>7}",
            "setup", "operation", "req/s", "p50", "p99", "errors"
        );
        for (label, instances) in [
            ("SQLite, 1 instance", 0usize),
            ("PostgreSQL, 1 instance", 1),
            ("PostgreSQL, 2 instances", 2),
        ] {
            let dir = tempfile::tempdir()?;
            let (urls, schema) = if instances == 0 {
                (
                    vec![format!(
                        "sqlite://{}",
                        dir.path().join("db/cedargate.db").display()
                    )],
                    None,
                )
            } else {
                let url = fresh_schema(&pg)?;
                (vec![url.clone(); instances], Some(url))
            };
            let mut running = Vec::new();
            for (i, url) in urls.iter().enumerate() {
                let data = dir.path().join(format!("data{i}"));
                running.push(
                    server::start(data, |c| {
                        c.database.url = Some(url.clone());
                        c.lifecycle.watch = false;
                    })
                    .await?,
                );
            }
            let made = tenant::create(&running[0].gw, &TENANT).await?;
            let (session, key) = (made.session.id, made.secret);
            let endpoints: Vec<String> = running
                .iter()
                .map(|r| format!("{}/api/mcp/{session}", r.base()))
                .collect();
            for (op, body) in [
                ("af_memory_remember", remember as fn(usize) -> Value),
                ("tools/list", list),
            ] {
                let o = drive(&endpoints, &key, body, conc, secs).await;
                println!(
                    "{:<28} {:<20} {:>10.0} {:>8.2}ms {:>8.2}ms {:>7}",
                    label,
                    op,
                    o.rps,
                    o.lat.p50 / 1e3,
                    o.lat.p99 / 1e3,
                    o.errors
                );
            }
            for r in running {
                r.stop().await;
            }
            if let Some(url) = schema {
                drop_schema(&pg, &url);
            }
        }
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    })?;
    Ok(())
}
