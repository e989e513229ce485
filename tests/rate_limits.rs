//! Per-tenant rate limits through the real server: token buckets per key,
//! per agent and per org, each request costing its work; 429 with
//! `Retry-After` and -32029 over a bucket; one trail record per limited
//! subject and window; per-org overrides through the admin API and the
//! CLI; and the caller's recent usage as `context.usage` in a Cedar rule.
//!
//! Buckets refill at one token per second here, so a bucket that starts
//! full passes exactly its burst at once; where a test needs a refusal it
//! sends well over the burst, so a slow machine refilling a token or two
//! cannot make it pass.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use cedargate::config::{Bucket, Config};
use cedargate::operator::{self, CreateAgent, CreateKey, OpenSession};
use common::{Tenant, TestGateway, modern};
use reqwest::Method;
use serde_json::{Value, json};

/// A bucket refilling one token a second.
fn bucket(burst: u32) -> Bucket {
    Bucket {
        per_second: 1,
        burst,
    }
}

/// Large enough never to be crossed by a test.
const WIDE: Bucket = Bucket {
    per_second: 100_000,
    burst: 100_000,
};

fn limits(key: Bucket, agent: Bucket, org: Bucket) -> impl FnOnce(&mut Config) {
    move |c| {
        c.rate_limits.key = key;
        c.rate_limits.agent = agent;
        c.rate_limits.org = org;
    }
}

fn ping(id: u64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"ping"})
}

/// POSTs `body` with the tenant's URL and `key`; returns status, the
/// `Retry-After` header and the JSON body.
async fn post_with(
    g: &TestGateway,
    t: &Tenant,
    key: &str,
    body: &Value,
) -> (u16, Option<String>, Value) {
    let resp = g
        .http
        .post(&t.mcp_url)
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let text = resp.text().await.unwrap();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, retry, json)
}

async fn post(g: &TestGateway, t: &Tenant, body: &Value) -> (u16, Option<String>, Value) {
    post_with(g, t, &t.key, body).await
}

