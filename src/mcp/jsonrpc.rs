//! JSON-RPC 2.0 framing: message classification, error codes (a public
//! contract, see the endpoint seed), and a nesting-depth pre-scan that runs
//! before any parser so deep input cannot exhaust the stack.
//!
//! A body is parsed in one pass into its elements, each request keeping its
//! `id` as the raw JSON text the client wrote ([`Id`]); every answer, single,
//! batched or sent on an SSE stream, is written with that text, so an id
//! round-trips exactly whatever a JSON number type could hold.

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

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
/// Before 2026-07-28: an unknown (or hidden) resource (the specification's
/// code, equal to the gateway's unknown-session code but answered at HTTP
/// 200 inside the body; 2026-07-28 answers -32602).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// 2026-07-28: a mirrored HTTP header is missing or differs from the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: a required client capability was not declared.
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
/// An unsupported protocol version (with the supported list).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// The disk holding the decision trail is below its free-space minimum
/// (HTTP 507): nothing was decided or written; retry later.
/// (In the server-error range the 2026-07-28 revision leaves to servers,
/// -32000…-32019; -32020…-32099 are reserved for the specification.)
pub const INSUFFICIENT_STORAGE: i64 = -32010;
/// Over a rate limit (HTTP 429, `error.data.retryAfterSeconds`).
pub const RATE_LIMITED: i64 = -32029;

/// A JSON-RPC error object, as written on the wire (built only by
/// `McpError::rpc` in `error.rs`).
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

/// A request id exactly as the client wrote it (a string, a number, or
/// `null`), echoed back byte for byte: `123456789012345678901234567890`,
/// `-0`, `1.50` and `"\u0041"` come back as sent, never re-formatted.
#[derive(Debug, Clone)]
pub struct Id(Box<RawValue>);

impl Id {
    /// The `null` id (a whole-request error, or a request whose id could not
    /// be read).
    pub fn null() -> Id {
        Id(RawValue::NULL.to_owned())
    }

    /// The id's JSON text, as written.
    pub fn as_raw(&self) -> &str {
        self.0.get()
    }

    /// An id as read from a message: a string, a number or `null`;
    /// anything else is not an id (`None`). Raw values carry no surrounding
    /// whitespace, so the first byte tells the JSON type.
    fn read(raw: Box<RawValue>) -> Option<Id> {
        match raw.get().as_bytes().first() {
            Some(b'"' | b'-' | b'0'..=b'9' | b'n') => Some(Id(raw)),
            _ => None,
        }
    }
}

impl From<Value> for Id {
    fn from(v: Value) -> Id {
        RawValue::from_string(v.to_string())
            .map(Id)
            .unwrap_or_else(|_| Id::null())
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.as_raw() == other.as_raw()
    }
}

