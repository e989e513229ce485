//! The test OpenID provider (`tests/oidc/provider.mjs`) does what the
//! gateway's OAuth tests rely on: discovery names the endpoints a resource
//! server needs; access tokens are RFC 9068 JWTs for the requested resource
//! (or opaque, for introspection) carrying the users' claims; keys rotate,
//! retire and survive a restart on the same issuer.
//!
//! If the install fails the tests fail under `CI=true`; elsewhere they say
//! why and pass without running (a machine without Node).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use common::oidc::{self, CONSOLE, IDE, OidcProvider, Options, SignIn, jwt_parts, try_jwt_parts};
use serde_json::{Value, json};

/// The resource (RFC 8707) the tokens are asked for: an MCP endpoint.
const RESOURCE: &str = "http://127.0.0.1:8080/mcp";
/// A loopback redirect at a port of the native client's choosing.
const IDE_REDIRECT: &str = "http://127.0.0.1:49152/callback";
const USER_SCOPE: &str = "openid profile email groups mcp:read mcp:tools";

/// A provider with default options (None outside CI when not installed).
async fn provider(options: Options) -> Option<OidcProvider> {
    if !oidc::installed() {
        return None;
    }
    let p = OidcProvider::start(options).await;
    eprintln!("oidc-provider listening after {:?}", p.started_in);
    Some(p)
}

#[tokio::test]
async fn discovery_names_what_a_resource_server_needs() {
    let Some(p) = provider(Options::default()).await else {
        return;
    };
    let d = p.discovery().await;
    assert_eq!(d["issuer"], p.issuer);
    assert_eq!(d["jwks_uri"], format!("{}/jwks", p.issuer));
    for endpoint in [
        "introspection_endpoint",
        "revocation_endpoint",
        "registration_endpoint",
        "token_endpoint",
        "authorization_endpoint",
    ] {
        let url = d[endpoint]
            .as_str()
            .unwrap_or_else(|| panic!("{endpoint} in {d}"));
        assert!(url.starts_with(&p.issuer), "{endpoint}: {url}");
    }
    assert_eq!(d["code_challenge_methods_supported"], json!(["S256"]));
    let scopes = d["scopes_supported"].as_array().unwrap();
    for scope in [
        "mcp:read",
        "mcp:tools",
        "mcp:admin",
        "groups",
        "offline_access",
    ] {
        assert!(scopes.contains(&json!(scope)), "{scope} in {scopes:?}");
    }
}

#[tokio::test]
async fn a_service_token_is_an_rfc9068_jwt_for_the_requested_resource() {
    let options = Options {
        access_token_ttl: Some(120),
        ..Options::default()
    };
    let Some(p) = provider(options).await else {
        return;
    };
    let t = p.client_credentials("mcp:read mcp:tools", RESOURCE).await;
    assert_eq!(t.token_type, "Bearer");
    assert_eq!(t.expires_in, 120);
    assert_eq!(t.scope, "mcp:read mcp:tools");
    assert!(t.id_token.is_none());
    let (header, claims) = jwt_parts(&t.access_token);
    assert_eq!(header["typ"], "at+jwt");
    assert_eq!(header["alg"], "ES256");
    assert_eq!(
        p.published_kids().await,
        vec![header["kid"].as_str().unwrap()]
    );
    assert_eq!(claims["aud"], RESOURCE);
    assert_eq!(claims["iss"], p.issuer);
    assert_eq!(claims["scope"], "mcp:read mcp:tools");
    assert_eq!(claims["client_id"], "cg-service");
    assert_eq!(claims["sub"], "cg-service");
    assert!(claims["jti"].as_str().is_some_and(|j| !j.is_empty()));
    let (iat, exp) = (
        claims["iat"].as_u64().unwrap(),
        claims["exp"].as_u64().unwrap(),
    );
    assert_eq!(exp - iat, 120);
    assert!(
        claims.get("groups").is_none(),
        "no user claims on a service token"
    );
}

#[tokio::test]
async fn a_resource_outside_the_allowed_prefixes_is_refused() {
    let options = Options {
        resource_prefixes: Some(vec!["http://127.0.0.1:8080/".into()]),
        ..Options::default()
    };
    let Some(p) = provider(options).await else {
        return;
    };
    let p = &p;
    let ask = |resource: &'static str| {
        let params = [
            ("grant_type", "client_credentials"),
            ("scope", "mcp:read"),
            ("resource", resource),
        ];
        async move { p.token(oidc::SERVICE, &params).await }
    };
    let (status, error) = ask("http://127.0.0.1:9999/mcp").await.unwrap_err();
    assert_eq!(
        (status, error["error"].as_str()),
        (400, Some("invalid_target"))
    );
    assert!(ask("https://idp.example/mcp").await.is_err());
    assert!(ask(RESOURCE).await.is_ok());
    // A wrong secret is refused too.
    let wrong = oidc::Client {
        id: "cg-service",
        secret: Some("not-the-secret"),
    };
    let params = [("grant_type", "client_credentials"), ("resource", RESOURCE)];
    let (status, error) = p.token(wrong, &params).await.unwrap_err();
    assert_eq!(
        (status, error["error"].as_str()),
        (401, Some("invalid_client"))
    );
}

