//! The decision trail: every Cedar decision becomes one record carrying
//! what is needed to re-run it exactly (request, context, entity slice hash,
//! policy-set hash) and what it led to (the outcome of the work it allowed).
//!
//! **Architecture Invariant:** a decision is made only through [`decide`],
//! so no code path can authorize without producing a record.

pub mod export;

use cedar_policy::EntityUid;
use serde_json::Value;

use crate::policy::entities::EntitySlice;
use crate::policy::{Action, PolicyBundle, PreparedContext, Verdict};
use crate::store::decisions::NewDecision;

/// A decision made, with its record waiting for an outcome.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The verdict.
    pub verdict: Verdict,
    /// The record (outcome still `null`).
    pub record: NewDecision,
}

impl Decided {
    /// Whether the request may proceed.
    pub fn allowed(&self) -> bool {
        self.verdict.allowed
    }

    /// The decision id (UUIDv7).
    pub fn id(&self) -> &str {
        &self.record.id
    }

    /// The record with its outcome filled in.
    pub fn finish(mut self, outcome: Value) -> NewDecision {
        self.record.outcome = outcome.to_string();
        self.record
    }

    /// The record with the default outcome for its verdict: `allowed` (the
    /// request went on) or `denied` (nothing ran).
    pub fn finish_default(self) -> NewDecision {
        let outcome = if self.verdict.allowed {
            serde_json::json!({ "status": "allowed" })
        } else {
            serde_json::json!({ "status": "denied" })
        };
        self.finish(outcome)
    }
}

/// Who a decision is about, for the record's indexing columns.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The org.
    pub org_id: Option<&'a str>,
    /// The session.
    pub session_id: Option<&'a str>,
}

/// Decides one request and prepares its record.
#[expect(
    clippy::too_many_arguments,
    reason = "each argument is one field of the record"
)]
pub fn decide(
    bundle: &PolicyBundle,
    slice: &EntitySlice,
    principal: &EntityUid,
    action: Action,
    resource: &EntityUid,
    context: &PreparedContext,
    scope: Scope<'_>,
    time: &str,
) -> Decided {
    let started = std::time::Instant::now();
    let verdict = if slice.schema_hash == bundle.schema_hash {
        bundle.decide(principal, action, resource, context, &slice.entities)
    } else {
        // A slice built against another schema may not conform: fail closed.
        Verdict {
            allowed: false,
            reasons: Vec::new(),
            errors: vec!["entity slice was built for a different schema".into()],
            advice: Vec::new(),
        }
    };
    let record = NewDecision {
        id: uuid::Uuid::now_v7().to_string(),
        time: time.to_string(),
        org_id: scope.org_id.map(str::to_string),
        session_id: scope.session_id.map(str::to_string),
        principal: principal.to_string(),
        action: action.name().to_string(),
        resource: resource.to_string(),
        context: context.text.clone(),
        entities_hash: slice.hash.clone(),
        entities: Some(slice.json.clone()),
        policy_hash: bundle.hash.clone(),
        decision: if verdict.allowed { "allow" } else { "deny" }.to_string(),
        reasons: Value::from(verdict.reasons.clone()).to_string(),
        errors: Value::from(verdict.errors.clone()).to_string(),
        outcome: "null".to_string(),
        notes: "null".to_string(),
    };
    if let Some(observer) = bundle.hooks.observer() {
        observer.observe(&crate::policy::Observed {
            bundle,
            slice,
            principal,
            action,
            resource,
            context,
            verdict: &verdict,
            decision_id: &record.id,
            elapsed: started.elapsed(),
        });
    }
    Decided { verdict, record }
}

/// One line per record for `cedargate audit tail`.
pub fn format_line(d: &crate::store::decisions::StoredDecision) -> String {
    format!(
        "#{seq} {time} {decision:<5} {action} {principal} -> {resource} reasons={reasons} outcome={outcome} id={id}",
        seq = d.seq,
        time = d.record.time,
        decision = d.record.decision,
        action = d.record.action,
        principal = d.record.principal,
        resource = d.record.resource,
        reasons = d.record.reasons,
        outcome = d.record.outcome,
        id = d.record.id,
    )
}
