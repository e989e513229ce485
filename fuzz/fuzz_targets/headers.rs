//! The 2026-07-28 header validator, behind the era classification a POST
//! goes through first.
//!
//! An input is three parts separated by blank lines: HTTP headers
//! (`name: value` lines), the `inputSchema` of the tool a `tools/call`
//! names (JSON, or empty for none), and the body.
//!
//! Properties checked beyond "never panics":
//! - a request the validator accepts has `Mcp-Method` equal to its method,
//!   `MCP-Protocol-Version` equal to its `_meta` version, and `Mcp-Name`
//!   (decoded) equal to the name or uri it calls;
//! - the headers the gateway itself mirrors for a request to a 2026-07-28
//!   upstream (`upstream::client::modern_headers`) pass this validator;
//! - the base64 sentinel round-trips any text.
#![no_main]

use std::collections::HashSet;

use cedargate::config::Limits;
use cedargate::mcp::era::{self, Classified, META_VERSION, Modern};
use cedargate::mcp::{admission, headers, protocol};
use cedargate::upstream::client;
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let (head, rest) = split(data);
    let (schema_text, body) = split(rest);
    let headers = header_map(head);
    let schema: Option<Value> = serde_json::from_slice(schema_text).ok();
    let text = String::from_utf8_lossy(body);
    assert_eq!(
        headers::decode(&client::header_value(&text)).as_deref(),
        Some(&*text)
    );
    let Ok(messages) = admission::messages(body, &Limits::default()) else {
        return;
    };
    let Ok(Classified::Modern(modern)) = era::classify(&headers, messages) else {
        return;
    };
    let verdict = headers::validate_against(&headers, &modern, schema.as_ref());
    if verdict.is_ok() && modern.id.is_some() {
        accepted_headers_say_what_the_body_says(&headers, &modern);
    }
    own_headers_pass(&modern, schema.as_ref());
});

fn split(data: &[u8]) -> (&[u8], &[u8]) {
    match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &[]),
    }
}

fn header_map(head: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in head.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = HeaderName::from_bytes(line[..colon].trim_ascii());
        let value = HeaderValue::from_bytes(line[colon + 1..].trim_ascii());
        if let (Ok(name), Ok(value)) = (name, value) {
            map.append(name, value);
        }
    }
    map
}

fn accepted_headers_say_what_the_body_says(headers: &HeaderMap, m: &Modern) {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    assert_eq!(get("mcp-method"), Some(m.method.as_str()));
    if let Some(v) = m.params["_meta"][META_VERSION].as_str() {
        assert_eq!(get(admission::PROTOCOL_HEADER), Some(v));
    }
    let field = match m.method.as_str() {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return,
    };
    if let Some(name) = m.params[field].as_str() {
        let header = get("mcp-name").and_then(headers::decode);
        assert_eq!(header.as_deref(), Some(name));
    }
}

/// What the gateway would send for this request, a validator accepts
/// (when the gateway can send it at all, and the arguments fit the
/// annotations: primitive values, distinct header names). The gateway
/// only sends its own method names, which are visible ASCII (`Mcp-Method`
/// is never encoded).
fn own_headers_pass(m: &Modern, schema: Option<&Value>) {
    if m.id.is_none() || !m.method.bytes().all(|b| b.is_ascii_graphic()) {
        return;
    }
    if let Some(schema) = schema.filter(|_| m.method == "tools/call") {
        let mut seen = HashSet::new();
        for (path, name) in protocol::annotations(schema) {
            if !seen.insert(name.to_ascii_lowercase()) {
                return;
            }
            let value = path
                .iter()
                .try_fold(&m.params["arguments"], |v, key| v.get(key));
            if matches!(value, Some(Value::Object(_) | Value::Array(_))) {
                return;
            }
        }
    }
    let mut sent = HeaderMap::new();
    if let Some(v) = m.params["_meta"][META_VERSION].as_str() {
        // The gateway sends only versions it supports (visible ASCII);
        // `HeaderValue` would also take bytes the validator refuses.
        if !v.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            return;
        }
        let Ok(v) = HeaderValue::from_str(v) else {
            return;
        };
        sent.insert(admission::PROTOCOL_HEADER, v);
    }
    for (name, value) in client::modern_headers(&m.method, &m.params, schema) {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) else {
            return;
        };
        sent.append(name, value);
    }
    let verdict = headers::validate_against(&sent, m, schema);
    assert!(verdict.is_ok(), "{verdict:?} for {sent:?}");
}
