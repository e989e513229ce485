//! Token validation against a key server of the test's own, with crafted
//! tokens a real provider would never issue (`alg: none`, an HMAC keyed
//! with the public key, a flood of made-up kids). End-to-end behaviour
//! with a real OpenID provider is tested through the server in
//! `tests/identity_*.rs`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use super::*;

const EC1: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgmQbon+99EzvxQT8f
0hRXnA03OENSHMdveyd893595cahRANCAAQop/0t1yV4irYBikCQtS3GnMuGQQjW
d+sb6clipwmvPynY18fABc9XfLqpPdWqQEJkrDTCsXdhuMgHeIhN60HL
-----END PRIVATE KEY-----";
const EC2: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgluQ8wP+brkUjZTrF
IYYUQQKuf/fX/7DlHoUuqetS11ChRANCAAT9Zca7n7u0afRx7aaAcTmnkzHBI9Hk
wOhmySDeMVaoPbNuj58qbN6kWuN1BcbTDQL/bOx2HutnWDalu0EZ9kbn
-----END PRIVATE KEY-----";
const RSA: &str = "-----BEGIN PRIVATE KEY-----
MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQC4lYXRGCO02A5o
zrZrQrlmSeLpQVxArZJXs1GhdxePySiHwZDOAid7+4SkwWs3hESxwx/SyL8fyirQ
V6J7kwbkgq2WEfMJJ50B+0M8cPodYymJKGiLLzJJDAuPLrEEbZUGL+Lygv+sTiQp
D0pSyZeukAXPgMqPXSztKOAeyJeEIR9UYoJYImIAE9TFRuyBI8nAqoNxiJ/amU+z
+aMefEk858J7vnSNCU6D0o9farHwrW5prJVattFrWN90VNfRyLZ232Qeh+E+sBsH
IKCPeFxLjpHxS55OueNs1lNLIwW9GYWBOhtwHW3n82hehAO2D4NfnM86+DVNrD/+
9lr0gdC3AgMBAAECggEALrC3yDPMeGa8gltjfk9C+XJQIQOE8+FT5rY3vFmVDqxq
Aaj/WXTnCvAM1eYNGl5tR+/dAWMBIWfwm4HHWm3O7Qd3JEJHETZBe2pU0Bmd0sgu
DgE4LJjUJfETjXTYlw+nBgkf5YsoZCvh7rbs7HMM2L2akqn30vrVLepMgsznsqaF
goSLNXQE7zid8kVxExDhc8O2736din85cHMl9zt52q/kmV0HCA7ldj4Ipl1jzDhs
HdMHkVxM8hbiu4p2zGoQ8SklpTsTjWwtNWyTtkt+X546oIC4zDs6GAk0gLe+nuTc
byyY/mXDWD2NZWtqMT2rxk0l6q/JNScL+PUMBvikgQKBgQD0ASdH6Mmux4TLl/29
zz5XYP3vBx06jsEvVc1Qu71Fw7Bn/aE12IL0r6QadtOnDj15i5q5fVcAbwIe6X7X
hNU18H8rfG96uNazVFFeZFo+5U0N2DzV40g1Xf7As1ZeEq1GQJBLB+/KxbrIws7M
4PoR0poSQRaEEdkkPErCWiW8gQKBgQDBqI0OIU+40K7kMYy9D27S8xosRHfvPlH0
SMK2B/PBqYpCrxK29pbluKum0hbpoIxJ3B0wC017Mii0eZ1IbV4JANWedrSy1SLF
WzziLdkJk72WAAEie1WJ10pVdu0OWWlA/UVxNAo/KnQlGjWAg7AV8BtvbvzRpBba
cCcBiwHRNwKBgQDGAjWdPkSEiDa0fRgVsxtVD0micnR+s6ADyK4/yMpU1fPOv9zV
9Gh5JhuWuj0RwRWUD/00b4ltuafP7A3Z2VqoVgzs/iL9RQg+KLuLTQaLKcs44/Si
YbmUTT3RpPb+ikuAyh4ONVebhpAIIUZurldgpTYQgC9EZ7N9m0vTohIjgQKBgArc
A8TmE01ezl/Xc3fqlKFZpn8S+9K7oObc6aZBfea/NhSVMqx12XJaT63UHBrPuO4v
XKekCp0869Fq/GniUCKbHF99cpaQoxmECz73qTMDSN9PcsDXP62yF+YA/DwQwXk2
ep1leKmgHNEzzgo92DLyuucdxymOVQW8wkMw41IzAoGBAOrARMOmaE3pj69+e2Rp
VzFPBs52mvsxAAKsyOYNwON3kp4uV7B0rj8rAIXNqFzXJO9UsDwU8sjOxLtcQ+Rf
UY+tOelhV/ittZU71upGhZCpvvj3R85+fFx773mYx5LiTaRtyPQgpE7r9gqZRo1H
Ow7WC5Np6er+3o/WWcfbk/Ch
-----END PRIVATE KEY-----";
const RSA_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAuJWF0RgjtNgOaM62a0K5
Zkni6UFcQK2SV7NRoXcXj8koh8GQzgIne/uEpMFrN4REscMf0si/H8oq0Feie5MG
5IKtlhHzCSedAftDPHD6HWMpiShoiy8ySQwLjy6xBG2VBi/i8oL/rE4kKQ9KUsmX
rpAFz4DKj10s7SjgHsiXhCEfVGKCWCJiABPUxUbsgSPJwKqDcYif2plPs/mjHnxJ
POfCe750jQlOg9KPX2qx8K1uaayVWrbRa1jfdFTX0ci2dt9kHofhPrAbByCgj3hc
S46R8UueTrnjbNZTSyMFvRmFgTobcB1t5/NoXoQDtg+DX5zPOvg1Taw//vZa9IHQ
twIDAQAB
-----END PUBLIC KEY-----";
const AUD: &str = "http://gw.test/api/mcp/s1";

