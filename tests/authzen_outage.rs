//! The trail failing under the decision point, through the real server: an
//! AuthZEN request whose decisions cannot be recorded answers a clear 503
//! (never a decision), leaves nothing half-way (no record, no count in
//! `/metrics`, no shadow divergence, the chain intact) and is answered
//! again once the store is back: the trail's writer refusing every record
//! (SQLite, or PostgreSQL under `CG_TEST_BACKEND=postgres`), and the
//! PostgreSQL server itself stopped and started again.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::time::{Duration, Instant};

use common::TestGateway;
use common::pdp::{Apps, copy_tree, fixture_dir};
use common::pg::{self, PrivateCluster};
use reqwest::Method;
use serde_json::{Value, json};

const EVALUATION: &str = "/pdp/records/access/v1/evaluation";

fn ask(user: &str, action: &str, record: &str) -> Value {
    json!({"subject": {"type": "user", "id": user}, "action": {"name": action},
           "resource": {"type": "record", "id": record}})
}

/// A gateway deciding for `records` on `database` (its own store when
/// `None`).
async fn gateway(database: Option<String>) -> (TestGateway, Apps, String) {
    let apps = Apps::copied(&[("records", "records")]);
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(move |c| {
        c.pdp_dir = dir;
        c.lifecycle.watch = false;
        if let Some(url) = database {
            c.database.url = Some(url);
            c.database.acquire_timeout_ms = 500;
        }
    })
    .await;
    let key = g.pdp_key("acme", &["records"]).await;
    (g, apps, key)
}

/// Asserts a refusal for want of the trail: 503, the error naming it, the
/// request id echoed, no decision.
fn unavailable(status: u16, headers: &reqwest::header::HeaderMap, body: &Value, id: &str) {
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the decision trail is unavailable"),
        "{body}"
    );
    assert!(body.get("decision").is_none() && body.get("evaluations").is_none());
    assert_eq!(headers["x-request-id"], id);
}

/// Every AuthZEN request answers 503 while the writer refuses the records.
async fn all_refused(g: &TestGateway, key: &str) {
    let requests = [
        (EVALUATION, ask("bob", "read", "record-1")),
        (
            "/pdp/records/access/v1/evaluations",
            json!({"evaluations": [ask("alice", "read", "record-1"), ask("bob", "read", "record-1"), ask("alice", "write", "record-2")]}),
        ),
        (
            "/pdp/records/access/v1/search/resource",
            json!({"subject": {"type": "user", "id": "bob"}, "action": {"name": "read"}, "resource": {"type": "record"}}),
        ),
    ];
    for (i, (path, body)) in requests.into_iter().enumerate() {
        let id = format!("outage-{i}");
        let (status, headers, answer) = g
            .pdp_raw(path, Some(key), &[("x-request-id", &id)], body.to_string())
            .await;
        unavailable(status, &headers, &answer, &id);
    }
}

/// The records, the application's counts, and the stored divergences.
async fn left(g: &TestGateway) -> (usize, String, i64) {
    let records = g
        .decisions()
        .await
        .iter()
        .filter(|d| d.record.action.starts_with("authzen:records:"))
        .count();
    let metrics = g.metrics_text().await;
    let counted: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("cedargate_application_") || l.starts_with("cedargate_shadow_decisions")
        })
        .collect();
    (
        records,
        counted.join("\n"),
        g.count("shadow_divergences").await,
    )
}

/// The chain verifies and replays with no flip.
async fn intact(g: &TestGateway) {
    let report =
        g.gw.store
            .read(cedargate::store::decisions::verify)
            .await
            .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let replay = g.replay_recorded().await;
    assert!(replay.flips.is_empty(), "{:?}", replay.flips);
}

/// Breaks (or mends) every insert into the decision records.
async fn break_trail(g: &TestGateway, broken: bool) {
    g.gw.store
        .read(move |c| {
            let sql = match (c.backend(), broken) {
                (cedargate::store::Backend::Sqlite, true) => {
                    // `decisions` is a view over the recent records there.
                    "CREATE TRIGGER decisions_broken BEFORE INSERT ON decisions_recent
                     BEGIN SELECT RAISE(ABORT, 'broken'); END;"
                }
                (cedargate::store::Backend::Sqlite, false) => "DROP TRIGGER decisions_broken;",
                (cedargate::store::Backend::Postgres, true) => {
                    "ALTER TABLE decisions ADD CONSTRAINT broken CHECK (false) NOT VALID;"
                }
                (cedargate::store::Backend::Postgres, false) => {
                    "ALTER TABLE decisions DROP CONSTRAINT broken;"
                }
            };
            c.execute_batch(sql)
        })
        .await
        .unwrap();
}

