//! cedargate as an AuthZEN Authorization API 1.0 decision point, through
//! the real server: decisions of a decision application at its own base
//! path and at the default one, batches (defaults, order, the three
//! semantics), the metadata documents, `X-Request-ID`, the decision
//! records on the trail, and who may ask which application.

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

const EVALUATION: &str = "/pdp/records/access/v1/evaluation";
const EVALUATIONS: &str = "/pdp/records/access/v1/evaluations";

/// A gateway whose applications are `records` (the default) and `other`,
/// both copies of the records fixture.
async fn gateway() -> (TestGateway, Apps) {
    let apps = Apps::copied(&[("records", "records"), ("other", "records")]);
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(|c| {
        c.pdp_dir = dir;
        c.pdp.default_app = Some("records".into());
    })
    .await;
    (g, apps)
}

fn user(id: &str) -> Value {
    json!({"type": "user", "id": id})
}

fn record(id: &str) -> Value {
    json!({"type": "record", "id": id})
}

fn ask(subject: Value, action: &str, resource: Value) -> Value {
    json!({"subject": subject, "action": {"name": action}, "resource": resource})
}

/// The eight decisions the AuthZEN certification fixture mandates, at the
/// application's base path and at the default one, each answered with its
/// record's id and its determining policies.
#[tokio::test]
async fn the_fixture_decides_as_the_certification_requires() {
    let (g, _apps) = gateway().await;
    let key = g.pdp_key("acme", &["records"]).await;
    let admin = json!({"type": "user", "id": "bob", "properties": {"role": "admin"}});
    let archived =
        json!({"type": "record", "id": "record-2", "properties": {"status": "archived"}});
    let delete = |soft: bool| json!({"name": "delete", "properties": {"soft": soft}});
    let cases = [
        (ask(user("alice"), "read", record("record-1")), true),
        (ask(user("alice"), "write", record("record-1")), true),
        (ask(user("bob"), "read", record("record-1")), true),
        (ask(user("bob"), "write", record("record-1")), false),
        (ask(user("alice"), "write", archived.clone()), false),
        (ask(admin, "write", archived), true),
        (
            json!({"subject": user("alice"), "action": delete(true), "resource": record("record-1")}),
            true,
        ),
        (
            json!({"subject": user("alice"), "action": delete(false), "resource": record("record-1")}),
            false,
        ),
    ];
    for path in [EVALUATION, "/access/v1/evaluation"] {
        for (body, expected) in &cases {
            let (status, answer) = g.pdp(path, &key, body.clone()).await;
            assert_eq!(status, 200, "{path} {body}: {answer}");
            assert_eq!(
                answer["decision"],
                json!(expected),
                "{path} {body}: {answer}"
            );
            let context = &answer["context"];
            assert!(
                context["decision_id"]
                    .as_str()
                    .is_some_and(|id| id.len() == 36),
                "{answer}"
            );
            assert!(context["policies"].is_array(), "{answer}");
        }
    }
    // A deny a forbid with advice determined carries the advice.
    let (_, answer) = g
        .pdp(
            EVALUATION,
            &key,
            ask(user("alice"), "write", record("record-2")),
        )
        .await;
    assert_eq!(
        answer["context"]["policies"],
        json!(["archived-records-are-read-only"])
    );
    assert_eq!(
        answer["context"]["reason_user"],
        json!({"403": "archived records are read-only"})
    );
    // Context, extra properties and unknown members change nothing.
    let extra = json!({
        "subject": {"type": "user", "id": "alice", "properties": {"department": "Sales", "role": "manager"}},
        "action": {"name": "read", "properties": {"method": "GET"}},
        "resource": {"type": "record", "id": "record-1", "properties": {"status": "active", "owner": "bob"}},
        "context": {"time": "2025-06-27T18:03-07:00", "ip": "192.168.1.1"},
        "foo": "bar", "futureField": {"nested": true},
    });
    let (status, answer) = g.pdp(EVALUATION, &key, extra).await;
    assert_eq!(
        (status, &answer["decision"]),
        (200, &json!(true)),
        "{answer}"
    );
}

