//! Recall at scale: `af_memory_recall`'s observation search on one project
//! of 10,000, 100,000 and 1,000,000 observations, on SQLite and on
//! PostgreSQL, the bounded search (`observations::search`) against the
//! exhaustive ranking it replaced (`observations::search_exhaustive`), in
//! alternating rounds on the same database.
//!
//! The observations are bulk-loaded in one transaction per size step
//! (`observations::insert_many`), not through the gateway. Every query
//! holds `deploy`, which half of the observations hold, plus one or two
//! words of a long-tailed vocabulary. Printed per size: p50 / p99 of each
//! search (ms), the before/after ratio of the medians, and how many of the
//! exhaustive top 10 the bounded search also returns.
//!
//! `cargo bench --bench recall`; knobs `RECALL_SIZES` (comma-separated,
//! default `10000,100000,1000000`), `RECALL_ITERS` (bounded searches per
//! round, default 50), `RECALL_ROUNDS` (default 4), `RECALL_BACKENDS`
//! (`sqlite,postgres`), `BENCH_PG_URL` (default the local server, database
//! `test`; a fresh schema, dropped afterwards). Without `--bench` it exits
//! at once.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_precision_loss,
    reason = "a bench fails loudly"
)]

mod support;

use std::time::{Duration, Instant};

use cedargate::store::db::{Conn, Db, PgTarget, SqliteConn};
use cedargate::store::observations::{self, NewObservation, ObservationHit};
use cedargate::store::tenants::{self, Org, Project};
use support::stats::{Rank, Stats};
use support::{Res, env_num};

const ORG: &str = "bench";
const PROJECT: &str = "big";
/// Words of the long-tailed vocabulary (`k0` … `k19999`).
const VOCAB: u64 = 20_000;
/// Results asked for, as `af_memory_recall` does.
const LIMIT: usize = 50;

/// A small deterministic generator (xorshift64*), so runs load the same
/// text.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A word index with a long tail: log-uniform over the vocabulary.
    fn word(&mut self) -> u64 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((VOCAB as f64).powf(u) as u64).saturating_sub(1)
    }
}

fn observation(seq: usize, rng: &mut Rng) -> NewObservation {
    let mut words: Vec<String> = (0..10).map(|_| format!("k{}", rng.word())).collect();
    if seq.is_multiple_of(2) {
        words.insert(rng.next() as usize % words.len(), "deploy".into());
    }
    NewObservation {
        id: format!("obs-{seq:08}"),
        org_id: ORG.into(),
        project_id: PROJECT.into(),
        session_id: "s".into(),
        agent_id: "a".into(),
        content: words.join(" "),
        obs_type: seq.is_multiple_of(5).then(|| "pattern".to_string()),
        confidence: None,
        created_at: "2026-11-23T08:00:00.000Z".into(),
    }
}

fn queries(rng: &mut Rng) -> Vec<String> {
    (0..20)
        .map(|i| match i % 3 {
            0 => "deploy".to_string(),
            1 => format!("deploy k{}", rng.word()),
            _ => format!("how to deploy k{} k{}", rng.word(), rng.word()),
        })
        .collect()
}

fn load(conn: &mut Conn, from: usize, to: usize, rng: &mut Rng) -> Res<Duration> {
    let started = Instant::now();
    conn.transaction(|tx| {
        let mut batch = Vec::with_capacity(10_000);
        for seq in from..to {
            batch.push(observation(seq, rng));
            if batch.len() == 10_000 {
                observations::insert_many(tx, &batch)?;
                batch.clear();
            }
        }
        observations::insert_many(tx, &batch)
    })?;
    if conn.backend() == cedargate::store::Backend::Postgres {
        // What autovacuum does after such a load (PostgreSQL 13 and later
        // vacuum insert-only tables too): the planner's estimates and the
        // visibility map that lets the recall index be read alone.
        conn.execute_batch("VACUUM ANALYZE observations")?;
        conn.execute_batch("VACUUM ANALYZE observation_terms")?;
    }
    Ok(started.elapsed())
}

type Search = fn(
    &mut Conn,
    &str,
    &str,
    &str,
    usize,
) -> Result<Vec<ObservationHit>, cedargate::store::StoreError>;

fn timed(
    conn: &mut Conn,
    search: Search,
    qs: &[String],
    n: usize,
    out: &mut Vec<Duration>,
) -> Res<()> {
    for i in 0..n {
        let q = &qs[i % qs.len()];
        let started = Instant::now();
        let hits = search(conn, ORG, PROJECT, q, LIMIT)?;
        out.push(started.elapsed());
        assert!(!hits.is_empty(), "no hit for {q}");
    }
    Ok(())
}

