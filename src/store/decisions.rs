//! Storage of the decision trail: one row per Cedar decision, chained by
//! SHA-256 so that an edited, inserted or deleted row breaks verification.
//!
//! Every column is stored as the exact text that was hashed, so
//! verification never depends on re-serializing JSON.
//!
//! The oldest records may have been archived and pruned
//! (`retention`): the stored chain then starts after the newest
//! anchor (the seq and hash of the last pruned record), and both the chain
//! head and verification start from it.

use std::sync::atomic::{AtomicU64, Ordering};

use super::db::{Backend, Conn, Row};
use crate::params;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::StoreError;

/// The hash a chain starts from.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Action prefix of the records of operator actions taken in the web
/// console (`console:reload_policies`, `console:approve_tools`): chained
/// like decisions, but not Cedar decisions, so replay skips them.
pub const OPERATOR_ACTION_PREFIX: &str = "console:";

/// Action prefix of the decisions of the AuthZEN decision applications
/// (`authzen:<app>:<action>`, `src/audit/application.rs`): Cedar decisions
/// of another policy set than the gateway's, which the gateway's replay
/// leaves to theirs.
pub const AUTHZEN_ACTION_PREFIX: &str = "authzen:";

/// One decision as handed to the writer (before chaining).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewDecision {
    /// UUIDv7 of the decision (returned to callers in `error.data`).
    pub id: String,
    /// RFC 3339 time of the decision.
    pub time: String,
    /// Org of the session or key, when known.
    pub org_id: Option<String>,
    /// Session the decision was made in, when any.
    pub session_id: Option<String>,
    /// Principal uid, e.g. `Gateway::Agent::"claude"`.
    pub principal: String,
    /// Action name, e.g. `call_tool`.
    pub action: String,
    /// Resource uid.
    pub resource: String,
    /// The Cedar context JSON exactly as decided.
    pub context: String,
    /// SHA-256 of the entity slice JSON.
    pub entities_hash: String,
    /// The entity slice JSON (stored once per hash).
    #[serde(skip)]
    pub entities: Option<std::sync::Arc<str>>,
    /// Hash of the policy bundle that decided.
    pub policy_hash: String,
    /// `allow` or `deny`.
    pub decision: String,
    /// JSON array of determining policy ids.
    pub reasons: String,
    /// JSON array of error strings.
    pub errors: String,
    /// JSON outcome of the work the decision allowed (or why none ran).
    pub outcome: String,
    /// JSON notes (e.g. a caller-supplied tenant context that was replaced).
    pub notes: String,
}

/// A stored, chained decision (also one line of a JSONL export, which
/// deserializes back into it).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredDecision {
    /// Position in the chain (1-based, no gaps).
    pub seq: i64,
    /// The decision.
    #[serde(flatten)]
    pub record: NewDecision,
    /// Hash of the previous row.
    pub prev_hash: String,
    /// Hash of this row.
    pub hash: String,
}

