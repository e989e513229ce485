//! JSON-RPC 2.0 framing: message classification, error codes (a public
//! contract, see the endpoint seed), and a nesting-depth pre-scan that runs
//! before any parser so deep input cannot exhaust the stack.

use serde_json::{Map, Value, json};

/// Request body is not valid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// Missing `jsonrpc` or `method`, or not a request object.
pub const INVALID_REQUEST: i64 = -32600;
/// Unknown method or unknown (or hidden) tool.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// `tools/call` without `params.name`, or bad arguments.
pub const INVALID_PARAMS: i64 = -32602;
/// Tool execution failed.
pub const INTERNAL_ERROR: i64 = -32603;
/// Not authorized (a Cedar deny).
pub const AUTH_DENIED: i64 = -32003;
/// Missing or unknown credential (HTTP 401).
pub const UNAUTHENTICATED: i64 = -32001;
/// Unknown session (HTTP 404).
pub const SESSION_NOT_FOUND: i64 = -32002;

/// A JSON-RPC error object, as written on the wire (built only by
/// [`super::error::McpError::rpc`]).
#[derive(Debug, Clone)]
pub struct RpcError {
    /// Error code.
    pub code: i64,
    /// Human message.
    pub message: String,
    /// Structured detail.
    pub data: Option<Value>,
}

impl RpcError {
    /// The `error` member.
    pub fn to_value(&self) -> Value {
        let mut e = Map::new();
        e.insert("code".into(), self.code.into());
        e.insert("message".into(), self.message.clone().into());
        if let Some(d) = &self.data {
            e.insert("data".into(), d.clone());
        }
        Value::Object(e)
    }
}

/// A full error response.
pub fn error_response(id: Value, err: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": err.to_value() })
}

/// A full success response.
pub fn result_response(id: Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// The result of one request: a JSON value, or JSON text serialized ahead
/// (a `tools/list` of a large catalog is assembled from each tool's
/// serialized entry rather than cloned and serialized per call).
#[derive(Debug)]
pub enum Reply {
    /// A value, serialized with the response.
    Json(Value),
    /// JSON text, written into the response as it is.
    Text(String),
}

/// One response of a request body.
#[derive(Debug)]
pub enum Answer {
    /// A whole response object.
    Json(Value),
    /// A success whose result is JSON text.
    Text {
        /// The request's id.
        id: Value,
        /// The result, serialized.
        result: String,
    },
}

impl Answer {
    /// The answer to request `id` from what its method produced.
    pub fn of(id: Value, outcome: Result<Reply, RpcError>) -> Answer {
        match outcome {
            Ok(Reply::Json(result)) => Answer::Json(result_response(id, result)),
            Ok(Reply::Text(result)) => Answer::Text { id, result },
            Err(err) => Answer::Json(error_response(id, &err)),
        }
    }

    /// The response as a value, when it is one (a `Text` answer is never an
    /// `initialize` answer).
    pub fn json(&self) -> Option<&Value> {
        match self {
            Answer::Json(v) => Some(v),
            Answer::Text { .. } => None,
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Answer::Json(v) => out.push_str(&v.to_string()),
            Answer::Text { id, result } => {
                out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
                out.push_str(&id.to_string());
                out.push_str(",\"result\":");
                out.push_str(result);
                out.push('}');
            }
        }
    }
}

/// The body answering a request: the array of answers for a batch, else
/// its one answer.
pub fn body(answers: &[Answer], batch: bool) -> String {
    let mut out = String::new();
    if !batch {
        if let Some(a) = answers.first() {
            a.write(&mut out);
        }
        return out;
    }
    out.push('[');
    for (i, a) in answers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        a.write(&mut out);
    }
    out.push(']');
    out
}

/// One element of a request body.
#[derive(Debug, Clone)]
pub enum Message {
    /// A call expecting a response.
    Request {
        /// Its id (string or number).
        id: Value,
        /// Method name.
        method: String,
        /// Params (`null` when absent).
        params: Value,
    },
    /// A notification: no response.
    Notification {
        /// Method name.
        method: String,
    },
    /// A response from the client (to a server request): ignored.
    ClientResponse,
    /// Not a valid request: answered with -32600.
    Invalid {
        /// The id, when one could be read.
        id: Value,
        /// What is wrong.
        reason: String,
    },
}

/// Classifies one JSON value of a body.
pub fn classify(v: Value) -> Message {
    let Value::Object(mut obj) = v else {
        return Message::Invalid {
            id: Value::Null,
            reason: "a request must be a JSON object".into(),
        };
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
        Some(Value::Null) => Some(Value::Null),
        Some(_) => {
            return Message::Invalid {
                id: Value::Null,
                reason: "`id` must be a string or a number".into(),
            };
        }
    };
    let reply_id = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Message::Invalid {
            id: reply_id,
            reason: "missing `jsonrpc: \"2.0\"`".into(),
        };
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => {
            return Message::Invalid {
                id: reply_id,
                reason: "`method` must be a string".into(),
            };
        }
        None => {
            if obj.contains_key("result") || obj.contains_key("error") {
                return Message::ClientResponse;
            }
            return Message::Invalid {
                id: reply_id,
                reason: "missing `method`".into(),
            };
        }
    };
    let params = obj.remove("params").unwrap_or(Value::Null);
    if !matches!(params, Value::Null | Value::Object(_) | Value::Array(_)) {
        return Message::Invalid {
            id: reply_id,
            reason: "`params` must be an object or an array".into(),
        };
    }
    match id {
        None => Message::Notification { method },
        Some(id) => Message::Request { id, method, params },
    }
}

/// True when `body` nests arrays/objects deeper than `max`. Strings are
/// skipped correctly, so brackets inside them do not count.
pub fn depth_exceeds(body: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_table() {
        let cases = [
            (json!({"jsonrpc":"2.0","id":1,"method":"ping"}), "request"),
            (
                json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
                "notification",
            ),
            (json!({"jsonrpc":"2.0","id":1}), "invalid"),
            (json!({"id":1,"method":"ping"}), "invalid"),
            (json!({"jsonrpc":"2.0","id":{},"method":"ping"}), "invalid"),
            (
                json!({"jsonrpc":"2.0","id":1,"method":"ping","params":3}),
                "invalid",
            ),
            (json!({"jsonrpc":"2.0","id":1,"result":{}}), "response"),
            (json!(5), "invalid"),
        ];
        for (v, want) in cases {
            let got = match classify(v.clone()) {
                Message::Request { .. } => "request",
                Message::Notification { .. } => "notification",
                Message::Invalid { .. } => "invalid",
                Message::ClientResponse => "response",
            };
            assert_eq!(got, want, "{v}");
        }
    }

    #[test]
    fn depth_scan_ignores_strings() {
        assert!(!depth_exceeds(br#"{"a":"[[[[[[[["}"#, 2));
        assert!(depth_exceeds(b"[[[", 2));
        assert!(!depth_exceeds(b"[[]]", 2));
        assert!(!depth_exceeds(br#"{"a":"\"[[["}"#, 1));
    }
}
