//! The OpenID AuthZEN Authorization API 1.0 PDP certification scenario
//! (`openid/authzen`, `certification/authorization-api-1_0-scenario.md`)
//! through the real server, level by level (Discovery, Basic, Batch,
//! Search, each with its Core and Properties tests), on the shipped
//! example application `examples/pdp/records/` (the scenario's fixture)
//! served as the default application, every request sent where the
//! metadata document says, as the harness does. Each assertion names its
//! test id (`c-2-2-1`, …). The scenario's fixture decisions are then
//! replayed under the set that made them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::TestGateway;
use serde_json::{Value, json};

/// The gateway serving the shipped example as its default application,
/// its PEP's key and its endpoints as its metadata names them.
struct Harness {
    g: TestGateway,
    key: String,
    metadata: Value,
}

impl Harness {
    async fn start() -> Harness {
        let g = TestGateway::start_with(|c| {
            c.pdp_dir = common::repo().join("examples/pdp");
            c.pdp.default_app = Some("records".into());
        })
        .await;
        let key = g.pdp_key("harness", &["records"]).await;
        let (status, metadata) = g.get_json("/.well-known/authzen-configuration").await;
        assert_eq!(status, 200, "c-6-1: {metadata}");
        Harness { g, key, metadata }
    }

    /// The path of the endpoint the metadata names `name`
    /// (`access_evaluation_endpoint`, …).
    fn path(&self, name: &str) -> String {
        let url = self.metadata[name]
            .as_str()
            .unwrap_or_else(|| panic!("c-6-4: no {name}"));
        url.strip_prefix(&self.g.base)
            .unwrap_or_else(|| panic!("{url} is not on {}", self.g.base))
            .to_string()
    }

    /// POSTs `body` (text) to the endpoint `name`: status, content type,
    /// answer.
    async fn raw(&self, name: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, Value) {
        let (status, h, answer) = self
            .g
            .pdp_raw(&self.path(name), Some(&self.key), headers, body.to_string())
            .await;
        let ctype = h
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        (status, ctype, answer)
    }

    /// POSTs JSON to the endpoint `name`; a 200 (`c-5`: JSON) is required.
    async fn ok(&self, id: &str, name: &str, body: Value) -> Value {
        let (status, ctype, answer) = self.raw(name, &[], &body.to_string()).await;
        assert_eq!(status, 200, "{id}: {body} → {answer}");
        assert!(ctype.starts_with("application/json"), "{id} (c-5): {ctype}");
        answer
    }

    /// The status of posting `body` to the endpoint `name`.
    async fn status(&self, name: &str, body: &Value) -> u16 {
        self.raw(name, &[], &body.to_string()).await.0
    }
}

const EVALUATION: &str = "access_evaluation_endpoint";
const EVALUATIONS: &str = "access_evaluations_endpoint";
const SUBJECTS: &str = "search_subject_endpoint";
const RESOURCES: &str = "search_resource_endpoint";
const ACTIONS: &str = "search_action_endpoint";

fn alice() -> Value {
    json!({"type": "user", "id": "alice"})
}

fn bob() -> Value {
    json!({"type": "user", "id": "bob"})
}

fn admin_bob() -> Value {
    json!({"type": "user", "id": "bob", "properties": {"role": "admin"}})
}

fn record(id: &str) -> Value {
    json!({"type": "record", "id": id})
}

fn archived() -> Value {
    json!({"type": "record", "id": "record-2", "properties": {"status": "archived"}})
}

fn action(name: &str) -> Value {
    json!({"name": name})
}

fn ask(subject: Value, action: Value, resource: Value) -> Value {
    json!({"subject": subject, "action": action, "resource": resource})
}

fn context() -> Value {
    json!({"time": "2025-06-27T18:03-07:00", "ip": "192.168.1.1"})
}

/// A single decision's answer (`c-2-3`): a boolean `decision`, and a
/// `context` that is an object when present.
fn decision(id: &str, answer: &Value) -> bool {
    if let Some(c) = answer.get("context") {
        assert!(c.is_object(), "{id} (c-2-3-2): {answer}");
    }
    answer["decision"]
        .as_bool()
        .unwrap_or_else(|| panic!("{id} (c-2-3-1): {answer}"))
}

/// A batch's answer (`c-3-3`): one object per evaluation, each with a
/// boolean `decision`.
fn decisions(id: &str, answer: &Value, count: usize) -> Vec<bool> {
    let items = answer["evaluations"]
        .as_array()
        .unwrap_or_else(|| panic!("{id}: {answer}"));
    assert_eq!(items.len(), count, "{id} (c-3-3-1): {answer}");
    items.iter().map(|i| decision(id, i)).collect()
}

