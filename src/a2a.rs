//! Remote A2A agents as MCP tools.
//!
//! - [`card`]: parsing agent cards (0.3 and 1.0 shapes) and tool naming;
//! - [`registry`]: registered peers per org (stored rows, card fetches,
//!   health) and the per-org tool set built from them;
//! - [`bridge`]: the outbound JSON-RPC call and result translation;
//! - [`hooks`]: the bounded in-process verb hook bus and its subscribers;
//! - [`admin`]: the operator API under `/admin/orgs/{org}/a2a-*`.
//!
//! [`A2a`] is the runtime the gateway holds: the HTTP client, the per-org
//! tool sets in a moka cache (a register, deregister or refresh invalidates
//! the org at once; a TTL bounds anything else), the per-peer concurrency
//! slots and the hook bus.
//!
//! **Architecture Invariant:** nothing here asks Cedar. The MCP endpoint
//! decides `a2a_invoke` through `audit::decide` before [`bridge::send`] is
//! reached, so a denied call sends no byte.

pub mod admin;
pub mod bridge;
pub mod card;
pub mod hooks;
pub mod registry;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::store::{Store, StoreError};
use registry::{OrgPeers, PeerTarget};

/// Most orgs whose tool sets are cached, and most peers with slots.
const CACHE_CAPACITY: u64 = 10_000;

/// Bridge and registry settings (`[a2a]` in the config file).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct A2aConfig {
    /// Wall-clock budget of one outbound call unless the org sets its own
    /// (`PUT /admin/orgs/{org}/a2a-settings {"timeoutMs"}`).
    pub default_timeout_ms: u64,
    /// Most concurrent outbound calls to one peer; more wait (within their
    /// timeout) for a free slot.
    pub max_concurrent_per_peer: usize,
    /// Seconds between background refreshes of every card (0: never).
    pub refresh_interval_secs: u64,
    /// Budget of one card fetch.
    pub card_timeout_ms: u64,
    /// Largest card accepted, in bytes.
    pub max_card_bytes: usize,
    /// Largest peer response accepted, in bytes.
    pub max_response_bytes: usize,
}

impl Default for A2aConfig {
    fn default() -> Self {
        A2aConfig {
            default_timeout_ms: 30_000,
            max_concurrent_per_peer: 32,
            refresh_interval_secs: 300,
            card_timeout_ms: 5_000,
            max_card_bytes: 1024 * 1024,
            max_response_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Longest per-org timeout accepted (10 minutes).
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// The A2A runtime.
#[derive(Debug)]
pub struct A2a {
    /// Settings.
    pub config: A2aConfig,
    store: Store,
    /// Outbound HTTP (connection pool shared by every peer).
    pub client: reqwest::Client,
    orgs: Cache<String, Arc<OrgPeers>>,
    slots: Cache<String, Arc<Semaphore>>,
    /// String literals of each policy set (by its hash), for `tools/list`.
    literals: Cache<String, Arc<HashSet<String>>>,
    /// The verb hook bus.
    pub bus: hooks::HookBus,
}

impl A2a {
    /// Builds the runtime; per-org tool sets live at most `ttl`.
    pub fn new(config: A2aConfig, store: Store, ttl: Duration) -> Result<A2a, String> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(config.max_concurrent_per_peer.max(1))
            .connect_timeout(Duration::from_millis(config.card_timeout_ms.max(1)))
            .build()
            .map_err(|e| format!("cannot build the A2A HTTP client: {e}"))?;
        Ok(A2a {
            orgs: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(ttl)
                .build(),
            slots: Cache::builder().max_capacity(CACHE_CAPACITY).build(),
            literals: Cache::builder().max_capacity(16).build(),
            bus: hooks::HookBus::default(),
            client,
            store,
            config,
        })
    }

    /// Starts the shipped subscribers (task instances, audit, cost); needs
    /// a tokio runtime.
    pub fn start_subscribers(&self) {
        self.bus.subscribe(
            hooks::TaskInstances(self.store.clone()),
            hooks::QUEUE_CAPACITY,
        );
        self.bus.subscribe(
            hooks::AuditRecords(self.store.clone()),
            hooks::QUEUE_CAPACITY,
        );
        self.bus
            .subscribe(hooks::CostEvents(self.store.clone()), hooks::QUEUE_CAPACITY);
    }

    /// The org's A2A tool set (cached).
    pub async fn org(&self, org_id: &str) -> Result<Arc<OrgPeers>, StoreError> {
        if let Some(p) = self.orgs.get(org_id) {
            return Ok(p);
        }
        let org = org_id.to_string();
        let (rows, timeout) = self
            .store
            .read(move |c| Ok((registry::list(c, &org)?, registry::timeout_ms(c, &org)?)))
            .await?;
        let timeout = Duration::from_millis(timeout.unwrap_or(self.config.default_timeout_ms));
        let peers = Arc::new(OrgPeers::build(&rows, timeout));
        self.orgs.insert(org_id.to_string(), Arc::clone(&peers));
        Ok(peers)
    }

    /// Drops the org's cached tool set (after a registry change).
    pub fn invalidate(&self, org_id: &str) {
        self.orgs.invalidate(org_id);
    }

    /// Forgets every org's tool set.
    pub fn invalidate_all(&self) {
        self.orgs.invalidate_all();
    }

    /// The concurrency slots of one peer.
    pub fn slots(&self, target: &PeerTarget) -> Arc<Semaphore> {
        self.slots.get_with(target.card_id.clone(), || {
            Arc::new(Semaphore::new(self.config.max_concurrent_per_peer.max(1)))
        })
    }

    /// Every string literal and template-link id in `bundle`'s policies:
    /// the tool names a policy could single out (computed once per set).
    pub fn policy_literals(&self, bundle: &crate::policy::PolicyBundle) -> Arc<HashSet<String>> {
        self.literals
            .get_with(bundle.hash.clone(), || Arc::new(bundle.string_literals()))
    }

    /// Budget of one card fetch.
    pub fn card_timeout(&self) -> Duration {
        Duration::from_millis(self.config.card_timeout_ms.max(1))
    }
}

/// Refreshes every registered card every `refresh_interval_secs`, so a
/// peer that recovers is exposed again and one that goes away is hidden.
pub async fn refresh_loop(gw: Arc<crate::gateway::Gateway>) {
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
            if let Err(e) = admin::refresh_row(&gw, &row).await {
                tracing::warn!(agent = %row.id, error = %e, "A2A card refresh failed");
            }
        }
    }
}
