//! Listing an upstream's tools again and merging them with the pins: on an
//! operator's request (`POST …/mcp-servers/{id}/refresh`), on a timer
//! (`[upstream_refresh] interval_secs`), and when the upstream announces
//! `notifications/tools/list_changed` on a stream the gateway holds. A
//! definition that changed since it was approved is held, and each newly
//! held definition is a decision-trail event (`upstream_tool_held`, see
//! [`crate::audit::events`]) with the old and new hash, so an auditor sees
//! it in the same chain as the calls, whoever found it.
//!
//! This file takes the whole [`Gateway`] (store, writer, cluster
//! notifications), so it sits above it, as `a2a::refresh` does; the
//! runtime in `upstream.rs` never calls in here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::caps::{self, Refusal};
use super::registry::{self, HeldChange, Listing, ServerRow, ServerTarget};
use crate::audit::events::{self, DefinitionChange};
use crate::cluster::coherence;
use crate::error::AppError;
use crate::gateway::Gateway;
use crate::store::WriteOp;

/// What one refresh found.
#[derive(Debug)]
pub struct Refreshed {
    /// The row as stored after the listing.
    pub row: ServerRow,
    /// Definitions that became held at this listing.
    pub changes: Vec<HeldChange>,
    /// Tools hidden because their name is taken.
    pub collisions: Vec<registry::Collision>,
    /// The cap the listing crossed, if it was refused (`caps.rs`).
    pub refused: Option<Refusal>,
}

/// How many times a write of pins is tried when another write (an
/// approval, another refresh) keeps landing between read and write.
pub const WRITE_ATTEMPTS: usize = 5;

/// Lists the row's tools again, merges them with its pins, stores the
/// result, records every newly held definition in the trail, and
/// invalidates the org (here and on the other instances) when what the
/// server offers changed. `trigger` names what asked (`refresh`,
/// `background-refresh`, `list-changed`). When the pins changed after the
/// row was read (an approval landed while the upstream was listed), the
/// row is read again and the same listing merged with the new pins.
pub async fn refresh_row(
    gw: &Gateway,
    mut row: ServerRow,
    trigger: &str,
) -> Result<Refreshed, AppError> {
    let limits = &gw.config.upstream_limits;
    let listed = gw
        .upstreams
        .list_tools(&target(&row)?, limits.max_tools_per_server)
        .await;
    let (listing, refused) = screen(gw, &row, listed).await?;
    for _ in 0..WRITE_ATTEMPTS {
        let before = (row.tools.clone(), row.health.clone());
        let last_error = row.last_error.clone();
        let (mut done, stored) = merge_and_store(gw, row, listing.clone()).await?;
        if !stored {
            row = read_row(gw, &done.row.org_id, &done.row.id).await?;
            continue;
        }
        done.refused.clone_from(&refused);
        let row = &done.row;
        if let Some(r) = &refused
            && last_error.as_deref() != Some(r.message().as_str())
        {
            record_refusal(gw, row, r, trigger).await?;
        }
        record_events(gw, row, &done.changes, events::UPSTREAM_TOOL_HELD, trigger).await?;
        if (&row.tools, &row.health) != (&before.0, &before.1) {
            coherence::changed(gw, &row.org_id).await;
        }
        return Ok(done);
    }
    Err(AppError::Conflict(
        "the MCP server's definitions kept changing while they were stored; try again".into(),
    ))
}

/// Merges a listing with the row's pins, hides colliding names, and
/// stores the result unless the pins changed since the row was read
/// (false then, and nothing is stored).
async fn merge_and_store(
    gw: &Gateway,
    mut row: ServerRow,
    listing: Listing,
) -> Result<(Refreshed, bool), AppError> {
    let (mut recorded, changes) = apply(&mut row, listing);
    let taken = taken_names(gw, &row.org_id, &row.id).await?;
    let collisions = registry::mark_collisions(&mut row, &taken);
    if let Listing::Listed { tools, .. } = &mut recorded {
        tools.clone_from(&row.tools);
    }
    let (row, stored) = gw
        .store
        .read(move |c| registry::record_listing(c, &mut row, &recorded).map(|s| (row, s)))
        .await?;
    if stored {
        log_outcome(&row, &changes, &collisions);
    }
    let done = Refreshed {
        row,
        changes,
        collisions,
        refused: None,
    };
    Ok((done, stored))
}

