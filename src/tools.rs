//! The tool catalog: what a session may see (before Cedar `view_tool`),
//! each tool's `inputSchema` with its compiled validator, and argument
//! validation that names the offending field.
//!
//! **Architecture Invariant:** the catalog knows nothing about Cedar or
//! HTTP; it answers "which tools exist for this tenant" and "are these
//! arguments well-formed".

pub mod graph;
pub mod memory;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::policy::entities::ToolEntity;
use crate::store::tenants::SessionTenant;

/// Which adapter serves a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    /// `af_memory_recall`
    MemoryRecall,
    /// `af_memory_remember`
    MemoryRemember,
    /// `graph_query`
    GraphQuery,
    /// `graph_neighbors`
    GraphNeighbors,
    /// `graph_path`
    GraphPath,
    /// `graph_ingest`
    GraphIngest,
    /// `graph_improve`
    GraphImprove,
    /// A skill of a remote A2A peer (`<agentSlug>.<skillId>`).
    A2a,
}

/// One tool as listed and called.
#[derive(Debug)]
pub struct ToolSpec {
    /// Canonical name (also the Cedar `Tool` id).
    pub name: String,
    /// Human description for `tools/list`.
    pub description: String,
    /// JSON Schema of the arguments, shown verbatim in `tools/list`.
    pub input_schema: Value,
    /// Tool group (`memory`, `graph`, `a2a`): the Cedar parent.
    pub group: String,
    /// Whether the tool only reads.
    pub read_only: bool,
    /// The adapter that executes it.
    pub adapter: Adapter,
    /// Slug of the A2A peer serving it (its Cedar `PeerAgent` parent).
    pub peer: Option<String>,
    validator: jsonschema::Validator,
    /// The `tools/list` entry, serialized once.
    listing_json: String,
}

/// A rejected argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentError {
    /// JSON pointer (or property name) of the offending field.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ToolSpec {
    /// Builds a spec, compiling its schema.
    pub fn new(
        name: &str,
        description: &str,
        input_schema: Value,
        group: &str,
        read_only: bool,
        adapter: Adapter,
    ) -> Result<ToolSpec, String> {
        let validator = jsonschema::validator_for(&input_schema)
            .map_err(|e| format!("tool `{name}` has an invalid inputSchema: {e}"))?;
        let listing =
            json!({ "name": name, "description": description, "inputSchema": input_schema });
        Ok(ToolSpec {
            listing_json: listing.to_string(),
            name: name.to_string(),
            description: description.to_string(),
            input_schema,
            group: group.to_string(),
            read_only,
            adapter,
            peer: None,
            validator,
        })
    }

    /// The same tool, served by the A2A peer `slug`.
    pub fn with_peer(mut self, slug: &str) -> ToolSpec {
        self.peer = Some(slug.to_string());
        self
    }

    /// Checks `args` against the input schema; every error names its field.
    pub fn validate(&self, args: &Value) -> Result<(), Vec<ArgumentError>> {
        let errors: Vec<ArgumentError> = self
            .validator
            .iter_errors(args)
            .map(|e| {
                let path = e.instance_path().as_str().to_string();
                let field = match e.kind() {
                    jsonschema::error::ValidationErrorKind::Required { property } => {
                        let prop = property
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| property.to_string());
                        if path.is_empty() {
                            prop
                        } else {
                            format!("{path}/{prop}")
                        }
                    }
                    _ if path.is_empty() => "arguments".to_string(),
                    _ => path.trim_start_matches('/').replace('/', "."),
                };
                ArgumentError {
                    field,
                    message: e.to_string(),
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The entry in `tools/list`, serialized once (a listing of a large
    /// catalog is assembled from these instead of serializing it per call).
    pub fn listing_json(&self) -> &str {
        &self.listing_json
    }

    /// How the PEP sees this tool.
    pub fn entity(&self) -> ToolEntity {
        ToolEntity {
            name: self.name.clone(),
            group: self.group.clone(),
            kind: self.group.clone(),
            read_only: self.read_only,
            peer: self.peer.clone(),
        }
    }
}

/// The `tools/list` result holding `entries` ([`ToolSpec::listing_json`]).
pub fn list_result(entries: &[&str]) -> String {
    format!("{{\"tools\":[{}]}}", entries.join(","))
}

/// The built-in tools.
#[derive(Debug, Clone)]
pub struct Catalog {
    memory: Vec<Arc<ToolSpec>>,
    graph: Vec<Arc<ToolSpec>>,
}

impl Catalog {
    /// The built-in catalog (memory and graph tools).
    pub fn builtin() -> Result<Catalog, String> {
        Ok(Catalog {
            memory: memory::specs()?.into_iter().map(Arc::new).collect(),
            graph: graph::specs()?.into_iter().map(Arc::new).collect(),
        })
    }

    /// Every built-in tool (whatever a session enables): the tools whose
    /// arguments the effective Cedar schema types.
    pub fn all(&self) -> Vec<Arc<ToolSpec>> {
        self.memory.iter().chain(&self.graph).cloned().collect()
    }

    /// Tools the session's org and project enable, before Cedar visibility:
    /// memory tools when the project's memory is on; graph tools when the
    /// per-project graph gate is on ([`crate::graph::enabled`]).
    pub fn for_session(&self, tenant: &SessionTenant) -> Vec<Arc<ToolSpec>> {
        let mut tools = Vec::new();
        if tenant.project.memory_enabled {
            tools.extend(self.memory.iter().cloned());
        }
        if crate::graph::enabled(tenant) {
            tools.extend(self.graph.iter().cloned());
        }
        tools
    }
}

/// What a tool produced.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    /// Text for the `content` part.
    pub text: String,
    /// The JSON result (`structuredContent` for clients that take it).
    pub structured: Value,
}

/// A tool that failed while executing (answered as -32603).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);
