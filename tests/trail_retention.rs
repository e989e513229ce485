//! Trail growth under control: `audit archive` (verify, export, prune
//! behind an anchor) through the real CLI beside a running server, the
//! retention setting run by the server, the SQLite WAL bound, and the
//! disk-space guard with its metric. Both backends unless noted.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use cedargate::store::decisions::{self, NewDecision};
use cedargate::store::{WriteOp, retention};
use common::cli::{run, stderr, stdout, write_config};
use common::{Tenant, TestGateway, repo, tamper_decisions};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A running gateway with one tenant, and a CLI config on its database.
async fn gateway() -> (TestGateway, Tenant, PathBuf) {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let cfg = write_config(g.dir.path(), &repo().join("policies"));
    (g, t, cfg)
}

/// `n` recorded calls of the tenant.
async fn calls(g: &TestGateway, t: &Tenant, n: usize) {
    for i in 0..n {
        g.call_tool(
            t,
            "af_memory_remember",
            json!({ "content": format!("note {i}") }),
        )
        .await;
    }
    g.gw.store.writer().flush().await.unwrap();
}

/// A time strictly after every record so far and before any later one.
async fn cut_time() -> String {
    tokio::time::sleep(Duration::from_millis(5)).await;
    let t = cedargate::ids::now_rfc3339();
    tokio::time::sleep(Duration::from_millis(5)).await;
    t
}

async fn seqs(g: &TestGateway) -> Vec<i64> {
    g.gw.store
        .read(|c| {
            c.query_map(
                "SELECT seq FROM decisions ORDER BY seq",
                cedargate::params![],
                |r| r.get(0),
            )
        })
        .await
        .unwrap()
}

async fn anchors(g: &TestGateway) -> Vec<retention::Anchor> {
    g.gw.store.read(retention::anchors).await.unwrap()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs a blocking CLI command off the runtime's workers.
async fn cli(cfg: &Path, args: &[&str]) -> std::process::Output {
    let (cfg, args): (PathBuf, Vec<String>) = (
        cfg.to_path_buf(),
        args.iter().map(|a| a.to_string()).collect(),
    );
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&cfg, &args)
    })
    .await
    .unwrap()
}

/// `audit archive --before <before> --out <out>` through the CLI.
async fn archive(cfg: &Path, before: &str, out: &Path) -> std::process::Output {
    let out = out.to_str().unwrap();
    cli(cfg, &["audit", "archive", "--before", before, "--out", out]).await
}

#[tokio::test]
async fn archive_exports_prunes_and_the_rest_verifies_from_the_anchor() {
    let (g, t, cfg) = gateway().await;
    calls(&g, &t, 6).await;
    let before = cut_time().await;
    let old = seqs(&g).await;
    let out = g.dir.path().join("archive.jsonl");

    // Archive while the server keeps appending.
    let writer = {
        let (url, key) = (t.mcp_url.clone(), t.key.clone());
        let http = g.http.clone();
        tokio::spawn(async move {
            for i in 0..20 {
                let body = json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"af_memory_remember","arguments":{"content":"during"}}});
                let r = http
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
            }
        })
    };
    let o = archive(&cfg, &before, &out).await;
    writer.await.unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains(&format!(
            "archived {} records (seq 1..{})",
            old.len(),
            old.len()
        )),
        "{}",
        stdout(&o)
    );

    // The file holds exactly the pruned records, as stored.
    let rows = lines(&out);
    assert_eq!(rows.len(), old.len());
    assert_eq!(rows[0]["seq"], 1);
    assert_eq!(rows[0]["prevHash"], decisions::GENESIS_HASH);
    assert!(
        rows.iter()
            .all(|r| r["time"].as_str().unwrap() < before.as_str())
    );
    let last = rows.last().unwrap();
    let anchor = anchors(&g).await.pop().expect("an anchor");
    assert_eq!(anchor.seq, *old.last().unwrap());
    assert_eq!(last["hash"], anchor.hash.as_str());
    assert_eq!(
        anchor.archive_sha256,
        hex::encode(Sha256::digest(std::fs::read(&out).unwrap()))
    );

    // The database keeps only the newer records, and verifies from the anchor.
    calls(&g, &t, 2).await;
    let kept = seqs(&g).await;
    assert_eq!(kept.first(), Some(&(anchor.seq + 1)));
    let report = g.gw.store.read(decisions::verify).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.checked as usize, kept.len());
    let o = cli(&cfg, &["audit", "verify"]).await;
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains(&format!("records up to seq {} were archived", anchor.seq)));
    assert!(stdout(&o).contains(&anchor.hash));

    g.stop().await;
}

