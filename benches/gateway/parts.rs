//! The gateway bench's breakdowns beyond the decision: what one decision
//! record costs the writer (on a probe database), what `af_memory_recall`
//! spends where, and what a durable commit costs.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::support::Res;
use crate::support::procfs::CpuWindow;
use crate::support::stats::Stats;
use cedargate::gateway::Gateway;
use cedargate::store::decisions::{self, GENESIS_HASH, NewDecision};
use cedargate::store::observations;
use cedargate::store::{Store, WriteOp};
use serde_json::json;

use crate::pep::Pep;
use crate::{ORG, PART_ITERS, PROJECT, RECALL_QUERY, THREADS, stats};

/// What one decision record costs the writer: chain hash and SQLite inserts,
/// timed on a second database inside one transaction (no fsync).
pub async fn writer_probe(dir: &Path, template: NewDecision) -> Res<Vec<(String, Stats)>> {
    let store = Store::open(&dir.join("probe/probe.db"), 16, 16)?;
    let out = store
        .read(move |c| {
            let mk = || {
                let mut d = template.clone();
                d.id = uuid::Uuid::now_v7().to_string();
                d
            };
            let (mut hash_t, mut with_t, mut without_t) = (Vec::new(), Vec::new(), Vec::new());
            c.begin(true)?;
            let tx = c;
            let mut prev = GENESIS_HASH.to_string();
            let mut seq = 0i64;
            for _ in 0..PART_ITERS {
                let d = mk();
                let t0 = Instant::now();
                std::hint::black_box(decisions::chain_hash(&prev, seq + 1, &d));
                hash_t.push(t0.elapsed());
            }
            for i in 0..2 * PART_ITERS {
                let mut d = mk();
                let with_entities = i % 2 == 0;
                if !with_entities {
                    d.entities = None;
                }
                seq += 1;
                let t0 = Instant::now();
                prev = decisions::insert(tx, seq, &prev, &d)?;
                let dt = t0.elapsed();
                if with_entities {
                    with_t.push(dt);
                } else {
                    without_t.push(dt);
                }
            }
            let t0 = Instant::now();
            tx.commit()?;
            let commit = t0.elapsed();
            Ok(vec![
                (
                    "decisions::chain_hash (SHA-256 over the record)".to_string(),
                    stats(hash_t),
                ),
                (
                    "decisions::insert with entities (snapshot INSERT OR IGNORE + row)".to_string(),
                    stats(with_t),
                ),
                (
                    "decisions::insert without entities (row + hash; SQLite: the unindexed recent table)".to_string(),
                    stats(without_t),
                ),
                (
                    format!("COMMIT of those {} rows (one fsync)", 2 * PART_ITERS),
                    stats(vec![commit]),
                ),
            ])
        })
        .await?;
    Ok(out)
}

/// Recall's parts: the thread hand-off, the FTS5 search, the whole adapter.
pub async fn recall_parts(
    gw: &Arc<Gateway>,
    secret: &str,
    session_id: &str,
) -> Res<Vec<(String, Stats)>> {
    let pep = Pep::new(gw, secret, session_id, "af_memory_recall").await?;
    let view = pep.view();
    let args = json!({"query": RECALL_QUERY, "workType": "bug_fix"});
    let (mut noop, mut search, mut full) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..500 {
        let t0 = Instant::now();
        gw.store.read(|_| Ok(())).await?;
        noop.push(t0.elapsed());
        let t0 = Instant::now();
        let hits = gw
            .store
            .read(|c| observations::search(c, ORG, PROJECT, RECALL_QUERY, 50))
            .await?;
        search.push(t0.elapsed());
        std::hint::black_box(hits);
        let t0 = Instant::now();
        let out = cedargate::tools::memory::recall(&gw.store, &view.tenant, &args, None)
            .await
            .map_err(|e| e.to_string())?;
        full.push(t0.elapsed());
        std::hint::black_box(out);
    }
    let matched: i64 = gw
        .store
        .read(|c| {
            let q = observations::fts_query(RECALL_QUERY).unwrap_or_default();
            c.query_row(
                "SELECT COUNT(*) FROM observations_fts WHERE observations_fts MATCH ?1",
                cedargate::params![q],
                |r| r.get(0),
            )
        })
        .await?;
    Ok(vec![
        (
            "store.read no-op (spawn_blocking round trip)".to_string(),
            stats(noop),
        ),
        (
            format!(
                "store.read(observations::search): FTS5 OR-query matching {matched} rows, limit 50"
            ),
            stats(search),
        ),
        (
            "tools::memory::recall (search + assemble)".to_string(),
            stats(full),
        ),
    ])
}

/// What a durable commit costs: an empty job, then one record per commit.
pub async fn commit_parts(
    gw: &Arc<Gateway>,
    secret: &str,
    session_id: &str,
) -> Res<Vec<(String, Stats)>> {
    let pep = Pep::new(gw, secret, session_id, "af_memory_remember").await?;
    let writer = gw.store.writer();
    let n = 500;
    let (mut flush, mut one) = (Vec::new(), Vec::new());
    let mark = THREADS.mark();
    for _ in 0..n {
        let t0 = Instant::now();
        writer.flush().await?;
        flush.push(t0.elapsed());
    }
    let flush_cpu = mark.since();
    let mark = THREADS.mark();
    for _ in 0..n {
        let record = pep.decide().finish_default();
        let t0 = Instant::now();
        writer
            .submit(vec![WriteOp::Decision(Box::new(record))])
            .await?;
        one.push(t0.elapsed());
    }
    let one_cpu = mark.since();
    let writer_cpu =
        |w: &CpuWindow| w.groups.get("writer").copied().unwrap_or(0) as f64 / 1e3 / n as f64;
    Ok(vec![
        (
            format!(
                "writer.flush (empty job: hand-off, no fsync); writer CPU {:.0} µs per job",
                writer_cpu(&flush_cpu)
            ),
            stats(flush),
        ),
        (
            format!(
                "writer.submit(1 decision): one durable commit; writer CPU {:.0} µs per commit",
                writer_cpu(&one_cpu)
            ),
            stats(one),
        ),
    ])
}
