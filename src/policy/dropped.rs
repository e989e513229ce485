//! Dropped typed actions and the policies that name them.
//!
//! A typed action is *dropped* when the servers listing its tool name
//! disagree on the argument types (`schema_gen::agreeing`), or
//! when its upstream no longer lists the tool (the registry keeps the
//! approved pin, marked unlisted, and the tool is not offered). The
//! effective schema still declares it (with the first registration's
//! types, marked `@dropped` with the reason), so a policy naming it
//! validates and one upstream's listing never makes the whole set fail to
//! load; but no call is decided under it: every tool of that name is
//! decided under its group action (`call_tool`) with the plain session
//! context.
//!
//! **Fail-closed rule.** A policy that names the dropped action (in its
//! scope or its condition) no longer matches those calls:
//!
//! - a `permit` naming it allows nothing while the action is dropped (the
//!   rest of the set decides: less is allowed, never more);
//! - a `forbid` naming it would silently stop protecting the tool, so
//!   every call of a tool of that name is **denied** while the action is
//!   dropped, with a reason naming the forbid(s). Give the servers
//!   distinct prefixes (or make their schemas agree) to end it.
//!
//! Each such policy is reported: one warning per policy in the bundle's
//! warnings (logged at every activation, `warnings` of the reload attempt
//! in `GET /admin/policies`). Which tools are denied is a function of the
//! bundle (its schema text and policies), so replay decides them alike.

use std::collections::{HashMap, HashSet};

use cedar_policy::{Effect, PolicySet};
use serde_json::Value;

use super::{Action, schema_gen};

/// The tools whose calls a forbid on their dropped typed action denies.
#[derive(Debug, Default)]
pub struct DroppedGuard {
    /// Tool name → (its group action, why it is dropped, the forbids
    /// naming its action).
    denied: HashMap<String, (Action, String, Vec<String>)>,
}

impl DroppedGuard {
    /// The guard of a set validated against `schema_text`, and one warning
    /// per policy naming a dropped action.
    pub fn of(schema_text: &str, policies: &PolicySet) -> (DroppedGuard, Vec<String>) {
        let dropped = schema_gen::dropped_actions(schema_text);
        let mut guard = DroppedGuard::default();
        let mut warnings = Vec::new();
        if dropped.is_empty() {
            return (guard, warnings);
        }
        let action_type = format!("{}::Action", super::NAMESPACE);
        for policy in policies.policies() {
            let Ok(json) = policy.to_json() else {
                continue;
            };
            let mut named = HashSet::new();
            actions_named(&json, &action_type, &dropped, &mut named);
            let mut named: Vec<&String> = named.into_iter().collect();
            named.sort();
            for tool in named {
                let Some((group, note)) = dropped.get(tool) else {
                    continue;
                };
                let id = policy.id().to_string();
                warnings.push(warning(&id, policy.effect(), tool, *group, note));
                if policy.effect() == Effect::Forbid {
                    let entry = guard
                        .denied
                        .entry(tool.clone())
                        .or_insert_with(|| (*group, note.clone(), Vec::new()));
                    entry.2.push(id);
                }
            }
        }
        (guard, warnings)
    }

