//! The in-memory view of one project's graph: nodes, edges, adjacency,
//! a keyword index (BM25) and a vector index, built from the store at first
//! use and updated after each committed write (under the project's write
//! lock, so it never runs ahead of or behind the database).
//!
//! Traversals take a [`NodeFilter`]: every node is admitted (Cedar
//! `read_node`) before it is entered, so a hidden node is never returned and
//! never used as a stepping stone; filters are asked level by level, in
//! batches.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::store::graph::{EdgeRow, NodeRow, Provenance};

use super::keywords::KeywordIndex;
pub use super::rank::top_k;
use super::vectors::VectorIndex;

/// A node.
#[derive(Debug, Clone)]
pub struct Node {
    /// UUID.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Resolution key.
    pub key: String,
    /// Type.
    pub node_type: String,
    /// Description.
    pub description: String,
    /// Provenance.
    pub provenance: Provenance,
    /// Feedback weight.
    pub weight: f64,
}

/// An edge (indices into the node list).
#[derive(Debug, Clone)]
pub struct Edge {
    /// Source node index.
    pub source: u32,
    /// Target node index.
    pub target: u32,
    /// Relationship (interned).
    pub relationship: Arc<str>,
    /// Provenance.
    pub provenance: Provenance,
    /// Feedback weight.
    pub weight: f64,
}

/// Decides which nodes a traversal may enter (and return).
pub trait NodeFilter {
    /// One verdict per node, in order.
    fn admit(&mut self, graph: &ProjectGraph, nodes: &[u32]) -> Vec<bool>;
}

/// Admits everything (operator paths and benchmarks of raw traversal).
#[derive(Debug, Clone, Copy, Default)]
pub struct AdmitAll;

impl NodeFilter for AdmitAll {
    fn admit(&mut self, _: &ProjectGraph, nodes: &[u32]) -> Vec<bool> {
        vec![true; nodes.len()]
    }
}

/// One project's graph in memory.
#[derive(Debug, Default)]
pub struct ProjectGraph {
    nodes: Vec<Node>,
    edges: Vec<Edge>,
    by_id: HashMap<String, u32>,
    by_key: HashMap<String, u32>,
    edge_index: HashMap<(u32, u32, Arc<str>), u32>,
    /// Incident edges of each node (both directions).
    adjacency: Vec<Vec<u32>>,
    relationships: HashSet<Arc<str>>,
    /// BM25 over name, type and description.
    keywords: KeywordIndex,
    /// Model whose vectors are indexed.
    model: String,
    /// The node vectors of `model`.
    vectors: VectorIndex,
    /// Triplet embeddings (active model) by edge index.
    edge_vectors: HashMap<u32, Vec<f32>>,
}

impl ProjectGraph {
    /// An empty graph indexing vectors of `model`.
    pub fn new(model: &str) -> ProjectGraph {
        ProjectGraph {
            model: model.to_string(),
            ..ProjectGraph::default()
        }
    }

    /// Builds the view from stored rows.
    pub fn from_rows(model: &str, nodes: Vec<NodeRow>, edges: Vec<EdgeRow>) -> ProjectGraph {
        let mut g = ProjectGraph::new(model);
        g.nodes.reserve(nodes.len());
        for n in nodes {
            g.add_node(n);
        }
        for e in edges {
            g.add_edge(e);
        }
        g
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Number of edges.
    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }

    /// The node at `i`.
    pub fn node(&self, i: u32) -> Option<&Node> {
        self.nodes.get(i as usize)
    }

    /// The edge at `i`.
    pub fn edge(&self, i: u32) -> Option<&Edge> {
        self.edges.get(i as usize)
    }

    /// The model whose vectors are indexed.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// A node by UUID.
    pub fn by_id(&self, id: &str) -> Option<u32> {
        self.by_id.get(id).copied()
    }

    /// A node by resolution key.
    pub fn by_key(&self, key: &str) -> Option<u32> {
        self.by_key.get(key).copied()
    }

    /// A node by UUID or by any spelling of its name.
    pub fn find(&self, entity: &str) -> Option<u32> {
        self.by_id(entity.trim())
            .or_else(|| self.by_key(&super::text::resolution_key(entity)))
    }

    /// An edge by its key.
    pub fn find_edge(&self, source: u32, target: u32, relationship: &str) -> Option<u32> {
        let rel: Arc<str> = Arc::from(relationship);
        self.edge_index.get(&(source, target, rel)).copied()
    }

