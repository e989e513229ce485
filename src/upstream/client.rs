//! The gateway as an MCP client of one upstream, over either transport
//! behind one interface ([`initialize`], [`request`]):
//!
//! - **Streamable HTTP**: each message is POSTed to the endpoint, requests
//!   carrying `Mcp-Session-Id` and `MCP-Protocol-Version`; an answer may be
//!   a JSON body or an SSE stream, read until the response to the request
//!   arrives, never past `max_bytes`;
//! - **HTTP+SSE** (the 2024-11-05 transport, [`super::sse`]): the session
//!   owns a long-lived event stream; messages are POSTed to the endpoint
//!   it names and responses are matched from the stream by id.
//!
//! A Streamable HTTP upstream is asked `server/discover` first: one that
//! lists 2026-07-28 among its `supportedVersions` is spoken to in that
//! revision, statelessly (no `initialize`, no session id; every request
//! carries `_meta` with the version, the client's capabilities and info,
//! and the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers the
//! revision requires). Any other answer to the probe (an error, a 4xx, a
//! body that is not a discover result) means an older server, which is
//! then initialized as before: `initialize` offering the newest version of
//! that era the gateway speaks and accepting any it supports, then
//! `notifications/initialized`. HTTP+SSE upstreams are always initialized.
//! Both eras fail with the same classes. An answer is the response to the
//! request it answers: a JSON body or an answer stream whose response
//! carries a missing, null or other `id` is an invalid response (-32203).
//!
//! **Relayed callers.** A tool call made for a 2026-07-28 caller
//! ([`Outgoing::relay`]) carries that caller's declared client
//! capabilities in `_meta` (a server of the revision decides on them, and
//! answers -32021 for one it needs and was not given), and, on a retry,
//! the caller's `inputResponses` and the server's `requestState`; its
//! answer may then ask for input (`resultType: "input_required"`), which
//! goes back to the caller, who alone can answer it. Every other request
//! declares no capability, and a result asking for input is an invalid
//! response (-32203): the gateway has nobody to ask. Older revisions carry
//! no capabilities per request, so nothing is relayed to such a server.
//!
//! **Architecture Invariant:** the only credential sent is the upstream's
//! own bearer token, resolved by the caller; nothing of the agent's request
//! (its key, its headers) is forwarded.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::http::Http;
use super::{input, sse};
use crate::mcp::protocol;
use crate::tools::Relay;

pub use super::wire::{ClientError, codes};
use super::wire::{answering, event_end, event_message, is_response, too_large, transport};

/// How the upstream is spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Streamable HTTP: one POST per message.
    StreamableHttp,
    /// HTTP+SSE: `GET` opens the session's stream, messages are POSTed to
    /// the endpoint it names.
    Sse,
}

/// Where and how to reach one upstream.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint<'a> {
    /// The MCP endpoint (for SSE, the URL of the event stream).
    pub url: &'a reqwest::Url,
    /// The transport.
    pub transport: Transport,
    /// The upstream's own bearer token, if it needs one.
    pub bearer: Option<&'a str>,
    /// Largest answer accepted, in bytes.
    pub max_bytes: usize,
}

/// What a request carries besides its method and params.
#[derive(Debug, Clone, Copy, Default)]
pub struct Outgoing<'a> {
    /// The called tool's input schema: its `x-mcp-header` arguments are
    /// mirrored into `Mcp-Param-*` headers at 2026-07-28.
    pub schema: Option<&'a Value>,
    /// The 2026-07-28 caller a tool call is made for (see the module doc).
    pub relay: Option<&'a Relay>,
}

impl Outgoing<'_> {
    /// Whether an answer asking for input goes back to a caller.
    fn takes_input(&self) -> bool {
        self.relay.is_some_and(Relay::takes_input)
    }
}

/// How a session's messages travel.
#[derive(Debug, Clone)]
enum Link {
    /// One POST each.
    Http,
    /// POSTs answered on the session's event stream.
    Sse(Arc<sse::Stream>),
}

/// An initialized upstream session.
#[derive(Debug, Clone)]
pub struct Session {
    /// `Mcp-Session-Id` the upstream assigned (None: a stateless server,
    /// or the SSE transport).
    pub id: Option<String>,
    /// The protocol version both sides agreed on.
    pub version: String,
    link: Link,
}

