//! What the graph tools compute: the ingest plan (extraction, entity
//! resolution, embeddings), feedback (EMA of weights), and hybrid search.
//! Plans are computed against the in-memory view under the project's
//! write lock; the caller commits them with its decision records and only
//! then applies them to the view ([`apply`]).

use std::collections::{HashMap, HashSet};

use crate::store::graph::{EdgeRow, GraphWrite, NodeRow, PendingObservation, Provenance};

use super::embed::{EmbedError, dot};
use super::model::{NodeFilter, ProjectGraph};
use super::state::Graphs;

/// Smoothing factor of the feedback EMA: `w ← w + α·(target − w)`. At 0.3
/// one outcome moves a weight 30% of the way to its target, so three
/// consistent outcomes move it about two thirds of the way (1 − 0.7³ ≈
/// 0.66) while a single outlier cannot flip a well-established weight.
pub const EMA_ALPHA: f64 = 0.3;

/// Weight of a new node or edge (neutral: `rework`'s target).
pub const DEFAULT_WEIGHT: f64 = 0.5;

/// Reciprocal-rank-fusion constant (the usual 60).
pub const RRF_K: f64 = 60.0;

/// Why a plan could not be computed (the tool call fails; nothing is
/// written).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A panic while the view was locked left it unusable.
    #[error("graph view is poisoned")]
    Poisoned,
    /// The embeddings provider failed.
    #[error(transparent)]
    Embed(#[from] EmbedError),
}

/// A session outcome fed back into the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The entities were useful: EMA toward 1.0.
    Accepted,
    /// They needed correction: EMA toward 0.5.
    Rework,
    /// They were unhelpful: EMA toward 0.0.
    Rejected,
}

impl Outcome {
    /// Parses the wire value.
    pub fn parse(s: &str) -> Option<Outcome> {
        match s {
            "accepted" => Some(Outcome::Accepted),
            "rework" => Some(Outcome::Rework),
            "rejected" => Some(Outcome::Rejected),
            _ => None,
        }
    }

    /// The weight this outcome pulls toward.
    pub fn target(self) -> f64 {
        match self {
            Outcome::Accepted => 1.0,
            Outcome::Rework => 0.5,
            Outcome::Rejected => 0.0,
        }
    }
}

/// One EMA step of `w` toward `target`, kept within 0..=1.
pub fn ema(w: f64, target: f64) -> f64 {
    (w + EMA_ALPHA * (target - w)).clamp(0.0, 1.0)
}

/// A planned ingest.
#[derive(Debug, Clone)]
pub struct IngestPlan {
    /// The write to commit.
    pub write: GraphWrite,
    /// Observations consumed.
    pub processed: usize,
    /// Nodes inserted.
    pub nodes_created: usize,
    /// Edges inserted.
    pub edges_created: usize,
    /// Entities resolved to an existing node instead of a new one.
    pub merged: usize,
}

/// The text a node is embedded and keyword-indexed by.
pub fn node_text(name: &str, node_type: &str, description: &str) -> String {
    format!("{name} {node_type} {description}")
}

/// Extracts, resolves and embeds `observations` against `graph`.
pub async fn plan_ingest(
    graphs: &Graphs,
    graph: &std::sync::RwLock<ProjectGraph>,
    org_id: &str,
    project_id: &str,
    observations: Vec<PendingObservation>,
) -> Result<IngestPlan, PipelineError> {
    let mut nodes: Vec<NodeRow> = Vec::new();
    let mut edges: Vec<EdgeRow> = Vec::new();
    let mut merged = 0;
    {
        let g = graph.read().map_err(|_| PipelineError::Poisoned)?;
        let mut new_keys: HashMap<String, usize> = HashMap::new();
        let mut edge_keys: HashSet<(String, String, String)> = HashSet::new();
        for obs in &observations {
            let x = graphs.extractor.extract(&obs.content);
            let provenance = Provenance {
                observation_id: Some(obs.id.clone()),
                session_id: Some(obs.session_id.clone()),
                timestamp: obs.created_at.clone(),
            };
            let mut ids: Vec<String> = Vec::with_capacity(x.entities.len());
            for e in &x.entities {
                let key = super::text::resolution_key(&e.name);
                if let Some(i) = g.by_key(&key) {
                    merged += 1;
                    ids.push(g.node(i).map(|n| n.id.clone()).unwrap_or_default());
                } else if let Some(&n) = new_keys.get(&key) {
                    merged += 1;
                    ids.push(nodes.get(n).map(|n| n.id.clone()).unwrap_or_default());
                } else {
                    let id = uuid::Uuid::now_v7().to_string();
                    new_keys.insert(key.clone(), nodes.len());
                    nodes.push(NodeRow {
                        id: id.clone(),
                        name: e.name.clone(),
                        key,
                        node_type: e.entity_type.clone(),
                        description: e.description.clone(),
                        provenance: provenance.clone(),
                        weight: DEFAULT_WEIGHT,
                        embedding: None,
                    });
                    ids.push(id);
                }
            }
            for r in &x.relations {
                let (Some(s), Some(t)) = (ids.get(r.source), ids.get(r.target)) else {
                    continue;
                };
                if s.is_empty() || t.is_empty() || s == t {
                    continue;
                }
                let exists = match (g.by_id(s), g.by_id(t)) {
                    (Some(si), Some(ti)) => g.find_edge(si, ti, &r.relationship).is_some(),
                    _ => false,
                };
                let key = (s.clone(), t.clone(), r.relationship.clone());
                if exists || !edge_keys.insert(key) {
                    continue;
                }
                edges.push(EdgeRow {
                    source_id: s.clone(),
                    target_id: t.clone(),
                    relationship: r.relationship.clone(),
                    provenance: provenance.clone(),
                    weight: DEFAULT_WEIGHT,
                });
            }
        }
    }
    let texts: Vec<String> = nodes
        .iter()
        .map(|n| node_text(&n.name, &n.node_type, &n.description))
        .collect();
    if !texts.is_empty() {
        let vectors = graphs.embedder.embed(&texts).await?;
        let model = graphs.embedder.model().to_string();
        for (n, v) in nodes.iter_mut().zip(vectors) {
            n.embedding = Some((model.clone(), v));
        }
    }
    Ok(IngestPlan {
        processed: observations.len(),
        nodes_created: nodes.len(),
        edges_created: edges.len(),
        merged,
        write: GraphWrite::Ingest {
            org_id: org_id.to_string(),
            project_id: project_id.to_string(),
            nodes,
            edges,
            observations: observations.into_iter().map(|o| o.id).collect(),
        },
    })
}

