//! The knowledge graph of each project: the per-project gate (here), text
//! normalization shared by extraction, resolution and search ([`text`]),
//! and [`Graphs`] ([`state`]), which owns the in-memory views and the
//! per-project write locks that keep them coherent with the store.
//! [`extract`] finds entities in observations, [`embed`] turns texts into
//! vectors, [`model`] is one project's in-memory graph (its search indexes
//! are [`keywords`] and [`vectors`], both ranking through [`rank`]) and
//! [`pipeline`] plans ingest and feedback writes.
//!
//! Children use each other directly and never this file's items, which
//! only re-exports them for the rest of the crate.
//!
//! **Architecture Invariant:** this module knows nothing about Cedar or
//! HTTP. Traversals take a [`model::NodeFilter`]; the MCP layer passes one
//! that asks Cedar `read_node` through `audit`.

pub mod embed;
pub mod extract;
pub mod keywords;
pub mod model;
pub mod pipeline;
pub mod rank;
pub mod state;
pub mod text;
pub mod vectors;

use crate::store::tenants::SessionTenant;

pub use state::{GraphConfigError, Graphs, from_config};
pub use text::{resolution_key, split_identifier, tokens};

/// The org entitlement that turns the graph on for every project with
/// memory enabled.
pub const KG_ENTITLEMENT: &str = "kg_enabled";

/// Whether the graph tools exist for a session: the project's memory is on
/// AND (the project's graph flag OR the org's `kg_enabled` entitlement).
pub fn enabled(tenant: &SessionTenant) -> bool {
    tenant.project.memory_enabled
        && (tenant.project.graph_enabled
            || tenant.org.entitlements.iter().any(|e| e == KG_ENTITLEMENT))
}
