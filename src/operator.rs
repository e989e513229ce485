//! Tenant operations shared by the admin API and the CLI: input types,
//! validation and the store calls, so both surfaces behave identically.

use crate::store::Conn;
use serde::Deserialize;

use crate::auth;
use crate::ids::{now_rfc3339, validate_id};
use crate::store::StoreError;
use crate::store::tenants::{self, Agent, ApiKey, Org, Project, Session};

/// Longest label or name accepted.
const MAX_TEXT: usize = 200;

/// `POST /admin/orgs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateOrg {
    /// Org id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Plan (default `free`).
    pub plan: Option<String>,
    /// Entitlements (default none).
    pub entitlements: Option<Vec<String>>,
}

/// `POST /admin/orgs/{org}/projects`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateProject {
    /// Project id.
    pub id: String,
    /// Memory tools on (default true).
    #[serde(default = "yes")]
    pub memory_enabled: bool,
    /// Graph tools on (default false).
    #[serde(default)]
    pub graph_enabled: bool,
}

fn yes() -> bool {
    true
}

/// `POST /admin/orgs/{org}/agents`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateAgent {
    /// Agent id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Role ids.
    #[serde(default)]
    pub roles: Vec<String>,
}

/// `POST /admin/orgs/{org}/keys`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateKey {
    /// Operator label.
    pub label: String,
    /// The decision applications the key may ask over the AuthZEN API (a
    /// key of the PDP role, which opens no MCP session); empty for a
    /// daemon key.
    #[serde(default)]
    pub pdp_apps: Vec<String>,
}

/// `POST /api/sessions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenSession {
    /// Project the agent works in.
    pub project_id: String,
    /// Agent the session is for.
    pub agent_id: String,
}

fn text(field: &str, value: &str) -> Result<(), StoreError> {
    if value.trim().is_empty() || value.chars().count() > MAX_TEXT {
        return Err(StoreError::Invalid(format!(
            "`{field}` must be 1 to {MAX_TEXT} characters"
        )));
    }
    Ok(())
}

fn id(kind: &str, value: &str) -> Result<(), StoreError> {
    validate_id(kind, value).map_err(|e| StoreError::Invalid(e.to_string()))
}

/// Creates an org.
pub fn create_org(conn: &mut Conn, req: CreateOrg) -> Result<Org, StoreError> {
    id("org", &req.id)?;
    text("name", &req.name)?;
    let plan = req.plan.unwrap_or_else(|| "free".into());
    text("plan", &plan)?;
    let entitlements = req.entitlements.unwrap_or_default();
    for e in &entitlements {
        id("entitlement", e)?;
    }
    let org = Org {
        id: req.id,
        name: req.name,
        plan,
        entitlements,
        created_at: now_rfc3339(),
    };
    tenants::create_org(conn, &org)?;
    Ok(org)
}

/// Creates a project in `org_id`.
pub fn create_project(
    conn: &mut Conn,
    org_id: &str,
    req: CreateProject,
) -> Result<Project, StoreError> {
    id("project", &req.id)?;
    let p = Project {
        org_id: org_id.to_string(),
        id: req.id,
        memory_enabled: req.memory_enabled,
        graph_enabled: req.graph_enabled,
        created_at: now_rfc3339(),
    };
    tenants::create_project(conn, &p)?;
    Ok(p)
}

/// Creates an agent in `org_id`.
pub fn create_agent(conn: &mut Conn, org_id: &str, req: CreateAgent) -> Result<Agent, StoreError> {
    id("agent", &req.id)?;
    text("name", &req.name)?;
    let mut roles = req.roles;
    for r in &roles {
        id("role", r)?;
    }
    roles.sort();
    roles.dedup();
    let a = Agent {
        org_id: org_id.to_string(),
        id: req.id,
        name: req.name,
        roles,
        created_at: now_rfc3339(),
    };
    tenants::create_agent(conn, &a)?;
    Ok(a)
}

/// Mints and stores a key for `org_id`; the returned string is the only
/// time the full key exists outside the caller.
pub fn create_key(
    conn: &mut Conn,
    org_id: &str,
    req: CreateKey,
) -> Result<(ApiKey, String), StoreError> {
    text("label", &req.label)?;
    for app in &req.pdp_apps {
        if !crate::ids::valid_app_name(app) {
            return Err(StoreError::Invalid(format!(
                "`pdpApps`: `{app}` is not an application name ({})",
                crate::ids::APP_NAME_RULE
            )));
        }
    }
    let mut pdp_apps = req.pdp_apps;
    pdp_apps.sort();
    pdp_apps.dedup();
    let minted =
        auth::mint_key().map_err(|e| StoreError::Write(format!("no randomness available: {e}")))?;
    let key = ApiKey {
        id: minted.id,
        org_id: org_id.to_string(),
        label: req.label,
        created_at: now_rfc3339(),
        pdp_apps,
    };
    tenants::create_key(conn, &key, &minted.secret_hash)?;
    Ok((key, minted.key))
}

/// Creates a session for an agent in a project of `org_id`.
pub fn open_session(
    conn: &mut Conn,
    org_id: &str,
    req: OpenSession,
    key_id: Option<&str>,
) -> Result<Session, StoreError> {
    let s = Session {
        id: uuid::Uuid::new_v4().to_string(),
        org_id: org_id.to_string(),
        project_id: req.project_id,
        agent_id: req.agent_id,
        created_by_key: key_id.map(str::to_string),
        protocol_version: None,
        created_at: now_rfc3339(),
        user_id: None,
    };
    tenants::create_session(conn, &s)?;
    Ok(s)
}

/// A whole tenant in one go: org, project, agent, key and a session.
#[derive(Debug, Clone)]
pub struct Provision {
    /// The org.
    pub org: CreateOrg,
    /// Its project.
    pub project: CreateProject,
    /// Its agent.
    pub agent: CreateAgent,
    /// Label of the key.
    pub key_label: String,
}

/// What [`provision`] created.
#[derive(Debug, Clone)]
pub struct Provisioned {
    /// The key (metadata).
    pub key: ApiKey,
    /// The full bearer key, shown once.
    pub secret: String,
    /// The session, opened with that key.
    pub session: Session,
}

/// Creates a tenant with one session in one transaction (the demo tenant,
/// benchmarks): nothing is left half-made if any step fails.
pub fn provision(conn: &mut Conn, p: Provision) -> Result<Provisioned, StoreError> {
    conn.transaction(|tx| {
        let org = create_org(tx, p.org)?;
        let project = create_project(tx, &org.id, p.project)?;
        let agent = create_agent(tx, &org.id, p.agent)?;
        let (key, secret) = create_key(
            tx,
            &org.id,
            CreateKey {
                label: p.key_label,
                pdp_apps: Vec::new(),
            },
        )?;
        let session = open_session(
            tx,
            &org.id,
            OpenSession {
                project_id: project.id,
                agent_id: agent.id,
            },
            Some(&key.id),
        )?;
        Ok(Provisioned {
            key,
            secret,
            session,
        })
    })
}

/// The MCP URL of a session.
pub fn mcp_url(base_url: &str, session_id: &str) -> String {
    format!("{base_url}/api/mcp/{session_id}")
}
