//! Memory tools: `af_memory_remember` stores an observation in the
//! project's store; `af_memory_recall` ranks the project's observations
//! with BM25 and fills a token budget chosen by `workType`.
//!
//! Recall leaves one seam for the knowledge graph: a [`RecallSource`]
//! whose items are merged into the same budget.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::{Value, json};

use super::adapter::{
    Executed, Failed, Invocation, ToolAdapter, ToolCall, ToolError, ToolFuture, ToolOutput,
};
use super::node_filter::GuardFilter;
use super::spec::{InvalidSchema, ToolSpec};
use crate::store::decisions::NewDecision;
use crate::store::observations::{self, NewObservation, ObservationHit};
use crate::store::tenants::SessionTenant;
use crate::store::{Store, WriteOp};

/// Token budget per `workType` (tokens are estimated as characters / 4).
/// Unknown work types get [`DEFAULT_BUDGET`].
pub const WORK_TYPE_BUDGETS: &[(&str, usize)] = &[
    ("bug_fix", 2000),
    ("feature", 3000),
    ("refactor", 2500),
    ("chore", 800),
    ("research", 4000),
    ("review", 1500),
];

/// Budget for a work type not in [`WORK_TYPE_BUDGETS`].
pub const DEFAULT_BUDGET: usize = 1500;

/// Most observations ranked per recall before the budget is applied.
const RECALL_CANDIDATES: usize = 50;

/// The token budget for a work type.
pub fn budget_for(work_type: &str) -> usize {
    WORK_TYPE_BUDGETS
        .iter()
        .find(|(w, _)| w.eq_ignore_ascii_case(work_type))
        .map(|(_, b)| *b)
        .unwrap_or(DEFAULT_BUDGET)
}

/// Estimated tokens of a text (about four characters per token).
pub fn estimate_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// An extra recall item (a knowledge-graph triplet, once the graph exists).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecallItem {
    /// One line of text for the agent.
    pub text: String,
    /// Source-specific JSON.
    pub data: Value,
    /// Relevance, higher first.
    pub score: f64,
}

/// Future returned by a [`RecallSource`].
pub type RecallFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<RecallItem>, ToolError>> + Send + 'a>>;

/// A source merged into recall results within the same token budget.
pub trait RecallSource: Send + Sync + std::fmt::Debug {
    /// Items relevant to `query` for the session's project.
    fn recall<'a>(
        &'a self,
        tenant: &'a SessionTenant,
        query: &'a str,
        budget: usize,
    ) -> RecallFuture<'a>;
}

/// Triplets recall asks the graph for.
const RECALL_TOP_K: usize = 10;
/// Hops recall expands.
const RECALL_DEPTH: usize = 1;
/// Most graph items offered to recall's budget.
const RECALL_ITEMS: usize = 20;

/// The memory tools, with the seed's input schemas.
pub fn adapters() -> Result<Vec<Arc<dyn ToolAdapter>>, InvalidSchema> {
    let recall = ToolSpec::new(
        "af_memory_recall",
        "Recall relevant observations from agent memory.",
        json!({
            "type": "object",
            "properties": {
                "query": { "type": "string", "minLength": 1, "maxLength": 4096, "description": "Natural-language search phrase or question." },
                "workType": { "type": "string", "minLength": 1, "maxLength": 64, "description": "Work type - drives observation token budget (e.g. bug_fix, feature, refactor)." }
            },
            "required": ["query", "workType"]
        }),
        "memory",
        true,
    )?;
    let remember = ToolSpec::new(
        "af_memory_remember",
        "Store a new observation into agent memory.",
        json!({
            "type": "object",
            "properties": {
                "content": { "type": "string", "minLength": 1, "maxLength": 32768, "description": "The observation text to store." },
                "type": { "type": "string", "maxLength": 64, "description": "Observation type (e.g. pattern, decision, constraint)." },
                "confidence": { "type": "number", "minimum": 0, "maximum": 1, "description": "Confidence score 0-1." }
            },
            "required": ["content"]
        }),
        "memory",
        false,
    )?;
    Ok(vec![
        Arc::new(Recall(Arc::new(recall))),
        Arc::new(Remember(Arc::new(remember))),
    ])
}

