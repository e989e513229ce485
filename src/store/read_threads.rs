//! The threads SQLite reads run on: one per read connection, fed by one
//! queue.
//!
//! Reads block (SQLite runs on the calling thread), so they cannot run on
//! the async workers. They used to go to tokio's blocking pool, which
//! under concurrent load grew to dozens of threads that all waited on the
//! four connection mutexes and on the pool's own lock: a recall at
//! concurrency 32 spent about an eighth of its CPU waking, parking and
//! yielding those threads. With as many threads as connections, a read
//! waits in the queue instead of on a mutex, and no thread is ever started
//! or parked for nothing. PostgreSQL reads stay on the blocking pool (its
//! pool hands out connections with a bounded wait).
//!
//! A long read (a console replay: at most `console.replay_jobs` at once,
//! 2 by default) holds its thread while it runs, as it held its
//! connection before; the other threads serve the requests meanwhile.
//!
//! A read that panics is caught on its thread: the caller gets an error,
//! the thread goes on with the next read.
//!
//! The queue is a mutex and a condition variable, not a channel: an idle
//! thread parks at once. Channels (crossbeam's, and std's built on it)
//! spin and yield before parking; with requests arriving every few
//! microseconds, four threads doing so took about 5% of a recall's CPU at
//! concurrency 32 and caught no read sooner.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use tokio::sync::oneshot;

use super::StoreError;

/// One queued read.
type Job = Box<dyn FnOnce() + Send>;

/// The queue and its threads; dropping the last handle ends the threads
/// once the reads already queued are done.
pub(super) struct ReadThreads {
    queue: Arc<Queue>,
    /// Most reads that waited for a thread at once since start.
    peak: AtomicUsize,
}

/// The reads waiting for a thread; `ready` wakes one idle thread per read.
#[derive(Default)]
struct Queue {
    state: Mutex<State>,
    ready: Condvar,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Set when the last handle is dropped: threads end once `jobs` is empty.
    closed: bool,
}

impl Queue {
    /// Queues `job`; how many reads wait now, or `None` once closed.
    fn push(&self, job: Job) -> Option<usize> {
        let mut state = self.state.lock().ok()?;
        if state.closed {
            return None;
        }
        state.jobs.push_back(job);
        let waiting = state.jobs.len();
        drop(state);
        self.ready.notify_one();
        Some(waiting)
    }

    /// The next read, waiting for one; `None` once closed and drained.
    fn pop(&self) -> Option<Job> {
        let mut state = self.state.lock().ok()?;
        loop {
            if let Some(job) = state.jobs.pop_front() {
                return Some(job);
            }
            if state.closed {
                return None;
            }
            state = self.ready.wait(state).ok()?;
        }
    }

    fn waiting(&self) -> usize {
        self.state.lock().map(|s| s.jobs.len()).unwrap_or(0)
    }

    fn close(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.closed = true;
        }
        self.ready.notify_all();
    }
}

impl Drop for ReadThreads {
    fn drop(&mut self) {
        self.queue.close();
    }
}

/// Reads waiting for a read thread now and at most since start (the
/// `/metrics` gauges `cedargate_read_queue_waiting|peak`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadQueueLevels {
    /// Waiting now (not counting the reads running).
    pub waiting: usize,
    /// Most waiting at once since start.
    pub peak: usize,
}

impl ReadThreads {
    /// Starts `count` threads named `cedargate-read`.
    pub(super) fn start(count: usize) -> Result<ReadThreads, StoreError> {
        let threads = ReadThreads {
            queue: Arc::new(Queue::default()),
            peak: AtomicUsize::new(0),
        };
        for _ in 0..count.max(1) {
            let queue = Arc::clone(&threads.queue);
            std::thread::Builder::new()
                .name("cedargate-read".into())
                .spawn(move || serve(&queue))
                .map_err(|e| StoreError::Task(format!("cannot start a read thread: {e}")))?;
        }
        Ok(threads)
    }

    /// Runs `read` on a read thread and waits for its result.
    pub(super) async fn run<T, F>(&self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    {
        let (done, result) = oneshot::channel();
        let job: Job = Box::new(move || {
            // The caller may have gone (its request was cancelled).
            let _ = done.send(read());
        });
        let waiting = self
            .queue
            .push(job)
            .ok_or_else(|| StoreError::Task("the read threads have stopped".into()))?;
        self.peak.fetch_max(waiting, Ordering::Relaxed);
        result
            .await
            .map_err(|_| StoreError::Task("a read failed before it answered".into()))?
    }

    /// Reads waiting for a thread now, and the most since start.
    pub(super) fn levels(&self) -> ReadQueueLevels {
        // A read just queued may not have raised the peak yet: the peak is
        // never below what waits now.
        let waiting = self.queue.waiting();
        let peak = self.peak.fetch_max(waiting, Ordering::Relaxed).max(waiting);
        ReadQueueLevels { waiting, peak }
    }
}

/// A read thread's loop: each job in turn until the queue closes.
fn serve(queue: &Queue) {
    while let Some(job) = queue.pop() {
        if catch_unwind(AssertUnwindSafe(job)).is_err() {
            tracing::error!("a database read panicked; its caller gets an error");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_answer_and_a_panicking_read_leaves_the_threads_serving() {
        let threads = ReadThreads::start(2).unwrap();
        assert_eq!(threads.run(|| Ok(41 + 1)).await.unwrap(), 42);
        let failed = threads
            .run(|| -> Result<(), StoreError> { panic!("a read that panics") })
            .await;
        assert!(matches!(failed, Err(StoreError::Task(_))), "{failed:?}");
        // The threads still serve after the panic, read after read.
        let reads: Vec<_> = (0..8).map(|i| threads.run(move || Ok(i))).collect();
        let mut got = Vec::new();
        for read in reads {
            got.push(read.await.unwrap());
        }
        assert_eq!(got, (0..8).collect::<Vec<i32>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_beyond_the_threads_wait_and_are_counted() {
        let threads = std::sync::Arc::new(ReadThreads::start(1).unwrap());
        let (started, running) = std::sync::mpsc::channel::<()>();
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let busy = {
            let threads = threads.clone();
            tokio::spawn(async move {
                threads
                    .run(move || {
                        let _ = started.send(());
                        let _ = gate.recv();
                        Ok(0)
                    })
                    .await
            })
        };
        // The one thread holds the first read; three more wait behind it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while running.try_recv().is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the first read never ran"
            );
            tokio::task::yield_now().await;
        }
        let waiting: Vec<_> = (1..4)
            .map(|i| {
                let threads = threads.clone();
                tokio::spawn(async move { threads.run(move || Ok(i)).await })
            })
            .collect();
        while threads.levels().waiting < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                threads.levels()
            );
            tokio::task::yield_now().await;
        }
        let held = ReadQueueLevels {
            waiting: 3,
            peak: 3,
        };
        assert_eq!(threads.levels(), held);
        release.send(()).unwrap();
        assert_eq!(busy.await.unwrap().unwrap(), 0);
        for (i, read) in (1..4).zip(waiting) {
            assert_eq!(read.await.unwrap().unwrap(), i);
        }
        let drained = ReadQueueLevels {
            waiting: 0,
            peak: 3,
        };
        assert_eq!(threads.levels(), drained);
    }
}
