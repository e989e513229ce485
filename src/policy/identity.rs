//! People signed in through an identity provider, and the bearer tokens
//! they present, as plain facts: what the request path hands in once it
//! has validated a token, checked against the limits below before any
//! Cedar entity or context is built from them (`entities.rs` builds them
//! from the checked facts only).
//!
//! A person is `Gateway::User::"<issuer>|<subject>"` ([`user_id`]): the
//! issuer never holds a `|` (an issuer URL cannot hold one unescaped, and
//! one that does is refused), so the id splits at its first `|`.
//!
//! **Limits.** Claims are written by an identity provider, so they are
//! hostile input. Each is bounded:
//!
//! | fact | limit |
//! |---|---|
//! | `groups` | at most [`MAX_GROUPS`], each at most [`MAX_GROUP_BYTES`] bytes |
//! | `tags` | at most [`MAX_TAGS`], each key at most [`MAX_TAG_KEY_BYTES`] bytes, each value at most [`MAX_VALUE_BYTES`] |
//! | `org`, `issuer`, `subject`, `name`, `email`, `client_id` | at most [`MAX_VALUE_BYTES`] bytes; `org`, `issuer` and `subject` not empty |
//! | `audience` | at most [`MAX_AUDIENCES`], each at most [`MAX_VALUE_BYTES`] bytes |
//! | `scopes` | at most [`MAX_SCOPES`], each at most [`MAX_SCOPE_BYTES`] bytes |
//! | `expires_at` | unix seconds (the JWT `exp` claim) from 0 to [`MAX_EXPIRES_AT`] (9999-12-31T23:59:59Z, the last second a Cedar `datetime` is written for) |
//!
//! **The rule: refuse, never cut.** A person or token with any fact over a
//! limit is refused whole ([`IdentityError`] names the fact and the
//! limit, never the hostile value); nothing is truncated or dropped,
//! because a shortened value or a missing group or tag could make a
//! `forbid` miss (`forbid (principal in Gateway::Group::"contractors", …)`).
//! Groups, audiences and scopes are sets: duplicates are merged and the
//! order is sorted, which changes nothing a policy can see. Within the
//! limits every fact is a string, and Cedar takes any string as an entity
//! id, attribute or tag value, so a checked person's entities always
//! build and no claim can make the policy set fail.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Kind, Uid};

/// Most groups one person may carry (Microsoft Entra ID puts at most 200
/// in a token before it switches to an overage claim).
pub const MAX_GROUPS: usize = 256;
/// Longest group name, in bytes.
pub const MAX_GROUP_BYTES: usize = 256;
/// Most mapped claims (entity tags) one person may carry.
pub const MAX_TAGS: usize = 64;
/// Longest tag key (a mapped claim's name), in bytes.
pub const MAX_TAG_KEY_BYTES: usize = 128;
/// Longest single value: a tag value, an org id, an issuer, a subject, a
/// name, an email, an audience or a client id, in bytes.
pub const MAX_VALUE_BYTES: usize = 1024;
/// Most audiences one token may name.
pub const MAX_AUDIENCES: usize = 32;
/// Most scopes one token may carry.
pub const MAX_SCOPES: usize = 256;
/// Longest scope, in bytes.
pub const MAX_SCOPE_BYTES: usize = 256;
/// Latest expiry, in unix seconds: 9999-12-31T23:59:59Z.
pub const MAX_EXPIRES_AT: i64 = 253_402_300_799;

/// A person as the request path knows them from a validated token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserFacts {
    /// The gateway org the person belongs to (`User.org`, and a parent).
    pub org: String,
    /// The token's issuer (`iss`).
    pub issuer: String,
    /// The token's subject (`sub`).
    pub subject: String,
    /// The display name: the `name` claim, else `preferred_username`, else
    /// `email`, else the subject (the caller chooses).
    pub name: String,
    /// The `email` claim, when the token has one.
    pub email: Option<String>,
    /// The groups claim's values (`Gateway::Group` parents, children of `org`).
    pub groups: Vec<String>,
    /// The mapped claims, as entity tags (`principal.getTag("department")`).
    pub tags: BTreeMap<String, String>,
}

/// A person whose facts are within the limits (module doc), with their
/// groups as a sorted set: the only form entities are built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedUser {
    facts: UserFacts,
    id: String,
}

/// The bearer token of a request as the request path validated it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFacts {
    /// `iss`.
    pub issuer: String,
    /// `aud` (a single audience is a set of one).
    pub audience: Vec<String>,
    /// `scope`, split at spaces.
    pub scopes: Vec<String>,
    /// `exp`, in unix seconds (a JWT NumericDate).
    pub expires_at: i64,
    /// The OAuth client it was issued to (`client_id`, else `azp`), if named.
    pub client_id: Option<String>,
}

