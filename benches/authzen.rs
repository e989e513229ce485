//! `cargo bench --bench authzen`: the AuthZEN decision point on this
//! machine, printed as one table with each figure's goal, beside its
//! references measured in the same run.
//!
//! The real server runs in-process on its own tokio runtime (threads
//! `srv-*`) over a fresh temporary data directory (SQLite, durable: every
//! answer after its records' commit) with two decision applications: the
//! shipped `examples/pdp/records/`, and `big`, the same schema and policies
//! over [`RESOURCES`] records (one in [`ACTIVE_EVERY`] `active`, the others
//! `archived`). The load generator runs on a second runtime (threads
//! `cli-*`) and speaks HTTP/1.1 keep-alive over loopback
//! (`support::http::RawConn`, one connection per concurrent worker).
//!
//! Sections (`BENCH_ONLY`, comma-separated, default all):
//! - `bare`: the references, in-process: Cedar's `Authorizer::is_authorized`
//!   alone on the application's policies and data, the application's own
//!   decision (`AppSet::prepare` + `AppSet::decide`: mapping, schema checks,
//!   the fail-closed verdict), and the fsync floor (a bare SQLite WAL
//!   commit with `synchronous=FULL`);
//! - `one`: `POST /pdp/records/access/v1/evaluation`, one at a time (c=1):
//!   p50 against the goal fsync floor + 150 µs;
//! - `batch`: `POST …/evaluations` of [`BATCH`] evaluations from
//!   [`BATCH_CONCURRENCY`] connections for `BENCH_SECS`: recorded decisions
//!   per second (goal ≥ 50,000), and the server's CPU per decision by
//!   thread group (request workers, the group-commit writer);
//! - `search`: `POST /pdp/big/access/v1/search/resource`, the first page
//!   of 100, one at a time: `read` (every record allowed: the page fills
//!   from the first 100 candidates) and `write` (one record in
//!   [`ACTIVE_EVERY`] allowed: the page decides about 100 × that many);
//!   p50 against the goal ≤ 100 ms.
//!
//! Knobs: `BENCH_SECS` (3), `BENCH_ITERS` (2,000 evaluations at c=1, after
//! 200 of warm-up; in-process figures take 10× as many), `BENCH_SEARCHES`
//! (50 pages of each search), `BENCH_ONLY`.
//!
//! Without `--bench` (that is, under `cargo test --all-targets`) the binary
//! exits at once, so it never adds to test time.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cedar_policy::{Authorizer, Context, Entities, EntityUid, Request};
use cedargate::gateway::Gateway;
use cedargate::operator::{self, CreateKey, CreateOrg};
use cedargate::policy::application::{ActionInput, AppSet, EntityInput, RequestInput};
use serde_json::{Value, json};
use support::http::RawConn;
use support::procfs::{self, Clock, Threads};
use support::stats::{Rank, Stats};
use support::{Res, env_num, repo, runtime};

/// Records of the `big` application.
const RESOURCES: usize = 100_000;
/// One record of `big` in this many is `active` (writable by alice).
const ACTIVE_EVERY: usize = 20;
/// Evaluations in one batch.
const BATCH: usize = 100;
/// Connections sending batches at once.
const BATCH_CONCURRENCY: usize = 8;
/// A search's first page.
const PAGE: usize = 100;

/// This bench's CPU accounting: `schedstat` ns, by runtime role.
const THREADS: Threads = Threads {
    clock: Clock::Schedstat,
    group: procfs::runtime_roles,
};

fn stats(v: Vec<Duration>) -> Stats {
    Stats::of(v, Rank::Nearest)
}

/// The knobs of the module doc.
struct Knobs {
    secs: f64,
    iters: usize,
    searches: usize,
    only: String,
}

impl Knobs {
    fn from_env() -> Knobs {
        Knobs {
            secs: env_num("BENCH_SECS", 3.0),
            iters: env_num("BENCH_ITERS", 2_000),
            searches: env_num("BENCH_SEARCHES", 50),
            only: std::env::var("BENCH_ONLY").unwrap_or_default(),
        }
    }

    fn runs(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.split(',').any(|s| s.trim() == section)
    }
}

/// One line of the report.
struct Row {
    what: String,
    figure: String,
    goal: String,
}

