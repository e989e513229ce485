//! The disk-space guard: free space on the filesystem holding the SQLite
//! database, looked at every `database.free_space_check_ms` (one
//! `statvfs`), and whether it is below `database.min_free_bytes`.
//!
//! Requests that would write the decision trail ask [`DiskGuard::check`],
//! which only reads two atomics; below the minimum they fail closed before
//! anything is decided or written, and they pass again as soon as a later
//! look finds the space back. The minimum is a margin: the trail, the WAL
//! and SQLite's temporary files need room to finish what is in flight.
//!
//! On PostgreSQL the database's disk belongs to the server, which this
//! process cannot see: the guard is off (a full server disk fails commits,
//! which are answered -32603 and never acknowledged); watch the server's
//! disk there.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The guard's state, for metrics and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceStatus {
    /// Free bytes available to this process at the last look.
    pub free_bytes: u64,
    /// The configured minimum (0: the guard is off).
    pub min_free_bytes: u64,
    /// Whether the last look found less than the minimum.
    pub tripped: bool,
    /// Whether a filesystem is watched at all (false on PostgreSQL).
    pub watched: bool,
}

/// Trail writes refused: less free space than the minimum.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("{} bytes free on the database's filesystem, under the minimum of {}", .0.free_bytes, .0.min_free_bytes)]
pub struct LowSpace(pub SpaceStatus);

/// Cached free space of one directory's filesystem.
#[derive(Debug)]
pub struct DiskGuard {
    /// The directory looked at (`None`: off, as on PostgreSQL).
    dir: Option<PathBuf>,
    min_free: AtomicU64,
    free: AtomicU64,
    tripped: AtomicBool,
    /// Reported once per change of state, not on every look.
    logged: Mutex<bool>,
}

impl DiskGuard {
    /// A guard of `dir`'s filesystem with `min_free` bytes (0 or no
    /// directory: off). It looks once now.
    pub fn new(dir: Option<&Path>, min_free: u64) -> DiskGuard {
        let guard = DiskGuard {
            dir: dir.map(Path::to_path_buf),
            min_free: AtomicU64::new(min_free),
            free: AtomicU64::new(u64::MAX),
            tripped: AtomicBool::new(false),
            logged: Mutex::new(false),
        };
        guard.refresh();
        guard
    }

    /// A guard that never trips.
    pub fn off() -> DiskGuard {
        DiskGuard::new(None, 0)
    }

    /// Ok while there is at least the minimum free (at the last look).
    pub fn check(&self) -> Result<(), LowSpace> {
        if self.tripped.load(Ordering::Acquire) {
            Err(LowSpace(self.status()))
        } else {
            Ok(())
        }
    }

    /// The state at the last look.
    pub fn status(&self) -> SpaceStatus {
        SpaceStatus {
            free_bytes: self.free.load(Ordering::Acquire),
            min_free_bytes: self.min_free.load(Ordering::Acquire),
            tripped: self.tripped.load(Ordering::Acquire),
            watched: self.dir.is_some(),
        }
    }

    /// Changes the minimum (takes effect at the next look).
    pub fn set_min_free_bytes(&self, bytes: u64) {
        self.min_free.store(bytes, Ordering::Release);
    }

    /// Looks at the filesystem now (one `statvfs`). A failed look keeps
    /// the previous state.
    pub fn refresh(&self) {
        let Some(dir) = &self.dir else { return };
        let free = match free_bytes(dir) {
            Ok(free) => free,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot read free disk space");
                return;
            }
        };
        let min = self.min_free.load(Ordering::Acquire);
        let tripped = min > 0 && free < min;
        self.free.store(free, Ordering::Release);
        self.tripped.store(tripped, Ordering::Release);
        self.log_change(tripped, free, min);
    }

    fn log_change(&self, tripped: bool, free: u64, min: u64) {
        let Ok(mut logged) = self.logged.lock() else {
            return;
        };
        if *logged == tripped {
            return;
        }
        *logged = tripped;
        if tripped {
            tracing::error!(
                free_bytes = free,
                min_free_bytes = min,
                "disk space low: refusing requests that would write the decision trail"
            );
        } else {
            tracing::info!(
                free_bytes = free,
                min_free_bytes = min,
                "disk space back: accepting requests again"
            );
        }
    }
}

/// Bytes available to an unprivileged process on `dir`'s filesystem.
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let s = rustix::fs::statvfs(dir)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}
