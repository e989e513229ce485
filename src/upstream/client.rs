//! The gateway as an MCP client of one upstream over Streamable HTTP:
//! `initialize` (offering the newest version the gateway speaks and
//! accepting any it supports), `notifications/initialized`, then requests
//! carrying `Mcp-Session-Id` and `MCP-Protocol-Version`. An answer may be a
//! JSON body or an SSE stream; the stream is read until the response to
//! the request arrives, never past `max_bytes`.
//!
//! **Architecture Invariant:** the only credential sent is the upstream's
//! own bearer token, resolved by the caller; nothing of the agent's request
//! (its key, its headers) is forwarded.

use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use serde_json::{Value, json};

use crate::mcp::protocol;

/// Gateway-side failure codes, shared with the A2A bridge.
pub mod codes {
    /// The upstream did not answer within the budget.
    pub const TIMEOUT: i64 = -32201;
    /// The upstream could not be reached (or answered an HTTP error).
    pub const TRANSPORT: i64 = -32202;
    /// The upstream answered something that is not a usable MCP answer.
    pub const INVALID_RESPONSE: i64 = -32203;
}

/// Where and how to reach one upstream.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint<'a> {
    /// The MCP endpoint.
    pub url: &'a reqwest::Url,
    /// The upstream's own bearer token, if it needs one.
    pub bearer: Option<&'a str>,
    /// Largest answer accepted, in bytes.
    pub max_bytes: usize,
}

/// An initialized upstream session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// `Mcp-Session-Id` the upstream assigned (None: a stateless server).
    pub id: Option<String>,
    /// The protocol version both sides agreed on.
    pub version: String,
}

/// Why a request to an upstream failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientError {
    /// No answer within the budget (-32201).
    #[error("the upstream did not answer within {0} ms")]
    Timeout(u64),
    /// Connection failure or HTTP error (-32202).
    #[error("{0}")]
    Transport(String),
    /// Not a usable MCP answer (-32203).
    #[error("{0}")]
    Invalid(String),
    /// The upstream answered 404 to a request carrying its session id: the
    /// session expired (the caller initializes again).
    #[error("the upstream session expired")]
    Expired,
    /// The upstream answered a JSON-RPC error (passed on as it is).
    #[error("{message}")]
    Remote {
        /// Its code.
        code: i64,
        /// Its message.
        message: String,
        /// Its `data`, if any.
        data: Value,
    },
}

impl ClientError {
    /// The JSON-RPC code the caller gets.
    pub fn code(&self) -> i64 {
        match self {
            ClientError::Timeout(_) => codes::TIMEOUT,
            ClientError::Transport(_) | ClientError::Expired => codes::TRANSPORT,
            ClientError::Invalid(_) => codes::INVALID_RESPONSE,
            ClientError::Remote { code, .. } => *code,
        }
    }

    /// The failure class recorded with the call.
    pub fn class(&self) -> &'static str {
        match self {
            ClientError::Timeout(_) => "timeout",
            ClientError::Transport(_) | ClientError::Expired => "transport",
            ClientError::Invalid(_) => "invalid-response",
            ClientError::Remote { .. } => "upstream-error",
        }
    }
}

/// Request ids of this process's outbound requests.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What one POST brought back.
struct Posted {
    session_id: Option<String>,
    message: Option<Value>,
}

/// Opens a session: `initialize`, then `notifications/initialized`.
pub async fn initialize(http: &reqwest::Client, ep: Endpoint<'_>) -> Result<Session, ClientError> {
    let params = json!({
        "protocolVersion": protocol::LATEST,
        "capabilities": {},
        "clientInfo": { "name": "cedargate", "version": env!("CARGO_PKG_VERSION") },
    });
    let (posted, result) = exchange(http, ep, None, "initialize", params).await?;
    let version = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .filter(|v| protocol::SUPPORTED.contains(v))
        .ok_or_else(|| {
            ClientError::Invalid(format!(
                "the upstream offered protocol version {}, which the gateway does not speak",
                result.get("protocolVersion").unwrap_or(&Value::Null)
            ))
        })?
        .to_string();
    let session = Session {
        id: posted.session_id,
        version,
    };
    let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    post(http, ep, Some(&session), &note, None).await?;
    Ok(session)
}

/// Sends one request in `session` and returns its `result`.
pub async fn request(
    http: &reqwest::Client,
    ep: Endpoint<'_>,
    session: &Session,
    method: &str,
    params: Value,
) -> Result<Value, ClientError> {
    exchange(http, ep, Some(session), method, params)
        .await
        .map(|(_, result)| result)
}

/// Sends a request and reads its response's `result` (or error).
async fn exchange(
    http: &reqwest::Client,
    ep: Endpoint<'_>,
    session: Option<&Session>,
    method: &str,
    params: Value,
) -> Result<(Posted, Value), ClientError> {
    let id = Value::from(NEXT_ID.fetch_add(1, Ordering::Relaxed));
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    let mut posted = post(http, ep, session, &body, Some(&id)).await?;
    let Some(message) = posted.message.take() else {
        return Err(ClientError::Invalid(format!(
            "the upstream accepted `{method}` without answering it"
        )));
    };
    let result = response_result(message)?;
    Ok((posted, result))
}

