//! Retention of the decision trail: anchors, pruning and the lease that
//! keeps periodic archives to one instance at a time.
//!
//! An archive (`src/audit/archive.rs`) exports the oldest records, then
//! [`prune`]s them in one transaction that holds the chain lock: it inserts
//! an anchor (the seq and hash of the last pruned record), deletes the
//! records behind it, then the entity snapshots no remaining record
//! references. The trail's delete guards (migration 18) let only this
//! transaction through: after the anchor it inserts a permit naming it
//! (`trail_prune_permits`, refused unless it names the newest anchor),
//! which lets records up to the anchor and entity snapshots be deleted,
//! and it deletes the permit before committing. Anchors are append-only,
//! so the stored chain always starts right after the newest anchor and
//! verifies from its hash.

use serde::Serialize;

use super::StoreError;
use super::checkpoints::{self, CheckpointRow};
use super::db::{Backend, Conn};
use crate::params;

/// One archive's anchor row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Anchor {
    /// The last record this archive pruned.
    pub seq: i64,
    /// Its hash: the `prev_hash` of the first record kept.
    pub hash: String,
    /// Its decision time.
    pub time: String,
    /// The first record this archive pruned.
    pub first_seq: i64,
    /// That record's `prev_hash` (the previous anchor's hash, or genesis).
    pub prev_hash: String,
    /// Records pruned.
    pub records: i64,
    /// `jsonl` or `ocsf`.
    pub format: String,
    /// SHA-256 (hex) of the exported file.
    pub archive_sha256: String,
    /// When the archive ran (RFC 3339).
    pub archived_at: String,
}

/// Every anchor, oldest first.
pub fn anchors(conn: &mut Conn) -> Result<Vec<Anchor>, StoreError> {
    conn.query_map(
        "SELECT seq, hash, time, first_seq, prev_hash, records, format, archive_sha256, archived_at
         FROM decision_anchors ORDER BY seq",
        params![],
        |r| {
            Ok(Anchor {
                seq: r.get(0)?,
                hash: r.get(1)?,
                time: r.get(2)?,
                first_seq: r.get(3)?,
                prev_hash: r.get(4)?,
                records: r.get(5)?,
                format: r.get(6)?,
                archive_sha256: r.get(7)?,
                archived_at: r.get(8)?,
            })
        },
    )
}

