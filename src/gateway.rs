//! The shared state every request handler works with: configuration, the
//! store, the PEP, the tool catalog, and the caches that keep the hot path
//! off the database (keys, and per-session "views": tenant rows, tool list
//! and the parsed entity slice).
//!
//! Caches are invalidated as a whole on any admin change made through this
//! process; changes made by another process (the CLI) show within
//! `cache_ttl_secs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;

use crate::a2a::A2a;
use crate::auth::{self, PresentedKey};
use crate::config::Config;
use crate::identity::person::Person;
use crate::policy::entities::{self, EntitySlice};
use crate::policy::{Pep, PolicyBundle};
use crate::store::tenants::{self, ApiKey, SessionTenant};
use crate::store::{Store, StoreError};
use crate::tools::spec::echo;
use crate::tools::{Catalog, ToolAdapter};
use crate::upstream::Upstreams;

/// Most cached keys and session views.
const CACHE_CAPACITY: u64 = 100_000;

/// Everything decisions inside one session need, built once and cached.
#[derive(Debug)]
pub struct SessionView {
    /// Session, org, project, agent.
    pub tenant: SessionTenant,
    /// The key this view was built for (the `access_session` principal; a
    /// person's stand-in, [`Person::caller_id`], for a person's view, which
    /// every token of theirs shares: the request's own person is
    /// `Call::person`).
    pub key: ApiKey,
    /// Tools the org and project enable (before Cedar `view_tool`):
    /// built-in ones, then the org's A2A tools, then its upstream MCP
    /// servers' tools (one whose name is already taken is left out).
    pub tools: Vec<Arc<dyn ToolAdapter>>,
    /// Legacy aliases (A2A `a2a_<slug>_<skill>`) → canonical names.
    pub aliases: std::collections::HashMap<String, String>,
    /// The parsed entity slice.
    pub slice: EntitySlice,
    /// The last `tools/list` recorded for this session and key, which its
    /// repeats need not write again (`audit::repeated_listing`).
    pub listings: crate::audit::repeated_listing::ListingMemory,
}

impl SessionView {
    /// A tool of this session by canonical name or legacy alias.
    pub fn tool(&self, name: &str) -> Option<&Arc<dyn ToolAdapter>> {
        let name = self.aliases.get(name).map(String::as_str).unwrap_or(name);
        self.tools.iter().find(|t| t.spec().name == name)
    }
}

/// Why a request could not be tied to a session.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// No or malformed credential (401).
    #[error("{0}")]
    Credential(#[from] auth::CredentialError),
    /// Unknown or revoked key (401).
    #[error("unknown or revoked key")]
    UnknownKey,
    /// A key of the PDP role on an endpoint of daemon keys (403): it asks
    /// decision applications over the AuthZEN API, nothing else.
    #[error(
        "this key is a decision-point key: it may only ask its applications over the AuthZEN API"
    )]
    PdpKey,
    /// No such session (404).
    #[error("session `{}` not found", echo(.0))]
    NoSession(String),
    /// The key's org is not the session's org (403).
    #[error("this key's organization does not own session `{}`", echo(.0))]
    CrossOrg(String),
    /// The store failed (503/500).
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The entity slice could not be built (fail closed: 403).
    #[error("cannot build policy entities: {0}")]
    Entities(#[from] entities::EntitySliceError),
}

