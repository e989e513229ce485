//! The outbound half of the bridge: one JSON-RPC call to a peer's declared
//! interface, in the protocol generation chosen from its card, and the
//! translation of what comes back into a tool result or one of the bridge's
//! error codes (a public contract):
//!
//! | code | cause |
//! |---|---|
//! | -32201 | the call (including waiting for a free slot) exceeded its wall-clock timeout |
//! | -32202 | network failure, non-2xx answer, or an unresolvable peer credential |
//! | -32203 | the answer is not JSON, lacks the JSON-RPC envelope, or has no usable result |
//! | -32204 | the remote task failed (or was rejected or canceled), or the peer answered a JSON-RPC error |
//!
//! **Architecture Invariant:** this module is reached only after Cedar
//! allowed `a2a_invoke`; it knows nothing about Cedar, sessions or storage.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;

use super::card::ProtocolVersion;
use super::registry::PeerTarget;

/// Outbound call exceeded its wall-clock timeout.
pub const TIMEOUT: i64 = -32201;
/// Network failure or non-2xx HTTP answer.
pub const TRANSPORT: i64 = -32202;
/// Not JSON, or no JSON-RPC envelope.
pub const INVALID_RESPONSE: i64 = -32203;
/// The remote task failed.
pub const TASK_FAILED: i64 = -32204;

/// A failed outbound call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct BridgeError {
    /// One of the bridge codes.
    pub code: i64,
    /// What happened, without credentials.
    pub message: String,
    /// Detail for `error.data` (HTTP status, remote error, task state).
    pub detail: Value,
}

impl BridgeError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        BridgeError {
            code,
            message: message.into(),
            detail: Value::Null,
        }
    }

    fn with(mut self, detail: Value) -> Self {
        self.detail = detail;
        self
    }

    /// The class name used in events and records.
    pub fn class(&self) -> &'static str {
        match self.code {
            TIMEOUT => "RemoteA2ATimeoutError",
            TRANSPORT => "RemoteA2ATransportError",
            INVALID_RESPONSE => "RemoteA2AInvalidResponseError",
            _ => "RemoteA2ATaskFailedError",
        }
    }
}

/// What a successful call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct BridgeOutput {
    /// The translated result: a data part's object, a text part's string,
    /// or the artifact / message with its parts preserved.
    pub value: Value,
    /// Bytes sent (request body).
    pub request_bytes: usize,
    /// Bytes received (response body).
    pub response_bytes: usize,
}

/// One outbound request.
#[derive(Debug)]
pub struct Outbound<'a> {
    /// The peer.
    pub target: &'a PeerTarget,
    /// Skill to run.
    pub skill_id: &'a str,
    /// The validated arguments (one data part).
    pub args: &'a Value,
    /// Session id: `correlationId` and `taskId` of the request.
    pub session_id: &'a str,
    /// Resolved bearer credential, if the peer has one.
    pub bearer: Option<&'a str>,
    /// Wall-clock budget for the whole call.
    pub timeout: Duration,
    /// Largest response body accepted.
    pub max_response_bytes: usize,
}

/// Builds the JSON-RPC request for `version`.
pub fn request_body(
    version: ProtocolVersion,
    skill_id: &str,
    args: &Value,
    session_id: &str,
) -> Value {
    serde_json::to_value(Request::new(version, skill_id, args, session_id)).unwrap_or_default()
}

/// The JSON-RPC request of one call, borrowing what it sends: serialized
/// straight to bytes, without building a JSON tree first.
#[derive(serde::Serialize)]
struct Request<'a> {
    jsonrpc: &'static str,
    id: String,
    method: &'static str,
    params: Params<'a>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Params<'a> {
    message: Message<'a>,
    metadata: SkillRef<'a>,
    correlation_id: &'a str,
    task_id: &'a str,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Message<'a> {
    /// 0.3 tags the object: `"kind": "message"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    message_id: String,
    role: &'static str,
    /// 0.3 names the skill on the message too.
    #[serde(skip_serializing_if = "Option::is_none")]
    skill: Option<SkillRef<'a>>,
    parts: [DataPart<'a>; 1],
    metadata: SkillRef<'a>,
}

/// `{"skillId": …}`: the message's and the request's `metadata`, and the
/// 0.3 message's `skill`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct SkillRef<'a> {
    skill_id: &'a str,
}

/// The arguments as one data part: 0.3 `{"kind":"data","data":…}`, 1.0
/// `{"data":…,"mediaType":"application/json"}`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct DataPart<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    data: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    media_type: Option<&'static str>,
}

