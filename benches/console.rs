//! The web console's trail queries at scale: a filtered, keyset-paged page
//! of 50 (the console's table) and the overview's aggregates, over a trail
//! of `BENCH_RECORDS` records (default 1,000,000) on SQLite and on
//! PostgreSQL (`BENCH_PG_URL`, default the local server's `test`). Prints
//! the median and worst of `BENCH_RUNS` runs per query; the goal is a
//! filtered page under 50 ms. Then what the `(resource, decision, seq)`
//! index costs each decision insert: batches appended with and without it
//! in alternating rounds (`BENCH_INSERT_ROUNDS`, default 5). Figures in
//! `benches/README.md`.
//!
//! `cargo bench --bench console`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a bench fails loudly"
)]

mod support;

use std::time::Instant;

use cedargate::store::audit_query::{self, DecisionFilter, Order};
use cedargate::store::decisions::{self, GENESIS_HASH, NewDecision};
use cedargate::store::trail_stats::{self, Ranked};
use cedargate::store::{Backend, Store, StoreOptions};
use support::{Res, env_num};
use time::OffsetDateTime;

const ORGS: usize = 20;
const AGENTS: usize = 1000;
const TOOLS: usize = 50;
const PAGE: usize = 51;

/// The `i`th synthetic record, `span` seconds of trail ending now.
fn record(i: usize, n: usize, start: OffsetDateTime, span: f64) -> NewDecision {
    let t = start + time::Duration::seconds_f64(span * i as f64 / n as f64);
    let org = i % ORGS;
    let (action, resource) = match i % 10 {
        0 => (
            "access_session",
            format!("Gateway::Session::\"s-{}\"", i % 5000),
        ),
        1..=3 => (
            "view_tool",
            format!("Gateway::Tool::\"tool_{}\"", i % TOOLS),
        ),
        _ => (
            "call_tool",
            format!("Gateway::Tool::\"tool_{}\"", (i * 7) % TOOLS),
        ),
    };
    let deny = i % 20 == 7;
    NewDecision {
        id: uuid::Uuid::now_v7().to_string(),
        time: cedargate::ids::rfc3339(t),
        org_id: Some(format!("org-{org}")),
        session_id: Some(format!("s-{}", i % 5000)),
        principal: format!("Gateway::Agent::\"agent-{}\"", (i * 13) % AGENTS),
        action: action.into(),
        resource,
        context: "{}".into(),
        entities_hash: "0".repeat(64),
        entities: None,
        policy_hash: "0".repeat(64),
        decision: if deny { "deny" } else { "allow" }.into(),
        reasons: if deny { "[\"no-tool\"]" } else { "[\"tools\"]" }.into(),
        errors: "[]".into(),
        outcome: "null".into(),
        notes: "null".into(),
    }
}

/// The chain's head: the last seq and its hash.
type Head = (i64, String);

