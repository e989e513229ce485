//! Storage of the knowledge graph: node and edge rows per project, the
//! writes the graph tools commit (inside the writer's transaction, together
//! with the call's decision records), and the loads that build the
//! in-memory view.

use super::db::Conn;
use crate::params;

use super::StoreError;

/// Where a node or edge came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Provenance {
    /// Observation it was extracted from.
    pub observation_id: Option<String>,
    /// Session that stored that observation.
    pub session_id: Option<String>,
    /// RFC 3339 time of the observation.
    pub timestamp: String,
}

/// One node row.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    /// UUID.
    pub id: String,
    /// Display name (the first spelling seen).
    pub name: String,
    /// Entity-resolution key.
    pub key: String,
    /// Entity type (`Service`, `Database`, …).
    pub node_type: String,
    /// One-sentence description.
    pub description: String,
    /// Provenance.
    pub provenance: Provenance,
    /// Feedback weight in 0..=1 (EMA of outcomes).
    pub weight: f64,
    /// L2-normalized embedding and the model that made it.
    pub embedding: Option<(String, Vec<f32>)>,
}

/// One edge row.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeRow {
    /// Source node UUID.
    pub source_id: String,
    /// Target node UUID.
    pub target_id: String,
    /// Relationship name (`calls`, `depends_on`, …).
    pub relationship: String,
    /// Provenance.
    pub provenance: Provenance,
    /// Feedback weight in 0..=1.
    pub weight: f64,
}

/// A write of the graph tools, committed with the call's decision records.
#[derive(Debug, Clone)]
pub enum GraphWrite {
    /// `graph_ingest`: new nodes and edges, and the observations consumed.
    Ingest {
        /// Org.
        org_id: String,
        /// Project.
        project_id: String,
        /// Nodes to insert.
        nodes: Vec<NodeRow>,
        /// Edges to insert.
        edges: Vec<EdgeRow>,
        /// Observations now processed.
        observations: Vec<String>,
    },
    /// `graph_improve`: new feedback weights and refreshed embeddings.
    Feedback {
        /// Org.
        org_id: String,
        /// Project.
        project_id: String,
        /// `(node id, weight)`.
        nodes: Vec<(String, f64)>,
        /// `(source, target, relationship, weight)`.
        edges: Vec<(String, String, String, f64)>,
        /// Re-embedded nodes: `(node id, model, vector)`.
        node_embeddings: Vec<(String, String, Vec<f32>)>,
        /// Re-embedded triplets: `(source, target, relationship, model, vector)`.
        edge_embeddings: Vec<(String, String, String, String, Vec<f32>)>,
    },
}

/// The bytes a graph write holds while queued (an estimate for the write
/// queue's budget: each row's size, its text and its vectors).
pub fn queued_bytes(w: &GraphWrite) -> u64 {
    let len = |s: &str| s.len() as u64;
    let opt = |s: &Option<String>| s.as_deref().map_or(0, len);
    let vector = |v: &[f32]| 4 * v.len() as u64;
    let provenance =
        |p: &Provenance| opt(&p.observation_id) + opt(&p.session_id) + len(&p.timestamp);
    let size = |n: usize| n as u64;
    match w {
        GraphWrite::Ingest {
            org_id,
            project_id,
            nodes,
            edges,
            observations,
        } => {
            let nodes: u64 = nodes
                .iter()
                .map(|n| {
                    size(std::mem::size_of::<NodeRow>())
                        + len(&n.id)
                        + len(&n.name)
                        + len(&n.key)
                        + len(&n.node_type)
                        + len(&n.description)
                        + provenance(&n.provenance)
                        + n.embedding.as_ref().map_or(0, |(m, v)| len(m) + vector(v))
                })
                .sum();
            let edges: u64 = edges
                .iter()
                .map(|e| {
                    size(std::mem::size_of::<EdgeRow>())
                        + len(&e.source_id)
                        + len(&e.target_id)
                        + len(&e.relationship)
                        + provenance(&e.provenance)
                })
                .sum();
            let observations: u64 = observations.iter().map(|o| 24 + len(o)).sum();
            len(org_id) + len(project_id) + nodes + edges + observations
        }
        GraphWrite::Feedback {
            org_id,
            project_id,
            nodes,
            edges,
            node_embeddings,
            edge_embeddings,
        } => {
            let nodes: u64 = nodes.iter().map(|(id, _)| 32 + len(id)).sum();
            let edges: u64 = edges
                .iter()
                .map(|(s, t, r, _)| 80 + len(s) + len(t) + len(r))
                .sum();
            let node_vectors: u64 = node_embeddings
                .iter()
                .map(|(id, m, v)| 72 + len(id) + len(m) + vector(v))
                .sum();
            let edge_vectors: u64 = edge_embeddings
                .iter()
                .map(|(s, t, r, m, v)| 120 + len(s) + len(t) + len(r) + len(m) + vector(v))
                .sum();
            len(org_id) + len(project_id) + nodes + edges + node_vectors + edge_vectors
        }
    }
}

