//! This instance's membership of the cluster: bring-up once the database
//! answers, the heartbeat that keeps its `gateway_instances` row fresh (with
//! the policy hash it runs), and leaving on a clean shutdown.
//!
//! **Architecture Invariant:** an instance reports ready only after a beat
//! migrated the store, recorded the active policy set and registered the
//! instance, so a ready instance's decisions can always be replayed.

use std::sync::{PoisonError, Weak};
use std::time::Duration;

use crate::gateway::Gateway;
use crate::store::StoreError;
use crate::store::instances::{self, Instance};

/// Rows older than this many heartbeats are instances that are gone.
const LIVE_BEATS: u32 = 3;

fn heartbeat(gw: &Gateway) -> Duration {
    Duration::from_secs(gw.config.database.heartbeat_secs.max(1))
}

/// One bring-up / heartbeat step: migrate if needed, record the active
/// policy set if it is not yet, upsert this instance's row, count the live
/// instances that share the rate limits.
pub async fn beat(gw: &Gateway) -> Result<(), StoreError> {
    gw.store.ensure_ready().await?;
    let bundle = gw.pep.current();
    if !gw.cluster.is_recorded(&bundle.hash) {
        gw.store
            .writer()
            .submit(vec![
                crate::lifecycle::policy_set_op(&bundle),
                crate::store::policy_active::activated_op(
                    &bundle.hash,
                    &gw.cluster.instance_id,
                    "startup",
                    &crate::ids::now_rfc3339(),
                ),
            ])
            .await?;
        gw.cluster.recorded(&bundle.hash);
    }
    let now = crate::ids::now_rfc3339();
    let row = Instance {
        id: gw.cluster.instance_id.clone(),
        started_at: gw.cluster.started_at.clone(),
        last_seen: now,
        policy_hash: bundle.hash.clone(),
        listen: gw.config.base_url(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let left = std::sync::Arc::clone(&gw.cluster.left);
    gw.store
        .read(move |c| {
            // A stop may have aborted this beat's task and removed the row
            // while this closure waited for a connection: never re-add it.
            let left = left.lock().unwrap_or_else(PoisonError::into_inner);
            if *left {
                return Ok(());
            }
            instances::upsert(c, &row)
        })
        .await?;
    share_limits(gw).await?;
    if !gw.cluster.is_ready() {
        // MCP sessions ended on any instance (or before a restart).
        let since = crate::mcp::terminated::remembered_since();
        let ids = gw
            .store
            .read(move |c| crate::store::terminations::load_since(c, &since))
            .await?;
        ids.iter().for_each(|sid| gw.terminated.remember(sid));
    }
    gw.cluster.set_ready();
    Ok(())
}

/// Shares the rate limits between the live instances: each enforces 1/n
/// of every bucket (see `crate::rate_limits`).
async fn share_limits(gw: &Gateway) -> Result<(), StoreError> {
    let live = live_instances(gw).await?;
    let n = u32::try_from(live.len()).unwrap_or(u32::MAX);
    gw.rate_limits.set_instances(n);
    Ok(())
}

/// Beats every `database.heartbeat_secs` until the gateway is dropped.
pub async fn heartbeat_loop(gw: Weak<Gateway>) {
    let mut failing = false;
    loop {
        let Some(gw) = gw.upgrade() else { return };
        match beat(&gw).await {
            Ok(()) if failing => {
                tracing::info!("database reachable again");
                failing = false;
            }
            Ok(()) => {}
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "heartbeat failed; the database may be unreachable");
                }
                failing = true;
            }
        }
        let pause = if gw.cluster.is_ready() {
            heartbeat(&gw)
        } else {
            Duration::from_millis(500)
        };
        drop(gw);
        tokio::time::sleep(pause).await;
    }
}

/// Forgets this instance's row (clean shutdown) and rows long gone.
pub async fn leave(gw: &Gateway) {
    let id = gw.cluster.instance_id.clone();
    let before = gone_before(gw);
    let left = std::sync::Arc::clone(&gw.cluster.left);
    if let Err(e) = gw
        .store
        .read(move |c| {
            let mut left = left.lock().unwrap_or_else(PoisonError::into_inner);
            *left = true;
            instances::remove(c, &id, &before)
        })
        .await
    {
        tracing::debug!(error = %e, "could not remove this instance's row");
    }
}

fn gone_before(gw: &Gateway) -> String {
    let age = heartbeat(gw) * LIVE_BEATS;
    let cutoff = time::OffsetDateTime::now_utc() - age;
    crate::ids::rfc3339(cutoff)
}

/// The instances that beat recently (this one included once registered).
pub async fn live_instances(gw: &Gateway) -> Result<Vec<Instance>, StoreError> {
    let since = gone_before(gw);
    gw.store.read(move |c| instances::live(c, &since)).await
}