/// Warns of what a stored listing held or hid.
fn log_outcome(row: &ServerRow, changes: &[HeldChange], collisions: &[registry::Collision]) {
    for c in changes {
        tracing::warn!(
            upstream = %row.slug, org = %row.org_id, tool = %c.tool,
            old_hash = %c.old_hash, new_hash = %c.new_hash,
            "upstream tool definition held until approved"
        );
    }
    for c in collisions {
        tracing::warn!(
            upstream = %row.slug, org = %row.org_id, tool = %c.name, with = %c.with,
            "upstream tool name collides; tool hidden"
        );
    }
}

/// The listing within the `[upstream_limits]` caps, or an unusable one
/// naming the cap it crossed, with the refusal (`caps.rs`); the org's
/// other servers are read as stored now.
pub async fn screen(
    gw: &Gateway,
    row: &ServerRow,
    listing: Listing,
) -> Result<(Listing, Option<Refusal>), AppError> {
    if !matches!(listing, Listing::Listed { .. }) {
        return Ok((listing, None));
    }
    let org = row.org_id.clone();
    let rows = gw.store.read(move |c| registry::list(c, &org)).await?;
    let screened = caps::screen(listing, &gw.config.upstream_limits, &rows, &row.id);
    if let Some(r) = &screened.1 {
        tracing::warn!(upstream = %row.slug, org = %row.org_id, cap = r.cap, limit = r.limit, found = r.found, "upstream listing refused");
    }
    Ok(screened)
}

/// Commits the trail event of a refused listing (`trigger` names what
/// listed: `register`, `refresh`, …).
pub async fn record_refusal(
    gw: &Gateway,
    row: &ServerRow,
    refusal: &Refusal,
    trigger: &str,
) -> Result<(), AppError> {
    let policy_hash = gw.pep.current().hash.clone();
    let tool = refusal.tool.as_deref().map(|t| row.tool_name(t));
    let event = events::listing_refused_event(
        &events::ListingRefusal {
            org_id: &row.org_id,
            upstream_id: &row.id,
            slug: &row.slug,
            cap: refusal.cap,
            limit: refusal.limit,
            found: refusal.found,
            tool: tool.as_deref(),
            trigger,
        },
        &policy_hash,
    );
    let ops = vec![WriteOp::Decision(Box::new(event))];
    gw.store.writer().submit(ops).await.map_err(|e| {
        tracing::error!(error = %e, upstream = %row.id, "cannot record a refused upstream listing");
        AppError::Internal
    })?;
    Ok(())
}

/// One upstream of an org, as stored now.
pub async fn read_row(gw: &Gateway, org: &str, id: &str) -> Result<ServerRow, AppError> {
    let (o, i) = (org.to_string(), id.to_string());
    gw.store
        .read(move |c| registry::get(c, &o, &i))
        .await?
        .ok_or_else(|| AppError::NotFound(format!("org `{org}` has no MCP server `{id}`")))
}

/// Commits one trail event per change (`action` held or approved).
pub async fn record_events(
    gw: &Gateway,
    row: &ServerRow,
    changes: &[HeldChange],
    action: &str,
    trigger: &str,
) -> Result<(), AppError> {
    if changes.is_empty() {
        return Ok(());
    }
    let policy_hash = gw.pep.current().hash.clone();
    let ops = changes
        .iter()
        .map(|c| {
            let gateway_name = row.tool_name(&c.tool);
            let change = DefinitionChange {
                org_id: &row.org_id,
                upstream_id: &row.id,
                slug: &row.slug,
                tool: &c.tool,
                gateway_name: &gateway_name,
                old_hash: &c.old_hash,
                new_hash: &c.new_hash,
                trigger,
            };
            WriteOp::Decision(Box::new(events::definition_event(
                action,
                &change,
                &policy_hash,
            )))
        })
        .collect();
    gw.store.writer().submit(ops).await.map_err(|e| {
        tracing::error!(error = %e, upstream = %row.id, "cannot record upstream definition events");
        AppError::Internal
    })?;
    Ok(())
}

