//! The JSON-RPC framing and batch parser, in the admission's order: the
//! nesting pre-scan, the one-pass parse, the batch bounds, classification.
//!
//! Properties checked beyond "never panics":
//! - `admission::messages` refuses for exactly the first check that fails
//!   (depth, JSON, empty batch, batch length, an invalid single element);
//! - the pre-scan agrees with the nesting of any valid JSON, and under
//!   its bound serde never reaches its own recursion limit;
//! - whatever serde reads as JSON the parser reads too, and a parsed body
//!   re-assembles into the same JSON (ids as written, every member);
//! - every id a request keeps is echoed into an answer that is valid JSON.
#![no_main]

use cedargate::config::Limits;
use cedargate::mcp::admission;
use cedargate::mcp::error::McpError;
use cedargate::mcp::jsonrpc::{self, Answer, Element, Message, Parsed, Reply, RpcError};
use libfuzzer_sys::fuzz_target;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_batch_len: 8,
        max_json_depth: 16,
        ..Limits::default()
    };
    check_admission_order(data, &limits);
    check_depth_scan(data);
    check_parse_and_classify(data);
});

/// `messages` refuses for the first failing check, in order.
fn check_admission_order(data: &[u8], limits: &Limits) {
    let got = admission::messages(data, limits);
    if jsonrpc::depth_exceeds(data, limits.max_json_depth) {
        assert!(matches!(got, Err(McpError::TooDeep(_))), "{got:?}");
        return;
    }
    let parsed = match jsonrpc::parse(data) {
        Err(_) => {
            assert!(matches!(got, Err(McpError::Parse(_))), "{got:?}");
            return;
        }
        Ok(p) => p,
    };
    match parsed {
        Parsed::Batch(items) if items.is_empty() => {
            assert!(
                matches!(got, Err(McpError::InvalidRequest { .. })),
                "{got:?}"
            );
        }
        Parsed::Batch(items) if items.len() > limits.max_batch_len => {
            assert!(matches!(got, Err(McpError::BatchTooLong { .. })), "{got:?}");
        }
        Parsed::Batch(items) => {
            let Ok(m) = got else {
                panic!("a bounded batch refused: {got:?}")
            };
            assert!(m.batch && m.messages.len() == items.len());
        }
        Parsed::Single(element) => match (jsonrpc::classify(element), got) {
            (Message::Invalid { id, .. }, Err(McpError::InvalidRequest { id: got, .. })) => {
                assert_eq!(id.as_raw(), got.as_raw());
            }
            (Message::Invalid { .. }, other) => panic!("an invalid request admitted: {other:?}"),
            (_, Ok(m)) => assert!(!m.batch && m.messages.len() == 1),
            (_, Err(e)) => panic!("a valid single message refused: {e:?}"),
        },
    }
}

/// The pre-scan agrees with serde on the nesting of valid JSON: the nesting
/// as written (a `Value` keeps only the last of duplicate keys, and with it
/// may lose the deepest member).
fn check_depth_scan(data: &[u8]) {
    match serde_json::from_slice::<Nesting>(data) {
        Ok(Nesting(d)) => {
            assert!(!jsonrpc::depth_exceeds(data, d), "depth {d} over-counted");
            if d > 0 {
                assert!(
                    jsonrpc::depth_exceeds(data, d - 1),
                    "depth {d} under-counted"
                );
            }
        }
        Err(e) => {
            // Under the pre-scan's bound, serde's recursion guard never trips.
            if !jsonrpc::depth_exceeds(data, 100) {
                assert!(!e.to_string().contains("recursion limit"), "{e}");
            }
        }
    }
}

/// The nesting of a JSON text as written, every member counted.
struct Nesting(usize);

impl<'de> serde::Deserialize<'de> for Nesting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NestingVisitor)
    }
}

struct NestingVisitor;

