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
//! (`raw`, one connection per concurrent worker, like `wrk`) so that the
//! load generator takes as little of the shared CPU as possible; the same
//! scenarios are also run with `reqwest` to show what a full client costs.
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

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use cedar_policy::{Authorizer, Context, Request, RestrictedExpression};
use cedargate::audit::{self, Decided, Scope};
use cedargate::config::Config;
use cedargate::gateway::{Gateway, SessionView};
use cedargate::mcp::jsonrpc::{self, Answer, Reply};
use cedargate::operator::{self, CreateAgent, CreateOrg, CreateProject, Provision};
use cedargate::policy::entities::session_context;
use cedargate::policy::{Action, Kind, PolicyBundle, PreparedContext};
use cedargate::store::decisions::{self, GENESIS_HASH, NewDecision};
use cedargate::store::observations::{self, NewObservation};
use cedargate::store::{Store, WriteOp};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;
use tower::ServiceExt;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = Result<T, Error>;

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

const ORG: &str = "bench";
const PROJECT: &str = "bench-proj";
const AGENT: &str = "bench-agent";

// ---------------------------------------------------------------------------
// Statistics and the report.

#[derive(Debug, Clone, Copy)]
struct Stats {
    n: usize,
    p50: f64,
    p99: f64,
    mean: f64,
    max: f64,
}

/// Percentiles in microseconds (nearest rank).
fn stats(mut v: Vec<Duration>) -> Stats {
    if v.is_empty() {
        return Stats {
            n: 0,
            p50: f64::NAN,
            p99: f64::NAN,
            mean: f64::NAN,
            max: f64::NAN,
        };
    }
    v.sort_unstable();
    let n = v.len();
    let at = |q: f64| {
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        v.get(rank - 1).map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
    };
    let total: f64 = v.iter().map(|d| d.as_secs_f64() * 1e6).sum();
    Stats {
        n,
        p50: at(0.50),
        p99: at(0.99),
        mean: total / n as f64,
        max: v.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1e6),
    }
}

#[derive(Debug, Clone, Copy)]
enum Goal {
    None,
    P50AtMost(f64),
    RpsAtLeast(f64),
}

#[derive(Debug)]
struct Row {
    label: String,
    conc: Option<usize>,
    lat: Stats,
    rps: Option<f64>,
    errors: u64,
    goal: Goal,
}

impl Row {
    fn goal_text(&self) -> String {
        match self.goal {
            Goal::None => String::new(),
            Goal::P50AtMost(us) => format!("p50 <= {us} µs"),
            Goal::RpsAtLeast(r) => format!(">= {} req/s", thousands(r)),
        }
    }

    fn verdict(&self) -> &'static str {
        let ok = match self.goal {
            Goal::None => return "",
            Goal::P50AtMost(us) => self.lat.p50 <= us,
            Goal::RpsAtLeast(r) => self.rps.is_some_and(|x| x >= r),
        };
        if ok && self.errors == 0 {
            "PASS"
        } else {
            "MISS"
        }
    }
}

fn thousands(x: f64) -> String {
    let s = (x.round() as u64).to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn fmt_us(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else if x < 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

fn print_rows(title: &str, rows: &[Row]) {
    println!();
    println!("{title}");
    println!(
        "  {:<48} {:>4} {:>7} {:>8} {:>8} {:>8} {:>8} {:>4}  {:<19} result",
        "scenario", "conc", "n", "p50 µs", "p99 µs", "mean µs", "req/s", "err", "goal"
    );
    println!("  {}", "-".repeat(129));
    for r in rows {
        println!(
            "  {:<48} {:>4} {:>7} {:>8} {:>8} {:>8} {:>8} {:>4}  {:<19} {}",
            r.label,
            r.conc.map_or("-".into(), |c| c.to_string()),
            r.lat.n,
            fmt_us(r.lat.p50),
            fmt_us(r.lat.p99),
            fmt_us(r.lat.mean),
            r.rps.map_or("-".into(), thousands),
            r.errors,
            r.goal_text(),
            r.verdict(),
        );
    }
}

fn print_parts(title: &str, parts: &[(String, Stats)]) {
    println!();
    println!("{title}");
    println!(
        "  {:<72} {:>8} {:>8} {:>8} {:>8}",
        "step", "p50 µs", "p99 µs", "mean µs", "max µs"
    );
    println!("  {}", "-".repeat(108));
    for (label, s) in parts {
        println!(
            "  {label:<72} {:>8} {:>8} {:>8} {:>8}",
            fmt_us(s.p50),
            fmt_us(s.p99),
            fmt_us(s.mean),
            fmt_us(s.max)
        );
    }
}

// ---------------------------------------------------------------------------
// CPU accounting.

/// Nanoseconds of CPU per thread group, from `/proc/self/task/*/schedstat`.
fn cpu_by_group() -> BTreeMap<&'static str, u64> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
            .unwrap_or(0u64);
        let comm = comm.trim();
        let group = if comm.starts_with("srv-worker") {
            "srv workers"
        } else if comm.starts_with("srv-blocking") {
            "srv blocking"
        } else if comm.starts_with("cedargate-write") {
            "writer"
        } else if comm.starts_with("cli-") {
            "client"
        } else {
            "main"
        };
        *out.entry(group).or_insert(0) += ns;
    }
    out
}

/// Busy CPU time of the whole machine in nanoseconds (`/proc/stat`,
/// USER_HZ = 100).
fn machine_busy_ns() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy: u64 = [0usize, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| fields.get(*i))
        .sum();
    busy * 10_000_000
}

