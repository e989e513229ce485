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
//! - **The floor**: the same request through a bare axum route that
//!   forwards it with reqwest (no policy, no records), to show what the
//!   HTTP stack alone adds on this machine.
//!
//! Gateway, peer and load generator run in this process on separate tokio
//! runtimes (2, 1 and 1 worker threads) and speak HTTP/1.1 keep-alive over
//! loopback through a minimal client (one connection per concurrent
//! worker), so the client costs as little of the shared CPU as possible.
//! The direct, forwarded and gateway runs take turns in `BENCH_ROUNDS`
//! rounds (default 5), so a change in the machine's speed during the run
//! weighs on all three alike instead of on whichever ran last.
//! Knobs: `BENCH_ITERS` (requests per worker at concurrency 1; default
//! 2000), `BENCH_CONC` (comma-separated concurrencies; default `1,16`),
//! `BENCH_ROUNDS`.
//! After the table, the CPU each thread group spent per request (from
//! procfs): with all of it on two shared cores, this is what bounds the
//! latency at concurrency 16.
//!
//! Without `--bench` (under `cargo test --all-targets`) it exits at once.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::{get, post};
use serde_json::{Value, json};
use support::http::RawConn;
use support::procfs::{self, Clock, CpuTotal, Threads};
use support::server::{self, Server};
use support::stats::{Rank, Stats};
use support::tenant::{self, TenantSpec};
use support::{Error, Res, env_num, runtime};
use tokio::runtime::Runtime;

const ADMIN_TOKEN: &str = "bench-admin-token-0123456789abcdef0123";
const BIG_SKILLS: usize = 1_000;

/// How this bench has always accounted CPU: 10 ms ticks, by thread-name
/// prefix (`srv`, `peer`, `cli`, `writer`, …).
const THREADS: Threads = Threads {
    clock: Clock::Ticks,
    group: procfs::name_prefix,
};

/// What one keep-alive connection may read at once (the 1,000-skill
/// listing is large).
const READ_CHUNK: usize = 64 * 1024;

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
// The floor: a bare forwarder.

