//! `cargo bench --bench a2a`: what the A2A bridge adds, and `tools/list`
//! for an org with 1,000 registered skills.
//!
//! - **Bridge overhead**: a local A2A 1.0 peer (axum, answering a completed
//!   task with one data part at once) is called directly with `SendMessage`,
//!   and through the gateway with `tools/call` on its skill (Cedar
//!   `view_tool` + `a2a_invoke`, hook events, the durable decision record).
//!   p50 and p99 at concurrency 1 and 16; the added latency is the
//!   difference of the two (goal: ≤ 1 ms at p50).
//! - **Large catalogs**: `tools/list` in a session of an org whose peer
//!   declares 1,000 skills, Cedar `view_tool` included (goal: p99 ≤ 2 ms).
//!
//! Gateway, peer and load generator run in this process on separate tokio
//! runtimes (2, 1 and 1 worker threads) and speak HTTP/1.1 keep-alive over
//! loopback through a minimal client (one connection per concurrent
//! worker), so the client costs as little of the shared CPU as possible.
//! Knob: `BENCH_ITERS` (requests per worker at concurrency 1; default 2000).
//!
//! Without `--bench` (under `cargo test --all-targets`) it exits at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::{get, post};
use cedargate::config::Config;
use cedargate::gateway::Gateway;
use cedargate::operator::{self, CreateAgent, CreateOrg, CreateProject, Provision};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = Result<T, Error>;

const ADMIN_TOKEN: &str = "bench-admin";
const BIG_SKILLS: usize = 1_000;

#[derive(Debug, Clone, Copy)]
struct Stats {
    n: usize,
    p50: f64,
    p99: f64,
    mean: f64,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort_unstable();
    let us = |d: &Duration| d.as_secs_f64() * 1e6;
    let at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v.get(i).map(us).unwrap_or(f64::NAN)
    };
    let mean = v.iter().map(us).sum::<f64>() / v.len().max(1) as f64;
    Stats {
        n: v.len(),
        p50: at(0.50),
        p99: at(0.99),
        mean,
    }
}

fn runtime(name: &'static str, workers: usize) -> Res<Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(name)
        .enable_all()
        .build()?)
}

// ---------------------------------------------------------------------------
// The peer.

fn skills(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"id": format!("skill-{i:04}"), "name": format!("Skill {i}"), "description": "A benchmark skill."}))
        .collect()
}

