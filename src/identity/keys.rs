//! One issuer's signing keys: found through discovery (or configured),
//! fetched lazily, kept while the provider is unreachable.
//!
//! The key set is held in an `ArcSwap`, not a cache that evicts: when the
//! provider is down, the keys already fetched keep validating tokens (a
//! rotation that happened meanwhile shows up as unknown kids, which fail
//! closed). The set is fetched again when it is older than its lifetime
//! (the provider's `Cache-Control: max-age`, else `auth.jwks_cache_secs`,
//! clamped to a minute … a day) and when a token names a `kid` the set does
//! not hold, but never more than once per `auth.unknown_kid_refresh_secs`:
//! a flood of made-up kids costs the provider one request per interval.
//! A failed fetch counts as an attempt too.
//!
//! Only asymmetric public keys are kept: an `oct` key, a key whose `use`
//! is `enc`, or one that does not parse is skipped, never an error for the
//! others. Start-up never waits for a provider.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

use super::config::IssuerConfig;
use super::fetch::{FetchError, Fetcher};

/// One public key of the set.
pub struct Key {
    /// The key, ready for verification.
    pub decoding: DecodingKey,
    /// Its JWK, to check an algorithm against.
    jwk: Jwk,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.jwk.common.key_id)
            .finish()
    }
}

impl Key {
    /// Whether `alg` may be verified with this key: the family and curve
    /// agree, and the JWK's own `alg`, when it names one, is `alg`.
    pub fn allows(&self, alg: Algorithm) -> bool {
        if let Some(named) = self.jwk.common.key_algorithm
            && named != jsonwebtoken::jwk::KeyAlgorithm::from(alg)
        {
            return false;
        }
        match (&self.jwk.algorithm, alg) {
            (AlgorithmParameters::RSA(_), a) => a.family() == jsonwebtoken::AlgorithmFamily::Rsa,
            (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES256) => {
                ec.curve == EllipticCurve::P256
            }
            (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES384) => {
                ec.curve == EllipticCurve::P384
            }
            (AlgorithmParameters::OctetKeyPair(okp), Algorithm::EdDSA) => {
                okp.curve == EllipticCurve::Ed25519
            }
            _ => false,
        }
    }
}

/// The keys of one fetch.
#[derive(Debug, Default)]
struct KeySet {
    by_kid: HashMap<String, Arc<Key>>,
    without_kid: Vec<Arc<Key>>,
    fetched: Option<Instant>,
    lifetime: Duration,
}

/// Why no key verifies a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The set (as last fetched) has no key with this id.
    #[error("no signing key `{0}` is published by the issuer")]
    UnknownKid(String),
    /// The token names no key and the set has no single key for its
    /// algorithm.
    #[error("the token names no signing key and the issuer publishes several")]
    Ambiguous,
    /// No key could be fetched yet (the provider has been unreachable
    /// since start).
    #[error("the issuer's signing keys could not be fetched: {0}")]
    Unavailable(String),
}

/// Why the set is fetched again.
#[derive(Debug, Clone, Copy)]
enum Why {
    /// It is older than its lifetime (or was never fetched).
    Stale,
    /// A token named a key it does not hold.
    UnknownKid,
}

/// One issuer's key set and when to fetch it again.
pub struct IssuerKeys {
    issuer: Arc<IssuerConfig>,
    fetcher: Arc<Fetcher>,
    default_lifetime: Duration,
    unknown_kid_interval: Duration,
    set: ArcSwapOption<KeySet>,
    /// When the set was last fetched or tried, and whether that worked: at
    /// most one fetch runs at a time, and unknown kids or a provider that
    /// failed fetch at most once per interval.
    attempt: tokio::sync::Mutex<Option<(Instant, bool)>>,
}

impl std::fmt::Debug for IssuerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuerKeys")
            .field("issuer", &self.issuer.issuer)
            .finish_non_exhaustive()
    }
}

impl IssuerKeys {
    /// Keys of `issuer`, fetched on first use.
    pub fn new(
        issuer: Arc<IssuerConfig>,
        fetcher: Arc<Fetcher>,
        default_lifetime: Duration,
        unknown_kid_interval: Duration,
    ) -> Self {
        Self {
            issuer,
            fetcher,
            default_lifetime,
            unknown_kid_interval,
            set: ArcSwapOption::empty(),
            attempt: tokio::sync::Mutex::new(None),
        }
    }

