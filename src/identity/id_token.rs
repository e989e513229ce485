//! OpenID Connect ID tokens, checked as a relying party checks them (Core
//! 1.0 §3.1.3.7): the console's sign-in with an identity provider.
//!
//! The same rules as an access token's where they overlap (an allowed,
//! asymmetric `alg` that fits a key the issuer publishes, `iss` exactly,
//! `exp` and `nbf` within the leeway; keys fetched and rotated by
//! [`IssuerKeys`]), and those of an ID token: `aud` must name the client,
//! `azp`, when present, must be the client (and must be present when `aud`
//! names several), `sub` and `iat` are required, and `nonce` must be the
//! one the sign-in sent. An RFC 9068 access token (`typ: at+jwt`) is
//! refused outright, so a token minted for a resource cannot stand in for
//! a sign-in.

use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::config::{AuthConfig, IssuerConfig};
use super::fetch::Fetcher;
use super::keys::IssuerKeys;
use super::{AuthConfigError, TokenError};

/// Why an ID token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdTokenError {
    /// What an access token would be refused for (signature, algorithm,
    /// issuer, audience, time, a missing claim).
    #[error(transparent)]
    Token(#[from] TokenError),
    /// `nonce` is missing or is not the sign-in's.
    #[error("the ID token's `nonce` is not the one this sign-in sent")]
    Nonce,
    /// `azp` names another client, or is missing where `aud` names several.
    #[error("the ID token was issued to another client (`azp`)")]
    AuthorizedParty,
    /// `typ` is `at+jwt`: an access token, not an ID token.
    #[error("the token is an access token (`typ: at+jwt`), not an ID token")]
    AccessToken,
}

/// The ID tokens of one issuer for one client.
#[derive(Debug)]
pub struct IdTokens {
    client_id: String,
    keys: IssuerKeys,
    validation: Validation,
    max_bytes: usize,
}

impl IdTokens {
    /// A checker of `issuer`'s ID tokens for `client_id`; its keys are
    /// fetched on first use.
    pub fn new(
        issuer: &IssuerConfig,
        auth: &AuthConfig,
        fetcher: Arc<Fetcher>,
        client_id: &str,
    ) -> Result<IdTokens, AuthConfigError> {
        let refuse = |reason: String| AuthConfigError::Issuer {
            issuer: issuer.issuer.clone(),
            reason,
        };
        let url =
            reqwest::Url::parse(&issuer.issuer).map_err(|e| refuse(format!("not a URL: {e}")))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(refuse("the issuer must be an http(s) URL".into()));
        }
        let mut validation = Validation::new(Algorithm::RS256);
        validation.algorithms =
            super::jwt::allowed_algorithms(&issuer.algorithms).map_err(refuse)?;
        validation.leeway = issuer.leeway_secs;
        validation.validate_nbf = true;
        validation.set_issuer(&[&issuer.issuer]);
        validation.set_audience(&[client_id]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let keys = IssuerKeys::new(
            Arc::new(issuer.clone()),
            fetcher,
            Duration::from_secs(auth.jwks_cache_secs),
            Duration::from_secs(auth.unknown_kid_refresh_secs),
        );
        Ok(IdTokens {
            client_id: client_id.to_string(),
            keys,
            validation,
            max_bytes: auth.max_token_bytes,
        })
    }

    /// The claims of `token`, when it is an ID token of this issuer for
    /// this client carrying `nonce`.
    pub async fn verify(
        &self,
        token: &str,
        nonce: &str,
    ) -> Result<Map<String, Value>, IdTokenError> {
        if token.len() > self.max_bytes {
            return Err(TokenError::TooLarge(self.max_bytes).into());
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| TokenError::Malformed("its header does not parse".into()))?;
        if !self.validation.algorithms.contains(&header.alg) {
            return Err(TokenError::Algorithm(format!("{:?}", header.alg)).into());
        }
        if super::jwt::is_access_token_type(header.typ.as_deref()) {
            return Err(IdTokenError::AccessToken);
        }
        let key = self
            .keys
            .key(header.kid.as_deref(), header.alg)
            .await
            .map_err(TokenError::from)?;
        let mut validation = self.validation.clone();
        validation.algorithms = vec![header.alg];
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation)
            .map_err(|e| match e.kind() {
                ErrorKind::InvalidAudience => TokenError::WrongAudience,
                other => super::jwt::verification_error(other),
            })?
            .claims;
        self.check_claims(&claims, nonce)?;
        Ok(claims)
    }

    /// `iat`, `azp` and `nonce` (the library checked the rest).
    fn check_claims(&self, claims: &Map<String, Value>, nonce: &str) -> Result<(), IdTokenError> {
        if !claims.get("iat").is_some_and(Value::is_number) {
            return Err(TokenError::Claims(super::ClaimError::Missing("iat".into())).into());
        }
        let several_audiences = claims
            .get("aud")
            .and_then(Value::as_array)
            .is_some_and(|a| a.len() > 1);
        match claims.get("azp") {
            Some(azp) if azp.as_str() != Some(self.client_id.as_str()) => {
                return Err(IdTokenError::AuthorizedParty);
            }
            None if several_audiences => return Err(IdTokenError::AuthorizedParty),
            _ => {}
        }
        let sent = claims.get("nonce").and_then(Value::as_str);
        if !sent.is_some_and(|n| crate::auth::tokens_equal(n, nonce)) {
            return Err(IdTokenError::Nonce);
        }
        Ok(())
    }
}