impl<'a> Request<'a> {
    fn new(
        version: ProtocolVersion,
        skill_id: &'a str,
        args: &'a Value,
        session_id: &'a str,
    ) -> Self {
        let old = version == ProtocolVersion::V0_3;
        Request {
            jsonrpc: "2.0",
            id: uuid::Uuid::now_v7().to_string(),
            method: if old { "message/send" } else { "SendMessage" },
            params: Params {
                message: Message {
                    kind: old.then_some("message"),
                    message_id: uuid::Uuid::new_v4().to_string(),
                    role: if old { "user" } else { "ROLE_USER" },
                    skill: old.then_some(SkillRef { skill_id }),
                    parts: [DataPart {
                        kind: old.then_some("data"),
                        data: args,
                        media_type: (!old).then_some("application/json"),
                    }],
                    metadata: SkillRef { skill_id },
                },
                metadata: SkillRef { skill_id },
                correlation_id: session_id,
                task_id: session_id,
            },
        }
    }
}

/// Sends one call and translates the answer. `slots` bounds concurrent
/// calls to this peer; waiting for a slot counts against the timeout.
pub async fn send(
    client: &reqwest::Client,
    slots: &Arc<Semaphore>,
    out: Outbound<'_>,
) -> Result<BridgeOutput, BridgeError> {
    let started = Instant::now();
    let budget = out.timeout;
    let old = out.target.version == ProtocolVersion::V0_3;
    let span = crate::telemetry::client_span(&crate::telemetry::ClientFacts::A2a {
        method: if old { "message/send" } else { "SendMessage" },
        version: if old { "0.3" } else { "1.0" },
        url: out.target.interface.as_str(),
        agent: Some(out.target.name.as_str()),
    });
    let context = span.as_ref().map(|s| s.context().clone());
    let sent = crate::telemetry::scoped(
        context.as_ref(),
        tokio::time::timeout(budget, send_inner(client, slots, &out)),
    )
    .await;
    if let (Some(span), Ok(Err(e))) = (&span, &sent) {
        span.failed(&e.code.to_string(), &e.message);
    } else if let (Some(span), Err(_)) = (&span, &sent) {
        span.failed("timeout", "the remote agent did not answer in time");
    }
    match sent {
        Ok(r) => r,
        Err(_) => Err(BridgeError::new(
            TIMEOUT,
            format!(
                "remote agent `{}` did not answer within {} ms",
                out.target.slug,
                budget.as_millis()
            ),
        )
        .with(json!({ "timeoutMs": budget.as_millis() as u64, "elapsedMs": started.elapsed().as_millis() as u64 }))),
    }
}