impl PartialEq for Session {
    fn eq(&self, other: &Session) -> bool {
        let same_link = match (&self.link, &other.link) {
            (Link::Http, Link::Http) => true,
            (Link::Sse(a), Link::Sse(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        same_link && self.id == other.id && self.version == other.version
    }
}

impl Session {
    /// Whether the session speaks 2026-07-28 (stateless, `_meta` on every
    /// request).
    pub fn is_modern(&self) -> bool {
        protocol::is_modern(&self.version)
    }

    /// Whether the session can still carry requests (an SSE session whose
    /// stream ended cannot).
    pub fn is_live(&self) -> bool {
        match &self.link {
            Link::Http => true,
            Link::Sse(stream) => stream.is_open(),
        }
    }
}

impl Session {
    /// The signal of a list change (`notifications/{tools,resources,prompts}/list_changed`) when the session
    /// has a stream that can carry it (the SSE transport's event stream);
    /// `None` for a Streamable HTTP session, whose announcements arrive on
    /// its standing `GET` stream (`standing.rs`) instead.
    pub fn list_changed(&self) -> Option<sse::ListChanged> {
        match &self.link {
            Link::Http => None,
            Link::Sse(stream) => Some(stream.list_changed()),
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

/// Opens a session: for SSE its event stream first, then `initialize` and
/// `notifications/initialized`.
pub async fn initialize(http: &Http, ep: Endpoint<'_>) -> Result<Session, ClientError> {
    if ep.transport == Transport::StreamableHttp
        && let Some(session) = discover(http, ep).await?
    {
        return Ok(session);
    }
    let link = match ep.transport {
        Transport::StreamableHttp => Link::Http,
        Transport::Sse => Link::Sse(Arc::new(
            sse::open(http.reqwest(), ep.url, ep.bearer, ep.max_bytes).await?,
        )),
    };
    let params = json!({
        "protocolVersion": protocol::LATEST,
        "capabilities": {},
        "clientInfo": { "name": "cedargate", "version": env!("CARGO_PKG_VERSION") },
    });
    let (posted, result) = exchange(
        http,
        ep,
        &link,
        None,
        "initialize",
        params,
        Outgoing::default(),
    )
    .await?;
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
        link,
    };
    let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    send(http, ep, &session.link, Some(&session), &note, None, &[]).await?;
    Ok(session)
}

/// Probes for a 2026-07-28 server with `server/discover`: a session of
/// that revision when it lists it, `None` for anything else but a failure
/// to reach it at all.
async fn discover(http: &Http, ep: Endpoint<'_>) -> Result<Option<Session>, ClientError> {
    let probe = Session {
        id: None,
        version: protocol::MODERN.to_string(),
        link: Link::Http,
    };
    match exchange(
        http,
        ep,
        &probe.link,
        Some(&probe),
        "server/discover",
        json!({}),
        Outgoing::default(),
    )
    .await
    {
        Ok((_, result)) => {
            let modern = result
                .get("supportedVersions")
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().any(|v| v.as_str() == Some(protocol::MODERN)));
            Ok(modern.then_some(probe))
        }
        Err(e @ (ClientError::Transport(_) | ClientError::Timeout(_))) => Err(e),
        Err(_) => Ok(None),
    }
}

/// `params` with the `_meta` every 2026-07-28 request carries (the
/// relayed caller's capabilities, else none) and a relayed retry's
/// `inputResponses` and `requestState`.
fn with_modern_meta(mut params: Value, relay: Option<&Relay>) -> Value {
    if !params.is_object() {
        params = json!({});
    }
    let capabilities = relay
        .and_then(|r| r.capabilities.clone())
        .unwrap_or_default();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": protocol::MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {
            "name": "cedargate", "version": env!("CARGO_PKG_VERSION"),
        },
    });
    if let (Some(map), Some(relay)) = (params.as_object_mut(), relay) {
        if let Some(responses) = &relay.input_responses {
            map.insert("inputResponses".into(), Value::Object(responses.clone()));
        }
        if let Some(state) = &relay.request_state {
            map.insert("requestState".into(), state.clone().into());
        }
    }
    if let Some(map) = params.as_object_mut() {
        match map.get_mut("_meta").and_then(Value::as_object_mut) {
            Some(existing) => {
                if let Value::Object(m) = meta {
                    existing.extend(m);
                }
            }
            None => {
                map.insert("_meta".into(), meta);
            }
        }
    }
    params
}

/// The headers a 2026-07-28 request mirrors from its body: `Mcp-Method`,
/// `Mcp-Name` for the methods that name something, and for a tool call
/// `Mcp-Param-{Name}` for each argument its `schema` marks `x-mcp-header`
/// (values base64-encoded with the revision's sentinel when not plain
/// visible ASCII).
pub fn modern_headers(
    method: &str,
    params: &Value,
    schema: Option<&Value>,
) -> Vec<(String, String)> {
    let mut headers = vec![("Mcp-Method".to_string(), method.to_string())];
    let name = match method {
        "tools/call" | "prompts/get" => params.get("name"),
        "resources/read" => params.get("uri"),
        _ => None,
    };
    if let Some(name) = name.and_then(Value::as_str) {
        headers.push(("Mcp-Name".to_string(), header_value(name)));
    }
    for (path, header) in schema.map(protocol::annotations).unwrap_or_default() {
        let value = path
            .iter()
            .try_fold(params.get("arguments"), |v, key| Some(v?.get(key)));
        let text = match value.flatten() {
            Some(Value::String(s)) => s.clone(),
            Some(v @ (Value::Bool(_) | Value::Number(_))) => v.to_string(),
            _ => continue,
        };
        headers.push((format!("Mcp-Param-{header}"), header_value(&text)));
    }
    headers
}

/// `value` as a header value: as it is when it is visible ASCII without
/// surrounding spaces, else in the `=?base64?…?=` form (what
/// `mcp::headers::decode` reads back).
pub fn header_value(value: &str) -> String {
    use base64::Engine as _;
    let plain = !value.is_empty()
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && value.trim() == value
        && !value.starts_with("=?base64?");
    if plain {
        value.to_string()
    } else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value);
        format!("=?base64?{encoded}?=")
    }
}

