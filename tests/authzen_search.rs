//! The AuthZEN search APIs through the real server: the certification
//! scenario's search requirements, pagination (tokens, limits, bounded
//! pages, expiry), consistency with the evaluation API (every result,
//! evaluated, is allowed), and one decision record per page.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::BTreeSet;

use common::TestGateway;
use common::pdp::Apps;
use serde_json::{Value, json};

const BASE: &str = "/pdp/records/access/v1";

async fn gateway(
    tweak: impl FnOnce(&mut cedargate::config::Config),
) -> (TestGateway, Apps, String) {
    let apps = Apps::copied(&[("records", "records")]);
    let dir = apps.dir.clone();
    let g = TestGateway::start_with(|c| {
        c.pdp_dir = dir;
        c.pdp.default_app = Some("records".into());
        tweak(c);
    })
    .await;
    let key = g.pdp_key("acme", &["records"]).await;
    (g, apps, key)
}

fn user(id: &str) -> Value {
    json!({"type": "user", "id": id})
}

fn record(id: &str) -> Value {
    json!({"type": "record", "id": id})
}

/// The ids (or action names) of a search answer.
fn found(answer: &Value) -> Vec<String> {
    answer["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|r| {
            r.get("id")
                .or_else(|| r.get("name"))
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

async fn search(g: &TestGateway, key: &str, kind: &str, body: Value) -> (u16, Value) {
    g.pdp(&format!("{BASE}/search/{kind}"), key, body).await
}

/// S1 to S6 of the certification scenario, with context and without, and
/// the empty answers it requires for an unknown id or type.
#[tokio::test]
async fn the_certification_searches_find_what_the_fixture_allows() {
    let (g, _apps, key) = gateway(|_| {}).await;
    let admin = json!({"type": "user", "id": "bob", "properties": {"role": "admin"}});
    let archived =
        json!({"type": "record", "id": "record-2", "properties": {"status": "archived"}});
    let cases = [
        (
            "subject",
            json!({"subject": {"type": "user"}, "action": {"name": "read"}, "resource": record("record-1")}),
            vec!["alice", "bob"],
        ),
        (
            "resource",
            json!({"subject": user("alice"), "action": {"name": "read"}, "resource": {"type": "record"}}),
            vec!["record-1", "record-2"],
        ),
        (
            "action",
            json!({"subject": user("alice"), "resource": record("record-1")}),
            vec!["read", "write"],
        ),
        (
            "action",
            json!({"subject": user("alice"), "resource": record("record-1"), "context": {"time": "2025-06-27T18:03-07:00", "ip": "192.168.1.1"}}),
            vec!["read", "write"],
        ),
        (
            "subject",
            json!({"subject": {"type": "user"}, "action": {"name": "write"}, "resource": archived.clone()}),
            vec!["bob"],
        ),
        (
            "resource",
            json!({"subject": admin.clone(), "action": {"name": "write"}, "resource": {"type": "record"}}),
            vec!["record-2"],
        ),
        (
            "action",
            json!({"subject": admin, "resource": archived}),
            vec!["read", "write"],
        ),
        (
            "action",
            json!({"subject": user("nonexistent-user"), "resource": record("record-1")}),
            vec![],
        ),
        (
            "subject",
            json!({"subject": {"type": "spaceship"}, "action": {"name": "read"}, "resource": record("record-1")}),
            vec![],
        ),
        (
            "resource",
            json!({"subject": {"type": "spaceship", "id": "x"}, "action": {"name": "read"}, "resource": {"type": "record"}}),
            vec![],
        ),
        (
            "resource",
            json!({"subject": user("alice"), "action": {"name": "fly"}, "resource": {"type": "record"}}),
            vec![],
        ),
    ];
    for (kind, body, expected) in cases {
        let (status, answer) = search(&g, &key, kind, body.clone()).await;
        assert_eq!(status, 200, "{kind} {body}: {answer}");
        assert_eq!(found(&answer), expected, "{kind} {body}");
        assert_eq!(answer["page"]["next_token"], json!(""), "{answer}");
        assert_eq!(answer["page"]["count"], json!(expected.len()));
    }
    // The default application answers at the default paths too.
    let body = json!({"subject": {"type": "user"}, "action": {"name": "read"}, "resource": record("record-1")});
    let (status, answer) = g.pdp("/access/v1/search/subject", &key, body).await;
    assert_eq!(
        (status, found(&answer)),
        (200, vec!["alice".to_string(), "bob".into()])
    );
    let (status, _) = g.pdp("/access/v1/search/everything", &key, json!({})).await;
    assert_eq!(status, 404);
}

/// Missing members and ids, and page limits out of bounds, are 400s.
#[tokio::test]
async fn ill_formed_searches_are_refused() {
    let (g, _apps, key) = gateway(|_| {}).await;
    for (kind, body, says) in [
        (
            "subject",
            json!({"subject": {"type": "user"}, "resource": record("record-1")}),
            "`action` is required",
        ),
        (
            "resource",
            json!({"action": {"name": "read"}, "resource": {"type": "record"}}),
            "`subject` is required",
        ),
        (
            "action",
            json!({"subject": user("alice")}),
            "`resource` is required",
        ),
        (
            "subject",
            json!({"subject": {"type": "user"}, "action": {"name": "read"}, "resource": {"type": "record"}}),
            "`resource.id` is required",
        ),
        (
            "resource",
            json!({"subject": {"type": "user"}, "action": {"name": "read"}, "resource": {"type": "record"}}),
            "`subject.id` is required",
        ),
        (
            "action",
            json!({"subject": {"type": "user"}, "resource": record("record-1")}),
            "`subject.id` is required",
        ),
        (
            "subject",
            json!({"subject": {"type": "user"}, "action": {"name": "read"}, "resource": record("record-1"), "page": {"limit": 0}}),
            "`page.limit` must be an integer from 1 to 1000",
        ),
        (
            "subject",
            json!({"subject": {"type": "user"}, "action": {"name": "read"}, "resource": record("record-1"), "page": {"limit": 1_000_000}}),
            "from 1 to 1000",
        ),
        (
            "subject",
            json!({"subject": {"type": "user", "properties": {"role": 5}}, "action": {"name": "read"}, "resource": record("record-1")}),
            "`subject.properties`",
        ),
        (
            "subject",
            json!({"subject": {"type": "user"}, "action": {"name": "read"}, "resource": record("record-1"), "page": {"token": "garbage!"}}),
            "`page.token`",
        ),
    ] {
        let (status, answer) = search(&g, &key, kind, body.clone()).await;
        assert_eq!(status, 400, "{kind} {body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{kind} {body}: {message}");
    }
}

/// An application with many users: pages of `limit` results, tokens that
/// go on where the last page stopped, pages cut short by the bound on
/// candidates decided, and every result allowed when evaluated.
#[tokio::test]
async fn pages_go_through_every_result_and_each_one_is_allowed() {
    let (g, apps, key) = gateway(|c| c.pdp.max_search_examined = 25).await;
    let data = apps.app("records").join("entities.json");
    let mut entities: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&data).unwrap()).unwrap();
    let mut admins = BTreeSet::from(["bob".to_string()]);
    for i in 0..200 {
        let id = format!("user-{i:03}");
        let attrs = if i % 3 == 0 {
            admins.insert(id.clone());
            json!({"role": "admin"})
        } else {
            json!({})
        };
        entities.push(
            json!({"uid": {"type": "Records::user", "id": id}, "attrs": attrs, "parents": []}),
        );
    }
    std::fs::write(&data, serde_json::to_string_pretty(&entities).unwrap()).unwrap();
    let (status, reload) = g
        .admin(
            reqwest::Method::POST,
            "/admin/pdp/apps/records/reload",
            None,
        )
        .await;
    assert_eq!(status, 200, "{reload}");

    let query = json!({"subject": {"type": "user"}, "action": {"name": "write"}, "resource": record("record-2"), "page": {"limit": 7}});
    let before = g.decisions().await.len();
    let (mut all, mut pages, mut token) = (Vec::new(), 0, String::new());
    loop {
        let mut body = query.clone();
        if !token.is_empty() {
            body["page"]["token"] = json!(token);
        }
        let (status, answer) = search(&g, &key, "subject", body).await;
        assert_eq!(status, 200, "{answer}");
        let page = found(&answer);
        assert!(page.len() <= 7, "{answer}");
        all.extend(page);
        pages += 1;
        token = answer["page"]["next_token"].as_str().unwrap().to_string();
        if token.is_empty() {
            break;
        }
        assert!(pages < 100, "the pages end");
    }
    assert_eq!(
        all.iter().cloned().collect::<BTreeSet<_>>(),
        admins,
        "every admin once"
    );
    assert_eq!(all.len(), admins.len(), "no repeats");
    assert!(
        pages > admins.len() / 7,
        "pages cut short by the candidate bound: {pages}"
    );
    assert_eq!(
        g.decisions().await.len(),
        before + pages,
        "one record per page"
    );

    for id in all.iter().step_by(5) {
        let (status, answer) = g
            .pdp(&format!("{BASE}/evaluation"), &key, json!({"subject": user(id), "action": {"name": "write"}, "resource": record("record-2")}))
            .await;
        assert_eq!(
            (status, &answer["decision"]),
            (200, &json!(true)),
            "{id}: {answer}"
        );
    }
    let records = g.decisions().await;
    let pages_recorded: Vec<&cedargate::store::decisions::NewDecision> = records
        .iter()
        .map(|r| &r.record)
        .filter(|r| r.notes.contains(r#""search""#))
        .collect();
    assert_eq!(pages_recorded.len(), pages);
    let last = pages_recorded.last().unwrap();
    assert_eq!(last.action, "authzen:records:write");
    assert_eq!(last.principal, "Records::user");
    assert_eq!(last.resource, r#"Records::record::"record-2""#);
    let notes: Value = serde_json::from_str(&last.notes).unwrap();
    let last_page = &notes["authzen"]["search"];
    assert_eq!(last_page["kind"], "subject");
    assert_eq!(last_page["more"], json!(false));
    let found_last: Vec<String> = serde_json::from_value(last_page["results"].clone()).unwrap();
    assert!(
        all.ends_with(&found_last),
        "the last page's results are recorded"
    );
}

/// A token goes on only with its own query and until it expires.
#[tokio::test]
async fn page_tokens_belong_to_their_query_and_expire() {
    let (g, _apps, key) = gateway(|c| c.pdp.page_token_ttl_secs = 0).await;
    let query = json!({"subject": {"type": "user"}, "action": {"name": "read"}, "resource": record("record-1"), "page": {"limit": 1}});
    let (status, answer) = search(&g, &key, "subject", query.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(found(&answer), ["alice"]);
    let token = answer["page"]["next_token"].as_str().unwrap().to_string();
    assert!(!token.is_empty());
    let mut other = query.clone();
    other["page"] = json!({"limit": 2, "token": token});
    let (status, answer) = search(&g, &key, "subject", other).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("another query")
    );
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let mut next = query;
    next["page"]["token"] = json!(token);
    let before = g.decisions().await.len();
    let (status, answer) = search(&g, &key, "subject", next).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
    assert_eq!(
        g.decisions().await.len(),
        before,
        "a refused page records nothing"
    );
}
