//! Registration by base URL: an upstream registered with a URL that has no
//! path (`https://host` or `https://host/`) is looked up through its
//! `/.well-known/mcp.json` descriptor, which names the MCP endpoint (as
//! servers shaped like seed 003 publish: `GET /.well-known/mcp.json`, then
//! `POST /v1/mcp`).
//!
//! Decisions:
//! - **When.** Only for a base URL, and only at registration: the endpoint
//!   found is what is stored (and shown as `url`), so calls and refreshes
//!   never depend on the descriptor again; `discoveredFrom` in the answer
//!   says where it came from. A URL with a path is the endpoint itself.
//! - **Shapes read.** A `transports` array whose entry for the registered
//!   transport (`type` or `transport`: `streamable-http`, also
//!   `streamable_http`, `streamableHttp`, `http`; or `sse`) gives
//!   `endpoint` or `url`; else, for Streamable HTTP, a top-level
//!   `endpoint`, `url`, `mcpEndpoint` or `mcp_endpoint`. Relative values
//!   are resolved against the base URL.
//! - **Safety.** The endpoint must be on the base URL's own origin (scheme,
//!   host and port), as an SSE stream's `endpoint` event must: the
//!   credential is never sent to a host a descriptor names. A template
//!   (`{sessionId}`) or a URL with credentials is refused. The descriptor
//!   is read within the registration's timeout, up to 64 KiB, no redirects.
//! - **Failures.** No descriptor (404): the base URL is taken as the
//!   endpoint. A descriptor that cannot be fetched, is not JSON, or names
//!   no usable endpoint for the transport: the registration is refused
//!   (400) with the reason, and nothing is stored.

use std::time::Duration;

use reqwest::{StatusCode, Url};
use serde_json::Value;

use super::registry;

/// Path of the descriptor on the upstream's origin.
pub const PATH: &str = "/.well-known/mcp.json";

/// Largest descriptor read.
const MAX_BYTES: usize = 64 * 1024;

/// Why a base URL could not be turned into an endpoint.
#[derive(Debug, thiserror::Error)]
pub enum DescriptorError {
    /// The descriptor could not be fetched.
    #[error("cannot read {url}: {reason}")]
    Unreadable {
        /// The descriptor's URL.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The descriptor was read but names no usable endpoint.
    #[error("the descriptor at {url} {reason}")]
    Unusable {
        /// The descriptor's URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// An endpoint found through a descriptor.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The MCP endpoint to store.
    pub endpoint: Url,
    /// The descriptor it was read from.
    pub from: Url,
}

/// Whether `url` is a base URL (no path), which is looked up.
pub fn is_base(url: &Url) -> bool {
    matches!(url.path(), "" | "/") && url.query().is_none()
}

/// Looks `base` up: `Ok(None)` when it has no descriptor (it is then the
/// endpoint itself).
pub async fn discover(
    http: &reqwest::Client,
    base: &Url,
    transport: &str,
    timeout: Duration,
) -> Result<Option<Discovered>, DescriptorError> {
    let from = base.join(PATH).map_err(|e| DescriptorError::Unreadable {
        url: base.to_string(),
        reason: e.to_string(),
    })?;
    let Some(descriptor) = fetch(http, &from, timeout).await? else {
        return Ok(None);
    };
    let unusable = |reason: String| DescriptorError::Unusable {
        url: from.to_string(),
        reason,
    };
    let named = endpoint_of(&descriptor, transport)
        .ok_or_else(|| unusable(format!("names no `{transport}` endpoint")))?;
    let endpoint = check(base, named).map_err(unusable)?;
    Ok(Some(Discovered { endpoint, from }))
}

/// GETs the descriptor: `None` on 404.
async fn fetch(
    http: &reqwest::Client,
    url: &Url,
    timeout: Duration,
) -> Result<Option<Value>, DescriptorError> {
    let unreadable = |reason: String| DescriptorError::Unreadable {
        url: url.to_string(),
        reason,
    };
    let read = async {
        let resp = http
            .get(url.clone())
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| unreadable(e.to_string()))?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !resp.status().is_success() {
            return Err(unreadable(format!("HTTP {}", resp.status())));
        }
        let body = super::client::read_limited(resp, MAX_BYTES)
            .await
            .map_err(|e| unreadable(e.to_string()))?;
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| unreadable(format!("not JSON: {e}")))
    };
    tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| unreadable(format!("no answer within {} ms", timeout.as_millis())))?
}

