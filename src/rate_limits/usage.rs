//! The usage counters behind `context.usage`: calls per (agent, tool), per
//! agent and per org over a sliding minute, kept per instance.
//!
//! Each subject keeps 60 one-second slots (a slot is reused when its
//! second comes round again), so a count is exact to the second and a
//! subject costs a fixed few hundred bytes. Subjects live in a bounded
//! cache (`rate_limits.usage_max_entries`, least recently used forgotten
//! first) and are dropped after a minute without calls, when their counts
//! are zero anyway. Counting starts when a policy set that reads
//! `context.usage` is active.
//!
//! Counts are kept per instance and shared like the buckets (see
//! `crate::rate_limits`): with n live instances each reports n times the
//! calls it counted, the org's calls when the load balancer spreads them,
//! so a rule's threshold means the same on one instance or on n. A client
//! pinned to one instance reaches the threshold after 1/n of its calls.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use moka::sync::Cache;

use crate::policy::UsageFacts;

/// Seconds in the window.
const WINDOW_SECS: u64 = 60;

/// One subject's calls over the last minute.
#[derive(Debug)]
struct Window {
    /// `(second, calls)` per slot; a slot counts only while its second is
    /// inside the window.
    slots: Mutex<[(u64, u64); WINDOW_SECS as usize]>,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            slots: Mutex::new([(0, 0); WINDOW_SECS as usize]),
        }
    }
}

impl Window {
    /// Counts the calls of the last minute before `now`, then adds one.
    fn count_then_add(&self, now: u64) -> u64 {
        let Ok(mut slots) = self.slots.lock() else {
            return 0;
        };
        let recent = slots
            .iter()
            .filter(|(second, _)| *second + WINDOW_SECS > now && *second <= now)
            .map(|(_, n)| n)
            .sum();
        let slot = &mut slots[(now % WINDOW_SECS) as usize];
        if slot.0 != now {
            *slot = (now, 0);
        }
        slot.1 += 1;
        recent
    }
}

/// The counters of this instance.
#[derive(Debug)]
pub struct Usage {
    started: Instant,
    windows: Cache<String, Arc<Window>>,
    /// The live instances sharing the counts (at least 1).
    instances: Arc<AtomicU32>,
}

impl Usage {
    /// Counters for at most `max_entries` subjects, shared by `instances`.
    pub fn new(max_entries: u64, instances: Arc<AtomicU32>) -> Self {
        Usage {
            instances,
            started: Instant::now(),
            windows: Cache::builder()
                .max_capacity(max_entries.max(1))
                .time_to_idle(Duration::from_secs(WINDOW_SECS))
                .build(),
        }
    }

    /// The usage before this call of `tool` by `agent` of `org` (this
    /// instance's counts times the live instances), and the call counted.
    pub fn call(&self, org: &str, agent: &str, tool: &str) -> UsageFacts {
        let now = self.started.elapsed().as_secs() + WINDOW_SECS;
        let n = u64::from(self.instances.load(Ordering::Relaxed).max(1));
        let count = |subject: String| {
            self.windows
                .get_with(subject, Arc::default)
                .count_then_add(now)
                .saturating_mul(n)
        };
        UsageFacts {
            calls_last_minute: count(format!("t\u{0}{org}\u{0}{agent}\u{0}{tool}")),
            agent_calls_last_minute: count(format!("a\u{0}{org}\u{0}{agent}")),
            org_calls_last_minute: count(format!("o\u{0}{org}")),
        }
    }
}

impl Usage {
    /// Whether nothing is counted (a set that does not read
    /// `context.usage` counts nothing).
    pub fn is_empty(&self) -> bool {
        self.windows.run_pending_tasks();
        self.windows.entry_count() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_counts_the_last_minute_only() {
        let w = Window::default();
        assert_eq!(w.count_then_add(100), 0);
        assert_eq!(w.count_then_add(100), 1);
        assert_eq!(w.count_then_add(130), 2);
        assert_eq!(w.count_then_add(159), 3);
        // Second 100 has left the window; 130 and 159 remain.
        assert_eq!(w.count_then_add(160), 2);
        assert_eq!(w.count_then_add(500), 0);
    }

    #[test]
    fn subjects_are_counted_apart() {
        let u = Usage::new(100, Arc::new(AtomicU32::new(1)));
        u.call("o", "a", "t1");
        u.call("o", "a", "t1");
        u.call("o", "b", "t1");
        let f = u.call("o", "a", "t2");
        assert_eq!(f.calls_last_minute, 0);
        assert_eq!(f.agent_calls_last_minute, 2);
        assert_eq!(f.org_calls_last_minute, 3);
        assert_eq!(u.call("p", "a", "t1").org_calls_last_minute, 0);
    }

    #[test]
    fn counts_are_scaled_to_the_live_instances() {
        let n = Arc::new(AtomicU32::new(1));
        let u = Usage::new(100, Arc::clone(&n));
        u.call("o", "a", "t");
        n.store(3, Ordering::Relaxed);
        let f = u.call("o", "a", "t");
        assert_eq!(f.calls_last_minute, 3);
        assert_eq!(f.org_calls_last_minute, 3);
    }
}
