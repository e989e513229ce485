//! The write queue's budget: what the queued jobs may hold at once, in
//! records and in bytes, besides the number of jobs the channel bounds.
//!
//! A job takes weighted permits of two semaphores (records, then bytes;
//! always in that order, so two waiters never hold each other's permits)
//! before it enters the queue, and gives them back when it is dropped,
//! which the writer does once the job's transaction is over. A job heavier
//! than a bound takes the whole of it: it waits until the queue is empty
//! and then passes alone, so nothing deadlocks and nothing is refused.
//! tokio's semaphores are fair (first come, first served), so a heavy job
//! is not starved by lighter ones arriving after it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What a job weighs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Weight {
    /// Rows it writes.
    pub records: u64,
    /// Bytes it holds while queued (an estimate).
    pub bytes: u64,
}

/// What the queue holds now and held at most, with its bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueLevels {
    /// Records queued or being committed.
    pub records: u64,
    /// Bytes queued or being committed.
    pub bytes: u64,
    /// Most records held at once since start.
    pub peak_records: u64,
    /// Most bytes held at once since start.
    pub peak_bytes: u64,
    /// `limits.write_queue_records`.
    pub max_records: u64,
    /// `limits.write_queue_bytes`.
    pub max_bytes: u64,
}

/// The semaphores and the gauges of one writer's queue.
#[derive(Debug)]
pub struct Budget {
    records: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    max_records: u32,
    max_bytes: u32,
    queued_records: AtomicU64,
    queued_bytes: AtomicU64,
    peak_records: AtomicU64,
    peak_bytes: AtomicU64,
}

/// Permits a queued job holds; dropping them gives them back.
#[derive(Debug)]
pub struct Held {
    _records: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
    weight: Weight,
    budget: Arc<Budget>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget
            .queued_records
            .fetch_sub(self.weight.records, Ordering::AcqRel);
        self.budget
            .queued_bytes
            .fetch_sub(self.weight.bytes, Ordering::AcqRel);
    }
}

/// The budget is gone (never happens while a writer handle lives).
#[derive(Debug, Clone, Copy)]
pub struct Closed;

/// A bound as a permit count (at least 1, at most what one acquire takes).
fn bound(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX).max(1)
}

impl Budget {
    /// A budget of `records` records and `bytes` bytes (each at least 1,
    /// at most `u32::MAX`).
    pub fn new(records: usize, bytes: usize) -> Arc<Budget> {
        let (max_records, max_bytes) = (bound(records), bound(bytes));
        Arc::new(Budget {
            records: Arc::new(Semaphore::new(max_records as usize)),
            bytes: Arc::new(Semaphore::new(max_bytes as usize)),
            max_records,
            max_bytes,
            queued_records: AtomicU64::new(0),
            queued_bytes: AtomicU64::new(0),
            peak_records: AtomicU64::new(0),
            peak_bytes: AtomicU64::new(0),
        })
    }

    /// Permits for `w` (clamped to the bounds), waiting for them.
    pub async fn acquire(self: &Arc<Self>, w: Weight) -> Result<Held, Closed> {
        let (records, bytes) = self.permits(w);
        let r = Arc::clone(&self.records)
            .acquire_many_owned(records)
            .await
            .map_err(|_| Closed)?;
        let b = Arc::clone(&self.bytes)
            .acquire_many_owned(bytes)
            .await
            .map_err(|_| Closed)?;
        Ok(self.held(r, b, w))
    }

    /// Permits for `w` only if they are free now (never waits).
    pub fn try_acquire(self: &Arc<Self>, w: Weight) -> Option<Held> {
        let (records, bytes) = self.permits(w);
        let r = Arc::clone(&self.records)
            .try_acquire_many_owned(records)
            .ok()?;
        let b = Arc::clone(&self.bytes).try_acquire_many_owned(bytes).ok()?;
        Some(self.held(r, b, w))
    }

    fn permits(&self, w: Weight) -> (u32, u32) {
        let clamp = |n: u64, max: u32| u32::try_from(n).unwrap_or(u32::MAX).min(max);
        (
            clamp(w.records, self.max_records),
            clamp(w.bytes, self.max_bytes),
        )
    }

    fn held(self: &Arc<Self>, r: OwnedSemaphorePermit, b: OwnedSemaphorePermit, w: Weight) -> Held {
        let records = self.queued_records.fetch_add(w.records, Ordering::AcqRel) + w.records;
        let bytes = self.queued_bytes.fetch_add(w.bytes, Ordering::AcqRel) + w.bytes;
        self.peak_records.fetch_max(records, Ordering::AcqRel);
        self.peak_bytes.fetch_max(bytes, Ordering::AcqRel);
        Held {
            _records: r,
            _bytes: b,
            weight: w,
            budget: Arc::clone(self),
        }
    }

    /// The queue's levels now.
    pub fn levels(&self) -> QueueLevels {
        QueueLevels {
            records: self.queued_records.load(Ordering::Acquire),
            bytes: self.queued_bytes.load(Ordering::Acquire),
            peak_records: self.peak_records.load(Ordering::Acquire),
            peak_bytes: self.peak_bytes.load(Ordering::Acquire),
            max_records: u64::from(self.max_records),
            max_bytes: u64::from(self.max_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(records: u64, bytes: u64) -> Weight {
        Weight { records, bytes }
    }

    #[test]
    fn jobs_share_the_bound_and_give_it_back_when_dropped() {
        let budget = Budget::new(4, 1000);
        let a = budget.try_acquire(w(3, 100)).expect("fits");
        assert!(budget.try_acquire(w(2, 100)).is_none(), "over the records");
        let b = budget.try_acquire(w(1, 100)).expect("fits exactly");
        assert_eq!(budget.levels().records, 4);
        drop(a);
        assert!(budget.try_acquire(w(1, 950)).is_none(), "over the bytes");
        let c = budget.try_acquire(w(3, 900)).expect("fits again");
        drop((b, c));
        let levels = budget.levels();
        assert_eq!((levels.records, levels.bytes), (0, 0));
        assert_eq!((levels.peak_records, levels.peak_bytes), (4, 1000));
    }

    #[test]
    fn a_job_heavier_than_the_bound_passes_alone() {
        let budget = Budget::new(4, 1000);
        let small = budget.try_acquire(w(1, 10)).expect("fits");
        let heavy = budget.acquire(w(100, 5000));
        let mut heavy = std::pin::pin!(heavy);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        assert!(
            heavy.as_mut().poll(&mut cx).is_pending(),
            "waits for the queue to empty"
        );
        // Later jobs wait behind it (fair), even light ones.
        assert!(budget.try_acquire(w(1, 1)).is_none());
        drop(small);
        let std::task::Poll::Ready(Ok(held)) = heavy.as_mut().poll(&mut cx) else {
            panic!("passes once the queue is empty");
        };
        assert!(budget.try_acquire(w(1, 1)).is_none(), "alone");
        assert_eq!(budget.levels().records, 100);
        drop(held);
        assert!(budget.try_acquire(w(1, 1)).is_some());
    }
}