/// The seq of the last record of the longest stored prefix of the chain
/// whose records are all older than `before` (RFC 3339): the records an
/// archive `--before` takes. `None` when the first stored record is not
/// older.
pub fn archivable_until(conn: &mut Conn, before: &str) -> Result<Option<i64>, StoreError> {
    let (first, head, first_newer): (Option<i64>, Option<i64>, Option<i64>) = conn.query_row(
        // The ends as the first and last rows, not min()/max(): on SQLite
        // `decisions` is a view of two tables (see `decisions::chain_head`).
        "SELECT (SELECT seq FROM decisions ORDER BY seq LIMIT 1),
                (SELECT seq FROM decisions ORDER BY seq DESC LIMIT 1),
                (SELECT min(seq) FROM decisions WHERE time >= ?1)",
        params![before],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let (Some(first), Some(head)) = (first, head) else {
        return Ok(None);
    };
    let last = first_newer.map_or(head, |s| s - 1);
    Ok((last >= first).then_some(last))
}

/// Why [`prune`] refused.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    /// Another archive moved the anchor since this one read the chain.
    #[error("another archive pruned the trail meanwhile (anchor now at seq {0}); nothing pruned")]
    Moved(i64),
    /// The last record to prune is not the one that was exported.
    #[error("record seq {0} changed since it was exported; nothing pruned")]
    Changed(i64),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Inserts `anchor` and deletes the records behind it and the entity
/// snapshots no remaining record references, in one transaction holding
/// the chain lock. `expected_anchor` is the anchor seq the archive started
/// from (the records `anchor.first_seq..=anchor.seq` follow it).
/// `signed` is the anchor's signed checkpoint, stored with it; the
/// checkpoints behind the anchor go with the records.
pub fn prune(
    conn: &mut Conn,
    anchor: &Anchor,
    expected_anchor: i64,
    signed: &CheckpointRow,
) -> Result<u64, PruneError> {
    conn.begin(true)?;
    let result = prune_in(conn, anchor, expected_anchor, signed);
    match &result {
        Ok(_) => conn.commit()?,
        Err(_) => conn.rollback(),
    }
    result
}

fn prune_in(
    conn: &mut Conn,
    anchor: &Anchor,
    expected_anchor: i64,
    signed: &CheckpointRow,
) -> Result<u64, PruneError> {
    conn.lock_chain()?;
    let now = super::decisions::chain_head(conn)?.anchor.0;
    if now != expected_anchor {
        return Err(PruneError::Moved(now));
    }
    let stored: Option<String> = conn.query_opt(
        "SELECT hash FROM decisions WHERE seq = ?1",
        params![anchor.seq],
        |r| r.get(0),
    )?;
    if stored.as_deref() != Some(anchor.hash.as_str()) {
        return Err(PruneError::Changed(anchor.seq));
    }
    conn.execute(
        "INSERT INTO decision_anchors (seq, hash, time, first_seq, prev_hash, records, format,
             archive_sha256, archived_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            anchor.seq,
            anchor.hash,
            anchor.time,
            anchor.first_seq,
            anchor.prev_hash,
            anchor.records,
            anchor.format,
            anchor.archive_sha256,
            anchor.archived_at
        ],
    )?;
    // The permit that lets this transaction's deletes past the guards
    // (migration 18); deleted again below, so it never commits.
    conn.execute(
        "INSERT INTO trail_prune_permits (anchor_seq) VALUES (?1)",
        params![anchor.seq],
    )?;
    checkpoints::insert(conn, signed)?;
    checkpoints::prune_behind(conn, anchor.seq)?;
    // Snapshots first, while the pruned records still say which to look at.
    let orphans = match conn.backend() {
        // SQLite answers `NOT IN (subquery)` from one ephemeral index.
        Backend::Sqlite => {
            "DELETE FROM entity_snapshots
             WHERE hash IN (SELECT entities_hash FROM decisions WHERE seq <= ?1)
               AND hash NOT IN (SELECT entities_hash FROM decisions WHERE seq > ?1)"
        }
        // PostgreSQL plans `NOT EXISTS` as an anti-join.
        Backend::Postgres => {
            "DELETE FROM entity_snapshots s
             WHERE s.hash IN (SELECT entities_hash FROM decisions WHERE seq <= ?1)
               AND NOT EXISTS (SELECT 1 FROM decisions d
                               WHERE d.entities_hash = s.hash AND d.seq > ?1)"
        }
    };
    conn.execute(orphans, params![anchor.seq])?;
    let pruned = conn.execute("DELETE FROM decisions WHERE seq <= ?1", params![anchor.seq])?;
    conn.execute(
        "DELETE FROM decision_traces WHERE seq <= ?1",
        params![anchor.seq],
    )?;
    conn.execute("DELETE FROM trail_prune_permits", params![])?;
    Ok(pruned)
}

/// Takes the lease `name` for `holder` until `expires_at` (RFC 3339) when
/// it is free, expired, or already `holder`'s; `false` when someone else
/// holds it.
pub fn take_lease(
    conn: &mut Conn,
    name: &str,
    holder: &str,
    now: &str,
    expires_at: &str,
) -> Result<bool, StoreError> {
    let taken = conn.execute(
        "INSERT INTO maintenance_leases (name, holder, expires_at) VALUES (?1, ?2, ?4)
         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
         WHERE maintenance_leases.expires_at < ?3 OR maintenance_leases.holder = excluded.holder",
        params![name, holder, now, expires_at],
    )?;
    Ok(taken == 1)
}

/// Who holds lease `name`, and until when.
pub fn lease_holder(conn: &mut Conn, name: &str) -> Result<Option<(String, String)>, StoreError> {
    conn.query_opt(
        "SELECT holder, expires_at FROM maintenance_leases WHERE name = ?1",
        params![name],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// Gives lease `name` back if `holder` holds it.
pub fn release_lease(conn: &mut Conn, name: &str, holder: &str) -> Result<(), StoreError> {
    conn.execute(
        "DELETE FROM maintenance_leases WHERE name = ?1 AND holder = ?2",
        params![name, holder],
    )?;
    Ok(())
}
