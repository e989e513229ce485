//! Aggregates of the decision trail for the web console's overview: allows
//! and denies per minute over a window, and the most denied tools and
//! principals. Both read the `(decision, time)` index of migration 10, so
//! their cost follows the window, not the trail.

use super::StoreError;
use super::db::Conn;
use crate::params;
use serde::Serialize;

/// Allows and denies of one minute.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Minute {
    /// `YYYY-MM-DDTHH:MM` (UTC).
    pub minute: String,
    /// Allowed decisions.
    pub allow: i64,
    /// Denied decisions.
    pub deny: i64,
}

/// Counts per minute and decision of the records in `[since, until)`,
/// oldest first (minutes without records are absent).
pub fn per_minute(conn: &mut Conn, since: &str, until: &str) -> Result<Vec<Minute>, StoreError> {
    let rows: Vec<(String, String, i64)> = conn.query_map(
        "SELECT substr(time, 1, 16) AS minute, decision, COUNT(*) FROM decisions
         WHERE decision IN ('allow', 'deny') AND time >= ?1 AND time < ?2
         GROUP BY substr(time, 1, 16), decision ORDER BY minute",
        params![since, until],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let mut out: Vec<Minute> = Vec::new();
    for (minute, decision, n) in rows {
        if out.last().is_none_or(|m| m.minute != minute) {
            out.push(Minute {
                minute,
                ..Minute::default()
            });
        }
        if let Some(m) = out.last_mut() {
            if decision == "allow" {
                m.allow = n;
            } else {
                m.deny = n;
            }
        }
    }
    Ok(out)
}

/// What to rank denials by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranked {
    /// Tools (resources of type `Gateway::Tool`).
    Tool,
    /// Principals.
    Principal,
}

/// The `limit` most denied tools or principals in `[since, until)`, with
/// their denial counts, most denied first.
pub fn most_denied(
    conn: &mut Conn,
    by: Ranked,
    since: &str,
    until: &str,
    limit: usize,
) -> Result<Vec<(String, i64)>, StoreError> {
    let sql = match by {
        Ranked::Tool => {
            "SELECT resource, COUNT(*) AS n FROM decisions
             WHERE decision = 'deny' AND time >= ?1 AND time < ?2
               AND resource LIKE 'Gateway::Tool::%'
             GROUP BY resource ORDER BY n DESC, resource LIMIT ?3"
        }
        Ranked::Principal => {
            "SELECT principal, COUNT(*) AS n FROM decisions
             WHERE decision = 'deny' AND time >= ?1 AND time < ?2
             GROUP BY principal ORDER BY n DESC, principal LIMIT ?3"
        }
    };
    conn.query_map(sql, params![since, until, limit as i64], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
}
