//! A real OpenID provider for the OAuth tests (`tests/oidc/provider.mjs`,
//! panva's `oidc-provider`): installed once per test binary by `setup.sh`,
//! started as a process on 127.0.0.1, killed on drop; and the OAuth client
//! side the tests need against it (client credentials, authorization code
//! with PKCE signed in without a browser, refresh, introspection,
//! revocation, registration, key rotation).
//!
//! The provider's clients, users and options are described in the header of
//! `provider.mjs`. Sign-in follows the provider's redirects by hand with a
//! small cookie jar (a name → value map, which is all this one provider
//! needs) rather than reqwest's `cookies` feature: no new dependency, and
//! the final redirect to the client's `redirect_uri` must not be followed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::{StatusCode, Url, header};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Where the provider script and its install live.
pub fn oidc_dir() -> PathBuf {
    super::repo().join("tests/oidc")
}

/// Runs the installer once per test binary: false when it failed outside
/// CI (the test then skips); under `CI=true` a failure fails the test.
pub fn installed() -> bool {
    static SETUP: OnceLock<Result<(), String>> = OnceLock::new();
    super::setup::install_once(
        &SETUP,
        &oidc_dir().join("setup.sh"),
        "the OpenID provider (oidc-provider)",
    )
}

/// An OAuth client registered with the provider.
#[derive(Debug, Clone, Copy)]
pub struct Client<'a> {
    pub id: &'a str,
    /// `None` for a public client (`token_endpoint_auth_method: none`).
    pub secret: Option<&'a str>,
}

/// The confidential machine client (client credentials).
pub const SERVICE: Client<'static> = Client {
    id: "cg-service",
    secret: Some("cg-service-secret"),
};
/// The public native client (authorization code + PKCE + refresh).
pub const IDE: Client<'static> = Client {
    id: "cg-ide",
    secret: None,
};
/// The confidential web client (authorization code + PKCE).
pub const CONSOLE: Client<'static> = Client {
    id: "cg-console",
    secret: Some("cg-console-secret"),
};
/// The resource server's own credentials (introspection, no grants).
pub const GATEWAY: Client<'static> = Client {
    id: "cg-gateway",
    secret: Some("cg-gateway-secret"),
};

/// The credentials of a known client id; any other (a registered one) is
/// taken as public.
pub fn client_for(id: &str) -> Client<'_> {
    let known = [SERVICE, IDE, CONSOLE, GATEWAY];
    let secret = known.iter().find(|c| c.id == id).and_then(|c| c.secret);
    Client { id, secret }
}

/// How to start the provider; `Default` = any port, keys in the handle's
/// directory, one-hour tokens, any `http://127.0.0.1:` resource as JWT.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// 0 = any free port.
    pub port: u16,
    /// The private JWKS file (kept across restarts); default: a fresh one.
    pub keys_file: Option<PathBuf>,
    pub access_token_ttl: Option<u64>,
    pub resource_prefixes: Option<Vec<String>>,
    /// Tokens for resources starting with it are opaque.
    pub opaque_resource_prefix: Option<String>,
    pub console_redirect_uris: Option<Vec<String>>,
    /// `cg-service`'s secret instead of [`SERVICE`]'s.
    pub service_secret: Option<String>,
    /// Show the HTML sign-in form when a request has no `login_hint`.
    pub login_page: bool,
}

impl Options {
    fn to_json(&self) -> Value {
        let mut config = json!({ "port": self.port, "loginPage": self.login_page });
        let mut set = |key: &str, value: Value| config[key] = value;
        if let Some(v) = &self.keys_file {
            set("keysFile", json!(v));
        }
        if let Some(v) = self.access_token_ttl {
            set("accessTokenTtl", json!(v));
        }
        if let Some(v) = &self.resource_prefixes {
            set("resourcePrefixes", json!(v));
        }
        if let Some(v) = &self.opaque_resource_prefix {
            set("opaqueResourcePrefix", json!(v));
        }
        if let Some(v) = &self.console_redirect_uris {
            set("consoleRedirectUris", json!(v));
        }
        if let Some(v) = &self.service_secret {
            set("serviceSecret", json!(v));
        }
        config
    }
}

