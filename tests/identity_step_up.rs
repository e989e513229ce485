//! Step-up authorization decided by policy, through the real server and a
//! real OpenID provider: a policy names with `@requires_scope` the scope
//! that would change its answer; a person denied for lack of it gets HTTP
//! 403 with one `insufficient_scope` challenge naming every scope to ask
//! for, signs in again with them, and the retry is allowed. A denial no
//! scope can change stays a plain -32003, keys never step up, hierarchies
//! from `auth.scope_implies` are honoured, and a malformed annotation
//! refuses the policy set.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::oidc::{self, OidcProvider};
use common::{TestGateway, copy_policies, own_notes};
use serde_json::{Value, json};

const REDIRECT: &str = "http://127.0.0.1:49152/callback";

/// The remembering tool needs `mcp:admin` (the rule of the issue).
const ADMIN_RULE: &str = r#"
@id("admin-tools-need-admin-scope")
@requires_scope("mcp:admin")
forbid (principal is Gateway::User, action == Gateway::Action::"af_memory_remember", resource)
unless { context has token && context.token.scopes.contains("mcp:admin") };
"#;

/// A rule no scope changes (finance may not store), without annotation.
const FINANCE_RULE: &str = r#"
@id("finance-stores-no-memories")
forbid (principal is Gateway::User, action == Gateway::Action::"af_memory_remember", resource)
when { principal.hasTag("department") && principal.getTag("department") == "finance" };
"#;

/// An annotated rule whose scope everybody signed in here already holds.
const HELD_RULE: &str = r#"
@id("recall-closed-to-readers")
@requires_scope("mcp:read")
forbid (principal is Gateway::User, action == Gateway::Action::"af_memory_recall", resource)
when { context has token && context.token.scopes.contains("mcp:read") };
"#;

/// A gateway trusting the provider (every token in org `acme`, the
/// `department` claim as a tag) with `rules` besides the shipped policies.
async fn gateway(
    idp: &OidcProvider,
    rules: &str,
    implies: BTreeMap<String, Vec<String>>,
) -> (TestGateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    std::fs::write(policies.join("scopes.cedar"), rules).unwrap();
    let issuer = oidc::acme_issuer(idp);
    let gw = TestGateway::start_with(move |c| {
        c.policies_dir = policies;
        c.auth.issuers = vec![issuer];
        c.auth.scope_implies = implies;
    })
    .await;
    (gw, dir)
}

async fn token(idp: &OidcProvider, user: &str, scope: &str, resource: &str) -> String {
    idp.sign_in(user, "cg-ide", scope, resource, REDIRECT)
        .await
        .access_token
}

/// What one POST answered: status, body, `WWW-Authenticate`.
struct Answer {
    status: u16,
    body: Value,
    challenge: Option<String>,
}

async fn post(url: &str, bearer: &str, body: Value, modern: bool) -> Answer {
    let mut req = common::client()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {bearer}"));
    if modern {
        let name = body["params"]["name"].as_str().unwrap_or_default();
        req = req
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", body["method"].as_str().unwrap())
            .header("mcp-name", name);
    }
    let resp = req.body(body.to_string()).send().await.unwrap();
    let status = resp.status().as_u16();
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    let text = resp.text().await.unwrap();
    Answer {
        status,
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        challenge,
    }
}

async fn rpc(url: &str, bearer: &str, body: Value) -> Answer {
    post(url, bearer, body, false).await
}

fn initialize() -> Value {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"ide","version":"1"}}})
}

fn call(name: &str, args: Value) -> Value {
    json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":name,"arguments":args}})
}

fn remember() -> Value {
    call("af_memory_remember", json!({"content": "bob was here"}))
}

/// The value of `attr="…"` in a challenge.
fn attr(challenge: &str, attr: &str) -> String {
    let start = challenge
        .find(&format!("{attr}=\""))
        .unwrap_or_else(|| panic!("no `{attr}` in {challenge}"))
        + attr.len()
        + 2;
    let len = challenge[start..].find('"').unwrap();
    challenge[start..start + len].to_string()
}

fn set(scopes: &str) -> BTreeSet<&str> {
    scopes.split(' ').collect()
}

