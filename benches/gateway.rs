//! `cargo bench --bench gateway`: latency and throughput of the gateway on
//! this machine, printed as tables with each figure's goal.
//!
//! The real server runs in-process on its own tokio runtime (threads
//! `srv-*`) over a fresh temporary data directory with the shipped
//! `policies/` and `schemas/`; the load generator runs on a second runtime
//! (threads `cli-*`) and speaks HTTP/1.1 keep-alive over loopback. Both share
//! the machine's cores, as a co-located agent daemon would. CPU time per
//! thread group is read from `/proc/self/task/*/schedstat`, and the CPU other
//! processes used meanwhile from `/proc/stat`, so the report shows where the
//! time goes and whether the machine was quiet.
//!
//! The headline HTTP figures use a minimal keep-alive HTTP/1.1 client
//! (`raw`: `support::http::RawConn`, one connection per concurrent worker,
//! like `wrk`) so that the load generator takes as little of the shared CPU
//! as possible; the same scenarios are also run with `reqwest` to show what
//! a full client costs.
//!
//! Knobs (environment variables):
//! - `BENCH_SECS`: seconds per throughput window (default 3);
//! - `BENCH_SERVER_THREADS` / `BENCH_CLIENT_THREADS`: tokio workers (default 2 / 2);
//! - `BENCH_CLIENT`: `raw` (default) or `reqwest` for the headline figures;
//! - `BENCH_ONLY`: comma-separated sections to run, out of `pep`, `parts`,
//!   `healthz`, `list`, `recall`, `remember`, `reference` (default: all),
//!   e.g. to profile one scenario:
//!   `BENCH_ONLY=list BENCH_SECS=10 perf record --call-graph dwarf target/release/deps/gateway-<hash> --bench`.
//!
//! Without `--bench` (that is, under `cargo test --all-targets`) the binary
//! exits at once, so it never adds to test time.
//!
//! Layout: this file sets the bench up, runs the sections in order and
//! prints the report; `gateway/pep.rs` is section 1 and its breakdown,
//! `gateway/parts.rs` the other breakdowns, `gateway/load.rs` the HTTP load
//! generation (sections 2-4), `gateway/report.rs` the tables; `support/`
//! holds what every bench shares.

mod support;

#[path = "gateway/load.rs"]
mod load;
#[path = "gateway/parts.rs"]
mod parts;
#[path = "gateway/pep.rs"]
mod pep;
#[path = "gateway/report.rs"]
mod report;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cedargate::gateway::Gateway;
use cedargate::store::WriteOp;
use cedargate::store::observations::NewObservation;
use load::{ClientKind, Http, Spec, constant_body, handler_only, mcp_spec, one};
use report::{Goal, Row, print_cpu, print_parts, print_rows, thousands};
use serde_json::{Value, json};
use support::procfs::{self, Clock, CpuWindow, Threads};
use support::server::{self, Stopped};
use support::stats::{Rank, Stats};
use support::tenant::{self, TenantSpec};
use support::{Res, env_num, runtime};
use tokio::runtime::Runtime;

/// Iterations of the headline in-process measurements.
const PEP_ITERS: usize = 20_000;
/// Iterations of each breakdown measurement.
const PART_ITERS: usize = 5_000;
/// Warm-up iterations before each in-process measurement.
const WARMUP: usize = 1_000;
/// Concurrency of the throughput runs.
const CONCURRENCY: usize = 32;
/// Observations seeded before recall is measured.
const SEEDED_OBSERVATIONS: usize = 300;
/// The recall query every recall request sends.
const RECALL_QUERY: &str = "why does the auth token refresh fail under load";

const ORG: &str = TenantSpec::BENCH.org;
const PROJECT: &str = TenantSpec::BENCH.project;
const AGENT: &str = TenantSpec::BENCH.agent;

/// This bench's CPU accounting: `schedstat` ns, by runtime role.
const THREADS: Threads = Threads {
    clock: Clock::Schedstat,
    group: procfs::runtime_roles,
};

/// Percentiles by nearest rank, as this bench has always taken them.
fn stats(v: Vec<Duration>) -> Stats {
    Stats::of(v, Rank::Nearest)
}

/// The knobs of the module doc.
struct Knobs {
    secs: f64,
    srv_threads: usize,
    cli_threads: usize,
    /// The client of the headline figures.
    headline: ClientKind,
    /// The client of the `reference` section.
    other: ClientKind,
    /// `BENCH_ONLY`: empty for every section.
    only: String,
}

