//! The gateway as an OAuth 2.1 resource server, on the wire, against a real
//! OpenID provider (`tests/oidc/provider.mjs`): RFC 9728 metadata at the
//! root and path-inserted for each MCP endpoint, the 401 challenge a client
//! follows to the provider, tokens refused for the right reason, daemon
//! keys unchanged.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use cedargate::identity::IssuerConfig;
use common::TestGateway;
use common::oidc::{self, OidcProvider, Options};
use serde_json::{Value, json};

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

async fn gateway(issuer: &str, org: Option<&str>) -> TestGateway {
    let issuer = IssuerConfig {
        issuer: issuer.to_string(),
        require_at_jwt: true,
        algorithms: vec!["ES256".into()],
        org: org.map(str::to_string),
        ..IssuerConfig::default()
    };
    TestGateway::start_with(move |c| c.auth.issuers = vec![issuer]).await
}

async fn get(url: &str) -> (u16, Value) {
    let resp = reqwest::get(url).await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// POSTs `initialize` with `authorization`; status and `WWW-Authenticate`.
async fn post(url: &str, authorization: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INIT);
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    let resp = req.send().await.unwrap();
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (resp.status().as_u16(), challenge)
}

#[tokio::test]
async fn metadata_names_the_exact_endpoint_url_and_the_provider() {
    let Some(idp) = oidc::default_provider().await else {
        return;
    };
    let gw = gateway(&idp.issuer, None).await;
    let t = gw.tenant("acme").await;
    let path = format!("/api/mcp/{}", t.session_id);
    let (status, doc) = get(&format!(
        "{}/.well-known/oauth-protected-resource{path}",
        gw.base
    ))
    .await;
    assert_eq!(status, 200, "{doc}");
    assert_eq!(doc["resource"], format!("{}{path}", gw.base));
    assert_eq!(doc["authorization_servers"], json!([idp.issuer]));
    let scopes: Vec<&str> = doc["scopes_supported"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(scopes, vec!["mcp:read", "mcp:tools", "mcp:admin"]);
    let (status, root) = get(&format!("{}/.well-known/oauth-protected-resource", gw.base)).await;
    assert_eq!(status, 200);
    assert_eq!(
        root["resource"],
        gw.base.as_str(),
        "the gateway's resource: its public URL"
    );
    let people = format!(
        "{}/.well-known/oauth-protected-resource/mcp/acme/web",
        gw.base
    );
    assert_eq!(
        get(&people).await.1["resource"],
        format!("{}/mcp/acme/web", gw.base)
    );
    let other = format!(
        "{}/.well-known/oauth-protected-resource/admin/orgs",
        gw.base
    );
    assert_eq!(get(&other).await.0, 404);
}

#[tokio::test]
async fn a_request_without_a_usable_token_is_challenged_toward_the_metadata() {
    let Some(idp) = oidc::default_provider().await else {
        return;
    };
    let gw = gateway(&idp.issuer, None).await;
    let t = gw.tenant("acme").await;
    let metadata = format!(
        "resource_metadata=\"{}/.well-known/oauth-protected-resource/api/mcp/{}\"",
        gw.base, t.session_id
    );
    let (status, challenge) = post(&t.mcp_url, None).await;
    assert_eq!(status, 401);
    assert!(
        challenge.starts_with("Bearer resource_metadata="),
        "{challenge}"
    );
    assert!(challenge.contains(&metadata), "{challenge}");
    assert!(
        challenge.contains("scope=\"mcp:read mcp:tools mcp:admin\""),
        "{challenge}"
    );
    assert!(
        !challenge.contains("error="),
        "no token, no error: {challenge}"
    );

    let (status, challenge) = post(&t.mcp_url, Some("Bearer not-a-token")).await;
    assert_eq!(status, 401);
    assert!(
        challenge.starts_with("Bearer error=\"invalid_token\""),
        "{challenge}"
    );
    assert!(challenge.contains(&metadata), "{challenge}");

    // A real token, issued for another endpoint: refused by its audience.
    let elsewhere = format!("{}/mcp/acme/other-project", gw.base);
    let token = idp
        .client_credentials("mcp:tools", &elsewhere)
        .await
        .access_token;
    let (status, challenge) = post(&t.mcp_url, Some(&format!("Bearer {token}"))).await;
    assert_eq!(status, 401);
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(challenge.contains("aud"), "says why: {challenge}");

    // An ID token is not an access token.
    let signed_in = idp
        .sign_in(
            "alice",
            "cg-ide",
            "openid mcp:tools",
            &t.mcp_url,
            "http://127.0.0.1:49152/callback",
        )
        .await;
    let id_token = signed_in.id_token.expect("an ID token");
    let (status, challenge) = post(&t.mcp_url, Some(&format!("Bearer {id_token}"))).await;
    assert_eq!(status, 401);
    assert!(challenge.contains("at+jwt"), "{challenge}");

    // A token in the query string is refused whatever it holds.
    let url = format!("{}?access_token={}", t.mcp_url, signed_in.access_token);
    let (status, challenge) = post(&url, Some(&format!("Bearer {}", t.key))).await;
    assert_eq!(status, 401);
    assert!(
        challenge.starts_with("Bearer error=\"invalid_request\""),
        "{challenge}"
    );

    // A 64 KB token is refused before it is parsed.
    let huge = format!("Bearer {}", "a".repeat(64 * 1024));
    let (status, challenge) = post(&t.mcp_url, Some(&huge)).await;
    assert_eq!(status, 401);
    assert!(challenge.contains("longer than"), "{challenge}");

    // Daemon keys work as before.
    let (status, _) = post(&t.mcp_url, Some(&format!("Bearer {}", t.key))).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn without_issuers_the_gateway_stays_keys_only() {
    let gw = TestGateway::start().await;
    let t = gw.tenant("acme").await;
    let (status, _) = get(&format!("{}/.well-known/oauth-protected-resource", gw.base)).await;
    assert_eq!(status, 404);
    let (status, challenge) = post(&t.mcp_url, None).await;
    assert_eq!((status, challenge.as_str()), (401, "Bearer"));
}

#[tokio::test]
async fn opaque_tokens_are_introspected_and_a_revoked_one_is_refused() {
    if !oidc::installed() {
        return;
    }
    let idp = OidcProvider::start(Options {
        opaque_resource_prefix: Some("http://127.0.0.1:".into()),
        ..Options::default()
    })
    .await;
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "cg-gateway-secret\n").unwrap();
    let issuer = IssuerConfig {
        issuer: idp.issuer.clone(),
        org: Some("acme".into()),
        introspection_client_id: Some("cg-gateway".into()),
        introspection_secret_file: Some(secret.path().to_path_buf()),
        ..IssuerConfig::default()
    };
    let gw = TestGateway::start_with(move |c| c.auth.issuers = vec![issuer]).await;
    let t = gw.tenant("acme").await;
    let url = format!("{}/mcp/acme/{}", gw.base, t.project);
    let redirect = "http://127.0.0.1:49152/callback";
    let token = idp
        .sign_in("bob", "cg-ide", "openid mcp:tools", &url, redirect)
        .await;
    assert!(!token.access_token.contains('.'), "an opaque token");
    let (status, _) = post(&url, Some(&format!("Bearer {}", token.access_token))).await;
    assert_eq!(status, 200);

    let revoked = idp
        .sign_in("bob", "cg-ide", "openid mcp:tools", &url, redirect)
        .await;
    idp.revoke_as(oidc::IDE, &revoked.access_token).await;
    let (status, challenge) = post(&url, Some(&format!("Bearer {}", revoked.access_token))).await;
    assert_eq!(status, 401);
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(challenge.contains("not active"), "{challenge}");
}

#[tokio::test]
async fn keys_rotate_and_the_provider_may_go_down_mid_run() {
    if !oidc::installed() {
        return;
    }
    let idp = OidcProvider::start(Options::default()).await;
    let issuer = oidc::acme_issuer(&idp);
    let gw = TestGateway::start_with(move |c| {
        c.auth.issuers = vec![issuer];
        c.auth.unknown_kid_refresh_secs = 1;
    })
    .await;
    let t = gw.tenant("acme").await;
    let url = format!("{}/mcp/acme/{}", gw.base, t.project);
    let redirect = "http://127.0.0.1:49152/callback";
    let bearer = |token: &str| format!("Bearer {token}");
    let before = idp
        .sign_in("bob", "cg-ide", "mcp:tools", &url, redirect)
        .await;
    assert_eq!(post(&url, Some(&bearer(&before.access_token))).await.0, 200);

    // A new signing key: its tokens are accepted once the key set is
    // fetched again (an unknown kid, at most once a second here); the old
    // key's tokens keep working while it stays published.
    idp.rotate_keys().await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let after = idp
        .sign_in("bob", "cg-ide", "mcp:tools", &url, redirect)
        .await;
    let kid = |token: &str| oidc::jwt_parts(token).0["kid"].clone();
    assert_ne!(kid(&before.access_token), kid(&after.access_token));
    assert_eq!(post(&url, Some(&bearer(&after.access_token))).await.0, 200);
    assert_eq!(post(&url, Some(&bearer(&before.access_token))).await.0, 200);

    // The provider goes down: a token signed with a key already fetched is
    // still accepted at its first use; a made-up key fails closed, at once.
    let unseen = idp
        .sign_in("alice", "cg-ide", "mcp:tools", &url, redirect)
        .await;
    let stopped = idp.stop();
    let started = std::time::Instant::now();
    assert_eq!(post(&url, Some(&bearer(&unseen.access_token))).await.0, 200);
    let (header, _) = oidc::jwt_parts(&unseen.access_token);
    let forged_header =
        serde_json::json!({"alg": header["alg"], "typ": "at+jwt", "kid": "not-published"});
    let parts: Vec<&str> = unseen.access_token.split('.').collect();
    use base64::Engine;
    let encoded =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(forged_header.to_string());
    let forged = format!("{encoded}.{}.{}", parts[1], parts[2]);
    let (status, challenge) = post(&url, Some(&bearer(&forged))).await;
    assert_eq!(status, 401, "{challenge}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "refused within the request's time"
    );
    let idp = stopped.restart().await;
    assert_eq!(post(&url, Some(&bearer(&after.access_token))).await.0, 200);
    drop(idp);
}

#[tokio::test]
async fn a_token_the_provider_issued_is_refused_once_it_expires() {
    if !oidc::installed() {
        return;
    }
    let idp = OidcProvider::start(Options {
        access_token_ttl: Some(2),
        ..Options::default()
    })
    .await;
    let mut issuer = oidc::acme_issuer(&idp);
    issuer.leeway_secs = 0;
    let gw = TestGateway::start_with(move |c| c.auth.issuers = vec![issuer]).await;
    let t = gw.tenant("acme").await;
    let url = format!("{}/mcp/acme/{}", gw.base, t.project);
    let redirect = "http://127.0.0.1:49152/callback";
    let token = idp
        .sign_in("bob", "cg-ide", "mcp:tools", &url, redirect)
        .await;
    let bearer = format!("Bearer {}", token.access_token);
    assert_eq!(post(&url, Some(&bearer)).await.0, 200, "valid, then cached");
    tokio::time::sleep(std::time::Duration::from_millis(3100)).await;
    let (status, challenge) = post(&url, Some(&bearer)).await;
    assert_eq!(
        status, 401,
        "the cache keeps a token no longer than it lives"
    );
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(challenge.contains("expired"), "{challenge}");
}
