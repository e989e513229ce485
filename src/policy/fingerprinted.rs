//! Remembered verdicts found by a fingerprint of a borrowed key: the live
//! session memo (`session_verdicts`) and replay's
//! (`replay_verdicts`) both look a verdict up once per decision,
//! and building an owned key of copied uids for every lookup led their
//! profiles. A lookup hashes the request's borrowed parts (foldhash), then
//! confirms the key itself in the fingerprint's bucket (which holds the
//! rare keys whose fingerprints collide): a hit copies no uid.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

use super::Verdict;

/// The hasher of fingerprints (fixed: a memo lives in one process, and its
/// keys are uids the gateway chose, bounded by each memo's cap).
type Fingerprints = foldhash::fast::FixedState;

/// The fingerprint of a key's borrowed parts.
pub(super) fn fingerprint(parts: impl Hash) -> u64 {
    Fingerprints::default().hash_one(parts)
}

/// A key as a request presents it (borrowed), with the owned form a
/// memo stores.
pub(super) trait BorrowedKey {
    /// The key as stored.
    type Owned;
    /// Equal for equal keys.
    fn fingerprint(&self) -> u64;
    /// Whether `owned` is this key.
    fn is(&self, owned: &Self::Owned) -> bool;
    /// This key, copied for storing.
    fn owned(&self) -> Self::Owned;
}

/// Verdicts by fingerprint of their keys.
#[derive(Debug)]
pub(super) struct Fingerprinted<K> {
    buckets: HashMap<u64, Vec<(K, Verdict)>, Fingerprints>,
    len: usize,
}

impl<K> Default for Fingerprinted<K> {
    fn default() -> Self {
        Fingerprinted {
            buckets: HashMap::default(),
            len: 0,
        }
    }
}

impl<K> Fingerprinted<K> {
    /// The verdict remembered for `key`, if any.
    pub(super) fn get<B: BorrowedKey<Owned = K>>(&self, key: &B) -> Option<Verdict> {
        self.buckets
            .get(&key.fingerprint())?
            .iter()
            .find(|(k, _)| key.is(k))
            .map(|(_, v)| v.clone())
    }

    /// Remembers an error-free verdict for `key` (a key already present
    /// keeps its verdict: under the memos' rule it is the same one);
    /// whether one was added.
    pub(super) fn insert<B: BorrowedKey<Owned = K>>(&mut self, key: &B, verdict: &Verdict) -> bool {
        if !verdict.errors.is_empty() {
            return false;
        }
        let bucket = self.buckets.entry(key.fingerprint()).or_default();
        if bucket.iter().any(|(k, _)| key.is(k)) {
            return false;
        }
        bucket.push((key.owned(), verdict.clone()));
        self.len += 1;
        true
    }

    /// How many verdicts are remembered.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}
