//! Storage of shadow-mode divergences (a candidate policy set that decided
//! differently from the active one). Not part of the hash chain: shadow
//! results are advisory, the chained record is the live decision.

use super::db::Conn;
use crate::params;
use serde::{Deserialize, Serialize};

use super::StoreError;

/// One divergence.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Divergence {
    /// The live decision's record id.
    pub decision_id: String,
    /// Time of the decision.
    pub time: String,
    /// Action (group action for typed tools).
    pub action: String,
    /// Principal uid.
    pub principal: String,
    /// Resource uid.
    pub resource: String,
    /// The active set's hash.
    pub live_hash: String,
    /// `allow` / `deny`.
    pub live_decision: String,
    /// Determining policies of the live decision.
    pub live_reasons: Vec<String>,
    /// Errors of the live decision.
    pub live_errors: Vec<String>,
    /// The candidate directory.
    pub candidate_dir: String,
    /// The candidate set's hash.
    pub candidate_hash: String,
    /// `allow` / `deny`.
    pub candidate_decision: String,
    /// Determining policies of the candidate decision.
    pub candidate_reasons: Vec<String>,
    /// Errors of the candidate decision.
    pub candidate_errors: Vec<String>,
}

fn json(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

/// Stores one divergence.
pub fn insert(conn: &mut Conn, d: &Divergence) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO shadow_divergences (decision_id, time, action, principal, resource,
             live_hash, live_decision, live_reasons, live_errors,
             candidate_dir, candidate_hash, candidate_decision, candidate_reasons, candidate_errors)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        params![
            d.decision_id,
            d.time,
            d.action,
            d.principal,
            d.resource,
            d.live_hash,
            d.live_decision,
            &json(&d.live_reasons),
            &json(&d.live_errors),
            d.candidate_dir,
            d.candidate_hash,
            d.candidate_decision,
            &json(&d.candidate_reasons),
            &json(&d.candidate_errors),
        ],
    )?;
    Ok(())
}

/// Whose shadow a divergence is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Of<'a> {
    /// The gateway's own set (every action but the decision applications').
    Gateway,
    /// The decision application of that name (actions `authzen:<app>:…`).
    Application(&'a str),
}

/// The newest `limit` divergences (newest first) of `of`'s shadow,
/// optionally only those against `candidate_hash`.
pub fn recent(
    conn: &mut Conn,
    of: Of<'_>,
    candidate_hash: Option<&str>,
    limit: usize,
) -> Result<Vec<Divergence>, StoreError> {
    // An exact prefix of the action: `LIKE` would read `_` in a name as a
    // wildcard (and ignore case on SQLite). The lengths are ours.
    let prefix = match of {
        Of::Gateway => super::decisions::AUTHZEN_ACTION_PREFIX.to_string(),
        Of::Application(app) => format!("{}{app}:", super::decisions::AUTHZEN_ACTION_PREFIX),
    };
    let op = if of == Of::Gateway { "<>" } else { "=" };
    let sql = format!(
        "SELECT decision_id, time, action, principal, resource,
                live_hash, live_decision, live_reasons, live_errors,
                candidate_dir, candidate_hash, candidate_decision, candidate_reasons, candidate_errors
         FROM shadow_divergences
         WHERE (CAST(?1 AS TEXT) IS NULL OR candidate_hash = ?1)
           AND substr(action, 1, {len}) {op} ?3
         ORDER BY id DESC LIMIT ?2",
        len = prefix.len()
    );
    let list = |s: String| serde_json::from_str::<Vec<String>>(&s).unwrap_or_default();
    conn.query_map(&sql, params![candidate_hash, limit as i64, prefix], |r| {
        Ok(Divergence {
            decision_id: r.get(0)?,
            time: r.get(1)?,
            action: r.get(2)?,
            principal: r.get(3)?,
            resource: r.get(4)?,
            live_hash: r.get(5)?,
            live_decision: r.get(6)?,
            live_reasons: list(r.get(7)?),
            live_errors: list(r.get(8)?),
            candidate_dir: r.get(9)?,
            candidate_hash: r.get(10)?,
            candidate_decision: r.get(11)?,
            candidate_reasons: list(r.get(12)?),
            candidate_errors: list(r.get(13)?),
        })
    })
}
