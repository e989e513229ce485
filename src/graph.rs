//! The knowledge graph of each project: the per-project gate, text
//! normalization shared by extraction, resolution and search, and
//! [`Graphs`], which owns the in-memory views and the per-project write
//! locks that keep them coherent with the store.
//!
//! **Architecture Invariant:** this module knows nothing about Cedar or
//! HTTP. Traversals take a [`model::NodeFilter`]; the MCP layer passes one
//! that asks Cedar `read_node` through `audit`.

pub mod embed;
pub mod extract;
pub mod model;
pub mod pipeline;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use moka::sync::Cache;
use tokio::sync::OwnedMutexGuard;

use crate::store::tenants::SessionTenant;
use crate::store::{Store, StoreError};
use embed::Embedder;
use extract::Extractor;
use model::ProjectGraph;

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

/// Words that carry no meaning for search or embeddings.
const STOP_WORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from",
    "how", "i", "if", "in", "into", "is", "it", "its", "of", "on", "or", "our", "so", "that",
    "the", "their", "this", "to", "under", "us", "was", "we", "what", "when", "where", "which",
    "who", "why", "with", "you",
];

/// Splits an identifier or phrase into lowercase parts: at non-alphanumeric
/// characters and at camelCase boundaries (`HTTPServer` → `http`, `server`;
/// `PostgresDB` → `postgres`, `db`).
pub fn split_identifier(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<char> = word.chars().collect();
        let mut current = String::new();
        for (i, &c) in chars.iter().enumerate() {
            let prev = i.checked_sub(1).and_then(|p| chars.get(p)).copied();
            let next = chars.get(i + 1).copied();
            let boundary = c.is_uppercase()
                && prev.is_some_and(|p| {
                    p.is_lowercase()
                        || p.is_ascii_digit()
                        || (p.is_uppercase() && next.is_some_and(char::is_lowercase))
                });
            if boundary && !current.is_empty() {
                parts.push(std::mem::take(&mut current));
            }
            current.extend(c.to_lowercase());
        }
        if !current.is_empty() {
            parts.push(current);
        }
    }
    parts
}

/// Search and embedding tokens: identifier parts without stop words.
pub fn tokens(text: &str) -> Vec<String> {
    split_identifier(text)
        .into_iter()
        .filter(|t| !STOP_WORDS.contains(&t.as_str()))
        .collect()
}

/// Spellings of one thing that resolve to the same key.
const ALIASES: &[(&str, &str)] = &[
    ("postgresql", "postgres"),
    ("postgresdb", "postgres"),
    ("postgresdatabase", "postgres"),
    ("k8s", "kubernetes"),
    ("mongo", "mongodb"),
];

/// The entity-resolution key: lowercase alphanumerics only, so
/// `AuthService`, `auth-service`, `auth_service` and `auth service` are one
/// entity; a few well-known aliases (`PostgreSQL`, `PostgresDB` →
/// `postgres`) fold further.
pub fn resolution_key(name: &str) -> String {
    let key: String = name
        .chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect();
    match ALIASES.iter().find(|(a, _)| *a == key) {
        Some((_, canonical)) => (*canonical).to_string(),
        None => key,
    }
}

/// Graph state for a configuration: the HTTP embeddings provider when
/// `embedding_url` is set, else the local embedder.
pub fn from_config(config: &crate::config::GraphConfig) -> Result<Graphs, String> {
    match config
        .embedding_url
        .as_deref()
        .filter(|u| !u.trim().is_empty())
    {
        None => Ok(Graphs::local()),
        Some(url) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!(
                    "`graph.embedding_url` `{url}` is not an http(s) URL"
                ));
            }
            let http = embed::HttpEmbedder::new(
                url,
                &config.embedding_model,
                config.embedding_api_key.clone(),
                std::time::Duration::from_secs(config.embedding_timeout_secs.max(1)),
            )
            .map_err(|e| e.to_string())?;
            Ok(Graphs::new(
                Arc::new(http),
                Arc::new(extract::RuleExtractor),
            ))
        }
    }
}

/// Cache key of a project.
type ProjectKey = (String, String);

/// Most graph elements (nodes + edges) kept in memory over all projects;
/// least-recently-used projects are dropped and reloaded on demand.
const CACHE_WEIGHT: u64 = 20_000_000;

/// The knowledge graphs of all projects: in-memory views (loaded on first
/// use) and per-project write locks. A write holds its project's lock from
/// planning until the in-memory view is updated after the commit, and a
/// load holds it too, so a view is never built from a state a write is
/// about to change.
#[derive(Debug)]
pub struct Graphs {
    views: Cache<ProjectKey, Arc<RwLock<ProjectGraph>>>,
    locks: Mutex<HashMap<ProjectKey, Arc<tokio::sync::Mutex<()>>>>,
    /// Embeds node texts and queries.
    pub embedder: Arc<dyn Embedder>,
    /// Extracts entities and relationships from observations.
    pub extractor: Arc<dyn Extractor>,
}

