//! Upstream MCP servers as tools: an org registers a server, the gateway
//! becomes its MCP client, and each of its tools is offered to the org's
//! sessions as `<serverSlug>.<toolName>`, decided by Cedar `call_tool`
//! like every other tool before a byte goes upstream.
//!
//! - [`registry`]: registered servers per org (stored rows, pinned tool
//!   definitions, health) and the per-org tool set built from them;
//! - [`client`]: the MCP client, one interface over two transports
//!   (Streamable HTTP, and HTTP+SSE in [`sse`]; what they share in
//!   [`wire`]); a Streamable HTTP session's standing `GET` stream in
//!   [`standing`];
//! - [`stdio`]: the stdio transport, a child process per server declared
//!   in the config file ([`declared`]), stored in the registry by [`sync`];
//! - [`credentials`]: what an upstream is sent as its bearer token: read
//!   from where it is registered, or the gateway's own token obtained from
//!   an authorization server ([`oauth_token`]);
//! - [`adapter`]: an upstream tool as a [`crate::tools::ToolAdapter`];
//! - [`admin`]: the operator API under `/admin/orgs/{org}/mcp-servers`;
//! - [`refresh`]: listing again (operator, timer, `list_changed`), held
//!   changes recorded in the trail.
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
pub mod approval;
pub mod caps;
pub mod client;
pub mod credentials;
pub mod declared;
pub mod descriptor;
pub mod entries;
pub mod http;
pub mod input;
pub mod oauth_token;
pub mod own_address;
pub mod refresh;
pub mod registry;
pub mod sse;
pub mod standing;
pub mod stdio;
pub mod sync;
pub mod wire;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use serde_json::{Value, json};
use tokio::sync::{Mutex, Semaphore};

use crate::metrics::UpstreamMetrics;
use crate::store::{Store, StoreError};
use crate::tools::Relay;
use client::{ClientError, Endpoint, Outgoing, Session, Transport};
use declared::Declared;
use http::Http;
use oauth_token::TokenSource;
use registry::{Listing, OrgUpstreams, PinnedTool, ServerTarget};
use stdio::StdioServer;

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

/// Most `list_changed` announcements waiting to be handled; more are
/// dropped (the waiting ones already cause a listing, and the background
/// refresh catches the rest).
const LIST_CHANGED_QUEUE: usize = 1024;

/// Why the upstream runtime could not be built.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The outbound HTTP client could not be built.
    #[error("cannot build the upstream HTTP client: {0}")]
    Client(http::HttpError),
    /// A `[[upstreams]]` declaration is invalid.
    #[error("{0}")]
    Declared(String),
    /// The HTTP client of token requests could not be built.
    #[error("cannot build the HTTP client of upstream token requests: {0}")]
    Tokens(reqwest::Error),
}

/// The upstream runtime.
#[derive(Debug)]
pub struct Upstreams {
    store: Store,
    /// Outbound HTTP (connection pool shared by every upstream).
    pub http: Http,
    /// The gateway's own tokens for upstreams registered with an OAuth
    /// client.
    tokens: Arc<TokenSource>,
    orgs: Cache<String, Arc<OrgUpstreams>>,
    sessions: Cache<String, Arc<Mutex<Option<Session>>>>,
    slots: Cache<String, Arc<Semaphore>>,
    /// Ids of upstreams that announced a list change (`notifications/{tools,resources,prompts}/list_changed`)
    /// (read by [`refresh::list_changed_loop`]).
    list_changed: tokio::sync::mpsc::Sender<String>,
    list_changed_rx: std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<String>>>,
    /// The standing `GET` stream of each Streamable HTTP session, by row
    /// id (at most one per upstream; replaced with its session).
    standing: std::sync::Mutex<HashMap<String, standing::Standing>>,
    /// Stdio servers declared in this instance's config, by row id.
    declared: HashMap<String, Arc<Declared>>,
    /// Requests, latency and health per upstream.
    metrics: UpstreamMetrics,
}