/// The transport names a descriptor may use for `transport`.
fn aliases(transport: &str) -> &'static [&'static str] {
    if transport == registry::SSE {
        &["sse"]
    } else {
        &[
            "streamable-http",
            "streamable_http",
            "streamableHttp",
            "http",
        ]
    }
}

/// The endpoint the descriptor names for `transport`, as written.
fn endpoint_of<'a>(descriptor: &'a Value, transport: &str) -> Option<&'a str> {
    let names = aliases(transport);
    let listed = descriptor
        .get("transports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|t| {
            let kind = t.get("type").or_else(|| t.get("transport"));
            kind.and_then(Value::as_str)
                .is_some_and(|k| names.contains(&k))
        })
        .and_then(|t| t.get("endpoint").or_else(|| t.get("url")))
        .and_then(Value::as_str);
    if listed.is_some() || transport == registry::SSE {
        return listed;
    }
    ["endpoint", "url", "mcpEndpoint", "mcp_endpoint"]
        .iter()
        .find_map(|k| descriptor.get(*k).and_then(Value::as_str))
}

/// Resolves `named` against `base` and checks it is a usable endpoint on
/// the same origin.
fn check(base: &Url, named: &str) -> Result<Url, String> {
    if named.contains('{') {
        return Err(format!(
            "names a templated endpoint `{named}`, not one MCP endpoint"
        ));
    }
    let endpoint = base
        .join(named)
        .map_err(|e| format!("names an endpoint that is not a URL (`{named}`: {e})"))?;
    if endpoint.origin() != base.origin() {
        return Err(format!(
            "names an endpoint on another origin (`{endpoint}`); register that URL itself"
        ));
    }
    if !endpoint.username().is_empty() || endpoint.password().is_some() {
        return Err("names an endpoint carrying credentials".into());
    }
    Ok(endpoint)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn base() -> Url {
        Url::parse("https://relay.example:8443/").unwrap()
    }

    #[test]
    fn base_urls_are_the_ones_without_a_path() {
        assert!(is_base(&Url::parse("https://h").unwrap()));
        assert!(is_base(&Url::parse("https://h/").unwrap()));
        assert!(!is_base(&Url::parse("https://h/mcp").unwrap()));
        assert!(!is_base(&Url::parse("https://h/?a=1").unwrap()));
    }

    #[test]
    fn the_endpoint_is_read_from_each_shape() {
        let d = json!({"endpoint": "/v1/mcp"});
        assert_eq!(endpoint_of(&d, registry::STREAMABLE_HTTP), Some("/v1/mcp"));
        assert_eq!(endpoint_of(&d, registry::SSE), None);
        let d = json!({"transports": [
            {"type": "sse", "endpoint": "/sse"},
            {"type": "streamable-http", "url": "https://relay.example:8443/mcp"}]});
        assert_eq!(
            endpoint_of(&d, registry::STREAMABLE_HTTP),
            Some("https://relay.example:8443/mcp")
        );
        assert_eq!(endpoint_of(&d, registry::SSE), Some("/sse"));
        let d = json!({"mcp_endpoint": "v2/mcp"});
        assert_eq!(endpoint_of(&d, registry::STREAMABLE_HTTP), Some("v2/mcp"));
    }

    #[test]
    fn endpoints_stay_on_the_base_origin() {
        assert_eq!(
            check(&base(), "/v1/mcp").unwrap().as_str(),
            "https://relay.example:8443/v1/mcp"
        );
        assert!(check(&base(), "https://evil.example/mcp").is_err());
        assert!(
            check(&base(), "https://relay.example/mcp").is_err(),
            "other port"
        );
        assert!(
            check(&base(), "http://relay.example:8443/mcp").is_err(),
            "other scheme"
        );
        assert!(check(&base(), "/api/mcp/{sessionId}").is_err());
        assert!(check(&base(), "https://u:p@relay.example:8443/mcp").is_err());
    }
}
