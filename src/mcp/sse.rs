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

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

use super::admission::{Admitted, read_messages};
use super::call::{Call, Target, resolve};
use super::dispatch::answer;
use super::error::McpError;
use super::jsonrpc::{self, Answer, Id, Message};
use super::streams::{Entry, Registration};
use crate::gateway::Gateway;

/// The protocol revision this transport belongs to: what a stream speaks
/// until an `initialize` on it negotiates something else.
pub const LEGACY_VERSION: &str = "2024-11-05";

/// `GET /api/mcp/{sessionId}/sse`: opens a stream after the same checks as
/// any request to the session.
pub async fn open_stream(
    State(gw): State<Arc<Gateway>>,
    Path(session_id): Path<String>,
    admitted: Admitted,
    headers: HeaderMap,
) -> Result<Response, McpError> {
    let call = resolve(
        &gw,
        &Target::session(&session_id),
        &headers,
        admitted.version,
        &[],
    )
    .await?;
    call.flush_deferred().await;
    let (id, rx) = gw.streams.open(&session_id, &call.view.key.id)?;
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
    Ok(resp)
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
    admitted: Admitted,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, McpError> {
    let stream_id = query.stream_id.ok_or(McpError::MissingStreamId)?;
    let body = read_messages(&gw, body).await?;
    let mut call = resolve(
        &gw,
        &Target::session(&session_id),
        &headers,
        admitted.version.clone(),
        &body.messages,
    )
    .await?;
    call.trace = super::era::header_trace(&headers);
    // Only the key that opened the stream, on its session, may post to it;
    // anything else looks like a stream that does not exist.
    let entry = Uuid::parse_str(&stream_id)
        .ok()
        .and_then(|id| gw.streams.get(&id))
        .filter(|e| e.session_id == session_id && e.key_id == call.view.key.id);
    let Some(entry) = entry else {
        call.flush_deferred().await;
        return Err(McpError::StreamNotOpen {
            stream_id,
            session_id,
        });
    };
    call.version = admitted
        .version
        .or_else(|| entry.version.lock().ok().and_then(|v| v.clone()))
        .unwrap_or_else(|| LEGACY_VERSION.to_string());

    // Wait for a slot before accepting: a flood of POSTs is slowed down,
    // not queued without bound.
    let Ok(slot) = Arc::clone(&entry.slots).acquire_owned().await else {
        call.flush_deferred().await;
        return Err(McpError::Closing("stream is closing"));
    };
    let running = gw.streams.answering();
    tokio::spawn(async move {
        let _slot = slot;
        let _running = running;
        answer_on_stream(call, body.batch, body.messages, entry).await;
    });
    Ok(StatusCode::ACCEPTED.into_response())
}

/// Answers the messages with the shared dispatch, remembers a version
/// negotiated by `initialize`, and sends the answer on the stream.
async fn answer_on_stream(call: Call, batch: bool, messages: Vec<Message>, entry: Entry) {
    let initialize_ids: Vec<Id> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Request { id, method, .. } if method == "initialize" => Some(id.clone()),
            _ => None,
        })
        .collect();
    let responses = answer(&call, messages, None).await;
    if let Some(version) = responses
        .iter()
        .filter(|a| initialize_ids.contains(a.id()))
        .filter_map(Answer::result)
        .find_map(|r| r["protocolVersion"].as_str())
        && let Ok(mut v) = entry.version.lock()
    {
        *v = Some(version.to_string());
    }
    if responses.is_empty() {
        return;
    }
    let body = jsonrpc::body(&responses, batch);
    let event = Event::default().event("message").data(body);
    if entry.tx.send(event).await.is_err() {
        call.gw.streams.undelivered();
        tracing::debug!(session = %entry.session_id, "answer dropped: the SSE stream had ended");
    }
}