    /// Adds a node (ignored if its id or key is already present).
    pub fn add_node(&mut self, row: NodeRow) {
        if self.by_id.contains_key(&row.id) || self.by_key.contains_key(&row.key) {
            return;
        }
        let Ok(i) = u32::try_from(self.nodes.len()) else {
            return;
        };
        self.by_id.insert(row.id.clone(), i);
        self.by_key.insert(row.key.clone(), i);
        self.adjacency.push(Vec::new());
        let text = format!("{} {} {}", row.name, row.node_type, row.description);
        self.keywords
            .push(i, super::text::tokens(&text).into_iter());
        let vector = match &row.embedding {
            Some((m, v)) if *m == self.model => Some(v.as_slice()),
            _ => None,
        };
        self.vectors.push(vector);
        self.nodes.push(Node {
            id: row.id,
            name: row.name,
            key: row.key,
            node_type: row.node_type,
            description: row.description,
            provenance: row.provenance,
            weight: row.weight,
        });
    }

    fn intern(&mut self, rel: &str) -> Arc<str> {
        if let Some(r) = self.relationships.get(rel) {
            return Arc::clone(r);
        }
        let r: Arc<str> = Arc::from(rel);
        self.relationships.insert(Arc::clone(&r));
        r
    }

    /// Adds an edge (ignored when an endpoint is unknown or it exists).
    pub fn add_edge(&mut self, row: EdgeRow) {
        let (Some(s), Some(t)) = (self.by_id(&row.source_id), self.by_id(&row.target_id)) else {
            return;
        };
        let rel = self.intern(&row.relationship);
        let key = (s, t, Arc::clone(&rel));
        if self.edge_index.contains_key(&key) {
            return;
        }
        let Ok(i) = u32::try_from(self.edges.len()) else {
            return;
        };
        self.edge_index.insert(key, i);
        if let Some(a) = self.adjacency.get_mut(s as usize) {
            a.push(i);
        }
        if s != t
            && let Some(a) = self.adjacency.get_mut(t as usize)
        {
            a.push(i);
        }
        self.edges.push(Edge {
            source: s,
            target: t,
            relationship: rel,
            provenance: row.provenance,
            weight: row.weight,
        });
    }

    /// Sets a node's feedback weight.
    pub fn set_node_weight(&mut self, i: u32, w: f64) {
        if let Some(n) = self.nodes.get_mut(i as usize) {
            n.weight = w;
        }
    }

    /// Sets an edge's feedback weight.
    pub fn set_edge_weight(&mut self, i: u32, w: f64) {
        if let Some(e) = self.edges.get_mut(i as usize) {
            e.weight = w;
        }
    }

    /// Replaces a node's vector (ignored for another model or dimension).
    pub fn set_node_vector(&mut self, i: u32, model: &str, v: &[f32]) {
        if model == self.model {
            self.vectors.set(i, v);
        }
    }

    /// Sets a triplet embedding (active model only).
    pub fn set_edge_vector(&mut self, i: u32, model: &str, v: Vec<f32>) {
        if model == self.model && (i as usize) < self.edges.len() {
            self.edge_vectors.insert(i, v);
        }
    }

    /// The triplet embedding of an edge, if any.
    pub fn edge_vector(&self, i: u32) -> Option<&[f32]> {
        self.edge_vectors.get(&i).map(Vec::as_slice)
    }

    /// Incident edges of a node.
    pub fn incident(&self, i: u32) -> &[u32] {
        self.adjacency.get(i as usize).map_or(&[], Vec::as_slice)
    }

    fn other_end(&self, e: u32, u: u32) -> Option<u32> {
        let edge = self.edges.get(e as usize)?;
        Some(if edge.source == u {
            edge.target
        } else {
            edge.source
        })
    }

    /// The `limit` best nodes for `terms` by BM25, best first.
    pub fn keyword_search(&self, terms: &[String], limit: usize) -> Vec<(u32, f64)> {
        self.keywords.search(terms, limit)
    }

    /// The `limit` nodes most similar to `query` (same model), best first.
    pub fn vector_search(&self, model: &str, query: &[f32], limit: usize) -> Vec<(u32, f64)> {
        if model != self.model {
            return Vec::new();
        }
        self.vectors.search(query, limit)
    }

    /// [`ProjectGraph::keyword_search`] scoring every match (the reference
    /// it is tested and measured against).
    pub fn keyword_search_exhaustive(&self, terms: &[String], limit: usize) -> Vec<(u32, f64)> {
        self.keywords.exhaustive(terms, limit)
    }

