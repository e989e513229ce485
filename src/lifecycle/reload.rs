//! The policy reload: load → validate → test → record → swap, triggered by
//! the file watch, SIGHUP or `POST /admin/policies/reload`.
//!
//! It takes the whole [`Gateway`] (its PEP is what is swapped), so it sits
//! above it; the lifecycle state the gateway holds is in the parent file.

use std::sync::Arc;

use super::{Attempt, CandidateError, gate, load_candidate, policy_set_op};
use crate::audit::events;
use crate::cluster::membership;
use crate::config::ProveMode;
use crate::gateway::Gateway;
use crate::policy::PolicyBundle;
use crate::policy::tests_runner::TestReport;
use crate::store::{WriteOp, policy_active, policy_candidates};

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
    let previous = gw.pep.current();
    if bundle.hash == previous.hash {
        attempt.result = "unchanged".into();
        lifecycle.record(&attempt);
        return Ok(attempt);
    }
    let Some(bundle) = refuse_widening(gw, bundle, &previous, &mut attempt).await else {
        lifecycle.record(&attempt);
        return Err(attempt);
    };
    // The set is recorded before it decides anything, so every decision's
    // policy hash can be resolved for replay.
    let activation = policy_active::activated_op(
        &bundle.hash,
        &gw.cluster.instance_id,
        trigger,
        &crate::ids::now_rfc3339(),
    );
    if let Err(e) = gw
        .store
        .writer()
        .submit(vec![policy_set_op(&bundle), activation])
        .await
    {
        attempt.message = Some(format!("cannot record the policy set: {e}"));
        lifecycle.record(&attempt);
        return Err(attempt);
    }
    let active = activate(gw, bundle, trigger);
    if gw.config.lifecycle.prove == ProveMode::Report {
        report_in_background(gw, previous, active, trigger);
    }
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
        proof: None,
        message: None,
        diagnostics: Vec::new(),
        test_failures: Vec::new(),
        tests_run: 0,
        warnings: Vec::new(),
    }
}

/// Under `[lifecycle] prove = "refuse-widening"`, proves the candidate
/// against the active set first: a proof that does not pass refuses it
/// (`None`; the refusal, its counterexamples and the candidate's text go
/// to the trail) unless an admin accepted its hash. Other modes pass the
/// candidate through.
async fn refuse_widening(
    gw: &Gateway,
    bundle: PolicyBundle,
    live: &Arc<PolicyBundle>,
    attempt: &mut Attempt,
) -> Option<PolicyBundle> {
    if gw.config.lifecycle.prove != ProveMode::RefuseWidening {
        return Some(bundle);
    }
    let candidate = Arc::new(bundle);
    let proof = gate::prove(
        setting(gw),
        Arc::clone(live),
        Arc::clone(&candidate),
        &attempt.trigger,
    )
    .await;
    attempt.proof = Some(proof.message.clone());
    let accepted = accepted(gw, &candidate.hash).await;
    let passes = proof.passes();
    if !passes && !accepted {
        attempt.result = "refused".into();
        attempt.message = Some(format!(
            "refused by the proof: {}; to activate this exact candidate anyway: POST /admin/policies/accept {{\"hash\":\"{}\"}}",
            proof.message, candidate.hash
        ));
        tracing::warn!(trigger = %attempt.trigger, candidate = %candidate.hash, proof = %proof.message, "policy reload refused by its proof; the active set is unchanged");
        record_refusal(gw, &candidate, &proof).await;
        gw.lifecycle.set_last_proof(proof);
        return None;
    }
    if !passes {
        tracing::warn!(candidate = %candidate.hash, proof = %proof.message, "policy reload proof did not pass; activating the candidate an admin accepted");
    }
    gw.lifecycle.set_last_proof(proof);
    match Arc::try_unwrap(candidate) {
        Ok(bundle) => Some(bundle),
        Err(_) => {
            attempt.message = Some("the candidate is still held by its proof".into());
            None
        }
    }
}

/// Whether an admin accepted the candidate `hash` (on any instance of the
/// database, before any restart). A store that cannot answer accepts
/// nothing: the candidate stays refused.
async fn accepted(gw: &Gateway, hash: &str) -> bool {
    let h = hash.to_string();
    match gw
        .store
        .read(move |c| policy_candidates::is_accepted(c, &h))
        .await
    {
        Ok(accepted) => accepted,
        Err(e) => {
            tracing::warn!(error = %e, candidate = %hash, "cannot read whether the candidate was accepted; it is not");
            false
        }
    }
}

/// What this gateway's proofs run with.
pub(crate) fn setting(gw: &Gateway) -> gate::Setting {
    gate::Setting {
        solver: gw.lifecycle.solver().cloned(),
        run: std::time::Duration::from_secs(gw.config.prove.run_timeout_secs),
        mode: gw.config.lifecycle.prove,
    }
}

/// Records a refusal in the trail with the candidate's text, so an auditor
/// sees what was refused and why, and in `policy_candidates`, so an admin
/// can accept it on any instance (a failure to record it is logged: the
/// refusal stands).
async fn record_refusal(gw: &Gateway, candidate: &PolicyBundle, proof: &gate::GateProof) {
    if let Err(e) = gw
        .store
        .writer()
        .submit(refusal_ops(candidate, proof))
        .await
    {
        tracing::error!(error = %e, "cannot record the refused policy set");
    }
}

/// What records a refusal: the candidate's text, its `policy_candidates`
/// row (so it can be accepted) and its trail event with the proof's first
/// counterexamples (a reload's, and a start-up's: `super::startup`).
pub(crate) fn refusal_ops(candidate: &PolicyBundle, proof: &gate::GateProof) -> Vec<WriteOp> {
    let event = events::policy_set_event(
        events::POLICY_SET_REFUSED,
        (&proof.candidate_hash, &proof.live_hash),
        &gate::refusal_outcome(proof),
    );
    let refused = policy_candidates::refused_op(&proof.candidate_hash, &proof.live_hash, &proof.at);
    vec![
        policy_set_op(candidate),
        refused,
        WriteOp::Decision(Box::new(event)),
    ]
}

/// Under `[lifecycle] prove = "report"`, proves the activated set against
/// the one it replaced in the background and keeps the proof.
pub(crate) fn report_in_background(
    gw: &Arc<Gateway>,
    previous: Arc<PolicyBundle>,
    active: Arc<PolicyBundle>,
    trigger: &str,
) {
    let (gw, trigger) = (Arc::clone(gw), trigger.to_string());
    tokio::spawn(async move {
        let proof = gate::prove(setting(&gw), previous, active, &trigger).await;
        match proof.outcome {
            gate::Outcome::Equivalent | gate::Outcome::Narrower => {
                tracing::info!(candidate = %proof.candidate_hash, proof = %proof.message, "policy reload proved");
            }
            _ => {
                tracing::warn!(candidate = %proof.candidate_hash, proof = %proof.message, "policy reload proof: the active set may allow what the one before denied")
            }
        }
        gw.lifecycle.set_last_proof(proof);
    });
}

/// Swaps the recorded set in and notes it as active.
fn activate(gw: &Gateway, bundle: PolicyBundle, trigger: &str) -> Arc<PolicyBundle> {
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
    active
}
