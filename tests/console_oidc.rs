//! Console sign-in with a real OpenID provider (`tests/oidc/provider.mjs`)
//! through the real server: the authorization code flow with PKCE followed
//! headlessly, redirect by redirect, with one cookie jar across the
//! provider and the gateway, as a browser would. Alice (group `sre`) signs
//! in as an admin and changes something, which the trail records as hers;
//! Bob (group `dev`) is refused unless `dev` is an auditor group, and then
//! only reads; a replayed, forged or other browser's state, the provider's
//! `access_denied` and a failed code exchange open no session; and
//! `shared_tokens = false` removes the token form and refuses token
//! sign-ins.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

use cedargate::console::oidc::config::OidcConfig;
use common::oidc::{CONSOLE, OidcProvider, Options};
use common::{ADMIN_TOKEN, TestGateway};
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{StatusCode, Url};

const AUDITOR_TOKEN: &str = "oidc-auditor-token-0123456789abcdef0123";

/// A provider and a gateway whose console signs in with it.
struct Setup {
    provider: OidcProvider,
    g: TestGateway,
    /// Holds the client secret's file.
    _secrets: tempfile::TempDir,
}

/// `cg-console` as the console's client: `sre` are admins; its secret in
/// a file (the served binary's test reads it from the environment).
fn console_client(issuer: &str, secret_file: std::path::PathBuf) -> OidcConfig {
    OidcConfig {
        issuer: issuer.into(),
        display_name: Some("Example SSO".into()),
        client_id: CONSOLE.id.into(),
        client_secret_file: Some(secret_file),
        admin_groups: vec!["sre".into()],
        ..OidcConfig::default()
    }
}

/// A provider and a gateway whose console signs in with it; `tweak` may
/// change the gateway's config.
async fn start(tweak: impl FnOnce(&mut cedargate::config::Config)) -> Option<Setup> {
    if !common::oidc::installed() {
        return None;
    }
    let secrets = tempfile::tempdir().unwrap();
    let secret_file = secrets.path().join("console-secret");
    std::fs::write(&secret_file, format!("{}\n", CONSOLE.secret.unwrap())).unwrap();
    let provider = OidcProvider::start(Options::default()).await;
    let issuer = provider.issuer.clone();
    let g = TestGateway::start_with(|c| {
        c.auditor_token = Some(AUDITOR_TOKEN.into());
        c.console.oidc = Some(console_client(&issuer, secret_file));
        tweak(c);
    })
    .await;
    let callback = format!("{}/console/callback", g.base);
    provider.set_console_redirects(&[&callback]).await;
    Some(Setup {
        provider,
        g,
        _secrets: secrets,
    })
}

/// A headless browser: no redirect followed on its own, one cookie jar
/// for every server (cookies of 127.0.0.1 are shared across ports, as a
/// browser shares them).
struct Browser {
    http: reqwest::Client,
    jar: BTreeMap<String, String>,
}

/// Where a sign-in stopped: the gateway's callback URL and its answer.
struct Landed {
    callback: Url,
    status: StatusCode,
    set_cookies: Vec<String>,
    page: String,
}

impl Browser {
    fn new() -> Browser {
        Browser {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            jar: BTreeMap::new(),
        }
    }

    fn cookie_header(&self) -> String {
        let pairs: Vec<String> = self.jar.iter().map(|(n, v)| format!("{n}={v}")).collect();
        pairs.join("; ")
    }

    fn store(&mut self, resp: &reqwest::Response) -> Vec<String> {
        let mut set = Vec::new();
        for value in resp.headers().get_all(SET_COOKIE) {
            let text = value.to_str().unwrap().to_string();
            let pair = text.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            let gone = value.is_empty()
                || text.contains("Max-Age=0")
                || text
                    .to_ascii_lowercase()
                    .contains("expires=thu, 01 jan 1970");
            if gone {
                self.jar.remove(name);
            } else {
                self.jar.insert(name.to_string(), value.to_string());
            }
            set.push(text);
        }
        set
    }

