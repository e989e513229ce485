//! Which era a POST speaks, and what a 2026-07-28 request carries in its
//! `_meta`.
//!
//! A POST is **modern** when its `MCP-Protocol-Version` header says
//! 2026-07-28, or when its one message's
//! `params._meta["io.modelcontextprotocol/protocolVersion"]` does (a modern
//! request without the header then fails header validation, -32020).
//! Anything else is **legacy** and is served exactly as before: a batch, a
//! body without that `_meta` field, or one naming a legacy version. A
//! `_meta` version the gateway does not speak answers 400 with -32022 and
//! the supported list, before any credential is looked at (the list is
//! public, `/.well-known/mcp.json` shows it too), unless the header says
//! 2026-07-28: then the two disagree, and header validation answers
//! -32020 (recorded) as for any other mismatch.
//!
//! A modern body carries exactly one message (no batches); a request
//! carries `protocolVersion` and `clientCapabilities` (an object) in
//! `_meta`, else 400 with -32602. These refusals answer with the request's
//! id ([`single_id`]), as every error of a request whose id could be read. `traceparent` and `tracestate` are kept
//! when well-formed (W3C Trace Context, version `00`) and silently dropped
//! otherwise: they reach the decision records and the log span, never an
//! answer.

use axum::http::HeaderMap;
use serde_json::{Map, Value};

use super::admission::{Messages, PROTOCOL_HEADER};
use super::call::TraceContext;
use super::error::McpError;
use super::jsonrpc::{Id, Message};
use super::protocol;

/// `_meta` key of the request's protocol version.
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the request's client capabilities.
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key the server identifies itself under in results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// Longest `tracestate` kept (the W3C limit).
const TRACESTATE_MAX: usize = 512;
/// Most `tracestate` list members (the W3C limit).
const TRACESTATE_MEMBERS: usize = 32;

/// A POST, by era.
#[derive(Debug)]
pub enum Classified {
    /// Served as before.
    Legacy(Messages),
    /// Served statelessly.
    Modern(Box<Modern>),
}

/// The one message of a 2026-07-28 POST.
#[derive(Debug)]
pub struct Modern {
    /// The request's id as written (`None`: a notification).
    pub id: Option<Id>,
    /// Its method.
    pub method: String,
    /// Its params (`null` when absent).
    pub params: Value,
    /// `_meta` clientCapabilities (empty for a notification).
    pub capabilities: Map<String, Value>,
    /// The caller's trace context, when well-formed.
    pub trace: Option<TraceContext>,
}

/// Sorts a POST into its era; see the module doc for the rules.
pub fn classify(headers: &HeaderMap, body: Messages) -> Result<Classified, McpError> {
    let meta_version = single_meta(&body)
        .and_then(|m| m.get(META_VERSION))
        .and_then(Value::as_str)
        .map(str::to_string);
    let header_modern = headers
        .get(PROTOCOL_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(protocol::is_modern);
    if let Some(v) = &meta_version
        && !protocol::is_supported(v)
        && !header_modern
    {
        return Err(McpError::UnsupportedVersion(v.clone()));
    }
    if !header_modern && !meta_version.as_deref().is_some_and(protocol::is_modern) {
        return Ok(Classified::Legacy(body));
    }
    if body.batch {
        return Err(McpError::InvalidRequest {
            id: Id::null(),
            reason: "a 2026-07-28 body carries one message, not a batch".into(),
        });
    }
    let Some(message) = body.messages.into_iter().next() else {
        return Err(McpError::InvalidRequest {
            id: Id::null(),
            reason: "empty body".into(),
        });
    };
    modern(message).map(|m| Classified::Modern(Box::new(m)))
}

/// The id of a body's one request (`None` for a batch, a notification or
/// an invalid message): the id a refusal of the whole body answers with.
pub fn single_id(body: &Messages) -> Option<Id> {
    if body.batch {
        return None;
    }
    match body.messages.first()? {
        Message::Request { id, .. } => Some(id.clone()),
        _ => None,
    }
}

/// `params._meta` of a body holding one message.
fn single_meta(body: &Messages) -> Option<&Map<String, Value>> {
    if body.batch {
        return None;
    }
    match body.messages.first()? {
        Message::Request { params, .. } | Message::Notification { params, .. } => {
            params.get("_meta")?.as_object()
        }
        _ => None,
    }
}

/// The W3C trace context of a legacy body holding one message (its
/// `params._meta`), for the records the request writes before its message
/// is answered. A batch has none at that level: each of its messages is
/// traced on its own as it is answered (`dispatch::answer`).
pub fn legacy_trace(body: &Messages) -> Option<TraceContext> {
    single_meta(body).and_then(trace_context)
}

/// Reads a modern message and checks its required `_meta` fields.
fn modern(message: Message) -> Result<Modern, McpError> {
    let (id, method, params) = match message {
        Message::Request { id, method, params } => (Some(id), method, params),
        Message::Notification { method, params } => (None, method, params),
        Message::ClientResponse => {
            return Err(McpError::InvalidRequest {
                id: Id::null(),
                reason: "a 2026-07-28 client sends no responses".into(),
            });
        }
        Message::Invalid { id, reason } => return Err(McpError::InvalidRequest { id, reason }),
    };
    let meta = params.get("_meta").and_then(Value::as_object);
    let trace = meta.and_then(trace_context);
    if id.is_none() {
        return Ok(Modern {
            id,
            method,
            params,
            capabilities: Map::new(),
            trace,
        });
    }
    if meta.and_then(|m| m.get(META_VERSION)).is_none() {
        return Err(McpError::MissingMeta(META_VERSION));
    }
    let Some(capabilities) = meta
        .and_then(|m| m.get(META_CAPABILITIES))
        .and_then(Value::as_object)
        .cloned()
    else {
        return Err(McpError::MissingMeta(META_CAPABILITIES));
    };
    Ok(Modern {
        id,
        method,
        params,
        capabilities,
        trace,
    })
}

/// The W3C trace context of a request's HTTP headers (`traceparent`,
/// `tracestate`), when well-formed: the parent of a request whose message
/// carries none in `_meta`.
pub fn header_trace(headers: &HeaderMap) -> Option<TraceContext> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let traceparent = text("traceparent")?.trim();
    if !valid_traceparent(traceparent) {
        return None;
    }
    let tracestate = text("tracestate")
        .map(str::trim)
        .filter(|s| valid_tracestate(s))
        .map(str::to_string);
    Some(TraceContext {
        traceparent: traceparent.to_string(),
        tracestate,
    })
}