/// Refreshes every registered upstream every `interval_secs` (never when
/// 0), so a changed definition is held without an operator asking. A
/// failed refresh is logged and retried at the next tick. Every instance
/// runs it; a refresh is idempotent (the same listing merges to the same
/// pins, and a definition already held is not recorded twice).
pub async fn refresh_loop(gw: Arc<Gateway>) {
    let secs = gw.config.upstream_refresh.interval_secs;
    if secs == 0 {
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_secs(secs));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let rows = match gw.store.read(registry::list_all).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list MCP servers for refresh");
                continue;
            }
        };
        for row in rows {
            // A stdio server is listed by the instances that run its child.
            if row.transport == registry::STDIO && gw.upstreams.stdio(&row.id).is_none() {
                continue;
            }
            let id = row.id.clone();
            if let Err(e) = refresh_row(&gw, row, "background-refresh").await {
                tracing::warn!(upstream = %id, error = %e, "MCP server refresh failed");
            }
        }
    }
}

/// Lists an upstream again when it announces that a list changed
/// (`notifications/tools/list_changed`, or the resources' or prompts'):
/// on the HTTP+SSE event stream, the standing `GET` stream of a Streamable
/// HTTP session (`standing.rs`), or a stdio child's output (a 2026-07-28
/// session has no stream and is covered by the background refresh).
/// Announcements are gathered for `list_changed_debounce_ms`, so a burst
/// from one upstream (or several) causes one listing each; then every
/// listen stream is woken (`Gateway::announce_change`), since resources
/// and prompts are read live and only a re-check tells whether what an
/// agent may see changed (a listen stream tells its client only then).
pub async fn list_changed_loop(gw: Arc<Gateway>) {
    let Some(mut rx) = gw.upstreams.take_list_changed() else {
        return;
    };
    let debounce = Duration::from_millis(gw.config.upstream_refresh.list_changed_debounce_ms);
    while let Some(first) = rx.recv().await {
        tokio::time::sleep(debounce).await;
        let mut ids = std::collections::BTreeSet::from([first]);
        while let Ok(more) = rx.try_recv() {
            ids.insert(more);
        }
        let rows = match gw.store.read(registry::list_all).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list MCP servers after list_changed");
                continue;
            }
        };
        for row in rows.into_iter().filter(|r| ids.contains(&r.id)) {
            let id = row.id.clone();
            tracing::info!(upstream = %row.slug, org = %row.org_id, "upstream list changed; listing again");
            if let Err(e) = refresh_row(&gw, row, "list-changed").await {
                tracing::warn!(upstream = %id, error = %e, "MCP server refresh after list_changed failed");
            }
        }
        gw.announce_change();
    }
}

/// The call target of a row (the URL was checked when it was stored).
pub fn target(row: &ServerRow) -> Result<ServerTarget, AppError> {
    let endpoint = reqwest::Url::parse(&row.url).map_err(|e| {
        tracing::error!(upstream = %row.id, error = %e, "stored upstream URL does not parse");
        AppError::Internal
    })?;
    Ok(ServerTarget {
        id: row.id.clone(),
        org_id: row.org_id.clone(),
        slug: row.slug.clone(),
        prefix: row.prefix.clone(),
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
pub fn apply(row: &mut ServerRow, listing: Listing) -> (Listing, Vec<registry::HeldChange>) {
    let mut changes = Vec::new();
    let listing = match listing {
        Listing::Listed {
            tools,
            protocol_version,
        } => {
            let approve_new = registry::approves_new(row);
            let (merged, held) = registry::merge(&row.tools, tools, approve_new);
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
    (listing, changes)
}

/// Every tool name of the org outside the server `except` (gateway name →
/// what has it): built-in tools, A2A tools and their aliases, and the
/// other registered servers' tools (a colliding one of theirs excepted).
pub async fn taken_names(
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
        for tool in row
            .tools
            .iter()
            .filter(|t| t.collides_with.is_none() && t.unlisted.is_none())
        {
            let owner = format!("a tool of MCP server `{}`", row.slug);
            taken.insert(row.tool_name(&tool.name), owner);
        }
    }
    Ok(taken)
}
