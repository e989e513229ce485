//! The buckets behind the guess throttle (`guesses.rs`): per client address and for all
//! addresses together, one pair for each [`Class`] of credential
//! (`governor` limiters, as `crate::rate_limits` uses), the addresses
//! refused until a time, the bursts already recorded and the addresses that
//! recently presented a correct credential.
//!
//! `governor` has no way to look at a bucket without spending from it, and
//! a correct credential must spend nothing, so a bucket is spent only by a
//! wrong credential ([`Throttle::failed`]); the failure that empties it
//! sets the time until which its address (or every address not known) is
//! refused before any check ([`Throttle::admit`]): the time the bucket
//! needs to regain one token.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use moka::sync::Cache;

use crate::config::CredentialGuessConfig;

/// The per-address limiters forget the addresses whose buckets are full
/// again once every this many failures.
const PRUNE_EVERY: u64 = 1024;

/// Most addresses remembered as refused, known or in a recorded burst.
const MAX_ADDRESSES: u64 = 100_000;

/// Longest a refusal can last: a bucket regains a token within a minute.
const LONGEST_REFUSAL: Duration = Duration::from_secs(61);

/// Which credentials share buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// The admin and the auditor token (admin API, console sign-in).
    Operator,
    /// Daemon keys (`rsk_live_…`: MCP endpoints, `POST /api/sessions`).
    DaemonKey,
}

impl Class {
    /// Its name in records.
    pub fn name(self) -> &'static str {
        match self {
            Class::Operator => "operator_token",
            Class::DaemonKey => "daemon_key",
        }
    }
}

/// Which bucket refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// One client address (IPv6: its /64).
    Address(IpAddr),
    /// All addresses together.
    Total,
}

impl Scope {
    /// Its name in answers and records.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Address(_) => "address",
            Scope::Total => "total",
        }
    }
}

/// An attempt refused (429) before its credential was checked, or the
/// wrong credential that emptied a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    /// The credentials it was about.
    pub class: Class,
    /// The bucket.
    pub scope: Scope,
    /// Whole seconds until an attempt is checked again (at least 1).
    pub retry_after_secs: u64,
    /// The first refusal of its burst: the caller records it.
    pub first_in_burst: bool,
}

/// The two buckets of one class.
struct Buckets {
    per_address: DefaultKeyedRateLimiter<IpAddr>,
    total: DefaultDirectRateLimiter,
    failures: AtomicU64,
}

impl Buckets {
    fn new(c: &CredentialGuessConfig) -> Buckets {
        Buckets {
            per_address: RateLimiter::keyed(quota(c.per_address_per_minute, c.per_address_burst)),
            total: RateLimiter::direct(quota(c.total_per_minute, c.total_burst)),
            failures: AtomicU64::new(0),
        }
    }

    /// Forgets the addresses whose buckets are full again, now and then.
    fn prune_now_and_then(&self) {
        if self.failures.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.per_address.retain_recent();
            self.per_address.shrink_to_fit();
        }
    }
}

/// `per_minute` tokens a minute, at most `burst` held (0 counts as 1).
fn quota(per_minute: u32, burst: u32) -> Quota {
    let one = NonZeroU32::MIN;
    Quota::per_minute(NonZeroU32::new(per_minute).unwrap_or(one))
        .allow_burst(NonZeroU32::new(burst).unwrap_or(one))
}

/// The throttle of this instance.
pub struct Throttle {
    config: CredentialGuessConfig,
    operator: Buckets,
    daemon: Buckets,
    clock: DefaultClock,
    /// Until when an address (`Some`) or every address not known (`None`)
    /// is refused without a check.
    refused: Cache<(Class, Option<IpAddr>), Instant>,
    /// Bursts recorded and not over (idle for `burst_quiet_secs`).
    bursts: Cache<(Class, Option<IpAddr>), ()>,
    /// Addresses that presented a correct credential recently.
    known: Cache<(Class, IpAddr), ()>,
    /// Bursts of refused access tokens recorded and not over, by address
    /// and reason.
    refusals: Cache<(IpAddr, &'static str), ()>,
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle")
            .field("config", &self.config)
            .field("refused", &self.refused.entry_count())
            .field("known", &self.known.entry_count())
            .finish_non_exhaustive()
    }
}

