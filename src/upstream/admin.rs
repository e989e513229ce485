//! Operator API for upstream MCP servers (nested under `/admin`, behind the
//! admin token):
//!
//! - `POST /orgs/{org}/mcp-servers {name, transport, url, auth?,
//!   timeoutMs?, prefix?, approveNewTools?}` initializes a session with
//!   the upstream and lists its tools, then stores the registration with
//!   its health (an unreachable upstream is stored as `unreachable`,
//!   without tools; one answering something that is not MCP is refused
//!   and nothing is stored; one whose tool names collide with another tool
//!   of the org is refused with 409, nothing stored);
//! - `GET /orgs/{org}/mcp-servers` (health and tool counts),
//!   `GET /orgs/{org}/mcp-servers/{id}` (with the pinned definitions),
//!   `DELETE /orgs/{org}/mcp-servers/{id}`;
//! - `POST /orgs/{org}/mcp-servers/{id}/refresh` lists the tools again: a
//!   definition that changed since it was approved is held (not offered)
//!   until `POST /orgs/{org}/mcp-servers/{id}/approve {"tools": [...]}`
//!   (the upstream's or the gateway's names; no `tools`: every held one)
//!   approves it; a tool whose name now collides with another tool of
//!   the org is hidden and listed in `collisions`.
//!
//! Every change invalidates the org's tool set on every instance, so it
//! shows on the next request.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::registry::{self, Listing, ServerRow, ServerTarget};
use crate::a2a::card;
use crate::a2a::registry::PeerAuth;
use crate::cluster::coherence;
use crate::error::AppError;
use crate::gateway::Gateway;

/// The routes (merged into `/admin`, which adds the token check).
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/orgs/{org}/mcp-servers", get(list).post(register))
        .route("/orgs/{org}/mcp-servers/{id}", get(get_one).delete(remove))
        .route("/orgs/{org}/mcp-servers/{id}/refresh", post(refresh))
        .route("/orgs/{org}/mcp-servers/{id}/approve", post(approve))
}

/// `POST /admin/orgs/{org}/mcp-servers/{id}/approve`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Approve {
    /// Tools whose held definitions to approve (default: every held one).
    pub tools: Option<Vec<String>>,
}

/// `POST /admin/orgs/{org}/mcp-servers`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegisterServer {
    /// Name; its slug is the Cedar `McpServer` id and the default prefix.
    pub name: String,
    /// `streamable-http` or `sse`.
    pub transport: String,
    /// The MCP endpoint (e.g. `https://host/mcp`); for `sse`, the event
    /// stream (e.g. `https://host/sse`).
    pub url: String,
    /// Where the bearer credential for the upstream is found.
    pub auth: Option<PeerAuth>,
    /// Budget of one call, in milliseconds (default 30,000).
    pub timeout_ms: Option<u64>,
    /// Tool name prefix (default: the slug).
    pub prefix: Option<String>,
    /// Whether tools first seen after registration are offered at once
    /// (default true).
    pub approve_new_tools: Option<bool>,
}

