//! Shadow mode of a decision application: a candidate folder of the
//! application decides every live evaluation beside its active set and
//! decides nothing; each evaluation where its verdict differs is a
//! divergence, counted and stored as the gateway's own shadow's are
//! (`crate::lifecycle::shadow`, the same state, counters, metrics and
//! table).
//!
//! - **Start, watch, stop**: `PUT /admin/pdp/apps/{app}/shadow
//!   {"policiesDir": DIR}` (DIR laid out as the application's folder:
//!   `schema.cedarschema`, `policies/`; loaded and validated strictly by
//!   the same loader, rules of what it decides on in
//!   `crate::policy::application::candidate`), `GET
//!   /admin/pdp/apps/{app}/shadow` (its counters and newest divergences),
//!   `DELETE` (its final counters). Each application has its own
//!   candidate, independent of the gateway's (`/admin/shadow`) and of the
//!   other applications'. A candidate outlives the application's reloads
//!   (it is compared with whatever set is active) and goes with the
//!   application when its folder is removed.
//! - **What is shadowed**: each evaluation decided (`/evaluation`, and
//!   every evaluation of a batch that was decided; one a short-circuit
//!   semantic left undecided or that failed is not). A search page is not:
//!   it answers a set, not a decision; `cedargate audit replay --app APP
//!   --policies DIR` decides each of its results again under a candidate.
//! - **Divergences** are named like the records (`authzen:<app>:<action>`,
//!   the Cedar uids, the record's id) and labelled so in
//!   `cedargate_shadow_divergences`. They are counted and queued only once
//!   the decisions' records are committed (a decision that was not
//!   recorded is neither counted nor has a divergence), without waiting;
//!   one that finds the queue full is counted as dropped, never slowing
//!   the answer.

use std::path::PathBuf;
use std::sync::Arc;

use super::App;
use crate::audit::Decided;
use crate::lifecycle::shadow::{Candidate, Live, ShadowStatus, Shadowed};
use crate::policy::application::candidate::CandidateSet;
use crate::policy::application::{AppSet, Prepared};
use crate::policy::{PolicyBundle, PolicyLoadError};
use crate::store::shadow::Divergence;

impl Shadowed for CandidateSet {
    fn bundle(&self) -> &PolicyBundle {
        &self.bundle
    }
}

/// Loads the candidate folder `dir` of `app` and starts shadowing it
/// (replacing any candidate it had).
pub async fn start(app: &Arc<App>, dir: PathBuf) -> Result<ShadowStatus, PolicyLoadError> {
    let name = app.name.clone();
    let loading = dir.clone();
    let loaded = tokio::task::spawn_blocking(move || CandidateSet::load(&name, &loading))
        .await
        .map_err(|e| {
            PolicyLoadError::single(
                &dir.display().to_string(),
                format!("loading task failed: {e}"),
            )
        })??;
    let status = app.shadow.start_set(&dir, loaded);
    tracing::info!(app = %app.name, "decision application shadow candidate started");
    Ok(status)
}

/// The candidate's judgement of decisions whose records are not
/// committed yet: counted (and its divergences queued) only once they are.
#[derive(Debug)]
pub struct Pending {
    candidate: Arc<Candidate<CandidateSet>>,
    evaluated: u64,
    divergences: Vec<Divergence>,
}

/// Decides each decided evaluation under `app`'s candidate, if it has one:
/// its judgement, to [`store`] once the records are committed.
pub fn compare<'a, 's: 'a>(
    app: &App,
    set: &AppSet,
    decided: impl IntoIterator<Item = (&'a Prepared<'s>, &'a Decided)>,
) -> Option<Pending> {
    let candidate = app.shadow.candidate()?;
    let (mut evaluated, mut divergences) = (0, Vec::new());
    for (prepared, d) in decided {
        evaluated += 1;
        let verdict = candidate.set.decide(set, prepared);
        let live = Live {
            decision_id: &d.record.id,
            action: &d.record.action,
            principal: &d.record.principal,
            resource: &d.record.resource,
            hash: &d.record.policy_hash,
            verdict: &d.verdict,
        };
        divergences.extend(app.shadow.judge(&candidate, &live, verdict));
    }
    Some(Pending {
        candidate,
        evaluated,
        divergences,
    })
}

/// Counts the judgement of committed decisions and queues its
/// divergences (without waiting).
pub fn store(app: &App, pending: Option<Pending>) {
    if let Some(p) = pending {
        app.shadow.count(&p.candidate, p.evaluated, p.divergences);
    }
}