/// Archives the records older than now through the CLI; returns the file
/// and the anchor it left.
async fn archive_now(g: &TestGateway, cfg: &Path, name: &str) -> (PathBuf, retention::Anchor) {
    let before = cut_time().await;
    let out = g.dir.path().join(name);
    let o = archive(cfg, &before, &out).await;
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    (out, anchors(g).await.pop().expect("an anchor"))
}

#[tokio::test]
async fn an_archive_verifies_on_its_own_and_the_next_one_continues_from_its_anchor() {
    let (g, t, cfg) = gateway().await;
    calls(&g, &t, 4).await;
    let (out, anchor) = archive_now(&g, &cfg, "archive.jsonl").await;
    calls(&g, &t, 2).await;

    // The file verifies on its own.
    let o = cli(
        &cfg,
        &["audit", "verify", "--archive", out.to_str().unwrap()],
    )
    .await;
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("every hash recomputed"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains(&anchor.archive_sha256));
    // An edited line in the file is found.
    let text = std::fs::read_to_string(&out)
        .unwrap()
        .replacen("note 1", "note X", 1);
    let edited = g.dir.path().join("edited.jsonl");
    std::fs::write(&edited, text).unwrap();
    let o = cli(
        &cfg,
        &["audit", "verify", "--archive", edited.to_str().unwrap()],
    )
    .await;
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("edited record"), "{}", stderr(&o));

    // A second archive continues from the anchor.
    let (out2, _) = archive_now(&g, &cfg, "archive2.jsonl").await;
    let rows2 = lines(&out2);
    assert_eq!(rows2[0]["seq"], anchor.seq + 1);
    assert_eq!(rows2[0]["prevHash"], anchor.hash.as_str());
    assert_eq!(anchors(&g).await.len(), 2);
    let o = cli(&cfg, &["audit", "verify"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    g.stop().await;
}

#[tokio::test]
async fn archiving_everything_keeps_the_chain_going_and_refetches_pruned_snapshots() {
    let (g, t, cfg) = gateway().await;
    calls(&g, &t, 3).await;
    let snapshots = g.count("entity_snapshots").await;
    assert!(snapshots > 0);
    let out = g.dir.path().join("all.jsonl");
    let o = archive(&cfg, "2999-01-01T00:00:00Z", &out).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(g.count("decisions").await, 0);
    // Nothing references the session's slice any more: it went too.
    assert_eq!(g.count("entity_snapshots").await, 0);
    let anchor = anchors(&g).await.pop().unwrap();

    // The same session records again: the chain continues after the
    // anchor, and the slice the writer had stored before is stored again
    // with the first record that needs it (one call: one commit).
    calls(&g, &t, 1).await;
    let first = g.gw.store.read(|c| decisions::page(c, 0, 1)).await.unwrap();
    assert_eq!(first[0].seq, anchor.seq + 1);
    assert_eq!(first[0].prev_hash, anchor.hash);
    let report = g.gw.store.read(decisions::verify).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let o = cli(&cfg, &["audit", "verify"]).await;
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));

    // Nothing older left: nothing to do, no file.
    let none = g.dir.path().join("none.jsonl");
    let o = cli(
        &cfg,
        &[
            "audit",
            "archive",
            "--before",
            "2000-01-01T00:00:00Z",
            "--out",
            none.to_str().unwrap(),
        ],
    )
    .await;
    assert!(o.status.success());
    assert!(stdout(&o).contains("nothing to archive"));
    assert!(!none.exists());
    g.stop().await;
}

