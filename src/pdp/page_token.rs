//! A search's `next_token`: where the next page starts, for which query,
//! until when.
//!
//! The token is the base64url (no padding) of `{"v":1, "q", "after",
//! "exp"}`: `q` is a fingerprint of the query (the application, the search
//! and the request body without `page.token`, its object members sorted),
//! `after` the last candidate the page examined (candidates are taken in
//! sorted order), `exp` its expiry in unix seconds. A token given with
//! another query, or after its expiry, is refused (400), as the
//! specification asks of a changed request mid-pagination.
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
const VERSION: u32 = 1;

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
    exp: i64,
}

/// The fingerprint of a query: the application, the search, and `body`
/// without `page.token`, with its object members sorted.
pub fn fingerprint(app: &str, kind: SearchKind, body: &Value) -> String {
    let mut query = body.clone();
    if let Some(page) = query.get_mut("page").and_then(Value::as_object_mut) {
        page.remove("token");
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

/// The token of the page after `after`, for the query `query`.
pub fn encode(query: &str, after: &str, expires: i64) -> String {
    let token = Token {
        v: VERSION,
        q: query.to_string(),
        after: after.to_string(),
        exp: expires,
    };
    let json = serde_json::to_vec(&token).unwrap_or_default();
    URL_SAFE_NO_PAD.encode(json)
}

/// Where the page of `token` starts (the candidate it goes on after), if
/// it is a token of `query` still valid at `now`.
pub fn decode(token: &str, query: &str, now: i64) -> Result<String, TokenError> {
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
    Ok(token.after)
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
        let limit_3 = json!({"subject": {"id": "a", "type": "user"}, "page": {"limit": 3}});
        assert_ne!(q, fingerprint("records", SearchKind::Resource, &limit_3));
        let token = encode(&q, "record-7", 100);
        assert_eq!(decode(&token, &q, 100), Ok("record-7".to_string()));
        assert_eq!(decode(&token, &q, 101), Err(TokenError::Expired));
        assert_eq!(decode(&token, "other", 100), Err(TokenError::OtherQuery));
        assert_eq!(decode("not a token!", &q, 0), Err(TokenError::Malformed));
        assert_eq!(
            decode(&URL_SAFE_NO_PAD.encode("{}"), &q, 0),
            Err(TokenError::Malformed)
        );
    }
}
