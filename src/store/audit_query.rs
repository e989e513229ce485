//! Filtered reads of the decision trail for auditors: `GET /admin/decisions`
//! (cursor pagination by `seq`), `audit replay`, `audit export`, and the
//! time → seq resolution behind `audit verify --since/--until`.

use super::db::{Backend, Conn, Value as SqlValue};
use crate::params;
use serde::Deserialize;

use super::StoreError;
use super::decisions::{StoredDecision, row_to_decision};

/// Which decisions to read. Every field narrows; `None` means any.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionFilter {
    /// Org id.
    pub org: Option<String>,
    /// Session id.
    pub session: Option<String>,
    /// Principal uid, e.g. `Gateway::Agent::"claude"`.
    pub principal: Option<String>,
    /// Action name, e.g. `call_tool`.
    pub action: Option<String>,
    /// Resource uid.
    pub resource: Option<String>,
    /// `allow` or `deny`.
    pub decision: Option<String>,
    /// Earliest time (RFC 3339, inclusive).
    pub since: Option<String>,
    /// Latest time (RFC 3339, exclusive).
    pub until: Option<String>,
    /// W3C trace id (32 hex digits): decisions of requests in that trace,
    /// as their notes name it (the `traceId` of the gateway's span, else
    /// the caller's `traceparent`), read through the trace index
    /// (`decision_traces`, migration 46).
    pub trace: Option<String>,
    /// Only the decisions of this decision application (actions
    /// `authzen:<application>:…`).
    pub application: Option<String>,
}

/// Read order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Oldest first.
    #[default]
    Asc,
    /// Newest first.
    Desc,
}

/// Why a decision filter can never match (answered as a usage error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// `decision` is neither `allow` nor `deny`.
    #[error("`decision` must be `allow` or `deny`, not `{0}`")]
    Decision(String),
    /// `action` names no gateway action.
    #[error("unknown action `{0}`")]
    Action(String),
    /// `trace` is not a W3C trace id.
    #[error("`trace` must be a trace id of 32 hex digits, not `{0}`")]
    Trace(String),
    /// `application` cannot name a decision application.
    #[error("`application` must be {rule}, not `{0}`", rule = crate::ids::APP_NAME_RULE)]
    Application(String),
    /// `since` or `until` is not RFC 3339.
    #[error("`{name}` must be an RFC 3339 time, not `{text}`")]
    Time {
        /// `since` or `until`.
        name: &'static str,
        /// The text as given.
        text: String,
    },
}

impl DecisionFilter {
    /// Rejects values that can never match (a typo should not look like
    /// "no decisions") and writes times the way the trail stores them
    /// (UTC), so they compare as text.
    pub fn normalized(mut self) -> Result<Self, FilterError> {
        if let Some(d) = &self.decision
            && d != "allow"
            && d != "deny"
        {
            return Err(FilterError::Decision(d.clone()));
        }
        if let Some(a) = &self.action
            && crate::policy::Action::from_name(a).is_none()
            && !a.starts_with(super::decisions::OPERATOR_ACTION_PREFIX)
            && !a.starts_with(super::decisions::AUTHZEN_ACTION_PREFIX)
        {
            return Err(FilterError::Action(a.clone()));
        }
        if let Some(trace) = &mut self.trace {
            let valid = trace.len() == 32
                && trace.bytes().all(|b| b.is_ascii_hexdigit())
                && trace.bytes().any(|b| b != b'0');
            if !valid {
                return Err(FilterError::Trace(trace.clone()));
            }
            trace.make_ascii_lowercase();
        }
        if let Some(app) = &self.application
            && !crate::ids::valid_app_name(app)
        {
            return Err(FilterError::Application(app.clone()));
        }
        for (name, t) in [("since", &mut self.since), ("until", &mut self.until)] {
            if let Some(text) = t {
                let parsed = crate::ids::parse_rfc3339(text).map_err(|_| FilterError::Time {
                    name,
                    text: text.clone(),
                })?;
                *text = crate::ids::rfc3339(parsed);
            }
        }
        Ok(self)
    }

    fn clauses(&self) -> (Vec<String>, Vec<SqlValue>) {
        let mut sql = Vec::new();
        let mut args: Vec<SqlValue> = Vec::new();
        let mut eq = |col: &str, v: &Option<String>, op: &str| {
            if let Some(v) = v {
                args.push(SqlValue::Text(v.clone()));
                sql.push(format!("{col} {op} ?{}", args.len()));
            }
        };
        eq("org_id", &self.org, "=");
        eq("session_id", &self.session, "=");
        eq("principal", &self.principal, "=");
        eq("action", &self.action, "=");
        eq("resource", &self.resource, "=");
        eq("decision", &self.decision, "=");
        eq("time", &self.since, ">=");
        eq("time", &self.until, "<");
        if let Some(trace) = &self.trace {
            // By key in the trace index (migration 46), not a scan of notes.
            args.push(SqlValue::Text(trace.clone()));
            sql.push(format!(
                "seq IN (SELECT seq FROM decision_traces WHERE trace_id = ?{})",
                args.len()
            ));
        }
        if let Some(app) = &self.application {
            // An exact prefix: `LIKE` would read `_` in a name as a
            // wildcard (and ignore case on SQLite). The length is ours.
            let prefix = format!("{}{app}:", super::decisions::AUTHZEN_ACTION_PREFIX);
            sql.push(format!(
                "substr(action, 1, {}) = ?{}",
                prefix.len(),
                args.len() + 1
            ));
            args.push(SqlValue::Text(prefix));
        }
        (sql, args)
    }
}

