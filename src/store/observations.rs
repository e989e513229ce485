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

/// The best `limit` observations of a project for `query`, best first.
pub fn search(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
    query: &str,
    limit: usize,
) -> Result<Vec<ObservationHit>, StoreError> {
    let (sql, q) = match conn.backend() {
        Backend::Sqlite => (
            // bm25() is lower-is-better: negate it into the score.
            "SELECT o.id, o.content, o.type, o.confidence, o.created_at, -bm25(observations_fts) AS score
             FROM observations_fts
             JOIN observations o ON o.seq = observations_fts.rowid
             WHERE observations_fts MATCH ?1 AND o.org_id = ?2 AND o.project_id = ?3
             ORDER BY score DESC, o.seq DESC
             LIMIT ?4",
            fts_query(query),
        ),
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
