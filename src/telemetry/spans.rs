//! The spans themselves (names and attributes: the module doc of
//! [`super`]). A request's server span is made by its transport
//! ([`Telemetry::request`]); everything below it asks for a child of the
//! span of the request it serves, found in the current
//! `opentelemetry::Context`, and gets `None` outside one (and whenever
//! export is off).

use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Array, Context, KeyValue, StringValue};
use opentelemetry_sdk::trace::Span as SdkSpan;
use serde_json::Value;

use super::{Inner, Telemetry};

/// Longest method or tool name put in a span's name.
const NAME_MAX: usize = 64;
/// Longest tool arguments or result kept on a span (opt-in).
const TOOL_IO_MAX: usize = 4096;

/// The tracer of the request being served, carried in its context.
#[derive(Debug, Clone)]
struct Handle(Arc<Inner>);

/// A caller's W3C trace context, already checked for its format.
#[derive(Debug, Clone, Copy)]
pub struct Parent<'a> {
    /// `00-<trace id>-<parent id>-<flags>`.
    pub traceparent: &'a str,
    /// The vendor list, if any.
    pub tracestate: Option<&'a str>,
}

/// The context of a remote parent, when its ids are valid.
fn remote(parent: &Parent<'_>) -> Option<Context> {
    let mut parts = parent.traceparent.split('-');
    let (_, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let state = parent
        .tracestate
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let context = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
        true,
        state,
    );
    context
        .is_valid()
        .then(|| Context::new().with_remote_span_context(context))
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The ids of a sampled span, as its records note them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanIds {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
}

fn ids_of(cx: &Context) -> Option<SpanIds> {
    let span = cx.span();
    let sc = span.span_context();
    (sc.is_valid() && sc.is_sampled()).then(|| SpanIds {
        trace_id: sc.trace_id().to_string(),
        span_id: sc.span_id().to_string(),
    })
}

/// What a server span describes: one JSON-RPC request.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestFacts<'a> {
    /// `mcp.method.name`.
    pub method: &'a str,
    /// The request's id as written (`None` for a notification or `null`).
    pub id: Option<&'a str>,
    /// The tool of a `tools/call`, the prompt of a `prompts/get`.
    pub target: Option<&'a str>,
    /// The MCP session (legacy eras).
    pub session_id: Option<&'a str>,
    /// `mcp.protocol.version`, when known yet.
    pub protocol: Option<&'a str>,
    /// The caller's trace context.
    pub parent: Option<Parent<'a>>,
}

/// The server span of one JSON-RPC request; ends when dropped.
#[derive(Debug)]
pub struct RequestSpan {
    cx: Context,
    /// Whether the tool's arguments and result go on the span.
    record_io: bool,
}

impl Telemetry {
    /// A server span for a request (`None` when export is off).
    pub fn request(&self, facts: &RequestFacts<'_>) -> Option<RequestSpan> {
        let inner = self.inner.as_ref()?;
        let parent = facts.parent.as_ref().and_then(remote).unwrap_or_default();
        let method = cut(facts.method, NAME_MAX);
        let target = facts.target.map(|t| cut(t, NAME_MAX));
        let name = match target {
            Some(t) => format!("{method} {t}"),
            None => method.to_string(),
        };
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", method.to_string()),
            KeyValue::new("network.transport", "tcp"),
            KeyValue::new("network.protocol.name", "http"),
        ];
        let optional = [
            ("jsonrpc.request.id", facts.id),
            ("mcp.session.id", facts.session_id),
            ("mcp.protocol.version", facts.protocol),
        ];
        for (key, value) in optional {
            if let Some(v) = value {
                attributes.push(KeyValue::new(key, v.to_string()));
            }
        }
        match (method, target) {
            ("tools/call", Some(t)) => {
                attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
                attributes.push(KeyValue::new("gen_ai.tool.name", t.to_string()));
            }
            ("prompts/get", Some(t)) => {
                attributes.push(KeyValue::new("gen_ai.prompt.name", t.to_string()));
            }
            _ => {}
        }
        let span = inner
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&inner.tracer, &parent);
        let record_io =
            method == "tools/call" && target.is_some_and(|t| inner.record_io.contains(t));
        Some(RequestSpan {
            cx: parent.with_span(span).with_value(Handle(Arc::clone(inner))),
            record_io,
        })
    }
}