/// How many of the exhaustive top 10 the bounded search returns in its
/// top 10, averaged over the queries.
fn overlap(conn: &mut Conn, qs: &[String]) -> Res<f64> {
    let mut total = 0usize;
    for q in qs {
        let ids = |h: Vec<ObservationHit>| h.into_iter().take(10).map(|h| h.id).collect::<Vec<_>>();
        let new = ids(observations::search(conn, ORG, PROJECT, q, LIMIT)?);
        let old = ids(observations::search_exhaustive(
            conn, ORG, PROJECT, q, LIMIT,
        )?);
        total += old.iter().filter(|id| new.contains(id)).count();
    }
    Ok(total as f64 / qs.len() as f64)
}

fn measure(conn: &mut Conn, size: usize, qs: &[String]) -> Res<()> {
    let iters: usize = env_num("RECALL_ITERS", 50);
    let rounds: usize = env_num("RECALL_ROUNDS", 4);
    // The exhaustive search takes about 1 µs per match: fewer of them.
    let slow_iters = (iters * 10_000 / size).clamp(3, iters);
    let (mut new, mut old) = (Vec::new(), Vec::new());
    timed(conn, observations::search, qs, qs.len(), &mut Vec::new())?;
    for _ in 0..rounds {
        timed(conn, observations::search, qs, iters, &mut new)?;
        timed(
            conn,
            observations::search_exhaustive,
            qs,
            slow_iters,
            &mut old,
        )?;
    }
    let (new, old) = (Stats::of(new, Rank::Nearest), Stats::of(old, Rank::Nearest));
    println!(
        "{size:>10} {:>9.2} {:>9.2} {:>10.2} {:>10.2} {:>8.1}x {:>9.1}/10",
        old.p50 / 1e3,
        old.p99 / 1e3,
        new.p50 / 1e3,
        new.p99 / 1e3,
        old.p50 / new.p50,
        overlap(conn, qs)?,
    );
    Ok(())
}

fn run(label: &str, conn: &mut Conn, sizes: &[usize]) -> Res<()> {
    cedargate::store::migrate(conn)?;
    let now = "2026-11-23T08:00:00.000Z".to_string();
    tenants::create_org(
        conn,
        &Org {
            id: ORG.into(),
            name: ORG.into(),
            plan: "team".into(),
            entitlements: Vec::new(),
            created_at: now.clone(),
        },
    )?;
    tenants::create_project(
        conn,
        &Project {
            org_id: ORG.into(),
            id: PROJECT.into(),
            memory_enabled: true,
            graph_enabled: false,
            created_at: now,
        },
    )?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let qs = queries(&mut rng);
    println!("\n{label}: p50 / p99 in ms, before = exhaustive, after = bounded");
    println!(
        "{:>10} {:>9} {:>9} {:>10} {:>10} {:>9} {:>12}",
        "obs", "before50", "before99", "after50", "after99", "p50 gain", "top10 kept"
    );
    let mut loaded = 0;
    for &size in sizes {
        let took = load(conn, loaded, size, &mut rng)?;
        eprintln!(
            "  loaded {} observations in {:.1} s",
            size - loaded,
            took.as_secs_f64()
        );
        loaded = size;
        measure(conn, size, &qs)?;
    }
    Ok(())
}

fn main() -> Res<()> {
    if !support::bench_requested("recall") {
        return Ok(());
    }
    let sizes: Vec<usize> = std::env::var("RECALL_SIZES")
        .unwrap_or_else(|_| "10000,100000,1000000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let backends = std::env::var("RECALL_BACKENDS").unwrap_or_else(|_| "sqlite,postgres".into());
    if backends.contains("sqlite") {
        let dir = tempfile::tempdir()?;
        let mut conn = SqliteConn::open(&dir.path().join("recall.db"))?;
        run("SQLite", &mut conn, &sizes)?;
    }
    if backends.contains("postgres") {
        let base = std::env::var("BENCH_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        let schema = format!("bench_recall_{}", std::process::id());
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}schema={schema}");
        let result = std::thread::spawn(move || -> Result<(), String> {
            let mut conn = PgTarget::parse(&url)
                .map_err(|e| e.to_string())?
                .connect()
                .map_err(|e| e.to_string())?;
            let out = run("PostgreSQL", &mut conn, &sizes).map_err(|e| e.to_string());
            let _ = conn.execute_batch(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
            out
        })
        .join()
        .map_err(|_| "PostgreSQL run panicked")?;
        result?;
    }
    Ok(())
}
