//! MCP sessions a client terminated with `DELETE`, remembered by this
//! instance (loaded from the store at start, kept current by the cluster's
//! notifications), so a request still carrying the terminated
//! `Mcp-Session-Id` is refused until the client initializes again.
//!
//! **Architecture Invariant:** this is state the gateway holds; the
//! Streamable HTTP transport reads and changes it, the store keeps it.

use std::time::Duration;

use moka::sync::Cache;

/// Most terminated MCP sessions remembered.
const TERMINATED_CAPACITY: u64 = 100_000;

/// How long a termination is remembered; a client still sending the id
/// after that is served again (the path is authoritative anyway).
const TERMINATED_TTL: Duration = Duration::from_secs(24 * 3600);

/// MCP sessions terminated by `DELETE` and not initialized again.
#[derive(Debug)]
pub struct Terminated {
    sessions: Cache<String, ()>,
}

impl Default for Terminated {
    fn default() -> Self {
        Terminated {
            sessions: Cache::builder()
                .max_capacity(TERMINATED_CAPACITY)
                .time_to_live(TERMINATED_TTL)
                .build(),
        }
    }
}

impl Terminated {
    /// Whether the MCP session `session_id` is terminated.
    pub fn contains(&self, session_id: &str) -> bool {
        self.sessions.contains_key(session_id)
    }

    /// Remembers a termination (made here or on another instance).
    pub fn remember(&self, session_id: &str) {
        self.sessions.insert(session_id.to_string(), ());
    }

    /// Forgets one: a new MCP session started.
    pub fn forget(&self, session_id: &str) {
        self.sessions.invalidate(session_id);
    }
}

/// The oldest termination still remembered (now minus the TTL).
pub fn remembered_since() -> String {
    crate::ids::rfc3339(time::OffsetDateTime::now_utc() - TERMINATED_TTL)
}
