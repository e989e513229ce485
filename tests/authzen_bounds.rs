//! Hostile and broken input to the AuthZEN endpoints, through the real
//! server: each request answers a clear 4xx naming what is wrong, and the
//! trail records nothing for it. Also: who may ask which application, and
//! ids holding Cedar syntax, which are data.

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

fn ask(subject: Value, action: &str, resource: Value) -> Value {
    json!({"subject": subject, "action": {"name": action}, "resource": resource})
}

fn alice() -> Value {
    json!({"type": "user", "id": "alice"})
}

fn record1() -> Value {
    json!({"type": "record", "id": "record-1"})
}

/// `depth` objects nested in one another.
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!("bottom"), |inner, _| json!({ "a": inner }))
}

/// One bad request: where it goes, its headers and body, the status and a
/// piece of the message it must answer with.
struct Bad {
    what: &'static str,
    path: &'static str,
    headers: Vec<(&'static str, String)>,
    body: String,
    status: u16,
    says: &'static str,
}

fn bad(what: &'static str, body: impl ToString, status: u16, says: &'static str) -> Bad {
    Bad {
        what,
        path: EVALUATION,
        headers: Vec::new(),
        body: body.to_string(),
        status,
        says,
    }
}

fn batch(what: &'static str, body: Value, status: u16, says: &'static str) -> Bad {
    Bad {
        path: EVALUATIONS,
        ..bad(what, body, status, says)
    }
}

fn cases() -> Vec<Bad> {
    let with = |f: &dyn Fn(&mut Value)| {
        let mut body = ask(alice(), "read", record1());
        f(&mut body);
        body
    };
    let many: Vec<Value> = (0..10_000)
        .map(|_| json!({"resource": record1()}))
        .collect();
    vec![
        bad("malformed JSON", r#"{"subject": "#, 400, "not JSON"),
        bad("empty body", "", 400, "empty"),
        bad("blank body", "  \n", 400, "empty"),
        bad("not an object", "[1, 2]", 400, "must be a JSON object"),
        Bad {
            headers: vec![("content-type", "text/plain".into())],
            ..bad(
                "wrong content type",
                ask(alice(), "read", record1()),
                400,
                "Content-Type",
            )
        },
        bad(
            "missing subject",
            json!({"action": {"name": "read"}, "resource": record1()}),
            400,
            "`subject` is required",
        ),
        bad(
            "missing resource id",
            ask(alice(), "read", json!({"type": "record"})),
            400,
            "`resource.id` is required",
        ),
        bad(
            "subject a string",
            with(&|b| b["subject"] = json!("alice")),
            400,
            "`subject` must be a JSON object",
        ),
        bad(
            "action name a number",
            with(&|b| b["action"]["name"] = json!(123)),
            400,
            "`action.name` must be a string",
        ),
        bad(
            "unknown entity type",
            ask(json!({"type": "spaceship", "id": "x"}), "read", record1()),
            400,
            "`subject.type`: `spaceship` is not an entity type",
        ),
        bad(
            "the action type",
            ask(json!({"type": "Action", "id": "read"}), "read", record1()),
            400,
            "`subject.type`",
        ),
        bad(
            "unknown action",
            ask(alice(), "fly", record1()),
            400,
            "`action.name`: `fly` is not an action",
        ),
        bad(
            "types swapped",
            ask(record1(), "read", alice()),
            400,
            "`subject`",
        ),
        bad(
            "ill-typed property",
            ask(
                json!({"type": "user", "id": "alice", "properties": {"role": 5}}),
                "read",
                record1(),
            ),
            400,
            "`subject.properties`",
        ),
        bad(
            "a property changing stored data",
            ask(
                json!({"type": "user", "id": "bob", "properties": {"role": "intern"}}),
                "write",
                record1(),
            ),
            400,
            "never change stored ones",
        ),
        bad(
            "ill-typed context",
            with(&|b| b["context"] = json!({"ip": 5})),
            400,
            "`context`",
        ),
        bad(
            "reserved context member",
            with(&|b| b["context"] = json!({"actionProperties": {"soft": true}})),
            400,
            "reserved",
        ),
        bad(
            "deeply nested context",
            with(&|b| b["context"] = nested(100)),
            400,
            "deeper than 64",
        ),
        bad(
            "a 1 MB property",
            ask(
                json!({"type": "user", "id": "alice", "properties": {"role": "x".repeat(1 << 20)}}),
                "read",
                record1(),
            ),
            413,
            "larger than 1048576 bytes",
        ),
        bad(
            "a 100 KB property",
            ask(
                json!({"type": "user", "id": "alice", "properties": {"role": "x".repeat(100_000)}}),
                "read",
                record1(),
            ),
            400,
            "larger than 65536 bytes",
        ),
        bad(
            "a 2 KB id",
            ask(
                json!({"type": "user", "id": "x".repeat(2_000)}),
                "read",
                record1(),
            ),
            400,
            "`subject.id` is longer than 1024 bytes",
        ),
        Bad {
            headers: vec![("x-request-id", "r".repeat(300))],
            ..bad(
                "a long request id",
                ask(alice(), "read", record1()),
                400,
                "X-Request-ID",
            )
        },
        batch(
            "10,000 evaluations",
            json!({"subject": alice(), "action": {"name": "read"}, "evaluations": many}),
            400,
            "holds 10000 evaluations; at most 1000",
        ),
        batch(
            "an unknown semantic",
            json!({"subject": alice(), "action": {"name": "read"}, "resource": record1(), "options": {"evaluations_semantic": "some"}}),
            400,
            "evaluations_semantic",
        ),
        batch(
            "an evaluation over a bound",
            json!({"subject": alice(), "action": {"name": "read"}, "evaluations": [
                {"resource": record1()},
                {"resource": {"type": "record", "id": "x".repeat(2_000)}},
            ]}),
            400,
            "`evaluations[1].resource.id` is longer than 1024 bytes",
        ),
        batch(
            "evaluations not an array",
            json!({"subject": alice(), "action": {"name": "read"}, "resource": record1(), "evaluations": {"a": 1}}),
            400,
            "`evaluations` must be an array",
        ),
    ]
}

/// Every bad request answers its 4xx with a message naming the problem,
/// and nothing of it is decided or recorded.
#[tokio::test]
async fn bad_input_answers_a_clear_4xx_and_records_nothing() {
    let (g, _apps) = gateway().await;
    let key = g.pdp_key("acme", &["records"]).await;
    let before = g.decisions().await.len();
    for case in cases() {
        let headers: Vec<(&str, &str)> =
            case.headers.iter().map(|(h, v)| (*h, v.as_str())).collect();
        let (status, _, answer) = g.pdp_raw(case.path, Some(&key), &headers, case.body).await;
        assert_eq!(status, case.status, "{}: {answer}", case.what);
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(case.says), "{}: {message}", case.what);
        assert!(
            message.chars().count() <= 2_001,
            "{}: the message is bounded",
            case.what
        );
    }
    assert_eq!(g.decisions().await.len(), before, "nothing was recorded");
    // The gateway still answers well-formed requests.
    let (status, answer) = g
        .pdp(EVALUATION, &key, ask(alice(), "read", record1()))
        .await;
    assert_eq!(
        (status, &answer["decision"]),
        (200, &json!(true)),
        "{answer}"
    );
}

/// An evaluation of a batch that cannot be decided (a member missing or
/// of the wrong type, ill-typed for the schema) answers `false` in its
/// place with the error naming it, is not recorded, and counts as a deny
/// for the short-circuit semantics; the others are decided and recorded.
#[tokio::test]
async fn a_batch_answers_an_evaluation_it_cannot_decide_in_its_place() {
    let (g, _apps) = gateway().await;
    let key = g.pdp_key("acme", &["records"]).await;
    let before = g.decisions().await.len();
    let items = json!([
        {"resource": record1()},
        {"resource": {"type": "record", "id": "record-1", "properties": {"status": 1}}},
        {"subject": "alice"},
        {"resource": {"type": "spaceship", "id": "x"}},
        7,
        {"resource": record1(), "action": {"name": "fly"}},
        {"resource": record1()},
    ]);
    let body = json!({"subject": alice(), "action": {"name": "read"}, "evaluations": items});
    let (status, answer) = g.pdp(EVALUATIONS, &key, body.clone()).await;
    assert_eq!(status, 200, "{answer}");
    let answers = answer["evaluations"].as_array().unwrap();
    let decisions: Vec<bool> = answers
        .iter()
        .map(|a| a["decision"].as_bool().unwrap())
        .collect();
    assert_eq!(decisions, [true, false, false, false, false, false, true]);
    for (i, says) in [
        (1, "`evaluations[1].resource.properties`"),
        (2, "`evaluations[2].subject` must be a JSON object"),
        (3, "`evaluations[3].resource.type`: `spaceship`"),
        (4, "`evaluations[4]` must be a JSON object"),
        (5, "`evaluations[5].action.name`: `fly`"),
    ] {
        let error = &answers[i]["context"]["error"];
        assert_eq!(error["status"], 400, "{i}: {answer}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(says), "{i}: {message}");
        assert!(answers[i]["context"].get("decision_id").is_none());
    }
    assert_eq!(g.decisions().await.len(), before + 2, "the two decided");
    // Deny on first deny stops at the first that cannot be decided.
    let mut first_deny = body;
    first_deny["options"] = json!({"evaluations_semantic": "deny_on_first_deny"});
    let (status, answer) = g.pdp(EVALUATIONS, &key, first_deny).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["evaluations"].as_array().unwrap().len(),
        2,
        "{answer}"
    );
    // One evaluation, with or without `evaluations`, is still refused whole.
    let lone = json!({"subject": alice(), "action": {"name": "fly"}, "resource": record1()});
    for path in [EVALUATION, EVALUATIONS] {
        let (status, answer) = g.pdp(path, &key, lone.clone()).await;
        assert_eq!(status, 400, "{path}: {answer}");
    }
}

/// An id is data: Cedar syntax in it names an entity no one has, decided
/// as such and recorded exactly.
#[tokio::test]
async fn ids_with_cedar_syntax_are_plain_data() {
    let (g, _apps) = gateway().await;
    let key = g.pdp_key("acme", &["records"]).await;
    for id in [
        r#"bob" || principal == Records::user::"alice"#,
        r"back\slash",
        "Records::user::\"bob\"",
        "new\nline ünï",
        "",
    ] {
        let subject = json!({"type": "user", "id": id});
        let (status, answer) = g
            .pdp(
                EVALUATION,
                &key,
                ask(
                    subject,
                    "write",
                    json!({"type": "record", "id": "record-2"}),
                ),
            )
            .await;
        assert_eq!(status, 200, "{id:?}: {answer}");
        assert_eq!(answer["decision"], json!(false), "{id:?} is no admin");
        let r = g.decisions().await.pop().unwrap().record;
        let principal: cedargate::policy::Uid = r.principal.parse().unwrap();
        assert_eq!(principal.id(), id, "recorded exactly: {}", r.principal);
    }
}

/// A key asks only the applications it names: another one (existing or
/// not) is 403, and a daemon key asks none; no credential or a wrong one
/// is 401. None of it is recorded (`operator_api` shows a decision-point
/// key opens no MCP session).
#[tokio::test]
async fn a_caller_of_one_application_cannot_ask_another() {
    let (g, _apps) = gateway().await;
    let records = g.pdp_key("acme", &["records"]).await;
    let other = g.pdp_key("acme", &["other"]).await;
    let tenant = g.tenant("acme").await;
    let body = ask(alice(), "read", record1()).to_string();
    let before = g.decisions().await.len();
    for (who, key, path, status) in [
        (
            "records' key, other app",
            Some(records.as_str()),
            "/pdp/other/access/v1/evaluation",
            403,
        ),
        (
            "records' key, no such app",
            Some(records.as_str()),
            "/pdp/nope/access/v1/evaluation",
            403,
        ),
        (
            "other's key, default app",
            Some(other.as_str()),
            "/access/v1/evaluation",
            403,
        ),
        (
            "other's key, records",
            Some(other.as_str()),
            EVALUATIONS,
            403,
        ),
        ("a daemon key", Some(tenant.key.as_str()), EVALUATION, 403),
        ("no key", None, EVALUATION, 401),
        (
            "a wrong key",
            Some("rsk_live_0123456789abcdef_0123456789abcdef0123456789abcdef0123456789abcdef"),
            EVALUATION,
            401,
        ),
    ] {
        let (got, headers, answer) = g.pdp_raw(path, key, &[], body.clone()).await;
        assert_eq!(got, status, "{who}: {answer}");
        if status == 401 {
            assert_eq!(headers["www-authenticate"], "Bearer", "{who}");
        }
    }
    let (status, answer) = g
        .pdp(
            "/pdp/other/access/v1/evaluation",
            &other,
            ask(alice(), "read", record1()),
        )
        .await;
    assert_eq!(
        (status, &answer["decision"]),
        (200, &json!(true)),
        "{answer}"
    );
    assert_eq!(
        g.decisions().await.len(),
        before + 1,
        "only the allowed ask was recorded"
    );
}

/// A key's rate limit is spent one token per evaluation, before anything
/// is mapped or decided: over it, 429 with `Retry-After`, nothing recorded.
#[tokio::test]
async fn evaluations_spend_the_key_s_rate_limit() {
    let apps = Apps::copied(&[("records", "records")]);
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(|c| {
        c.pdp_dir = dir;
        c.rate_limits.key = cedargate::config::Bucket {
            per_second: 1,
            burst: 3,
        };
    })
    .await;
    let key = g.pdp_key("acme", &["records"]).await;
    let three = json!({"subject": alice(), "action": {"name": "read"},
        "evaluations": [{"resource": record1()}, {"resource": record1()}, {"resource": record1()}]});
    let (status, answer) = g.pdp(EVALUATIONS, &key, three).await;
    assert_eq!(status, 200, "{answer}");
    let before = g.decisions().await.len();
    let (status, headers, answer) = g
        .pdp_raw(
            EVALUATION,
            Some(&key),
            &[],
            ask(alice(), "read", record1()).to_string(),
        )
        .await;
    assert_eq!(status, 429, "{answer}");
    assert!(headers.contains_key("retry-after"));
    assert_eq!(answer["error"]["code"], "too_many_requests");
    assert_eq!(g.decisions().await.len(), before);
}