async fn send_inner(
    client: &reqwest::Client,
    slots: &Arc<Semaphore>,
    out: &Outbound<'_>,
) -> Result<BridgeOutput, BridgeError> {
    let _permit = slots
        .acquire()
        .await
        .map_err(|_| BridgeError::new(TRANSPORT, "the bridge is shutting down"))?;
    let body = Request::new(out.target.version, out.skill_id, out.args, out.session_id);
    let bytes = serde_json::to_vec(&body)
        .map_err(|e| BridgeError::new(TRANSPORT, format!("cannot encode the request: {e}")))?;
    let request_bytes = bytes.len();
    let mut req = client
        .post(out.target.interface.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::ACCEPT, "application/json")
        .body(bytes);
    if out.target.version == ProtocolVersion::V1_0 {
        req = req.header("A2A-Version", "1.0");
    }
    if let Some((traceparent, tracestate)) = crate::telemetry::trace_headers() {
        req = req.header("traceparent", traceparent);
        if let Some(state) = tracestate {
            req = req.header("tracestate", state);
        }
    }
    if let Some(token) = out.bearer {
        req = req.bearer_auth(token);
    }
    let mut resp = req.send().await.map_err(|e| {
        BridgeError::new(
            TRANSPORT,
            format!(
                "cannot reach remote agent `{}`: {}",
                out.target.slug,
                transport_reason(&e)
            ),
        )
    })?;
    let status = resp.status();
    let mut body: Vec<u8> = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > out.max_response_bytes {
                    return Err(BridgeError::new(
                        INVALID_RESPONSE,
                        format!(
                            "remote agent `{}` answered more than {} bytes",
                            out.target.slug, out.max_response_bytes
                        ),
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => {
                return Err(BridgeError::new(
                    TRANSPORT,
                    format!(
                        "connection to remote agent `{}` failed while reading: {}",
                        out.target.slug,
                        transport_reason(&e)
                    ),
                ));
            }
        }
    }
    if !status.is_success() {
        return Err(BridgeError::new(
            TRANSPORT,
            format!(
                "remote agent `{}` answered HTTP {}",
                out.target.slug,
                status.as_u16()
            ),
        )
        .with(json!({ "httpStatus": status.as_u16() })));
    }
    let value = translate(&out.target.slug, &body)?;
    Ok(BridgeOutput {
        value,
        request_bytes,
        response_bytes: body.len(),
    })
}

/// The innermost cause of a reqwest error, without the URL (which may
/// carry a query the operator considers private).
fn transport_reason(e: &reqwest::Error) -> String {
    let mut source: &dyn std::error::Error = e;
    while let Some(next) = source.source() {
        source = next;
    }
    let kind = if e.is_connect() {
        "connection failed"
    } else if e.is_timeout() {
        "timed out"
    } else {
        "request failed"
    };
    format!("{kind} ({source})")
}

/// Translates a response body (JSON-RPC envelope) into the tool's value.
pub fn translate(slug: &str, body: &[u8]) -> Result<Value, BridgeError> {
    let envelope: Value = serde_json::from_slice(body).map_err(|e| {
        BridgeError::new(
            INVALID_RESPONSE,
            format!("remote agent `{slug}` answered something that is not JSON: {e}"),
        )
    })?;
    let Some(obj) = envelope.as_object() else {
        return Err(invalid(
            slug,
            "the answer is not a JSON-RPC response object",
        ));
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(slug, "the answer has no `\"jsonrpc\": \"2.0\"`"));
    }
    if let Some(err) = obj.get("error") {
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        return Err(BridgeError::new(
            TASK_FAILED,
            format!("remote agent `{slug}` answered a JSON-RPC error: {message}"),
        )
        .with(json!({ "remoteError": err })));
    }
    let Some(result) = obj.get("result") else {
        return Err(invalid(slug, "the answer has neither `result` nor `error`"));
    };
    // 1.0 wraps the result: {"task": …} or {"message": …}.
    if let Some(task) = result.get("task") {
        return task_value(slug, task);
    }
    if let Some(message) = result.get("message").filter(|m| m.is_object()) {
        return message_value(slug, message);
    }
    // 0.3 tags it with `kind`.
    match result.get("kind").and_then(Value::as_str) {
        Some("task") => task_value(slug, result),
        Some("message") => message_value(slug, result),
        _ if result.get("status").is_some() => task_value(slug, result),
        _ if result.get("parts").is_some() => message_value(slug, result),
        _ => Err(invalid(slug, "the result is neither a Task nor a Message")),
    }
}

fn invalid(slug: &str, why: &str) -> BridgeError {
    BridgeError::new(
        INVALID_RESPONSE,
        format!("remote agent `{slug}` answered an invalid response: {why}"),
    )
}

/// Normalized task states.
#[derive(Debug, PartialEq, Eq)]
enum State {
    Completed,
    Failed,
    Other,
}