impl Upstreams {
    /// Builds the runtime with the config's stdio declarations; per-org
    /// tool sets live at most `ttl`.
    pub fn new(
        store: Store,
        ttl: Duration,
        declared: &[crate::config::DeclaredUpstream],
        metrics: UpstreamMetrics,
    ) -> Result<Upstreams, UpstreamError> {
        let declared = declared::check(
            declared,
            MAX_RESPONSE_BYTES,
            DEFAULT_TIMEOUT_MS,
            MAX_TIMEOUT_MS,
        )
        .map_err(UpstreamError::Declared)?;
        let http = Http::new(MAX_CONCURRENT_PER_UPSTREAM, Duration::from_secs(10))
            .map_err(UpstreamError::Client)?;
        let tokens = Arc::new(TokenSource::new().map_err(UpstreamError::Tokens)?);
        let (list_changed, rx) = tokio::sync::mpsc::channel(LIST_CHANGED_QUEUE);
        for d in declared.values() {
            d.server.announce_to(&d.id, list_changed.clone());
        }
        Ok(Upstreams {
            standing: std::sync::Mutex::new(HashMap::new()),
            list_changed,
            list_changed_rx: std::sync::Mutex::new(Some(rx)),
            store,
            http,
            tokens,
            orgs: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(ttl)
                .build(),
            sessions: Cache::builder().max_capacity(CACHE_CAPACITY).build(),
            slots: Cache::builder().max_capacity(CACHE_CAPACITY).build(),
            declared,
            metrics,
        })
    }

    /// Every registered upstream (all orgs) as `(<org>/<slug>, health)`;
    /// a stdio server whose child is down here counts as unreachable. Also
    /// sets the `cedargate_upstream_healthy` gauges.
    pub async fn health(&self) -> Result<Vec<(String, String)>, StoreError> {
        let rows = self
            .store
            .read(crate::store::upstreams::list_health)
            .await?;
        let health: Vec<(String, String)> = rows
            .into_iter()
            .map(|(id, org, slug, health)| {
                let down = self
                    .stdio(&id)
                    .is_some_and(|s| s.status()["state"] == "down");
                let health = if down {
                    registry::health::UNREACHABLE.to_string()
                } else {
                    health
                };
                (format!("{org}/{slug}"), health)
            })
            .collect();
        let gauges: Vec<(String, bool)> = health
            .iter()
            .map(|(u, h)| (u.clone(), h == registry::health::HEALTHY))
            .collect();
        self.metrics.health(&gauges);
        Ok(health)
    }

    /// The stdio servers this instance's config declares.
    pub fn declared(&self) -> impl Iterator<Item = &Arc<Declared>> {
        self.declared.values()
    }

    /// The child of the declared stdio server with row id `id`.
    pub fn stdio(&self, id: &str) -> Option<&Arc<StdioServer>> {
        self.declared.get(id).map(|d| &d.server)
    }

    /// Stops every stdio child (gateway shutdown) and waits for their exit.
    pub async fn shutdown(&self) {
        for d in self.declared.values() {
            d.server.stop().await;
        }
    }