/// The request's span when export is on: for a body holding one request
/// (a batch's messages get one each as they are answered), parented by
/// the trace context of its `_meta`, else of its headers.
pub fn request_span(
    gw: &crate::gateway::Gateway,
    session_id: &str,
    version: Option<&str>,
    message: Option<&Message>,
    trace: Option<&TraceContext>,
) -> Option<crate::telemetry::RequestSpan> {
    if !gw.telemetry.is_on() {
        return None;
    }
    let Some(Message::Request { id, method, params }) = message else {
        return None;
    };
    let modern = version.is_some_and(protocol::is_modern);
    gw.telemetry.request(&crate::telemetry::RequestFacts {
        method,
        id: (id.as_raw() != "null").then(|| id.as_raw().trim_matches('"')),
        target: match method.as_str() {
            "tools/call" | "prompts/get" => params.get("name").and_then(Value::as_str),
            _ => None,
        },
        session_id: (!modern).then_some(session_id),
        protocol: version,
        parent: trace.map(TraceContext::parent),
    })
}

/// `traceparent` (and `tracestate`) of a `_meta`, when well-formed.
pub fn trace_context(meta: &Map<String, Value>) -> Option<TraceContext> {
    let traceparent = meta.get("traceparent")?.as_str()?;
    if !valid_traceparent(traceparent) {
        return None;
    }
    let tracestate = meta
        .get("tracestate")
        .and_then(Value::as_str)
        .filter(|s| valid_tracestate(s))
        .map(str::to_string);
    Some(TraceContext {
        traceparent: traceparent.to_string(),
        tracestate,
    })
}

/// `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lowercase,
/// neither id all zeros (W3C Trace Context, version 00).
fn valid_traceparent(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let [version, trace_id, parent_id, flags] = parts.as_slice() else {
        return false;
    };
    let hex = |p: &str, len: usize| {
        p.len() == len && p.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let zero = |p: &str| p.bytes().all(|b| b == b'0');
    *version == "00"
        && hex(trace_id, 32)
        && !zero(trace_id)
        && hex(parent_id, 16)
        && !zero(parent_id)
        && hex(flags, 2)
}

/// At most 512 characters and 32 `key=value` members, keys of
/// `[a-z0-9_*/@-]` (vendor form `tenant@system` included), values of
/// printable ASCII without `,` and `=`.
fn valid_tracestate(s: &str) -> bool {
    if s.len() > TRACESTATE_MAX {
        return false;
    }
    let members: Vec<&str> = s
        .split(',')
        .map(|m| m.trim_matches([' ', '\t']))
        .filter(|m| !m.is_empty())
        .collect();
    !members.is_empty()
        && members.len() <= TRACESTATE_MEMBERS
        && members.iter().all(|m| {
            let Some((key, value)) = m.split_once('=') else {
                return false;
            };
            !key.is_empty()
                && key.len() <= 256
                && key.bytes().all(
                    |b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/' | b'@'),
                )
                && !value.is_empty()
                && value.len() <= 256
                && value
                    .bytes()
                    .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_format() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
        assert!(valid_traceparent(good));
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7",
            "01-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
            "00-0AF7651916CD43DD8448EB211C80319C-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01-extra",
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-0g",
        ] {
            assert!(!valid_traceparent(bad), "{bad}");
        }
    }

    #[test]
    fn tracestate_format() {
        assert!(valid_tracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
        assert!(valid_tracestate("acme@vendor=x, b=1"));
        assert!(!valid_tracestate("no-equals"));
        assert!(!valid_tracestate("UPPER=1"));
        assert!(!valid_tracestate(&"a=b,".repeat(200)));
        assert!(!valid_tracestate("a=line\nbreak"));
    }
}
