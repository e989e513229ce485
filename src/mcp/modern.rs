//! The 2026-07-28 side of `POST /api/mcp/{sessionId}`: every request is
//! served on its own, without `initialize` or an MCP session
//! (`Mcp-Session-Id` is neither read nor sent), as named steps:
//!
//! key → session → isolation (`call::prepare`) → rate limits
//! (`call::spend`: 429, charged before anything else can refuse, so
//! refusals cost tokens too) → header–body validation (`headers`; a
//! mismatch is recorded as a denied request, then 400 -32020) → Cedar
//! `access_session` (`call::admit`) → required client
//! capabilities (-32021) → the method → the revision's result shape.
//!
//! The session URL stays the authority for tenant, project and agent,
//! exactly as for legacy clients: the same prelude, the same pipeline, the
//! same trail. Methods: `server/discover`, `tools/list`, `tools/call`,
//! the upstreams' resources and prompts (`entries`),
//! `subscriptions/listen` (a long-lived stream, see `listen`); anything
//! else (`initialize` and `ping` included, which the revision
//! removed) answers 404 with -32601.
//!
//! Result shapes: every result carries `resultType: "complete"` and the
//! gateway's `serverInfo` in `_meta`, but one: a server the gateway
//! fronts may ask the caller for input on a `tools/call`, `prompts/get` or
//! `resources/read` (`"input_required"`, passed on as it came, without
//! cache hints); the caller's retry is a new request, decided by Cedar
//! again, whose answers travel back to that server
//! (`crate::upstream::client`, "Relayed callers"). The caller's
//! capabilities go there too, and a -32021 of that server answers 400 as
//! the gateway's own does. `tools/list` lists the visible tools ordered by name, with
//! `ttlMs` (`cache_ttl_secs`, the staleness the gateway itself accepts for
//! a change made elsewhere; a call to a tool gone since is decided and
//! refused like any other) and `cacheScope: "private"`, always: every list
//! is Cedar's `view_tool` answer for this principal, even when it hid
//! nothing (another principal's list may differ), so a shared cache must
//! never hand it to anyone else. The resources and prompts lists carry the
//! same `ttlMs` and `cacheScope: "private"` (Cedar decided each entry for
//! this principal); a `resources/read` result is `private` too, with the
//! upstream's `ttlMs` when it gave one, else 0. Their entries keep the
//! upstream's order. Error codes of the revision: an unknown or hidden
//! tool is -32602 (one answer for both, as before), and so is an unknown
//! or hidden resource (-32002 before).
//!
//! The caller's W3C trace context (`_meta.traceparent`, `tracestate`)
//! goes into the `notes` of every decision record of the request and onto
//! its log span, so an auditor can join a decision to the caller's trace.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tracing::Instrument;

use super::call::{Call, Refusal, Target, admit, prepare, record_refusal, spend};
use super::discover;
use super::era::{META_SERVER_INFO, Modern};
use super::error::McpError;
use super::framing::framed;
use super::headers::{self, Mismatch};
use super::jsonrpc::{self, Answer, Message, Reply};
use super::{entries, listen, protocol, tools_call, tools_list};
use crate::gateway::Gateway;
use crate::tools::spec::{MESSAGE_MAX_CHARS, echo, prefix};
use crate::upstream::entries::EntryKind;
use crate::upstream::input;

/// Serves one 2026-07-28 POST inside a span carrying its trace context.
pub async fn serve(
    gw: &Arc<Gateway>,
    target: &Target,
    headers: &HeaderMap,
    mut request: Modern,
) -> Response {
    if request.trace.is_none() {
        request.trace = super::era::header_trace(headers);
    }
    let span = traced(gw, &request);
    let log = super::dispatch::log_span(&request.method, request.trace.as_ref(), span.as_ref());
    let id = request.id.clone();
    let context = span.as_ref().map(|s| s.context().clone());
    let work = answer(gw, target, headers, request, span.as_ref()).instrument(log);
    match crate::telemetry::scoped(context.as_ref(), work).await {
        Ok(resp) => resp,
        Err(e) => {
            if let Some(span) = &span {
                let rpc = e.rpc();
                span.failed(rpc.code, &rpc.message);
            }
            e.modern_response(id.as_ref())
        }
    }
}

