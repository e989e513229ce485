//! Per-tenant rate limits: token buckets per API key, per agent and per
//! org (`governor` keyed limiters), with per-org overrides stored in the
//! database, and the usage counters policies read as `context.usage`
//! ([`usage`]). State held by `Gateway`; the MCP prelude
//! (`mcp::call::resolve`) spends from the buckets before any Cedar
//! decision, and the operator API ([`admin`]) manages the overrides.
//!
//! - **Cost**: a request spends one token per unit of work it asks for
//!   (`mcp::cost`): each element of a JSON-RPC body, charged as the
//!   element is answered (a batch of 20 spends 20, and its elements past
//!   the bucket are refused), for a `tools/list` one per `view_tool`
//!   decision it will make, for a resources or prompts listing one per
//!   server asked and per entry decided. One charge above a bucket's burst
//!   is charged as the burst, so the largest single element still passes
//!   when the bucket is full.
//! - **Order**: key, then agent, then org. A refusal stops there: a key
//!   over its bucket spends nothing of its agent's or org's, so one key's
//!   flood does not eat its org's budget. Tokens spent on a passed level
//!   are not returned when a later level refuses.
//! - **Overrides**: an org's row in `org_rate_limits` replaces any of its
//!   three buckets (the rest keep the config's). Every instance reads it
//!   (cached for `cache_ttl_secs`, invalidated at once by admin changes,
//!   on every instance through `cluster::coherence`). Orgs with the same
//!   buckets share limiters (keyed by subject), so changing an org's
//!   override starts its subjects on full buckets.
//! - **Memory**: a bucket's state is kept only while it is not full again:
//!   limiters drop the subjects idle long enough every
//!   [`PRUNE_EVERY`] checks. Subjects are authenticated ids (keys, agents
//!   and orgs that exist), so their number is bounded by the tenants.
//! - **Shared by the live instances**: buckets and counters live in each
//!   instance's memory, and each of the n live instances of a database
//!   (its `gateway_instances` rows, counted at every heartbeat:
//!   [`RateLimits::set_instances`]) enforces 1/n of every rate and of
//!   every burst (rounded down, at least one token), so behind a load
//!   balancer that spreads a subject's requests the configured rate is the
//!   subject's in total, not n times it. A client pinned to one instance
//!   gets 1/n of its rate. When an instance joins or leaves, the others
//!   see the new n at their next heartbeat (`database.heartbeat_secs`; a
//!   stopped instance leaves at once, a crashed one after three missed
//!   beats): until then the org may get up to (n+1)/n of its rate, or
//!   (n-1)/n of it; at the change every bucket starts full at its new
//!   share, so each change can let one extra burst through.
//! - **The trail**: the first refusal of a subject in each
//!   `refusal_record_secs` window is recorded (by the caller); later
//!   ones in the window are answered without a write, so a flood cannot
//!   fill the trail with refusals.

pub mod admin;
pub mod usage;

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use moka::sync::Cache;
use serde::{Deserialize, Serialize};

use crate::config::{Bucket, RateLimitConfig};
use crate::store::{Store, StoreError, rate_limits as rows};

/// A limiter forgets the subjects whose buckets are full again once every
/// this many checks.
pub const PRUNE_EVERY: u64 = 4096;

/// Largest `perSecond` or `burst` an override may set.
pub const MAX_RATE: u32 = 1_000_000;

/// Most orgs whose override is cached, and most subjects remembered as
/// refused in the current window.
const CACHE_CAPACITY: u64 = 100_000;

/// Which bucket refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The API key's.
    Key,
    /// The agent's.
    Agent,
    /// The org's.
    Org,
}

impl Level {
    /// Its name in records and answers.
    pub fn name(self) -> &'static str {
        match self {
            Level::Key => "key",
            Level::Agent => "agent",
            Level::Org => "org",
        }
    }
}

/// The three buckets one org's requests spend from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Buckets {
    /// Per key.
    pub key: Bucket,
    /// Per agent.
    pub agent: Bucket,
    /// Per org.
    pub org: Bucket,
}

impl Buckets {
    fn of(&self, level: Level) -> Bucket {
        match level {
            Level::Key => self.key,
            Level::Agent => self.agent,
            Level::Org => self.org,
        }
    }
}

/// One bucket as the operator API and the database spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rate {
    /// Tokens added per second.
    pub per_second: u32,
    /// Most tokens held.
    pub burst: u32,
}

