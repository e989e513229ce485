//! A validated token's claims as the gateway's [`Identity`]: who the person
//! is, their groups and tags, their org, the client that acts for them and
//! what the token grants.
//!
//! Claims come from the identity provider and are treated as hostile input:
//! every string is bounded, and a token with more groups, tags or scopes
//! than the bounds below is refused rather than trimmed. Trimming would
//! fail open: a `forbid` on a group the gateway dropped would not apply.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::config::IssuerConfig;

/// The bounds are the Cedar vocabulary's (`policy::identity`): a claim the
/// entities could not hold is refused here, with the claim's name.
pub use crate::policy::identity::{
    MAX_AUDIENCES, MAX_GROUPS, MAX_SCOPES, MAX_VALUE_BYTES as MAX_CLAIM_BYTES,
};

/// A person (or a client acting on its own) as a validated token shows
/// them.
#[derive(Debug, Clone)]
pub struct Identity {
    /// `iss`, exactly.
    pub issuer: String,
    /// The subject claim.
    pub subject: String,
    /// Display name: the name claim, else `preferred_username`, else the
    /// email, else the subject.
    pub name: String,
    /// The email claim, when present.
    pub email: Option<String>,
    /// The groups claim, in the token's order, without repeats.
    pub groups: Vec<String>,
    /// Configured tags: tag name → the claim's value as a string.
    pub tags: BTreeMap<String, String>,
    /// The org id the issuer's configuration gives the token, if any.
    pub org: Option<String>,
    /// `client_id`, else `azp`, else `cid`.
    pub client_id: Option<String>,
    /// The scopes the token grants, as it lists them.
    pub granted: Vec<String>,
    /// `aud`, as a list.
    pub audience: Vec<String>,
    /// `exp`, in seconds since the epoch.
    pub expires_at: i64,
    /// `jti`, when present (recorded; the token never is).
    pub jti: Option<String>,
    /// The person this identity makes, built at its first request and kept
    /// with the validated token (`Identities::person`).
    pub(crate) person: super::person::PersonSlot,
}

/// Why a token's claims cannot make an identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// A required claim is absent or not a string.
    #[error("the token has no string `{0}` claim")]
    Missing(String),
    /// A claim has the wrong shape.
    #[error("the token's `{0}` claim is malformed")]
    Malformed(String),
    /// A claim exceeds a bound.
    #[error("the token's `{claim}` claim exceeds {limit}")]
    TooLarge { claim: String, limit: String },
}

/// The identity `claims` describe under `issuer`'s mapping.
pub fn identity(
    issuer: &IssuerConfig,
    claims: &Map<String, Value>,
) -> Result<Identity, ClaimError> {
    let subject = bounded(
        required(claims, &issuer.subject_claim)?,
        &issuer.subject_claim,
    )?;
    let email = optional(claims, &issuer.email_claim)?;
    let name = optional(claims, &issuer.name_claim)?
        .or(optional(claims, "preferred_username")?)
        .or_else(|| email.clone())
        .unwrap_or_else(|| subject.clone());
    // RFC 9068 `client_id`; OpenID's `azp` (Entra ID, Keycloak, Auth0);
    // Okta's `cid`.
    let client_id = optional(claims, "client_id")?
        .or(optional(claims, "azp")?)
        .or(optional(claims, "cid")?);
    Ok(Identity {
        issuer: issuer.issuer.clone(),
        name,
        email,
        groups: string_list(claims, &issuer.groups_claim, MAX_GROUPS)?,
        tags: tags(issuer, claims)?,
        org: org(issuer, claims)?,
        client_id,
        granted: scopes(claims)?,
        audience: string_list(claims, "aud", MAX_AUDIENCES)?,
        expires_at: claims.get("exp").and_then(Value::as_i64).unwrap_or(0),
        jti: optional(claims, "jti")?,
        subject,
        person: Default::default(),
    })
}

