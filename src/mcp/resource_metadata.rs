//! RFC 9728 protected-resource metadata: how an MCP client given only the
//! gateway's URL finds the identity provider to get a token from.
//!
//! Served, when at least one issuer is configured, at
//! `/.well-known/oauth-protected-resource` (the gateway as a whole: its
//! `resource` is `auth.resource`, else `public_url`, else the URL used) and
//! at the path-inserted form of every MCP endpoint URL the gateway serves
//! (`/api/mcp/{sessionId}` with its `/sse` and `/messages`, and a person's
//! `/mcp/{org}/{project}`), whose `resource` is that endpoint's URL exactly
//! as the client used it: clients compare it with the URL they were given.
//! Behind a proxy the scheme and host come from `public_url`. Any other
//! path is 404, as is everything when no issuer is configured.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::gateway::Gateway;
use crate::identity::challenge;

/// The well-known prefix.
pub const PATH: &str = "/.well-known/oauth-protected-resource";

/// The gateway's own metadata.
pub async fn root(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    if !gw.identities.enabled() {
        return not_found();
    }
    let base = super::public_url::base_url(&gw, &headers);
    let resource = gw.identities.config().resource.clone().unwrap_or(base);
    document(&gw, &resource)
}

/// The metadata of one MCP endpoint.
pub async fn endpoint(
    State(gw): State<Arc<Gateway>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !gw.identities.enabled() || !is_mcp_endpoint(&path) {
        return not_found();
    }
    let base = super::public_url::base_url(&gw, &headers);
    document(&gw, &format!("{base}/{path}"))
}

/// The URL of the metadata for the endpoint at `path` (used in challenges).
pub fn url_for(gw: &Gateway, headers: &HeaderMap, path: &str) -> String {
    challenge::metadata_url(&super::public_url::base_url(gw, headers), path)
}

fn document(gw: &Gateway, resource: &str) -> Response {
    let body = challenge::metadata(resource, &gw.identities).to_string();
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=300"),
    );
    resp
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "no protected-resource metadata here\n",
    )
        .into_response()
}

/// Whether `path` (without its leading `/`) is an MCP endpoint the gateway
/// serves: `api/mcp/{id}[/sse|/messages]` or `mcp/{org}/{project}`.
fn is_mcp_endpoint(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').collect();
    let id_like = |s: &str| {
        !s.is_empty()
            && s.len() <= 128
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.~".contains(&b))
    };
    match segments.as_slice() {
        ["api", "mcp", id] => id_like(id),
        ["api", "mcp", id, "sse" | "messages"] => id_like(id),
        ["mcp", org, project] => id_like(org) && id_like(project),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_mcp_endpoints_have_metadata() {
        assert!(is_mcp_endpoint("api/mcp/0190-abc"));
        assert!(is_mcp_endpoint("api/mcp/s1/sse"));
        assert!(is_mcp_endpoint("mcp/acme/web"));
        assert!(!is_mcp_endpoint("admin/orgs"));
        assert!(!is_mcp_endpoint("api/mcp/../admin"));
        assert!(!is_mcp_endpoint("mcp/acme/web/extra"));
        assert!(!is_mcp_endpoint("api/mcp/"));
    }
}
