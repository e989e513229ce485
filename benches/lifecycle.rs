//! `cargo bench --bench lifecycle`: the policy lifecycle's figures on this
//! machine.
//!
//! 1. Replay throughput: a trail of `BENCH_RECORDS` (default 100,000)
//!    decisions is recorded through the real decision path (`audit::decide`
//!    on session slices built from the store, each request's decisions
//!    folded into one record as the gateway does, committed by the
//!    group-commit writer), then replayed under a candidate set and under
//!    the recorded sets. Goal: ≥ 150,000 decisions/s on 2 cores.
//! 2. Reload time for a set of 1,000 policies (effective schema, parse,
//!    strict validation, the policy tests), against the shipped set.
//! 3. Decision latency (typed `call_tool`, through `audit::decide`) with
//!    1,000 policies loaded versus the shipped set plus 2 (10 in all).
//!
//! Without `--bench` (under `cargo test --all-targets`) it exits at once.

#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark stops at its first failure"
)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cedargate::audit::{self, Decided, Scope};
use cedargate::lifecycle::{load_candidate, tool_schemas};
use cedargate::policy::Uid;
use cedargate::policy::entities::{self, EntitySlice};
use cedargate::policy::{Action, Kind, PolicyBundle};
use cedargate::replay::{self, Against};
use cedargate::store::audit_query::DecisionFilter;
use cedargate::store::{Store, WriteOp, tenants};
use cedargate::tools::Catalog;
use serde_json::json;
use support::stats::{Rank, Stats};
use support::tenant::{self, TenantSpec};
use support::{env_num, repo};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{e}"));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{e}")) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        let target = to.join(path.file_name().unwrap_or_default());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// The shipped set plus `extra` generated policies (a mix of org-scoped
/// forbids on typed arguments and per-tool permits, as a large deployment
/// would have), none of which changes a shipped test's verdict.
fn policy_dir(root: &Path, name: &str, extra: usize) -> PathBuf {
    let dir = root.join(name);
    copy_dir(&repo().join("policies"), &dir);
    let mut text = String::new();
    for i in 0..extra {
        let policy = match i % 4 {
            0 => format!(
                "@id(\"gen-{i}-no-secrets\")\nforbid (principal in Gateway::Org::\"tenant-{i}\", action == Gateway::Action::\"af_memory_remember\", resource)\nwhen {{ context.args.content like \"*secret-{i}*\" }};\n"
            ),
            1 => format!(
                "@id(\"gen-{i}-recall-budget\")\nforbid (principal in Gateway::Org::\"tenant-{i}\", action == Gateway::Action::\"af_memory_recall\", resource)\nwhen {{ context.args.workType == \"banned-{i}\" }};\n"
            ),
            2 => format!(
                "@id(\"gen-{i}-role\")\npermit (principal in Gateway::Role::\"role-{i}\", action == Gateway::Action::\"view_tool\", resource in Gateway::ToolGroup::\"memory\")\nwhen {{ context.session.project.memoryEnabled }};\n"
            ),
            _ => format!(
                "@id(\"gen-{i}-peer\")\nforbid (principal, action == Gateway::Action::\"a2a_invoke\", resource in Gateway::PeerAgent::\"peer-{i}\")\nunless {{ principal in Gateway::Role::\"deployers-{i}\" }};\n"
            ),
        };
        text.push_str(&policy);
    }
    if extra > 0 {
        std::fs::write(dir.join("generated.cedar"), text).unwrap_or_else(|e| panic!("{e}"));
    }
    dir
}

fn load(dir: &Path) -> PolicyBundle {
    let catalog = Catalog::builtin().unwrap_or_else(|e| panic!("{e}"));
    match load_candidate(
        &repo().join("schemas/gateway.cedarschema"),
        dir,
        &tool_schemas(&catalog),
    ) {
        Ok((b, _)) => b,
        Err(e) => panic!("{e}"),
    }
}

