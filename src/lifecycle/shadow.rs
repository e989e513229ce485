//! Shadow mode: a candidate policy set evaluated beside the active set on
//! every live decision. It decides nothing; each decision where the
//! candidate's verdict differs is counted and stored with both sides'
//! reasons (`shadow_divergences`), for `GET /admin/shadow`.
//!
//! The candidate sees exactly the live request: the same principal,
//! action, resource, context and entity data (re-parsed against the
//! candidate's schema when it differs from the active one).
//!
//! [`Shadow`] is the state of one shadowed set, whatever it shadows: the
//! gateway's own set (`Shadow<PolicyBundle>`, fed by the PEP's observer,
//! [`Shadow::observe`]) or a decision application's (`crate::pdp::shadow`,
//! its own candidate type). Both judge, count, label and store their
//! divergences the same way ([`Shadow::judge`], [`Shadow::count`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwapOption;
use serde::Serialize;

use crate::metrics::{FlipLabels, Metrics};
use crate::policy::recorded::RecordedRequest;
use crate::policy::schema_gen::ToolSchema;
use crate::policy::{Observed, PolicyBundle, Verdict};
use crate::store::shadow::Divergence;
use crate::store::{WriteOp, Writer};

/// A set that can be shadowed: what its status and divergences name.
pub trait Shadowed: Send + Sync + std::fmt::Debug {
    /// Its policies (hash, policy ids).
    fn bundle(&self) -> &PolicyBundle;
}

impl Shadowed for PolicyBundle {
    fn bundle(&self) -> &PolicyBundle {
        self
    }
}

/// The candidate being shadowed.
#[derive(Debug)]
pub struct Candidate<C = PolicyBundle> {
    /// Its directory.
    pub dir: PathBuf,
    /// The loaded, validated set.
    pub set: C,
    /// When shadowing started.
    pub since: String,
    /// Decisions it evaluated.
    pub evaluated: AtomicU64,
    /// Allow → deny divergences.
    pub allow_to_deny: AtomicU64,
    /// Deny → allow divergences.
    pub deny_to_allow: AtomicU64,
    /// Divergences not stored (queue full).
    pub dropped: AtomicU64,
}

/// Counters of the current candidate.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowStatus {
    /// Candidate directory.
    pub policies_dir: String,
    /// Candidate hash.
    pub candidate_hash: String,
    /// Its policy ids.
    pub policy_ids: Vec<String>,
    /// When shadowing started.
    pub since: String,
    /// Decisions evaluated.
    pub evaluated: u64,
    /// All divergences.
    pub divergences: u64,
    /// Live allow, candidate deny.
    pub allow_to_deny: u64,
    /// Live deny, candidate allow.
    pub deny_to_allow: u64,
    /// Divergences counted but not stored.
    pub dropped: u64,
}

/// One live decision, as a divergence names it.
#[derive(Clone, Copy)]
pub struct Live<'a> {
    /// The decision record's id.
    pub decision_id: &'a str,
    /// The action (as the metrics and the divergence name it).
    pub action: &'a str,
    /// The principal.
    pub principal: &'a dyn std::fmt::Display,
    /// The resource.
    pub resource: &'a dyn std::fmt::Display,
    /// The active set's hash.
    pub hash: &'a str,
    /// The live verdict.
    pub verdict: &'a Verdict,
}

impl std::fmt::Debug for Live<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("decision_id", &self.decision_id)
            .field("action", &self.action)
            .field("principal", &self.principal.to_string())
            .field("resource", &self.resource.to_string())
            .finish_non_exhaustive()
    }
}

/// Shadow-mode state.
#[derive(Debug)]
pub struct Shadow<C = PolicyBundle> {
    candidate: ArcSwapOption<Candidate<C>>,
    metrics: Arc<Metrics>,
    writer: Writer,
}

impl<C: Shadowed> Shadow<C> {
    /// No candidate yet.
    pub fn new(metrics: Arc<Metrics>, writer: Writer) -> Shadow<C> {
        Shadow {
            candidate: ArcSwapOption::empty(),
            metrics,
            writer,
        }
    }

    /// Starts shadowing `set`, loaded from `dir` (replacing any previous
    /// candidate).
    pub fn start_set(&self, dir: &Path, set: C) -> ShadowStatus {
        let candidate = Arc::new(Candidate {
            dir: dir.to_path_buf(),
            set,
            since: crate::ids::now_rfc3339(),
            evaluated: AtomicU64::new(0),
            allow_to_deny: AtomicU64::new(0),
            deny_to_allow: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        });
        let status = status_of(&candidate);
        self.candidate.store(Some(candidate));
        tracing::info!(dir = %dir.display(), hash = %status.candidate_hash, "shadow evaluation started");
        status
    }

    /// Stops shadowing; returns the final counters.
    pub fn stop(&self) -> Option<ShadowStatus> {
        self.candidate.swap(None).map(|c| status_of(&c))
    }

    /// Whether a candidate is being shadowed.
    pub fn is_active(&self) -> bool {
        self.candidate.load().is_some()
    }

    /// The candidate being shadowed, if any.
    pub fn candidate(&self) -> Option<Arc<Candidate<C>>> {
        self.candidate.load_full()
    }

    /// The current candidate's counters.
    pub fn status(&self) -> Option<ShadowStatus> {
        self.candidate.load_full().map(|c| status_of(&c))
    }