/// A token endpoint answer.
#[derive(Debug, Clone, Deserialize)]
pub struct TokenResponse {
    pub access_token: String,
    pub token_type: String,
    pub expires_in: u64,
    /// Empty when the provider granted no scope.
    #[serde(default)]
    pub scope: String,
    pub id_token: Option<String>,
    pub refresh_token: Option<String>,
}

/// A running provider; killed on drop.
pub struct OidcProvider {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub issuer: String,
    pub port: u16,
    /// The private JWKS it signs with.
    pub keys_file: PathBuf,
    /// How long it took from spawn to listening.
    pub started_in: Duration,
    options: Options,
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

/// A stopped provider: its port and keys, to start it again on the same
/// issuer ([`Stopped::restart`]).
pub struct Stopped {
    pub port: u16,
    pub keys_file: PathBuf,
    options: Options,
    dir: tempfile::TempDir,
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Stopped {
    /// The same provider again: same port (so same issuer), same keys.
    pub async fn restart(self) -> OidcProvider {
        let options = Options {
            port: self.port,
            keys_file: Some(self.keys_file),
            ..self.options
        };
        OidcProvider::launch(options, self.dir).await
    }
}

impl OidcProvider {
    /// A provider with `options`.
    pub async fn start(options: Options) -> OidcProvider {
        let dir = tempfile::tempdir().unwrap();
        OidcProvider::launch(options, dir).await
    }

    /// A provider on a fixed `port` over an existing (or new) keys file.
    pub async fn start_on(port: u16, keys_file: &Path, options: Options) -> OidcProvider {
        let options = Options {
            port,
            keys_file: Some(keys_file.to_path_buf()),
            ..options
        };
        OidcProvider::start(options).await
    }

