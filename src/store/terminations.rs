//! MCP sessions terminated by the client (`DELETE` on the Streamable HTTP
//! endpoint), stored so every instance of the database, and a restarted
//! one, refuses the `Mcp-Session-Id` until the client initializes again.

use super::db::Value as SqlValue;
use super::{Conn, StoreError, WriteOp};

/// Terminations stored since `since` (every instance's).
pub fn load_since(conn: &mut Conn, since: &str) -> Result<Vec<String>, StoreError> {
    conn.query_map(
        "SELECT session_id FROM mcp_terminations WHERE terminated_at >= ?1",
        crate::params![since],
        |r| r.get(0),
    )
}

/// Whether a termination of `session_id` is stored now.
pub fn is_stored(conn: &mut Conn, session_id: &str) -> Result<bool, StoreError> {
    let rows: Vec<String> = conn.query_map(
        "SELECT session_id FROM mcp_terminations WHERE session_id = ?1",
        crate::params![session_id],
        |r| r.get(0),
    )?;
    Ok(!rows.is_empty())
}

/// Stores a termination (replacing an older one of the same session).
pub fn terminate_op(session_id: &str, at: &str) -> WriteOp {
    WriteOp::Exec {
        sql: "INSERT INTO mcp_terminations (session_id, terminated_at) VALUES (?1, ?2)
              ON CONFLICT (session_id) DO UPDATE SET terminated_at = excluded.terminated_at",
        params: vec![
            SqlValue::Text(session_id.to_string()),
            SqlValue::Text(at.to_string()),
        ],
    }
}

/// Forgets a stored termination (the client started a new MCP session).
pub fn resume_op(session_id: &str) -> WriteOp {
    WriteOp::Exec {
        sql: "DELETE FROM mcp_terminations WHERE session_id = ?1",
        params: vec![SqlValue::Text(session_id.to_string())],
    }
}