/// A whole-request error body: `{"jsonrpc":"2.0","id":…,"error":…}`.
pub fn error_body(id: &Id, err: &RpcError) -> String {
    let mut out = String::new();
    Answer::of(id.clone(), Err(err.clone())).write(&mut out);
    out
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

/// One response of a request body: the request's id as written, and what
/// its method produced.
#[derive(Debug)]
pub struct Answer {
    id: Id,
    outcome: Result<Reply, RpcError>,
}

impl Answer {
    /// The answer to request `id` from what its method produced.
    pub fn of(id: impl Into<Id>, outcome: Result<Reply, RpcError>) -> Answer {
        Answer {
            id: id.into(),
            outcome,
        }
    }

    /// The id this answers.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// The result, when it is a success held as a value (a `Text` result is
    /// never an `initialize` result).
    pub fn result(&self) -> Option<&Value> {
        match &self.outcome {
            Ok(Reply::Json(v)) => Some(v),
            _ => None,
        }
    }

    fn write(&self, out: &mut String) {
        out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
        out.push_str(self.id.as_raw());
        match &self.outcome {
            Ok(Reply::Json(result)) => {
                out.push_str(",\"result\":");
                out.push_str(&result.to_string());
            }
            Ok(Reply::Text(result)) => {
                out.push_str(",\"result\":");
                out.push_str(result);
            }
            Err(err) => {
                out.push_str(",\"error\":");
                out.push_str(&err.to_value().to_string());
            }
        }
        out.push('}');
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

/// A request body as parsed: a batch, or one element.
#[derive(Debug)]
pub enum Parsed {
    /// A JSON array: its elements in order.
    Batch(Vec<Element>),
    /// Anything else.
    Single(Element),
}

/// One element of a body, parsed in one pass: an object keeps its `id` as
/// written and every other member as a value.
#[derive(Debug)]
pub enum Element {
    /// A JSON object.
    Object {
        /// `id` as written, when present (the last one, as for any member).
        id: Option<Box<RawValue>>,
        /// The other members.
        members: Map<String, Value>,
    },
    /// Not an object (answered with -32600).
    Other,
}

/// Parses a request body (after the depth pre-scan).
pub fn parse(bytes: &[u8]) -> Result<Parsed, serde_json::Error> {
    serde_json::from_slice(bytes)
}

/// Reads an object's members, keeping `id` as written.
fn object<'de, A: MapAccess<'de>>(mut map: A) -> Result<Element, A::Error> {
    let mut id = None;
    let mut members = Map::new();
    while let Some(key) = map.next_key::<String>()? {
        if key == "id" {
            id = Some(map.next_value::<Box<RawValue>>()?);
        } else {
            let value: Value = map.next_value()?;
            members.insert(key, value);
        }
    }
    Ok(Element::Object { id, members })
}

/// Visits a body (`batch: true`) or one element of a batch.
struct Visit {
    batch: bool,
}

/// What [`Visit`] produced.
enum Visited {
    Batch(Vec<Element>),
    Element(Element),
}

impl<'de> Visitor<'de> for Visit {
    type Value = Visited;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Visited, A::Error> {
        object(map).map(Visited::Element)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Visited, A::Error> {
        if !self.batch {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(Visited::Element(Element::Other));
        }
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Element>()? {
            items.push(item);
        }
        Ok(Visited::Batch(items))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Visited, E> {
        Ok(Visited::Element(Element::Other))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Visited, E> {
        Ok(Visited::Element(Element::Other))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Visited, E> {
        Ok(Visited::Element(Element::Other))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Visited, E> {
        Ok(Visited::Element(Element::Other))
    }

    fn visit_str<E>(self, _: &str) -> Result<Visited, E> {
        Ok(Visited::Element(Element::Other))
    }

    fn visit_unit<E>(self) -> Result<Visited, E> {
        Ok(Visited::Element(Element::Other))
    }
}

impl<'de> Deserialize<'de> for Parsed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Parsed, D::Error> {
        Ok(match d.deserialize_any(Visit { batch: true })? {
            Visited::Batch(items) => Parsed::Batch(items),
            Visited::Element(one) => Parsed::Single(one),
        })
    }
}

impl<'de> Deserialize<'de> for Element {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Element, D::Error> {
        Ok(match d.deserialize_any(Visit { batch: false })? {
            Visited::Batch(_) => Element::Other,
            Visited::Element(one) => one,
        })
    }
}

/// One element of a request body.
#[derive(Debug, Clone)]
pub enum Message {
    /// A call expecting a response.
    Request {
        /// Its id (string or number), as written.
        id: Id,
        /// Method name.
        method: String,
        /// Params (`null` when absent).
        params: Value,
    },
    /// A notification: no response.
    Notification {
        /// Method name.
        method: String,
        /// Params (`null` when absent).
        params: Value,
    },
    /// A response from the client (to a server request): ignored.
    ClientResponse,
    /// Not a valid request: answered with -32600.
    Invalid {
        /// The id, when one could be read.
        id: Id,
        /// What is wrong.
        reason: String,
    },
}

fn invalid(id: Id, reason: &str) -> Message {
    Message::Invalid {
        id,
        reason: reason.into(),
    }
}

/// Classifies one element of a body.
pub fn classify(element: Element) -> Message {
    let Element::Object { id, mut members } = element else {
        return invalid(Id::null(), "a request must be a JSON object");
    };
    let id = match id.map(Id::read) {
        None => None,
        Some(Some(id)) => Some(id),
        Some(None) => return invalid(Id::null(), "`id` must be a string or a number"),
    };
    let reply_id = id.clone().unwrap_or_else(Id::null);
    if members.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(reply_id, "missing `jsonrpc: \"2.0\"`");
    }
    let method = match members.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => return invalid(reply_id, "`method` must be a string"),
        None => {
            if members.contains_key("result") || members.contains_key("error") {
                return Message::ClientResponse;
            }
            return invalid(reply_id, "missing `method`");
        }
    };
    let params = members.remove("params").unwrap_or(Value::Null);
    if !matches!(params, Value::Null | Value::Object(_) | Value::Array(_)) {
        return invalid(reply_id, "`params` must be an object or an array");
    }
    match id {
        None => Message::Notification { method, params },
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

    fn one(text: &str) -> Message {
        match parse(text.as_bytes()).unwrap() {
            Parsed::Single(e) => classify(e),
            Parsed::Batch(_) => panic!("not a single message: {text}"),
        }
    }

    #[test]
    fn classification_table() {
        let cases = [
            (r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, "request"),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                "notification",
            ),
            (r#"{"jsonrpc":"2.0","id":1}"#, "invalid"),
            (r#"{"id":1,"method":"ping"}"#, "invalid"),
            (r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#, "invalid"),
            (r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#, "invalid"),
            (r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#, "invalid"),
            (r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, "request"),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":3}"#,
                "invalid",
            ),
            (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, "response"),
            ("5", "invalid"),
            ("[[1]]", "batch"),
        ];
        for (text, want) in cases {
            let got = match parse(text.as_bytes()).unwrap() {
                Parsed::Batch(_) => "batch",
                Parsed::Single(e) => match classify(e) {
                    Message::Request { .. } => "request",
                    Message::Notification { .. } => "notification",
                    Message::Invalid { .. } => "invalid",
                    Message::ClientResponse => "response",
                },
            };
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn ids_are_kept_as_written() {
        for id in [
            "123456789012345678901234567890",
            "-0",
            "1.50",
            "1e400",
            r#""a\u0041""#,
            "null",
        ] {
            let text = format!(r#"{{"jsonrpc":"2.0","id": {id} ,"method":"ping"}}"#);
            let Message::Request { id: got, .. } = one(&text) else {
                panic!("{text}");
            };
            assert_eq!(got.as_raw(), id);
            let answer = Answer::of(got, Ok(Reply::Json(Value::Null)));
            assert_eq!(
                body(&[answer], false),
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":null}}"#)
            );
        }
    }

    #[test]
    fn batches_keep_each_id_and_element() {
        let Parsed::Batch(items) = parse(
            br#"[{"jsonrpc":"2.0","id":1.0,"method":"a"}, 7, {"jsonrpc":"2.0","method":"b"}]"#,
        )
        .unwrap() else {
            panic!("a batch");
        };
        let kinds: Vec<Message> = items.into_iter().map(classify).collect();
        assert!(matches!(&kinds[0], Message::Request { id, .. } if id.as_raw() == "1.0"));
        assert!(matches!(&kinds[1], Message::Invalid { .. }));
        assert!(matches!(&kinds[2], Message::Notification { .. }));
    }

    #[test]
    fn depth_scan_ignores_strings() {
        assert!(!depth_exceeds(br#"{"a":"[[[[[[[["}"#, 2));
        assert!(depth_exceeds(b"[[[", 2));
        assert!(!depth_exceeds(b"[[]]", 2));
        assert!(!depth_exceeds(br#"{"a":"\"[[["}"#, 1));
    }
}
