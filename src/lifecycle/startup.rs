//! The proof gate at start-up (`[lifecycle] prove`): the policy files are
//! proved against the set last activated on the database
//! (`crate::store::policy_active`, its text recorded in `policy_sets`)
//! before the gateway decides anything, so a restart with changed files is
//! held to the rule a reload is.
//!
//! - `off`, no solver (said once, as for reloads), a database that does not
//!   answer yet, no set activated before, or the same hash: the files'
//!   set starts, unproved.
//! - `report`: the files' set starts; the proof runs in the background once
//!   the gateway is up and is kept as the last proof (as a reload's).
//! - `refuse-widening`: the proof runs first, bounded by `[prove]
//!   run_timeout_secs` (and `query_timeout_ms` per query). The files' set
//!   starts when the proof passes (equivalent or narrower) or an admin
//!   accepted its exact hash. Otherwise, the reload gate's rule: a set that
//!   widens, or whose proof is not settled (unknown, a limit passed, a
//!   disagreement), is refused. The gateway then starts on the last active
//!   set (its recorded text, without the files' policy tests), records the
//!   refusal as a reload does (the files' text, the `policy_candidates` row
//!   `POST /admin/policies/accept` needs, a `policy_set_refused` event with
//!   the counterexamples), logs it once as an error, and reports the start
//!   as `refused` (`lastError`, `/readyz` stale). When the last active set
//!   itself cannot be loaded again (not recorded, altered, no longer
//!   loads), nothing proved can start: the refusal is recorded and the
//!   gateway refuses to start, unless the files' hash was accepted.

use std::sync::Arc;
use std::time::Duration;

use super::{Attempt, gate, reload};
use crate::config::{Config, ProveMode};
use crate::gateway::Gateway;
use crate::policy::PolicyBundle;
use crate::policy::solver::Solver;
use crate::store::{Store, StoreError, policy_active, policy_candidates};

/// The trigger a start-up's proof and attempt are reported under.
const STARTUP: &str = "startup";

/// Why start-up proving stops the gateway from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartupProofError {
    /// The store could not say which set was active last.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Neither the files' set nor the last active one may start.
    #[error("{0}")]
    Refused(String),
}

/// What start-up notes once the gateway exists ([`Started::note`]).
#[derive(Debug, Default)]
pub struct Started {
    /// Policy tests run for the set started on (none for a recorded set).
    tests_run: usize,
    /// The proof made before the start (`refuse-widening`).
    proof: Option<gate::GateProof>,
    /// The refused start, when the files' set was refused.
    refused: Option<Attempt>,
    /// Under `report`: the last active set the files are proved against.
    report_against: Option<Arc<PolicyBundle>>,
}

/// Chooses the set the gateway starts on: `files` (whose policy tests ran
/// `tests_run`) or the last active set (rules in the module doc).
pub async fn decide(
    config: &Config,
    store: &Store,
    solver: Option<&Solver>,
    files: PolicyBundle,
    tests_run: usize,
) -> Result<(PolicyBundle, Started), StartupProofError> {
    let started = Started {
        tests_run,
        ..Started::default()
    };
    let mode = config.lifecycle.prove;
    let Some(solver) = solver.filter(|_| mode != ProveMode::Off) else {
        return Ok((files, started));
    };
    let Some(last_hash) = last_active(store).await? else {
        return Ok((files, started));
    };
    if last_hash == files.hash {
        return Ok((files, started));
    }
    let last = load_last(store, &last_hash).await?;
    if mode == ProveMode::Report {
        return Ok((files, report(started, last)));
    }
    let setting = gate::Setting {
        solver: Some(solver.clone()),
        run: Duration::from_secs(config.prove.run_timeout_secs),
        mode,
    };
    refuse_widening(store, setting, files, (&last_hash, last), started).await
}

/// The hash of the set last activated on the database; none when the
/// database does not answer yet (said once) or nothing was activated.
async fn last_active(store: &Store) -> Result<Option<String>, StoreError> {
    if !store.is_migrated() {
        tracing::info!(
            "the database does not answer yet: the policy files start without a proof against the last active set"
        );
        return Ok(None);
    }
    store.read(policy_active::last).await
}

/// The recorded set `hash`, or why it cannot be loaded again.
async fn load_last(store: &Store, hash: &str) -> Result<Result<PolicyBundle, String>, StoreError> {
    let h = hash.to_string();
    let loaded = store
        .read(move |c| crate::replay::recorded_bundle(c, &h))
        .await?;
    Ok(loaded.map_err(|e| format!("the last active set does not load again: {e}")))
}

/// Under `report`: the files start; the proof against the last set runs
/// once the gateway is up (or is said not to, once).
fn report(mut started: Started, last: Result<PolicyBundle, String>) -> Started {
    match last {
        Ok(last) => started.report_against = Some(Arc::new(last)),
        Err(why) => {
            tracing::warn!(reason = %why, "the policy files cannot be proved against the last active set at start-up");
        }
    }
    started
}