impl Telemetry {
    /// The context of work a request does before its server span exists
    /// (a person's URL authenticates its caller before reading the body):
    /// the caller's trace context, if any, with this gateway's tracer, so
    /// that the outbound calls of that work ([`client_span`]) are children
    /// of the caller's span, or begin a trace of their own when it sent
    /// none (`None` when export is off).
    pub fn door(&self, parent: Option<&Parent<'_>>) -> Option<Context> {
        let inner = self.inner.as_ref()?;
        let cx = parent.and_then(remote).unwrap_or_default();
        Some(cx.with_value(Handle(Arc::clone(inner))))
    }
}

impl RequestSpan {
    /// The context work of this request runs in ([`scoped`]).
    pub fn context(&self) -> &Context {
        &self.cx
    }

    /// The span's ids, when it is sampled (what its records note).
    pub fn ids(&self) -> Option<SpanIds> {
        ids_of(&self.cx)
    }

    /// `mcp.protocol.version`, once negotiated.
    pub fn protocol(&self, version: &str) {
        self.cx
            .span()
            .set_attribute(KeyValue::new("mcp.protocol.version", version.to_string()));
    }

    /// The request failed with JSON-RPC `code`.
    pub fn failed(&self, code: i64, message: &str) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("error.type", code.to_string()));
        span.set_attribute(KeyValue::new("rpc.response.status_code", code.to_string()));
        span.set_status(Status::error(cut(message, 512).to_string()));
    }

    /// Whether the tool's arguments and result go on the span.
    pub fn records_io(&self) -> bool {
        self.record_io
    }

    /// The tool answered a result with `isError`.
    pub fn tool_error(&self) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("error.type", "tool_error"));
        span.set_status(Status::error("tool_error"));
    }

    /// The call's arguments and result, for a tool an operator named in
    /// `record_tool_io` (nothing otherwise).
    pub fn tool_io(&self, arguments: &Value, result: Option<&Value>) {
        if !self.record_io {
            return;
        }
        let span = self.cx.span();
        let text = |v: &Value| cut(&v.to_string(), TOOL_IO_MAX).to_string();
        span.set_attribute(KeyValue::new("gen_ai.tool.call.arguments", text(arguments)));
        if let Some(result) = result {
            span.set_attribute(KeyValue::new("gen_ai.tool.call.result", text(result)));
        }
    }
}

impl Drop for RequestSpan {
    fn drop(&mut self) {
        self.cx.span().end();
    }
}

/// Runs `work` inside `context` (a request's or a client call's), or as it
/// is without one.
pub async fn scoped<F: Future>(context: Option<&Context>, work: F) -> F::Output {
    match context {
        Some(cx) => work.with_context(cx.clone()).await,
        None => work.await,
    }
}

/// The tracer and context of the request being served, if any.
fn current() -> Option<(Arc<Inner>, Context)> {
    Context::map_current(|cx| {
        let handle = cx.get::<Handle>()?;
        Some((Arc::clone(&handle.0), cx.clone()))
    })
}

/// What a decision span describes.
#[derive(Debug, Clone, Copy)]
pub struct DecisionFacts<'a> {
    /// The Cedar action.
    pub action: &'a str,
    /// The verdict.
    pub allowed: bool,
    /// The determining policies.
    pub policy_ids: &'a [String],
    /// Evaluation errors.
    pub errors: usize,
    /// The policy set's hash.
    pub policy_hash: &'a str,
    /// The decision record's id.
    pub record_id: &'a str,
}

