//! The knowledge-graph tools on the MCP path: the per-node Cedar filter
//! (`read_node`, one batched record per call) and the graph part of
//! `af_memory_recall`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::Call;
use crate::audit::{NodeGuard, NodeRef, Scope};
use crate::gateway::SessionView;
use crate::graph::Graphs;
use crate::graph::model::{NodeFilter, ProjectGraph};
use crate::policy::{Kind, PolicyBundle, PreparedContext};
use crate::store::decisions::NewDecision;
use crate::store::tenants::SessionTenant;
use crate::store::{Store, WriteOp};
use crate::tools::memory::{RecallFuture, RecallItem, RecallSource};
use crate::tools::{Adapter, ToolError, ToolOutput, graph};

/// Triplets recall asks the graph for.
const RECALL_TOP_K: usize = 10;
/// Hops recall expands.
const RECALL_DEPTH: usize = 1;
/// Most graph items offered to recall's budget.
const RECALL_ITEMS: usize = 20;

/// A [`NodeFilter`] that asks Cedar `read_node` through a [`NodeGuard`],
/// once per node per call.
#[derive(Debug)]
pub struct GuardFilter<'a> {
    guard: NodeGuard<'a>,
    memo: HashMap<u32, bool>,
}

impl<'a> GuardFilter<'a> {
    /// A filter recording into `guard`.
    pub fn new(guard: NodeGuard<'a>) -> Self {
        GuardFilter {
            guard,
            memo: HashMap::new(),
        }
    }

    /// Number of nodes decided so far.
    pub fn decided(&self) -> usize {
        self.guard.len()
    }

    /// Number of Cedar evaluations made so far (nodes sharing a verdict
    /// count once).
    pub fn cedar_decisions(&self) -> usize {
        self.guard.cedar_decisions()
    }

    /// The batched decision record (none when no node was decided).
    pub fn record(self) -> Option<NewDecision> {
        self.guard.record()
    }
}

impl NodeFilter for GuardFilter<'_> {
    fn admit(&mut self, graph: &ProjectGraph, nodes: &[u32]) -> Vec<bool> {
        let mut ask: Vec<u32> = nodes
            .iter()
            .copied()
            .filter(|n| !self.memo.contains_key(n))
            .collect();
        ask.sort_unstable();
        ask.dedup();
        let (known, unknown): (Vec<u32>, Vec<u32>) =
            ask.into_iter().partition(|n| graph.node(*n).is_some());
        for n in unknown {
            self.memo.insert(n, false);
        }
        let refs: Vec<NodeRef<'_>> = known
            .iter()
            .filter_map(|n| graph.node(*n))
            .map(|n| NodeRef {
                id: &n.id,
                node_type: &n.node_type,
                name: &n.name,
            })
            .collect();
        let verdicts = self.guard.decide(&refs);
        for (n, ok) in known.into_iter().zip(verdicts) {
            self.memo.insert(n, ok);
        }
        nodes
            .iter()
            .map(|n| self.memo.get(n).copied().unwrap_or(false))
            .collect()
    }
}

/// A node guard for the call's session.
fn guard<'a>(
    bundle: &'a PolicyBundle,
    view: &'a SessionView,
    context: &'a PreparedContext,
    time: &str,
) -> NodeGuard<'a> {
    let s = &view.tenant.session;
    NodeGuard::new(
        bundle,
        &view.slice,
        Kind::Agent.uid(&view.tenant.agent.id),
        &s.project_id,
        context,
        Scope {
            org_id: Some(&s.org_id),
            session_id: Some(&s.id),
        },
        time,
    )
}

/// What a graph tool produced: the answer, the writes to commit with the
/// call's records, and a write to apply to the in-memory view afterwards.
#[derive(Debug)]
pub struct Executed {
    /// The answer.
    pub output: ToolOutput,
    /// Writes and records to commit.
    pub ops: Vec<WriteOp>,
    /// A graph write to apply once committed.
    pub pending: Option<graph::PendingWrite>,
}

