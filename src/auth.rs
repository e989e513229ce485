//! Daemon keys: `rsk_live_<id>_<secret>`. The id is public and indexes the
//! row; only SHA-256 of the secret is stored, and the presented secret's
//! hash is compared in constant time. Cookies are never consulted.

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Prefix of every daemon key.
pub const KEY_PREFIX: &str = "rsk_live_";
/// Hex characters in a key id.
const ID_HEX: usize = 16;
/// Hex characters in a key secret.
const SECRET_HEX: usize = 48;

/// A freshly minted key: shown once, then only its hash is kept.
#[derive(Debug, Clone)]
pub struct MintedKey {
    /// Public id part.
    pub id: String,
    /// The full key the caller must keep.
    pub key: String,
    /// SHA-256 of the secret part.
    pub secret_hash: Vec<u8>,
}

/// The parts of a presented key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresentedKey {
    /// Public id part.
    pub id: String,
    /// Secret part.
    pub secret: String,
}

/// Mints a new key from the OS CSPRNG.
pub fn mint_key() -> Result<MintedKey, getrandom::Error> {
    let id = crate::ids::random_hex(ID_HEX / 2)?;
    let secret = crate::ids::random_hex(SECRET_HEX / 2)?;
    Ok(MintedKey {
        key: format!("{KEY_PREFIX}{id}_{secret}"),
        secret_hash: hash_secret(&secret),
        id,
    })
}

/// SHA-256 of a key secret.
pub fn hash_secret(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// Constant-time comparison of a presented secret with a stored hash.
pub fn secret_matches(secret: &str, stored_hash: &[u8]) -> bool {
    hash_secret(secret).ct_eq(stored_hash).into()
}

/// Parses `rsk_live_<16 hex>_<48 hex>`; anything else is `None`.
pub fn parse_key(key: &str) -> Option<PresentedKey> {
    let rest = key.strip_prefix(KEY_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(id, ID_HEX) || !hex(secret, SECRET_HEX) {
        return None;
    }
    Some(PresentedKey {
        id: id.to_ascii_lowercase(),
        secret: secret.to_ascii_lowercase(),
    })
}

/// Why a request carries no usable credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// No `Authorization` header.
    #[error("missing `Authorization: Bearer rsk_live_…` header (cookies are not accepted)")]
    Missing,
    /// Not a bearer `rsk_live_` key.
    #[error("the `Authorization` header must be `Bearer rsk_live_…`")]
    Malformed,
}

/// Extracts the bearer daemon key from the headers.
pub fn bearer_key(headers: &HeaderMap) -> Result<PresentedKey, CredentialError> {
    let value = headers.get(AUTHORIZATION).ok_or(CredentialError::Missing)?;
    let value = value.to_str().map_err(|_| CredentialError::Malformed)?;
    let (scheme, token) = value
        .trim()
        .split_once(' ')
        .ok_or(CredentialError::Malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(CredentialError::Malformed);
    }
    parse_key(token.trim()).ok_or(CredentialError::Malformed)
}

/// Extracts any bearer token (admin API).
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Constant-time comparison of two tokens (the admin token).
pub fn tokens_equal(a: &str, b: &str) -> bool {
    let ha = Sha256::digest(a.as_bytes());
    let hb = Sha256::digest(b.as_bytes());
    ha.ct_eq(&hb).into()
}

/// Fewest characters an admin or auditor token may have.
pub const MIN_TOKEN_CHARS: usize = 32;

/// Why the configured admin and auditor tokens are refused at start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorTokenError {
    /// A token shorter than [`MIN_TOKEN_CHARS`].
    #[error(
        "`{key}` (CEDARGATE_{env}) has {chars} characters: it needs at least {MIN_TOKEN_CHARS} \
         (generate one with `openssl rand -hex 32`)",
        env = .key.to_ascii_uppercase()
    )]
    TooShort {
        /// The config key.
        key: &'static str,
        /// Its length in characters.
        chars: usize,
    },
    /// Both tokens set to the same value: the auditor could change things.
    #[error(
        "`admin_token` (CEDARGATE_ADMIN_TOKEN) and `auditor_token` (CEDARGATE_AUDITOR_TOKEN) \
         are equal: the read-only token must differ from the admin token"
    )]
    Equal,
}

/// Checks the operator tokens before the gateway starts: each one set must
/// have at least [`MIN_TOKEN_CHARS`] characters, and the two must differ.
/// An empty token is no token (the routes it opens are not served).
pub fn check_operator_tokens(
    admin: Option<&str>,
    auditor: Option<&str>,
) -> Result<(), OperatorTokenError> {
    let (admin, auditor) = (
        admin.filter(|t| !t.is_empty()),
        auditor.filter(|t| !t.is_empty()),
    );
    for (key, token) in [("admin_token", admin), ("auditor_token", auditor)] {
        let chars = token.map_or(MIN_TOKEN_CHARS, |t| t.chars().count());
        if chars < MIN_TOKEN_CHARS {
            return Err(OperatorTokenError::TooShort { key, chars });
        }
    }
    match (admin, auditor) {
        (Some(a), Some(b)) if tokens_equal(a, b) => Err(OperatorTokenError::Equal),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_keys_parse_and_verify() {
        let k = mint_key().unwrap();
        let p = parse_key(&k.key).unwrap();
        assert_eq!(p.id, k.id);
        assert!(secret_matches(&p.secret, &k.secret_hash));
        assert!(!secret_matches("00", &k.secret_hash));
    }

    #[test]
    fn malformed_keys_are_rejected() {
        for bad in [
            "",
            "rsk_live_",
            "rsk_test_0123456789abcdef_00",
            "rsk_live_xyz_abc",
            "Bearer x",
        ] {
            assert_eq!(parse_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn operator_tokens_need_32_characters_and_must_differ() {
        let long = "a".repeat(MIN_TOKEN_CHARS);
        let other = "b".repeat(MIN_TOKEN_CHARS);
        assert_eq!(check_operator_tokens(None, None), Ok(()));
        assert_eq!(check_operator_tokens(Some(""), Some("")), Ok(()));
        assert_eq!(check_operator_tokens(Some(&long), Some(&other)), Ok(()));
        let short = &long[1..];
        assert_eq!(
            check_operator_tokens(Some(short), None),
            Err(OperatorTokenError::TooShort {
                key: "admin_token",
                chars: 31
            })
        );
        let err = check_operator_tokens(Some(&long), Some("é")).unwrap_err();
        assert!(err.to_string().contains("CEDARGATE_AUDITOR_TOKEN"), "{err}");
        assert_eq!(
            check_operator_tokens(Some(&long), Some(&long)),
            Err(OperatorTokenError::Equal)
        );
    }

    #[test]
    fn bearer_parsing() {
        let k = mint_key().unwrap();
        let mut h = HeaderMap::new();
        assert_eq!(bearer_key(&h), Err(CredentialError::Missing));
        h.insert(AUTHORIZATION, format!("Basic {}", k.key).parse().unwrap());
        assert_eq!(bearer_key(&h), Err(CredentialError::Malformed));
        h.insert(AUTHORIZATION, format!("bearer {}", k.key).parse().unwrap());
        assert_eq!(bearer_key(&h).unwrap().id, k.id);
    }
}
