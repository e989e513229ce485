//! A request the solver produced (a counterexample, a witness), as plain
//! JSON anyone can read and replay, and decided again by the real
//! authorizer under each policy set it is about.
//!
//! The solver's answer is a claim about Cedar's semantics; the decision
//! here is Cedar's own `Authorizer` on the whole set, beside the
//! gateway's verdict ([`PolicyBundle::decide_request`]: the action's
//! slice, and a `forbid` that errors denies). A witness whose Cedar
//! decision is not what the solver claimed is a bug in one of them, and
//! callers say so loudly rather than trust either.

use cedar_policy::{Authorizer, Decision};
use cedar_policy_symcc::Env;
use serde::Serialize;

use super::PolicyBundle;

/// A request and the entities it is decided with.
#[derive(Debug, Clone, Serialize)]
pub struct Witness {
    /// The principal's uid, e.g. `Gateway::Agent::"a"`.
    pub principal: String,
    /// The action's uid.
    pub action: String,
    /// The resource's uid.
    pub resource: String,
    /// The context, as Cedar JSON.
    pub context: serde_json::Value,
    /// The entities (action entities left out), as Cedar JSON.
    pub entities: serde_json::Value,
    /// The request decided again under each set it is about.
    pub decisions: Vec<Redecided>,
}

/// One set's decision of a witness.
#[derive(Debug, Clone, Serialize)]
pub struct Redecided {
    /// Which set (`live`, `candidate`, …).
    pub set: String,
    /// Cedar's decision on the whole set (what the solver reasons about).
    pub allows: bool,
    /// The gateway's verdict (an erroring `forbid` denies).
    pub gateway_allows: bool,
    /// The determining policies.
    pub reasons: Vec<String>,
    /// The evaluation errors.
    pub errors: Vec<String>,
}

impl Witness {
    /// The witness of `env`, decided under each of `sets`.
    pub(crate) fn of(env: &Env, sets: &[(&str, &PolicyBundle)]) -> Self {
        let uid =
            |u: Option<&cedar_policy::EntityUid>| u.map(ToString::to_string).unwrap_or_default();
        let context = env
            .request
            .context()
            .and_then(|c| c.to_json_value().ok())
            .unwrap_or(serde_json::Value::Null);
        Witness {
            principal: uid(env.request.principal()),
            action: uid(env.request.action()),
            resource: uid(env.request.resource()),
            context,
            entities: entities_json(env),
            decisions: sets
                .iter()
                .map(|(name, bundle)| redecide(name, bundle, env))
                .collect(),
        }
    }

    /// Cedar's decision under `set`, if it was decided there.
    pub fn allows(&self, set: &str) -> Option<bool> {
        self.decisions
            .iter()
            .find(|d| d.set == set)
            .map(|d| d.allows)
    }
}

/// The entities of a witness without the action entities (the schema's,
/// the same in every witness), by uid.
fn entities_json(env: &Env) -> serde_json::Value {
    let Ok(serde_json::Value::Array(all)) = env.entities.to_json_value() else {
        return serde_json::Value::Array(Vec::new());
    };
    let is_action = |e: &serde_json::Value| {
        e.pointer("/uid/type")
            .and_then(serde_json::Value::as_str)
            .is_some_and(|t| t == "Action" || t.ends_with("::Action"))
    };
    let mut kept: Vec<serde_json::Value> = all.into_iter().filter(|e| !is_action(e)).collect();
    // Cedar's entity store has no order: sort by uid so a witness prints
    // the same way every time.
    kept.sort_by_key(|e| {
        let part = |key: &str| e.pointer(key).map(ToString::to_string).unwrap_or_default();
        (part("/uid/type"), part("/uid/id"))
    });
    serde_json::Value::Array(kept)
}

/// `env` decided by Cedar's authorizer on the whole set, and by the
/// gateway's verdict.
fn redecide(set: &str, bundle: &PolicyBundle, env: &Env) -> Redecided {
    let cedar = Authorizer::new().is_authorized(&env.request, &bundle.policies, &env.entities);
    let verdict = bundle.decide_request(&env.request, &env.entities);
    Redecided {
        set: set.to_string(),
        allows: cedar.decision() == Decision::Allow,
        gateway_allows: verdict.allowed,
        reasons: verdict.reasons,
        errors: verdict.errors,
    }
}
