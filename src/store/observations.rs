//! Observations (agent memory) per project, with ranked full-text search
//! ranked by BM25 on both backends (SQLite: FTS5 with Porter stemming;
//! PostgreSQL: an English `tsvector` and a per-term btree kept beside it).
//!
//! **Recall reads a bounded candidate set.** Ranking every match and
//! sorting costs about 1 µs per match (420 ms for a term in half of a
//! project of 1M observations). A search instead reads, for each query
//! term, only the newest [`per_term_cap`] matches of that term in the
//! project (2,048 in all, split among the terms, at least 64 each), scores
//! those candidates and keeps the best. The cost is bounded by the number
//! of terms, not by the project's size.
//! - SQLite: the FTS5 index carries a `scope` column with one token per
//!   (org, project) ([`scope_token`], migration 10), so `scope : "…" AND
//!   "term"` walks the term's doclist newest first and stops at the bound,
//!   and another project's matches are never read. The candidates are
//!   scored in Rust with FTS5's own `bm25()` formula and inputs: term
//!   frequencies from `highlight()`, row lengths from the `_docsize` table,
//!   row count and average length from the index's averages record, and
//!   each term's document frequency counted over the whole index up to
//!   [`DF_PROBE`] matches (beyond, estimated from how far back in `seq`
//!   those matches reach), counted only for terms with a candidate in the
//!   project (a term with none adds nothing to any score); a term in no
//!   row at all is found so by a forward probe first, since the scoped
//!   newest-first walk sets up a backwards walk of the project's `scope`
//!   phrase in every index segment before finding the word absent, and a
//!   project with no observation at all answers after one index seek
//!   (every FTS5 query costs a lookup per index segment). With no term
//!   cut, the scores are exactly `bm25()`'s (a unit test compares them).
//!   A new observation waits for the index until a recall needs it or 64
//!   wait ([`index_waiting`]; `src/store/README.md`, "Observations wait
//!   for the text index"), so a durable remember writes no index segment.
//! - PostgreSQL: `observation_terms` holds one btree entry per (project,
//!   lexeme, seq) with the lexeme's occurrences in the row and the row's
//!   length, and `recall_scopes` numbers the projects and keeps each one's
//!   row count and token total (migration 13; statement-level triggers
//!   fill both in the observation's own transaction). A term's newest
//!   matches are one backwards range of that btree, read from the index
//!   alone, whatever the term's frequency, in the same statement that
//!   counts its matches up to [`DF_PROBE`]. The candidates are scored in
//!   Rust with the same BM25 as SQLite's, over the project's statistics
//!   (SQLite's are the whole index's). Before, a term's newest matches came
//!   either from walking the project's rows backwards until enough matched
//!   or from the GIN index's whole posting list, and were ranked by
//!   `ts_rank_cd`: a term in a few percent of a 1M project read tens of
//!   thousands of rows either way (p99 145 ms), and `ts_rank_cd`, with no
//!   IDF, weighs a common word like a rare one (nDCG@10 0.21 against
//!   BM25's 0.87 on the relevance set). The price: about ten index entries
//!   per observation (the GIN index stays for `@@`), and one row update of
//!   the project's totals per insert statement, which the writer's chain
//!   lock already serializes.
//!
//! The trade-off: a term with more matches in the project than its bound
//! counts only for its newest matches; an older observation holding it is
//! found through its other terms, or not at all. Agent memory favours the
//! recent, and a query's distinctive (rare) terms are never cut in
//! practice, so the best answers stay candidates; `tests/recall_relevance.rs`
//! measures this (nDCG@10 of the bounded search ≥ the exhaustive one's).
//! Not chosen: a search library such as tantivy (an index per instance
//! would have to be kept coherent with the other instances' writes on a
//! shared PostgreSQL database; this design reads the database, so every
//! instance sees every committed observation at once), and exact top-k
//! with dynamic pruning (neither backend exposes impact-ordered postings).

use std::collections::HashMap;

use super::db::{Backend, Conn, Param, ToParam};
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
    /// Relevance (higher is better): BM25, over the whole index (SQLite)
    /// or the project (PostgreSQL); comparable only within one backend.
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