/// Runs a graph tool. On failure, the records of decisions already made
/// are still returned so they can be committed.
pub async fn execute(
    call: &Call,
    adapter: Adapter,
    args: &Value,
) -> Result<Executed, (ToolError, Vec<WriteOp>)> {
    let gw = &call.gw;
    let tenant = &call.view.tenant;
    let read = |out: Result<ToolOutput, ToolError>, filter: GuardFilter<'_>| {
        let ops: Vec<WriteOp> = filter
            .record()
            .map(|r| WriteOp::Decision(Box::new(r)))
            .into_iter()
            .collect();
        match out {
            Ok(output) => Ok(Executed {
                output,
                ops,
                pending: None,
            }),
            Err(e) => Err((e, ops)),
        }
    };
    let mut filter = GuardFilter::new(guard(&call.bundle, &call.view, &call.context, &call.time));
    match adapter {
        Adapter::GraphQuery => {
            let out = graph::query(&gw.graphs, &gw.store, tenant, args, &mut filter).await;
            read(out, filter)
        }
        Adapter::GraphNeighbors => {
            let out = graph::neighbors(&gw.graphs, &gw.store, tenant, args, &mut filter).await;
            read(out, filter)
        }
        Adapter::GraphPath => {
            let out = graph::path(&gw.graphs, &gw.store, tenant, args, &mut filter).await;
            read(out, filter)
        }
        Adapter::GraphIngest | Adapter::GraphImprove => {
            let planned = if adapter == Adapter::GraphIngest {
                graph::ingest(&gw.graphs, &gw.store, tenant, args).await
            } else {
                graph::improve(&gw.graphs, &gw.store, tenant, args).await
            };
            match planned {
                Ok((output, pending)) => Ok(Executed {
                    output,
                    ops: pending.ops(),
                    pending: Some(pending),
                }),
                Err(e) => Err((e, Vec::new())),
            }
        }
        Adapter::MemoryRecall | Adapter::MemoryRemember | Adapter::A2a => {
            Err((ToolError("not a graph tool".into()), Vec::new()))
        }
    }
}

/// The graph part of `af_memory_recall`: triplets relevant to the query,
/// filtered by `read_node` like `graph_query`, with their batched record
/// kept for the caller to commit.
#[derive(Debug)]
pub struct GraphRecall {
    graphs: Arc<Graphs>,
    store: Store,
    bundle: Arc<PolicyBundle>,
    view: Arc<SessionView>,
    context: PreparedContext,
    time: String,
    records: Mutex<Vec<NewDecision>>,
}

impl GraphRecall {
    /// A recall source for the call's session.
    pub fn new(call: &Call) -> Self {
        GraphRecall {
            graphs: Arc::clone(&call.gw.graphs),
            store: call.gw.store.clone(),
            bundle: Arc::clone(&call.bundle),
            view: Arc::clone(&call.view),
            context: call.context.clone(),
            time: call.time.clone(),
            records: Mutex::new(Vec::new()),
        }
    }

    /// The decision records made while recalling.
    pub fn take_records(&self) -> Vec<WriteOp> {
        self.records
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
            .into_iter()
            .map(|d| WriteOp::Decision(Box::new(d)))
            .collect()
    }
}

impl RecallSource for GraphRecall {
    fn recall<'a>(
        &'a self,
        tenant: &'a SessionTenant,
        query: &'a str,
        _budget: usize,
    ) -> RecallFuture<'a> {
        Box::pin(async move {
            let mut filter =
                GuardFilter::new(guard(&self.bundle, &self.view, &self.context, &self.time));
            let triplets = graph::ranked_triplets(
                &self.graphs,
                &self.store,
                tenant,
                query,
                RECALL_TOP_K,
                RECALL_DEPTH,
                &mut filter,
            )
            .await;
            if let Some(record) = filter.record()
                && let Ok(mut r) = self.records.lock()
            {
                r.push(record);
            }
            Ok(triplets?
                .into_iter()
                .take(RECALL_ITEMS)
                .map(|t| {
                    let text = format!(
                        "{} {} {}",
                        t.get("sourceEntity").and_then(Value::as_str).unwrap_or(""),
                        t.get("relationship")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .replace('_', " "),
                        t.get("targetEntity").and_then(Value::as_str).unwrap_or(""),
                    );
                    let score = t
                        .get("relevanceScore")
                        .and_then(Value::as_f64)
                        .unwrap_or(0.0);
                    RecallItem {
                        text,
                        data: t,
                        score,
                    }
                })
                .collect())
        })
    }
}
