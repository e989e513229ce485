//! One accepted connection, served until it ends, falls silent, or the
//! server's shutdown reaches it.
//!
//! - HTTP/1.1 only. hyper's header-read timer watches HTTP/1 connections
//!   from the moment they wait for a request; its HTTP/2 (h2c prior
//!   knowledge, which `axum::serve` used to accept) has no such timer and
//!   MCP clients speak HTTP/1.1, so HTTP/2 belongs to a TLS proxy in front.
//! - A connection silent both ways for `http.idle_timeout_ms` is asked to
//!   close: hyper closes it at once when it is between requests, after the
//!   response otherwise. Bytes are counted at the socket, so an SSE stream
//!   that sends keep-alive comments is never silent.
//! - On [`Phase::Draining`] the connection finishes its request and closes;
//!   on [`Phase::Closing`] (the shutdown deadline) it is dropped, whatever
//!   it was doing.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Extension};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tower::Layer;

use super::capacity::Slot;

/// What the server asks of its open connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Serve requests.
    Serving,
    /// Shutdown began: finish the request in progress, then close.
    Draining,
    /// The grace period is over: close now.
    Closing,
}

/// How each connection is served (from `[http]`).
#[derive(Debug, Clone, Copy)]
pub struct Hygiene {
    /// Headers of a request complete within this of waiting for it.
    pub header_read_timeout: Duration,
    /// Silent both ways this long: close.
    pub idle_timeout: Duration,
}

/// Serves `stream` with `app` until the connection ends; `slot` holds its
/// place under the connection caps until then. Every request carries the
/// peer's address as `ConnectInfo<SocketAddr>` (`crate::guesses` counts
/// wrong credentials by it).
pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    hygiene: Hygiene,
    mut phase: watch::Receiver<Phase>,
    slot: Slot,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        io: stream,
        activity: Arc::clone(&activity),
    });
    let mut builder = Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(hygiene.header_read_timeout);
    let app = Extension(ConnectInfo(peer)).layer(app);
    let conn = builder.serve_connection(io, TowerToHyperService::new(app));
    tokio::pin!(conn);
    let mut closing = *phase.borrow_and_update() != Phase::Serving;
    if closing {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        let silent_for = activity.silent_for();
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            changed = phase.changed() => match changed.map(|()| *phase.borrow_and_update()) {
                Ok(Phase::Serving) => {}
                Ok(Phase::Draining) => {
                    if !closing {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
                Ok(Phase::Closing) | Err(_) => break,
            },
            () = tokio::time::sleep(hygiene.idle_timeout.saturating_sub(silent_for)), if !closing => {
                if activity.silent_for() >= hygiene.idle_timeout {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
    drop(slot);
}

/// When bytes last moved on a connection.
#[derive(Debug)]
struct Activity {
    epoch: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(now, Ordering::Relaxed);
    }

    fn silent_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }
}

/// A socket that notes every byte moved in [`Activity`].
#[derive(Debug)]
struct Watched {
    io: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.note_written(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.note_written(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl Watched {
    fn note_written(&self, polled: &Poll<io::Result<usize>>) {
        if matches!(polled, Poll::Ready(Ok(n)) if *n > 0) {
            self.activity.touch();
        }
    }
}