    async fn get(&mut self, url: &Url) -> reqwest::Response {
        let resp = self
            .http
            .get(url.clone())
            .header(COOKIE, self.cookie_header())
            .send()
            .await
            .unwrap();
        self.store(&resp);
        resp
    }

    /// Clicks "Sign in with …" on the gateway at `base` and signs `user`
    /// in at the provider (named in `login_hint`, as the user would pick
    /// their account), following redirects until the provider sends the
    /// browser back to `/console/callback`; answers that URL without
    /// visiting it.
    async fn follow_to_callback(&mut self, base: &str, user: &str) -> Url {
        let (_, page) = self.page(&format!("{base}/console/login")).await;
        assert!(page.contains("Sign in with Example SSO"), "{page}");
        let mut at = Url::parse(&format!("{base}/console/login/idp")).unwrap();
        for _ in 0..16 {
            if at.path() == "/console/callback" {
                return at;
            }
            let resp = self.get(&at).await;
            assert!(
                resp.status().is_redirection(),
                "{at}: {} {}",
                resp.status(),
                resp.text().await.unwrap()
            );
            let location = resp.headers()[LOCATION].to_str().unwrap().to_string();
            let next = at.join(&location).unwrap();
            at = if next.path() == "/auth" && !next.as_str().starts_with(base) {
                let mut hinted = next.clone();
                hinted.query_pairs_mut().append_pair("login_hint", user);
                hinted
            } else {
                next
            };
        }
        panic!("the sign-in did not come back to the console in 16 steps");
    }

    /// Visits the callback URL.
    async fn land(&mut self, callback: Url) -> Landed {
        let resp = self.get(&callback).await;
        let status = resp.status();
        let set_cookies = resp
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect();
        Landed {
            callback,
            status,
            set_cookies,
            page: resp.text().await.unwrap(),
        }
    }

    /// A whole sign-in of `user`.
    async fn sign_in(&mut self, base: &str, user: &str) -> Landed {
        let callback = self.follow_to_callback(base, user).await;
        self.land(callback).await
    }

    /// `GET url`: status and body.
    async fn page(&mut self, url: &str) -> (StatusCode, String) {
        let resp = self.get(&Url::parse(url).unwrap()).await;
        (resp.status(), resp.text().await.unwrap())
    }

    /// POSTs a form (with the page's CSRF token).
    async fn post(&mut self, url: &str, pairs: &[(&str, &str)]) -> reqwest::Response {
        let mut body = Url::parse("http://form.invalid/").unwrap();
        body.query_pairs_mut().extend_pairs(pairs);
        let resp = self
            .http
            .post(url)
            .header(COOKIE, self.cookie_header())
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body.query().unwrap_or_default().to_string())
            .send()
            .await
            .unwrap();
        self.store(&resp);
        resp
    }

    fn signed_in(&self) -> bool {
        self.jar.contains_key("cg_console")
    }
}

/// The value of the first `name="csrf"` field of a page.
fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    html[at..].split('"').next().unwrap().to_string()
}

/// The console's operator records, newest last: (action, notes).
async fn console_records(g: &TestGateway) -> Vec<(String, serde_json::Value)> {
    g.decisions()
        .await
        .into_iter()
        .filter(|d| d.record.action.starts_with("console:"))
        .map(|d| {
            let notes = serde_json::from_str(&d.record.notes).unwrap();
            (d.record.action, notes)
        })
        .collect()
}