fn main() -> Res<()> {
    if !support::bench_requested("authzen") {
        return Ok(());
    }
    let knobs = Knobs::from_env();
    let dir = tempfile::tempdir()?;
    let pdp = dir.path().join("pdp");
    copy_tree(&repo().join("examples/pdp/records"), &pdp.join("records"))?;
    big_app(&pdp.join("big"))?;
    let srv = runtime("srv", 2)?;
    let cli = runtime("cli", 2)?;
    let data = dir.path().join("data");
    let server = srv.block_on(support::server::start(data, move |c| {
        c.pdp_dir = pdp;
        c.lifecycle.watch = false;
    }))?;
    let gw = Arc::clone(&server.gw);
    let key = srv.block_on(pdp_key(&gw))?;
    for app in ["records", "big"] {
        if gw.pdp.app(app).and_then(|a| a.active()).is_none() {
            return Err(format!("the application `{app}` did not load").into());
        }
    }
    println!(
        "authzen bench: {} cores ({}), load average {}, trail on {}",
        support::cores(),
        procfs::cpu_model(),
        procfs::loadavg(),
        procfs::fs_type(dir.path())
    );
    let mut rows = Vec::new();
    let mut floor = f64::NAN;
    if knobs.runs("bare") {
        floor = bare(&gw, &knobs, dir.path(), &mut rows)?;
    }
    if knobs.runs("one") {
        let s = cli.block_on(one(server.addr, &key, &knobs))?;
        rows.push(Row {
            what: "1 evaluation, c=1 keep-alive".into(),
            figure: format!("p50 {:.1} µs, p99 {:.1} µs", s.p50, s.p99),
            goal: if floor.is_nan() {
                "≤ fsync floor + 150 µs (run `bare` too)".into()
            } else {
                format!(
                    "≤ fsync floor + 150 µs = {:.1} µs: floor + {:.1} µs",
                    floor + 150.0,
                    s.p50 - floor
                )
            },
        });
    }
    if knobs.runs("batch") {
        batch(&cli, server.addr, &key, &knobs, &mut rows)?;
    }
    if knobs.runs("search") {
        for (action, allowed) in [("read", 1), ("write", ACTIVE_EVERY)] {
            let (s, short) = cli.block_on(search(server.addr, &key, action, &knobs))?;
            rows.push(Row {
                what: format!(
                    "search/resource over {RESOURCES} records, first page of {PAGE} ({action}: 1 in {allowed} allowed)"
                ),
                figure: format!(
                    "p50 {:.1} ms, p99 {:.1} ms, {short} of {} pages short",
                    s.p50 / 1e3,
                    s.p99 / 1e3,
                    s.n
                ),
                goal: "p50 ≤ 100 ms".into(),
            });
        }
    }
    print_rows(&rows);
    let stopped = srv.block_on(server.stop());
    println!("server stopped {stopped}");
    Ok(())
}

fn print_rows(rows: &[Row]) {
    let w = rows.iter().map(|r| r.what.len()).max().unwrap_or(0);
    let f = rows.iter().map(|r| r.figure.len()).max().unwrap_or(0);
    println!();
    for r in rows {
        println!("{:<w$}  {:<f$}  {}", r.what, r.figure, r.goal);
    }
}

/// Copies a folder and everything inside it.
fn copy_tree(from: &Path, to: &Path) -> Res<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        let Some(name) = path.file_name() else {
            continue;
        };
        if path.is_dir() {
            copy_tree(&path, &to.join(name))?;
        } else {
            std::fs::copy(&path, to.join(name))?;
        }
    }
    Ok(())
}

/// `big`: the records application's schema and policies over
/// [`RESOURCES`] records (no policy tests: they name the shipped data).
fn big_app(dir: &Path) -> Res<()> {
    let records = repo().join("examples/pdp/records");
    std::fs::create_dir_all(dir.join("policies"))?;
    std::fs::copy(
        records.join("schema.cedarschema"),
        dir.join("schema.cedarschema"),
    )?;
    std::fs::copy(
        records.join("policies/records.cedar"),
        dir.join("policies/records.cedar"),
    )?;
    let mut entities = vec![
        json!({"uid": {"type": "Records::team", "id": "editors"}, "attrs": {}, "parents": []}),
        json!({"uid": {"type": "Records::user", "id": "alice"}, "attrs": {},
               "parents": [{"type": "Records::team", "id": "editors"}]}),
    ];
    for i in 0..RESOURCES {
        let status = if i % ACTIVE_EVERY == 0 {
            "active"
        } else {
            "archived"
        };
        entities.push(
            json!({"uid": {"type": "Records::record", "id": format!("r{i:06}")},
                             "attrs": {"status": status}, "parents": []}),
        );
    }
    std::fs::write(dir.join("entities.json"), serde_json::to_vec(&entities)?)?;
    Ok(())
}

