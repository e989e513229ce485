//! `GET /console/peers`: every org's A2A peers and upstream MCP servers
//! with their health, each peer's load over the bridge's telemetry rows
//! kept (`[a2a_telemetry]`: calls by status, mean duration, bytes, the
//! last call error reported), and each upstream tool definition held for approval
//! with a line diff of the approved and the listed definition.
//! `POST /console/peers/{org}/mcp/{id}/approve` (admin only) approves one
//! held definition (the `tool` field) exactly as
//! `POST /admin/orgs/{org}/mcp-servers/{id}/approve` does (its
//! `upstream_tool_approved` event, trigger `console`, included), and records
//! it in the trail as the console's own operator record. Auditors see no approve button and get 403 if they post.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::header::LOCATION;
use axum::response::{Html, IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use similar::{ChangeTag, TextDiff};

use super::auth::{AdminPosted, Viewer};
use super::error::ConsoleError;
use super::overview::viewer_ctx;
use crate::gateway::Gateway;
use crate::store::a2a_hooks::{self, PeerLoad};
use crate::upstream::approval::{self, Approval};
use crate::upstream::registry::{self as upstreams, ServerRow};

/// One line of a diff: `+`, `-` or ` `.
#[derive(Debug, Serialize)]
struct Line {
    tag: &'static str,
    text: String,
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// The line diff of an approved and a held definition
/// (`similar`: a maintained Myers diff).
fn diff(old: &Value, new: &Value) -> Vec<Line> {
    let (old, new) = (pretty(old), pretty(new));
    TextDiff::from_lines(&old, &new)
        .iter_all_changes()
        .map(|c| Line {
            tag: match c.tag() {
                ChangeTag::Delete => "-",
                ChangeTag::Insert => "+",
                ChangeTag::Equal => " ",
            },
            text: c.value().trim_end_matches('\n').to_string(),
        })
        .collect()
}

/// An upstream as the page shows it.
fn server(row: &ServerRow) -> minijinja::Value {
    let held: Vec<_> = row
        .tools
        .iter()
        .filter_map(|t| {
            t.held.as_ref().map(|h| {
                minijinja::context! {
                    name => t.name,
                    new => t.definition.is_null(),
                    seen_at => h.seen_at,
                    hash => h.hash,
                    diff => diff(&t.definition, &h.definition),
                }
            })
        })
        .collect();
    let refused = refused(row);
    let unlisted: Vec<_> = row
        .tools
        .iter()
        .filter_map(|t| {
            t.unlisted_reason()
                .map(|reason| minijinja::context! { name => t.name, reason })
        })
        .collect();
    minijinja::context! {
        id => row.id, org => row.org_id, name => row.name, url => row.url,
        transport => row.transport, health => row.health, last_error => row.last_error,
        checked_at => row.checked_at,
        offered => row.tools.iter().filter(|t| t.offered()).count(),
        tools => row.tools.len(),
        held,
        refused,
        unlisted,
    }
}

/// The server's tools refused for names Cedar cannot hold, each name
/// escaped (its control characters shown, not rendered).
fn refused(row: &ServerRow) -> Vec<minijinja::Value> {
    row.tools
        .iter()
        .filter_map(|t| {
            t.refusal().map(|reason| {
                minijinja::context! { name => t.name.escape_debug().to_string(), reason }
            })
        })
        .collect()
}

/// `GET /console/peers`.
pub async fn page(
    State(gw): State<Arc<Gateway>>,
    viewer: Viewer,
) -> Result<Html<String>, ConsoleError> {
    let (peers, servers, load) = gw
        .store
        .read(|c| {
            let mut peers = Vec::new();
            let mut servers = Vec::new();
            for org in crate::store::tenants::list_orgs(c)? {
                peers.extend(crate::a2a::registry::list(c, &org.id)?);
                servers.extend(upstreams::list(c, &org.id)?);
            }
            Ok((peers, servers, a2a_hooks::peer_load(c)?))
        })
        .await?;
    let peers: Vec<Value> = peers.iter().map(|p| with_load(p.to_api(), &load)).collect();
    let servers: Vec<_> = servers.iter().map(server).collect();
    super::templates::render(
        "peers.html",
        minijinja::context! { viewer => viewer_ctx(&viewer), peers, servers },
    )
}

/// A peer's API view with its `load` (zeros when it made no call).
fn with_load(mut peer: Value, load: &[PeerLoad]) -> Value {
    let found = load
        .iter()
        .find(|l| peer["orgId"] == l.org_id.as_str() && peer["slug"] == l.peer.as_str());
    let mut shown = json!({
        "completed": 0, "failed": 0, "denied": 0, "running": 0,
        "meanMs": 0, "requestBytes": 0, "responseBytes": 0, "lastError": null,
    });
    if let Some(l) = found {
        shown = json!({
            "completed": l.completed, "failed": l.failed, "denied": l.denied,
            "running": l.running, "meanMs": l.mean_ms.round(),
            "requestBytes": l.request_bytes, "responseBytes": l.response_bytes,
            "lastError": l.last_error.as_deref().map(last_error),
        });
    }
    peer["load"] = shown;
    peer
}

/// What a `verb-error` event says: `<code> <message>`.
fn last_error(event: &str) -> String {
    let event: Value = serde_json::from_str(event).unwrap_or(Value::Null);
    let error = &event["error"];
    format!(
        "{} {}",
        error["code"].as_i64().unwrap_or_default(),
        error["message"].as_str().unwrap_or_default()
    )
}

/// The approve form.
#[derive(Debug, Deserialize)]
pub struct ApproveForm {
    #[serde(default)]
    tool: String,
    /// The held hash the page showed (required): the approval fails if
    /// another definition is held by then.
    #[serde(default)]
    hash: String,
}

/// `POST /console/peers/{org}/mcp/{id}/approve` (admin).
pub async fn approve(
    State(gw): State<Arc<Gateway>>,
    Path((org, id)): Path<(String, String)>,
    AdminPosted(posted): AdminPosted<ApproveForm>,
) -> Result<Response, ConsoleError> {
    let tool = posted.form.tool.trim().to_string();
    let hash = posted.form.hash.trim();
    if hash.is_empty() {
        return Err(ConsoleError::BadRequest(format!(
            "the form names no held definition of `{tool}`: an approval names the hash it \
             approves; reload the page and approve from it"
        )));
    }
    let reviewed = BTreeMap::from([(tool.clone(), hash.to_string())]);
    let row = match approval::approve(&gw, &org, &id, &reviewed, "console").await? {
        Approval::Approved { row, .. } => row,
        Approval::Changed { tool, held } => {
            return Err(ConsoleError::BadRequest(approval::changed(&tool, &held)));
        }
    };
    let hash = row
        .tools
        .iter()
        .find(|t| t.name == tool)
        .map(|t| t.hash.clone());
    super::trail::record(
        &gw,
        super::trail::Action {
            by: &posted.viewer,
            verb: "approve_tools",
            org: Some(&org),
            resource: format!("Gateway::McpServer::\"{}\"", row.slug),
            context: json!({ "server": id, "tools": [tool] }),
            outcome: json!({ "status": "approved", "hash": hash }),
        },
    )
    .await?;
    Ok((
        StatusCode::SEE_OTHER,
        [(LOCATION, format!("{}/peers", super::PATH))],
    )
        .into_response())
}