/// A token whose facts are within the limits (module doc), with its
/// audiences and scopes as sorted sets and its expiry as RFC 3339 text.
///
/// Shared, not copied: every context of a person's request holds their
/// token, so a clone is a reference count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedToken(std::sync::Arc<TokenParts>);

#[derive(Debug, PartialEq, Eq)]
struct TokenParts {
    facts: TokenFacts,
    expires_at: String,
    /// SHA-256 of the facts, hex: what a reused verdict decided with this
    /// token's context is remembered under.
    digest: String,
    /// [`CheckedToken::context_members`] as the trail writes them.
    context_text: String,
}

/// Why a person's or a token's facts are refused (nothing is built from
/// them; the request path answers as for an unusable token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// A fact that must have a value is empty.
    #[error("`{fact}` is empty")]
    Empty {
        /// The fact's name.
        fact: &'static str,
    },
    /// A value is longer than its limit.
    #[error("a value of `{fact}` is longer than {max} bytes")]
    TooLong {
        /// The fact's name.
        fact: &'static str,
        /// The limit, in bytes.
        max: usize,
    },
    /// A list has more entries than its limit.
    #[error("`{fact}` has more than {max} entries")]
    TooMany {
        /// The fact's name.
        fact: &'static str,
        /// The limit.
        max: usize,
    },
    /// The issuer holds a `|`, which would make the user id ambiguous.
    #[error("`issuer` contains `|`")]
    IssuerBar,
    /// The expiry is not a time a Cedar `datetime` can hold.
    #[error("`expires_at` {0} is not between 0 and {MAX_EXPIRES_AT} unix seconds")]
    Expiry(i64),
}

/// The id of `Gateway::User` for a token's issuer and subject.
pub fn user_id(issuer: &str, subject: &str) -> String {
    let mut id = String::with_capacity(issuer.len() + 1 + subject.len());
    for part in [issuer, "|", subject] {
        id.push_str(part);
    }
    id
}

/// `(issuer, subject)` of a `Gateway::User` id, split at its first `|`.
pub fn split_user_id(id: &str) -> Option<(&str, &str)> {
    id.split_once('|')
}

fn value(fact: &'static str, v: &str, max: usize) -> Result<(), IdentityError> {
    if v.len() > max {
        return Err(IdentityError::TooLong { fact, max });
    }
    Ok(())
}

fn required(fact: &'static str, v: &str) -> Result<(), IdentityError> {
    if v.is_empty() {
        return Err(IdentityError::Empty { fact });
    }
    value(fact, v, MAX_VALUE_BYTES)
}

/// Sorts and merges `items` after checking their count and lengths.
fn set(
    fact: &'static str,
    items: &mut Vec<String>,
    most: usize,
    max_bytes: usize,
) -> Result<(), IdentityError> {
    if items.len() > most {
        return Err(IdentityError::TooMany { fact, max: most });
    }
    for item in items.iter() {
        value(fact, item, max_bytes)?;
    }
    items.sort_unstable();
    items.dedup();
    Ok(())
}

impl UserFacts {
    /// Checks the facts against the limits (module doc).
    pub fn checked(mut self) -> Result<CheckedUser, IdentityError> {
        required("org", &self.org)?;
        required("issuer", &self.issuer)?;
        required("subject", &self.subject)?;
        if self.issuer.contains('|') {
            return Err(IdentityError::IssuerBar);
        }
        value("name", &self.name, MAX_VALUE_BYTES)?;
        if let Some(email) = &self.email {
            value("email", email, MAX_VALUE_BYTES)?;
        }
        set("groups", &mut self.groups, MAX_GROUPS, MAX_GROUP_BYTES)?;
        if self.tags.len() > MAX_TAGS {
            return Err(IdentityError::TooMany {
                fact: "tags",
                max: MAX_TAGS,
            });
        }
        for (key, v) in &self.tags {
            value("tags (key)", key, MAX_TAG_KEY_BYTES)?;
            value("tags", v, MAX_VALUE_BYTES)?;
        }
        let id = user_id(&self.issuer, &self.subject);
        Ok(CheckedUser { facts: self, id })
    }
}

impl CheckedUser {
    /// The checked facts (groups sorted, without duplicates).
    pub fn facts(&self) -> &UserFacts {
        &self.facts
    }

    /// The entity id, `"<issuer>|<subject>"`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `Gateway::User::"<issuer>|<subject>"`: the principal of the
    /// person's decisions.
    pub fn uid(&self) -> Uid {
        Kind::User.uid(&self.id)
    }
}