#[tokio::test]
async fn a_tampered_chain_or_bad_input_is_refused_and_changes_nothing() {
    let (g, t, cfg) = gateway().await;
    calls(&g, &t, 5).await;
    let count = g.count("decisions").await;
    let out = g.dir.path().join("a.jsonl");

    // Bad input: exit 2, nothing written.
    let o = archive(&cfg, "last tuesday", &out).await;
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("RFC 3339"), "{}", stderr(&o));
    // An existing file is never overwritten.
    std::fs::write(&out, "keep me").unwrap();
    let o = archive(&cfg, "2999-01-01T00:00:00Z", &out).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("never overwrites"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
    assert_eq!(g.count("decisions").await, count);

    // The trail itself still refuses a delete that no anchor covers.
    let deleted =
        g.gw.store
            .read(|c| c.execute("DELETE FROM decisions WHERE seq = 1", cedargate::params![]))
            .await;
    assert!(deleted.is_err());
    assert_eq!(g.count("decisions").await, count);

    // A tampered record: refused, no file, nothing pruned.
    tamper_decisions(
        &g.database_url(),
        "UPDATE decisions SET reasons = '[\"forged\"]' WHERE seq = 3;",
    );
    let out = g.dir.path().join("b.jsonl");
    let o = archive(&cfg, "2999-01-01T00:00:00Z", &out).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("tampered: seq 3"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("nothing exported or pruned"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
    assert_eq!(g.count("decisions").await, count);
    assert!(anchors(&g).await.is_empty());

    g.stop().await;
}

#[tokio::test]
async fn an_ocsf_archive_holds_ocsf_events_whose_links_verify() {
    let (g, t, cfg) = gateway().await;
    calls(&g, &t, 3).await;
    let n = g.count("decisions").await;
    let out = g.dir.path().join("a.ocsf.jsonl");
    let o = cli(
        &cfg,
        &[
            "audit",
            "archive",
            "--before",
            "2999-01-01T00:00:00Z",
            "--out",
            out.to_str().unwrap(),
            "--format",
            "ocsf",
        ],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let events = lines(&out);
    assert_eq!(events.len() as i64, n);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["class_uid"], 3004);
        assert_eq!(e["metadata"]["sequence"], i as i64 + 1);
        assert_eq!(e["unmapped"]["org_id"], "acme");
    }
    let anchor = anchors(&g).await.pop().unwrap();
    assert_eq!(anchor.format, "ocsf");
    assert_eq!(
        events.last().unwrap()["unmapped"]["hash"],
        anchor.hash.as_str()
    );
    let o = cli(
        &cfg,
        &["audit", "verify", "--archive", out.to_str().unwrap()],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("links checked"), "{}", stdout(&o));
    g.stop().await;
}

/// The policy set [`old_decision`]s name (empty): its hash, and the op
/// that records it, as the gateway records every set it decides with.
fn old_policy_set() -> (String, WriteOp) {
    let hash = cedargate::policy::set_hash::bundle_hash("", []);
    let op = WriteOp::PolicySet {
        hash: hash.clone(),
        schema_path: "old.cedarschema".into(),
        schema_text: String::new(),
        files: "[]".into(),
        loaded_at: "2020-01-01T00:00:00.000Z".into(),
    };
    (hash, op)
}

/// An old record (as a trail that has run for a while holds), appended
/// through the writer.
fn old_decision(i: usize) -> WriteOp {
    let entities = "[]";
    WriteOp::Decision(Box::new(NewDecision {
        id: format!("old-{i}"),
        time: format!("2020-01-01T00:00:{:02}.000Z", i % 60),
        org_id: Some("acme".into()),
        session_id: None,
        principal: "Gateway::ApiKey::\"k\"".into(),
        action: "access_session".into(),
        resource: "Gateway::Session::\"s\"".into(),
        context: "{}".into(),
        entities_hash: hex::encode(Sha256::digest(entities.as_bytes())),
        entities: Some(entities.into()),
        policy_hash: old_policy_set().0,
        decision: "allow".into(),
        reasons: "[]".into(),
        errors: "[]".into(),
        outcome: "{}".into(),
        notes: "{}".into(),
    }))
}

/// How many records each of SQLite's two trail tables holds (the indexed
/// one, the recent one).
async fn trail_tables(g: &TestGateway) -> (i64, i64) {
    g.gw.store
        .read(|c| {
            c.query_row(
                "SELECT (SELECT count(*) FROM decisions_indexed),
                        (SELECT count(*) FROM decisions_recent)",
                cedargate::params![],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
        .await
        .unwrap()
}

async fn is_sqlite(g: &TestGateway) -> bool {
    let backend = g.gw.store.read(|c| Ok(c.backend())).await.unwrap();
    backend == cedargate::store::Backend::Sqlite
}

/// SQLite keeps the trail's newest records in a table without secondary
/// indexes and moves them into the indexed one 256 at a time (migration
/// 14): a reader sees one trail across both, in order, and an archive
/// prunes across both. PostgreSQL has one table; the reads are the same.
#[tokio::test]
async fn the_trail_reads_whole_across_moved_and_recent_records() {
    let (g, t, cfg) = gateway().await;
    let writer = g.gw.store.writer();
    writer.submit(vec![old_policy_set().1]).await.unwrap();
    writer
        .submit((0..300).map(old_decision).collect())
        .await
        .unwrap();
    // The move runs after a batch's answers, before the next batch.
    writer.flush().await.unwrap();
    writer
        .submit((300..305).map(old_decision).collect())
        .await
        .unwrap();
    calls(&g, &t, 2).await;
    writer.flush().await.unwrap();
    if is_sqlite(&g).await {
        let (indexed, recent) = trail_tables(&g).await;
        assert_eq!(indexed, 300, "the first batch moved as a whole");
        assert_eq!(recent, 7, "five old records and the two calls wait");
    }
    let all = seqs(&g).await;
    assert_eq!(all, (1..=307).collect::<Vec<i64>>());
    for id in ["old-0", "old-299", "old-304"] {
        let found =
            g.gw.store
                .read(move |c| decisions::get(c, id))
                .await
                .unwrap();
        assert_eq!(found.map(|d| d.record.id).as_deref(), Some(id));
    }
    let report = g.gw.store.read(decisions::verify).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // An update through the view is refused, and so is a delete ahead of
    // any anchor, wherever the record is.
    for sql in [
        "UPDATE decisions SET decision = 'deny' WHERE seq = 302",
        "DELETE FROM decisions WHERE seq = 302",
        "DELETE FROM decisions WHERE seq = 3",
    ] {
        let refused =
            g.gw.store
                .read(move |c| c.execute(sql, cedargate::params![]))
                .await;
        assert!(refused.is_err(), "{sql}");
    }

    // The archive takes the old records from both tables.
    let out = g.dir.path().join("archive.jsonl");
    let o = archive(&cfg, "2021-01-01T00:00:00Z", &out).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&out).len(), 305);
    assert_eq!(seqs(&g).await, vec![306, 307]);
    if is_sqlite(&g).await {
        assert_eq!(trail_tables(&g).await, (0, 2));
    }
    let report = g.gw.store.read(decisions::verify).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    g.stop().await;
}

#[tokio::test]
async fn the_server_archives_past_the_retention_period() {
    let archive_dir = tempfile::tempdir().unwrap();
    let dir = archive_dir.path().to_path_buf();
    let g = TestGateway::start_with(|c| {
        c.audit.retention_days = 1;
        c.audit.archive_dir = Some(dir);
        c.audit.archive_interval_secs = 1;
    })
    .await;
    let t = g.tenant("acme").await;
    g.gw.store
        .writer()
        .submit(
            std::iter::once(old_policy_set().1)
                .chain((0..5).map(old_decision))
                .collect(),
        )
        .await
        .unwrap();
    calls(&g, &t, 2).await;
    let mut waited = 0;
    let files = loop {
        waited += 1;
        assert!(waited < 600, "no archive was written");
        let files: Vec<PathBuf> = std::fs::read_dir(archive_dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        // The run is counted once it returned, after its anchor and file.
        let counted = g
            .metrics_text()
            .await
            .contains("cedargate_trail_archives_total{result=\"archived\"} 1");
        if counted {
            break files;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(files.len(), 1);
    let rows = lines(&files[0]);
    assert_eq!(rows.len(), 5, "only the records older than a day");
    assert!(
        rows.iter()
            .all(|r| r["id"].as_str().unwrap().starts_with("old-"))
    );
    assert_eq!(anchors(&g).await[0].seq, 5);
    assert!(seqs(&g).await.iter().all(|s| *s > 5));
    let report = g.gw.store.read(decisions::verify).await.unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    g.stop().await;
}

#[tokio::test]
async fn retention_without_an_archive_dir_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = cedargate::config::Config {
        data_dir: dir.path().join("data"),
        policies_dir: repo().join("policies"),
        schema_file: repo().join("schemas/gateway.cedarschema"),
        demo_tenant: false,
        ..Default::default()
    };
    config.audit.retention_days = 30;
    let err = cedargate::server::prepare(config)
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("archive_dir"), "{err}");
}

fn wal_size(g: &TestGateway) -> u64 {
    let db = g.gw.config.data_dir.join("cedargate.db");
    std::fs::metadata(format!("{}-wal", db.display())).map_or(0, |m| m.len())
}

#[tokio::test]
async fn the_sqlite_wal_stays_bounded() {
    if common::pg::backend_is_postgres() {
        return; // PostgreSQL manages its own WAL
    }
    const LIMIT: u64 = 256 * 1024;
    let g = TestGateway::start_with(|c| c.database.wal_max_bytes = LIMIT).await;
    let t = g.tenant("acme").await;
    let content = "w".repeat(4000);
    let mut largest = 0;
    for _ in 0..400 {
        g.call_tool(&t, "af_memory_remember", json!({ "content": content }))
            .await;
        largest = largest.max(wal_size(&g));
    }
    // Far more was written than the limit; the WAL never held much more
    // than the limit plus one commit (without a bound SQLite keeps the
    // WAL at its largest size, 1000 pages or more).
    let observations = g.count("observations").await;
    assert_eq!(observations, 400);
    assert!(largest > 0);
    assert!(largest <= LIMIT + 256 * 1024, "WAL reached {largest} bytes");
    let done = wal_size(&g);
    assert!(done <= LIMIT + 256 * 1024, "WAL is {done} bytes");
    g.stop().await;
}

#[tokio::test]
async fn opening_the_store_shrinks_a_wal_left_large() {
    if common::pg::backend_is_postgres() {
        return; // PostgreSQL manages its own WAL
    }
    // A WAL grown large (as by an earlier run without a bound) ...
    let g = TestGateway::start_with(|c| c.database.wal_max_bytes = 1 << 40).await;
    let t = g.tenant("acme").await;
    let content = "w".repeat(4000);
    for _ in 0..200 {
        g.call_tool(&t, "af_memory_remember", json!({ "content": content }))
            .await;
    }
    assert!(wal_size(&g) > 1024 * 1024, "WAL is {} bytes", wal_size(&g));
    // ... is checkpointed and truncated when a store opens the database.
    let url = g.database_url();
    tokio::task::spawn_blocking(move || {
        cedargate::store::Store::open_url(&url, &cedargate::store::StoreOptions::default())
            .map(|_| ())
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(wal_size(&g), 0);
    g.stop().await;
}

#[tokio::test]
async fn the_disk_guard_fails_closed_and_recovers_by_itself() {
    let g = TestGateway::start_with(|c| {
        c.database.min_free_bytes = u64::MAX / 2; // more than any disk
        c.database.free_space_check_ms = 20;
    })
    .await;
    let t = g.tenant("acme").await;
    if common::pg::backend_is_postgres() {
        // The database's disk is the server's: the guard is off.
        assert!(g.gw.store.space().check().is_ok());
        g.call_tool(&t, "af_memory_remember", json!({"content": "x"}))
            .await;
        g.stop().await;
        return;
    }
    let before = g.count("decisions").await;
    let call = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"af_memory_remember","arguments":{"content":"x"}}});
    let (status, body) = g.mcp(&t, call.clone()).await;
    assert_eq!(status, 507, "{body}");
    assert_eq!(body["error"]["code"], -32010);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("insufficient storage")
    );
    assert!(body["error"]["data"]["freeBytes"].as_u64().unwrap() > 0);
    assert_eq!(body["error"]["data"]["minFreeBytes"], u64::MAX / 2);
    // The daemon API's session opening records a decision too.
    let r = g
        .http
        .post(format!("{}/api/sessions", g.base))
        .bearer_auth(&t.key)
        .json(&json!({"projectId": t.project, "agentId": t.agent}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 507);
    g.gw.store.writer().flush().await.unwrap();
    assert_eq!(g.count("decisions").await, before, "nothing written");
    assert_eq!(g.count("observations").await, 0);
    let metrics = g.metrics_text().await;
    assert!(
        metrics.contains("cedargate_trail_disk_guard_tripped 1"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("cedargate_trail_disk_free_bytes 0\n"),
        "{metrics}"
    );

    // Space is back (here: the minimum drops under what is free).
    g.gw.store.space().set_min_free_bytes(1);
    while !g
        .metrics_text()
        .await
        .contains("cedargate_trail_disk_guard_tripped 0")
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = g.mcp(&t, call).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["result"].is_object(), "{body}");
    g.gw.store.writer().flush().await.unwrap();
    assert!(g.count("decisions").await > before);
    g.stop().await;
}
