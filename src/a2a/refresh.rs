//! Refetching agent cards: one card on an operator's request
//! (`POST /admin/orgs/{org}/a2a-agents/{id}/refresh`), and every card on a
//! timer, so a peer that recovers is exposed again and one that goes away
//! is hidden.
//!
//! This file takes the whole [`Gateway`] (store, A2A runtime, cluster
//! notifications), so it sits above it; the A2A runtime the gateway holds
//! (`a2a.rs`) never calls in here.

use std::sync::Arc;
use std::time::Duration;

use super::registry::{self, CardRow, Fetched, PeerAuth};
use crate::cluster::coherence;
use crate::gateway::Gateway;
use crate::store::StoreError;

/// Why one card refresh failed.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// The row disappeared between the fetch and reading it back.
    #[error("A2A agent `{0}` was deregistered")]
    Deregistered(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Refreshes every registered card every `refresh_interval_secs` (never
/// when 0). A failed refresh is logged and retried at the next tick.
pub async fn refresh_loop(gw: Arc<Gateway>) {
    let secs = gw.a2a.config.refresh_interval_secs;
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
                tracing::warn!(error = %e, "cannot list A2A agents for refresh");
                continue;
            }
        };
        for row in rows {
            if let Err(e) = refresh_row(&gw, &row).await {
                tracing::warn!(agent = %row.id, error = %e, "A2A card refresh failed");
            }
        }
    }
}

/// Refetches one card, stores the result, and invalidates the org (here
/// and on the other instances) when what it exposes changed. Returns the
/// updated row.
pub async fn refresh_row(gw: &Gateway, row: &CardRow) -> Result<CardRow, RefreshError> {
    let fetched = fetch(gw, row).await;
    let id = row.id.clone();
    gw.store
        .read(move |c| registry::record_fetch(c, &id, &fetched))
        .await?;
    let (o, i) = (row.org_id.clone(), row.id.clone());
    let updated = gw
        .store
        .read(move |c| registry::get(c, &o, &i))
        .await?
        .ok_or_else(|| RefreshError::Deregistered(row.id.clone()))?;
    if (&updated.health, &updated.card) != (&row.health, &row.card) {
        tracing::info!(agent = %row.slug, org = %row.org_id, health = %updated.health, "A2A agent changed");
        coherence::changed(gw, &row.org_id).await;
    }
    Ok(updated)
}

/// Fetches the row's card with its credential; a credential that cannot be
/// read makes the peer unreachable without a request being sent.
async fn fetch(gw: &Gateway, row: &CardRow) -> Fetched {
    let a2a = &gw.a2a;
    let bearer = match row.auth.as_ref().map(PeerAuth::resolve) {
        Some(Err(e)) => return Fetched::Unreachable(e.to_string()),
        bearer => bearer.and_then(Result::ok),
    };
    registry::fetch(
        &a2a.client,
        &row.url,
        bearer.as_deref(),
        row.pinned_version,
        a2a.card_timeout(),
        a2a.config.max_card_bytes,
    )
    .await
}