/// Sends pings until one is refused (at most `max`); returns how many
/// passed before, and the refusal.
async fn pings_until_refused(
    g: &TestGateway,
    t: &Tenant,
    key: &str,
    max: u64,
) -> (u64, Option<(Option<String>, Value)>) {
    for i in 0..max {
        let (status, retry, body) = post_with(g, t, key, &ping(i)).await;
        match status {
            200 => {}
            429 => return (i, Some((retry, body))),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    (max, None)
}

/// A second key of the tenant's org.
async fn second_key(g: &TestGateway, t: &Tenant) -> String {
    let org = t.org.clone();
    g.gw.store
        .read(move |c| {
            operator::create_key(
                c,
                &org,
                CreateKey {
                    label: "second".into(),
                    pdp_apps: Vec::new(),
                },
            )
        })
        .await
        .unwrap()
        .1
}

/// Another agent of the tenant's org, with its own session in the same
/// project, used with the tenant's key.
async fn second_agent(g: &TestGateway, t: &Tenant) -> Tenant {
    let (org, project, key_id) = (t.org.clone(), t.project.clone(), t.key_id.clone());
    let session =
        g.gw.store
            .read(move |c| {
                operator::create_agent(
                    c,
                    &org,
                    CreateAgent {
                        id: "second-agent".into(),
                        name: "Second".into(),
                        roles: vec!["developers".into()],
                    },
                )?;
                operator::open_session(
                    c,
                    &org,
                    OpenSession {
                        project_id: project,
                        agent_id: "second-agent".into(),
                    },
                    Some(&key_id),
                )
            })
            .await
            .unwrap();
    Tenant {
        mcp_url: operator::mcp_url(&g.base, &session.id),
        agent: "second-agent".into(),
        session_id: session.id,
        ..t.clone()
    }
}

/// The records of rate-limit refusals.
async fn refusal_records(g: &TestGateway) -> Vec<cedargate::store::decisions::StoredDecision> {
    g.decisions()
        .await
        .into_iter()
        .filter(|d| d.record.outcome.contains("rate_limit"))
        .collect()
}

#[tokio::test]
async fn over_the_key_bucket_answers_429_with_retry_after_and_32029() {
    let g = TestGateway::start_with(limits(bucket(3), WIDE, WIDE)).await;
    let t = g.tenant("acme").await;
    let (passed, refused) = pings_until_refused(&g, &t, &t.key, 20).await;
    assert!(passed >= 3, "the full bucket passes its burst: {passed}");
    let (retry, body) = refused.expect("a ping over the burst is refused");
    let retry: u64 = retry.expect("Retry-After").parse().unwrap();
    assert!(retry >= 1, "whole seconds, rounded up");
    assert_eq!(body["error"]["code"], -32029, "{body}");
    assert_eq!(body["error"]["data"]["retryAfterSeconds"], retry, "{body}");
    assert_eq!(body["error"]["data"]["limit"], "key", "{body}");
    assert_eq!(body["error"]["data"]["burst"], 3, "{body}");
    assert!(body["id"].is_null(), "{body}");
}

#[tokio::test]
async fn a_batch_is_charged_per_element_so_a_burst_below_the_batch_limit_holds() {
    let g = TestGateway::start_with(limits(bucket(3), WIDE, WIDE)).await;
    let t = g.tenant("acme").await;
    // 20 elements (the batch limit is 64) on a key allowed a burst of 3.
    let batch: Value = (0..20).map(ping).collect::<Vec<_>>().into();
    let (status, _, body) = post(&g, &t, &batch).await;
    assert_eq!(status, 200, "{body}");
    let answers = body.as_array().unwrap();
    let ids: Vec<u64> = answers.iter().map(|a| a["id"].as_u64().unwrap()).collect();
    assert_eq!(
        ids,
        (0..20).collect::<Vec<_>>(),
        "every element answered, in order"
    );
    let ran = answers
        .iter()
        .take_while(|a| a["result"].is_object())
        .count();
    assert!(
        (3..=4).contains(&ran),
        "the burst ran (and at most a token refilled meanwhile): {body}"
    );
    for a in &answers[ran..] {
        assert_eq!(a["error"]["code"], -32029, "{a}");
        assert_eq!(a["error"]["data"]["limit"], "key", "{a}");
        assert!(a["error"]["data"]["retryAfterSeconds"].as_u64().unwrap() >= 1);
    }
    // The bucket is empty: the next batch is refused whole, nothing ran
    // (unless a second went by and refilled one token).
    let (status, _, body) = post(&g, &t, &batch).await;
    if status == 200 {
        let ran = body
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["result"].is_object())
            .count();
        assert!(ran <= 1, "{body}");
    } else {
        assert_eq!(status, 429, "{body}");
        assert_eq!(body["error"]["code"], -32029, "{body}");
    }
    // One record for the key's refusals of this window.
    assert_eq!(refusal_records(&g).await.len(), 1);
}

#[tokio::test]
async fn a_batch_within_the_bucket_runs_whole_and_spends_its_elements() {
    let g = TestGateway::start_with(limits(bucket(10), WIDE, WIDE)).await;
    let t = g.tenant("acme").await;
    let batch: Value = (0..6).map(ping).collect::<Vec<_>>().into();
    let (status, _, body) = post(&g, &t, &batch).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.as_array()
            .unwrap()
            .iter()
            .all(|a| a["result"].is_object())
    );
    // Four tokens left: four singles pass, then one is refused.
    let (passed, refused) = pings_until_refused(&g, &t, &t.key, 20).await;
    assert!((4..=5).contains(&passed), "{passed}");
    assert!(refused.is_some());
}

#[tokio::test]
async fn a_tools_list_costs_the_decisions_it_makes() {
    let g = TestGateway::start_with(limits(bucket(10), WIDE, WIDE)).await;
    let t = g
        .tenant_full("acme", true, true, &["kg_enabled"], &["developers"])
        .await;
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"});
    let (status, _, body) = post(&g, &t, &list).await;
    assert_eq!(status, 200, "{body}");
    let decisions: usize = g
        .decisions()
        .await
        .iter()
        .map(|d| common::listed_decisions(&d.record))
        .sum();
    assert!(
        (6..=10).contains(&decisions),
        "the test needs a list of 6 to 10 decisions: {decisions}"
    );
    let (status, _, body) = post(&g, &t, &list).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["data"]["cost"], decisions, "{body}");
}