impl Throttle {
    /// The buckets of `config`, all full.
    pub fn new(config: &CredentialGuessConfig) -> Throttle {
        Throttle {
            operator: Buckets::new(config),
            daemon: Buckets::new(config),
            clock: DefaultClock::default(),
            refused: Cache::builder()
                .max_capacity(MAX_ADDRESSES)
                .time_to_live(LONGEST_REFUSAL)
                .build(),
            bursts: Cache::builder()
                .max_capacity(MAX_ADDRESSES)
                .time_to_idle(Duration::from_secs(config.burst_quiet_secs.max(1)))
                .build(),
            known: Cache::builder()
                .max_capacity(MAX_ADDRESSES)
                .time_to_live(Duration::from_secs(config.known_address_secs.max(1)))
                .build(),
            refusals: Cache::builder()
                .max_capacity(MAX_ADDRESSES)
                .time_to_idle(Duration::from_secs(config.burst_quiet_secs.max(1)))
                .build(),
            config: config.clone(),
        }
    }

    /// The configuration it applies.
    pub fn config(&self) -> &CredentialGuessConfig {
        &self.config
    }

    fn buckets(&self, class: Class) -> &Buckets {
        match class {
            Class::Operator => &self.operator,
            Class::DaemonKey => &self.daemon,
        }
    }

    /// Before a credential from `client` is checked: `Err` when its address
    /// is refused, or when all addresses are and it is not known.
    pub fn admit(&self, class: Class, client: IpAddr) -> Result<(), Throttled> {
        if !self.config.enabled {
            return Ok(());
        }
        let address = address_key(client);
        let now = Instant::now();
        if let Some(until) = self.refused.get(&(class, Some(address)))
            && until > now
        {
            return Err(self.throttled(class, Scope::Address(address), until - now));
        }
        if let Some(until) = self.refused.get(&(class, None))
            && until > now
            && !self.known.contains_key(&(class, address))
        {
            return Err(self.throttled(class, Scope::Total, until - now));
        }
        Ok(())
    }

    /// After a wrong credential from `client`: spends from its address's
    /// bucket, then from the total. `Err` when this failure emptied one
    /// that refuses `client` from now on (a known address is not refused by
    /// the total, though its failure still spends from it).
    pub fn failed(&self, class: Class, client: IpAddr) -> Result<(), Throttled> {
        if !self.config.enabled {
            return Ok(());
        }
        let buckets = self.buckets(class);
        buckets.prune_now_and_then();
        let address = address_key(client);
        if let Err(not_until) = buckets.per_address.check_key(&address) {
            let wait = not_until.wait_time_from(self.clock.now());
            return Err(self.refuse(class, Scope::Address(address), wait));
        }
        if let Err(not_until) = buckets.total.check() {
            let wait = not_until.wait_time_from(self.clock.now());
            if !self.known.contains_key(&(class, address)) {
                return Err(self.refuse(class, Scope::Total, wait));
            }
            // Refused to others from now on; the burst starts (and is
            // recorded) with the first of them.
            self.refuse_until(class, None, wait);
        }
        Ok(())
    }

    /// After a correct credential from `client`: the address is known for
    /// `known_address_secs`.
    pub fn succeeded(&self, class: Class, client: IpAddr) {
        if self.config.enabled {
            self.known.insert((class, address_key(client)), ());
        }
    }

    /// Refuses `scope` for `wait` from now.
    fn refuse(&self, class: Class, scope: Scope, wait: Duration) -> Throttled {
        let key = match scope {
            Scope::Address(a) => Some(a),
            Scope::Total => None,
        };
        self.refuse_until(class, key, wait);
        self.throttled(class, scope, wait)
    }

    /// Whether this refusal of an access token from `client` for `reason`
    /// starts a burst (none of them for `burst_quiet_secs` before it): the
    /// caller records it.
    pub fn first_refusal(&self, client: IpAddr, reason: &'static str) -> bool {
        let key = (address_key(client), reason);
        // Read first: a read keeps a burst alive while it lasts.
        self.refusals.get(&key).is_none() && self.refusals.entry(key).or_insert(()).is_fresh()
    }

    fn refuse_until(&self, class: Class, address: Option<IpAddr>, wait: Duration) {
        self.refused.insert((class, address), Instant::now() + wait);
    }

