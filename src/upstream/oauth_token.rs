//! The gateway's own access token for an upstream registered with
//! `auth: {"type": "oauth-client-credentials", issuer, clientId, secretEnv,
//! scope?, resource}`: obtained from the issuer's token endpoint with the
//! OAuth 2.1 client credentials grant, cached per upstream, refreshed ahead
//! of its expiry. The token is the gateway's (its client id), never a
//! user's or an agent's, and it is sent only to the upstream it was asked
//! for.
//!
//! - **Discovery.** The issuer's `token_endpoint` comes from its metadata
//!   (OpenID Connect discovery, then RFC 8414), through
//!   [`crate::identity::fetch::Fetcher`]: a document naming another issuer
//!   is refused, a document found is kept for the process's life.
//! - **Request.** `grant_type=client_credentials`, `resource` (RFC 8707: the
//!   token's audience is the upstream) and `scope` when registered, with
//!   HTTP Basic client authentication (id and secret form-encoded first,
//!   RFC 6749 §2.3.1). The secret is read from `secretEnv` at each request,
//!   so rotating it takes effect at the next token; it is never stored,
//!   logged or shown, and is blanked out of any message a failure carries.
//!   Each request is bounded by [`FETCH_TIMEOUT`] and its answer by
//!   [`MAX_ANSWER_BYTES`].
//! - **Cache.** One token per upstream, used until a fifth of its life is
//!   left, or 30 s, whichever comes first (half of a life shorter than a
//!   minute; an answer without `expires_in` is taken to live
//!   [`DEFAULT_LIFE`]). One request at a time per upstream: calls that need
//!   a token while it is being fetched wait for that same request.
//! - **Failures.** A refused or failed request fails the calls that waited
//!   for it, with the authorization server's `error` and
//!   `error_description`. For [`RETRY_AFTER`] after a failure the same
//!   failure is answered at once (a still-valid earlier token is used
//!   meanwhile): a flood of calls asks the authorization server at most
//!   once per upstream in that time. The next call after it tries again.
//! - **Refused tokens.** An upstream answering 401 to a token obtained more
//!   than [`RETRY_AFTER`] ago (revoked, or expired early) has it dropped, so
//!   the next call fetches another; a token refused sooner stays (fetching
//!   again could only hammer the authorization server).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use moka::sync::Cache;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

use crate::identity::fetch::{FetchError, Fetcher};

/// The `auth.type` of an upstream whose token the gateway obtains itself.
pub const KIND: &str = "oauth-client-credentials";

/// After a failed token request, how long its failure is answered before
/// the authorization server is asked again.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Budget of one request to the authorization server (discovery or token).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest answer read from the authorization server, in bytes.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// Life assumed for a token answered without `expires_in`.
pub const DEFAULT_LIFE: Duration = Duration::from_secs(300);

/// Longest life a token is kept for, whatever `expires_in` says.
const MAX_LIFE: Duration = Duration::from_secs(24 * 3600);

/// Shortest time a token is used before another is fetched.
const MIN_USE: Duration = Duration::from_secs(1);

/// Longest access token accepted, in bytes.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Longest client secret read from the environment, in bytes.
const MAX_SECRET_BYTES: usize = 8 * 1024;

/// Longest URL accepted for `issuer` and `resource`.
const MAX_URL_BYTES: usize = 2048;

/// Most upstreams whose tokens are kept.
const CAPACITY: u64 = 10_000;

/// An upstream's client registration at its authorization server: what is
/// stored and shown (the secret's variable name, never the secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientCredentials {
    /// Always [`KIND`].
    #[serde(rename = "type")]
    pub kind: String,
    /// The authorization server's issuer identifier (an http(s) URL).
    pub issuer: String,
    /// The gateway's client id at that server.
    pub client_id: String,
    /// Environment variable holding the client secret.
    pub secret_env: String,
    /// Space-separated scopes asked for (none: the server's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The upstream's resource identifier (RFC 8707), the token's audience.
    pub resource: String,
}

