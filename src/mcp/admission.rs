//! HTTP admission, shared by every MCP route before any credential is
//! looked at: `Origin` and `Host` against the allow-lists (DNS rebinding,
//! 403), then `MCP-Protocol-Version` (400); for POSTs, the body within its
//! size, time and nesting limits, parsed and classified into JSON-RPC
//! messages.
//!
//! [`Admitted`] is an axum extractor, so a route cannot forget the header
//! checks: they run before its handler body does. [`AdmittedPost`] (the
//! Streamable HTTP POST) checks `Origin` and `Host` the same way but keeps
//! an unsupported `MCP-Protocol-Version` for the handler to answer once the
//! body is read, so the -32022 carries the request's id (still before any
//! credential is looked at).

use std::sync::Arc;

use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use bytes::BytesMut;
use tokio::time::Instant;
use tokio_stream::StreamExt;

use super::error::McpError;
use super::jsonrpc::{self, Id, Message, Parsed};
use super::protocol;
use crate::config::{HttpSecurity, Limits};
use crate::gateway::Gateway;

/// Header carrying the negotiated protocol version after `initialize`.
pub const PROTOCOL_HEADER: &str = "mcp-protocol-version";

/// A request whose `Origin`, `Host` and protocol header were accepted.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The version `MCP-Protocol-Version` asked for, if it was sent.
    pub version: Option<String>,
}

impl FromRequestParts<Arc<Gateway>> for Admitted {
    type Rejection = McpError;

    async fn from_request_parts(
        parts: &mut Parts,
        gw: &Arc<Gateway>,
    ) -> Result<Self, Self::Rejection> {
        let post = AdmittedPost::from_request_parts(parts, gw).await?;
        Ok(Admitted {
            version: post.version?,
        })
    }
}

/// A Streamable HTTP POST whose `Origin` and `Host` were accepted; its
/// `MCP-Protocol-Version` is judged by the handler (see the module doc).
#[derive(Debug)]
pub struct AdmittedPost {
    /// The version `MCP-Protocol-Version` asked for, if it was sent, or
    /// the refusal of an unsupported one.
    pub version: Result<Option<String>, McpError>,
}

impl FromRequestParts<Arc<Gateway>> for AdmittedPost {
    type Rejection = McpError;

    async fn from_request_parts(
        parts: &mut Parts,
        gw: &Arc<Gateway>,
    ) -> Result<Self, Self::Rejection> {
        check_origin_and_host(gw, &parts.headers)?;
        super::credential::refuse_query_token(
            gw,
            &parts.headers,
            parts.uri.path(),
            parts.uri.query(),
        )?;
        Ok(AdmittedPost {
            version: header_version(&parts.headers),
        })
    }
}

/// Checks `Origin` and `Host` against the allow-lists (DNS rebinding).
fn check_origin_and_host(gw: &Gateway, headers: &HeaderMap) -> Result<(), McpError> {
    let sec = &gw.config.http;
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("<non-ascii>");
        let allowed = sec
            .allowed_origins
            .iter()
            .any(|a| a == "*" || strip_port(origin) == strip_port(a));
        if !allowed {
            return Err(McpError::OriginNotAllowed(origin.to_string()));
        }
    }
    if !sec.allowed_hosts.iter().any(|h| h == "*") {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let name = host_name(host);
        if !sec
            .allowed_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name))
        {
            return Err(McpError::HostNotAllowed(host.to_string()));
        }
    }
    Ok(())
}

/// `scheme://host:port` → `scheme://host`.
fn strip_port(origin: &str) -> &str {
    let after_scheme = origin.find("://").map(|i| i + 3).unwrap_or(0);
    let rest = origin.get(after_scheme..).unwrap_or("");
    let end = if rest.starts_with('[') {
        rest.find(']').map(|i| i + 1).unwrap_or(rest.len())
    } else {
        rest.find([':', '/']).unwrap_or(rest.len())
    };
    origin.get(..after_scheme + end).unwrap_or(origin)
}

pub use super::public_url::host_name;

/// The `MCP-Protocol-Version` header: absent, or a supported version.
fn header_version(headers: &HeaderMap) -> Result<Option<String>, McpError> {
    match headers.get(PROTOCOL_HEADER) {
        None => Ok(None),
        Some(v) => match v.to_str() {
            Ok(v) if protocol::is_supported(v) => Ok(Some(v.to_string())),
            _ => Err(McpError::UnsupportedVersion(
                v.to_str().unwrap_or("<non-ascii>").to_string(),
            )),
        },
    }
}

