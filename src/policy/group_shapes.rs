//! What the generated typed actions copy from the schema file they join.
//!
//! A typed tool action (`schema_gen`) is a member of `call_tool`
//! or `a2a_invoke` and must accept the requests its group accepts: the
//! same principal types, and a context with the same optional attributes
//! a request may carry. Both are read here from the schema file's group
//! action rather than written into the generator, so the typed actions
//! follow the file they are merged into: the shipped schema's principals
//! `[Agent, User]` and optional `token` and `client`, or an older copy's
//! `[Agent]` and neither (naming a type the file does not declare would
//! make the whole effective schema, and with it the policy set, fail).
//!
//! **What is copied.** The group action's principal types (`[Agent]` when
//! the file declares no group action or no principal types), and each
//! *optional* attribute of its context (an inline record or a common type)
//! other than `session`, `time`, `args` and `usage`, which every typed
//! context declares itself, when its type is a name (a common type, an
//! entity type, `String`, `Long`, `Bool`, `datetime`, …): written
//! `"token"?: Token`. An attribute of any other type (an inline record or
//! set) and a name Cedar text cannot hold are left out: a request carrying
//! one is then refused by the typed action's context type (a deny).

use serde_json::Value;

use super::{Action, NAMESPACE, cedar_names};

/// What the typed actions of one group action declare besides their own
/// `session`, `time`, `args` and `usage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupShape {
    /// Principal types, as the schema file names them.
    pub principals: Vec<String>,
    /// Optional context attributes: `(name, type)`, the type in Cedar
    /// schema syntax.
    pub extras: Vec<(String, String)>,
}

impl Default for GroupShape {
    fn default() -> Self {
        GroupShape {
            principals: vec!["Agent".to_string()],
            extras: Vec::new(),
        }
    }
}

/// What generation reads of the schema file.
#[derive(Debug, Clone, Default)]
pub struct SchemaBase {
    /// Action ids the file declares, in any namespace (never redeclared).
    pub actions: Vec<String>,
    /// What `call_tool`'s typed actions copy.
    pub call_tool: GroupShape,
    /// What `a2a_invoke`'s typed actions copy.
    pub a2a_invoke: GroupShape,
}

impl SchemaBase {
    /// Reads a schema file's JSON form (`SchemaFragment::to_json_value`).
    pub fn of(schema_json: &Value) -> Self {
        let actions = schema_json
            .as_object()
            .map(|namespaces| {
                namespaces
                    .values()
                    .filter_map(|ns| ns.get("actions").and_then(Value::as_object))
                    .flat_map(|a| a.keys().cloned())
                    .collect()
            })
            .unwrap_or_default();
        let ns = schema_json.get(NAMESPACE);
        let shape = |group: Action| ns.map(|ns| group_shape(ns, group)).unwrap_or_default();
        SchemaBase {
            actions,
            call_tool: shape(Action::CallTool),
            a2a_invoke: shape(Action::A2aInvoke),
        }
    }

    /// The shape of `group`'s typed actions (`call_tool` or `a2a_invoke`;
    /// any other group gets the default).
    pub fn shape(&self, group: Action) -> GroupShape {
        match group {
            Action::CallTool => self.call_tool.clone(),
            Action::A2aInvoke => self.a2a_invoke.clone(),
            _ => GroupShape::default(),
        }
    }
}