/// Why a registration's client credentials are refused (answered as 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientCredentialsError {
    /// `issuer` is not an http(s) URL without query or fragment.
    #[error("`auth.issuer` must be an http(s) URL with a host and no query or fragment: {0}")]
    Issuer(String),
    /// `resource` is not an absolute URL without fragment.
    #[error("`auth.resource` must be an absolute URL without a fragment: {0}")]
    Resource(String),
    /// `clientId` is empty, too long or has control characters.
    #[error("`auth.clientId` must be 1 to 256 characters, none of them a control character")]
    ClientId,
    /// `secretEnv` is not a variable name.
    #[error("`auth.secretEnv` must be an environment variable name (A-Z a-z 0-9 _, at most 128)")]
    SecretEnv,
    /// `scope` is not a list of scope tokens.
    #[error(
        "`auth.scope` must be scope names separated by single spaces (visible ASCII without `\"` or `\\`), or left out"
    )]
    Scope,
}

impl ClientCredentials {
    /// Checks every field (the secret itself is read only when a token is
    /// needed, as for bearer credentials).
    pub fn validate(&self) -> Result<(), ClientCredentialsError> {
        check_issuer(&self.issuer).map_err(ClientCredentialsError::Issuer)?;
        check_resource(&self.resource).map_err(ClientCredentialsError::Resource)?;
        let id = &self.client_id;
        if id.is_empty() || id.chars().count() > 256 || id.chars().any(char::is_control) {
            return Err(ClientCredentialsError::ClientId);
        }
        if !is_env_name(&self.secret_env) {
            return Err(ClientCredentialsError::SecretEnv);
        }
        if let Some(scope) = &self.scope
            && !is_scope(scope)
        {
            return Err(ClientCredentialsError::Scope);
        }
        Ok(())
    }
}

fn check_issuer(issuer: &str) -> Result<(), String> {
    let url = parse_url(issuer)?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("`{issuer}` is not http(s) with a host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("`{issuer}` has a query or fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("it carries credentials".into());
    }
    Ok(())
}

fn check_resource(resource: &str) -> Result<(), String> {
    let url = parse_url(resource)?;
    if url.fragment().is_some() {
        return Err(format!("`{resource}` has a fragment"));
    }
    Ok(())
}

fn parse_url(text: &str) -> Result<reqwest::Url, String> {
    if text.len() > MAX_URL_BYTES {
        return Err(format!("longer than {MAX_URL_BYTES} bytes"));
    }
    reqwest::Url::parse(text).map_err(|e| format!("`{text}`: {e}"))
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// RFC 6749 §3.3: scope tokens of `%x21 / %x23-5B / %x5D-7E` separated by
/// single spaces.
fn is_scope(scope: &str) -> bool {
    scope.len() <= 1024
        && scope.split(' ').all(|token| {
            !token.is_empty()
                && token
                    .bytes()
                    .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\')
        })
}

/// Why no token could be had for an upstream (the call fails -32202 with
/// this message). Never holds the client secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The client secret could not be read.
    #[error("client secret environment variable `{0}` is not set or not usable")]
    Secret(String),
    /// The issuer's metadata or token endpoint could not be had.
    #[error("cannot discover the token endpoint of `{issuer}`: {reason}")]
    Discovery {
        /// The issuer.
        issuer: String,
        /// Why.
        reason: String,
    },
    /// The token endpoint could not be reached or answered unreadably.
    #[error("token request to `{endpoint}` failed: {reason}")]
    Request {
        /// The token endpoint.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// The authorization server refused the grant.
    #[error("`{issuer}` refused the client credentials grant (HTTP {status}): {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Refused {
        /// The issuer.
        issuer: String,
        /// The HTTP status.
        status: u16,
        /// Its `error` code.
        error: String,
        /// Its `error_description`, if any.
        description: Option<String>,
    },
    /// The answer holds no usable bearer token.
    #[error("`{issuer}` answered no usable bearer token: {reason}")]
    Unusable {
        /// The issuer.
        issuer: String,
        /// Why.
        reason: String,
    },
}

impl TokenError {
    /// The same error with every occurrence of `secrets` blanked out (an
    /// authorization server's text is not trusted to leave them out).
    fn without(self, secrets: &[String]) -> TokenError {
        let blank = |text: String| {
            secrets
                .iter()
                .filter(|s| !s.is_empty())
                .fold(text, |text, s| text.replace(s.as_str(), "[secret]"))
        };
        match self {
            TokenError::Secret(env) => TokenError::Secret(env),
            TokenError::Discovery { issuer, reason } => TokenError::Discovery {
                issuer,
                reason: blank(reason),
            },
            TokenError::Request { endpoint, reason } => TokenError::Request {
                endpoint,
                reason: blank(reason),
            },
            TokenError::Refused {
                issuer,
                status,
                error,
                description,
            } => TokenError::Refused {
                issuer,
                status,
                error: blank(error),
                description: description.map(blank),
            },
            TokenError::Unusable { issuer, reason } => TokenError::Unusable {
                issuer,
                reason: blank(reason),
            },
        }
    }
}

