//! Assembly and lifecycle: load and validate policies (refusing to start on
//! an invalid set), open the store, build the router, serve until shutdown,
//! then drain in-flight requests for at most `http.shutdown_grace_secs`,
//! close what is left and flush the decision trail.
//!
//! [`run`] takes a bound listener and a shutdown future, so tests bind
//! `127.0.0.1:0` and drive the real server. Its accept loop caps open
//! connections ([`capacity`]) and serves each with the timeouts of
//! `[http]` ([`connection`]); request bodies are bounded in time by
//! admission on the MCP routes and by `tower-http` layers on the others.

mod capacity;
mod checkpointing;
mod connection;
mod headers;
mod maintenance;
mod unread_body;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower_http::timeout::{RequestBodyDeadlineLayer, RequestBodyTimeoutLayer};
use tower_http::trace::TraceLayer;

use capacity::Capacity;
use connection::{Hygiene, Phase};

use crate::config::Config;
use crate::gateway::Gateway;
use crate::lifecycle::{CandidateError, load_candidate, tool_schemas};
use crate::policy::PolicyLoadError;
use crate::policy::schema_gen::ToolSchema;
use crate::store::{Store, StoreError};
use crate::tools::Catalog;

/// Why the gateway refused to start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The policy set or schema is invalid, or its policy tests fail.
    #[error("{0}")]
    Policies(#[from] CandidateError),
    /// The shadow candidate directory is invalid.
    #[error("shadow policies: {}", .0.render())]
    Shadow(PolicyLoadError),
    /// The database could not be opened or migrated.
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    /// The built-in catalog does not compile.
    #[error("tool catalog: {0}")]
    Catalog(#[from] crate::tools::InvalidSchema),
    /// The A2A client or the embeddings provider could not be built.
    #[error("tool catalog: {0}")]
    Gateway(#[from] crate::gateway::GatewayError),
    /// The trail's checkpoint key cannot be read or created.
    #[error(transparent)]
    Checkpoint(#[from] crate::audit::checkpoint::KeyError),
    /// The admin or auditor token is too short, or they are equal.
    #[error("{0}")]
    Tokens(#[from] crate::auth::OperatorTokenError),
    /// `[console.oidc]` is misconfigured (or its client secret unset).
    #[error(transparent)]
    ConsoleSignIn(#[from] crate::console::oidc::config::OidcConfigError),
    /// `[audit]` retention is misconfigured.
    #[error("audit retention: {0}")]
    Retention(String),
    /// `[lifecycle] prove` cannot be honoured.
    #[error("policy proofs: {0}")]
    Prove(String),
    /// The policy files were refused by their start-up proof and the last
    /// active set cannot start either (`crate::lifecycle::startup`).
    #[error("policy proofs: {0}")]
    StartupProof(#[from] crate::lifecycle::startup::StartupProofError),
    /// The listener could not be bound or served.
    #[error("cannot serve on `{addr}`: {source}")]
    Io {
        /// Address.
        addr: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// Checks the admin and auditor tokens, loads policies, opens the store and
/// records the active policy set.
pub async fn prepare(config: Config) -> Result<Arc<Gateway>, StartError> {
    crate::auth::check_operator_tokens(
        config.admin_token.as_deref(),
        config.auditor_token.as_deref(),
    )?;
    maintenance::retention_enabled(&config.audit).map_err(StartError::Retention)?;
    if let Some(oidc) = &config.console.oidc {
        oidc.check(&config.base_url())?;
    }
    let catalog = Catalog::builtin()?;
    // Opening may talk to a database server with a blocking client.
    let (url, options) = (config.database_url(), config.store_options());
    let store = tokio::task::spawn_blocking(move || Store::open_url(&url, &options))
        .await
        .map_err(|e| StoreError::Task(e.to_string()))??;
    let upstream_tools = stored_upstream_tools(&store).await;
    let mut tools = tool_schemas(&catalog);
    tools.extend(upstream_tools.iter().cloned());
    let (bundle, tests) = load_candidate(&config.schema_file, &config.policies_dir, &tools)?;
    for w in &bundle.warnings {
        tracing::warn!(warning = %w, "policy validation warning");
    }
    tracing::info!(hash = %bundle.hash, policies = bundle.policy_ids.len(), tests = tests.outcomes.len(), "policy files loaded");
    let solver = note_solver(&config.prove).await;
    if config.lifecycle.prove == crate::config::ProveMode::RefuseWidening && solver.is_none() {
        return Err(StartError::Prove(
            "`[lifecycle] prove = \"refuse-widening\"` needs the SMT solver (`bash solver/build.sh`, or `[prove] solver`)".into(),
        ));
    }
    let (bundle, started) = crate::lifecycle::startup::decide(
        &config,
        &store,
        solver.as_ref(),
        bundle,
        tests.outcomes.len(),
    )
    .await?;
    let gw = Arc::new(Gateway::new(config, store, bundle, catalog)?);
    if let Some(solver) = solver {
        gw.lifecycle.set_solver(solver);
    }
    gw.lifecycle.set_upstream_tools(upstream_tools);
    // Record the policy set and register this instance now when the
    // database answers; otherwise the heartbeat does it once it does.
    if gw.store.is_migrated() {
        crate::cluster::membership::beat(&gw).await?;
    }
    started.note(&gw);
    // The decision applications load after the gateway's set, each on its
    // own: one that fails is reported, never a reason not to start.
    crate::pdp::lifecycle::reload_all(&gw, "startup").await;
    if let Some(dir) = &gw.config.lifecycle.shadow_policies_dir {
        gw.lifecycle
            .shadow
            .start(&gw.config.schema_file, dir, &gw.lifecycle.tools())
            .map_err(StartError::Shadow)?;
    }
    Ok(gw)
}

/// Says once whether policy proofs can run on this machine, and returns
/// the solver reloads are proved with (`[lifecycle] prove`). Nothing the
/// gateway serves depends on it: proofs are off the request path.
async fn note_solver(prove: &crate::config::ProveConfig) -> Option<crate::policy::solver::Solver> {
    let query = std::time::Duration::from_millis(prove.query_timeout_ms);
    match crate::policy::solver::find(prove.solver.as_deref(), query).await {
        Ok(s) => {
            tracing::info!(solver = %s.path.display(), version = %s.version, "policy proofs available");
            Some(s)
        }
        Err(e) => {
            tracing::info!(reason = %e, "policy proofs unavailable; the gateway runs without them");
            None
        }
    }
}

/// The upstream tools typed from the stored pins, read before the first
/// set is loaded; none while the database is not migrated yet (the
/// rebuild task types them once it is).
async fn stored_upstream_tools(store: &Store) -> Vec<ToolSchema> {
    if !store.is_migrated() {
        return Vec::new();
    }
    match store
        .read(crate::lifecycle::upstream_types::typed_upstream_tools)
        .await
    {
        Ok((tools, notes)) => {
            for note in notes {
                tracing::warn!(note = %note, "upstream tool left untyped");
            }
            tools
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the upstream tool definitions at start-up");
            Vec::new()
        }
    }
}

/// The full router.
pub fn app(gw: Arc<Gateway>) -> Router {
    let mut router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route(
            "/api/sessions",
            post(crate::daemon::open_session).route_layer(axum::middleware::from_fn_with_state(
                Arc::clone(&gw),
                crate::guesses::daemon_keys,
            )),
        )
        .route(crate::discovery::PATH, get(crate::discovery::well_known))
        .route(
            crate::mcp::resource_metadata::PATH,
            get(crate::mcp::resource_metadata::root),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*path}",
            get(crate::mcp::resource_metadata::endpoint),
        );
    if gw.config.lifecycle.metrics {
        router = router.route("/metrics", get(metrics));
    }
    if gw
        .config
        .admin_token
        .as_deref()
        .is_some_and(|t| !t.is_empty())
    {
        router = router.nest("/admin", crate::admin::routes(Arc::clone(&gw)));
    }
    if crate::console::enabled(&gw.config) {
        router = router
            .nest(crate::console::PATH, crate::console::routes(&gw.config))
            .route(
                "/console/",
                get(|| async { axum::response::Redirect::permanent(crate::console::PATH) }),
            );
    }
    // The AuthZEN routes: wrong daemon keys throttled, `X-Request-ID`
    // echoed on every answer.
    router = router.merge(
        crate::pdp::routes::routes()
            .route_layer(axum::middleware::from_fn_with_state(
                Arc::clone(&gw),
                crate::guesses::daemon_keys,
            ))
            .layer(axum::middleware::from_fn(
                crate::pdp::routes::echo_request_id,
            )),
    );
    // The MCP routes time their bodies in admission, which answers 400 or
    // 408 with a JSON-RPC error; these routes get the same bounds from
    // layers (a body over them fails to buffer: 400).
    let http = &gw.config.http;
    router
        .layer(RequestBodyTimeoutLayer::new(Duration::from_millis(
            http.body_stall_timeout_ms,
        )))
        .layer(RequestBodyDeadlineLayer::new(Duration::from_millis(
            http.body_read_timeout_ms,
        )))
        // Wrong daemon keys are throttled before anything else is read.
        .merge(
            crate::mcp::router::routes().route_layer(axum::middleware::from_fn_with_state(
                Arc::clone(&gw),
                crate::guesses::daemon_keys,
            )),
        )
        .layer(axum::middleware::from_fn(headers::secure))
        .layer(axum::middleware::from_fn(unread_body::close_if_unread))
        .layer(TraceLayer::new_for_http())
        .with_state(gw)
}

async fn metrics(State(gw): State<Arc<Gateway>>) -> impl IntoResponse {
    gw.lifecycle.metrics.disk_space(gw.store.space().status());
    if let Err(e) = gw.upstreams.health().await {
        tracing::warn!(error = %e, "cannot read upstream health for the metrics");
    }
    gw.lifecycle
        .metrics
        .write_queue(&gw.store.writer().levels());
    gw.lifecycle.metrics.read_queue(gw.store.read_queue());
    match gw.store.read(crate::store::a2a_hooks::peer_load).await {
        Ok(load) => gw.lifecycle.metrics.a2a_peers(&load),
        Err(e) => tracing::warn!(error = %e, "cannot read the A2A peers' load for the metrics"),
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::CONTENT_TYPE,
        )],
        gw.lifecycle.metrics.render(),
    )
}

async fn healthz() -> impl IntoResponse {
    axum::Json(json!({ "status": "ok" }))
}

/// `/readyz`'s `policySet` when the latest reload applied (or left
/// unchanged) the set on disk.
const POLICY_SET_CURRENT: &str = "current";

/// `/readyz`'s `policySet` when the latest reload was refused: the gateway
/// stays ready (the last good set decides) but serves a set older than
/// the one on disk; `policyReloadRejected` says why.
const POLICY_SET_STALE: &str = "stale: the latest reload was refused; the last good set is active";

/// Most unhealthy upstreams named in `/readyz`.
const READY_UPSTREAMS_LISTED: usize = 20;

async fn readyz(State(gw): State<Arc<Gateway>>) -> impl IntoResponse {
    if !gw.cluster.is_ready() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({
                "status": "not ready",
                "reason": "waiting for the database (migrations, policy set, instance registration)",
            })),
        );
    }
    let db = gw.store.ping().await;
    let writer = gw.store.writer().flush().await;
    match (db, writer) {
        (Ok(_), Ok(())) => (StatusCode::OK, axum::Json(ready_body(&gw).await)),
        (db, writer) => {
            let reason = db
                .err()
                .map(|e| e.to_string())
                .or_else(|| writer.err().map(|e| e.to_string()));
            (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(json!({ "status": "not ready", "reason": reason })),
            )
        }
    }
}

/// The ready answer: the policy hash, whether the active set is the one
/// on disk (`policySet`; a refused latest reload in
/// `policyReloadRejected`, the last good set still serving), how many
/// warnings it loaded with, and the upstream MCP servers' health (detail
/// only: an upstream that is down does not make the gateway unready, its
/// tools are just not offered).
async fn ready_body(gw: &Gateway) -> serde_json::Value {
    let mut body = json!({ "status": "ready", "policyHash": gw.pep.current().hash });
    if let Ok(health) = gw.upstreams.health().await
        && !health.is_empty()
    {
        let mut counts = serde_json::Map::new();
        for (_, h) in &health {
            let n = counts
                .get(h)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            counts.insert(h.clone(), (n + 1).into());
        }
        let unhealthy: Vec<&String> = health
            .iter()
            .filter(|(_, h)| h != crate::upstream::registry::health::HEALTHY)
            .map(|(u, _)| u)
            .take(READY_UPSTREAMS_LISTED)
            .collect();
        body["upstreams"] =
            json!({ "count": health.len(), "byHealth": counts, "unhealthy": unhealthy });
    }
    let status = gw.lifecycle.status();
    let warnings = gw.pep.current().warnings.len();
    if warnings > 0 {
        body["policyWarnings"] = warnings.into();
    }
    body["policySet"] = POLICY_SET_CURRENT.into();
    if let Some(last) = status
        .last_attempt
        .filter(|a| a.result == "rejected" || a.result == "refused")
    {
        body["policySet"] = POLICY_SET_STALE.into();
        body["policyReloadRejected"] = json!({
            "at": last.at,
            "trigger": last.trigger,
            "message": last.message,
            "diagnostics": last.diagnostics,
        });
    }
    body
}

/// Serves on `listener` until `shutdown` resolves, then stops accepting,
/// lets in-flight requests finish for at most `http.shutdown_grace_secs`,
/// closes the connections still open (slow clients included), drains the
/// hook subscribers, flushes every queued write, signs the trail's head
/// (a checkpoint, as it does every `checkpoints.interval_secs`) and
/// checkpoints the WAL.
/// Meanwhile it keeps the disk-space guard fresh and, when `[audit]` asks,
/// archives the trail periodically ([`maintenance`]).
pub async fn run(
    listener: TcpListener,
    gw: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    if gw.config.admin_token.is_none() {
        tracing::warn!("CEDARGATE_ADMIN_TOKEN is not set: the admin API is not served");
    }
    let key = Arc::new(crate::audit::checkpoint::CheckpointKey::load_or_create(
        &gw.config,
    )?);
    let checkpoints = tokio::spawn(checkpointing::checkpoint_loop(
        Arc::downgrade(&gw),
        Arc::clone(&key),
    ));
    let triggers = crate::lifecycle::watch::start(&gw);
    let pdp_triggers = crate::pdp::watch::start(&gw);
    let refresher = tokio::spawn(crate::a2a::refresh::refresh_loop(Arc::clone(&gw)));
    let upstream_types = crate::lifecycle::upstream_types::start(&gw);
    let upstream_refresh = tokio::spawn(crate::upstream::refresh::refresh_loop(Arc::clone(&gw)));
    let list_changed = tokio::spawn(crate::upstream::refresh::list_changed_loop(Arc::clone(&gw)));
    let declared = tokio::spawn(crate::upstream::sync::sync_loop(Arc::downgrade(&gw)));
    let heartbeat = tokio::spawn(crate::cluster::membership::heartbeat_loop(Arc::downgrade(
        &gw,
    )));
    let changes = crate::cluster::coherence::start_listener(&gw);
    let space = tokio::spawn(maintenance::space_loop(Arc::downgrade(&gw)));
    let retention = (gw.config.audit.retention_days > 0).then(|| {
        tokio::spawn(maintenance::retention_loop(
            Arc::downgrade(&gw),
            Arc::clone(&key),
        ))
    });
    let telemetry = tokio::spawn(maintenance::telemetry_loop(Arc::downgrade(&gw)));
    let http = &gw.config.http;
    let capacity = Capacity::new(http.max_connections, http.max_connections_per_ip);
    let (phase, phase_rx) = watch::channel(Phase::Serving);
    let accepting = Accepting {
        app: app(Arc::clone(&gw)),
        hygiene: Hygiene {
            header_read_timeout: Duration::from_millis(http.header_read_timeout_ms),
            idle_timeout: Duration::from_millis(http.idle_timeout_ms),
        },
        nodelay: http.tcp_nodelay,
        capacity: Arc::clone(&capacity),
        phase: phase_rx,
    };
    accept_until(listener, &accepting, shutdown).await;
    drop(accepting);
    // Open SSE streams never end on their own: end them now, or the drain
    // would wait for them until the deadline.
    gw.streams.close_all();
    drain(
        &capacity,
        &phase,
        Duration::from_secs(http.shutdown_grace_secs),
    )
    .await;
    refresher.abort();
    upstream_types.abort();
    upstream_refresh.abort();
    list_changed.abort();
    declared.abort();
    heartbeat.abort();
    // Stdio upstream children end with the gateway, their exit collected.
    gw.upstreams.shutdown().await;
    space.abort();
    telemetry.abort();
    if let Some(retention) = retention {
        // An archive in progress finishes on its blocking thread; it holds
        // the lease until then.
        retention.abort();
    }
    drop(changes);
    drop(triggers);
    drop(pdp_triggers);
    // Hook subscribers hold events for a moment to batch their rows.
    if tokio::time::timeout(Duration::from_secs(5), gw.a2a.bus.drain())
        .await
        .is_err()
    {
        tracing::warn!("hook subscribers did not drain within 5 s");
    }
    if let Err(e) = gw.store.writer().flush().await {
        tracing::error!(error = %e, "final flush of the decision trail failed");
    }
    checkpoints.abort();
    checkpointing::sign(&gw, &key, crate::audit::checkpoint::Kind::Stop).await;
    // Leave the WAL empty behind a clean stop (SQLite).
    if let Err(e) = gw.store.checkpoint().await {
        tracing::warn!(error = %e, "final WAL checkpoint failed");
    }
    crate::cluster::membership::leave(&gw).await;
    // The last spans leave (a few seconds at most, off the workers).
    let telemetry = gw.telemetry.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || telemetry.shutdown()).await {
        tracing::warn!(error = %e, "stopping trace export failed");
    }
    Ok(())
}

/// What the accept loop hands each connection.
struct Accepting {
    app: Router,
    hygiene: Hygiene,
    nodelay: bool,
    capacity: Arc<Capacity>,
    phase: watch::Receiver<Phase>,
}

/// Accepts connections until `shutdown` resolves, then drops the listener
/// (new connections are refused by the kernel from then on).
async fn accept_until(
    listener: TcpListener,
    accepting: &Accepting,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => admit(stream, peer, accepting),
            Err(e) => accept_failed(e).await,
        }
    }
}

