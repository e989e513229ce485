//! Shadow mode: a candidate policy directory evaluated beside the active
//! set on every live decision. It decides nothing; each decision where the
//! candidate's verdict differs is counted and stored with both sides'
//! reasons (`shadow_divergences`), for `GET /admin/shadow`.
//!
//! The candidate sees exactly the live request: the same principal,
//! action, resource, context and entity data (re-parsed against the
//! candidate's schema when it differs from the active one).

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

/// The candidate being shadowed.
#[derive(Debug)]
pub struct Candidate {
    /// Its directory.
    pub dir: PathBuf,
    /// The loaded, validated set.
    pub bundle: PolicyBundle,
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

/// Shadow-mode state.
#[derive(Debug)]
pub struct Shadow {
    candidate: ArcSwapOption<Candidate>,
    metrics: Arc<Metrics>,
    writer: Writer,
}

impl Shadow {
    /// No candidate yet.
    pub fn new(metrics: Arc<Metrics>, writer: Writer) -> Shadow {
        Shadow {
            candidate: ArcSwapOption::empty(),
            metrics,
            writer,
        }
    }

    /// Loads and strictly validates `dir` against the schema and starts
    /// shadowing it (replacing any previous candidate).
    pub fn start(
        &self,
        schema_file: &Path,
        dir: &Path,
        tools: &[ToolSchema],
    ) -> Result<ShadowStatus, crate::policy::PolicyLoadError> {
        let bundle = crate::policy::load::load_bundle_with_tools(schema_file, dir, tools)?;
        let candidate = Arc::new(Candidate {
            dir: dir.to_path_buf(),
            bundle,
            since: crate::ids::now_rfc3339(),
            evaluated: AtomicU64::new(0),
            allow_to_deny: AtomicU64::new(0),
            deny_to_allow: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        });
        let status = status_of(&candidate);
        self.candidate.store(Some(candidate));
        tracing::info!(dir = %dir.display(), hash = %status.candidate_hash, "shadow evaluation started");
        Ok(status)
    }

    /// Stops shadowing; returns the final counters.
    pub fn stop(&self) -> Option<ShadowStatus> {
        self.candidate.swap(None).map(|c| status_of(&c))
    }

    /// Whether a candidate is being shadowed.
    pub fn is_active(&self) -> bool {
        self.candidate.load().is_some()
    }

    /// The current candidate's counters.
    pub fn status(&self) -> Option<ShadowStatus> {
        self.candidate.load_full().map(|c| status_of(&c))
    }

    /// Evaluates one live decision under the candidate.
    pub fn observe(&self, d: &Observed<'_>) {
        let Some(candidate) = self.candidate.load_full() else {
            return;
        };
        let verdict = evaluate(&candidate.bundle, d);
        candidate.evaluated.fetch_add(1, Ordering::Relaxed);
        self.metrics.shadow_decisions.inc();
        if verdict.allowed == d.verdict.allowed {
            return;
        }
        let flip = if d.verdict.allowed {
            candidate.allow_to_deny.fetch_add(1, Ordering::Relaxed);
            "allow_to_deny"
        } else {
            candidate.deny_to_allow.fetch_add(1, Ordering::Relaxed);
            "deny_to_allow"
        };
        self.metrics
            .shadow_divergences
            .get_or_create(&FlipLabels {
                action: d.action.name().to_string(),
                flip: flip.to_string(),
            })
            .inc();
        let divergence = Divergence {
            decision_id: d.decision_id.to_string(),
            time: crate::ids::now_rfc3339(),
            action: d.action.name().to_string(),
            principal: d.principal.to_string(),
            resource: d.resource.to_string(),
            live_hash: d.bundle.hash.clone(),
            live_decision: decision(d.verdict),
            live_reasons: d.verdict.reasons.clone(),
            live_errors: d.verdict.errors.clone(),
            candidate_dir: candidate.dir.display().to_string(),
            candidate_hash: candidate.bundle.hash.clone(),
            candidate_decision: decision(&verdict),
            candidate_reasons: verdict.reasons,
            candidate_errors: verdict.errors,
        };
        if !self
            .writer
            .try_enqueue(vec![WriteOp::ShadowDivergence(Box::new(divergence))])
        {
            candidate.dropped.fetch_add(1, Ordering::Relaxed);
            self.metrics.shadow_dropped.inc();
        }
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

fn status_of(c: &Candidate) -> ShadowStatus {
    let a2d = c.allow_to_deny.load(Ordering::Relaxed);
    let d2a = c.deny_to_allow.load(Ordering::Relaxed);
    ShadowStatus {
        policies_dir: c.dir.display().to_string(),
        candidate_hash: c.bundle.hash.clone(),
        policy_ids: c.bundle.policy_ids.clone(),
        since: c.since.clone(),
        evaluated: c.evaluated.load(Ordering::Relaxed),
        divergences: a2d + d2a,
        allow_to_deny: a2d,
        deny_to_allow: d2a,
        dropped: c.dropped.load(Ordering::Relaxed),
    }
}