impl From<Bucket> for Rate {
    fn from(b: Bucket) -> Rate {
        Rate {
            per_second: b.per_second,
            burst: b.burst,
        }
    }
}

impl From<Rate> for Bucket {
    fn from(r: Rate) -> Bucket {
        Bucket {
            per_second: r.per_second,
            burst: r.burst,
        }
    }
}

/// An org's override: any bucket left out keeps the configured one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Override {
    /// Per key of the org.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<Rate>,
    /// Per agent of the org.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<Rate>,
    /// The org as a whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub org: Option<Rate>,
}

/// Why an override is refused.
#[derive(Debug, thiserror::Error)]
pub enum OverrideError {
    /// No bucket given.
    #[error("give at least one of `key`, `agent`, `org`")]
    Empty,
    /// A bucket out of range.
    #[error("`{0}`: `perSecond` and `burst` must be 1 to {MAX_RATE}")]
    OutOfRange(&'static str),
}

impl Override {
    /// Checks every bucket given is within range.
    pub fn validate(&self) -> Result<(), OverrideError> {
        if self.key.is_none() && self.agent.is_none() && self.org.is_none() {
            return Err(OverrideError::Empty);
        }
        for (name, rate) in [("key", self.key), ("agent", self.agent), ("org", self.org)] {
            if let Some(r) = rate
                && !((1..=MAX_RATE).contains(&r.per_second) && (1..=MAX_RATE).contains(&r.burst))
            {
                return Err(OverrideError::OutOfRange(name));
            }
        }
        Ok(())
    }

    /// The buckets that apply with this override over `defaults`.
    pub fn over(&self, defaults: Buckets) -> Buckets {
        Buckets {
            key: self.key.map_or(defaults.key, Bucket::from),
            agent: self.agent.map_or(defaults.agent, Bucket::from),
            org: self.org.map_or(defaults.org, Bucket::from),
        }
    }
}

/// How the operator API and the CLI show an org's limits: the buckets in
/// force under `override_` and the override itself.
pub fn describe(
    org: &str,
    config: &RateLimitConfig,
    override_: Option<Override>,
) -> serde_json::Value {
    let defaults = Buckets {
        key: config.key,
        agent: config.agent,
        org: config.org,
    };
    let b = override_.unwrap_or_default().over(defaults);
    serde_json::json!({
        "orgId": org,
        "enabled": config.enabled,
        "key": Rate::from(b.key),
        "agent": Rate::from(b.agent),
        "org": Rate::from(b.org),
        "override": override_,
    })
}

/// Who a request spends for.
#[derive(Debug, Clone, Copy)]
pub struct Subjects<'a> {
    /// The org.
    pub org: &'a str,
    /// The agent (ids are unique per org); `None` when the request reached
    /// no session of its org (a key used on another org's session), so
    /// only the key's and the org's buckets apply.
    pub agent: Option<&'a str>,
    /// The API key.
    pub key: &'a str,
}

/// A request refused by a bucket.
#[derive(Debug, Clone)]
pub struct Limited {
    /// The bucket that refused.
    pub level: Level,
    /// Its subject (key id, agent id or org id).
    pub subject: String,
    /// Its rate.
    pub bucket: Bucket,
    /// What the request would have spent.
    pub cost: u32,
    /// The live instances sharing the bucket (this instance enforced
    /// 1/`instances` of it).
    pub instances: u32,
    /// Whole seconds until it could pass (rounded up, at least 1).
    pub retry_after_secs: u64,
    /// The first refusal of this subject in the current recording window:
    /// the caller records it; later ones are not recorded.
    pub first_in_window: bool,
}

/// The limiters of one set of buckets, keyed by subject.
struct Tier {
    key: DefaultKeyedRateLimiter<String>,
    agent: DefaultKeyedRateLimiter<String>,
    org: DefaultKeyedRateLimiter<String>,
    checks: AtomicU64,
}

impl std::fmt::Debug for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tier")
            .field("keys", &self.key.len())
            .field("agents", &self.agent.len())
            .field("orgs", &self.org.len())
            .finish()
    }
}

/// This instance's share of `b` when `n` live instances share it: one
/// token every n / `per_second` seconds, and 1/n of the burst (at least
/// one token).
fn quota(b: Bucket, n: u32) -> Quota {
    let share = share_of(b.burst, n);
    let period = Duration::from_secs_f64(f64::from(n.max(1)) / f64::from(b.per_second.max(1)));
    Quota::with_period(period)
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
        .allow_burst(share)
}