impl Knobs {
    fn from_env() -> Knobs {
        let headline = match std::env::var("BENCH_CLIENT").as_deref() {
            Ok("reqwest") => ClientKind::Reqwest,
            _ => ClientKind::Raw,
        };
        Knobs {
            secs: env_num("BENCH_SECS", 3.0),
            srv_threads: env_num("BENCH_SERVER_THREADS", 2),
            cli_threads: env_num("BENCH_CLIENT_THREADS", 2),
            headline,
            other: match headline {
                ClientKind::Raw => ClientKind::Reqwest,
                ClientKind::Reqwest => ClientKind::Raw,
            },
            only: std::env::var("BENCH_ONLY").unwrap_or_default(),
        }
    }

    /// Whether `section` runs.
    fn want(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.split(',').any(|s| s.trim() == section)
    }
}

/// Stores `n` observations of the bench project in one durable commit.
async fn seed_observations(gw: &Gateway, session_id: &str, n: usize) -> Res<()> {
    const TOPICS: [&str; 8] = [
        "auth token refresh",
        "database migration",
        "rate limiter",
        "cache invalidation",
        "retry backoff",
        "config parsing",
        "session expiry",
        "log format",
    ];
    const DETAILS: [&str; 5] = [
        "the failure only shows under concurrent requests, so reproduce it with a load test first",
        "check the clock skew between hosts before blaming the library",
        "the fix belongs in the adapter, not in the caller, to keep the contract in one place",
        "a feature flag guards the new code path; remove it after the next release",
        "the integration test covers this case; run it before changing the defaults",
    ];
    let ops = (0..n)
        .map(|i| {
            let topic = TOPICS.get(i % TOPICS.len()).copied().unwrap_or("misc");
            let detail = DETAILS.get(i % DETAILS.len()).copied().unwrap_or("");
            WriteOp::Observation(Box::new(NewObservation {
                id: uuid::Uuid::now_v7().to_string(),
                org_id: ORG.into(),
                project_id: PROJECT.into(),
                session_id: session_id.into(),
                agent_id: AGENT.into(),
                content: format!("Note {i} on {topic}: {detail}."),
                obs_type: Some("pattern".into()),
                confidence: Some(0.7),
                created_at: cedargate::ids::now_rfc3339(),
            }))
        })
        .collect();
    gw.store.writer().submit(ops).await?;
    Ok(())
}

/// The requests the HTTP scenarios send.
struct Scenarios {
    health: Arc<Spec>,
    list: Arc<Spec>,
    recall: Arc<Spec>,
    remember: Arc<Spec>,
}

fn scenarios(addr: SocketAddr, secret: &str, session_id: &str) -> Res<Scenarios> {
    let mcp_path = format!("/api/mcp/{session_id}");
    let http_client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(256)
        .build()?;
    let health = Arc::new(Spec {
        addr,
        path: "/healthz".into(),
        url: format!("http://{addr}/healthz"),
        auth: String::new(),
        body: None,
        expect: b"\"ok\"",
        http: http_client.clone(),
    });
    let base = Spec {
        addr,
        url: format!("http://{addr}{mcp_path}"),
        path: mcp_path,
        auth: format!("Bearer {secret}"),
        body: None,
        expect: b"\"result\"",
        http: http_client,
    };
    let list = mcp_spec(
        &base,
        constant_body(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
    );
    let recall = mcp_spec(
        &base,
        constant_body(&json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "af_memory_recall",
                       "arguments": {"query": RECALL_QUERY, "workType": "bug_fix"}}
        })),
    );
    let remember = mcp_spec(
        &base,
        Arc::new(|i| {
            json!({
                "jsonrpc": "2.0", "id": i, "method": "tools/call",
                "params": {"name": "af_memory_remember", "arguments": {
                    "content": format!("bench observation {i}: the retry backoff doubles up to 30 s, then the circuit opens"),
                    "type": "pattern", "confidence": 0.8}}
            })
            .to_string()
            .into_bytes()
        }),
    );
    Ok(Scenarios {
        health,
        list,
        recall,
        remember,
    })
}

/// What the scenarios answer, checked once before anything is measured.
struct Sanity {
    n_tools: usize,
    n_recalled: usize,
    recall_bytes: usize,
}

/// Lists the tools, seeds the observations recall searches, recalls once.
fn sanity(
    cli: &Runtime,
    srv: &Runtime,
    gw: &Gateway,
    session_id: &str,
    s: &Scenarios,
) -> Res<Sanity> {
    let listed = cli.block_on(one(&s.list))?;
    let n_tools = listed
        .pointer("/result/tools")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    srv.block_on(seed_observations(gw, session_id, SEEDED_OBSERVATIONS))?;
    let recalled = cli.block_on(one(&s.recall))?;
    let n_recalled = recalled
        .pointer("/result/structuredContent/observations")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    Ok(Sanity {
        n_tools,
        n_recalled,
        recall_bytes: recalled.to_string().len(),
    })
}