/// A key server: discovery document and key set, countable, stoppable.
#[derive(Default)]
struct KeyServer {
    issuer: Mutex<String>,
    keys: Mutex<Vec<Value>>,
    fetches: AtomicUsize,
    down: AtomicBool,
}

async fn discovery(State(s): State<Arc<KeyServer>>) -> Response {
    let issuer = s.issuer.lock().unwrap().clone();
    let doc = json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")});
    axum::Json(doc).into_response()
}

async fn jwks(State(s): State<Arc<KeyServer>>) -> Response {
    if s.down.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    s.fetches.fetch_add(1, Ordering::SeqCst);
    let keys = s.keys.lock().unwrap().clone();
    axum::Json(json!({ "keys": keys })).into_response()
}

async fn key_server() -> Arc<KeyServer> {
    let server = Arc::new(KeyServer::default());
    let app = axum::Router::new()
        .route("/.well-known/openid-configuration", get(discovery))
        .route("/jwks", get(jwks))
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    *server.issuer.lock().unwrap() = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    server
}

fn public_jwk(pem: &str, alg: Algorithm, kid: &str) -> Value {
    let key = encoding(pem, alg);
    let mut jwk = Jwk::from_encoding_key(&key, alg).unwrap();
    jwk.common.key_id = Some(kid.into());
    serde_json::to_value(jwk).unwrap()
}

fn encoding(pem: &str, alg: Algorithm) -> EncodingKey {
    match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()).unwrap(),
        _ => EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap(),
    }
}

fn now() -> i64 {
    unix_now()
}

fn claims(issuer: &str) -> Value {
    json!({"iss": issuer, "sub": "alice", "aud": AUD, "exp": now() + 300,
           "scope": "mcp:tools", "client_id": "ide", "groups": ["sre"]})
}

fn sign(pem: &str, alg: Algorithm, kid: Option<&str>, typ: &str, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_string);
    header.typ = Some(typ.into());
    jsonwebtoken::encode(&header, claims, &encoding(pem, alg)).unwrap()
}

fn identities(issuer: &str, tweak: impl FnOnce(&mut AuthConfig)) -> Identities {
    let mut config = AuthConfig {
        issuers: vec![IssuerConfig {
            issuer: issuer.into(),
            algorithms: vec!["ES256".into(), "RS256".into()],
            require_at_jwt: true,
            ..IssuerConfig::default()
        }],
        unknown_kid_refresh_secs: 1,
        ..AuthConfig::default()
    };
    tweak(&mut config);
    Identities::new(&config).unwrap()
}

