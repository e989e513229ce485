//! Remote A2A agents as MCP tools.
//!
//! - [`card`]: parsing agent cards (0.3 and 1.0 shapes) and tool naming;
//! - [`registry`]: registered peers per org (stored rows, card fetches,
//!   health) and the per-org tool set built from them;
//! - [`bridge`]: the outbound JSON-RPC call and result translation;
//! - [`hooks`]: the bounded in-process verb hook bus and its subscribers;
//! - [`refresh`]: refetching cards, on request and in the background;
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
pub mod refresh;
pub mod registry;
pub mod tool;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use tokio::sync::Semaphore;

use crate::config::A2aConfig;
use crate::store::{Store, StoreError};
use registry::{OrgPeers, PeerTarget};

pub use registry::MAX_TIMEOUT_MS;

/// Most orgs whose tool sets are cached, and most peers with slots.
const CACHE_CAPACITY: u64 = 10_000;

/// Why the A2A runtime could not be built.
#[derive(Debug, thiserror::Error)]
pub enum A2aError {
    /// The outbound HTTP client (TLS backend, pool) could not be built.
    #[error("cannot build the A2A HTTP client: {0}")]
    Client(reqwest::Error),
}

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
    pub fn new(config: A2aConfig, store: Store, ttl: Duration) -> Result<A2a, A2aError> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(config.max_concurrent_per_peer.max(1))
            .connect_timeout(Duration::from_millis(config.card_timeout_ms.max(1)))
            .build()
            .map_err(A2aError::Client)?;
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
