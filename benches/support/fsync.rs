//! The fsync floor: what one durable decision record costs at least on
//! this disk, the reference the durable request paths are measured
//! against (`sdk`, `authzen`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::Res;
use super::stats::{Rank, Stats};

/// p50 µs of `n` single-row WAL commits with `synchronous=FULL` in `dir`:
/// the least one durable decision record can cost on this disk.
pub fn fsync_floor(dir: &Path, n: usize) -> Res<f64> {
    let path: PathBuf = dir.join("floor.db");
    let conn = rusqlite::Connection::open(&path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB)")?;
    let row = vec![7u8; 1024];
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        conn.execute_batch("BEGIN")?;
        conn.execute("INSERT INTO t (v) VALUES (?1)", [&row])?;
        conn.execute_batch("COMMIT")?;
        samples.push(t0.elapsed());
    }
    Ok(Stats::of(samples, Rank::Nearest).p50)
}