    async fn launch(mut options: Options, dir: tempfile::TempDir) -> OidcProvider {
        let keys_file = options
            .keys_file
            .get_or_insert_with(|| dir.path().join("jwks.json"))
            .clone();
        let info = dir.path().join("info.json");
        let _ = std::fs::remove_file(&info);
        let config = dir.path().join("config.json");
        std::fs::write(&config, options.to_json().to_string()).unwrap();
        let log = std::fs::File::create(dir.path().join("provider.log")).unwrap();
        let started = Instant::now();
        let child = Command::new("node")
            .arg(oidc_dir().join("provider.mjs"))
            .arg(&info)
            .arg(&config)
            .current_dir(oidc_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start provider.mjs: {e}"));
        let mut provider = OidcProvider {
            child,
            issuer: String::new(),
            port: 0,
            keys_file,
            started_in: Duration::ZERO,
            options,
            http: no_redirects(),
            dir,
        };
        let listening = provider.wait_listening(&info).await;
        provider.issuer = listening["issuer"].as_str().unwrap().to_string();
        provider.port = u16::try_from(listening["port"].as_u64().unwrap()).unwrap();
        provider.started_in = started.elapsed();
        provider
    }

    async fn wait_listening(&mut self, info: &Path) -> Value {
        for _ in 0..1500 {
            if let Ok(text) = std::fs::read_to_string(info) {
                return serde_json::from_str(&text).unwrap();
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("provider.mjs exited early ({status}):\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("provider.mjs did not listen within 30 s:\n{}", self.log());
    }

    /// What the provider wrote to stderr (warnings, server errors).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("provider.log")).unwrap_or_default()
    }

    /// Kills it, keeping its port and keys for [`Stopped::restart`].
    pub fn stop(mut self) -> Stopped {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        Stopped {
            port: self.port,
            keys_file: self.keys_file.clone(),
            options: self.options.clone(),
            dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.issuer)
    }

    /// `GET path` as JSON.
    pub async fn get_json(&self, path: &str) -> Value {
        let resp = self.http.get(self.url(path)).send().await.unwrap();
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp.json().await.unwrap()
    }

    /// The discovery document (`/.well-known/openid-configuration`).
    pub async fn discovery(&self) -> Value {
        self.get_json("/.well-known/openid-configuration").await
    }

    /// The key ids `jwks_uri` publishes, in order.
    pub async fn published_kids(&self) -> Vec<String> {
        let jwks = self.get_json("/jwks").await;
        jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_string())
            .collect()
    }

    async fn control(&self, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self.http.post(self.url(path));
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        (resp.status().as_u16(), resp.json().await.unwrap())
    }

    fn kids_of(answer: (u16, Value), what: &str) -> Vec<String> {
        assert_eq!(answer.0, 200, "{what}: {}", answer.1);
        serde_json::from_value(answer.1["kids"].clone()).unwrap()
    }

    /// Adds a new signing key first; answers the published kids.
    pub async fn rotate_keys(&self) -> Vec<String> {
        Self::kids_of(self.control("/test/rotate", None).await, "rotate")
    }

    /// Unpublishes the oldest key; answers the published kids.
    pub async fn retire_oldest_key(&self) -> Vec<String> {
        Self::kids_of(self.control("/test/retire", None).await, "retire")
    }

    /// `POST /test/retire` as is: `(status, body)` (409 on the last key).
    pub async fn try_retire_oldest_key(&self) -> (u16, Value) {
        self.control("/test/retire", None).await
    }

    /// Replaces `cg-console`'s redirect URIs.
    pub async fn set_console_redirects(&self, uris: &[&str]) {
        let answer = self.control("/test/console-redirects", Some(json!(uris)));
        Self::kids_of(answer.await, "console-redirects");
    }

    /// Registers a public native client (RFC 7591) as the MCP SDKs do;
    /// answers its `client_id`.
    pub async fn register(&self, redirect_uris: &[&str]) -> String {
        let body = json!({
            "redirect_uris": redirect_uris,
            "application_type": "native",
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
        });
        let resp = self
            .http
            .post(self.url("/reg"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "registration: {answer}");
        answer["client_id"].as_str().unwrap().to_string()
    }

    /// A token endpoint request as `client`: the answer, or the status and
    /// error body.
    pub async fn token(
        &self,
        client: Client<'_>,
        params: &[(&str, &str)],
    ) -> Result<TokenResponse, (u16, Value)> {
        let resp = self
            .authenticated(client, "/token", params)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap();
        if status == 200 {
            Ok(serde_json::from_value(body).unwrap())
        } else {
            Err((status, body))
        }
    }

    /// A POST of `params` to `path` with `client`'s authentication: HTTP
    /// Basic for a confidential client, `client_id` in the form for a
    /// public one.
    fn authenticated(
        &self,
        client: Client<'_>,
        path: &str,
        params: &[(&str, &str)],
    ) -> reqwest::RequestBuilder {
        let mut params = params.to_vec();
        let req = self.http.post(self.url(path));
        let req = match client.secret {
            Some(secret) => req.basic_auth(client.id, Some(secret)),
            None => {
                params.push(("client_id", client.id));
                req
            }
        };
        req.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form(&params))
    }

    /// A `cg-service` token for `resource` (RFC 8707) with `scope`.
    pub async fn client_credentials(&self, scope: &str, resource: &str) -> TokenResponse {
        let params = [
            ("grant_type", "client_credentials"),
            ("scope", scope),
            ("resource", resource),
        ];
        self.token(SERVICE, &params)
            .await
            .unwrap_or_else(|e| panic!("client_credentials refused: {e:?}"))
    }

    /// A new access token for `resource` from a refresh token.
    pub async fn refresh(
        &self,
        client_id: &str,
        refresh_token: &str,
        resource: &str,
    ) -> Result<TokenResponse, (u16, Value)> {
        let params = [
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("resource", resource),
        ];
        self.token(client_for(client_id), &params).await
    }

    /// Revokes a `cg-service` token (RFC 7009: a client revokes its own).
    pub async fn revoke(&self, token: &str) {
        self.revoke_as(SERVICE, token).await;
    }

    /// Revokes `token` as `client`.
    pub async fn revoke_as(&self, client: Client<'_>, token: &str) {
        let req = self.authenticated(client, "/token/revocation", &[("token", token)]);
        let status = req.send().await.unwrap().status();
        assert_eq!(status, StatusCode::OK, "revocation");
    }

    /// RFC 7662 introspection of `token`, as the resource server
    /// (`cg-gateway`) would ask.
    pub async fn introspect(&self, token: &str) -> Value {
        let req = self.authenticated(GATEWAY, "/token/introspection", &[("token", token)]);
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "introspection");
        resp.json().await.unwrap()
    }

    /// Signs `user` in (headless: `login_hint`) for `client_id` with
    /// authorization code + PKCE and exchanges the code for `resource`.
    pub async fn sign_in(
        &self,
        user: &str,
        client_id: &str,
        scope: &str,
        resource: &str,
        redirect_uri: &str,
    ) -> TokenResponse {
        let flow = SignIn {
            user,
            client: client_for(client_id),
            scope,
            resource,
            redirect_uri,
            through_form: false,
        };
        self.try_sign_in(&flow)
            .await
            .unwrap_or_else(|e| panic!("sign-in of {user} failed: {e}"))
    }

    /// Runs a sign-in: the tokens, or the error the provider answered (at
    /// the redirect URI or the token endpoint).
    pub async fn try_sign_in(&self, flow: &SignIn<'_>) -> Result<TokenResponse, Value> {
        let pkce = Pkce::new();
        let code = self.authorize(flow, &pkce).await?;
        let params = [
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", flow.redirect_uri),
            ("code_verifier", pkce.verifier.as_str()),
            ("resource", flow.resource),
        ];
        self.token(flow.client, &params).await.map_err(|(_, e)| e)
    }

    /// The authorization request, followed to the redirect URI: its `code`.
    async fn authorize(&self, flow: &SignIn<'_>, pkce: &Pkce) -> Result<String, Value> {
        let state = random_token();
        let mut query = vec![
            ("client_id", flow.client.id),
            ("response_type", "code"),
            ("redirect_uri", flow.redirect_uri),
            ("scope", flow.scope),
            ("resource", flow.resource),
            ("code_challenge", pkce.challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("state", state.as_str()),
        ];
        if !flow.through_form {
            query.push(("login_hint", flow.user));
        }
        // The provider issues a refresh token only after an explicit consent.
        if flow.scope.split(' ').any(|s| s == "offline_access") {
            query.push(("prompt", "consent"));
        }
        let start = Url::parse_with_params(&self.url("/auth"), &query).unwrap();
        let arrived = self.follow(start, flow).await?;
        let answer: BTreeMap<String, String> = arrived.query_pairs().into_owned().collect();
        if let Some(error) = answer.get("error") {
            return Err(
                json!({ "error": error, "error_description": answer.get("error_description") }),
            );
        }
        assert_eq!(answer.get("state"), Some(&state), "state round trip");
        Ok(answer["code"].clone())
    }

    /// Follows redirects (and the sign-in form, when shown) with a cookie
    /// jar until one points at the redirect URI; answers that URL, or the
    /// error page the provider stopped at (a redirect URI it refuses).
    async fn follow(&self, start: Url, flow: &SignIn<'_>) -> Result<Url, Value> {
        let mut jar = CookieJar::default();
        let mut next = self.http.get(start.clone());
        let mut at = start;
        for _ in 0..12 {
            let resp = next
                .header(header::COOKIE, jar.header())
                .send()
                .await
                .unwrap();
            jar.store(resp.headers());
            let status = resp.status();
            if status.is_redirection() {
                let location = resp.headers()[header::LOCATION].to_str().unwrap();
                at = at.join(location).unwrap();
                if at.as_str().starts_with(flow.redirect_uri) {
                    return Ok(at);
                }
                next = self.http.get(at.clone());
                continue;
            }
            let page = resp.text().await.unwrap();
            let Some(action) = form_action(&page) else {
                return Err(serde_json::from_str(&page)
                    .unwrap_or_else(|_| json!({ "status": status.as_u16(), "page": page })));
            };
            at = at.join(&action).unwrap();
            next = self
                .http
                .post(at.clone())
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(form(&[("username", flow.user)]));
        }
        panic!("sign-in did not reach {} in 12 steps", flow.redirect_uri);
    }
}

/// One authorization-code sign-in.
#[derive(Debug, Clone, Copy)]
pub struct SignIn<'a> {
    pub user: &'a str,
    pub client: Client<'a>,
    pub scope: &'a str,
    pub resource: &'a str,
    pub redirect_uri: &'a str,
    /// Submit the provider's HTML sign-in form (needs `login_page`) instead
    /// of naming the user in `login_hint`.
    pub through_form: bool,
}

/// A PKCE verifier and its S256 challenge (RFC 7636).
struct Pkce {
    verifier: String,
    challenge: String,
}

impl Pkce {
    fn new() -> Pkce {
        let verifier = random_token();
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        Pkce {
            verifier,
            challenge,
        }
    }
}

fn random_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).unwrap();
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The cookies the provider set, by name (paths ignored).
#[derive(Default)]
struct CookieJar(BTreeMap<String, String>);

impl CookieJar {
    fn store(&mut self, headers: &header::HeaderMap) {
        for set in headers.get_all(header::SET_COOKIE) {
            let text = set.to_str().unwrap();
            let pair = text.split(';').next().unwrap_or_default();
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let expired = text
                .to_ascii_lowercase()
                .contains("expires=thu, 01 jan 1970");
            if value.is_empty() || expired {
                self.0.remove(name.trim());
            } else {
                self.0.insert(name.trim().to_string(), value.to_string());
            }
        }
    }