/// Under `refuse-widening`: proves the files' set against the last active
/// one and starts on the files when the proof passes or their hash was
/// accepted; otherwise records the refusal and starts on the last set.
async fn refuse_widening(
    store: &Store,
    setting: gate::Setting,
    files: PolicyBundle,
    (last_hash, last): (&str, Result<PolicyBundle, String>),
    mut started: Started,
) -> Result<(PolicyBundle, Started), StartupProofError> {
    let files = Arc::new(files);
    let (proof, last) = match last {
        Ok(last) => {
            let last = Arc::new(last);
            let proof = gate::prove(setting, Arc::clone(&last), Arc::clone(&files), STARTUP).await;
            (proof, Some(last))
        }
        Err(why) => (
            gate::not_made(last_hash, &files, (setting.mode, STARTUP), why),
            None,
        ),
    };
    let passes = proof.passes();
    if passes || accepted(store, &files.hash).await {
        if passes {
            tracing::info!(hash = %files.hash, proof = %proof.message, "the policy files are proved against the last active set");
        } else {
            tracing::warn!(hash = %files.hash, proof = %proof.message, "the policy files' proof did not pass; starting on them as an admin accepted them");
        }
        started.proof = Some(proof);
        return Ok((unwrap(files)?, started));
    }
    refuse(store, &files, &proof).await;
    let Some(last) = last else {
        return Err(StartupProofError::Refused(format!(
            "the policy files ({}) are not proved against the last active set {last_hash}: {}; under `[lifecycle] prove = \"refuse-widening\"` nothing unproved starts: restore the files, accept their hash (`POST /admin/policies/accept {{\"hash\":\"{}\"}}` on an instance of this database), or start once with `prove = \"report\"`",
            files.hash, proof.message, files.hash
        )));
    };
    started.refused = Some(refused_attempt(&files, &proof));
    started.tests_run = 0;
    started.proof = Some(proof);
    Ok((unwrap(last)?, started))
}

/// Whether an admin accepted the files' `hash`; a store that cannot answer
/// accepts nothing (as for a reload).
async fn accepted(store: &Store, hash: &str) -> bool {
    let h = hash.to_string();
    match store
        .read(move |c| policy_candidates::is_accepted(c, &h))
        .await
    {
        Ok(accepted) => accepted,
        Err(e) => {
            tracing::warn!(error = %e, candidate = %hash, "cannot read whether the policy files were accepted; they are not");
            false
        }
    }
}

/// Logs the refusal (once, as an error: the files on disk are not what
/// decides) and records it as a reload's is (a failure to record it is
/// logged: the refusal stands).
async fn refuse(store: &Store, files: &PolicyBundle, proof: &gate::GateProof) {
    tracing::error!(
        files = %files.hash,
        active = %proof.live_hash,
        proof = %proof.message,
        "the policy files were refused by their proof at start-up; the last active set decides until `POST /admin/policies/accept {{\"hash\":\"{}\"}}`",
        files.hash
    );
    if let Err(e) = store
        .writer()
        .submit(reload::refusal_ops(files, proof))
        .await
    {
        tracing::error!(error = %e, "cannot record the refused policy files");
    }
}

/// The start-up attempt that refused the files' set.
fn refused_attempt(files: &PolicyBundle, proof: &gate::GateProof) -> Attempt {
    let mut attempt = reload::rejected(STARTUP);
    attempt.result = "refused".into();
    attempt.hash = Some(files.hash.clone());
    attempt.proof = Some(proof.message.clone());
    attempt.message = Some(format!(
        "the policy files were refused by their proof at start-up: {}; the last active set {} decides; to activate the files' set anyway: POST /admin/policies/accept {{\"hash\":\"{}\"}}",
        proof.message, proof.live_hash, files.hash
    ));
    attempt.warnings = files.warnings.clone();
    attempt
}

/// The bundle a finished proof no longer holds.
fn unwrap(bundle: Arc<PolicyBundle>) -> Result<PolicyBundle, StartupProofError> {
    Arc::try_unwrap(bundle)
        .map_err(|_| StartupProofError::Refused("the policy set is still held by its proof".into()))
}

impl Started {
    /// Notes the start in the gateway's lifecycle: the set started on, the
    /// refused start (`lastError`), the proof; under `report`, starts the
    /// proof against the last active set.
    pub fn note(self, gw: &Arc<Gateway>) {
        let active = gw.pep.current();
        tracing::info!(hash = %active.hash, policies = active.policy_ids.len(), tests = self.tests_run, "policy set active");
        gw.lifecycle.started(&active, self.tests_run);
        if let Some(attempt) = &self.refused {
            gw.lifecycle.record(attempt);
        }
        if let Some(proof) = self.proof {
            gw.lifecycle.set_last_proof(proof);
        }
        if let Some(last) = self.report_against {
            reload::report_in_background(gw, last, gw.pep.current(), STARTUP);
        }
    }
}
