//! The gateway as an OAuth 2.1 resource server: which access tokens it
//! accepts, and the [`Identity`] each stands for.
//!
//! [`Identities::authenticate`] takes a bearer token that is not a daemon
//! key and either returns who it belongs to or says why it is refused.
//! A JWT is validated against the issuer its `iss` names (`jwt`), with the
//! keys that issuer publishes (`keys`, fetched through `fetch`); any other
//! token is introspected where an issuer allows it (`introspect`). Claims
//! become an identity (`claims`). A validated token is kept until it
//! expires (`cache`), so only a token's first request pays for a signature
//! check. Whether the token was issued for this server (RFC 8707 `aud`) is
//! decided per request, against the URL the client used and the gateway's
//! configured resource: a token for another project's URL is refused even
//! when its signature is good.
//!
//! `id_token` serves the other side: the console as an OpenID Connect
//! relying party checks the ID tokens of its sign-ins with the same keys
//! and rules (`src/console/oidc/`).
//!
//! This module knows nothing of HTTP responses or the store: the MCP
//! admission maps [`TokenError`] to a 401 challenge (`src/mcp/error.rs`)
//! and the policy module turns an identity into Cedar entities.

pub mod cache;
pub mod challenge;
pub mod claims;
pub mod config;
pub mod fetch;
pub mod id_token;
pub mod introspect;
pub mod jwt;
pub mod keys;
pub mod person;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

pub use claims::{ClaimError, Identity};
pub use config::{AuthConfig, IssuerConfig};
pub use keys::KeyError;

use cache::TokenCache;
use fetch::Fetcher;
use jwt::Issuer;

/// Why a presented token is refused. Every variant is a 401
/// `invalid_token` on the wire; the message goes to the log and the trail,
/// never the token itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Longer than `auth.max_token_bytes`.
    #[error("the token is longer than {0} bytes")]
    TooLarge(usize),
    /// Not a JWS compact JWT, or its header or payload does not parse.
    #[error("the token is malformed: {0}")]
    Malformed(String),
    /// `iss` is missing or names no configured issuer.
    #[error("the token's issuer is not one this gateway accepts")]
    UnknownIssuer,
    /// `alg` is not one the issuer allows, or does not fit the key.
    #[error("the token's signing algorithm is not accepted: {0}")]
    Algorithm(String),
    /// The issuer issues RFC 9068 tokens and this one's `typ` is not
    /// `at+jwt` (an ID token, say).
    #[error("the token is not an access token (its `typ` must be `at+jwt`)")]
    NotAnAccessToken,
    /// No published key verifies it.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// `exp` has passed (beyond the leeway).
    #[error("the token has expired")]
    Expired,
    /// `nbf` is still ahead (beyond the leeway).
    #[error("the token is not valid yet (`nbf` is in the future)")]
    NotYetValid,
    /// The signature does not verify.
    #[error("the token's signature does not verify")]
    Signature,
    /// A claim is missing, malformed or too large.
    #[error(transparent)]
    Claims(#[from] ClaimError),
    /// `aud` names neither this endpoint's URL nor the gateway's resource.
    #[error("the token was not issued for this resource (its `aud` does not name it)")]
    WrongAudience,
    /// Introspection says the token is not active.
    #[error("the token is not active (revoked, expired or unknown to its issuer)")]
    Inactive,
    /// The provider could not be asked (introspection).
    #[error("the identity provider could not be asked: {0}")]
    Provider(String),
}

impl TokenError {
    /// Why the token was refused, in one word the trail records
    /// (`access_token_refused`): never the token's text nor anything read
    /// from it.
    pub fn reason(&self) -> &'static str {
        match self {
            TokenError::TooLarge(_) => "too_large",
            TokenError::Malformed(_) => "malformed",
            TokenError::UnknownIssuer => "unknown_issuer",
            TokenError::Algorithm(_) => "algorithm",
            TokenError::NotAnAccessToken => "not_an_access_token",
            TokenError::Key(_) => "signing_key",
            TokenError::Expired => "expired",
            TokenError::NotYetValid => "not_yet_valid",
            TokenError::Signature => "signature",
            TokenError::Claims(_) => "claims",
            TokenError::WrongAudience => "audience",
            TokenError::Inactive => "inactive",
            TokenError::Provider(_) => "provider_unreachable",
        }
    }
}

/// Why `[auth]` is refused at start-up.
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    /// One issuer's entry.
    #[error("[[auth.issuers]] `{issuer}`: {reason}")]
    Issuer { issuer: String, reason: String },
    /// The HTTP client could not be built.
    #[error("cannot build the identity providers' HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// The accepted issuers and the tokens already validated.
#[derive(Debug)]
pub struct Identities {
    config: AuthConfig,
    issuers: Vec<Issuer>,
    fetcher: Arc<Fetcher>,
    tokens: TokenCache,
}