/// An axum route that forwards its body to the peer with a reqwest client
/// configured like the bridge's and answers the peer's body: the HTTP work
/// every gateway call does (serve one request, make one), with no policy,
/// no records and no translation. Its added latency is the floor of what
/// any gateway written on this stack adds on this machine.
async fn start_forwarder(peer: SocketAddr) -> Res<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let url = format!("http://{peer}/rpc");
    let app = axum::Router::new().route(
        "/forward",
        post(move |body: axum::body::Bytes| {
            let client = client.clone();
            let url = url.clone();
            async move {
                let answer = async {
                    let resp = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .header("a2a-version", "1.0")
                        .body(body)
                        .send()
                        .await?;
                    resp.bytes().await
                };
                match answer.await {
                    Ok(bytes) => (axum::http::StatusCode::OK, bytes),
                    Err(e) => (
                        axum::http::StatusCode::BAD_GATEWAY,
                        axum::body::Bytes::from(e.to_string()),
                    ),
                }
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

// ---------------------------------------------------------------------------
// The gateway.

/// The gateway with the admin API on (peers are registered through it) and
/// no public URL.
async fn start_gateway(dir: &std::path::Path) -> Res<Server> {
    server::start(dir.join("data"), |c| {
        c.public_url = None;
        c.admin_token = Some(ADMIN_TOKEN.into());
    })
    .await
}

/// Org `org` with a project, an agent, a key and a session.
async fn tenant(gw: &Server, org: &str) -> Res<Session> {
    let spec = TenantSpec {
        org,
        org_name: org,
        project: "p",
        agent: "a",
        agent_name: "a",
        roles: &[],
        key_label: "bench",
        ..TenantSpec::BENCH
    };
    let made = tenant::create(&gw.gw, &spec).await?;
    Ok(Session {
        key: made.secret,
        id: made.session.id,
    })
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

/// Warm-up requests of a worker sending `per_worker` measured ones.
fn warm_up(per_worker: usize) -> usize {
    (per_worker / 10).max(10)
}

/// Requests `run` sends in all, warm-up included.
fn sent(conc: usize, per_worker: usize) -> usize {
    conc * (warm_up(per_worker) + per_worker)
}

/// `conc` workers, `per_worker` requests each (after 10% warm-up).
async fn run(t: &Target, conc: usize, per_worker: usize) -> Res<Vec<Duration>> {
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            let mut headers = vec![
                ("content-type", "application/json"),
                ("accept", "application/json"),
            ];
            headers.extend(t.headers.iter().map(|(k, v)| (*k, v.as_str())));
            let mut conn = RawConn::post(t.addr, &t.path, &headers, READ_CHUNK).await?;
            let warm = warm_up(per_worker);
            let mut lat = Vec::with_capacity(per_worker);
            for i in 0..warm + per_worker {
                let started = Instant::now();
                let (status, body) = conn.send(Some(&t.body)).await?;
                let took = started.elapsed();
                if status != 200 {
                    return Err::<Vec<Duration>, Error>(
                        format!(
                            "unexpected answer: HTTP {status}: {}",
                            String::from_utf8_lossy(&body)
                        )
                        .into(),
                    );
                }
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
    Ok(all)
}

/// The knobs of the module doc.
struct Knobs {
    iters: usize,
    concurrencies: Vec<usize>,
    rounds: usize,
}

impl Knobs {
    fn from_env() -> Knobs {
        Knobs {
            iters: env_num("BENCH_ITERS", 2000),
            concurrencies: std::env::var("BENCH_CONC")
                .ok()
                .map(|v| v.split(',').filter_map(|c| c.trim().parse().ok()).collect())
                .filter(|v: &Vec<usize>| !v.is_empty())
                .unwrap_or_else(|| vec![1, 16]),
            rounds: match env_num("BENCH_ROUNDS", 5) {
                0 => 5,
                r => r,
            },
        }
    }
}

/// What the bench sends, and where.
struct Targets {
    direct: Target,
    forwarded: Target,
    via_gateway: Target,
    list_big: Target,
}

/// A session's bearer key and id.
struct Session {
    key: String,
    id: String,
}

fn targets(
    peer: SocketAddr,
    forwarder: SocketAddr,
    gw: SocketAddr,
    small: &Session,
    big: &Session,
) -> Res<Targets> {
    let args = json!({"ticket": "T-1", "count": 2});
    let direct = Target {
        addr: peer,
        path: "/rpc".into(),
        headers: vec![("a2a-version", "1.0".into())],
        body: Arc::new(serde_json::to_vec(&cedargate::a2a::bridge::request_body(
            cedargate::a2a::card::ProtocolVersion::V1_0,
            "skill-0000",
            &args,
            &small.id,
        ))?),
        expect: "TASK_STATE_COMPLETED",
    };
    let forwarded = Target {
        addr: forwarder,
        path: "/forward".into(),
        headers: vec![],
        body: Arc::clone(&direct.body),
        expect: "TASK_STATE_COMPLETED",
    };
    let mcp_headers = |key: &str| {
        vec![
            ("authorization", format!("Bearer {key}")),
            ("mcp-protocol-version", "2025-06-18".to_string()),
        ]
    };
    let via_gateway = Target {
        addr: gw,
        path: format!("/api/mcp/{}", small.id),
        headers: mcp_headers(&small.key),
        body: Arc::new(serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "bench_peer.skill-0000", "arguments": args}
        }))?),
        expect: "\"isError\":false",
    };
    let list_big = Target {
        addr: gw,
        path: format!("/api/mcp/{}", big.id),
        headers: mcp_headers(&big.key),
        body: Arc::new(serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )?),
        expect: "big_peer.skill-0999",
    };
    Ok(Targets {
        direct,
        forwarded,
        via_gateway,
        list_big,
    })
}

/// One line of the table.
fn row(name: &str, s: &Stats) {
    println!(
        "{:<44} {:>6} {:>10.0} {:>10.0} {:>10.0}",
        name, s.n, s.p50, s.p99, s.mean
    );
}

/// The bridge overhead at concurrency `conc`: prints its rows and returns
/// its CPU lines.
fn bridge_overhead(cli: &Runtime, t: &Targets, knobs: &Knobs, conc: usize) -> Res<String> {
    let (iters, rounds) = (knobs.iters, knobs.rounds);
    let (direct, forwarded, via_gateway) = (&t.direct, &t.forwarded, &t.via_gateway);
    let per = if conc == 1 {
        iters
    } else {
        (iters / 4).max(50)
    };
    // The three targets take turns, `rounds` times, so a drift in the
    // machine's speed during the run weighs on all three alike.
    let per_round = (per / rounds).max(10);
    let (mut d, mut f, mut g) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cpu_d, mut cpu_f, mut cpu_g) = (
        CpuTotal::default(),
        CpuTotal::default(),
        CpuTotal::default(),
    );
    for _ in 0..rounds {
        for (target, lat, cpu) in [
            (direct, &mut d, &mut cpu_d),
            (forwarded, &mut f, &mut cpu_f),
            (via_gateway, &mut g, &mut cpu_g),
        ] {
            let mark = THREADS.mark();
            lat.extend(cli.block_on(run(target, conc, per_round))?);
            cpu.add(&mark.since(), sent(conc, per_round));
        }
    }
    let (d, f, g) = (
        Stats::of(d, Rank::Rounded),
        Stats::of(f, Rank::Rounded),
        Stats::of(g, Rank::Rounded),
    );
    row(&format!("direct SendMessage to the peer, c={conc}"), &d);
    row(&format!("bare axum→reqwest forwarder, c={conc}"), &f);
    row(&format!("tools/call through the gateway, c={conc}"), &g);
    println!(
        "{:<44} {:>6} {:>10.0} {:>10.0}   (the floor of this stack on this machine)",
        format!("  added by the bare forwarder, c={conc}"),
        "",
        f.p50 - d.p50,
        f.p99 - d.p99
    );
    let cpu = format!(
        "  c={conc} direct: {}\n  c={conc} forwarder: {}\n  c={conc} gateway: {}",
        cpu_d.per_request(),
        cpu_f.per_request(),
        cpu_g.per_request()
    );
    println!(
        "{:<44} {:>6} {:>10.0} {:>10.0}   (goal: ≤ 1000 µs added at p50)",
        format!("  added by the gateway, c={conc}"),
        "",
        g.p50 - d.p50,
        g.p99 - d.p99
    );
    Ok(cpu)
}