/// A key of the PDP role for both applications.
async fn pdp_key(gw: &Gateway) -> Res<String> {
    let secret = gw
        .store
        .read(|c| {
            operator::create_org(
                c,
                CreateOrg {
                    id: "bench".into(),
                    name: "Bench".into(),
                    plan: None,
                    entitlements: None,
                },
            )?;
            let (_, secret) = operator::create_key(
                c,
                "bench",
                CreateKey {
                    label: "pep".into(),
                    pdp_apps: vec!["records".into(), "big".into()],
                },
            )?;
            Ok(secret)
        })
        .await?;
    Ok(secret)
}

/// The references, in-process: Cedar alone, the application's decision,
/// the fsync floor (returned, µs).
fn bare(gw: &Gateway, knobs: &Knobs, dir: &Path, rows: &mut Vec<Row>) -> Res<f64> {
    let set = gw
        .pdp
        .app("records")
        .and_then(|a| a.active())
        .ok_or("records is not loaded")?;
    let n = knobs.iters * 10;
    let cedar = is_authorized(&set, n)?;
    rows.push(Row {
        what: "bare Cedar is_authorized (in-process)".into(),
        figure: format!("p50 {:.2} µs, mean {:.2} µs", cedar.p50, cedar.mean),
        goal: "reference".into(),
    });
    let decided = app_decision(&set, n)?;
    rows.push(Row {
        what: "AppSet prepare + decide (in-process)".into(),
        figure: format!("p50 {:.2} µs, mean {:.2} µs", decided.p50, decided.mean),
        goal: "reference".into(),
    });
    let floor = support::fsync::fsync_floor(dir, 500)?;
    rows.push(Row {
        what: "fsync floor (SQLite WAL commit, synchronous=FULL)".into(),
        figure: format!("p50 {floor:.1} µs"),
        goal: "reference".into(),
    });
    Ok(floor)
}

/// Cedar's authorizer alone on `set`'s policies and entity data.
fn is_authorized(set: &AppSet, n: usize) -> Res<Stats> {
    let b = &set.bundle;
    let entities = Entities::from_json_str(&set.data.json, Some(&b.schema))?;
    let uid = |s: &str| EntityUid::from_str(s).map_err(|e| e.to_string());
    let request = Request::new(
        uid(r#"Records::user::"alice""#)?,
        uid(r#"Records::Action::"write""#)?,
        uid(r#"Records::record::"record-1""#)?,
        Context::empty(),
        Some(&b.schema),
    )?;
    let authorizer = Authorizer::new();
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let t0 = Instant::now();
        let answer = authorizer.is_authorized(&request, &b.policies, &entities);
        let took = t0.elapsed();
        std::hint::black_box(answer);
        if i >= n / 10 {
            samples.push(took);
        }
    }
    Ok(stats(samples))
}

/// The application's decision as the server makes it: the AuthZEN input
/// mapped and checked against the schema, then decided.
fn app_decision(set: &AppSet, n: usize) -> Res<Stats> {
    let input = RequestInput {
        subject: EntityInput {
            type_name: "user",
            id: "alice",
            properties: None,
        },
        action: ActionInput {
            name: "write",
            properties: None,
        },
        resource: EntityInput {
            type_name: "record",
            id: "record-1",
            properties: None,
        },
        context: None,
        at: String::new(),
    };
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let t0 = Instant::now();
        let prepared = set.prepare(&input).map_err(|e| e.to_string())?;
        let verdict = set.decide(&prepared);
        let took = t0.elapsed();
        if !verdict.allowed {
            return Err("alice may write record-1".into());
        }
        if i >= n / 10 {
            samples.push(took);
        }
    }
    Ok(stats(samples))
}

/// A keep-alive connection posting to `path` with `key`.
async fn conn(addr: SocketAddr, path: &str, key: &str) -> Res<RawConn> {
    let auth = format!("Bearer {key}");
    Ok(RawConn::post(
        addr,
        path,
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        64 * 1024,
    )
    .await?)
}

fn evaluation(user: &str, action: &str, record: &str) -> Value {
    json!({"subject": {"type": "user", "id": user}, "action": {"name": action},
           "resource": {"type": "record", "id": record}})
}

/// One evaluation at a time on one connection.
async fn one(addr: SocketAddr, key: &str, knobs: &Knobs) -> Res<Stats> {
    let mut c = conn(addr, "/pdp/records/access/v1/evaluation", key).await?;
    let body = evaluation("alice", "write", "record-1").to_string();
    let mut samples = Vec::with_capacity(knobs.iters);
    for i in 0..knobs.iters + 200 {
        let t0 = Instant::now();
        let (status, answer) = c.send(Some(body.as_bytes())).await?;
        let took = t0.elapsed();
        if status != 200 {
            return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&answer)).into());
        }
        if i >= 200 {
            samples.push(took);
        }
    }
    Ok(stats(samples))
}