/// The `result` of a JSON-RPC response, or its error as [`ClientError::Remote`].
fn response_result(mut message: Value) -> Result<Value, ClientError> {
    if let Some(error) = message.get_mut("error").map(Value::take) {
        let code = error.get("code").and_then(Value::as_i64);
        let text = error.get("message").and_then(Value::as_str);
        return match (code, text) {
            (Some(code), Some(text)) => Err(ClientError::Remote {
                code,
                message: text.to_string(),
                data: error.get("data").cloned().unwrap_or(Value::Null),
            }),
            _ => Err(ClientError::Invalid(
                "the upstream answered a malformed JSON-RPC error".into(),
            )),
        };
    }
    match message.get_mut("result").map(Value::take) {
        Some(result @ Value::Object(_)) => Ok(result),
        _ => Err(ClientError::Invalid(
            "the upstream's response has no `result` object".into(),
        )),
    }
}

/// POSTs one message; for a request (`expect` = its id) reads the response.
async fn post(
    http: &reqwest::Client,
    ep: Endpoint<'_>,
    session: Option<&Session>,
    body: &Value,
    expect: Option<&Value>,
) -> Result<Posted, ClientError> {
    let mut req = http
        .post(ep.url.clone())
        .header(ACCEPT, "application/json, text/event-stream")
        .header(CONTENT_TYPE, "application/json")
        .body(body.to_string());
    if let Some(s) = session {
        req = req.header("MCP-Protocol-Version", &s.version);
        if let Some(id) = &s.id {
            req = req.header("Mcp-Session-Id", id);
        }
    }
    if let Some(token) = ep.bearer {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.map_err(|e| transport(&e))?;
    let status = resp.status();
    let session_id = header(resp.headers(), "mcp-session-id");
    if status == reqwest::StatusCode::NOT_FOUND && session.is_some_and(|s| s.id.is_some()) {
        return Err(ClientError::Expired);
    }
    if !status.is_success() {
        return Err(ClientError::Transport(format!(
            "the upstream answered HTTP {}",
            status.as_u16()
        )));
    }
    let Some(expect) = expect else {
        return Ok(Posted {
            session_id,
            message: None,
        });
    };
    let is_sse =
        header(resp.headers(), "content-type").is_some_and(|t| t.starts_with("text/event-stream"));
    let message = if is_sse {
        read_sse(resp, expect, ep.max_bytes).await?
    } else {
        let bytes = read_limited(resp, ep.max_bytes).await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| ClientError::Invalid(format!("the upstream answered non-JSON: {e}")))?
    };
    Ok(Posted {
        session_id,
        message: Some(message),
    })
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A connection failure, named by its innermost cause.
fn transport(e: &reqwest::Error) -> ClientError {
    let mut source: &dyn std::error::Error = e;
    while let Some(next) = source.source() {
        source = next;
    }
    ClientError::Transport(format!("cannot reach the upstream: {source}"))
}

fn too_large(max: usize) -> ClientError {
    ClientError::Invalid(format!("the upstream's answer is larger than {max} bytes"))
}

async fn read_limited(mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>, ClientError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport(&e))? {
        if body.len() + chunk.len() > max {
            return Err(too_large(max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads SSE events until the response whose id is `expect` (requests and
/// notifications from the upstream on the way are skipped).
async fn read_sse(
    mut resp: reqwest::Response,
    expect: &Value,
    max: usize,
) -> Result<Value, ClientError> {
    let mut buffer: Vec<u8> = Vec::new();
    let mut read = 0usize;
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport(&e))? {
        read += chunk.len();
        if read > max {
            return Err(too_large(max));
        }
        buffer.extend_from_slice(&chunk);
        while let Some(end) = event_end(&buffer) {
            let event: Vec<u8> = buffer.drain(..end).collect();
            if let Some(message) = event_message(&event)
                && message.get("id") == Some(expect)
                && (message.get("result").is_some() || message.get("error").is_some())
            {
                return Ok(message);
            }
        }
    }
    Err(ClientError::Invalid(
        "the upstream's event stream ended without the response".into(),
    ))
}

/// The end (after the blank line) of the first complete event in `buf`.
fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The JSON message in an event's `data:` lines, if it holds one.
fn event_message(event: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(event).ok()?;
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return None;
    }
    serde_json::from_str(&data.join("\n")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_and_read() {
        let buf = b"event: message\ndata: {\"id\":1}\n\ndata: x";
        let end = event_end(buf).unwrap();
        assert_eq!(event_message(&buf[..end]), Some(json!({"id": 1})));
        assert_eq!(event_end(&buf[end..]), None);
    }

    #[test]
    fn errors_keep_the_upstream_code() {
        let e = response_result(json!({"error": {"code": -32000, "message": "no"}})).unwrap_err();
        assert_eq!(e.code(), -32000);
        assert_eq!(e.to_string(), "no");
        assert_eq!(
            response_result(json!({"result": 1})).unwrap_err().code(),
            codes::INVALID_RESPONSE
        );
    }
}
