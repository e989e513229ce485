//! MCP protocol versions: which ones the gateway speaks and what each
//! changes on the wire.

/// Supported versions, newest first.
pub const SUPPORTED: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The newest supported version.
pub const LATEST: &str = SUPPORTED[0];

/// What a request without `MCP-Protocol-Version` (and no negotiated
/// version on record) is assumed to speak, per the Streamable HTTP spec.
pub const DEFAULT_WITHOUT_HEADER: &str = "2025-03-26";

/// Whether the gateway speaks `version`.
pub fn is_supported(version: &str) -> bool {
    SUPPORTED.contains(&version)
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
    }

    #[test]
    fn structured_content_from_2025_06_18() {
        assert!(!has_structured_content("2024-11-05"));
        assert!(!has_structured_content("2025-03-26"));
        assert!(has_structured_content("2025-06-18"));
        assert!(has_structured_content("2025-11-25"));
    }
}
