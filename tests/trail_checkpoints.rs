//! Signed checkpoints of the decision trail: the gateway signs the chain
//! head with a key kept outside the database (on an interval when the head
//! moved, on a clean stop, with every archive's anchor), and `audit verify
//! --key` catches what a database administrator can do unseen by the hash
//! chain alone: deleting the newest records, recomputing the chain,
//! forging an anchor. Each attack is shown passing `audit verify` without
//! the key (the hole), then failing with it, through the real CLI. Both
//! backends (`CG_TEST_BACKEND=postgres`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use cedargate::audit::signed_note::{self, NoteSigner, NoteVerifier};
use cedargate::store::checkpoints::{self, CheckpointRow};
use cedargate::store::decisions::{self, StoredDecision};
use cedargate::store::{Backend, Store, StoreOptions};
use common::cli::{run, stderr, stdout, write_config};
use common::{Tenant, TestGateway, repo, tamper_decisions};
use serde_json::json;

/// A gateway signing every second, one tenant, a CLI config on its
/// database.
async fn gateway() -> (TestGateway, Tenant, PathBuf) {
    let g = TestGateway::start_with(|c| c.checkpoints.interval_secs = 1).await;
    let t = g.tenant("acme").await;
    let cfg = write_config(g.dir.path(), &repo().join("policies"));
    (g, t, cfg)
}

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

/// Runs the CLI off the runtime's workers.
async fn cli(cfg: &Path, args: &[&str]) -> Output {
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

fn text(o: &Output) -> String {
    format!("{}{}", stdout(o), stderr(o))
}

/// The verifier key `audit key` prints.
async fn public_key(cfg: &Path) -> String {
    let o = cli(cfg, &["audit", "key"]).await;
    assert!(o.status.success(), "{}", text(&o));
    stdout(&o).trim().to_string()
}

async fn stored(g: &TestGateway) -> Vec<CheckpointRow> {
    g.gw.store.read(checkpoints::all).await.unwrap()
}

/// Waits until a checkpoint at `seq` is stored.
async fn signed_at(g: &TestGateway, seq: i64) -> Vec<CheckpointRow> {
    for _ in 0..100 {
        let rows = stored(g).await;
        if rows.iter().any(|r| r.seq == seq) {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no checkpoint at seq {seq}: {:?}", stored(g).await);
}

async fn head(g: &TestGateway) -> decisions::ChainHead {
    g.gw.store.read(decisions::chain_head).await.unwrap()
}

/// `audit verify` without and with the key.
async fn verify_both(cfg: &Path, key: &str, extra: &[&str]) -> (Output, Output) {
    let plain = cli(cfg, &["audit", "verify"]).await;
    let mut args = vec!["audit", "verify", "--key", key];
    args.extend_from_slice(extra);
    let keyed = cli(cfg, &args).await;
    (plain, keyed)
}

/// A gateway with `n` records, stopped (its stop checkpoint signed), and
/// its verifier key; verify with the key passes.
async fn stopped_trail(n: usize) -> (tempfile::TempDir, PathBuf, String, Vec<StoredDecision>) {
    let (g, t, cfg) = gateway().await;
    calls(&g, &t, n).await;
    let rows =
        g.gw.store
            .read(|c| decisions::page(c, 0, 1000))
            .await
            .unwrap();
    let url = g.database_url();
    let dir = g.stop().await.into_dir();
    let key = public_key(&cfg).await;
    let newest = reader(&url, checkpoints::newest).unwrap().unwrap();
    assert_eq!(
        newest.seq,
        rows.last().unwrap().seq,
        "a stop signs the head"
    );
    assert_eq!(newest.kind, "stop");
    let o = cli(&cfg, &["audit", "verify", "--key", &key]).await;
    assert!(o.status.success(), "{}", text(&o));
    assert!(stdout(&o).contains("checkpoints intact"), "{}", text(&o));
    (dir, cfg, key, rows)
}

/// One read on the database at `url`, from outside the gateway.
fn reader<T: Send + 'static>(
    url: &str,
    f: impl FnOnce(&mut cedargate::store::db::Conn) -> Result<T, cedargate::store::StoreError>
    + Send
    + 'static,
) -> Result<T, cedargate::store::StoreError> {
    let url = url.to_string();
    std::thread::spawn(move || Store::open_ready(&url, &StoreOptions::default())?.read_blocking(f))
        .join()
        .unwrap()
}

#[tokio::test]
async fn the_gateway_signs_its_head_on_an_interval_when_it_moved_and_on_stop() {
    let (g, t, cfg) = gateway().await;
    // The key file: created at first start, owner-only.
    let key_file = g.dir.path().join("data/checkpoint.key");
    let secret = std::fs::read_to_string(&key_file).unwrap();
    assert!(secret.starts_with("PRIVATE+KEY+cedargate+"), "{secret}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let key = public_key(&cfg).await;
    assert!(key.starts_with("cedargate+"), "{key}");
    let verifier = NoteVerifier::parse(&key).unwrap();

    // Within an interval of the head moving, a checkpoint of the head.
    calls(&g, &t, 3).await;
    let h = head(&g).await;
    let rows = signed_at(&g, h.seq).await;
    let row = rows.iter().find(|r| r.seq == h.seq).unwrap();
    assert_eq!(
        (row.hash.as_str(), row.kind.as_str()),
        (h.hash.as_str(), "interval")
    );
    // The note is a tlog-checkpoint: origin, tree size, base64 root hash.
    let body = signed_note::open(&row.note, &[verifier]).unwrap();
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines[0], "cedargate");
    assert_eq!(lines[1], h.seq.to_string());
    use base64::Engine as _;
    let root = base64::engine::general_purpose::STANDARD
        .decode(lines[2])
        .unwrap();
    assert_eq!(hex::encode(root), h.hash);
    assert!(lines[3].starts_with("time "), "{body}");

    // Three intervals with a still head: nothing more is signed.
    let before = stored(&g).await.len();
    tokio::time::sleep(Duration::from_millis(3200)).await;
    assert_eq!(stored(&g).await.len(), before);

    // A clean stop signs the records of its last interval.
    calls(&g, &t, 2).await;
    let h = head(&g).await;
    let url = g.database_url();
    let dir = g.stop().await.into_dir();
    let newest = reader(&url, checkpoints::newest).unwrap().unwrap();
    assert_eq!((newest.seq, newest.hash.as_str()), (h.seq, h.hash.as_str()));

    // A restart keeps the key.
    let g = TestGateway::start_in(dir, |c| c.checkpoints.interval_secs = 1).await;
    assert_eq!(public_key(&cfg).await, key);
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), secret);
    let o = cli(&cfg, &["audit", "verify", "--key", &key]).await;
    assert!(o.status.success(), "{}", text(&o));
    g.stop().await;
}