/// The record of `decision_id`.
async fn record(gw: &TestGateway, decision_id: &str) -> cedargate::store::decisions::NewDecision {
    gw.decisions()
        .await
        .into_iter()
        .find(|d| d.record.id == decision_id)
        .unwrap_or_else(|| panic!("decision {decision_id} is not recorded"))
        .record
}

#[tokio::test]
async fn a_person_missing_a_policys_scope_is_asked_for_it_and_the_retry_is_allowed() {
    let Some(idp) = oidc::default_provider().await else {
        return;
    };
    let rules = format!("{ADMIN_RULE}{FINANCE_RULE}{HELD_RULE}");
    let (gw, _policies) = gateway(&idp, &rules, BTreeMap::new()).await;
    let t = gw.tenant("acme").await;
    let url = format!("{}/mcp/acme/{}", gw.base, t.project);

    let bob = token(&idp, "bob", "openid mcp:read mcp:tools", &url).await;
    assert_eq!(rpc(&url, &bob, initialize()).await.status, 200);
    let refused = rpc(&url, &bob, remember()).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let challenge = refused.challenge.expect("a WWW-Authenticate challenge");
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert_eq!(
        set(&attr(&challenge, "scope")),
        set("mcp:read mcp:tools mcp:admin"),
        "the token's scopes and the missing one, in one challenge: {challenge}"
    );
    assert_eq!(
        attr(&challenge, "resource_metadata"),
        format!(
            "{}/.well-known/oauth-protected-resource/mcp/acme/{}",
            gw.base, t.project
        )
    );
    assert!(
        attr(&challenge, "error_description").contains("mcp:admin"),
        "{challenge}"
    );
    let error = &refused.body["error"];
    assert_eq!(error["code"], -32003, "{}", refused.body);
    assert_eq!(error["data"]["requiredScopes"], json!(["mcp:admin"]));
    assert_eq!(error["data"]["tool"], "af_memory_remember");
    let decision_id = error["data"]["decisionId"].as_str().unwrap();
    let denied = record(&gw, decision_id).await;
    assert_eq!(
        (denied.action.as_str(), denied.decision.as_str()),
        ("call_tool", "deny")
    );
    assert_eq!(
        own_notes(&denied)["stepUp"],
        json!({"scopes": ["mcp:admin"]})
    );
    assert!(denied.reasons.contains("admin-tools-need-admin-scope"));

    // Bob authorizes again with the challenge's scopes (his client adds
    // `openid`, which the provider leaves out of access tokens).
    let scope = format!("openid {}", attr(&challenge, "scope"));
    let stepped_up = token(&idp, "bob", &scope, &url).await;
    let allowed = rpc(&url, &stepped_up, remember()).await;
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert!(allowed.body["result"].is_object(), "{}", allowed.body);
    assert!(allowed.challenge.is_none());

    // A scope already held changes nothing: a plain -32003, no challenge.
    let held = rpc(
        &url,
        &stepped_up,
        call(
            "af_memory_recall",
            json!({"query": "x", "workType": "feature"}),
        ),
    )
    .await;
    assert_eq!(
        (held.status, held.challenge.as_deref()),
        (200, None),
        "{}",
        held.body
    );
    assert_eq!(held.body["error"]["code"], -32003);
    let id = held.body["error"]["data"]["decisionId"].as_str().unwrap();
    assert_eq!(own_notes(&record(&gw, id).await)["stepUp"], Value::Null);

    // A forbid without the annotation still denies with mcp:admin: alice
    // (finance) is refused as before, without a challenge.
    let alice = token(&idp, "alice", "openid mcp:read mcp:tools", &url).await;
    let finance = rpc(&url, &alice, remember()).await;
    assert_eq!(
        (finance.status, finance.challenge.as_deref()),
        (200, None),
        "{}",
        finance.body
    );
    assert_eq!(finance.body["error"]["code"], -32003);
}

