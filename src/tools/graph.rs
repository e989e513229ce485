//! Knowledge-graph tools: `graph_query`, `graph_neighbors`, `graph_path`
//! (reads, every node passed through a [`NodeFilter`]) and `graph_ingest`,
//! `graph_improve` (writes, planned under the project's write lock and
//! applied to the in-memory view only after the caller committed them).
//! Input fields, defaults and output fields are the product contract.

use std::sync::{Arc, RwLock};

use serde_json::{Value, json};
use tokio::sync::OwnedMutexGuard;

use super::adapter::{
    AfterCommit, Executed, Failed, Invocation, ToolAdapter, ToolCall, ToolError, ToolFuture,
    ToolOutput,
};
use super::node_filter::GuardFilter;
use super::spec::{InvalidSchema, ToolSpec};
use crate::graph::Graphs;
use crate::graph::model::{NodeFilter, ProjectGraph};
use crate::graph::pipeline::{self, Outcome};
use crate::store::graph::{GraphWrite, Provenance};
use crate::store::tenants::SessionTenant;
use crate::store::{Store, WriteOp};

/// The five graph tool names.
pub const NAMES: [&str; 5] = [
    "graph_query",
    "graph_neighbors",
    "graph_path",
    "graph_ingest",
    "graph_improve",
];

/// Most nodes a neighborhood returns.
pub const MAX_NEIGHBOR_NODES: usize = 1000;
/// Most nodes a query expansion enters.
pub const MAX_EXPANSION_NODES: usize = 2000;
/// Most nodes a path search visits before giving up.
pub const MAX_PATH_VISITS: usize = 20_000;
/// Most triplets a query returns.
pub const MAX_TRIPLETS: usize = 200;

/// Whether `name` is one of the graph tools.
pub fn is_graph_tool(name: &str) -> bool {
    NAMES.contains(&name)
}

/// The answer of a graph tool whose project has the graph off.
pub fn disabled() -> ToolOutput {
    let structured = json!({ "disabled": true });
    ToolOutput {
        text: structured.to_string(),
        structured,
    }
}

fn context_schema() -> Value {
    json!({
        "type": "object",
        "description": "Caller identity (agentId, orgId, projectId, sessionId). Always replaced by the session's authoritative identity."
    })
}

