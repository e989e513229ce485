//! What a signed-in viewer may do: the role a shared token or the
//! identity provider's groups give (`auth`, `oidc`).

use serde::Serialize;

/// What a signed-in viewer may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything, changes included.
    Admin,
    /// Reading, replays and what-ifs; never a change.
    Auditor,
}
