//! Shadow mode of a decision application, through the real server: a
//! candidate folder decides every live evaluation beside the active set
//! and decides nothing; its divergences are counted, stored and listed as
//! the gateway's own shadow's are (`/admin/pdp/apps/{app}/shadow`,
//! `/metrics`, the console's Policy set page), independent of the gateway's
//! shadow and of the other applications'.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::path::{Path, PathBuf};

use common::console::Console;
use common::pdp::{Apps, copy_tree, fixture_dir};
use common::{ADMIN_TOKEN, TestGateway};
use reqwest::Method;
use serde_json::{Value, json};

/// The candidate's policies: reading is for editors only (bob, an admin
/// outside the team, is denied where the live set allows him), and any
/// delete is allowed (where the live set wants `soft`); writes unchanged.
const CANDIDATE: &str = r#"
@id("editors-read-records")
permit (principal in Records::team::"editors", action == Records::Action::"read", resource);

@id("users-write-active-records")
permit (principal, action == Records::Action::"write", resource)
when { resource has status && resource.status == "active" }
unless { principal has role && principal.role == "admin" };

@id("admins-write-archived-records")
permit (principal, action == Records::Action::"write", resource)
when {
  principal has role && principal.role == "admin" &&
  resource has status && resource.status == "archived"
};

@id("archived-records-are-read-only")
forbid (principal, action == Records::Action::"write", resource)
when { resource has status && resource.status == "archived" }
unless { principal has role && principal.role == "admin" };

@id("any-delete")
permit (principal, action == Records::Action::"delete", resource);
"#;

/// A candidate folder of the records application with [`CANDIDATE`]; with
/// `extra_schema`, its schema declares one more entity type (so it is not
/// the active schema, and the live request is read again under it).
fn candidate(root: &Path, name: &str, extra_schema: bool) -> PathBuf {
    let dir = root.join(name);
    copy_tree(&fixture_dir("records"), &dir);
    std::fs::write(dir.join("policies/records.cedar"), CANDIDATE).unwrap();
    if extra_schema {
        let schema = std::fs::read_to_string(dir.join("schema.cedarschema")).unwrap();
        let schema = schema.replacen("entity team;", "entity team;\n  entity folder;", 1);
        std::fs::write(dir.join("schema.cedarschema"), schema).unwrap();
    }
    dir
}

fn evaluation(subject: Value, action: Value, resource: &str) -> Value {
    json!({
        "subject": subject,
        "action": action,
        "resource": { "type": "record", "id": resource },
    })
}

fn user(id: &str) -> Value {
    json!({ "type": "user", "id": id })
}

/// Evaluates `body` at `records`; the answer's decisions and record ids.
async fn decide(g: &TestGateway, key: &str, body: Value) -> Vec<(bool, String)> {
    let batch = body.get("evaluations").is_some();
    let path = if batch {
        "/pdp/records/access/v1/evaluations"
    } else {
        "/pdp/records/access/v1/evaluation"
    };
    let (status, answer) = g.pdp(path, key, body).await;
    assert_eq!(status, 200, "{answer}");
    let one = |a: &Value| {
        (
            a["decision"].as_bool().unwrap(),
            a["context"]["decision_id"].as_str().unwrap().to_string(),
        )
    };
    if batch {
        answer["evaluations"]
            .as_array()
            .unwrap()
            .iter()
            .map(one)
            .collect()
    } else {
        vec![one(&answer)]
    }
}

async fn shadow(g: &TestGateway, app: &str) -> (u16, Value) {
    g.admin(Method::GET, &format!("/admin/pdp/apps/{app}/shadow"), None)
        .await
}

/// The divergences listed, as (decision id, action, principal, live,
/// candidate).
fn divergences(listing: &Value) -> Vec<(String, String, String, String, String)> {
    let mut all: Vec<_> = listing["divergences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let s = |k: &str| d[k].as_str().unwrap().to_string();
            (
                s("decisionId"),
                s("action"),
                s("principal"),
                s("liveDecision"),
                s("candidateDecision"),
            )
        })
        .collect();
    all.sort();
    all
}