/// The figures measured in-process (sections `pep` and `parts`).
#[derive(Default)]
struct InProcess {
    pep_rows: Vec<Row>,
    parts: Vec<(String, Stats)>,
    probe: Vec<(String, Stats)>,
    lines: Vec<String>,
    recall_breakdown: Vec<(String, Stats)>,
    commit_breakdown: Vec<(String, Stats)>,
}

/// The tenant's way in: its bearer key and session.
struct Session<'a> {
    secret: &'a str,
    id: &'a str,
}

fn in_process(
    knobs: &Knobs,
    srv: &Runtime,
    gw: &Arc<Gateway>,
    dir: &Path,
    session: &Session<'_>,
    s: &Scenarios,
) -> Res<InProcess> {
    let (secret, session_id) = (session.secret, session.id);
    let mut out = InProcess::default();
    // 1. The PEP in-process (on the main thread; the writer on its own).
    if knobs.want("pep") {
        let pep = srv.block_on(pep::pep_section(gw, secret, session_id))?;
        out.pep_rows = pep.rows;
        out.parts = pep.parts;
        out.lines = pep.lines;
        let template = srv
            .block_on(pep::Pep::new(gw, secret, session_id, "af_memory_recall"))?
            .decide()
            .finish_default();
        out.probe = srv.block_on(parts::writer_probe(dir, template))?;
    }
    // Handlers in-process (router without socket), recall's and a commit's parts.
    if knobs.want("parts") {
        out.parts.push((
            "tools/list through the router in-process (no socket, no client)".to_string(),
            srv.block_on(handler_only(Arc::clone(gw), Arc::clone(&s.list), 3_000))?,
        ));
        out.recall_breakdown.push((
            "af_memory_recall through the router in-process (no socket)".to_string(),
            srv.block_on(handler_only(Arc::clone(gw), Arc::clone(&s.recall), 500))?,
        ));
        out.recall_breakdown
            .extend(srv.block_on(parts::recall_parts(gw, secret, session_id))?);
        out.commit_breakdown = srv.block_on(parts::commit_parts(gw, secret, session_id))?;
    }
    Ok(out)
}

/// 2-4. End to end over loopback.
fn over_http(knobs: &Knobs, http: &mut Http<'_>, s: &Scenarios) -> Res<()> {
    let (headline, other) = (knobs.headline, knobs.other);
    let healthz = "GET /healthz (HTTP stack baseline)";
    if knobs.want("healthz") {
        http.run(healthz, &s.health, headline, 1, Goal::None)?;
        http.run(healthz, &s.health, headline, CONCURRENCY, Goal::None)?;
    }
    if knobs.want("list") {
        http.run("tools/list", &s.list, headline, 1, Goal::P50AtMost(200.0))?;
        http.run(
            "tools/list",
            &s.list,
            headline,
            CONCURRENCY,
            Goal::RpsAtLeast(10_000.0),
        )?;
    }
    if knobs.want("recall") {
        http.run("af_memory_recall", &s.recall, headline, 1, Goal::None)?;
        http.run(
            "af_memory_recall",
            &s.recall,
            headline,
            CONCURRENCY,
            Goal::None,
        )?;
    }
    if knobs.want("remember") {
        http.run("af_memory_remember", &s.remember, headline, 1, Goal::None)?;
        http.run(
            "af_memory_remember",
            &s.remember,
            headline,
            CONCURRENCY,
            Goal::RpsAtLeast(3_000.0),
        )?;
    }
    if knobs.want("reference") {
        // What the client costs: the same with the other client.
        http.run(healthz, &s.health, other, 1, Goal::None)?;
        http.run(healthz, &s.health, other, CONCURRENCY, Goal::None)?;
        http.run("tools/list", &s.list, other, 1, Goal::None)?;
        http.run("tools/list", &s.list, other, CONCURRENCY, Goal::None)?;
    }
    Ok(())
}

/// Everything the report prints, gathered once the server stopped.
struct Report {
    cores: usize,
    started: Instant,
    load_at_start: String,
    in_process: InProcess,
    http_rows: Vec<Row>,
    cpu: Vec<(String, u64, CpuWindow)>,
    notes: Vec<String>,
    sanity: Sanity,
    records: i64,
    stopped: Stopped,
}

impl Report {
    fn print(&self, knobs: &Knobs, dir: &Path) {
        self.print_header(knobs, dir);
        self.print_tables();
        self.print_notes();
    }