/// CPU used between `start` and `stop`, by group, plus other processes.
#[derive(Debug, Clone)]
struct CpuWindow {
    groups: BTreeMap<&'static str, u64>,
    machine: u64,
    wall: Duration,
}

struct CpuMark {
    groups: BTreeMap<&'static str, u64>,
    machine: u64,
    at: Instant,
}

impl CpuMark {
    fn now() -> CpuMark {
        CpuMark {
            groups: cpu_by_group(),
            machine: machine_busy_ns(),
            at: Instant::now(),
        }
    }

    fn since(&self) -> CpuWindow {
        let after = cpu_by_group();
        CpuWindow {
            groups: after
                .iter()
                .map(|(k, v)| {
                    let before = self.groups.get(k).copied().unwrap_or(0);
                    (*k, v.saturating_sub(before))
                })
                .collect(),
            machine: machine_busy_ns().saturating_sub(self.machine),
            wall: self.at.elapsed(),
        }
    }
}

impl CpuWindow {
    fn ours(&self) -> u64 {
        self.groups.values().sum()
    }

    /// Cores other processes kept busy on average (10 ms resolution).
    fn foreign_cores(&self) -> f64 {
        self.machine.saturating_sub(self.ours()) as f64 / 1e9 / self.wall.as_secs_f64().max(1e-9)
    }
}

const CPU_GROUPS: [&str; 5] = ["srv workers", "srv blocking", "writer", "client", "main"];

fn print_cpu(rows: &[(String, u64, CpuWindow)], cores: usize) {
    println!();
    println!(
        "CPU per request (µs of CPU per completed request by thread group; util = busy share of {cores} cores; \
         other = cores used by other processes)"
    );
    print!("  {:<40}", "scenario");
    for g in CPU_GROUPS {
        print!(" {g:>12}");
    }
    println!(" {:>9} {:>6} {:>6}", "total", "util", "other");
    println!("  {}", "-".repeat(40 + 13 * CPU_GROUPS.len() + 24));
    for (label, requests, w) in rows {
        let per = |ns: u64| ns as f64 / 1e3 / (*requests).max(1) as f64;
        print!("  {label:<40}");
        for g in CPU_GROUPS {
            print!(" {:>12.1}", per(w.groups.get(g).copied().unwrap_or(0)));
        }
        let util = w.ours() as f64 / 1e9 / w.wall.as_secs_f64().max(1e-9) / cores as f64;
        println!(
            " {:>9.1} {:>5.0}% {:>6.2}",
            per(w.ours()),
            util * 100.0,
            w.foreign_cores()
        );
    }
}

// ---------------------------------------------------------------------------
// Setting up the gateway.

struct Server {
    gw: Arc<Gateway>,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: tokio::task::JoinHandle<Result<(), String>>,
}