/// The graph tools.
pub fn adapters() -> Result<Vec<Arc<dyn ToolAdapter>>, InvalidSchema> {
    let read = |spec: ToolSpec, op| -> Arc<dyn ToolAdapter> {
        Arc::new(ReadTool {
            spec: Arc::new(spec),
            op,
        })
    };
    let write = |spec: ToolSpec, op| -> Arc<dyn ToolAdapter> {
        Arc::new(WriteTool {
            spec: Arc::new(spec.writing_graph()),
            op,
        })
    };
    Ok(vec![
        read(
            ToolSpec::new(
                "graph_query",
                "Hybrid vector + keyword search over the knowledge graph; returns ranked (source, relationship, target) triplets.",
                json!({
                    "type": "object",
                    "properties": {
                        "query": { "type": "string", "minLength": 1, "maxLength": 4096, "description": "Natural-language search phrase." },
                        "topK": { "type": "integer", "minimum": 1, "maximum": 100, "default": 10, "description": "Maximum seed nodes from search." },
                        "neighborhoodDepth": { "type": "integer", "minimum": 1, "maximum": 4, "default": 2, "description": "Hops to expand from each seed." },
                        "context": context_schema()
                    },
                    "required": ["query"]
                }),
                "graph",
                true,
            )?,
            Read::Query,
        ),
        read(
            ToolSpec::new(
                "graph_neighbors",
                "Fetch connected entities up to k hops from a node (by name or UUID).",
                json!({
                    "type": "object",
                    "properties": {
                        "entity": { "type": "string", "minLength": 1, "maxLength": 512, "description": "Entity name or UUID." },
                        "depth": { "type": "integer", "minimum": 0, "maximum": 5, "default": 1, "description": "Hops to expand." },
                        "relationshipFilter": { "type": "string", "minLength": 1, "maxLength": 128, "description": "Restrict to this relationship type." },
                        "context": context_schema()
                    },
                    "required": ["entity"]
                }),
                "graph",
                true,
            )?,
            Read::Neighbors,
        ),
        read(
            ToolSpec::new(
                "graph_path",
                "Find the shortest path between two entities (BFS); null when none within maxDepth.",
                json!({
                    "type": "object",
                    "properties": {
                        "fromEntity": { "type": "string", "minLength": 1, "maxLength": 512, "description": "Start entity name or UUID." },
                        "toEntity": { "type": "string", "minLength": 1, "maxLength": 512, "description": "End entity name or UUID." },
                        "maxDepth": { "type": "integer", "minimum": 1, "maximum": 12, "default": 6, "description": "Longest path, in edges." },
                        "context": context_schema()
                    },
                    "required": ["fromEntity", "toEntity"]
                }),
                "graph",
                true,
            )?,
            Read::Path,
        ),
        write(
            ToolSpec::new(
                "graph_ingest",
                "Add new triplets to the knowledge graph: extract entities and relationships from unprocessed observations.",
                json!({
                    "type": "object",
                    "properties": {
                        "limit": { "type": "integer", "minimum": 1, "maximum": 1000, "default": 20, "description": "Most observations to process." },
                        "context": context_schema()
                    }
                }),
                "graph",
                false,
            )?,
            Write::Ingest,
        ),
        write(
            ToolSpec::new(
                "graph_improve",
                "Update EMA feedback weights on existing nodes and triplets from a session outcome.",
                json!({
                    "type": "object",
                    "properties": {
                        "sessionId": { "type": "string", "minLength": 1, "maxLength": 128, "description": "Session whose outcome this is." },
                        "outcome": { "type": "string", "enum": ["accepted", "rework", "rejected"], "description": "accepted: toward 1.0; rework: toward 0.5; rejected: toward 0.0." },
                        "usedNodeIds": { "type": "array", "maxItems": 1000, "items": { "type": "string", "maxLength": 128 }, "default": [] },
                        "usedEdgeKeys": {
                            "type": "array", "maxItems": 1000, "default": [],
                            "items": {
                                "type": "object",
                                "properties": {
                                    "sourceId": { "type": "string", "maxLength": 128 },
                                    "targetId": { "type": "string", "maxLength": 128 },
                                    "relationshipName": { "type": "string", "maxLength": 128 }
                                },
                                "required": ["sourceId", "targetId", "relationshipName"]
                            }
                        },
                        "context": context_schema()
                    },
                    "required": ["outcome"]
                }),
                "graph",
                false,
            )?,
            Write::Improve,
        ),
    ])
}

fn int_arg(args: &Value, field: &str, default: u64) -> usize {
    args.get(field)
        .and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f as u64)))
        .unwrap_or(default) as usize
}

fn str_arg<'a>(args: &'a Value, field: &str) -> Result<&'a str, ToolError> {
    args.get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError(format!("`{field}` must be a string")))
}

fn provenance_json(p: &Provenance) -> Value {
    json!({
        "observationId": p.observation_id,
        "sessionId": p.session_id,
        "timestamp": p.timestamp,
    })
}

/// A node as returned by `graph_neighbors` and `graph_path`.
pub fn node_json(g: &ProjectGraph, i: u32) -> Value {
    match g.node(i) {
        Some(n) => json!({
            "id": n.id,
            "name": n.name,
            "type": n.node_type,
            "description": n.description,
            "provenance": provenance_json(&n.provenance),
            "feedbackWeight": n.weight,
        }),
        None => Value::Null,
    }
}

/// An edge as returned by `graph_neighbors` and `graph_path`.
pub fn edge_json(g: &ProjectGraph, i: u32) -> Value {
    let id = |n: u32| g.node(n).map(|x| x.id.clone()).unwrap_or_default();
    match g.edge(i) {
        Some(e) => json!({
            "sourceId": id(e.source),
            "targetId": id(e.target),
            "relationshipName": &*e.relationship,
            "feedbackWeight": e.weight,
            "provenance": provenance_json(&e.provenance),
        }),
        None => Value::Null,
    }
}

