//! `initialize` and `ping`. `initialize` negotiates the protocol version
//! (the client's when supported, else the newest) and remembers it for the
//! session, so a client that omits `MCP-Protocol-Version` afterwards still
//! gets the result shapes of its version.

use serde_json::{Value, json};

use super::call::Call;
use super::protocol;
use crate::store::WriteOp;

/// Server name in `serverInfo`.
pub const SERVER_NAME: &str = "cedargate";

/// `instructions` of `initialize` and `server/discover`.
pub const INSTRUCTIONS: &str = "Tools are authorized per call by Cedar policies; a denied call answers -32003 with the decision id.";

/// `initialize`: negotiates and records the session's version.
pub fn initialize(call: &Call, params: &Value) -> Value {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let version = protocol::negotiate(requested);
    let op = WriteOp::SessionProtocol {
        session_id: call.view.tenant.session.id.clone(),
        version: version.to_string(),
    };
    call.defer([op]);
    call.gw
        .set_negotiated(&call.view.tenant.session.id, version);
    json!({
        "protocolVersion": version,
        "capabilities": capabilities(),
        "serverInfo": { "name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION") },
        "instructions": INSTRUCTIONS,
    })
}

/// What the gateway offers before 2026-07-28: tools, and the resources
/// and prompts of the org's upstream servers (listed and read; no
/// subscriptions, and no list-change notifications on these transports).
pub fn capabilities() -> Value {
    json!({
        "tools": { "listChanged": false },
        "resources": { "subscribe": false, "listChanged": false },
        "prompts": { "listChanged": false },
    })
}

/// `ping`: an empty result.
pub fn ping() -> Value {
    json!({})
}
