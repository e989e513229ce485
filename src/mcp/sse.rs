//! The HTTP+SSE transport of protocol 2024-11-05, per session:
//! `GET /api/mcp/{sessionId}/sse` opens a stream whose first event,
//! `endpoint`, names where to POST; each `POST
//! /api/mcp/{sessionId}/messages?streamId=…` is answered 202 and its
//! JSON-RPC response travels on the stream as a `message` event.
//!
//! Both requests pass the same checks as the Streamable HTTP endpoint
//! (origin/host, protocol header, key, session, tenant isolation, Cedar
//! `access_session`), and messages are answered by the same dispatch, so
//! the PEP and the decision trail cannot differ between transports.
//!
//! **Architecture Invariant:** a POSTed message is answered in a task that
//! does not depend on the stream or the POST staying open: a client that
//! goes away mid-call still gets its decisions recorded; only the delivery
//! of the answer is dropped. Streams are bounded per key, answered messages
//! per stream, and every stream ends on client disconnect, on `DELETE` of
//! its session, and on shutdown.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

use super::jsonrpc::{self, Answer, Message};
use super::{Call, admit_headers, http_error, read_messages, resolve};
use crate::config::SseConfig;
use crate::gateway::Gateway;

/// The protocol revision this transport belongs to: what a stream speaks
/// until an `initialize` on it negotiates something else.
pub const LEGACY_VERSION: &str = "2024-11-05";

/// Events buffered per stream before answering tasks wait for the client.
const STREAM_BUFFER: usize = 64;

/// One open stream, as the POST side sees it.
#[derive(Debug, Clone)]
struct Entry {
    session_id: String,
    key_id: String,
    /// Where answers go; dropping every sender ends the stream.
    tx: mpsc::Sender<Event>,
    /// The version an `initialize` on this stream negotiated.
    version: Arc<Mutex<Option<String>>>,
    /// Bounds the messages of this stream being answered at once.
    slots: Arc<Semaphore>,
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
enum OpenError {
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

    fn open(
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

    fn get(&self, id: &Uuid) -> Option<Entry> {
        self.shared
            .registry
            .lock()
            .ok()
            .and_then(|r| r.streams.get(id).cloned())
    }

    fn remove(&self, id: &Uuid) {
        if let Ok(mut r) = self.shared.registry.lock() {
            r.remove(id);
        }
    }
}

/// Unregisters a stream when its response body is dropped (the client went
/// away, or the stream ended).
struct Registration {
    streams: Streams,
    id: Uuid,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.streams.remove(&self.id);
        tracing::debug!(stream = %self.id, "SSE stream closed");
    }
}

/// Counts an answering task while it runs.
struct InFlight(Arc<Shared>);

impl InFlight {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(shared))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `GET /api/mcp/{sessionId}/sse`: opens a stream after the same checks as
/// any request to the session.
pub async fn open_stream(
    State(gw): State<Arc<Gateway>>,
    Path(session_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let version = match admit_headers(&gw, &headers) {
        Ok(v) => v,
        Err(resp) => return *resp,
    };
    let call = match resolve(&gw, &session_id, &headers, version).await {
        Ok(call) => call,
        Err(resp) => return resp,
    };
    call.flush_deferred().await;
    let opened = gw.streams.open(&session_id, &call.view.key.id);
    let (id, rx) = match opened {
        Ok(o) => o,
        Err(e @ OpenError::TooMany(max)) => {
            let mut resp = super::json_response(
                StatusCode::TOO_MANY_REQUESTS,
                &jsonrpc::error_response(
                    Value::Null,
                    &jsonrpc::RpcError::with_data(
                        jsonrpc::INVALID_REQUEST,
                        e.to_string(),
                        json!({ "maxStreamsPerKey": max }),
                    ),
                ),
            );
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("5"),
            );
            return resp;
        }
        Err(e @ OpenError::Closed) => {
            return http_error(
                StatusCode::SERVICE_UNAVAILABLE,
                jsonrpc::INTERNAL_ERROR,
                e.to_string(),
            );
        }
    };
    let registration = Registration {
        streams: gw.streams.clone(),
        id,
    };
    // The first event tells the client where to POST. The buffer is fresh,
    // so this cannot wait.
    if let Some(entry) = gw.streams.get(&id) {
        let endpoint = format!("/api/mcp/{session_id}/messages?streamId={id}");
        let _ = entry
            .tx
            .try_send(Event::default().event("endpoint").data(endpoint));
    }
    tracing::debug!(stream = %id, session = %session_id, "SSE stream opened");
    let events = ReceiverStream::new(rx).map(move |event| {
        let _held = &registration;
        Ok::<Event, Infallible>(event)
    });
    let keepalive = Duration::from_secs(gw.config.sse.keepalive_secs.max(1));
    let mut resp = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(keepalive).text("keep-alive"))
        .into_response();
    resp.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-cache"),
    );
    resp
}

