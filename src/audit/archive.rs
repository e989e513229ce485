//! `cedargate audit archive` and the retention setting: verify the oldest
//! records, export them to a file, then prune them behind an anchor.
//!
//! The records taken are the longest prefix of the stored chain whose
//! records are all older than `--before` (decision times are not strictly
//! increasing with `seq`, so a record older than `--before` that follows a
//! newer one stays, and goes with the next archive). Steps:
//!
//! 1. take the `trail-archive` lease (one archive at a time on a database,
//!    whichever process runs it);
//! 2. verify the chain of those records, from the current anchor: any
//!    problem refuses the archive, and nothing is written or pruned;
//! 3. export them to a new file (never overwritten), fsynced, hashing its
//!    bytes as they are written;
//! 4. prune them in one transaction under the chain lock
//!    ([`crate::store::retention::prune`]), recording the anchor with the
//!    file's SHA-256 and the anchor's checkpoint signed by the gateway's
//!    key ([`super::checkpoint`]: an anchor no key signed is a forged one
//!    to `audit verify --key`); a failure removes the file, so a refused
//!    archive changes nothing.
//!
//! Writers keep appending meanwhile: only records behind the cut are read,
//! and the prune re-checks that the cut record and the anchor are still
//! what was exported.
//!
//! **An exported file verifies on its own** ([`verify_file`], `cedargate
//! audit verify --archive FILE`, in `archive_file.rs`): its exact bytes
//! are hashed, every line must be the writer's form of its record, each
//! JSONL line's hash is recomputed from its fields and links to the line
//! before it; the first line's `prevHash` is the previous anchor's hash
//! (or the genesis hash) and the last line's `hash` is the anchor's. An
//! OCSF file's links are checked but its hashes cannot be recomputed
//! (OCSF re-shapes the stored text): archive to JSONL when the file must
//! prove itself. The file's SHA-256 is stored in the anchor
//! (`decision_anchors`), which `audit verify` prints.

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;
use sha2::{Digest, Sha256};

pub use super::archive_file::{FileReport, verify_file};
use super::export::{self, Format};
use crate::store::decisions::{self, StoredDecision};
use crate::store::retention::{self, Anchor, PruneError};
use crate::store::{Store, StoreError};

/// The lease every archive takes (CLI and retention alike).
pub const LEASE: &str = "trail-archive";
/// How long a lease lasts: an archive that crashed holding it blocks the
/// others this long at most.
const LEASE_SECS: i64 = 3600;
/// Records read per page while verifying and exporting.
const PAGE: usize = 4096;

/// What to archive.
#[derive(Debug, Clone)]
pub struct ArchiveRequest {
    /// Records older than this (RFC 3339, normalized by [`normalize_time`]).
    pub before: String,
    /// The file to write (must not exist).
    pub out: PathBuf,
    /// The file's format.
    pub format: Format,
    /// Who runs it (the lease holder): `cli:<pid>` or an instance id.
    pub holder: String,
    /// The checkpoint key that signs the anchor (an anchor is never stored
    /// unsigned).
    pub key: std::sync::Arc<super::checkpoint::CheckpointKey>,
    /// Records written to the file so far (a progress bar reads it).
    pub written: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// What an archive did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveReport {
    /// The anchor it recorded.
    pub anchor: Anchor,
    /// The file it wrote.
    pub file: PathBuf,
}