/// The `tools/list` response body the endpoint writes for `entries`.
fn list_answer(entries: Vec<&str>) -> String {
    let answer = Answer::of(
        json!(1),
        Ok(Reply::Text(cedargate::tools::list_result(&entries))),
    );
    jsonrpc::body(&[answer], false)
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

async fn start_server(data: &Path) -> Res<Server> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let config = Config {
        listen: addr,
        public_url: Some(format!("http://{addr}")),
        data_dir: data.join("data"),
        policies_dir: repo().join("policies"),
        schema_file: repo().join("schemas/gateway.cedarschema"),
        demo_tenant: false,
        admin_token: None,
        ..Config::default()
    };
    let gw = cedargate::server::prepare(config)
        .await
        .map_err(|e| format!("gateway did not start: {e}"))?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
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

/// Creates the org, project, agent, key and session; returns (key, session id).
async fn create_tenant(gw: &Gateway) -> Res<(String, String)> {
    let made = gw
        .store
        .read(|c| {
            operator::provision(
                c,
                Provision {
                    org: CreateOrg {
                        id: ORG.into(),
                        name: "Bench".into(),
                        plan: None,
                        entitlements: None,
                    },
                    project: CreateProject {
                        id: PROJECT.into(),
                        memory_enabled: true,
                        graph_enabled: false,
                    },
                    agent: CreateAgent {
                        id: AGENT.into(),
                        name: "Bench agent".into(),
                        roles: vec!["developers".into()],
                    },
                    key_label: "daemon".into(),
                },
            )
        })
        .await?;
    Ok((made.secret, made.session.id))
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

// ---------------------------------------------------------------------------
// 1. The PEP in-process.

struct Pep {
    bundle: Arc<PolicyBundle>,
    view: Arc<SessionView>,
    principal: cedargate::policy::Uid,
    resource: cedargate::policy::Uid,
    context: Value,
    /// The context as the gateway prepares it: parsed once per request.
    prepared: PreparedContext,
    time: String,
}

impl Pep {
    async fn new(gw: &Gateway, secret: &str, session_id: &str, tool: &str) -> Res<Pep> {
        let presented = cedargate::auth::parse_key(secret).ok_or("malformed bench key")?;
        let key = gw
            .authenticate(&presented)
            .await
            .map_err(|e| e.to_string())?;
        let bundle = gw.pep.current();
        let view = gw
            .session_view(session_id, &key, &bundle)
            .await
            .map_err(|e| e.to_string())?;
        let time = cedargate::ids::now_rfc3339();
        // A tools/call decision: the typed action of the tool, with its
        // arguments in `context.args`, as the endpoint prepares it.
        let args = if tool == "af_memory_remember" {
            json!({ "content": "the retry backoff doubles up to 30 s", "type": "constraint", "confidence": 0.9 })
        } else {
            json!({ "query": RECALL_QUERY, "workType": "bug_fix" })
        };
        let prepared =
            bundle.prepare_tool_context(Action::CallTool, tool, session_id, &time, &args);
        let pep = Pep {
            principal: Kind::Agent.uid(&view.tenant.agent.id),
            resource: Kind::Tool.uid(tool),
            context: prepared.json.clone(),
            prepared,
            time,
            bundle,
            view,
        };
        if !pep.decide().allowed() {
            return Err(format!("the bench decision (call_tool {tool}) was denied").into());
        }
        Ok(pep)
    }

    fn decide(&self) -> Decided {
        audit::decide(
            &self.bundle,
            &self.view.slice,
            &self.principal,
            Action::CallTool,
            &self.resource,
            &self.prepared,
            Scope {
                org_id: Some(&self.view.tenant.session.org_id),
                session_id: Some(&self.view.tenant.session.id),
            },
            &self.time,
        )
    }
}

/// Times `f` per iteration, after a warm-up.
fn time_sync(iters: usize, mut f: impl FnMut()) -> Stats {
    for _ in 0..WARMUP {
        f();
    }
    let mut v = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        f();
        v.push(t0.elapsed());
    }
    stats(v)
}

struct PepReport {
    rows: Vec<Row>,
    parts: Vec<(String, Stats)>,
    lines: Vec<String>,
}

async fn pep_section(gw: &Arc<Gateway>, secret: &str, session_id: &str) -> Res<PepReport> {
    let pep = Pep::new(gw, secret, session_id, "af_memory_recall").await?;
    let (bundle, view) = (Arc::clone(&pep.bundle), Arc::clone(&pep.view));
    let writer = gw.store.writer().clone();
    let mark = CpuMark::now();

    // Headline: decide + record + enqueue, as the MCP endpoint does it.
    for _ in 0..WARMUP {
        let record = pep.decide().finish_default();
        writer
            .enqueue(vec![WriteOp::Decision(Box::new(record))])
            .await?;
    }
    writer.flush().await?;
    let mut v = Vec::with_capacity(PEP_ITERS);
    for _ in 0..PEP_ITERS {
        let t0 = Instant::now();
        let decided = pep.decide();
        writer
            .enqueue(vec![WriteOp::Decision(Box::new(decided.finish_default()))])
            .await?;
        v.push(t0.elapsed());
    }
    writer.flush().await?;
    let headline = stats(v);
    let decide_only = time_sync(PEP_ITERS, || {
        std::hint::black_box(pep.decide());
    });
    let rows = vec![
        Row {
            label: "PEP: audit::decide + finish + writer.enqueue".into(),
            conc: None,
            lat: headline,
            rps: None,
            errors: 0,
            goal: Goal::P50AtMost(20.0),
        },
        Row {
            label: "PEP: audit::decide alone".into(),
            conc: None,
            lat: decide_only,
            rps: None,
            errors: 0,
            goal: Goal::None,
        },
    ];

    // Where one decision's time goes.
    // The typed action of the tool (one per tool inside `call_tool`).
    let action_uid: cedar_policy::EntityUid = r#"Gateway::Action::"af_memory_recall""#.parse()?;
    let entities = &view.slice.entities;
    let schema_ctx = Some((&bundle.schema, &action_uid));
    let mut parts = Vec::new();
    parts.push((
        "PolicyBundle::prepare_session_context (once per MCP request)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(bundle.prepare_session_context(session_id, &pep.time));
        }),
    ));
    let recall_args = json!({ "query": RECALL_QUERY, "workType": "bug_fix" });
    parts.push((
        "PolicyBundle::prepare_tool_context (typed tools/call context with args)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(bundle.prepare_tool_context(
                Action::CallTool,
                "af_memory_recall",
                session_id,
                &pep.time,
                &recall_args,
            ));
        }),
    ));
    parts.push((
        "PolicyBundle::prepare_context (JSON path, as create_session uses it)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(bundle.prepare_context(Action::CallTool, pep.context.clone()));
        }),
    ));
    parts.push((
        "PolicyBundle::decide (Cedar part of audit::decide)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(bundle.decide(
                &pep.principal,
                Action::CallTool,
                &pep.resource,
                &pep.prepared,
                entities,
            ));
        }),
    ));
    parts.push((
        "  Context::from_json_value(context.clone(), Some(schema))  <- as shipped".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(Context::from_json_value(pep.context.clone(), schema_ctx)).ok();
        }),
    ));
    parts.push((
        "  serde_json::Value::clone of the context (included above)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(pep.context.clone());
        }),
    ));
    let ctx = Context::from_json_value(pep.context.clone(), schema_ctx)?;
    let request_of = |c: Context| {
        Request::new(
            pep.principal.clone().into(),
            action_uid.clone(),
            pep.resource.clone().into(),
            c,
            Some(&bundle.schema),
        )
        .map_err(|e| e.to_string())
    };
    parts.push((
        "  Request::new(.., Some(schema)) (validates the context too)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(request_of(ctx.clone())).ok();
        }),
    ));
    let request = request_of(ctx.clone())?;
    let authorizer = Authorizer::new();
    parts.push((
        "  Authorizer::is_authorized".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(authorizer.is_authorized(&request, &bundle.policies, entities));
        }),
    ));
    parts.push((
        "  Authorizer::new".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(Authorizer::new());
        }),
    ));
    let first_policy = bundle.policies.policies().next().map(|p| p.id().clone());
    if let Some(id) = first_policy {
        parts.push((
            "  PolicySet::annotation(id, \"advice\") (parses the key on every call)".to_string(),
            time_sync(PART_ITERS, || {
                std::hint::black_box(bundle.policies.annotation(&id, "advice"));
            }),
        ));
    }
    parts.push((
        "  PolicyBundle::decide_request (Authorizer::new + authorize + diagnostics)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(bundle.decide_request(&request, entities));
        }),
    ));
    parts.push((
        "  alternative: Context::from_json_value(context.clone(), None)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(Context::from_json_value(pep.context.clone(), None)).ok();
        }),
    ));
    for key in ["session", "time"] {
        let only = json!({ key: pep.context.get(key).cloned().unwrap_or(Value::Null) });
        parts.push((
            format!("    of which: a context with only `{key}` (no schema)"),
            time_sync(PART_ITERS, || {
                std::hint::black_box(Context::from_json_value(only.clone(), None)).ok();
            }),
        ));
    }
    let session_uid = Kind::Session.uid(session_id);
    let typed = || {
        Context::from_pairs([
            (
                "session".to_string(),
                RestrictedExpression::new_entity_uid(session_uid.clone().into()),
            ),
            (
                "time".to_string(),
                RestrictedExpression::new_datetime(&pep.time),
            ),
        ])
        .map_err(|e| e.to_string())
    };
    // Without `args` the typed action's context does not conform: a deny.
    let typed_same = request_of(typed()?)
        .map(|r| bundle.decide_request(&r, entities).allowed)
        .unwrap_or(false);
    parts.push((
        format!("  alternative: Context::from_pairs(new_entity_uid, new_datetime) (same verdict: {typed_same})"),
        time_sync(PART_ITERS, || {
            std::hint::black_box(typed()).ok();
        }),
    ));
    let unchecked = Context::from_json_value(pep.context.clone(), None)?;
    let same = request_of(unchecked.clone())
        .map(|r| bundle.decide_request(&r, entities).allowed)
        .unwrap_or(false);
    parts.push((
        format!(
            "  alternative: context built once per request, Context::clone (same verdict: {same})"
        ),
        time_sync(PART_ITERS, || {
            std::hint::black_box(ctx.clone());
        }),
    ));
    let decided = pep.decide();
    parts.push((
        "record fields: uuid v7 + principal/resource/context to_string + hashes (replicated)"
            .to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box((
                uuid::Uuid::now_v7().to_string(),
                pep.principal.to_string(),
                pep.resource.to_string(),
                pep.context.to_string(),
                view.slice.hash.clone(),
                Some(Arc::clone(&view.slice.json)),
                bundle.hash.clone(),
                Value::from(vec!["memory-tools-visible-when-memory-enabled".to_string()])
                    .to_string(),
            ));
        }),
    ));
    parts.push((
        "Decided::clone + finish_default (outcome JSON)".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(decided.clone().finish_default());
        }),
    ));
    parts.push((
        "access_session: whole audit::decide (ApiKey principal)".to_string(),
        {
            let principal = Kind::ApiKey.uid(&view.key.id);
            let resource = Kind::Session.uid(session_id);
            time_sync(PART_ITERS, || {
                std::hint::black_box(audit::decide(
                    &bundle,
                    &view.slice,
                    &principal,
                    Action::AccessSession,
                    &resource,
                    &pep.prepared,
                    Scope {
                        org_id: Some(ORG),
                        session_id: Some(session_id),
                    },
                    &pep.time,
                ));
            })
        },
    ));

    // Do two cores give twice the decisions? The same loop on both at once.
    let per_thread: Vec<Stats> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    time_sync(PART_ITERS, || {
                        std::hint::black_box(pep.decide());
                    })
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    for (i, s) in per_thread.into_iter().enumerate() {
        parts.push((
            format!("audit::decide on 2 threads at once: thread {i} (scaling check)"),
            s,
        ));
    }

    // Enqueue alone, on pre-built records; then how fast the writer commits.
    let records: Vec<_> = (0..PEP_ITERS)
        .map(|_| pep.decide().finish_default())
        .collect();
    writer.flush().await?;
    let mut v = Vec::with_capacity(PEP_ITERS);
    let started = Instant::now();
    for r in records {
        let t0 = Instant::now();
        writer.enqueue(vec![WriteOp::Decision(Box::new(r))]).await?;
        v.push(t0.elapsed());
    }
    let enqueued = started.elapsed();
    writer.flush().await?;
    let committed = started.elapsed();
    parts.push((
        "writer.enqueue alone (pre-built record)".to_string(),
        stats(v),
    ));
    let mut lines = vec![format!(
        "writer: {PEP_ITERS} records (1 per job) enqueued in {:.0} ms and all committed after {:.0} ms \
         => {} records/s through the group-commit writer",
        enqueued.as_secs_f64() * 1e3,
        committed.as_secs_f64() * 1e3,
        thousands(PEP_ITERS as f64 / committed.as_secs_f64()),
    )];

    // Per-request work around the decisions.
    let presented = cedargate::auth::parse_key(secret).ok_or("malformed bench key")?;
    let mut v = Vec::with_capacity(PART_ITERS);
    for _ in 0..PART_ITERS {
        let t0 = Instant::now();
        std::hint::black_box(gw.authenticate(&presented).await.ok());
        v.push(t0.elapsed());
    }
    parts.push((
        "Gateway::authenticate (cache hit: moka + SHA-256)".to_string(),
        stats(v),
    ));
    let mut v = Vec::with_capacity(PART_ITERS);
    for _ in 0..PART_ITERS {
        let t0 = Instant::now();
        std::hint::black_box(gw.session_view(session_id, &view.key, &bundle).await.ok());
        v.push(t0.elapsed());
    }
    parts.push(("Gateway::session_view (cache hit)".to_string(), stats(v)));
    parts.push((
        "ids::now_rfc3339 + session_context".to_string(),
        time_sync(PART_ITERS, || {
            let t = cedargate::ids::now_rfc3339();
            std::hint::black_box(session_context(session_id, &t));
        }),
    ));
    parts.push((
        "tools/list answer: listing_json() x2 + JSON-RPC wrap".to_string(),
        time_sync(PART_ITERS, || {
            std::hint::black_box(list_answer(
                view.tools.iter().map(|t| t.listing_json()).collect(),
            ));
        }),
    ));
    if let Some(spec) = view.tool("af_memory_recall") {
        let args = json!({"query": RECALL_QUERY, "workType": "bug_fix"});
        parts.push((
            "ToolSpec::validate (recall arguments, JSON Schema)".to_string(),
            time_sync(PART_ITERS, || {
                std::hint::black_box(spec.validate(&args)).ok();
            }),
        ));
    }
    // The tools/list handler's work, replicated through the public API
    // (authenticate, view, context, 3 decisions, 2 enqueues, the answer),
    // to compare with the router called in-process.
    for with_enqueue in [true, false] {
        let mut v = Vec::with_capacity(PART_ITERS);
        for i in 0..(PART_ITERS + WARMUP) {
            let t0 = Instant::now();
            let key = gw
                .authenticate(&presented)
                .await
                .map_err(|e| e.to_string())?;
            let bundle = gw.pep.current();
            let view = gw
                .session_view(session_id, &key, &bundle)
                .await
                .map_err(|e| e.to_string())?;
            let time = cedargate::ids::now_rfc3339();
            let context = bundle.prepare_session_context(session_id, &time);
            let scope = Scope {
                org_id: Some(&view.tenant.session.org_id),
                session_id: Some(&view.tenant.session.id),
            };
            let access = audit::decide(
                &bundle,
                &view.slice,
                &Kind::ApiKey.uid(&key.id),
                Action::AccessSession,
                &Kind::Session.uid(session_id),
                &context,
                scope,
                &time,
            );
            let first = vec![WriteOp::Decision(Box::new(access.finish_default()))];
            if with_enqueue {
                writer.enqueue(first).await?;
            }
            let agent = Kind::Agent.uid(&view.tenant.agent.id);
            let mut tools = Vec::new();
            let mut records = Vec::new();
            for spec in &view.tools {
                let d = audit::decide(
                    &bundle,
                    &view.slice,
                    &agent,
                    Action::ViewTool,
                    &Kind::Tool.uid(&spec.name),
                    &context,
                    scope,
                    &time,
                );
                if d.allowed() {
                    tools.push(spec.listing_json());
                }
                records.push(WriteOp::Decision(Box::new(d.finish_default())));
            }
            if with_enqueue {
                writer.enqueue(records).await?;
            }
            std::hint::black_box(list_answer(tools));
            if i >= WARMUP {
                v.push(t0.elapsed());
            }
        }
        writer.flush().await?;
        parts.push((
            format!(
                "tools/list handler work replicated in-process ({})",
                if with_enqueue {
                    "with enqueues"
                } else {
                    "records dropped, writer idle"
                }
            ),
            stats(v),
        ));
    }

    let cpu = mark.since();
    lines.push(format!(
        "in-process section: other processes kept {:.2} cores busy on average",
        cpu.foreign_cores()
    ));
    lines.push(format!(
        "entity slice: {} bytes of JSON; context: {}",
        view.slice.json.len(),
        pep.context
    ));
    Ok(PepReport { rows, parts, lines })
}

