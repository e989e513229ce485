//! Wrong admin tokens, console sign-ins and daemon keys are throttled per
//! client address and in total (`src/guesses.rs`), through the real
//! server: the failure over a bucket and every attempt after it get 429
//! with `Retry-After`, a correct credential from another address keeps
//! working, and each throttled burst leaves one trail event. Clients come
//! from different loopback addresses (127.0.0.x).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::net::IpAddr;

use cedargate::config::CredentialGuessConfig;
use common::{ADMIN_TOKEN, TestGateway};
use reqwest::StatusCode;
use reqwest::header::{COOKIE, RETRY_AFTER, SET_COOKIE};
use serde_json::{Value, json};

const AUDITOR_TOKEN: &str = "guesses-auditor-token-0123456789abcdef";
const WRONG_TOKEN: &str = "wrong-token-0123456789abcdef0123456789";

/// A client whose connections come from `127.0.0.{last}`.
fn client_from(last: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from([127, 0, 0, last]))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A gateway whose buckets are these (regaining one token a minute, so
/// nothing refills while a test runs).
async fn start(per_address_burst: u32, total_burst: u32) -> TestGateway {
    TestGateway::start_with(|c| {
        c.auditor_token = Some(AUDITOR_TOKEN.into());
        c.credential_guesses = CredentialGuessConfig {
            per_address_burst,
            per_address_per_minute: 1,
            total_burst,
            total_per_minute: 1,
            ..CredentialGuessConfig::default()
        };
    })
    .await
}

async fn admin_get(http: &reqwest::Client, g: &TestGateway, token: &str) -> reqwest::Response {
    http.get(format!("{}/admin/orgs", g.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

/// The `Retry-After` of a 429, checked to be a whole number of seconds
/// the bucket needs at most (one token a minute).
fn retry_after(resp: &reqwest::Response) -> u64 {
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let secs: u64 = resp.headers()[RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&secs), "{secs}");
    secs
}

/// The throttled-burst events of the trail, as their outcomes.
async fn throttled_events(g: &TestGateway) -> Vec<Value> {
    g.decisions()
        .await
        .into_iter()
        .filter(|d| d.record.action == "credential_guesses_throttled")
        .map(|d| {
            assert_eq!(d.record.decision, "event");
            serde_json::from_str(&d.record.outcome).unwrap()
        })
        .collect()
}

#[tokio::test]
async fn wrong_admin_tokens_are_throttled_per_address_while_a_good_client_keeps_working() {
    let g = start(3, 1000).await;
    let (guesser, good) = (client_from(2), client_from(1));
    for _ in 0..3 {
        assert_eq!(admin_get(&guesser, &g, WRONG_TOKEN).await.status(), 401);
    }
    // The fourth wrong token empties the bucket: 429, and from then on
    // the address is not checked at all, the right token included.
    let crossed = admin_get(&guesser, &g, WRONG_TOKEN).await;
    retry_after(&crossed);
    assert_eq!(crossed.headers()["x-content-type-options"], "nosniff");
    let body: Value = crossed.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_requests", "{body}");
    retry_after(&admin_get(&guesser, &g, ADMIN_TOKEN).await);
    // A flood from that address while the good client works.
    let flood = {
        let (base, guesser) = (g.base.clone(), guesser.clone());
        tokio::spawn(async move {
            for _ in 0..300 {
                let resp = guesser
                    .get(format!("{base}/admin/orgs"))
                    .bearer_auth(WRONG_TOKEN)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 429);
            }
        })
    };
    for _ in 0..30 {
        assert_eq!(admin_get(&good, &g, ADMIN_TOKEN).await.status(), 200);
    }
    flood.await.unwrap();
    assert_eq!(admin_get(&good, &g, ADMIN_TOKEN).await.status(), 200);
    // The good client's own wrong tokens spend its own bucket only.
    assert_eq!(admin_get(&good, &g, WRONG_TOKEN).await.status(), 401);
    // One burst, one record.
    let events = throttled_events(&g).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["scope"], "address");
    assert_eq!(events[0]["address"], "127.0.0.2");
    assert_eq!(events[0]["credential"], "operator_token");
    assert_eq!(events[0]["entry"], "admin");
    assert_eq!(events[0]["burst"], 3);
}

#[tokio::test]
async fn the_total_bound_refuses_new_addresses_and_not_known_ones() {
    let g = start(1000, 3).await;
    let known = client_from(1);
    assert_eq!(admin_get(&known, &g, ADMIN_TOKEN).await.status(), 200);
    for last in 2..=4 {
        let resp = admin_get(&client_from(last), &g, WRONG_TOKEN).await;
        assert_eq!(resp.status(), 401, "127.0.0.{last}");
    }
    // The fourth wrong token in all, from yet another address, crosses
    // the total: every address not known is refused unchecked.
    retry_after(&admin_get(&client_from(5), &g, WRONG_TOKEN).await);
    retry_after(&admin_get(&client_from(6), &g, ADMIN_TOKEN).await);
    retry_after(&admin_get(&client_from(2), &g, ADMIN_TOKEN).await);
    // An address that signed in before is still checked.
    for _ in 0..5 {
        assert_eq!(admin_get(&known, &g, ADMIN_TOKEN).await.status(), 200);
    }
    assert_eq!(admin_get(&known, &g, WRONG_TOKEN).await.status(), 401);
    // Daemon keys have their own buckets.
    let t = g.tenant("acme").await;
    let (status, body) = mcp_from(&client_from(7), &t.mcp_url, &t.key).await;
    assert_eq!(status, 200, "{body}");
    let events = throttled_events(&g).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["scope"], "total");
    assert_eq!(events[0]["address"], Value::Null);
    let record = g
        .decisions()
        .await
        .into_iter()
        .find(|d| d.record.action == "credential_guesses_throttled")
        .unwrap();
    assert_eq!(record.record.principal, "Gateway::Client::\"*\"");
    assert_eq!(
        record.record.resource,
        "Gateway::Credential::\"operator_token\""
    );
    let report =
        g.gw.store
            .read(cedargate::store::decisions::verify)
            .await
            .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// One sign-in attempt with `token` from `http`: the form, then its post.
async fn sign_in(http: &reqwest::Client, g: &TestGateway, token: &str) -> reqwest::Response {
    let page = http
        .get(format!("{}/console/login", g.base))
        .send()
        .await
        .unwrap();
    let cookie = page
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap())
        .find(|c| c.starts_with("cg_console_login="))
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let csrf = cookie.split('=').nth(1).unwrap().to_string();
    http.post(format!("{}/console/login", g.base))
        .header(COOKIE, cookie)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("token={token}&csrf={csrf}"))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn wrong_console_sign_ins_are_throttled_with_the_console_headers() {
    let g = start(2, 1000).await;
    let guesser = client_from(2);
    for _ in 0..2 {
        let resp = sign_in(&guesser, &g, WRONG_TOKEN).await;
        assert_eq!(resp.status(), 401);
    }
    let crossed = sign_in(&guesser, &g, WRONG_TOKEN).await;
    retry_after(&crossed);
    for header in [
        "content-security-policy",
        "x-frame-options",
        "referrer-policy",
        "x-content-type-options",
    ] {
        assert!(crossed.headers().contains_key(header), "{header}");
    }
    assert!(
        crossed
            .text()
            .await
            .unwrap()
            .contains("too many wrong tokens")
    );
    // Neither token signs in from there now; both do from elsewhere.
    for token in [ADMIN_TOKEN, AUDITOR_TOKEN] {
        retry_after(&sign_in(&guesser, &g, token).await);
        let resp = sign_in(&client_from(3), &g, token).await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    }
    // The console and the admin API share the operator buckets.
    retry_after(&admin_get(&guesser, &g, ADMIN_TOKEN).await);
    let events = throttled_events(&g).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["entry"], "console");
}