/// Appends `n` chained records in transactions of 20,000.
fn fill(store: &Store, n: usize) -> Res<Head> {
    let started = Instant::now();
    let head = append(store, (0, GENESIS_HASH.to_string()), 0..n, n, 20_000)?;
    println!(
        "  filled {n} records in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(head)
}

/// Appends records `range` (of a trail of `n`) after `head`, `per_tx` per
/// transaction; returns the new head.
fn append(
    store: &Store,
    head: Head,
    range: std::ops::Range<usize>,
    n: usize,
    per_tx: usize,
) -> Res<Head> {
    let start = OffsetDateTime::now_utc() - time::Duration::days(1);
    let span = 86_400.0;
    let (mut seq, mut prev) = head;
    for chunk in range.collect::<Vec<_>>().chunks(per_tx) {
        let (s, p) = store.read_blocking(|c| {
            c.transaction(|tx| {
                let (mut s, mut p) = (seq, prev.clone());
                for &i in chunk {
                    s += 1;
                    p = decisions::insert(tx, s, &p, &record(i % n, n, start, span))?;
                }
                // As the writer does (by 256): SQLite's records land in the
                // unindexed recent table until moved into the indexed one.
                if tx.backend() == Backend::Sqlite {
                    decisions::move_recent(tx)?;
                }
                Ok((s, p))
            })
        })?;
        (seq, prev) = (s, p);
    }
    Ok((seq, prev))
}

/// What the `(resource, decision, seq)` index (migration 12) costs each
/// decision insert: batches of 32 records (a group commit's size under
/// load) appended to the full trail with the index and without it, in
/// alternating rounds; prints the median µs per record of each.
fn insert_cost(store: &Store, mut head: Head, n: usize) -> Res<()> {
    const INDEX: &str = "decisions_resource_decision";
    const RECORDS: usize = 4_000;
    let rounds: usize = env_num("BENCH_INSERT_ROUNDS", 5);
    let (mut with, mut without) = (Vec::new(), Vec::new());
    // SQLite's indexes are on the indexed one of the trail's two tables.
    let table = match store.read_blocking(|c| Ok(c.backend()))? {
        Backend::Sqlite => "decisions_indexed",
        Backend::Postgres => "decisions",
    };
    for round in 0..rounds * 2 {
        let indexed = round % 2 == 0;
        let ddl = if indexed {
            format!("CREATE INDEX IF NOT EXISTS {INDEX} ON {table}(resource, decision, seq)")
        } else {
            format!("DROP INDEX IF EXISTS {INDEX}")
        };
        store.read_blocking(|c| c.execute_batch(&ddl))?;
        let from = round * RECORDS;
        let t = Instant::now();
        head = append(store, head, from..from + RECORDS, n, 32)?;
        let us = t.elapsed().as_secs_f64() * 1e6 / RECORDS as f64;
        if indexed { &mut with } else { &mut without }.push(us);
    }
    let ddl = format!("CREATE INDEX IF NOT EXISTS {INDEX} ON {table}(resource, decision, seq)");
    store.read_blocking(|c| c.execute_batch(&ddl))?;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (w, wo) = (median(&mut with), median(&mut without));
    println!(
        "  decision insert, batches of 32 ({rounds} rounds of {RECORDS}): \
         {wo:.1} µs/record without the (resource, decision, seq) index, {w:.1} with it \
         (+{:.1} µs, {:+.0}%)",
        w - wo,
        (w / wo - 1.0) * 100.0
    );
    Ok(())
}

/// Median and worst milliseconds of `runs` runs of `f`.
fn time_it(runs: usize, mut f: impl FnMut() -> usize) -> (f64, f64, usize) {
    let mut ms: Vec<f64> = Vec::with_capacity(runs);
    let mut rows = 0;
    for _ in 0..runs {
        let t = Instant::now();
        rows = f();
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    (ms[ms.len() / 2], ms[ms.len() - 1], rows)
}

fn queries(store: &Store, n: usize, runs: usize) -> Res<()> {
    let now = OffsetDateTime::now_utc();
    let hour_ago = cedargate::ids::rfc3339(now - time::Duration::hours(1));
    let until = cedargate::ids::rfc3339(now + time::Duration::minutes(1));
    let f = |f: DecisionFilter| f;
    let s = |v: &str| Some(v.to_string());
    let cases: Vec<(&str, DecisionFilter, Option<i64>)> = vec![
        ("newest page, no filter", f(DecisionFilter::default()), None),
        (
            "org",
            DecisionFilter {
                org: s("org-3"),
                ..Default::default()
            },
            None,
        ),
        (
            "decision=deny",
            DecisionFilter {
                decision: s("deny"),
                ..Default::default()
            },
            None,
        ),
        (
            "org + deny",
            DecisionFilter {
                org: s("org-7"),
                decision: s("deny"),
                ..Default::default()
            },
            None,
        ),
        (
            "principal",
            DecisionFilter {
                principal: s("Gateway::Agent::\"agent-42\""),
                ..Default::default()
            },
            None,
        ),
        (
            "resource + deny",
            DecisionFilter {
                resource: s("Gateway::Tool::\"tool_7\""),
                decision: s("deny"),
                ..Default::default()
            },
            None,
        ),
        (
            "session",
            DecisionFilter {
                session: s("s-77"),
                ..Default::default()
            },
            None,
        ),
        (
            "action + org",
            DecisionFilter {
                action: s("view_tool"),
                org: s("org-1"),
                ..Default::default()
            },
            None,
        ),
        (
            "last hour + deny",
            DecisionFilter {
                since: s(&hour_ago),
                decision: s("deny"),
                ..Default::default()
            },
            None,
        ),
        (
            "org, page at the middle",
            DecisionFilter {
                org: s("org-3"),
                ..Default::default()
            },
            Some(n as i64 / 2),
        ),
        (
            "org + deny, page near the start",
            DecisionFilter {
                org: s("org-7"),
                decision: s("deny"),
                ..Default::default()
            },
            Some(2000),
        ),
    ];
    println!(
        "  {:<34} {:>9} {:>9} {:>6}",
        "page of 50, newest first", "p50 ms", "max ms", "rows"
    );
    for (label, filter, before) in cases {
        let (p50, max, rows) = time_it(runs, || {
            store
                .read_blocking(|c| {
                    audit_query::page_filtered(c, &filter, before, Order::Desc, PAGE)
                })
                .unwrap()
                .len()
        });
        println!("  {label:<34} {p50:>9.2} {max:>9.2} {rows:>6}");
    }
    for (label, by) in [
        ("most denied tools, last hour", Some(Ranked::Tool)),
        ("most denied principals, last hour", Some(Ranked::Principal)),
        ("per-minute chart, last hour", None),
    ] {
        let (p50, max, rows) = time_it(runs, || {
            store
                .read_blocking(|c| match by {
                    Some(by) => {
                        trail_stats::most_denied(c, by, &hour_ago, &until, 10).map(|v| v.len())
                    }
                    None => trail_stats::per_minute(c, &hour_ago, &until).map(|v| v.len()),
                })
                .unwrap()
        });
        println!("  {label:<34} {p50:>9.2} {max:>9.2} {rows:>6}");
    }
    Ok(())
}

fn fresh_schema(base: &str) -> Res<(String, String)> {
    let name = format!("bench_console_{}", cedargate::ids::random_hex(4)?);
    let mut c = postgres::Client::connect(base, postgres::NoTls)?;
    c.batch_execute(&format!("CREATE SCHEMA {name}"))?;
    Ok((format!("{base}?schema={name}"), name))
}

fn main() -> Res<()> {
    if !support::bench_requested("console") {
        return Ok(());
    }
    let n: usize = env_num("BENCH_RECORDS", 1_000_000);
    let runs: usize = env_num("BENCH_RUNS", 21);
    let pg = std::env::var("BENCH_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    println!("cedargate console queries over {n} records ({runs} runs each)\n");
    let dir = tempfile::tempdir()?;
    let sqlite = format!("sqlite://{}", dir.path().join("trail.db").display());
    println!("SQLite");
    let store = Store::open_ready(&sqlite, &StoreOptions::default())?;
    let head = fill(&store, n)?;
    queries(&store, n, runs)?;
    insert_cost(&store, head, n)?;
    drop(store);
    println!("\nPostgreSQL");
    let (url, schema) = fresh_schema(&pg)?;
    let result = (|| -> Res<()> {
        let store = Store::open_ready(&url, &StoreOptions::default())?;
        let head = fill(&store, n)?;
        store.read_blocking(|c| c.execute_batch("ANALYZE decisions"))?;
        queries(&store, n, runs)?;
        insert_cost(&store, head, n)
    })();
    let mut c = postgres::Client::connect(&pg, postgres::NoTls)?;
    c.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))?;
    result
}
