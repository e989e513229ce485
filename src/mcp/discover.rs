//! `server/discover` (2026-07-28): the versions the gateway speaks, its
//! capabilities, who it is and how to use it. The answer is the same for
//! every caller (the same facts `/.well-known/mcp.json` publishes), so it
//! is `public` and fresh for an hour: it changes only when the gateway is
//! upgraded. It is still asked on a session's URL, behind the same key,
//! isolation and `access_session` checks as every request.

use serde_json::{Value, json};

use super::era::META_SERVER_INFO;
use super::initialize::{INSTRUCTIONS, SERVER_NAME};
use super::protocol;

/// How long a discover result stays fresh, in milliseconds.
pub const DISCOVER_TTL_MS: u64 = 3_600_000;

/// The `server/discover` result.
pub fn discover() -> Value {
    json!({
        "resultType": "complete",
        "supportedVersions": protocol::ALL,
        "capabilities": capabilities(),
        "instructions": INSTRUCTIONS,
        "ttlMs": DISCOVER_TTL_MS,
        "cacheScope": "public",
        "_meta": { META_SERVER_INFO: server_info() },
    })
}

/// What the gateway offers at 2026-07-28: tools, and the resources and
/// prompts of the org's upstream servers, each list's changes announced on
/// `subscriptions/listen` (resources cannot be subscribed to).
pub fn capabilities() -> Value {
    json!({
        "tools": { "listChanged": true },
        "resources": { "subscribe": false, "listChanged": true },
        "prompts": { "listChanged": true },
    })
}

/// `Implementation` of the gateway.
pub fn server_info() -> Value {
    json!({ "name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION") })
}