impl TokenFacts {
    /// Checks the facts against the limits (module doc).
    pub fn checked(mut self) -> Result<CheckedToken, IdentityError> {
        required("issuer", &self.issuer)?;
        set(
            "audience",
            &mut self.audience,
            MAX_AUDIENCES,
            MAX_VALUE_BYTES,
        )?;
        set("scopes", &mut self.scopes, MAX_SCOPES, MAX_SCOPE_BYTES)?;
        if let Some(client) = &self.client_id {
            value("client_id", client, MAX_VALUE_BYTES)?;
        }
        let expires_at = rfc3339(self.expires_at)?;
        let digest = {
            let f = &self;
            let facts =
                serde_json::json!([f.issuer, f.audience, f.scopes, f.expires_at, f.client_id]);
            hex::encode(Sha256::digest(facts.to_string().as_bytes()))
        };
        let members = context_members(&self, &expires_at);
        let context_text = members_text(members);
        Ok(CheckedToken(std::sync::Arc::new(TokenParts {
            facts: self,
            expires_at,
            digest,
            context_text,
        })))
    }
}

/// `context.token` (and `context.client` when the token names its client)
/// as Cedar JSON, in the order the context holds them.
fn context_members(facts: &TokenFacts, expires_at: &str) -> serde_json::Map<String, Value> {
    let mut members = serde_json::Map::with_capacity(2);
    members.insert(
        "token".into(),
        json!({
            "issuer": facts.issuer,
            "audience": facts.audience,
            "scopes": facts.scopes,
            "expiresAt": {"__extn": {"fn": "datetime", "arg": expires_at}},
        }),
    );
    if let Some(id) = &facts.client_id {
        members.insert("client".into(), json!({ "id": id }));
    }
    members
}

/// The members as `serde_json` writes them inside an object: the object's
/// text without its braces.
fn members_text(members: serde_json::Map<String, Value>) -> String {
    let text = Value::Object(members).to_string();
    text.strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or_default()
        .to_string()
}

impl CheckedToken {
    /// The checked facts (audiences and scopes sorted, without duplicates).
    pub fn facts(&self) -> &TokenFacts {
        &self.0.facts
    }

    /// The expiry as the RFC 3339 text of `context.token.expiresAt`
    /// (`YYYY-MM-DDThh:mm:ssZ`).
    pub fn expires_at(&self) -> &str {
        &self.0.expires_at
    }

    /// SHA-256 of the facts (hex): two tokens with the same digest give
    /// decisions the same `context.token` and `context.client`.
    pub fn digest(&self) -> &str {
        &self.0.digest
    }

    /// What the token adds to a request's context: `token`, and `client`
    /// when it names its client.
    pub fn context_members(&self) -> serde_json::Map<String, Value> {
        context_members(&self.0.facts, &self.0.expires_at)
    }

    /// [`CheckedToken::context_members`] as the trail records them inside
    /// the context's text (`"token":{…},"client":{…}`), written once per
    /// token: every decision record of a person's request carries them.
    pub fn context_text(&self) -> &str {
        &self.0.context_text
    }
}

