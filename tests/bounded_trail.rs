//! Trail growth and the write queue under a flood: a `tools/list` is one
//! compact record that replays tool by tool, and the writer's queue holds
//! at most its bounds in records and bytes (a larger job passes alone).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::sync::Arc;

use cedargate::audit::export::{self, Format};
use cedargate::replay::{Against, ReplayReport};
use cedargate::store::decisions;
use common::{TestGateway, copy_policies, repo};
use serde_json::{Value, json};

const HIDE_REMEMBER: &str = "@id(\"hide-remember\")\nforbid (principal, action == Gateway::Action::\"view_tool\", resource == Gateway::Tool::\"af_memory_remember\");\n";

fn list(id: usize) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/list"})
}

async fn replay(g: &TestGateway, against: Against) -> ReplayReport {
    g.gw.store
        .read(move |c| Ok(cedargate::replay::replay(c, &Default::default(), &against).unwrap()))
        .await
        .unwrap()
}

/// A value of a labelled gauge in the `/metrics` text.
fn gauge(metrics: &str, name: &str, unit: &str) -> u64 {
    let prefix = format!("{name}{{unit=\"{unit}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in {metrics}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_tools_list_is_one_record_that_replays_tool_by_tool() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let before = g.decisions().await.len();
    let (status, body) = g.mcp(&t, list(1)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["tools"].as_array().unwrap().len(), 2);

    // One view_tool record for the whole list, the request's
    // access_session in its prelude.
    let records = g.decisions().await;
    let new = &records[before..];
    assert_eq!(new.len(), 1, "{new:?}");
    let listed = &new[0].record;
    assert_eq!(listed.action, "view_tool");
    assert_eq!(listed.decision, "allow");
    assert_eq!(listed.principal, "Gateway::Agent::\"acme-agent\"");
    assert_eq!(
        listed.resource,
        format!("Gateway::Session::\"{}\"", t.session_id)
    );
    let outcome: Value = serde_json::from_str(&listed.outcome).unwrap();
    assert_eq!(
        outcome,
        json!({"status": "listed", "shown": 2, "hidden": 0})
    );
    let notes: Value = serde_json::from_str(&listed.notes).unwrap();
    let tools = &notes["toolList"];
    assert_eq!(tools["format"], 1);
    let mut names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e[1], 0, "both tools share the one verdict: {e}");
            e[0].as_str().unwrap()
        })
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["af_memory_recall", "af_memory_remember"]);
    assert_eq!(tools["verdicts"].as_array().unwrap().len(), 1);
    assert_eq!(tools["verdicts"][0]["decision"], "allow");
    // The entity slice it stored holds every tool it decided.
    let slice = g.entity_snapshot(&listed.entities_hash).await;
    for name in names {
        assert!(slice.contains(&format!("\"{name}\"")), "{slice}");
    }

    // Under the set that made it, each tool replays to its recorded verdict.
    let report = replay(&g, Against::Recorded).await;
    assert_eq!(report.records, records.len() as u64);
    assert_eq!(
        report.decisions,
        records.len() as u64 + 2,
        "two tools and the access_session prelude in one record"
    );
    assert_eq!(report.identical, report.records, "{:?}", report);
    assert!(report.unreplayable.is_empty(), "{:?}", report.unreplayable);

    // A candidate that hides one tool flips exactly that tool's verdict.
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    std::fs::write(policies.join("hide.cedar"), HIDE_REMEMBER).unwrap();
    let candidate = cedargate::policy::load::load_bundle_with_tools(
        &repo().join("schemas/gateway.cedarschema"),
        &policies,
        &g.gw.lifecycle.tools(),
    )
    .unwrap();
    let report = replay(&g, Against::Candidate(Arc::new(candidate))).await;
    assert_eq!(
        (report.allow_to_deny, report.deny_to_allow),
        (1, 0),
        "{:?}",
        report.flips
    );
    let flip = &report.flips[0];
    assert_eq!(flip.action, "view_tool");
    assert_eq!(flip.id, listed.id);
    assert_eq!(flip.resource, "Gateway::Tool::\"af_memory_remember\"");
    assert_eq!(flip.new_reasons, ["hide-remember"]);
    assert_eq!(report.per_action["view_tool"].allow_to_deny, 1);
    assert_eq!(report.per_policy["hide-remember"].flips, 1);

    // Export renders it like any record, and the chain verifies.
    let stored = records.iter().find(|d| d.record.id == listed.id).unwrap();
    let line: Value = serde_json::from_str(&export::line(stored, Format::Jsonl)).unwrap();
    assert_eq!(line["action"], "view_tool");
    let ocsf: Value = serde_json::from_str(&export::line(stored, Format::Ocsf)).unwrap();
    assert_eq!(ocsf["unmapped"]["notes"]["toolList"]["format"], 1);
    assert_eq!(ocsf["status_code"], "Allow");
    let verified = g.gw.store.read(decisions::verify).await.unwrap();
    assert!(verified.problems.is_empty(), "{:?}", verified.problems);
}

