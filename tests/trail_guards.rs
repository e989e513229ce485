//! A trail a database administrator cannot rewrite unseen: the policy sets
//! records name are bound into the chain (`audit verify` recomputes each
//! set's hash from its stored text), every trail table refuses UPDATE and
//! DELETE but on the trail's own paths (the move of recent records, an
//! archive's prune), and `audit verify --archive` refuses any byte the
//! archive did not write. Through the real CLI beside a running server,
//! on both backends.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use cedargate::store::decisions::NewDecision;
use cedargate::store::{Backend, WriteOp, retention};
use common::cli::{run, stderr, stdout, write_config};
use common::{Tenant, TestGateway, repo};
use serde_json::json;
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

async fn backend(g: &TestGateway) -> Backend {
    g.gw.store.read(|c| Ok(c.backend())).await.unwrap()
}

/// Runs `sql` on the gateway's database as an administrator's session
/// would (the guards in place); the error text when it is refused.
async fn admin_sql(g: &TestGateway, sql: &str) -> Result<(), String> {
    let sql = sql.to_string();
    g.gw.store
        .read(move |c| Ok(c.execute_batch(&sql).map_err(|e| e.to_string())))
        .await
        .unwrap()
}

/// The text of the recorded policy set `hash`, as stored.
async fn stored_files(g: &TestGateway, hash: &str) -> String {
    let hash = hash.to_string();
    g.gw.store
        .read(move |c| {
            c.query_row(
                "SELECT files FROM policy_sets WHERE hash = ?1",
                cedargate::params![hash],
                |r| r.get(0),
            )
        })
        .await
        .unwrap()
}

/// Before: an edited policy text passed `audit verify`, and replay decided
/// under the forged text. Now verify fails naming the set, and replay
/// refuses to load it.
#[tokio::test]
async fn verify_names_a_policy_set_whose_stored_text_was_edited() {
    let (g, t, cfg) = gateway().await;
    calls(&g, &t, 3).await;
    let hash = g.gw.pep.current().hash.clone();
    let o = cli(&cfg, &["audit", "verify"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stored_files(&g, &hash).await.contains("forbid"));

    // The guard refuses the edit outright…
    let forge = format!(
        "UPDATE policy_sets SET files = replace(files, 'forbid', 'permit') WHERE hash = '{hash}';"
    );
    let refused = admin_sql(&g, &forge).await.unwrap_err();
    assert!(refused.contains("append-only"), "{refused}");
    assert!(stored_files(&g, &hash).await.contains("forbid"));
    // …so the administrator takes it out of the way first.
    let unguard = match backend(&g).await {
        Backend::Sqlite => "DROP TRIGGER policy_sets_no_update;",
        Backend::Postgres => "ALTER TABLE policy_sets DISABLE TRIGGER policy_sets_no_update;",
    };
    admin_sql(&g, &format!("{unguard} {forge}")).await.unwrap();
    assert!(!stored_files(&g, &hash).await.contains("forbid"));

    let o = cli(&cfg, &["audit", "verify"]).await;
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("policy set `{hash}`")) && err.contains("edited policy set"),
        "{err}"
    );
    // Replay (and the console's decision page, which loads sets the same
    // way) refuses the forged text instead of deciding under it.
    let o = cli(&cfg, &["audit", "replay", "--recorded", "--format", "json"]).await;
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).contains("was altered"), "{}", stdout(&o));
    g.stop().await;
}

/// A deleted policy set (guard dropped first) is reported too.
#[tokio::test]
async fn verify_names_a_policy_set_that_was_deleted() {
    let (g, t, cfg) = gateway().await;
    calls(&g, &t, 2).await;
    let hash = g.gw.pep.current().hash.clone();
    let delete = format!("DELETE FROM policy_sets WHERE hash = '{hash}';");
    let refused = admin_sql(&g, &delete).await.unwrap_err();
    assert!(refused.contains("append-only"), "{refused}");
    let unguard = match backend(&g).await {
        Backend::Sqlite => "DROP TRIGGER policy_sets_no_delete;",
        Backend::Postgres => "ALTER TABLE policy_sets DISABLE TRIGGER policy_sets_no_delete;",
    };
    admin_sql(&g, &format!("{unguard} {delete}")).await.unwrap();
    let o = cli(&cfg, &["audit", "verify"]).await;
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stderr(&o).contains(&format!("policy set `{hash}` is missing")),
        "{}",
        stderr(&o)
    );
    g.stop().await;
}

/// An old record under the gateway's recorded policy set, appended through
/// the writer (a trail that has run for a while): the first 150 from 2020,
/// the rest from 2022.
fn old_decision(i: usize, policy_hash: &str) -> WriteOp {
    let entities = "[]";
    let year = if i < 150 { 2020 } else { 2022 };
    WriteOp::Decision(Box::new(NewDecision {
        id: format!("old-{i}"),
        time: format!("{year}-01-01T00:00:{:02}.000Z", i % 60),
        org_id: Some("acme".into()),
        session_id: None,
        principal: "Gateway::ApiKey::\"k\"".into(),
        action: "access_session".into(),
        resource: "Gateway::Session::\"s\"".into(),
        context: "{}".into(),
        entities_hash: hex::encode(Sha256::digest(entities.as_bytes())),
        entities: Some(entities.into()),
        policy_hash: policy_hash.into(),
        decision: "allow".into(),
        reasons: "[]".into(),
        errors: "[]".into(),
        outcome: "{}".into(),
        notes: "{}".into(),
    }))
}