/// `af_memory_recall`: observations ranked by the store's text search,
/// plus the project's graph triplets (filtered by `read_node`) when the
/// graph is on.
#[derive(Debug)]
pub struct Recall(Arc<ToolSpec>);

impl ToolAdapter for Recall {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.0
    }

    fn execute<'a>(
        &'a self,
        inv: &'a Invocation<'a>,
        call: ToolCall<'a>,
    ) -> ToolFuture<'a, Result<Executed, Failed>> {
        Box::pin(async move {
            if !crate::graph::enabled(inv.tenant) {
                return match recall(inv.store, inv.tenant, call.args, None).await {
                    Ok(output) => Ok(Executed::summarized(output, Vec::new())),
                    Err(e) => Err(Failed::tool(e, Vec::new())),
                };
            }
            let source = GraphRecall::new(inv);
            let out = recall(inv.store, inv.tenant, call.args, Some(&source)).await;
            let records = source.take_records();
            match out {
                Ok(output) => Ok(Executed::summarized(output, records)),
                Err(e) => Err(Failed::tool(e, records)),
            }
        })
    }
}

/// `af_memory_remember`: the observation commits in the call's
/// transaction, with its decision record.
#[derive(Debug)]
pub struct Remember(Arc<ToolSpec>);

impl ToolAdapter for Remember {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.0
    }

    fn execute<'a>(
        &'a self,
        inv: &'a Invocation<'a>,
        call: ToolCall<'a>,
    ) -> ToolFuture<'a, Result<Executed, Failed>> {
        let done = match remember(inv.tenant, call.args) {
            Ok((obs, output)) => Ok(Executed::summarized(
                output,
                vec![WriteOp::Observation(Box::new(obs))],
            )),
            Err(e) => Err(Failed::tool(e, Vec::new())),
        };
        Box::pin(std::future::ready(done))
    }
}

/// Builds the observation `af_memory_remember` stores (the caller commits
/// it together with the decision record) and the answer to send once it is
/// durable.
pub fn remember(
    tenant: &SessionTenant,
    args: &Value,
) -> Result<(NewObservation, ToolOutput), ToolError> {
    let content = args
        .get("content")
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError("`content` must be a string".into()))?;
    let obs = NewObservation {
        id: uuid::Uuid::now_v7().to_string(),
        org_id: tenant.session.org_id.clone(),
        project_id: tenant.session.project_id.clone(),
        session_id: tenant.session.id.clone(),
        agent_id: tenant.session.agent_id.clone(),
        content: content.to_string(),
        obs_type: args.get("type").and_then(Value::as_str).map(str::to_string),
        confidence: args.get("confidence").and_then(Value::as_f64),
        created_at: crate::ids::now_rfc3339(),
    };
    let output = ToolOutput {
        text: format!("Stored observation {}.", obs.id),
        structured: json!({
            "stored": true,
            "id": obs.id,
            "type": obs.obs_type,
            "confidence": obs.confidence,
            "createdAt": obs.created_at,
        }),
    };
    Ok((obs, output))
}

/// Runs `af_memory_recall`.
pub async fn recall(
    store: &Store,
    tenant: &SessionTenant,
    args: &Value,
    extra: Option<&dyn RecallSource>,
) -> Result<ToolOutput, ToolError> {
    let query = args
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let work_type = args
        .get("workType")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let budget = budget_for(&work_type);
    let (org, project, q) = (
        tenant.session.org_id.clone(),
        tenant.session.project_id.clone(),
        query.clone(),
    );
    // What a search costs depends on its project's size: cheap ones run
    // on this thread (`store/read_here.rs`).
    let key = (&tenant.session.org_id, &tenant.session.project_id);
    store.text_indexed().await;
    let hits = store
        .read_keyed(key, move |conn| {
            observations::search(conn, &org, &project, &q, RECALL_CANDIDATES)
        })
        .await
        .map_err(|e| ToolError(format!("observation search failed: {e}")))?;
    let graph = match extra {
        Some(source) => source.recall(tenant, &query, budget).await?,
        None => Vec::new(),
    };
    Ok(assemble(&work_type, budget, hits, graph))
}