/// 1/n of `burst`, rounded down, at least one token.
fn share_of(burst: u32, n: u32) -> NonZeroU32 {
    NonZeroU32::new(burst / n.max(1)).unwrap_or(NonZeroU32::MIN)
}

impl Tier {
    fn new(b: Buckets, n: u32) -> Self {
        Tier {
            key: RateLimiter::keyed(quota(b.key, n)),
            agent: RateLimiter::keyed(quota(b.agent, n)),
            org: RateLimiter::keyed(quota(b.org, n)),
            checks: AtomicU64::new(0),
        }
    }

    fn limiter(&self, level: Level) -> &DefaultKeyedRateLimiter<String> {
        match level {
            Level::Key => &self.key,
            Level::Agent => &self.agent,
            Level::Org => &self.org,
        }
    }

    /// Forgets the subjects whose buckets are full again, now and then.
    fn prune_now_and_then(&self) {
        if self.checks.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            for l in [&self.key, &self.agent, &self.org] {
                l.retain_recent();
                l.shrink_to_fit();
            }
        }
    }
}

/// The buckets, overrides and usage counters of this instance.
#[derive(Debug)]
pub struct RateLimits {
    config: RateLimitConfig,
    store: Store,
    clock: DefaultClock,
    /// Limiters per distinct set of buckets (the defaults, and each
    /// distinct override), at the current count of instances.
    tiers: Mutex<HashMap<Buckets, Arc<Tier>>>,
    /// The live instances sharing the buckets (at least 1).
    instances: Arc<AtomicU32>,
    /// Each org's override (`None`: the defaults).
    overrides: Cache<String, Option<Override>>,
    /// Subjects refused in the current recording window.
    refused: Cache<(Level, String), ()>,
    /// The counters behind `context.usage`.
    pub usage: usage::Usage,
}

impl RateLimits {
    /// The state for `config`; overrides are read from `store` and cached
    /// for `ttl`.
    pub fn new(config: RateLimitConfig, store: Store, ttl: Duration) -> Self {
        let instances = Arc::new(AtomicU32::new(1));
        RateLimits {
            usage: usage::Usage::new(config.usage_max_entries, Arc::clone(&instances)),
            instances,
            refused: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(Duration::from_secs(config.refusal_record_secs.max(1)))
                .build(),
            overrides: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(ttl)
                .build(),
            tiers: Mutex::new(HashMap::new()),
            clock: DefaultClock::default(),
            store,
            config,
        }
    }

    /// The configured buckets.
    pub fn defaults(&self) -> Buckets {
        Buckets {
            key: self.config.key,
            agent: self.config.agent,
            org: self.config.org,
        }
    }

    /// Whether the buckets apply.
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The live instances sharing the buckets.
    pub fn instances(&self) -> u32 {
        self.instances.load(Ordering::Relaxed).max(1)
    }

    /// Sets the live instances sharing the buckets (the heartbeat counts
    /// them). A new count starts every bucket full at its new share.
    pub fn set_instances(&self, n: u32) {
        let n = n.max(1);
        let Ok(mut tiers) = self.tiers.lock() else {
            return;
        };
        if self.instances.swap(n, Ordering::Relaxed) != n {
            tiers.clear();
            tracing::info!(instances = n, "rate limits shared by the live instances");
        }
    }

    /// Drops the cached override of `org` (after an admin change).
    pub fn invalidate(&self, org: &str) {
        self.overrides.invalidate(org);
    }

    /// Drops every cached override.
    pub fn invalidate_all(&self) {
        self.overrides.invalidate_all();
    }

