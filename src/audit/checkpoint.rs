//! Signed checkpoints of the decision trail: the chain head (seq, hash,
//! time) signed with an Ed25519 key the database never holds, so that a
//! database administrator who deletes the newest records, recomputes the
//! chain or forges an archive anchor is caught by `cedargate audit verify
//! --key`, however consistent the rows left behind look.
//!
//! **How the chain maps to a checkpoint.** A checkpoint is a C2SP
//! `tlog-checkpoint` (<https://c2sp.org/tlog-checkpoint>) written as a
//! signed note ([`super::signed_note`]):
//!
//! ```text
//! <origin>                      the key name (`checkpoints.key_name` when the key was made)
//! <tree size>                   the chain's seq at the head: records 1..=seq
//! <base64 root hash>            the head record's chain hash (32 bytes)
//! time <RFC 3339>               when it was signed
//! anchor <first seq> <base64 prev hash> <records> <archive sha256 hex>
//!                               (anchor checkpoints only: the archive this anchor closed)
//!
//! — <origin> <base64(key id || Ed25519 signature)>
//! ```
//!
//! The trail is a **hash chain, not a Merkle tree**: the "root hash" is the
//! hash of the record at `seq`, which commits to every record before it
//! through the `prev_hash` links. So a checkpoint proves the whole prefix
//! `1..=seq`, but there are no inclusion or consistency proofs: checking a
//! checkpoint means recomputing the chain up to it (what `audit verify`
//! does), and two checkpoints are consistent when the chain between them
//! links. Tools that read checkpoints parse ours; tools that expect a
//! Merkle root of RFC 6962 must not treat the hash as one.
//!
//! **When the gateway signs.** Every `checkpoints.interval_secs` (60) when
//! the head moved since the newest stored checkpoint, once on a clean stop,
//! and with every archive's anchor (in the prune's transaction, so an
//! anchor never exists unsigned). Before signing it checks that the record
//! the newest checkpoint signed still carries the signed hash: a gateway
//! never signs a head that does not extend what it signed before (it logs
//! an error instead). The checkpoint is stored in `trail_checkpoints`;
//! auditors keep copies (`audit checkpoints --out`).
//!
//! **The key** lives in a file (`checkpoints.key_file`, default
//! `{data_dir}/checkpoint.key`, mode 0600), created by `serve` on first
//! start when absent, in the signer-key form of the note format. The CLI
//! reads it (`audit key`, `audit archive`) but never creates it. Instances
//! sharing a database either share the file or each sign with their own:
//! `audit verify` takes every instance's key (`--key` repeated).
//!
//! What a checkpoint cannot cover: records after the newest checkpoint
//! (at most one interval of them, or none after a clean stop) can still be
//! deleted unseen; `audit verify` says how many records the newest
//! checkpoint does not cover.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::signed_note::{NoteError, NoteSigner, NoteVerifier, check_name};
use crate::config::Config;
use crate::store::StoreError;
use crate::store::checkpoints::{self, CheckpointRow};
use crate::store::db::Conn;
use crate::store::decisions;
use crate::store::retention::Anchor;

/// Why a checkpoint key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file is missing (the CLI never creates it).
    #[error(
        "the checkpoint key `{0}` does not exist (`cedargate serve` creates it on first start; set `checkpoints.key_file` to the gateway's key)"
    )]
    Missing(PathBuf),
    /// The file could not be read or written.
    #[error("checkpoint key `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file does not hold a signer key, or the name is invalid.
    #[error("checkpoint key `{path}`: {source}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: NoteError,
    },
}

/// Why a checkpoint was not signed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The note could not be made.
    #[error(transparent)]
    Note(#[from] NoteError),
    /// The chain no longer extends the newest checkpoint.
    #[error("not signing: {0}")]
    Diverged(String),
}

/// The gateway's checkpoint key, read from its file.
#[derive(Debug)]
pub struct CheckpointKey {
    signer: NoteSigner,
    path: PathBuf,
}

/// Where the key file is: `checkpoints.key_file`, or
/// `{data_dir}/checkpoint.key`.
pub fn key_path(config: &Config) -> PathBuf {
    config
        .checkpoints
        .key_file
        .clone()
        .unwrap_or_else(|| config.data_dir.join("checkpoint.key"))
}