fn output(structured: Value) -> ToolOutput {
    ToolOutput {
        text: structured.to_string(),
        structured,
    }
}

fn poisoned() -> ToolError {
    ToolError("graph view is unavailable".into())
}

async fn view(
    graphs: &Graphs,
    store: &Store,
    tenant: &SessionTenant,
) -> Result<Arc<RwLock<ProjectGraph>>, ToolError> {
    graphs
        .view(store, &tenant.session.org_id, &tenant.session.project_id)
        .await
        .map_err(|e| ToolError(format!("cannot load the graph: {e}")))
}

/// Ranked triplets for a query (shared by `graph_query` and recall).
pub async fn ranked_triplets(
    graphs: &Graphs,
    store: &Store,
    tenant: &SessionTenant,
    query: &str,
    top_k: usize,
    depth: usize,
    filter: &mut (dyn NodeFilter + Send),
) -> Result<Vec<Value>, ToolError> {
    let vectors = graphs
        .embedder
        .embed(&[query.to_string()])
        .await
        .map_err(|e| ToolError(e.to_string()))?;
    let qv = vectors.into_iter().next().unwrap_or_default();
    let terms = crate::graph::tokens(query);
    let view = view(graphs, store, tenant).await?;
    let g = view.read().map_err(|_| poisoned())?;
    let model = graphs.embedder.model();
    let ranked = pipeline::search(
        &g,
        model,
        &qv,
        &terms,
        top_k,
        depth,
        MAX_EXPANSION_NODES,
        (top_k * 10).min(MAX_TRIPLETS),
        filter,
    );
    let name = |n: u32| g.node(n).map(|x| x.name.clone()).unwrap_or_default();
    let id = |n: u32| g.node(n).map(|x| x.id.clone()).unwrap_or_default();
    Ok(ranked
        .into_iter()
        .filter_map(|t| {
            let e = g.edge(t.edge)?;
            Some(json!({
                "sourceEntity": name(e.source),
                "relationship": &*e.relationship,
                "targetEntity": name(e.target),
                "relevanceScore": (t.score * 1e6).round() / 1e6,
                "provenance": provenance_json(&e.provenance),
                "sourceId": id(e.source),
                "targetId": id(e.target),
            }))
        })
        .collect())
}

/// `graph_query`.
pub async fn query(
    graphs: &Graphs,
    store: &Store,
    tenant: &SessionTenant,
    args: &Value,
    filter: &mut (dyn NodeFilter + Send),
) -> Result<ToolOutput, ToolError> {
    let query = str_arg(args, "query")?;
    let top_k = int_arg(args, "topK", 10);
    let depth = int_arg(args, "neighborhoodDepth", 2);
    let triplets = ranked_triplets(graphs, store, tenant, query, top_k, depth, filter).await?;
    Ok(output(json!({ "triplets": triplets })))
}

/// `graph_neighbors`: an unknown or unreadable entity gives an empty result.
pub async fn neighbors(
    graphs: &Graphs,
    store: &Store,
    tenant: &SessionTenant,
    args: &Value,
    filter: &mut (dyn NodeFilter + Send),
) -> Result<ToolOutput, ToolError> {
    let entity = str_arg(args, "entity")?;
    let depth = int_arg(args, "depth", 1);
    let relationship = args.get("relationshipFilter").and_then(Value::as_str);
    let view = view(graphs, store, tenant).await?;
    let g = view.read().map_err(|_| poisoned())?;
    let found = g
        .find(entity)
        .and_then(|start| g.neighbors(start, depth, relationship, MAX_NEIGHBOR_NODES, filter));
    let (nodes, edges) = found.unwrap_or_default();
    Ok(output(json!({
        "nodes": nodes.iter().map(|n| node_json(&g, *n)).collect::<Vec<_>>(),
        "edges": edges.iter().map(|e| edge_json(&g, *e)).collect::<Vec<_>>(),
    })))
}

