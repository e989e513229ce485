//! The open streams of the HTTP+SSE transport (`sse.rs` serves them):
//! registered per session and key, bounded per key, each with a bound on
//! the messages answered at once. A stream is forgotten when its body is
//! dropped (client gone), when its session is `DELETE`d, and at shutdown
//! (`server::run` ends every stream so the drain can finish).
//!
//! **Architecture Invariant:** this is state the gateway holds; it knows
//! nothing of requests, sessions' policies or the gateway itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::response::sse::Event;
use tokio::sync::{Semaphore, mpsc};
use uuid::Uuid;

use crate::config::SseConfig;

/// Events buffered per stream before answering tasks wait for the client.
const STREAM_BUFFER: usize = 64;

/// One open stream, as the POST side sees it.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    /// The session it belongs to.
    pub(super) session_id: String,
    /// The key that opened it (only that key may post to it).
    pub(super) key_id: String,
    /// Where answers go; dropping every sender ends the stream.
    pub(super) tx: mpsc::Sender<Event>,
    /// The version an `initialize` on this stream negotiated.
    pub(super) version: Arc<Mutex<Option<String>>>,
    /// Bounds the messages of this stream being answered at once.
    pub(super) slots: Arc<Semaphore>,
}

#[derive(Debug, Default)]
struct Registry {
    streams: HashMap<Uuid, Entry>,
    per_key: HashMap<String, usize>,
}

impl Registry {
    fn remove(&mut self, id: &Uuid) -> Option<Entry> {
        let entry = self.streams.remove(id)?;
        if let Some(n) = self.per_key.get_mut(&entry.key_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_key.remove(&entry.key_id);
            }
        }
        Some(entry)
    }
}

#[derive(Debug)]
struct Shared {
    registry: Mutex<Registry>,
    /// Set at shutdown: no new stream is opened.
    closed: AtomicBool,
    /// Answering tasks still running.
    in_flight: AtomicUsize,
    /// Answers dropped because their stream had ended.
    undelivered: AtomicU64,
    config: SseConfig,
}

/// The open streams of this process.
#[derive(Debug, Clone)]
pub struct Streams {
    shared: Arc<Shared>,
}

/// Counters of the transport, for operators and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamStats {
    /// Streams open now.
    pub open: usize,
    /// Messages being answered now.
    pub in_flight: usize,
    /// Answers dropped because the client had gone away.
    pub undelivered: u64,
}

/// Why a stream could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum OpenError {
    #[error("this key already holds {0} open streams (the limit); close one first")]
    TooMany(usize),
    #[error("the gateway is shutting down")]
    Closed,
}

impl Streams {
    /// An empty registry with the configured bounds.
    pub fn new(config: SseConfig) -> Self {
        Streams {
            shared: Arc::new(Shared {
                registry: Mutex::new(Registry::default()),
                closed: AtomicBool::new(false),
                in_flight: AtomicUsize::new(0),
                undelivered: AtomicU64::new(0),
                config,
            }),
        }
    }

    /// Current counters.
    pub fn stats(&self) -> StreamStats {
        let open = self
            .shared
            .registry
            .lock()
            .map(|r| r.streams.len())
            .unwrap_or(0);
        StreamStats {
            open,
            in_flight: self.shared.in_flight.load(Ordering::SeqCst),
            undelivered: self.shared.undelivered.load(Ordering::SeqCst),
        }
    }

    /// Ends every stream and refuses new ones (graceful shutdown cannot
    /// finish while a stream is open). Answers already being computed still
    /// complete and are recorded.
    pub fn close_all(&self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        if let Ok(mut r) = self.shared.registry.lock() {
            r.streams.clear();
            r.per_key.clear();
        }
    }

    /// Ends every stream of a session (its MCP session was terminated).
    pub fn close_session(&self, session_id: &str) -> usize {
        let Ok(mut r) = self.shared.registry.lock() else {
            return 0;
        };
        let ids: Vec<Uuid> = r
            .streams
            .iter()
            .filter(|(_, e)| e.session_id == session_id)
            .map(|(id, _)| *id)
            .collect();
        for id in &ids {
            r.remove(id);
        }
        ids.len()
    }

