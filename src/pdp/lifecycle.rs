//! The lifecycle of the decision applications: the gateway's activation
//! pipeline run on each application's folder (load → strict validation →
//! entity data → policy tests → record → swap), one application at a
//! time, each keeping its last good set whatever happens to the others.
//!
//! It takes the [`Gateway`] (its writer records the sets), so it sits
//! above it; the state it changes is [`super::Pdp`].

use std::path::Path;
use std::sync::Arc;

use crate::gateway::Gateway;
use crate::lifecycle::reload::{refused, rejected};
use crate::lifecycle::{Attempt, CandidateError, policy_set_op};
use crate::policy::application::AppSet;
use crate::policy::application::load::load_app;
use crate::policy::tests_runner::{self, TestReport};

/// How a reload refused for want of the database begins its message: the
/// set was good, but could not be recorded (tried again by
/// the watcher (`watch.rs`) every `database.heartbeat_secs`).
pub const UNRECORDED: &str = "cannot record the policy set";

/// Whether `app`'s latest reload was refused only because its set could
/// not be recorded.
pub fn unrecorded(app: &super::App) -> bool {
    app.status().last_attempt.is_some_and(|a| {
        a.result == "rejected" && a.message.is_some_and(|m| m.starts_with(UNRECORDED))
    })
}

/// Loads one application's candidate set the way every activation does:
/// schema, policies and entity data (`load_app`), then its policy tests
/// under `dir/tests`.
pub fn load_candidate(name: &str, dir: &Path) -> Result<(AppSet, TestReport), CandidateError> {
    let set = load_app(name, dir)?;
    let report = tests_runner::run_dir(&set.bundle, dir)
        .map_err(|e| CandidateError::TestFiles(e.to_string()))?;
    if report.failed() > 0 {
        return Err(CandidateError::Tests(report));
    }
    Ok((set, report))
}

/// Reloads every application under the folder (and forgets those whose
/// folder is gone); one attempt per application, by name.
pub async fn reload_all(gw: &Gateway, trigger: &str) -> Vec<(String, Result<Attempt, Attempt>)> {
    let _one_at_a_time = gw.pdp.reload_lock.lock().await;
    let dir = gw.pdp.dir().to_path_buf();
    let found = tokio::task::spawn_blocking(move || app_folders(&dir))
        .await
        .unwrap_or_default();
    let mut names: Vec<String> = gw.pdp.apps().iter().map(|a| a.name.clone()).collect();
    names.extend(found);
    names.sort();
    names.dedup();
    let mut attempts = Vec::with_capacity(names.len());
    for name in names {
        let attempt = reload_locked(gw, &name, trigger).await;
        attempts.push((name, attempt));
    }
    attempts
}

/// Reloads one application.
pub async fn reload_app(gw: &Gateway, name: &str, trigger: &str) -> Result<Attempt, Attempt> {
    let _one_at_a_time = gw.pdp.reload_lock.lock().await;
    reload_locked(gw, name, trigger).await
}

/// The names of the application folders under `dir` (none when it does
/// not exist); other entries are skipped, a misnamed folder with a warning.
fn app_folders(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for entry in entries.flatten() {
        if !entry.path().is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if crate::ids::valid_app_name(&name) {
            names.push(name);
        } else if !name.starts_with('.') {
            tracing::warn!(folder = %name, rule = crate::ids::APP_NAME_RULE, "not an application name; folder skipped");
        }
    }
    names
}

/// Reloads `name` under the reload lock: a folder that is gone removes
/// the application; otherwise its candidate becomes active only after
/// every step passed and the set is recorded.
async fn reload_locked(gw: &Gateway, name: &str, trigger: &str) -> Result<Attempt, Attempt> {
    let mut attempt = rejected(trigger);
    let dir = gw.pdp.dir().join(name);
    if !crate::ids::valid_app_name(name) || !dir.is_dir() {
        if gw.pdp.remove(name).is_some() {
            tracing::info!(app = %name, "decision application removed (its folder is gone)");
        }
        attempt.result = "removed".into();
        return Ok(attempt);
    }
    let Some(app) = gw.pdp.app_or_new(name) else {
        attempt.message = Some("the application registry is unavailable".into());
        return Err(attempt);
    };
    let loaded = tokio::task::spawn_blocking({
        let name = name.to_string();
        move || load_candidate(&name, &dir)
    })
    .await;
    let (set, report) = match loaded {
        Ok(Ok(loaded)) => loaded,
        Ok(Err(e)) => {
            refused(&e, &mut attempt);
            tracing::warn!(app = %name, trigger, error = %e, "decision application reload rejected; its active set is unchanged");
            return Err(noted(&app, attempt));
        }
        Err(join) => {
            attempt.message = Some(format!("reload task failed: {join}"));
            return Err(noted(&app, attempt));
        }
    };
    attempt.tests_run = report.outcomes.len();
    attempt.hash = Some(set.bundle.hash.clone());
    attempt.warnings = set.bundle.warnings.clone();
    activate(gw, &app, set, attempt).await
}

/// Records a loaded set, then swaps it in (`unchanged` when its policies
/// and its entity data are the active ones).
async fn activate(
    gw: &Gateway,
    app: &Arc<super::App>,
    set: AppSet,
    mut attempt: Attempt,
) -> Result<Attempt, Attempt> {
    let active = app.active();
    if active
        .as_ref()
        .is_some_and(|a| a.bundle.hash == set.bundle.hash && a.data.hash == set.data.hash)
    {
        attempt.result = "unchanged".into();
        return Ok(noted(app, attempt));
    }
    // The set is recorded before it decides anything, so every decision's
    // policy hash can be resolved for replay.
    if let Err(e) = gw
        .store
        .writer()
        .submit(vec![policy_set_op(&set.bundle)])
        .await
    {
        attempt.message = Some(format!("{UNRECORDED}: {e}"));
        return Err(noted(app, attempt));
    }
    for w in &set.bundle.warnings {
        tracing::warn!(app = %app.name, warning = %w, "decision application validation warning");
    }
    let set = app.activate(set);
    tracing::info!(app = %app.name, trigger = %attempt.trigger, hash = %set.bundle.hash,
        data = %set.data.hash, policies = set.bundle.policy_ids.len(), "decision application loaded");
    attempt.result = "applied".into();
    Ok(noted(app, attempt))
}

/// Notes `attempt` in the application's status and hands it back.
fn noted(app: &super::App, attempt: Attempt) -> Attempt {
    app.record(&attempt);
    attempt
}