/// Batches: defaults from the top level, overridden per evaluation; order
/// and length kept; the three semantics; no `evaluations` is one decision.
#[tokio::test]
async fn batches_keep_order_defaults_and_semantics() {
    let (g, _apps) = gateway().await;
    let key = g.pdp_key("acme", &["records"]).await;
    let decisions = |answer: &Value| -> Vec<bool> {
        answer["evaluations"]
            .as_array()
            .unwrap_or_else(|| panic!("{answer}"))
            .iter()
            .map(|e| e["decision"].as_bool().unwrap())
            .collect()
    };
    let by_action = json!({
        "subject": user("bob"), "resource": record("record-1"),
        "evaluations": [{"action": {"name": "read"}}, {"action": {"name": "write"}}],
    });
    let (status, answer) = g.pdp(EVALUATIONS, &key, by_action).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(decisions(&answer), [true, false]);
    assert!(
        answer.get("decision").is_none(),
        "a batch answers in `evaluations` only"
    );
    let by_subject = json!({
        "action": {"name": "write"},
        "resource": {"type": "record", "id": "record-2", "properties": {"status": "archived"}},
        "evaluations": [
            {"subject": user("alice")},
            {"subject": {"type": "user", "id": "bob", "properties": {"role": "admin"}}},
            {"subject": user("alice"), "resource": record("record-1"), "context": {"ip": "10.0.0.1"}},
        ],
    });
    let (_, answer) = g.pdp("/access/v1/evaluations", &key, by_subject).await;
    assert_eq!(decisions(&answer), [false, true, true]);

    let three = |semantic: &str| {
        json!({
            "subject": user("alice"), "action": {"name": "write"},
            "options": {"evaluations_semantic": semantic, "another_option": 1},
            "evaluations": [
                {"resource": record("record-1")},
                {"resource": record("record-2")},
                {"resource": record("record-1")},
            ],
        })
    };
    for (semantic, expected) in [
        ("execute_all", vec![true, false, true]),
        ("deny_on_first_deny", vec![true, false]),
        ("permit_on_first_permit", vec![true]),
    ] {
        let before = g.decisions().await.len();
        let (status, answer) = g.pdp(EVALUATIONS, &key, three(semantic)).await;
        assert_eq!(status, 200, "{semantic}: {answer}");
        assert_eq!(decisions(&answer), expected, "{semantic}");
        let recorded = g.decisions().await.len() - before;
        assert_eq!(
            recorded,
            expected.len(),
            "{semantic}: only what was decided is recorded"
        );
    }

    for listed in [json!(null), json!([])] {
        let mut one = ask(user("alice"), "read", record("record-1"));
        one["evaluations"] = listed;
        let (status, answer) = g.pdp(EVALUATIONS, &key, one).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["decision"], json!(true), "{answer}");
        assert_eq!(decisions(&answer), [true]);
    }
}

/// Each application's metadata document, and the default one's.
#[tokio::test]
async fn each_application_describes_itself() {
    let (g, _apps) = gateway().await;
    let (status, doc) = g
        .get_json("/.well-known/authzen-configuration/pdp/other")
        .await;
    assert_eq!(status, 200, "{doc}");
    let pdp = format!("{}/pdp/other", g.base);
    assert_eq!(doc["policy_decision_point"], json!(pdp));
    assert_eq!(
        doc["access_evaluation_endpoint"],
        json!(format!("{pdp}/access/v1/evaluation"))
    );
    assert_eq!(
        doc["access_evaluations_endpoint"],
        json!(format!("{pdp}/access/v1/evaluations"))
    );
    for kind in ["subject", "resource", "action"] {
        assert_eq!(
            doc[format!("search_{kind}_endpoint")],
            json!(format!("{pdp}/access/v1/search/{kind}"))
        );
    }
    let (status, doc) = g.get_json("/.well-known/authzen-configuration").await;
    assert_eq!(status, 200, "{doc}");
    assert_eq!(doc["policy_decision_point"], json!(g.base));
    assert_eq!(
        doc["access_evaluation_endpoint"],
        json!(format!("{}/access/v1/evaluation", g.base))
    );
    let (status, _) = g
        .get_json("/.well-known/authzen-configuration/pdp/nope")
        .await;
    assert_eq!(status, 404);
}

