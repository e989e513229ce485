//! Operator API for upstream MCP servers (nested under `/admin`, behind the
//! admin token):
//!
//! - `POST /orgs/{org}/mcp-servers {name, transport, url, auth?,
//!   timeoutMs?, prefix?, approveNewTools?}` (`auth` a bearer token's
//!   source or an OAuth client, `credentials.rs`) initializes a session with
//!   the upstream and lists its tools, then stores the registration with
//!   its health (an unreachable upstream is stored as `unreachable`,
//!   without tools; one answering something that is not MCP is refused
//!   and nothing is stored; one whose tool names collide with another tool
//!   of the org is refused with 409, nothing stored);
//! - `GET /orgs/{org}/mcp-servers` (health and tool counts),
//!   `GET /orgs/{org}/mcp-servers/{id}` (with the pinned definitions),
//!   `DELETE /orgs/{org}/mcp-servers/{id}`;
//! - `POST /orgs/{org}/mcp-servers/{id}/refresh` lists the tools again: a
//!   definition that changed since it was approved, or a tool new since the
//!   first listing, is held (not offered) until `POST
//!   /orgs/{org}/mcp-servers/{id}/approve {"heldHashes": {tool: hash}}`
//!   approves the held definition of each named tool (the upstream's or
//!   the gateway's name) whose hash it names: an approval names the hash,
//!   never just the tool (400 without one), and a tool holding another
//!   definition by then fails it with 409, nothing approved; a tool whose
//!   name now collides with another tool of the org is hidden and listed
//!   in `collisions`.
//!
//! Every change invalidates the org's tool set on every instance, so it
//! shows on the next request.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::approval::{self, Approval};
use super::credentials::UpstreamAuth;
use super::descriptor;
use super::own_address;
use super::refresh::{self, apply, taken_names, target};
use super::registry::{self, Listing, ServerRow};
use crate::a2a::card;
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
    /// Accepted for older clients: each tool named here must also be in
    /// `heldHashes` (a name alone approves nothing).
    pub tools: Option<Vec<String>>,
    /// Tool name → the held hash reviewed (required, at least one): what
    /// is approved. A tool holding another definition now fails the
    /// approval with 409 (nothing approved).
    #[serde(default)]
    pub held_hashes: BTreeMap<String, String>,
}

impl Approve {
    /// The reviewed hashes, or why the request approves nothing.
    fn reviewed(&self) -> Result<&BTreeMap<String, String>, AppError> {
        let unhashed: Vec<&String> = self
            .tools
            .iter()
            .flatten()
            .filter(|t| !self.held_hashes.contains_key(*t))
            .collect();
        if self.held_hashes.is_empty() || !unhashed.is_empty() {
            let named = unhashed
                .iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(", ");
            let which = if named.is_empty() {
                String::new()
            } else {
                format!(" (no hash for {named})")
            };
            return Err(AppError::BadRequest(format!(
                "an approval names the held definition's hash of each tool it approves: \
                 `heldHashes` {{\"<tool>\": \"<held hash from GET …/{{id}}>\"}}{which}"
            )));
        }
        Ok(&self.held_hashes)
    }
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
    /// stream (e.g. `https://host/sse`). Required.
    pub url: Option<String>,
    /// Never accepted: what a `stdio` server runs is declared only in the
    /// config file. Read only to refuse it with a clear answer.
    pub command: Option<Value>,
    /// Refused like `command`.
    pub args: Option<Value>,
    /// Refused like `command`.
    pub env: Option<Value>,
    /// The upstream's credential: a bearer token's source
    /// (`{"type": "bearer", "secretEnv" | "secretFile"}`) or the gateway's
    /// OAuth client (`{"type": "oauth-client-credentials", "issuer",
    /// "clientId", "secretEnv", "scope"?, "resource"}`).
    pub auth: Option<UpstreamAuth>,
    /// Budget of one call, in milliseconds (default 30,000).
    pub timeout_ms: Option<u64>,
    /// Tool name prefix (default: the slug).
    pub prefix: Option<String>,
    /// Unset (the default): the first listing is approved, tools first
    /// seen later are held until approved. `true`: those are offered at
    /// once too. `false`: the first listing's tools are held as well.
    pub approve_new_tools: Option<bool>,
}

