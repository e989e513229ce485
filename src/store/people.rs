//! Sessions of people signed in through an identity provider.
//!
//! A person connects to `/mcp/{org}/{project}` with an access token and no
//! session id: the gateway finds their session in that project, or opens
//! one. One session per person and project (a unique index), so the
//! person's memory, graph and trail stay together across connections and
//! instances. Its agent is the org's [`PEOPLE_AGENT`], created with the
//! first such session: it stands for whatever MCP client the person uses
//! (the client itself is `context.client` in every decision). Its id has a
//! `:`, which the admin API refuses in agent ids, so it never collides with
//! an agent an operator made.

use super::StoreError;
use super::db::Conn;
use crate::ids::now_rfc3339;
use crate::params;

/// Id of the agent every person's session has.
pub const PEOPLE_AGENT: &str = "cedargate:people";
/// Its name.
pub const PEOPLE_AGENT_NAME: &str = "MCP clients of people signed in with the identity provider";

/// The id of `user_id`'s session in the project, if one was opened.
pub fn find_session(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
    user_id: &str,
) -> Result<Option<String>, StoreError> {
    conn.query_opt(
        "SELECT id FROM sessions WHERE org_id = ?1 AND project_id = ?2 AND user_id = ?3",
        params![org_id, project_id, user_id],
        |r| r.get(0),
    )
}

/// Opens `user_id`'s session in the project (or finds the one a racing
/// first connection opened); the project must exist.
pub fn open_session(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
    user_id: &str,
) -> Result<String, StoreError> {
    conn.transaction(|tx| {
        if super::tenants::get_project(tx, org_id, project_id)?.is_none() {
            return Err(StoreError::NotFound(format!(
                "project `{project_id}` not found in org `{org_id}`"
            )));
        }
        let now = now_rfc3339();
        tx.execute(
            "INSERT INTO agents (org_id, id, name, roles, created_at) VALUES (?1, ?2, ?3, '[]', ?4)
             ON CONFLICT DO NOTHING",
            params![org_id, PEOPLE_AGENT, PEOPLE_AGENT_NAME, now],
        )?;
        let id = uuid::Uuid::new_v4().to_string();
        tx.execute(
            "INSERT INTO sessions (id, org_id, project_id, agent_id, created_by_key, protocol_version, created_at, user_id)
             VALUES (?1, ?2, ?3, ?4, NULL, NULL, ?5, ?6) ON CONFLICT DO NOTHING",
            params![id, org_id, project_id, PEOPLE_AGENT, now, user_id],
        )?;
        find_session(tx, org_id, project_id, user_id)?
            .ok_or_else(|| StoreError::Write("the person's session was not stored".into()))
    })
}

/// The person a session acts for (`None` for an agent's session); `Err`
/// only when the store fails, `Ok(None)` also for an unknown session.
pub fn session_user(conn: &mut Conn, session_id: &str) -> Result<Option<String>, StoreError> {
    let row: Option<Option<String>> = conn.query_opt(
        "SELECT user_id FROM sessions WHERE id = ?1",
        params![session_id],
        |r| r.get(0),
    )?;
    Ok(row.flatten())
}
