//! Tenants: orgs, projects, agents (with roles), daemon keys and sessions.
//! Plain synchronous functions over a connection; callers choose the thread.

use super::db::{Conn, Row, is_unique_violation};
use crate::params;
use serde::Serialize;

use super::StoreError;

/// An organization (tenant).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Org {
    /// Org id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Plan name.
    pub plan: String,
    /// Plan features, e.g. `kg_enabled`.
    pub entitlements: Vec<String>,
    /// Creation time.
    pub created_at: String,
}

/// A project inside an org.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    /// Owning org.
    pub org_id: String,
    /// Project id (unique within the org).
    pub id: String,
    /// Memory tools on.
    pub memory_enabled: bool,
    /// Graph tools on (with memory).
    pub graph_enabled: bool,
    /// Creation time.
    pub created_at: String,
}

/// An agent inside an org.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Agent {
    /// Owning org.
    pub org_id: String,
    /// Agent id (unique within the org).
    pub id: String,
    /// Display name.
    pub name: String,
    /// Role ids (Cedar `Role` parents).
    pub roles: Vec<String>,
    /// Creation time.
    pub created_at: String,
}

/// A daemon key, without its secret.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApiKey {
    /// Key id (the public part of the key).
    pub id: String,
    /// Owning org.
    pub org_id: String,
    /// Operator label.
    pub label: String,
    /// Creation time.
    pub created_at: String,
    /// The decision applications a key of the PDP role may ask over the
    /// AuthZEN API; empty for a daemon key (MCP sessions), which asks none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pdp_apps: Vec<String>,
}

/// An MCP session.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// Session id (UUID).
    pub id: String,
    /// Owning org.
    pub org_id: String,
    /// Project the agent works in.
    pub project_id: String,
    /// Agent the session is for.
    pub agent_id: String,
    /// Key that opened it, if any.
    pub created_by_key: Option<String>,
    /// Protocol version negotiated by `initialize`, if any.
    pub protocol_version: Option<String>,
    /// Creation time.
    pub created_at: String,
    /// The person (`<issuer>|<subject>`) a session opened at
    /// `/mcp/{org}/{project}` acts for; `None` for an agent's session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
}

/// A session with everything a decision inside it needs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionTenant {
    /// The session.
    pub session: Session,
    /// Its org.
    pub org: Org,
    /// Its project.
    pub project: Project,
    /// Its agent.
    pub agent: Agent,
}

fn json_list(text: &str) -> Result<Vec<String>, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("list column: {e}")))
}

fn to_json_list(list: &[String]) -> String {
    serde_json::Value::from(list.to_vec()).to_string()
}

fn org_row(r: &Row) -> Result<(String, String, String, String, String), StoreError> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn org_from(t: (String, String, String, String, String)) -> Result<Org, StoreError> {
    Ok(Org {
        id: t.0,
        name: t.1,
        plan: t.2,
        entitlements: json_list(&t.3)?,
        created_at: t.4,
    })
}

/// Creates an org.
pub fn create_org(conn: &mut Conn, org: &Org) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO orgs (id, name, plan, entitlements, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            org.id,
            org.name,
            org.plan,
            to_json_list(&org.entitlements),
            org.created_at
        ],
    )
    .map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::Conflict(format!("org `{}` already exists", org.id))
        } else {
            e
        }
    })?;
    Ok(())
}

/// One org.
pub fn get_org(conn: &mut Conn, id: &str) -> Result<Option<Org>, StoreError> {
    conn.query_opt(
        "SELECT id, name, plan, entitlements, created_at FROM orgs WHERE id = ?1",
        params![id],
        org_row,
    )?
    .map(org_from)
    .transpose()
}

/// Every org, by id.
pub fn list_orgs(conn: &mut Conn) -> Result<Vec<Org>, StoreError> {
    let rows = conn.query_map(
        "SELECT id, name, plan, entitlements, created_at FROM orgs ORDER BY id",
        params![],
        org_row,
    )?;
    rows.into_iter().map(org_from).collect()
}

/// Deletes an org and (by cascade) its projects, agents, keys, sessions and
/// observations. The decision trail is kept.
pub fn delete_org(conn: &mut Conn, id: &str) -> Result<(), StoreError> {
    let n = conn.execute("DELETE FROM orgs WHERE id = ?1", params![id])?;
    if n == 0 {
        return Err(StoreError::NotFound(format!("org `{id}` not found")));
    }
    Ok(())
}

/// `NotFound` unless the org exists.
pub fn require_org(conn: &mut Conn, org_id: &str) -> Result<(), StoreError> {
    if get_org(conn, org_id)?.is_none() {
        return Err(StoreError::NotFound(format!("org `{org_id}` not found")));
    }
    Ok(())
}

/// Creates a project.
pub fn create_project(conn: &mut Conn, p: &Project) -> Result<(), StoreError> {
    require_org(conn, &p.org_id)?;
    conn.execute(
        "INSERT INTO projects (org_id, id, memory_enabled, graph_enabled, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![p.org_id, p.id, p.memory_enabled, p.graph_enabled, p.created_at],
    )
    .map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::Conflict(format!("project `{}` already exists in org `{}`", p.id, p.org_id))
        } else {
            e
        }
    })?;
    Ok(())
}