/// Why the gateway state could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The A2A HTTP client could not be built.
    #[error(transparent)]
    A2a(#[from] crate::a2a::A2aError),
    /// The upstream MCP HTTP client could not be built.
    #[error(transparent)]
    Upstream(#[from] crate::upstream::UpstreamError),
    /// The embeddings provider is misconfigured.
    #[error("graph embeddings: {0}")]
    Graph(#[from] crate::graph::GraphConfigError),
    /// `[auth]` is refused.
    #[error(transparent)]
    Auth(#[from] crate::identity::AuthConfigError),
    /// `[console.oidc]` is refused.
    #[error(transparent)]
    ConsoleSignIn(#[from] crate::console::oidc::config::OidcConfigError),
    /// `[telemetry]` (or an `OTEL_*` variable) is refused.
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::TelemetryError),
}

/// Shared gateway state.
#[derive(Debug)]
pub struct Gateway {
    /// Effective configuration.
    pub config: Config,
    /// Durable state.
    pub store: Store,
    /// Active policies.
    pub pep: Pep,
    /// Built-in tools.
    pub catalog: Catalog,
    /// Reload status, shadow evaluation and metrics.
    pub lifecycle: crate::lifecycle::Lifecycle,
    /// Trace export (off unless `[telemetry]` or `OTEL_*` name a collector).
    pub telemetry: crate::telemetry::Telemetry,
    /// The decision applications served over the AuthZEN API, each with
    /// its own active set.
    pub pdp: crate::pdp::Pdp,
    /// Knowledge graphs (in-memory views, write locks, embedder, extractor).
    pub graphs: Arc<crate::graph::Graphs>,
    /// Remote A2A peers: registry cache, bridge client, hook bus (shared
    /// with the A2A tool adapters of every session view).
    pub a2a: Arc<A2a>,
    /// Upstream MCP servers: registry cache, MCP client sessions (shared
    /// with the upstream tool adapters of every session view).
    pub upstreams: Arc<Upstreams>,
    /// Open streams of the HTTP+SSE transport.
    pub streams: crate::mcp::streams::Streams,
    /// MCP sessions a client terminated with `DELETE`.
    pub terminated: crate::mcp::terminated::Terminated,
    /// This instance among those sharing the database.
    pub cluster: crate::cluster::Cluster,
    /// Token buckets per key, agent and org; the usage counters.
    pub rate_limits: crate::rate_limits::RateLimits,
    /// Throttling of wrong admin and auditor tokens and daemon keys.
    pub guesses: crate::guesses::throttle::Throttle,
    /// Identity providers whose access tokens are accepted, and the tokens
    /// already validated.
    pub identities: crate::identity::Identities,
    /// The console's client at its identity provider and the sign-ins
    /// under way (`[console.oidc]`; none when unset).
    pub console_idp: Option<crate::console::oidc::relying_party::RelyingParty>,
    keys: Cache<String, Arc<(ApiKey, Vec<u8>)>>,
    /// A person's session id per (org, project, user), so their URL costs
    /// no query once their session is known.
    pub person_sessions: Cache<(String, String, String), String>,
    views: Cache<(String, String), Arc<SessionView>>,
    /// Protocol version each session negotiated at `initialize`, so a
    /// client that omits the header after initializing gets the right
    /// result shapes at once (the session row is updated too, for restarts).
    negotiated: Cache<String, Arc<str>>,
    /// Bumped whenever what a session may see can have changed (a policy
    /// reload, an admin change here or on another instance); 2026-07-28
    /// `subscriptions/listen` streams re-check their tool list on it.
    changes: tokio::sync::watch::Sender<u64>,
}

/// `[auth]` with its default resource: `public_url` when none is set.
fn auth_config(config: &Config) -> crate::identity::AuthConfig {
    let mut auth = config.auth.clone();
    if auth.resource.is_none() && config.public_url.is_some() {
        auth.resource = Some(config.base_url());
    }
    auth
}

/// The console's identity provider client, when `[console.oidc]` is set.
fn console_idp(
    config: &Config,
) -> Result<
    Option<crate::console::oidc::relying_party::RelyingParty>,
    crate::console::oidc::config::OidcConfigError,
> {
    let Some(oidc) = &config.console.oidc else {
        return Ok(None);
    };
    let party = crate::console::oidc::relying_party::RelyingParty::new(
        oidc,
        &config.auth,
        &config.base_url(),
    )?;
    Ok(Some(party))
}

impl Gateway {
    /// Assembles the state. Inside a tokio runtime it also starts the A2A
    /// hook subscribers.
    pub fn new(
        config: Config,
        store: Store,
        bundle: PolicyBundle,
        catalog: Catalog,
    ) -> Result<Self, GatewayError> {
        let ttl = Duration::from_secs(config.cache_ttl_secs.max(1));
        let a2a = Arc::new(A2a::new(config.a2a.clone(), store.clone(), ttl)?);
        let lifecycle = crate::lifecycle::Lifecycle::new(&catalog, store.writer().clone());
        let upstreams = Arc::new(Upstreams::new(
            store.clone(),
            ttl,
            &config.upstreams,
            lifecycle.metrics.upstreams.clone(),
        )?);
        let graphs = Arc::new(crate::graph::from_config(&config.graph)?);
        let telemetry =
            crate::telemetry::Telemetry::start(&config.telemetry, &lifecycle.metrics.traces)?;
        if tokio::runtime::Handle::try_current().is_ok() {
            a2a.start_subscribers();
        }
        let pep = Pep::new(bundle);
        pep.set_observer(lifecycle.observer());
        let pdp = crate::pdp::Pdp::new(
            &config.pdp_dir,
            Arc::clone(&lifecycle.metrics),
            store.writer().clone(),
        );
        Ok(Gateway {
            lifecycle,
            telemetry,
            pdp,
            keys: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(ttl)
                .build(),
            views: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(ttl)
                .build(),
            person_sessions: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(ttl)
                .build(),
            negotiated: Cache::builder().max_capacity(CACHE_CAPACITY).build(),
            changes: tokio::sync::watch::Sender::new(0),
            streams: crate::mcp::streams::Streams::new(config.sse.clone()),
            terminated: crate::mcp::terminated::Terminated::default(),
            cluster: crate::cluster::Cluster::default(),
            rate_limits: crate::rate_limits::RateLimits::new(
                config.rate_limits.clone(),
                store.clone(),
                ttl,
            ),
            guesses: crate::guesses::throttle::Throttle::new(&config.credential_guesses),
            identities: crate::identity::Identities::new(&auth_config(&config))?,
            console_idp: console_idp(&config)?,
            config,
            store,
            pep,
            catalog,
            graphs,
            a2a,
            upstreams,
        })
    }

    /// Drops every cached key and session view (after an admin change).
    pub fn invalidate_caches(&self) {
        self.keys.invalidate_all();
        self.views.invalidate_all();
        self.person_sessions.invalidate_all();
        self.announce_change();
    }

    /// Tells every listener that what a session may see can have changed.
    pub fn announce_change(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver of [`Gateway::announce_change`].
    pub fn watch_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Remembers the version a session negotiated.
    pub fn set_negotiated(&self, session_id: &str, version: &str) {
        self.negotiated
            .insert(session_id.to_string(), Arc::from(version));
    }

    /// The version a session negotiated, if this process or the store knows it.
    pub fn negotiated(&self, view: &SessionView) -> Option<String> {
        match self.negotiated.get(&view.tenant.session.id) {
            Some(v) => Some(v.to_string()),
            None => view.tenant.session.protocol_version.clone(),
        }
    }

    /// Finds and checks a presented key (constant-time secret comparison).
    pub async fn authenticate(&self, presented: &PresentedKey) -> Result<ApiKey, ResolveError> {
        let cached = self.keys.get(&presented.id);
        let entry = match cached {
            Some(e) => e,
            None => {
                let id = presented.id.clone();
                let found = self.store.read(move |c| tenants::find_key(c, &id)).await?;
                let Some(found) = found else {
                    return Err(ResolveError::UnknownKey);
                };
                let entry = Arc::new(found);
                self.keys.insert(presented.id.clone(), Arc::clone(&entry));
                entry
            }
        };
        if auth::secret_matches(&presented.secret, &entry.1) {
            Ok(entry.0.clone())
        } else {
            Err(ResolveError::UnknownKey)
        }
    }

    /// A daemon key, for the MCP endpoints and `POST /api/sessions`: a key
    /// of the PDP role is refused there.
    pub async fn authenticate_daemon(
        &self,
        presented: &PresentedKey,
    ) -> Result<ApiKey, ResolveError> {
        let key = self.authenticate(presented).await?;
        if !key.pdp_apps.is_empty() {
            return Err(ResolveError::PdpKey);
        }
        Ok(key)
    }

    /// The cached view of `session_id` for `key`, checking tenant isolation.
    pub async fn session_view(
        &self,
        session_id: &str,
        key: &ApiKey,
        bundle: &PolicyBundle,
    ) -> Result<Arc<SessionView>, ResolveError> {
        self.view_for(session_id, ViewCaller::Key(key), bundle)
            .await
    }

    /// The cached view of `session_id` for a person: the session must be of
    /// their org and opened for them.
    pub async fn person_view(
        &self,
        session_id: &str,
        person: &Arc<Person>,
        bundle: &PolicyBundle,
    ) -> Result<Arc<SessionView>, ResolveError> {
        self.view_for(session_id, ViewCaller::Person(person), bundle)
            .await
    }

    async fn view_for(
        &self,
        session_id: &str,
        caller: ViewCaller<'_>,
        bundle: &PolicyBundle,
    ) -> Result<Arc<SessionView>, ResolveError> {
        let cache_key = (session_id.to_string(), caller.cache_id());
        if let Some(view) = self.views.get(&cache_key)
            && view.slice.schema_hash == bundle.schema_hash
        {
            return Ok(view);
        }
        let sid = session_id.to_string();
        let tenant = self
            .store
            .read(move |c| tenants::load_session_tenant(c, &sid))
            .await?
            .ok_or_else(|| ResolveError::NoSession(session_id.to_string()))?;
        caller.check_isolation(&tenant)?;
        let (tools, aliases, remotes) = self.session_tools(&tenant).await?;
        let key = caller.key();
        let facts = session_facts(&tenant, &key);
        let mut call_facts = facts.call();
        if let ViewCaller::Person(person) = &caller {
            call_facts.user = Some(&person.user);
            call_facts.caller = entities::Caller::User(&person.user);
        }
        let slice = entities::session_slice_for_call(
            bundle,
            &call_facts,
            &remotes.tools,
            &remotes.peers,
            &remotes.servers,
        )
        .map_err(ResolveError::Entities)?;
        let view = Arc::new(SessionView {
            tenant,
            key,
            tools,
            aliases,
            slice,
            listings: Default::default(),
        });
        self.views.insert(cache_key, Arc::clone(&view));
        Ok(view)
    }

    /// The tools a session may see (built-in, its org's A2A peers', its
    /// org's upstream servers'), their aliases and the remote entities.
    async fn session_tools(
        &self,
        tenant: &SessionTenant,
    ) -> Result<(Vec<Arc<dyn ToolAdapter>>, HashMap<String, String>, Remotes), ResolveError> {
        let mut tools = self.catalog.for_session(tenant);
        let peers = self.a2a.org(&tenant.org.id).await?;
        tools.extend(crate::a2a::tool::adapters(&peers, &self.a2a));
        let servers = self.upstreams.org(&tenant.org.id).await?;
        for adapter in crate::upstream::adapter::adapters(&servers, &self.upstreams) {
            let name = &adapter.spec().name;
            if tools.iter().any(|t| &t.spec().name == name) || peers.aliases.contains_key(name) {
                tracing::warn!(tool = %name, "upstream tool name already taken in this session; left out");
                continue;
            }
            tools.push(adapter);
        }
        let remotes = Remotes {
            tools: tools.iter().map(|t| t.spec().entity()).collect(),
            peers: peers
                .peers
                .iter()
                .map(|p| entities::PeerEntity {
                    slug: p.slug.clone(),
                    url: p.base_url.clone(),
                    name: p.name.clone(),
                    org_id: p.org_id.clone(),
                })
                .collect(),
            servers: servers
                .healthy
                .iter()
                .map(|s| entities::McpServerEntity {
                    slug: s.slug.clone(),
                    url: s.url.clone(),
                    transport: s.transport.clone(),
                    org_id: s.org_id.clone(),
                })
                .collect(),
        };
        Ok((tools, peers.aliases.clone(), remotes))
    }
}

/// The tool, peer and server entities of a session's slice.
struct Remotes {
    tools: Vec<entities::ToolEntity>,
    peers: Vec<entities::PeerEntity>,
    servers: Vec<entities::McpServerEntity>,
}

/// Who a session view is built for.
enum ViewCaller<'a> {
    /// A daemon key.
    Key(&'a ApiKey),
    /// A person, by their access token.
    Person(&'a Arc<Person>),
}

impl ViewCaller<'_> {
    /// The caller's part of the view cache's key: the key id, or the
    /// person and every claim their entities hold.
    fn cache_id(&self) -> String {
        match self {
            ViewCaller::Key(key) => key.id.clone(),
            ViewCaller::Person(p) => p.view_key().to_string(),
        }
    }

    /// Tenant isolation: a key's org owns the session; a person's session
    /// is of their org and was opened for them.
    fn check_isolation(&self, tenant: &SessionTenant) -> Result<(), ResolveError> {
        let (org, own) = match self {
            ViewCaller::Key(key) => (key.org_id.as_str(), true),
            ViewCaller::Person(p) => {
                let own = tenant.session.user_id.as_deref() == Some(p.user.id());
                (p.org(), own)
            }
        };
        if tenant.session.org_id != org || !own {
            tracing::warn!(session = %tenant.session.id, caller_org = %org,
                "session access refused: not the caller's session");
            return Err(ResolveError::CrossOrg(tenant.session.id.clone()));
        }
        Ok(())
    }

    /// The key the view is kept for: the daemon key, or the person's
    /// stand-in for per-caller bookkeeping (streams, rate limits).
    fn key(&self) -> ApiKey {
        match self {
            ViewCaller::Key(key) => (*key).clone(),
            ViewCaller::Person(p) => stand_in_key(p),
        }
    }
}

/// A person's stand-in for per-caller bookkeeping (rate limits, streams,
/// cached views): an id no daemon key has ([`Person::caller_id`]), their
/// org, their name.
pub fn stand_in_key(person: &Person) -> ApiKey {
    ApiKey {
        id: person.caller_id().to_string(),
        org_id: person.org().to_string(),
        label: person.user.facts().name.clone(),
        created_at: String::new(),
        pdp_apps: Vec::new(),
    }
}

/// What the policy module needs of a loaded session and its key (it never
/// sees store rows).
pub fn session_facts<'a>(t: &'a SessionTenant, key: &'a ApiKey) -> entities::SessionFacts<'a> {
    entities::SessionFacts {
        session_id: &t.session.id,
        org: entities::OrgFacts {
            id: &t.org.id,
            plan: &t.org.plan,
            entitlements: &t.org.entitlements,
        },
        project: entities::ProjectFacts {
            org_id: &t.project.org_id,
            id: &t.project.id,
            memory_enabled: t.project.memory_enabled,
            graph_enabled: t.project.graph_enabled,
        },
        agent: entities::AgentFacts {
            org_id: &t.agent.org_id,
            id: &t.agent.id,
            name: &t.agent.name,
            roles: &t.agent.roles,
        },
        key: entities::KeyFacts {
            org_id: &key.org_id,
            id: &key.id,
            label: &key.label,
        },
    }
}