/// Sends one request in `session` and returns its `result`.
pub async fn request(
    http: &Http,
    ep: Endpoint<'_>,
    session: &Session,
    method: &str,
    params: Value,
    out: Outgoing<'_>,
) -> Result<Value, ClientError> {
    exchange(http, ep, &session.link, Some(session), method, params, out)
        .await
        .map(|(_, result)| result)
}

/// Sends a request and reads its response's `result` (or error).
async fn exchange(
    http: &Http,
    ep: Endpoint<'_>,
    link: &Link,
    session: Option<&Session>,
    method: &str,
    params: Value,
    out: Outgoing<'_>,
) -> Result<(Posted, Value), ClientError> {
    let id = Value::from(NEXT_ID.fetch_add(1, Ordering::Relaxed));
    let modern = session.is_some_and(Session::is_modern);
    let (params, headers) = if modern {
        let headers = modern_headers(method, &params, out.schema);
        (with_modern_meta(params, out.relay), headers)
    } else {
        (params, Vec::new())
    };
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    let mut posted = send(http, ep, link, session, &body, Some(&id), &headers).await?;
    let Some(message) = posted.message.take() else {
        return Err(ClientError::Invalid(format!(
            "the upstream accepted `{method}` without answering it"
        )));
    };
    let result = response_result(message)?;
    if input::asks_input(&result) && !(modern && out.takes_input()) {
        return Err(ClientError::Invalid(format!(
            "the upstream asked for client input to answer `{method}`, and this caller cannot be asked"
        )));
    }
    Ok((posted, result))
}

/// Sends one message over the session's link; for a request (`expect` =
/// its id) brings back the response: from the POST's answer, or (SSE)
/// from the event stream when the POST was only accepted.
async fn send(
    http: &Http,
    ep: Endpoint<'_>,
    link: &Link,
    session: Option<&Session>,
    body: &Value,
    expect: Option<&Value>,
    headers: &[(String, String)],
) -> Result<Posted, ClientError> {
    let Link::Sse(stream) = link else {
        return post(http, ep, session, body, expect, headers).await;
    };
    let waiter = expect.map(|id| stream.expect(id)).transpose()?;
    let to_stream = Endpoint {
        url: &stream.post_url,
        ..ep
    };
    let mut posted = post(http, to_stream, None, body, expect, headers).await?;
    if posted.message.is_none()
        && let Some(waiter) = waiter
    {
        posted.message = Some(waiter.answer().await?);
    }
    Ok(posted)
}