/// The JSON-RPC messages of a POST body.
#[derive(Debug)]
pub struct Messages {
    /// Whether the body was a batch (answered with an array).
    pub batch: bool,
    /// Its messages in order.
    pub messages: Vec<Message>,
}

/// Reads a body within the limits and classifies its messages. A body that
/// is not one valid request or a non-empty, bounded batch is refused here.
pub async fn read_messages(gw: &Gateway, body: Body) -> Result<Messages, McpError> {
    let limits = &gw.config.limits;
    let bytes = read_body(body, limits.max_body_bytes, &gw.config.http).await?;
    messages(&bytes, limits)
}

/// The entry point of the body parser: a whole body, read within its size
/// and time, checked in order (nesting depth before any parser, JSON, a
/// non-empty batch within its length, a single element that is a valid
/// request) and classified into its messages.
pub fn messages(bytes: &[u8], limits: &Limits) -> Result<Messages, McpError> {
    if jsonrpc::depth_exceeds(bytes, limits.max_json_depth) {
        return Err(McpError::TooDeep(limits.max_json_depth));
    }
    let parsed = jsonrpc::parse(bytes).map_err(|e| McpError::Parse(e.to_string()))?;
    let (batch, messages) = match parsed {
        Parsed::Batch(items) => {
            if items.is_empty() {
                return Err(McpError::InvalidRequest {
                    id: Id::null(),
                    reason: "empty batch".into(),
                });
            }
            if items.len() > limits.max_batch_len {
                return Err(McpError::BatchTooLong {
                    len: items.len(),
                    max: limits.max_batch_len,
                });
            }
            (true, items.into_iter().map(jsonrpc::classify).collect())
        }
        Parsed::Single(one) => (false, vec![jsonrpc::classify(one)]),
    };
    if !batch && let Some(Message::Invalid { id, reason }) = messages.first() {
        return Err(McpError::InvalidRequest {
            id: id.clone(),
            reason: reason.clone(),
        });
    }
    Ok(Messages { batch, messages })
}

/// Reads a whole body within its bounds of size and time:
/// - a `Content-Length` or a body over `max` bytes: 413;
/// - a body that is not done `http.body_read_timeout_ms` after reading
///   began: 408;
/// - a body that stalls for `http.body_stall_timeout_ms` before its end (a
///   body shorter than its `Content-Length` whose client then waits): 400;
/// - a body the connection cannot deliver (malformed chunked encoding, or
///   the client closed before its end): 400.
async fn read_body(body: Body, max: usize, http: &HttpSecurity) -> Result<Bytes, McpError> {
    let declared = usize::try_from(HttpBody::size_hint(&body).lower()).unwrap_or(usize::MAX);
    if declared > max {
        return Err(McpError::BodyTooLarge(max));
    }
    let deadline = Instant::now() + Duration::from_millis(http.body_read_timeout_ms);
    let stall = Duration::from_millis(http.body_stall_timeout_ms);
    let mut frames = body.into_data_stream();
    // A declared length reserves at most 64 KiB before bytes arrive.
    let mut buf = BytesMut::with_capacity(declared.min(64 * 1024));
    loop {
        let wait = (Instant::now() + stall).min(deadline);
        match tokio::time::timeout_at(wait, frames.next()).await {
            Err(_) if Instant::now() >= deadline => {
                return Err(McpError::BodyTimeout(http.body_read_timeout_ms));
            }
            Err(_) => return Err(McpError::BodyIncomplete(http.body_stall_timeout_ms)),
            Ok(None) => return Ok(buf.freeze()),
            Ok(Some(Err(_))) => return Err(McpError::BodyMalformed),
            Ok(Some(Ok(chunk))) => {
                if buf.len().saturating_add(chunk.len()) > max {
                    return Err(McpError::BodyTooLarge(max));
                }
                buf.extend_from_slice(&chunk);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_and_host_parsing() {
        assert_eq!(strip_port("http://localhost:3000"), "http://localhost");
        assert_eq!(strip_port("http://[::1]:80"), "http://[::1]");
        assert_eq!(strip_port("https://evil.example/x"), "https://evil.example");
        assert_eq!(host_name("127.0.0.1:8080"), "127.0.0.1");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("localhost"), "localhost");
    }
}
