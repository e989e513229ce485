//! Upstream MCP servers as tools: an org registers a server, the gateway
//! becomes its MCP client, and each of its tools is offered to the org's
//! sessions as `<serverSlug>.<toolName>`, decided by Cedar `call_tool`
//! like every other tool before a byte goes upstream.
//!
//! - [`registry`]: registered servers per org (stored rows, pinned tool
//!   definitions, health) and the per-org tool set built from them;
//! - [`client`]: the MCP client, one interface over two transports
//!   (Streamable HTTP, and HTTP+SSE in [`sse`]; what they share in
//!   [`wire`]);
//! - [`adapter`]: an upstream tool as a [`crate::tools::ToolAdapter`];
//! - [`admin`]: the operator API under `/admin/orgs/{org}/mcp-servers`.
//!
//! [`Upstreams`] is the runtime the gateway holds: the HTTP client, the
//! per-org tool sets in a moka cache (a register, delete or refresh
//! invalidates the org on every instance; a TTL bounds anything else), one
//! MCP session per upstream, and per-upstream concurrency slots.
//!
//! **Architecture Invariant:** nothing here asks Cedar; the `tools/call`
//! pipeline decides before [`adapter`] is reached, so a denied call sends
//! nothing upstream.

pub mod adapter;
pub mod admin;
pub mod client;
pub mod registry;
pub mod sse;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use serde_json::{Value, json};
use tokio::sync::{Mutex, Semaphore};

use crate::store::{Store, StoreError};
use client::{ClientError, Endpoint, Session, Transport};
use registry::{Listing, OrgUpstreams, PinnedTool, ServerTarget};

/// Most orgs whose tool sets are cached, and most upstreams with sessions.
const CACHE_CAPACITY: u64 = 10_000;

/// Most concurrent calls to one upstream; more wait (within their
/// timeout) for a free slot.
pub const MAX_CONCURRENT_PER_UPSTREAM: usize = 16;

/// Largest answer accepted from an upstream, in bytes.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// Budget of one call unless the registration sets `timeoutMs`.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// Longest `timeoutMs` accepted (10 minutes).
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// Most `tools/list` pages read from one upstream.
const MAX_LIST_PAGES: usize = 100;

/// Why the upstream runtime could not be built.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The outbound HTTP client could not be built.
    #[error("cannot build the upstream HTTP client: {0}")]
    Client(reqwest::Error),
}

/// The upstream runtime.
#[derive(Debug)]
pub struct Upstreams {
    store: Store,
    /// Outbound HTTP (connection pool shared by every upstream).
    pub http: reqwest::Client,
    orgs: Cache<String, Arc<OrgUpstreams>>,
    sessions: Cache<String, Arc<Mutex<Option<Session>>>>,
    slots: Cache<String, Arc<Semaphore>>,
}

