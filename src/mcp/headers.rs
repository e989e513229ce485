//! Header–body validation of 2026-07-28 requests, before any Cedar
//! decision of the session.
//!
//! The revision mirrors body fields into HTTP headers so intermediaries
//! can route without parsing the body, and asks every server that reads
//! the body to refuse a request whose headers say something else
//! (400, -32020). A policy gateway is exactly the component that must not
//! let the two disagree: policies decide on the body's values, never on a
//! header's, and a request whose headers do not match never reaches them.
//!
//! Checked, for every request (notifications carry no required headers):
//! - `MCP-Protocol-Version` is present and equals `_meta`'s version;
//! - `Mcp-Method` is present and equals `method`;
//! - `Mcp-Name` is present and equals `params.name` (`tools/call`,
//!   `prompts/get`) or `params.uri` (`resources/read`);
//! - for `tools/call` of a tool of the session, each parameter its
//!   `inputSchema` marks `x-mcp-header: "<Name>"` (reachable from the root
//!   through `properties` only): when the arguments hold a non-null value
//!   at that path, `Mcp-Param-<Name>` is present and equals it (strings as
//!   they are, booleans as `true`/`false`, numbers compared numerically);
//!   when they hold none, the header is absent.
//!
//! `Mcp-Name` and `Mcp-Param-*` values of the form `=?base64?…?=` are
//! decoded (standard alphabet, UTF-8) before comparing; a value that is
//! not visible ASCII, or a sentinel that does not decode, is a mismatch.
//!
//! The `x-mcp-header` check runs on the session's catalog before
//! `view_tool`, as the revision orders: a caller that omits an annotated
//! header of a tool a policy hides from it gets -32020 where an unknown
//! name would get -32602, so it can learn that its own org's catalog holds
//! such a tool (never what it does, nor anything of another org). Built-in
//! and A2A tools carry no annotations; only upstream tools can.

use axum::http::{HeaderMap, HeaderName};
use base64::Engine;
use serde_json::Value;

use super::admission::PROTOCOL_HEADER;
use super::era::{META_VERSION, Modern};
use super::protocol::annotations;
use crate::gateway::SessionView;
use crate::tools::spec::echo;

/// A header that does not match its body value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The header at fault, as the revision names it.
    pub header: String,
    /// What is wrong, repeating caller input only as short prefixes.
    pub detail: String,
}

impl Mismatch {
    fn new(header: &str, detail: String) -> Mismatch {
        Mismatch {
            header: header.to_string(),
            detail,
        }
    }
}

/// Checks the mirrored headers of `request` against its body.
pub fn validate(headers: &HeaderMap, request: &Modern, view: &SessionView) -> Result<(), Mismatch> {
    let tool = match request.method.as_str() {
        "tools/call" => request.params["name"].as_str().and_then(|n| view.tool(n)),
        _ => None,
    };
    validate_against(headers, request, tool.map(|t| &t.spec().input_schema))
}

/// The entry point of the header validator: checks the mirrored headers of
/// `request` against its body, `schema` being the `inputSchema` of the
/// session's tool a `tools/call` names (None: no such tool, or another
/// method).
pub fn validate_against(
    headers: &HeaderMap,
    request: &Modern,
    schema: Option<&Value>,
) -> Result<(), Mismatch> {
    if request.id.is_none() {
        return Ok(());
    }
    let meta_version = request.params["_meta"][META_VERSION].as_str();
    expect_plain(
        headers,
        PROTOCOL_HEADER,
        "MCP-Protocol-Version",
        meta_version,
    )?;
    expect_plain(headers, "mcp-method", "Mcp-Method", Some(&request.method))?;
    let name_field = match request.method.as_str() {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    };
    if let Some(field) = name_field {
        let body = request.params[field].as_str();
        expect_encoded(
            headers,
            "mcp-name",
            "Mcp-Name",
            body.map(Value::from).as_ref(),
        )?;
    }
    if request.method == "tools/call"
        && let Some(schema) = schema
    {
        let arguments = &request.params["arguments"];
        for (path, name) in annotations(schema) {
            let value = path
                .iter()
                .try_fold(arguments, |v, key| v.get(key))
                .filter(|v| !v.is_null());
            let label = format!("Mcp-Param-{name}");
            let Ok(header) = HeaderName::from_bytes(label.to_ascii_lowercase().as_bytes()) else {
                continue;
            };
            expect_encoded(headers, header.as_str(), &label, value)?;
        }
    }
    Ok(())
}

