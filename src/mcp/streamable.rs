//! The Streamable HTTP transport of the session endpoint: `POST` answers
//! the JSON-RPC messages of its body, `GET` offers no server stream (405),
//! `DELETE` terminates the MCP session. A 2026-07-28 POST (see `era`) is
//! served statelessly by `modern`; at that revision `GET` and `DELETE`
//! answer 405 with `Allow: POST`. Details clients rely on: the
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
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::admission::{Admitted, AdmittedPost, PROTOCOL_HEADER, read_messages};
use super::call::{Target, resolve};
use super::dispatch::answer;
use super::era::{self, Classified};
use super::error::{McpError, stepped_up};
use super::framing::framed;
use super::jsonrpc::{self, Answer, Message};
use super::{modern, protocol};
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
    admitted: AdmittedPost,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, McpError> {
    post_at(gw, Target::session(&session_id), admitted, headers, body).await
}

/// A POST to the endpoint of `target` (a session's own, or a person's
/// project URL once it found their session).
pub async fn post_at(
    gw: Arc<Gateway>,
    target: Target,
    admitted: AdmittedPost,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, McpError> {
    let session_id = target.session_id.as_str();
    let messages = read_messages(&gw, body).await?;
    let id = era::single_id(&messages);
    let version = match admitted.version {
        Ok(version) => version,
        Err(refused) => return Ok(refused.modern_response(id.as_ref())),
    };
    let body = match era::classify(&headers, messages) {
        Ok(Classified::Legacy(body)) => body,
        Ok(Classified::Modern(request)) => {
            return Ok(modern::serve(&gw, &target, &headers, *request).await);
        }
        Err(refused) => return Ok(refused.modern_response(id.as_ref())),
    };
    let trace = era::legacy_trace(&body).or_else(|| era::header_trace(&headers));
    // A body of one request is one span from here (admission included).
    let span = era::request_span(
        &gw,
        session_id,
        version.as_deref(),
        body.messages.first().filter(|_| !body.batch),
        trace.as_ref(),
    );
    let context = span.as_ref().map(|s| s.context().clone());
    let served = crate::telemetry::scoped(
        context.as_ref(),
        serve_legacy(&gw, &target, &headers, version, body, trace, span),
    )
    .await;
    Ok(served)
}

/// Serves a legacy-era body (the request's span, if any, ends with it).
async fn serve_legacy(
    gw: &Arc<Gateway>,
    target: &Target,
    headers: &HeaderMap,
    version: Option<String>,
    body: super::admission::Messages,
    trace: Option<super::call::TraceContext>,
    span: Option<crate::telemetry::RequestSpan>,
) -> Response {
    match answer_legacy(gw, target, headers, version, body, trace, span.as_ref()).await {
        Ok(resp) => resp,
        Err(e) => {
            if let Some(span) = &span {
                let rpc = e.rpc();
                span.failed(rpc.code, &rpc.message);
            }
            e.into_response()
        }
    }
}

/// Admission and the messages' answers.
async fn answer_legacy(
    gw: &Arc<Gateway>,
    target: &Target,
    headers: &HeaderMap,
    version: Option<String>,
    body: super::admission::Messages,
    trace: Option<super::call::TraceContext>,
    span: Option<&crate::telemetry::RequestSpan>,
) -> Result<Response, McpError> {
    let session_id = target.session_id.as_str();
    let mut call = resolve(gw, target, headers, version, &body.messages).await?;
    call.trace = trace;
    if let Some(span) = span {
        span.protocol(&call.version);
        call.enter_span(span.ids());
    }
    if let Err(refused) = check_session_header(gw, headers, session_id).await {
        call.flush_deferred().await;
        return Err(refused);
    }
    let initialize = body
        .messages
        .iter()
        .any(|m| matches!(m, Message::Request { method, .. } if method == "initialize"));
    let responses = answer(&call, body.messages, span).await;
    if responses.is_empty() {
        return Ok(StatusCode::ACCEPTED.into_response());
    }
    let initialized = initialize && initialized(&responses);
    if initialized {
        resume(gw, session_id).await;
    }
    let text = jsonrpc::body(&responses, body.batch);
    let mut resp = respond(headers, session_id, initialized, text);
    if let Some(refusal) = call.take_step_up() {
        stepped_up(&mut resp, &refusal);
    }
    Ok(resp)
}

/// `GET /api/mcp/{sessionId}`: no server-initiated stream is offered
/// (and 2026-07-28 has none at all).
pub async fn get_endpoint(headers: HeaderMap) -> McpError {
    if modern_header(&headers) {
        return McpError::StatelessOnly;
    }
    McpError::NoServerStream
}

/// Whether `MCP-Protocol-Version` says 2026-07-28.
fn modern_header(headers: &HeaderMap) -> bool {
    headers
        .get(PROTOCOL_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(protocol::is_modern)
}

/// Refuses a `Mcp-Session-Id` that names another session (400) or a
/// terminated MCP session (404). Absent is fine: the path names the
/// session. This instance's list of terminations is a hint kept current by
/// notifications; the store decides, so a mark left by a notification that
/// a resume overtook never refuses a live session.
async fn check_session_header(
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
    if !gw.terminated.contains(session_id) {
        return Ok(());
    }
    let sid = session_id.to_string();
    // A store that cannot answer counts as terminated: the safe side.
    let stored = gw
        .store
        .read(move |c| terminations::is_stored(c, &sid))
        .await
        .unwrap_or(true);
    if !stored {
        gw.terminated.forget(session_id);
        return Ok(());
    }
    Err(McpError::SessionTerminated(session_id.to_string()))
}

/// A successful `initialize` starts a fresh MCP session: a termination of
/// this session is deleted before the answer leaves (so no instance, nor a
/// late notification, can refuse the new session), then announced.
async fn resume(gw: &Gateway, session_id: &str) {
    if !gw.terminated.contains(session_id) {
        return;
    }
    let op = terminations::resume_op(session_id);
    if let Err(e) = gw.store.writer().submit(vec![op]).await {
        // The client is served either way; the stored termination then
        // refuses its next request and it initializes again.
        tracing::warn!(error = %e, "cannot record a resumed MCP session");
    }
    gw.terminated.forget(session_id);
    crate::cluster::coherence::publish(gw, Change::McpResumed(session_id.to_string())).await;
}

/// The 200 answer of a POST: JSON, or one SSE `message` event for clients
/// that accept only `text/event-stream`. An answer to a successful
/// `initialize` carries `Mcp-Session-Id`.
fn respond(headers: &HeaderMap, session_id: &str, initialized: bool, body: String) -> Response {
    let mut resp = framed(headers, body);
    if initialized && let Ok(v) = HeaderValue::from_str(session_id) {
        resp.headers_mut().insert(SESSION_HEADER, v);
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
    delete_at(gw, Target::session(&session_id), admitted, headers).await
}

/// A DELETE of the MCP session of `target`.
pub async fn delete_at(
    gw: Arc<Gateway>,
    target: Target,
    admitted: Admitted,
    headers: HeaderMap,
) -> Result<Response, McpError> {
    if admitted.version.as_deref().is_some_and(protocol::is_modern) {
        return Err(McpError::StatelessOnly);
    }
    let session_id = target.session_id.clone();
    let call = resolve(&gw, &target, &headers, admitted.version, &[]).await?;
    let refused = check_session_header(&gw, &headers, &session_id).await;
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
