//! The token source against a small authorization server of its own
//! (discovery and a token endpoint on 127.0.0.1) that counts what it is
//! asked and answers as each test sets it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State as Extract;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use base64::Engine as _;
use serde_json::json;

use super::*;

const SECRET: &str = "s3cret value:with/odd chars";

/// The secrets the tests' sources read: `GOOD` and nothing else.
fn secrets(name: &str) -> Option<String> {
    (name == "GOOD").then(|| SECRET.to_string())
}

/// How the token endpoint answers.
#[derive(Debug, Clone)]
enum Answer {
    /// A token living this many seconds.
    Token(u64),
    /// `invalid_client`, its description quoting the secret it was sent.
    Refuse,
    /// An HTML 502.
    BadGateway,
}

#[derive(Debug)]
struct Server {
    issuer: String,
    requests: AtomicUsize,
    answer: Mutex<Answer>,
    delay: Duration,
    /// The last request's form and decoded Basic credentials.
    seen: Mutex<Option<(BTreeMap<String, String>, String)>>,
}

impl Server {
    async fn start(answer: Answer, delay: Duration) -> Arc<Server> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let server = Arc::new(Server {
            issuer,
            requests: AtomicUsize::new(0),
            answer: Mutex::new(answer),
            delay,
            seen: Mutex::new(None),
        });
        let app = Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/token", post(token))
            .with_state(Arc::clone(&server));
        tokio::spawn(async move { axum::serve(listener, app).await });
        server
    }

    fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    fn client(&self, scope: Option<&str>) -> ClientCredentials {
        ClientCredentials {
            kind: KIND.into(),
            issuer: self.issuer.clone(),
            client_id: "gateway client".into(),
            secret_env: "GOOD".into(),
            scope: scope.map(str::to_string),
            resource: "https://upstream.example/mcp".into(),
        }
    }
}

async fn discovery(Extract(s): Extract<Arc<Server>>) -> impl IntoResponse {
    axum::Json(json!({"issuer": s.issuer, "token_endpoint": format!("{}/token", s.issuer)}))
}

async fn token(
    Extract(s): Extract<Arc<Server>>,
    headers: HeaderMap,
    body: String,
) -> axum::response::Response {
    let n = s.requests.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(s.delay).await;
    let form: BTreeMap<String, String> = reqwest::Url::parse(&format!("http://x/?{body}"))
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    let basic = headers["authorization"].to_str().unwrap();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(basic.strip_prefix("Basic ").unwrap())
        .unwrap();
    *s.seen.lock().unwrap() = Some((form, String::from_utf8(decoded).unwrap()));
    let answer = s.answer.lock().unwrap().clone();
    match answer {
        Answer::Token(life) => axum::Json(json!({
            "access_token": format!("token-{n}"), "token_type": "Bearer", "expires_in": life,
        }))
        .into_response(),
        Answer::Refuse => (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({
                "error": "invalid_client",
                "error_description": format!("client authentication failed for {basic} {SECRET}"),
            })),
        )
            .into_response(),
        Answer::BadGateway => (StatusCode::BAD_GATEWAY, "<html>down</html>").into_response(),
    }
}

fn source() -> TokenSource {
    TokenSource::reading(secrets).unwrap()
}

#[tokio::test]
async fn the_grant_names_the_resource_and_scope_with_basic_client_authentication() {
    let server = Server::start(Answer::Token(3600), Duration::ZERO).await;
    let tokens = source();
    let token = tokens
        .token("up", &server.client(Some("mcp:tools mcp:read")))
        .await;
    assert_eq!(token.unwrap(), "token-1");
    let (form, basic) = server.seen.lock().unwrap().clone().unwrap();
    assert_eq!(form["grant_type"], "client_credentials");
    assert_eq!(form["resource"], "https://upstream.example/mcp");
    assert_eq!(form["scope"], "mcp:tools mcp:read");
    assert!(!form.contains_key("client_secret"), "{form:?}");
    // RFC 6749 §2.3.1: both form-encoded before Basic.
    assert_eq!(basic, "gateway+client:s3cret+value%3Awith%2Fodd+chars");
}