fn assert_user_claims(claims: &Value, user: &str, groups: Value, department: &str) {
    assert_eq!(claims["sub"], user);
    assert_eq!(claims["groups"], groups);
    assert_eq!(claims["department"], department);
    assert_eq!(claims["email"], format!("{user}@example.com"));
    assert!(claims["name"].as_str().is_some_and(|n| !n.is_empty()));
}

#[tokio::test]
async fn alice_signs_in_headless_and_her_token_carries_her_claims() {
    let Some(p) = provider(Options::default()).await else {
        return;
    };
    let t = p
        .sign_in("alice", "cg-ide", USER_SCOPE, RESOURCE, IDE_REDIRECT)
        .await;
    let (header, claims) = jwt_parts(&t.access_token);
    assert_eq!(header["typ"], "at+jwt");
    assert_user_claims(&claims, "alice", json!(["sre"]), "finance");
    assert_eq!(claims["name"], "Alice Example");
    assert_eq!(claims["aud"], RESOURCE);
    assert_eq!(claims["iss"], p.issuer);
    assert_eq!(claims["client_id"], "cg-ide");
    // Only the resource's scopes go into its token.
    assert_eq!(claims["scope"], "mcp:read mcp:tools");
    assert_eq!(t.scope, "mcp:read mcp:tools");
    assert!(claims["jti"].is_string());
    // The ID token is an ordinary JWT for the client, not an access token.
    let (id_header, id_claims) = jwt_parts(t.id_token.as_deref().unwrap());
    assert_ne!(id_header["typ"], "at+jwt");
    assert_eq!(id_claims["aud"], "cg-ide");
    assert_eq!(id_claims["sub"], "alice");
    assert_eq!(id_claims["iss"], p.issuer);
}

#[tokio::test]
async fn bob_signs_in_through_the_console_client_with_his_groups() {
    let Some(p) = provider(Options::default()).await else {
        return;
    };
    let redirect = "http://127.0.0.1/console/callback";
    let t = p
        .sign_in("bob", "cg-console", USER_SCOPE, RESOURCE, redirect)
        .await;
    let (_, claims) = jwt_parts(&t.access_token);
    assert_user_claims(&claims, "bob", json!(["dev"]), "engineering");
    assert_eq!(claims["name"], "Bob Builder");
    assert_eq!(claims["client_id"], "cg-console");
    // A redirect the console client did not register gets no code.
    let flow = SignIn {
        user: "bob",
        client: CONSOLE,
        scope: USER_SCOPE,
        resource: RESOURCE,
        redirect_uri: "http://127.0.0.1:5555/console/callback",
        through_form: false,
    };
    p.set_console_redirects(&["http://127.0.0.1:5555/console/callback"])
        .await;
    assert!(p.try_sign_in(&flow).await.is_ok(), "redirects replaced");
    let old = SignIn {
        redirect_uri: redirect,
        ..flow
    };
    let error = p.try_sign_in(&old).await.unwrap_err();
    assert_eq!(error["error"], "invalid_redirect_uri", "{error}");
}

#[tokio::test]
async fn an_unknown_user_is_refused_at_sign_in() {
    let Some(p) = provider(Options::default()).await else {
        return;
    };
    let flow = SignIn {
        user: "mallory",
        client: IDE,
        scope: USER_SCOPE,
        resource: RESOURCE,
        redirect_uri: IDE_REDIRECT,
        through_form: false,
    };
    let error = p.try_sign_in(&flow).await.unwrap_err();
    assert_eq!(error["error"], "access_denied", "{error}");
}

#[tokio::test]
async fn the_sign_in_form_signs_in_the_user_it_names() {
    let options = Options {
        login_page: true,
        ..Options::default()
    };
    let Some(p) = provider(options).await else {
        return;
    };
    let flow = SignIn {
        user: "bob",
        client: IDE,
        scope: USER_SCOPE,
        resource: RESOURCE,
        redirect_uri: IDE_REDIRECT,
        through_form: true,
    };
    let t = p.try_sign_in(&flow).await.unwrap();
    assert_eq!(jwt_parts(&t.access_token).1["sub"], "bob");
}

#[tokio::test]
async fn a_refresh_token_gets_a_new_access_token_for_the_resource() {
    let Some(p) = provider(Options::default()).await else {
        return;
    };
    let scope = format!("{USER_SCOPE} offline_access");
    let t = p
        .sign_in("alice", "cg-ide", &scope, RESOURCE, IDE_REDIRECT)
        .await;
    let refresh = t
        .refresh_token
        .expect("offline_access gives a refresh token");
    let again = p.refresh("cg-ide", &refresh, RESOURCE).await.unwrap();
    let (header, claims) = jwt_parts(&again.access_token);
    assert_eq!(header["typ"], "at+jwt");
    assert_eq!(claims["aud"], RESOURCE);
    assert_user_claims(&claims, "alice", json!(["sre"]), "finance");
    assert_ne!(claims["jti"], jwt_parts(&t.access_token).1["jti"]);
}