async fn started() -> (Arc<KeyServer>, String, Identities) {
    let server = key_server().await;
    server
        .keys
        .lock()
        .unwrap()
        .push(public_jwk(EC1, Algorithm::ES256, "k1"));
    let issuer = server.issuer.lock().unwrap().clone();
    let ids = identities(&issuer, |_| {});
    (server, issuer, ids)
}

#[tokio::test]
async fn a_valid_token_names_its_person_and_is_checked_once_until_it_expires() {
    let (server, issuer, ids) = started().await;
    let token = sign(
        EC1,
        Algorithm::ES256,
        Some("k1"),
        "at+jwt",
        &claims(&issuer),
    );
    let id = ids.authenticate(&token, &[AUD]).await.unwrap();
    assert_eq!(
        (id.subject.as_str(), id.client_id.as_deref()),
        ("alice", Some("ide"))
    );
    assert_eq!(id.groups, vec!["sre"]);
    server.down.store(true, Ordering::SeqCst);
    let again = ids.authenticate(&token, &[AUD]).await.unwrap();
    assert!(
        Arc::ptr_eq(&id, &again),
        "the second use is served from the cache"
    );
    assert_eq!(server.fetches.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn forged_algorithms_are_refused() {
    let (_server, issuer, ids) = started().await;
    // `alg: none`, unsigned.
    let b64 = |v: Value| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let none = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "typ": "at+jwt"})),
        b64(claims(&issuer))
    );
    let err = ids.authenticate(&none, &[AUD]).await.unwrap_err();
    assert!(matches!(err, TokenError::Malformed(_)), "{err}");
    // HS256 keyed with the issuer's public key (the classic confusion).
    let mut header = Header::new(Algorithm::HS256);
    header.typ = Some("at+jwt".into());
    header.kid = Some("k1".into());
    let hmac = EncodingKey::from_secret(RSA_PUBLIC.as_bytes());
    let forged = jsonwebtoken::encode(&header, &claims(&issuer), &hmac).unwrap();
    let err = ids.authenticate(&forged, &[AUD]).await.unwrap_err();
    assert_eq!(err, TokenError::Algorithm("HS256".into()));
    // RS256 claimed, key k1 is an EC key.
    let token = sign(
        RSA,
        Algorithm::RS256,
        Some("k1"),
        "at+jwt",
        &claims(&issuer),
    );
    let err = ids.authenticate(&token, &[AUD]).await.unwrap_err();
    assert!(
        matches!(err, TokenError::Key(KeyError::UnknownKid(_))),
        "{err}"
    );
}