    /// The divergence of the candidate's `verdict` from one live
    /// decision, if they differ (nothing is counted yet: [`Shadow::count`]).
    pub fn judge(
        &self,
        candidate: &Candidate<C>,
        live: &Live<'_>,
        verdict: Verdict,
    ) -> Option<Divergence> {
        if verdict.allowed == live.verdict.allowed {
            return None;
        }
        Some(Divergence {
            decision_id: live.decision_id.to_string(),
            time: crate::ids::now_rfc3339(),
            action: live.action.to_string(),
            principal: live.principal.to_string(),
            resource: live.resource.to_string(),
            live_hash: live.hash.to_string(),
            live_decision: decision(live.verdict),
            live_reasons: live.verdict.reasons.clone(),
            live_errors: live.verdict.errors.clone(),
            candidate_dir: candidate.dir.display().to_string(),
            candidate_hash: candidate.set.bundle().hash.clone(),
            candidate_decision: decision(&verdict),
            candidate_reasons: verdict.reasons,
            candidate_errors: verdict.errors,
        })
    }

    /// Counts `evaluated` live decisions the candidate decided and their
    /// `divergences` (by action and direction), and queues the divergences
    /// for storage without waiting; those that find the queue full are
    /// counted as dropped.
    pub fn count(&self, candidate: &Candidate<C>, evaluated: u64, divergences: Vec<Divergence>) {
        candidate.evaluated.fetch_add(evaluated, Ordering::Relaxed);
        self.metrics.shadow_decisions.inc_by(evaluated);
        if divergences.is_empty() {
            return;
        }
        for d in &divergences {
            let flip = if d.live_decision == "allow" {
                candidate.allow_to_deny.fetch_add(1, Ordering::Relaxed);
                "allow_to_deny"
            } else {
                candidate.deny_to_allow.fetch_add(1, Ordering::Relaxed);
                "deny_to_allow"
            };
            self.metrics
                .shadow_divergences
                .get_or_create(&FlipLabels {
                    action: d.action.clone(),
                    flip: flip.to_string(),
                })
                .inc();
        }
        let n = divergences.len() as u64;
        let ops = divergences
            .into_iter()
            .map(|d| WriteOp::ShadowDivergence(Box::new(d)))
            .collect();
        if !self.writer.try_enqueue(ops) {
            candidate.dropped.fetch_add(n, Ordering::Relaxed);
            self.metrics.shadow_dropped.inc_by(n);
        }
    }
}

impl Shadow {
    /// Loads and strictly validates `dir` against the schema and starts
    /// shadowing it (replacing any previous candidate).
    pub fn start(
        &self,
        schema_file: &Path,
        dir: &Path,
        tools: &[ToolSchema],
    ) -> Result<ShadowStatus, crate::policy::PolicyLoadError> {
        let bundle = crate::policy::load::load_bundle_with_tools(schema_file, dir, tools)?;
        Ok(self.start_set(dir, bundle))
    }

    /// Evaluates one live decision of the gateway under the candidate.
    pub fn observe(&self, d: &Observed<'_>) {
        let Some(candidate) = self.candidate.load_full() else {
            return;
        };
        let verdict = evaluate(&candidate.set, d);
        let live = Live {
            decision_id: d.decision_id,
            action: d.action.name(),
            principal: d.principal,
            resource: d.resource,
            hash: &d.bundle.hash,
            verdict: d.verdict,
        };
        let divergence = self.judge(&candidate, &live, verdict);
        self.count(&candidate, 1, divergence.into_iter().collect());
    }
}

fn decision(v: &Verdict) -> String {
    if v.allowed { "allow" } else { "deny" }.to_string()
}

/// The candidate's verdict on the live request.
fn evaluate(candidate: &PolicyBundle, d: &Observed<'_>) -> Verdict {
    if candidate.schema_hash == d.bundle.schema_hash {
        return candidate.decide(d.principal, d.action, d.resource, d.context, d.entities);
    }
    let Some(json) = d.entities_json else {
        return Verdict {
            allowed: false,
            reasons: Vec::new(),
            errors: vec![
                "the decision's entities cannot be rebuilt for the candidate's schema".into(),
            ],
            advice: Vec::new(),
        };
    };
    let entities = match candidate.parse_snapshot(json) {
        Ok(e) => e,
        Err(e) => {
            return Verdict {
                allowed: false,
                reasons: Vec::new(),
                errors: vec![format!("cannot build entities: {e}")],
                advice: Vec::new(),
            };
        }
    };
    let req = RecordedRequest {
        principal: d.principal.clone(),
        action: d.action,
        resource: d.resource.clone(),
        context: d.context.json().clone(),
    };
    candidate.decide_recorded(&req, &entities)
}

fn status_of<C: Shadowed>(c: &Candidate<C>) -> ShadowStatus {
    let a2d = c.allow_to_deny.load(Ordering::Relaxed);
    let d2a = c.deny_to_allow.load(Ordering::Relaxed);
    ShadowStatus {
        policies_dir: c.dir.display().to_string(),
        candidate_hash: c.set.bundle().hash.clone(),
        policy_ids: c.set.bundle().policy_ids.clone(),
        since: c.since.clone(),
        evaluated: c.evaluated.load(Ordering::Relaxed),
        divergences: a2d + d2a,
        allow_to_deny: a2d,
        deny_to_allow: d2a,
        dropped: c.dropped.load(Ordering::Relaxed),
    }
}
