//! `audit archive` (export, then prune behind an anchor) and
//! `audit verify --archive FILE` (an exported file checked on its own).
//! The work is `crate::audit::archive`'s; this only reads flags and prints.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use crate::audit::archive::{self, ArchiveError, ArchiveRequest};
use crate::audit::export::Format;
use crate::config::Config;
use crate::store::Store;

/// `audit archive` flags.
#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// Archive the records older than this time (RFC 3339): the longest
    /// prefix of the chain whose records are all older.
    #[arg(long)]
    pub before: String,
    /// The file to write (must not exist).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// `jsonl` (stored records, verifiable on their own) or `ocsf`.
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    pub format: Format,
}

/// `audit archive`: exit 0 when archived (or nothing was old enough), 2 on
/// bad input, 1 when refused or failed (nothing pruned then).
pub fn archive(config: &Config, args: &ArchiveArgs) -> ExitCode {
    let before = match archive::normalize_time(&args.before) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let store = match Store::open_ready(&config.database_url(), &config.store_options()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The anchor is signed with the gateway's checkpoint key: without it
    // the archive is refused (an unsigned anchor would read as forged).
    let key = match crate::audit::checkpoint::CheckpointKey::load(config) {
        Ok(k) => std::sync::Arc::new(k),
        Err(e) => {
            eprintln!("error: {e}; nothing archived");
            return ExitCode::FAILURE;
        }
    };
    let req = ArchiveRequest {
        before,
        out: args.out.clone(),
        format: args.format,
        holder: format!("cli:{}", std::process::id()),
        key,
        written: std::sync::Arc::default(),
    };
    let result = super::progress::watched("archiving", None, &req.written, || {
        archive::archive(&store, &req)
    });
    if let Err(e) = store.read_blocking(|c| c.checkpoint()) {
        tracing::warn!(error = %e, "WAL checkpoint after the archive failed");
    }
    match result {
        Ok(None) => {
            println!(
                "nothing to archive: no stored record is older than {}",
                req.before
            );
            ExitCode::SUCCESS
        }
        Ok(Some(report)) => {
            let a = &report.anchor;
            println!(
                "archived {} records (seq {}..{}) to {} (sha256 {}); the trail now starts after the anchor at seq {} (hash {})",
                a.records,
                a.first_seq,
                a.seq,
                report.file.display(),
                a.archive_sha256,
                a.seq,
                a.hash
            );
            ExitCode::SUCCESS
        }
        Err(e @ ArchiveError::Time(_)) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            if let ArchiveError::Unverifiable(problems) = &e {
                for p in problems {
                    eprintln!("tampered: {p}");
                }
            }
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `audit verify --archive FILE`: exit 0 when the file is intact.
pub fn verify_file(path: &Path) -> ExitCode {
    let report = match archive::verify_file(path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot read `{}`: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    if !report.problems.is_empty() {
        for p in &report.problems {
            eprintln!("tampered: {p}");
        }
        eprintln!(
            "archive verification FAILED: {} problem(s) in {} records",
            report.problems.len(),
            report.records
        );
        return ExitCode::FAILURE;
    }
    println!(
        "archive intact: {} records (seq {}..{}), {}; starts after hash {}, ends at hash {}; sha256 {}",
        report.records,
        report.first_seq,
        report.last_seq,
        if report.hashes_recomputed {
            "every hash recomputed"
        } else {
            "links checked (OCSF: hashes not recomputable)"
        },
        report.prev_hash,
        report.head_hash,
        report.sha256
    );
    ExitCode::SUCCESS
}
