//! `GET /.well-known/mcp.json`: a public descriptor telling a client, before
//! it has a session, what this server is and how to talk to it: name and
//! version, the endpoint template, the protocol versions it speaks, its
//! transports, and how to authenticate. It holds no tenant data and needs
//! no credential.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::gateway::Gateway;
use crate::mcp::initialize::SERVER_NAME;
use crate::mcp::{protocol, sse};

/// Path of the descriptor.
pub const PATH: &str = "/.well-known/mcp.json";

/// The descriptor for `base`.
pub fn descriptor(base: &str) -> Value {
    let endpoint = format!("{base}/api/mcp/{{sessionId}}");
    json!({
        "name": SERVER_NAME,
        "version": env!("CARGO_PKG_VERSION"),
        "description": "Policy-first MCP gateway: every session, tool listing and tool call is decided by Cedar policies and recorded in a hash-chained decision trail.",
        "endpoint": endpoint,
        "protocolVersions": protocol::ALL,
        // The newest version of the initialize era, which every client
        // reading this descriptor understands; 2026-07-28 clients find
        // their version in the list (or ask `server/discover`).
        "preferredProtocolVersion": protocol::LATEST,
        "transports": [
            {
                "type": "streamable-http",
                "endpoint": endpoint,
                "methods": ["POST", "DELETE"],
                "protocolVersions": protocol::ALL,
                "responseContentTypes": ["application/json", "text/event-stream"],
                "sessionHeader": "Mcp-Session-Id",
            },
            {
                "type": "sse",
                "endpoint": format!("{endpoint}/sse"),
                "messages": format!("{endpoint}/messages?streamId={{streamId}}"),
                "protocolVersions": [sse::LEGACY_VERSION],
            },
        ],
        "authentication": {
            "type": "bearer",
            "header": "Authorization",
            "scheme": "Bearer",
            "tokenFormat": "rsk_live_<16 hex>_<48 hex>",
            "cookies": false,
        },
        "sessions": {
            "create": format!("POST {base}/api/sessions"),
            "body": { "projectId": "string", "agentId": "string" },
        },
        "capabilities": { "tools": { "listChanged": false } },
        "errors": {
            "authDenied": crate::mcp::jsonrpc::AUTH_DENIED,
            "unauthenticated": crate::mcp::jsonrpc::UNAUTHENTICATED,
            "sessionNotFound": crate::mcp::jsonrpc::SESSION_NOT_FOUND,
        },
    })
}

/// `GET /.well-known/mcp.json`.
pub async fn well_known(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let body = descriptor(&crate::mcp::public_url::base_url(&gw, &headers));
    let mut resp = (StatusCode::OK, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    resp
}
