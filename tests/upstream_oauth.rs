//! An upstream MCP server registered with `auth: {"type":
//! "oauth-client-credentials", …}`: the gateway obtains its own token from
//! a real OpenID provider (`tests/oidc/provider.mjs`, client `cg-service`,
//! the client credentials grant with the upstream as RFC 8707 resource)
//! and sends it to an upstream that, like a real resource server, answers
//! 401 to anything but a valid JWT of that provider whose `aud` is its own
//! URL (`tests/upstreams/oauth_protected.mjs`, the official TypeScript SDK
//! with `jose`).
//!
//! Registration lists the upstream's tools and calls reach it with the
//! gateway's token (never the agent's key); one token serves every call
//! and listing until it nears its expiry, then one new token serves every
//! concurrent call; each upstream gets a token for itself only; a wrong
//! client secret fails the call with -32202 and the provider's error, never
//! the secret; bad registrations are refused with 400; the registration
//! survives a restart and shows no secret.
//!
//! The provider and the upstream are installed by `tests/oidc/setup.sh` and
//! `tests/upstreams/setup.sh` (here when missing). Without network, outside
//! CI, the tests skip loudly; with `CI=true` a failed install fails them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::oidc::{OidcProvider, Options};
use common::setup::{upstreams_dir, upstreams_installed};
use common::{Tenant, TestGateway};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

/// The variable the registrations name for `cg-service`'s secret: one the
/// test process already has (cargo sets it for test runs; the crate forbids
/// the `unsafe` needed to set a variable here), whose value the provider is
/// started with as that client's secret.
const SECRET_ENV: &str = "CARGO_MANIFEST_DIR";
/// A variable holding something else: a wrong secret.
const WRONG_ENV: &str = "CARGO_PKG_NAME";

fn secret() -> String {
    std::env::var(SECRET_ENV).unwrap_or_else(|_| panic!("{SECRET_ENV} is set by cargo"))
}

fn wrong() -> String {
    std::env::var(WRONG_ENV).unwrap_or_else(|_| panic!("{WRONG_ENV} is set by cargo"))
}

fn installed() -> bool {
    common::oidc::installed() && upstreams_installed()
}

/// A provider whose `cg-service` secret is the value of [`SECRET_ENV`].
async fn provider(options: Options) -> OidcProvider {
    OidcProvider::start(Options {
        service_secret: Some(secret()),
        ..options
    })
    .await
}

/// The protected upstream, with its stderr lines.
struct Protected {
    /// `http://127.0.0.1:PORT/mcp`, also the resource its tokens name.
    url: String,
    log: Arc<Mutex<Vec<String>>>,
    _child: tokio::process::Child,
}