/// The shape of one group action of the gateway's namespace.
fn group_shape(ns: &Value, group: Action) -> GroupShape {
    let Some(applies) = ns.pointer(&format!("/actions/{}/appliesTo", group.name())) else {
        return GroupShape::default();
    };
    let principals: Vec<String> = applies
        .get("principalTypes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|name| is_path(name))
        .map(str::to_string)
        .collect();
    let common = ns.get("commonTypes");
    let record = applies.get("context").and_then(|c| resolve(c, common));
    let mut extras = Vec::new();
    if let Some(attrs) = record
        .and_then(|r| r.get("attributes"))
        .and_then(Value::as_object)
    {
        for (name, attr) in attrs {
            let optional = attr.get("required").and_then(Value::as_bool) == Some(false);
            let own = matches!(name.as_str(), "session" | "time" | "args" | "usage");
            if !optional || own || !cedar_names::writable(name) {
                continue;
            }
            if let Some(ty) = type_name(attr) {
                extras.push((cedar_names::quote(name), ty));
            }
        }
    }
    GroupShape {
        principals: if principals.is_empty() {
            GroupShape::default().principals
        } else {
            principals
        },
        extras,
    }
}

/// A context type as a record: inline, or the common type it names.
pub(super) fn resolve<'a>(ty: &'a Value, common: Option<&'a Value>) -> Option<&'a Value> {
    if ty.get("type").and_then(Value::as_str) == Some("Record") {
        return Some(ty);
    }
    let name = match ty.get("type").and_then(Value::as_str)? {
        "EntityOrCommon" => ty.get("name").and_then(Value::as_str)?,
        other => other,
    };
    let found = common?.get(name)?;
    (found.get("type").and_then(Value::as_str) == Some("Record")).then_some(found)
}

/// The Cedar schema text of a type that is a name, else `None`.
fn type_name(ty: &Value) -> Option<String> {
    let name = match ty.get("type").and_then(Value::as_str)? {
        "EntityOrCommon" | "Entity" | "Extension" => ty.get("name").and_then(Value::as_str)?,
        "String" => "String",
        "Long" => "Long",
        "Boolean" => "Bool",
        "Set" | "Record" => return None,
        other => other,
    };
    is_path(name).then(|| name.to_string())
}

/// Whether `name` is a Cedar name: identifiers joined by `::`.
fn is_path(name: &str) -> bool {
    name.split("::").all(|part| {
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(text: &str) -> SchemaBase {
        let (fragment, _) = cedar_policy::SchemaFragment::from_cedarschema_str(text).unwrap();
        SchemaBase::of(&fragment.to_json_value().unwrap())
    }

    #[test]
    fn the_shipped_schema_gives_people_and_their_token() {
        let base = base(include_str!("../../schemas/gateway.cedarschema"));
        for group in [Action::CallTool, Action::A2aInvoke] {
            let shape = base.shape(group);
            assert_eq!(shape.principals, ["Agent", "User"]);
            assert_eq!(
                shape.extras,
                [
                    ("\"client\"".to_string(), "Client".to_string()),
                    ("\"token\"".to_string(), "Token".to_string())
                ]
            );
        }
        assert!(base.actions.iter().any(|a| a == "access_session"));
    }

    /// A schema file written before people could sign in: its typed
    /// actions stay what they were.
    #[test]
    fn an_older_schema_file_keeps_agents_only() {
        let base = base(
            r#"namespace Gateway {
              entity Agent; entity Tool; entity Session;
              type SessionContext = { session: Session, time: datetime, usage?: { n: Long } };
              action call_tool appliesTo { principal: [Agent], resource: [Tool], context: SessionContext };
            }"#,
        );
        assert_eq!(base.call_tool, GroupShape::default());
        assert_eq!(base.a2a_invoke, GroupShape::default(), "no a2a_invoke");
    }

    #[test]
    fn optional_named_attributes_are_copied_and_the_rest_left_out() {
        let base = base(
            r#"namespace Gateway {
              entity Agent; entity Bot; entity Tool; entity Session;
              type Extra = { a: String };
              action call_tool appliesTo {
                principal: [Agent, Bot], resource: [Tool],
                context: { session: Session, time: datetime, extra?: Extra, flag?: Bool,
                           when?: datetime, must: String, list?: Set<String>, inline?: { b: Long } }
              };
            }"#,
        );
        assert_eq!(base.call_tool.principals, ["Agent", "Bot"]);
        assert_eq!(
            base.call_tool.extras,
            [
                ("\"extra\"".to_string(), "Extra".to_string()),
                ("\"flag\"".to_string(), "Bool".to_string()),
                ("\"when\"".to_string(), "datetime".to_string()),
            ]
        );
    }
}
