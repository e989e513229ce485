//! The rows the shipped A2A hook subscribers write: task instances (one
//! per bridged call, for load tracking), hook events (every event as
//! emitted) and cost events (one per finished call).
//!
//! Each function builds a [`WriteOp`] for the writer; nothing here waits
//! for a commit. The subscribers queue these ops and never block a call, so
//! the statements must not be able to fail on their data: no foreign keys,
//! and `ON CONFLICT DO NOTHING` on keys (a failing op rolls back the whole
//! batch it shares with other writers).
//!
//! Row structs borrow their text from the event they describe, so building
//! an op copies each value once, into its parameter.
//!
//! **Bounded.** The rows grow with traffic, so [`prune_ops`] deletes those
//! older than the retention and then the oldest beyond a count per table
//! (`[a2a_telemetry]`, run by `server::maintenance`). A call id is a UUIDv7
//! (time-ordered text), so "oldest" is the lowest id (the lowest `seq` for
//! hook events). [`peer_load`] is their reader: per registered peer, its
//! calls by status, their mean duration, the bytes they moved and the last
//! error reported, over what is kept.

use super::db::{Conn, Value};
use super::{StoreError, WriteOp};
use crate::params;

/// Inserts a task instance (ignored when the call's row exists).
const INSERT_TASK: &str = "INSERT INTO a2a_task_instances
                      (id, org_id, agent_card_id, verb, skill_id, session_id, status, started_at,
                       finished_at, duration_ms, error_code)
                      VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT DO NOTHING";

/// Finishes a task instance an earlier batch inserted.
const FINISH_TASK: &str =
    "UPDATE a2a_task_instances SET status = ?2, finished_at = ?3, duration_ms = ?4
                          WHERE id = ?1";

/// Notes the error code of a task instance an earlier batch inserted.
const TASK_ERROR: &str = "UPDATE a2a_task_instances SET error_code = ?2 WHERE id = ?1";

/// Appends one hook event.
const INSERT_EVENT: &str =
    "INSERT INTO a2a_hook_events (call_id, org_id, phase, verb, event, emitted_at)
                      VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// Inserts the cost of one finished call (ignored when already there).
const INSERT_COST: &str = "INSERT INTO a2a_cost_events
                          (call_id, org_id, agent_card_id, verb, session_id, outcome, duration_ms,
                           request_bytes, response_bytes, emitted_at)
                          VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT DO NOTHING";

/// One bridged call, as `a2a_task_instances` keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskInstance<'a> {
    /// The call id (ties the call's events together).
    pub id: &'a str,
    /// Org.
    pub org_id: &'a str,
    /// Registry row of the peer.
    pub agent_card_id: &'a str,
    /// Canonical tool name.
    pub verb: &'a str,
    /// Skill invoked.
    pub skill_id: &'a str,
    /// MCP session.
    pub session_id: &'a str,
    /// `running`, `denied`, `completed` or `failed`.
    pub status: &'a str,
    /// When the call started (RFC 3339).
    pub started_at: &'a str,
    /// When it finished, if it has.
    pub finished_at: Option<&'a str>,
    /// Wall-clock duration of the outbound call, if finished.
    pub duration_ms: Option<f64>,
    /// Bridge or authorization error code, if it failed.
    pub error_code: Option<i64>,
}

/// One hook event, as `a2a_hook_events` keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct HookEvent<'a> {
    /// The call the event belongs to.
    pub call_id: &'a str,
    /// Org.
    pub org_id: &'a str,
    /// `pre-verb`, `post-verb` or `verb-error`.
    pub phase: &'a str,
    /// Canonical tool name.
    pub verb: &'a str,
    /// The whole event as published (JSON text).
    pub event: String,
    /// When it was emitted (RFC 3339).
    pub emitted_at: &'a str,
}

/// The cost of one finished call, as `a2a_cost_events` keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostEvent<'a> {
    /// The call.
    pub call_id: &'a str,
    /// Org.
    pub org_id: &'a str,
    /// Registry row of the peer.
    pub agent_card_id: &'a str,
    /// Canonical tool name.
    pub verb: &'a str,
    /// MCP session.
    pub session_id: &'a str,
    /// `completed` or `failed`.
    pub outcome: &'a str,
    /// Wall-clock duration of the outbound call.
    pub duration_ms: f64,
    /// Request body size.
    pub request_bytes: usize,
    /// Response body size.
    pub response_bytes: usize,
    /// When the call finished (RFC 3339).
    pub emitted_at: &'a str,
}

fn text(s: &str) -> Value {
    Value::Text(s.to_string())
}