/// A planned feedback update.
#[derive(Debug, Clone)]
pub struct FeedbackPlan {
    /// The write to commit.
    pub write: GraphWrite,
    /// Nodes whose weight changes.
    pub node_updates: usize,
    /// Edges whose weight changes.
    pub edge_updates: usize,
    /// Triplets re-embedded.
    pub triplet_embeddings: usize,
}

/// Plans `graph_improve`: one EMA step on every referenced node and edge
/// of the project (unknown ones are skipped), and, with an external
/// embedder, fresh embeddings of the touched triplets.
pub async fn plan_feedback(
    graphs: &Graphs,
    graph: &std::sync::RwLock<ProjectGraph>,
    org_id: &str,
    project_id: &str,
    outcome: Outcome,
    node_ids: &[String],
    edge_keys: &[(String, String, String)],
) -> Result<FeedbackPlan, PipelineError> {
    let target = outcome.target();
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    let mut triplet_texts = Vec::new();
    {
        let g = graph.read().map_err(|_| PipelineError::Poisoned)?;
        let mut seen = HashSet::new();
        for id in node_ids {
            if let Some(n) = g.by_id(id).and_then(|i| g.node(i))
                && seen.insert(id.as_str())
            {
                nodes.push((n.id.clone(), ema(n.weight, target)));
            }
        }
        let mut seen = HashSet::new();
        for (s, t, r) in edge_keys {
            let found = match (g.by_id(s), g.by_id(t)) {
                (Some(si), Some(ti)) => g.find_edge(si, ti, r),
                _ => None,
            };
            if let Some(e) = found.and_then(|i| g.edge(i))
                && seen.insert((s.as_str(), t.as_str(), r.as_str()))
            {
                edges.push((s.clone(), t.clone(), r.clone(), ema(e.weight, target)));
                let name = |i: u32| g.node(i).map(|n| n.name.clone()).unwrap_or_default();
                triplet_texts.push(format!(
                    "{} {} {}",
                    name(e.source),
                    r.replace('_', " "),
                    name(e.target)
                ));
            }
        }
    }
    let mut edge_embeddings = Vec::new();
    if graphs.embedder.is_remote() && !triplet_texts.is_empty() {
        let vectors = graphs.embedder.embed(&triplet_texts).await?;
        let model = graphs.embedder.model().to_string();
        for ((s, t, r, _), v) in edges.iter().zip(vectors) {
            edge_embeddings.push((s.clone(), t.clone(), r.clone(), model.clone(), v));
        }
    }
    Ok(FeedbackPlan {
        node_updates: nodes.len(),
        edge_updates: edges.len(),
        triplet_embeddings: edge_embeddings.len(),
        write: GraphWrite::Feedback {
            org_id: org_id.to_string(),
            project_id: project_id.to_string(),
            nodes,
            edges,
            node_embeddings: Vec::new(),
            edge_embeddings,
        },
    })
}