/// What one decision record costs the writer: chain hash and SQLite inserts,
/// timed on a second database inside one transaction (no fsync).
async fn writer_probe(dir: &Path, template: NewDecision) -> Res<Vec<(String, Stats)>> {
    let store = Store::open(&dir.join("probe/probe.db"), 16, 16)?;
    let out = store
        .read(move |c| {
            let mk = || {
                let mut d = template.clone();
                d.id = uuid::Uuid::now_v7().to_string();
                d
            };
            let (mut hash_t, mut with_t, mut without_t) = (Vec::new(), Vec::new(), Vec::new());
            c.begin(true)?;
            let tx = c;
            let mut prev = GENESIS_HASH.to_string();
            let mut seq = 0i64;
            for _ in 0..PART_ITERS {
                let d = mk();
                let t0 = Instant::now();
                std::hint::black_box(decisions::chain_hash(&prev, seq + 1, &d));
                hash_t.push(t0.elapsed());
            }
            for i in 0..2 * PART_ITERS {
                let mut d = mk();
                let with_entities = i % 2 == 0;
                if !with_entities {
                    d.entities = None;
                }
                seq += 1;
                let t0 = Instant::now();
                prev = decisions::insert(tx, seq, &prev, &d)?;
                let dt = t0.elapsed();
                if with_entities {
                    with_t.push(dt);
                } else {
                    without_t.push(dt);
                }
            }
            let t0 = Instant::now();
            tx.commit()?;
            let commit = t0.elapsed();
            Ok(vec![
                (
                    "decisions::chain_hash (SHA-256 over the record)".to_string(),
                    stats(hash_t),
                ),
                (
                    "decisions::insert with entities (snapshot INSERT OR IGNORE + row)".to_string(),
                    stats(with_t),
                ),
                (
                    "decisions::insert without entities (row + 3 indexes + hash)".to_string(),
                    stats(without_t),
                ),
                (
                    format!("COMMIT of those {} rows (one fsync)", 2 * PART_ITERS),
                    stats(vec![commit]),
                ),
            ])
        })
        .await?;
    Ok(out)
}

