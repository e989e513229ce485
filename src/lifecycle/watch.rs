//! Reload triggers that run beside the server: a file watch on the policy
//! directory (recursively, so `tests/` counts) and the schema file, and
//! SIGHUP. Both end when the returned handle is dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::gateway::Gateway;

/// Background reload triggers; aborted on drop (the gateway's policy
/// set's here, the decision applications' in `pdp::watch`).
#[derive(Debug, Default)]
pub struct Triggers {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Triggers {
    /// Keeps `task` until the triggers are dropped.
    pub fn push(&mut self, task: tokio::task::JoinHandle<()>) {
        self.tasks.push(task);
    }
}

impl Drop for Triggers {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts the file watch (when configured) and the SIGHUP handler.
pub fn start(gw: &Arc<Gateway>) -> Triggers {
    let mut triggers = Triggers::default();
    if gw.config.lifecycle.watch {
        match file_watch(gw) {
            Ok(task) => triggers.tasks.push(task),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the policy files; reload with SIGHUP or the admin API")
            }
        }
    }
    #[cfg(unix)]
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut hup) => {
            let gw = Arc::clone(gw);
            triggers.tasks.push(tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    let _ = super::reload::reload(&gw, "sighup").await;
                }
            }));
        }
        Err(e) => tracing::warn!(error = %e, "cannot install the SIGHUP handler"),
    }
    triggers
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn file_watch(gw: &Arc<Gateway>) -> notify::Result<tokio::task::JoinHandle<()>> {
    let policies = absolute(&gw.config.policies_dir);
    let schema = absolute(&gw.config.schema_file);
    // Capacity 1: a pending trigger already covers any later change.
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let (p, s) = (policies.clone(), schema.clone());
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let Ok(event) = res else { return };
        if matches!(event.kind, EventKind::Access(_)) {
            return;
        }
        if event
            .paths
            .iter()
            .any(|path| path.starts_with(&p) || *path == s)
        {
            let _ = tx.try_send(());
        }
    })?;
    watcher.watch(&policies, RecursiveMode::Recursive)?;
    // Watch the schema's directory: editors replace files, which would
    // orphan a watch on the file itself.
    if let Some(dir) = schema.parent() {
        watcher.watch(dir, RecursiveMode::NonRecursive)?;
    }
    let debounce = Duration::from_millis(gw.config.lifecycle.watch_debounce_ms);
    let gw = Arc::clone(gw);
    Ok(tokio::spawn(async move {
        let _keep_alive = watcher;
        while rx.recv().await.is_some() {
            tokio::time::sleep(debounce).await;
            while rx.try_recv().is_ok() {}
            let _ = super::reload::reload(&gw, "file-watch").await;
        }
    }))
}