#[tokio::test]
async fn a_token_is_reused_until_it_nears_its_expiry() {
    let server = Server::start(Answer::Token(2), Duration::ZERO).await;
    let (tokens, client) = (source(), server.client(None));
    assert_eq!(tokens.token("up", &client).await.unwrap(), "token-1");
    assert_eq!(tokens.token("up", &client).await.unwrap(), "token-1");
    assert_eq!(server.requests(), 1);
    let (form, _) = server.seen.lock().unwrap().clone().unwrap();
    assert!(!form.contains_key("scope"), "no scope registered: {form:?}");
    // A 2 s token is replaced once half its life is gone.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(tokens.token("up", &client).await.unwrap(), "token-2");
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn concurrent_callers_wait_for_one_request() {
    let server = Server::start(Answer::Token(3600), Duration::from_millis(300)).await;
    let (tokens, client) = (Arc::new(source()), server.client(None));
    let mut calls = Vec::new();
    for _ in 0..10 {
        let (tokens, client) = (Arc::clone(&tokens), client.clone());
        calls.push(tokio::spawn(
            async move { tokens.token("up", &client).await },
        ));
    }
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), "token-1");
    }
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn a_caller_giving_up_does_not_cancel_the_request_for_others() {
    let server = Server::start(Answer::Token(3600), Duration::from_millis(300)).await;
    let (tokens, client) = (source(), server.client(None));
    let gave_up = tokio::time::timeout(Duration::from_millis(50), tokens.token("up", &client));
    assert!(gave_up.await.is_err());
    assert_eq!(tokens.token("up", &client).await.unwrap(), "token-1");
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn a_refusal_names_the_servers_error_never_the_secret_and_is_not_asked_again_at_once() {
    let server = Server::start(Answer::Refuse, Duration::ZERO).await;
    let (tokens, client) = (source(), server.client(None));
    let first = tokens.token("up", &client).await.unwrap_err().to_string();
    assert!(first.contains("invalid_client"), "{first}");
    assert!(first.contains("client authentication failed"), "{first}");
    assert!(first.contains(&server.issuer), "{first}");
    for form in secret_forms(&client.client_id, SECRET) {
        assert!(!first.contains(&form), "{form} in {first}");
    }
    assert!(
        first.contains("[secret]"),
        "the echoed secret is blanked: {first}"
    );
    for _ in 0..20 {
        let again = tokens.token("up", &client).await.unwrap_err().to_string();
        assert_eq!(again, first);
    }
    assert_eq!(server.requests(), 1, "one request per {RETRY_AFTER:?}");
}

#[tokio::test]
async fn an_answer_that_is_not_json_is_told_by_its_status() {
    let server = Server::start(Answer::BadGateway, Duration::ZERO).await;
    let err = source()
        .token("up", &server.client(None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("HTTP 502"), "{err}");
}

#[tokio::test]
async fn a_valid_token_serves_while_its_refresh_fails() {
    let server = Server::start(Answer::Token(2), Duration::ZERO).await;
    let (tokens, client) = (source(), server.client(None));
    assert_eq!(tokens.token("up", &client).await.unwrap(), "token-1");
    server.set(Answer::Refuse);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(tokens.token("up", &client).await.unwrap(), "token-1");
    assert_eq!(tokens.token("up", &client).await.unwrap(), "token-1");
    assert_eq!(server.requests(), 2, "the refresh was tried once");
    // Expired: the refusal shows.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let err = tokens.token("up", &client).await.unwrap_err();
    assert!(err.to_string().contains("invalid_client"), "{err}");
}

#[tokio::test]
async fn another_registration_under_the_same_id_starts_afresh() {
    let server = Server::start(Answer::Token(3600), Duration::ZERO).await;
    let tokens = source();
    let first = tokens.token("up", &server.client(None)).await.unwrap();
    let other = tokens.token("up", &server.client(Some("mcp:read"))).await;
    assert_eq!(
        (first.as_str(), other.unwrap().as_str()),
        ("token-1", "token-2")
    );
    tokens.forget("up");
    let again = tokens.token("up", &server.client(Some("mcp:read"))).await;
    assert_eq!(again.unwrap(), "token-3");
}

#[tokio::test]
async fn a_token_refused_at_once_by_the_upstream_is_kept() {
    let server = Server::start(Answer::Token(3600), Duration::ZERO).await;
    let (tokens, client) = (source(), server.client(None));
    let token = tokens.token("up", &client).await.unwrap();
    tokens.rejected("up", &token);
    assert_eq!(tokens.token("up", &client).await.unwrap(), token);
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn an_unset_secret_fails_before_anything_is_sent() {
    let server = Server::start(Answer::Token(3600), Duration::ZERO).await;
    let client = ClientCredentials {
        secret_env: "NOT_SET".into(),
        ..server.client(None)
    };
    let err = source().token("up", &client).await.unwrap_err();
    assert_eq!(err, TokenError::Secret("NOT_SET".into()));
    assert_eq!(server.requests(), 0);
}

#[tokio::test]
async fn an_issuer_without_metadata_fails_discovery() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let client = ClientCredentials {
        kind: KIND.into(),
        issuer: issuer.clone(),
        client_id: "c".into(),
        secret_env: "GOOD".into(),
        scope: None,
        resource: "https://u.example/".into(),
    };
    let err = source().token("up", &client).await.unwrap_err();
    assert!(
        matches!(&err, TokenError::Discovery { issuer: i, .. } if *i == issuer),
        "{err}"
    );
}

#[test]
fn a_token_is_replaced_when_a_fifth_of_its_life_or_thirty_seconds_is_left() {
    let s = Duration::from_secs;
    for (life, margin) in [
        (s(3600), s(720)),
        (s(300), s(60)),
        (s(120), s(30)),
        (s(60), s(30)),
        (s(10), s(5)),
        (s(4), s(2)),
    ] {
        assert_eq!(refresh_margin(life), margin, "life {life:?}");
    }
    let now = Instant::now();
    let short = Token::new("t".into(), now, Duration::ZERO);
    assert_eq!(short.refresh_at, now + MIN_USE, "never fetched in a loop");
}

#[test]
fn answers_without_a_usable_bearer_token_are_refused() {
    let ok = read_token("i", &json!({"access_token": "abc", "token_type": "bearer"}));
    assert_eq!(ok.unwrap(), ("abc".to_string(), DEFAULT_LIFE));
    let text_life = read_token("i", &json!({"access_token": "abc", "expires_in": "60"}));
    assert_eq!(text_life.unwrap().1, Duration::from_secs(60));
    for body in [
        json!({}),
        json!({"access_token": ""}),
        json!({"access_token": "a b"}),
        json!({"access_token": "abc", "token_type": "DPoP"}),
        json!({"access_token": "abc", "expires_in": -1}),
    ] {
        let err = read_token("i", &body).unwrap_err();
        assert!(matches!(err, TokenError::Unusable { .. }), "{body}: {err}");
    }
}

#[test]
fn registrations_are_checked_field_by_field() {
    let good = ClientCredentials {
        kind: KIND.into(),
        issuer: "https://idp.example.com/tenant".into(),
        client_id: "gateway".into(),
        secret_env: "UPSTREAM_SECRET".into(),
        scope: Some("mcp:tools mcp:read".into()),
        resource: "https://tools.example.com/mcp".into(),
    };
    assert_eq!(good.validate(), Ok(()));
    let with = |f: fn(&mut ClientCredentials)| {
        let mut c = good.clone();
        f(&mut c);
        c.validate().unwrap_err()
    };
    use ClientCredentialsError as E;
    assert!(matches!(
        with(|c| c.issuer = "ftp://idp".into()),
        E::Issuer(_)
    ));
    assert!(matches!(
        with(|c| c.issuer = "idp.example".into()),
        E::Issuer(_)
    ));
    assert!(matches!(
        with(|c| c.issuer = "https://idp/?x=1".into()),
        E::Issuer(_)
    ));
    assert!(matches!(
        with(|c| c.resource = "/mcp".into()),
        E::Resource(_)
    ));
    assert!(matches!(
        with(|c| c.resource = "https://t/mcp#x".into()),
        E::Resource(_)
    ));
    assert_eq!(with(|c| c.client_id = String::new()), E::ClientId);
    assert_eq!(with(|c| c.secret_env = "A-B".into()), E::SecretEnv);
    assert_eq!(with(|c| c.secret_env = String::new()), E::SecretEnv);
    assert_eq!(with(|c| c.scope = Some(String::new())), E::Scope);
    assert_eq!(with(|c| c.scope = Some("a  b".into())), E::Scope);
    assert_eq!(with(|c| c.scope = Some("a\"b".into())), E::Scope);
}

#[test]
fn form_encoding_keeps_only_unreserved_bytes() {
    assert_eq!(form_encode("a-b_c.d*"), "a-b_c.d*");
    assert_eq!(form_encode("a b:c/é"), "a+b%3Ac%2F%C3%A9");
}
