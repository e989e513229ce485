//! Change notifications between instances sharing one PostgreSQL database
//! (`LISTEN`/`NOTIFY`). An instance that changes what other instances
//! cache (A2A peers, tenants, keys) publishes the org it changed; every
//! instance, itself included, invalidates its caches for it. SQLite has a
//! single serving instance, so publishing there does nothing.
//!
//! A listener that lost its connection cannot know what it missed: it
//! reports [`Change::Everything`] when it (re)connects.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::StoreError;
use super::db::{Backend, Conn, PgTarget};
use crate::params;

/// What a notification says changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Something of this org (its peers, tenants or keys).
    Org(String),
    /// A client ended this session's MCP session (`DELETE`).
    McpTerminated(String),
    /// An `initialize` started a new MCP session on this session.
    McpResumed(String),
    /// Unknown: invalidate every cache (a listener reconnected).
    Everything,
}

impl Change {
    /// The notification payload (ids never contain `:`).
    fn payload(&self) -> String {
        match self {
            Change::Org(id) => format!("org:{id}"),
            Change::McpTerminated(id) => format!("mcp-terminated:{id}"),
            Change::McpResumed(id) => format!("mcp-resumed:{id}"),
            Change::Everything => "everything".into(),
        }
    }

    /// Reads a payload; anything unknown (a newer instance's kind) means
    /// "everything", which is always safe.
    fn parse(payload: &str) -> Change {
        match payload.split_once(':') {
            Some(("org", id)) => Change::Org(id.to_string()),
            Some(("mcp-terminated", id)) => Change::McpTerminated(id.to_string()),
            Some(("mcp-resumed", id)) => Change::McpResumed(id.to_string()),
            _ => Change::Everything,
        }
    }
}

/// The channel of a schema (a hash, so any schema name fits the 63-byte
/// identifier limit and schemas never hear each other).
pub fn channel(schema: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("cedargate.changes.{schema}").as_bytes());
    format!("cedargate_{}", hex::encode(digest.get(..8).unwrap_or(&[])))
}

/// Publishes a change to every instance (PostgreSQL only).
pub fn publish(conn: &mut Conn, channel: &str, change: &Change) -> Result<(), StoreError> {
    if conn.backend() == Backend::Postgres {
        conn.execute(
            "SELECT pg_notify(?1, ?2)",
            params![channel, change.payload()],
        )?;
    }
    Ok(())
}

/// Stops the listener thread when dropped.
#[derive(Debug)]
pub struct Listener {
    stop: Arc<AtomicBool>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Starts a thread that listens on `target`'s channel and calls `on_change`
/// for every notification (and with [`Change::Everything`] after each
/// connect). It reconnects every second while the database is away, and
/// ends when the returned [`Listener`] is dropped or `on_change` returns
/// false (its receiver is gone).
pub fn listen(
    target: PgTarget,
    on_change: impl Fn(Change) -> bool + Send + 'static,
) -> Result<Listener, StoreError> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    std::thread::Builder::new()
        .name("cedargate-listen".into())
        .spawn(move || {
            let channel = channel(&target.schema);
            while !stopped.load(Ordering::Acquire) {
                match listen_once(&target, &channel, &stopped, &on_change) {
                    Ok(false) | Err(_) if stopped.load(Ordering::Acquire) => return,
                    Ok(false) => return,
                    Ok(true) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "change listener lost the database; reconnecting");
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
        .map_err(|e| StoreError::Task(format!("cannot start the change listener: {e}")))?;
    Ok(Listener { stop })
}

/// One connection's worth of listening. `Ok(false)`: stop for good.
fn listen_once(
    target: &PgTarget,
    channel: &str,
    stop: &AtomicBool,
    on_change: &impl Fn(Change) -> bool,
) -> Result<bool, StoreError> {
    let mut conn = target.connect()?;
    let client = conn.client()?;
    client.batch_execute(&format!("LISTEN \"{channel}\""))?;
    if !on_change(Change::Everything) {
        return Ok(false);
    }
    loop {
        if stop.load(Ordering::Acquire) {
            return Ok(false);
        }
        {
            let mut notifications = client.notifications();
            let mut batch = notifications.timeout_iter(Duration::from_millis(500));
            while let Some(n) = postgres::fallible_iterator::FallibleIterator::next(&mut batch)? {
                if !on_change(Change::parse(n.payload())) {
                    return Ok(false);
                }
            }
        }
        if client.is_closed() {
            return Err(StoreError::Unavailable("listener connection closed".into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_unknown_ones_mean_everything() {
        for c in [
            Change::Org("acme".into()),
            Change::McpTerminated("0192-ab".into()),
            Change::McpResumed("0192-ab".into()),
            Change::Everything,
        ] {
            assert_eq!(Change::parse(&c.payload()), c);
        }
        assert_eq!(Change::parse("acme"), Change::Everything);
        assert_eq!(Change::parse("future-kind:x"), Change::Everything);
    }

    #[test]
    fn channels_are_per_schema_and_fit_an_identifier() {
        assert_ne!(channel("public"), channel("t_1"));
        assert!(channel(&"x".repeat(63)).len() <= 63);
    }
}