fn state(raw: &str) -> State {
    let s = raw
        .trim_start_matches("TASK_STATE_")
        .to_ascii_lowercase()
        .replace('_', "-");
    match s.as_str() {
        "completed" => State::Completed,
        "failed" | "rejected" | "canceled" | "cancelled" => State::Failed,
        _ => State::Other,
    }
}

fn task_value(slug: &str, task: &Value) -> Result<Value, BridgeError> {
    let raw_state = task
        .pointer("/status/state")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(slug, "the task has no `status.state`"))?;
    match state(raw_state) {
        State::Failed => {
            let reason = task
                .pointer("/status/message/parts")
                .and_then(Value::as_array)
                .map(|parts| texts(parts).join(" "))
                .filter(|t| !t.is_empty());
            let message = match &reason {
                Some(r) => format!("remote task on `{slug}` ended `{raw_state}`: {r}"),
                None => format!("remote task on `{slug}` ended `{raw_state}`"),
            };
            Err(BridgeError::new(TASK_FAILED, message)
                .with(json!({ "state": raw_state, "taskId": task.get("id") })))
        }
        State::Other => Ok(task.clone()),
        State::Completed => {
            let artifacts = task
                .get("artifacts")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            match artifacts.as_slice() {
                [] => match task.pointer("/status/message") {
                    Some(m) if m.is_object() => message_value(slug, m),
                    _ => Ok(Value::Object(Map::new())),
                },
                [artifact] => {
                    let parts = artifact
                        .get("parts")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    match parts.as_slice() {
                        [part] => Ok(part_value(part).unwrap_or_else(|| artifact.clone())),
                        _ => Ok(artifact.clone()),
                    }
                }
                _ => Ok(json!({ "artifacts": artifacts })),
            }
        }
    }
}

fn message_value(_slug: &str, message: &Value) -> Result<Value, BridgeError> {
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match parts.as_slice() {
        [part] => Ok(part_value(part).unwrap_or_else(|| message.clone())),
        _ => Ok(message.clone()),
    }
}

/// A data part's object or a text part's string, in either generation.
fn part_value(part: &Value) -> Option<Value> {
    match part.get("kind").and_then(Value::as_str) {
        Some("data") => part.get("data").cloned(),
        Some("text") => part.get("text").cloned(),
        Some(_) => None,
        None => part
            .get("data")
            .cloned()
            .or_else(|| part.get("text").filter(|t| t.is_string()).cloned()),
    }
}

