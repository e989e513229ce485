//! A validated token as the caller of a request: the person it names, in
//! the org the issuer's configuration gives it, as the policy module's
//! checked facts (the `Gateway::User` principal and `context.token`).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Identity;
use crate::policy::identity::{CheckedToken, CheckedUser, IdentityError, TokenFacts, UserFacts};

/// A person calling through the gateway.
#[derive(Debug, Clone)]
pub struct Person {
    /// What the token said.
    pub identity: Arc<Identity>,
    /// The principal of their decisions.
    pub user: CheckedUser,
    /// `context.token` and `context.client` of their decisions.
    pub token: CheckedToken,
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
    pub fn new(identity: Arc<Identity>, scopes: BTreeSet<String>) -> Result<Person, PersonError> {
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
        Ok(Person {
            identity,
            user,
            token,
        })
    }

    /// The org the person belongs to.
    pub fn org(&self) -> &str {
        &self.user.facts().org
    }

    /// A stable id for per-caller bookkeeping (rate limits, streams, cached
    /// views): never a daemon key's id, which is 16 hex characters.
    pub fn caller_id(&self) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(self.user.id().as_bytes());
        format!("person:{}", hex::encode(&digest[..12]))
    }
}