/// Length-prefixed SHA-256 over `prev_hash`, `seq` and every column.
pub fn chain_hash(prev_hash: &str, seq: i64, d: &NewDecision) -> String {
    let mut h = Sha256::new();
    let mut field = |s: &str| {
        h.update((s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    field("cedargate-decision-v1");
    field(prev_hash);
    field(&seq.to_string());
    field(&d.id);
    field(&d.time);
    field(d.org_id.as_deref().unwrap_or("\u{0}"));
    field(d.session_id.as_deref().unwrap_or("\u{0}"));
    field(&d.principal);
    field(&d.action);
    field(&d.resource);
    field(&d.context);
    field(&d.entities_hash);
    field(&d.policy_hash);
    field(&d.decision);
    field(&d.reasons);
    field(&d.errors);
    field(&d.outcome);
    field(&d.notes);
    hex::encode(h.finalize())
}

/// Where the chain stands: its head, and where its stored part starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainHead {
    /// The last record's seq (the newest anchor's when every record was
    /// pruned; 0 for an empty chain).
    pub seq: i64,
    /// Its hash (`GENESIS_HASH` for an empty chain).
    pub hash: String,
    /// The newest anchor: `(seq, hash)` of the last pruned record,
    /// `(0, GENESIS_HASH)` when nothing was ever pruned.
    pub anchor: (i64, String),
}

/// The head of the chain and its newest anchor. The head is read as the
/// newest row (`ORDER BY seq DESC LIMIT 1`, seq selected), never as
/// `max(seq)`: on SQLite `decisions` is the view of two tables, which
/// SQLite answers by merging their newest rows for the first form and by
/// scanning the whole trail for the second.
pub fn chain_head(conn: &mut Conn) -> Result<ChainHead, StoreError> {
    let newest = conn.query_opt(
        "SELECT seq, hash FROM decisions ORDER BY seq DESC LIMIT 1",
        params![],
        |r| Ok((r.get::<i64>(0)?, r.get::<String>(1)?)),
    )?;
    let anchor = conn
        .query_opt(
            "SELECT seq, hash FROM decision_anchors ORDER BY seq DESC LIMIT 1",
            params![],
            |r| Ok((r.get::<i64>(0)?, r.get::<String>(1)?)),
        )?
        .unwrap_or_else(|| (0, GENESIS_HASH.to_string()));
    let (seq, hash) = newest.unwrap_or_else(|| anchor.clone());
    Ok(ChainHead { seq, hash, anchor })
}

/// Moves the trail's recent records (SQLite's `decisions_recent`, which
/// has no secondary index) into the indexed table, in the transaction the
/// caller opened. The copy goes first, then the recent table is emptied:
/// its delete guard (migration 18) lets a record go once the indexed table
/// holds it with the same hash. See `src/store/README.md`, "The trail's
/// recent records" and "Guards on the trail".
pub fn move_recent(conn: &mut Conn) -> Result<(), StoreError> {
    conn.execute(
        &format!(
            "INSERT INTO decisions_indexed ({COLUMNS})
             SELECT {COLUMNS} FROM decisions_recent ORDER BY seq"
        ),
        params![],
    )?;
    conn.execute("DELETE FROM decisions_recent", params![])?;
    Ok(())
}

/// How many records wait in SQLite's `decisions_recent`.
pub fn recent_count(conn: &mut Conn) -> Result<u64, StoreError> {
    conn.query_row("SELECT count(*) FROM decisions_recent", params![], |r| {
        r.get::<i64>(0)
    })
    .map(|n| u64::try_from(n).unwrap_or(0))
}

/// Stores an entity slice under its hash (idempotent).
pub fn insert_snapshot(conn: &mut Conn, hash: &str, entities: &str) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO entity_snapshots (hash, entities) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
        params![hash, entities],
    )?;
    Ok(())
}

/// Appends one decision at `seq` after `prev_hash`; returns its hash. The
/// caller stores the decision's entity snapshot ([`insert_snapshot`]).
///
/// On SQLite the row goes straight into `decisions_recent`, where the
/// view's insert trigger would put it: the same row, without running a
/// trigger program per record (about a microsecond each).
pub fn insert(
    conn: &mut Conn,
    seq: i64,
    prev_hash: &str,
    d: &NewDecision,
) -> Result<String, StoreError> {
    let hash = chain_hash(prev_hash, seq, d);
    let sql = match conn.backend() {
        Backend::Sqlite => INSERT_RECENT,
        Backend::Postgres => INSERT_TRAIL,
    };
    conn.execute(
        sql,
        params![
            seq,
            d.id,
            d.time,
            d.org_id,
            d.session_id,
            d.principal,
            d.action,
            d.resource,
            d.context,
            d.entities_hash,
            d.policy_hash,
            d.decision,
            d.reasons,
            d.errors,
            d.outcome,
            d.notes,
            prev_hash,
            &hash
        ],
    )?;
    if let Some(trace) = trace_of(&d.notes) {
        conn.execute(
            "INSERT INTO decision_traces (trace_id, seq) VALUES (?1, ?2)",
            params![trace, seq],
        )?;
    }
    Ok(hash)
}

/// The W3C trace id a record's notes name, lowercase: the `traceId` of
/// the gateway's span, else the trace of the caller's `traceparent`
/// (what `decision_traces` indexes, migration 46).
pub fn trace_of(notes: &str) -> Option<String> {
    // Most records are untraced: no parse for them.
    if !notes.contains("\"trace") {
        return None;
    }
    let doc: serde_json::Value = serde_json::from_str(notes).ok()?;
    let from_span = doc.get("traceId").and_then(serde_json::Value::as_str);
    let from_caller = || {
        let traceparent = doc.get("traceparent")?.as_str()?;
        traceparent.strip_prefix("00-")?.get(..32)
    };
    let id = from_span.or_else(from_caller)?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_ascii_lowercase())
}