fn texts(parts: &[Value]) -> Vec<String> {
    parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str).map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(body: Value) -> Result<Value, BridgeError> {
        translate("peer", body.to_string().as_bytes())
    }

    #[test]
    fn results_of_both_generations_translate_alike() {
        let cases = [
            // 0.3 task, one data part
            (
                json!({"jsonrpc":"2.0","id":1,"result":{"kind":"task","status":{"state":"completed"},
                    "artifacts":[{"parts":[{"kind":"data","data":{"n":2.0}}]}]}}),
                json!({"n": 2.0}),
            ),
            // 1.0 task, one text part
            (
                json!({"jsonrpc":"2.0","id":1,"result":{"task":{"status":{"state":"TASK_STATE_COMPLETED"},
                    "artifacts":[{"parts":[{"text":"hi"}]}]}}}),
                json!("hi"),
            ),
            // 1.0 message, one data part
            (
                json!({"jsonrpc":"2.0","id":1,"result":{"message":{"role":"ROLE_AGENT","parts":[{"data":{"a":1}}]}}}),
                json!({"a": 1}),
            ),
            // 0.3 message, one text part
            (
                json!({"jsonrpc":"2.0","id":1,"result":{"kind":"message","parts":[{"kind":"text","text":"yo"}]}}),
                json!("yo"),
            ),
            // several parts: the artifact, parts preserved
            (
                json!({"jsonrpc":"2.0","id":1,"result":{"task":{"status":{"state":"TASK_STATE_COMPLETED"},
                    "artifacts":[{"artifactId":"a","parts":[{"text":"x"},{"data":{"y":1}}]}]}}}),
                json!({"artifactId":"a","parts":[{"text":"x"},{"data":{"y":1}}]}),
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(t(body.clone()).unwrap(), expected, "{body}");
        }
    }

    #[test]
    fn failures_map_to_their_codes() {
        let cases = [
            (
                json!({"jsonrpc":"2.0","id":1,"result":{"kind":"task","status":{"state":"failed"}}}),
                TASK_FAILED,
            ),
            (
                json!({"jsonrpc":"2.0","id":1,"result":{"task":{"status":{"state":"TASK_STATE_FAILED"}}}}),
                TASK_FAILED,
            ),
            (
                json!({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"nope"}}),
                TASK_FAILED,
            ),
            (json!({"id":1,"result":{}}), INVALID_RESPONSE),
            (json!({"jsonrpc":"2.0","id":1}), INVALID_RESPONSE),
            (
                json!({"jsonrpc":"2.0","id":1,"result":{"what":1}}),
                INVALID_RESPONSE,
            ),
            (json!([1, 2]), INVALID_RESPONSE),
        ];
        for (body, code) in cases {
            assert_eq!(t(body.clone()).unwrap_err().code, code, "{body}");
        }
        assert_eq!(
            translate("p", b"<html>").unwrap_err().code,
            INVALID_RESPONSE
        );
    }

    #[test]
    fn requests_follow_each_generation() {
        let args = json!({"branch": "main"});
        let old = request_body(ProtocolVersion::V0_3, "deploy", &args, "s-1");
        assert_eq!(old["method"], "message/send");
        assert_eq!(old["params"]["message"]["parts"][0]["kind"], "data");
        assert_eq!(old["params"]["message"]["role"], "user");
        assert_eq!(old["params"]["correlationId"], "s-1");
        assert_eq!(old["params"]["taskId"], "s-1");
        let new = request_body(ProtocolVersion::V1_0, "deploy", &args, "s-1");
        assert_eq!(new["method"], "SendMessage");
        assert_eq!(new["params"]["message"]["parts"][0]["data"], args);
        assert!(new["params"]["message"]["parts"][0].get("kind").is_none());
        assert_eq!(new["params"]["message"]["role"], "ROLE_USER");
        assert_eq!(new["params"]["metadata"]["skillId"], "deploy");
    }

    #[test]
    fn requests_are_exactly_the_documented_shape() {
        let args = json!({"branch": "main", "n": 2});
        let without_ids = |mut v: Value| {
            assert!(v["id"].as_str().is_some_and(|s| s.len() == 36), "{v}");
            assert!(
                v["params"]["message"]["messageId"]
                    .as_str()
                    .is_some_and(|s| s.len() == 36),
                "{v}"
            );
            v["id"] = Value::Null;
            v["params"]["message"]["messageId"] = Value::Null;
            v
        };
        assert_eq!(
            without_ids(request_body(ProtocolVersion::V0_3, "deploy", &args, "s-1")),
            json!({
                "jsonrpc": "2.0", "id": null, "method": "message/send",
                "params": {
                    "message": {
                        "kind": "message", "messageId": null, "role": "user",
                        "skill": {"skillId": "deploy"},
                        "parts": [{"kind": "data", "data": {"branch": "main", "n": 2}}],
                        "metadata": {"skillId": "deploy"}
                    },
                    "metadata": {"skillId": "deploy"},
                    "correlationId": "s-1", "taskId": "s-1"
                }
            })
        );
        assert_eq!(
            without_ids(request_body(ProtocolVersion::V1_0, "deploy", &args, "s-1")),
            json!({
                "jsonrpc": "2.0", "id": null, "method": "SendMessage",
                "params": {
                    "message": {
                        "messageId": null, "role": "ROLE_USER",
                        "parts": [{"data": {"branch": "main", "n": 2}, "mediaType": "application/json"}],
                        "metadata": {"skillId": "deploy"}
                    },
                    "metadata": {"skillId": "deploy"},
                    "correlationId": "s-1", "taskId": "s-1"
                }
            })
        );
    }
}