impl Identity {
    /// Whether the token names one of `accepted` as its audience (a
    /// trailing `/` is not significant).
    pub fn is_for(&self, accepted: &[&str]) -> bool {
        let norm = |s: &str| s.trim_end_matches('/').to_string();
        self.audience
            .iter()
            .any(|aud| accepted.iter().any(|a| norm(a) == norm(aud)))
    }

    /// The granted scopes and every scope they imply (transitively).
    pub fn scopes(&self, implies: &BTreeMap<String, Vec<String>>) -> BTreeSet<String> {
        expand(&self.granted, implies)
    }
}

/// `granted` and every scope they imply (transitively).
pub fn expand(granted: &[String], implies: &BTreeMap<String, Vec<String>>) -> BTreeSet<String> {
    let mut held: BTreeSet<String> = BTreeSet::new();
    let mut todo: Vec<&str> = granted.iter().map(String::as_str).collect();
    while let Some(scope) = todo.pop() {
        if held.insert(scope.to_string()) {
            todo.extend(implies.get(scope).into_iter().flatten().map(String::as_str));
        }
    }
    held
}

/// The scopes of `scope` (space-separated) or `scp` (string or array).
fn scopes(claims: &Map<String, Value>) -> Result<Vec<String>, ClaimError> {
    if let Some(Value::String(s)) = claims.get("scope") {
        let list: Vec<String> = s.split_whitespace().map(str::to_string).collect();
        return checked_list("scope", dedup(list), MAX_SCOPES);
    }
    if let Some(Value::String(s)) = claims.get("scp") {
        let list: Vec<String> = s.split_whitespace().map(str::to_string).collect();
        return checked_list("scp", dedup(list), MAX_SCOPES);
    }
    string_list(claims, "scp", MAX_SCOPES)
}

/// The configured tags whose claims hold a string, number or boolean.
fn tags(
    issuer: &IssuerConfig,
    claims: &Map<String, Value>,
) -> Result<BTreeMap<String, String>, ClaimError> {
    let mut tags = BTreeMap::new();
    for (tag, claim) in &issuer.tags {
        let value = match claims.get(claim) {
            Some(Value::String(s)) => s.clone(),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
            _ => continue,
        };
        tags.insert(tag.clone(), bounded(value, claim)?);
    }
    Ok(tags)
}

/// The org: fixed by the issuer, else its claim through `org_map`.
fn org(issuer: &IssuerConfig, claims: &Map<String, Value>) -> Result<Option<String>, ClaimError> {
    if let Some(org) = &issuer.org {
        return Ok(Some(org.clone()));
    }
    let Some(claim) = &issuer.org_claim else {
        return Ok(None);
    };
    let Some(value) = optional(claims, claim)? else {
        return Ok(None);
    };
    let value = bounded(value, claim)?;
    Ok(Some(issuer.org_map.get(&value).cloned().unwrap_or(value)))
}

/// A claim that must be a string.
fn required(claims: &Map<String, Value>, name: &str) -> Result<String, ClaimError> {
    optional(claims, name)?.ok_or_else(|| ClaimError::Missing(name.to_string()))
}

/// A claim that may be absent; present, it must be a bounded string.
fn optional(claims: &Map<String, Value>, name: &str) -> Result<Option<String>, ClaimError> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => bounded(s.clone(), name).map(Some),
        Some(_) => Err(ClaimError::Malformed(name.to_string())),
    }
}

/// A claim holding one string or an array of strings.
fn string_list(
    claims: &Map<String, Value>,
    name: &str,
    max: usize,
) -> Result<Vec<String>, ClaimError> {
    let list = match claims.get(name) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => {
            if items.len() > max {
                return Err(too_many(name, max));
            }
            let strings = items.iter().map(|v| v.as_str().map(str::to_string));
            strings
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ClaimError::Malformed(name.to_string()))?
        }
        Some(_) => return Err(ClaimError::Malformed(name.to_string())),
    };
    checked_list(name, dedup(list), max)
}

