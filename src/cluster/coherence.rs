//! Cache coherence between instances: a change made through one
//! instance's admin API (A2A peers, tenants, keys) or an MCP session ended
//! on one instance is applied to this instance's caches at once and
//! published on the database's change channel, and every other instance
//! applies it when the notification arrives.
//!
//! SQLite runs one instance, so publishing and listening are PostgreSQL
//! only; caches still catch up within `cache_ttl_secs` if a notification is
//! lost.

use std::sync::Arc;

use crate::gateway::Gateway;
use crate::store::Location;
use crate::store::notify::{self, Change, Listener};

/// A change of `org` made through this instance: invalidate the local
/// caches now, and tell the other instances (they invalidate within the
/// notification's delivery, well under a second).
pub async fn changed(gw: &Gateway, org: &str) {
    apply(gw, &Change::Org(org.to_string()));
    publish(gw, Change::Org(org.to_string())).await;
}

/// Tells the other instances about `change` (PostgreSQL only; best effort:
/// caches catch up within `cache_ttl_secs`, terminations at the next
/// reconnect of their listener).
pub async fn publish(gw: &Gateway, change: Change) {
    if let Location::Postgres(target) = gw.store.location() {
        let channel = notify::channel(&target.schema);
        if let Err(e) = gw
            .store
            .read(move |c| notify::publish(c, &channel, &change))
            .await
        {
            tracing::warn!(error = %e, "could not publish a change to the other instances");
        }
    }
}

/// Applies a change to this instance's caches.
fn apply(gw: &Gateway, change: &Change) {
    match change {
        Change::Org(org) => {
            gw.a2a.invalidate(org);
            gw.upstreams.invalidate(org);
            gw.rate_limits.invalidate(org);
            gw.invalidate_caches();
            // An upstream registry change may change the typed actions.
            gw.lifecycle.registry_changed();
        }
        Change::McpTerminated(sid) => gw.terminated.remember(sid),
        Change::McpResumed(sid) => gw.terminated.forget(sid),
        Change::Everything => {
            gw.a2a.invalidate_all();
            gw.upstreams.invalidate_all();
            gw.rate_limits.invalidate_all();
            gw.invalidate_caches();
            gw.lifecycle.registry_changed();
        }
    }
}

/// Whether the termination a notification announced is still stored: a
/// resume committed since then removed it. A store that cannot answer
/// counts as stored (refusing a stale id is the safe side).
fn still_terminated(gw: &Gateway, sid: &str) -> bool {
    let sid = sid.to_string();
    gw.store
        .read_blocking(move |c| crate::store::terminations::is_stored(c, &sid))
        .unwrap_or(true)
}

/// Listens for other instances' changes (PostgreSQL only).
pub fn start_listener(gw: &Arc<Gateway>) -> Option<Listener> {
    let Location::Postgres(target) = gw.store.location() else {
        return None;
    };
    let weak = Arc::downgrade(gw);
    let listener = notify::listen((**target).clone(), move |change| {
        let Some(gw) = weak.upgrade() else {
            return false;
        };
        if change == Change::Everything {
            // Terminations published while this listener was away.
            let since = crate::mcp::terminated::remembered_since();
            match gw
                .store
                .read_blocking(|c| crate::store::terminations::load_since(c, &since))
            {
                Ok(ids) => ids.iter().for_each(|sid| gw.terminated.remember(sid)),
                Err(e) => tracing::warn!(error = %e, "cannot reload MCP session terminations"),
            }
        }
        if let Change::McpTerminated(sid) = &change
            && !still_terminated(&gw, sid)
        {
            // A notification overtaken by a resume (this instance's own
            // DELETE then `initialize`, say) must not mark it again.
            return true;
        }
        apply(&gw, &change);
        true
    });
    match listener {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::error!(error = %e, "change listener not started; other instances' changes show within cache_ttl_secs");
            None
        }
    }
}