/// A batch of [`BATCH`] evaluations: both users, every action, both
/// records (allows and denies).
fn batch_body() -> String {
    let mut items = Vec::with_capacity(BATCH);
    for i in 0..BATCH {
        let user = ["alice", "bob"][i % 2];
        let action = ["read", "write", "delete"][(i / 2) % 3];
        let record = ["record-1", "record-2"][(i / 6) % 2];
        items.push(evaluation(user, action, record));
    }
    json!({ "evaluations": items }).to_string()
}

/// [`BATCH_CONCURRENCY`] connections sending batches for `BENCH_SECS`.
fn batch(
    cli: &tokio::runtime::Runtime,
    addr: SocketAddr,
    key: &str,
    knobs: &Knobs,
    rows: &mut Vec<Row>,
) -> Res<()> {
    let body = Arc::new(batch_body());
    // Warm-up, and a check of the answer's length.
    let check = cli.block_on(async {
        let mut c = conn(addr, "/pdp/records/access/v1/evaluations", key).await?;
        let (status, answer) = c.send(Some(body.as_bytes())).await?;
        let answer: Value = serde_json::from_slice(&answer)?;
        Res::Ok((status, answer["evaluations"].as_array().map_or(0, Vec::len)))
    })?;
    if check != (200, BATCH) {
        return Err(format!("a batch answered {check:?}").into());
    }
    let mark = THREADS.mark();
    let deadline = Instant::now() + Duration::from_secs_f64(knobs.secs);
    let results = cli.block_on(async {
        let mut workers = Vec::new();
        for _ in 0..BATCH_CONCURRENCY {
            let (body, key) = (Arc::clone(&body), key.to_string());
            workers.push(tokio::spawn(async move {
                let mut c = conn(addr, "/pdp/records/access/v1/evaluations", &key).await?;
                let mut samples = Vec::new();
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    let (status, answer) = c.send(Some(body.as_bytes())).await?;
                    samples.push(t0.elapsed());
                    if status != 200 {
                        let answer = String::from_utf8_lossy(&answer).into_owned();
                        return Err(format!("HTTP {status}: {answer}").into());
                    }
                }
                Res::Ok(samples)
            }));
        }
        let mut all = Vec::new();
        for w in workers {
            all.extend(w.await??);
        }
        Res::Ok(all)
    })?;
    let cpu = mark.since();
    let batches = results.len();
    let decisions = (batches * BATCH) as f64;
    let per_s = decisions / cpu.wall.as_secs_f64();
    let s = stats(results);
    rows.push(Row {
        what: format!("batches of {BATCH}, c={BATCH_CONCURRENCY}: recorded decisions"),
        figure: format!(
            "{per_s:.0}/s (batch p50 {:.1} ms, p99 {:.1} ms)",
            s.p50 / 1e3,
            s.p99 / 1e3
        ),
        goal: "≥ 50,000/s".into(),
    });
    let per = |group: &str| cpu.groups.get(group).copied().unwrap_or(0) as f64 / decisions / 1e3;
    rows.push(Row {
        what: "  server CPU per decision in those batches".into(),
        figure: format!(
            "workers {:.2} µs, writer {:.2} µs, blocking {:.2} µs",
            per("srv workers"),
            per("writer"),
            per("srv blocking")
        ),
        goal: format!(
            "client {:.2} µs; other processes kept {:.2} cores busy",
            per("client"),
            cpu.foreign_cores()
        ),
    });
    Ok(())
}

/// The first page of a resource search of `big`, one at a time; with the
/// pages that came back short (the page's time budget, `pdp.search_budget_ms`,
/// ran out before it held [`PAGE`] results).
async fn search(addr: SocketAddr, key: &str, action: &str, knobs: &Knobs) -> Res<(Stats, usize)> {
    let mut c = conn(addr, "/pdp/big/access/v1/search/resource", key).await?;
    let body = json!({"subject": {"type": "user", "id": "alice"}, "action": {"name": action},
                      "resource": {"type": "record"}, "page": {"limit": PAGE}})
    .to_string();
    let mut samples = Vec::with_capacity(knobs.searches);
    let mut short = 0;
    for i in 0..knobs.searches + 3 {
        let t0 = Instant::now();
        let (status, answer) = c.send(Some(body.as_bytes())).await?;
        let took = t0.elapsed();
        if status != 200 {
            let answer = String::from_utf8_lossy(&answer).into_owned();
            return Err(format!("search answered HTTP {status}: {answer}").into());
        }
        let answer: Value = serde_json::from_slice(&answer)?;
        if i >= 3 {
            samples.push(took);
            short += usize::from(answer["results"].as_array().map_or(0, Vec::len) < PAGE);
        }
    }
    Ok((stats(samples), short))
}