impl Identities {
    /// The resource server `config` describes; no provider is contacted.
    pub fn new(config: &AuthConfig) -> Result<Identities, AuthConfigError> {
        let fetcher = Arc::new(Fetcher::new(
            Duration::from_millis(config.fetch_timeout_ms),
            config.max_fetch_bytes,
        )?);
        let mut issuers: Vec<Issuer> = Vec::new();
        for entry in &config.issuers {
            if issuers.iter().any(|i| i.config.issuer == entry.issuer) {
                return Err(AuthConfigError::Issuer {
                    issuer: entry.issuer.clone(),
                    reason: "listed twice".into(),
                });
            }
            issuers.push(Issuer::new(entry, config, fetcher.clone())?);
        }
        Ok(Identities {
            tokens: TokenCache::new(config.token_cache_entries),
            config: config.clone(),
            issuers,
            fetcher,
        })
    }

    /// Whether any issuer is configured (else only daemon keys work).
    pub fn enabled(&self) -> bool {
        !self.issuers.is_empty()
    }

    /// The `[auth]` configuration.
    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// The issuers' identifiers, in configuration order.
    pub fn issuer_urls(&self) -> impl Iterator<Item = &str> {
        self.issuers.iter().map(|i| i.config.issuer.as_str())
    }

    /// Who `token` belongs to, if it is valid and issued for one of
    /// `audiences`.
    pub async fn authenticate(
        &self,
        token: &str,
        audiences: &[&str],
    ) -> Result<Arc<Identity>, TokenError> {
        if token.len() > self.config.max_token_bytes {
            return Err(TokenError::TooLarge(self.config.max_token_bytes));
        }
        let key = TokenCache::key(token);
        let identity = match self.tokens.get(&key) {
            Some(identity) => identity,
            None => self.validate(token, key).await?,
        };
        if !identity.is_for(audiences) {
            return Err(TokenError::WrongAudience);
        }
        Ok(identity)
    }

    /// The person `identity` names (built at the token's first request,
    /// then kept with it).
    pub fn person(&self, identity: &Identity) -> Result<Arc<person::Person>, person::PersonError> {
        identity
            .person
            .get_or_make(|| person::Person::new(identity, self.scopes(identity)))
    }

    /// `granted` with `auth.scope_implies` followed.
    pub fn expand_scopes(&self, granted: &[String]) -> BTreeSet<String> {
        claims::expand(granted, &self.config.scope_implies)
    }

    /// The scopes `identity` holds, with `auth.scope_implies` followed.
    pub fn scopes(&self, identity: &Identity) -> BTreeSet<String> {
        identity.scopes(&self.config.scope_implies)
    }

    /// Validates a token not seen before and keeps it until it expires.
    async fn validate(&self, token: &str, key: [u8; 32]) -> Result<Arc<Identity>, TokenError> {
        let now = unix_now();
        let (identity, trusted_for) = if token.split('.').count() == 3 {
            (self.validate_jwt(token).await?, None)
        } else {
            let found = introspect::identity(&self.issuers, &self.fetcher, token, now).await?;
            (
                found,
                Some(Duration::from_secs(self.config.introspection_cache_secs)),
            )
        };
        let left = Duration::from_secs(u64::try_from(identity.expires_at - now).unwrap_or(0));
        let ttl = trusted_for.map_or(left, |t| t.min(left));
        let identity = Arc::new(identity);
        if !ttl.is_zero() {
            self.tokens.insert(key, identity.clone(), ttl);
        }
        Ok(identity)
    }

    /// A JWT, validated by the issuer its `iss` names.
    async fn validate_jwt(&self, token: &str) -> Result<Identity, TokenError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| TokenError::Malformed(format!("its header: {}", e.kind_name())))?;
        let iss = jsonwebtoken::dangerous::insecure_decode_claims::<IssuerClaim>(token)
            .map_err(|e| TokenError::Malformed(format!("its payload: {}", e.kind_name())))?
            .iss;
        let issuer = self
            .issuers
            .iter()
            .find(|i| Some(i.config.issuer.as_str()) == iss.as_deref())
            .ok_or(TokenError::UnknownIssuer)?;
        issuer.verify(token, &header).await
    }
}

/// The one claim read before the signature is checked: which issuer's keys
/// to check it with.
#[derive(serde::Deserialize)]
struct IssuerClaim {
    iss: Option<String>,
}

/// A short name for a `jsonwebtoken` error, safe to show.
trait KindName {
    fn kind_name(&self) -> String;
}

impl KindName for jsonwebtoken::errors::Error {
    fn kind_name(&self) -> String {
        use jsonwebtoken::errors::ErrorKind;
        match self.kind() {
            ErrorKind::Base64(_) => "not base64url".into(),
            ErrorKind::Json(_) => "not the expected JSON (an unknown `alg` such as `none`?)".into(),
            ErrorKind::Utf8(_) => "not UTF-8".into(),
            ErrorKind::InvalidToken => "not three base64url parts".into(),
            other => format!("{other:?}").chars().take(80).collect(),
        }
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests;