#[tokio::test]
async fn a_2026_tools_list_costs_the_decisions_it_makes() {
    let g = TestGateway::start_with(limits(bucket(10), WIDE, WIDE)).await;
    let t = g
        .tenant_full("acme", true, true, &["kg_enabled"], &["developers"])
        .await;
    let list = modern::request(1, "tools/list", json!({}));
    let a = modern::modern(&g, &t, &list).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let listed = a.body["result"]["tools"].as_array().unwrap().len();
    let decisions: usize = g
        .decisions()
        .await
        .iter()
        .map(|d| common::listed_decisions(&d.record))
        .sum();
    assert!(
        (6..=10).contains(&decisions) && listed <= decisions,
        "the test needs a list of 6 to 10 decisions: {decisions}"
    );
    let a = modern::modern(&g, &t, &list).await;
    assert_eq!(a.status, 429, "{}", a.body);
    assert_eq!(a.body["error"]["code"], -32029, "{}", a.body);
    assert_eq!(a.body["error"]["data"]["cost"], decisions, "{}", a.body);
}

#[tokio::test]
async fn requests_refused_for_their_2026_headers_spend_from_the_buckets() {
    let g = TestGateway::start_with(limits(bucket(3), WIDE, WIDE)).await;
    let t = g.tenant("acme").await;
    // One token each (a `server/discover`), `Mcp-Method` saying otherwise.
    let call = modern::request(1, "server/discover", json!({}));
    let headers: Vec<(String, String)> = modern::standard_headers(&call)
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            "mcp-method" => (k, "tools/list".to_string()),
            _ => (k, v),
        })
        .collect();
    let mut statuses = Vec::new();
    for _ in 0..50 {
        let a = modern::post(&g, &t, &headers, &call).await;
        statuses.push(a.status);
    }
    let mismatched = statuses.iter().filter(|s| **s == 400).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert!((3..=4).contains(&mismatched), "{statuses:?}");
    assert_eq!(mismatched + limited, 50, "{statuses:?}");
    // The trail holds one record per refusal that passed the bucket, and
    // one for the window's rate-limit refusals: not one per request.
    let trail = g.decisions().await;
    let header_records = trail
        .iter()
        .filter(|d| d.record.notes.contains("header_validation"))
        .count();
    assert_eq!(header_records, mismatched);
    assert_eq!(refusal_records(&g).await.len(), 1);
}

#[tokio::test]
async fn each_key_has_its_own_bucket() {
    let g = TestGateway::start_with(limits(bucket(3), WIDE, WIDE)).await;
    let t = g.tenant("acme").await;
    let other = second_key(&g, &t).await;
    let (_, refused) = pings_until_refused(&g, &t, &t.key, 20).await;
    let (_, body) = refused.expect("the first key is limited");
    assert_eq!(body["error"]["data"]["limit"], "key", "{body}");
    let (status, _, body) = post_with(&g, &t, &other, &ping(1)).await;
    assert_eq!(status, 200, "another key of the same agent passes: {body}");
}