/// A header that must equal `body` exactly (no encoding).
fn expect_plain(
    headers: &HeaderMap,
    name: &str,
    label: &str,
    body: Option<&str>,
) -> Result<(), Mismatch> {
    let Some(body) = body else {
        return Ok(());
    };
    let Some(value) = headers.get(name) else {
        return Err(Mismatch::new(label, format!("{label} header is missing")));
    };
    let Ok(value) = value.to_str() else {
        return Err(Mismatch::new(
            label,
            format!("{label} header has invalid characters"),
        ));
    };
    if value != body {
        return Err(Mismatch::new(
            label,
            format!(
                "{label} header value '{}' does not match body value '{}'",
                echo(value),
                echo(body)
            ),
        ));
    }
    Ok(())
}

/// A header that may use the base64 sentinel and must equal `body` (a
/// string, boolean or number); absent exactly when `body` is.
fn expect_encoded(
    headers: &HeaderMap,
    name: &str,
    label: &str,
    body: Option<&Value>,
) -> Result<(), Mismatch> {
    let header = headers.get(name);
    let (header, body) = match (header, body) {
        (None, None) => return Ok(()),
        (None, Some(_)) => {
            return Err(Mismatch::new(label, format!("{label} header is missing")));
        }
        (Some(_), None) => {
            return Err(Mismatch::new(
                label,
                format!("{label} header is present but the body has no value for it"),
            ));
        }
        (Some(h), Some(b)) => (h, b),
    };
    let decoded = header.to_str().ok().and_then(decode).ok_or_else(|| {
        Mismatch::new(
            label,
            format!("{label} header is malformed or has invalid characters"),
        )
    })?;
    if !same(&decoded, body) {
        return Err(Mismatch::new(
            label,
            format!(
                "{label} header value '{}' does not match body value '{}'",
                echo(&decoded),
                echo(&body_text(body))
            ),
        ));
    }
    Ok(())
}

/// A header value with the `=?base64?…?=` sentinel decoded.
pub fn decode(value: &str) -> Option<String> {
    let Some(inner) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Some(value.to_string());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Whether a decoded header value says what the body value does.
fn same(header: &str, body: &Value) -> bool {
    match body {
        Value::String(s) => header == s,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        Value::Number(n) => match (header.trim().parse::<f64>(), n.as_f64()) {
            (Ok(h), Some(b)) => h == b,
            _ => false,
        },
        _ => false,
    }
}

fn body_text(body: &Value) -> String {
    match body {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sentinel_decoding() {
        assert_eq!(decode("us-west1").as_deref(), Some("us-west1"));
        assert_eq!(
            decode("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(
            decode("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=").as_deref(),
            Some("=?base64?literal?=")
        );
        assert_eq!(decode("=?base64?not base64!?="), None);
    }

    #[test]
    fn values_compare_by_type() {
        assert!(same("42", &json!(42)));
        assert!(same("42.0", &json!(42)));
        assert!(!same("43", &json!(42)));
        assert!(same("true", &json!(true)));
        assert!(!same("True", &json!(true)));
        assert!(same(" padded ", &json!(" padded ")));
    }

    #[test]
    fn annotations_follow_properties_only() {
        let schema = json!({
            "type": "object",
            "properties": {
                "region": { "type": "string", "x-mcp-header": "Region" },
                "query": { "type": "string" },
                "target": {
                    "type": "object",
                    "properties": { "zone": { "type": "string", "x-mcp-header": "Zone" } }
                },
                "list": { "type": "array", "items": { "x-mcp-header": "Ignored" } }
            }
        });
        let mut found = annotations(&schema);
        found.sort();
        assert_eq!(
            found,
            vec![
                (vec!["region".to_string()], "Region".to_string()),
                (
                    vec!["target".to_string(), "zone".to_string()],
                    "Zone".to_string()
                ),
            ]
        );
    }
}