/// `secs` as `YYYY-MM-DDThh:mm:ssZ`, within the years Cedar writes.
fn rfc3339(secs: i64) -> Result<String, IdentityError> {
    if !(0..=MAX_EXPIRES_AT).contains(&secs) {
        return Err(IdentityError::Expiry(secs));
    }
    let t =
        time::OffsetDateTime::from_unix_timestamp(secs).map_err(|_| IdentityError::Expiry(secs))?;
    Ok(format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> UserFacts {
        UserFacts {
            org: "acme".into(),
            issuer: "https://idp.acme.test".into(),
            subject: "alice".into(),
            name: "Alice".into(),
            email: Some("alice@acme.test".into()),
            groups: vec!["sre".into(), "dev".into(), "sre".into()],
            tags: BTreeMap::from([("department".into(), "finance".into())]),
        }
    }

    fn token() -> TokenFacts {
        TokenFacts {
            issuer: "https://idp.acme.test".into(),
            audience: vec!["https://gw.test/api/mcp".into()],
            scopes: vec!["mcp:tools".into(), "mcp:admin".into(), "mcp:tools".into()],
            expires_at: 1_795_000_000,
            client_id: Some("claude-desktop".into()),
        }
    }

    #[test]
    fn a_user_id_joins_issuer_and_subject_and_splits_back() {
        let user = alice().checked().unwrap();
        assert_eq!(user.id(), "https://idp.acme.test|alice");
        assert_eq!(
            user.uid().to_string(),
            r#"Gateway::User::"https://idp.acme.test|alice""#
        );
        // A subject may hold `|`: the id splits at the first one.
        let id = user_id("https://idp.test", "a|b");
        assert_eq!(split_user_id(&id), Some(("https://idp.test", "a|b")));
        assert_eq!(user.facts().groups, vec!["dev", "sre"], "a sorted set");
    }

    #[test]
    fn facts_within_the_limits_are_kept_whole() {
        let mut facts = alice();
        facts.groups = (0..MAX_GROUPS).map(|i| format!("{i:0>256}")).collect();
        facts.tags = (0..MAX_TAGS)
            .map(|i| (format!("{i:0>128}"), "v".repeat(MAX_VALUE_BYTES)))
            .collect();
        facts.name = "n".repeat(MAX_VALUE_BYTES);
        let user = facts.clone().checked().unwrap();
        assert_eq!(user.facts().groups.len(), MAX_GROUPS);
        assert_eq!(user.facts().tags, facts.tags);
        assert_eq!(user.facts().name, facts.name);
    }

    /// One fact over its limit refuses the whole person (nothing is cut).
    #[test]
    fn a_fact_over_its_limit_refuses_the_person() {
        type Change = fn(&mut UserFacts);
        let over: Vec<(Change, IdentityError)> = vec![
            (
                |f| f.groups = (0..=MAX_GROUPS).map(|i| i.to_string()).collect(),
                IdentityError::TooMany {
                    fact: "groups",
                    max: MAX_GROUPS,
                },
            ),
            (
                |f| f.groups.push("g".repeat(MAX_GROUP_BYTES + 1)),
                IdentityError::TooLong {
                    fact: "groups",
                    max: MAX_GROUP_BYTES,
                },
            ),
            (
                |f| {
                    f.tags = (0..=MAX_TAGS)
                        .map(|i| (i.to_string(), String::new()))
                        .collect()
                },
                IdentityError::TooMany {
                    fact: "tags",
                    max: MAX_TAGS,
                },
            ),
            (
                |f| {
                    f.tags.insert("k".repeat(MAX_TAG_KEY_BYTES + 1), "v".into());
                },
                IdentityError::TooLong {
                    fact: "tags (key)",
                    max: MAX_TAG_KEY_BYTES,
                },
            ),
            (
                |f| {
                    f.tags.insert("k".into(), "v".repeat(MAX_VALUE_BYTES + 1));
                },
                IdentityError::TooLong {
                    fact: "tags",
                    max: MAX_VALUE_BYTES,
                },
            ),
            (
                |f| f.email = Some("e".repeat(MAX_VALUE_BYTES + 1)),
                IdentityError::TooLong {
                    fact: "email",
                    max: MAX_VALUE_BYTES,
                },
            ),
            (
                |f| f.name = "é".repeat(MAX_VALUE_BYTES / 2 + 1),
                IdentityError::TooLong {
                    fact: "name",
                    max: MAX_VALUE_BYTES,
                },
            ),
            (
                |f| f.subject.clear(),
                IdentityError::Empty { fact: "subject" },
            ),
            (|f| f.org.clear(), IdentityError::Empty { fact: "org" }),
            (
                |f| f.issuer = "https://idp|evil".into(),
                IdentityError::IssuerBar,
            ),
        ];
        for (change, expected) in over {
            let mut facts = alice();
            change(&mut facts);
            assert_eq!(facts.checked().unwrap_err(), expected);
        }
    }

    #[test]
    fn a_token_is_checked_and_its_expiry_written_for_cedar() {
        let t = token().checked().unwrap();
        assert_eq!(t.expires_at(), "2026-11-18T11:06:40Z");
        assert_eq!(t.facts().scopes, vec!["mcp:admin", "mcp:tools"]);
        assert_eq!(rfc3339(0).unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(MAX_EXPIRES_AT).unwrap(), "9999-12-31T23:59:59Z");
        for secs in [-1, MAX_EXPIRES_AT + 1, i64::MAX, i64::MIN] {
            let mut facts = token();
            facts.expires_at = secs;
            assert_eq!(facts.checked().unwrap_err(), IdentityError::Expiry(secs));
        }
        let mut many = token();
        many.scopes = (0..=MAX_SCOPES).map(|i| i.to_string()).collect();
        assert_eq!(
            many.checked().unwrap_err(),
            IdentityError::TooMany {
                fact: "scopes",
                max: MAX_SCOPES
            }
        );
        let mut long = token();
        long.client_id = Some("c".repeat(MAX_VALUE_BYTES + 1));
        assert_eq!(
            long.checked().unwrap_err().to_string(),
            format!("a value of `client_id` is longer than {MAX_VALUE_BYTES} bytes")
        );
    }
}
