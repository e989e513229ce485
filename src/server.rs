//! Assembly and lifecycle: load and validate policies (refusing to start on
//! an invalid set), open the store, build the router, serve until shutdown,
//! then drain in-flight requests and flush the decision trail.
//!
//! [`run`] takes a bound listener and a shutdown future, so tests bind
//! `127.0.0.1:0` and drive the real server.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::json;
use tokio::net::TcpListener;
use tower_http::trace::TraceLayer;

use crate::config::Config;
use crate::gateway::Gateway;
use crate::lifecycle::{CandidateError, load_candidate, tool_schemas};
use crate::policy::PolicyLoadError;
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
    /// The listener could not be bound or served.
    #[error("cannot serve on `{addr}`: {source}")]
    Io {
        /// Address.
        addr: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// Loads policies, opens the store and records the active policy set.
pub async fn prepare(config: Config) -> Result<Arc<Gateway>, StartError> {
    let catalog = Catalog::builtin()?;
    let (bundle, tests) = load_candidate(
        &config.schema_file,
        &config.policies_dir,
        &tool_schemas(&catalog),
    )?;
    for w in &bundle.warnings {
        tracing::warn!(warning = %w, "policy validation warning");
    }
    // Opening may talk to a database server with a blocking client.
    let (url, options) = (config.database_url(), config.store_options());
    let store = tokio::task::spawn_blocking(move || Store::open_url(&url, &options))
        .await
        .map_err(|e| StoreError::Task(e.to_string()))??;
    tracing::info!(hash = %bundle.hash, policies = bundle.policy_ids.len(), tests = tests.outcomes.len(), "policy set active");
    let gw = Arc::new(Gateway::new(config, store, bundle, catalog)?);
    // Record the policy set and register this instance now when the
    // database answers; otherwise the heartbeat does it once it does.
    if gw.store.is_migrated() {
        crate::cluster::membership::beat(&gw).await?;
    }
    gw.lifecycle
        .started(&gw.pep.current(), tests.outcomes.len());
    if let Some(dir) = &gw.config.lifecycle.shadow_policies_dir {
        gw.lifecycle
            .shadow
            .start(&gw.config.schema_file, dir, &gw.lifecycle.tools)
            .map_err(StartError::Shadow)?;
    }
    Ok(gw)
}

/// The full router.
pub fn app(gw: Arc<Gateway>) -> Router {
    let mut router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/sessions", post(crate::daemon::open_session))
        .merge(crate::mcp::router::routes())
        .route(crate::discovery::PATH, get(crate::discovery::well_known));
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
    router.layer(TraceLayer::new_for_http()).with_state(gw)
}

async fn metrics(State(gw): State<Arc<Gateway>>) -> impl IntoResponse {
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
        (Ok(_), Ok(())) => (
            StatusCode::OK,
            axum::Json(json!({ "status": "ready", "policyHash": gw.pep.current().hash })),
        ),
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

/// Serves on `listener` until `shutdown` resolves, then drains in-flight
/// requests and the hook subscribers, and flushes every queued write.
pub async fn run(
    listener: TcpListener,
    gw: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    if gw.config.admin_token.is_none() {
        tracing::warn!("CEDARGATE_ADMIN_TOKEN is not set: the admin API is not served");
    }
    let triggers = crate::lifecycle::watch::start(&gw);
    let refresher = tokio::spawn(crate::a2a::refresh::refresh_loop(Arc::clone(&gw)));
    let heartbeat = tokio::spawn(crate::cluster::membership::heartbeat_loop(Arc::downgrade(
        &gw,
    )));
    let changes = crate::cluster::coherence::start_listener(&gw);
    // Open SSE streams never end on their own: end them when shutdown
    // begins, or the drain would wait for them forever.
    let streams = gw.streams.clone();
    let shutdown = async move {
        shutdown.await;
        streams.close_all();
    };
    let served = axum::serve(listener, app(Arc::clone(&gw)))
        .with_graceful_shutdown(shutdown)
        .await;
    refresher.abort();
    heartbeat.abort();
    drop(changes);
    drop(triggers);
    // Hook subscribers hold events for a moment to batch their rows.
    if tokio::time::timeout(std::time::Duration::from_secs(5), gw.a2a.bus.drain())
        .await
        .is_err()
    {
        tracing::warn!("hook subscribers did not drain within 5 s");
    }
    if let Err(e) = gw.store.writer().flush().await {
        tracing::error!(error = %e, "final flush of the decision trail failed");
    }
    crate::cluster::membership::leave(&gw).await;
    served.map_err(|source| StartError::Io { addr, source })
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