impl Graphs {
    /// Graph state using `embedder` and `extractor`.
    pub fn new(embedder: Arc<dyn Embedder>, extractor: Arc<dyn Extractor>) -> Graphs {
        Graphs {
            views: Cache::builder()
                .weigher(|_k: &ProjectKey, v: &Arc<RwLock<ProjectGraph>>| {
                    v.read()
                        .map(|g| (g.node_count() + g.edge_count()).max(1))
                        .unwrap_or(1)
                        .try_into()
                        .unwrap_or(u32::MAX)
                })
                .max_capacity(CACHE_WEIGHT)
                .build(),
            locks: Mutex::new(HashMap::new()),
            embedder,
            extractor,
        }
    }

    /// Graph state with the built-in embedder and extractor.
    pub fn local() -> Graphs {
        Graphs::new(
            Arc::new(embed::LocalEmbedder),
            Arc::new(extract::RuleExtractor),
        )
    }

    fn lock_of(&self, key: &ProjectKey) -> Arc<tokio::sync::Mutex<()>> {
        match self.locks.lock() {
            Ok(mut locks) => Arc::clone(locks.entry(key.clone()).or_default()),
            // A poisoned map only means a panic elsewhere; a fresh lock is
            // still correct for this caller's exclusion within its scope.
            Err(poisoned) => Arc::clone(poisoned.into_inner().entry(key.clone()).or_default()),
        }
    }

    /// The view of a project's graph for reading (loaded if needed).
    pub async fn view(
        &self,
        store: &Store,
        org: &str,
        project: &str,
    ) -> Result<Arc<RwLock<ProjectGraph>>, StoreError> {
        let key = (org.to_string(), project.to_string());
        if let Some(v) = self.views.get(&key) {
            return Ok(v);
        }
        let _guard = self.lock_of(&key).lock_owned().await;
        self.load(store, &key).await
    }

    /// Exclusive write access to a project's graph: the lock guard and the
    /// view to update after the write committed.
    pub async fn write(
        &self,
        store: &Store,
        org: &str,
        project: &str,
    ) -> Result<(OwnedMutexGuard<()>, Arc<RwLock<ProjectGraph>>), StoreError> {
        let key = (org.to_string(), project.to_string());
        let guard = self.lock_of(&key).lock_owned().await;
        let view = self.load(store, &key).await?;
        Ok((guard, view))
    }

    /// Returns the cached view or loads it (the caller holds the lock).
    async fn load(
        &self,
        store: &Store,
        key: &ProjectKey,
    ) -> Result<Arc<RwLock<ProjectGraph>>, StoreError> {
        if let Some(v) = self.views.get(key) {
            return Ok(v);
        }
        let (org, project) = key.clone();
        let model = self.embedder.model().to_string();
        let graph = store
            .read(move |c| {
                let nodes = crate::store::graph::load_nodes(c, &org, &project)?;
                let edges = crate::store::graph::load_edges(c, &org, &project)?;
                Ok(ProjectGraph::from_rows(&model, nodes, edges))
            })
            .await?;
        let view = Arc::new(RwLock::new(graph));
        self.views.insert(key.clone(), Arc::clone(&view));
        Ok(view)
    }

    /// Installs a prebuilt view (benchmarks and bulk loads).
    pub fn install(&self, org: &str, project: &str, graph: ProjectGraph) {
        self.views.insert(
            (org.to_string(), project.to_string()),
            Arc::new(RwLock::new(graph)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_split_at_case_and_punctuation() {
        assert_eq!(split_identifier("HTTPServer"), vec!["http", "server"]);
        assert_eq!(split_identifier("PostgresDB"), vec!["postgres", "db"]);
        assert_eq!(
            split_identifier("auth-service v2"),
            vec!["auth", "service", "v2"]
        );
        assert_eq!(
            split_identifier("OAuth2Client"),
            vec!["o", "auth2", "client"]
        );
        assert_eq!(
            tokens("How does the AuthService work?"),
            vec!["auth", "service", "work"]
        );
    }

    #[test]
    fn spellings_resolve_to_one_key() {
        for s in [
            "AuthService",
            "auth-service",
            "auth_service",
            "Auth Service",
        ] {
            assert_eq!(resolution_key(s), "authservice");
        }
        for s in ["Postgres", "PostgreSQL", "PostgresDB", "postgres db"] {
            assert_eq!(resolution_key(s), "postgres");
        }
        assert_eq!(resolution_key("!!"), "");
    }
}