/// A token obtained, with the times that govern its use.
#[derive(Debug, Clone)]
struct Token {
    value: String,
    obtained: Instant,
    /// From then on, another is fetched.
    refresh_at: Instant,
    /// After then, it is never used.
    expires_at: Instant,
}

impl Token {
    /// A token valid for `life` from `obtained` (the request's start).
    fn new(value: String, obtained: Instant, life: Duration) -> Token {
        let life = life.min(MAX_LIFE);
        let used_for = life.saturating_sub(refresh_margin(life)).max(MIN_USE);
        Token {
            value,
            obtained,
            refresh_at: obtained + used_for,
            expires_at: obtained + life,
        }
    }
}

/// How long before its expiry a token of `life` is replaced: a fifth of
/// its life, or 30 s (half of a shorter life) when that comes first.
fn refresh_margin(life: Duration) -> Duration {
    (life / 5).max((life / 2).min(Duration::from_secs(30)))
}

/// A failed request and when the authorization server may be asked again.
#[derive(Debug, Clone)]
struct Failure {
    error: TokenError,
    retry_at: Instant,
}

/// One upstream's token, its last failure and the request in flight.
#[derive(Debug, Default)]
struct State {
    /// The registration the rest belongs to.
    client: Option<ClientCredentials>,
    /// Counts resets: a request started before one is not applied after.
    generation: u64,
    token: Option<Token>,
    failure: Option<Failure>,
    /// Closed when the request in flight ends.
    fetching: Option<watch::Receiver<()>>,
}

impl State {
    /// The token when it may still be sent at `now`.
    fn valid(&self, now: Instant) -> Option<String> {
        self.token
            .as_ref()
            .filter(|t| now < t.expires_at)
            .map(|t| t.value.clone())
    }

    /// Applies what a request of `generation` brought.
    fn settle(&mut self, generation: u64, got: Result<Token, TokenError>) {
        if generation != self.generation {
            return;
        }
        self.fetching = None;
        match got {
            Ok(token) => {
                self.token = Some(token);
                self.failure = None;
            }
            Err(error) => {
                self.failure = Some(Failure {
                    error,
                    retry_at: Instant::now() + RETRY_AFTER,
                });
            }
        }
    }
}

#[derive(Debug, Default)]
struct Slot(Mutex<State>);

impl Slot {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a caller does next.
enum Step {
    /// The answer.
    Ready(Result<String, TokenError>),
    /// Wait for the request in flight to end, then look again.
    Wait(watch::Receiver<()>),
}

/// Reads a client secret by its variable name.
type SecretReader = fn(&str) -> Option<String>;

/// The tokens of every upstream registered with client credentials.
#[derive(Debug)]
pub struct TokenSource {
    fetcher: Arc<Fetcher>,
    slots: Cache<String, Arc<Slot>>,
    secrets: SecretReader,
}

impl TokenSource {
    /// A source whose requests are bounded by [`FETCH_TIMEOUT`] and
    /// [`MAX_ANSWER_BYTES`].
    pub fn new() -> Result<TokenSource, reqwest::Error> {
        Self::reading(|name| std::env::var(name).ok())
    }

    /// A source reading client secrets with `secrets` (the environment,
    /// or a test's own).
    fn reading(secrets: SecretReader) -> Result<TokenSource, reqwest::Error> {
        Ok(TokenSource {
            fetcher: Arc::new(Fetcher::new(FETCH_TIMEOUT, MAX_ANSWER_BYTES)?),
            slots: Cache::builder().max_capacity(CAPACITY).build(),
            secrets,
        })
    }