async fn start_peer(name: &'static str, n_skills: usize) -> Res<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let card = json!({
        "name": name,
        "supportedInterfaces": [{"url": format!("http://{addr}/rpc"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "version": "1.0.0",
        "skills": skills(n_skills),
    });
    let app = axum::Router::new()
        .route(
            "/.well-known/agent-card.json",
            get(move || {
                let card = card.clone();
                async move { axum::Json(card) }
            }),
        )
        .route(
            "/rpc",
            post(|body: axum::Json<Value>| async move {
                let args = body.0["params"]["message"]["parts"][0]["data"].clone();
                axum::Json(
                    json!({"jsonrpc": "2.0", "id": body.0["id"], "result": {"task": {
                    "id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
                    "artifacts": [{"artifactId": "a", "parts": [{"data": args}]}]}}}),
                )
            }),
        );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

// ---------------------------------------------------------------------------
// The gateway.

struct Gw {
    addr: SocketAddr,
    gw: Arc<Gateway>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start_gateway(dir: &std::path::Path) -> Res<Gw> {
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let config = Config {
        listen: addr,
        data_dir: dir.join("data"),
        policies_dir: repo.join("policies"),
        schema_file: repo.join("schemas/gateway.cedarschema"),
        admin_token: Some(ADMIN_TOKEN.into()),
        demo_tenant: false,
        ..Config::default()
    };
    let gw = cedargate::server::prepare(config)
        .await
        .map_err(|e| e.to_string())?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let served = Arc::clone(&gw);
    tokio::spawn(async move {
        let _ = cedargate::server::run(listener, served, async move {
            let _ = rx.await;
        })
        .await;
    });
    Ok(Gw {
        addr,
        gw,
        _stop: tx,
    })
}

/// Org `org` with a project, an agent, a key and a session: (key, session).
async fn tenant(gw: &Gateway, org: &str) -> Res<(String, String)> {
    let org = org.to_string();
    let made = gw
        .store
        .read(move |c| {
            operator::provision(
                c,
                Provision {
                    org: CreateOrg {
                        id: org.clone(),
                        name: org,
                        plan: None,
                        entitlements: None,
                    },
                    project: CreateProject {
                        id: "p".into(),
                        memory_enabled: true,
                        graph_enabled: false,
                    },
                    agent: CreateAgent {
                        id: "a".into(),
                        name: "a".into(),
                        roles: vec![],
                    },
                    key_label: "bench".into(),
                },
            )
        })
        .await?;
    Ok((made.secret, made.session.id))
}

async fn register(gw_addr: SocketAddr, org: &str, peer: SocketAddr) -> Res<()> {
    let resp = reqwest::Client::new()
        .post(format!("http://{gw_addr}/admin/orgs/{org}/a2a-agents"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"url": format!("http://{peer}")}))
        .send()
        .await?;
    if resp.status().as_u16() != 201 {
        return Err(format!("registration failed: {}", resp.text().await?).into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// A minimal keep-alive HTTP/1.1 client.

struct Conn {
    stream: tokio::net::TcpStream,
    head: Vec<u8>,
    buf: Vec<u8>,
    scratch: Vec<u8>,
}

impl Conn {
    async fn open(addr: SocketAddr, path: &str, headers: &[(&str, String)]) -> Res<Conn> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\naccept: application/json\r\n"
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        Ok(Conn {
            stream,
            head: head.into_bytes(),
            buf: Vec::with_capacity(64 * 1024),
            scratch: vec![0; 64 * 1024],
        })
    }

    async fn post(&mut self, body: &[u8]) -> Res<Vec<u8>> {
        let mut req = self.head.clone();
        req.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
        req.extend_from_slice(body);
        self.stream.write_all(&req).await?;
        let header_end = loop {
            if let Some(p) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p;
            }
            self.fill().await?;
        };
        let head =
            String::from_utf8_lossy(self.buf.get(..header_end).unwrap_or_default()).to_string();
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("unexpected answer: {head}").into());
        }
        let len: usize = head
            .split("\r\n")
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .ok_or("no content-length")?;
        let total = header_end + 4 + len;
        while self.buf.len() < total {
            self.fill().await?;
        }
        let body = self
            .buf
            .get(header_end + 4..total)
            .unwrap_or_default()
            .to_vec();
        self.buf.drain(..total);
        Ok(body)
    }

    async fn fill(&mut self) -> Res<()> {
        let n = self.stream.read(&mut self.scratch).await?;
        if n == 0 {
            return Err("connection closed".into());
        }
        self.buf
            .extend_from_slice(self.scratch.get(..n).unwrap_or_default());
        Ok(())
    }
}

/// A target: where to POST, with which headers and body, and what the
/// answer must contain.
#[derive(Clone)]
struct Target {
    addr: SocketAddr,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Arc<Vec<u8>>,
    expect: &'static str,
}

/// `conc` workers, `per_worker` requests each (after 10% warm-up).
async fn run(t: &Target, conc: usize, per_worker: usize) -> Res<Stats> {
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(t.addr, &t.path, &t.headers).await?;
            let warm = (per_worker / 10).max(10);
            let mut lat = Vec::with_capacity(per_worker);
            for i in 0..warm + per_worker {
                let started = Instant::now();
                let body = conn.post(&t.body).await?;
                let took = started.elapsed();
                if !String::from_utf8_lossy(&body).contains(t.expect) {
                    return Err::<Vec<Duration>, Error>(
                        format!("unexpected body: {}", String::from_utf8_lossy(&body)).into(),
                    );
                }
                if i >= warm {
                    lat.push(took);
                }
            }
            Ok(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(stats(all))
}

fn main() -> Res<()> {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("a2a bench: run it with `cargo bench --bench a2a`; skipped");
        return Ok(());
    }
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let srv = runtime("srv", 2)?;
    let peer_rt = runtime("peer", 1)?;
    let cli = runtime("cli", 1)?;
    let dir = tempfile::tempdir()?;

    let peer = peer_rt.block_on(start_peer("Bench Peer", 2))?;
    let big_peer = peer_rt.block_on(start_peer("Big Peer", BIG_SKILLS))?;
    let gw = srv.block_on(start_gateway(dir.path()))?;
    let (key, session) = srv.block_on(tenant(&gw.gw, "bench"))?;
    let (big_key, big_session) = srv.block_on(tenant(&gw.gw, "big"))?;
    cli.block_on(register(gw.addr, "bench", peer))?;
    cli.block_on(register(gw.addr, "big", big_peer))?;

    let args = json!({"ticket": "T-1", "count": 2});
    let direct = Target {
        addr: peer,
        path: "/rpc".into(),
        headers: vec![("a2a-version", "1.0".into())],
        body: Arc::new(serde_json::to_vec(&cedargate::a2a::bridge::request_body(
            cedargate::a2a::card::ProtocolVersion::V1_0,
            "skill-0000",
            &args,
            &session,
        ))?),
        expect: "TASK_STATE_COMPLETED",
    };
    let mcp_headers = |key: &str| {
        vec![
            ("authorization", format!("Bearer {key}")),
            ("mcp-protocol-version", "2025-06-18".to_string()),
        ]
    };
    let via_gateway = Target {
        addr: gw.addr,
        path: format!("/api/mcp/{session}"),
        headers: mcp_headers(&key),
        body: Arc::new(serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "bench_peer.skill-0000", "arguments": args}
        }))?),
        expect: "\"isError\":false",
    };
    let list_big = Target {
        addr: gw.addr,
        path: format!("/api/mcp/{big_session}"),
        headers: mcp_headers(&big_key),
        body: Arc::new(serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )?),
        expect: "big_peer.skill-0999",
    };

    println!(
        "A2A bridge (cargo bench --bench a2a), {} cores",
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    println!();
    println!(
        "{:<44} {:>6} {:>10} {:>10} {:>10}",
        "scenario", "n", "p50 µs", "p99 µs", "mean µs"
    );
    let row = |name: &str, s: &Stats| {
        println!(
            "{:<44} {:>6} {:>10.0} {:>10.0} {:>10.0}",
            name, s.n, s.p50, s.p99, s.mean
        );
    };
    for conc in [1usize, 16] {
        let per = if conc == 1 {
            iters
        } else {
            (iters / 4).max(50)
        };
        let d = cli.block_on(run(&direct, conc, per))?;
        let g = cli.block_on(run(&via_gateway, conc, per))?;
        row(&format!("direct SendMessage to the peer, c={conc}"), &d);
        row(&format!("tools/call through the gateway, c={conc}"), &g);
        println!(
            "{:<44} {:>6} {:>10.0} {:>10.0}   (goal: ≤ 1000 µs added at p50)",
            format!("  added by the gateway, c={conc}"),
            "",
            g.p50 - d.p50,
            g.p99 - d.p99
        );
    }
    let per = (iters / 4).max(100);
    let l = cli.block_on(run(&list_big, 1, per))?;
    row(&format!("tools/list, {BIG_SKILLS} A2A skills, c=1"), &l);
    println!("{:<44} {:>6} {:>10} {:>10}", "  goal", "", "", "≤ 2000");
    drop(gw);
    Ok(())
}
