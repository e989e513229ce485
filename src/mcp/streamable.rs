//! Streamable HTTP details of the session endpoint that clients rely on:
//! the `Mcp-Session-Id` header, SSE-framed answers for clients that accept
//! only `text/event-stream`, and `DELETE` to terminate the MCP session.
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
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use moka::sync::Cache;

use super::jsonrpc::Answer;
use super::{admit_headers, http_error, json_text_response, jsonrpc, resolve};
use crate::gateway::Gateway;
use crate::store::db::Value as SqlValue;
use crate::store::notify::Change;
use crate::store::{Conn, StoreError, WriteOp};

/// The session header of Streamable HTTP.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// Most terminated MCP sessions remembered.
const TERMINATED_CAPACITY: u64 = 100_000;

/// How long a termination is remembered; a client still sending the id
/// after that is served again (the path is authoritative anyway).
const TERMINATED_TTL: Duration = Duration::from_secs(24 * 3600);

/// MCP sessions terminated by `DELETE` and not initialized again.
#[derive(Debug)]
pub struct Terminated {
    sessions: Cache<String, ()>,
}

impl Default for Terminated {
    fn default() -> Self {
        Terminated {
            sessions: Cache::builder()
                .max_capacity(TERMINATED_CAPACITY)
                .time_to_live(TERMINATED_TTL)
                .build(),
        }
    }
}

impl Terminated {
    fn contains(&self, session_id: &str) -> bool {
        self.sessions.contains_key(session_id)
    }

    /// Remembers a termination (made here or on another instance).
    pub fn remember(&self, session_id: &str) {
        self.sessions.insert(session_id.to_string(), ());
    }

    /// Forgets one: a new MCP session started.
    pub fn forget(&self, session_id: &str) {
        self.sessions.invalidate(session_id);
    }
}

/// The oldest termination still remembered (now minus the TTL).
pub fn remembered_since() -> String {
    crate::ids::rfc3339(time::OffsetDateTime::now_utc() - TERMINATED_TTL)
}

/// Terminations stored since `since` (every instance's).
pub fn load_terminations(conn: &mut Conn, since: &str) -> Result<Vec<String>, StoreError> {
    conn.query_map(
        "SELECT session_id FROM mcp_terminations WHERE terminated_at >= ?1",
        crate::params![since],
        |r| r.get(0),
    )
}

/// Stores a termination (replacing an older one of the same session).
fn termination_op(session_id: &str) -> WriteOp {
    WriteOp::Exec {
        sql: "INSERT INTO mcp_terminations (session_id, terminated_at) VALUES (?1, ?2)
              ON CONFLICT (session_id) DO UPDATE SET terminated_at = excluded.terminated_at",
        params: vec![
            SqlValue::Text(session_id.to_string()),
            SqlValue::Text(crate::ids::now_rfc3339()),
        ],
    }
}

/// Forgets a stored termination.
fn resumption_op(session_id: &str) -> WriteOp {
    WriteOp::Exec {
        sql: "DELETE FROM mcp_terminations WHERE session_id = ?1",
        params: vec![SqlValue::Text(session_id.to_string())],
    }
}

/// Refuses a `Mcp-Session-Id` that names another session (400) or a
/// terminated MCP session (404), answering with the refusal. Absent is
/// fine: the path names the session.
pub(super) fn check_session_header(
    gw: &Gateway,
    headers: &HeaderMap,
    session_id: &str,
) -> Option<Response> {
    let value = headers.get(SESSION_HEADER)?;
    let value = value.to_str().unwrap_or("<non-ascii>");
    if value != session_id {
        return Some(http_error(
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_REQUEST,
            format!("`Mcp-Session-Id` `{value}` does not name the session in the path"),
        ));
    }
    if gw.terminated.contains(session_id) {
        return Some(http_error(
            StatusCode::NOT_FOUND,
            jsonrpc::SESSION_NOT_FOUND,
            format!(
                "MCP session `{session_id}` was terminated; send `initialize` without `Mcp-Session-Id` to start a new one"
            ),
        ));
    }
    None
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
pub(super) fn respond(
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
        json_text_response(StatusCode::OK, body)
    };
    if initialized {
        if gw.terminated.contains(session_id) {
            gw.terminated.forget(session_id);
            // Other instances and restarts learn it too (best effort: the
            // client is served here either way).
            let (gw, sid) = (Arc::clone(gw), session_id.to_string());
            tokio::spawn(async move {
                if let Err(e) = gw.store.writer().submit(vec![resumption_op(&sid)]).await {
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
pub(super) fn initialized(answers: &[Answer]) -> bool {
    answers.iter().filter_map(Answer::json).any(|r| {
        r["result"]["protocolVersion"].is_string() && r["result"]["serverInfo"].is_object()
    })
}

/// `DELETE /api/mcp/{sessionId}`: terminates the MCP session (and ends its
/// HTTP+SSE streams) after the same checks as any request; 204.
pub async fn delete_endpoint(
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
    let refused = check_session_header(&gw, &headers, &session_id);
    call.flush_deferred().await;
    if let Some(resp) = refused {
        return resp;
    }
    // Every instance refuses the id from now on: stored before the 204,
    // then announced.
    if let Err(e) = gw
        .store
        .writer()
        .submit(vec![termination_op(&session_id)])
        .await
    {
        tracing::error!(error = %e, "cannot record an MCP session termination");
        return http_error(
            StatusCode::SERVICE_UNAVAILABLE,
            jsonrpc::INTERNAL_ERROR,
            "storage unavailable",
        );
    }
    gw.terminated.remember(&session_id);
    crate::cluster::coherence::publish(&gw, Change::McpTerminated(session_id.clone())).await;
    let closed = gw.streams.close_session(&session_id);
    tracing::info!(session = %session_id, streams = closed, "MCP session terminated by the client");
    StatusCode::NO_CONTENT.into_response()
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
