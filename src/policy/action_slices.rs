//! The policies that can apply to each action, so a decision evaluates only
//! those: Cedar evaluates every policy of the set it is handed, and most of
//! a set is written for other actions.
//!
//! A policy whose action scope cannot match the request's action is never
//! satisfied and never errors (scope constraints are evaluated before the
//! conditions, and a false one short-circuits them), so leaving it out
//! changes neither the decision, nor the determining policies, nor the
//! errors. A policy scoped `action` (any) or conditioning on `action` only
//! in its `when` is kept for every action.

use std::collections::{HashMap, HashSet};

use cedar_policy::{ActionConstraint, EntityUid, PolicySet, Schema};

/// Why the policies could not be sliced by action (displays as Cedar's
/// own message).
#[derive(Debug, thiserror::Error)]
enum SliceError {
    /// The schema's action entities could not be built.
    #[error(transparent)]
    Actions(Box<cedar_policy::entities_errors::EntitiesError>),
    /// A policy or template could not be added to a slice.
    #[error(transparent)]
    PolicySet(Box<cedar_policy::PolicySetError>),
}

impl From<cedar_policy::PolicySetError> for SliceError {
    fn from(e: cedar_policy::PolicySetError) -> Self {
        SliceError::PolicySet(Box::new(e))
    }
}

/// One policy subset per action of the schema.
#[derive(Debug, Default)]
pub struct ActionSlices {
    by_action: HashMap<EntityUid, PolicySet>,
}

impl ActionSlices {
    /// Slices `policies` by every action `schema` declares. A set that
    /// cannot be sliced (it should not happen) gives no slices, and every
    /// decision then evaluates the whole set.
    pub fn build(schema: &Schema, policies: &PolicySet) -> Self {
        Self::try_build(schema, policies).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "policies not sliced by action; every decision evaluates the whole set");
            ActionSlices::default()
        })
    }

    fn try_build(schema: &Schema, policies: &PolicySet) -> Result<Self, SliceError> {
        let actions = schema
            .action_entities()
            .map_err(|e| SliceError::Actions(Box::new(e)))?;
        let mut by_action = HashMap::new();
        for action in schema.actions() {
            let mut lineage: HashSet<&EntityUid> = actions
                .ancestors(action)
                .map(Iterator::collect)
                .unwrap_or_default();
            lineage.insert(action);
            let mut slice = PolicySet::new();
            for t in policies.templates() {
                slice.add_template(t.clone())?;
            }
            for p in policies.policies() {
                let applies = match p.action_constraint() {
                    ActionConstraint::Any => true,
                    ActionConstraint::Eq(a) => a == *action,
                    ActionConstraint::In(list) => list.iter().any(|a| lineage.contains(a)),
                };
                if !applies {
                    continue;
                }
                match (p.template_id(), p.template_links()) {
                    (Some(template), Some(links)) => {
                        slice.link(template.clone(), p.id().clone(), links)?
                    }
                    _ => slice.add(p.clone())?,
                }
            }
            by_action.insert(action.clone(), slice);
        }
        Ok(ActionSlices { by_action })
    }

    /// The policies that can apply to `action` (`None`: use the whole set).
    pub fn get(&self, action: &EntityUid) -> Option<&PolicySet> {
        self.by_action.get(action)
    }

    /// Every action with its slice.
    pub fn iter(&self) -> impl Iterator<Item = (&EntityUid, &PolicySet)> {
        self.by_action.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Action;

    const SCHEMA: &str = include_str!("../../schemas/gateway.cedarschema");

    fn ids(set: &PolicySet) -> Vec<String> {
        let mut v: Vec<String> = set.policies().map(|p| p.id().to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn each_action_gets_the_policies_its_scope_can_match() {
        let schema = SCHEMA.replace(
            "  action read_node appliesTo",
            "  action \"af_memory_remember\" in [call_tool] appliesTo {\n    principal: [Agent],\n    resource: [Tool],\n    context: SessionContext,\n  };\n\n  action read_node appliesTo",
        );
        assert_ne!(schema, SCHEMA, "the test must add a typed action");
        let (schema, _) = Schema::from_cedarschema_str(&schema).unwrap();
        let mut set: PolicySet = r#"
            permit (principal, action, resource);
            permit (principal, action == Gateway::Action::"read_node", resource);
            permit (principal, action in [Gateway::Action::"call_tool", Gateway::Action::"view_tool"], resource);
            permit (principal, action == Gateway::Action::"af_memory_remember", resource);
            permit (principal, action in Gateway::Action::"a2a_invoke", resource == ?resource);
            "#
        .parse()
        .unwrap();
        let template = set.templates().next().unwrap().id().clone();
        set.link(
            template,
            cedar_policy::PolicyId::new("linked"),
            HashMap::from([(
                cedar_policy::SlotId::resource(),
                crate::policy::Kind::Tool.uid("peer.skill").0,
            )]),
        )
        .unwrap();
        let slices = ActionSlices::build(&schema, &set);
        let of = |a: &crate::policy::Uid| ids(slices.get(&a.0).unwrap());
        assert_eq!(of(&Action::ReadNode.uid()), vec!["policy0", "policy1"]);
        assert_eq!(of(&Action::CallTool.uid()), vec!["policy0", "policy2"]);
        assert_eq!(
            of(&Action::uid_of("af_memory_remember")),
            vec!["policy0", "policy2", "policy3"]
        );
        assert_eq!(of(&Action::A2aInvoke.uid()), vec!["linked", "policy0"]);
        assert_eq!(of(&Action::AccessSession.uid()), vec!["policy0"]);
    }
}