/// `graph_path`: `{"path": {nodes, edges, length}}` or `{"path": null}`.
pub async fn path(
    graphs: &Graphs,
    store: &Store,
    tenant: &SessionTenant,
    args: &Value,
    filter: &mut (dyn NodeFilter + Send),
) -> Result<ToolOutput, ToolError> {
    let from = str_arg(args, "fromEntity")?;
    let to = str_arg(args, "toEntity")?;
    let max_depth = int_arg(args, "maxDepth", 6);
    let view = view(graphs, store, tenant).await?;
    let g = view.read().map_err(|_| poisoned())?;
    let found = match (g.find(from), g.find(to)) {
        (Some(a), Some(b)) => g.path(a, b, max_depth, MAX_PATH_VISITS, filter),
        _ => None,
    };
    let path = match found {
        Some((nodes, edges)) => json!({
            "nodes": nodes.iter().map(|n| node_json(&g, *n)).collect::<Vec<_>>(),
            "edges": edges.iter().map(|e| edge_json(&g, *e)).collect::<Vec<_>>(),
            "length": edges.len(),
        }),
        None => Value::Null,
    };
    let text = path.to_string();
    Ok(ToolOutput {
        text,
        structured: json!({ "path": path }),
    })
}

/// A planned graph write: committed by the caller with its decision
/// records, then applied to the in-memory view while the project's write
/// lock is still held.
#[derive(Debug)]
pub struct PendingWrite {
    _lock: OwnedMutexGuard<()>,
    view: Arc<RwLock<ProjectGraph>>,
    write: Option<GraphWrite>,
}

impl PendingWrite {
    /// The store write (empty when nothing changes).
    pub fn ops(&self) -> Vec<WriteOp> {
        self.write
            .iter()
            .map(|w| WriteOp::Graph(Box::new(w.clone())))
            .collect()
    }
}

impl AfterCommit for PendingWrite {
    /// Applies the committed write to the view and releases the lock.
    fn apply(self: Box<Self>) {
        if let Some(w) = &self.write {
            match self.view.write() {
                Ok(mut g) => pipeline::apply(&mut g, w),
                Err(_) => tracing::error!("graph view poisoned; it will not reflect a write"),
            }
        }
    }
}

/// `graph_ingest`: plans the extraction of up to `limit` unprocessed
/// observations.
pub async fn ingest(
    graphs: &Graphs,
    store: &Store,
    tenant: &SessionTenant,
    args: &Value,
) -> Result<(ToolOutput, PendingWrite), ToolError> {
    let limit = int_arg(args, "limit", 20);
    let (org, project) = (
        tenant.session.org_id.clone(),
        tenant.session.project_id.clone(),
    );
    let (lock, view) = graphs
        .write(store, &org, &project)
        .await
        .map_err(|e| ToolError(format!("cannot load the graph: {e}")))?;
    let (o, p) = (org.clone(), project.clone());
    let pending = store
        .read(move |c| crate::store::graph::unprocessed(c, &o, &p, limit))
        .await
        .map_err(|e| ToolError(format!("cannot read observations: {e}")))?;
    let plan = pipeline::plan_ingest(graphs, &view, &org, &project, pending)
        .await
        .map_err(|e| ToolError(e.to_string()))?;
    let out = output(json!({
        "processed": plan.processed,
        "totalNodesCreated": plan.nodes_created,
        "totalEdgesCreated": plan.edges_created,
        "mergedCount": plan.merged,
    }));
    let write = (plan.processed > 0).then_some(plan.write);
    Ok((
        out,
        PendingWrite {
            _lock: lock,
            view,
            write,
        },
    ))
}

