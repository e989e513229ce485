//! `audit verify --key`: the trail checked against its signed checkpoints
//! ([`super::checkpoint`]), those stored in the database and those of a
//! copy an auditor kept (`--checkpoints FILE`, written by `audit
//! checkpoints --out`).
//!
//! Every checkpoint must carry a valid signature by one of the given keys
//! (one that does not is a forgery, or another key's). Then each one must
//! match the chain:
//! - its seq is at most the chain head's (otherwise the newest records
//!   were deleted: a **truncated tail**);
//! - the stored record at its seq has the signed hash (otherwise the chain
//!   was recomputed: a **rewritten chain**); a checkpoint behind the
//!   newest anchor was archived with its records and is matched against
//!   the anchor at its seq, if any;
//! - every anchor in `decision_anchors` has an anchor checkpoint signing
//!   exactly it (otherwise it is a **forged anchor**, behind which records
//!   were deleted), and every signed anchor is still there;
//! - a checkpoint of the kept copy that the database no longer holds,
//!   ahead of the newest anchor, was deleted from it.
//!
//! Records after the newest checkpoint are not covered (reported, not a
//! failure); a trail with records and no valid checkpoint at all fails.
//! The hash chain itself is checked by `decisions::verify_range`, which
//! `audit verify` runs first: a rewritten chain that does not recompute
//! fails there, one that does fails here.

use std::collections::HashSet;

use serde::Serialize;

use super::checkpoint::Checkpoint;
use super::signed_note::{self, NoteVerifier};
use crate::store::StoreError;
use crate::store::checkpoints::{self, CheckpointRow};
use crate::store::db::Conn;
use crate::store::decisions::{self, ChainHead};
use crate::store::retention::{self, Anchor};

/// What the checkpoints said of the trail.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointReport {
    /// Checkpoints whose signature verified.
    pub verified: usize,
    /// The newest verified checkpoint's seq and signing time.
    pub newest: Option<(i64, String)>,
    /// Records after it (not covered yet).
    pub uncovered: i64,
    /// Anchors, each matched by its signed checkpoint when no problem.
    pub anchors: usize,
    /// Problems found (empty: the trail matches every checkpoint).
    pub problems: Vec<String>,
}