/// A candidate with the active schema decides every live evaluation (a
/// lone one and each of a batch), decides nothing, and its divergences are
/// listed with the live decisions' record ids, counted per direction and
/// in `/metrics`; a search page is not shadowed; the gateway's shadow and
/// the other application's see none of it; a candidate that does not load
/// is refused and leaves the running one; stopped, nothing more is
/// compared.
#[tokio::test]
async fn an_applications_candidate_runs_in_shadow() {
    let apps = Apps::copied(&[("records", "records"), ("other", "records")]);
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(|c| {
        c.pdp_dir = dir;
        c.lifecycle.watch = false;
    })
    .await;
    let key = g.pdp_key("acme", &["records", "other"]).await;
    let root = tempfile::tempdir().unwrap();
    let cand = candidate(root.path(), "records-v2", false);

    let (status, none) = shadow(&g, "records").await;
    assert_eq!(status, 200, "{none}");
    assert_eq!(none["active"], false, "{none}");
    let (status, started) = g
        .admin(
            Method::PUT,
            "/admin/pdp/apps/records/shadow",
            Some(json!({ "policiesDir": cand })),
        )
        .await;
    assert_eq!(status, 200, "{started}");
    let hash = started["candidate"]["candidateHash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        started["candidate"]["policyIds"],
        json!([
            "admins-write-archived-records",
            "any-delete",
            "archived-records-are-read-only",
            "editors-read-records",
            "users-write-active-records"
        ]),
        "{started}"
    );

    // Live answers are the active set's, whatever the candidate says.
    let read = json!({ "name": "read" });
    let delete = json!({ "name": "delete" });
    let lone = decide(&g, &key, evaluation(user("bob"), read.clone(), "record-1")).await;
    assert!(lone[0].0, "the live set allows bob to read");
    let batch = decide(
        &g,
        &key,
        json!({
            "evaluations": [
                evaluation(user("alice"), read.clone(), "record-1"),
                evaluation(user("alice"), delete.clone(), "record-1"),
                evaluation(user("alice"), json!({ "name": "delete", "properties": { "soft": true } }), "record-1"),
                evaluation(json!({ "type": "user", "id": "carol", "properties": { "role": "admin" } }), json!({ "name": "write" }), "record-2"),
            ]
        }),
    )
    .await;
    assert_eq!(
        batch.iter().map(|b| b.0).collect::<Vec<_>>(),
        [true, false, true, true],
        "{batch:?}"
    );

    let (status, listing) = shadow(&g, "records").await;
    assert_eq!(status, 200, "{listing}");
    let c = &listing["candidate"];
    assert_eq!(
        (
            &c["candidateHash"],
            &c["evaluated"],
            &c["divergences"],
            &c["allowToDeny"],
            &c["denyToAllow"],
            &c["dropped"]
        ),
        (
            &json!(hash),
            &json!(5),
            &json!(2),
            &json!(1),
            &json!(1),
            &json!(0)
        ),
        "{listing}"
    );
    let expected = bob_reads_and_alice_deletes(&lone[0].1, &batch[1].1);
    assert_eq!(divergences(&listing), expected, "{listing}");
    let bob = listing["divergences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["decisionId"] == lone[0].1.as_str())
        .unwrap();
    assert_eq!(bob["liveReasons"], json!(["users-read-records"]), "{bob}");
    assert_eq!(bob["candidateReasons"], json!([]), "{bob}");
    assert_eq!(bob["candidateHash"], hash.as_str(), "{bob}");
    assert_eq!(bob["resource"], r#"Records::record::"record-1""#, "{bob}");
    // The divergence names the record the live decision made.
    let records = g.decisions().await;
    assert!(
        records.iter().any(|r| r.record.id == lone[0].1
            && r.record.policy_hash == bob["liveHash"].as_str().unwrap()),
        "the divergence names its decision's record and set"
    );

    let metrics = g.metrics_text().await;
    for line in [
        r#"cedargate_shadow_divergences_total{action="authzen:records:read",flip="allow_to_deny"} 1"#,
        r#"cedargate_shadow_divergences_total{action="authzen:records:delete",flip="deny_to_allow"} 1"#,
        "cedargate_shadow_decisions_total 5",
    ] {
        assert!(metrics.contains(line), "missing `{line}` in:\n{metrics}");
    }

    // A search page is not shadowed.
    let (status, found) = g
        .pdp(
            "/pdp/records/access/v1/search/resource",
            &key,
            json!({ "subject": user("bob"), "action": read, "resource": { "type": "record" } }),
        )
        .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(shadow(&g, "records").await.1["candidate"]["evaluated"], 5);

    // Neither the other application nor the gateway shadow anything.
    decide_other(&g, &key).await;
    let (_, other) = shadow(&g, "other").await;
    assert_eq!(
        (&other["active"], &other["divergences"]),
        (&json!(false), &json!([])),
        "{other}"
    );
    let (status, gateway) = g.admin(Method::GET, "/admin/shadow", None).await;
    assert_eq!(status, 200, "{gateway}");
    assert_eq!(
        (&gateway["active"], &gateway["divergences"]),
        (&json!(false), &json!([])),
        "{gateway}"
    );

    // A candidate that does not load is refused; the running one stays.
    let broken = candidate(root.path(), "broken", false);
    std::fs::write(
        broken.join("policies/typo.cedar"),
        "@id(\"typo\")\npermit (principal, action == Records::Action::\"read\", resource)\nwhen { resource.stauts == \"active\" };\n",
    )
    .unwrap();
    let (status, refused) = g
        .admin(
            Method::PUT,
            "/admin/pdp/apps/records/shadow",
            Some(json!({ "policiesDir": broken })),
        )
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "policy_set_rejected");
    assert!(
        refused["diagnostics"].to_string().contains("stauts"),
        "{refused}"
    );
    assert_eq!(
        shadow(&g, "records").await.1["candidate"]["candidateHash"],
        hash.as_str()
    );
    let (status, missing) = g
        .admin(
            Method::PUT,
            "/admin/pdp/apps/nosuch/shadow",
            Some(json!({ "policiesDir": cand })),
        )
        .await;
    assert_eq!(status, 404, "{missing}");

    // The console's Policy set page shows them under the application.
    let console = Console::sign_in(&g.base, ADMIN_TOKEN).await;
    let (status, page) = console.get("/console/policies").await;
    assert_eq!(status, reqwest::StatusCode::OK, "{page}");
    let start = page.find("data-application=\"records\"").unwrap();
    let records = &page[start..start + page[start..].find("</section>").unwrap()];
    assert!(
        records.contains("5 evaluated, 2 divergences (1 allow→deny, 1 deny→allow), 0 dropped"),
        "{records}"
    );
    assert!(records.contains(&hash), "{records}");
    for (id, ..) in &expected {
        assert!(
            records.contains(&format!("/console/decisions/{id}")),
            "{records}"
        );
    }
    let start = page.find("data-application=\"other\"").unwrap();
    let other = &page[start..start + page[start..].find("</section>").unwrap()];
    assert!(other.contains("not running"), "{other}");

    // Stopped: the final counters, and nothing compared any more.
    let (status, stopped) = g
        .admin(Method::DELETE, "/admin/pdp/apps/records/shadow", None)
        .await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(
        (&stopped["active"], &stopped["candidate"]["evaluated"]),
        (&json!(false), &json!(5)),
        "{stopped}"
    );
    decide(
        &g,
        &key,
        evaluation(user("bob"), json!({ "name": "read" }), "record-1"),
    )
    .await;
    assert!(
        g.metrics_text()
            .await
            .contains("cedargate_shadow_decisions_total 5"),
        "a stopped candidate compares nothing"
    );
    let (status, again) = g
        .admin(Method::DELETE, "/admin/pdp/apps/records/shadow", None)
        .await;
    assert_eq!(status, 404, "{again}");
}

/// An evaluation of `other`, which has no candidate.
async fn decide_other(g: &TestGateway, key: &str) {
    let (status, answer) = g
        .pdp(
            "/pdp/other/access/v1/evaluation",
            key,
            evaluation(user("bob"), json!({ "name": "read" }), "record-1"),
        )
        .await;
    assert_eq!(
        (status, &answer["decision"]),
        (200, &json!(true)),
        "{answer}"
    );
}

/// A candidate whose schema is not the active one decides the live
/// request read again under its own schema, on the live entity data with
/// what the request added (carol is an admin only by her properties); it
/// survives a reload of the application, and replacing it starts the
/// counters and the listing afresh.
#[tokio::test]
async fn a_candidate_with_another_schema_reads_the_live_request_again() {
    let apps = Apps::copied(&[("records", "records")]);
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(|c| {
        c.pdp_dir = dir;
        c.lifecycle.watch = false;
    })
    .await;
    let key = g.pdp_key("acme", &["records"]).await;
    let root = tempfile::tempdir().unwrap();
    let same = candidate(root.path(), "same-schema", false);
    let other = candidate(root.path(), "other-schema", true);

    let start = |dir: PathBuf| {
        let g = &g;
        async move {
            let (status, started) = g
                .admin(
                    Method::PUT,
                    "/admin/pdp/apps/records/shadow",
                    Some(json!({ "policiesDir": dir })),
                )
                .await;
            assert_eq!(status, 200, "{started}");
            started["candidate"]["candidateHash"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    start(same).await;
    decide(
        &g,
        &key,
        evaluation(user("bob"), json!({ "name": "read" }), "record-1"),
    )
    .await;
    let second = start(other).await;
    let (_, fresh) = shadow(&g, "records").await;
    assert_eq!(
        (&fresh["candidate"]["evaluated"], &fresh["divergences"]),
        (&json!(0), &json!([])),
        "a new candidate starts afresh: {fresh}"
    );

    // The application reloads (its data changes: record-3); the candidate
    // stays and decides on the new data.
    let entities = apps.app("records").join("entities.json");
    let data = std::fs::read_to_string(&entities).unwrap().replacen(
        "\n]",
        ",\n  { \"uid\": { \"type\": \"Records::record\", \"id\": \"record-3\" }, \"attrs\": { \"status\": \"archived\" }, \"parents\": [] }\n]",
        1,
    );
    std::fs::write(&entities, data).unwrap();
    let (status, reloaded) = g
        .admin(Method::POST, "/admin/pdp/apps/records/reload", None)
        .await;
    assert_eq!(
        (status, &reloaded["attempt"]["result"]),
        (200, &json!("applied")),
        "{reloaded}"
    );

    let carol = json!({ "type": "user", "id": "carol", "properties": { "role": "admin" } });
    let decided = decide(
        &g,
        &key,
        json!({
            "evaluations": [
                evaluation(carol, json!({ "name": "write" }), "record-3"),
                evaluation(user("alice"), json!({ "name": "write" }), "record-3"),
                evaluation(user("bob"), json!({ "name": "read" }), "record-1"),
                evaluation(user("alice"), json!({ "name": "delete" }), "record-3"),
            ]
        }),
    )
    .await;
    assert_eq!(
        decided.iter().map(|d| d.0).collect::<Vec<_>>(),
        [true, false, true, false]
    );
    let (_, listing) = shadow(&g, "records").await;
    assert_eq!(
        (
            &listing["candidate"]["candidateHash"],
            &listing["candidate"]["evaluated"],
            &listing["candidate"]["allowToDeny"],
            &listing["candidate"]["denyToAllow"]
        ),
        (&json!(second), &json!(4), &json!(1), &json!(1)),
        "{listing}"
    );
    assert_eq!(
        divergences(&listing),
        bob_reads_and_alice_deletes(&decided[2].1, &decided[3].1),
        "{listing}"
    );
    assert!(
        listing["divergences"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["candidateErrors"] == json!([])),
        "the live request fits the candidate's schema: {listing}"
    );
}

/// The two divergences both tests provoke, sorted as `divergences` lists
/// them: bob's read (live allow, candidate deny, record `read`) and
/// alice's delete (live deny, candidate allow, record `delete`).
fn bob_reads_and_alice_deletes(
    read: &str,
    delete: &str,
) -> Vec<(String, String, String, String, String)> {
    let mut expected = vec![
        (
            read.to_string(),
            "authzen:records:read".to_string(),
            r#"Records::user::"bob""#.to_string(),
            "allow".to_string(),
            "deny".to_string(),
        ),
        (
            delete.to_string(),
            "authzen:records:delete".into(),
            r#"Records::user::"alice""#.into(),
            "deny".into(),
            "allow".into(),
        ),
    ];
    expected.sort();
    expected
}