/// The request's server span (export on; a notification has none).
fn traced(gw: &Gateway, request: &Modern) -> Option<crate::telemetry::RequestSpan> {
    if !gw.telemetry.is_on() {
        return None;
    }
    let id = request.id.as_ref()?;
    gw.telemetry.request(&crate::telemetry::RequestFacts {
        method: &request.method,
        id: (id.as_raw() != "null").then(|| id.as_raw().trim_matches('"')),
        target: match request.method.as_str() {
            "tools/call" | "prompts/get" => request.params.get("name").and_then(Value::as_str),
            _ => None,
        },
        session_id: None,
        protocol: Some(protocol::MODERN),
        parent: request
            .trace
            .as_ref()
            .map(super::call::TraceContext::parent),
    })
}

/// The named steps of the module doc.
async fn answer(
    gw: &Arc<Gateway>,
    target: &Target,
    headers: &HeaderMap,
    request: Modern,
    span: Option<&crate::telemetry::RequestSpan>,
) -> Result<Response, McpError> {
    // What the request costs against the rate limits: its method (the
    // params play no part in the cost), as a request when it has an id.
    let costed = [match &request.id {
        Some(id) => Message::Request {
            id: id.clone(),
            method: request.method.clone(),
            params: Value::Null,
        },
        None => Message::Notification {
            method: request.method.clone(),
            params: Value::Null,
        },
    }];
    let mut call = prepare(gw, target, headers, Some(protocol::MODERN.into()), &costed).await?;
    call.trace = request.trace.clone();
    call.enter_span(span.and_then(crate::telemetry::RequestSpan::ids));
    call.capabilities = Some(request.capabilities.clone());
    // Charged before the headers are checked: a refused request spends
    // like any other, so a flood of mismatches meets the buckets before
    // it can write a refusal record each.
    spend(&call, &costed).await?;
    if let Err(mismatch) = headers::validate(headers, &request, &call.view) {
        return Err(refuse(&call, mismatch).await);
    }
    admit(&call).await?;
    let Some(id) = request.id else {
        // The revision defines no client notifications over HTTP: accepted.
        call.flush_deferred().await;
        return Ok(StatusCode::ACCEPTED.into_response());
    };
    let outcome = match required_capabilities(gw, &request.method, &request.capabilities) {
        Ok(()) if request.method == "subscriptions/listen" => {
            let stream = listen::open(&call, headers, &id, &request.params).await;
            call.flush_deferred().await;
            return stream;
        }
        Ok(()) => {
            let arguments = span
                .filter(|s| s.records_io())
                .and_then(|_| request.params.get("arguments").cloned());
            let outcome = dispatch(&call, &request.method, request.params).await;
            if let (Some(span), Ok(_)) = (span, &outcome) {
                super::dispatch::traced_outcome(span, arguments.as_ref(), &outcome);
            }
            outcome
        }
        Err(e) => Err(e),
    };
    call.flush_deferred().await;
    let reply = outcome?;
    let body = jsonrpc::body(&[Answer::of(id, Ok(reply))], false);
    Ok(framed(headers, body))
}

/// Records a header mismatch as a denied request of the session (decided
/// on the key alone, before any decision of the session), then answers it.
async fn refuse(call: &Call, mismatch: Mismatch) -> McpError {
    let refusal = Refusal {
        session_id: &call.view.tenant.session.id,
        in_session: true,
        refused_by: "header_validation",
        notes: json!({
            "header": echo(&mismatch.header),
            "reason": prefix(&mismatch.detail, MESSAGE_MAX_CHARS),
        }),
        outcome: None,
        trace: call.trace.as_ref(),
        person: call.person.as_deref(),
    };
    match record_refusal(&call.gw, &call.bundle, &call.view.key, refusal).await {
        Ok(decision_id) => McpError::HeaderMismatch {
            header: mismatch.header,
            detail: mismatch.detail,
            decision_id: Some(decision_id),
        },
        Err(e) => e,
    }
}