fn main() -> Res<()> {
    if !support::bench_requested("a2a") {
        return Ok(());
    }
    let knobs = Knobs::from_env();
    let srv = runtime("srv", 2)?;
    let peer_rt = runtime("peer", 1)?;
    let cli = runtime("cli", 1)?;
    let dir = tempfile::tempdir()?;

    let peer = peer_rt.block_on(start_peer("Bench Peer", 2))?;
    let big_peer = peer_rt.block_on(start_peer("Big Peer", BIG_SKILLS))?;
    let gw = srv.block_on(start_gateway(dir.path()))?;
    let forwarder = srv.block_on(start_forwarder(peer))?;
    let small = srv.block_on(tenant(&gw, "bench"))?;
    let big = srv.block_on(tenant(&gw, "big"))?;
    cli.block_on(register(gw.addr, "bench", peer))?;
    cli.block_on(register(gw.addr, "big", big_peer))?;
    let t = targets(peer, forwarder, gw.addr, &small, &big)?;

    println!(
        "A2A bridge (cargo bench --bench a2a), {} cores",
        support::cores()
    );
    println!();
    println!(
        "{:<44} {:>6} {:>10} {:>10} {:>10}",
        "scenario", "n", "p50 µs", "p99 µs", "mean µs"
    );
    let mut cpu_lines = Vec::new();
    for &conc in &knobs.concurrencies {
        cpu_lines.push(bridge_overhead(&cli, &t, &knobs, conc)?);
    }
    let per = (knobs.iters / 4).max(100);
    let l = Stats::of(cli.block_on(run(&t.list_big, 1, per))?, Rank::Rounded);
    row(&format!("tools/list, {BIG_SKILLS} A2A skills, c=1"), &l);
    println!("{:<44} {:>6} {:>10} {:>10}", "  goal", "", "", "≤ 2000");
    if !cpu_lines.is_empty() {
        println!();
        println!("CPU µs per request by thread group:");
        for l in cpu_lines {
            println!("{l}");
        }
    }
    drop(gw);
    Ok(())
}
