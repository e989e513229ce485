//! `cedargate audit verify --archive FILE`: an archive file checked on its
//! own, byte for byte.
//!
//! The file's SHA-256 is taken over its exact bytes (what the archive
//! hashed as it wrote them, and what its anchor stores), and every line
//! must be exactly what `audit archive` writes for the record it holds:
//! the record re-serialized by the writer's own function, then one `\n`.
//! So whitespace, a reordered or added field, another escape of the same
//! text, a carriage return, a blank line or a missing final newline are
//! each refused at their line, even when the record's hash would still
//! recompute from its parsed fields. One file holds one format, as written.
//!
//! A JSONL line is the stored record: its hash is recomputed from its
//! fields and must link to the line before it; the first line's `prevHash`
//! is the previous anchor's hash (or genesis) and the last line's `hash`
//! the anchor's. An OCSF line carries the chain fields under `unmapped`,
//! so its links are checked and its form is checked by rebuilding the
//! event from its own fields (`export::ocsf_record`), but its hash cannot
//! be recomputed (OCSF re-shapes the stored text). The OCSF writer's
//! product version is taken from the line, so an archive written by an
//! earlier release still verifies.

use std::io::BufRead;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::export::{self, Format};
use crate::store::decisions::{self, GENESIS_HASH, StoredDecision};

/// What [`verify_file`] found in an archive file.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileReport {
    /// Records in the file.
    pub records: i64,
    /// Seq of the first one.
    pub first_seq: i64,
    /// Its `prev_hash`: the anchor before the archive (or genesis).
    pub prev_hash: String,
    /// Seq of the last one.
    pub last_seq: i64,
    /// Its hash: the anchor this archive left.
    pub head_hash: String,
    /// SHA-256 of the file's bytes (compare with the anchor's
    /// `archiveSha256`).
    pub sha256: String,
    /// Whether every hash was recomputed (JSONL) or only the links checked
    /// (OCSF).
    pub hashes_recomputed: bool,
    /// Problems found (empty: the file is intact).
    pub problems: Vec<String>,
}

/// Checks an archive file on its own: its bytes are hashed as they are,
/// every line is exactly the writer's form of its record, seqs follow each
/// other, each record links to the one before it, and (JSONL) each hash
/// recomputes from the record's fields.
pub fn verify_file(path: &Path) -> std::io::Result<FileReport> {
    let mut file = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut digest = Sha256::new();
    let mut report = FileReport {
        records: 0,
        first_seq: 0,
        prev_hash: GENESIS_HASH.to_string(),
        last_seq: 0,
        head_hash: String::new(),
        sha256: String::new(),
        hashes_recomputed: true,
        problems: Vec::new(),
    };
    let mut format = None;
    let mut bytes = Vec::new();
    for n in 1.. {
        bytes.clear();
        if file.read_until(b'\n', &mut bytes)? == 0 {
            break;
        }
        digest.update(&bytes);
        match read_line(&bytes, &mut format) {
            Ok(fields) => check_line(&mut report, n, fields),
            Err(problem) => report.problems.push(format!("line {n}: {problem}")),
        }
    }
    report.sha256 = hex::encode(digest.finalize());
    if report.records == 0 {
        report.problems.push("the file holds no record".into());
    }
    Ok(report)
}

/// The chain fields of one line: seq, prev_hash, hash, and the hash
/// recomputed from the record when the line is a stored record (JSONL).
struct ChainFields {
    seq: i64,
    prev_hash: String,
    hash: String,
    recomputed: Option<String>,
}

/// One line's record, if the line is exactly what the archive writes for
/// it in the file's format (`format`, set by the first line).
fn read_line(bytes: &[u8], format: &mut Option<Format>) -> Result<ChainFields, &'static str> {
    let Some(text) = bytes.strip_suffix(b"\n") else {
        return Err("the line does not end with a newline (the archive ends every line with one)");
    };
    let text = std::str::from_utf8(text).map_err(|_| "the line is not UTF-8")?;
    let (record, line_format) = parse(text)?;
    if *format.get_or_insert(line_format) != line_format {
        return Err("the line is not in the format of the file's first line");
    }
    Ok(ChainFields {
        recomputed: (line_format == Format::Jsonl)
            .then(|| decisions::chain_hash(&record.prev_hash, record.seq, &record.record)),
        seq: record.seq,
        prev_hash: record.prev_hash,
        hash: record.hash,
    })
}

/// The record a line holds and its format, when the line is byte for byte
/// what the archive writes for that record.
fn parse(text: &str) -> Result<(StoredDecision, Format), &'static str> {
    const NOT_AS_WRITTEN: &str = "the line is not what the archive wrote for its record (whitespace, fields, escapes or order differ)";
    if let Ok(d) = serde_json::from_str::<StoredDecision>(text) {
        return match export::line(&d, Format::Jsonl) == text {
            true => Ok((d, Format::Jsonl)),
            false => Err(NOT_AS_WRITTEN),
        };
    }
    let event: Value = serde_json::from_str(text).map_err(|_| "not a line of JSON")?;
    let d = export::ocsf_record(&event).ok_or("not an exported decision record")?;
    let mut written = export::ocsf(&d);
    written["metadata"]["product"]["version"] = event["metadata"]["product"]["version"].clone();
    // Compared as text: `Value == str` would ask whether it is that string.
    let rendered = written.to_string();
    match rendered == text {
        true => Ok((d, Format::Ocsf)),
        false => Err(NOT_AS_WRITTEN),
    }
}

fn check_line(report: &mut FileReport, line: usize, f: ChainFields) {
    if report.records == 0 {
        report.first_seq = f.seq;
        report.prev_hash = f.prev_hash.clone();
    } else {
        if f.seq != report.last_seq + 1 {
            report.problems.push(format!(
                "line {line}: seq {} does not follow seq {}",
                f.seq, report.last_seq
            ));
        }
        if f.prev_hash != report.head_hash {
            report.problems.push(format!(
                "line {line} (seq {}): prev_hash does not match the hash of the record before it",
                f.seq
            ));
        }
    }
    match f.recomputed {
        Some(h) if h != f.hash => report.problems.push(format!(
            "line {line} (seq {}): contents do not match its hash (edited record)",
            f.seq
        )),
        Some(_) => {}
        None => report.hashes_recomputed = false,
    }
    report.records += 1;
    report.last_seq = f.seq;
    report.head_hash = f.hash;
}