#[tokio::test]
async fn a_truncated_tail_passes_the_chain_check_and_fails_the_signed_one() {
    let (dir, cfg, key, rows) = stopped_trail(6).await;
    let url = common::cli::database_url(dir.path());
    // The administrator deletes the three newest records.
    tamper_decisions(&url, "DELETE FROM decisions WHERE seq >= 4;");

    let (plain, keyed) = verify_both(&cfg, &key, &[]).await;
    assert!(
        plain.status.success(),
        "the chain alone cannot see it: {}",
        text(&plain)
    );
    assert!(!keyed.status.success(), "{}", text(&keyed));
    let last = rows.last().unwrap().seq;
    assert!(
        stderr(&keyed).contains("truncated tail: the checkpoint signed at")
            && stderr(&keyed).contains(&format!(
                "but the trail ends at seq 3: records 4..={last} were deleted"
            )),
        "{}",
        text(&keyed)
    );
    common::drop_database_of(dir.path());
}

/// SQL that rewrites the chain from `from` on with its records' hashes
/// recomputed, `edit` applied to the record at `from`.
fn recomputed_chain(
    backend: Backend,
    rows: &[StoredDecision],
    from: i64,
    edit: impl Fn(&mut StoredDecision),
) -> String {
    let mut sql = String::new();
    let mut prev = rows[0].prev_hash.clone();
    for row in rows {
        let mut row = row.clone();
        if row.seq == from {
            edit(&mut row);
        }
        if row.seq >= from {
            row.prev_hash = prev.clone();
            row.hash = decisions::chain_hash(&row.prev_hash, row.seq, &row.record);
            let set = format!(
                "SET reasons = '{}', prev_hash = '{}', hash = '{}' WHERE seq = {}",
                row.record.reasons.replace('\'', "''"),
                row.prev_hash,
                row.hash,
                row.seq
            );
            match backend {
                Backend::Sqlite => sql.push_str(&format!(
                    "UPDATE decisions_indexed {set}; UPDATE decisions_recent {set};"
                )),
                Backend::Postgres => sql.push_str(&format!("UPDATE decisions {set};")),
            }
        }
        prev = row.hash.clone();
    }
    sql
}