impl Upstreams {
    /// Builds the runtime; per-org tool sets live at most `ttl`.
    pub fn new(store: Store, ttl: Duration) -> Result<Upstreams, UpstreamError> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(MAX_CONCURRENT_PER_UPSTREAM)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(UpstreamError::Client)?;
        Ok(Upstreams {
            store,
            http,
            orgs: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(ttl)
                .build(),
            sessions: Cache::builder().max_capacity(CACHE_CAPACITY).build(),
            slots: Cache::builder().max_capacity(CACHE_CAPACITY).build(),
        })
    }

    /// The org's upstream tool set (cached).
    pub async fn org(&self, org_id: &str) -> Result<Arc<OrgUpstreams>, StoreError> {
        if let Some(set) = self.orgs.get(org_id) {
            return Ok(set);
        }
        let org = org_id.to_string();
        let rows = self.store.read(move |c| registry::list(c, &org)).await?;
        let set = Arc::new(OrgUpstreams::build(&rows));
        self.orgs.insert(org_id.to_string(), Arc::clone(&set));
        Ok(set)
    }

    /// Drops the org's cached tool set (after a registry change).
    pub fn invalidate(&self, org_id: &str) {
        self.orgs.invalidate(org_id);
    }

    /// Forgets every org's tool set.
    pub fn invalidate_all(&self) {
        self.orgs.invalidate_all();
    }

    /// Forgets the session of a deleted upstream.
    pub fn forget(&self, server_id: &str) {
        self.sessions.invalidate(server_id);
        self.slots.invalidate(server_id);
    }

    /// Calls `tools/call` on the upstream within its slots and timeout,
    /// returning the upstream's result object.
    pub async fn call_tool(
        &self,
        target: &ServerTarget,
        name: &str,
        arguments: &Value,
    ) -> Result<Value, ClientError> {
        let params = json!({ "name": name, "arguments": arguments });
        let budget = target.timeout;
        let slots = self.slots.get_with(target.id.clone(), || {
            Arc::new(Semaphore::new(MAX_CONCURRENT_PER_UPSTREAM))
        });
        let run = async {
            let _permit = slots
                .acquire()
                .await
                .map_err(|_| ClientError::Transport("the upstream was removed".into()))?;
            self.request(target, "tools/call", params).await
        };
        tokio::time::timeout(budget, run)
            .await
            .map_err(|_| ClientError::Timeout(millis(budget)))?
    }

    /// One request in the upstream's session: initialized on first use,
    /// initialized again (once) when the upstream says it expired.
    async fn request(
        &self,
        target: &ServerTarget,
        method: &str,
        params: Value,
    ) -> Result<Value, ClientError> {
        let bearer = bearer(target)?;
        let ep = Endpoint {
            url: &target.endpoint,
            transport: transport(target),
            bearer: bearer.as_deref(),
            max_bytes: MAX_RESPONSE_BYTES,
        };
        let cell = self
            .sessions
            .get_with(target.id.clone(), || Arc::new(Mutex::new(None)));
        let session = self.session(&cell, ep, None).await?;
        match client::request(&self.http, ep, &session, method, params.clone()).await {
            Err(ClientError::Expired) => {
                tracing::info!(upstream = %target.slug, "upstream session expired; initializing again");
                let fresh = self.session(&cell, ep, Some(&session)).await?;
                client::request(&self.http, ep, &fresh, method, params).await
            }
            other => other,
        }
    }

    /// The session in `cell`, initializing one when there is none, when
    /// the one there is `expired`, or when its event stream ended (SSE: a
    /// new stream, a new session).
    async fn session(
        &self,
        cell: &Mutex<Option<Session>>,
        ep: Endpoint<'_>,
        expired: Option<&Session>,
    ) -> Result<Session, ClientError> {
        let mut guard = cell.lock().await;
        if let Some(s) = guard.as_ref()
            && Some(s) != expired
            && s.is_live()
        {
            return Ok(s.clone());
        }
        let fresh = client::initialize(&self.http, ep).await?;
        *guard = Some(fresh.clone());
        Ok(fresh)
    }

    /// Lists the upstream's tools in a fresh session (registration and
    /// refresh), every page, within the target's timeout.
    pub async fn list_tools(&self, target: &ServerTarget) -> Listing {
        let budget = target.timeout;
        match tokio::time::timeout(budget, self.list_inner(target)).await {
            Ok(Ok((tools, version))) => Listing::Listed {
                tools,
                protocol_version: version,
            },
            Ok(Err(ClientError::Invalid(e))) => Listing::Invalid(e),
            Ok(Err(e)) => Listing::Unreachable(e.to_string()),
            Err(_) => Listing::Unreachable(ClientError::Timeout(millis(budget)).to_string()),
        }
    }

    async fn list_inner(
        &self,
        target: &ServerTarget,
    ) -> Result<(Vec<PinnedTool>, String), ClientError> {
        let bearer = bearer(target)?;
        let ep = Endpoint {
            url: &target.endpoint,
            transport: transport(target),
            bearer: bearer.as_deref(),
            max_bytes: MAX_RESPONSE_BYTES,
        };
        let session = client::initialize(&self.http, ep).await?;
        let mut tools = Vec::new();
        let mut cursor: Option<Value> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let mut page = client::request(&self.http, ep, &session, "tools/list", params).await?;
            let Some(Value::Array(listed)) = page.get_mut("tools").map(Value::take) else {
                return Err(ClientError::Invalid(
                    "the upstream's tools/list result has no `tools` array".into(),
                ));
            };
            tools.extend(listed.into_iter().filter_map(PinnedTool::pin));
            cursor = page.get("nextCursor").filter(|c| !c.is_null()).cloned();
            if cursor.is_none() {
                break;
            }
        }
        // The listing session is not kept: calls open their own.
        Ok((tools, session.version))
    }
}

/// The upstream's credential, read now; one that cannot be read fails the
/// call before anything is sent.
fn bearer(target: &ServerTarget) -> Result<Option<String>, ClientError> {
    match &target.auth {
        None => Ok(None),
        Some(auth) => auth.resolve().map(Some).map_err(|e| {
            ClientError::Transport(format!(
                "cannot authenticate to upstream `{}`: {e}",
                target.slug
            ))
        }),
    }
}

/// The registered transport.
fn transport(target: &ServerTarget) -> Transport {
    if target.transport == registry::SSE {
        Transport::Sse
    } else {
        Transport::StreamableHttp
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