/// Applies a committed write to the in-memory view.
pub fn apply(graph: &mut ProjectGraph, write: &GraphWrite) {
    match write {
        GraphWrite::Ingest { nodes, edges, .. } => {
            for n in nodes {
                graph.add_node(n.clone());
            }
            for e in edges {
                graph.add_edge(e.clone());
            }
        }
        GraphWrite::Feedback {
            nodes,
            edges,
            node_embeddings,
            edge_embeddings,
            ..
        } => {
            for (id, w) in nodes {
                if let Some(i) = graph.by_id(id) {
                    graph.set_node_weight(i, *w);
                }
            }
            for (s, t, r, w) in edges {
                if let (Some(si), Some(ti)) = (graph.by_id(s), graph.by_id(t))
                    && let Some(e) = graph.find_edge(si, ti, r)
                {
                    graph.set_edge_weight(e, *w);
                }
            }
            for (id, model, v) in node_embeddings {
                if let Some(i) = graph.by_id(id) {
                    graph.set_node_vector(i, model, v);
                }
            }
            for (s, t, r, model, v) in edge_embeddings {
                if let (Some(si), Some(ti)) = (graph.by_id(s), graph.by_id(t))
                    && let Some(e) = graph.find_edge(si, ti, r)
                {
                    graph.set_edge_vector(e, model, v.clone());
                }
            }
        }
    }
}

/// Seed candidates for a query: vector and keyword rankings fused by
/// reciprocal rank (`Σ 1/(60 + rank)`), each scaled by
/// `0.5 + feedbackWeight` (a neutral 0.5 weight leaves it unchanged; an
/// accepted node ranks up to 1.5×, a rejected one down to 0.5×). Best first.
pub fn seed_candidates(
    graph: &ProjectGraph,
    model: &str,
    query_vector: &[f32],
    terms: &[String],
    n: usize,
) -> Vec<(u32, f64)> {
    let mut fused: HashMap<u32, f64> = HashMap::new();
    for (rank, (i, s)) in graph
        .vector_search(model, query_vector, n)
        .into_iter()
        .enumerate()
    {
        if s > 0.0 {
            *fused.entry(i).or_insert(0.0) += 1.0 / (RRF_K + rank as f64 + 1.0);
        }
    }
    for (rank, (i, _)) in graph.keyword_search(terms, n).into_iter().enumerate() {
        *fused.entry(i).or_insert(0.0) += 1.0 / (RRF_K + rank as f64 + 1.0);
    }
    let scored = fused.into_iter().map(|(i, s)| {
        let w = graph.node(i).map_or(DEFAULT_WEIGHT, |x| x.weight);
        (i, s * (0.5 + w))
    });
    super::model::top_k(scored, n)
}

/// A ranked triplet: an edge and its relevance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankedTriplet {
    /// Edge index.
    pub edge: u32,
    /// Relevance.
    pub score: f64,
}

/// Hybrid search: `top_k` admitted seeds from [`seed_candidates`],
/// expanded `depth` hops through admitted nodes, best `max_triplets`
/// triplets first. A triplet with a stored embedding (external provider)
/// is further scaled by `1 + max(0, cosine(query, triplet))`.
#[expect(clippy::too_many_arguments, reason = "one value per search knob")]
pub fn search(
    graph: &ProjectGraph,
    model: &str,
    query_vector: &[f32],
    terms: &[String],
    top_k: usize,
    depth: usize,
    max_nodes: usize,
    max_triplets: usize,
    filter: &mut dyn NodeFilter,
) -> Vec<RankedTriplet> {
    if top_k == 0 {
        return Vec::new();
    }
    let candidates = seed_candidates(graph, model, query_vector, terms, (top_k * 3).max(30));
    let ids: Vec<u32> = candidates.iter().map(|(i, _)| *i).collect();
    let verdicts = filter.admit(graph, &ids);
    let seeds: Vec<(u32, f64)> = candidates
        .into_iter()
        .zip(verdicts)
        .filter(|(_, ok)| *ok)
        .map(|(c, _)| c)
        .take(top_k)
        .collect();
    let mut triplets: Vec<RankedTriplet> = graph
        .expand(&seeds, depth.max(1), max_nodes, filter)
        .into_iter()
        .map(|(edge, score)| {
            let boost = graph
                .edge_vector(edge)
                .map_or(1.0, |v| 1.0 + f64::from(dot(v, query_vector)).max(0.0));
            RankedTriplet {
                edge,
                score: score * boost,
            }
        })
        .collect();
    triplets.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.edge.cmp(&b.edge))
    });
    triplets.truncate(max_triplets);
    triplets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ema_moves_a_fixed_share_toward_the_target() {
        assert!((ema(0.5, 1.0) - 0.65).abs() < 1e-12);
        assert!((ema(0.65, 1.0) - 0.755).abs() < 1e-12);
        assert!((ema(0.5, 0.0) - 0.35).abs() < 1e-12);
        assert!((ema(0.5, 0.5) - 0.5).abs() < 1e-12);
        assert!((ema(1.0, 0.5) - 0.85).abs() < 1e-12);
        let mut w = 0.5;
        for _ in 0..100 {
            w = ema(w, 1.0);
        }
        assert!(w <= 1.0 && w > 0.999);
    }

    #[test]
    fn outcomes_parse() {
        assert_eq!(Outcome::parse("accepted"), Some(Outcome::Accepted));
        assert_eq!(Outcome::parse("rework").map(Outcome::target), Some(0.5));
        assert_eq!(Outcome::parse("Rejected"), None);
    }
}
