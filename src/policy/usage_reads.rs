//! Which actions' policies read `context.usage`, the caller's recent
//! usage, so the gateway counts calls and attaches the counts only where a
//! policy can see them: a set that never reads `context.usage` pays
//! nothing for it.
//!
//! A policy reads the usage when its EST holds `context` other than as the
//! receiver of `.session`, `.time`, `.args` or `.agent` (`create_session`'s),
//! or of `has` on them: so `context.usage.callsLastMinute`,
//! `context has usage`, and any use of `context` as a whole. A policy that cannot be read counts as reading it.
//! The same policies already count as reading more than `context.session`
//! for the session-verdict reuse, so their verdicts are never reused.

use std::collections::HashSet;

use cedar_policy::{EntityUid, Policy, PolicyId, PolicySet};
use serde_json::Value;

use super::Uid;
use super::action_slices::ActionSlices;

/// Context attributes that are not the usage.
const OTHER_ATTRS: [&str; 4] = ["session", "time", "args", "agent"];

/// The actions whose policies can read `context.usage`.
#[derive(Debug, Clone, Default)]
pub struct UsageReaders {
    /// Actions whose slice reads it.
    actions: HashSet<EntityUid>,
    /// Some policy of the set reads it.
    any: bool,
    /// The set could not be sliced: every action decides with all of it.
    unsliced: bool,
}

impl UsageReaders {
    /// Reads each policy of the set once, then marks every action whose
    /// slice holds one that reads the usage.
    pub fn of(slices: &ActionSlices, policies: &PolicySet) -> Self {
        let readers: HashSet<&PolicyId> = policies
            .policies()
            .filter(|p| reads_usage(p))
            .map(|p| p.id())
            .collect();
        let actions: HashSet<EntityUid> = slices
            .iter()
            .filter(|(_, slice)| slice.policies().any(|p| readers.contains(p.id())))
            .map(|(action, _)| action.clone())
            .collect();
        UsageReaders {
            actions,
            any: !readers.is_empty(),
            unsliced: slices.iter().next().is_none(),
        }
    }

    /// Whether any policy reads the usage: only then are calls counted.
    pub fn any(&self) -> bool {
        self.any
    }

    /// Whether a policy that can apply to `action` reads the usage.
    pub fn reads(&self, action: &Uid) -> bool {
        self.actions.contains(&action.0) || (self.unsliced && self.any)
    }
}

/// Whether `policy` reads `context.usage` (or cannot be read).
fn reads_usage(policy: &Policy) -> bool {
    match policy.to_json() {
        Ok(est) => reads_context_usage(&est),
        Err(_) => true,
    }
}

/// Finds a `context` variable that is not the receiver of `.session`,
/// `.time`, `.args` or of `has` on one of them.
fn reads_context_usage(est: &Value) -> bool {
    match est {
        Value::Object(map) => {
            if map.get("Var").and_then(Value::as_str) == Some("context") {
                return true;
            }
            for op in [".", "has"] {
                if let Some(Value::Object(access)) = map.get(op)
                    && is_context(access.get("left"))
                {
                    let attr = access.get("attr").and_then(Value::as_str);
                    return !attr.is_some_and(|a| OTHER_ATTRS.contains(&a));
                }
            }
            map.values().any(reads_context_usage)
        }
        Value::Array(items) => items.iter().any(reads_context_usage),
        _ => false,
    }
}

fn is_context(e: Option<&Value>) -> bool {
    e.and_then(|l| l.get("Var")).and_then(Value::as_str) == Some("context")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(src: &str) -> bool {
        let set: PolicySet = src.parse().unwrap();
        set.policies().any(reads_usage)
    }

    #[test]
    fn only_policies_that_can_see_the_usage_read_it() {
        assert!(reads(
            "forbid (principal, action, resource) when { context.usage.callsLastMinute > 5 };"
        ));
        assert!(reads(
            "forbid (principal, action, resource) when { context has usage && context.usage.orgCallsLastMinute > 5 };"
        ));
        assert!(reads(
            "permit (principal, action, resource) when { context == {} };"
        ));
        assert!(!reads(
            "permit (principal, action, resource) when { context.session.org == principal.org };"
        ));
        assert!(!reads(
            "permit (principal, action, resource) when { context has args && context.args.n < 3 && context.time > datetime(\"2024-01-01\") };"
        ));
        assert!(!reads("permit (principal, action, resource);"));
    }
}