#[tokio::test]
async fn a_list_hiding_a_tool_records_both_verdicts_and_replays_them() {
    let g = TestGateway::start_with_policy("hide.cedar", HIDE_REMEMBER).await;
    let t = g.tenant("acme").await;
    let names = g.tool_names(&t).await;
    assert_eq!(names, ["af_memory_recall"]);
    let records = g.decisions().await;
    let listed = records
        .iter()
        .rfind(|d| d.record.action == "view_tool")
        .unwrap();
    assert_eq!(
        listed.record.decision, "deny",
        "a hidden tool denies the list"
    );
    assert_eq!(
        listed.record.reasons,
        "[\"hide-remember\",\"memory-tools-visible-when-memory-enabled\"]"
    );
    let outcome: Value = serde_json::from_str(&listed.record.outcome).unwrap();
    assert_eq!(
        outcome,
        json!({"status": "listed", "shown": 1, "hidden": 1})
    );
    let notes: Value = serde_json::from_str(&listed.record.notes).unwrap();
    let list = &notes["toolList"];
    let verdict_of = |name: &str| {
        let entry = list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e[0] == name)
            .unwrap();
        list["verdicts"][entry[1].as_u64().unwrap() as usize].clone()
    };
    assert_eq!(verdict_of("af_memory_remember")["decision"], "deny");
    assert_eq!(
        verdict_of("af_memory_remember")["reasons"],
        json!(["hide-remember"])
    );
    assert_eq!(verdict_of("af_memory_recall")["decision"], "allow");

    let report = replay(&g, Against::Recorded).await;
    assert_eq!(report.identical, report.records, "{:?}", report);
    assert_eq!(report.flip_count(), 0);
}

#[tokio::test]
async fn a_batch_of_64_lists_writes_one_record_per_list() {
    // Every listing recorded, repeats included (`audit::repeated_listing`).
    let g = TestGateway::start_with(|c| c.audit.listing_record_secs = 0).await;
    let t = g.tenant("acme").await;
    let before = g.decisions().await.len();
    let batch: Vec<Value> = (0..64).map(list).collect();
    let (status, body) = g.mcp(&t, Value::Array(batch)).await;
    assert_eq!(status, 200);
    assert_eq!(body.as_array().unwrap().len(), 64);
    let records = g.decisions().await;
    let new = &records[before..];
    // One view_tool record per list; the request's access_session rides
    // in the first.
    assert_eq!(new.len(), 64);
    assert_eq!(
        new.iter()
            .filter(|d| d.record.action == "view_tool")
            .count(),
        64
    );
    let report = replay(&g, Against::Recorded).await;
    assert_eq!(report.identical, report.records);
    assert_eq!(
        report.decisions,
        report.records + 64 + 1,
        "two tools per list, and the access_session"
    );
}

/// Sends `n` concurrent `af_memory_remember` calls, each on its own task;
/// returns the bodies once all answered 200.
async fn remember_concurrently(g: &TestGateway, t: &common::Tenant, n: usize) -> Vec<Value> {
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..n {
        let (http, url, key) = (g.http.clone(), t.mcp_url.clone(), t.key.clone());
        let body = json!({"jsonrpc":"2.0","id":i,"method":"tools/call",
            "params":{"name":"af_memory_remember","arguments":{"content": format!("note {i}")}}});
        calls.spawn(async move {
            let resp = http
                .post(url)
                .bearer_auth(key)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 200);
            resp.json::<Value>().await.unwrap()
        });
    }
    calls.join_all().await
}

// Two workers, as a server runs: on one thread every call would run to
// its commit before the next started, and a lone call commits on its own
// thread without the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_all_commit_within_a_tiny_queue() {
    // One tools/call job holds 2 records (call_tool with its prelude, the
    // observation): 3 fit one job, never two.
    const RECORDS: usize = 3;
    let g = TestGateway::start_with(|c| c.limits.write_queue_records = RECORDS).await;
    let t = g.tenant("acme").await;
    let before = g.count("observations").await;
    let bodies = remember_concurrently(&g, &t, 32).await;
    for b in &bodies {
        assert!(b["result"].is_object(), "{b}");
    }
    assert_eq!(g.count("observations").await, before + 32);
    let metrics = g.metrics_text().await;
    let peak = gauge(&metrics, "cedargate_write_queue_peak", "records");
    assert!(
        (2..=RECORDS as u64).contains(&peak),
        "the queue held {peak} records at most; bound {RECORDS}"
    );
    assert_eq!(
        gauge(&metrics, "cedargate_write_queue_limit", "records"),
        RECORDS as u64
    );
    let verified = g.gw.store.read(decisions::verify).await.unwrap();
    assert!(verified.problems.is_empty(), "{:?}", verified.problems);
}

#[tokio::test]
async fn a_job_larger_than_the_queue_commits_alone() {
    let g = TestGateway::start_with(|c| {
        c.limits.write_queue_records = 4;
        c.limits.write_queue_bytes = 1024;
        // Every listing recorded, repeats included.
        c.audit.listing_record_secs = 0;
    })
    .await;
    let t = g.tenant("acme").await;
    let before = g.decisions().await.len();
    // One request of 64 lists: one job of 64 records (the request's
    // access_session rides in the first list's record), over both bounds.
    let batch: Vec<Value> = (0..64).map(list).collect();
    let (status, body) = g.mcp(&t, Value::Array(batch)).await;
    assert_eq!(status, 200, "{body}");
    // Small writers after it still get through.
    let bodies = remember_concurrently(&g, &t, 4).await;
    for b in &bodies {
        assert!(b["result"].is_object(), "{b}");
    }
    let records = g.decisions().await;
    // One record per call (its access_session and view_tool in its prelude).
    assert_eq!(records.len() - before, 64 + 4);
    let metrics = g.metrics_text().await;
    // The queue never held more than the large job alone.
    assert_eq!(gauge(&metrics, "cedargate_write_queue_peak", "records"), 64);
    assert_eq!(
        gauge(&metrics, "cedargate_write_queue_queued", "records"),
        0
    );
    assert_eq!(gauge(&metrics, "cedargate_write_queue_queued", "bytes"), 0);
    // Reads waiting for a read thread: none once the requests are answered.
    assert!(
        metrics.contains("\ncedargate_read_queue_waiting 0\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\ncedargate_read_queue_peak "),
        "{metrics}"
    );
}