#[tokio::test]
async fn time_issuer_audience_and_type_are_enforced() {
    let (_server, issuer, ids) = started().await;
    let bad = |edit: &dyn Fn(&mut Value)| {
        let mut c = claims(&issuer);
        edit(&mut c);
        sign(EC1, Algorithm::ES256, Some("k1"), "at+jwt", &c)
    };
    let cases: Vec<(String, TokenError)> = vec![
        (bad(&|c| c["exp"] = json!(now() - 120)), TokenError::Expired),
        (
            bad(&|c| c["nbf"] = json!(now() + 120)),
            TokenError::NotYetValid,
        ),
        (
            bad(&|c| c["iss"] = json!("https://other.example")),
            TokenError::UnknownIssuer,
        ),
        (
            bad(&|c| c["aud"] = json!("http://gw.test/api/mcp/other")),
            TokenError::WrongAudience,
        ),
        (
            bad(&|c| {
                c.as_object_mut().unwrap().remove("aud");
            }),
            TokenError::Claims(ClaimError::Missing("aud".into())),
        ),
        (
            sign(EC1, Algorithm::ES256, Some("k1"), "JWT", &claims(&issuer)),
            TokenError::NotAnAccessToken,
        ),
        ("x".repeat(64 * 1024), TokenError::TooLarge(16 * 1024)),
    ];
    for (token, expected) in cases {
        assert_eq!(
            ids.authenticate(&token, &[AUD]).await.unwrap_err(),
            expected
        );
    }
    // Within the leeway, an expiry just passed is still accepted.
    let token = bad(&|c| c["exp"] = json!(now() - 5));
    ids.authenticate(&token, &[AUD]).await.unwrap();
    // A tampered payload no longer verifies.
    let token = sign(
        EC1,
        Algorithm::ES256,
        Some("k1"),
        "at+jwt",
        &claims(&issuer),
    );
    let parts: Vec<&str> = token.split('.').collect();
    let other = sign(
        EC1,
        Algorithm::ES256,
        Some("k1"),
        "at+jwt",
        &json!({"sub": "mallory"}),
    );
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        other.split('.').nth(1).unwrap(),
        parts[2]
    );
    assert_eq!(
        ids.authenticate(&forged, &[AUD]).await.unwrap_err(),
        TokenError::UnknownIssuer
    );
    let mut c = claims(&issuer);
    c["sub"] = json!("mallory");
    let payload = sign(EC1, Algorithm::ES256, Some("k1"), "at+jwt", &c);
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        payload.split('.').nth(1).unwrap(),
        parts[2]
    );
    assert_eq!(
        ids.authenticate(&forged, &[AUD]).await.unwrap_err(),
        TokenError::Signature
    );
}

