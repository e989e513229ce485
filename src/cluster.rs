//! Running as one of several instances on a shared database.
//!
//! - **Bring-up**: an instance whose database was unreachable at start-up
//!   serves not-ready; [`heartbeat_loop`] migrates, records the active
//!   policy set and registers the instance as soon as the database
//!   answers, and only then reports ready.
//! - **Which policy set runs where**: every instance upserts its row in
//!   `gateway_instances` (policy hash, heartbeat) at each beat and after
//!   each reload; `GET /admin/policies` lists the live ones.
//! - **Cache coherence**: a change made through one instance's admin API
//!   (A2A peers, tenants, keys) is published on the database's change
//!   channel, and every instance invalidates what it cached for that org
//!   ([`changed`], [`start_listener`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::gateway::Gateway;
use crate::store::instances::{self, Instance};
use crate::store::notify::{self, Change, Listener};
use crate::store::{Location, StoreError};

/// This instance's identity and bring-up state.
#[derive(Debug)]
pub struct Cluster {
    /// Random id chosen at start-up.
    pub instance_id: String,
    /// When this instance started.
    pub started_at: String,
    /// The policy-set hash known to be recorded in the store.
    recorded: Mutex<Option<String>>,
    /// Migrated, policy set recorded, instance registered.
    ready: AtomicBool,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            instance_id: uuid::Uuid::now_v7().simple().to_string(),
            started_at: crate::ids::now_rfc3339(),
            recorded: Mutex::new(None),
            ready: AtomicBool::new(false),
        }
    }
}

impl Cluster {
    /// Whether bring-up finished (the store is usable and this instance
    /// is registered).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Notes that `hash` is recorded in `policy_sets`.
    pub fn recorded(&self, hash: &str) {
        if let Ok(mut r) = self.recorded.lock() {
            *r = Some(hash.to_string());
        }
    }

    fn is_recorded(&self, hash: &str) -> bool {
        self.recorded
            .lock()
            .is_ok_and(|r| r.as_deref() == Some(hash))
    }
}

/// Rows older than this many heartbeats are instances that are gone.
const LIVE_BEATS: u32 = 3;

fn heartbeat(gw: &Gateway) -> Duration {
    Duration::from_secs(gw.config.database.heartbeat_secs.max(1))
}

/// One bring-up / heartbeat step: migrate if needed, record the active
/// policy set if it is not yet, upsert this instance's row.
pub async fn beat(gw: &Gateway) -> Result<(), StoreError> {
    gw.store.ensure_ready().await?;
    let bundle = gw.pep.current();
    if !gw.cluster.is_recorded(&bundle.hash) {
        gw.store
            .writer()
            .submit(vec![Gateway::policy_set_op(&bundle)])
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
    gw.store.read(move |c| instances::upsert(c, &row)).await?;
    if !gw.cluster.is_ready() {
        // MCP sessions ended on any instance (or before a restart).
        let since = crate::mcp::terminated::remembered_since();
        let ids = gw
            .store
            .read(move |c| crate::store::terminations::load_since(c, &since))
            .await?;
        ids.iter().for_each(|sid| gw.terminated.remember(sid));
    }
    gw.cluster.ready.store(true, Ordering::Release);
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
    if let Err(e) = gw
        .store
        .read(move |c| instances::remove(c, &id, &before))
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

/// A change of `org` made through this instance: invalidate the local
/// caches now, and tell the other instances (they invalidate within the
/// notification's delivery, well under a second).
pub async fn changed(gw: &Gateway, org: &str) {
    apply(gw, &Change::Org(org.to_string()));
    publish(gw, Change::Org(org.to_string())).await;
}

/// Tells the other instances about `change` (PostgreSQL only; best effort:
/// caches catch up within `cache_ttl_secs`, terminations at the next
/// reconnect of their listener).
pub async fn publish(gw: &Gateway, change: Change) {
    if let Location::Postgres(target) = gw.store.location() {
        let channel = notify::channel(&target.schema);
        if let Err(e) = gw
            .store
            .read(move |c| notify::publish(c, &channel, &change))
            .await
        {
            tracing::warn!(error = %e, "could not publish a change to the other instances");
        }
    }
}

/// Applies a change to this instance's caches.
fn apply(gw: &Gateway, change: &Change) {
    match change {
        Change::Org(org) => {
            gw.a2a.invalidate(org);
            gw.invalidate_caches();
        }
        Change::McpTerminated(sid) => gw.terminated.remember(sid),
        Change::McpResumed(sid) => gw.terminated.forget(sid),
        Change::Everything => {
            gw.a2a.invalidate_all();
            gw.invalidate_caches();
        }
    }
}

/// Listens for other instances' changes (PostgreSQL only).
pub fn start_listener(gw: &Arc<Gateway>) -> Option<Listener> {
    let Location::Postgres(target) = gw.store.location() else {
        return None;
    };
    let weak = Arc::downgrade(gw);
    let listener = notify::listen((**target).clone(), move |change| {
        let Some(gw) = weak.upgrade() else {
            return false;
        };
        if change == Change::Everything {
            // Terminations published while this listener was away.
            let since = crate::mcp::terminated::remembered_since();
            match gw
                .store
                .read_blocking(|c| crate::store::terminations::load_since(c, &since))
            {
                Ok(ids) => ids.iter().for_each(|sid| gw.terminated.remember(sid)),
                Err(e) => tracing::warn!(error = %e, "cannot reload MCP session terminations"),
            }
        }
        apply(&gw, &change);
        true
    });
    match listener {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::error!(error = %e, "change listener not started; other instances' changes show within cache_ttl_secs");
            None
        }
    }
}