    /// The refusal of `scope` for `wait`, marked when it starts a burst.
    fn throttled(&self, class: Class, scope: Scope, wait: Duration) -> Throttled {
        let key = match scope {
            Scope::Address(a) => (class, Some(a)),
            Scope::Total => (class, None),
        };
        // Read first: a read keeps a burst alive while it lasts.
        let first_in_burst =
            self.bursts.get(&key).is_none() && self.bursts.entry(key).or_insert(()).is_fresh();
        Throttled {
            class,
            scope,
            retry_after_secs: whole_seconds(wait),
            first_in_burst,
        }
    }
}

/// The address a bucket is kept for: IPv4 as is (an IPv4-mapped IPv6
/// address as its IPv4), IPv6 by its /64, the block one host is usually
/// given.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

/// Whole seconds, rounded up, at least 1.
fn whole_seconds(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(per_address_burst: u32, total_burst: u32) -> CredentialGuessConfig {
        CredentialGuessConfig {
            per_address_burst,
            per_address_per_minute: 1,
            total_burst,
            total_per_minute: 1,
            ..CredentialGuessConfig::default()
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_addresses_share_their_64_and_mapped_ipv4_is_ipv4() {
        assert_eq!(
            address_key(ip("2001:db8:1:2:aaaa::1")),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            address_key(ip("2001:db8:1:2:ffff:1:2:3")),
            address_key(ip("2001:db8:1:2::9"))
        );
        assert_ne!(address_key(ip("2001:db8:1:3::1")), ip("2001:db8:1:2::"));
        assert_eq!(address_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(address_key(ip("192.0.2.7")), ip("192.0.2.7"));
    }

    #[test]
    fn only_failures_spend_and_the_one_over_the_burst_is_refused_once_recorded() {
        let t = Throttle::new(&config(2, 100));
        let a = ip("192.0.2.1");
        for _ in 0..50 {
            t.admit(Class::Operator, a).unwrap();
            t.succeeded(Class::Operator, a);
        }
        assert_eq!(t.failed(Class::Operator, a), Ok(()));
        assert_eq!(t.failed(Class::Operator, a), Ok(()));
        let crossed = t.failed(Class::Operator, a).unwrap_err();
        assert_eq!(crossed.scope, Scope::Address(a));
        assert!(crossed.first_in_burst);
        assert!((1..=60).contains(&crossed.retry_after_secs), "{crossed:?}");
        let again = t.admit(Class::Operator, a).unwrap_err();
        assert!(!again.first_in_burst);
        // Another address and the other class are untouched.
        t.admit(Class::Operator, ip("192.0.2.2")).unwrap();
        t.admit(Class::DaemonKey, a).unwrap();
    }

    #[test]
    fn the_total_refuses_unknown_addresses_only() {
        let t = Throttle::new(&config(100, 2));
        let known = ip("192.0.2.1");
        t.succeeded(Class::DaemonKey, known);
        t.failed(Class::DaemonKey, ip("198.51.100.1")).unwrap();
        t.failed(Class::DaemonKey, ip("198.51.100.2")).unwrap();
        let crossed = t.failed(Class::DaemonKey, ip("198.51.100.3")).unwrap_err();
        assert_eq!(crossed.scope, Scope::Total);
        let fresh = t.admit(Class::DaemonKey, ip("203.0.113.9")).unwrap_err();
        assert_eq!(fresh.scope, Scope::Total);
        assert!(!fresh.first_in_burst);
        t.admit(Class::DaemonKey, known).unwrap();
        assert_eq!(t.failed(Class::DaemonKey, known), Ok(()));
        t.admit(Class::Operator, ip("203.0.113.9")).unwrap();
    }

    #[test]
    fn a_known_address_crossing_the_total_leaves_the_record_to_the_first_refused() {
        let t = Throttle::new(&config(100, 1));
        let known = ip("192.0.2.1");
        t.succeeded(Class::Operator, known);
        assert_eq!(t.failed(Class::Operator, known), Ok(()));
        assert_eq!(t.failed(Class::Operator, known), Ok(()));
        let first = t.admit(Class::Operator, ip("198.51.100.1")).unwrap_err();
        assert_eq!(first.scope, Scope::Total);
        assert!(first.first_in_burst);
    }

    #[test]
    fn disabled_refuses_nothing() {
        let t = Throttle::new(&CredentialGuessConfig {
            enabled: false,
            ..config(1, 1)
        });
        for _ in 0..10 {
            assert_eq!(t.failed(Class::Operator, ip("192.0.2.1")), Ok(()));
        }
        t.admit(Class::Operator, ip("192.0.2.1")).unwrap();
    }
}