/// Checks the registration; returns the endpoint, slug and prefix.
fn check_input(req: &RegisterServer) -> Result<(reqwest::Url, String, String), AppError> {
    if req.transport == registry::STDIO {
        return Err(AppError::BadRequest(
            "`transport` `stdio` is not accepted here: stdio servers are declared only in the \
             gateway's config file (`[[upstreams]]` with `org`, `name`, `command`, `args`, \
             `env`); the API never starts processes"
                .into(),
        ));
    }
    if req.command.is_some() || req.args.is_some() || req.env.is_some() {
        return Err(AppError::BadRequest(
            "`command`, `args` and `env` are not accepted: processes are declared only in the \
             gateway's config file (`[[upstreams]]`)"
                .into(),
        ));
    }
    if req.transport != registry::STREAMABLE_HTTP && req.transport != registry::SSE {
        return Err(AppError::BadRequest(format!(
            "`transport` must be `{}` or `{}`, not `{}`",
            registry::STREAMABLE_HTTP,
            registry::SSE,
            req.transport
        )));
    }
    let Some(url) = &req.url else {
        return Err(AppError::BadRequest("`url` is required".into()));
    };
    let url = reqwest::Url::parse(url.trim())
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
    refuse_itself(&gw, &url).await?;
    let discovered = discover(&gw, &url, &req).await?;
    let url = discovered.as_ref().map_or(url, |d| d.endpoint.clone());
    refuse_itself(&gw, &url).await?;
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
        approve_new_tools: req.approve_new_tools == Some(true),
        hold_first_listing: req.approve_new_tools == Some(false),
        tools: Vec::new(),
        stored_tools: String::new(),
        protocol_version: None,
        health: registry::health::UNREACHABLE.into(),
        last_error: None,
        checked_at: now.clone(),
        created_at: now,
    };
    let max_tools = gw.config.upstream_limits.max_tools_per_server;
    let listed = gw.upstreams.list_tools(&target(&row)?, max_tools).await;
    let (listing, refused) = refresh::screen(&gw, &row, listed).await?;
    if let Some(r) = refused {
        refresh::record_refusal(&gw, &row, &r, "register").await?;
        return Err(AppError::BadRequest(format!(
            "the MCP server was not registered: {}",
            r.message()
        )));
    }
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
    if let Some(d) = discovered {
        api["discoveredFrom"] = d.from.to_string().into();
    }
    Ok((StatusCode::CREATED, Json(api)))
}

/// Refuses a URL that reaches the gateway itself (`own_address.rs`).
async fn refuse_itself(gw: &Gateway, url: &reqwest::Url) -> Result<(), AppError> {
    let listen = gw.config.listen;
    match own_address::reason(url, listen, gw.config.public_url.as_deref()).await {
        Some(why) => Err(AppError::BadRequest(format!(
            "`url` reaches this gateway itself ({why}); an upstream MCP server is another server"
        ))),
        None => Ok(()),
    }
}

/// The endpoint a base URL's `/.well-known/mcp.json` names (see
/// [`super::descriptor`]); `None` for a URL with a path, or without a
/// descriptor.
async fn discover(
    gw: &Gateway,
    url: &reqwest::Url,
    req: &RegisterServer,
) -> Result<Option<descriptor::Discovered>, AppError> {
    if !descriptor::is_base(url) {
        return Ok(None);
    }
    let timeout =
        std::time::Duration::from_millis(req.timeout_ms.unwrap_or(super::DEFAULT_TIMEOUT_MS));
    descriptor::discover(gw.upstreams.http.reqwest(), url, &req.transport, timeout)
        .await
        .map_err(|e| AppError::BadRequest(format!("{e}; register the MCP endpoint URL itself")))
}

async fn list(
    State(gw): State<Arc<Gateway>>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    gw.store.require_org(&org).await?;
    let rows = gw.store.read(move |c| registry::list(c, &org)).await?;
    let servers: Vec<Value> = rows
        .iter()
        .map(|r| with_process(&gw, r.to_api(false), r))
        .collect();
    Ok(Json(json!({ "servers": servers })))
}