// ---------------------------------------------------------------------------
// HTTP load generation.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientKind {
    Reqwest,
    Raw,
}

impl ClientKind {
    fn name(self) -> &'static str {
        match self {
            ClientKind::Reqwest => "reqwest",
            ClientKind::Raw => "raw",
        }
    }
}

type BodyFn = Arc<dyn Fn(u64) -> Vec<u8> + Send + Sync>;

/// One kind of request: `GET path` when `body` is `None`, else an MCP POST.
struct Spec {
    addr: SocketAddr,
    path: String,
    url: String,
    auth: String,
    body: Option<BodyFn>,
    /// A successful answer contains this.
    expect: &'static [u8],
    http: reqwest::Client,
}

fn mcp_spec(base: &Spec, body: BodyFn) -> Arc<Spec> {
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

/// A minimal keep-alive HTTP/1.1 client on one connection (the lower bound
/// of what a client costs; answers must carry `Content-Length`).
struct RawConn {
    stream: tokio::net::TcpStream,
    head: Vec<u8>,
    buf: Vec<u8>,
    scratch: Vec<u8>,
}

impl RawConn {
    async fn connect(s: &Spec) -> std::io::Result<RawConn> {
        let stream = tokio::net::TcpStream::connect(s.addr).await?;
        stream.set_nodelay(true)?;
        let head = if s.body.is_some() {
            format!(
                "POST {} HTTP/1.1\r\nhost: {}\r\nauthorization: {}\r\ncontent-type: application/json\r\n\
                 accept: application/json, text/event-stream\r\nmcp-protocol-version: {}\r\n",
                s.path,
                s.addr,
                s.auth,
                cedargate::mcp::protocol::LATEST
            )
        } else {
            format!("GET {} HTTP/1.1\r\nhost: {}\r\n\r\n", s.path, s.addr)
        };
        Ok(RawConn {
            stream,
            head: head.into_bytes(),
            buf: Vec::with_capacity(16 * 1024),
            scratch: vec![0; 16 * 1024],
        })
    }

    async fn fill(&mut self) -> std::io::Result<()> {
        let n = self.stream.read(&mut self.scratch).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        self.buf
            .extend_from_slice(self.scratch.get(..n).unwrap_or_default());
        Ok(())
    }

    async fn send(&mut self, body: Option<&[u8]>) -> std::io::Result<(u16, Vec<u8>)> {
        match body {
            Some(body) => {
                let mut req = Vec::with_capacity(self.head.len() + body.len() + 32);
                req.extend_from_slice(&self.head);
                req.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
                req.extend_from_slice(body);
                self.stream.write_all(&req).await?;
            }
            None => self.stream.write_all(&self.head).await?,
        }
        let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
        let header_end = loop {
            if let Some(p) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p;
            }
            self.fill().await?;
        };
        let head = std::str::from_utf8(self.buf.get(..header_end).unwrap_or_default())
            .map_err(|_| bad("non-UTF-8 response head"))?;
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("bad status line"))?;
        let len: usize = lines
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .ok_or_else(|| bad("response without content-length"))?;
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
        Ok((status, body))
    }
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
                    conn = RawConn::connect(&s).await.ok();
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
struct Http<'a> {
    cli: &'a Runtime,
    srv: &'a Runtime,
    gw: &'a Arc<Gateway>,
    secs: f64,
    rows: Vec<Row>,
    cpu: Vec<(String, u64, CpuWindow)>,
    notes: Vec<String>,
}

