//! What of a 2026-07-28 caller's request goes on to a server the gateway
//! fronts (`tools/call`, `resources/read`, `prompts/get`): the client
//! capabilities it declared and, on the retry of a request that asked it
//! for input, its `inputResponses` and the server's `requestState`
//! ([`Relay`]). Both are taken out of `params` here, checked for their
//! type (else -32602 naming the field, before anything is decided), and
//! travel only in the relay, so the client (`upstream::client`) adds them
//! only to a server of the same revision. A caller of an older revision
//! relays nothing: its `inputResponses`, not of its revision, are dropped.

use serde_json::{Map, Value};

use super::call::Call;
use super::error::McpError;
use crate::tools::Relay;

/// Takes the retry fields out of `params` and builds the caller's relay.
pub fn take(call: &Call, params: &mut Map<String, Value>) -> Result<Relay, McpError> {
    let input_responses = optional(
        params,
        "inputResponses",
        object,
        "`params.inputResponses` must be an object",
    )?;
    let request_state = optional(
        params,
        "requestState",
        text,
        "`params.requestState` must be a string",
    )?;
    let Some(capabilities) = &call.capabilities else {
        return Ok(Relay::default());
    };
    Ok(Relay {
        capabilities: Some(capabilities.clone()),
        input_responses,
        request_state,
    })
}

/// A JSON object, for [`optional`].
pub fn object(v: Value) -> Option<Map<String, Value>> {
    match v {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

/// A JSON string, for [`optional`].
fn text(v: Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// `params[field]` through `kind` (absent or null: `None`); another type
/// is invalid params, answered with `message`.
pub fn optional<T>(
    params: &mut Map<String, Value>,
    field: &'static str,
    kind: impl Fn(Value) -> Option<T>,
    message: &'static str,
) -> Result<Option<T>, McpError> {
    match params.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => kind(v)
            .map(Some)
            .ok_or(McpError::InvalidParams { message, field }),
    }
}