/// Encodes a vector as little-endian f32 bytes.
pub fn encode_vector(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Decodes little-endian f32 bytes (a trailing partial value is ignored).
pub fn decode_vector(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Applies one graph write inside the writer's transaction.
pub fn apply(conn: &mut Conn, w: &GraphWrite) -> Result<(), StoreError> {
    match w {
        GraphWrite::Ingest {
            org_id,
            project_id,
            nodes,
            edges,
            observations,
        } => {
            for n in nodes {
                let (model, blob) = match &n.embedding {
                    Some((m, v)) => (Some(m.as_str()), Some(encode_vector(v))),
                    None => (None, None),
                };
                conn.execute("INSERT INTO graph_nodes (id, org_id, project_id, name, name_key, type, description,
                         observation_id, session_id, created_at, feedback_weight, embedding, embed_model)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)", params![
                    n.id,
                    org_id,
                    project_id,
                    n.name,
                    n.key,
                    n.node_type,
                    n.description,
                    n.provenance.observation_id,
                    n.provenance.session_id,
                    n.provenance.timestamp,
                    n.weight,
                    blob,
                    model
                ])?;
            }
            for e in edges {
                conn.execute("INSERT INTO graph_edges (org_id, project_id, source_id, target_id, relationship,
                         observation_id, session_id, created_at, feedback_weight)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)", params![
                    org_id,
                    project_id,
                    e.source_id,
                    e.target_id,
                    e.relationship,
                    e.provenance.observation_id,
                    e.provenance.session_id,
                    e.provenance.timestamp,
                    e.weight
                ])?;
            }
            for id in observations {
                conn.execute(
                    "UPDATE observations SET processed = 1
                     WHERE id = ?1 AND org_id = ?2 AND project_id = ?3",
                    params![id, org_id, project_id],
                )?;
            }
        }
        GraphWrite::Feedback {
            org_id,
            project_id,
            nodes,
            edges,
            node_embeddings,
            edge_embeddings,
        } => {
            for (id, w) in nodes {
                conn.execute(
                    "UPDATE graph_nodes SET feedback_weight = ?2
                     WHERE id = ?1 AND org_id = ?3 AND project_id = ?4",
                    params![id, w, org_id, project_id],
                )?;
            }
            for (s, t, r, w) in edges {
                conn.execute(
                    "UPDATE graph_edges SET feedback_weight = ?4
                     WHERE source_id = ?1 AND target_id = ?2 AND relationship = ?3
                       AND org_id = ?5 AND project_id = ?6",
                    params![s, t, r, w, org_id, project_id],
                )?;
            }
            for (id, model, v) in node_embeddings {
                conn.execute(
                    "UPDATE graph_nodes SET embedding = ?2, embed_model = ?3
                     WHERE id = ?1 AND org_id = ?4 AND project_id = ?5",
                    params![id, encode_vector(v), model, org_id, project_id],
                )?;
            }
            for (s, t, r, model, v) in edge_embeddings {
                conn.execute(
                    "UPDATE graph_edges SET embedding = ?4, embed_model = ?5
                     WHERE source_id = ?1 AND target_id = ?2 AND relationship = ?3
                       AND org_id = ?6 AND project_id = ?7",
                    params![s, t, r, encode_vector(v), model, org_id, project_id],
                )?;
            }
        }
    }
    Ok(())
}

/// Every node of a project, in insertion order.
pub fn load_nodes(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
) -> Result<Vec<NodeRow>, StoreError> {
    let rows = conn.query_map(
        "SELECT id, name, name_key, type, description, observation_id, session_id, created_at,
                feedback_weight, embedding, embed_model
         FROM graph_nodes WHERE org_id = ?1 AND project_id = ?2 ORDER BY seq",
        params![org_id, project_id],
        |r| {
            let blob: Option<Vec<u8>> = r.get(9)?;
            let model: Option<String> = r.get(10)?;
            Ok(NodeRow {
                id: r.get(0)?,
                name: r.get(1)?,
                key: r.get(2)?,
                node_type: r.get(3)?,
                description: r.get(4)?,
                provenance: Provenance {
                    observation_id: r.get(5)?,
                    session_id: r.get(6)?,
                    timestamp: r.get(7)?,
                },
                weight: r.get(8)?,
                embedding: match (model, blob) {
                    (Some(m), Some(b)) => Some((m, decode_vector(&b))),
                    _ => None,
                },
            })
        },
    )?;
    Ok(rows)
}

/// Every edge of a project, in insertion order.
pub fn load_edges(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
) -> Result<Vec<EdgeRow>, StoreError> {
    let rows = conn.query_map(
        "SELECT source_id, target_id, relationship, observation_id, session_id, created_at,
                feedback_weight
         FROM graph_edges WHERE org_id = ?1 AND project_id = ?2 ORDER BY seq",
        params![org_id, project_id],
        |r| {
            Ok(EdgeRow {
                source_id: r.get(0)?,
                target_id: r.get(1)?,
                relationship: r.get(2)?,
                provenance: Provenance {
                    observation_id: r.get(3)?,
                    session_id: r.get(4)?,
                    timestamp: r.get(5)?,
                },
                weight: r.get(6)?,
            })
        },
    )?;
    Ok(rows)
}

/// An observation waiting for extraction.
#[derive(Debug, Clone)]
pub struct PendingObservation {
    /// Observation id.
    pub id: String,
    /// Session that stored it.
    pub session_id: String,
    /// Its text.
    pub content: String,
    /// When it was stored.
    pub created_at: String,
}

/// The oldest `limit` unprocessed observations of a project.
pub fn unprocessed(
    conn: &mut Conn,
    org_id: &str,
    project_id: &str,
    limit: usize,
) -> Result<Vec<PendingObservation>, StoreError> {
    let rows = conn.query_map(
        "SELECT id, session_id, content, created_at FROM observations
         WHERE org_id = ?1 AND project_id = ?2 AND processed = 0
         ORDER BY seq LIMIT ?3",
        params![org_id, project_id, limit as i64],
        |r| {
            Ok(PendingObservation {
                id: r.get(0)?,
                session_id: r.get(1)?,
                content: r.get(2)?,
                created_at: r.get(3)?,
            })
        },
    )?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip() {
        let v = vec![0.5f32, -1.25, 3.0];
        assert_eq!(decode_vector(&encode_vector(&v)), v);
        assert!(decode_vector(&[1, 2, 3]).is_empty());
    }
}
