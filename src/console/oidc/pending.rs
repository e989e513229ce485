//! Sign-ins started and not come back yet, held in this instance's memory:
//! each under its random `state`, with the PKCE verifier, the nonce and
//! the browser binding it needs at the callback. Bounded in number (the
//! least recently started are dropped beyond it, so a flood of starts
//! costs a bounded amount of memory and pushes out only the oldest) and in
//! time; [`Pending::take`] removes one, so a state is good once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// What one sign-in needs back at its callback.
#[derive(Debug)]
pub struct Flow {
    /// PKCE `code_verifier` (RFC 7636), sent with the code.
    pub verifier: String,
    /// The ID token must carry it.
    pub nonce: String,
    /// The value of the browser's binding cookie.
    pub browser: String,
    started: Instant,
}

/// A sign-in just started: what the authorization request and the
/// binding cookie carry.
#[derive(Debug)]
pub struct Started {
    /// `state`.
    pub state: String,
    /// `nonce`.
    pub nonce: String,
    /// `code_challenge` (S256 of the verifier).
    pub challenge: String,
    /// The binding cookie's value.
    pub browser: String,
}

/// The sign-ins under way.
pub struct Pending {
    flows: moka::sync::Cache<String, Arc<Flow>>,
    ttl: Duration,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("flows", &self.flows.entry_count())
            .finish()
    }
}

impl Pending {
    /// At most `capacity` sign-ins, each for `ttl`.
    pub fn new(capacity: u64, ttl: Duration) -> Pending {
        Pending {
            flows: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .time_to_live(ttl)
                .eviction_policy(moka::policy::EvictionPolicy::lru())
                .build(),
            ttl,
        }
    }

    /// Starts one: fresh random state, nonce, verifier and binding.
    pub fn start(&self) -> Result<Started, getrandom::Error> {
        let random = || crate::ids::random_hex(32);
        let (state, nonce, verifier, browser) = (random()?, random()?, random()?, random()?);
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        let flow = Flow {
            verifier,
            nonce: nonce.clone(),
            browser: browser.clone(),
            started: Instant::now(),
        };
        self.flows.insert(state.clone(), Arc::new(flow));
        Ok(Started {
            state,
            nonce,
            challenge,
            browser,
        })
    }

    /// The sign-in started under `state`, removed: a second call for the
    /// same state finds nothing. One older than its time is removed and
    /// not answered (the cache may still hold it when it expires).
    pub fn take(&self, state: &str) -> Option<Arc<Flow>> {
        self.flows
            .remove(state)
            .filter(|flow| flow.started.elapsed() < self.ttl)
    }

    /// Sign-ins held (after pending evictions run).
    pub fn len(&self) -> u64 {
        self.flows.run_pending_tasks();
        self.flows.entry_count()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_good_once_and_carries_its_verifier() {
        let pending = Pending::new(10, Duration::from_secs(60));
        let started = pending.start().unwrap();
        let flow = pending.take(&started.state).unwrap();
        assert_eq!(flow.nonce, started.nonce);
        assert_eq!(flow.browser, started.browser);
        let s256 = URL_SAFE_NO_PAD.encode(Sha256::digest(flow.verifier.as_bytes()));
        assert_eq!(s256, started.challenge);
        assert!((43..=128).contains(&flow.verifier.len()), "RFC 7636 length");
        assert!(pending.take(&started.state).is_none(), "spent");
        assert!(pending.take("made-up").is_none());
    }

    #[test]
    fn a_flood_of_starts_keeps_the_newest_within_the_bound() {
        let pending = Pending::new(100, Duration::from_secs(60));
        let states: Vec<String> = (0..1_000).map(|_| pending.start().unwrap().state).collect();
        assert!(pending.len() <= 100, "{} held", pending.len());
        let last = states.last().unwrap();
        assert!(pending.take(last).is_some(), "the newest start survives");
        assert!(pending.take(&states[0]).is_none(), "the oldest was dropped");
    }

    #[test]
    fn a_sign_in_not_finished_in_time_is_gone() {
        let pending = Pending::new(10, Duration::from_millis(50));
        let started = pending.start().unwrap();
        std::thread::sleep(Duration::from_millis(120));
        assert!(pending.take(&started.state).is_none());
    }
}
