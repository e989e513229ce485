//! People signed in through a real OpenID provider use the gateway at
//! `/mcp/{org}/{project}` with nothing but their access token: the gateway
//! opens (then finds again) their session, decides every request with the
//! person as principal (groups, tags, scopes), records who they were, and
//! keeps people of other orgs and other people's sessions out.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::oidc::{self, OidcProvider};
use common::{TestGateway, copy_policies};
use serde_json::{Value, json};

const REDIRECT: &str = "http://127.0.0.1:49152/callback";
const SCOPES: &str = "openid mcp:read mcp:tools";

/// Finance may not store memories: a rule on a person's tag.
const FINANCE_RULE: &str = r#"
@id("finance-stores-no-memories")
@advice("people of finance may not store memories")
forbid (principal is Gateway::User, action == Gateway::Action::"af_memory_remember", resource)
when { principal.hasTag("department") && principal.getTag("department") == "finance" };
"#;

/// A gateway whose issuer maps every token to org `acme`, with the
/// `department` claim as a tag and the finance rule.
async fn gateway(idp: &OidcProvider) -> (TestGateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let policies = copy_policies(dir.path());
    std::fs::write(policies.join("people.cedar"), FINANCE_RULE).unwrap();
    let issuer = oidc::acme_issuer(idp);
    let gw = TestGateway::start_with(move |c| {
        c.policies_dir = policies;
        c.auth.issuers = vec![issuer];
    })
    .await;
    (gw, dir)
}

async fn token(idp: &OidcProvider, user: &str, resource: &str) -> String {
    idp.sign_in(user, "cg-ide", SCOPES, resource, REDIRECT)
        .await
        .access_token
}

/// POSTs one JSON-RPC request with a bearer; status, body and the
/// `Mcp-Session-Id` answered.
async fn rpc(url: &str, bearer: &str, body: Value) -> (u16, Value, Option<String>) {
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {bearer}"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let session = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
        session,
    )
}

fn initialize() -> Value {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"ide","version":"1"}}})
}

fn call(name: &str, args: Value) -> Value {
    json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":name,"arguments":args}})
}

#[tokio::test]
async fn a_person_with_only_the_project_url_gets_their_own_session_decided_as_them() {
    let Some(idp) = oidc::default_provider().await else {
        return;
    };
    let (gw, _policies) = gateway(&idp).await;
    let t = gw.tenant("acme").await;
    let url = format!("{}/mcp/acme/{}", gw.base, t.project);

    let alice = token(&idp, "bob", &url).await;
    let (status, body, session) = rpc(&url, &alice, initialize()).await;
    assert_eq!(status, 200, "{body}");
    let bob_session = session.expect("Mcp-Session-Id");
    assert_ne!(
        bob_session, t.session_id,
        "a person's own session, not the agent's"
    );

    // The same person again, with a new token: the same session.
    let again = token(&idp, "bob", &url).await;
    let (status, _, session) = rpc(&url, &again, initialize()).await;
    assert_eq!(
        (status, session.as_deref()),
        (200, Some(bob_session.as_str()))
    );

    let (status, body, _) = rpc(
        &url,
        &again,
        json!({"jsonrpc":"2.0","id":3,"method":"tools/list"}),
    )
    .await;
    assert_eq!(status, 200);
    let names: Vec<&str> = body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"af_memory_remember"), "{names:?}");

    let (status, body, _) = rpc(
        &url,
        &again,
        call("af_memory_remember", json!({"content": "bob was here"})),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        body["result"].is_object(),
        "bob (engineering) may store: {body}"
    );

    // Recorded with the person as principal, in their session.
    let bob = format!("Gateway::User::\"{}|bob\"", idp.issuer);
    let decisions = gw.decisions().await;
    let of = |action: &str| {
        decisions
            .iter()
            .filter(|d| d.record.action == action)
            .map(|d| d.record.clone())
            .collect::<Vec<_>>()
    };
    let created = of("create_session");
    assert_eq!(created.len(), 1, "the session was opened once");
    assert_eq!(created[0].principal, bob);
    assert_eq!(created[0].decision, "allow");
    let calls = of("call_tool");
    assert!(calls.iter().any(|d| d.principal == bob
        && d.session_id.as_deref() == Some(bob_session.as_str())
        && d.decision == "allow"));
    // Records name the token by its jti, never the token.
    let jti = |token: &str| oidc::jwt_parts(token).1["jti"].clone();
    let notes: Value = serde_json::from_str(&created[0].notes).unwrap();
    assert_eq!(notes["jti"], jti(&alice), "{notes}");
    let call_notes: Value = serde_json::from_str(&calls[0].notes).unwrap();
    assert_eq!(call_notes["jti"], jti(&again), "{call_notes}");
    assert!(decisions.iter().all(|d| !d.record.notes.contains(&again)));
    let context: Value = serde_json::from_str(&calls[0].context).unwrap();
    assert_eq!(context["client"]["id"], "cg-ide", "{context}");
    assert_eq!(context["token"]["issuer"], idp.issuer.as_str());
    let snapshot = gw.entity_snapshot(&calls[0].entities_hash).await;
    assert!(
        snapshot.contains("\"department\"") && snapshot.contains("engineering"),
        "{snapshot}"
    );
    assert!(
        snapshot.contains(r#"{"type":"Gateway::Group","id":"dev"}"#),
        "{snapshot}"
    );
}

