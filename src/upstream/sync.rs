//! Brings the stdio servers this instance's config declares into the
//! registry: each is stored (or its declared settings updated, pins kept)
//! and its tools listed, as a refresh does, once its org exists. Runs at
//! start-up and then every second until every declaration is stored, so a
//! server declared for an org created later appears within a second of it.
//!
//! Several instances with the same config store the same row (its id
//! derives from org and slug) and list the same tools; the pins in the
//! database are shared, each instance runs its own child.

use std::collections::HashSet;
use std::sync::Weak;
use std::time::Duration;

use super::declared::Declared;
use super::refresh;
use super::registry::{self, ServerRow};
use crate::error::AppError;
use crate::gateway::Gateway;

/// Pause between two rounds while some declaration is not stored yet.
const ROUND: Duration = Duration::from_secs(1);

/// Stores and lists every declaration, retrying those whose org does not
/// exist yet (or whose store failed) until all are done; ends with the
/// gateway.
pub async fn sync_loop(gw: Weak<Gateway>) {
    let mut done: HashSet<String> = HashSet::new();
    loop {
        let Some(gw) = gw.upgrade() else { return };
        let pending: Vec<_> = gw
            .upstreams
            .declared()
            .filter(|d| !done.contains(&d.id))
            .cloned()
            .collect();
        if pending.is_empty() {
            return;
        }
        for d in pending {
            match sync_one(&gw, &d).await {
                Ok(true) => {
                    done.insert(d.id.clone());
                }
                Ok(false) => {}
                Err(AppError::Conflict(e)) => {
                    tracing::error!(upstream = %d.slug, org = %d.org, error = %e, "declared stdio server not stored");
                    done.insert(d.id.clone());
                }
                Err(e) => {
                    tracing::warn!(upstream = %d.slug, org = %d.org, error = %e, "declared stdio server not stored yet");
                }
            }
        }
        drop(gw);
        tokio::time::sleep(ROUND).await;
    }
}

/// Stores one declaration and lists its tools; false while its org does
/// not exist.
async fn sync_one(gw: &Gateway, d: &Declared) -> Result<bool, AppError> {
    let org = d.org.clone();
    let exists = gw
        .store
        .read(move |c| crate::store::tenants::get_org(c, &org))
        .await?
        .is_some();
    if !exists {
        return Ok(false);
    }
    let now = crate::ids::now_rfc3339();
    let row = ServerRow {
        id: d.id.clone(),
        org_id: d.org.clone(),
        slug: d.slug.clone(),
        name: d.name.clone(),
        transport: registry::STDIO.into(),
        url: format!("stdio:{}", d.slug),
        prefix: d.prefix.clone(),
        auth: None,
        timeout_ms: u64::try_from(d.timeout.as_millis()).unwrap_or(u64::MAX),
        approve_new_tools: d.approve_new_tools == Some(true),
        hold_first_listing: d.approve_new_tools == Some(false),
        tools: Vec::new(),
        stored_tools: String::new(),
        protocol_version: None,
        health: registry::health::UNREACHABLE.into(),
        last_error: Some("not listed yet".into()),
        checked_at: now.clone(),
        created_at: now,
    };
    let stored = row.clone();
    gw.store
        .read(move |c| registry::upsert_declared(c, &stored))
        .await?;
    let (o, i) = (d.org.clone(), d.id.clone());
    let Some(current) = gw.store.read(move |c| registry::get(c, &o, &i)).await? else {
        return Ok(false);
    };
    let done = refresh::refresh_row(gw, current, "declared").await?;
    let (row, held, collisions) = (&done.row, &done.changes, &done.collisions);
    tracing::info!(
        upstream = %row.slug, org = %row.org_id, health = %row.health,
        tools = row.tools.len(), held = held.len(), collisions = collisions.len(),
        "declared stdio server listed"
    );
    Ok(true)
}