/// Why an archive was refused; nothing was pruned.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// `--before` is not an RFC 3339 time.
    #[error("`--before` must be an RFC 3339 time, not `{0}`")]
    Time(String),
    /// Another archive holds the lease.
    #[error("another archive is running (held by `{holder}` until {until}); nothing pruned")]
    Busy {
        /// The holder.
        holder: String,
        /// Lease expiry.
        until: String,
    },
    /// The records to prune do not verify.
    #[error(
        "the chain of the records to archive does not verify ({} problem(s), first: {}); nothing exported or pruned",
        .0.len(),
        .0.first().map(String::as_str).unwrap_or("?")
    )]
    Unverifiable(Vec<String>),
    /// The output file exists already.
    #[error("`{0}` exists; an archive never overwrites a file")]
    Exists(PathBuf),
    /// The file could not be written.
    #[error("cannot write `{path}`: {source}; nothing pruned")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The prune transaction refused or failed (the file was removed).
    #[error(transparent)]
    Prune(#[from] PruneError),
    /// The anchor's checkpoint could not be signed.
    #[error("cannot sign the anchor's checkpoint: {0}; nothing pruned")]
    Sign(#[from] super::signed_note::NoteError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `text` as the trail stores times, or [`ArchiveError::Time`].
pub fn normalize_time(text: &str) -> Result<String, ArchiveError> {
    crate::ids::parse_rfc3339(text)
        .map(crate::ids::rfc3339)
        .map_err(|_| ArchiveError::Time(crate::tools::spec::echo(text).into_owned()))
}

/// Runs one archive (blocking: call it off the async workers). `Ok(None)`:
/// no stored record is older than `before`, nothing written.
pub fn archive(store: &Store, req: &ArchiveRequest) -> Result<Option<ArchiveReport>, ArchiveError> {
    take_lease(store, &req.holder)?;
    let result = archive_leased(store, req);
    if let Err(e) = store.read_blocking(|c| retention::release_lease(c, LEASE, &req.holder)) {
        tracing::warn!(error = %e, "cannot release the archive lease (it expires by itself)");
    }
    result
}

fn take_lease(store: &Store, holder: &str) -> Result<(), ArchiveError> {
    let now = time::OffsetDateTime::now_utc();
    let until = crate::ids::rfc3339(now + time::Duration::seconds(LEASE_SECS));
    let now = crate::ids::rfc3339(now);
    let taken = store.read_blocking(|c| retention::take_lease(c, LEASE, holder, &now, &until))?;
    if taken {
        return Ok(());
    }
    let (holder, until) = store
        .read_blocking(|c| retention::lease_holder(c, LEASE))?
        .unwrap_or_default();
    Err(ArchiveError::Busy { holder, until })
}

/// The records one archive takes: after the anchor, up to `last`.
struct Plan {
    anchor: (i64, String),
    last: i64,
}

fn archive_leased(
    store: &Store,
    req: &ArchiveRequest,
) -> Result<Option<ArchiveReport>, ArchiveError> {
    let plan = store.read_blocking(|c| {
        let anchor = decisions::chain_head(c)?.anchor;
        Ok(retention::archivable_until(c, &req.before)?.map(|last| Plan { anchor, last }))
    })?;
    let Some(plan) = plan else { return Ok(None) };
    verify(store, &plan)?;
    let written = export_file(store, &plan, req)?;
    let anchor = Anchor {
        seq: written.last.seq,
        hash: written.last.hash.clone(),
        time: written.last.record.time.clone(),
        first_seq: plan.anchor.0 + 1,
        prev_hash: plan.anchor.1.clone(),
        records: written.records,
        format: format_name(req.format).into(),
        archive_sha256: written.sha256,
        archived_at: crate::ids::now_rfc3339(),
    };
    let pruned = match super::checkpoint::sign_anchor(&req.key, &anchor) {
        Err(e) => Err(ArchiveError::Sign(e)),
        Ok(signed) => match store
            .read_blocking(|c| Ok(retention::prune(c, &anchor, plan.anchor.0, &signed)))
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(ArchiveError::Prune(e)),
            Err(e) => Err(ArchiveError::Store(e)),
        },
    };
    if let Err(e) = pruned {
        let _ = std::fs::remove_file(&req.out);
        return Err(e);
    }
    Ok(Some(ArchiveReport {
        anchor,
        file: req.out.clone(),
    }))
}

fn format_name(format: Format) -> &'static str {
    match format {
        Format::Jsonl => "jsonl",
        Format::Ocsf => "ocsf",
    }
}

/// Verifies the records `plan` takes, from the anchor.
fn verify(store: &Store, plan: &Plan) -> Result<(), ArchiveError> {
    let report =
        store.read_blocking(|c| decisions::verify_range(c, plan.anchor.0 + 1, plan.last))?;
    let mut problems = report.problems;
    if problems.is_empty() && report.last_seq != plan.last {
        problems.push(format!(
            "seq {}: expected the records up to seq {}",
            report.last_seq, plan.last
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ArchiveError::Unverifiable(problems))
    }
}

/// What [`export_file`] wrote.
struct Written {
    records: i64,
    last: StoredDecision,
    sha256: String,
}

/// Writes the records of `plan` to a new file, fsynced; removes it on any
/// failure.
fn export_file(store: &Store, plan: &Plan, req: &ArchiveRequest) -> Result<Written, ArchiveError> {
    let io = |source| ArchiveError::Io {
        path: req.out.clone(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    // Records carry tenants' request context: readable by the owner only.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = match options.open(&req.out) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(ArchiveError::Exists(req.out.clone()));
        }
        Err(e) => return Err(io(e)),
    };
    let result = write_records(store, plan, req.format, file, &req.written);
    if result.is_err() {
        let _ = std::fs::remove_file(&req.out);
    }
    result.map_err(|e| match e {
        WriteError::Io(e) => io(e),
        WriteError::Store(e) => ArchiveError::Store(e),
    })
}

enum WriteError {
    Io(std::io::Error),
    Store(StoreError),
}

fn write_records(
    store: &Store,
    plan: &Plan,
    format: Format,
    file: std::fs::File,
    written: &std::sync::atomic::AtomicU64,
) -> Result<Written, WriteError> {
    let mut out = std::io::BufWriter::new(file);
    let mut digest = Sha256::new();
    let mut after = plan.anchor.0;
    let mut records = 0;
    let mut last = None;
    while after < plan.last {
        let rows = store
            .read_blocking(|c| decisions::page(c, after, PAGE))
            .map_err(WriteError::Store)?;
        if rows.is_empty() {
            break;
        }
        for row in rows.into_iter().take_while(|r| r.seq <= plan.last) {
            let mut line = export::line(&row, format);
            line.push('\n');
            digest.update(line.as_bytes());
            out.write_all(line.as_bytes()).map_err(WriteError::Io)?;
            records += 1;
            written.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            after = row.seq;
            last = Some(row);
        }
        if last.as_ref().is_none_or(|l| l.seq >= plan.last) {
            break;
        }
    }
    let file = out
        .into_inner()
        .map_err(|e| WriteError::Io(e.into_error()))?;
    file.sync_all().map_err(WriteError::Io)?;
    let last = last.ok_or_else(|| {
        WriteError::Store(StoreError::Corrupt("no record to archive was read".into()))
    })?;
    Ok(Written {
        records,
        last,
        sha256: hex::encode(digest.finalize()),
    })
}