/// Checks the registration; returns the endpoint, slug and prefix.
fn check_input(req: &RegisterServer) -> Result<(reqwest::Url, String, String), AppError> {
    if req.transport != registry::STREAMABLE_HTTP && req.transport != registry::SSE {
        return Err(AppError::BadRequest(format!(
            "`transport` must be `{}` or `{}`, not `{}`",
            registry::STREAMABLE_HTTP,
            registry::SSE,
            req.transport
        )));
    }
    let url = reqwest::Url::parse(req.url.trim())
        .map_err(|e| AppError::BadRequest(format!("`url` is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(AppError::BadRequest(
            "`url` must be an http(s) URL with a host".into(),
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(AppError::BadRequest(
            "`url` must not carry credentials; use `auth`".into(),
        ));
    }
    if let Some(auth) = &req.auth {
        auth.validate()
            .map_err(|e| AppError::BadRequest(e.to_string()))?;
    }
    if let Some(ms) = req.timeout_ms
        && (ms == 0 || ms > super::MAX_TIMEOUT_MS)
    {
        return Err(AppError::BadRequest(format!(
            "`timeoutMs` must be 1 to {}",
            super::MAX_TIMEOUT_MS
        )));
    }
    let slug = card::slugify(&req.name);
    if slug.is_empty() || slug.len() > card::MAX_SLUG || req.name.chars().count() > 200 {
        return Err(AppError::BadRequest(format!(
            "`name` must have letters or digits and make a namespace of at most {} characters",
            card::MAX_SLUG
        )));
    }
    let prefix = match &req.prefix {
        None => slug.clone(),
        Some(p) if p.is_empty() || (card::slugify(p) == *p && p.len() <= card::MAX_SLUG) => {
            p.clone()
        }
        Some(p) => {
            return Err(AppError::BadRequest(format!(
                "`prefix` must be empty or lowercase letters, digits and `_`, not `{p}`"
            )));
        }
    };
    Ok((url, slug, prefix))
}

/// The call target of a row (the URL was checked when it was stored).
fn target(row: &ServerRow) -> Result<ServerTarget, AppError> {
    let endpoint = reqwest::Url::parse(&row.url).map_err(|e| {
        tracing::error!(upstream = %row.id, error = %e, "stored upstream URL does not parse");
        AppError::Internal
    })?;
    Ok(ServerTarget {
        id: row.id.clone(),
        org_id: row.org_id.clone(),
        slug: row.slug.clone(),
        url: row.url.clone(),
        endpoint,
        transport: row.transport.clone(),
        auth: row.auth.clone(),
        timeout: Duration::from_millis(row.timeout_ms.max(1)),
    })
}

/// Applies a listing to a row in memory, merging the listed definitions
/// with the row's pins; returns the listing to store (with the merged
/// pins) and the definitions that became held.
fn apply(row: &mut ServerRow, listing: Listing) -> (Listing, Vec<registry::HeldChange>) {
    let mut changes = Vec::new();
    let listing = match listing {
        Listing::Listed {
            tools,
            protocol_version,
        } => {
            let (merged, held) = registry::merge(&row.tools, tools, row.approve_new_tools);
            changes = held;
            Listing::Listed {
                tools: merged,
                protocol_version,
            }
        }
        other => other,
    };
    match &listing {
        Listing::Listed {
            tools,
            protocol_version,
        } => {
            row.tools = tools.clone();
            row.protocol_version = Some(protocol_version.clone());
            row.health = registry::health::HEALTHY.into();
            row.last_error = None;
        }
        Listing::Unreachable(e) => {
            row.health = registry::health::UNREACHABLE.into();
            row.last_error = Some(e.clone());
        }
        Listing::Invalid(e) => {
            row.health = registry::health::INVALID.into();
            row.last_error = Some(e.clone());
        }
    }
    row.checked_at = crate::ids::now_rfc3339();
    for c in &changes {
        tracing::warn!(
            upstream = %row.slug, org = %row.org_id, tool = %c.tool,
            old_hash = %c.old_hash, new_hash = %c.new_hash,
            "upstream tool definition held until approved"
        );
    }
    (listing, changes)
}

/// Every tool name of the org outside the server `except` (gateway name →
/// what has it): built-in tools, A2A tools and their aliases, and the
/// other registered servers' tools (a colliding one of theirs excepted).
async fn taken_names(
    gw: &Gateway,
    org: &str,
    except: &str,
) -> Result<HashMap<String, String>, AppError> {
    let mut taken = HashMap::new();
    for spec in gw.catalog.all() {
        taken.insert(spec.name.clone(), "a built-in tool".to_string());
    }
    let peers = gw.a2a.org(org).await?;
    for tool in peers.tools.iter() {
        let owner = format!("a tool of A2A agent `{}`", tool.target.slug);
        taken.insert(tool.spec.name.clone(), owner);
    }
    for alias in peers.aliases.keys() {
        taken.insert(alias.clone(), "an A2A tool alias".to_string());
    }
    let o = org.to_string();
    let rows = gw.store.read(move |c| registry::list(c, &o)).await?;
    for row in rows.iter().filter(|r| r.id != except) {
        for tool in row.tools.iter().filter(|t| t.collides_with.is_none()) {
            let owner = format!("a tool of MCP server `{}`", row.slug);
            taken.insert(row.tool_name(&tool.name), owner);
        }
    }
    Ok(taken)
}

/// The API view of collisions.
fn collisions_json(collisions: &[registry::Collision]) -> Value {
    collisions
        .iter()
        .map(|c| json!({ "tool": c.tool, "name": c.name, "collidesWith": c.with }))
        .collect()
}

/// The API view of held changes.
fn changes_json(changes: &[registry::HeldChange]) -> Value {
    changes
        .iter()
        .map(|c| json!({ "tool": c.tool, "oldHash": c.old_hash, "newHash": c.new_hash }))
        .collect()
}

async fn register(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
    payload: Result<Json<RegisterServer>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    let Json(req) = payload?;
    let (url, slug, prefix) = check_input(&req)?;
    gw.store.require_org(&org).await?;
    let now = crate::ids::now_rfc3339();
    let mut row = ServerRow {
        id: uuid::Uuid::now_v7().to_string(),
        org_id: org.clone(),
        slug,
        name: req.name.trim().to_string(),
        transport: req.transport.clone(),
        url: url.to_string(),
        prefix,
        auth: req.auth.clone(),
        timeout_ms: req.timeout_ms.unwrap_or(super::DEFAULT_TIMEOUT_MS),
        approve_new_tools: req.approve_new_tools.unwrap_or(true),
        tools: Vec::new(),
        protocol_version: None,
        health: registry::health::UNREACHABLE.into(),
        last_error: None,
        checked_at: now.clone(),
        created_at: now,
    };
    let listing = gw.upstreams.list_tools(&target(&row)?).await;
    if let Listing::Invalid(e) = &listing {
        return Err(AppError::BadRequest(format!(
            "the upstream is not a usable MCP server: {e}"
        )));
    }
    let (_, changes) = apply(&mut row, listing);
    let taken = taken_names(&gw, &org, &row.id).await?;
    let collisions = registry::mark_collisions(&mut row, &taken);
    if let Some(first) = collisions.first() {
        return Err(AppError::Conflict(format!(
            "{} of the server's tool names already exist in org `{org}` (`{}` is {}); \
             register it with another `prefix`",
            collisions.len(),
            first.name,
            first.with
        )));
    }
    let stored = row.clone();
    gw.store.read(move |c| registry::insert(c, &stored)).await?;
    coherence::changed(&gw, &org).await;
    let mut api = row.to_api(true);
    api["heldChanges"] = changes_json(&changes);
    Ok((StatusCode::CREATED, Json(api)))
}

async fn list(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    gw.store.require_org(&org).await?;
    let rows = gw.store.read(move |c| registry::list(c, &org)).await?;
    let servers: Vec<Value> = rows.iter().map(|r| r.to_api(false)).collect();
    Ok(Json(json!({ "servers": servers })))
}

async fn find(gw: &Gateway, org: &str, id: &str) -> Result<ServerRow, AppError> {
    let (o, i) = (org.to_string(), id.to_string());
    gw.store
        .read(move |c| registry::get(c, &o, &i))
        .await?
        .ok_or_else(|| AppError::NotFound(format!("org `{org}` has no MCP server `{id}`")))
}

async fn get_one(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, AppError> {
    Ok(Json(find(&gw, &org, &id).await?.to_api(true)))
}

async fn remove(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<StatusCode, AppError> {
    let (o, i) = (org.clone(), id.clone());
    gw.store.read(move |c| registry::delete(c, &o, &i)).await?;
    gw.upstreams.forget(&id);
    coherence::changed(&gw, &org).await;
    Ok(StatusCode::NO_CONTENT)
}

async fn refresh(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, AppError> {
    let mut row = find(&gw, &org, &id).await?;
    let listing = gw.upstreams.list_tools(&target(&row)?).await;
    let (mut recorded, changes) = apply(&mut row, listing);
    let taken = taken_names(&gw, &org, &row.id).await?;
    let collisions = registry::mark_collisions(&mut row, &taken);
    if let Listing::Listed { tools, .. } = &mut recorded {
        tools.clone_from(&row.tools);
    }
    for c in &collisions {
        tracing::warn!(
            upstream = %row.slug, org = %org, tool = %c.name, with = %c.with,
            "upstream tool name collides; tool hidden"
        );
    }
    let i = id.clone();
    gw.store
        .read(move |c| registry::record_listing(c, &i, &recorded))
        .await?;
    coherence::changed(&gw, &org).await;
    let mut api = row.to_api(true);
    api["heldChanges"] = changes_json(&changes);
    api["collisions"] = collisions_json(&collisions);
    Ok(Json(api))
}

async fn approve(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
    payload: Result<Json<Approve>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    let Json(req) = payload?;
    let mut row = find(&gw, &org, &id).await?;
    let approved = registry::approve(&mut row, req.tools.as_deref()).map_err(|unknown| {
        AppError::BadRequest(format!(
            "no held definition for {}",
            unknown
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    let (i, tools) = (id.clone(), row.tools.clone());
    gw.store
        .read(move |c| registry::set_tools(c, &i, &tools))
        .await?;
    tracing::info!(upstream = %row.slug, org = %org, approved, "upstream tool definitions approved");
    coherence::changed(&gw, &org).await;
    let mut api = row.to_api(true);
    api["approved"] = approved.into();
    Ok(Json(api))
}
