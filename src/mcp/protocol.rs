//! MCP protocol versions: which ones the gateway speaks and what each
//! changes on the wire.
//!
//! Two eras share the endpoint. **Legacy** versions (2024-11-05 …
//! 2025-11-25) open an MCP session with `initialize`; the **modern** one
//! (2026-07-28) carries its version and client capabilities in every
//! request's `_meta` and has no session at all.

use serde_json::Value;

/// Legacy versions (negotiated by `initialize`), newest first.
pub const SUPPORTED: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The newest legacy version (what `initialize` falls back to).
pub const LATEST: &str = SUPPORTED[0];

/// The modern revision: stateless, no `initialize`.
pub const MODERN: &str = "2026-07-28";

/// Every version the gateway speaks, newest first (`server/discover`,
/// `/.well-known/mcp.json`, and the list an unsupported version is
/// answered with).
pub const ALL: [&str; 5] = [
    MODERN,
    SUPPORTED[0],
    SUPPORTED[1],
    SUPPORTED[2],
    SUPPORTED[3],
];

/// Which era a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2024-11-05 … 2025-11-25: `initialize`, MCP sessions.
    Legacy,
    /// 2026-07-28: stateless, `_meta` on every request.
    Modern,
}

/// Whether `version` is the modern revision.
pub fn is_modern(version: &str) -> bool {
    version == MODERN
}

/// What a request without `MCP-Protocol-Version` (and no negotiated
/// version on record) is assumed to speak, per the Streamable HTTP spec.
pub const DEFAULT_WITHOUT_HEADER: &str = "2025-03-26";

/// Whether the gateway speaks `version` (either era).
pub fn is_supported(version: &str) -> bool {
    ALL.contains(&version)
}

/// The client's version when supported, else the newest supported one.
pub fn negotiate(requested: Option<&str>) -> &'static str {
    requested
        .and_then(|r| SUPPORTED.iter().find(|v| **v == r).copied())
        .unwrap_or(LATEST)
}

/// `structuredContent` exists from 2025-06-18 on. Versions are ISO dates,
/// so string order is date order.
pub fn has_structured_content(version: &str) -> bool {
    version >= "2025-06-18"
}

/// Longest chain of `properties` followed looking for `x-mcp-header`
/// annotations.
const MAX_SCHEMA_DEPTH: usize = 8;

/// The `x-mcp-header` annotations of a tool's `inputSchema` (2026-07-28:
/// the parameters a request mirrors as `Mcp-Param-{Name}` headers): each property path
/// (a chain of `properties` keys from the root) with its header name.
pub fn annotations(schema: &Value) -> Vec<(Vec<String>, String)> {
    let mut found = Vec::new();
    collect(schema, &mut Vec::new(), &mut found);
    found
}

fn collect(schema: &Value, path: &mut Vec<String>, found: &mut Vec<(Vec<String>, String)>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    if path.len() >= MAX_SCHEMA_DEPTH {
        return;
    }
    for (key, property) in properties {
        path.push(key.clone());
        if let Some(name) = property.get("x-mcp-header").and_then(Value::as_str)
            && !name.is_empty()
        {
            found.push((path.clone(), name.to_string()));
        }
        collect(property, path, found);
        path.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_table() {
        assert_eq!(negotiate(Some("2024-11-05")), "2024-11-05");
        assert_eq!(negotiate(Some("2025-03-26")), "2025-03-26");
        assert_eq!(negotiate(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiate(Some("2025-11-25")), "2025-11-25");
        assert_eq!(negotiate(Some("2099-01-01")), LATEST);
        assert_eq!(negotiate(None), LATEST);
        // `initialize` is legacy: it never negotiates the modern revision.
        assert_eq!(negotiate(Some(MODERN)), LATEST);
        assert!(is_supported(MODERN) && is_modern(MODERN) && !is_modern(LATEST));
    }

    #[test]
    fn structured_content_from_2025_06_18() {
        assert!(!has_structured_content("2024-11-05"));
        assert!(!has_structured_content("2025-03-26"));
        assert!(has_structured_content("2025-06-18"));
        assert!(has_structured_content("2025-11-25"));
    }
}