/// Rows of `table`.
async fn rows(g: &TestGateway, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {table}");
    g.gw.store
        .read(move |c| c.query_row(&sql, cedargate::params![], |r| r.get(0)))
        .await
        .unwrap()
}

/// Every trail table of the backend, with a column an UPDATE would set.
fn trail_tables(backend: Backend) -> Vec<(&'static str, &'static str)> {
    let mut tables = vec![
        ("decisions", "decision"),
        ("decision_anchors", "hash"),
        ("entity_snapshots", "entities"),
        ("policy_sets", "files"),
    ];
    if backend == Backend::Sqlite {
        tables.extend([
            ("decisions_indexed", "decision"),
            ("decisions_recent", "decision"),
        ]);
    }
    tables
}

/// Direct UPDATE and DELETE on each trail table are refused on both
/// backends (TRUNCATE too on PostgreSQL), whole-table or one row, before
/// and behind the newest anchor; a prune permit cannot be forged. The
/// trail's own paths still work: SQLite's move of recent records into the
/// indexed table, and an archive's prune (records and entity snapshots)
/// across both tables, after which the rest verifies.
#[tokio::test]
async fn every_trail_table_refuses_update_and_delete_but_the_trail_moves_and_archives() {
    let (g, t, cfg) = gateway().await;
    let hash = g.gw.pep.current().hash.clone();
    let writer = g.gw.store.writer();
    // 300 old records: on SQLite the writer moves them into the indexed
    // table after the batch (the move's delete passes the recent table's
    // guard); two calls then wait in the recent table.
    writer
        .submit((0..300).map(|i| old_decision(i, &hash)).collect())
        .await
        .unwrap();
    writer.flush().await.unwrap();
    calls(&g, &t, 2).await;
    let backend = backend(&g).await;
    if backend == Backend::Sqlite {
        assert_eq!(rows(&g, "decisions_indexed").await, 300, "moved");
        assert_eq!(rows(&g, "decisions_recent").await, 2);
    }

    // An archive of the oldest records: its prune passes the guards (on
    // SQLite it deletes from the indexed table, which keeps the rest).
    let out = g.dir.path().join("old.jsonl");
    let o = cli(
        &cfg,
        &[
            "audit",
            "archive",
            "--before",
            "2021-01-01T00:00:00Z",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let anchor = g.gw.store.read(retention::anchors).await.unwrap();
    assert_eq!(anchor.last().map(|a| a.seq), Some(150));
    let o = cli(&cfg, &["audit", "verify"]).await;
    assert!(o.status.success(), "{}", stderr(&o));

    // Records that came after the archive, some moved, some recent.
    calls(&g, &t, 3).await;
    let before: Vec<(&str, i64)> = {
        let mut counts = Vec::new();
        for (table, _) in trail_tables(backend) {
            let n = rows(&g, table).await;
            assert!(n > 0, "{table} holds rows to refuse changing");
            counts.push((table, n));
        }
        counts
    };
    for (table, column) in trail_tables(backend) {
        for sql in [
            format!("UPDATE {table} SET {column} = {column};"),
            format!("DELETE FROM {table};"),
            format!(
                "DELETE FROM {table} WHERE {} IN (SELECT {0} FROM {table} LIMIT 1);",
                if table == "entity_snapshots" || table == "policy_sets" {
                    "hash"
                } else {
                    "seq"
                }
            ),
        ] {
            let refused = admin_sql(&g, &sql).await.unwrap_err();
            assert!(
                refused.contains("append-only") || refused.contains("prune permit"),
                "{sql}: {refused}"
            );
        }
        if backend == Backend::Postgres {
            let refused = admin_sql(&g, &format!("TRUNCATE {table};"))
                .await
                .unwrap_err();
            assert!(refused.contains("append-only"), "{table}: {refused}");
        }
    }
    // A permit names the newest anchor, which covers no stored record;
    // a permit past it is refused, so nothing opens the guards.
    let forged = admin_sql(
        &g,
        "INSERT INTO trail_prune_permits (anchor_seq) VALUES (100000);",
    )
    .await
    .unwrap_err();
    assert!(forged.contains("prune permit"), "{forged}");
    // On PostgreSQL a permit never commits, even one naming the newest
    // anchor (SQLite has no deferred trigger: `src/store/README.md`).
    if backend == Backend::Postgres {
        let kept = admin_sql(
            &g,
            "INSERT INTO trail_prune_permits (anchor_seq) VALUES (150);",
        )
        .await
        .unwrap_err();
        assert!(kept.contains("outlives"), "{kept}");
    }
    for (table, n) in before {
        assert_eq!(rows(&g, table).await, n, "{table} unchanged");
    }
    assert_eq!(rows(&g, "trail_prune_permits").await, 0);

    // The rest still archives and verifies.
    let all = g.dir.path().join("all.jsonl");
    let o = cli(
        &cfg,
        &[
            "audit",
            "archive",
            "--before",
            "2999-01-01T00:00:00Z",
            "--out",
            all.to_str().unwrap(),
        ],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(rows(&g, "decisions").await, 0);
    calls(&g, &t, 1).await;
    let o = cli(&cfg, &["audit", "verify"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    g.stop().await;
}

/// A time strictly after every record so far.
async fn cut_time() -> String {
    tokio::time::sleep(Duration::from_millis(5)).await;
    let t = cedargate::ids::now_rfc3339();
    tokio::time::sleep(Duration::from_millis(5)).await;
    t
}

/// `text` with its `n`th line (1-based) changed by `edit`.
fn edit_line(text: &str, n: usize, edit: impl Fn(&str) -> String) -> String {
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
    let line = lines[n - 1].trim_end_matches('\n').to_string();
    lines[n - 1] = format!("{}\n", edit(&line));
    lines.concat()
}

/// Before: `verify --archive` hashed and parsed normalised lines, so an
/// archive with whitespace, an added field, another escape or other line
/// ends passed. Now the file's exact bytes are hashed and every line must
/// be what the archive wrote, in JSONL and in OCSF.
#[tokio::test]
async fn verify_archive_refuses_any_byte_the_archive_did_not_write() {
    let (g, t, cfg) = gateway().await;
    calls(&g, &t, 3).await;
    let before = cut_time().await;
    calls(&g, &t, 3).await;
    let jsonl = g.dir.path().join("a.jsonl");
    let o = cli(
        &cfg,
        &[
            "audit",
            "archive",
            "--before",
            &before,
            "--out",
            jsonl.to_str().unwrap(),
        ],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let ocsf = g.dir.path().join("b.ocsf.jsonl");
    let o = cli(
        &cfg,
        &[
            "audit",
            "archive",
            "--before",
            "2999-01-01T00:00:00Z",
            "--out",
            ocsf.to_str().unwrap(),
            "--format",
            "ocsf",
        ],
    )
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let anchors = g.gw.store.read(retention::anchors).await.unwrap();
    assert_eq!(anchors.len(), 2);

    for (file, anchor) in [(&jsonl, &anchors[0]), (&ocsf, &anchors[1])] {
        let bytes = std::fs::read(file).unwrap();
        assert_eq!(hex::encode(Sha256::digest(&bytes)), anchor.archive_sha256);
        let o = cli(
            &cfg,
            &["audit", "verify", "--archive", file.to_str().unwrap()],
        )
        .await;
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            stdout(&o).contains(&anchor.archive_sha256),
            "{}",
            stdout(&o)
        );

        let text = String::from_utf8(bytes).unwrap();
        let lines = text.lines().count();
        assert!(lines >= 2);
        let edits: Vec<(&str, String, usize)> = vec![
            (
                "a space after a colon",
                edit_line(&text, 2, |l| l.replacen("\":", "\": ", 1)),
                2,
            ),
            (
                "an added field",
                edit_line(&text, 2, |l| l.replacen('{', "{\"forged\":true,", 1)),
                2,
            ),
            (
                "trailing whitespace",
                edit_line(&text, 1, |l| format!("{l} ")),
                1,
            ),
            (
                "another escape of the same text",
                edit_line(&text, 2, |l| l.replacen("allow", "\\u0061llow", 1)),
                2,
            ),
            ("carriage returns", text.replace('\n', "\r\n"), 1),
            (
                "no final newline",
                text.trim_end_matches('\n').to_string(),
                lines,
            ),
            ("a blank line", format!("{text}\n"), lines + 1),
        ];
        for (what, edited, line) in edits {
            assert_ne!(edited, text, "{what}");
            let path = g.dir.path().join("edited");
            std::fs::write(&path, &edited).unwrap();
            let o = cli(
                &cfg,
                &["audit", "verify", "--archive", path.to_str().unwrap()],
            )
            .await;
            assert_eq!(o.status.code(), Some(1), "{what} passed: {}", stdout(&o));
            assert!(
                stderr(&o).contains(&format!("tampered: line {line}:")),
                "{what}: {}",
                stderr(&o)
            );
            std::fs::remove_file(&path).unwrap();
        }
    }
    // A file mixing the two formats, each line as written, is refused.
    let mixed = g.dir.path().join("mixed");
    let first = std::fs::read_to_string(&jsonl).unwrap();
    let second = std::fs::read_to_string(&ocsf).unwrap();
    std::fs::write(&mixed, format!("{first}{second}")).unwrap();
    let o = cli(
        &cfg,
        &["audit", "verify", "--archive", mixed.to_str().unwrap()],
    )
    .await;
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("format of the file's first line"),
        "{}",
        stderr(&o)
    );
    g.stop().await;
}