/// An insert of one record into `$table`, every column bound.
macro_rules! insert_into {
    ($table:literal) => {
        concat!(
            "INSERT INTO ",
            $table,
            " (seq, id, time, org_id, session_id, principal, action, resource, context,
               entities_hash, policy_hash, decision, reasons, errors, outcome, notes,
               prev_hash, hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                     ?17, ?18)"
        )
    };
}

/// An insert into SQLite's table of recent records.
const INSERT_RECENT: &str = insert_into!("decisions_recent");
/// An insert into PostgreSQL's one trail table.
const INSERT_TRAIL: &str = insert_into!("decisions");

pub(crate) const COLUMNS: &str =
    "seq, id, time, org_id, session_id, principal, action, resource, context,
    entities_hash, policy_hash, decision, reasons, errors, outcome, notes, prev_hash, hash";

pub(crate) fn row_to_decision(r: &Row) -> Result<StoredDecision, StoreError> {
    Ok(StoredDecision {
        seq: r.get(0)?,
        record: NewDecision {
            id: r.get(1)?,
            time: r.get(2)?,
            org_id: r.get(3)?,
            session_id: r.get(4)?,
            principal: r.get(5)?,
            action: r.get(6)?,
            resource: r.get(7)?,
            context: r.get(8)?,
            entities_hash: r.get(9)?,
            entities: None,
            policy_hash: r.get(10)?,
            decision: r.get(11)?,
            reasons: r.get(12)?,
            errors: r.get(13)?,
            outcome: r.get(14)?,
            notes: r.get(15)?,
        },
        prev_hash: r.get(16)?,
        hash: r.get(17)?,
    })
}

/// The columns replay reads: what it decides with and reports, without
/// the chain links, the session and the outcome (a fifth of the bytes of
/// a row, which replay would copy and drop).
pub(crate) const REPLAY_COLUMNS: &str = "seq, id, time, org_id, principal, action, resource,
    context, entities_hash, policy_hash, decision, reasons, errors, notes";

/// A row of [`REPLAY_COLUMNS`], its strings moved rather than copied; the
/// columns not read are left empty.
pub(crate) fn replay_row(mut r: Row) -> Result<StoredDecision, StoreError> {
    Ok(StoredDecision {
        seq: r.get(0)?,
        record: NewDecision {
            id: r.take_text(1)?,
            time: r.take_text(2)?,
            org_id: r.take_opt_text(3)?,
            session_id: None,
            principal: r.take_text(4)?,
            action: r.take_text(5)?,
            resource: r.take_text(6)?,
            context: r.take_text(7)?,
            entities_hash: r.take_text(8)?,
            entities: None,
            policy_hash: r.take_text(9)?,
            decision: r.take_text(10)?,
            reasons: r.take_text(11)?,
            errors: r.take_text(12)?,
            outcome: String::new(),
            notes: r.take_text(13)?,
        },
        prev_hash: String::new(),
        hash: String::new(),
    })
}

/// The last `n` decisions, oldest first.
pub fn tail(conn: &mut Conn, n: usize) -> Result<Vec<StoredDecision>, StoreError> {
    conn.query_map(
        &format!(
            "SELECT {COLUMNS} FROM (SELECT * FROM decisions ORDER BY seq DESC LIMIT ?1) AS newest ORDER BY seq ASC"
        ),
        params![n as i64],
        row_to_decision,
    )
}

/// One decision by id.
pub fn get(conn: &mut Conn, id: &str) -> Result<Option<StoredDecision>, StoreError> {
    conn.query_opt(
        &format!("SELECT {COLUMNS} FROM decisions WHERE id = ?1"),
        params![id],
        row_to_decision,
    )
}

/// Decisions with `seq > after`, oldest first, at most `limit`.
pub fn page(conn: &mut Conn, after: i64, limit: usize) -> Result<Vec<StoredDecision>, StoreError> {
    conn.query_map(
        &format!("SELECT {COLUMNS} FROM decisions WHERE seq > ?1 ORDER BY seq LIMIT ?2"),
        params![after, limit as i64],
        row_to_decision,
    )
}

