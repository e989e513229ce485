//! The `read_node` filter of graph reads: a [`NodeFilter`] that asks Cedar
//! through an [`crate::audit::NodeGuard`], once per node per call, so
//! every node a graph tool returns was allowed, and the call's per-node
//! decisions become one batched record.

use std::collections::HashMap;

use crate::audit::{NodeGuard, NodeRef};
use crate::graph::model::{NodeFilter, ProjectGraph};
use crate::store::decisions::NewDecision;

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