    /// A token for the upstream with row id `upstream`, registered with
    /// `client`: the cached one while it is fresh, else the one a request
    /// (shared by every caller waiting meanwhile) brings.
    pub async fn token(
        &self,
        upstream: &str,
        client: &ClientCredentials,
    ) -> Result<String, TokenError> {
        let slot = self
            .slots
            .get_with(upstream.to_string(), || Arc::new(Slot::default()));
        loop {
            let mut done = match self.next_step(&slot, client) {
                Step::Ready(answer) => return answer,
                Step::Wait(done) => done,
            };
            // The request's task drops its sender when it ends.
            while done.changed().await.is_ok() {}
        }
    }

    /// Looks at the upstream's state: a fresh token, a request to wait
    /// for, a recent failure, or a request to start.
    fn next_step(&self, slot: &Arc<Slot>, client: &ClientCredentials) -> Step {
        let mut state = slot.lock();
        if state.client.as_ref() != Some(client) {
            // A new registration (or another one under the same id).
            let generation = state.generation + 1;
            *state = State {
                client: Some(client.clone()),
                generation,
                ..State::default()
            };
        }
        let now = Instant::now();
        if let Some(t) = state.token.as_ref().filter(|t| now < t.refresh_at) {
            return Step::Ready(Ok(t.value.clone()));
        }
        if let Some(done) = state.fetching.clone() {
            if done.has_changed().is_ok() {
                return Step::Wait(done);
            }
            // Its task is gone without settling (the runtime stopped).
            state.fetching = None;
        }
        if let Some(f) = state.failure.as_ref().filter(|f| now < f.retry_at) {
            return Step::Ready(state.valid(now).ok_or_else(|| f.error.clone()));
        }
        Step::Wait(self.start(slot, &mut state, client))
    }

    /// Starts a token request in its own task (a caller giving up does not
    /// cancel it for the others); it settles the state when it ends.
    fn start(
        &self,
        slot: &Arc<Slot>,
        state: &mut State,
        client: &ClientCredentials,
    ) -> watch::Receiver<()> {
        let (tx, done) = watch::channel(());
        state.fetching = Some(done.clone());
        let (slot, fetcher) = (Arc::clone(slot), Arc::clone(&self.fetcher));
        let (client, generation) = (client.clone(), state.generation);
        let secrets = self.secrets;
        tokio::spawn(async move {
            let got = fetch(&fetcher, &client, secrets).await;
            if let Err(e) = &got {
                tracing::warn!(issuer = %client.issuer, client_id = %client.client_id, error = %e, "upstream token request failed");
            }
            slot.lock().settle(generation, got);
            drop(tx);
        });
        done
    }

    /// The upstream `upstream` answered 401 to `token`: dropped when it was
    /// obtained more than [`RETRY_AFTER`] ago, so the next call fetches
    /// another.
    pub fn rejected(&self, upstream: &str, token: &str) {
        let Some(slot) = self.slots.get(upstream) else {
            return;
        };
        let mut state = slot.lock();
        let stale = state
            .token
            .as_ref()
            .is_some_and(|t| t.value == token && t.obtained.elapsed() >= RETRY_AFTER);
        if stale {
            state.token = None;
        }
    }

