//! A validated token as the caller of a request: the person it names, in
//! the org the issuer's configuration gives it, as the policy module's
//! checked facts (the `Gateway::User` principal and `context.token`).

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use sha2::{Digest, Sha256};

use super::Identity;
use crate::policy::identity::{CheckedToken, CheckedUser, IdentityError, TokenFacts, UserFacts};

/// A person calling through the gateway.
#[derive(Debug, Clone)]
pub struct Person {
    /// The principal of their decisions.
    pub user: CheckedUser,
    /// `context.token` and `context.client` of their decisions.
    pub token: CheckedToken,
    /// `jti` of their token, when it has one.
    pub jti: Option<String>,
    /// The scopes the token grants, as it lists them (before
    /// `auth.scope_implies`).
    pub granted: Vec<String>,
    /// Stand-in id for per-caller bookkeeping ([`Person::caller_id`]).
    caller_id: String,
    /// Everything their entities hold, hashed: the session view cache's
    /// key for them.
    view_key: String,
}

/// Where a validated token keeps the person it makes, so that only its
/// first request builds them (the slot lives as long as the token's
/// cache entry).
#[derive(Debug, Clone, Default)]
pub struct PersonSlot(Arc<OnceLock<Result<Arc<Person>, PersonError>>>);

impl PersonSlot {
    /// The person, built by `make` on first use.
    pub fn get_or_make(
        &self,
        make: impl FnOnce() -> Result<Person, PersonError>,
    ) -> Result<Arc<Person>, PersonError> {
        self.0.get_or_init(|| make().map(Arc::new)).clone()
    }
}

/// Why a valid token cannot call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PersonError {
    /// The issuer's configuration gives the token no org.
    #[error(
        "the token names no organization (the issuer has no `org` and its `org_claim` is absent)"
    )]
    NoOrg,
    /// A fact exceeds the limits of the Cedar vocabulary.
    #[error("the token's claims exceed a limit: {0}")]
    Facts(#[from] IdentityError),
}

impl Person {
    /// The person `identity` names, holding `scopes` (the granted ones and
    /// those they imply).
    pub fn new(identity: &Identity, scopes: BTreeSet<String>) -> Result<Person, PersonError> {
        let org = identity.org.clone().ok_or(PersonError::NoOrg)?;
        let user = UserFacts {
            org,
            issuer: identity.issuer.clone(),
            subject: identity.subject.clone(),
            name: identity.name.clone(),
            email: identity.email.clone(),
            groups: identity.groups.clone(),
            tags: identity.tags.clone(),
        }
        .checked()?;
        let token = TokenFacts {
            issuer: identity.issuer.clone(),
            audience: identity.audience.clone(),
            scopes: scopes.into_iter().collect(),
            expires_at: identity.expires_at,
            client_id: identity.client_id.clone(),
        }
        .checked()?;
        let caller_id = {
            let digest = Sha256::digest(user.id().as_bytes());
            format!("person:{}", hex::encode(&digest[..12]))
        };
        let view_key = view_key(&user);
        Ok(Person {
            user,
            token,
            jti: identity.jti.clone(),
            granted: identity.granted.clone(),
            caller_id,
            view_key,
        })
    }

    /// The org the person belongs to.
    pub fn org(&self) -> &str {
        &self.user.facts().org
    }

    /// A stable id for per-caller bookkeeping (rate limits, streams, cached
    /// views): never a daemon key's id, which is 16 hex characters.
    pub fn caller_id(&self) -> &str {
        &self.caller_id
    }

    /// The session view cache's key for this person: a hash of everything
    /// their entities hold, so a changed claim builds a new view. The
    /// token's own facts (scopes, client, expiry, `jti`) are the request's,
    /// not the view's: a person's new token finds the view their last one
    /// built (a verdict that read `context.token` is remembered under the
    /// token's digest, and the records name each request's own `jti`).
    pub fn view_key(&self) -> &str {
        &self.view_key
    }
}

fn view_key(user: &CheckedUser) -> String {
    let facts = user.facts();
    let parts = serde_json::json!([user.id(), facts.name, facts.email, facts.groups, facts.tags]);
    format!(
        "person:{}",
        hex::encode(Sha256::digest(parts.to_string().as_bytes()))
    )
}