#[tokio::test]
async fn rules_on_a_persons_tags_decide_their_calls() {
    let Some(idp) = oidc::default_provider().await else {
        return;
    };
    let (gw, _policies) = gateway(&idp).await;
    let t = gw.tenant("acme").await;
    let url = format!("{}/mcp/acme/{}", gw.base, t.project);
    let alice = token(&idp, "alice", &url).await;
    assert_eq!(rpc(&url, &alice, initialize()).await.0, 200);
    let (_, body, _) = rpc(
        &url,
        &alice,
        call("af_memory_remember", json!({"content": "x"})),
    )
    .await;
    assert_eq!(
        body["error"]["code"], -32003,
        "finance may not store: {body}"
    );
    assert!(
        body["error"]["data"]["advice"]
            .to_string()
            .contains("finance"),
        "{body}"
    );
    let (_, body, _) = rpc(
        &url,
        &alice,
        call(
            "af_memory_recall",
            json!({"query": "x", "workType": "feature"}),
        ),
    )
    .await;
    assert!(
        body["result"].is_object(),
        "other tools stay allowed: {body}"
    );
}

#[tokio::test]
async fn people_stay_in_their_org_and_their_own_session() {
    let Some(idp) = oidc::default_provider().await else {
        return;
    };
    let (gw, _policies) = gateway(&idp).await;
    let t = gw.tenant("acme").await;
    let other = gw.tenant("globex").await;
    let url = format!("{}/mcp/acme/{}", gw.base, t.project);

    // An acme token at globex's URL: 403, recorded as a denied access_session.
    let globex_url = format!("{}/mcp/globex/{}", gw.base, other.project);
    let token_for_globex = token(&idp, "alice", &globex_url).await;
    let (status, body, _) = rpc(&globex_url, &token_for_globex, initialize()).await;
    assert_eq!(status, 403, "{body}");
    let decisions = gw.decisions().await;
    let refused = decisions
        .iter()
        .find(|d| d.record.action == "access_session" && d.record.decision == "deny")
        .expect("the refusal is recorded");
    assert_eq!(
        refused.record.org_id.as_deref(),
        Some("acme"),
        "in the person's own org"
    );
    assert!(refused.record.principal.contains("|alice"));

    // Bob's session, by its own URL, with alice's token for that URL: not hers.
    let bob = token(&idp, "bob", &url).await;
    let (_, _, bob_session) = rpc(&url, &bob, initialize()).await;
    let bob_url = format!("{}/api/mcp/{}", gw.base, bob_session.unwrap());
    let alice_for_bob_url = token(&idp, "alice", &bob_url).await;
    let (status, body, _) = rpc(&bob_url, &alice_for_bob_url, initialize()).await;
    assert_eq!(status, 403, "{body}");
    // Bob, there, with a token for that URL: his session works at its own URL.
    let bob_for_url = token(&idp, "bob", &bob_url).await;
    assert_eq!(rpc(&bob_url, &bob_for_url, initialize()).await.0, 200);
    // A token for the project URL is not one for the session URL.
    let (status, _, _) = rpc(&bob_url, &bob, initialize()).await;
    assert_eq!(status, 401);
    // The agent's own session refuses a person.
    let agent_url = t.mcp_url.clone();
    let alice_for_agent = token(&idp, "alice", &agent_url).await;
    assert_eq!(rpc(&agent_url, &alice_for_agent, initialize()).await.0, 403);
    // A daemon key at a person's URL is refused: keys name their session.
    assert_eq!(rpc(&url, &t.key, initialize()).await.0, 403);
    // An unknown project: 404.
    let nowhere = format!("{}/mcp/acme/no-such-project", gw.base);
    let token_nowhere = token(&idp, "alice", &nowhere).await;
    assert_eq!(rpc(&nowhere, &token_nowhere, initialize()).await.0, 404);
}