    /// Forgets a deleted upstream's token.
    pub fn forget(&self, upstream: &str) {
        self.slots.invalidate(upstream);
    }
}

/// One token request: the secret, the token endpoint, the grant.
async fn fetch(
    fetcher: &Fetcher,
    client: &ClientCredentials,
    secrets: SecretReader,
) -> Result<Token, TokenError> {
    let secret = read_secret(&client.secret_env, secrets)?;
    let started = Instant::now();
    let got = request(fetcher, client, &secret).await;
    got.map(|(value, life)| Token::new(value, started, life))
        .map_err(|e| e.without(&secret_forms(&client.client_id, &secret)))
}

/// The secret as it may come back in a message: as read, form-encoded, and
/// inside the Basic credentials.
fn secret_forms(client_id: &str, secret: &str) -> [String; 3] {
    use base64::Engine as _;
    let encoded = form_encode(secret);
    let basic = format!("{}:{encoded}", form_encode(client_id));
    let basic = base64::engine::general_purpose::STANDARD.encode(basic);
    [secret.to_string(), encoded, basic]
}

async fn request(
    fetcher: &Fetcher,
    client: &ClientCredentials,
    secret: &str,
) -> Result<(String, Duration), TokenError> {
    let endpoint = token_endpoint(fetcher, &client.issuer).await?;
    let mut form = vec![
        ("grant_type", "client_credentials"),
        ("resource", client.resource.as_str()),
    ];
    if let Some(scope) = &client.scope {
        form.push(("scope", scope.as_str()));
    }
    let (id, secret) = (form_encode(&client.client_id), form_encode(secret));
    let answer = fetcher
        .post_form_answer(&endpoint, (&id, Some(&secret)), &form)
        .await;
    let (status, body) = answer.map_err(|e| TokenError::Request {
        endpoint: endpoint.clone(),
        reason: fetch_reason(e),
    })?;
    if status != 200 {
        return Err(refused(&client.issuer, status, &body));
    }
    read_token(&client.issuer, &body)
}

/// The issuer's `token_endpoint`, an http(s) URL.
async fn token_endpoint(fetcher: &Fetcher, issuer: &str) -> Result<String, TokenError> {
    let discovery = |reason: String| TokenError::Discovery {
        issuer: issuer.to_string(),
        reason,
    };
    let metadata = fetcher
        .metadata(issuer)
        .await
        .map_err(|e| discovery(e.to_string()))?;
    let endpoint = metadata
        .endpoint("token_endpoint")
        .ok_or_else(|| discovery("its metadata names no `token_endpoint`".into()))?;
    match reqwest::Url::parse(&endpoint) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => Ok(endpoint),
        _ => Err(discovery(format!(
            "its `token_endpoint` `{}` is not an http(s) URL",
            printable(&endpoint, 200)
        ))),
    }
}

/// What a failed request says, without repeating the URL it names.
fn fetch_reason(e: FetchError) -> String {
    match e {
        FetchError::Transport { reason, .. } => reason,
        FetchError::Status { status, .. } => format!("HTTP {status}"),
        FetchError::TooLarge { limit, .. } => format!("an answer over {limit} bytes"),
        FetchError::Invalid { reason, .. } => format!("an unreadable answer: {reason}"),
    }
}

/// The refusal an error answer tells (RFC 6749 §5.2).
fn refused(issuer: &str, status: u16, body: &Value) -> TokenError {
    let text = |name: &str| {
        body.get(name)
            .and_then(Value::as_str)
            .map(|s| printable(s, 300))
            .filter(|s| !s.is_empty())
    };
    TokenError::Refused {
        issuer: issuer.to_string(),
        status,
        error: text("error").unwrap_or_else(|| "no `error` given".into()),
        description: text("error_description"),
    }
}

/// The bearer token of a 200 answer and its life.
fn read_token(issuer: &str, body: &Value) -> Result<(String, Duration), TokenError> {
    let unusable = |reason: &str| TokenError::Unusable {
        issuer: issuer.to_string(),
        reason: reason.to_string(),
    };
    let token = body
        .get("access_token")
        .and_then(Value::as_str)
        .ok_or_else(|| unusable("no `access_token`"))?;
    let visible = token.bytes().all(|b| (0x21..=0x7e).contains(&b));
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES || !visible {
        return Err(unusable(
            "its `access_token` is empty, too long or not visible ASCII",
        ));
    }
    if let Some(kind) = body.get("token_type").and_then(Value::as_str)
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(unusable(&format!(
            "its `token_type` is `{}`, not `Bearer`",
            printable(kind, 40)
        )));
    }
    let life = match body.get("expires_in") {
        None | Some(Value::Null) => DEFAULT_LIFE,
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
            .map(Duration::from_secs)
            .ok_or_else(|| unusable("its `expires_in` is not a number of seconds"))?,
    };
    Ok((token.to_string(), life))
}

/// The client secret, read now.
fn read_secret(env: &str, secrets: SecretReader) -> Result<String, TokenError> {
    let raw = secrets(env).ok_or_else(|| TokenError::Secret(env.to_string()))?;
    let secret = raw.trim();
    if secret.is_empty() || secret.len() > MAX_SECRET_BYTES || secret.chars().any(char::is_control)
    {
        return Err(TokenError::Secret(env.to_string()));
    }
    Ok(secret.to_string())
}

/// At most `max` characters of an outside text, control characters shown
/// as `?`.
fn printable(text: &str, max: usize) -> String {
    text.chars()
        .take(max)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// `application/x-www-form-urlencoded` of one value, as HTTP Basic client
/// authentication wants its id and secret (RFC 6749 §2.3.1).
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests;