/// Sessions with their entity slices.
fn sessions(store: &Store, bundle: &PolicyBundle, n: usize) -> Vec<(String, String, EntitySlice)> {
    let catalog = Catalog::builtin().unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let org = format!("org-{i}");
        let spec = TenantSpec {
            org: &org,
            org_name: &org,
            project: "web",
            graph: i % 2 == 0,
            agent: "claude",
            agent_name: "Claude",
            ..TenantSpec::BENCH
        };
        let made = tenant::create_blocking(store, &spec).unwrap_or_else(|e| panic!("{e}"));
        let (key, sid) = (made.key, made.session.id);
        let tenant = store
            .read_blocking(|c| tenants::load_session_tenant(c, &sid))
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("session"));
        let tools: Vec<_> = catalog
            .for_session(&tenant)
            .iter()
            .map(|t| t.spec().entity())
            .collect();
        let slice = entities::session_slice(
            bundle,
            &cedargate::gateway::session_facts(&tenant, &key),
            &tools,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        out.push((org, sid, slice));
    }
    out
}

/// Records `n` decisions as the gateway does: each request's decisions
/// (`access_session`, `view_tool`, the call) pass through
/// `audit::prelude::fold`, so a request is one row holding three
/// decisions. `BENCH_TRAIL_ROWS=1` records one row per decision instead
/// (the shape of trails written before preludes), to compare the two.
fn record_trail(store: &Store, bundle: &PolicyBundle, n: usize) -> usize {
    let one_row_per_decision = std::env::var("BENCH_TRAIL_ROWS").is_ok_and(|v| v == "1");
    let sessions = sessions(store, bundle, 200);
    let writer = store.writer().clone();
    writer
        .submit_blocking(vec![cedargate::lifecycle::policy_set_op(bundle)])
        .unwrap_or_else(|e| panic!("{e}"));
    let agent = Kind::Agent.uid("claude");
    let mut batch = Vec::with_capacity(1000);
    let mut request = Vec::with_capacity(3);
    let mut rows = 0;
    let time = cedargate::ids::now_rfc3339();
    for i in 0..n {
        let (org, sid, slice) = &sessions[(i / 3) % sessions.len()];
        let scope = Scope {
            org_id: Some(org),
            session_id: Some(sid),
        };
        let decided = decide_one(bundle, slice, &agent, sid, scope, &time, i);
        request.push(WriteOp::Decision(Box::new(decided.finish_default())));
        if request.len() == 3 || i + 1 == n {
            let ops = std::mem::take(&mut request);
            let ops = if one_row_per_decision {
                ops
            } else {
                audit::prelude::fold(ops)
            };
            rows += ops.len();
            batch.extend(ops);
        }
        if batch.len() >= 1000 {
            writer
                .submit_blocking(std::mem::take(&mut batch))
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    writer
        .submit_blocking(batch)
        .unwrap_or_else(|e| panic!("{e}"));
    rows
}

/// Decision `i` of the trail: in turn an `access_session`, a `view_tool`
/// and the typed `call_tool` of one request, the tool a remember and a
/// recall on alternate requests.
fn decide_one(
    bundle: &PolicyBundle,
    slice: &EntitySlice,
    agent: &Uid,
    sid: &str,
    scope: Scope<'_>,
    time: &str,
    i: usize,
) -> Decided {
    let remember = (i / 3).is_multiple_of(2);
    let tool = if remember {
        "af_memory_remember"
    } else {
        "af_memory_recall"
    };
    match (i % 3, remember) {
        (0, _) => {
            let ctx = bundle.prepare_session_context(sid, time);
            let key = slice_key(slice);
            audit::decide(
                bundle,
                slice,
                &Kind::ApiKey.uid(&key),
                Action::AccessSession,
                &Kind::Session.uid(sid),
                &ctx,
                scope,
                time,
            )
        }
        (1, _) => {
            let ctx = bundle.prepare_session_context(sid, time);
            audit::decide(
                bundle,
                slice,
                agent,
                Action::ViewTool,
                &Kind::Tool.uid(tool),
                &ctx,
                scope,
                time,
            )
        }
        (_, true) => {
            let args = json!({"content": format!("note {i}: deploys on tuesday"), "type": "decision", "confidence": 0.8});
            let ctx = bundle.prepare_tool_context(
                Action::CallTool,
                "af_memory_remember",
                sid,
                time,
                &args,
            );
            audit::decide(
                bundle,
                slice,
                agent,
                Action::CallTool,
                &Kind::Tool.uid("af_memory_remember"),
                &ctx,
                scope,
                time,
            )
        }
        _ => {
            let args = json!({"query": format!("deploy {i}"), "workType": "feature"});
            let ctx =
                bundle.prepare_tool_context(Action::CallTool, "af_memory_recall", sid, time, &args);
            audit::decide(
                bundle,
                slice,
                agent,
                Action::CallTool,
                &Kind::Tool.uid("af_memory_recall"),
                &ctx,
                scope,
                time,
            )
        }
    }
}

/// The key id inside a session slice (the `ApiKey` entity).
fn slice_key(slice: &EntitySlice) -> String {
    let v: serde_json::Value = serde_json::from_str(&slice.json).unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .find(|e| e["uid"]["type"] == "Gateway::ApiKey")
        .and_then(|e| e["uid"]["id"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn latency(bundle: &PolicyBundle, slice: &EntitySlice, sid: &str, iters: usize) -> Stats {
    let agent = Kind::Agent.uid("claude");
    let tool = Kind::Tool.uid("af_memory_remember");
    let time = cedargate::ids::now_rfc3339();
    let args = json!({"content": "deploys on tuesday", "type": "decision"});
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let started = Instant::now();
        let ctx =
            bundle.prepare_tool_context(Action::CallTool, "af_memory_remember", sid, &time, &args);
        let d = audit::decide(
            bundle,
            slice,
            &agent,
            Action::CallTool,
            &tool,
            &ctx,
            Scope {
                org_id: None,
                session_id: Some(sid),
            },
            &time,
        );
        samples.push(started.elapsed());
        assert!(d.allowed());
    }
    Stats::of(samples, Rank::Rounded)
}

fn main() {
    if !support::bench_requested("lifecycle") {
        return;
    }
    let records: usize = env_num("BENCH_RECORDS", 100_000);
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let shipped_dir = policy_dir(root.path(), "shipped", 0);
    let large_dir = policy_dir(root.path(), "large", 1000);
    let small_dir = policy_dir(root.path(), "small", 2);
    println!("cores: {}", support::cores());
    let (large, small) = reload_time(&shipped_dir, &large_dir, &small_dir);
    decision_latency(root.path(), &small, &large);
    replay_throughput(root.path(), &shipped_dir, large, records);
}

/// Figure 2, reload time: the large set and the shipped one, five times
/// each; returns the large and small sets.
fn reload_time(
    shipped_dir: &Path,
    large_dir: &Path,
    small_dir: &Path,
) -> (PolicyBundle, PolicyBundle) {
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let b = load(large_dir);
        times.push(t.elapsed());
        assert!(b.policy_ids.len() >= 1000);
    }
    let mut shipped_times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        load(shipped_dir);
        shipped_times.push(t.elapsed());
    }
    let large = load(large_dir);
    let small = load(small_dir);
    println!(
        "\nreload (effective schema + parse + strict validation + policy tests), median of 5:\n  {} policies: {:.1} ms\n  {} policies: {:.1} ms",
        large.policy_ids.len(),
        Stats::of(times, Rank::Rounded).p50 / 1e3,
        load(shipped_dir).policy_ids.len(),
        Stats::of(shipped_times, Rank::Rounded).p50 / 1e3
    );
    (large, small)
}

/// Figure 3, decision latency: 1,000 policies against 10.
fn decision_latency(root: &Path, small: &PolicyBundle, large: &PolicyBundle) {
    let store_dir = root.join("lat");
    let store = Store::open(&store_dir.join("db"), 16_384, 1024).unwrap_or_else(|e| panic!("{e}"));
    let s_small = sessions(&store, small, 1);
    let s_large = sessions_for(&store, large, &s_small[0].1);
    let lat_small = latency(small, &s_small[0].2, &s_small[0].1, 20_000);
    let lat_large = latency(large, &s_large, &s_small[0].1, 20_000);
    println!(
        "\ndecision latency (typed call_tool via audit::decide, 20,000 each):\n  {:>5} policies: p50 {:.1} µs  p99 {:.1} µs  mean {:.1} µs\n  {:>5} policies: p50 {:.1} µs  p99 {:.1} µs  mean {:.1} µs",
        small.policy_ids.len(),
        lat_small.p50,
        lat_small.p99,
        lat_small.mean,
        large.policy_ids.len(),
        lat_large.p50,
        lat_large.p99,
        lat_large.mean
    );
}

/// Figure 1, replay throughput: records a trail, then replays it.
fn replay_throughput(root: &Path, shipped_dir: &Path, large: PolicyBundle, records: usize) {
    let shipped = load(shipped_dir);
    let trail = Store::open(&root.join("trail/db"), 16_384, 1024).unwrap_or_else(|e| panic!("{e}"));
    let t = Instant::now();
    let rows = record_trail(&trail, &shipped, records);
    println!(
        "\nrecorded {records} decisions in {rows} records through audit::decide + the writer in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    // The 1,000-policy set costs ~20x per decision (see the latency figure);
    // replaying the whole trail under it is opt-in.
    let mut runs = vec![
        (
            "candidate set (shipped)",
            Against::Candidate(Arc::new(load(shipped_dir))),
        ),
        ("recorded sets (--recorded)", Against::Recorded),
    ];
    if std::env::var("BENCH_LARGE_REPLAY").is_ok_and(|v| v == "1") {
        runs.push((
            "candidate set (1,000+ policies)",
            Against::Candidate(Arc::new(large)),
        ));
    }
    for (label, against) in runs {
        let report = trail
            .read_blocking(|c| {
                replay::replay(c, &DecisionFilter::default(), &against).map_err(|e| match e {
                    replay::ReplayError::Store(s) => s,
                    e => cedargate::store::StoreError::Invalid(e.to_string()),
                })
            })
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report.records as usize, rows);
        assert_eq!(report.decisions as usize, records);
        assert!(
            report.unreplayable.is_empty(),
            "{:?}",
            report.unreplayable.first()
        );
        println!(
            "replay under {label}: {} records holding {} decisions in {:.3} s = {:.0} records/s, {:.0} decisions/s (identical {}, flips {}); goal ≥ 150,000 decisions/s",
            report.records,
            report.decisions,
            report.seconds,
            report.rate(),
            report.decisions as f64 / report.seconds.max(1e-9),
            report.identical,
            report.flip_count()
        );
    }
}

/// The slice of an existing session, built for `bundle`.
fn sessions_for(store: &Store, bundle: &PolicyBundle, sid: &str) -> EntitySlice {
    let catalog = Catalog::builtin().unwrap_or_else(|e| panic!("{e}"));
    let tenant = store
        .read_blocking(|c| tenants::load_session_tenant(c, sid))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("session"));
    let key = store
        .read_blocking(|c| tenants::list_keys(c, &tenant.session.org_id))
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("key"));
    let tools: Vec<_> = catalog
        .for_session(&tenant)
        .iter()
        .map(|t| t.spec().entity())
        .collect();
    entities::session_slice(
        bundle,
        &cedargate::gateway::session_facts(&tenant, &key),
        &tools,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}