    /// [`ProjectGraph::vector_search`] scanning every vector exactly (the
    /// reference it is tested and measured against).
    pub fn vector_search_exhaustive(
        &self,
        model: &str,
        query: &[f32],
        limit: usize,
    ) -> Vec<(u32, f64)> {
        if model != self.model {
            return Vec::new();
        }
        self.vectors.exhaustive(query, limit)
    }

    /// The k-hop neighborhood of `start` through admitted nodes, optionally
    /// along one relationship only. `None` when `start` is not admitted.
    pub fn neighbors(
        &self,
        start: u32,
        depth: usize,
        relationship: Option<&str>,
        max_nodes: usize,
        filter: &mut dyn NodeFilter,
    ) -> Option<(Vec<u32>, Vec<u32>)> {
        if !filter
            .admit(self, &[start])
            .first()
            .copied()
            .unwrap_or(false)
        {
            return None;
        }
        let mut visited: HashSet<u32> = HashSet::from([start]);
        let mut denied: HashSet<u32> = HashSet::new();
        let mut nodes = vec![start];
        let mut edges = Vec::new();
        let mut edge_seen: HashSet<u32> = HashSet::new();
        let mut frontier = vec![start];
        for _ in 0..depth {
            let mut candidates = Vec::new();
            for &u in &frontier {
                for &e in self.incident(u) {
                    if let Some(r) = relationship
                        && self
                            .edges
                            .get(e as usize)
                            .is_none_or(|x| &*x.relationship != r)
                    {
                        continue;
                    }
                    if let Some(v) = self.other_end(e, u) {
                        candidates.push((e, v));
                    }
                }
            }
            let fresh = self.admit_new(&candidates, &visited, &mut denied, filter);
            let mut next = Vec::new();
            for (e, v) in candidates {
                if denied.contains(&v) {
                    continue;
                }
                if fresh.contains(&v) && visited.insert(v) {
                    if nodes.len() >= max_nodes {
                        visited.remove(&v);
                        continue;
                    }
                    nodes.push(v);
                    next.push(v);
                }
                if visited.contains(&v) && edge_seen.insert(e) {
                    edges.push(e);
                }
            }
            if next.is_empty() {
                break;
            }
            frontier = next;
        }
        Some((nodes, edges))
    }

    /// Asks the filter about the endpoints in `candidates` not yet visited
    /// nor denied; returns the admitted ones and records the denied.
    fn admit_new(
        &self,
        candidates: &[(u32, u32)],
        visited: &HashSet<u32>,
        denied: &mut HashSet<u32>,
        filter: &mut dyn NodeFilter,
    ) -> HashSet<u32> {
        let mut ask: Vec<u32> = candidates
            .iter()
            .map(|(_, v)| *v)
            .filter(|v| !visited.contains(v) && !denied.contains(v))
            .collect();
        ask.sort_unstable();
        ask.dedup();
        let verdicts = filter.admit(self, &ask);
        let mut fresh = HashSet::new();
        for (v, ok) in ask.into_iter().zip(verdicts) {
            if ok {
                fresh.insert(v);
            } else {
                denied.insert(v);
            }
        }
        fresh
    }

