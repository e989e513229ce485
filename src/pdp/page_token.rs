//! A search's `next_token`: where the next page starts, for which query,
//! until when.
//!
//! The token is the base64url (no padding) of `{"v":2, "q", "after",
//! "limit", "exp"}`: `q` is a fingerprint of the query (the application,
//! the search and the request body without `page`, its object members
//! sorted), `after` the last candidate the page examined (candidates are
//! taken in sorted order), `limit` the page size the search began with,
//! `exp` its expiry in unix seconds. A token given with another query, a
//! different `page.limit`, or after its expiry, is refused (400), as the
//! specification asks of a changed request mid-pagination; a next page
//! that sends the token without `page.limit` (as the certification
//! scenario's does) keeps the size the search began with.
//!
//! It is not signed: changing `after` only moves where the next page
//! starts, and every result is decided as the evaluation API decides it,
//! so an edited token can skip or repeat results and reveal nothing more.
//! It holds nothing the caller did not send or could not see, and is
//! valid on every instance sharing the applications.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::input::SearchKind;

/// The token's format version.
const VERSION: u32 = 2;

/// Why a `page.token` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token this gateway made.
    #[error("`page.token` is not a token of this search")]
    Malformed,
    /// Made for another query.
    #[error(
        "`page.token` belongs to another query: every member but `page.token` must be as in the request that returned it"
    )]
    OtherQuery,
    /// Past its expiry.
    #[error("`page.token` has expired: start the search again without it")]
    Expired,
}

#[derive(Debug, Serialize, Deserialize)]
struct Token {
    v: u32,
    q: String,
    after: String,
    limit: usize,
    exp: i64,
}

/// Where a token's page starts and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Next {
    /// The candidate the page goes on after.
    pub after: String,
    /// The page size the search began with.
    pub limit: usize,
}

/// The fingerprint of a query: the application, the search, and `body`
/// without `page`, with its object members sorted.
pub fn fingerprint(app: &str, kind: SearchKind, body: &Value) -> String {
    let mut query = body.clone();
    if let Some(top) = query.as_object_mut() {
        top.remove("page");
    }
    let mut hasher = Sha256::new();
    for part in [app, kind.name(), &sorted(&query).to_string()] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// `value` with the members of every object in sorted order.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            let mut out = Map::new();
            for k in keys {
                if let Some(v) = map.get(k) {
                    out.insert(k.clone(), sorted(v));
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The token of the page after `next.after`, for the query `query`.
pub fn encode(query: &str, next: &Next, expires: i64) -> String {
    let token = Token {
        v: VERSION,
        q: query.to_string(),
        after: next.after.clone(),
        limit: next.limit,
        exp: expires,
    };
    let json = serde_json::to_vec(&token).unwrap_or_default();
    URL_SAFE_NO_PAD.encode(json)
}

/// Where the page of `token` starts and its size, if it is a token of
/// `query` still valid at `now`.
pub fn decode(token: &str, query: &str, now: i64) -> Result<Next, TokenError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| TokenError::Malformed)?;
    let token: Token = serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)?;
    if token.v != VERSION {
        return Err(TokenError::Malformed);
    }
    if token.q != query {
        return Err(TokenError::OtherQuery);
    }
    if token.exp < now {
        return Err(TokenError::Expired);
    }
    Ok(Next {
        after: token.after,
        limit: token.limit,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_token_goes_on_for_its_own_query_until_it_expires() {
        let body =
            json!({"subject": {"id": "a", "type": "user"}, "page": {"limit": 2, "token": "x"}});
        let reordered =
            json!({"page": {"token": "y", "limit": 2}, "subject": {"type": "user", "id": "a"}});
        let q = fingerprint("records", SearchKind::Resource, &body);
        assert_eq!(q, fingerprint("records", SearchKind::Resource, &reordered));
        assert_ne!(q, fingerprint("records", SearchKind::Subject, &body));
        assert_ne!(q, fingerprint("other", SearchKind::Resource, &body));
        let pageless = json!({"subject": {"id": "a", "type": "user"}});
        assert_eq!(q, fingerprint("records", SearchKind::Resource, &pageless));
        let other = json!({"subject": {"id": "b", "type": "user"}});
        assert_ne!(q, fingerprint("records", SearchKind::Resource, &other));
        let next = Next {
            after: "record-7".into(),
            limit: 2,
        };
        let token = encode(&q, &next, 100);
        assert_eq!(decode(&token, &q, 100), Ok(next));
        assert_eq!(decode(&token, &q, 101), Err(TokenError::Expired));
        assert_eq!(decode(&token, "other", 100), Err(TokenError::OtherQuery));
        assert_eq!(decode("not a token!", &q, 0), Err(TokenError::Malformed));
        assert_eq!(
            decode(&URL_SAFE_NO_PAD.encode("{}"), &q, 0),
            Err(TokenError::Malformed)
        );
    }
}