fn project_row(r: &Row) -> Result<Project, StoreError> {
    Ok(Project {
        org_id: r.get(0)?,
        id: r.get(1)?,
        memory_enabled: r.get(2)?,
        graph_enabled: r.get(3)?,
        created_at: r.get(4)?,
    })
}

/// One project.
pub fn get_project(conn: &mut Conn, org_id: &str, id: &str) -> Result<Option<Project>, StoreError> {
    conn
        .query_opt(
            "SELECT org_id, id, memory_enabled, graph_enabled, created_at FROM projects WHERE org_id = ?1 AND id = ?2",
            params![org_id, id],
            project_row,
        )
}

/// Projects of an org.
pub fn list_projects(conn: &mut Conn, org_id: &str) -> Result<Vec<Project>, StoreError> {
    require_org(conn, org_id)?;

    conn.query_map("SELECT org_id, id, memory_enabled, graph_enabled, created_at FROM projects WHERE org_id = ?1 ORDER BY id", params![org_id], project_row)
}

/// Deletes a project (and its sessions and observations).
pub fn delete_project(conn: &mut Conn, org_id: &str, id: &str) -> Result<(), StoreError> {
    let n = conn.execute(
        "DELETE FROM projects WHERE org_id = ?1 AND id = ?2",
        params![org_id, id],
    )?;
    if n == 0 {
        return Err(StoreError::NotFound(format!(
            "project `{id}` not found in org `{org_id}`"
        )));
    }
    Ok(())
}

/// Creates an agent.
pub fn create_agent(conn: &mut Conn, a: &Agent) -> Result<(), StoreError> {
    require_org(conn, &a.org_id)?;
    conn.execute(
        "INSERT INTO agents (org_id, id, name, roles, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![a.org_id, a.id, a.name, to_json_list(&a.roles), a.created_at],
    )
    .map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::Conflict(format!(
                "agent `{}` already exists in org `{}`",
                a.id, a.org_id
            ))
        } else {
            e
        }
    })?;
    Ok(())
}

fn agent_row(r: &Row) -> Result<(String, String, String, String, String), StoreError> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn agent_from(t: (String, String, String, String, String)) -> Result<Agent, StoreError> {
    Ok(Agent {
        org_id: t.0,
        id: t.1,
        name: t.2,
        roles: json_list(&t.3)?,
        created_at: t.4,
    })
}

/// One agent.
pub fn get_agent(conn: &mut Conn, org_id: &str, id: &str) -> Result<Option<Agent>, StoreError> {
    conn.query_opt(
        "SELECT org_id, id, name, roles, created_at FROM agents WHERE org_id = ?1 AND id = ?2",
        params![org_id, id],
        agent_row,
    )?
    .map(agent_from)
    .transpose()
}

/// Agents of an org.
pub fn list_agents(conn: &mut Conn, org_id: &str) -> Result<Vec<Agent>, StoreError> {
    require_org(conn, org_id)?;

    let rows = conn.query_map(
        "SELECT org_id, id, name, roles, created_at FROM agents WHERE org_id = ?1 ORDER BY id",
        params![org_id],
        agent_row,
    )?;
    rows.into_iter().map(agent_from).collect()
}

/// Deletes an agent (and its sessions).
pub fn delete_agent(conn: &mut Conn, org_id: &str, id: &str) -> Result<(), StoreError> {
    let n = conn.execute(
        "DELETE FROM agents WHERE org_id = ?1 AND id = ?2",
        params![org_id, id],
    )?;
    if n == 0 {
        return Err(StoreError::NotFound(format!(
            "agent `{id}` not found in org `{org_id}`"
        )));
    }
    Ok(())
}

/// Stores a key (only the hash of its secret).
pub fn create_key(conn: &mut Conn, key: &ApiKey, secret_hash: &[u8]) -> Result<(), StoreError> {
    require_org(conn, &key.org_id)?;
    conn.execute(
        "INSERT INTO api_keys (id, org_id, label, secret_hash, created_at, pdp_apps) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![key.id, key.org_id, key.label, secret_hash, key.created_at, to_json_list(&key.pdp_apps)],
    )?;
    Ok(())
}

/// A key and its secret hash, by key id.
pub fn find_key(conn: &mut Conn, id: &str) -> Result<Option<(ApiKey, Vec<u8>)>, StoreError> {
    let row = conn.query_opt(
        "SELECT id, org_id, label, created_at, pdp_apps, secret_hash FROM api_keys WHERE id = ?1",
        params![id],
        |r| Ok((key_row(r)?, r.get::<Vec<u8>>(5)?)),
    )?;
    row.map(|(key, hash)| Ok((key_from(key)?, hash)))
        .transpose()
}

/// A key's columns: id, org, label, creation time, PDP applications.
type KeyRow = (String, String, String, String, String);