    /// The declared stdio server a stdio target names on this instance.
    fn stdio_for(&self, target: &ServerTarget) -> Result<&Arc<StdioServer>, ClientError> {
        self.stdio(&target.id).ok_or_else(|| {
            ClientError::Transport(format!(
                "the stdio server `{}` is not declared in this instance's config",
                target.slug
            ))
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

    /// Forgets the session (and token) of a deleted upstream.
    pub fn forget(&self, server_id: &str) {
        self.standing_streams().remove(server_id);
        self.sessions.invalidate(server_id);
        self.slots.invalidate(server_id);
        self.tokens.forget(server_id);
    }

    /// Calls `tools/call` on the upstream within its slots and timeout,
    /// returning the upstream's result object.
    pub async fn call_tool(
        &self,
        target: &ServerTarget,
        name: &str,
        arguments: &Value,
        schema: &Value,
        relay: &Relay,
    ) -> Result<Value, ClientError> {
        let params = json!({ "name": name, "arguments": arguments });
        let out = Outgoing {
            schema: Some(schema),
            relay: Some(relay),
        };
        self.forward(target, "tools/call", params, out).await
    }

    /// Sends one request of `method` to the upstream within its slots and
    /// timeout (the session opened on first use), returning its result.
    pub async fn forward(
        &self,
        target: &ServerTarget,
        method: &str,
        mut params: Value,
        out: Outgoing<'_>,
    ) -> Result<Value, ClientError> {
        let span = crate::telemetry::client_span(&crate::telemetry::ClientFacts::Mcp {
            method,
            target: params.get("name").and_then(Value::as_str),
            url: (target.transport != registry::STDIO).then_some(target.url.as_str()),
        });
        if let Some(span) = &span {
            span.inject_meta(&mut params);
        }
        let context = span.as_ref().map(|s| s.context().clone());
        let answer = crate::telemetry::scoped(
            context.as_ref(),
            self.forward_in_slot(target, method, params, out),
        )
        .await;
        if let Some(span) = &span {
            traced_answer(span, &answer);
        }
        answer
    }

    /// [`Upstreams::forward`] once traced: the slot, the timeout, the
    /// metrics.
    async fn forward_in_slot(
        &self,
        target: &ServerTarget,
        method: &str,
        params: Value,
        out: Outgoing<'_>,
    ) -> Result<Value, ClientError> {
        let budget = target.timeout;
        let slots = self.slots.get_with(target.id.clone(), || {
            Arc::new(Semaphore::new(MAX_CONCURRENT_PER_UPSTREAM))
        });
        let started = std::time::Instant::now();
        let run = async {
            let _permit = slots
                .acquire()
                .await
                .map_err(|_| ClientError::Transport("the upstream was removed".into()))?;
            self.request(target, method, params, out).await
        };
        let answer = tokio::time::timeout(budget, run)
            .await
            .map_err(|_| ClientError::Timeout(millis(budget)))
            .and_then(|r| r);
        let outcome = match &answer {
            Ok(result) if result.get("isError").and_then(Value::as_bool) == Some(true) => {
                "tool_error"
            }
            Ok(_) => "ok",
            Err(e) => e.class(),
        };
        let upstream = format!("{}/{}", target.org_id, target.slug);
        let seconds = started.elapsed().as_secs_f64();
        self.metrics.request(&upstream, method, outcome, seconds);
        answer
    }

    /// One request in the upstream's session: initialized on first use,
    /// initialized again (once) when the upstream says it expired.
    async fn request(
        &self,
        target: &ServerTarget,
        method: &str,
        params: Value,
        out: Outgoing<'_>,
    ) -> Result<Value, ClientError> {
        if target.transport == registry::STDIO {
            return self.stdio_for(target)?.request(method, params).await;
        }
        let bearer = self.bearer(target).await?;
        let ep = Endpoint {
            url: &target.endpoint,
            transport: transport(target),
            bearer: bearer.as_deref(),
            max_bytes: MAX_RESPONSE_BYTES,
        };
        let answer = self.in_session(target, ep, method, params, out).await;
        self.note_refusal(target, bearer.as_deref(), &answer);
        answer
    }

    /// The request in the upstream's session (see [`Upstreams::request`]).
    async fn in_session(
        &self,
        target: &ServerTarget,
        ep: Endpoint<'_>,
        method: &str,
        params: Value,
        out: Outgoing<'_>,
    ) -> Result<Value, ClientError> {
        let cell = self
            .sessions
            .get_with(target.id.clone(), || Arc::new(Mutex::new(None)));
        let session = self.session(&cell, ep, None, target).await?;
        match client::request(&self.http, ep, &session, method, params.clone(), out).await {
            Err(ClientError::Expired) => {
                tracing::info!(upstream = %target.slug, "upstream session expired; initializing again");
                let fresh = self.session(&cell, ep, Some(&session), target).await?;
                client::request(&self.http, ep, &fresh, method, params, out).await
            }
            other => other,
        }
    }

    /// The upstream's credential, read (or obtained) now; one that cannot
    /// be had fails the call before anything is sent upstream.
    async fn bearer(&self, target: &ServerTarget) -> Result<Option<String>, ClientError> {
        let Some(auth) = &target.auth else {
            return Ok(None);
        };
        let token = auth.token(&target.id, &self.tokens).await.map_err(|e| {
            ClientError::Transport(format!(
                "cannot authenticate to upstream `{}`: {e}",
                target.slug
            ))
        })?;
        Ok(Some(token))
    }

    /// An upstream answering 401 to the token it was sent may have that
    /// token replaced (`oauth_token.rs`, "Refused tokens").
    fn note_refusal<T>(
        &self,
        target: &ServerTarget,
        bearer: Option<&str>,
        answer: &Result<T, ClientError>,
    ) {
        if let (Err(ClientError::Status(401)), Some(auth), Some(token)) =
            (answer, &target.auth, bearer)
        {
            auth.rejected(&target.id, token, &self.tokens);
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
        target: &ServerTarget,
    ) -> Result<Session, ClientError> {
        let mut guard = cell.lock().await;
        if let Some(s) = guard.as_ref()
            && Some(s) != expired
            && s.is_live()
        {
            return Ok(s.clone());
        }
        let fresh = client::initialize(&self.http, ep).await?;
        self.watch_list_changed(&fresh, &target.id);
        self.open_standing(&fresh, target);
        *guard = Some(fresh.clone());
        Ok(fresh)
    }

    /// Opens the standing `GET` stream of a fresh Streamable HTTP session
    /// of a revision that has one, replacing (and so ending) the stream of
    /// the upstream's previous session.
    fn open_standing(&self, session: &Session, target: &ServerTarget) {
        let mut streams = self.standing_streams();
        streams.remove(&target.id);
        if transport(target) != Transport::StreamableHttp || !standing::offered_in(&session.version)
        {
            return;
        }
        let params = standing::Params {
            http: self.http.reqwest().clone(),
            url: target.endpoint.clone(),
            session_id: session.id.clone(),
            version: session.version.clone(),
            auth: target.auth.clone(),
            tokens: Arc::clone(&self.tokens),
            max_bytes: MAX_RESPONSE_BYTES,
            server_id: target.id.clone(),
            announce: self.list_changed.clone(),
        };
        streams.insert(target.id.clone(), standing::Standing::open(params));
    }

    fn standing_streams(&self) -> std::sync::MutexGuard<'_, HashMap<String, standing::Standing>> {
        self.standing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// While `session`'s stream is open, hands each of its
    /// a list change (`notifications/{tools,resources,prompts}/list_changed`) to the refresh (as the server id).
    fn watch_list_changed(&self, session: &Session, server_id: &str) {
        let Some(signal) = session.list_changed() else {
            return;
        };
        let (id, tx) = (server_id.to_string(), self.list_changed.clone());
        tokio::spawn(async move {
            while signal.next().await {
                if tx.try_send(id.clone()).is_err() && tx.is_closed() {
                    return;
                }
            }
        });
    }

    /// The announcements of `list_changed` (once: the refresh task takes them).
    pub fn take_list_changed(&self) -> Option<tokio::sync::mpsc::Receiver<String>> {
        self.list_changed_rx.lock().ok()?.take()
    }

    /// Lists the upstream's tools in a fresh session (registration and
    /// refresh), every page, within the target's timeout; pages stop being
    /// read once more than `max_tools` are held (the caps refuse such a
    /// listing, `caps.rs`).
    pub async fn list_tools(&self, target: &ServerTarget, max_tools: usize) -> Listing {
        let budget = target.timeout;
        match tokio::time::timeout(budget, self.list_inner(target, max_tools)).await {
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
        max_tools: usize,
    ) -> Result<(Vec<PinnedTool>, String), ClientError> {
        if target.transport == registry::STDIO {
            let server = self.stdio_for(target)?;
            let version = server.version().await?;
            let tools = list_pages(
                move |params| server.request("tools/list", params),
                max_tools,
            )
            .await?;
            return Ok((tools, version));
        }
        let bearer = self.bearer(target).await?;
        let ep = Endpoint {
            url: &target.endpoint,
            transport: transport(target),
            bearer: bearer.as_deref(),
            max_bytes: MAX_RESPONSE_BYTES,
        };
        let session = client::initialize(&self.http, ep).await;
        self.note_refusal(target, bearer.as_deref(), &session);
        let session = session?;
        let (http, open) = (&self.http, &session);
        let tools = list_pages(
            move |params| {
                client::request(http, ep, open, "tools/list", params, Outgoing::default())
            },
            max_tools,
        )
        .await?;
        // The listing session is not kept: calls open their own.
        Ok((tools, session.version))
    }
}

/// Every `tools/list` page (at most [`MAX_LIST_PAGES`]), pinned; no page
/// is read once more than `max_tools` are held.
async fn list_pages<F, Fut>(mut page: F, max_tools: usize) -> Result<Vec<PinnedTool>, ClientError>
where
    F: FnMut(Value) -> Fut,
    Fut: std::future::Future<Output = Result<Value, ClientError>>,
{
    let mut tools = Vec::new();
    let mut cursor: Option<Value> = None;
    for _ in 0..MAX_LIST_PAGES {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let mut listed_page = page(params).await?;
        let Some(Value::Array(listed)) = listed_page.get_mut("tools").map(Value::take) else {
            return Err(ClientError::Invalid(
                "the upstream's tools/list result has no `tools` array".into(),
            ));
        };
        tools.extend(listed.into_iter().filter_map(PinnedTool::pin));
        cursor = listed_page
            .get("nextCursor")
            .filter(|c| !c.is_null())
            .cloned();
        if cursor.is_none() || tools.len() > max_tools {
            break;
        }
    }
    Ok(tools)
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

/// What an upstream's answer puts on its client span.
fn traced_answer(span: &crate::telemetry::ClientSpan, answer: &Result<Value, ClientError>) {
    match answer {
        Ok(result) if result.get("isError").and_then(Value::as_bool) == Some(true) => {
            span.failed("tool_error", "tool_error");
        }
        Ok(_) => {}
        Err(ClientError::Remote { code, message, .. }) => span.remote_error(*code, message),
        Err(e) => span.failed(e.class(), &e.to_string()),
    }
}
