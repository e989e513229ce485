//! Sections 2-4 of the gateway bench: load over loopback HTTP. `conc`
//! workers share one request counter and each keeps one connection (the
//! raw client) or one pooled client (`reqwest`); a run ends after a number
//! of requests or a time window, whichever comes first. Also the router
//! called in-process, to tell the handler's cost from the socket's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use cedargate::gateway::Gateway;
use serde_json::Value;
use tokio::runtime::Runtime;
use tower::ServiceExt;

use crate::report::{Goal, Row, thousands};
use crate::support::Res;
use crate::support::http::RawConn;
use crate::support::procfs::CpuWindow;
use crate::support::stats::Stats;
use crate::{THREADS, stats};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    Reqwest,
    Raw,
}

impl ClientKind {
    pub fn name(self) -> &'static str {
        match self {
            ClientKind::Reqwest => "reqwest",
            ClientKind::Raw => "raw",
        }
    }
}

pub type BodyFn = Arc<dyn Fn(u64) -> Vec<u8> + Send + Sync>;

/// One kind of request: `GET path` when `body` is `None`, else an MCP POST.
pub struct Spec {
    pub addr: SocketAddr,
    pub path: String,
    pub url: String,
    pub auth: String,
    pub body: Option<BodyFn>,
    /// A successful answer contains this.
    pub expect: &'static [u8],
    pub http: reqwest::Client,
}

pub fn mcp_spec(base: &Spec, body: BodyFn) -> Arc<Spec> {
    Arc::new(Spec {
        addr: base.addr,
        path: base.path.clone(),
        url: base.url.clone(),
        auth: base.auth.clone(),
        body: Some(body),
        expect: b"\"result\"",
        http: base.http.clone(),
    })
}

#[derive(Debug, Clone, Copy)]
struct Stop {
    requests: u64,
    at_most: Duration,
}

#[derive(Debug, Default)]
struct Load {
    lat: Vec<Duration>,
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    wall: Duration,
}

/// What one raw connection may read at once.
const READ_CHUNK: usize = 16 * 1024;

/// A raw keep-alive connection sending `s`'s request.
async fn connect(s: &Spec) -> std::io::Result<RawConn> {
    if s.body.is_none() {
        return RawConn::get(s.addr, &s.path, READ_CHUNK).await;
    }
    let headers = [
        ("authorization", s.auth.as_str()),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", cedargate::mcp::protocol::LATEST),
    ];
    RawConn::post(s.addr, &s.path, &headers, READ_CHUNK).await
}

async fn send_reqwest(s: &Spec, body: Option<Vec<u8>>) -> Result<(u16, Vec<u8>), String> {
    let req = match body {
        Some(body) => s
            .http
            .post(&s.url)
            .header("authorization", &s.auth)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", cedargate::mcp::protocol::LATEST)
            .body(body),
        None => s.http.get(&s.url),
    };
    let resp = req.send().await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.map_err(|e| e.to_string())?;
    Ok((status, bytes.to_vec()))
}

async fn worker(
    s: Arc<Spec>,
    kind: ClientKind,
    counter: Arc<AtomicU64>,
    stop: Stop,
    deadline: Instant,
) -> Load {
    let mut out = Load::default();
    let mut conn: Option<RawConn> = None;
    loop {
        if Instant::now() >= deadline {
            break;
        }
        let i = counter.fetch_add(1, Ordering::Relaxed);
        if i >= stop.requests {
            break;
        }
        let body = s.body.as_ref().map(|f| f(i));
        let t0 = Instant::now();
        let res = match kind {
            ClientKind::Reqwest => send_reqwest(&s, body).await,
            ClientKind::Raw => {
                if conn.is_none() {
                    conn = connect(&s).await.ok();
                }
                match conn.as_mut() {
                    Some(c) => match c.send(body.as_deref()).await {
                        Ok(r) => Ok(r),
                        Err(e) => {
                            conn = None;
                            Err(e.to_string())
                        }
                    },
                    None => Err("cannot connect".to_string()),
                }
            }
        };
        let dt = t0.elapsed();
        match res {
            Ok((200, body)) if body.windows(s.expect.len()).any(|w| w == s.expect) => {
                out.ok += 1;
                out.lat.push(dt);
            }
            Ok((status, body)) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| {
                    format!("HTTP {status}: {}", String::from_utf8_lossy(&body))
                });
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert(e);
            }
        }
    }
    out
}

async fn load(s: Arc<Spec>, kind: ClientKind, conc: usize, stop: Stop) -> Load {
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + stop.at_most;
    let handles: Vec<_> = (0..conc)
        .map(|_| {
            tokio::spawn(worker(
                Arc::clone(&s),
                kind,
                Arc::clone(&counter),
                stop,
                deadline,
            ))
        })
        .collect();
    let mut total = Load::default();
    for h in handles {
        match h.await {
            Ok(mut w) => {
                total.lat.append(&mut w.lat);
                total.ok += w.ok;
                total.errors += w.errors;
                if total.first_error.is_none() {
                    total.first_error = w.first_error;
                }
            }
            Err(e) => {
                total.errors += 1;
                total.first_error.get_or_insert(e.to_string());
            }
        }
    }
    total.wall = started.elapsed();
    total
}

