//! Candidate policy sets a reload's proof refused (`[lifecycle] prove =
//! "refuse-widening"`) and an admin's acceptance of one, in
//! `policy_candidates`: one row per candidate hash, written with the
//! refusal's trail record and with the acceptance's, so an accepted
//! candidate loads on every instance sharing the database and after a
//! restart, and only a candidate a proof refused can be accepted.

use serde::Serialize;

use super::db::Value as SqlValue;
use super::{Conn, StoreError, WriteOp};

/// A refused candidate as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// Its hash.
    pub hash: String,
    /// The active set it was first refused against.
    pub live_hash: String,
    /// When it was first refused.
    pub refused_at: String,
    /// When an admin accepted it, if one did.
    pub accepted_at: Option<String>,
    /// Who accepted it.
    pub accepted_by: Option<String>,
}

/// Notes the refusal of `hash` against `live_hash` (the first refusal of a
/// hash is kept).
pub fn refused_op(hash: &str, live_hash: &str, at: &str) -> WriteOp {
    WriteOp::Exec {
        sql: "INSERT INTO policy_candidates (hash, live_hash, refused_at) VALUES (?1, ?2, ?3)
              ON CONFLICT (hash) DO NOTHING",
        params: vec![
            SqlValue::Text(hash.to_string()),
            SqlValue::Text(live_hash.to_string()),
            SqlValue::Text(at.to_string()),
        ],
    }
}

/// Notes that `by` accepted the refused candidate `hash` (a second
/// acceptance keeps the first).
pub fn accepted_op(hash: &str, at: &str, by: &str) -> WriteOp {
    WriteOp::Exec {
        sql: "UPDATE policy_candidates SET accepted_at = ?2, accepted_by = ?3
              WHERE hash = ?1 AND accepted_at IS NULL",
        params: vec![
            SqlValue::Text(hash.to_string()),
            SqlValue::Text(at.to_string()),
            SqlValue::Text(by.to_string()),
        ],
    }
}

/// The refused candidate `hash`, if a proof refused it.
pub fn get(conn: &mut Conn, hash: &str) -> Result<Option<Candidate>, StoreError> {
    conn.query_opt(
        "SELECT hash, live_hash, refused_at, accepted_at, accepted_by
         FROM policy_candidates WHERE hash = ?1",
        crate::params![hash],
        |r| {
            Ok(Candidate {
                hash: r.get(0)?,
                live_hash: r.get(1)?,
                refused_at: r.get(2)?,
                accepted_at: r.get(3)?,
                accepted_by: r.get(4)?,
            })
        },
    )
}

/// Whether an admin accepted the candidate `hash`.
pub fn is_accepted(conn: &mut Conn, hash: &str) -> Result<bool, StoreError> {
    Ok(get(conn, hash)?.is_some_and(|c| c.accepted_at.is_some()))
}

/// The candidate accepted last, if any.
pub fn last_accepted(conn: &mut Conn) -> Result<Option<String>, StoreError> {
    conn.query_opt(
        "SELECT hash FROM policy_candidates WHERE accepted_at IS NOT NULL
         ORDER BY accepted_at DESC, hash LIMIT 1",
        crate::params![],
        |r| r.get(0),
    )
}