impl Protected {
    async fn start(issuer: &str) -> Protected {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = tokio::process::Command::new("node")
            .arg(upstreams_dir().join("oauth_protected.mjs"))
            .arg(port.to_string())
            .arg(issuer)
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (stderr, lines) = (child.stderr.take().unwrap(), Arc::clone(&log));
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                lines.lock().unwrap().push(line);
            }
        });
        let up = Protected {
            url: format!("http://127.0.0.1:{port}/mcp"),
            log,
            _child: child,
        };
        up.wait_for("listening").await;
        up
    }

    fn count(&self, prefix: &str) -> usize {
        let log = self.log.lock().unwrap();
        log.iter().filter(|l| l.starts_with(prefix)).count()
    }

    async fn wait_for(&self, prefix: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.count(prefix) == 0 {
            assert!(
                Instant::now() < deadline,
                "never `{prefix}`: {:?}",
                self.log.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The `auth` object of a registration for `up` through `provider`.
fn oauth(provider: &OidcProvider, up: &Protected, secret_env: &str) -> Value {
    json!({
        "type": "oauth-client-credentials",
        "issuer": provider.issuer,
        "clientId": "cg-service",
        "secretEnv": secret_env,
        "scope": "mcp:tools",
        "resource": up.url,
    })
}

/// Registers `up` as `name` for `acme`; the answer.
async fn register(g: &TestGateway, name: &str, up: &Protected, auth: &Value) -> Value {
    let (status, server) = g
        .admin(
            Method::POST,
            "/admin/orgs/acme/mcp-servers",
            Some(
                json!({"name": name, "transport": "streamable-http", "url": up.url, "auth": auth}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{server}");
    server
}

async fn echo(g: &TestGateway, t: &Tenant, prefix: &str, message: &str) -> Value {
    let body = g
        .call_tool(t, &format!("{prefix}.echo"), json!({"message": message}))
        .await;
    assert_eq!(
        body["result"]["content"][0]["text"],
        format!("echo {message}"),
        "{body}"
    );
    body
}

/// What the upstream `prefix` saw, asked through the gateway.
async fn seen(g: &TestGateway, t: &Tenant, prefix: &str) -> Value {
    let body = g.call_tool(t, &format!("{prefix}.seen"), json!({})).await;
    let text = body["result"]["content"][0]["text"].as_str();
    serde_json::from_str(text.unwrap_or_else(|| panic!("{body}"))).unwrap()
}

/// A gateway without the background refresh (only what a test does lists
/// or calls an upstream) and its tenant.
async fn gateway() -> (TestGateway, Tenant) {
    let g = TestGateway::start_with(|c| c.upstream_refresh.interval_secs = 0).await;
    let t = g.tenant("acme").await;
    (g, t)
}

#[tokio::test]
async fn an_upstream_requiring_the_gateways_own_token_is_listed_and_called() {
    if !installed() {
        return;
    }
    let provider = provider(Options::default()).await;
    let (docs, other) = (
        Protected::start(&provider.issuer).await,
        Protected::start(&provider.issuer).await,
    );
    let (g, t) = gateway().await;
    let auth = oauth(&provider, &docs, SECRET_ENV);
    let server = register(&g, "docs", &docs, &auth).await;
    assert_eq!(server["health"], "healthy", "{server}");
    assert_eq!(server["toolCount"], 2, "{server}");
    assert_eq!(server["auth"], auth, "shown as registered");
    assert!(!server.to_string().contains(&secret()), "{server}");
    register(&g, "other", &other, &oauth(&provider, &other, SECRET_ENV)).await;

    let names = g.tool_names(&t).await;
    for tool in ["docs.echo", "docs.seen", "other.echo"] {
        assert!(names.contains(&tool.to_string()), "{names:?}");
    }
    for i in 0..5 {
        echo(&g, &t, "docs", &format!("hi {i}")).await;
    }
    echo(&g, &t, "other", "there").await;
    docs.wait_for("standing stream open").await;

    let saw = seen(&g, &t, "docs").await;
    assert_eq!(saw["claims"]["aud"], docs.url.as_str(), "{saw}");
    assert_eq!(saw["claims"]["client_id"], "cg-service", "{saw}");
    assert_eq!(saw["claims"]["scope"], "mcp:tools", "{saw}");
    assert_eq!(
        saw["tokens"], 1,
        "the listing, six calls and the standing stream share one token: {saw}"
    );
    assert_eq!(saw["refused"], 0, "no request went without it: {saw}");
    assert_eq!(saw["agentKeySeen"], false, "{saw}");
    let saw_other = seen(&g, &t, "other").await;
    assert_eq!(
        saw_other["claims"]["aud"],
        other.url.as_str(),
        "{saw_other}"
    );
    assert_eq!(saw_other["tokens"], 1, "{saw_other}");
    assert_eq!(
        saw_other["refused"], 0,
        "never sent the other's token: {saw_other}"
    );
}

#[tokio::test]
async fn the_token_is_replaced_before_it_expires_once_for_concurrent_calls() {
    if !installed() {
        return;
    }
    // Four-second tokens are replaced once two seconds are left.
    let options = Options {
        access_token_ttl: Some(4),
        ..Options::default()
    };
    let provider = provider(options).await;
    let docs = Protected::start(&provider.issuer).await;
    let (g, t) = gateway().await;
    register(&g, "docs", &docs, &oauth(&provider, &docs, SECRET_ENV)).await;
    assert_eq!(seen(&g, &t, "docs").await["tokens"], 1);

    let g = Arc::new(g);
    for round in 2..=3 {
        tokio::time::sleep(Duration::from_millis(2300)).await;
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..8 {
            let (g, t) = (Arc::clone(&g), t.clone());
            calls.spawn(async move { echo(&g, &t, "docs", &format!("{round}-{i}")).await });
        }
        calls.join_all().await;
        let saw = seen(&g, &t, "docs").await;
        assert_eq!(
            saw["tokens"], round,
            "round {round}: one new token for eight concurrent calls: {saw}"
        );
        assert_eq!(saw["refused"], 0, "no expired token was sent: {saw}");
    }
}

#[tokio::test]
async fn a_wrong_client_secret_fails_the_call_with_the_providers_error_and_no_secret() {
    if !installed() {
        return;
    }
    let provider = provider(Options::default()).await;
    let docs = Protected::start(&provider.issuer).await;
    let (g, t) = gateway().await;
    let server = register(&g, "docs", &docs, &oauth(&provider, &docs, SECRET_ENV)).await;
    echo(&g, &t, "docs", "before").await;

    // The secret the registration names changes under the running gateway.
    let id = server["id"].as_str().unwrap().to_string();
    g.gw.store
        .read(move |c| {
            c.execute(
                "UPDATE mcp_servers SET oauth_secret_env = ?1 WHERE id = ?2",
                cedargate::params![WRONG_ENV, id],
            )
        })
        .await
        .unwrap();
    g.gw.upstreams.invalidate_all();
    let mut messages = Vec::new();
    for _ in 0..3 {
        let body = g
            .call_tool(&t, "docs.echo", json!({"message": "after"}))
            .await;
        assert_eq!(body["error"]["code"], -32202, "{body}");
        let message = body["error"]["message"].as_str().unwrap().to_string();
        assert!(message.contains("invalid_client"), "{message}");
        assert!(message.contains(&provider.issuer), "{message}");
        assert!(!message.contains(&wrong()), "{message}");
        assert!(!message.contains(&secret()), "{message}");
        messages.push(message);
    }
    assert!(messages.iter().all(|m| *m == messages[0]), "{messages:?}");
    eprintln!(
        "a call with a wrong client secret answered: {}",
        messages[0]
    );
    assert_eq!(docs.count("refused"), 0, "nothing was sent without a token");
}

#[tokio::test]
async fn a_registration_whose_secret_is_refused_is_stored_unreachable_with_the_reason() {
    if !installed() {
        return;
    }
    let provider = provider(Options::default()).await;
    let docs = Protected::start(&provider.issuer).await;
    let (g, t) = gateway().await;
    let server = register(&g, "docs", &docs, &oauth(&provider, &docs, WRONG_ENV)).await;
    assert_eq!(server["health"], "unreachable", "{server}");
    let error = server["lastError"].as_str().unwrap();
    assert!(error.contains("invalid_client"), "{error}");
    assert!(!error.contains(&wrong()), "{error}");
    assert!(!server.to_string().contains(&wrong()), "{server}");
    assert!(!g.tool_names(&t).await.contains(&"docs.echo".to_string()));
    assert_eq!(docs.count("refused"), 0, "nothing was sent without a token");
}

#[tokio::test]
async fn bad_oauth_registrations_are_refused_and_nothing_is_stored() {
    if !installed() {
        return;
    }
    let (g, _t) = gateway().await;
    let good = json!({
        "type": "oauth-client-credentials", "issuer": "http://127.0.0.1:9/",
        "clientId": "cg-service", "secretEnv": SECRET_ENV, "resource": "http://127.0.0.1:9/mcp",
    });
    let with = |key: &str, value: Value| {
        let mut auth = good.clone();
        auth[key] = value;
        auth
    };
    let without = |key: &str| {
        let mut auth = good.clone();
        auth.as_object_mut().unwrap().remove(key);
        auth
    };
    let cases = [
        (with("issuer", json!("ftp://idp.example")), "auth.issuer"),
        (with("issuer", json!("idp.example")), "auth.issuer"),
        (with("resource", json!("mcp")), "auth.resource"),
        (
            with("resource", json!("https://u.example/mcp#x")),
            "auth.resource",
        ),
        (with("clientId", json!("")), "auth.clientId"),
        (with("secretEnv", json!("NOT-A-NAME")), "auth.secretEnv"),
        (with("scope", json!("a  b")), "auth.scope"),
        (with("clientSecret", json!("plain")), "clientSecret"),
        (without("resource"), "resource"),
        (without("clientId"), "clientId"),
        (with("type", json!("oauth")), "oauth-client-credentials"),
    ];
    for (auth, named) in cases {
        let (status, body) = g
            .admin(
                Method::POST,
                "/admin/orgs/acme/mcp-servers",
                Some(json!({"name": "docs", "transport": "streamable-http",
                            "url": "http://127.0.0.1:9/mcp", "auth": auth})),
            )
            .await;
        assert_eq!(status, 400, "{auth}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{auth}: {message}");
    }
    let (_, list) = g
        .admin(Method::GET, "/admin/orgs/acme/mcp-servers", None)
        .await;
    assert_eq!(list["servers"], json!([]), "{list}");
}

#[tokio::test]
async fn the_registration_survives_a_restart_and_shows_no_secret() {
    if !installed() {
        return;
    }
    let provider = provider(Options::default()).await;
    let docs = Protected::start(&provider.issuer).await;
    let (g, t) = gateway().await;
    let auth = oauth(&provider, &docs, SECRET_ENV);
    let id = register(&g, "docs", &docs, &auth).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    echo(&g, &t, "docs", "before").await;

    let old_base = g.base.clone();
    let dir = g.stop().await.into_dir();
    let g = TestGateway::start_in(dir, |c| c.upstream_refresh.interval_secs = 0).await;
    let t = Tenant {
        mcp_url: t.mcp_url.replace(&old_base, &g.base),
        ..t
    };
    let (status, shown) = g
        .admin(
            Method::GET,
            &format!("/admin/orgs/acme/mcp-servers/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["auth"], auth, "{shown}");
    assert!(!shown.to_string().contains(&secret()), "{shown}");
    echo(&g, &t, "docs", "after").await;
    let saw = seen(&g, &t, "docs").await;
    assert_eq!(saw["tokens"], 2, "a new process, a new token: {saw}");
    assert_eq!(saw["refused"], 0, "{saw}");
}