    /// Why a call of `tool` under `group` is denied, when a forbid names
    /// its dropped typed action.
    pub fn denial(&self, group: Action, tool: &str) -> Option<String> {
        let (g, note, forbids) = self.denied.get(tool)?;
        (*g == group).then(|| {
            format!(
                "the typed action of `{tool}` is dropped ({}) and forbid {} names it: calls of `{tool}` are denied until it is typed again",
                why(note),
                forbids
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }

    /// Whether any call is denied this way.
    pub fn is_empty(&self) -> bool {
        self.denied.is_empty()
    }
}

/// Why an action is dropped, from its annotation's (fixed) note.
fn why(note: &str) -> &'static str {
    if note == schema_gen::UNLISTED_NOTE {
        "its upstream no longer lists it"
    } else {
        "the servers listing it declare different argument types"
    }
}

/// The policies of `policies` that name one of `actions` (typed action
/// ids) in their scope or condition: (policy id, action id), sorted.
pub fn policies_naming(policies: &PolicySet, actions: &HashSet<String>) -> Vec<(String, String)> {
    let lookup: HashMap<String, ()> = actions.iter().map(|a| (a.clone(), ())).collect();
    let action_type = format!("{}::Action", super::NAMESPACE);
    let mut out = Vec::new();
    for policy in policies.policies() {
        let Ok(json) = policy.to_json() else {
            continue;
        };
        let mut named = HashSet::new();
        actions_named(&json, &action_type, &lookup, &mut named);
        out.extend(
            named
                .into_iter()
                .map(|a| (policy.id().to_string(), a.clone())),
        );
    }
    out.sort();
    out
}

fn warning(policy: &str, effect: Effect, tool: &str, group: Action, note: &str) -> String {
    let what = match effect {
        Effect::Forbid => format!("every call of `{tool}` is denied while it is dropped"),
        Effect::Permit => format!(
            "it allows no call of `{tool}` while it is dropped (those calls are decided under `{}`)",
            group.name()
        ),
    };
    format!(
        "policy `{policy}` names `Gateway::Action::\"{}\"`, whose typed action is dropped ({}): {what}",
        tool.escape_debug(),
        why(note)
    )
}

/// Collects the dropped action ids `json` (a policy's JSON form) names:
/// every entity uid `{"type": "Gateway::Action", "id": …}` in its scope or
/// its condition.
fn actions_named<'a, V>(
    json: &Value,
    action_type: &str,
    dropped: &'a HashMap<String, V>,
    out: &mut HashSet<&'a String>,
) {
    match json {
        Value::Object(map) => {
            if map.get("type").and_then(Value::as_str) == Some(action_type)
                && let Some(id) = map.get("id").and_then(Value::as_str)
                && let Some((key, _)) = dropped.get_key_value(id)
            {
                out.insert(key);
            }
            for v in map.values() {
                actions_named(v, action_type, dropped, out);
            }
        }
        Value::Array(items) => {
            for v in items {
                actions_named(v, action_type, dropped, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::schema_gen::{ToolSchema, agreeing};
    use super::super::{Action, Kind, PolicyFile, load};

    const BASE: &str = include_str!("../../schemas/gateway.cedarschema");

    fn read(ty: &str) -> ToolSchema {
        ToolSchema {
            name: "fs.read".into(),
            group: Action::CallTool,
            input_schema: json!({"type": "object", "required": ["path"],
                "properties": {"path": {"type": ty}}}),
            dropped: None,
        }
    }

    /// A set naming a dropped action loads; its forbid denies the tool's
    /// calls, its permit allows none of them; other tools are untouched.
    #[test]
    fn a_forbid_naming_a_dropped_action_denies_the_tools_calls() {
        let (tools, _) = agreeing(vec![read("string"), read("integer")]);
        let (effective, _) = load::effective_schema("s", BASE, &tools).unwrap();
        let bundle = |text: &str| {
            let files = vec![PolicyFile {
                path: "p.cedar".into(),
                text: text.into(),
            }];
            load::bundle_from_sources("s", &effective, files)
                .unwrap_or_else(|e| panic!("{}", e.render()))
        };
        let all = r#"@id("all") permit (principal, action, resource);"#;
        let forbid = r#"@id("no-etc") forbid (principal, action == Gateway::Action::"fs.read", resource)
            when { context.args.path like "/etc/*" };"#;
        let permit = r#"@id("srv") permit (principal, action in [Gateway::Action::"fs.read"], resource)
            when { context.args.path like "/srv/*" };"#;
        let decide = |b: &super::super::PolicyBundle, tool: &str| {
            let ctx = b.prepare_session_context("s-1", "2026-11-27T08:00:00.000Z");
            b.decide(
                &Kind::Agent.uid("a"),
                Action::CallTool,
                &Kind::Tool.uid(tool),
                &ctx,
                &cedar_policy::Entities::empty(),
            )
        };

        let guarded = bundle(&format!("{all}\n{forbid}"));
        let denied = decide(&guarded, "fs.read");
        assert!(!denied.allowed);
        assert!(denied.errors[0].contains("`no-etc`"), "{:?}", denied.errors);
        assert!(decide(&guarded, "fs.write").allowed);
        assert_eq!(guarded.warnings.len(), 1, "{:?}", guarded.warnings);
        assert!(guarded.warnings[0].contains("denied"));

        let permitted = bundle(&format!("{all}\n{permit}"));
        assert!(decide(&permitted, "fs.read").allowed, "decided by `all`");
        assert!(permitted.warnings[0].contains("allows no call"));
        let only_permit = bundle(permit);
        assert!(!decide(&only_permit, "fs.read").allowed);
        assert!(decide(&only_permit, "fs.read").errors.is_empty());
    }
}
