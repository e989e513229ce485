//! Running as one of several instances on a shared database.
//!
//! This file holds [`Cluster`], the state the gateway keeps about this
//! instance; the work that needs the whole gateway sits in the children,
//! above it: [`membership`] (bring-up, heartbeat, leaving) and
//! [`coherence`] (cache invalidation across instances).
//!
//! - **Bring-up**: an instance whose database was unreachable at start-up
//!   serves not-ready; [`membership::heartbeat_loop`] migrates, records the active
//!   policy set and registers the instance as soon as the database
//!   answers, and only then reports ready.
//! - **Which policy set runs where**: every instance upserts its row in
//!   `gateway_instances` (policy hash, heartbeat) at each beat and after
//!   each reload; `GET /admin/policies` lists the live ones.
//! - **Cache coherence**: a change made through one instance's admin API
//!   (A2A peers, tenants, keys) is published on the database's change
//!   channel, and every instance invalidates what it cached for that org
//!   ([`coherence::changed`], [`coherence::start_listener`]).

pub mod coherence;
pub mod membership;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// This instance's identity and bring-up state.
#[derive(Debug)]
pub struct Cluster {
    /// Random id chosen at start-up.
    pub instance_id: String,
    /// When this instance started.
    pub started_at: String,
    /// The policy-set hash known to be recorded in the store.
    recorded: Mutex<Option<String>>,
    /// Migrated, policy set recorded, instance registered.
    ready: AtomicBool,
    /// Whether this instance left (its row removed at a clean stop); held
    /// on the database thread around each write of the row, so a beat
    /// still running when the stop aborted its task cannot bring the row
    /// back after it was removed.
    pub(crate) left: std::sync::Arc<Mutex<bool>>,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            instance_id: uuid::Uuid::now_v7().simple().to_string(),
            started_at: crate::ids::now_rfc3339(),
            recorded: Mutex::new(None),
            ready: AtomicBool::new(false),
            left: std::sync::Arc::new(Mutex::new(false)),
        }
    }
}

impl Cluster {
    /// Whether bring-up finished (the store is usable and this instance
    /// is registered).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Notes that `hash` is recorded in `policy_sets`.
    pub fn recorded(&self, hash: &str) {
        if let Ok(mut r) = self.recorded.lock() {
            *r = Some(hash.to_string());
        }
    }

    fn is_recorded(&self, hash: &str) -> bool {
        self.recorded
            .lock()
            .is_ok_and(|r| r.as_deref() == Some(hash))
    }

    /// Notes that bring-up finished.
    fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }
}
