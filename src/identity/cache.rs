//! Validated tokens, kept by SHA-256 of the token until they expire, so a
//! token's second request costs a hash and a lookup, not a signature check
//! or an introspection round trip. An introspected token is kept at most
//! `auth.introspection_cache_secs`, so a revocation takes effect within
//! that time. Only successes are kept: a refused token is checked again
//! (its cost is bounded by the credential-guess throttle and, for unknown
//! kids, by the key set's refresh interval).

use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::sync::Cache;
use sha2::{Digest, Sha256};

use super::claims::Identity;

/// A cached identity and when it stops being usable.
#[derive(Debug, Clone)]
struct Entry {
    identity: Arc<Identity>,
    until: Instant,
}

/// Evicts an entry when its token expires (or its introspection ages out).
struct UntilExpiry;

impl moka::Expiry<[u8; 32], Entry> for UntilExpiry {
    fn expire_after_create(
        &self,
        _key: &[u8; 32],
        value: &Entry,
        created_at: Instant,
    ) -> Option<Duration> {
        Some(value.until.saturating_duration_since(created_at))
    }
}

/// The validated tokens.
pub struct TokenCache {
    entries: Cache<[u8; 32], Entry>,
}

impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCache")
            .field("entries", &self.entries.entry_count())
            .finish()
    }
}

impl TokenCache {
    /// A cache of at most `capacity` tokens.
    pub fn new(capacity: u64) -> TokenCache {
        TokenCache {
            entries: Cache::builder()
                .max_capacity(capacity)
                .expire_after(UntilExpiry)
                .build(),
        }
    }

    /// The key of `token`.
    pub fn key(token: &str) -> [u8; 32] {
        Sha256::digest(token.as_bytes()).into()
    }

    /// The identity of a token validated before and still usable.
    pub fn get(&self, key: &[u8; 32]) -> Option<Arc<Identity>> {
        let entry = self.entries.get(key)?;
        (Instant::now() < entry.until).then_some(entry.identity)
    }

    /// Keeps `identity` for `ttl` (already bounded by the token's expiry).
    pub fn insert(&self, key: [u8; 32], identity: Arc<Identity>, ttl: Duration) {
        let until = Instant::now() + ttl;
        self.entries.insert(key, Entry { identity, until });
    }
}
