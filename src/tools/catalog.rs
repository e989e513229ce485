//! The built-in tools and which of them a session gets: memory tools when
//! the project's memory is on, graph tools when its graph gate is on
//! ([`crate::graph::enabled`]). Remote tools (A2A skills) are added to a
//! session's view by the gateway, from the org's registry.

use std::sync::Arc;

use super::adapter::{ToolAdapter, ToolOutput};
use super::spec::{InvalidSchema, ToolSpec};
use super::{graph, memory};
use crate::store::tenants::SessionTenant;

/// The built-in tools.
#[derive(Debug, Clone)]
pub struct Catalog {
    memory: Vec<Arc<dyn ToolAdapter>>,
    graph: Vec<Arc<dyn ToolAdapter>>,
}

impl Catalog {
    /// The built-in catalog (memory and graph tools).
    pub fn builtin() -> Result<Catalog, InvalidSchema> {
        Ok(Catalog {
            memory: memory::adapters()?,
            graph: graph::adapters()?,
        })
    }

    /// Every built-in tool's spec (whatever a session enables): the tools
    /// whose arguments the effective Cedar schema types.
    pub fn all(&self) -> Vec<Arc<ToolSpec>> {
        self.memory
            .iter()
            .chain(&self.graph)
            .map(|t| Arc::clone(t.spec()))
            .collect()
    }

    /// Tools the session's org and project enable, before Cedar visibility.
    pub fn for_session(&self, tenant: &SessionTenant) -> Vec<Arc<dyn ToolAdapter>> {
        let mut tools = Vec::new();
        if tenant.project.memory_enabled {
            tools.extend(self.memory.iter().cloned());
        }
        if crate::graph::enabled(tenant) {
            tools.extend(self.graph.iter().cloned());
        }
        tools
    }

    /// The answer to a graph tool called in a project whose graph is off:
    /// a normal result saying so, not an error (agents configured for the
    /// graph keep working where it is not enabled).
    pub fn disabled_answer(&self, name: &str, tenant: &SessionTenant) -> Option<ToolOutput> {
        (graph::is_graph_tool(name) && !crate::graph::enabled(tenant)).then(graph::disabled)
    }
}