impl CheckpointKey {
    /// Reads the key file; creates it (mode 0600, a new key named
    /// `checkpoints.key_name`) when absent. What `serve` does.
    pub fn load_or_create(config: &Config) -> Result<Self, KeyError> {
        let path = key_path(config);
        match Self::load_path(&path) {
            Err(KeyError::Missing(_)) => {}
            other => return other,
        }
        let invalid = |source| KeyError::Invalid {
            path: path.clone(),
            source,
        };
        check_name(&config.checkpoints.key_name).map_err(invalid)?;
        let signer = NoteSigner::generate(&config.checkpoints.key_name).map_err(invalid)?;
        match write_new(&path, &signer.to_private_text()) {
            Ok(()) => {
                tracing::info!(file = %path.display(), key = %signer.verifier(), "created the checkpoint key");
                Ok(Self { signer, path })
            }
            // Another process sharing the directory made it first.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Self::load_path(&path),
            Err(source) => Err(KeyError::Io { path, source }),
        }
    }

    /// Reads the key file (never creates it). What the CLI does.
    pub fn load(config: &Config) -> Result<Self, KeyError> {
        Self::load_path(&key_path(config))
    }

    fn load_path(path: &Path) -> Result<Self, KeyError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(KeyError::Missing(path.to_path_buf()));
            }
            Err(source) => {
                return Err(KeyError::Io {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        warn_if_readable_by_others(path);
        let signer = NoteSigner::parse(&text).map_err(|source| KeyError::Invalid {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            signer,
            path: path.to_path_buf(),
        })
    }

    /// The public key in verifier-key form (`name+id+base64`): what an
    /// auditor passes to `audit verify --key`.
    pub fn verifier(&self) -> NoteVerifier {
        self.signer.verifier()
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes a new file readable by its owner only, fsynced.
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(format!("{text}\n").as_bytes())?;
    file.sync_all()
}

fn warn_if_readable_by_others(path: &Path) {
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(path) {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(file = %path.display(), mode = format!("{mode:o}"), "the checkpoint key is readable by others than its owner (expected mode 600)");
        }
    }
}

/// Why a checkpoint was signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The periodic one.
    Interval,
    /// The one of a clean stop.
    Stop,
    /// An archive's anchor.
    Anchor,
}

impl Kind {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Interval => "interval",
            Kind::Stop => "stop",
            Kind::Anchor => "anchor",
        }
    }
}

/// The archive an anchor checkpoint closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnchorLine {
    /// The first record the archive pruned.
    pub first_seq: i64,
    /// That record's `prev_hash` (hex).
    pub prev_hash: String,
    /// Records pruned.
    pub records: i64,
    /// SHA-256 (hex) of the archive file.
    pub archive_sha256: String,
}

/// What a checkpoint's text says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The origin line (the key name).
    pub origin: String,
    /// The chain position (tree size).
    pub seq: i64,
    /// The record's chain hash there (hex).
    pub hash: String,
    /// When it was signed (RFC 3339).
    pub signed_at: String,
    /// The archive an anchor checkpoint closes.
    pub anchor: Option<AnchorLine>,
}

impl Checkpoint {
    /// The note text (each line ending in a newline).
    pub fn text(&self) -> Result<String, NoteError> {
        let mut text = format!(
            "{}\n{}\n{}\ntime {}\n",
            self.origin,
            self.seq,
            b64_hash(&self.hash)?,
            self.signed_at
        );
        if let Some(a) = &self.anchor {
            text.push_str(&format!(
                "anchor {} {} {} {}\n",
                a.first_seq,
                b64_hash(&a.prev_hash)?,
                a.records,
                a.archive_sha256
            ));
        }
        Ok(text)
    }

    /// Reads a verified note's text.
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let bad = |why: &str| NoteError::Malformed(format!("not a trail checkpoint ({why})"));
        let mut lines = text.lines();
        let origin = lines.next().ok_or_else(|| bad("no origin"))?.to_string();
        let seq = lines
            .next()
            .and_then(|l| l.parse::<i64>().ok())
            .filter(|s| *s >= 0)
            .ok_or_else(|| bad("no tree size"))?;
        let hash = lines
            .next()
            .and_then(hex_hash)
            .ok_or_else(|| bad("no 32-byte base64 root hash"))?;
        let mut checkpoint = Checkpoint {
            origin,
            seq,
            hash,
            signed_at: String::new(),
            anchor: None,
        };
        for line in lines {
            if let Some(t) = line.strip_prefix("time ") {
                checkpoint.signed_at = t.to_string();
            } else if let Some(a) = line.strip_prefix("anchor ") {
                checkpoint.anchor = Some(anchor_line(a).ok_or_else(|| bad("bad anchor line"))?);
            }
        }
        Ok(checkpoint)
    }
}

fn anchor_line(text: &str) -> Option<AnchorLine> {
    let mut parts = text.split(' ');
    let line = AnchorLine {
        first_seq: parts.next()?.parse().ok()?,
        prev_hash: hex_hash(parts.next()?)?,
        records: parts.next()?.parse().ok()?,
        archive_sha256: parts.next()?.to_string(),
    };
    parts.next().is_none().then_some(line)
}