/// Up to `limit` decisions matching `filter` strictly after (ascending) or
/// before (descending) the `cursor` seq.
pub fn page_filtered(
    conn: &mut Conn,
    filter: &DecisionFilter,
    cursor: Option<i64>,
    order: Order,
    limit: usize,
) -> Result<Vec<StoredDecision>, StoreError> {
    let (sql, args) = page_sql(filter, cursor, order, limit, super::decisions::COLUMNS);
    let bound: Vec<_> = args.iter().map(SqlValue::as_param).collect();
    conn.query_map(&sql, &bound, row_to_decision)
}

/// The steps of the backend's plan for a page of `filter` (diagnostics,
/// and the tests that hold the trail's filters to their indexes). On
/// PostgreSQL sequential scans are priced out first, so the plan is the
/// one a large trail gets, not the one a handful of rows gets.
pub fn plan_filtered(conn: &mut Conn, filter: &DecisionFilter) -> Result<Vec<String>, StoreError> {
    let (sql, args) = page_sql(filter, None, Order::Asc, 100, "seq");
    let bound: Vec<_> = args.iter().map(SqlValue::as_param).collect();
    match conn.backend() {
        Backend::Sqlite => conn.query_map(&format!("EXPLAIN QUERY PLAN {sql}"), &bound, |r| {
            r.get::<String>(3)
        }),
        Backend::Postgres => conn.transaction(|c| {
            c.execute_batch("SET LOCAL enable_seqscan = off")?;
            c.query_map(&format!("EXPLAIN {sql}"), &bound, |r| r.get::<String>(0))
        }),
    }
}

/// [`page_filtered`] in ascending order with only the columns replay uses
/// (`session_id`, `outcome`, `prev_hash` and `hash` are left empty).
pub fn replay_page(
    conn: &mut Conn,
    filter: &DecisionFilter,
    cursor: Option<i64>,
    limit: usize,
) -> Result<Vec<StoredDecision>, StoreError> {
    let (sql, args) = page_sql(
        filter,
        cursor,
        Order::Asc,
        limit,
        super::decisions::REPLAY_COLUMNS,
    );
    let bound: Vec<_> = args.iter().map(SqlValue::as_param).collect();
    conn.query_map_owned(&sql, &bound, super::decisions::replay_row)
}

/// The query of a page of `columns` after (or before) `cursor`.
fn page_sql(
    filter: &DecisionFilter,
    cursor: Option<i64>,
    order: Order,
    limit: usize,
    columns: &str,
) -> (String, Vec<SqlValue>) {
    let (mut clauses, mut args) = filter.clauses();
    if let Some(c) = cursor {
        args.push(SqlValue::Int(c));
        let op = if order == Order::Asc { ">" } else { "<" };
        clauses.push(format!("seq {op} ?{}", args.len()));
    }
    args.push(SqlValue::Int(limit as i64));
    let where_sql = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    let dir = if order == Order::Asc { "ASC" } else { "DESC" };
    let sql = format!(
        "SELECT {columns} FROM decisions {where_sql} ORDER BY seq {dir} LIMIT ?{}",
        args.len()
    );
    (sql, args)
}

/// The seq range `[from, to]` of decisions in a time window (`None` when
/// the window holds none).
pub fn seq_range(
    conn: &mut Conn,
    since: Option<&str>,
    until: Option<&str>,
) -> Result<Option<(i64, i64)>, StoreError> {
    let range: Option<(Option<i64>, Option<i64>)> = conn.query_opt(
        "SELECT MIN(seq), MAX(seq) FROM decisions
         WHERE (CAST(?1 AS TEXT) IS NULL OR time >= ?1) AND (CAST(?2 AS TEXT) IS NULL OR time < ?2)",
        params![since, until],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(match range {
        Some((Some(a), Some(b))) => Some((a, b)),
        _ => None,
    })
}

/// Every entity snapshot with one of `hashes`.
pub fn snapshots(conn: &mut Conn, hashes: &[String]) -> Result<Vec<(String, String)>, StoreError> {
    let mut out = Vec::with_capacity(hashes.len());
    for h in hashes {
        if let Some(text) = conn.query_opt(
            "SELECT entities FROM entity_snapshots WHERE hash = ?1",
            params![h],
            |r| r.get::<String>(0),
        )? {
            out.push((h.clone(), text));
        }
    }
    Ok(out)
}

/// A recorded policy set: `(schema_path, schema_text, files JSON)`.
pub fn policy_set(
    conn: &mut Conn,
    hash: &str,
) -> Result<Option<(String, String, String)>, StoreError> {
    conn.query_opt(
        "SELECT schema_path, schema_text, files FROM policy_sets WHERE hash = ?1",
        params![hash],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
}
