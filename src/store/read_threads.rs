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
//! A read that panics is caught on its thread: the caller gets an error,
//! the thread goes on with the next read.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crossbeam_channel::{Receiver, Sender};
use tokio::sync::oneshot;

use super::StoreError;

/// One queued read.
type Job = Box<dyn FnOnce() + Send>;

/// The queue and its threads; dropping the last handle ends the threads
/// once the reads already queued are done.
pub(super) struct ReadThreads {
    jobs: Sender<Job>,
}

impl ReadThreads {
    /// Starts `count` threads named `cedargate-read`.
    pub(super) fn start(count: usize) -> Result<ReadThreads, StoreError> {
        let (jobs, queue) = crossbeam_channel::unbounded::<Job>();
        for _ in 0..count.max(1) {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name("cedargate-read".into())
                .spawn(move || serve(&queue))
                .map_err(|e| StoreError::Task(format!("cannot start a read thread: {e}")))?;
        }
        Ok(ReadThreads { jobs })
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
        self.jobs
            .send(job)
            .map_err(|_| StoreError::Task("the read threads have stopped".into()))?;
        result
            .await
            .map_err(|_| StoreError::Task("a read failed before it answered".into()))?
    }
}

/// A read thread's loop: each job in turn until the queue closes.
fn serve(queue: &Receiver<Job>) {
    while let Ok(job) = queue.recv() {
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
}