/// Adds every observation not yet in SQLite's full-text index to it, in
/// the caller's transaction; the number indexed. A durable commit stores
/// an observation without indexing it (migration 15: a new FTS5 segment is
/// four or five pages the commit would write and sync); the writer calls
/// this right after, off the answer's path, and opening the store calls it
/// for rows a crash left waiting. PostgreSQL indexes in the insert itself:
/// nothing waits there.
pub fn index_waiting(conn: &mut Conn) -> Result<u64, StoreError> {
    if conn.backend() != Backend::Sqlite {
        return Ok(0);
    }
    let indexed = conn.execute(
        "INSERT INTO observations_fts (rowid, content, type, scope)
         SELECT seq, content, coalesce(type, ''),
                'p' || lower(hex(org_id)) || 'x' || lower(hex(project_id)) || 'q'
         FROM observations
         WHERE seq > (SELECT seq FROM observations_fts_upto WHERE id = 1)
         ORDER BY seq",
        params![],
    )?;
    if indexed > 0 {
        conn.execute(
            "UPDATE observations_fts_upto SET seq = (SELECT max(seq) FROM observations) WHERE id = 1",
            params![],
        )?;
    }
    Ok(indexed)
}

/// Rows per statement of [`insert_many`] (9 parameters each, well under
/// either backend's parameter limit).
const INSERT_CHUNK: usize = 256;

/// Inserts many observations with multi-row statements and indexes them,
/// in the caller's transaction: bulk loads (the recall bench, imports),
/// not the request path, which goes through the writer one job at a time.
pub fn insert_many(conn: &mut Conn, rows: &[NewObservation]) -> Result<(), StoreError> {
    for chunk in rows.chunks(INSERT_CHUNK) {
        let values = (0..chunk.len())
            .map(|i| {
                let p = (1..=9)
                    .map(|k| format!("?{}", i * 9 + k))
                    .collect::<Vec<_>>();
                format!("({})", p.join(", "))
            })
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO observations (id, org_id, project_id, session_id, agent_id, content, type, confidence, created_at) VALUES {values}"
        );
        let params: Vec<Param<'_>> = chunk
            .iter()
            .flat_map(|o| {
                [
                    o.id.to_param(),
                    o.org_id.to_param(),
                    o.project_id.to_param(),
                    o.session_id.to_param(),
                    o.agent_id.to_param(),
                    o.content.to_param(),
                    o.obs_type.to_param(),
                    o.confidence.to_param(),
                    o.created_at.to_param(),
                ]
            })
            .collect();
        conn.execute(&sql, &params)?;
    }
    index_waiting(conn)?;
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

/// Most candidates one search reads in all (split among its terms).
const CANDIDATE_BUDGET: usize = 2048;

/// Fewest newest matches read per term, however many terms a query has.
const MIN_PER_TERM: usize = 64;

/// Matches counted exactly per term (SQLite) before its document frequency
/// is estimated from how far back that many matches reach.
const DF_PROBE: usize = 4096;

/// BM25 parameters, FTS5's own (`bm25()` in `fts5_aux.c`).
const BM25_K1: f64 = 1.2;
const BM25_B: f64 = 0.75;

/// Newest matches read per term for a query of `terms` terms.
pub fn per_term_cap(terms: usize) -> usize {
    (CANDIDATE_BUDGET / terms.max(1)).max(MIN_PER_TERM)
}

/// The best `limit` observations of a project for `query`, best first:
/// the newest [`per_term_cap`] matches of each term in the project,
/// ranked (see the module doc).
pub fn search(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
    query: &str,
    limit: usize,
) -> Result<Vec<ObservationHit>, StoreError> {
    let Some(terms) = query_terms(query) else {
        return Ok(Vec::new());
    };
    let cap = per_term_cap(terms.len());
    search_terms(conn, org_id, project_id, &terms, limit, cap)
}

/// [`search`] with an explicit number of newest matches read per term.
pub fn search_bounded(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
    query: &str,
    limit: usize,
    per_term: usize,
) -> Result<Vec<ObservationHit>, StoreError> {
    let Some(terms) = query_terms(query) else {
        return Ok(Vec::new());
    };
    search_terms(conn, org_id, project_id, &terms, limit, per_term.max(1))
}

fn search_terms(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
    terms: &[String],
    limit: usize,
    per_term: usize,
) -> Result<Vec<ObservationHit>, StoreError> {
    let mut ranked = match conn.backend() {
        Backend::Sqlite => sqlite_candidates(conn, org_id, project_id, terms, per_term)?,
        Backend::Postgres => postgres_candidates(conn, org_id, project_id, terms, per_term)?,
    };
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
    ranked.truncate(limit);
    fetch_hits(conn, org_id, project_id, &ranked)
}

/// One candidate's term frequencies and length (SQLite scoring).
#[derive(Default)]
struct Candidate {
    /// Tokens in the row (every column), FTS5's `xColumnSize(-1)`.
    len: f64,
    /// Occurrences of each query term in `content` and `type`.
    freq: Vec<f64>,
}

