//! The policy reload: load → validate → test → record → swap, triggered by
//! the file watch, SIGHUP or `POST /admin/policies/reload`.
//!
//! It takes the whole [`Gateway`] (its PEP is what is swapped), so it sits
//! above it; the lifecycle state the gateway holds is in the parent file.

use std::sync::Arc;

use super::{Attempt, CandidateError, load_candidate, policy_set_op};
use crate::cluster::membership;
use crate::gateway::Gateway;
use crate::policy::PolicyBundle;
use crate::policy::tests_runner::TestReport;

/// Reloads the policy set: load → validate → test → record → swap. The
/// returned attempt says what happened; on `Err` the active set is
/// unchanged.
pub async fn reload(gw: &Arc<Gateway>, trigger: &str) -> Result<Attempt, Attempt> {
    let lifecycle = &gw.lifecycle;
    let _one_at_a_time = lifecycle.reload_lock.lock().await;
    let loaded = load(gw).await;
    let mut attempt = rejected(trigger);
    let (bundle, report) = match loaded {
        Ok(loaded) => loaded,
        Err(failure) => {
            failure.describe(&mut attempt);
            lifecycle.record(&attempt);
            return Err(attempt);
        }
    };
    attempt.tests_run = report.outcomes.len();
    attempt.hash = Some(bundle.hash.clone());
    attempt.warnings = bundle.warnings.clone();
    if bundle.hash == gw.pep.current().hash {
        attempt.result = "unchanged".into();
        lifecycle.record(&attempt);
        return Ok(attempt);
    }
    // The set is recorded before it decides anything, so every decision's
    // policy hash can be resolved for replay.
    if let Err(e) = gw.store.writer().submit(vec![policy_set_op(&bundle)]).await {
        attempt.message = Some(format!("cannot record the policy set: {e}"));
        lifecycle.record(&attempt);
        return Err(attempt);
    }
    activate(gw, bundle, trigger);
    attempt.result = "applied".into();
    lifecycle.record(&attempt);
    // Show the new hash in this instance's row at once (after the attempt
    // is recorded, so the status never lags the active set).
    if let Err(e) = membership::beat(gw).await {
        tracing::warn!(error = %e, "could not refresh this instance's row after the reload");
    }
    Ok(attempt)
}

/// Why a candidate never reached the swap.
enum LoadFailure {
    /// Parsing, validation or the policy tests refused it.
    Candidate(CandidateError),
    /// The blocking task that loads it failed.
    Task(tokio::task::JoinError),
}

impl LoadFailure {
    /// Fills the rejected attempt's message and details (and logs a
    /// refused candidate, which an operator has to act on).
    fn describe(self, attempt: &mut Attempt) {
        let e = match self {
            LoadFailure::Task(join) => {
                attempt.message = Some(format!("reload task failed: {join}"));
                return;
            }
            LoadFailure::Candidate(e) => e,
        };
        refused(&e, attempt);
        let trigger = attempt.trigger.as_str();
        tracing::warn!(trigger, error = %e, "policy reload rejected; the active set is unchanged");
    }
}

/// Fills a rejected attempt with why `e` refused its candidate: the
/// summary, the located problems, the failed policy tests.
pub(crate) fn refused(e: &CandidateError, attempt: &mut Attempt) {
    attempt.message = Some(e.summary());
    match e {
        CandidateError::Policies(p) => {
            attempt.diagnostics = p.diagnostics.iter().map(ToString::to_string).collect();
        }
        CandidateError::Tests(r) => {
            attempt.tests_run = r.outcomes.len();
            attempt.test_failures = r.failures();
        }
        CandidateError::TestFiles(_) => {}
    }
}

/// Loads the candidate set from the configured files, off the async
/// threads (parsing, validation and the policy tests are CPU work).
async fn load(gw: &Gateway) -> Result<(PolicyBundle, TestReport), LoadFailure> {
    let (schema, dir, tools) = (
        gw.config.schema_file.clone(),
        gw.config.policies_dir.clone(),
        gw.lifecycle.tools(),
    );
    match tokio::task::spawn_blocking(move || load_candidate(&schema, &dir, &tools)).await {
        Ok(Ok(loaded)) => Ok(loaded),
        Ok(Err(e)) => Err(LoadFailure::Candidate(e)),
        Err(join) => Err(LoadFailure::Task(join)),
    }
}

/// An attempt that is `rejected` until a step says otherwise.
pub(crate) fn rejected(trigger: &str) -> Attempt {
    Attempt {
        at: crate::ids::now_rfc3339(),
        trigger: trigger.to_string(),
        result: "rejected".into(),
        hash: None,
        message: None,
        diagnostics: Vec::new(),
        test_failures: Vec::new(),
        tests_run: 0,
        warnings: Vec::new(),
    }
}

/// Swaps the recorded set in and notes it as active.
fn activate(gw: &Gateway, bundle: PolicyBundle, trigger: &str) {
    for w in &bundle.warnings {
        tracing::warn!(warning = %w, "policy validation warning");
    }
    let active = gw.pep.swap(bundle);
    gw.announce_change();
    gw.cluster.recorded(&active.hash);
    gw.lifecycle
        .metrics
        .active_set(&active.hash, super::unix(&active.loaded_at));
    tracing::info!(trigger, hash = %active.hash, policies = active.policy_ids.len(), "policy set reloaded");
}