    /// The shortest path (edges taken in either direction) from `from` to
    /// `to` through admitted nodes only, at most `max_depth` edges long;
    /// bidirectional BFS expanding whole levels of the smaller side. Gives
    /// up (`None`) after visiting `max_visits` nodes.
    pub fn path(
        &self,
        from: u32,
        to: u32,
        max_depth: usize,
        max_visits: usize,
        filter: &mut dyn NodeFilter,
    ) -> Option<(Vec<u32>, Vec<u32>)> {
        let ends = if from == to {
            vec![from]
        } else {
            vec![from, to]
        };
        if !filter.admit(self, &ends).iter().all(|ok| *ok) {
            return None;
        }
        if from == to {
            return Some((vec![from], Vec::new()));
        }
        // Per side: node → (parent node, edge, depth).
        let mut seen: [HashMap<u32, (u32, u32, usize)>; 2] = [
            HashMap::from([(from, (from, u32::MAX, 0))]),
            HashMap::from([(to, (to, u32::MAX, 0))]),
        ];
        let mut frontiers: [Vec<u32>; 2] = [vec![from], vec![to]];
        let mut depths = [0usize, 0usize];
        let mut denied: HashSet<u32> = HashSet::new();
        while depths[0] + depths[1] < max_depth {
            let side = usize::from(frontiers[1].len() < frontiers[0].len());
            let other = 1 - side;
            let mut candidates = Vec::new();
            for &u in &frontiers[side] {
                for &e in self.incident(u) {
                    if let Some(v) = self.other_end(e, u)
                        && !seen[side].contains_key(&v)
                    {
                        candidates.push((u, e, v));
                    }
                }
            }
            let pairs: Vec<(u32, u32)> = candidates.iter().map(|(_, e, v)| (*e, *v)).collect();
            let already: HashSet<u32> = pairs
                .iter()
                .map(|(_, v)| *v)
                .filter(|v| seen[other].contains_key(v))
                .collect();
            let fresh = self.admit_new(&pairs, &already, &mut denied, filter);
            let depth = depths[side] + 1;
            let mut next = Vec::new();
            let mut best: Option<(usize, u32)> = None;
            for (u, e, v) in candidates {
                if !(fresh.contains(&v) || already.contains(&v)) || seen[side].contains_key(&v) {
                    continue;
                }
                seen[side].insert(v, (u, e, depth));
                next.push(v);
                if let Some(&(_, _, d)) = seen[other].get(&v) {
                    let total = depth + d;
                    if total <= max_depth && best.is_none_or(|(b, _)| total < b) {
                        best = Some((total, v));
                    }
                }
            }
            depths[side] = depth;
            if let Some((_, meet)) = best {
                return Some(self.stitch(&seen, meet));
            }
            if next.is_empty() || seen[0].len() + seen[1].len() > max_visits {
                return None;
            }
            frontiers[side] = next;
        }
        None
    }

    /// Joins the two half-paths at `meet` into one from side 0's origin.
    fn stitch(
        &self,
        seen: &[HashMap<u32, (u32, u32, usize)>; 2],
        meet: u32,
    ) -> (Vec<u32>, Vec<u32>) {
        let mut nodes = vec![meet];
        let mut edges = Vec::new();
        let mut cur = meet;
        while let Some(&(p, e, d)) = seen[0].get(&cur) {
            if d == 0 {
                break;
            }
            nodes.push(p);
            edges.push(e);
            cur = p;
        }
        nodes.reverse();
        edges.reverse();
        cur = meet;
        while let Some(&(p, e, d)) = seen[1].get(&cur) {
            if d == 0 {
                break;
            }
            nodes.push(p);
            edges.push(e);
            cur = p;
        }
        (nodes, edges)
    }