    fn header(&self) -> String {
        let pairs: Vec<String> = self.0.iter().map(|(n, v)| format!("{n}={v}")).collect();
        pairs.join("; ")
    }
}

/// The `action` of the provider's sign-in form, if `page` is one.
fn form_action(page: &str) -> Option<String> {
    if !page.contains("name=\"username\"") {
        return None;
    }
    let rest = page.split_once("action=\"")?.1;
    Some(rest.split_once('"')?.0.replace("&#38;", "&"))
}

/// `application/x-www-form-urlencoded` text of `pairs`.
fn form(pairs: &[(&str, &str)]) -> String {
    let mut url = Url::parse("http://form.invalid/").unwrap();
    url.query_pairs_mut().extend_pairs(pairs);
    url.query().unwrap_or_default().to_string()
}

/// An HTTP client that never follows redirects (sign-in follows them by
/// hand, and must stop at the redirect URI).
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// The decoded header and claims of a JWS compact token; `None` when it is
/// not one (an opaque token).
pub fn try_jwt_parts(token: &str) -> Option<(Value, Value)> {
    let mut parts = token.split('.');
    let (header, claims, _sig) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let decode = |p: &str| -> Option<Value> {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).ok()?).ok()
    };
    Some((decode(header)?, decode(claims)?))
}

/// The decoded header and claims of a JWT (panics when it is not one).
pub fn jwt_parts(token: &str) -> (Value, Value) {
    try_jwt_parts(token).unwrap_or_else(|| panic!("not a JWT: {token}"))
}

/// How the gateway's tests trust a provider: every token in org `acme`,
/// RFC 9068 ES256 tokens only, the `department` claim as a tag.
pub fn acme_issuer(idp: &OidcProvider) -> cedargate::identity::IssuerConfig {
    cedargate::identity::IssuerConfig {
        issuer: idp.issuer.clone(),
        require_at_jwt: true,
        algorithms: vec!["ES256".into()],
        org: Some("acme".into()),
        tags: [("department".to_string(), "department".to_string())].into(),
        ..cedargate::identity::IssuerConfig::default()
    }
}

/// A provider with default options, or `None` (the test then returns)
/// when it is not installed outside CI.
pub async fn default_provider() -> Option<OidcProvider> {
    if !installed() {
        return None;
    }
    Some(OidcProvider::start(Options::default()).await)
}