/// The trail's writer refuses every record: evaluations, batches and
/// searches answer 503 with nothing recorded, counted or diverged (a
/// shadow candidate that would diverge runs all along); mended, the same
/// requests are decided and the chain goes on intact.
#[tokio::test]
async fn a_failing_trail_answers_503_records_nothing_and_recovers() {
    let (g, _apps, key) = gateway(None).await;
    // A candidate that denies bob's reads: every live one diverges.
    let root = tempfile::tempdir().unwrap();
    let candidate = root.path().join("records-next");
    copy_tree(&fixture_dir("records"), &candidate);
    std::fs::write(
        candidate.join("policies/records.cedar"),
        "@id(\"editors-read\")\npermit (principal in Records::team::\"editors\", action == Records::Action::\"read\", resource);\n",
    )
    .unwrap();
    let (status, started) = g
        .admin(
            Method::PUT,
            "/admin/pdp/apps/records/shadow",
            Some(json!({ "policiesDir": candidate })),
        )
        .await;
    assert_eq!(status, 200, "{started}");
    let (status, answer) = g
        .pdp(EVALUATION, &key, ask("bob", "read", "record-1"))
        .await;
    assert_eq!(
        (status, &answer["decision"]),
        (200, &json!(true)),
        "{answer}"
    );
    g.gw.store.writer().flush().await.unwrap();
    let before = left(&g).await;
    assert_eq!((before.0, before.2), (1, 1), "{before:?}");

    break_trail(&g, true).await;
    all_refused(&g, &key).await;
    g.gw.store.writer().flush().await.ok();
    break_trail(&g, false).await;
    assert_eq!(
        left(&g).await,
        before,
        "nothing of the refused requests is left"
    );
    let (_, shadow) = g
        .admin(Method::GET, "/admin/pdp/apps/records/shadow", None)
        .await;
    assert_eq!(shadow["candidate"]["evaluated"], 1, "{shadow}");

    let (status, answer) = g
        .pdp(EVALUATION, &key, ask("bob", "read", "record-1"))
        .await;
    assert_eq!(
        (status, &answer["decision"]),
        (200, &json!(true)),
        "{answer}"
    );
    let (status, answer) = g
        .pdp(
            "/pdp/records/access/v1/evaluations",
            &key,
            json!({"evaluations": [ask("alice", "read", "record-1"), ask("alice", "write", "record-2")]}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    g.gw.store.writer().flush().await.unwrap();
    let after = left(&g).await;
    assert_eq!((after.0, after.2), (4, 2), "{after:?}");
    assert!(
        after.1.contains(
            "cedargate_application_decisions_total{application=\"records\",outcome=\"allow\"} 3"
        ),
        "{}",
        after.1
    );
    intact(&g).await;
}

/// The PostgreSQL server stops under a running gateway: AuthZEN requests
/// answer 503 (never a decision) and nothing of them is recorded; started
/// again, the gateway decides and records again, the chain intact.
#[tokio::test]
async fn a_stopped_database_answers_503_and_decides_again_once_back() {
    let cluster = match PrivateCluster::start() {
        Ok(c) => c,
        Err(e) => return pg::skip_unless_ci(&e),
    };
    let (g, _apps, key) = gateway(Some(cluster.url())).await;
    let (status, answer) = g
        .pdp(EVALUATION, &key, ask("alice", "read", "record-1"))
        .await;
    assert_eq!(
        (status, &answer["decision"]),
        (200, &json!(true)),
        "{answer}"
    );

    cluster.stop().unwrap();
    all_refused(&g, &key).await;

    cluster.start_again().unwrap();
    let start = Instant::now();
    loop {
        let (status, answer) = g
            .pdp(EVALUATION, &key, ask("bob", "read", "record-1"))
            .await;
        if status == 200 {
            assert_eq!(answer["decision"], true, "{answer}");
            break;
        }
        assert_eq!(status, 503, "{answer}");
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "not deciding 15 s after the database came back: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    g.gw.store.writer().flush().await.unwrap();
    let (records, counted, _) = left(&g).await;
    assert_eq!(records, 2, "the decision before and the one after, only");
    assert!(
        counted.contains(
            "cedargate_application_decisions_total{application=\"records\",outcome=\"allow\"} 2"
        ),
        "{counted}"
    );
    intact(&g).await;
}
