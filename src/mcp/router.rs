//! The MCP routes of one gateway: the Streamable HTTP endpoint and the
//! HTTP+SSE transport of every session.

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use super::{people, sse, streamable};
use crate::gateway::Gateway;

/// `POST|GET|DELETE /api/mcp/{sessionId}`, `GET …/sse`, `POST …/messages`.
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route(
            "/api/mcp/{session_id}",
            post(streamable::post_endpoint)
                .get(streamable::get_endpoint)
                .delete(streamable::delete_endpoint),
        )
        .route(
            "/mcp/{org}/{project}",
            post(people::post_endpoint)
                .get(streamable::get_endpoint)
                .delete(people::delete_endpoint),
        )
        .route("/api/mcp/{session_id}/sse", get(sse::open_stream))
        .route("/api/mcp/{session_id}/messages", post(sse::post_message))
}
