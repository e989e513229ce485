//! What both upstream transports share: the failure classes and their
//! JSON-RPC codes, and the reading of `text/event-stream` events (a
//! Streamable HTTP answer stream and the legacy transport's long-lived
//! stream carry messages the same way).

use serde_json::Value;

/// Gateway-side failure codes, shared with the A2A bridge.
pub mod codes {
    /// The upstream did not answer within the budget.
    pub const TIMEOUT: i64 = -32201;
    /// The upstream could not be reached (or answered an HTTP error).
    pub const TRANSPORT: i64 = -32202;
    /// The upstream answered something that is not a usable MCP answer.
    pub const INVALID_RESPONSE: i64 = -32203;
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

/// A connection failure, named by its innermost cause.
pub fn transport(e: &reqwest::Error) -> ClientError {
    let mut source: &dyn std::error::Error = e;
    while let Some(next) = source.source() {
        source = next;
    }
    ClientError::Transport(format!("cannot reach the upstream: {source}"))
}

pub fn too_large(max: usize) -> ClientError {
    ClientError::Invalid(format!("the upstream's answer is larger than {max} bytes"))
}

/// The end (after the blank line) of the first complete event in `buf`.
pub fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The JSON message in an event's `data:` lines, if it holds one.
pub fn event_message(event: &[u8]) -> Option<Value> {
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
