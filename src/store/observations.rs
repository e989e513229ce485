//! Observations (agent memory) per project, with ranked full-text search
//! (SQLite: FTS5, BM25, Porter stemming; PostgreSQL: an English `tsvector`
//! with a GIN index, ranked by `ts_rank_cd`).

use super::db::{Backend, Conn};
use crate::params;
use serde::Serialize;

use super::StoreError;

/// Most search terms taken from one query.
const MAX_TERMS: usize = 32;

/// An observation to store.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewObservation {
    /// UUIDv7.
    pub id: String,
    /// Owning org.
    pub org_id: String,
    /// Owning project.
    pub project_id: String,
    /// Session that stored it.
    pub session_id: String,
    /// Agent that stored it.
    pub agent_id: String,
    /// The text.
    pub content: String,
    /// Optional kind (pattern, decision, constraint, …).
    #[serde(rename = "type")]
    pub obs_type: Option<String>,
    /// Optional confidence in 0..=1.
    pub confidence: Option<f64>,
    /// RFC 3339 creation time.
    pub created_at: String,
}

/// A search hit.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservationHit {
    /// Observation id.
    pub id: String,
    /// The text.
    pub content: String,
    /// Its kind, if given.
    #[serde(rename = "type")]
    pub obs_type: Option<String>,
    /// Its confidence, if given.
    pub confidence: Option<f64>,
    /// When it was stored.
    pub created_at: String,
    /// Relevance (higher is better): negated BM25 (SQLite) or
    /// `ts_rank_cd` (PostgreSQL); comparable only within one backend.
    pub score: f64,
}

/// Inserts one observation (inside the writer's transaction).
pub fn insert(conn: &mut Conn, o: &NewObservation) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO observations (id, org_id, project_id, session_id, agent_id, content, type, confidence, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
        o.id,
        o.org_id,
        o.project_id,
        o.session_id,
        o.agent_id,
        o.content,
        o.obs_type,
        o.confidence,
        &o.created_at
    ],
    )?;
    Ok(())
}

/// English function words dropped from queries: they match nearly every
/// observation, so OR-ing them in only makes BM25 score the whole project.
const STOP_WORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from",
    "how", "i", "if", "in", "into", "is", "it", "its", "of", "on", "or", "our", "so", "that",
    "the", "their", "this", "to", "under", "us", "was", "we", "what", "when", "where", "which",
    "who", "why", "with", "you",
];

/// Turns free text into an FTS5 query: every word becomes a quoted term,
/// terms are OR-ed, so punctuation or FTS syntax in the input is inert.
/// Stop words are dropped unless nothing else is left. `None` when the
/// text has no searchable word.
pub fn fts_query(text: &str) -> Option<String> {
    Some(
        query_terms(text)?
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(" OR "),
    )
}

/// The same terms as a PostgreSQL `to_tsquery` text: OR-ed words, each
/// made only of letters and digits, so no tsquery syntax gets through.
pub fn ts_query(text: &str) -> Option<String> {
    Some(query_terms(text)?.join(" | "))
}

/// The distinct lower-cased words of `text` (at most [`MAX_TERMS`]), stop
/// words dropped unless nothing else is left.
fn query_terms(text: &str) -> Option<Vec<String>> {
    let mut terms: Vec<String> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let w = word.to_lowercase();
        if w.is_empty() || terms.contains(&w) {
            continue;
        }
        terms.push(w);
        if terms.len() == MAX_TERMS {
            break;
        }
    }
    if terms.is_empty() {
        return None;
    }
    if terms.iter().any(|t| !STOP_WORDS.contains(&t.as_str())) {
        terms.retain(|t| !STOP_WORDS.contains(&t.as_str()));
    }
    Some(terms)
}

/// The SQLite search. bm25() is lower-is-better: it is negated into the
/// score.
///
/// Written so its cached statement is never re-prepared: SQLite marks a
/// parameter whose value the planner looked at, and re-prepares the
/// statement at the next step after that parameter is bound again. Two
/// spots of this query did that on every search: the bare `LIMIT ?4` (the
/// planner reads the bound limit) and `o.org_id = ?2 AND o.project_id = ?3`
/// (weighed against the `(org_id, project_id, seq)` indexes of
/// `observations`). The unary `+` keeps those terms out of index planning
/// and the `CAST` makes the limit an expression read at run time. The plan
/// is the one of the plain form (the FTS5 match drives, each hit is fetched
/// by rowid and filtered, the scores are sorted), which a test checks.
const SQLITE_SEARCH: &str =
    "SELECT o.id, o.content, o.type, o.confidence, o.created_at, -bm25(observations_fts) AS score
     FROM observations_fts
     JOIN observations o ON o.seq = observations_fts.rowid
     WHERE observations_fts MATCH ?1 AND +o.org_id = ?2 AND +o.project_id = ?3
     ORDER BY score DESC, o.seq DESC
     LIMIT CAST(?4 AS INTEGER)";