/// The notes of an exported checkpoints file (notes one after another,
/// each `text`, a blank line, its signature lines, then a blank line).
pub fn parse_file(text: &str) -> Vec<String> {
    let mut notes = Vec::new();
    let mut current = String::new();
    let mut in_signatures = false;
    for line in text.lines() {
        if line.is_empty() {
            if in_signatures {
                notes.push(std::mem::take(&mut current));
                in_signatures = false;
            } else if !current.is_empty() {
                current.push('\n');
                in_signatures = true;
            }
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    if !current.is_empty() {
        notes.push(current);
    }
    notes
}

/// The file `audit checkpoints --out` writes: every note, a blank line
/// after each.
pub fn export_text(rows: &[CheckpointRow]) -> String {
    rows.iter().map(|r| format!("{}\n", r.note)).collect()
}

/// A checkpoint that verified, and where it came from.
struct Verified {
    checkpoint: Checkpoint,
    from_file_only: bool,
}

/// Checks the stored checkpoints and `kept` (notes of an auditor's copy)
/// with `keys` against the chain.
pub fn verify(
    conn: &mut Conn,
    keys: &[NoteVerifier],
    kept: &[String],
) -> Result<CheckpointReport, StoreError> {
    let head = decisions::chain_head(conn)?;
    let anchors = retention::anchors(conn)?;
    let stored = checkpoints::all(conn)?;
    let mut report = CheckpointReport {
        anchors: anchors.len(),
        ..CheckpointReport::default()
    };
    let verified = open_all(&stored, kept, keys, &mut report);
    for v in &verified {
        check_against_chain(conn, &head, &anchors, v, &mut report)?;
    }
    check_anchors(&anchors, &verified, &mut report);
    cover(&head, &verified, &mut report);
    Ok(report)
}

/// Opens every note (stored, then kept ones the database lacks); a note
/// that does not verify is a problem.
fn open_all(
    stored: &[CheckpointRow],
    kept: &[String],
    keys: &[NoteVerifier],
    report: &mut CheckpointReport,
) -> Vec<Verified> {
    let in_db: HashSet<&str> = stored.iter().map(|r| r.note.as_str()).collect();
    let notes = stored.iter().map(|r| (r.note.as_str(), false)).chain(
        kept.iter()
            .filter(|n| !in_db.contains(n.as_str()))
            .map(|n| (n.as_str(), true)),
    );
    let mut verified = Vec::new();
    for (note, from_file_only) in notes {
        let place = if from_file_only {
            "the kept copy"
        } else {
            "the database"
        };
        let opened = signed_note::open(note, keys).and_then(Checkpoint::parse);
        match opened {
            Ok(checkpoint) => verified.push(Verified {
                checkpoint,
                from_file_only,
            }),
            Err(e) => report.problems.push(format!(
                "forged checkpoint: a checkpoint in {place} ({}) does not verify: {e}",
                summary(note)
            )),
        }
    }
    report.verified = verified.len();
    verified
}

/// A note's first lines, for messages.
fn summary(note: &str) -> String {
    let mut lines = note.lines();
    let origin = lines.next().unwrap_or_default();
    let seq = lines.next().unwrap_or_default();
    format!(
        "origin `{}`, seq `{}`",
        crate::tools::spec::echo(origin),
        crate::tools::spec::echo(seq)
    )
}

/// The chain at a checkpoint's seq must hold its hash.
fn check_against_chain(
    conn: &mut Conn,
    head: &ChainHead,
    anchors: &[Anchor],
    v: &Verified,
    report: &mut CheckpointReport,
) -> Result<(), StoreError> {
    let c = &v.checkpoint;
    let signed = format!("the checkpoint signed at {} for seq {}", c.signed_at, c.seq);
    if c.seq > head.seq {
        report.problems.push(format!(
            "truncated tail: {signed} covers records up to seq {} (hash {}), but the trail ends at seq {}: records {}..={} were deleted",
            c.seq, c.hash, head.seq, head.seq + 1, c.seq
        ));
        return Ok(());
    }
    let found = if c.seq > head.anchor.0 {
        checkpoints::record_hash(conn, c.seq)?
    } else if let Some(a) = anchors.iter().find(|a| a.seq == c.seq) {
        Some(a.hash.clone())
    } else {
        return Ok(()); // archived with its records
    };
    match found {
        None => report.problems.push(format!(
            "truncated: record seq {}, which {signed} covers, is missing",
            c.seq
        )),
        Some(h) if h != c.hash => report.problems.push(format!(
            "rewritten chain: record seq {} has hash {h}, but {signed} says {}: the chain was recomputed",
            c.seq, c.hash
        )),
        Some(_) if v.from_file_only && c.seq > head.anchor.0 => report.problems.push(format!(
            "deleted checkpoint: {signed}, in the kept copy, is no longer in the database"
        )),
        Some(_) => {}
    }
    Ok(())
}

/// Every anchor must be signed, and every signed anchor stored.
fn check_anchors(anchors: &[Anchor], verified: &[Verified], report: &mut CheckpointReport) {
    let signed: Vec<&Checkpoint> = verified
        .iter()
        .map(|v| &v.checkpoint)
        .filter(|c| c.anchor.is_some())
        .collect();
    for a in anchors {
        let matched = signed.iter().any(|c| {
            c.seq == a.seq
                && c.hash == a.hash
                && c.anchor.as_ref().is_some_and(|l| {
                    l.first_seq == a.first_seq
                        && l.prev_hash == a.prev_hash
                        && l.records == a.records
                        && l.archive_sha256 == a.archive_sha256
                })
        });
        if !matched {
            report.problems.push(format!(
                "forged anchor: the anchor at seq {} (records {}..={}, archive sha256 {}) has no checkpoint signed by the given key(s); the records behind it were deleted without a signed archive",
                a.seq, a.first_seq, a.seq, a.archive_sha256
            ));
        }
    }
    for c in signed {
        if !anchors.iter().any(|a| a.seq == c.seq) {
            report.problems.push(format!(
                "deleted anchor: the anchor at seq {} signed at {} is no longer in the database",
                c.seq, c.signed_at
            ));
        }
    }
}

/// How far the checkpoints cover the chain.
fn cover(head: &ChainHead, verified: &[Verified], report: &mut CheckpointReport) {
    let newest = verified.iter().map(|v| &v.checkpoint).max_by_key(|c| c.seq);
    report.newest = newest.map(|c| (c.seq, c.signed_at.clone()));
    let covered = newest.map_or(0, |c| c.seq);
    report.uncovered = (head.seq - covered).max(0);
    if newest.is_none() && head.seq > 0 {
        report.problems.push(format!(
            "no checkpoint signed by the given key(s) covers the trail ({} records): none was signed yet, or they were deleted",
            head.seq
        ));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn an_exported_file_parses_back_into_its_notes() {
        let rows: Vec<CheckpointRow> = [
            "a\n1\nAA==\n\n\u{2014} a x\n",
            "a\n2\nAA==\n\n\u{2014} a y\n\u{2014} b z\n",
        ]
        .iter()
        .map(|n| CheckpointRow {
            seq: 0,
            hash: String::new(),
            kind: "interval".into(),
            signed_at: String::new(),
            key_id: String::new(),
            note: (*n).into(),
        })
        .collect();
        let notes = parse_file(&export_text(&rows));
        assert_eq!(notes, vec![rows[0].note.clone(), rows[1].note.clone()]);
    }
}