impl<'de> serde::de::Visitor<'de> for NestingVisitor {
    type Value = Nesting;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Nesting, E> {
        Ok(Nesting(0))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Nesting, E> {
        Ok(Nesting(0))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Nesting, E> {
        Ok(Nesting(0))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Nesting, E> {
        Ok(Nesting(0))
    }
    fn visit_str<E>(self, _: &str) -> Result<Nesting, E> {
        Ok(Nesting(0))
    }
    fn visit_unit<E>(self) -> Result<Nesting, E> {
        Ok(Nesting(0))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Nesting, A::Error> {
        let mut deepest = 0;
        while let Some(Nesting(d)) = seq.next_element()? {
            deepest = deepest.max(d);
        }
        Ok(Nesting(deepest + 1))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Nesting, A::Error> {
        let mut deepest = 0;
        while let Some((serde::de::IgnoredAny, Nesting(d))) = map.next_entry()? {
            deepest = deepest.max(d);
        }
        Ok(Nesting(deepest + 1))
    }
}


/// The one-pass parse reads what serde reads, and re-assembles into it.
fn check_parse_and_classify(data: &[u8]) {
    if jsonrpc::depth_exceeds(data, 100) {
        return;
    }
    let value = serde_json::from_slice::<Value>(data).ok();
    let parsed = jsonrpc::parse(data);
    if value.is_some() {
        assert!(parsed.is_ok(), "serde reads it, the parser does not");
    }
    let Ok(parsed) = parsed else { return };
    let elements = match parsed {
        Parsed::Batch(items) => {
            if let Some(v) = &value {
                let a = v.as_array().expect("a batch is an array");
                assert_eq!(a.len(), items.len());
                for (e, v) in items.iter().zip(a) {
                    same_element(e, v);
                }
            }
            items
        }
        Parsed::Single(e) => {
            if let Some(v) = &value {
                assert!(!v.is_array());
                same_element(&e, v);
            }
            vec![e]
        }
    };
    let mut answers = Vec::new();
    for e in elements {
        let original = element_object(&e);
        match jsonrpc::classify(e) {
            Message::Request { id, method, params } => {
                let o = original.expect("a request is an object");
                assert_eq!(o.get("jsonrpc"), Some(&Value::from("2.0")));
                assert_eq!(o.get("method"), Some(&Value::from(method)));
                assert!(matches!(
                    params,
                    Value::Null | Value::Object(_) | Value::Array(_)
                ));
                if let Ok(v) = serde_json::from_str::<Value>(id.as_raw()) {
                    assert!(matches!(
                        v,
                        Value::Null | Value::String(_) | Value::Number(_)
                    ));
                }
                answers.push(Answer::of(id, Ok(Reply::Json(Value::Null))));
            }
            Message::Notification { method, .. } => {
                let o = original.expect("a notification is an object");
                assert!(!o.contains_key("id"));
                assert_eq!(o.get("method"), Some(&Value::from(method)));
            }
            Message::ClientResponse => {}
            Message::Invalid { id, .. } => {
                answers.push(Answer::of(id, Ok(Reply::Json(Value::Null))))
            }
        }
    }
    for batch in [true, false] {
        let body = jsonrpc::body(&answers, batch);
        if !body.is_empty() {
            assert!(
                serde_json::from_str::<Box<RawValue>>(&body).is_ok(),
                "{body}"
            );
        }
    }
    for a in &answers {
        let err = jsonrpc::error_body(
            a.id(),
            &RpcError {
                code: jsonrpc::INVALID_REQUEST,
                message: "x".into(),
                data: None,
            },
        );
        assert!(serde_json::from_str::<Box<RawValue>>(&err).is_ok(), "{err}");
    }
}

/// An object element with its id put back, as serde reads it.
fn element_object(e: &Element) -> Option<Map<String, Value>> {
    let Element::Object { id, members } = e else {
        return None;
    };
    let mut o = members.clone();
    if let Some(raw) = id {
        // An id serde cannot hold as a number (1e400) is kept as written.
        let v = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
        o.insert("id".into(), v);
    }
    Some(o)
}

fn same_element(e: &Element, v: &Value) {
    match element_object(e) {
        Some(o) => assert_eq!(Some(&o), v.as_object()),
        None => assert!(!v.is_object()),
    }
}