async fn find(gw: &Gateway, org: &str, id: &str) -> Result<ServerRow, AppError> {
    refresh::read_row(gw, org, id).await
}

async fn get_one(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, AppError> {
    let row = find(&gw, &org, &id).await?;
    Ok(Json(with_process(&gw, row.to_api(true), &row)))
}

async fn remove(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<StatusCode, AppError> {
    if gw.upstreams.stdio(&id).is_some() {
        return Err(AppError::Conflict(format!(
            "MCP server `{id}` is declared in the config file; remove it there (and restart) \
             to delete it"
        )));
    }
    let row = find(&gw, &org, &id).await?;
    refuse_if_named(&gw, &row)?;
    let (o, i) = (org.clone(), id.clone());
    gw.store.read(move |c| registry::delete(c, &o, &i)).await?;
    gw.upstreams.forget(&id);
    coherence::changed(&gw, &org).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Refuses to delete a server while a policy of the active set names one
/// of its typed actions (its approved tools, unlisted ones included): the
/// action would leave the schema, so that set would no longer load at the
/// next reload or start-up. The operator changes those policies first.
fn refuse_if_named(gw: &Gateway, row: &ServerRow) -> Result<(), AppError> {
    let actions: std::collections::HashSet<String> = row
        .tools
        .iter()
        .filter(|t| !t.hash.is_empty())
        .map(|t| row.tool_name(&t.name))
        .collect();
    let bundle = gw.pep.current();
    let named = crate::policy::dropped::policies_naming(&bundle.policies, &actions);
    if named.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = named
        .iter()
        .map(|(policy, action)| {
            format!(
                "policy `{policy}` names `Gateway::Action::\"{}\"`",
                action.escape_debug()
            )
        })
        .collect();
    Err(AppError::Conflict(format!(
        "MCP server `{}` has typed actions the active policy set names ({}); change those policies and reload before deleting it",
        row.slug,
        list.join(", ")
    )))
}

async fn refresh(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, AppError> {
    let row = find(&gw, &org, &id).await?;
    let done = refresh::refresh_row(&gw, row, "refresh").await?;
    let mut api = with_process(&gw, done.row.to_api(true), &done.row);
    api["heldChanges"] = changes_json(&done.changes);
    api["collisions"] = collisions_json(&done.collisions);
    if let Some(r) = &done.refused {
        api["refused"] = json!({
            "cap": r.cap, "limit": r.limit, "found": r.found, "tool": r.tool,
            "message": r.message(),
        });
    }
    Ok(Json(api))
}

/// The API view of a row, with this instance's child process for a
/// declared stdio server (its command and arguments, the names of its
/// environment, its state); a stdio row not declared here says so.
fn with_process(gw: &Gateway, mut api: Value, row: &ServerRow) -> Value {
    if row.transport != registry::STDIO {
        return api;
    }
    let Some(server) = gw.upstreams.stdio(&row.id) else {
        api["process"] = json!({ "state": "not-declared-here" });
        return api;
    };
    let spec = server.spawn_spec();
    let mut process = server.status();
    process["command"] = spec.command.clone().into();
    process["args"] = json!(spec.args);
    process["envNames"] = json!(spec.env.keys().collect::<Vec<_>>());
    if process["state"] == "down" {
        api["health"] = registry::health::UNREACHABLE.into();
        api["lastError"] = process["lastError"].clone();
    }
    api["process"] = process;
    api
}

async fn approve(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
    payload: Result<Json<Approve>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    let Json(req) = payload?;
    match approval::approve(&gw, &org, &id, req.reviewed()?, "approve").await? {
        Approval::Approved { row, approved } => {
            let mut api = with_process(&gw, row.to_api(true), &row);
            api["approved"] = approved.into();
            Ok(Json(api))
        }
        Approval::Changed { tool, held } => {
            Err(AppError::Conflict(approval::changed(&tool, &held)))
        }
    }
}
