//! Reload triggers of the decision applications, beside the gateway's
//! own (`crate::lifecycle::watch`) and independent of them: a file watch
//! on the applications' folder (recursively; a change reloads the
//! application whose folder it is in, a change of the folder itself every
//! application) when `lifecycle.watch` is on, SIGHUP (every
//! application), and a retry of the sets the database could not record.
//! All end when the returned handle is dropped.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::Notify;

use crate::gateway::Gateway;

/// Background reload triggers; aborted on drop.
#[derive(Debug, Default)]
pub struct Triggers {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Triggers {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts the file watch (when configured and the folder exists), the
/// SIGHUP handler, and the retry of sets the database could not record.
pub fn start(gw: &Arc<Gateway>) -> Triggers {
    let mut triggers = Triggers::default();
    triggers
        .tasks
        .push(tokio::spawn(retry_unrecorded(Arc::downgrade(gw))));
    if gw.config.lifecycle.watch && gw.pdp.dir().is_dir() {
        match file_watch(gw) {
            Ok(task) => triggers.tasks.push(task),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the decision applications; reload them with SIGHUP or the admin API")
            }
        }
    }
    #[cfg(unix)]
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut hup) => {
            let gw = Arc::clone(gw);
            triggers.tasks.push(tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    let _ = super::lifecycle::reload_all(&gw, "sighup").await;
                }
            }));
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot install the SIGHUP handler of the decision applications")
        }
    }
    triggers
}

/// Reloads, every `database.heartbeat_secs`, the applications whose
/// latest set was good but could not be recorded (the database was down,
/// at start-up above all), until the gateway is dropped.
async fn retry_unrecorded(gw: std::sync::Weak<Gateway>) {
    loop {
        let Some(every) = gw
            .upgrade()
            .map(|g| g.config.database.heartbeat_secs.max(1))
        else {
            return;
        };
        tokio::time::sleep(Duration::from_secs(every)).await;
        let Some(gw) = gw.upgrade() else { return };
        for app in gw.pdp.apps() {
            if super::lifecycle::unrecorded(&app) {
                let _ = super::lifecycle::reload_app(&gw, &app.name, "retry").await;
            }
        }
    }
}

/// What changed since the last reload: some applications, or the
/// folder itself (every application).
#[derive(Debug, Default)]
struct Pending {
    all: bool,
    apps: BTreeSet<String>,
}

/// The changes the watcher saw and the reload task has not taken yet.
#[derive(Debug, Default)]
struct Changed(Mutex<Pending>);

impl Changed {
    fn note(&self, root: &Path, path: &Path) {
        let Ok(mut pending) = self.0.lock() else {
            return;
        };
        match app_of(root, path) {
            Some(name) => {
                pending.apps.insert(name);
            }
            None => pending.all = true,
        }
    }

    /// What to reload, resetting the record (every application when the
    /// record cannot be read).
    fn take(&self) -> Pending {
        match self.0.lock() {
            Ok(mut pending) => std::mem::take(&mut *pending),
            Err(_) => Pending {
                all: true,
                apps: BTreeSet::new(),
            },
        }
    }
}

/// The application a changed path belongs to: the first component under
/// `root` (`None` for `root` itself or a path outside it).
fn app_of(root: &Path, path: &Path) -> Option<String> {
    let rest = path.strip_prefix(root).ok()?;
    let mut components = rest.components();
    let first = components.next()?;
    // A file directly in the folder is no application's: reload all.
    components.next()?;
    match first {
        Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
        _ => None,
    }
}

fn file_watch(gw: &Arc<Gateway>) -> notify::Result<tokio::task::JoinHandle<()>> {
    let root: PathBuf = std::path::absolute(gw.pdp.dir()).unwrap_or_else(|_| gw.pdp.dir().into());
    let changed = Arc::new(Changed::default());
    let wake = Arc::new(Notify::new());
    let (seen, woken, watched) = (Arc::clone(&changed), Arc::clone(&wake), root.clone());
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let Ok(event) = res else { return };
        if matches!(event.kind, EventKind::Access(_)) {
            return;
        }
        for path in &event.paths {
            seen.note(&watched, path);
        }
        woken.notify_one();
    })?;
    watcher.watch(&root, RecursiveMode::Recursive)?;
    let debounce = Duration::from_millis(gw.config.lifecycle.watch_debounce_ms);
    let gw = Arc::clone(gw);
    Ok(tokio::spawn(async move {
        let _keep_alive = watcher;
        loop {
            wake.notified().await;
            tokio::time::sleep(debounce).await;
            let pending = changed.take();
            if pending.all {
                let _ = super::lifecycle::reload_all(&gw, "file-watch").await;
                continue;
            }
            for app in pending.apps {
                let _ = super::lifecycle::reload_app(&gw, &app, "file-watch").await;
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_belongs_to_the_application_whose_folder_holds_it() {
        let root = Path::new("/srv/pdp");
        assert_eq!(
            app_of(root, Path::new("/srv/pdp/records/policies/a.cedar")).as_deref(),
            Some("records")
        );
        assert_eq!(
            app_of(root, Path::new("/srv/pdp/records/entities.json")).as_deref(),
            Some("records")
        );
        assert_eq!(
            app_of(root, Path::new("/srv/pdp/records")),
            None,
            "the folder itself: every application"
        );
        assert_eq!(app_of(root, Path::new("/srv/pdp")), None);
        assert_eq!(app_of(root, Path::new("/elsewhere/x/y")), None);
    }
}
