//! Opaque access tokens, asked of the issuer's RFC 7662 introspection
//! endpoint. Only issuers with an `introspection_client_id` are asked (the
//! gateway authenticates as that client), in configuration order; the
//! first that calls the token `active` gives its identity. An inactive
//! (revoked, expired, unknown) token is refused. The answer must name the
//! issuer (when it carries `iss`), an `exp` still ahead and an `aud`, like
//! a JWT would.

use serde_json::{Map, Value};

use super::TokenError;
use super::claims::{self, Identity};
use super::fetch::Fetcher;
use super::jwt::Issuer;

/// The identity of an opaque token, from the first issuer that knows it.
pub async fn identity(
    issuers: &[Issuer],
    fetcher: &Fetcher,
    token: &str,
    now: i64,
) -> Result<Identity, TokenError> {
    let mut asked = false;
    for issuer in issuers {
        let Some(client_id) = &issuer.config.introspection_client_id else {
            continue;
        };
        asked = true;
        let endpoint = match &issuer.config.introspection_endpoint {
            Some(url) => url.clone(),
            None => fetcher
                .metadata(&issuer.config.issuer)
                .await
                .map_err(|e| TokenError::Provider(e.to_string()))?
                .endpoint("introspection_endpoint")
                .ok_or_else(|| {
                    TokenError::Provider("the issuer names no introspection endpoint".into())
                })?,
        };
        let secret = client_secret(&issuer.config);
        let form = [("token", token), ("token_type_hint", "access_token")];
        let answer = fetcher
            .post_form(&endpoint, (client_id, secret.as_deref()), &form)
            .await
            .map_err(|e| TokenError::Provider(e.to_string()))?;
        if answer.get("active") == Some(&Value::Bool(true)) {
            return active_identity(issuer, answer, now);
        }
    }
    if asked {
        Err(TokenError::Inactive)
    } else {
        Err(TokenError::Malformed(
            "not a JWT, and no issuer introspects tokens".into(),
        ))
    }
}

/// The gateway's secret at the introspection endpoint: the variable's
/// value, else the file's (read at each introspection, so a rotated secret
/// needs no restart).
fn client_secret(config: &super::IssuerConfig) -> Option<String> {
    let from_env = config
        .introspection_secret_env
        .as_deref()
        .and_then(|var| std::env::var(var).ok());
    from_env.or_else(|| {
        let path = config.introspection_secret_file.as_ref()?;
        let text = std::fs::read_to_string(path).ok()?;
        Some(text.trim_end().to_string())
    })
}

/// The identity an `active: true` answer describes.
fn active_identity(issuer: &Issuer, answer: Value, now: i64) -> Result<Identity, TokenError> {
    let claims: Map<String, Value> = match answer {
        Value::Object(map) => map,
        _ => return Err(TokenError::Inactive),
    };
    if let Some(iss) = claims.get("iss")
        && iss.as_str() != Some(issuer.config.issuer.as_str())
    {
        return Err(TokenError::UnknownIssuer);
    }
    match claims.get("exp").and_then(Value::as_i64) {
        Some(exp) if exp + issuer.config.leeway_secs as i64 > now => {}
        Some(_) => return Err(TokenError::Expired),
        None => {
            return Err(TokenError::Claims(claims::ClaimError::Missing(
                "exp".into(),
            )));
        }
    }
    if !claims.contains_key("aud") {
        return Err(TokenError::Claims(claims::ClaimError::Missing(
            "aud".into(),
        )));
    }
    let mut identity = claims::identity(&issuer.config, &claims)?;
    identity.issuer = issuer.config.issuer.clone();
    Ok(identity)
}
