//! The `WWW-Authenticate: Bearer` challenge (RFC 6750 §3, RFC 9728 §5.1)
//! that tells an MCP client where the protected-resource metadata is and
//! which scopes to ask for, and the protected-resource metadata document
//! itself (RFC 9728 §2).
//!
//! One challenge carries every scope the operation needs (MCP 2026-07-28
//! asks for all of them in one challenge); `offline_access` is never
//! advertised, in the challenge or the metadata.

use serde_json::{Value, json};

use super::Identities;

/// What an `error=` attribute of a challenge says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeError {
    /// The token was refused (401).
    InvalidToken,
    /// The request is malformed, e.g. a token in the query string (401).
    InvalidRequest,
    /// The token lacks a scope the operation needs (403).
    InsufficientScope,
}

impl ChallengeError {
    fn code(self) -> &'static str {
        match self {
            ChallengeError::InvalidToken => "invalid_token",
            ChallengeError::InvalidRequest => "invalid_request",
            ChallengeError::InsufficientScope => "insufficient_scope",
        }
    }
}

/// The challenge's text: the metadata URL, the scopes and, after a refused
/// token, the error and its description.
pub fn bearer(
    metadata_url: &str,
    scopes: &[String],
    error: Option<(ChallengeError, &str)>,
) -> String {
    let mut text = match error {
        Some((e, _)) => format!("Bearer error=\"{}\", ", e.code()),
        None => "Bearer ".to_string(),
    };
    text.push_str(&format!("resource_metadata=\"{}\"", quoted(metadata_url)));
    let scopes: Vec<&str> = advertised(scopes).collect();
    if !scopes.is_empty() {
        text.push_str(&format!(", scope=\"{}\"", quoted(&scopes.join(" "))));
    }
    if let Some((_, description)) = error {
        let short: String = description.chars().take(200).collect();
        text.push_str(&format!(", error_description=\"{}\"", quoted(&short)));
    }
    text
}

/// The URL of the metadata of the resource at `endpoint_path` on `base`
/// (RFC 9728 §3.1: the well-known prefix inserted before the path).
pub fn metadata_url(base: &str, endpoint_path: &str) -> String {
    format!("{base}/.well-known/oauth-protected-resource{endpoint_path}")
}

/// The protected-resource metadata of `resource`.
pub fn metadata(resource: &str, identities: &Identities) -> Value {
    let scopes: Vec<&str> = advertised(&identities.config().scopes_supported).collect();
    json!({
        "resource": resource,
        "authorization_servers": identities.issuer_urls().collect::<Vec<_>>(),
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": "cedargate",
    })
}

/// Scopes that may be advertised (never `offline_access`).
fn advertised(scopes: &[String]) -> impl Iterator<Item = &str> {
    scopes
        .iter()
        .map(String::as_str)
        .filter(|s| *s != "offline_access")
}

/// A value fit for a quoted-string: `"` and `\` escaped, controls dropped.
fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars().filter(|c| !c.is_control()) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_challenge_names_the_metadata_every_scope_and_the_error() {
        let scopes = vec![
            "mcp:tools".to_string(),
            "offline_access".to_string(),
            "mcp:admin".to_string(),
        ];
        let url = metadata_url("https://gw.example", "/api/mcp/s1");
        assert_eq!(
            url,
            "https://gw.example/.well-known/oauth-protected-resource/api/mcp/s1"
        );
        assert_eq!(
            bearer(&url, &scopes, None),
            "Bearer resource_metadata=\"https://gw.example/.well-known/oauth-protected-resource/api/mcp/s1\", scope=\"mcp:tools mcp:admin\""
        );
        let refused = bearer(
            &url,
            &[],
            Some((ChallengeError::InvalidToken, "bad \"sig\"\n")),
        );
        assert!(
            refused.starts_with("Bearer error=\"invalid_token\", resource_metadata="),
            "{refused}"
        );
        assert!(
            refused.ends_with("error_description=\"bad \\\"sig\\\"\""),
            "{refused}"
        );
    }
}