/// `X-Request-ID` comes back on every answer, refusals included, and is
/// recorded with the decision.
#[tokio::test]
async fn the_request_id_is_echoed_and_recorded() {
    let (g, _apps) = gateway().await;
    let key = g.pdp_key("acme", &["records"]).await;
    let body = ask(user("alice"), "read", record("record-1")).to_string();
    let id = "bfe9eb29-ab87-4ca3-be83-a1d5d8305716";
    let (status, headers, _) = g
        .pdp_raw(
            EVALUATION,
            Some(&key),
            &[("x-request-id", id)],
            body.clone(),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-request-id"], id);
    let last = g.decisions().await.pop().unwrap();
    let notes: Value = serde_json::from_str(&last.record.notes).unwrap();
    assert_eq!(notes["authzen"]["requestId"], json!(id));
    for (key, body) in [(None, body.clone()), (Some(key.as_str()), "{".to_string())] {
        let (status, headers, _) = g
            .pdp_raw(EVALUATION, key, &[("x-request-id", "r-2")], body)
            .await;
        assert!(status == 401 || status == 400, "{status}");
        assert_eq!(headers["x-request-id"], "r-2");
    }
    let (_, headers, _) = g.pdp_raw(EVALUATION, Some(&key), &[], body).await;
    assert!(headers.get("x-request-id").is_none());
}

/// Every evaluation is a decision record on the gateway's chain: the
/// application in its action, the Cedar request, the application's
/// recorded set and entity data, what the request added; the chain
/// verifies, and the gateway's replay leaves the records to theirs.
#[tokio::test]
async fn every_evaluation_is_a_record_on_the_chain() {
    let (g, apps) = gateway().await;
    let key = g.pdp_key("acme", &["records"]).await;
    let carol = json!({"type": "user", "id": "carol", "properties": {"role": "admin", "shoe": 42}});
    let (status, answer) = g
        .pdp(EVALUATION, &key, json!({"subject": carol, "action": {"name": "write"}, "resource": record("record-2"), "context": {"ip": "10.0.0.9", "time": "now"}}))
        .await;
    assert_eq!(
        (status, &answer["decision"]),
        (200, &json!(true)),
        "{answer}"
    );
    let records = g.decisions().await;
    let r = &records.last().unwrap().record;
    assert_eq!(r.id, answer["context"]["decision_id"].as_str().unwrap());
    assert_eq!(r.action, "authzen:records:write");
    assert_eq!(r.principal, r#"Records::user::"carol""#);
    assert_eq!(r.resource, r#"Records::record::"record-2""#);
    assert_eq!(r.context, r#"{"ip":"10.0.0.9"}"#);
    assert_eq!(r.decision, "allow");
    assert_eq!(r.reasons, r#"["admins-write-archived-records"]"#);
    assert_eq!(r.org_id.as_deref(), Some("acme"));
    let set = g.gw.pdp.app("records").unwrap().active().unwrap();
    assert_eq!(r.policy_hash, set.bundle.hash);
    let stored = g.entity_snapshot(&r.entities_hash).await;
    let file = std::fs::read_to_string(apps.app("records").join("entities.json")).unwrap();
    assert_eq!(
        stored, file,
        "the record's snapshot is the application's data"
    );
    let notes: Value = serde_json::from_str(&r.notes).unwrap();
    let authzen = &notes["authzen"];
    assert_eq!(authzen["application"], json!("records"));
    assert_eq!(authzen["action"], json!(r#"Records::Action::"write""#));
    assert_eq!(authzen["entities"][0]["attrs"], json!({"role": "admin"}));
    assert_eq!(
        authzen["ignored"],
        json!(["subject.properties.shoe", "context.time"])
    );
    let hash = set.bundle.hash.clone();
    let recorded =
        g.gw.store
            .read(move |c| cedargate::store::audit_query::policy_set(c, &hash))
            .await
            .unwrap();
    assert!(
        recorded.is_some(),
        "the application's set is recorded by its hash"
    );
    let (status, report) = g
        .admin(
            reqwest::Method::GET,
            "/admin/decisions?action=authzen:records:write",
            None,
        )
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["decisions"].as_array().unwrap().len(), 1);
    let replay = g.replay_recorded().await;
    assert!(replay.unreplayable.is_empty(), "{:?}", replay.unreplayable);
}