/// The SQLite index's totals, read from FTS5's averages record.
struct FtsTotals {
    rows: f64,
    avg_len: f64,
    max_seq: i64,
}

/// The newest matches of one term in one project (the `scope` phrase
/// selects the project inside the index), newest first, with the term's
/// occurrences in `content` and `type` (highlight() adds one marker
/// character per occurrence) and the row's size record.
const SQLITE_TERM_CANDIDATES: &str = "SELECT observations_fts.rowid,
            length(highlight(observations_fts, 0, char(1), '')) - length(observations_fts.content),
            length(highlight(observations_fts, 1, char(1), '')) - length(observations_fts.type),
            d.sz
     FROM observations_fts JOIN observations_fts_docsize d ON d.id = observations_fts.rowid
     WHERE observations_fts MATCH ?1
     ORDER BY observations_fts.rowid DESC
     LIMIT CAST(?2 AS INTEGER)";

/// Any one observation of a project (`observations_project`).
const SQLITE_PROJECT_ANY: &str =
    "SELECT seq FROM observations WHERE org_id = ?1 AND project_id = ?2 LIMIT 1";

/// The first row (oldest, FTS5's forward order) holding a term.
const SQLITE_TERM_EXISTS: &str =
    "SELECT rowid FROM observations_fts WHERE observations_fts MATCH ?1 LIMIT 1";

/// How many rows of the whole index match a term, counted up to a bound,
/// and the oldest rowid counted.
const SQLITE_TERM_PROBE: &str = "SELECT count(*), min(rowid) FROM (
         SELECT rowid FROM observations_fts WHERE observations_fts MATCH ?1
         ORDER BY rowid DESC LIMIT CAST(?2 AS INTEGER))";

/// Candidates scored with FTS5's BM25 formula: the same IDF (over the
/// whole index), length normalization and saturation as `bm25()`, so a
/// ranking of every match would equal the exhaustive one (a test checks
/// the scores). A term whose matches were cut by `per_term` adds nothing
/// to older observations that also hold it.
fn sqlite_candidates(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
    terms: &[String],
    per_term: usize,
) -> Result<Vec<(i64, f64)>, StoreError> {
    if conn
        .query_opt(SQLITE_PROJECT_ANY, params![org_id, project_id], |r| {
            r.get::<i64>(0)
        })?
        .is_none()
    {
        // A project with no memory yet (every agent's first recall): one
        // index seek instead of probing the index for each term.
        return Ok(Vec::new());
    }
    let totals = sqlite_totals(conn)?;
    if totals.rows < 1.0 {
        return Ok(Vec::new()); // an empty index matches nothing
    }
    let scope = scope_token(org_id, project_id);
    let mut cands: HashMap<i64, Candidate> = HashMap::new();
    let mut idf = Vec::with_capacity(terms.len());
    for (i, term) in terms.iter().enumerate() {
        if !sqlite_term_exists(conn, term)? {
            idf.push(0.0); // in no row at all: no candidate, no IDF
            continue;
        }
        let expr = format!("scope : \"{scope}\" AND {{content type}} : \"{term}\"");
        let rows = conn.query(SQLITE_TERM_CANDIDATES, params![&expr, per_term as i64])?;
        if rows.is_empty() {
            // In no row of this project: the term adds nothing to any
            // candidate's score, so its IDF (a probe of the whole index,
            // up to `DF_PROBE` rows of other projects) is not needed.
            idf.push(0.0);
            continue;
        }
        idf.push(sqlite_idf(conn, term, &totals)?);
        for row in rows {
            let seq: i64 = row.get(0)?;
            let freq =
                row.get::<Option<i64>>(1)?.unwrap_or(0) + row.get::<Option<i64>>(2)?.unwrap_or(0);
            let c = cands.entry(seq).or_insert_with(|| Candidate {
                len: 0.0,
                freq: vec![0.0; terms.len()],
            });
            c.len = varint_sum(&row.get::<Vec<u8>>(3)?) as f64;
            c.freq[i] = freq.max(1) as f64;
        }
    }
    Ok(cands
        .into_iter()
        .map(|(seq, c)| (seq, bm25(&c, &idf, totals.avg_len)))
        .collect())
}

