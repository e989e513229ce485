//! Typed actions for upstream MCP tools: every org's approved pinned
//! definitions become typed `call_tool` actions of the effective schema
//! (`action == Gateway::Action::"fs.read_file"` may read
//! `context.args.path`), rebuilt whenever the registry changes.
//!
//! - At start-up the stored pins are read before the first set is loaded
//!   (`server::prepare` calls [`typed_upstream_tools`]), so policies on
//!   upstream tools validate from the first request.
//! - A register, refresh, approve or delete on any instance reaches
//!   [`crate::cluster::coherence`], which calls
//!   [`super::Lifecycle::registry_changed`]; the task [`start`] runs reads
//!   the pins again (debounced) and, when the typed tools differ, reloads
//!   the policy set through [`super::reload::reload`] (trigger
//!   `upstream-registry`). A set that no longer validates (a policy names
//!   an action whose tool was deleted by an operator, or whose arguments
//!   it reads no longer exist) is refused like any bad reload: the last good set stays
//!   active, and the refusal is `lastError` of `GET /admin/policies` and
//!   shows on `/readyz` (deleting a server whose typed actions the active
//!   set names is refused, `crate::upstream::admin`).
//! - Held definitions change nothing until approved: the approved one
//!   keeps typing the tool meanwhile.
//! - What a server lists never makes the set fail to load: a tool whose
//!   name or property name Cedar cannot hold is refused (never typed,
//!   `crate::policy::cedar_names`), and a name servers declare with
//!   different argument types keeps its action declared but dropped
//!   (`crate::policy::dropped`: the rule for the policies naming it), and
//!   so does an approved tool its upstream no longer lists (its pin is
//!   kept, marked unlisted: `crate::upstream::registry::merge`).

use std::sync::Arc;
use std::time::Duration;

use crate::gateway::Gateway;
use crate::policy::schema_gen::{self, ToolSchema};
use crate::store::StoreError;
use crate::store::db::Conn;
use crate::upstream::registry;

/// How often a database not migrated yet is looked at again.
const NOT_MIGRATED_RETRY: Duration = Duration::from_secs(1);

/// How long registry changes are gathered before one rebuild.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// The typed upstream tools of every org's stored pins (one per gateway
/// name; see [`schema_gen::agreeing`]), with the notes on names left
/// untyped or dropped. The oldest registration comes first, so a name
/// whose servers disagree keeps the types it was first declared with.
pub fn typed_upstream_tools(conn: &mut Conn) -> Result<(Vec<ToolSchema>, Vec<String>), StoreError> {
    let mut rows = registry::list_all(conn)?;
    rows.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
    Ok(schema_gen::agreeing(registry::typed_schemas(&rows)))
}

/// Reads the pins again and reloads the policy set when the typed
/// upstream tools changed. Returns whether a reload ran.
pub async fn rebuild(gw: &Arc<Gateway>) -> Result<bool, StoreError> {
    let (tools, notes) = gw.store.read(typed_upstream_tools).await?;
    for note in notes {
        tracing::warn!(note = %note, "upstream tool left untyped");
    }
    if !gw.lifecycle.set_upstream_tools(tools) {
        return Ok(false);
    }
    // The outcome (applied, unchanged or rejected) is in the reload status.
    let _ = super::reload::reload(gw, "upstream-registry").await;
    Ok(true)
}

/// Rebuilds once now (the database may have come up after start-up), then
/// after every registry change, debounced. Ends when the gateway is gone.
pub fn start(gw: &Arc<Gateway>) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(gw);
    tokio::spawn(async move {
        loop {
            let Some(gw) = weak.upgrade() else { return };
            if !gw.store.is_migrated() {
                // Start-up could not read the pins; read them once it can.
                drop(gw);
                tokio::time::sleep(NOT_MIGRATED_RETRY).await;
                continue;
            }
            if let Err(e) = rebuild(&gw).await {
                tracing::warn!(error = %e, "cannot read the upstream tool definitions; their types are unchanged");
            }
            let changed = Arc::clone(&gw.lifecycle.upstreams_changed);
            // Holding only a weak reference while waiting lets the gateway go.
            drop(gw);
            changed.notified().await;
            tokio::time::sleep(DEBOUNCE).await;
        }
    })
}