/// A search's results (`c-4`): an array whose elements carry `type` (the
/// searched one) and `id`, or `name`; their ids or names.
fn results(id: &str, answer: &Value, searched: Option<&str>) -> Vec<String> {
    let items = answer["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{id}: {answer}"));
    if let Some(page) = answer.get("page") {
        assert!(page.is_object(), "{id} (c-4-5-1): {answer}");
        assert!(page["next_token"].is_string(), "{id} (c-4-5-3): {answer}");
    }
    items
        .iter()
        .map(|r| match searched {
            Some(t) => {
                assert_eq!(r["type"], json!(t), "{id}: {answer}");
                r["id"].as_str().unwrap().to_string()
            }
            None => r["name"].as_str().unwrap().to_string(),
        })
        .collect()
}

fn includes(id: &str, found: &[String], expected: &[&str]) {
    for e in expected {
        assert!(found.iter().any(|f| f == e), "{id}: {e} not in {found:?}");
    }
}

/// Discovery (`c-6`): the document at the well-known path of the base URL
/// (and of an application's own base URL, a path-scoped PDP).
#[tokio::test]
async fn discovery() {
    let h = Harness::start().await;
    let resp =
        h.g.http
            .get(format!("{}/.well-known/authzen-configuration", h.g.base))
            .send()
            .await
            .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "c-6-2");
    let ctype = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ctype.starts_with("application/json"), "c-6-2: {ctype}");
    for (path, base) in [
        (
            "/.well-known/authzen-configuration".to_string(),
            h.g.base.clone(),
        ),
        (
            "/.well-known/authzen-configuration/pdp/records".to_string(),
            format!("{}/pdp/records", h.g.base),
        ),
    ] {
        let (status, doc) = h.g.get_json(&path).await;
        assert_eq!(status, 200, "c-6-6: {path}");
        assert_eq!(doc["policy_decision_point"], json!(base), "c-6-5: {doc}");
        for (name, suffix) in [
            (EVALUATION, "/access/v1/evaluation"),
            (EVALUATIONS, "/access/v1/evaluations"),
            (SUBJECTS, "/access/v1/search/subject"),
            (RESOURCES, "/access/v1/search/resource"),
            (ACTIONS, "/access/v1/search/action"),
        ] {
            assert_eq!(
                doc[name],
                json!(format!("{base}{suffix}")),
                "c-6-3/4: {doc}"
            );
        }
        if let Some(c) = doc.get("capabilities") {
            assert!(c.as_array().is_some_and(|c| c.iter().all(Value::is_string)));
        }
        assert!(doc.get("signed_metadata").is_none(), "none is signed");
    }
}

