//! The cap on open connections, in all and per client IP address.
//!
//! Decision: a connection over a cap is **refused**, closed as soon as it
//! is accepted, rather than held in a queue. A queued connection holds the
//! very file descriptor the cap protects, and a client told at once that
//! the gateway is full can retry or go elsewhere; connections already open
//! keep working. Accepting before refusing (instead of pausing `accept`)
//! keeps the kernel's backlog drained, so a flood of silent connections
//! cannot starve the next legitimate one of a place in it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// `http.max_connections` are open.
    #[error("{0} connections are open (http.max_connections)")]
    Full(usize),
    /// The client's address holds `http.max_connections_per_ip`.
    #[error("this address holds {0} connections (http.max_connections_per_ip)")]
    PerAddress(usize),
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// The open connections, counted against their caps.
#[derive(Debug)]
pub struct Capacity {
    counts: Mutex<Counts>,
    max: usize,
    max_per_ip: usize,
    emptied: Notify,
}

/// One admitted connection's place; dropping it frees the place.
#[derive(Debug)]
pub struct Slot {
    capacity: Arc<Capacity>,
    ip: IpAddr,
}

impl Capacity {
    /// Caps of `max` connections in all and `max_per_ip` per address.
    pub fn new(max: usize, max_per_ip: usize) -> Arc<Self> {
        Arc::new(Capacity {
            counts: Mutex::new(Counts::default()),
            max,
            max_per_ip,
            emptied: Notify::new(),
        })
    }

    /// Takes a place for a connection from `ip`, or says which cap is full.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
        let mut counts = self.lock();
        if counts.total >= self.max {
            return Err(Refused::Full(self.max));
        }
        let held = counts.per_ip.entry(ip).or_insert(0);
        if *held >= self.max_per_ip {
            return Err(Refused::PerAddress(self.max_per_ip));
        }
        *held += 1;
        counts.total += 1;
        Ok(Slot {
            capacity: Arc::clone(self),
            ip,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.lock().total
    }

    /// Resolves once no connection is open.
    pub async fn all_closed(&self) {
        loop {
            // Registered before the check, so a release in between wakes it.
            let emptied = self.emptied.notified();
            if self.open() == 0 {
                return;
            }
            emptied.await;
        }
    }

    fn release(&self, ip: IpAddr) {
        let mut counts = self.lock();
        counts.total = counts.total.saturating_sub(1);
        if let Some(held) = counts.per_ip.get_mut(&ip) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                counts.per_ip.remove(&ip);
            }
        }
        if counts.total == 0 {
            self.emptied.notify_waiters();
        }
    }

    /// The counts stay consistent even if a holder panicked: every change
    /// is one step made under the lock.
    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.capacity.release(self.ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_in_all_and_per_address_and_frees_on_drop() {
        let cap = Capacity::new(3, 2);
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let a1 = cap.admit(a);
        let a2 = cap.admit(a);
        assert!(a1.is_ok() && a2.is_ok());
        assert_eq!(cap.admit(a).err(), Some(Refused::PerAddress(2)));
        let b1 = cap.admit(b);
        assert!(b1.is_ok());
        assert_eq!(cap.admit(b).err(), Some(Refused::Full(3)));
        drop(a1);
        assert_eq!(cap.open(), 2);
        assert!(cap.admit(a).is_ok());
    }
}
