//! The real server under test, in-process on `127.0.0.1:0` with the
//! shipped `policies/` and `schemas/`, on whichever tokio runtime starts
//! it; the bench's client reaches it over loopback like any agent would.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use cedargate::config::Config;
use cedargate::gateway::Gateway;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{Res, repo};

/// A running gateway.
pub struct Server {
    /// The shared state, for in-process measurements and set-up.
    pub gw: Arc<Gateway>,
    pub addr: SocketAddr,
    /// Dropping it (or [`Server::stop`]) starts the graceful shutdown.
    stop: Option<oneshot::Sender<()>>,
    handle: JoinHandle<Result<(), String>>,
}

/// How [`Server::stop`] ended.
#[derive(Debug)]
pub enum Stopped {
    Cleanly,
    /// The server returned an error.
    Error(String),
    /// Its task failed.
    Failed(String),
}

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stopped::Cleanly => write!(f, "cleanly"),
            Stopped::Error(e) => write!(f, "with an error: {e}"),
            Stopped::Failed(e) => write!(f, "with a failed task: {e}"),
        }
    }
}

/// Starts a gateway keeping its data in `data_dir`, with a public URL of
/// its own address, no admin token and no demo tenant; `tweak` may change
/// the config before start-up.
pub async fn start(data_dir: PathBuf, tweak: impl FnOnce(&mut Config)) -> Res<Server> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut config = Config {
        listen: addr,
        public_url: Some(format!("http://{addr}")),
        data_dir,
        policies_dir: repo().join("policies"),
        schema_file: repo().join("schemas/gateway.cedarschema"),
        demo_tenant: false,
        admin_token: None,
        ..Config::default()
    };
    // The benches measure the request path at full speed from one key;
    // the rate limits would measure their own buckets instead.
    config.rate_limits.enabled = false;
    tweak(&mut config);
    let gw = cedargate::server::prepare(config)
        .await
        .map_err(|e| format!("gateway did not start: {e}"))?;
    let (tx, rx) = oneshot::channel::<()>();
    let served = Arc::clone(&gw);
    let handle = tokio::spawn(async move {
        cedargate::server::run(listener, served, async move {
            let _ = rx.await;
        })
        .await
        .map_err(|e| e.to_string())
    });
    Ok(Server {
        gw,
        addr,
        stop: Some(tx),
        handle,
    })
}

impl Server {
    /// `http://127.0.0.1:PORT`
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Shuts the server down (drain, final flush) and waits for it.
    pub async fn stop(mut self) -> Stopped {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match (&mut self.handle).await {
            Ok(Ok(())) => Stopped::Cleanly,
            Ok(Err(e)) => Stopped::Error(e),
            Err(e) => Stopped::Failed(e.to_string()),
        }
    }
}