/// The best `limit` observations of a project for `query`, best first.
pub fn search(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
    query: &str,
    limit: usize,
) -> Result<Vec<ObservationHit>, StoreError> {
    let (sql, q) = match conn.backend() {
        Backend::Sqlite => (SQLITE_SEARCH, fts_query(query)),
        Backend::Postgres => (
            "SELECT o.id, o.content, o.type, o.confidence, o.created_at,
                    CAST(ts_rank_cd(o.search, q) AS DOUBLE PRECISION) AS score
             FROM observations o, to_tsquery('english', ?1) q
             WHERE o.search @@ q AND o.org_id = ?2 AND o.project_id = ?3
             ORDER BY score DESC, o.seq DESC
             LIMIT ?4",
            ts_query(query),
        ),
    };
    let Some(q) = q else {
        return Ok(Vec::new());
    };
    conn.query_map(sql, params![&q, org_id, project_id, limit as i64], |r| {
        Ok(ObservationHit {
            id: r.get(0)?,
            content: r.get(1)?,
            obs_type: r.get(2)?,
            confidence: r.get(3)?,
            created_at: r.get(4)?,
            score: r.get(5)?,
        })
    })
}

/// Number of observations stored for a project.
pub fn count(conn: &mut Conn, org_id: &str, project_id: &str) -> Result<i64, StoreError> {
    conn.query_row(
        "SELECT COUNT(*) FROM observations WHERE org_id = ?1 AND project_id = ?2",
        params![org_id, project_id],
        |r| r.get(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db::{Db, SqliteConn};

    #[test]
    fn a_cached_search_is_not_re_prepared() {
        let mut conn = SqliteConn::open(std::path::Path::new(":memory:")).unwrap();
        crate::store::migrate(&mut conn).unwrap();
        conn.execute_batch("PRAGMA foreign_keys = OFF;").unwrap();
        for (i, text) in ["auth token refresh fails", "token cache", "auth retries"]
            .iter()
            .enumerate()
        {
            let o = NewObservation {
                id: format!("o-{i}"),
                org_id: "acme".into(),
                project_id: "web".into(),
                session_id: "s".into(),
                agent_id: "a".into(),
                content: text.to_string(),
                obs_type: None,
                confidence: None,
                created_at: "2026-11-22T08:00:00.000Z".into(),
            };
            insert(&mut conn, &o).unwrap();
        }
        let hits = |conn: &mut SqliteConn, q: &str, limit: usize| {
            search(conn, "acme", "web", q, limit).unwrap().len()
        };
        assert_eq!(hits(&mut conn, "auth token", 10), 3);
        let before = conn.reprepares(SQLITE_SEARCH).unwrap();
        // Other queries, other limits, other tenants: all from the cache.
        assert_eq!(hits(&mut conn, "auth token", 1), 1);
        assert_eq!(hits(&mut conn, "token", 2), 2);
        assert_eq!(hits(&mut conn, "retries", 50), 1);
        assert_eq!(
            search(&mut conn, "acme", "api", "auth", 5).unwrap().len(),
            0
        );
        assert_eq!(hits(&mut conn, "auth token", 10), 3);
        assert_eq!(conn.reprepares(SQLITE_SEARCH).unwrap(), before);

        let plain = SQLITE_SEARCH
            .replace("+o.", "o.")
            .replace("CAST(?4 AS INTEGER)", "?4");
        let plan = |conn: &mut crate::store::db::Conn, sql: &str| {
            conn.query_map(
                &format!("EXPLAIN QUERY PLAN {sql}"),
                crate::params!["\"auth\"", "acme", "web", 10i64],
                |r| r.get::<String>(3),
            )
            .unwrap()
        };
        let ours = plan(&mut conn, SQLITE_SEARCH);
        assert_eq!(ours, plan(&mut conn, &plain));
        assert!(ours[0].contains("observations_fts"), "{ours:?}");
    }

    #[test]
    fn fts_query_neutralizes_syntax() {
        assert_eq!(
            fts_query("how does SSO work?").as_deref(),
            Some("\"sso\" OR \"work\"")
        );
        assert_eq!(
            fts_query("what is it").as_deref(),
            Some("\"what\" OR \"is\" OR \"it\"")
        );
        assert_eq!(
            fts_query("auth* OR \"x\" NEAR(a b)").as_deref(),
            Some("\"auth\" OR \"x\" OR \"near\" OR \"b\"")
        );
        assert_eq!(fts_query("  ?! "), None);
        assert_eq!(fts_query("Auth auth").as_deref(), Some("\"auth\""));
        assert_eq!(
            ts_query("how does SSO work?").as_deref(),
            Some("sso | work")
        );
        assert_eq!(ts_query("a:* & !b").as_deref(), Some("b"));
    }
}
