//! Which policies two sets add, remove or change, by `@id`: the part of a
//! policy diff that needs no solver. A policy is changed when its parsed
//! form (Cedar's JSON syntax, annotations included) differs, so layout
//! and comments are not changes.

use serde::Serialize;

use super::PolicyBundle;

/// The policies `candidate` adds, removes and changes, each list sorted.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PolicyChanges {
    /// Ids only the candidate has.
    pub added: Vec<String>,
    /// Ids only the live set has.
    pub removed: Vec<String>,
    /// Ids both have, with different policies.
    pub changed: Vec<String>,
}

impl PolicyChanges {
    /// Whether the two sets hold the same policies.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// What `candidate` changes in `live`.
pub fn changes(live: &PolicyBundle, candidate: &PolicyBundle) -> PolicyChanges {
    let mut out = PolicyChanges::default();
    for id in &candidate.policy_ids {
        let policy_id = cedar_policy::PolicyId::new(id);
        match (
            live.policies.policy(&policy_id),
            candidate.policies.policy(&policy_id),
        ) {
            (None, _) => out.added.push(id.clone()),
            (Some(old), Some(new)) if form(old) != form(new) => out.changed.push(id.clone()),
            _ => {}
        }
    }
    out.removed = live
        .policy_ids
        .iter()
        .filter(|id| !candidate.policy_ids.contains(id))
        .cloned()
        .collect();
    out
}

/// A policy's parsed form (its text when it has no JSON form).
fn form(policy: &cedar_policy::Policy) -> String {
    policy
        .to_json()
        .map(|v| v.to_string())
        .unwrap_or_else(|_| policy.to_string())
}
