//! What the gateway guarantees about the requests it decides, written as
//! `forbid` policies a proof reads both sets with: a request the gateway
//! never makes is denied by both, so it can neither tell two sets apart
//! nor be shown as a counterexample.
//!
//! The facts are about typed tools ([`super::schema_gen`]): a tool with a
//! typed action is decided only under that action, and that action only on
//! that tool (`PolicyBundle::deciding_action`); a typed action the schema
//! marks dropped decides nothing (its tools are decided under their group
//! action).

use std::collections::HashSet;

use cedar_policy::{Policy, PolicyId, RequestEnv};

use super::PolicyBundle;
use super::prover::Unproved;

/// The facts of one effective schema, read once per proof run (the schema
/// text is parsed for the dropped actions).
#[derive(Debug)]
pub(crate) struct Assumptions {
    dropped: HashSet<String>,
}

impl Assumptions {
    /// The facts, as a report states them.
    pub(crate) const STATED: [&str; 2] = [
        "a typed tool is decided only under its own action, and that action only on that tool",
        "a dropped typed action decides nothing",
    ];

    /// The facts of `bundle`'s effective schema.
    pub(crate) fn of(bundle: &PolicyBundle) -> Self {
        Assumptions {
            dropped: super::schema_gen::dropped_actions(&bundle.schema_text)
                .into_keys()
                .collect(),
        }
    }

    /// The facts in `env`, as `forbid` policies:
    /// - under a dropped typed action, nothing;
    /// - under a typed tool's action, only that tool;
    /// - under a group action (`call_tool`, `a2a_invoke`), no tool that
    ///   has a typed action.
    pub(crate) fn for_env(
        &self,
        bundle: &PolicyBundle,
        env: &RequestEnv,
    ) -> Result<Vec<Policy>, Unproved> {
        let action = env.action();
        let mut texts = Vec::new();
        if self.dropped.contains(action.id().unescaped()) {
            texts.push("forbid (principal, action, resource);".to_string());
        } else if env.resource().to_string() == super::Kind::Tool.qualified() {
            if let Some(name) = bundle
                .typed
                .iter()
                .find(|(_, t)| t.action == *action)
                .map(|(n, _)| n)
            {
                let uid = super::Kind::Tool.uid(name).0;
                texts.push(format!(
                    "forbid (principal, action, resource) unless {{ resource == {uid} }};"
                ));
            }
            let mut members: Vec<String> = bundle
                .typed
                .iter()
                .filter(|(_, t)| t.group.uid().0 == *action)
                .map(|(n, _)| super::Kind::Tool.uid(n).0.to_string())
                .collect();
            members.sort();
            if !members.is_empty() {
                texts.push(format!(
                    "forbid (principal, action, resource) when {{ [{}].contains(resource) }};",
                    members.join(", ")
                ));
            }
        }
        parse(&texts)
    }
}

/// The facts' texts as policies. Their ids (`cedargate: assumption N`)
/// are unlikely `@id`s; a set that uses one cannot take the fact, and its
/// environment is reported unknown rather than proved without it.
fn parse(texts: &[String]) -> Result<Vec<Policy>, Unproved> {
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let id = PolicyId::new(format!("cedargate: assumption {i}"));
            Policy::parse(Some(id), text)
                .map_err(|e| Unproved::Failed(format!("assumption `{text}`: {e}")))
        })
        .collect()
}