/// A decision's span, made when it was decided and exported once its
/// record is committed ([`DecisionSpan::finish`]).
pub struct DecisionSpan {
    span: SdkSpan,
    record_id: String,
    decided_at: SystemTime,
}

impl std::fmt::Debug for DecisionSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionSpan")
            .field("record_id", &self.record_id)
            .finish_non_exhaustive()
    }
}

/// A span of a decision made from `started` until now, a child of the
/// request being served.
pub fn decision_span(started: SystemTime, facts: &DecisionFacts<'_>) -> Option<DecisionSpan> {
    let (inner, parent) = current()?;
    let ids: Vec<StringValue> = facts
        .policy_ids
        .iter()
        .map(|id| StringValue::from(id.clone()))
        .collect();
    let attributes = vec![
        KeyValue::new("cedar.action", facts.action.to_string()),
        KeyValue::new(
            "cedar.decision",
            if facts.allowed { "allow" } else { "deny" },
        ),
        KeyValue::new(
            "cedar.policy_ids",
            opentelemetry::Value::Array(Array::String(ids)),
        ),
        KeyValue::new("cedar.errors", facts.errors as i64),
        KeyValue::new("cedar.policy_set.hash", facts.policy_hash.to_string()),
        KeyValue::new("cedargate.decision.id", facts.record_id.to_string()),
    ];
    let builder = inner
        .tracer
        .span_builder(format!("cedar {}", facts.action))
        .with_kind(SpanKind::Internal)
        .with_start_time(started)
        .with_attributes(attributes);
    Some(DecisionSpan {
        span: inner.tracer.build_with_context(builder, &parent),
        record_id: facts.record_id.to_string(),
        decided_at: SystemTime::now(),
    })
}

impl DecisionSpan {
    /// The id of the record the decision is in.
    pub fn record_id(&self) -> &str {
        &self.record_id
    }

    /// Ends the span at the decision's time, with the record's sequence
    /// number once it is committed.
    pub fn finish(mut self, seq: Option<i64>) {
        if let Some(seq) = seq {
            self.span
                .set_attribute(KeyValue::new("cedargate.decision.seq", seq));
        }
        self.span.end_with_timestamp(self.decided_at);
    }
}

/// A durable commit's span; ends with [`CommitSpan::done`] (or dropped).
pub struct CommitSpan {
    span: SdkSpan,
}

impl std::fmt::Debug for CommitSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitSpan").finish_non_exhaustive()
    }
}

/// A span of a durable commit of `records` decision records on
/// `backend` (`sqlite`, `postgresql`), a child of the request being served.
pub fn commit_span(records: usize, backend: &'static str) -> Option<CommitSpan> {
    let (inner, parent) = current()?;
    let builder = inner
        .tracer
        .span_builder("cedargate.commit")
        .with_kind(SpanKind::Internal)
        .with_attributes([
            KeyValue::new("db.system.name", backend),
            KeyValue::new("cedargate.commit.records", records as i64),
        ]);
    Some(CommitSpan {
        span: inner.tracer.build_with_context(builder, &parent),
    })
}

impl CommitSpan {
    /// Ends the span: committed (the first record's sequence number, if
    /// it held any) or failed.
    pub fn done(mut self, outcome: Result<Option<i64>, &str>, records: usize) {
        match outcome {
            Ok(Some(first)) => {
                let last = first + records.saturating_sub(1) as i64;
                self.span
                    .set_attribute(KeyValue::new("cedargate.decision.seq.first", first));
                self.span
                    .set_attribute(KeyValue::new("cedargate.decision.seq.last", last));
            }
            Ok(None) => {}
            Err(message) => {
                self.span
                    .set_attribute(KeyValue::new("error.type", "commit_failed"));
                self.span.set_status(Status::error(message.to_string()));
            }
        }
        self.span.end();
    }
}

