//! Storage of the trail's signed checkpoints (`trail_checkpoints`): each
//! row is one signed note over a chain position, with the fields it signs
//! copied beside it for queries. What a checkpoint means and how it is
//! verified is `crate::audit::checkpoint`'s; this only stores and reads.
//!
//! The table is append-only (triggers): checkpoints behind the newest
//! anchor are pruned with the records they covered ([`prune_behind`], in
//! the archive's transaction), except the anchors' own, which stay as long
//! as the anchors do.

use serde::Serialize;

use super::StoreError;
use super::db::Conn;
use crate::params;

/// What a checkpoint row holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointRow {
    /// The chain position signed (the checkpoint's tree size).
    pub seq: i64,
    /// The record's hash at that position (hex).
    pub hash: String,
    /// `interval`, `stop` or `anchor`.
    pub kind: String,
    /// When it was signed (RFC 3339).
    pub signed_at: String,
    /// The signing key's id (8 hex digits).
    pub key_id: String,
    /// The signed note, exactly as signed.
    pub note: String,
}

/// Appends one checkpoint.
pub fn insert(conn: &mut Conn, row: &CheckpointRow) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO trail_checkpoints (seq, hash, kind, signed_at, key_id, note)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            row.seq,
            row.hash,
            row.kind,
            row.signed_at,
            row.key_id,
            row.note
        ],
    )?;
    Ok(())
}

const COLUMNS: &str = "seq, hash, kind, signed_at, key_id, note";

fn row(r: &super::db::Row) -> Result<CheckpointRow, StoreError> {
    Ok(CheckpointRow {
        seq: r.get(0)?,
        hash: r.get(1)?,
        kind: r.get(2)?,
        signed_at: r.get(3)?,
        key_id: r.get(4)?,
        note: r.get(5)?,
    })
}

/// The checkpoint at the highest chain position (the newest signed one
/// there when several are).
pub fn newest(conn: &mut Conn) -> Result<Option<CheckpointRow>, StoreError> {
    conn.query_opt(
        &format!("SELECT {COLUMNS} FROM trail_checkpoints ORDER BY seq DESC, id DESC LIMIT 1"),
        params![],
        row,
    )
}

/// Every stored checkpoint, by chain position then as signed.
pub fn all(conn: &mut Conn) -> Result<Vec<CheckpointRow>, StoreError> {
    conn.query_map(
        &format!("SELECT {COLUMNS} FROM trail_checkpoints ORDER BY seq, id"),
        params![],
        row,
    )
}

/// Deletes the checkpoints at or behind `seq` except the anchors' own
/// (called by the archive's prune, after it inserted the anchor at `seq`).
pub fn prune_behind(conn: &mut Conn, seq: i64) -> Result<u64, StoreError> {
    conn.execute(
        "DELETE FROM trail_checkpoints WHERE seq <= ?1 AND kind <> 'anchor'",
        params![seq],
    )
}

/// The stored hash of the record at `seq`, if that record is stored.
pub fn record_hash(conn: &mut Conn, seq: i64) -> Result<Option<String>, StoreError> {
    conn.query_opt(
        "SELECT hash FROM decisions WHERE seq = ?1",
        params![seq],
        |r| r.get(0),
    )
}