fn checked_list(name: &str, list: Vec<String>, max: usize) -> Result<Vec<String>, ClaimError> {
    if list.len() > max {
        return Err(too_many(name, max));
    }
    list.into_iter().map(|s| bounded(s, name)).collect()
}

fn dedup(list: Vec<String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    list.into_iter()
        .filter(|s| seen.insert(s.clone()))
        .collect()
}

fn bounded(value: String, claim: &str) -> Result<String, ClaimError> {
    if value.len() > MAX_CLAIM_BYTES {
        return Err(ClaimError::TooLarge {
            claim: claim.to_string(),
            limit: format!("{MAX_CLAIM_BYTES} bytes"),
        });
    }
    Ok(value)
}

fn too_many(name: &str, max: usize) -> ClaimError {
    ClaimError::TooLarge {
        claim: name.to_string(),
        limit: format!("{max} entries"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn issuer() -> IssuerConfig {
        IssuerConfig {
            issuer: "https://idp.example".into(),
            org_claim: Some("tenant".into()),
            org_map: [("t-1".to_string(), "acme".to_string())].into(),
            tags: [("department".to_string(), "dept".to_string())].into(),
            ..IssuerConfig::default()
        }
    }

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn claims_map_to_the_identity_policies_see() {
        let c = claims(json!({
            "sub": "alice", "email": "alice@example.com", "groups": ["sre", "dev", "sre"],
            "dept": "finance", "tenant": "t-1", "client_id": "vscode",
            "scope": "mcp:tools openid", "aud": "https://gw.example/mcp", "exp": 2000000000,
            "jti": "j-1"
        }));
        let id = identity(&issuer(), &c).unwrap();
        assert_eq!(id.subject, "alice");
        assert_eq!(id.name, "alice@example.com", "no name claim: the email");
        assert_eq!(id.groups, vec!["sre", "dev"]);
        assert_eq!(id.tags["department"], "finance");
        assert_eq!(id.org.as_deref(), Some("acme"));
        assert_eq!(id.client_id.as_deref(), Some("vscode"));
        assert_eq!(id.granted, vec!["mcp:tools", "openid"]);
        assert!(id.is_for(&["https://gw.example/mcp/"]));
        assert!(!id.is_for(&["https://gw.example/mcp/other"]));
    }

    #[test]
    fn scope_hierarchies_are_followed_transitively() {
        let c = claims(json!({"sub": "a", "scp": ["mcp:admin"], "exp": 1}));
        let id = identity(&issuer(), &c).unwrap();
        let implies = [
            ("mcp:admin".to_string(), vec!["mcp:tools".to_string()]),
            ("mcp:tools".to_string(), vec!["mcp:read".to_string()]),
        ]
        .into();
        let held: Vec<_> = id.scopes(&implies).into_iter().collect();
        assert_eq!(held, vec!["mcp:admin", "mcp:read", "mcp:tools"]);
    }

    #[test]
    fn oversized_or_malformed_claims_refuse_the_token_rather_than_trimming_it() {
        let many: Vec<String> = (0..=MAX_GROUPS).map(|i| format!("g{i}")).collect();
        let err = identity(&issuer(), &claims(json!({"sub": "a", "groups": many}))).unwrap_err();
        assert!(matches!(err, ClaimError::TooLarge { .. }), "{err}");
        let long = "x".repeat(MAX_CLAIM_BYTES + 1);
        let err = identity(&issuer(), &claims(json!({"sub": long}))).unwrap_err();
        assert!(matches!(err, ClaimError::TooLarge { .. }), "{err}");
        let err = identity(&issuer(), &claims(json!({"sub": "a", "groups": [1]}))).unwrap_err();
        assert_eq!(err, ClaimError::Malformed("groups".into()));
        let err = identity(&issuer(), &claims(json!({"email": "a@b"}))).unwrap_err();
        assert_eq!(err, ClaimError::Missing("sub".into()));
    }
}