/// The client capabilities `[mcp] required_client_capabilities` asks of
/// `method` that the request does not declare: -32021.
fn required_capabilities(
    gw: &Gateway,
    method: &str,
    declared: &Map<String, Value>,
) -> Result<(), McpError> {
    let Some(required) = gw.config.mcp.required_client_capabilities.get(method) else {
        return Ok(());
    };
    let missing: Vec<String> = required
        .iter()
        .filter(|c| !declared.get(c.as_str()).is_some_and(Value::is_object))
        .cloned()
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(McpError::MissingClientCapability {
        method: method.to_string(),
        required: missing,
    })
}

/// One request, by method.
async fn dispatch(call: &Call, method: &str, params: Value) -> Result<Reply, McpError> {
    match method {
        "server/discover" => Ok(Reply::Json(discover::discover())),
        "tools/list" => Ok(Reply::Text(tools_list_result(call))),
        "tools/call" => tools_call::tools_call(call, params)
            .await
            .map(|result| Reply::Json(complete(result))),
        "resources/list" => listed(call, EntryKind::Resources).await,
        "resources/templates/list" => listed(call, EntryKind::Templates).await,
        "prompts/list" => listed(call, EntryKind::Prompts).await,
        "resources/read" => entries::read_resource(call, params)
            .await
            .map(|result| Reply::Json(complete(cached(result, None)))),
        "prompts/get" => entries::get_prompt(call, params)
            .await
            .map(|result| Reply::Json(complete(result))),
        _ => Err(McpError::MethodNotFound(method.to_string())),
    }
}

/// `tools/list` at 2026-07-28 (see the module doc for its scope and TTL).
fn tools_list_result(call: &Call) -> String {
    let mut visible = tools_list::visible(call);
    visible.sort_by(|a, b| a.name.cmp(&b.name));
    let ttl_ms = call.gw.config.cache_ttl_secs.saturating_mul(1000);
    let entries: Vec<&str> = visible.iter().map(|s| s.listing_json()).collect();
    let meta = json!({ META_SERVER_INFO: discover::server_info() });
    format!(
        "{{\"resultType\":\"complete\",\"ttlMs\":{ttl_ms},\"cacheScope\":\"private\",\"_meta\":{meta},\"tools\":[{}]}}",
        entries.join(",")
    )
}

/// A resources or prompts list at 2026-07-28: the shape of `tools/list`
/// (`ttlMs` the gateway's own staleness, `cacheScope: "private"`, since
/// Cedar decided every entry for this principal).
async fn listed(call: &Call, kind: EntryKind) -> Result<Reply, McpError> {
    let ttl_ms = call.gw.config.cache_ttl_secs.saturating_mul(1000);
    let result = entries::list(call, kind).await?;
    Ok(Reply::Json(complete(cached(result, Some(ttl_ms)))))
}

/// `cacheScope: "private"` (the result was decided for this principal)
/// and `ttlMs`: `ttl_ms`, else the upstream's own when it gave a
/// non-negative integer, else 0.
fn cached(mut result: Value, ttl_ms: Option<u64>) -> Value {
    if input::asks_input(&result) {
        // A question is no content to cache.
        return result;
    }
    if let Value::Object(map) = &mut result {
        let upstream = map.get("ttlMs").and_then(Value::as_u64);
        map.insert("ttlMs".into(), ttl_ms.or(upstream).unwrap_or(0).into());
        map.insert("cacheScope".into(), "private".into());
    }
    result
}

/// A result with the revision's `resultType` (`complete`, unless a
/// fronted server asks the caller for input) and the gateway's
/// `serverInfo` in `_meta`.
fn complete(mut result: Value) -> Value {
    let asks_input = input::asks_input(&result);
    if let Value::Object(map) = &mut result {
        if !asks_input {
            map.insert("resultType".into(), "complete".into());
        }
        let meta = map.entry("_meta").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            meta.insert(META_SERVER_INFO.into(), discover::server_info());
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_keeps_the_result_and_adds_the_shape() {
        let r = complete(json!({"content": [], "_meta": {"x": 1}}));
        assert_eq!(r["resultType"], "complete");
        assert_eq!(r["_meta"]["x"], 1);
        assert_eq!(r["_meta"][META_SERVER_INFO]["name"], "cedargate");
    }
}
