//! One configured issuer and the validation of its JWT access tokens
//! (OAuth 2.1 §5.2, RFC 9068): the header's `alg` must be one the issuer
//! allows (asymmetric only, so `none` and an HMAC signed with a public key
//! never verify) and fit the key; `typ` must be `at+jwt` where the issuer
//! issues RFC 9068 tokens; the signature must verify with a key the issuer
//! publishes; `iss` must be the issuer exactly; `exp` (required) and `nbf`
//! hold within the leeway; `aud` is required (which audiences the request
//! accepts is decided per request by [`super::Identities::authenticate`]).

use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Header, Validation};
use serde_json::{Map, Value};

use super::claims::{self, Identity};
use super::config::{AuthConfig, IssuerConfig};
use super::fetch::Fetcher;
use super::keys::IssuerKeys;
use super::{AuthConfigError, TokenError};

/// An issuer ready to validate tokens.
#[derive(Debug)]
pub struct Issuer {
    /// Its configuration.
    pub config: Arc<IssuerConfig>,
    keys: IssuerKeys,
    validation: Validation,
}

/// Algorithms an issuer may allow: asymmetric ones only.
const ASYMMETRIC: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

impl Issuer {
    /// The issuer of `config`, or why its configuration is refused.
    pub fn new(
        config: &IssuerConfig,
        auth: &AuthConfig,
        fetcher: Arc<Fetcher>,
    ) -> Result<Issuer, AuthConfigError> {
        let config = Arc::new(config.clone());
        let refuse = |reason: String| AuthConfigError::Issuer {
            issuer: config.issuer.clone(),
            reason,
        };
        let url =
            reqwest::Url::parse(&config.issuer).map_err(|e| refuse(format!("not a URL: {e}")))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(refuse("the issuer must be an http(s) URL".into()));
        }
        let algorithms = allowed_algorithms(&config.algorithms).map_err(refuse)?;
        let mut validation = Validation::new(Algorithm::RS256);
        validation.algorithms = algorithms;
        validation.leeway = config.leeway_secs;
        validation.validate_nbf = true;
        validation.validate_aud = false;
        validation.set_issuer(&[&config.issuer]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let keys = IssuerKeys::new(
            config.clone(),
            fetcher,
            Duration::from_secs(auth.jwks_cache_secs),
            Duration::from_secs(auth.unknown_kid_refresh_secs),
        );
        Ok(Issuer {
            config,
            keys,
            validation,
        })
    }

    /// The identity of a JWT this issuer signed (its `iss` says so).
    pub async fn verify(&self, token: &str, header: &Header) -> Result<Identity, TokenError> {
        if !self.validation.algorithms.contains(&header.alg) {
            return Err(TokenError::Algorithm(format!("{:?}", header.alg)));
        }
        if self.config.require_at_jwt && !is_access_token_type(header.typ.as_deref()) {
            return Err(TokenError::NotAnAccessToken);
        }
        let key = self.keys.key(header.kid.as_deref(), header.alg).await?;
        // `decode` wants every listed algorithm in the key's family.
        let mut validation = self.validation.clone();
        validation.algorithms = vec![header.alg];
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation)
            .map_err(|e| verification_error(e.kind()))?;
        Ok(claims::identity(&self.config, &data.claims)?)
    }
}

/// RFC 9068 §2.1: `at+jwt`, or the full media type.
pub(super) fn is_access_token_type(typ: Option<&str>) -> bool {
    typ.is_some_and(|t| {
        t.eq_ignore_ascii_case("at+jwt") || t.eq_ignore_ascii_case("application/at+jwt")
    })
}

/// The configured algorithm names, each asymmetric.
pub(super) fn allowed_algorithms(names: &[String]) -> Result<Vec<Algorithm>, String> {
    if names.is_empty() {
        return Err("`algorithms` is empty".into());
    }
    names
        .iter()
        .map(|name| {
            let alg: Algorithm = name
                .parse()
                .map_err(|_| format!("`{name}` is not a JWS algorithm"))?;
            if ASYMMETRIC.contains(&alg) {
                Ok(alg)
            } else {
                Err(format!(
                    "`{name}` is not allowed: only asymmetric algorithms are"
                ))
            }
        })
        .collect()
}

/// The token error a failed `jsonwebtoken::decode` stands for.
pub(super) fn verification_error(kind: &ErrorKind) -> TokenError {
    match kind {
        ErrorKind::ExpiredSignature => TokenError::Expired,
        ErrorKind::ImmatureSignature => TokenError::NotYetValid,
        ErrorKind::InvalidIssuer => TokenError::UnknownIssuer,
        ErrorKind::InvalidSignature => TokenError::Signature,
        ErrorKind::InvalidAlgorithm => TokenError::Algorithm("does not fit the key".into()),
        ErrorKind::MissingRequiredClaim(claim) => {
            TokenError::Claims(claims::ClaimError::Missing(claim.clone()))
        }
        ErrorKind::InvalidClaimFormat(claim) => {
            TokenError::Claims(claims::ClaimError::Malformed(claim.clone()))
        }
        other => TokenError::Malformed(format!("{other:?}").chars().take(120).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_asymmetric_algorithms_may_be_configured() {
        assert!(allowed_algorithms(&["RS256".into(), "ES256".into()]).is_ok());
        let err = allowed_algorithms(&["HS256".into()]).unwrap_err();
        assert!(err.contains("only asymmetric"), "{err}");
        let err = allowed_algorithms(&["none".into()]).unwrap_err();
        assert!(err.contains("not a JWS algorithm"), "{err}");
        assert!(allowed_algorithms(&[]).is_err());
    }

    #[test]
    fn rfc9068_types_are_recognized() {
        assert!(is_access_token_type(Some("at+jwt")));
        assert!(is_access_token_type(Some("application/AT+JWT")));
        assert!(!is_access_token_type(Some("JWT")));
        assert!(!is_access_token_type(None));
    }
}