#[tokio::test]
async fn a_registered_client_signs_in_like_the_mcp_sdks_do() {
    let Some(p) = provider(Options::default()).await else {
        return;
    };
    let redirect = "http://127.0.0.1:33333/oauth/callback";
    let client_id = p.register(&[redirect]).await;
    let t = p
        .sign_in("bob", &client_id, USER_SCOPE, RESOURCE, redirect)
        .await;
    let (_, claims) = jwt_parts(&t.access_token);
    assert_eq!(claims["client_id"], client_id);
    assert_eq!(claims["aud"], RESOURCE);
    assert_eq!(claims["sub"], "bob");
}

#[tokio::test]
async fn an_opaque_token_introspects_active_until_revoked() {
    let opaque = "http://127.0.0.1:8080/opaque/";
    let options = Options {
        opaque_resource_prefix: Some(opaque.into()),
        ..Options::default()
    };
    let Some(p) = provider(options).await else {
        return;
    };
    let resource = format!("{opaque}mcp");
    let t = p.client_credentials("mcp:read", &resource).await;
    assert!(
        try_jwt_parts(&t.access_token).is_none(),
        "{}",
        t.access_token
    );
    let info = p.introspect(&t.access_token).await;
    assert_eq!(info["active"], true, "{info}");
    assert_eq!(info["client_id"], "cg-service");
    assert_eq!(info["scope"], "mcp:read");
    assert_eq!(info["aud"], resource);
    assert_eq!(info["iss"], p.issuer);
    p.revoke(&t.access_token).await;
    assert_eq!(
        p.introspect(&t.access_token).await,
        json!({"active": false})
    );
    // A user's opaque token introspects with the user's claims.
    let u = p
        .sign_in("alice", "cg-ide", USER_SCOPE, &resource, IDE_REDIRECT)
        .await;
    let info = p.introspect(&u.access_token).await;
    assert_eq!(info["active"], true, "{info}");
    assert_user_claims(&info, "alice", json!(["sre"]), "finance");
    // JWTs stay JWTs for the other resources.
    let jwt = p.client_credentials("mcp:read", RESOURCE).await;
    assert!(try_jwt_parts(&jwt.access_token).is_some());
}

fn kid_of(token: &str) -> String {
    jwt_parts(token).0["kid"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn rotation_signs_with_a_new_key_and_keeps_the_old_one_published() {
    let Some(p) = provider(Options::default()).await else {
        return;
    };
    let old = kid_of(
        &p.client_credentials("mcp:read", RESOURCE)
            .await
            .access_token,
    );
    let kids = p.rotate_keys().await;
    assert_eq!(kids.len(), 2);
    assert_eq!(kids[1], old);
    let new = kid_of(
        &p.client_credentials("mcp:read", RESOURCE)
            .await
            .access_token,
    );
    assert_ne!(new, old);
    assert_eq!(new, kids[0]);
    assert_eq!(p.published_kids().await, vec![new.clone(), old.clone()]);
    // User tokens use the new key too.
    let t = p
        .sign_in("bob", "cg-ide", USER_SCOPE, RESOURCE, IDE_REDIRECT)
        .await;
    assert_eq!(kid_of(&t.access_token), new);

    assert_eq!(p.retire_oldest_key().await, vec![new.clone()]);
    assert_eq!(p.published_kids().await, vec![new.clone()]);
    let (status, _) = p.try_retire_oldest_key().await;
    assert_eq!(status, 409, "the last key stays");
    assert_eq!(p.published_kids().await, vec![new]);
}

#[tokio::test]
async fn a_restart_on_the_same_port_and_keys_keeps_the_issuer_and_keys() {
    let Some(p) = provider(Options::default()).await else {
        return;
    };
    let issuer = p.issuer.clone();
    let t = p.client_credentials("mcp:read", RESOURCE).await;
    p.rotate_keys().await;
    let kids = p.published_kids().await;
    let stopped = p.stop();
    let down = reqwest::get(format!("{issuer}/jwks")).await;
    assert!(down.is_err(), "the provider is down");

    let p = stopped.restart().await;
    assert_eq!(p.issuer, issuer);
    assert_eq!(p.published_kids().await, kids);
    assert!(kids.contains(&kid_of(&t.access_token)));
    let after = p.client_credentials("mcp:read", RESOURCE).await;
    assert_eq!(kid_of(&after.access_token), kids[0]);

    // `start_on` does the same from a port and a keys file.
    let (port, keys) = (p.port, p.keys_file.clone());
    let keep = tempfile::tempdir().unwrap();
    let copy = keep.path().join("jwks.json");
    std::fs::copy(&keys, &copy).unwrap();
    drop(p);
    let p = OidcProvider::start_on(port, &copy, Options::default()).await;
    assert_eq!(p.issuer, issuer);
    assert_eq!(p.published_kids().await, kids);
}