/// The `result` of a JSON-RPC response, or its error as [`ClientError::Remote`]
/// (the entry point of the answer parser, after the body is read as JSON).
pub fn response_result(mut message: Value) -> Result<Value, ClientError> {
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

/// POSTs one message; for a request (`expect` = its id) reads the response
/// (none when the upstream only accepted it: 202, or a legacy endpoint
/// that does not answer JSON).
async fn post(
    http: &Http,
    ep: Endpoint<'_>,
    session: Option<&Session>,
    body: &Value,
    expect: Option<&Value>,
    headers: &[(String, String)],
) -> Result<Posted, ClientError> {
    let mut h = HeaderMap::with_capacity(6 + headers.len());
    h.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(s) = session {
        h.insert("mcp-protocol-version", header_text(&s.version)?);
        if let Some(id) = &s.id {
            h.insert("mcp-session-id", header_text(id)?);
        }
    }
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| transport(&e))?;
        h.append(name, header_text(value)?);
    }
    if let Some((traceparent, tracestate)) = crate::telemetry::trace_headers() {
        h.insert("traceparent", header_text(&traceparent)?);
        if let Some(state) = tracestate {
            h.insert("tracestate", header_text(&state)?);
        }
    }
    if let Some(token) = ep.bearer {
        let mut auth = header_text(&format!("Bearer {token}"))?;
        auth.set_sensitive(true);
        h.insert(AUTHORIZATION, auth);
    }
    // `to_vec` writes the bytes straight (`to_string` goes through
    // `Display`'s formatter); a `Value` always serializes.
    let body = serde_json::to_vec(body).unwrap_or_default();
    let resp = http.post(ep.url, h, body).await?;
    let status = resp.status();
    let session_id = header(resp.headers(), "mcp-session-id");
    let legacy = ep.transport == Transport::Sse;
    if status == reqwest::StatusCode::NOT_FOUND
        && (legacy || session.is_some_and(|s| s.id.is_some()))
    {
        return Err(ClientError::Expired);
    }
    let content_type = header(resp.headers(), "content-type").unwrap_or_default();
    if !status.is_success() {
        return match expect.filter(|_| status.is_client_error()) {
            Some(id) => error_answer(resp, id, &content_type, ep.max_bytes)
                .await
                .map(|message| Posted {
                    session_id,
                    message: Some(message),
                })
                .ok_or(ClientError::Status(status.as_u16())),
            None => Err(ClientError::Status(status.as_u16())),
        };
    }
    let accepted_only = status == reqwest::StatusCode::ACCEPTED
        || (legacy && !content_type.starts_with("application/json"));
    let Some(expect) = expect.filter(|_| !accepted_only) else {
        return Ok(Posted {
            session_id,
            message: None,
        });
    };
    let message = if content_type.starts_with("text/event-stream") {
        read_sse(resp, expect, ep.max_bytes).await?
    } else {
        let bytes = read_limited(resp, ep.max_bytes).await?;
        let message = serde_json::from_slice(&bytes)
            .map_err(|e| ClientError::Invalid(format!("the upstream answered non-JSON: {e}")))?;
        answering(message, expect)?
    };
    Ok(Posted {
        session_id,
        message: Some(message),
    })
}

/// The JSON-RPC error a 4xx answer carries for request `id`, if it is one:
/// a server of 2026-07-28 answers some errors (-32021 a missing client
/// capability, -32020, -32022) with 400 and the error in the body, and
/// that error, not the status, is the answer.
async fn error_answer(
    resp: reqwest::Response,
    id: &Value,
    content_type: &str,
    max: usize,
) -> Option<Value> {
    if !content_type.starts_with("application/json") {
        return None;
    }
    let bytes = read_limited(resp, max).await.ok()?;
    let message: Value = serde_json::from_slice(&bytes).ok()?;
    let error = message.get("error")?;
    let is_error = error.get("code").is_some_and(Value::is_i64)
        && error.get("message").is_some_and(Value::is_string);
    (is_error && message.get("id") == Some(id)).then_some(message)
}

/// `text` as a header value; one that cannot be fails the request as
/// reqwest's builder did (a transport failure naming the cause).
fn header_text(text: &str) -> Result<HeaderValue, ClientError> {
    HeaderValue::from_str(text).map_err(|e| transport(&e))
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The answer's body, at most `max` bytes (more: too large).
pub(super) async fn read_limited(
    mut resp: reqwest::Response,
    max: usize,
) -> Result<Vec<u8>, ClientError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport(&e))? {
        if body.len() + chunk.len() > max {
            return Err(too_large(max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads SSE events until the response, which must be to `expect`
/// (requests and notifications from the upstream on the way are skipped;
/// a response with another or no id is an invalid response: this stream
/// answers this request alone).
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
        if let Some(answer) = sse_response(&mut buffer, expect) {
            return answer;
        }
    }
    Err(ClientError::Invalid(
        "the upstream's event stream ended without the response".into(),
    ))
}

/// The entry point of the answer stream's parser: takes the complete
/// events out of `buffer` (what has arrived so far) up to the first
/// response, and returns it checked against `expect` (a response with
/// another or no id is an invalid response: this stream answers one
/// request); requests and notifications on the way are skipped, and an
/// incomplete event stays in `buffer` for the next chunk.
pub fn sse_response(buffer: &mut Vec<u8>, expect: &Value) -> Option<Result<Value, ClientError>> {
    while let Some(end) = event_end(buffer) {
        let event: Vec<u8> = buffer.drain(..end).collect();
        if let Some(message) = event_message(&event)
            && is_response(&message)
        {
            return Some(answering(message, expect));
        }
    }
    None
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
