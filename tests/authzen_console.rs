//! The decision applications in the console and the operator API, through
//! the real server: the Policy set page lists every application (active or
//! not, its set, its data, its reloads), and the Decisions page and `GET
//! /admin/decisions` filter the trail by application.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::TestGateway;
use common::console::Console;
use common::pdp::Apps;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const AUDITOR_TOKEN: &str = "test-auditor-token-0123456789abcdef01";

fn ask(user: &str, action: &str, record: &str) -> Value {
    json!({"subject": {"type": "user", "id": user}, "action": {"name": action},
           "resource": {"type": "record", "id": record}})
}

/// `records` and `other` (copies of the example) and `broken` (its
/// policies do not parse), with decisions of the first two.
async fn gateway() -> (TestGateway, Apps) {
    let apps = Apps::copied(&[
        ("records", "records"),
        ("other", "records"),
        ("broken", "records"),
    ]);
    std::fs::write(
        apps.app("broken").join("policies/records.cedar"),
        "permit (principal, action, resource",
    )
    .unwrap();
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(|c| {
        c.pdp_dir = dir;
        c.pdp.default_app = Some("records".into());
        c.auditor_token = Some(AUDITOR_TOKEN.into());
    })
    .await;
    let key = g.pdp_key("acme", &["records", "other"]).await;
    for (app, body) in [
        ("records", ask("alice", "read", "record-1")),
        ("records", ask("alice", "write", "record-2")),
        ("other", ask("bob", "write", "record-1")),
    ] {
        let (status, answer) = g
            .pdp(&format!("/pdp/{app}/access/v1/evaluation"), &key, body)
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    (g, apps)
}

/// The `<section>` of one application on the Policy set page.
fn section<'a>(page: &'a str, app: &str) -> &'a str {
    let start = page
        .find(&format!("data-application=\"{app}\""))
        .unwrap_or_else(|| panic!("no section for {app}: {page}"));
    let end = page[start..].find("</section>").unwrap() + start;
    &page[start..end]
}

#[tokio::test]
async fn the_policy_set_page_lists_every_application() {
    let (g, _apps) = gateway().await;
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let (status, page) = c.get("/console/policies").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let records = section(&page, "records");
    assert!(records.contains("records (default)"), "{records}");
    assert!(records.contains(">active<"), "{records}");
    let hash = &g
        .gw
        .pdp
        .app("records")
        .unwrap()
        .active()
        .unwrap()
        .bundle
        .hash;
    assert!(records.contains(hash.as_str()), "{records}");
    assert!(
        records.contains("archived-records-are-read-only, soft-deletes-only"),
        "{records}"
    );
    assert!(records.contains("5 entities"), "{records}");
    assert!(records.contains("8 policy test(s) passed"), "{records}");
    let base_url = format!("{}/pdp/records", g.base).replace('/', "&#x2f;");
    assert!(records.contains(&base_url), "{records}");
    assert!(
        records.contains("href=\"/console?application=records\""),
        "{records}"
    );
    assert!(
        records.contains("href=\"/console/replay?application=records\""),
        "{records}"
    );
    let broken = section(&page, "broken");
    assert!(broken.contains(">unavailable<"), "{broken}");
    assert!(
        broken.contains("records.cedar"),
        "the error names the file: {broken}"
    );
    section(&page, "other");
}

#[tokio::test]
async fn the_decisions_page_and_the_operator_api_filter_by_application() {
    let (g, _apps) = gateway().await;
    let c = Console::sign_in(&g.base, AUDITOR_TOKEN).await;
    let (status, page) = c.get("/console?application=records").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("id=\"filter-application\""), "{page}");
    assert!(page.contains("<option selected>records</option>"), "{page}");
    assert_eq!(page.matches("authzen:records:").count(), 2, "{page}");
    assert!(!page.contains("authzen:other:"), "{page}");
    let (_, page) = c.get("/console?application=other").await;
    assert_eq!(page.matches("authzen:other:write").count(), 1, "{page}");
    assert!(!page.contains("authzen:records:"), "{page}");
    let (status, _) = c.get("/console?application=..%2Fx").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, listed) = g
        .admin(Method::GET, "/admin/decisions?application=records", None)
        .await;
    assert_eq!(status, 200, "{listed}");
    let actions: Vec<&str> = listed["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["authzen:records:read", "authzen:records:write"],
        "{listed}"
    );
    // An application whose name is a prefix of another's is its own.
    let (_, listed) = g
        .admin(Method::GET, "/admin/decisions?application=rec", None)
        .await;
    assert_eq!(listed["decisions"], json!([]), "{listed}");
    let (status, refused) = g
        .admin(Method::GET, "/admin/decisions?application=a%20b", None)
        .await;
    assert_eq!(status, 400, "{refused}");
}