/// Query of the message endpoint.
#[derive(Debug, Deserialize)]
pub struct MessageQuery {
    #[serde(rename = "streamId")]
    stream_id: Option<String>,
}

/// `POST /api/mcp/{sessionId}/messages?streamId=…`: accepts a message
/// (or batch) for an open stream with 202; the answer goes on the stream.
pub async fn post_message(
    State(gw): State<Arc<Gateway>>,
    Path(session_id): Path<String>,
    Query(query): Query<MessageQuery>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let header_version = match admit_headers(&gw, &headers) {
        Ok(v) => v,
        Err(resp) => return *resp,
    };
    let Some(stream_id) = query.stream_id else {
        return http_error(
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_REQUEST,
            "missing `streamId` query parameter: POST to the URL of the stream's `endpoint` event",
        );
    };
    let (batch, messages) = match read_messages(&gw, body).await {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let mut call = match resolve(&gw, &session_id, &headers, header_version.clone()).await {
        Ok(call) => call,
        Err(resp) => return resp,
    };
    // Only the key that opened the stream, on its session, may post to it;
    // anything else looks like a stream that does not exist.
    let entry = Uuid::parse_str(&stream_id)
        .ok()
        .and_then(|id| gw.streams.get(&id))
        .filter(|e| e.session_id == session_id && e.key_id == call.view.key.id);
    let Some(entry) = entry else {
        call.flush_deferred().await;
        return http_error(
            StatusCode::NOT_FOUND,
            jsonrpc::SESSION_NOT_FOUND,
            format!(
                "stream `{stream_id}` is not open for this session and key; open a new one with GET /api/mcp/{session_id}/sse"
            ),
        );
    };
    call.version = header_version
        .or_else(|| entry.version.lock().ok().and_then(|v| v.clone()))
        .unwrap_or_else(|| LEGACY_VERSION.to_string());

    // Wait for a slot before accepting: a flood of POSTs is slowed down,
    // not queued without bound.
    let Ok(slot) = Arc::clone(&entry.slots).acquire_owned().await else {
        call.flush_deferred().await;
        return http_error(
            StatusCode::SERVICE_UNAVAILABLE,
            jsonrpc::INTERNAL_ERROR,
            "stream is closing",
        );
    };
    let running = InFlight::new(&gw.streams.shared);
    let undelivered = Arc::clone(&gw.streams.shared);
    tokio::spawn(async move {
        let _slot = slot;
        let _running = running;
        answer_on_stream(call, batch, messages, entry, &undelivered).await;
    });
    StatusCode::ACCEPTED.into_response()
}

/// Answers the messages with the shared dispatch, remembers a version
/// negotiated by `initialize`, and sends the answer on the stream.
async fn answer_on_stream(
    call: Call,
    batch: bool,
    messages: Vec<Message>,
    entry: Entry,
    shared: &Shared,
) {
    let initialize_ids: Vec<Value> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Request { id, method, .. } if method == "initialize" => Some(id.clone()),
            _ => None,
        })
        .collect();
    let responses = super::answer(&call, messages).await;
    if let Some(version) = responses
        .iter()
        .filter_map(Answer::json)
        .filter(|r| initialize_ids.contains(&r["id"]))
        .find_map(|r| r["result"]["protocolVersion"].as_str())
        && let Ok(mut v) = entry.version.lock()
    {
        *v = Some(version.to_string());
    }
    if responses.is_empty() {
        return;
    }
    let body = super::jsonrpc::body(&responses, batch);
    let event = Event::default().event("message").data(body);
    if entry.tx.send(event).await.is_err() {
        shared.undelivered.fetch_add(1, Ordering::SeqCst);
        tracing::debug!(session = %entry.session_id, "answer dropped: the SSE stream had ended");
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