#[tokio::test]
async fn a_recomputed_chain_passes_the_chain_check_and_fails_the_signed_one() {
    let (dir, cfg, key, rows) = stopped_trail(5).await;
    let url = common::cli::database_url(dir.path());
    let backend = reader(&url, |c| Ok(c.backend())).unwrap();
    // Record 2 now says another policy decided; every hash after it is
    // recomputed, so every link holds.
    let sql = recomputed_chain(backend, &rows, 2, |r| {
        r.record.reasons = "[\"forged\"]".into();
    });
    tamper_decisions(&url, &sql);

    let (plain, keyed) = verify_both(&cfg, &key, &[]).await;
    assert!(
        plain.status.success(),
        "the chain alone cannot see it: {}",
        text(&plain)
    );
    assert!(!keyed.status.success(), "{}", text(&keyed));
    let last = rows.last().unwrap();
    assert!(
        stderr(&keyed).contains(&format!(
            "rewritten chain: record seq {} has hash",
            last.seq
        )) && stderr(&keyed).contains(&format!("says {}: the chain was recomputed", last.hash)),
        "{}",
        text(&keyed)
    );

    // A gateway started over the rewritten chain never signs it: neither
    // on its interval after new records nor at its stop.
    let signed_before = reader(&url, checkpoints::all).unwrap();
    let g = TestGateway::start_in(dir, |c| c.checkpoints.interval_secs = 1).await;
    let t = g.tenant("other").await;
    calls(&g, &t, 2).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let dir = g.stop().await.into_dir();
    assert_eq!(reader(&url, checkpoints::all).unwrap(), signed_before);
    common::drop_database_of(dir.path());
}

#[tokio::test]
async fn a_forged_anchor_passes_the_chain_check_and_fails_the_signed_one() {
    let (dir, cfg, key, rows) = stopped_trail(6).await;
    let url = common::cli::database_url(dir.path());
    // The administrator claims records 1..=3 were archived, and deletes them.
    let cut = &rows[2];
    tamper_decisions(
        &url,
        &format!(
            "INSERT INTO decision_anchors (seq, hash, time, first_seq, prev_hash, records, format,
                 archive_sha256, archived_at)
             VALUES (3, '{}', '{}', 1, '{}', 3, 'jsonl', '{}', '{}');
             DELETE FROM decisions WHERE seq <= 3;",
            cut.hash,
            cut.record.time,
            decisions::GENESIS_HASH,
            "ab".repeat(32),
            cedargate::ids::now_rfc3339()
        ),
    );

    let (plain, keyed) = verify_both(&cfg, &key, &[]).await;
    assert!(
        plain.status.success(),
        "the chain alone cannot see it: {}",
        text(&plain)
    );
    assert!(
        stdout(&plain).contains("records up to seq 3 were archived"),
        "{}",
        text(&plain)
    );
    assert!(!keyed.status.success(), "{}", text(&keyed));
    assert!(
        stderr(&keyed).contains("forged anchor: the anchor at seq 3 (records 1..=3"),
        "{}",
        text(&keyed)
    );
    common::drop_database_of(dir.path());
}