    /// Expands `seeds` (node, score) `depth` hops through admitted nodes;
    /// returns each reached edge with its relevance: the score of the
    /// endpoint it was reached from (seed score halved per hop) times
    /// `0.5 + feedbackWeight` of the edge.
    pub fn expand(
        &self,
        seeds: &[(u32, f64)],
        depth: usize,
        max_nodes: usize,
        filter: &mut dyn NodeFilter,
    ) -> Vec<(u32, f64)> {
        let mut score: HashMap<u32, f64> = seeds.iter().copied().collect();
        let mut visited: HashSet<u32> = score.keys().copied().collect();
        let mut denied: HashSet<u32> = HashSet::new();
        let mut frontier: Vec<u32> = seeds.iter().map(|(n, _)| *n).collect();
        let mut edge_score: HashMap<u32, f64> = HashMap::new();
        for _ in 0..depth {
            let mut candidates = Vec::new();
            for &u in &frontier {
                for &e in self.incident(u) {
                    if let Some(v) = self.other_end(e, u) {
                        candidates.push((u, e, v));
                    }
                }
            }
            let pairs: Vec<(u32, u32)> = candidates.iter().map(|(_, e, v)| (*e, *v)).collect();
            let fresh = self.admit_new(&pairs, &visited, &mut denied, filter);
            let mut next_scores: HashMap<u32, f64> = HashMap::new();
            for (u, e, v) in candidates {
                if denied.contains(&v) {
                    continue;
                }
                let su = score.get(&u).copied().unwrap_or(0.0);
                let w = self.edges.get(e as usize).map_or(0.5, |x| x.weight);
                let rel = su * (0.5 + w);
                let slot = edge_score.entry(e).or_insert(0.0);
                if rel > *slot {
                    *slot = rel;
                }
                if fresh.contains(&v) && !visited.contains(&v) {
                    let s = next_scores.entry(v).or_insert(0.0);
                    if su * 0.5 > *s {
                        *s = su * 0.5;
                    }
                }
            }
            let mut next: Vec<u32> = next_scores.keys().copied().collect();
            next.sort_unstable();
            for v in &next {
                if visited.len() >= max_nodes {
                    break;
                }
                visited.insert(*v);
                score.insert(*v, next_scores.get(v).copied().unwrap_or(0.0));
            }
            next.retain(|v| visited.contains(v));
            if next.is_empty() {
                break;
            }
            frontier = next;
        }
        // Only edges whose both ends were admitted.
        edge_score
            .into_iter()
            .filter(|(e, _)| {
                self.edges
                    .get(*e as usize)
                    .is_some_and(|x| visited.contains(&x.source) && visited.contains(&x.target))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, name: &str) -> NodeRow {
        NodeRow {
            id: id.into(),
            name: name.into(),
            key: crate::graph::text::resolution_key(name),
            node_type: "Service".into(),
            description: String::new(),
            provenance: Provenance {
                observation_id: None,
                session_id: None,
                timestamp: String::new(),
            },
            weight: 0.5,
            embedding: None,
        }
    }

    fn edge(s: &str, t: &str, r: &str) -> EdgeRow {
        EdgeRow {
            source_id: s.into(),
            target_id: t.into(),
            relationship: r.into(),
            provenance: Provenance {
                observation_id: None,
                session_id: None,
                timestamp: String::new(),
            },
            weight: 0.5,
        }
    }

    /// a - b - c - d, and a - e - f - d (two paths of length 3), x alone.
    fn sample() -> ProjectGraph {
        let names = ["a", "b", "c", "d", "e", "f", "x"];
        let nodes = names.iter().map(|n| row(n, &format!("Node{n}X"))).collect();
        let edges = vec![
            edge("a", "b", "calls"),
            edge("b", "c", "calls"),
            edge("c", "d", "uses"),
            edge("a", "e", "uses"),
            edge("f", "e", "calls"),
            edge("f", "d", "calls"),
        ];
        ProjectGraph::from_rows("m", nodes, edges)
    }

    struct Deny(Vec<u32>);
    impl NodeFilter for Deny {
        fn admit(&mut self, _: &ProjectGraph, nodes: &[u32]) -> Vec<bool> {
            nodes.iter().map(|n| !self.0.contains(n)).collect()
        }
    }

    #[test]
    fn shortest_path_avoids_denied_nodes() {
        let g = sample();
        let (a, d) = (g.by_id("a").unwrap(), g.by_id("d").unwrap());
        let (nodes, edges) = g.path(a, d, 6, 1000, &mut AdmitAll).unwrap();
        assert_eq!(nodes.len(), 4);
        assert_eq!(edges.len(), 3);
        assert_eq!(nodes.first(), Some(&a));
        assert_eq!(nodes.last(), Some(&d));
        let (b, e) = (g.by_id("b").unwrap(), g.by_id("e").unwrap());
        let (nodes, _) = g.path(a, d, 6, 1000, &mut Deny(vec![b])).unwrap();
        assert!(nodes.contains(&e) && !nodes.contains(&b));
        assert!(g.path(a, d, 6, 1000, &mut Deny(vec![b, e])).is_none());
        assert!(g.path(a, d, 2, 1000, &mut AdmitAll).is_none());
        let x = g.by_id("x").unwrap();
        assert!(g.path(a, x, 6, 1000, &mut AdmitAll).is_none());
        assert!(g.path(a, d, 6, 1000, &mut Deny(vec![d])).is_none());
    }

    #[test]
    fn neighbors_by_depth_and_relationship() {
        let g = sample();
        let a = g.by_id("a").unwrap();
        let (nodes, edges) = g.neighbors(a, 1, None, 100, &mut AdmitAll).unwrap();
        assert_eq!((nodes.len(), edges.len()), (3, 2));
        let (nodes, _) = g.neighbors(a, 2, None, 100, &mut AdmitAll).unwrap();
        assert_eq!(nodes.len(), 5);
        let (nodes, edges) = g
            .neighbors(a, 3, Some("calls"), 100, &mut AdmitAll)
            .unwrap();
        assert_eq!((nodes.len(), edges.len()), (3, 2));
        let b = g.by_id("b").unwrap();
        let (nodes, edges) = g.neighbors(a, 1, None, 100, &mut Deny(vec![b])).unwrap();
        assert_eq!((nodes.len(), edges.len()), (2, 1));
        assert!(g.neighbors(a, 1, None, 100, &mut Deny(vec![a])).is_none());
    }

    #[test]
    fn top_k_keeps_the_best() {
        let v = top_k([(0, 1.0), (1, 3.0), (2, 2.0), (3, f64::NAN)].into_iter(), 2);
        assert_eq!(v, vec![(1, 3.0), (2, 2.0)]);
    }
}