fn b64_hash(hex_hash: &str) -> Result<String, NoteError> {
    let bytes = hex::decode(hex_hash)
        .ok()
        .filter(|b| b.len() == 32)
        .ok_or_else(|| NoteError::Malformed(format!("`{hex_hash}` is not a SHA-256 hash")))?;
    Ok(STANDARD.encode(bytes))
}

fn hex_hash(b64: &str) -> Option<String> {
    let bytes = STANDARD.decode(b64).ok().filter(|b| b.len() == 32)?;
    Some(hex::encode(bytes))
}

/// Signs `checkpoint` as a row to store.
pub fn sign(
    key: &CheckpointKey,
    checkpoint: &Checkpoint,
    kind: Kind,
) -> Result<CheckpointRow, NoteError> {
    let note = key.signer.sign(&checkpoint.text()?)?;
    Ok(CheckpointRow {
        seq: checkpoint.seq,
        hash: checkpoint.hash.clone(),
        kind: kind.as_str().into(),
        signed_at: checkpoint.signed_at.clone(),
        key_id: key.verifier().id_hex(),
        note,
    })
}

/// The checkpoint of an archive's anchor (stored by the prune, in its
/// transaction).
pub fn sign_anchor(key: &CheckpointKey, anchor: &Anchor) -> Result<CheckpointRow, NoteError> {
    let checkpoint = Checkpoint {
        origin: key.signer.name().to_string(),
        seq: anchor.seq,
        hash: anchor.hash.clone(),
        signed_at: crate::ids::now_rfc3339(),
        anchor: Some(AnchorLine {
            first_seq: anchor.first_seq,
            prev_hash: anchor.prev_hash.clone(),
            records: anchor.records,
            archive_sha256: anchor.archive_sha256.clone(),
        }),
    };
    sign(key, &checkpoint, Kind::Anchor)
}

/// Signs and stores the chain head when it moved since the newest stored
/// checkpoint; `None` when it did not (or the chain is empty). Refuses
/// when the record the newest checkpoint signed is gone or changed.
pub fn sign_head(
    conn: &mut Conn,
    key: &CheckpointKey,
    kind: Kind,
) -> Result<Option<CheckpointRow>, CheckpointError> {
    let head = decisions::chain_head(conn)?;
    if head.seq == 0 {
        return Ok(None);
    }
    if let Some(last) = checkpoints::newest(conn)? {
        if last.seq == head.seq && last.hash == head.hash {
            return Ok(None);
        }
        extends(conn, &last, &head)?;
    }
    let checkpoint = Checkpoint {
        origin: key.signer.name().to_string(),
        seq: head.seq,
        hash: head.hash,
        signed_at: crate::ids::now_rfc3339(),
        anchor: None,
    };
    let row = sign(key, &checkpoint, kind)?;
    checkpoints::insert(conn, &row)?;
    Ok(Some(row))
}

/// Whether the chain at `head` still holds the record `last` signed.
fn extends(
    conn: &mut Conn,
    last: &CheckpointRow,
    head: &decisions::ChainHead,
) -> Result<(), CheckpointError> {
    if last.seq > head.seq {
        return Err(CheckpointError::Diverged(format!(
            "the trail ends at seq {}, before seq {} that a checkpoint signed (records deleted)",
            head.seq, last.seq
        )));
    }
    let stored = if last.seq == head.anchor.0 {
        Some(head.anchor.1.clone())
    } else if last.seq < head.anchor.0 {
        return Ok(()); // archived since: the anchor's own checkpoint covers it
    } else {
        checkpoints::record_hash(conn, last.seq)?
    };
    if stored.as_deref() != Some(last.hash.as_str()) {
        return Err(CheckpointError::Diverged(format!(
            "record seq {} no longer has the hash a checkpoint signed (the chain was rewritten or truncated)",
            last.seq
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn a_checkpoint_text_round_trips_and_follows_the_tlog_checkpoint_lines() {
        let c = Checkpoint {
            origin: "cedargate".into(),
            seq: 42,
            hash: "ab".repeat(32),
            signed_at: "2026-11-27T19:00:00.000000Z".into(),
            anchor: Some(AnchorLine {
                first_seq: 1,
                prev_hash: decisions::GENESIS_HASH.into(),
                records: 40,
                archive_sha256: "cd".repeat(32),
            }),
        };
        let text = c.text().unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "cedargate");
        assert_eq!(lines[1], "42");
        assert_eq!(STANDARD.decode(lines[2]).unwrap(), vec![0xab; 32]);
        assert_eq!(lines[3], "time 2026-11-27T19:00:00.000000Z");
        assert!(lines[4].starts_with("anchor 1 AAAA"));
        assert_eq!(Checkpoint::parse(&text).unwrap(), c);
    }
}