/// What is called, for a client span.
#[derive(Debug, Clone, Copy)]
pub enum ClientFacts<'a> {
    /// A request to an upstream MCP server.
    Mcp {
        /// `mcp.method.name`.
        method: &'a str,
        /// The upstream's name of the tool or prompt, if any.
        target: Option<&'a str>,
        /// The server's URL (`None`: a stdio child).
        url: Option<&'a str>,
    },
    /// A message to an A2A peer.
    A2a {
        /// `SendMessage` (1.0) or `message/send` (0.3).
        method: &'a str,
        /// `a2a.protocol.version`.
        version: &'a str,
        /// The interface URL posted to.
        url: &'a str,
        /// The peer card's name.
        agent: Option<&'a str>,
    },
    /// An HTTP request to an identity provider (discovery, key set,
    /// introspection, token, userinfo).
    Http {
        /// `http.request.method`.
        method: &'static str,
        /// The URL requested.
        url: &'a str,
    },
}

/// A client span (an outbound call); ends when dropped.
#[derive(Debug)]
pub struct ClientSpan {
    cx: Context,
}

/// `server.address` and `server.port` of `url`.
fn server_of(url: &str, attributes: &mut Vec<KeyValue>) {
    let Ok(url) = reqwest::Url::parse(url) else {
        return;
    };
    if let Some(host) = url.host_str() {
        attributes.push(KeyValue::new("server.address", host.to_string()));
    }
    if let Some(port) = url.port_or_known_default() {
        attributes.push(KeyValue::new("server.port", i64::from(port)));
    }
}

/// `url` without its query and fragment (never a secret on a span).
fn without_query(url: &str) -> &str {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    cut(&url[..end], 1024)
}

/// A client span for an outbound call, a child of the span the current
/// work runs in (a request's).
pub fn client_span(facts: &ClientFacts<'_>) -> Option<ClientSpan> {
    let (inner, parent) = current()?;
    let mut attributes = Vec::with_capacity(8);
    let name = match *facts {
        ClientFacts::Mcp {
            method,
            target,
            url,
        } => {
            attributes.push(KeyValue::new("mcp.method.name", method.to_string()));
            attributes.push(KeyValue::new(
                "network.transport",
                if url.is_some() { "tcp" } else { "pipe" },
            ));
            if let Some(url) = url {
                server_of(url, &mut attributes);
            }
            match (method, target) {
                ("tools/call", Some(t)) => {
                    attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
                    attributes.push(KeyValue::new("gen_ai.tool.name", t.to_string()));
                    format!("{method} {}", cut(t, NAME_MAX))
                }
                ("prompts/get", Some(t)) => {
                    attributes.push(KeyValue::new("gen_ai.prompt.name", t.to_string()));
                    format!("{method} {}", cut(t, NAME_MAX))
                }
                _ => method.to_string(),
            }
        }
        ClientFacts::A2a {
            method,
            version,
            url,
            agent,
        } => {
            attributes.push(KeyValue::new("a2a.method.name", method.to_string()));
            attributes.push(KeyValue::new("a2a.protocol.version", version.to_string()));
            if let Some(agent) = agent {
                attributes.push(KeyValue::new("gen_ai.agent.name", agent.to_string()));
            }
            server_of(url, &mut attributes);
            method.to_string()
        }
        ClientFacts::Http { method, url } => {
            attributes.push(KeyValue::new("http.request.method", method));
            attributes.push(KeyValue::new("url.full", without_query(url).to_string()));
            server_of(url, &mut attributes);
            method.to_string()
        }
    };
    let span = inner
        .tracer
        .span_builder(name)
        .with_kind(SpanKind::Client)
        .with_attributes(attributes)
        .start_with_context(&inner.tracer, &parent);
    Some(ClientSpan {
        cx: parent.with_span(span),
    })
}