/// POSTs a `tools/list` to `url` with `key` from `http`.
async fn mcp_from(http: &reqwest::Client, url: &str, key: &str) -> (u16, Value) {
    let resp = http
        .post(url)
        .bearer_auth(key)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    if status == 429 {
        retry_after(&resp);
    }
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn open_session_from(
    http: &reqwest::Client,
    g: &TestGateway,
    t: &common::Tenant,
    key: &str,
) -> reqwest::Response {
    http.post(format!("{}/api/sessions", g.base))
        .bearer_auth(key)
        .json(&json!({"projectId": t.project, "agentId": t.agent}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn wrong_daemon_keys_are_throttled_on_the_mcp_endpoint_and_sessions() {
    let g = start(3, 1000).await;
    let t = g.tenant("acme").await;
    // The key's public id with a wrong secret, and an unknown id.
    let wrong = format!("rsk_live_{}_{}", t.key_id, "0".repeat(48));
    let unknown = format!("rsk_live_{}_{}", "f".repeat(16), "0".repeat(48));
    let guesser = client_from(2);
    // No key, or a header that is no daemon key, spends nothing.
    for _ in 0..10 {
        let (status, _) = mcp_from(&guesser, &t.mcp_url, "not-a-key").await;
        assert_eq!(status, 401);
    }
    for key in [&wrong, &unknown, &wrong] {
        let (status, body) = mcp_from(&guesser, &t.mcp_url, key).await;
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["error"]["code"], -32001, "{body}");
    }
    let (status, body) = mcp_from(&guesser, &t.mcp_url, &unknown).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], -32029, "{body}");
    assert_eq!(
        body["error"]["data"]["limit"], "credential_guesses",
        "{body}"
    );
    assert_eq!(body["error"]["data"]["scope"], "address", "{body}");
    // The right key is not checked from there, on either entry.
    assert_eq!(mcp_from(&guesser, &t.mcp_url, &t.key).await.0, 429);
    let resp = open_session_from(&guesser, &g, &t, &t.key).await;
    retry_after(&resp);
    // Elsewhere it works, while the guesser keeps at it.
    let good = client_from(1);
    let flood = {
        let (url, guesser, wrong) = (t.mcp_url.clone(), guesser.clone(), wrong.clone());
        tokio::spawn(async move {
            for _ in 0..300 {
                assert_eq!(mcp_from(&guesser, &url, &wrong).await.0, 429);
            }
        })
    };
    for _ in 0..20 {
        let (status, body) = mcp_from(&good, &t.mcp_url, &t.key).await;
        assert_eq!(status, 200, "{body}");
    }
    flood.await.unwrap();
    // `POST /api/sessions` spends from the same buckets.
    let other = client_from(3);
    for _ in 0..3 {
        let resp = open_session_from(&other, &g, &t, &wrong).await;
        assert_eq!(resp.status(), 401);
    }
    let crossed = open_session_from(&other, &g, &t, &wrong).await;
    retry_after(&crossed);
    let body: Value = crossed.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_requests", "{body}");
    let resp = open_session_from(&good, &g, &t, &t.key).await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let events = throttled_events(&g).await;
    let entries: Vec<(&str, &str)> = events
        .iter()
        .map(|e| {
            assert_eq!(e["credential"], "daemon_key");
            (e["address"].as_str().unwrap(), e["entry"].as_str().unwrap())
        })
        .collect();
    assert_eq!(entries, [("127.0.0.2", "mcp"), ("127.0.0.3", "sessions")]);
}

/// A gateway with these buckets and an issuer that is never reached (the
/// tokens these tests send fail before any key), org `acme`'s project URL.
async fn token_gateway(guesses: CredentialGuessConfig) -> (TestGateway, common::Tenant, String) {
    let g = TestGateway::start_with(move |c| {
        c.credential_guesses = guesses;
        c.auth.issuers = vec![cedargate::identity::IssuerConfig {
            issuer: "https://idp.invalid".into(),
            org: Some("acme".into()),
            ..Default::default()
        }];
    })
    .await;
    let t = g.tenant("acme").await;
    let person_url = format!("{}/mcp/acme/{}", g.base, t.project);
    (g, t, person_url)
}

#[tokio::test]
async fn refused_access_tokens_are_throttled_like_wrong_keys() {
    let (_g, t, person_url) = token_gateway(CredentialGuessConfig {
        per_address_burst: 3,
        per_address_per_minute: 1,
        total_burst: 1000,
        total_per_minute: 1,
        ..CredentialGuessConfig::default()
    })
    .await;
    let guesser = client_from(4);
    // No credential at all spends nothing.
    for _ in 0..5 {
        let resp = guesser.post(&person_url).body("{}").send().await.unwrap();
        assert_eq!(resp.status(), 401);
    }
    for _ in 0..3 {
        let (status, body) = mcp_from(&guesser, &person_url, "forged.token.value").await;
        assert_eq!(status, 401, "{body}");
    }
    let (status, body) = mcp_from(&guesser, &person_url, "forged.token.value").await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        body["error"]["data"]["limit"], "credential_guesses",
        "{body}"
    );
    // Another address keeps working with its key.
    let (status, _) = mcp_from(&client_from(5), &t.mcp_url, &t.key).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_burst_of_refused_access_tokens_is_recorded_once_per_address_and_reason() {
    use base64::Engine;
    // Buckets far away: only the recording is under test.
    let (g, _t, person_url) = token_gateway(CredentialGuessConfig {
        per_address_burst: 1000,
        total_burst: 1000,
        burst_quiet_secs: 1,
        ..CredentialGuessConfig::default()
    })
    .await;
    let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let other_issuer = format!(
        "{}.{}.c2ln",
        b64(json!({"alg": "RS256", "typ": "at+jwt", "kid": "k"})),
        b64(json!({"iss": "https://other.invalid", "sub": "mallory", "exp": 4_000_000_000u64}))
    );
    let refused_events = || async {
        g.decisions()
            .await
            .into_iter()
            .filter(|d| d.record.action == "access_token_refused")
            .map(|d| {
                assert_eq!(d.record.decision, "event");
                assert_eq!(d.record.principal, r#"Gateway::Client::"127.0.0.6""#);
                assert_eq!(d.record.resource, r#"Gateway::Credential::"access_token""#);
                assert_eq!(d.record.org_id, None);
                let outcome: Value = serde_json::from_str(&d.record.outcome).unwrap();
                assert_eq!(outcome["address"], "127.0.0.6", "{outcome}");
                assert_eq!(outcome["entry"], "mcp", "{outcome}");
                outcome["reason"].as_str().unwrap().to_string()
            })
            .collect::<Vec<_>>()
    };
    let client = client_from(6);
    for _ in 0..3 {
        assert_eq!(
            mcp_from(&client, &person_url, "forged.token.value").await.0,
            401
        );
        assert_eq!(mcp_from(&client, &person_url, &other_issuer).await.0, 401);
    }
    // A request without a credential is no refused token.
    let resp = client.post(&person_url).body("{}").send().await.unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(refused_events().await, ["malformed", "unknown_issuer"]);
    // Nothing neither token's text nor its claims reach the trail.
    for d in g.decisions().await {
        assert!(
            !d.record.outcome.contains("other.invalid"),
            "{}",
            d.record.outcome
        );
        assert!(!d.record.outcome.contains("forged"), "{}", d.record.outcome);
    }
    // Once the burst has been quiet, the next refusal starts another.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert_eq!(
        mcp_from(&client, &person_url, "forged.token.value").await.0,
        401
    );
    assert_eq!(
        refused_events().await,
        ["malformed", "unknown_issuer", "malformed"]
    );
}
