//! Answers the JSON-RPC messages of one request body, in order: each
//! request goes to its method's handler; notifications and client
//! responses get nothing; invalid elements of a batch get -32600.
//!
//! Each element after the first spends its own cost (`cost`) just before
//! it is answered (the prelude spent the first's). Once one is refused,
//! it and every later element are answered with that refusal (-32029,
//! `error.data` as for a refused request) without running, so a client
//! learns which elements ran and retries the rest.
//!
//! A message answered with a step-up (`step_up`: a scope would allow
//! what Cedar denied) is noted on the [`Call`]: a client re-authorizes
//! only on the HTTP status, so the transport answers the whole body 403
//! with one challenge naming every scope any of its messages needs; the
//! other messages' answers ride in that body as they are. (HTTP+SSE
//! answers on its stream, after the POST's 202: there the step-up is only
//! the -32003 error, whose `error.data` names the scopes.)

use serde_json::Value;
use tracing::Instrument as _;

use super::call::{Call, TraceContext, charge};
use super::era;
use super::error::McpError;
use super::jsonrpc::{Answer, Message, Reply, RpcError};
use super::{cost, entries, initialize, tools_call, tools_list};
use crate::telemetry::RequestSpan;
use crate::tools::spec::echo;
use crate::upstream::entries::EntryKind;

/// Answers `messages`, then queues the request's remaining deferred
/// records. `single`: the span of a body holding one request, made by its
/// transport (a batch's requests each get their own here).
pub async fn answer(
    call: &Call,
    messages: Vec<Message>,
    single: Option<&RequestSpan>,
) -> Vec<Answer> {
    let mut responses = Vec::new();
    let mut limited: Option<RpcError> = None;
    for (i, message) in messages.into_iter().enumerate() {
        if i > 0 && limited.is_none() && call.gw.rate_limits.enabled() {
            let cost = cost::of(&call.gw, &call.bundle, &call.view, &message);
            limited = charge(call, cost).await.err().map(|e| e.rpc());
        }
        if let Some(refusal) = &limited {
            if let Message::Request { id, .. } | Message::Invalid { id, .. } = message {
                responses.push(Answer::of(id, Err(refusal.clone())));
            }
            continue;
        }
        let trace = match &message {
            Message::Request { params, .. } => message_trace(params),
            _ => None,
        };
        let own = match single {
            Some(_) => None,
            None => era::request_span(
                &call.gw,
                &call.view.tenant.session.id,
                Some(&call.version),
                Some(&message),
                trace.as_ref().or(call.trace.as_ref()),
            ),
        };
        let traced = single.or(own.as_ref());
        match message {
            Message::Request { id, method, params } => {
                let log = log_span(&method, trace.as_ref().or(call.trace.as_ref()), traced);
                call.enter_message(trace);
                call.enter_span(traced.and_then(RequestSpan::ids));
                let arguments = traced
                    .filter(|s| s.records_io())
                    .and_then(|_| params.get("arguments").cloned());
                let context = own.as_ref().map(|s| s.context().clone());
                let work = dispatch(call, &method, params).instrument(log);
                let outcome = crate::telemetry::scoped(context.as_ref(), work).await;
                if let Some(span) = traced {
                    traced_outcome(span, arguments.as_ref(), &outcome);
                }
                if let Err(McpError::StepUp(refusal)) = &outcome {
                    call.note_step_up(refusal);
                }
                responses.push(Answer::of(id, outcome.map_err(|e| e.rpc())));
            }
            Message::Invalid { id, reason } => {
                let error = McpError::InvalidRequest {
                    id: id.clone(),
                    reason,
                };
                responses.push(Answer::of(id, Err(error.rpc())));
            }
            Message::Notification { .. } | Message::ClientResponse => {}
        }
    }
    call.flush_deferred().await;
    responses
}

/// The `tracing` span of one message (its log lines' fields): the
/// caller's `traceparent`, and the ids of the gateway's own span
/// (`trace_id`, `span_id`) when it is sampled.
pub fn log_span(
    method: &str,
    caller: Option<&TraceContext>,
    span: Option<&RequestSpan>,
) -> tracing::Span {
    let log = tracing::info_span!(
        "mcp",
        method = %echo(method),
        traceparent = tracing::field::Empty,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    if let Some(t) = caller {
        log.record("traceparent", t.traceparent.as_str());
    }
    if let Some(ids) = span.and_then(RequestSpan::ids) {
        log.record("trace_id", ids.trace_id.as_str());
        log.record("span_id", ids.span_id.as_str());
    }
    log
}

/// What a request's answer puts on its span: the error, or a tool's
/// `isError`; a tool's arguments and result when the operator asked.
pub fn traced_outcome(
    span: &RequestSpan,
    arguments: Option<&Value>,
    outcome: &Result<Reply, McpError>,
) {
    match outcome {
        Err(e) => {
            let rpc = e.rpc();
            span.failed(rpc.code, &rpc.message);
        }
        Ok(Reply::Json(result)) => {
            if result.get("isError").and_then(Value::as_bool) == Some(true) {
                span.tool_error();
            }
            if let Some(arguments) = arguments {
                span.tool_io(arguments, Some(result));
            }
        }
        Ok(Reply::Text(_)) => {}
    }
}

/// The trace context of one message (its `params._meta`), so each message
/// of a batch, and each message posted to an HTTP+SSE stream, is traced in
/// its records and logs like a 2026-07-28 request.
fn message_trace(params: &Value) -> Option<TraceContext> {
    params
        .get("_meta")
        .and_then(Value::as_object)
        .and_then(era::trace_context)
}

/// One request, by method.
pub async fn dispatch(call: &Call, method: &str, params: Value) -> Result<Reply, McpError> {
    match method {
        "initialize" => Ok(Reply::Json(initialize::initialize(call, &params))),
        "ping" => Ok(Reply::Json(initialize::ping())),
        "tools/list" => Ok(Reply::Text(tools_list::tools_list(call))),
        "tools/call" => tools_call::tools_call(call, params).await.map(Reply::Json),
        "resources/list" => entries::list(call, EntryKind::Resources)
            .await
            .map(Reply::Json),
        "resources/templates/list" => entries::list(call, EntryKind::Templates)
            .await
            .map(Reply::Json),
        "resources/read" => entries::read_resource(call, params).await.map(Reply::Json),
        "prompts/list" => entries::list(call, EntryKind::Prompts)
            .await
            .map(Reply::Json),
        "prompts/get" => entries::get_prompt(call, params).await.map(Reply::Json),
        _ => Err(McpError::MethodNotFound(method.to_string())),
    }
}