/// Runs HTTP scenarios and collects their rows, CPU and notes.
pub struct Http<'a> {
    pub cli: &'a Runtime,
    pub srv: &'a Runtime,
    pub gw: &'a Arc<Gateway>,
    pub secs: f64,
    pub rows: Vec<Row>,
    pub cpu: Vec<(String, u64, CpuWindow)>,
    pub notes: Vec<String>,
}

impl Http<'_> {
    /// Warm-up, then a measured run; the writer is flushed before and after
    /// so each run starts clean and its leftover backlog is reported.
    pub fn run(
        &mut self,
        label: &str,
        s: &Arc<Spec>,
        kind: ClientKind,
        conc: usize,
        goal: Goal,
    ) -> Res<()> {
        let (warm, stop) = if conc == 1 {
            (
                Stop {
                    requests: 500,
                    at_most: Duration::from_millis(500),
                },
                Stop {
                    requests: 8_000,
                    at_most: Duration::from_secs_f64(self.secs),
                },
            )
        } else {
            (
                Stop {
                    requests: u64::MAX,
                    at_most: Duration::from_millis(500),
                },
                Stop {
                    requests: u64::MAX,
                    at_most: Duration::from_secs_f64(self.secs),
                },
            )
        };
        let warmed = self.cli.block_on(load(Arc::clone(s), kind, conc, warm));
        if warmed.errors > 0 {
            return Err(format!(
                "{label}: warm-up failed: {}",
                warmed.first_error.unwrap_or_default()
            )
            .into());
        }
        self.srv.block_on(self.gw.store.writer().flush())?;
        let mark = THREADS.mark();
        let result = self.cli.block_on(load(Arc::clone(s), kind, conc, stop));
        let cpu = mark.since();
        let drain_started = Instant::now();
        self.srv.block_on(self.gw.store.writer().flush())?;
        let drain = drain_started.elapsed();
        let label = format!("{label} [{}]", kind.name());
        if let Some(e) = &result.first_error {
            self.notes
                .push(format!("{label}: {} errors, first: {e}", result.errors));
        }
        if conc > 1 && drain > Duration::from_millis(2) {
            self.notes.push(format!(
                "{label} c={conc}: the writer still held a backlog at the end; it drained in {:.1} ms \
                 (sustained incl. drain: {} req/s)",
                drain.as_secs_f64() * 1e3,
                thousands(result.ok as f64 / (result.wall + drain).as_secs_f64())
            ));
        }
        self.cpu.push((format!("{label} c={conc}"), result.ok, cpu));
        self.rows.push(Row {
            label,
            conc: Some(conc),
            lat: stats(result.lat),
            rps: Some(result.ok as f64 / result.wall.as_secs_f64()),
            errors: result.errors,
            goal,
        });
        Ok(())
    }
}

pub fn constant_body(v: &Value) -> BodyFn {
    let bytes = v.to_string().into_bytes();
    Arc::new(move |_| bytes.clone())
}

/// The handler alone: the router called in-process (no socket, no client).
pub async fn handler_only(gw: Arc<Gateway>, s: Arc<Spec>, n: usize) -> Res<Stats> {
    let app = cedargate::server::app(gw);
    let body = s.body.clone().ok_or("handler_only needs a POST")?;
    let mut v = Vec::with_capacity(n);
    for i in 0..(n + n / 5) {
        let req = axum::http::Request::builder()
            .method("POST")
            .uri(&s.path)
            .header("host", s.addr.to_string())
            .header("authorization", &s.auth)
            .header("content-type", "application/json")
            .header("mcp-protocol-version", cedargate::mcp::protocol::LATEST)
            .body(Body::from(body(i as u64)))?;
        let t0 = Instant::now();
        let resp = app.clone().oneshot(req).await?;
        let status = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
        let dt = t0.elapsed();
        if status != 200 || !bytes.windows(s.expect.len()).any(|w| w == s.expect) {
            return Err(format!(
                "handler-only request failed: HTTP {status}: {}",
                String::from_utf8_lossy(&bytes)
            )
            .into());
        }
        if i >= n / 5 {
            v.push(dt);
        }
    }
    Ok(stats(v))
}

/// Sends one request and returns the parsed JSON-RPC response.
pub async fn one(s: &Spec) -> Res<Value> {
    let body = s.body.as_ref().map(|f| f(0));
    let (status, bytes) = send_reqwest(s, body).await?;
    let v: Value = serde_json::from_slice(&bytes)?;
    if status != 200 || v.get("result").is_none() {
        return Err(format!("HTTP {status}: {v}").into());
    }
    Ok(v)
}