#[tokio::test]
async fn a_step_up_in_a_batch_or_a_stateless_request_answers_the_whole_request_403() {
    let Some(idp) = oidc::default_provider().await else {
        return;
    };
    let (gw, _policies) = gateway(&idp, ADMIN_RULE, BTreeMap::new()).await;
    let t = gw.tenant("acme").await;
    let url = format!("{}/mcp/acme/{}", gw.base, t.project);
    let bob = token(&idp, "bob", "openid mcp:read mcp:tools", &url).await;
    assert_eq!(rpc(&url, &bob, initialize()).await.status, 200);

    let batch = json!([
        {"jsonrpc":"2.0","id":7,"method":"tools/list"},
        remember(),
    ]);
    let answered = rpc(&url, &bob, batch).await;
    assert_eq!(answered.status, 403, "{}", answered.body);
    let challenge = answered.challenge.expect("the challenge");
    assert!(attr(&challenge, "scope").contains("mcp:admin"));
    let answers = answered.body.as_array().expect("the batch's answers");
    assert!(
        answers[0]["result"]["tools"].is_array(),
        "{}",
        answered.body
    );
    assert_eq!(
        answers[1]["error"]["data"]["requiredScopes"][0],
        "mcp:admin"
    );

    // 2026-07-28: one stateless request.
    let mut modern = remember();
    modern["params"]["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "ide", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let answered = post(&url, &bob, modern, true).await;
    assert_eq!(answered.status, 403, "{}", answered.body);
    let challenge = answered.challenge.expect("the challenge");
    assert!(challenge.starts_with("Bearer error=\"insufficient_scope\""));
    assert_eq!(answered.body["error"]["code"], -32003, "{}", answered.body);
    assert_eq!(answered.body["id"], 2);
}

#[tokio::test]
async fn scope_hierarchies_are_honoured_and_session_access_steps_up_too() {
    let Some(idp) = oidc::default_provider().await else {
        return;
    };
    let rules = format!(
        r#"{ADMIN_RULE}
@id("remember-needs-tools")
@requires_scope("mcp:tools")
forbid (principal is Gateway::User, action == Gateway::Action::"af_memory_remember", resource)
unless {{ context has token && context.token.scopes.contains("mcp:tools") }};
@id("sessions-need-read")
@requires_scope("mcp:read")
forbid (principal is Gateway::User, action == Gateway::Action::"access_session", resource)
unless {{ context has token && context.token.scopes.contains("mcp:read") }};
@id("bob-recalls-nothing")
@requires_scope("mcp:admin")
forbid (principal is Gateway::User, action == Gateway::Action::"af_memory_recall", resource)
when {{ principal.name == "Bob Builder" }};
"#
    );
    let implies = [("mcp:admin".to_string(), vec!["mcp:tools".to_string()])].into();
    let (gw, _policies) = gateway(&idp, &rules, implies).await;
    let t = gw.tenant("acme").await;
    let url = format!("{}/mcp/acme/{}", gw.base, t.project);

    // Without mcp:read, the session itself steps up.
    let tools_only = token(&idp, "bob", "openid mcp:tools", &url).await;
    let refused = rpc(&url, &tools_only, initialize()).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let challenge = refused.challenge.expect("the challenge");
    assert_eq!(set(&attr(&challenge, "scope")), set("mcp:tools mcp:read"));
    let id = refused.body["error"]["data"]["decisionId"]
        .as_str()
        .unwrap();
    let denied = record(&gw, id).await;
    assert_eq!(denied.action, "access_session");
    assert_eq!(
        own_notes(&denied)["stepUp"],
        json!({"scopes": ["mcp:read"]})
    );

    // Two rules name mcp:admin and mcp:tools; mcp:admin implies mcp:tools,
    // so the challenge asks for mcp:admin alone.
    let reader = token(&idp, "bob", "openid mcp:read", &url).await;
    assert_eq!(rpc(&url, &reader, initialize()).await.status, 200);
    let refused = rpc(&url, &reader, remember()).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let challenge = refused.challenge.expect("the challenge");
    assert_eq!(set(&attr(&challenge, "scope")), set("mcp:read mcp:admin"));
    let scope = format!("openid {}", attr(&challenge, "scope"));
    let admin = token(&idp, "bob", &scope, &url).await;
    let allowed = rpc(&url, &admin, remember()).await;
    assert!(allowed.body["result"].is_object(), "{}", allowed.body);

    // An annotated scope that would not change the answer: no challenge.
    let recall = call(
        "af_memory_recall",
        json!({"query": "x", "workType": "feature"}),
    );
    let refused = rpc(&url, &reader, recall).await;
    assert_eq!(
        (refused.status, refused.challenge.as_deref()),
        (200, None),
        "{}",
        refused.body
    );
    assert_eq!(refused.body["error"]["code"], -32003);
}

#[tokio::test]
async fn opening_a_persons_session_steps_up_too() {
    let Some(idp) = oidc::default_provider().await else {
        return;
    };
    let rules = r#"
@id("joining-needs-admin")
@requires_scope("mcp:admin")
forbid (principal is Gateway::User, action == Gateway::Action::"create_session", resource)
unless { context has token && context.token.scopes.contains("mcp:admin") };
"#;
    let (gw, _policies) = gateway(&idp, rules, BTreeMap::new()).await;
    let t = gw.tenant("acme").await;
    let url = format!("{}/mcp/acme/{}", gw.base, t.project);

    // The person's first request opens their session: without the scope,
    // the opening is denied with the challenge, and recorded as such.
    let reader = token(&idp, "alice", "openid mcp:read", &url).await;
    let refused = rpc(&url, &reader, initialize()).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let challenge = refused.challenge.expect("the challenge");
    assert_eq!(attr(&challenge, "error"), "insufficient_scope");
    assert_eq!(set(&attr(&challenge, "scope")), set("mcp:read mcp:admin"));
    let id = refused.body["error"]["data"]["decisionId"]
        .as_str()
        .unwrap();
    let denied = record(&gw, id).await;
    assert_eq!(
        (denied.action.as_str(), denied.decision.as_str()),
        ("create_session", "deny")
    );
    assert_eq!(
        own_notes(&denied)["stepUp"],
        json!({"scopes": ["mcp:admin"]})
    );

    // Signed in again with what the challenge asked for, the session opens.
    let scope = format!("openid {}", attr(&challenge, "scope"));
    let admin = token(&idp, "alice", &scope, &url).await;
    let opened = rpc(&url, &admin, initialize()).await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    assert!(opened.body["result"].is_object(), "{}", opened.body);
}

#[tokio::test]
async fn keys_never_step_up() {
    let rule = r#"
@id("remember-needs-admin")
@requires_scope("mcp:admin")
forbid (principal, action == Gateway::Action::"af_memory_remember", resource)
unless { context has token && context.token.scopes.contains("mcp:admin") };
"#;
    let gw = TestGateway::start_with_policy("scopes.cedar", rule).await;
    let t = gw.tenant("acme").await;
    let (status, body) = gw
        .mcp(
            &t,
            json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"af_memory_remember","arguments":{"content":"x"}}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["error"]["code"], -32003, "{body}");
    assert!(body["error"]["data"].get("requiredScopes").is_none());
}