/// The stored entity slice JSON for a hash.
pub fn entity_snapshot(conn: &mut Conn, hash: &str) -> Result<Option<String>, StoreError> {
    conn.query_opt(
        "SELECT entities FROM entity_snapshots WHERE hash = ?1",
        params![hash],
        |r| r.get(0),
    )
}

/// What `audit verify` found.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// Rows checked.
    pub checked: i64,
    /// Last seq seen.
    pub last_seq: i64,
    /// Hash of the last row (the chain head): keep it elsewhere to detect
    /// a later truncation of the newest rows.
    pub head_hash: String,
    /// Problems found (empty: the chain is intact).
    pub problems: Vec<String>,
}

/// Re-computes every row's hash and checks the links, the sequence and the
/// texts the rows name by hash: entity snapshots and policy sets
/// (`trail_texts.rs`).
pub fn verify(conn: &mut Conn) -> Result<VerifyReport, StoreError> {
    verify_range(conn, 1, i64::MAX)
}

/// [`verify`] over the rows `from_seq..=to_seq`: the first row must link to
/// the stored row before it (whose own hash is recomputed too), so a range
/// check still detects an edit at its boundary. Rows behind the newest
/// anchor were pruned: a range starts after it at the earliest, and the
/// first stored row must link to the anchor's hash.
pub fn verify_range(
    conn: &mut Conn,
    from_seq: i64,
    to_seq: i64,
) -> Result<VerifyReport, StoreError> {
    verify_range_counted(conn, from_seq, to_seq, &AtomicU64::new(0))
}

/// [`verify_range`], adding each record it checked to `checked` as it
/// goes (what a progress bar reads).
pub fn verify_range_counted(
    conn: &mut Conn,
    from_seq: i64,
    to_seq: i64,
    checked: &AtomicU64,
) -> Result<VerifyReport, StoreError> {
    let (anchor_seq, anchor_hash) = chain_head(conn)?.anchor;
    let from_seq = from_seq.max(anchor_seq + 1);
    let mut report = VerifyReport {
        checked: 0,
        last_seq: anchor_seq,
        head_hash: anchor_hash.clone(),
        problems: Vec::new(),
    };
    let mut prev_hash = anchor_hash;
    if from_seq > anchor_seq + 1 {
        match page(conn, from_seq - 2, 1)?.into_iter().next() {
            Some(before) if before.seq == from_seq - 1 => {
                if chain_hash(&before.prev_hash, before.seq, &before.record) != before.hash {
                    report.problems.push(format!(
                        "seq {}: contents do not match its hash (edited row)",
                        before.seq
                    ));
                }
                prev_hash = before.hash;
            }
            _ => report.problems.push(format!(
                "seq {}: the row before the range is missing",
                from_seq - 1
            )),
        }
    }
    let mut expected_seq = from_seq;
    let mut after = from_seq - 1;
    let mut texts = super::trail_texts::NamedTexts::default();
    loop {
        let rows = page(conn, after, 2048)?;
        if rows.is_empty() {
            break;
        }
        for row in rows {
            if row.seq > to_seq {
                return Ok(report);
            }
            after = row.seq;
            report.checked += 1;
            checked.fetch_add(1, Ordering::Relaxed);
            report.last_seq = row.seq;
            if row.seq != expected_seq {
                report.problems.push(format!(
                    "seq {}: expected seq {expected_seq}; rows {expected_seq}..{} are missing",
                    row.seq,
                    row.seq - 1
                ));
            }
            if row.prev_hash != prev_hash {
                report.problems.push(format!(
                    "seq {}: prev_hash does not match the hash of the row before it",
                    row.seq
                ));
            }
            let recomputed = chain_hash(&row.prev_hash, row.seq, &row.record);
            if recomputed != row.hash {
                report.problems.push(format!(
                    "seq {} (decision `{}`): contents do not match its hash (edited row)",
                    row.seq, row.record.id
                ));
            }
            texts.check(
                conn,
                row.seq,
                &row.record.entities_hash,
                &row.record.policy_hash,
                &mut report.problems,
            )?;
            prev_hash = row.hash.clone();
            report.head_hash = row.hash.clone();
            expected_seq = row.seq + 1;
        }
    }
    Ok(report)
}
