//! The official MCP SDK clients, given only a person's project URL, sign in
//! through the gateway's OAuth metadata with a real OpenID provider and call
//! a gated tool as that person.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::TestGateway;
use common::clients;
use common::oidc::{self, OidcProvider, Options};
use common::setup::{clients_dir, clients_installed};
use serde_json::Value;

/// Runs a client script (its own HOME); its summary line.
async fn run(program: &str, args: &[&str]) -> Value {
    let home = tempfile::tempdir().unwrap();
    let program = std::path::Path::new(program);
    clients::summary(&clients::run(program, args, &[], home.path()).await)
}

/// A provider, a gateway trusting it, and org `acme`'s project URL.
async fn people_gateway() -> (OidcProvider, TestGateway, String) {
    let idp = OidcProvider::start(Options::default()).await;
    let issuer = oidc::acme_issuer(&idp);
    let gw = TestGateway::start_with(move |c| c.auth.issuers = vec![issuer]).await;
    let t = gw.tenant("acme").await;
    let url = format!("{}/mcp/acme/{}", gw.base, t.project);
    (idp, gw, url)
}

#[tokio::test]
async fn the_typescript_sdk_signs_a_person_in_from_the_project_url_alone() {
    if !clients_installed() || !oidc::installed() {
        return;
    }
    let (idp, gw, url) = people_gateway().await;

    let summary = run("node", &["ts_oauth_client.mjs", &url, "bob"]).await;
    assert_eq!(summary["challenged"], true, "{summary}");
    assert_eq!(
        summary["authorizationServer"],
        idp.issuer.as_str(),
        "{summary}"
    );
    assert_eq!(
        summary["resource"],
        url.as_str(),
        "the SDK asks for this URL: {summary}"
    );
    assert!(
        summary["registeredClient"].is_string(),
        "it registered itself: {summary}"
    );
    let tools: Vec<&str> = summary["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(tools.contains(&"af_memory_recall"), "{summary}");
    assert_eq!(summary["recall"]["isError"], false, "{summary}");

    // The gateway decided the call as bob, in bob's session.
    let bob = format!("Gateway::User::\"{}|bob\"", idp.issuer);
    let decisions = gw.decisions().await;
    let call = decisions
        .iter()
        .find(|d| d.record.action == "af_memory_recall" || d.record.action == "call_tool")
        .map(|d| d.record.clone())
        .expect("the call was recorded");
    assert_eq!(call.principal, bob);
    assert_eq!(call.decision, "allow");
    assert_eq!(call.session_id.as_deref(), summary["sessionId"].as_str());
}

#[tokio::test]
async fn the_python_sdk_signs_a_person_in_from_the_project_url_alone() {
    if !clients_installed() || !oidc::installed() {
        return;
    }
    let (idp, gw, url) = people_gateway().await;
    let python = clients_dir().join(".venv/bin/python");
    let summary = run(
        python.to_str().unwrap(),
        &["py_oauth_client.py", &url, "alice"],
    )
    .await;
    assert_eq!(summary["challenged"], true, "{summary}");
    assert_eq!(summary["resource"], url.as_str(), "{summary}");
    assert!(summary["registeredClient"].is_string(), "{summary}");
    assert_eq!(summary["recall"]["isError"], false, "{summary}");
    let alice = format!("Gateway::User::\"{}|alice\"", idp.issuer);
    let decisions = gw.decisions().await;
    assert!(
        decisions.iter().any(|d| d.record.principal == alice
            && d.record.decision == "allow"
            && (d.record.action == "af_memory_recall" || d.record.action == "call_tool")),
        "the call was decided as alice"
    );
}

/// Storing a memory needs `mcp:admin`, which the first sign-in does not ask
/// for (the challenge names only `mcp:read mcp:tools`).
const ADMIN_RULE: &str = r#"
@id("remembering-needs-admin")
@requires_scope("mcp:admin")
forbid (principal is Gateway::User, action == Gateway::Action::"af_memory_remember", resource)
unless { context has token && context.token.scopes.contains("mcp:admin") };
"#;

/// A gateway whose first challenge leaves `mcp:admin` out and whose policy
/// asks for it to store a memory; org `acme`'s project URL.
async fn step_up_gateway(idp: &OidcProvider) -> (TestGateway, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let policies = common::copy_policies(dir.path());
    std::fs::write(policies.join("admin.cedar"), ADMIN_RULE).unwrap();
    let issuer = oidc::acme_issuer(idp);
    let gw = TestGateway::start_with(move |c| {
        c.policies_dir = policies;
        c.auth.issuers = vec![issuer];
        c.auth.challenge_scopes = vec!["mcp:read".into(), "mcp:tools".into()];
    })
    .await;
    let t = gw.tenant("acme").await;
    let url = format!("{}/mcp/acme/{}", gw.base, t.project);
    (gw, dir, url)
}

/// The remember decisions of the trail, in order.
async fn remembered(gw: &TestGateway) -> Vec<String> {
    gw.decisions()
        .await
        .iter()
        .filter(|d| {
            d.record.resource.contains("af_memory_remember") && d.record.action != "view_tool"
        })
        .map(|d| d.record.decision.clone())
        .collect()
}

/// The client asked for `mcp:admin` in `scope`, stored its memory after
/// the step-up, and the trail holds the deny with the challenge, then the
/// allow.
async fn stepped_up(gw: &TestGateway, summary: &Value, scope: &str) {
    assert!(scope.split(' ').any(|s| s == "mcp:admin"), "{summary}");
    assert_eq!(
        summary["remember"]["isError"], false,
        "stored after step-up: {summary}"
    );
    assert_eq!(
        remembered(gw).await,
        vec!["deny", "allow"],
        "denied with the challenge, then allowed"
    );
}

#[tokio::test]
async fn the_typescript_sdk_steps_up_when_a_policy_asks_for_a_scope() {
    if !clients_installed() || !oidc::installed() {
        return;
    }
    let idp = OidcProvider::start(Options::default()).await;
    let (gw, _dir, url) = step_up_gateway(&idp).await;
    let summary = run("node", &["ts_oauth_client.mjs", &url, "bob", "remember"]).await;
    assert_eq!(summary["challenged"], true, "{summary}");
    let scope = summary["stepUpScope"].as_str().expect("a step-up");
    stepped_up(&gw, &summary, scope).await;
}

#[tokio::test]
async fn the_python_sdk_steps_up_when_a_policy_asks_for_a_scope() {
    if !clients_installed() || !oidc::installed() {
        return;
    }
    let idp = OidcProvider::start(Options::default()).await;
    let (gw, _dir, url) = step_up_gateway(&idp).await;
    let python = clients_dir().join(".venv/bin/python");
    let summary = run(
        python.to_str().unwrap(),
        &["py_oauth_client.py", &url, "bob", "remember"],
    )
    .await;
    assert_eq!(
        summary["signIns"], 2,
        "signed in, then again for the step-up: {summary}"
    );
    let scope = summary["lastScope"].as_str().unwrap();
    stepped_up(&gw, &summary, scope).await;
}