#[tokio::test]
async fn a_real_archive_is_signed_and_verifies_with_the_key() {
    let (g, t, cfg) = gateway().await;
    calls(&g, &t, 4).await;
    let cut = head(&g).await.seq;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let before = cedargate::ids::now_rfc3339();
    tokio::time::sleep(Duration::from_millis(5)).await;
    calls(&g, &t, 2).await;
    let out = g.dir.path().join("archive.jsonl");
    let o = cli(
        &cfg,
        &[
            "audit",
            "archive",
            "--before",
            &before,
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .await;
    assert!(o.status.success(), "{}", text(&o));
    let anchor_rows: Vec<CheckpointRow> = stored(&g)
        .await
        .into_iter()
        .filter(|r| r.kind == "anchor")
        .collect();
    assert_eq!(anchor_rows.len(), 1);
    assert_eq!(anchor_rows[0].seq, cut);
    assert!(
        anchor_rows[0].note.contains("\nanchor 1 "),
        "{}",
        anchor_rows[0].note
    );
    // Checkpoints behind the anchor went with the records, except its own.
    assert!(
        stored(&g)
            .await
            .iter()
            .all(|r| r.seq > cut || r.kind == "anchor")
    );

    let key = public_key(&cfg).await;
    let dir = g.stop().await.into_dir();
    let o = cli(&cfg, &["audit", "verify", "--key", &key]).await;
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stdout(&o).contains("1 anchor(s), each signed"),
        "{}",
        text(&o)
    );
    common::drop_database_of(dir.path());
}

#[tokio::test]
async fn an_archive_without_the_key_file_is_refused_and_prunes_nothing() {
    let (g, t, cfg) = gateway().await;
    calls(&g, &t, 3).await;
    std::fs::remove_file(g.dir.path().join("data/checkpoint.key")).unwrap();
    let out = g.dir.path().join("archive.jsonl");
    let now = cedargate::ids::now_rfc3339();
    let o = cli(
        &cfg,
        &[
            "audit",
            "archive",
            "--before",
            &now,
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .await;
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("checkpoint.key` does not exist"),
        "{}",
        text(&o)
    );
    assert!(!out.exists());
    assert_eq!(g.count("decision_anchors").await, 0);
    g.stop().await;
}

#[tokio::test]
async fn a_kept_copy_catches_a_truncation_whose_checkpoints_were_deleted_too() {
    let (g, t, cfg) = gateway().await;
    calls(&g, &t, 3).await;
    let first = head(&g).await;
    signed_at(&g, first.seq).await;
    calls(&g, &t, 3).await;
    let url = g.database_url();
    let dir = g.stop().await.into_dir();
    let key = public_key(&cfg).await;
    // The auditor keeps a copy.
    let copy = dir.path().join("kept.checkpoints");
    let o = cli(
        &cfg,
        &["audit", "checkpoints", "--out", copy.to_str().unwrap()],
    )
    .await;
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stdout(&o).contains(&format!("verifier key: {key}")),
        "{}",
        text(&o)
    );
    let kept = std::fs::read_to_string(&copy).unwrap();
    assert_eq!(
        cedargate::audit::checkpoint_verify::parse_file(&kept).len(),
        reader(&url, checkpoints::all).unwrap().len()
    );

    // The administrator deletes the newest records and the checkpoints
    // that covered them.
    let drop_guard = match reader(&url, |c| Ok(c.backend())).unwrap() {
        Backend::Sqlite => "DROP TRIGGER trail_checkpoints_no_delete;",
        Backend::Postgres => {
            "ALTER TABLE trail_checkpoints DISABLE TRIGGER trail_checkpoints_no_delete;"
        }
    };
    tamper_decisions(
        &url,
        &format!(
            "{drop_guard} DELETE FROM trail_checkpoints WHERE seq > {0};
             DELETE FROM decisions WHERE seq > {0};",
            first.seq
        ),
    );
    let (plain, keyed) = verify_both(&cfg, &key, &[]).await;
    assert!(plain.status.success(), "{}", text(&plain));
    assert!(
        keyed.status.success(),
        "the database alone agrees with itself: {}",
        text(&keyed)
    );

    let keyed = cli(
        &cfg,
        &[
            "audit",
            "verify",
            "--key",
            &key,
            "--checkpoints",
            copy.to_str().unwrap(),
        ],
    )
    .await;
    assert!(!keyed.status.success(), "{}", text(&keyed));
    assert!(
        stderr(&keyed).contains(&format!("but the trail ends at seq {}", first.seq)),
        "{}",
        text(&keyed)
    );
    common::drop_database_of(dir.path());
}

#[tokio::test]
async fn a_checkpoint_signed_by_another_key_or_a_bad_key_is_refused() {
    let (dir, cfg, key, rows) = stopped_trail(2).await;
    let url = common::cli::database_url(dir.path());
    // A checkpoint the administrator signed with a key of their own.
    let other = NoteSigner::generate("cedargate").unwrap();
    let last = rows.last().unwrap();
    use base64::Engine as _;
    let root = base64::engine::general_purpose::STANDARD.encode(hex::decode(&last.hash).unwrap());
    let note = other
        .sign(&format!(
            "cedargate\n{}\n{root}\ntime 2026-01-01T00:00:00Z\n",
            last.seq
        ))
        .unwrap();
    reader(&url, move |c| {
        checkpoints::insert(
            c,
            &CheckpointRow {
                seq: 0,
                hash: String::new(),
                kind: "interval".into(),
                signed_at: String::new(),
                key_id: other.verifier().id_hex(),
                note,
            },
        )
    })
    .unwrap();
    let o = cli(&cfg, &["audit", "verify", "--key", &key]).await;
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains(&format!(
            "forged checkpoint: a checkpoint in the database (origin `cedargate`, seq `{}`) does not verify",
            last.seq
        )),
        "{}",
        text(&o)
    );
    // A key that is not a verifier key is refused before anything runs.
    let o = cli(&cfg, &["audit", "verify", "--key", "not-a-key"]).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(stderr(&o).contains("`--key`"), "{}", text(&o));
    common::drop_database_of(dir.path());
}
