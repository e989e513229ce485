//! The lifecycle of the decision applications, through the real server:
//! each is validated strictly and gated by its policy tests on every
//! reload, its entity data through the same gate, keeps its last good set,
//! and never blocks another application nor the gateway (nor the reverse);
//! the admin API lists them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::TestGateway;
use common::pdp::Apps;
use reqwest::Method;
use serde_json::{Value, json};

const READ: &str = r#"{"subject": {"type": "user", "id": "alice"}, "action": {"name": "read"}, "resource": {"type": "record", "id": "record-1"}}"#;

/// What `app` answers `body`: the status and the decision (`Null` when
/// not decided).
async fn decision(g: &TestGateway, key: &str, app: &str, body: &str) -> (u16, Value) {
    let path = format!("/pdp/{app}/access/v1/evaluation");
    let (status, _, answer) = g.pdp_raw(&path, Some(key), &[], body.to_string()).await;
    (status, answer["decision"].clone())
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// The admin listing's entry of `app`.
async fn listed(g: &TestGateway, app: &str) -> Value {
    let (status, list) = g.admin(Method::GET, "/admin/pdp/apps", None).await;
    assert_eq!(status, 200, "{list}");
    list["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == app)
        .cloned()
        .unwrap_or(Value::Null)
}

const BROKEN_POLICY: &str = "@id(\"typo\")\npermit (principal, action == Records::Action::\"read\", resource)\nwhen { resource.stauts == \"active\" };\n";

/// A broken application at start-up, or one broken later, keeps no one
/// from working: the gateway starts and reloads, the other applications
/// decide and reload, the broken one keeps its last good set (or answers
/// 503 without one) and the listing says why.
#[tokio::test]
async fn a_broken_application_blocks_no_one() {
    let apps = Apps::copied(&[
        ("records", "records"),
        ("other", "records"),
        ("broken", "records"),
    ]);
    write(
        &apps.app("broken").join("policies/typo.cedar"),
        BROKEN_POLICY,
    );
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(|c| {
        c.pdp_dir = dir;
        c.lifecycle.watch = false;
    })
    .await;
    let key = g.pdp_key("acme", &["records", "other", "broken"]).await;
    assert_eq!(
        decision(&g, &key, "records", READ).await,
        (200, json!(true))
    );
    let (status, _) = decision(&g, &key, "broken", READ).await;
    assert_eq!(
        status, 503,
        "an application that never loaded answers unavailable"
    );
    let broken = listed(&g, "broken").await;
    assert_eq!(broken["state"], "unavailable", "{broken}");
    let diagnostics = broken["lastError"]["diagnostics"].to_string();
    assert!(
        diagnostics.contains("typo.cedar:3:") && diagnostics.contains("stauts"),
        "{broken}"
    );
    assert_eq!(listed(&g, "records").await["state"], "active");

    // `other` breaks: its reload is refused, its last good set decides on.
    write(
        &apps.app("other").join("policies/typo.cedar"),
        BROKEN_POLICY,
    );
    let (status, refused) = g
        .admin(Method::POST, "/admin/pdp/apps/other/reload", None)
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "policy_set_rejected");
    assert_eq!(decision(&g, &key, "other", READ).await, (200, json!(true)));
    // Reloading all applications reloads the good ones all the same.
    let (status, all) = g.admin(Method::POST, "/admin/pdp/apps/reload", None).await;
    assert_eq!(status, 200, "{all}");
    let results: Vec<(String, String)> = all["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["app"].as_str().unwrap().into(),
                a["attempt"]["result"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            ("broken".to_string(), "rejected".to_string()),
            ("other".into(), "rejected".into()),
            ("records".into(), "unchanged".into())
        ]
    );
    // The gateway's own reload does not look at the applications.
    let (status, reload) = g.admin(Method::POST, "/admin/policies/reload", None).await;
    assert_eq!(status, 200, "{reload}");

    // Fixed, the broken application loads and decides.
    std::fs::remove_file(apps.app("broken").join("policies/typo.cedar")).unwrap();
    let (status, applied) = g
        .admin(Method::POST, "/admin/pdp/apps/broken/reload", None)
        .await;
    assert_eq!(
        (status, &applied["attempt"]["result"]),
        (200, &json!("applied")),
        "{applied}"
    );
    assert_eq!(decision(&g, &key, "broken", READ).await, (200, json!(true)));
}

/// A change whose verdicts contradict the application's policy tests is
/// refused, naming the failing test; the last good set keeps deciding.
#[tokio::test]
async fn policy_tests_gate_every_reload() {
    let apps = Apps::copied(&[("records", "records")]);
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(|c| {
        c.pdp_dir = dir;
        c.lifecycle.watch = false;
    })
    .await;
    let key = g.pdp_key("acme", &["records"]).await;
    let policies = apps.app("records").join("policies/records.cedar");
    let text = std::fs::read_to_string(&policies).unwrap();
    write(
        &policies,
        &text.replace(
            "action == Records::Action::\"read\"",
            "action == Records::Action::\"delete\"",
        ),
    );
    let (status, refused) = g
        .admin(Method::POST, "/admin/pdp/apps/records/reload", None)
        .await;
    assert_eq!(status, 422, "{refused}");
    let failures = refused["attempt"]["testFailures"].to_string();
    assert!(
        failures.contains("alice reads record-1") && failures.contains("expected allow, got deny"),
        "{refused}"
    );
    assert_eq!(
        decision(&g, &key, "records", READ).await,
        (200, json!(true))
    );
}

/// Entity data reloads through the same gate: data that does not fit the
/// schema, or that breaks a policy test, is refused; good data is applied
/// (by the file watch, too) and decides, and its records name it.
#[tokio::test]
async fn entity_data_reloads_through_the_same_gate() {
    let apps = Apps::copied(&[("records", "records"), ("other", "records")]);
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(|c| {
        c.pdp_dir = dir;
        c.lifecycle.watch_debounce_ms = 50;
    })
    .await;
    let key = g.pdp_key("acme", &["records", "other"]).await;
    let data = apps.app("records").join("entities.json");
    let good = std::fs::read_to_string(&data).unwrap();
    let before =
        g.gw.pdp
            .app("records")
            .unwrap()
            .active()
            .unwrap()
            .data
            .hash
            .clone();

    write(&data, &good.replace(r#""role": "admin""#, r#""role": 5"#));
    let (status, refused) = g
        .admin(Method::POST, "/admin/pdp/apps/records/reload", None)
        .await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("entity data does not fit the schema"),
        "{refused}"
    );
    write(
        &data,
        &good.replace(r#""role": "admin""#, r#""role": "clerk""#),
    );
    let (status, refused) = g
        .admin(Method::POST, "/admin/pdp/apps/records/reload", None)
        .await;
    assert_eq!(status, 422, "bob is no admin: a test fails: {refused}");
    assert!(
        refused["attempt"]["testFailures"]
            .to_string()
            .contains("an admin writes an archived record")
    );
    let active = g.gw.pdp.app("records").unwrap().active().unwrap();
    assert_eq!(active.data.hash, before, "the last good data still decides");

    // Good data, picked up by the file watch alone.
    let dave = r#"{ "uid": { "type": "Records::user", "id": "dave" }, "attrs": { "role": "admin" }, "parents": [] },"#;
    write(&data, &good.replacen("[", &format!("[\n  {dave}"), 1));
    let deadline = Instant::now() + Duration::from_secs(20);
    while g.gw.pdp.app("records").unwrap().active().unwrap().data.hash == before {
        assert!(
            Instant::now() < deadline,
            "the file watch reloaded the data"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let write_archived = r#"{"subject": {"type": "user", "id": "dave"}, "action": {"name": "write"}, "resource": {"type": "record", "id": "record-2"}}"#;
    assert_eq!(
        decision(&g, &key, "records", write_archived).await,
        (200, json!(true))
    );
    let r = g.decisions().await.pop().unwrap().record;
    assert_eq!(
        r.entities_hash,
        g.gw.pdp.app("records").unwrap().active().unwrap().data.hash
    );
    assert_eq!(
        decision(&g, &key, "other", write_archived).await,
        (200, json!(false)),
        "other's data is its own"
    );
    let last = listed(&g, "records").await;
    assert_eq!(last["lastReload"]["trigger"], "file-watch", "{last}");
    assert_eq!(last["data"]["entities"], 6, "{last}");

    // A folder removed removes its application.
    std::fs::remove_dir_all(apps.app("other")).unwrap();
    let (status, _) = g.admin(Method::POST, "/admin/pdp/apps/reload", None).await;
    assert_eq!(status, 200);
    assert_eq!(listed(&g, "other").await, Value::Null);
    assert_eq!(decision(&g, &key, "other", READ).await.0, 404);
}