/// Fills the budget: observations and extra items interleaved by score
/// rank (best of each first), each taken only if it fits whole.
fn assemble(
    work_type: &str,
    budget: usize,
    hits: Vec<ObservationHit>,
    extra: Vec<RecallItem>,
) -> ToolOutput {
    let mut used = 0;
    let mut kept_obs: Vec<ObservationHit> = Vec::new();
    let mut kept_extra: Vec<RecallItem> = Vec::new();
    let mut obs_iter = hits.into_iter().peekable();
    let mut extra_iter = extra.into_iter().peekable();
    let mut lines: Vec<String> = Vec::new();
    loop {
        let take_obs = match (obs_iter.peek(), extra_iter.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            // Alternate so neither source starves the other.
            (Some(_), Some(_)) => kept_obs.len() <= kept_extra.len(),
        };
        if take_obs {
            let Some(hit) = obs_iter.next() else { break };
            let cost = estimate_tokens(&hit.content);
            if used + cost <= budget {
                used += cost;
                lines.push(format!("- {}", hit.content));
                kept_obs.push(hit);
            }
        } else {
            let Some(item) = extra_iter.next() else { break };
            let cost = estimate_tokens(&item.text);
            if used + cost <= budget {
                used += cost;
                lines.push(format!("- {}", item.text));
                kept_extra.push(item);
            }
        }
    }
    let text = if lines.is_empty() {
        "No relevant observations found.".to_string()
    } else {
        format!("Previous observations:\n{}", lines.join("\n"))
    };
    ToolOutput {
        text,
        structured: json!({
            "observations": kept_obs,
            "graph": kept_extra,
            "workType": work_type,
            "tokenBudget": budget,
            "tokensUsed": used,
        }),
    }
}

/// The graph part of `af_memory_recall`: triplets relevant to the query,
/// filtered by `read_node` like `graph_query`, with their batched record
/// kept for the call to commit.
#[derive(Debug)]
struct GraphRecall<'a> {
    inv: &'a Invocation<'a>,
    records: Mutex<Vec<NewDecision>>,
}

impl<'a> GraphRecall<'a> {
    fn new(inv: &'a Invocation<'a>) -> Self {
        GraphRecall {
            inv,
            records: Mutex::new(Vec::new()),
        }
    }

    /// The decision records made while recalling.
    fn take_records(&self) -> Vec<WriteOp> {
        self.records
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
            .into_iter()
            .map(|d| WriteOp::Decision(Box::new(d)))
            .collect()
    }
}

impl RecallSource for GraphRecall<'_> {
    fn recall<'b>(
        &'b self,
        tenant: &'b SessionTenant,
        query: &'b str,
        _budget: usize,
    ) -> RecallFuture<'b> {
        Box::pin(async move {
            let mut filter = GuardFilter::new(self.inv.node_guard());
            let triplets = super::graph::ranked_triplets(
                self.inv.graphs,
                self.inv.store,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(content: &str, score: f64) -> ObservationHit {
        ObservationHit {
            id: content.into(),
            content: content.into(),
            obs_type: None,
            confidence: None,
            created_at: String::new(),
            score,
        }
    }

    #[test]
    fn budgets_by_work_type() {
        assert_eq!(budget_for("bug_fix"), 2000);
        assert_eq!(budget_for("FEATURE"), 3000);
        assert_eq!(budget_for("unheard_of"), DEFAULT_BUDGET);
    }

    #[test]
    fn budget_is_never_exceeded() {
        let long = "x".repeat(4000); // 1000 tokens
        let out = assemble(
            "chore",
            800,
            vec![hit(&long, 3.0), hit("short one", 2.0), hit(&long, 1.0)],
            vec![],
        );
        assert_eq!(out.structured["tokensUsed"], 3);
        assert_eq!(
            out.structured["observations"].as_array().map(Vec::len),
            Some(1)
        );
        assert!(out.text.contains("short one"));
    }

    #[test]
    fn empty_recall_says_so() {
        let out = assemble("bug_fix", 2000, vec![], vec![]);
        assert_eq!(out.text, "No relevant observations found.");
    }
}