/// `graph_improve`: plans one EMA step on the referenced nodes and edges.
pub async fn improve(
    graphs: &Graphs,
    store: &Store,
    tenant: &SessionTenant,
    args: &Value,
) -> Result<(ToolOutput, PendingWrite), ToolError> {
    let started = std::time::Instant::now();
    let outcome = args
        .get("outcome")
        .and_then(Value::as_str)
        .and_then(Outcome::parse)
        .ok_or_else(|| ToolError("`outcome` must be accepted, rework or rejected".into()))?;
    let node_ids: Vec<String> = args
        .get("usedNodeIds")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let edge_keys: Vec<(String, String, String)> = args
        .get("usedEdgeKeys")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|k| {
                    Some((
                        k.get("sourceId")?.as_str()?.to_string(),
                        k.get("targetId")?.as_str()?.to_string(),
                        k.get("relationshipName")?.as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let (org, project) = (
        tenant.session.org_id.clone(),
        tenant.session.project_id.clone(),
    );
    let (lock, view) = graphs
        .write(store, &org, &project)
        .await
        .map_err(|e| ToolError(format!("cannot load the graph: {e}")))?;
    let plan = pipeline::plan_feedback(
        graphs, &view, &org, &project, outcome, &node_ids, &edge_keys,
    )
    .await
    .map_err(|e| ToolError(e.to_string()))?;
    let out = output(json!({
        "nodeUpdates": plan.node_updates,
        "edgeUpdates": plan.edge_updates,
        "tripletEmbeddings": plan.triplet_embeddings,
        "durationMs": started.elapsed().as_millis() as u64,
    }));
    let write = (plan.node_updates + plan.edge_updates > 0).then_some(plan.write);
    Ok((
        out,
        PendingWrite {
            _lock: lock,
            view,
            write,
        },
    ))
}

/// Which graph read a [`ReadTool`] runs.
#[derive(Debug, Clone, Copy)]
enum Read {
    Query,
    Neighbors,
    Path,
}

/// `graph_query`, `graph_neighbors`, `graph_path`: every node they return
/// passed `read_node`; the call's per-node decisions commit as one record.
#[derive(Debug)]
struct ReadTool {
    spec: Arc<ToolSpec>,
    op: Read,
}

impl ToolAdapter for ReadTool {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }

    fn execute<'a>(
        &'a self,
        inv: &'a Invocation<'a>,
        call: ToolCall<'a>,
    ) -> ToolFuture<'a, Result<Executed, Failed>> {
        Box::pin(async move {
            let (graphs, store, tenant, args) = (inv.graphs, inv.store, inv.tenant, call.args);
            let mut filter = GuardFilter::new(inv.node_guard());
            let out = match self.op {
                Read::Query => query(graphs, store, tenant, args, &mut filter).await,
                Read::Neighbors => neighbors(graphs, store, tenant, args, &mut filter).await,
                Read::Path => path(graphs, store, tenant, args, &mut filter).await,
            };
            let ops: Vec<WriteOp> = filter
                .record()
                .map(|r| WriteOp::Decision(Box::new(r)))
                .into_iter()
                .collect();
            match out {
                Ok(output) => Ok(Executed::summarized(output, ops)),
                Err(e) => Err(Failed::tool(e, ops)),
            }
        })
    }
}

/// Which graph write a [`WriteTool`] plans.
#[derive(Debug, Clone, Copy)]
enum Write {
    Ingest,
    Improve,
}

/// `graph_ingest`, `graph_improve`: the write is planned under the
/// project's write lock, committed with the call's records, then applied
/// to the in-memory view.
#[derive(Debug)]
struct WriteTool {
    spec: Arc<ToolSpec>,
    op: Write,
}

impl ToolAdapter for WriteTool {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }

    fn execute<'a>(
        &'a self,
        inv: &'a Invocation<'a>,
        call: ToolCall<'a>,
    ) -> ToolFuture<'a, Result<Executed, Failed>> {
        Box::pin(async move {
            let planned = match self.op {
                Write::Ingest => ingest(inv.graphs, inv.store, inv.tenant, call.args).await,
                Write::Improve => improve(inv.graphs, inv.store, inv.tenant, call.args).await,
            };
            match planned {
                Ok((output, pending)) => {
                    let mut done = Executed::summarized(output, pending.ops());
                    done.after_commit = Some(Box::new(pending));
                    Ok(done)
                }
                Err(e) => Err(Failed::tool(e, Vec::new())),
            }
        })
    }
}
