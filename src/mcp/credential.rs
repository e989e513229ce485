//! Who is calling: a daemon key (`rsk_live_…`) or a person's access token
//! from a configured identity provider.
//!
//! A bearer that parses as a daemon key is only ever checked as one. Any
//! other bearer is an access token when `[[auth.issuers]]` is configured,
//! and must have been issued for this endpoint (its URL as the client used
//! it) or the gateway's resource. Without a usable credential, and with
//! issuers configured, the 401 carries the `WWW-Authenticate` challenge an
//! MCP client follows to the identity provider. A token in the query
//! string is refused on every MCP route (OAuth 2.1 §5.2.2 forbids it),
//! whatever it holds.

use std::sync::Arc;

use axum::http::HeaderMap;

use super::error::McpError;
use super::resource_metadata;
use crate::auth::CredentialError;
use crate::gateway::Gateway;
use crate::identity::Identity;
use crate::identity::challenge::{self, ChallengeError};
use crate::identity::person::Person;
use crate::store::tenants::ApiKey;

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub enum Caller {
    /// A daemon key the gateway minted.
    Key(ApiKey),
    /// A person, by a validated access token.
    Person(Arc<Identity>),
}

/// The caller of a request to the MCP endpoint at `path`.
pub async fn caller(gw: &Gateway, headers: &HeaderMap, path: &str) -> Result<Caller, McpError> {
    match crate::auth::bearer_key(headers) {
        Ok(key) => gw
            .authenticate_daemon(&key)
            .await
            .map(Caller::Key)
            .map_err(McpError::resolving),
        Err(e) if !gw.identities.enabled() => Err(McpError::Unauthenticated(e.to_string())),
        Err(CredentialError::Missing) => Err(challenged(gw, headers, path, None)),
        Err(CredentialError::Malformed) => token_caller(gw, headers, path).await,
    }
}

/// The person a non-key bearer token stands for.
async fn token_caller(gw: &Gateway, headers: &HeaderMap, path: &str) -> Result<Caller, McpError> {
    let Some(token) = crate::auth::bearer_token(headers) else {
        let why = "the `Authorization` header must be `Bearer <token>`";
        return Err(challenged(
            gw,
            headers,
            path,
            Some((ChallengeError::InvalidRequest, why)),
        ));
    };
    let endpoint = format!("{}{path}", super::public_url::base_url(gw, headers));
    let mut audiences = vec![endpoint.as_str()];
    if let Some(resource) = &gw.identities.config().resource {
        audiences.push(resource);
    }
    match gw.identities.authenticate(token, &audiences).await {
        Ok(identity) => Ok(Caller::Person(identity)),
        Err(e) => {
            tracing::info!(error = %e, path, "access token refused");
            let why = e.to_string();
            let mut refused = challenged(
                gw,
                headers,
                path,
                Some((ChallengeError::InvalidToken, &why)),
            );
            if let McpError::Challenged { refused: r, .. } = &mut refused {
                *r = Some(e.reason());
            }
            Err(refused)
        }
    }
}

/// The person a validated token names, or 403 when the token gives no org
/// or its claims exceed the vocabulary's bounds.
pub fn person(gw: &Gateway, identity: &Identity) -> Result<Arc<Person>, McpError> {
    gw.identities
        .person(identity)
        .map_err(|e| McpError::Forbidden(e.to_string()))
}

/// Refuses a request whose query string carries `access_token`.
pub fn refuse_query_token(
    gw: &Gateway,
    headers: &HeaderMap,
    path: &str,
    query: Option<&str>,
) -> Result<(), McpError> {
    let carries_token = query.is_some_and(|q| {
        q.split('&').any(|pair| {
            pair.split('=')
                .next()
                .is_some_and(|name| name.eq_ignore_ascii_case("access_token"))
        })
    });
    if carries_token && !gw.identities.enabled() {
        return Err(McpError::Unauthenticated(
            "access tokens are never accepted in the URL".into(),
        ));
    }
    if carries_token {
        let why = "access tokens are accepted only in the `Authorization` header, never in the URL";
        return Err(challenged(
            gw,
            headers,
            path,
            Some((ChallengeError::InvalidRequest, why)),
        ));
    }
    Ok(())
}

/// A 401 with the endpoint's challenge.
fn challenged(
    gw: &Gateway,
    headers: &HeaderMap,
    path: &str,
    error: Option<(ChallengeError, &str)>,
) -> McpError {
    let metadata = resource_metadata::url_for(gw, headers, path);
    let auth = gw.identities.config();
    let scopes = if auth.challenge_scopes.is_empty() {
        &auth.scopes_supported
    } else {
        &auth.challenge_scopes
    };
    let message = match error {
        Some((_, why)) => why.to_string(),
        None => "this endpoint needs a daemon key or an access token from the identity provider its metadata names".into(),
    };
    McpError::Challenged {
        message,
        challenge: challenge::bearer(&metadata, scopes, error),
        refused: None,
    }
}