    /// Registers a stream of `session_id` opened by `key_id`.
    pub(super) fn open(
        &self,
        session_id: &str,
        key_id: &str,
    ) -> Result<(Uuid, mpsc::Receiver<Event>), OpenError> {
        if self.shared.closed.load(Ordering::SeqCst) {
            return Err(OpenError::Closed);
        }
        let max = self.shared.config.max_streams_per_key;
        let mut r = self.shared.registry.lock().map_err(|_| OpenError::Closed)?;
        let held = r.per_key.get(key_id).copied().unwrap_or(0);
        if held >= max {
            return Err(OpenError::TooMany(max));
        }
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let id = Uuid::new_v4();
        r.streams.insert(
            id,
            Entry {
                session_id: session_id.to_string(),
                key_id: key_id.to_string(),
                tx,
                version: Arc::new(Mutex::new(None)),
                slots: Arc::new(Semaphore::new(
                    self.shared.config.max_in_flight_per_stream.max(1),
                )),
            },
        );
        *r.per_key.entry(key_id.to_string()).or_insert(0) += 1;
        Ok((id, rx))
    }

    /// The open stream `id`.
    pub(super) fn get(&self, id: &Uuid) -> Option<Entry> {
        self.shared
            .registry
            .lock()
            .ok()
            .and_then(|r| r.streams.get(id).cloned())
    }

    /// Unregisters stream `id`.
    pub(super) fn remove(&self, id: &Uuid) {
        if let Ok(mut r) = self.shared.registry.lock() {
            r.remove(id);
        }
    }
}

/// Unregisters a stream when its response body is dropped (the client went
/// away, or the stream ended).
#[derive(Debug)]
pub(super) struct Registration {
    pub(super) streams: Streams,
    pub(super) id: Uuid,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.streams.remove(&self.id);
        tracing::debug!(stream = %self.id, "SSE stream closed");
    }
}

/// Counts an answering task while it runs.
#[derive(Debug)]
pub(super) struct InFlight(Arc<Shared>);

impl Streams {
    /// Counts a message being answered until the guard is dropped.
    pub(super) fn answering(&self) -> InFlight {
        self.shared.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(&self.shared))
    }

    /// Counts an answer dropped because its stream had ended.
    pub(super) fn undelivered(&self) {
        self.shared.undelivered.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max: usize) -> SseConfig {
        SseConfig {
            max_streams_per_key: max,
            ..SseConfig::default()
        }
    }

    #[test]
    fn streams_are_bounded_per_key_and_released() {
        let s = Streams::new(config(2));
        let (a, _ra) = s.open("s1", "k1").unwrap();
        let (_b, _rb) = s.open("s2", "k1").unwrap();
        assert_eq!(s.open("s1", "k1").unwrap_err(), OpenError::TooMany(2));
        // Another key has its own allowance.
        let (_c, _rc) = s.open("s1", "k2").unwrap();
        s.remove(&a);
        assert!(s.open("s1", "k1").is_ok());
        assert_eq!(s.stats().open, 3);
    }

    #[test]
    fn closing_a_session_ends_only_its_streams() {
        let s = Streams::new(config(8));
        let (_a, mut ra) = s.open("s1", "k1").unwrap();
        let (_b, mut rb) = s.open("s2", "k1").unwrap();
        assert_eq!(s.close_session("s1"), 1);
        // The only sender was in the registry: the stream has ended.
        assert!(ra.try_recv().is_err());
        assert!(matches!(
            rb.try_recv(),
            Err(mpsc::error::TryRecvError::Empty)
        ));
        assert_eq!(s.stats().open, 1);
    }

    #[test]
    fn shutdown_ends_streams_and_refuses_new_ones() {
        let s = Streams::new(config(8));
        let (_a, mut ra) = s.open("s1", "k1").unwrap();
        s.close_all();
        assert!(matches!(
            ra.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        assert_eq!(s.open("s1", "k1").unwrap_err(), OpenError::Closed);
        assert_eq!(s.stats().open, 0);
    }
}