#[tokio::test]
async fn a_malformed_requires_scope_refuses_the_set_at_start_and_at_reload() {
    let bad = r#"
@id("bad-scope")
@requires_scope("mcp:admin \"root\"")
forbid (principal is Gateway::User, action == Gateway::Action::"af_memory_remember", resource);
"#;
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    std::fs::write(policies.join("scopes.cedar"), bad).unwrap();
    let config = cedargate::config::Config {
        policies_dir: policies.clone(),
        schema_file: common::repo().join("schemas/gateway.cedarschema"),
        data_dir: dir.path().join("data"),
        demo_tenant: false,
        ..cedargate::config::Config::default()
    };
    let Err(e) = cedargate::server::prepare(config).await else {
        panic!("a gateway started with a malformed @requires_scope");
    };
    let message = e.to_string();
    assert!(
        message.contains("scopes.cedar")
            && message.contains("policy `bad-scope`: `@requires_scope`"),
        "{message}"
    );

    // At reload: refused, the active set stays.
    std::fs::remove_file(policies.join("scopes.cedar")).unwrap();
    let gw = TestGateway::start_with(|c| c.policies_dir = policies.clone()).await;
    std::fs::write(policies.join("scopes.cedar"), bad).unwrap();
    let (status, body) = gw
        .admin(reqwest::Method::POST, "/admin/policies/reload", None)
        .await;
    assert_ne!(status, 200, "{body}");
    assert!(body.to_string().contains("`@requires_scope`"), "{body}");
    let t = gw.tenant("acme").await;
    assert!(
        gw.call_tool(&t, "af_memory_remember", json!({"content": "x"}))
            .await["result"]
            .is_object(),
        "the previous set still decides"
    );
}