impl ClientSpan {
    /// The context the call runs in ([`scoped`]): what it injects.
    pub fn context(&self) -> &Context {
        &self.cx
    }

    /// The call failed: `error_type` (a JSON-RPC code as text, or the
    /// failure's class) and its message.
    pub fn failed(&self, error_type: &str, message: &str) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("error.type", error_type.to_string()));
        span.set_status(Status::error(cut(message, 512).to_string()));
    }

    /// Adds this span's trace context to `params._meta` (the MCP
    /// conventions' carrier).
    pub fn inject_meta(&self, params: &mut Value) {
        if let Some(headers) = headers_of(&self.cx) {
            meta_with(params, headers);
        }
    }

    /// `traceparent` and `tracestate` of this span: what the call's HTTP
    /// request carries.
    pub fn trace_headers(&self) -> Option<(String, Option<String>)> {
        headers_of(&self.cx)
    }

    /// The HTTP answer's status (`http.response.status_code`); 4xx and 5xx
    /// are errors, typed by their code.
    pub fn http_status(&self, status: u16) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if status >= 400 {
            span.set_attribute(KeyValue::new("error.type", status.to_string()));
            span.set_status(Status::error(String::new()));
        }
    }

    /// The peer answered with JSON-RPC error `code`.
    pub fn remote_error(&self, code: i64, message: &str) {
        self.failed(&code.to_string(), message);
        self.cx
            .span()
            .set_attribute(KeyValue::new("rpc.response.status_code", code.to_string()));
    }
}

impl Drop for ClientSpan {
    fn drop(&mut self) {
        self.cx.span().end();
    }
}

/// `traceparent` and `tracestate` of the span the current work runs in,
/// when it is one of the gateway's: what an outbound call carries.
pub fn trace_headers() -> Option<(String, Option<String>)> {
    Context::map_current(|cx| {
        cx.get::<Handle>()?;
        headers_of(cx)
    })
}

/// `traceparent` and `tracestate` of the span of `cx`, if valid.
fn headers_of(cx: &Context) -> Option<(String, Option<String>)> {
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    let traceparent = format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8() & TraceFlags::SAMPLED.to_u8()
    );
    let state = sc.trace_state().header();
    Some((traceparent, (!state.is_empty()).then_some(state)))
}

/// Adds the current span's trace context to `params._meta` (the MCP
/// conventions' carrier), when there is one.
pub fn inject_meta(params: &mut Value) {
    if let Some(headers) = trace_headers() {
        meta_with(params, headers);
    }
}

/// `params._meta` with `traceparent` (and `tracestate`) set.
fn meta_with(params: &mut Value, (traceparent, tracestate): (String, Option<String>)) {
    let Value::Object(map) = params else {
        return;
    };
    let meta = map
        .entry("_meta")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert("traceparent".into(), traceparent.into());
        match tracestate {
            Some(state) => meta.insert("tracestate".into(), state.into()),
            None => meta.remove("tracestate"),
        };
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;

    #[test]
    fn a_caller_context_becomes_the_remote_parent() {
        let parent = Parent {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            tracestate: Some("rojo=00f067aa0ba902b7"),
        };
        let cx = remote(&parent).unwrap();
        let span = cx.span();
        let sc = span.span_context();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        assert_eq!(sc.trace_state().header(), "rojo=00f067aa0ba902b7");
    }

    #[test]
    fn names_are_cut_at_a_character_boundary() {
        assert_eq!(cut("abc", 8), "abc");
        assert_eq!(cut("ééé", 3), "é");
    }

    #[test]
    fn nothing_is_injected_outside_a_request() {
        let mut params = serde_json::json!({"name": "x"});
        inject_meta(&mut params);
        assert_eq!(params, serde_json::json!({"name": "x"}));
        assert!(trace_headers().is_none());
        assert!(
            client_span(&ClientFacts::Mcp {
                method: "tools/call",
                target: None,
                url: None
            })
            .is_none()
        );
    }
}