#[tokio::test]
async fn a_flood_of_unknown_kids_fetches_the_key_set_at_most_once_per_interval() {
    let (server, issuer, ids) = started().await;
    let good = sign(
        EC1,
        Algorithm::ES256,
        Some("k1"),
        "at+jwt",
        &claims(&issuer),
    );
    ids.authenticate(&good, &[AUD]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    for i in 0..50 {
        let token = sign(
            EC1,
            Algorithm::ES256,
            Some(&format!("made-up-{i}")),
            "at+jwt",
            &claims(&issuer),
        );
        let err = ids.authenticate(&token, &[AUD]).await.unwrap_err();
        assert!(
            matches!(err, TokenError::Key(KeyError::UnknownKid(_))),
            "{err}"
        );
    }
    assert_eq!(
        server.fetches.load(Ordering::SeqCst),
        2,
        "one fetch at first use, one for the flood"
    );
}

#[tokio::test]
async fn a_rotation_keeps_old_tokens_working_and_accepts_the_new_key() {
    let (server, issuer, ids) = started().await;
    let old = sign(
        EC1,
        Algorithm::ES256,
        Some("k1"),
        "at+jwt",
        &claims(&issuer),
    );
    ids.authenticate(&old, &[AUD]).await.unwrap();
    server
        .keys
        .lock()
        .unwrap()
        .insert(0, public_jwk(EC2, Algorithm::ES256, "k2"));
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let new = sign(
        EC2,
        Algorithm::ES256,
        Some("k2"),
        "at+jwt",
        &claims(&issuer),
    );
    ids.authenticate(&new, &[AUD]).await.unwrap();
    let mut c = claims(&issuer);
    c["jti"] = json!("another");
    let old_key_new_token = sign(EC1, Algorithm::ES256, Some("k1"), "at+jwt", &c);
    ids.authenticate(&old_key_new_token, &[AUD]).await.unwrap();
    assert_eq!(server.fetches.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_provider_down_at_start_fails_closed_without_hammering_it_then_recovers() {
    let server = key_server().await;
    server
        .keys
        .lock()
        .unwrap()
        .push(public_jwk(RSA, Algorithm::RS256, "r1"));
    server.down.store(true, Ordering::SeqCst);
    let issuer = server.issuer.lock().unwrap().clone();
    let ids = identities(&issuer, |_| {});
    let token = sign(
        RSA,
        Algorithm::RS256,
        Some("r1"),
        "at+jwt",
        &claims(&issuer),
    );
    for _ in 0..5 {
        let err = ids.authenticate(&token, &[AUD]).await.unwrap_err();
        assert!(
            matches!(err, TokenError::Key(KeyError::Unavailable(_))),
            "{err}"
        );
    }
    server.down.store(false, Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let id = ids.authenticate(&token, &[AUD]).await.unwrap();
    assert_eq!(id.subject, "alice");
    assert_eq!(server.fetches.load(Ordering::SeqCst), 1);
}

#[test]
fn only_asymmetric_issuers_start() {
    let config = AuthConfig {
        issuers: vec![IssuerConfig {
            issuer: "https://idp.example".into(),
            algorithms: vec!["HS256".into()],
            ..IssuerConfig::default()
        }],
        ..AuthConfig::default()
    };
    let err = Identities::new(&config).unwrap_err().to_string();
    assert!(err.contains("only asymmetric"), "{err}");
}

/// ID tokens of the key server's issuer for client `console`.
fn id_tokens(issuer: &str) -> id_token::IdTokens {
    let issuer = IssuerConfig {
        issuer: issuer.into(),
        ..IssuerConfig::default()
    };
    let fetcher =
        Arc::new(fetch::Fetcher::new(std::time::Duration::from_secs(2), 64 * 1024).unwrap());
    id_token::IdTokens::new(&issuer, &AuthConfig::default(), fetcher, "console").unwrap()
}

fn id_claims(issuer: &str) -> Value {
    json!({"iss": issuer, "sub": "alice", "aud": "console", "exp": now() + 300,
           "iat": now(), "nonce": "n-1", "name": "Alice"})
}

#[tokio::test]
async fn an_id_token_is_for_its_client_and_its_sign_in_only() {
    use id_token::IdTokenError;
    let (_server, issuer, _ids) = started().await;
    let checker = id_tokens(&issuer);
    let good = sign(
        EC1,
        Algorithm::ES256,
        Some("k1"),
        "JWT",
        &id_claims(&issuer),
    );
    let claims = checker.verify(&good, "n-1").await.unwrap();
    assert_eq!(claims["sub"], "alice");
    let bad = |edit: &dyn Fn(&mut Value)| {
        let mut c = id_claims(&issuer);
        edit(&mut c);
        sign(EC1, Algorithm::ES256, Some("k1"), "JWT", &c)
    };
    let cases: Vec<(String, &str, IdTokenError)> = vec![
        (good.clone(), "n-2", IdTokenError::Nonce),
        (
            bad(&|c| {
                c.as_object_mut().unwrap().remove("nonce");
            }),
            "n-1",
            IdTokenError::Nonce,
        ),
        (
            bad(&|c| c["aud"] = json!("another-client")),
            "n-1",
            TokenError::WrongAudience.into(),
        ),
        (
            bad(&|c| c["aud"] = json!(["console", "another-client"])),
            "n-1",
            IdTokenError::AuthorizedParty,
        ),
        (
            bad(&|c| c["azp"] = json!("another-client")),
            "n-1",
            IdTokenError::AuthorizedParty,
        ),
        (
            bad(&|c| c["exp"] = json!(now() - 120)),
            "n-1",
            TokenError::Expired.into(),
        ),
        (
            bad(&|c| c["iss"] = json!("https://other.example")),
            "n-1",
            TokenError::UnknownIssuer.into(),
        ),
        (
            bad(&|c| {
                c.as_object_mut().unwrap().remove("iat");
            }),
            "n-1",
            TokenError::Claims(ClaimError::Missing("iat".into())).into(),
        ),
        (
            sign(
                EC1,
                Algorithm::ES256,
                Some("k1"),
                "at+jwt",
                &id_claims(&issuer),
            ),
            "n-1",
            IdTokenError::AccessToken,
        ),
        (
            sign(
                RSA,
                Algorithm::RS256,
                Some("k1"),
                "JWT",
                &id_claims(&issuer),
            ),
            "n-1",
            TokenError::Key(KeyError::UnknownKid("k1".into())).into(),
        ),
    ];
    for (token, nonce, expected) in cases {
        assert_eq!(checker.verify(&token, nonce).await.unwrap_err(), expected);
    }
    // Several audiences are fine when `azp` names this client.
    let token = bad(&|c| {
        c["aud"] = json!(["console", "another-client"]);
        c["azp"] = json!("console");
    });
    checker.verify(&token, "n-1").await.unwrap();
}
