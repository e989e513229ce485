//! What an auditor reads about one policy of a bundle: its text, effect,
//! `@advice`, and the file that defines it (the console's decision page).

use cedar_policy::{Effect, PolicyId};
use serde::Serialize;

use super::PolicyBundle;

/// One policy as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyText {
    /// `@id`.
    pub id: String,
    /// `permit` or `forbid`.
    pub effect: &'static str,
    /// The policy's source text (annotations included).
    pub text: String,
    /// Its `@advice`, when it has one.
    pub advice: Option<String>,
    /// The file that defines it, when it can be told.
    pub file: Option<String>,
}

impl PolicyBundle {
    /// The policy with `@id` `id`, or `None` when this set has none.
    pub fn describe_policy(&self, id: &str) -> Option<PolicyText> {
        let pid = PolicyId::new(id);
        let policy = self.policies.policy(&pid)?;
        let quoted = format!("\"{id}\"");
        Some(PolicyText {
            id: id.to_string(),
            effect: match policy.effect() {
                Effect::Permit => "permit",
                Effect::Forbid => "forbid",
            },
            text: policy.to_string(),
            advice: self.advice.get(&pid).cloned(),
            file: self
                .files
                .iter()
                .find(|f| f.text.contains(&quoted))
                .map(|f| f.path.clone()),
        })
    }
}