/// Serves one accepted connection, or closes it at once when it is over a
/// connection cap.
fn admit(stream: TcpStream, peer: SocketAddr, accepting: &Accepting) {
    let slot = match accepting.capacity.admit(peer.ip()) {
        Ok(slot) => slot,
        Err(refused) => {
            tracing::debug!(peer = %peer, reason = %refused, "connection refused");
            return;
        }
    };
    if accepting.nodelay
        && let Err(e) = stream.set_nodelay(true)
    {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
    tokio::spawn(connection::serve(
        stream,
        peer,
        accepting.app.clone(),
        accepting.hygiene,
        accepting.phase.clone(),
        slot,
    ));
}

/// An accept error. A connection that failed before it was accepted is
/// nothing to wait for; anything else (out of file descriptors, above all)
/// is retried after a pause rather than in a busy loop.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 100 ms");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Asks every connection to finish its request and close, waits for them
/// for at most `grace`, then closes those still open.
async fn drain(capacity: &Capacity, phase: &watch::Sender<Phase>, grace: Duration) {
    phase.send_replace(Phase::Draining);
    if tokio::time::timeout(grace, capacity.all_closed())
        .await
        .is_ok()
    {
        return;
    }
    tracing::warn!(
        open = capacity.open(),
        grace_secs = grace.as_secs(),
        "closing the connections still open after the shutdown grace period"
    );
    phase.send_replace(Phase::Closing);
    // Each connection drops as soon as its task runs again.
    if tokio::time::timeout(Duration::from_secs(1), capacity.all_closed())
        .await
        .is_err()
    {
        tracing::warn!(open = capacity.open(), "connections did not close");
    }
}

/// SIGINT and SIGTERM handlers, installed before the gateway announces
/// itself so a signal sent right after start-up is never fatal.
#[derive(Debug)]
pub struct ShutdownSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Installs the handlers.
    pub fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(ShutdownSignals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(ShutdownSignals {})
    }

    /// Resolves on the first SIGINT or SIGTERM.
    pub async fn wait(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {},
            _ = self.terminate.recv() => {},
        }
        #[cfg(not(unix))]
        {
            let _ = &mut self;
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutting down: draining in-flight requests");
    }
}