#[tokio::test]
async fn the_agent_bucket_spans_its_keys() {
    let g = TestGateway::start_with(limits(WIDE, bucket(4), WIDE)).await;
    let t = g.tenant("acme").await;
    let other = second_key(&g, &t).await;
    for i in 0..2 {
        assert_eq!(post(&g, &t, &ping(i)).await.0, 200);
    }
    let (passed, refused) = pings_until_refused(&g, &t, &other, 20).await;
    assert!(passed >= 2, "{passed}");
    let (_, body) = refused.expect("the agent is limited across its keys");
    assert_eq!(body["error"]["data"]["limit"], "agent", "{body}");
    // Another agent of the org is not.
    let second = second_agent(&g, &t).await;
    let (status, _, body) = post(&g, &second, &ping(1)).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn the_org_bucket_spans_its_agents_and_spares_other_orgs() {
    let g = TestGateway::start_with(limits(WIDE, WIDE, bucket(4))).await;
    let t = g.tenant("acme").await;
    let second = second_agent(&g, &t).await;
    let other_org = g.tenant("globex").await;
    for i in 0..2 {
        assert_eq!(post(&g, &t, &ping(i)).await.0, 200);
    }
    let (passed, refused) = pings_until_refused(&g, &second, &second.key, 40).await;
    assert!(passed >= 2, "{passed}");
    let (_, body) = refused.expect("the org is limited across its agents");
    assert_eq!(body["error"]["data"]["limit"], "org", "{body}");
    // The flood goes on (a token refilled meanwhile may pass); the other
    // org, within its own bucket of the same size, is served all along.
    let mut flood_refused = 0;
    for i in 0..4 {
        for j in 0..5 {
            if post(&g, &t, &ping(j)).await.0 == 429 {
                flood_refused += 1;
            }
        }
        let (status, _, body) = post(&g, &other_org, &ping(i)).await;
        assert_eq!(status, 200, "{body}");
    }
    assert!(flood_refused >= 10, "{flood_refused}");
}

#[tokio::test]
async fn refusals_are_recorded_once_per_subject_and_window() {
    let g = TestGateway::start_with(limits(bucket(2), WIDE, WIDE)).await;
    let t = g.tenant("acme").await;
    let mut refusals = Vec::new();
    for i in 0..30 {
        let (status, _, body) = post(&g, &t, &ping(i)).await;
        if status == 429 {
            refusals.push(body);
        }
    }
    assert!(refusals.len() >= 20, "{}", refusals.len());
    let records = refusal_records(&g).await;
    assert_eq!(
        records.len(),
        1,
        "one record however many refusals: {records:?}"
    );
    let record = &records[0];
    assert_eq!(record.record.action, "access_session");
    assert_eq!(record.record.org_id.as_deref(), Some(t.org.as_str()));
    assert_eq!(
        record.record.session_id.as_deref(),
        Some(t.session_id.as_str())
    );
    let outcome: Value = serde_json::from_str(&record.record.outcome).unwrap();
    assert_eq!(outcome["deniedBy"], "rate_limit");
    assert_eq!(outcome["limit"], "key");
    let notes: Value = serde_json::from_str(&record.record.notes).unwrap();
    assert_eq!(notes["rateLimited"]["subject"], t.key_id.as_str());
    assert_eq!(notes["rateLimited"]["burst"], 2);
    // The first refusal names its record; the others write nothing.
    assert_eq!(
        refusals[0]["error"]["data"]["decisionId"],
        record.record.id.as_str()
    );
    assert!(
        refusals[1..]
            .iter()
            .all(|r| r["error"]["data"]["decisionId"].is_null())
    );
    // Another subject refused in the same window gets its own record.
    let other = second_key(&g, &t).await;
    let (_, refused) = pings_until_refused(&g, &t, &other, 20).await;
    assert!(refused.is_some());
    assert_eq!(refusal_records(&g).await.len(), 2);
}

#[tokio::test]
async fn an_org_override_through_the_admin_api_takes_effect() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let other = g.tenant("globex").await;
    let path = "/admin/orgs/acme/rate-limits";
    let (status, body) = g.admin(Method::GET, path, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["override"].is_null(), "{body}");
    let default_key = body["key"].clone();
    // The default buckets let 10 pings through.
    for i in 0..10 {
        assert_eq!(post(&g, &t, &ping(i)).await.0, 200);
    }
    let (status, body) = g
        .admin(
            Method::PUT,
            path,
            Some(json!({"key": {"perSecond": 1, "burst": 2}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["key"], json!({"perSecond": 1, "burst": 2}));
    assert_eq!(
        body["override"],
        json!({"key": {"perSecond": 1, "burst": 2}})
    );
    let (_, refused) = pings_until_refused(&g, &t, &t.key, 20).await;
    let (_, refusal) = refused.expect("the override limits the org's keys");
    assert_eq!(refusal["error"]["data"]["burst"], 2, "{refusal}");
    // Only that org.
    for i in 0..10 {
        assert_eq!(post(&g, &other, &ping(i)).await.0, 200);
    }
    // Refused: nothing given, out of range, an unknown field, an unknown org.
    for bad in [
        json!({}),
        json!({"org": {"perSecond": 0, "burst": 2}}),
        json!({"keys": {"perSecond": 1, "burst": 2}}),
    ] {
        let (status, body) = g.admin(Method::PUT, path, Some(bad)).await;
        assert_eq!(status, 400, "{body}");
    }
    let (status, _) = g
        .admin(
            Method::PUT,
            "/admin/orgs/nope/rate-limits",
            Some(json!({"key": {"perSecond": 1, "burst": 2}})),
        )
        .await;
    assert_eq!(status, 404);
    // Back to the defaults.
    let (status, body) = g.admin(Method::DELETE, path, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["key"], default_key);
    let (status, _, body) = post(&g, &t, &ping(1)).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn an_org_override_through_the_cli_takes_effect() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::cli::write_config(dir.path(), &common::repo().join("policies"));
    let g = TestGateway::start_in(dir, |_| {}).await;
    let t = g.tenant("acme").await;
    let out = common::cli::run(
        &config,
        &["org", "rate-limits", "set", "--org", "acme", "--key", "1/3"],
    );
    assert!(out.status.success(), "{}", common::cli::stderr(&out));
    let shown: Value = serde_json::from_str(&common::cli::stdout(&out)).unwrap();
    assert_eq!(shown["key"], json!({"perSecond": 1, "burst": 3}));
    let out = common::cli::run(&config, &["org", "rate-limits", "get", "--org", "acme"]);
    let shown: Value = serde_json::from_str(&common::cli::stdout(&out)).unwrap();
    assert_eq!(
        shown["override"],
        json!({"key": {"perSecond": 1, "burst": 3}})
    );
    let bad = common::cli::run(
        &config,
        &[
            "org",
            "rate-limits",
            "set",
            "--org",
            "acme",
            "--key",
            "fast",
        ],
    );
    assert!(!bad.status.success());
    // The gateway had not read acme's limits yet: the first request does.
    let (passed, refused) = pings_until_refused(&g, &t, &t.key, 20).await;
    assert!(passed >= 3, "{passed}");
    let (_, body) = refused.expect("the CLI's override applies");
    assert_eq!(body["error"]["data"]["burst"], 3, "{body}");
    let out = common::cli::run(&config, &["org", "rate-limits", "clear", "--org", "acme"]);
    assert!(out.status.success(), "{}", common::cli::stderr(&out));
    let shown: Value = serde_json::from_str(&common::cli::stdout(&out)).unwrap();
    assert!(shown["override"].is_null(), "{shown}");
}

const USAGE_RULE: &str = r#"@id("recall-rate")
@advice("at most 3 recalls a minute")
forbid (
  principal,
  action in [Gateway::Action::"call_tool"],
  resource == Gateway::Tool::"af_memory_recall"
)
when { context has usage && context.usage.callsLastMinute >= 3 };
"#;

#[tokio::test]
async fn a_cedar_rule_on_recent_usage_denies_the_call_over_its_threshold() {
    let g = TestGateway::start_with_policy("usage.cedar", USAGE_RULE).await;
    let t = g.tenant("acme").await;
    let recall = json!({"query": "deploy", "workType": "feature"});
    for i in 0..3 {
        let body = g.call_tool(&t, "af_memory_recall", recall.clone()).await;
        assert!(
            body["error"].is_null(),
            "call {i} is under the threshold: {body}"
        );
    }
    let body = g.call_tool(&t, "af_memory_recall", recall.clone()).await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    assert_eq!(
        body["error"]["data"]["reasons"],
        json!(["recall-rate"]),
        "{body}"
    );
    // Another tool of the same agent is under its own count.
    let body = g
        .call_tool(&t, "af_memory_remember", json!({"content": "a note"}))
        .await;
    assert!(body["error"].is_null(), "{body}");
    // The records carry the usage they were decided with.
    let calls: Vec<Value> = g
        .decisions()
        .await
        .iter()
        .filter(|d| d.record.action == "call_tool")
        .map(|d| serde_json::from_str(&d.record.context).unwrap())
        .collect();
    let counts: Vec<&Value> = calls
        .iter()
        .map(|c| &c["usage"]["callsLastMinute"])
        .collect();
    assert_eq!(
        counts,
        [&json!(0), &json!(1), &json!(2), &json!(3), &json!(0)]
    );
    assert_eq!(calls[4]["usage"]["agentCallsLastMinute"], 4);
    assert_eq!(calls[4]["usage"]["orgCallsLastMinute"], 4);
    // Each record replays to its verdict from the usage it recorded.
    let bundle = g.gw.pep.current();
    for d in g.decisions().await {
        let entities = g.entity_snapshot(&d.record.entities_hash).await;
        let entities = bundle
            .parse_entities(&serde_json::from_str(&entities).unwrap())
            .unwrap();
        let request = cedargate::policy::recorded::RecordedRequest::parse(
            &d.record.principal,
            &d.record.action,
            &d.record.resource,
            &d.record.context,
        )
        .unwrap();
        let verdict = bundle.decide_recorded(&request, &entities);
        let decision = if verdict.allowed { "allow" } else { "deny" };
        assert_eq!(decision, d.record.decision, "seq {}", d.seq);
        assert_eq!(Value::from(verdict.reasons).to_string(), d.record.reasons);
    }
}

#[tokio::test]
async fn a_set_that_does_not_read_usage_gets_none() {
    let g = TestGateway::start().await;
    let t = g.tenant("acme").await;
    let body = g
        .call_tool(
            &t,
            "af_memory_recall",
            json!({"query": "deploy", "workType": "feature"}),
        )
        .await;
    assert!(body["error"].is_null(), "{body}");
    let contexts: Vec<String> = g
        .decisions()
        .await
        .into_iter()
        .map(|d| d.record.context)
        .collect();
    assert!(!contexts.is_empty());
    assert!(
        contexts.iter().all(|c| !c.contains("usage")),
        "{contexts:?}"
    );
    assert!(g.gw.rate_limits.usage.is_empty());
}

#[tokio::test]
async fn an_override_made_through_one_instance_applies_on_every_instance() {
    let schema = match common::pg::FreshSchema::new(&common::pg::shared_url()) {
        Ok(s) => s,
        Err(e) => {
            common::pg::skip_unless_ci(&e);
            return;
        }
    };
    let url = schema.url.clone();
    let a = TestGateway::start_with(|c| c.database.url = Some(url)).await;
    let url = schema.url.clone();
    let b = TestGateway::start_with(|c| c.database.url = Some(url)).await;
    let t = a.tenant("acme").await;
    let through_b = Tenant {
        mcp_url: t.mcp_url.replace(&a.base, &b.base),
        ..t.clone()
    };
    // b has read (and cached) acme's limits: the defaults.
    assert_eq!(post(&b, &through_b, &ping(0)).await.0, 200);
    let (status, body) = a
        .admin(
            Method::PUT,
            "/admin/orgs/acme/rate-limits",
            Some(json!({"key": {"perSecond": 1, "burst": 2}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // The change is announced: b applies it well before its cache expires.
    let start = std::time::Instant::now();
    loop {
        let (status, _, body) = post(&b, &through_b, &ping(1)).await;
        if status == 429 {
            assert_eq!(body["error"]["data"]["burst"], 2, "{body}");
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "instance b never applied the override"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_key_flooding_another_orgs_session_is_limited_and_recorded_once() {
    let g = TestGateway::start_with(limits(bucket(2), WIDE, WIDE)).await;
    let victim = g.tenant("acme").await;
    let caller = g.tenant("globex").await;
    let mut statuses = Vec::new();
    for i in 0..20 {
        statuses.push(post_with(&g, &victim, &caller.key, &ping(i)).await.0);
    }
    assert!(statuses[..2].iter().all(|s| *s == 403), "{statuses:?}");
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert!(limited >= 15, "{statuses:?}");
    let records: Vec<_> = g
        .decisions()
        .await
        .into_iter()
        .filter(|d| d.record.notes.contains("tenant_isolation"))
        .collect();
    let isolation = records
        .iter()
        .filter(|d| d.record.outcome.contains("\"tenant_isolation\""))
        .count();
    let rate = records
        .iter()
        .filter(|d| d.record.outcome.contains("rate_limit"))
        .count();
    assert_eq!(rate, 1, "{records:?}");
    assert_eq!(isolation, statuses.iter().filter(|s| **s == 403).count());
    assert!(
        records
            .iter()
            .all(|d| d.record.org_id.as_deref() == Some("globex"))
    );
}