    /// The key that verifies a token naming `kid` (or none) with `alg`.
    pub async fn key(&self, kid: Option<&str>, alg: Algorithm) -> Result<Arc<Key>, KeyError> {
        let set = self.set.load_full();
        let stale = set.as_ref().is_none_or(|s| s.is_stale());
        if stale {
            self.refresh(Why::Stale).await;
        }
        match self.lookup(kid, alg) {
            Err(KeyError::UnknownKid(_) | KeyError::Ambiguous) if !stale => {
                self.refresh(Why::UnknownKid).await;
                self.lookup(kid, alg)
            }
            other => other,
        }
    }

    /// The key for `kid` in the set as it is now.
    fn lookup(&self, kid: Option<&str>, alg: Algorithm) -> Result<Arc<Key>, KeyError> {
        let Some(set) = self.set.load_full() else {
            return Err(KeyError::Unavailable(
                "the identity provider has not answered yet".into(),
            ));
        };
        match kid {
            Some(kid) => set
                .by_kid
                .get(kid)
                .filter(|k| k.allows(alg))
                .cloned()
                .ok_or_else(|| KeyError::UnknownKid(kid.chars().take(64).collect())),
            None => {
                let mut fitting = set
                    .without_kid
                    .iter()
                    .chain(set.by_kid.values())
                    .filter(|k| k.allows(alg));
                match (fitting.next(), fitting.next()) {
                    (Some(only), None) => Ok(only.clone()),
                    _ => Err(KeyError::Ambiguous),
                }
            }
        }
    }

    /// Fetches the set again, unless the attempt is not needed any more
    /// (another caller's fetch just made the set fresh) or comes too soon:
    /// after a failed fetch, or for an unknown kid, at most once per
    /// `unknown_kid_interval`. A failure keeps the keys already held.
    async fn refresh(&self, why: Why) {
        let mut attempt = self.attempt.lock().await;
        let fresh = self.set.load_full().is_some_and(|s| !s.is_stale());
        if let Some((at, ok)) = *attempt {
            let too_soon = at.elapsed() < self.unknown_kid_interval;
            let skip = match why {
                Why::Stale => fresh || (!ok && too_soon),
                Why::UnknownKid => too_soon,
            };
            if skip {
                return;
            }
        }
        let result = self.fetch().await;
        *attempt = Some((Instant::now(), result.is_ok()));
        match result {
            Ok(set) => self.set.store(Some(Arc::new(set))),
            Err(e) => tracing::warn!(issuer = %self.issuer.issuer, error = %e,
                "cannot fetch the issuer's signing keys; the keys already held stay in use"),
        }
    }

    /// One fetch of the key set.
    async fn fetch(&self) -> Result<KeySet, FetchError> {
        let uri = match &self.issuer.jwks_uri {
            Some(uri) => uri.clone(),
            None => self
                .fetcher
                .metadata(&self.issuer.issuer)
                .await?
                .jwks_uri()?,
        };
        let (body, max_age) = self.fetcher.get_json(&uri).await?;
        let lifetime = max_age
            .unwrap_or(self.default_lifetime)
            .clamp(Duration::from_secs(60), Duration::from_secs(86_400));
        Ok(KeySet::parse(&body, lifetime))
    }
}

impl KeySet {
    /// The usable keys of a JWKS document.
    fn parse(doc: &serde_json::Value, lifetime: Duration) -> KeySet {
        let mut set = KeySet {
            fetched: Some(Instant::now()),
            lifetime,
            ..KeySet::default()
        };
        let keys = doc.get("keys").and_then(|k| k.as_array());
        for value in keys.into_iter().flatten() {
            let Some(key) = usable_key(value) else {
                continue;
            };
            match key.jwk.common.key_id.clone() {
                Some(kid) => {
                    set.by_kid.entry(kid).or_insert(key);
                }
                None => set.without_kid.push(key),
            }
        }
        set
    }

    fn is_stale(&self) -> bool {
        self.fetched.is_none_or(|at| at.elapsed() >= self.lifetime)
    }
}

/// A signature key from one JWKS entry, or `None` for anything else.
fn usable_key(value: &serde_json::Value) -> Option<Arc<Key>> {
    let jwk: Jwk = serde_json::from_value(value.clone()).ok()?;
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let asymmetric = matches!(
        jwk.algorithm,
        AlgorithmParameters::RSA(_)
            | AlgorithmParameters::EllipticCurve(_)
            | AlgorithmParameters::OctetKeyPair(_)
    );
    if !asymmetric {
        return None;
    }
    let decoding = DecodingKey::from_jwk(&jwk).ok()?;
    Some(Arc::new(Key { decoding, jwk }))
}