/// Sizes beyond `i64` are clamped (no body is that large).
fn count(n: usize) -> Value {
    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// Inserts a task instance, running or already finished.
pub fn insert_task(t: &TaskInstance<'_>) -> WriteOp {
    WriteOp::Exec {
        sql: INSERT_TASK,
        params: vec![
            text(t.id),
            text(t.org_id),
            text(t.agent_card_id),
            text(t.verb),
            text(t.skill_id),
            text(t.session_id),
            text(t.status),
            text(t.started_at),
            t.finished_at.map_or(Value::Null, text),
            t.duration_ms.map_or(Value::Null, Value::Real),
            t.error_code.map_or(Value::Null, Value::Int),
        ],
    }
}

/// Finishes the task instance `id` with `status`.
pub fn finish_task(id: &str, status: &str, finished_at: &str, duration_ms: f64) -> WriteOp {
    WriteOp::Exec {
        sql: FINISH_TASK,
        params: vec![
            text(id),
            text(status),
            text(finished_at),
            Value::Real(duration_ms),
        ],
    }
}

/// Notes the error code of the task instance `id`.
pub fn set_task_error(id: &str, code: i64) -> WriteOp {
    WriteOp::Exec {
        sql: TASK_ERROR,
        params: vec![text(id), Value::Int(code)],
    }
}

/// Appends a hook event.
pub fn insert_event(e: HookEvent<'_>) -> WriteOp {
    WriteOp::Exec {
        sql: INSERT_EVENT,
        params: vec![
            text(e.call_id),
            text(e.org_id),
            text(e.phase),
            text(e.verb),
            Value::Text(e.event),
            text(e.emitted_at),
        ],
    }
}

/// Inserts the cost of a finished call.
pub fn insert_cost(c: &CostEvent<'_>) -> WriteOp {
    WriteOp::Exec {
        sql: INSERT_COST,
        params: vec![
            text(c.call_id),
            text(c.org_id),
            text(c.agent_card_id),
            text(c.verb),
            text(c.session_id),
            text(c.outcome),
            Value::Real(c.duration_ms),
            count(c.request_bytes),
            count(c.response_bytes),
            text(c.emitted_at),
        ],
    }
}

/// Deletes the rows emitted before `?1`, per table.
const PRUNE_OLD: [&str; 3] = [
    "DELETE FROM a2a_task_instances WHERE started_at < ?1",
    "DELETE FROM a2a_hook_events WHERE emitted_at < ?1",
    "DELETE FROM a2a_cost_events WHERE emitted_at < ?1",
];

/// Deletes the oldest rows beyond the newest `?1`, per table.
const PRUNE_BEYOND: [&str; 3] = [
    "DELETE FROM a2a_task_instances WHERE id <=
         (SELECT id FROM a2a_task_instances ORDER BY id DESC LIMIT 1 OFFSET ?1)",
    "DELETE FROM a2a_hook_events WHERE seq <=
         (SELECT seq FROM a2a_hook_events ORDER BY seq DESC LIMIT 1 OFFSET ?1)",
    "DELETE FROM a2a_cost_events WHERE call_id <=
         (SELECT call_id FROM a2a_cost_events ORDER BY call_id DESC LIMIT 1 OFFSET ?1)",
];

/// The writes that bound the three tables: rows emitted before `before`
/// (RFC 3339), then all but the newest `max_rows` of each.
pub fn prune_ops(before: &str, max_rows: u64) -> Vec<WriteOp> {
    let keep = Value::Int(i64::try_from(max_rows.max(1)).unwrap_or(i64::MAX));
    let old = PRUNE_OLD.into_iter().map(|sql| WriteOp::Exec {
        sql,
        params: vec![text(before)],
    });
    let beyond = PRUNE_BEYOND.into_iter().map(|sql| WriteOp::Exec {
        sql,
        params: vec![keep.clone()],
    });
    old.chain(beyond).collect()
}

/// One registered peer's bridged calls, over the rows kept.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerLoad {
    /// Org.
    pub org_id: String,
    /// The peer's slug.
    pub peer: String,
    /// Calls started and not finished.
    pub running: i64,
    /// Calls that completed.
    pub completed: i64,
    /// Calls that failed.
    pub failed: i64,
    /// Calls Cedar denied (nothing sent).
    pub denied: i64,
    /// Mean duration of the finished calls, in milliseconds (0: none).
    pub mean_ms: f64,
    /// Request bytes sent.
    pub request_bytes: i64,
    /// Response bytes received.
    pub response_bytes: i64,
    /// The last `verb-error` event of the peer (its JSON), if any.
    pub last_error: Option<String>,
}

/// Every registered peer's load, by org then slug (peers without calls
/// included, at zero).
const PEER_LOAD: &str = "SELECT c.org_id, c.slug,
        CAST(COALESCE(SUM(CASE WHEN t.status = 'running' THEN 1 ELSE 0 END), 0) AS BIGINT),
        CAST(COALESCE(SUM(CASE WHEN t.status = 'completed' THEN 1 ELSE 0 END), 0) AS BIGINT),
        CAST(COALESCE(SUM(CASE WHEN t.status = 'failed' THEN 1 ELSE 0 END), 0) AS BIGINT),
        CAST(COALESCE(SUM(CASE WHEN t.status = 'denied' THEN 1 ELSE 0 END), 0) AS BIGINT),
        CAST(COALESCE(AVG(t.duration_ms), 0) AS DOUBLE PRECISION),
        CAST(COALESCE((SELECT SUM(e.request_bytes) FROM a2a_cost_events e
                        WHERE e.agent_card_id = c.id), 0) AS BIGINT),
        CAST(COALESCE((SELECT SUM(e.response_bytes) FROM a2a_cost_events e
                        WHERE e.agent_card_id = c.id), 0) AS BIGINT),
        (SELECT h.event FROM a2a_hook_events h
          WHERE h.org_id = c.org_id AND h.phase = 'verb-error'
            AND substr(h.verb, 1, length(c.slug) + 1) = c.slug || '.'
          ORDER BY h.seq DESC LIMIT 1)
     FROM agent_cards c LEFT JOIN a2a_task_instances t ON t.agent_card_id = c.id
     GROUP BY c.org_id, c.id, c.slug
     ORDER BY c.org_id, c.slug";

/// Every registered peer's load over the rows kept.
pub fn peer_load(conn: &mut Conn) -> Result<Vec<PeerLoad>, StoreError> {
    conn.query_map(PEER_LOAD, params![], |r| {
        Ok(PeerLoad {
            org_id: r.get(0)?,
            peer: r.get(1)?,
            running: r.get(2)?,
            completed: r.get(3)?,
            failed: r.get(4)?,
            denied: r.get(5)?,
            mean_ms: r.get(6)?,
            request_bytes: r.get(7)?,
            response_bytes: r.get(8)?,
            last_error: r.get(9)?,
        })
    })
}