impl Http<'_> {
    /// Warm-up, then a measured run; the writer is flushed before and after
    /// so each run starts clean and its leftover backlog is reported.
    fn run(
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
        let mark = CpuMark::now();
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

fn constant_body(v: &Value) -> BodyFn {
    let bytes = v.to_string().into_bytes();
    Arc::new(move |_| bytes.clone())
}

/// The handler alone: the router called in-process (no socket, no client).
async fn handler_only(gw: Arc<Gateway>, s: Arc<Spec>, n: usize) -> Res<Stats> {
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
async fn one(s: &Spec) -> Res<Value> {
    let body = s.body.as_ref().map(|f| f(0));
    let (status, bytes) = send_reqwest(s, body).await?;
    let v: Value = serde_json::from_slice(&bytes)?;
    if status != 200 || v.get("result").is_none() {
        return Err(format!("HTTP {status}: {v}").into());
    }
    Ok(v)
}

// ---------------------------------------------------------------------------

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runtime(prefix: &'static str, workers: usize) -> Res<Runtime> {
    let spawned = Arc::new(AtomicUsize::new(0));
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name_fn(move || {
            // Workers are started first, when the runtime is built.
            if spawned.fetch_add(1, Ordering::Relaxed) < workers {
                format!("{prefix}-worker")
            } else {
                format!("{prefix}-blocking")
            }
        })
        .enable_all()
        .build()?)
}

/// Filesystem type of the mount holding `path` (from /proc/self/mounts).
fn fs_type(path: &Path) -> String {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return "?".into();
    };
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let _device = f.next()?;
            let mount = f.next()?;
            let ty = f.next()?;
            path.starts_with(mount)
                .then(|| (mount.len(), ty.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "?".into(), |(_, ty)| ty)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Recall's parts: the thread hand-off, the FTS5 search, the whole adapter.
async fn recall_parts(gw: &Gateway, secret: &str, session_id: &str) -> Res<Vec<(String, Stats)>> {
    let view = Pep::new(gw, secret, session_id, "af_memory_recall")
        .await?
        .view;
    let args = json!({"query": RECALL_QUERY, "workType": "bug_fix"});
    let (mut noop, mut search, mut full) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..500 {
        let t0 = Instant::now();
        gw.store.read(|_| Ok(())).await?;
        noop.push(t0.elapsed());
        let t0 = Instant::now();
        let hits = gw
            .store
            .read(|c| observations::search(c, ORG, PROJECT, RECALL_QUERY, 50))
            .await?;
        search.push(t0.elapsed());
        std::hint::black_box(hits);
        let t0 = Instant::now();
        let out = cedargate::tools::memory::recall(&gw.store, &view.tenant, &args, None)
            .await
            .map_err(|e| e.to_string())?;
        full.push(t0.elapsed());
        std::hint::black_box(out);
    }
    let matched: i64 = gw
        .store
        .read(|c| {
            let q = observations::fts_query(RECALL_QUERY).unwrap_or_default();
            c.query_row(
                "SELECT COUNT(*) FROM observations_fts WHERE observations_fts MATCH ?1",
                cedargate::params![q],
                |r| r.get(0),
            )
        })
        .await?;
    Ok(vec![
        (
            "store.read no-op (spawn_blocking round trip)".to_string(),
            stats(noop),
        ),
        (
            format!(
                "store.read(observations::search): FTS5 OR-query matching {matched} rows, limit 50"
            ),
            stats(search),
        ),
        (
            "tools::memory::recall (search + assemble)".to_string(),
            stats(full),
        ),
    ])
}

/// What a durable commit costs: an empty job, then one record per commit.
async fn commit_parts(gw: &Gateway, secret: &str, session_id: &str) -> Res<Vec<(String, Stats)>> {
    let pep = Pep::new(gw, secret, session_id, "af_memory_remember").await?;
    let writer = gw.store.writer();
    let n = 500;
    let (mut flush, mut one) = (Vec::new(), Vec::new());
    let mark = CpuMark::now();
    for _ in 0..n {
        let t0 = Instant::now();
        writer.flush().await?;
        flush.push(t0.elapsed());
    }
    let flush_cpu = mark.since();
    let mark = CpuMark::now();
    for _ in 0..n {
        let record = pep.decide().finish_default();
        let t0 = Instant::now();
        writer
            .submit(vec![WriteOp::Decision(Box::new(record))])
            .await?;
        one.push(t0.elapsed());
    }
    let one_cpu = mark.since();
    let writer_cpu =
        |w: &CpuWindow| w.groups.get("writer").copied().unwrap_or(0) as f64 / 1e3 / n as f64;
    Ok(vec![
        (
            format!(
                "writer.flush (empty job: hand-off, no fsync); writer CPU {:.0} µs per job",
                writer_cpu(&flush_cpu)
            ),
            stats(flush),
        ),
        (
            format!(
                "writer.submit(1 decision): one durable commit; writer CPU {:.0} µs per commit",
                writer_cpu(&one_cpu)
            ),
            stats(one),
        ),
    ])
}

fn main() -> Res<()> {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("gateway bench: run it with `cargo bench --bench gateway`; skipped");
        return Ok(());
    }
    let secs: f64 = env_num("BENCH_SECS", 3.0);
    let srv_threads: usize = env_num("BENCH_SERVER_THREADS", 2);
    let cli_threads: usize = env_num("BENCH_CLIENT_THREADS", 2);
    let headline = match std::env::var("BENCH_CLIENT").as_deref() {
        Ok("reqwest") => ClientKind::Reqwest,
        _ => ClientKind::Raw,
    };
    let other = match headline {
        ClientKind::Raw => ClientKind::Reqwest,
        ClientKind::Reqwest => ClientKind::Raw,
    };
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let want = |section: &str| only.is_empty() || only.split(',').any(|s| s.trim() == section);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let started = Instant::now();
    let load_at_start = loadavg();

    let srv = runtime("srv", srv_threads)?;
    let cli = runtime("cli", cli_threads)?;
    let dir = tempfile::tempdir()?;
    let mut server = srv.block_on(start_server(dir.path()))?;
    let gw = Arc::clone(&server.gw);
    let (secret, session_id) = srv.block_on(create_tenant(&gw))?;
    let mcp_path = format!("/api/mcp/{session_id}");
    let http_client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(256)
        .build()?;
    let health = Arc::new(Spec {
        addr: server.addr,
        path: "/healthz".into(),
        url: format!("http://{}/healthz", server.addr),
        auth: String::new(),
        body: None,
        expect: b"\"ok\"",
        http: http_client.clone(),
    });
    let base = Spec {
        addr: server.addr,
        url: format!("http://{}{mcp_path}", server.addr),
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

    // Sanity: what the scenarios return.
    let listed = cli.block_on(one(&list))?;
    let n_tools = listed
        .pointer("/result/tools")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    srv.block_on(seed_observations(&gw, &session_id, SEEDED_OBSERVATIONS))?;
    let recalled = cli.block_on(one(&recall))?;
    let n_recalled = recalled
        .pointer("/result/structuredContent/observations")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let recall_bytes = recalled.to_string().len();

    // 1. The PEP in-process (on the main thread; the writer on its own).
    let mut pep_rows = Vec::new();
    let mut parts = Vec::new();
    let mut probe = Vec::new();
    let mut lines = Vec::new();
    if want("pep") {
        let pep = srv.block_on(pep_section(&gw, &secret, &session_id))?;
        pep_rows = pep.rows;
        parts = pep.parts;
        lines = pep.lines;
        let template = srv
            .block_on(Pep::new(&gw, &secret, &session_id, "af_memory_recall"))?
            .decide()
            .finish_default();
        probe = srv.block_on(writer_probe(dir.path(), template))?;
    }

    // Handlers in-process (router without socket), recall's and a commit's parts.
    let mut recall_breakdown = Vec::new();
    let mut commit_breakdown = Vec::new();
    if want("parts") {
        parts.push((
            "tools/list through the router in-process (no socket, no client)".to_string(),
            srv.block_on(handler_only(Arc::clone(&gw), Arc::clone(&list), 3_000))?,
        ));
        recall_breakdown.push((
            "af_memory_recall through the router in-process (no socket)".to_string(),
            srv.block_on(handler_only(Arc::clone(&gw), Arc::clone(&recall), 500))?,
        ));
        recall_breakdown.extend(srv.block_on(recall_parts(&gw, &secret, &session_id))?);
        commit_breakdown = srv.block_on(commit_parts(&gw, &secret, &session_id))?;
    }

    // 2-4. End to end over loopback.
    let mut http = Http {
        cli: &cli,
        srv: &srv,
        gw: &gw,
        secs,
        rows: Vec::new(),
        cpu: Vec::new(),
        notes: Vec::new(),
    };
    let healthz = "GET /healthz (HTTP stack baseline)";
    if want("healthz") {
        http.run(healthz, &health, headline, 1, Goal::None)?;
        http.run(healthz, &health, headline, CONCURRENCY, Goal::None)?;
    }
    if want("list") {
        http.run("tools/list", &list, headline, 1, Goal::P50AtMost(200.0))?;
        http.run(
            "tools/list",
            &list,
            headline,
            CONCURRENCY,
            Goal::RpsAtLeast(10_000.0),
        )?;
    }
    if want("recall") {
        http.run("af_memory_recall", &recall, headline, 1, Goal::None)?;
        http.run(
            "af_memory_recall",
            &recall,
            headline,
            CONCURRENCY,
            Goal::None,
        )?;
    }
    if want("remember") {
        http.run("af_memory_remember", &remember, headline, 1, Goal::None)?;
        http.run(
            "af_memory_remember",
            &remember,
            headline,
            CONCURRENCY,
            Goal::RpsAtLeast(3_000.0),
        )?;
    }
    if want("reference") {
        // What the client costs: the same with the other client.
        http.run(healthz, &health, other, 1, Goal::None)?;
        http.run(healthz, &health, other, CONCURRENCY, Goal::None)?;
        http.run("tools/list", &list, other, 1, Goal::None)?;
        http.run("tools/list", &list, other, CONCURRENCY, Goal::None)?;
    }

    // Shut down (drain, final flush) before printing.
    if let Some(tx) = server.stop.take() {
        let _ = tx.send(());
    }
    let stopped = srv.block_on(&mut server.handle);
    let Http {
        rows: http_rows,
        cpu,
        notes,
        ..
    } = http;
    let records: i64 = srv.block_on(gw.store.read(|c| {
        c.query_row(
            "SELECT COUNT(*) FROM decisions",
            cedargate::params![],
            |r| r.get(0),
        )
    }))?;

    println!("cedargate gateway bench");
    println!(
        "  {cores} cores ({}), clocksource {}; server runtime {srv_threads} workers, client runtime {cli_threads} \
         workers, same process; load average {load_at_start} at start, {} at end",
        std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map_or_else(|| "?".into(), |m| m.trim().to_string()),
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .map_or_else(|_| "?".into(), |s| s.trim().to_string()),
        loadavg()
    );
    println!(
        "  data dir {} ({}); shipped policies and schema; headline client `{}`, reference client `{}`; \
         window {secs} s",
        dir.path().display(),
        fs_type(dir.path()),
        headline.name(),
        other.name()
    );
    if !pep_rows.is_empty() {
        print_rows("1. PEP in-process (µs per decision)", &pep_rows);
    }
    if !http_rows.is_empty() {
        print_rows(
            "2-4. End to end over loopback HTTP (µs per request)",
            &http_rows,
        );
        print_cpu(&cpu, cores);
    }
    if !parts.is_empty() {
        print_parts(
            "Breakdown: one decision and the work around it (in-process)",
            &parts,
        );
    }
    if !probe.is_empty() {
        print_parts(
            "Breakdown: the writer's cost per decision record (probe database, no fsync)",
            &probe,
        );
    }
    if !recall_breakdown.is_empty() {
        print_parts("Breakdown: af_memory_recall", &recall_breakdown);
    }
    if !commit_breakdown.is_empty() {
        print_parts("Breakdown: durable commit", &commit_breakdown);
    }
    println!();
    println!("Notes");
    for l in &lines {
        println!("  {l}");
    }
    println!(
        "  tools/list answers {n_tools} tools and records 3 decisions (access_session + 2 view_tool); \
         tools/call records 3 (access_session, view_tool, call_tool) and answers after their commit"
    );
    println!(
        "  recall answers {n_recalled} of {SEEDED_OBSERVATIONS} seeded observations ({recall_bytes} bytes); \
         remember adds one observation per request"
    );
    for n in notes {
        println!("  {n}");
    }
    println!(
        "  {} decision records in the trail at the end; server stopped {}; bench took {:.0} s",
        thousands(records as f64),
        match stopped {
            Ok(Ok(())) => "cleanly".to_string(),
            Ok(Err(e)) => format!("with an error: {e}"),
            Err(e) => format!("with a failed task: {e}"),
        },
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
