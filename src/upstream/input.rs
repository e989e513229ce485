//! An upstream's answer that asks the caller for input (2026-07-28
//! `resultType: "input_required"`): when it is accepted, and what the
//! decision record says of a round trip. Shared by the three requests that
//! may ask (`tools/call` in `adapter`, `resources/read` and `prompts/get`
//! in `mcp::entries`).

use serde_json::{Map, Value, json};

use super::wire::ClientError;
use crate::tools::Relay;
use crate::tools::spec::echo;

/// Whether `result` asks the caller for input.
pub fn asks_input(result: &Value) -> bool {
    result.get("resultType").and_then(Value::as_str) == Some("input_required")
}

/// A `method` result must be an object with its `required` array, or, for
/// a caller who can be asked (the client let it through only then), a
/// request for input: `inputRequests` (an object) or `requestState` (a
/// string).
pub fn checked(
    result: Value,
    relay: &Relay,
    method: &str,
    required: &str,
) -> Result<Value, ClientError> {
    let asks = asks_input(&result);
    let well_formed = if asks {
        relay.takes_input()
            && (result.get("inputRequests").is_some_and(Value::is_object)
                || result.get("requestState").is_some_and(Value::is_string))
    } else {
        result.get(required).is_some_and(Value::is_array)
    };
    if well_formed {
        Ok(result)
    } else if asks {
        Err(ClientError::Invalid(format!(
            "the upstream's {method} asked for input without `inputRequests` or `requestState`"
        )))
    } else {
        Err(ClientError::Invalid(format!(
            "the upstream's {method} result has no `{required}` array"
        )))
    }
}

/// What the record says of a round trip: the keys of the answers a retry
/// carried (`inputResponses`), and the methods a result asking for input
/// requests of the caller (`inputRequests`), so an auditor sees what the
/// server asked and that the answer was decided again.
pub fn note(outcome: &mut Map<String, Value>, relay: &Relay, result: Option<&Value>) {
    if let Some(responses) = &relay.input_responses {
        let keys: Vec<Value> = responses.keys().map(|k| echo(k).into()).collect();
        outcome.insert("inputResponses".into(), keys.into());
    }
    let Some(requests) = result
        .filter(|r| asks_input(r))
        .map(|r| r.get("inputRequests").and_then(Value::as_object))
    else {
        return;
    };
    let methods: Vec<Value> = requests
        .into_iter()
        .flatten()
        .map(|(key, request)| {
            let method = request.get("method").and_then(Value::as_str).unwrap_or("");
            json!({ "key": echo(key), "method": echo(method) })
        })
        .collect();
    outcome.insert("inputRequired".into(), true.into());
    outcome.insert("inputRequests".into(), methods.into());
}
