//! Reads that usually take microseconds run on the requesting thread.
//!
//! A read on a read thread is two hand-offs: waking a parked read thread,
//! and waking the request's task with the answer. For a recall on a
//! small project the hand-offs cost more than the search: running it on
//! the async worker that asked took 0.86× the CPU per recall at
//! concurrency 32 (median of six alternating runs against the build
//! before; `benches/README.md`, `sdk`). But a read holds the thread it
//! runs on, and an async worker held for long delays every request
//! queued behind it, so a read runs here only when it is known to be
//! cheap (a `tools/list` of 500 upstream tools holds a worker about as
//! long as the bound below):
//!
//! - the caller names what the read's cost depends on (a recall: its
//!   org and project), and the durations of that key's last reads are
//!   kept as a decaying maximum (each read: the larger of its own time
//!   and seven eighths of the previous figure);
//! - a read runs here when that figure is under [`HERE_MAX`]; a key
//!   never seen, or one whose reads grew, reads on a read thread (a
//!   project's first recall after a start goes there too);
//! - only an idle connection is taken here, never waited for: with none
//!   idle the read queues as any other.
//!
//! So a worker is held past [`HERE_MAX`] only by a read that costs more
//! than the reads of its key did just before (a query of a rarer shape),
//! and then some thirty cheap reads of that key go to the read threads
//! before one runs here again. Keys share 256 slots by hash: a collision
//! can only send a read to a thread that could have run here, or the
//! reverse once; it never changes what a read answers. PostgreSQL reads
//! always leave the worker (its client blocks on the network).

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A key's reads run here while their decaying maximum stays under this.
pub const HERE_MAX: Duration = Duration::from_micros(500);

/// Slots of the cost table.
const SLOTS: usize = 256;

/// A slot no read has measured yet.
const UNKNOWN: u32 = u32::MAX;

/// What the last reads of each key cost (microseconds, decaying maximum).
pub(super) struct Costs {
    slots: Box<[AtomicU32]>,
    hasher: std::hash::RandomState,
}

impl Costs {
    pub(super) fn new() -> Costs {
        Costs {
            slots: (0..SLOTS).map(|_| AtomicU32::new(UNKNOWN)).collect(),
            hasher: std::hash::RandomState::new(),
        }
    }

    fn slot(&self, key: impl Hash) -> &AtomicU32 {
        let i = usize::try_from(self.hasher.hash_one(key) % SLOTS as u64).unwrap_or(0);
        &self.slots[i]
    }

    /// Whether a read of `key` is known to be cheap enough to run here.
    pub(super) fn cheap(&self, key: impl Hash) -> bool {
        let us = self.slot(key).load(Ordering::Relaxed);
        u128::from(us) < HERE_MAX.as_micros()
    }

    /// Records what a read of `key` took, wherever it ran.
    pub(super) fn record(&self, key: impl Hash, took: Duration) {
        let us = u32::try_from(took.as_micros()).unwrap_or(UNKNOWN - 1);
        let _ = self
            .slot(key)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(if old == UNKNOWN {
                    us
                } else {
                    us.max(old - old / 8)
                })
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: Duration = Duration::from_micros(20);

    #[test]
    fn a_key_is_cheap_only_once_measured_under_the_bound() {
        let costs = Costs::new();
        assert!(
            !costs.cheap("p1"),
            "a key never read is not known to be cheap"
        );
        costs.record("p1", FAST);
        assert!(costs.cheap("p1"));
        costs.record("p1", HERE_MAX);
        assert!(
            !costs.cheap("p1"),
            "a read at the bound sends the next away"
        );
    }

    #[test]
    fn a_slow_read_sends_the_next_ones_away_until_cheap_ones_decay_it() {
        let costs = Costs::new();
        costs.record("p1", FAST);
        costs.record("p1", Duration::from_millis(20));
        let mut away = 0;
        while !costs.cheap("p1") {
            costs.record("p1", FAST);
            away += 1;
            assert!(away < 100, "never cheap again");
        }
        // Seven eighths per read: 20 ms is under the bound after
        // log(20 ms / bound) / log(8/7) reads (28 for 500 µs).
        let bound = HERE_MAX.as_secs_f64();
        let expected = ((0.020 / bound).ln() / (8.0f64 / 7.0).ln()).ceil();
        assert!(
            (f64::from(away) - expected).abs() <= 1.0,
            "{away} against {expected}"
        );
    }
}
