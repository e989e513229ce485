//! [`Graphs`]: the knowledge graphs of all projects as the gateway holds
//! them (in-memory views loaded on first use, per-project write locks, the
//! embedder and the extractor), and [`from_config`], which picks the
//! embedder the configuration names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use moka::sync::Cache;
use tokio::sync::OwnedMutexGuard;

use super::embed::{self, EmbedError, Embedder};
use super::extract::{self, Extractor};
use super::model::ProjectGraph;
use crate::store::{Store, StoreError};

/// Why the configured embeddings provider cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum GraphConfigError {
    /// `graph.embedding_url` is not an http(s) URL.
    #[error("`graph.embedding_url` `{0}` is not an http(s) URL")]
    NotHttp(String),
    /// The HTTP embedder could not be built.
    #[error(transparent)]
    Embedder(#[from] EmbedError),
}

/// Graph state for a configuration: the HTTP embeddings provider when
/// `embedding_url` is set, else the local embedder.
pub fn from_config(config: &crate::config::GraphConfig) -> Result<Graphs, GraphConfigError> {
    match config
        .embedding_url
        .as_deref()
        .filter(|u| !u.trim().is_empty())
    {
        None => Ok(Graphs::local()),
        Some(url) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(GraphConfigError::NotHttp(url.to_string()));
            }
            let http = embed::HttpEmbedder::new(
                url,
                &config.embedding_model,
                config.embedding_api_key.clone(),
                std::time::Duration::from_secs(config.embedding_timeout_secs.max(1)),
            )?;
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