#[tokio::test]
async fn an_sre_signs_in_as_an_admin_and_her_change_is_recorded_as_hers() {
    let Some(Setup { provider, g, .. }) = start(|_| {}).await else {
        return;
    };
    let mut browser = Browser::new();
    let landed = browser.sign_in(&g.base, "alice").await;
    assert_eq!(landed.status, StatusCode::OK, "{}", landed.page);
    assert!(
        landed.page.contains("Alice Example (alice@example.com)"),
        "{}",
        landed.page
    );
    assert!(
        landed.page.contains("url=/console"),
        "the page moves on: {}",
        landed.page
    );
    // The session cookie is the token sign-in's; the binding cookie is cleared.
    let session = landed
        .set_cookies
        .iter()
        .find(|c| c.starts_with("cg_console="))
        .expect("a session cookie");
    for flag in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=28800",
    ] {
        assert!(session.contains(flag), "{session}");
    }
    assert!(
        !browser.jar.contains_key("cg_console_idp"),
        "binding cleared"
    );

    let (status, html) = browser.page(&format!("{}/console", g.base)).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(
        html.contains("Alice Example (alice@example.com)</span>, admin"),
        "{html}"
    );
    let (status, html) = browser.page(&format!("{}/console/policies", g.base)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("id=\"reload\""), "an admin page: {html}");
    let csrf = csrf_of(&html);
    let url = format!("{}/console/policies/reload", g.base);
    let resp = browser.post(&url, &[("csrf", &csrf)]).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let records = console_records(&g).await;
    assert_eq!(records.len(), 1);
    let (action, notes) = &records[0];
    assert_eq!(action, "console:reload_policies");
    let operator = &notes["operator"];
    assert_eq!(operator["issuer"], provider.issuer.as_str(), "{notes}");
    assert_eq!(operator["subject"], "alice", "{notes}");
    assert_eq!(operator["email"], "alice@example.com", "{notes}");

    // Signing out ends it like a token sign-in.
    let resp = browser
        .post(&format!("{}/console/logout", g.base), &[("csrf", &csrf)])
        .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let (status, _) = browser.page(&format!("{}/console", g.base)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn a_person_in_neither_group_is_refused_and_an_auditor_group_only_reads() {
    let Some(Setup {
        provider: _provider,
        g,
        ..
    }) = start(|_| {}).await
    else {
        return;
    };
    let mut browser = Browser::new();
    let landed = browser.sign_in(&g.base, "bob").await;
    assert_eq!(landed.status, StatusCode::FORBIDDEN, "{}", landed.page);
    assert!(
        landed
            .page
            .contains("Bob Builder (bob@example.com) is in none of the groups"),
        "{}",
        landed.page
    );
    assert!(!browser.signed_in(), "no session");
    let (status, _) = browser.page(&format!("{}/console", g.base)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "sent to sign in");

    let Some(Setup {
        provider: _provider,
        g,
        ..
    }) = start(|c| {
        if let Some(oidc) = c.console.oidc.as_mut() {
            oidc.auditor_groups = vec!["dev".into()];
        }
    })
    .await
    else {
        return;
    };
    let mut browser = Browser::new();
    let landed = browser.sign_in(&g.base, "bob").await;
    assert_eq!(landed.status, StatusCode::OK, "{}", landed.page);
    let (_, html) = browser.page(&format!("{}/console/policies", g.base)).await;
    assert!(
        html.contains("Bob Builder (bob@example.com)</span>, auditor"),
        "{html}"
    );
    assert!(!html.contains("id=\"reload\""), "{html}");
    let url = format!("{}/console/policies/reload", g.base);
    let resp = browser.post(&url, &[("csrf", &csrf_of(&html))]).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert!(resp.text().await.unwrap().contains("auditors only read"));
    assert!(console_records(&g).await.is_empty());
}

#[tokio::test]
async fn a_replayed_forged_or_other_browsers_state_opens_no_session() {
    let Some(Setup {
        provider: _provider,
        g,
        ..
    }) = start(|_| {}).await
    else {
        return;
    };
    // Replayed: the callback of a finished sign-in, visited again.
    let mut browser = Browser::new();
    let landed = browser.sign_in(&g.base, "alice").await;
    assert_eq!(landed.status, StatusCode::OK, "{}", landed.page);
    let mut replayer = Browser::new();
    replayer.jar = browser.jar.clone();
    replayer.jar.remove("cg_console");
    let again = replayer.land(landed.callback.clone()).await;
    assert_eq!(again.status, StatusCode::FORBIDDEN, "{}", again.page);
    assert!(again.page.contains("already used"), "{}", again.page);
    assert!(!replayer.signed_in());

    // Forged: a state this gateway never issued, with a real code.
    let mut forger = Browser::new();
    let callback = forger.follow_to_callback(&g.base, "alice").await;
    let mut forged = callback.clone();
    let pairs: Vec<(String, String)> = callback
        .query_pairs()
        .map(|(k, v)| {
            let v = if k == "state" {
                "f".repeat(64)
            } else {
                v.into_owned()
            };
            (k.into_owned(), v)
        })
        .collect();
    forged.query_pairs_mut().clear().extend_pairs(pairs);
    let landed = forger.land(forged).await;
    assert_eq!(landed.status, StatusCode::FORBIDDEN, "{}", landed.page);
    assert!(landed.page.contains("unknown, expired or was already used"));
    assert!(!forger.signed_in());
    // The forgery did not spend the real sign-in, which still finishes.
    let landed = forger.land(callback).await;
    assert_eq!(landed.status, StatusCode::OK, "{}", landed.page);

    // An answer without the `iss` the provider says it always sends
    // (RFC 9207: a mix-up with another provider).
    let mut mixed = Browser::new();
    let callback = mixed.follow_to_callback(&g.base, "alice").await;
    assert!(
        callback.query_pairs().any(|(k, _)| k == "iss"),
        "{callback}"
    );
    let mut stripped = callback.clone();
    let pairs: Vec<(String, String)> = callback
        .query_pairs()
        .filter(|(k, _)| k != "iss")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    stripped.query_pairs_mut().clear().extend_pairs(pairs);
    let landed = mixed.land(stripped).await;
    assert_eq!(landed.status, StatusCode::FORBIDDEN, "{}", landed.page);
    assert!(landed.page.contains("its `iss`"), "{}", landed.page);
    assert!(!mixed.signed_in());

    // Another browser: a victim handed the attacker's callback URL.
    let mut attacker = Browser::new();
    let callback = attacker.follow_to_callback(&g.base, "bob").await;
    let mut victim = Browser::new();
    let landed = victim.land(callback).await;
    assert_eq!(landed.status, StatusCode::FORBIDDEN, "{}", landed.page);
    assert!(landed.page.contains("another browser"), "{}", landed.page);
    assert!(!victim.signed_in());
}

#[tokio::test]
async fn the_providers_refusal_and_a_failed_exchange_open_no_session() {
    let Some(Setup {
        provider: _provider,
        g,
        ..
    }) = start(|_| {}).await
    else {
        return;
    };
    // An account the provider does not know: `error=access_denied`.
    let mut browser = Browser::new();
    let landed = browser.sign_in(&g.base, "mallory").await;
    assert_eq!(landed.status, StatusCode::FORBIDDEN, "{}", landed.page);
    assert!(
        landed.page.contains("did not sign you in: access_denied"),
        "{}",
        landed.page
    );
    assert!(!browser.signed_in());

    let Some(Setup {
        provider: _provider,
        g,
        ..
    }) = start(|c| {
        if let Some(oidc) = c.console.oidc.as_mut() {
            let wrong = oidc
                .client_secret_file
                .as_ref()
                .unwrap()
                .with_file_name("wrong");
            std::fs::write(&wrong, "not-the-secret").unwrap();
            oidc.client_secret_file = Some(wrong);
        }
    })
    .await
    else {
        return;
    };
    let mut browser = Browser::new();
    let landed = browser.sign_in(&g.base, "alice").await;
    assert_eq!(landed.status, StatusCode::BAD_GATEWAY, "{}", landed.page);
    assert!(
        landed.page.contains("could not be exchanged"),
        "{}",
        landed.page
    );
    assert!(!browser.signed_in());
}

#[tokio::test]
async fn without_shared_tokens_the_token_form_is_gone_and_refused() {
    let Some(Setup {
        provider: _provider,
        g,
        ..
    }) = start(|c| c.console.shared_tokens = false).await
    else {
        return;
    };
    let mut browser = Browser::new();
    let (status, html) = browser.page(&format!("{}/console/login", g.base)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Sign in with Example SSO"), "{html}");
    assert!(!html.contains("id=\"token\""), "no token form: {html}");
    assert!(
        !browser.jar.contains_key("cg_console_login"),
        "no form cookie"
    );
    for token in [ADMIN_TOKEN, AUDITOR_TOKEN] {
        let url = format!("{}/console/login", g.base);
        let resp = browser.post(&url, &[("token", token), ("csrf", "x")]).await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        assert!(resp.text().await.unwrap().contains("turned off"));
        assert!(!browser.signed_in());
    }
    // The identity provider still signs people in, and the admin token
    // still opens the admin API.
    let landed = browser.sign_in(&g.base, "alice").await;
    assert_eq!(landed.status, StatusCode::OK, "{}", landed.page);
    let resp = g
        .http
        .get(format!("{}/admin/policies", g.base))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    // Neither tokens nor an identity provider: no console at all.
    let g = TestGateway::start_with(|c| c.console.shared_tokens = false).await;
    let (status, _) = Browser::new()
        .page(&format!("{}/console/login", g.base))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_gateway_without_the_client_secret_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = cedargate::config::Config {
        data_dir: dir.path().join("data"),
        policies_dir: common::repo().join("policies"),
        schema_file: common::repo().join("schemas/gateway.cedarschema"),
        demo_tenant: false,
        ..cedargate::config::Config::default()
    };
    config.database.url = common::database_url_for(dir.path());
    config.console.oidc = Some(OidcConfig {
        client_secret_file: None,
        client_secret_env: Some("CG_TEST_CONSOLE_OIDC_UNSET".into()),
        ..console_client("http://127.0.0.1:9", dir.path().join("unused"))
    });
    let err = cedargate::server::prepare(config)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("`CG_TEST_CONSOLE_OIDC_UNSET`"), "{err}");
    common::drop_database_of(dir.path());
}

/// The served binary, its console's client secret in its environment:
/// Alice signs in.
#[tokio::test]
async fn the_served_binary_reads_the_client_secret_from_its_environment() {
    if !common::oidc::installed() {
        return;
    }
    let provider = OidcProvider::start(Options::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut text = format!(
        "listen = \"127.0.0.1:0\"\ndata_dir = {:?}\npolicies_dir = {:?}\nschema_file = {:?}\ndemo_tenant = false\n\n[console.oidc]\nissuer = {:?}\ndisplay_name = \"Example SSO\"\nclient_id = \"cg-console\"\nclient_secret_env = \"CG_TEST_CONSOLE_SECRET\"\nadmin_groups = [\"sre\"]\n",
        dir.path().join("data"),
        common::repo().join("policies"),
        common::repo().join("schemas/gateway.cedarschema"),
        provider.issuer,
    );
    if let Some(url) = common::database_url_for(dir.path()) {
        text.push_str(&format!("\n[database]\nurl = {url:?}\n"));
    }
    let config = dir.path().join("cedargate.toml");
    std::fs::write(&config, text).unwrap();
    let mut child = common::cli::bin()
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .env_remove("CEDARGATE_ADMIN_TOKEN")
        .env_remove("CEDARGATE_AUDITOR_TOKEN")
        .env("CG_TEST_CONSOLE_SECRET", CONSOLE.secret.unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let console = lines
        .by_ref()
        .map(Result::unwrap)
        .find_map(|l| l.strip_prefix("Console URL: ").map(str::to_string))
        .expect("serve prints the console's URL");
    std::thread::spawn(move || for _ in lines {});
    let base = console.trim_end_matches("/console").to_string();
    provider
        .set_console_redirects(&[&format!("{base}/console/callback")])
        .await;
    let mut browser = Browser::new();
    let landed = browser.sign_in(&base, "alice").await;
    let (status, html) = browser.page(&format!("{base}/console")).await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(landed.status, StatusCode::OK, "{}", landed.page);
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(
        html.contains("Alice Example (alice@example.com)</span>, admin"),
        "{html}"
    );
    common::drop_database_of(dir.path());
}
