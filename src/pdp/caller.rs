//! Who asks a decision application, and whether they may: a key of the PDP
//! role, or an access token from one of the configured identity providers
//! (`[[auth.issuers]]`), the same tokens people use on the MCP endpoints.
//!
//! - **A key** (`Bearer rsk_live_…`) asks the applications it names
//!   (`pdpApps`); any other: 403, whether it exists or not. Wrong keys are
//!   throttled as everywhere.
//! - **A token** (any other bearer, when issuers are configured) must be
//!   valid (signature, expiry, issuer, as for MCP: 401 otherwise), issued
//!   for the application: its `aud` names the application's PDP identifier
//!   `{public_url}/pdp/<app>`, or `{public_url}` at the default paths of
//!   the default application, or `[auth].resource` (a token for the
//!   gateway's resource is good everywhere), or an `audiences` entry of its
//!   issuer (401 otherwise); it must belong to an org (the issuer's `org`
//!   or `org_claim`: 403 otherwise), and grant the scope `authzen:<app>`
//!   (after `auth.scope_implies`: 403 otherwise). Its org's rate limits
//!   apply, and its holder's own bucket (the person's stand-in id) as a
//!   key's does. The records name its issuer, subject, client and `jti`,
//!   never the token.

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::error::PdpError;
use crate::auth::CredentialError;
use crate::gateway::{Gateway, ResolveError};

/// The scope a token needs to ask the application `app`.
pub fn scope_for(app: &str) -> String {
    format!("authzen:{app}")
}

/// Who asks, past authentication and the check that they may ask.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Their org: its rate limits, the records' org.
    pub org_id: String,
    /// Their own rate-limit bucket: the key's id, or the token holder's
    /// stand-in id (`person:…`).
    pub id: String,
    /// For a token, what the records name of it (`notes.authzen.token`).
    pub token: Option<Value>,
}

impl Caller {
    /// The key's id, when a key asks.
    pub fn key_id(&self) -> Option<&str> {
        self.token.is_none().then_some(self.id.as_str())
    }
}

/// The caller of a request to the application `app`; `at_default` when it
/// came at the default paths.
pub async fn caller(
    gw: &Gateway,
    headers: &HeaderMap,
    app: &str,
    at_default: bool,
) -> Result<Caller, PdpError> {
    match crate::auth::bearer_key(headers) {
        Ok(presented) => {
            let key = gw.authenticate(&presented).await.map_err(refused_key)?;
            if !key.pdp_apps.iter().any(|a| a == app) {
                return Err(PdpError::Forbidden(app.to_string()));
            }
            Ok(Caller {
                org_id: key.org_id,
                id: key.id,
                token: None,
            })
        }
        Err(e) if !gw.identities.enabled() => Err(PdpError::Unauthenticated(e.to_string())),
        Err(CredentialError::Missing) => Err(PdpError::Unauthenticated(
            "missing `Authorization: Bearer …`: a key of the PDP role or an access token".into(),
        )),
        Err(CredentialError::Malformed) => token_caller(gw, headers, app, at_default).await,
    }
}

fn refused_key(e: ResolveError) -> PdpError {
    match e {
        ResolveError::Store(s) => {
            tracing::error!(error = %s, "store failure while authenticating a decision-point key");
            PdpError::Unavailable
        }
        other => PdpError::Unauthenticated(other.to_string()),
    }
}

/// The holder of an access token (rules in the module doc).
async fn token_caller(
    gw: &Gateway,
    headers: &HeaderMap,
    app: &str,
    at_default: bool,
) -> Result<Caller, PdpError> {
    let token = crate::auth::bearer_token(headers).ok_or_else(|| {
        PdpError::Unauthenticated("the `Authorization` header must be `Bearer <token>`".into())
    })?;
    let base = crate::mcp::public_url::base_url(gw, headers);
    let identifier = format!("{base}/pdp/{app}");
    let mut audiences = vec![identifier.as_str()];
    if at_default {
        audiences.push(&base);
    }
    if let Some(resource) = &gw.identities.config().resource {
        audiences.push(resource);
    }
    let identity = gw
        .identities
        .authenticate(token, &audiences)
        .await
        .map_err(|e| {
            tracing::info!(error = %e, app, "access token refused by the decision point");
            PdpError::Unauthenticated(e.to_string())
        })?;
    let person = gw
        .identities
        .person(&identity)
        .map_err(|e| PdpError::TokenForbidden(e.to_string()))?;
    let scope = scope_for(app);
    if !gw.identities.scopes(&identity).contains(&scope) {
        return Err(PdpError::TokenForbidden(format!(
            "the token does not grant the scope `{scope}` this application needs"
        )));
    }
    Ok(Caller {
        org_id: person.org().to_string(),
        id: person.caller_id().to_string(),
        token: Some(json!({
            "issuer": identity.issuer,
            "subject": identity.subject,
            "client": identity.client_id,
            "jti": identity.jti,
        })),
    })
}