/// Whether any row of the index holds `term` in `content` or `type`. The
/// scoped candidate query walks its matches newest first, and FTS5 sets
/// up a backwards walk of each phrase in every index segment (the
/// project's `scope` phrase has one entry per observation of the project)
/// even for a word in no row at all. This probe walks the term's doclist
/// forwards and stops at its first entry.
fn sqlite_term_exists(conn: &mut Conn, term: &str) -> Result<bool, StoreError> {
    let expr = format!("{{content type}} : \"{term}\"");
    let found = conn.query_opt(SQLITE_TERM_EXISTS, params![&expr], |r| r.get::<i64>(0))?;
    Ok(found.is_some())
}

/// FTS5's BM25 of one candidate (higher is better).
fn bm25(c: &Candidate, idf: &[f64], avg_len: f64) -> f64 {
    let norm = BM25_K1 * (1.0 - BM25_B + BM25_B * c.len / avg_len);
    c.freq
        .iter()
        .zip(idf)
        .map(|(f, idf)| idf * (f * (BM25_K1 + 1.0)) / (f + norm))
        .sum()
}

/// FTS5's IDF of a term over the whole index: exact when fewer than
/// [`DF_PROBE`] rows match, otherwise estimated from the share of the
/// rowid range the newest [`DF_PROBE`] matches span.
fn sqlite_idf(conn: &mut Conn, term: &str, totals: &FtsTotals) -> Result<f64, StoreError> {
    let phrase = format!("\"{term}\"");
    let (counted, oldest): (i64, Option<i64>) =
        conn.query_row(SQLITE_TERM_PROBE, params![&phrase, DF_PROBE as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    let df = estimate_df(
        counted,
        oldest,
        DF_PROBE as i64,
        (1, totals.max_seq),
        totals.rows,
    );
    Ok(bm25_idf(df, totals.rows))
}

/// A term's document frequency from a count bounded by `probe`: the count
/// itself when below the bound, otherwise scaled by the share of the seq
/// range `seqs` (first, last) that the counted (newest) matches span,
/// within [counted, rows].
fn estimate_df(counted: i64, oldest: Option<i64>, probe: i64, seqs: (i64, i64), rows: f64) -> f64 {
    let hits = counted as f64;
    if counted < probe {
        return hits;
    }
    let (first, last) = seqs;
    let range = (last - first + 1).max(1) as f64;
    let span = (last - oldest.unwrap_or(first) + 1).max(1) as f64;
    (hits * range / span).clamp(hits, rows.max(hits))
}

/// FTS5's IDF: `ln((N - n + 0.5) / (n + 0.5))`, floored at 1e-6.
fn bm25_idf(df: f64, rows: f64) -> f64 {
    let idf = ((rows - df + 0.5) / (df + 0.5)).ln();
    if idf <= 0.0 { 1e-6 } else { idf }
}

/// Row count and average row length of the index (FTS5's averages record,
/// rowid 1 of its `_data` table: varints of the row count and each
/// column's token total), and the newest seq.
fn sqlite_totals(conn: &mut Conn) -> Result<FtsTotals, StoreError> {
    let record: Option<Vec<u8>> = conn.query_opt(
        "SELECT block FROM observations_fts_data WHERE id = 1",
        params![],
        |r| r.get(0),
    )?;
    let values = varints(&record.unwrap_or_default());
    let rows = values.first().copied().unwrap_or(0) as f64;
    let tokens: u64 = values.iter().skip(1).sum();
    let max_seq: i64 = conn.query_row(
        "SELECT coalesce(max(seq), 0) FROM observations",
        params![],
        |r| r.get(0),
    )?;
    Ok(FtsTotals {
        rows,
        avg_len: if rows > 0.0 {
            tokens as f64 / rows
        } else {
            1.0
        },
        max_seq,
    })
}

/// The SQLite varints (FTS5's record format) of `bytes`, in order.
fn varints(bytes: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let mut v: u64 = 0;
        let mut n = 0;
        while let Some(&b) = bytes.get(i) {
            i += 1;
            n += 1;
            if n == 9 {
                v = (v << 8) | u64::from(b);
                break;
            }
            v = (v << 7) | u64::from(b & 0x7f);
            if b & 0x80 == 0 {
                break;
            }
        }
        out.push(v);
    }
    out
}

fn varint_sum(bytes: &[u8]) -> u64 {
    varints(bytes).iter().sum()
}

/// The one index token naming a project: `p`, the org id's UTF-8 in hex,
/// `x`, the project id's, `q` (what migration 0010 indexes in `scope`).
pub fn scope_token(org_id: &str, project_id: &str) -> String {
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    format!("p{}x{}q", hex(org_id), hex(project_id))
}

/// A query's words as the English configuration's lexemes (what the
/// `tsvector` and `observation_terms` hold), with each one's first word.
const POSTGRES_LEXEMES: &str = "SELECT l.lexeme, min(w.ord)
     FROM unnest(string_to_array(?1, ' ')) WITH ORDINALITY AS w(word, ord)
     CROSS JOIN LATERAL unnest(to_tsvector('english', w.word)) AS l
     GROUP BY l.lexeme ORDER BY min(w.ord)";

/// The project's scope number, its row count and token total, and the
/// seq range of its rows (two index probes).
const POSTGRES_SCOPE: &str = "SELECT s.id, s.rows, s.tokens,
            (SELECT min(seq) FROM observations WHERE org_id = ?1 AND project_id = ?2),
            (SELECT max(seq) FROM observations WHERE org_id = ?1 AND project_id = ?2)
     FROM recall_scopes s WHERE s.org_id = ?1 AND s.project_id = ?2";

/// How many rows of one project hold a lexeme, counted up to a bound
/// (?3), the oldest seq counted, and the newest ?4 of them as `seq freq
/// len` triples (the lexeme's occurrences in the row, the row's length),
/// comma-separated: one backwards range of the `(scope, term, seq)`
/// btree, read from the index alone, answered in one row (thousands of
/// rows cost more to decode than one text to split).
const POSTGRES_TERM_CANDIDATES: &str = "SELECT count(*), min(seq),
            string_agg(seq || ' ' || freq || ' ' || len, ',') FILTER (WHERE n <= ?4)
     FROM (SELECT seq, freq, len, row_number() OVER (ORDER BY seq DESC) AS n
           FROM (SELECT seq, freq, len FROM observation_terms
                 WHERE scope = ?1 AND term = ?2 ORDER BY seq DESC LIMIT ?3) a) m";

/// One project's totals for BM25 (`recall_scopes`, kept by triggers).
struct PgScope {
    id: i64,
    rows: f64,
    avg_len: f64,
    first_seq: i64,
    last_seq: i64,
}

/// Candidates scored with the same BM25 as SQLite's (k1 1.2, b 0.75),
/// over the project's statistics: term frequencies and row lengths from
/// `observation_terms`, row count and average length from
/// `recall_scopes`, each term's document frequency counted up to
/// [`DF_PROBE`] (or `per_term`, if larger) and estimated beyond.
fn postgres_candidates(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
    terms: &[String],
    per_term: usize,
) -> Result<Vec<(i64, f64)>, StoreError> {
    let Some(scope) = postgres_scope(conn, org_id, project_id)? else {
        return Ok(Vec::new());
    };
    let lexemes: Vec<String> = conn
        .query(POSTGRES_LEXEMES, params![&terms.join(" ")])?
        .iter()
        .map(|r| r.get(0))
        .collect::<Result<_, _>>()?;
    let limit = i64::try_from(per_term).unwrap_or(i64::MAX);
    let probe = limit.max(DF_PROBE as i64);
    let mut cands: HashMap<i64, Candidate> = HashMap::new();
    let mut idf = Vec::with_capacity(lexemes.len());
    for (i, lexeme) in lexemes.iter().enumerate() {
        let (counted, oldest, matches): (i64, Option<i64>, Option<String>) = conn.query_row(
            POSTGRES_TERM_CANDIDATES,
            params![scope.id, lexeme, probe, limit],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let seqs = (scope.first_seq, scope.last_seq);
        idf.push(bm25_idf(
            estimate_df(counted, oldest, probe, seqs, scope.rows),
            scope.rows,
        ));
        for (seq, freq, len) in triples(matches.as_deref().unwrap_or(""))? {
            let c = cands.entry(seq).or_insert_with(|| Candidate {
                len: 0.0,
                freq: vec![0.0; lexemes.len()],
            });
            c.len = len as f64;
            c.freq[i] = freq.max(1) as f64;
        }
    }
    Ok(cands
        .into_iter()
        .map(|(seq, c)| (seq, bm25(&c, &idf, scope.avg_len)))
        .collect())
}

/// The `seq freq len` triples of [`POSTGRES_TERM_CANDIDATES`].
fn triples(text: &str) -> Result<Vec<(i64, i64, i64)>, StoreError> {
    let bad = || StoreError::Corrupt(format!("recall candidates: {text:.80}"));
    text.split(',')
        .filter(|t| !t.is_empty())
        .map(|t| {
            let mut it = t.split(' ').map(str::parse::<i64>);
            match (it.next(), it.next(), it.next(), it.next()) {
                (Some(Ok(s)), Some(Ok(f)), Some(Ok(l)), None) => Ok((s, f, l)),
                _ => Err(bad()),
            }
        })
        .collect()
}

/// The project's [`PgScope`]; `None` when it holds no observation yet.
fn postgres_scope(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
) -> Result<Option<PgScope>, StoreError> {
    conn.query_opt(POSTGRES_SCOPE, params![org_id, project_id], |r| {
        let rows: f64 = r.get(1)?;
        let tokens: f64 = r.get(2)?;
        Ok(PgScope {
            id: r.get(0)?,
            rows,
            avg_len: if rows > 0.0 { tokens / rows } else { 1.0 },
            first_seq: r.get::<Option<i64>>(3)?.unwrap_or(1),
            last_seq: r.get::<Option<i64>>(4)?.unwrap_or(1),
        })
    })
}

/// The ranked seqs' rows, in rank order.
fn fetch_hits(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
    ranked: &[(i64, f64)],
) -> Result<Vec<ObservationHit>, StoreError> {
    if ranked.is_empty() {
        return Ok(Vec::new());
    }
    let seqs = ranked
        .iter()
        .map(|(s, _)| s.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let sql = match conn.backend() {
        Backend::Sqlite => {
            "SELECT o.seq, o.id, o.content, o.type, o.confidence, o.created_at
             FROM json_each('[' || ?1 || ']') j JOIN observations o ON o.seq = j.value
             WHERE +o.org_id = ?2 AND +o.project_id = ?3"
        }
        Backend::Postgres => {
            "SELECT seq, id, content, type, confidence, created_at FROM observations
             WHERE seq = ANY(CAST(string_to_array(?1, ',') AS BIGINT[]))
               AND org_id = ?2 AND project_id = ?3"
        }
    };
    let mut rows: HashMap<i64, ObservationHit> = HashMap::new();
    for r in conn.query(sql, params![&seqs, org_id, project_id])? {
        let hit = ObservationHit {
            id: r.get(1)?,
            content: r.get(2)?,
            obs_type: r.get(3)?,
            confidence: r.get(4)?,
            created_at: r.get(5)?,
            score: 0.0,
        };
        rows.insert(r.get(0)?, hit);
    }
    Ok(ranked
        .iter()
        .filter_map(|(seq, score)| {
            rows.remove(seq).map(|mut h| {
                h.score = *score;
                h
            })
        })
        .collect())
}

/// The exhaustive SQLite ranking (every match scored by `bm25()`, then
/// sorted): the ranking [`search`] bounds, kept as its reference for the
/// relevance test and the recall bench. Linear in the matches.
const SQLITE_EXHAUSTIVE: &str =
    "SELECT o.id, o.content, o.type, o.confidence, o.created_at, -bm25(observations_fts) AS score
     FROM observations_fts
     JOIN observations o ON o.seq = observations_fts.rowid
     WHERE observations_fts MATCH ?1 AND +o.org_id = ?2 AND +o.project_id = ?3
     ORDER BY score DESC, o.seq DESC
     LIMIT CAST(?4 AS INTEGER)";

/// Every match of the project ranked, best `limit` first: the reference
/// [`search`] is measured against (relevance test, recall bench). Its cost
/// grows with the number of matches.
pub fn search_exhaustive(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
    query: &str,
    limit: usize,
) -> Result<Vec<ObservationHit>, StoreError> {
    if conn.backend() == Backend::Postgres {
        // The same BM25 over every match of every term.
        return search_bounded(conn, org_id, project_id, query, limit, usize::MAX);
    }
    let Some(q) = fts_query(query) else {
        return Ok(Vec::new());
    };
    conn.query_map(
        SQLITE_EXHAUSTIVE,
        params![&q, org_id, project_id, limit as i64],
        |r| {
            Ok(ObservationHit {
                id: r.get(0)?,
                content: r.get(1)?,
                obs_type: r.get(2)?,
                confidence: r.get(3)?,
                created_at: r.get(4)?,
                score: r.get(5)?,
            })
        },
    )
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

    fn memory_db(rows: &[(&str, &str, &str)]) -> SqliteConn {
        let mut conn = SqliteConn::open(std::path::Path::new(":memory:")).unwrap();
        crate::store::migrate(&mut conn).unwrap();
        conn.execute_batch("PRAGMA foreign_keys = OFF;").unwrap();
        for (i, (org, project, text)) in rows.iter().enumerate() {
            let o = NewObservation {
                id: format!("o-{i}"),
                org_id: org.to_string(),
                project_id: project.to_string(),
                session_id: "s".into(),
                agent_id: "a".into(),
                content: text.to_string(),
                obs_type: (i % 3 == 0).then(|| "pattern".to_string()),
                confidence: None,
                created_at: "2026-11-22T08:00:00.000Z".into(),
            };
            insert(&mut conn, &o).unwrap();
        }
        index_waiting(&mut conn).unwrap();
        conn
    }

    fn observation(seq: usize, text: &str) -> NewObservation {
        NewObservation {
            id: format!("w-{seq}"),
            org_id: "acme".into(),
            project_id: "web".into(),
            session_id: "s".into(),
            agent_id: "a".into(),
            content: text.into(),
            obs_type: None,
            confidence: None,
            created_at: "2026-11-22T08:00:00.000Z".into(),
        }
    }

    /// FTS5's own consistency check of the index against its content
    /// (which holds waiting rows too, so only once none wait).
    fn index_is_sound(conn: &mut SqliteConn) -> bool {
        conn.execute_batch(
            "INSERT INTO observations_fts(observations_fts, rank) VALUES ('integrity-check', 1);",
        )
        .is_ok()
    }

    #[test]
    fn a_stored_observation_is_searchable_once_indexed_and_deletes_keep_the_index_sound() {
        let mut conn = memory_db(&[("acme", "web", "indexed heron")]);
        for (i, text) in ["waiting heron", "waiting egret", "waiting ibis"]
            .iter()
            .enumerate()
        {
            insert(&mut conn, &observation(i, text)).unwrap();
        }
        let found = |conn: &mut SqliteConn, q: &str| {
            let hits = search(conn, "acme", "web", q, 10).unwrap();
            hits.into_iter().map(|h| h.content).collect::<Vec<_>>()
        };
        // Stored, not yet indexed: only the indexed row matches.
        assert_eq!(found(&mut conn, "heron"), ["indexed heron"]);
        assert!(found(&mut conn, "egret").is_empty());
        // A waiting row deleted or edited never touches the index.
        conn.execute_batch(
            "DELETE FROM observations WHERE content = 'waiting ibis';
             UPDATE observations SET content = 'waiting egrets' WHERE content = 'waiting egret';",
        )
        .unwrap();
        assert!(!index_is_sound(&mut conn), "rows wait: the check sees them");
        assert_eq!(index_waiting(&mut conn).unwrap(), 2);
        assert!(index_is_sound(&mut conn));
        assert_eq!(index_waiting(&mut conn).unwrap(), 0, "nothing waits twice");
        assert_eq!(found(&mut conn, "heron").len(), 2);
        assert_eq!(found(&mut conn, "egret"), ["waiting egrets"]);
        assert!(found(&mut conn, "ibis").is_empty());
        // An indexed row deleted leaves the index as well.
        conn.execute_batch("DELETE FROM observations WHERE content = 'indexed heron';")
            .unwrap();
        assert_eq!(found(&mut conn, "heron"), ["waiting heron"]);
        assert!(index_is_sound(&mut conn));
        // The newest row deleted, its seq is handed out again: the new row
        // still waits for the index rather than passing for indexed.
        let max_seq = |c: &mut Conn| -> i64 {
            c.query_row("SELECT max(seq) FROM observations", params![], |r| r.get(0))
                .unwrap()
        };
        let newest = max_seq(&mut conn);
        conn.execute("DELETE FROM observations WHERE seq = ?1", params![newest])
            .unwrap();
        insert(&mut conn, &observation(9, "late curlew")).unwrap();
        let reused = max_seq(&mut conn);
        assert_eq!(reused, newest, "SQLite hands the seq out again");
        assert_eq!(index_waiting(&mut conn).unwrap(), 1);
        assert_eq!(found(&mut conn, "curlew"), ["late curlew"]);
        conn.execute("DELETE FROM observations WHERE seq = ?1", params![reused])
            .unwrap();
        assert!(found(&mut conn, "curlew").is_empty());
        assert!(index_is_sound(&mut conn));
    }

    #[test]
    fn cached_search_statements_are_not_re_prepared() {
        let mut conn = memory_db(&[
            ("acme", "web", "auth token refresh fails"),
            ("acme", "web", "token cache"),
            ("acme", "web", "auth retries"),
        ]);
        let hits = |conn: &mut SqliteConn, q: &str, limit: usize| {
            search(conn, "acme", "web", q, limit).unwrap().len()
        };
        assert_eq!(hits(&mut conn, "auth token", 10), 3);
        let statements = [
            SQLITE_TERM_EXISTS,
            SQLITE_TERM_CANDIDATES,
            SQLITE_TERM_PROBE,
        ];
        let before: Vec<i32> = statements
            .iter()
            .map(|s| conn.reprepares(s).unwrap())
            .collect();
        // Other queries, other limits, other tenants: all from the cache.
        assert_eq!(hits(&mut conn, "auth token", 1), 1);
        assert_eq!(hits(&mut conn, "token", 2), 2);
        assert_eq!(hits(&mut conn, "retries", 50), 1);
        assert_eq!(
            search(&mut conn, "acme", "api", "auth", 5).unwrap().len(),
            0
        );
        assert_eq!(hits(&mut conn, "auth token", 10), 3);
        let after: Vec<i32> = statements
            .iter()
            .map(|s| conn.reprepares(s).unwrap())
            .collect();
        assert_eq!(after, before);
    }

    /// With nothing cut, the bounded search ranks exactly as `bm25()` over
    /// every match: same order, same scores.
    #[test]
    fn scores_equal_fts5_bm25_when_nothing_is_cut() {
        let texts = [
            "auth token refresh fails on the gateway",
            "token cache evicts refresh tokens too early",
            "auth retries back off exponentially",
            "the gateway caches auth decisions per session",
            "refresh the schema cache after a migration",
            "tokens tokens tokens everywhere",
            "nothing relevant here at all",
        ];
        let mut rows: Vec<(&str, &str, &str)> = texts.iter().map(|t| ("acme", "web", *t)).collect();
        rows.push(("acme", "other", "auth token refresh in another project"));
        rows.push(("beta", "web", "auth token refresh in another org"));
        let mut conn = memory_db(&rows);
        for q in [
            "auth token refresh",
            "cache",
            "tokens gateway",
            "pattern auth",
            "auth zzqx token",
            "zzqx",
        ] {
            let old = search_exhaustive(&mut conn, "acme", "web", q, 50).unwrap();
            let new = search(&mut conn, "acme", "web", q, 50).unwrap();
            let ids = |h: &[ObservationHit]| h.iter().map(|h| h.id.clone()).collect::<Vec<_>>();
            assert_eq!(ids(&new), ids(&old), "{q}");
            for (n, o) in new.iter().zip(&old) {
                assert!(
                    (n.score - o.score).abs() < 1e-9,
                    "{q}: {} vs {}",
                    n.score,
                    o.score
                );
            }
        }
    }

    #[test]
    fn a_cut_keeps_the_newest_matches_of_each_term() {
        let mut rows = vec![("acme", "web", "rare needle and common hay")];
        rows.extend(std::iter::repeat_n(("acme", "web", "common hay only"), 20));
        let mut conn = memory_db(&rows);
        let hits = search_bounded(&mut conn, "acme", "web", "needle hay", 50, 5).unwrap();
        // The rare term's one match, plus the 5 newest of the common one.
        assert_eq!(hits.len(), 6);
        assert_eq!(hits[0].id, "o-0");
        // (Their order is BM25's: a `type` changes a row's length.)
        let newest: Vec<String> = (16..=20).map(|i| format!("o-{i}")).collect();
        let mut rest: Vec<String> = hits[1..].iter().map(|h| h.id.clone()).collect();
        rest.sort();
        assert_eq!(rest, newest);
    }

    #[test]
    fn scope_tokens_tell_projects_apart() {
        assert_ne!(scope_token("ab", "c"), scope_token("a", "bc"));
        assert_eq!(scope_token("a", "b"), "p61x62q");
        let mut conn = memory_db(&[("ab", "c", "needle"), ("a", "bc", "needle")]);
        let hits = search(&mut conn, "a", "bc", "needle", 10).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].id, "o-1");
        // A project with no observation finds nothing, whatever the others hold.
        assert!(
            search(&mut conn, "a", "empty", "needle", 10)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn candidate_triples_parse_or_fail() {
        assert_eq!(
            triples("9 2 14,3 1 10").unwrap(),
            vec![(9, 2, 14), (3, 1, 10)]
        );
        assert!(triples("").unwrap().is_empty());
        assert!(triples("9 2").is_err());
        assert!(triples("9 2 x").is_err());
    }

    #[test]
    fn varints_read_sqlite_records() {
        assert_eq!(varints(&[0x05, 0x81, 0x00, 0x7f]), vec![5, 128, 127]);
        assert_eq!(varints(&[]), Vec::<u64>::new());
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
    }
}
