//! The Streamable HTTP transport of the session endpoint: `POST` answers
//! the JSON-RPC messages of its body, `GET` offers no server stream (405),
//! `DELETE` terminates the MCP session. Details clients rely on: the
//! `Mcp-Session-Id` header, SSE-framed answers for clients that accept
//! only `text/event-stream`.
//!
//! The gateway session in the path is authoritative: `Mcp-Session-Id` is
//! always that id. A header naming another session is refused (400), so a
//! misconfigured client cannot be mistaken for another session's; after a
//! `DELETE`, requests still carrying the id answer 404 until the client
//! initializes again (without the header), as the spec asks; terminations
//! are stored (`mcp_terminations`) and announced, so every instance of the
//! database and a restarted one refuse the id too. The gateway
//! session itself belongs to the daemon that opened it and outlives the
//! MCP session.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::admission::{Admitted, read_messages};
use super::call::resolve;
use super::dispatch::answer;
use super::error::McpError;
use super::jsonrpc::{self, Answer, Message};
use crate::gateway::Gateway;
use crate::store::notify::Change;
use crate::store::terminations;

/// The session header of Streamable HTTP.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// `POST /api/mcp/{sessionId}`: answers the body's messages (202 when
/// none of them expects an answer).
pub async fn post_endpoint(
    State(gw): State<Arc<Gateway>>,
    Path(session_id): Path<String>,
    admitted: Admitted,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, McpError> {
    let body = read_messages(&gw, body).await?;
    let call = resolve(&gw, &session_id, &headers, admitted.version, &body.messages).await?;
    if let Err(refused) = check_session_header(&gw, &headers, &session_id) {
        call.flush_deferred().await;
        return Err(refused);
    }
    let initialize = body
        .messages
        .iter()
        .any(|m| matches!(m, Message::Request { method, .. } if method == "initialize"));
    let responses = answer(&call, body.messages).await;
    if responses.is_empty() {
        return Ok(StatusCode::ACCEPTED.into_response());
    }
    let initialized = initialize && initialized(&responses);
    let text = jsonrpc::body(&responses, body.batch);
    Ok(respond(&gw, &headers, &session_id, initialized, text))
}

/// `GET /api/mcp/{sessionId}`: no server-initiated stream is offered.
pub async fn get_endpoint() -> McpError {
    McpError::NoServerStream
}

/// Refuses a `Mcp-Session-Id` that names another session (400) or a
/// terminated MCP session (404). Absent is fine: the path names the
/// session.
fn check_session_header(
    gw: &Gateway,
    headers: &HeaderMap,
    session_id: &str,
) -> Result<(), McpError> {
    let Some(value) = headers.get(SESSION_HEADER) else {
        return Ok(());
    };
    let value = value.to_str().unwrap_or("<non-ascii>");
    if value != session_id {
        return Err(McpError::SessionIdMismatch(value.to_string()));
    }
    if gw.terminated.contains(session_id) {
        return Err(McpError::SessionTerminated(session_id.to_string()));
    }
    Ok(())
}

/// Whether the client accepts only SSE (no `application/json`, no wildcard).
fn sse_only(headers: &HeaderMap) -> bool {
    let mut json = false;
    let mut sse = false;
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for range in value.split(',') {
            let media = range
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            match media.as_str() {
                "text/event-stream" => sse = true,
                "application/json" | "application/*" | "*/*" => json = true,
                _ => {}
            }
        }
    }
    sse && !json
}

/// The 200 answer of a POST: JSON, or one SSE `message` event for clients
/// that accept only `text/event-stream`. An answer to a successful
/// `initialize` carries `Mcp-Session-Id` and starts a fresh MCP session.
fn respond(
    gw: &Arc<Gateway>,
    headers: &HeaderMap,
    session_id: &str,
    initialized: bool,
    body: String,
) -> Response {
    let mut resp = if sse_only(headers) {
        let mut resp =
            (StatusCode::OK, format!("event: message\ndata: {body}\n\n")).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        resp
    } else {
        let mut resp = (StatusCode::OK, body).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    };
    if initialized {
        if gw.terminated.contains(session_id) {
            gw.terminated.forget(session_id);
            // Other instances and restarts learn it too (best effort: the
            // client is served here either way).
            let (gw, sid) = (Arc::clone(gw), session_id.to_string());
            tokio::spawn(async move {
                if let Err(e) = gw
                    .store
                    .writer()
                    .submit(vec![terminations::resume_op(&sid)])
                    .await
                {
                    tracing::warn!(error = %e, "cannot record a resumed MCP session");
                }
                crate::cluster::coherence::publish(&gw, Change::McpResumed(sid)).await;
            });
        }
        if let Ok(v) = HeaderValue::from_str(session_id) {
            resp.headers_mut().insert(SESSION_HEADER, v);
        }
    }
    resp
}

/// Whether the answers hold a successful `initialize`.
fn initialized(answers: &[Answer]) -> bool {
    answers
        .iter()
        .filter_map(Answer::result)
        .any(|r| r["protocolVersion"].is_string() && r["serverInfo"].is_object())
}

/// `DELETE /api/mcp/{sessionId}`: terminates the MCP session (and ends its
/// HTTP+SSE streams) after the same checks as any request; 204.
pub async fn delete_endpoint(
    State(gw): State<Arc<Gateway>>,
    Path(session_id): Path<String>,
    admitted: Admitted,
    headers: HeaderMap,
) -> Result<Response, McpError> {
    let call = resolve(&gw, &session_id, &headers, admitted.version, &[]).await?;
    let refused = check_session_header(&gw, &headers, &session_id);
    call.flush_deferred().await;
    refused?;
    // Every instance refuses the id from now on: stored before the 204,
    // then announced.
    let op = terminations::terminate_op(&session_id, &crate::ids::now_rfc3339());
    if let Err(e) = gw.store.writer().submit(vec![op]).await {
        tracing::error!(error = %e, "cannot record an MCP session termination");
        return Err(McpError::StorageUnavailable);
    }
    gw.terminated.remember(&session_id);
    crate::cluster::coherence::publish(&gw, Change::McpTerminated(session_id.clone())).await;
    let closed = gw.streams.close_session(&session_id);
    tracing::info!(session = %session_id, streams = closed, "MCP session terminated by the client");
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(header::ACCEPT, v);
        }
        h
    }

    #[test]
    fn sse_only_when_json_is_not_acceptable() {
        let cases = [
            ("text/event-stream", true),
            ("TEXT/EVENT-STREAM; q=1", true),
            ("application/json, text/event-stream", false),
            ("text/event-stream, */*;q=0.1", false),
            ("application/json", false),
            ("*/*", false),
            ("text/html", false),
        ];
        for (value, want) in cases {
            assert_eq!(sse_only(&accept(value)), want, "{value}");
        }
        assert!(!sse_only(&HeaderMap::new()));
    }
}