    /// The machine and the set-up.
    fn print_header(&self, knobs: &Knobs, dir: &Path) {
        let (cores, srv_threads, cli_threads) = (self.cores, knobs.srv_threads, knobs.cli_threads);
        println!("cedargate gateway bench");
        println!(
            "  {cores} cores ({}), clocksource {}; server runtime {srv_threads} workers, client runtime {cli_threads} \
             workers, same process; load average {} at start, {} at end",
            procfs::cpu_model(),
            procfs::clocksource(),
            self.load_at_start,
            procfs::loadavg()
        );
        println!(
            "  data dir {} ({}); shipped policies and schema; headline client `{}`, reference client `{}`; \
             window {} s",
            dir.display(),
            procfs::fs_type(dir),
            knobs.headline.name(),
            knobs.other.name(),
            knobs.secs
        );
    }

    fn print_tables(&self) {
        let inp = &self.in_process;
        if !inp.pep_rows.is_empty() {
            print_rows("1. PEP in-process (µs per decision)", &inp.pep_rows);
        }
        if !self.http_rows.is_empty() {
            print_rows(
                "2-4. End to end over loopback HTTP (µs per request)",
                &self.http_rows,
            );
            print_cpu(&self.cpu, self.cores);
        }
        if !inp.parts.is_empty() {
            print_parts(
                "Breakdown: one decision and the work around it (in-process)",
                &inp.parts,
            );
        }
        if !inp.probe.is_empty() {
            print_parts(
                "Breakdown: the writer's cost per decision record (probe database, no fsync)",
                &inp.probe,
            );
        }
        if !inp.recall_breakdown.is_empty() {
            print_parts("Breakdown: af_memory_recall", &inp.recall_breakdown);
        }
        if !inp.commit_breakdown.is_empty() {
            print_parts("Breakdown: durable commit", &inp.commit_breakdown);
        }
    }

    fn print_notes(&self) {
        let Sanity {
            n_tools,
            n_recalled,
            recall_bytes,
        } = self.sanity;
        println!();
        println!("Notes");
        for l in &self.in_process.lines {
            println!("  {l}");
        }
        println!(
            "  tools/list answers {n_tools} tools and records 2 (access_session, one view_tool record for the list); \
             tools/call records 3 (access_session, view_tool, call_tool) and answers after their commit"
        );
        println!(
            "  recall answers {n_recalled} of {SEEDED_OBSERVATIONS} seeded observations ({recall_bytes} bytes); \
             remember adds one observation per request"
        );
        for n in &self.notes {
            println!("  {n}");
        }
        println!(
            "  {} decision records in the trail at the end; server stopped {}; bench took {:.0} s",
            thousands(self.records as f64),
            self.stopped,
            self.started.elapsed().as_secs_f64()
        );
    }
}

fn main() -> Res<()> {
    if !support::bench_requested("gateway") {
        return Ok(());
    }
    let knobs = Knobs::from_env();
    let cores = support::cores();
    let started = Instant::now();
    let load_at_start = procfs::loadavg();

    let srv = runtime("srv", knobs.srv_threads)?;
    let cli = runtime("cli", knobs.cli_threads)?;
    let dir = tempfile::tempdir()?;
    let server = srv.block_on(server::start(dir.path().join("data"), |_| {}))?;
    let gw = Arc::clone(&server.gw);
    let made = srv.block_on(tenant::create(&gw, &TenantSpec::BENCH))?;
    let session = Session {
        secret: &made.secret,
        id: &made.session.id,
    };
    let s = scenarios(server.addr, session.secret, session.id)?;
    let sanity = sanity(&cli, &srv, &gw, session.id, &s)?;
    let in_process = in_process(&knobs, &srv, &gw, dir.path(), &session, &s)?;
    let mut http = Http {
        cli: &cli,
        srv: &srv,
        gw: &gw,
        secs: knobs.secs,
        rows: Vec::new(),
        cpu: Vec::new(),
        notes: Vec::new(),
    };
    over_http(&knobs, &mut http, &s)?;

    // Shut down (drain, final flush) before printing.
    let stopped = srv.block_on(server.stop());
    let records: i64 = srv.block_on(gw.store.read(|c| {
        c.query_row(
            "SELECT COUNT(*) FROM decisions",
            cedargate::params![],
            |r| r.get(0),
        )
    }))?;
    let report = Report {
        cores,
        started,
        load_at_start,
        in_process,
        http_rows: http.rows,
        cpu: http.cpu,
        notes: http.notes,
        sanity,
        records,
        stopped,
    };
    report.print(&knobs, dir.path());
    Ok(())
}