fn key_row(r: &Row) -> Result<KeyRow, StoreError> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn key_from(t: KeyRow) -> Result<ApiKey, StoreError> {
    Ok(ApiKey {
        id: t.0,
        org_id: t.1,
        label: t.2,
        created_at: t.3,
        pdp_apps: json_list(&t.4)?,
    })
}

/// Keys of an org (no secrets).
pub fn list_keys(conn: &mut Conn, org_id: &str) -> Result<Vec<ApiKey>, StoreError> {
    require_org(conn, org_id)?;
    let rows = conn.query_map(
        "SELECT id, org_id, label, created_at, pdp_apps FROM api_keys WHERE org_id = ?1 ORDER BY created_at, id",
        params![org_id],
        key_row,
    )?;
    rows.into_iter().map(key_from).collect()
}

/// Revokes a key.
pub fn delete_key(conn: &mut Conn, org_id: &str, id: &str) -> Result<(), StoreError> {
    let n = conn.execute(
        "DELETE FROM api_keys WHERE org_id = ?1 AND id = ?2",
        params![org_id, id],
    )?;
    if n == 0 {
        return Err(StoreError::NotFound(format!(
            "key `{id}` not found in org `{org_id}`"
        )));
    }
    Ok(())
}

/// Creates a session; the project and agent must exist in the org.
pub fn create_session(conn: &mut Conn, s: &Session) -> Result<(), StoreError> {
    if get_project(conn, &s.org_id, &s.project_id)?.is_none() {
        return Err(StoreError::NotFound(format!(
            "project `{}` not found in org `{}`",
            s.project_id, s.org_id
        )));
    }
    if get_agent(conn, &s.org_id, &s.agent_id)?.is_none() {
        return Err(StoreError::NotFound(format!(
            "agent `{}` not found in org `{}`",
            s.agent_id, s.org_id
        )));
    }
    conn.execute(
        "INSERT INTO sessions (id, org_id, project_id, agent_id, created_by_key, protocol_version, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![s.id, s.org_id, s.project_id, s.agent_id, s.created_by_key, s.protocol_version, s.created_at],
    )?;
    Ok(())
}

/// Sessions of an org, newest first.
pub fn list_sessions(conn: &mut Conn, org_id: &str) -> Result<Vec<Session>, StoreError> {
    require_org(conn, org_id)?;

    conn.query_map(
        "SELECT id, org_id, project_id, agent_id, created_by_key, protocol_version, created_at, user_id
         FROM sessions WHERE org_id = ?1 ORDER BY created_at DESC, id",
        params![org_id],
        session_row,
    )
}

/// Deletes a session.
pub fn delete_session(conn: &mut Conn, org_id: &str, id: &str) -> Result<(), StoreError> {
    let n = conn.execute(
        "DELETE FROM sessions WHERE org_id = ?1 AND id = ?2",
        params![org_id, id],
    )?;
    if n == 0 {
        return Err(StoreError::NotFound(format!(
            "session `{id}` not found in org `{org_id}`"
        )));
    }
    Ok(())
}

fn session_row(r: &Row) -> Result<Session, StoreError> {
    Ok(Session {
        id: r.get(0)?,
        org_id: r.get(1)?,
        project_id: r.get(2)?,
        agent_id: r.get(3)?,
        created_by_key: r.get(4)?,
        protocol_version: r.get(5)?,
        created_at: r.get(6)?,
        user_id: r.get(7)?,
    })
}

/// A session with its org, project and agent (one query).
pub fn load_session_tenant(
    conn: &mut Conn,
    session_id: &str,
) -> Result<Option<SessionTenant>, StoreError> {
    let row = conn
        .query_opt(
            "SELECT s.id, s.org_id, s.project_id, s.agent_id, s.created_by_key, s.protocol_version, s.created_at,
                    s.user_id,
                    o.name, o.plan, o.entitlements, o.created_at,
                    p.memory_enabled, p.graph_enabled, p.created_at,
                    a.name, a.roles, a.created_at
             FROM sessions s
             JOIN orgs o ON o.id = s.org_id
             JOIN projects p ON p.org_id = s.org_id AND p.id = s.project_id
             JOIN agents a ON a.org_id = s.org_id AND a.id = s.agent_id
             WHERE s.id = ?1",
            params![session_id], |r| {
            let session = session_row(r)?;
            let org = (session.org_id.clone(), r.get(8)?, r.get(9)?, r.get::<String>(10)?, r.get(11)?);
            let project = Project {
                org_id: session.org_id.clone(),
                id: session.project_id.clone(),
                memory_enabled: r.get(12)?,
                graph_enabled: r.get(13)?,
                created_at: r.get(14)?,
            };
            let agent = (
                session.org_id.clone(),
                session.agent_id.clone(),
                r.get(15)?,
                r.get::<String>(16)?,
                r.get(17)?,
            );
            Ok((session, org, project, agent))
        })?;
    match row {
        None => Ok(None),
        Some((session, org, project, agent)) => Ok(Some(SessionTenant {
            session,
            org: org_from(org)?,
            project,
            agent: agent_from(agent)?,
        })),
    }
}