    /// Spends `cost` tokens for `who`: key, then agent, then org. `Err`
    /// names the bucket that refused.
    pub async fn spend(&self, who: Subjects<'_>, cost: u32) -> Result<(), Limited> {
        if !self.config.enabled {
            return Ok(());
        }
        let buckets = self.buckets_of(who.org).await;
        let (tier, instances) = self.tier(buckets);
        tier.prune_now_and_then();
        let levels = [
            Some((Level::Key, who.key.to_string())),
            who.agent
                .map(|agent| (Level::Agent, format!("{}/{agent}", who.org))),
            Some((Level::Org, who.org.to_string())),
        ];
        for (level, subject) in levels.into_iter().flatten() {
            let bucket = buckets.of(level);
            let share = share_of(bucket.burst, instances).get();
            let n = NonZeroU32::new(cost.clamp(1, share)).unwrap_or(NonZeroU32::MIN);
            let wait = match tier.limiter(level).check_key_n(&subject, n) {
                Ok(Ok(())) => continue,
                Ok(Err(not_until)) => not_until.wait_time_from(self.clock.now()),
                // `n` is at most the burst: not reached.
                Err(_) => Duration::from_secs(1),
            };
            let shown = match (level, who.agent) {
                (Level::Agent, Some(agent)) => agent.to_string(),
                _ => subject.clone(),
            };
            let first_in_window = self
                .refused
                .entry((level, subject))
                .or_insert_with(|| ())
                .is_fresh();
            return Err(Limited {
                level,
                subject: shown,
                bucket,
                cost,
                instances,
                retry_after_secs: whole_seconds(wait),
                first_in_window,
            });
        }
        Ok(())
    }

    /// The buckets that apply to `org` (its override over the defaults).
    async fn buckets_of(&self, org: &str) -> Buckets {
        let defaults = self.defaults();
        if let Some(o) = self.overrides.get(org) {
            return o.map_or(defaults, |o| o.over(defaults));
        }
        match self.load_override(org).await {
            Ok(o) => {
                self.overrides.insert(org.to_string(), o);
                o.map_or(defaults, |o| o.over(defaults))
            }
            Err(e) => {
                // The request fails on the store soon enough; limit it
                // with the defaults meanwhile.
                tracing::warn!(error = %e, org = %org, "cannot read the org's rate limits; using the defaults");
                defaults
            }
        }
    }

    /// Reads `org`'s override from the store.
    pub async fn load_override(&self, org: &str) -> Result<Option<Override>, StoreError> {
        let o = org.to_string();
        let text = self.store.read(move |c| rows::get(c, &o)).await?;
        Ok(text.and_then(|t| match serde_json::from_str::<Override>(&t) {
            Ok(o) => Some(o),
            Err(e) => {
                tracing::warn!(error = %e, "unreadable rate-limit override; using the defaults");
                None
            }
        }))
    }

    /// The limiters of `buckets` and the count of instances they share.
    fn tier(&self, buckets: Buckets) -> (Arc<Tier>, u32) {
        let Ok(mut tiers) = self.tiers.lock() else {
            let n = self.instances();
            return (Arc::new(Tier::new(buckets, n)), n);
        };
        // Read under the lock: `set_instances` swaps it under the lock.
        let n = self.instances();
        let tier = tiers
            .entry(buckets)
            .or_insert_with(|| Arc::new(Tier::new(buckets, n)));
        (Arc::clone(tier), n)
    }
}

/// Whole seconds, rounded up, at least 1.
fn whole_seconds(d: Duration) -> u64 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_round_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1000)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1001)), 2);
    }

    #[test]
    fn each_of_n_instances_holds_its_share_of_a_bucket() {
        let b = Bucket {
            per_second: 1,
            burst: 6,
        };
        for (n, share) in [(1, 6), (2, 3), (4, 1), (10, 1)] {
            let limiter: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(quota(b, n));
            let passed = (0..20)
                .filter(|_| limiter.check_key(&"s".to_string()).is_ok())
                .count();
            assert_eq!(passed, share, "{n} instances");
        }
        assert_eq!(share_of(5, 0).get(), 5, "no count yet reads as one");
    }

    #[test]
    fn overrides_keep_the_buckets_they_leave_out() {
        let d = RateLimitConfig::default();
        let defaults = Buckets {
            key: d.key,
            agent: d.agent,
            org: d.org,
        };
        let o: Override = serde_json::from_str(r#"{"org":{"perSecond":3,"burst":4}}"#).unwrap();
        o.validate().unwrap();
        let b = o.over(defaults);
        assert_eq!(b.key, d.key);
        assert_eq!(
            b.org,
            Bucket {
                per_second: 3,
                burst: 4
            }
        );
        assert!(Override::default().validate().is_err());
        let zero: Override = serde_json::from_str(r#"{"key":{"perSecond":0,"burst":4}}"#).unwrap();
        assert!(zero.validate().is_err());
        assert!(serde_json::from_str::<Override>(r#"{"keys":{}}"#).is_err());
    }
}
