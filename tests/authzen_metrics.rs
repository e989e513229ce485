//! The decision applications in `/metrics`, through the real server: each
//! recorded AuthZEN decision counted per application and outcome
//! (`cedargate_application_decisions_total`), each recorded search page per
//! application and kind (`cedargate_application_searches_total`); what was
//! not decided (a refused request, a batch member that failed, the members
//! a short-circuit left) is not counted.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::TestGateway;
use common::pdp::Apps;
use serde_json::{Value, json};

fn ask(user: &str, action: &str, record: &str) -> Value {
    json!({"subject": {"type": "user", "id": user}, "action": {"name": action},
           "resource": {"type": "record", "id": record}})
}

/// The value of the series `series` (name and labels, as exposed), or 0
/// when it is not exposed.
fn value(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse().unwrap())
}

fn decisions(metrics: &str, app: &str, outcome: &str) -> u64 {
    value(
        metrics,
        &format!(
            "cedargate_application_decisions_total{{application=\"{app}\",outcome=\"{outcome}\"}}"
        ),
    )
}

#[tokio::test]
async fn application_decisions_are_counted_per_application_and_outcome() {
    let apps = Apps::copied(&[("records", "records"), ("other", "records")]);
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(|c| {
        c.pdp_dir = dir;
        c.lifecycle.watch = false;
    })
    .await;
    let key = g.pdp_key("acme", &["records", "other"]).await;
    let before = g.metrics_text().await;
    assert_eq!(decisions(&before, "records", "allow"), 0, "{before}");

    let eval = |app: &str| format!("/pdp/{app}/access/v1/evaluation");
    let batch = "/pdp/records/access/v1/evaluations";
    for (path, body, status) in [
        // Decided: 1 allow.
        (eval("records"), ask("alice", "read", "record-1"), 200),
        // Refused before anything is decided: not counted.
        (eval("records"), ask("alice", "fly", "record-1"), 400),
        // 2 allows, 1 deny; the member that cannot be decided is not counted.
        (
            batch.to_string(),
            json!({"evaluations": [
                ask("alice", "read", "record-1"),
                ask("bob", "read", "record-2"),
                ask("alice", "write", "record-2"),
                {"subject": {"type": "user", "id": "alice"}, "action": {"name": "read"}},
            ]}),
            200,
        ),
        // Stops at the first deny: 1 allow, 1 deny; the last is not decided.
        (
            batch.to_string(),
            json!({"options": {"evaluations_semantic": "deny_on_first_deny"}, "evaluations": [
                ask("alice", "read", "record-1"),
                ask("alice", "write", "record-2"),
                ask("bob", "read", "record-1"),
            ]}),
            200,
        ),
        // Another application: 1 deny.
        (eval("other"), ask("alice", "write", "record-2"), 200),
    ] {
        let (got, answer) = g.pdp(&path, &key, body).await;
        assert_eq!(got, status, "{path}: {answer}");
    }
    let (status, found) = g
        .pdp(
            "/pdp/records/access/v1/search/resource",
            &key,
            json!({"subject": {"type": "user", "id": "alice"}, "action": {"name": "read"},
                   "resource": {"type": "record"}}),
        )
        .await;
    assert_eq!(status, 200, "{found}");

    let after = g.metrics_text().await;
    assert!(
        after.contains("# TYPE cedargate_application_decisions counter"),
        "{after}"
    );
    assert_eq!(
        [
            decisions(&after, "records", "allow"),
            decisions(&after, "records", "deny"),
            decisions(&after, "other", "allow"),
            decisions(&after, "other", "deny"),
        ],
        [4, 2, 0, 1],
        "{after}"
    );
    assert_eq!(
        value(
            &after,
            "cedargate_application_searches_total{application=\"records\",kind=\"resource\"}"
        ),
        1,
        "{after}"
    );
    // As many as the trail holds.
    let recorded = g
        .decisions()
        .await
        .iter()
        .filter(|d| d.record.action.starts_with("authzen:records:"))
        .count();
    assert_eq!(recorded, 7, "six evaluations and a search page of records");
}