/// Basic (`c-2`): the fixture's single decisions, Core and Properties,
/// the answer's shape, bad requests, `X-Request-ID`, idempotency.
#[tokio::test]
async fn basic() {
    let h = Harness::start().await;
    let delete = |soft: bool| json!({"name": "delete", "properties": {"soft": soft}});
    let mut with_context = ask(alice(), action("read"), record("record-1"));
    with_context["context"] = context();
    let extra = json!({
        "subject": {"type": "user", "id": "alice", "properties": {"department": "Sales", "role": "manager"}},
        "action": {"name": "read", "properties": {"method": "GET"}},
        "resource": {"type": "record", "id": "record-1", "properties": {"status": "active", "owner": "bob"}},
    });
    let mut unknown = ask(alice(), action("read"), record("record-1"));
    unknown["foo"] = json!("bar");
    unknown["futureField"] = json!({"nested": true});
    let cases = [
        (
            "c-2-2-1",
            ask(alice(), action("read"), record("record-1")),
            true,
        ),
        (
            "c-2-2-2",
            ask(bob(), action("write"), record("record-1")),
            false,
        ),
        ("c-2-2-3", with_context, true),
        ("c-2-2-4", ask(alice(), action("write"), archived()), false),
        (
            "c-2-2-5",
            ask(admin_bob(), action("write"), archived()),
            true,
        ),
        (
            "c-2-2-6",
            ask(alice(), delete(true), record("record-1")),
            true,
        ),
        (
            "c-2-2-7",
            ask(alice(), delete(false), record("record-1")),
            false,
        ),
        ("c-2-2-8", extra, true),
        ("c-2-2-9", unknown, true),
        // Decision rules 2 and 3.
        (
            "c-1-4",
            ask(alice(), action("write"), record("record-1")),
            true,
        ),
        (
            "c-1-4",
            ask(bob(), action("read"), record("record-1")),
            true,
        ),
    ];
    for (id, body, expected) in &cases {
        let answer = h.ok(id, EVALUATION, body.clone()).await;
        assert_eq!(decision(id, &answer), *expected, "{id}: {answer}");
    }

    // c-2-4: 400 for missing fields and sub-fields, a wrong content type,
    // malformed JSON, an empty body, ill-typed fields.
    let without = |key: &str| {
        let mut b = ask(alice(), action("read"), record("record-1"));
        b.as_object_mut().unwrap().remove(key);
        b
    };
    let bad = [
        ("c-2-4-1", without("subject")),
        ("c-2-4-1", without("action")),
        ("c-2-4-1", without("resource")),
        (
            "c-2-4-2",
            ask(json!({"id": "alice"}), action("read"), record("record-1")),
        ),
        (
            "c-2-4-2",
            ask(json!({"type": "user"}), action("read"), record("record-1")),
        ),
        ("c-2-4-2", ask(alice(), json!({}), record("record-1"))),
        (
            "c-2-4-2",
            ask(alice(), action("read"), json!({"id": "record-1"})),
        ),
        (
            "c-2-4-2",
            ask(alice(), action("read"), json!({"type": "record"})),
        ),
        (
            "c-2-4-6",
            ask(json!("alice"), action("read"), record("record-1")),
        ),
        (
            "c-2-4-6",
            ask(alice(), json!({"name": 123}), record("record-1")),
        ),
    ];
    for (id, body) in &bad {
        assert_eq!(h.status(EVALUATION, body).await, 400, "{id}: {body}");
    }
    let good = ask(alice(), action("read"), record("record-1")).to_string();
    let text = [("content-type", "text/plain")];
    for (id, headers, body) in [
        ("c-2-4-3", &text[..], good.as_str()),
        ("c-2-4-4", &[][..], r#"{"subject": {"type": "user", "id": "#),
        ("c-2-4-5", &[][..], ""),
    ] {
        let (status, _, answer) = h.raw(EVALUATION, headers, body).await;
        assert_eq!(status, 400, "{id}: {answer}");
    }

    // c-2-5: X-Request-ID echoed when sent; none sent is no failure.
    let (status, headers, _) =
        h.g.pdp_raw(
            &h.path(EVALUATION),
            Some(&h.key),
            &[("x-request-id", "cert-2-5-1")],
            good.clone(),
        )
        .await;
    assert_eq!(status, 200, "c-2-5-1");
    assert_eq!(headers["x-request-id"], "cert-2-5-1", "c-2-5-1");
    assert_eq!(h.raw(EVALUATION, &[], &good).await.0, 200, "c-2-5-2");

    // c-2-6: the same request, the same decision, every time.
    for _ in 0..5 {
        let answer = h.ok("c-2-6", EVALUATION, json!(cases[1].1)).await;
        assert!(!decision("c-2-6", &answer));
    }
}

/// Batch (`c-3`): defaults from the top level, whole-object override,
/// order and length kept, an evaluation-level error, no or an empty
/// `evaluations`.
#[tokio::test]
async fn batch() {
    let h = Harness::start().await;
    let cases = [
        (
            "c-3-2-1",
            json!({"subject": alice(), "action": action("read"),
                   "evaluations": [{"resource": record("record-1")}, {"resource": record("record-2")}]}),
            None,
        ),
        (
            "c-3-2-2",
            json!({"subject": bob(), "resource": record("record-1"),
                   "evaluations": [{"action": action("read")}, {"action": action("write")}]}),
            Some(vec![true, false]),
        ),
        (
            "c-3-2-3",
            json!({"subject": alice(), "action": action("write"),
                   "evaluations": [
                       {"resource": {"type": "record", "id": "record-1", "properties": {"status": "active"}}},
                       {"resource": archived()}]}),
            Some(vec![true, false]),
        ),
        (
            "c-3-2-4",
            json!({"action": action("write"), "resource": archived(),
                   "evaluations": [{"subject": alice()}, {"subject": admin_bob()}]}),
            Some(vec![false, true]),
        ),
        (
            "c-3-2-5",
            json!({"evaluations": [
                ask(alice(), action("read"), record("record-1")),
                ask(bob(), action("write"), record("record-1"))]}),
            Some(vec![true, false]),
        ),
        (
            "c-3-2-6",
            json!({"subject": alice(), "action": action("read"), "context": {"time": "2025-06-27T18:03-07:00"},
                   "evaluations": [
                       {"resource": record("record-1")},
                       {"resource": record("record-2"), "context": {"time": "2025-06-27T19:00-07:00", "source": "batch-override"}}]}),
            None,
        ),
        (
            "c-3-2-7",
            json!({"subject": alice(), "action": action("write"),
                   "resource": {"type": "record", "id": "record-1", "properties": {"status": "active"}},
                   "evaluations": [{}, {"resource": archived()}]}),
            Some(vec![true, false]),
        ),
    ];
    for (id, body, expected) in cases {
        let answer = h.ok(id, EVALUATIONS, body).await;
        let found = decisions(id, &answer, 2);
        if let Some(expected) = expected {
            assert_eq!(found, expected, "{id} (c-3-3-2): {answer}");
        }
    }

    // c-3-4-1: a failed evaluation of an otherwise valid batch is a
    // `false` in its place, with the error in its context.
    let body = json!({"subject": alice(), "action": action("read"),
        "options": {"evaluations_semantic": "execute_all"},
        "evaluations": [{"resource": record("record-1")}, {}]});
    let answer = h.ok("c-3-4-1", EVALUATIONS, body).await;
    assert_eq!(decisions("c-3-4-1", &answer, 2), [true, false]);
    let error = &answer["evaluations"][1]["context"]["error"];
    assert_eq!(error["status"], 400, "c-3-4-1: {answer}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("evaluations[1].resource"),
        "c-3-4-1: {answer}"
    );
    // c-3-4-2, c-3-4-3: no or an empty `evaluations` is one evaluation.
    for (id, listed) in [("c-3-4-2", None), ("c-3-4-3", Some(json!([])))] {
        let mut body = ask(alice(), action("read"), record("record-1"));
        if let Some(l) = listed {
            body["evaluations"] = l;
        }
        let answer = h.ok(id, EVALUATIONS, body).await;
        assert!(decision(id, &answer), "{id}: {answer}");
    }
}

/// Search (`c-4`): the three searches, Core and Properties, with context
/// and with the searched id given (ignored), pagination, empty results for
/// an unknown id or type, and 400 for a missing input.
#[tokio::test]
async fn search() {
    let h = Harness::start().await;
    let with_context = |mut body: Value| {
        body["context"] = context();
        body
    };
    let who_reads = json!({"subject": {"type": "user"}, "action": action("read"), "resource": record("record-1")});
    let what_alice_reads =
        json!({"subject": alice(), "action": action("read"), "resource": {"type": "record"}});
    let alice_on_1 = json!({"subject": alice(), "resource": record("record-1")});
    let subjects = [
        ("c-4-2-1", who_reads.clone(), vec!["alice", "bob"]),
        (
            "c-4-2-2",
            with_context(who_reads.clone()),
            vec!["alice", "bob"],
        ),
        (
            "c-4-2-3",
            json!({"subject": alice(), "action": action("read"), "resource": record("record-1")}),
            vec!["alice", "bob"],
        ),
        (
            "c-4-2-4",
            json!({"subject": {"type": "user"}, "action": action("write"), "resource": archived()}),
            vec!["bob"],
        ),
    ];
    let first = h.ok("c-4-2-1", SUBJECTS, who_reads.clone()).await;
    for (id, body, expected) in subjects {
        let answer = h.ok(id, SUBJECTS, body).await;
        let found = results(id, &answer, Some("user"));
        includes(id, &found, &expected);
        if id != "c-4-2-4" {
            assert_eq!(
                answer["results"], first["results"],
                "{id}: identical to c-4-2-1"
            );
        }
    }
    let resources = [
        ("c-4-3-1", what_alice_reads.clone(), vec!["record-1"]),
        (
            "c-4-3-2",
            with_context(what_alice_reads.clone()),
            vec!["record-1"],
        ),
        (
            "c-4-3-3",
            json!({"subject": alice(), "action": action("read"), "resource": record("record-1")}),
            vec!["record-1"],
        ),
        (
            "c-4-3-4",
            json!({"subject": admin_bob(), "action": action("write"), "resource": {"type": "record"}}),
            vec!["record-2"],
        ),
    ];
    let first = h.ok("c-4-3-1", RESOURCES, what_alice_reads.clone()).await;
    for (id, body, expected) in resources {
        let answer = h.ok(id, RESOURCES, body).await;
        includes(id, &results(id, &answer, Some("record")), &expected);
        if id != "c-4-3-4" {
            assert_eq!(
                answer["results"], first["results"],
                "{id}: identical to c-4-3-1"
            );
        }
    }
    let actions = [
        ("c-4-4-1", alice_on_1.clone(), vec!["read", "write"]),
        (
            "c-4-4-2",
            with_context(alice_on_1.clone()),
            vec!["read", "write"],
        ),
        (
            "c-4-4-3",
            json!({"subject": admin_bob(), "resource": archived()}),
            vec!["write"],
        ),
    ];
    for (id, body, expected) in actions {
        let answer = h.ok(id, ACTIONS, body).await;
        includes(id, &results(id, &answer, None), &expected);
    }
    pagination(&h, &who_reads).await;

    // c-4-6: no match is an empty `results`, on all three endpoints.
    let empty = [
        (
            "c-4-6-1",
            ACTIONS,
            json!({"subject": {"type": "user", "id": "nonexistent-user"}, "resource": record("record-1")}),
        ),
        (
            "c-4-6-1",
            SUBJECTS,
            json!({"subject": {"type": "user"}, "action": action("read"), "resource": record("no-such-record")}),
        ),
        (
            "c-4-6-1",
            RESOURCES,
            json!({"subject": {"type": "user", "id": "nonexistent-user"}, "action": action("read"), "resource": {"type": "record"}}),
        ),
        (
            "c-4-6-2",
            SUBJECTS,
            json!({"subject": {"type": "spaceship"}, "action": action("read"), "resource": record("record-1")}),
        ),
        (
            "c-4-6-2",
            RESOURCES,
            json!({"subject": alice(), "action": action("read"), "resource": {"type": "spaceship"}}),
        ),
        (
            "c-4-6-2",
            ACTIONS,
            json!({"subject": {"type": "spaceship", "id": "x"}, "resource": record("record-1")}),
        ),
    ];
    for (id, endpoint, body) in empty {
        let answer = h.ok(id, endpoint, body).await;
        assert_eq!(answer["results"], json!([]), "{id} {endpoint}: {answer}");
    }

    // c-4-7: a missing input member or input id is a 400.
    let bad = [
        (
            "c-4-7-1",
            SUBJECTS,
            json!({"subject": {"type": "user"}, "resource": record("record-1")}),
        ),
        (
            "c-4-7-1",
            RESOURCES,
            json!({"action": action("read"), "resource": {"type": "record"}}),
        ),
        ("c-4-7-1", ACTIONS, json!({"subject": alice()})),
        (
            "c-4-7-2",
            SUBJECTS,
            json!({"subject": {"type": "user"}, "action": action("read"), "resource": {"type": "record"}}),
        ),
        (
            "c-4-7-2",
            RESOURCES,
            json!({"subject": {"type": "user"}, "action": action("read"), "resource": {"type": "record"}}),
        ),
        (
            "c-4-7-2",
            ACTIONS,
            json!({"subject": {"type": "user"}, "resource": record("record-1")}),
        ),
    ];
    for (id, endpoint, body) in &bad {
        assert_eq!(
            h.status(endpoint, body).await,
            400,
            "{id} {endpoint}: {body}"
        );
    }

    // The fixture decisions of this run replay as they were decided.
    let replay = h.g.replay_recorded().await;
    assert!(replay.unreplayable.is_empty(), "{:?}", replay.unreplayable);
    assert_eq!(replay.flip_count(), 0);
    assert_eq!(replay.identical, replay.records);
}

/// `c-4-5`: `page.limit` is accepted, and `next_token` leads through every
/// result to an empty one.
async fn pagination(h: &Harness, query: &Value) {
    let mut body = query.clone();
    body["page"] = json!({"limit": 1});
    let answer = h.ok("c-4-5-1", SUBJECTS, body.clone()).await;
    let mut all = results("c-4-5-1", &answer, Some("user"));
    assert_eq!(all.len(), 1, "c-4-5-1: {answer}");
    let mut token = answer["page"]["next_token"].as_str().unwrap().to_string();
    while !token.is_empty() {
        let mut next = query.clone();
        next["page"] = json!({"token": token});
        let answer = h.ok("c-4-5-2", SUBJECTS, next).await;
        all.extend(results("c-4-5-2", &answer, Some("user")));
        token = answer["page"]["next_token"]
            .as_str()
            .unwrap_or_else(|| panic!("c-4-5-2: {answer}"))
            .to_string();
        assert!(all.len() < 10, "c-4-5-2: the pages end");
    }
    includes("c-4-5-2", &all, &["alice", "bob"]);
}
