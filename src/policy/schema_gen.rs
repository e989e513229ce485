//! Typed tool arguments: from each tool's JSON Schema `inputSchema`, one
//! Cedar action per tool (its id is the tool's canonical name) inside the
//! `call_tool` or `a2a_invoke` action group, whose context carries the
//! arguments as `context.args` with Cedar types. Policies written with
//! `action in Gateway::Action::"call_tool"` keep matching every tool;
//! `action == Gateway::Action::"af_memory_remember"` can read
//! `context.args.content` and still pass strict validation.
//!
//! The mapping (also in `src/policy/README.md`):
//!
//! | JSON Schema                          | Cedar                        |
//! |--------------------------------------|------------------------------|
//! | `string` (any `format`), string `enum`/`const` | `String`           |
//! | `integer`                            | `Long`                       |
//! | `number`                             | `decimal` (rounded to 4 places) |
//! | `boolean`                            | `Bool`                       |
//! | `array` of a mappable `items`        | `Set<T>` (order and duplicates are lost) |
//! | `object` with `properties`           | record; `required` → required attribute, others optional |
//!
//! What it cannot express is left out of `context.args` (the tool still
//! works, policies just cannot see it): `null`, type unions (`["string",
//! "null"]`), `oneOf`/`anyOf`/`allOf`, `$ref`, tuples, `additionalProperties`
//! maps, attributes named `__entity`/`__extn`/`__expr`, and nesting deeper
//! than [`MAX_DEPTH`]. A tool whose `inputSchema` is not an object, or whose
//! name is already an action of the vocabulary, gets no typed action: it is
//! decided under its group action with the plain session context.
//!
//! Which tools are typed is read back from the *effective schema* (see
//! [`typed_tools`]), not from the JSON Schemas: a schema file may declare a
//! typed action by hand (for a dynamic A2A tool, say), and a recorded policy
//! set replays with exactly the types it was loaded with.

use std::collections::HashMap;
use std::fmt::Write as _;

use cedar_policy::{EntityUid, RestrictedExpression, SchemaFragment};
use serde_json::{Map, Value, json};

use super::group_shapes::{GroupShape, SchemaBase};
use super::{Action, NAMESPACE, cedar_names};

/// Deepest nesting of arrays and objects mapped into Cedar types.
pub const MAX_DEPTH: usize = 8;

/// A tool whose arguments should be typed.
#[derive(Debug, Clone)]
pub struct ToolSchema {
    /// Canonical tool name (becomes the action id).
    pub name: String,
    /// The group action the typed action belongs to (`call_tool` or `a2a_invoke`).
    pub group: Action,
    /// The tool's JSON Schema.
    pub input_schema: Value,
    /// Why the tool's typed action is *dropped* (see [`agreeing`]): it
    /// stays declared, so the policies naming it still validate, but no
    /// call is decided under it. `None` for a typed tool.
    pub dropped: Option<String>,
}

/// The generated part of the effective schema.
#[derive(Debug, Clone, Default)]
pub struct Generated {
    /// Cedar schema text (a `namespace Gateway { … }` block), empty when no
    /// tool could be typed.
    pub text: String,
    /// What could not be typed, one line each (shown by `schema print`).
    pub notes: Vec<String>,
}

/// Generates typed actions for `tools`, each applying to what its group
/// action in `base` applies to ([`super::group_shapes`]); action ids
/// `base` already declares are never redeclared.
pub fn generate(tools: &[ToolSchema], base: &SchemaBase) -> Generated {
    let existing_actions = &base.actions;
    let mut out = Generated::default();
    let mut body = String::new();
    let mut sorted: Vec<&ToolSchema> = tools.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut seen = std::collections::HashSet::new();
    for tool in sorted {
        if !matches!(tool.group, Action::CallTool | Action::A2aInvoke) {
            out.notes.push(format!(
                "`{}`: group `{}` takes no arguments; not typed",
                tool.name,
                tool.group.name()
            ));
            continue;
        }
        if Action::from_name(&tool.name).is_some()
            || existing_actions.iter().any(|a| a == &tool.name)
        {
            out.notes.push(format!(
                "`{}`: an action of that name already exists; not typed",
                tool.name
            ));
            continue;
        }
        if !cedar_names::writable(&tool.name) {
            out.notes.push(format!(
                "`{}`: the name cannot be written in Cedar; not typed",
                tool.name.escape_debug()
            ));
            continue;
        }
        if !seen.insert(tool.name.clone()) {
            out.notes.push(format!(
                "`{}`: declared twice; the first declaration is typed",
                tool.name
            ));
            continue;
        }
        let mut notes = Vec::new();
        let Some(args) = object_type(&tool.input_schema, "args", 0, &mut notes) else {
            out.notes.push(format!(
                "`{}`: inputSchema is not an object schema; not typed",
                tool.name
            ));
            continue;
        };
        for n in notes {
            out.notes.push(format!("`{}`: {n}", tool.name));
        }
        let action = action_text(tool, &args, &base.shape(tool.group));
        if let Err(e) = declares_only(&action, &tool.name) {
            out.notes.push(format!(
                "`{}`: its typed action is not valid Cedar ({e}); not typed",
                tool.name.escape_debug()
            ));
            continue;
        }
        if let Some(reason) = &tool.dropped {
            out.notes
                .push(format!("`{}`: typed action dropped: {reason}", tool.name));
        }
        body.push_str(&action);
    }
    if !body.is_empty() {
        out.text = format!(
            "// Generated from the tools' inputSchema: one action per tool, typed `context.args`.\nnamespace {NAMESPACE} {{\n{body}}}\n"
        );
    }
    out
}

/// The annotation that marks a dropped typed action in the effective
/// schema (read back by [`dropped_actions`]).
pub const DROPPED: &str = "dropped";

/// The annotation's text for a name servers type differently (fixed:
/// nothing an upstream sent is written).
pub const DROPPED_NOTE: &str = "argument types differ between the servers that list this name";

/// The annotation's text for a tool its upstream no longer lists (the
/// registry keeps its pin; `crate::upstream::registry::merge`).
pub const UNLISTED_NOTE: &str = "the upstream no longer lists this tool";

/// Run-time tools (upstream MCP tools, from every org's approved pins)
/// reduced to one entry per name: a name whose entries all map to the same
/// Cedar type of `context.args` keeps one typed action (orgs that call
/// their server alike and agree on the tool share the action).
///
/// A name whose entries disagree has its typed action **dropped**: reading
/// one org's arguments with another org's types could make a forbid miss.
/// The action stays declared, with the type of the first entry (callers
/// pass the oldest registration first, so a later server never retypes
/// the policies written for an earlier one), so every policy naming it
/// still validates and the rest of the set loads; but it is marked
/// [`DROPPED`], every tool of that name is decided under its group action
/// with the plain session context, and a forbid naming the action denies
/// those calls instead of silently not matching them
/// (`dropped.rs`). Returned sorted by name, with a note per dropped
/// name.
///
/// Entries dropped as [`UNLISTED_NOTE`] (tools their upstream no longer
/// lists) count in the comparison, so a policy written on their types keeps
/// validating; a name still listed by some server is typed after a listed
/// entry, and stays dropped as unlisted only when no server lists it.
pub fn agreeing(tools: Vec<ToolSchema>) -> (Vec<ToolSchema>, Vec<String>) {
    let mut by_name: std::collections::BTreeMap<String, Vec<ToolSchema>> = Default::default();
    for t in tools {
        by_name.entry(t.name.clone()).or_default().push(t);
    }
    let mut out = Vec::with_capacity(by_name.len());
    let mut notes = Vec::new();
    for (name, mut entries) in by_name {
        let mut types: Vec<Option<String>> = entries
            .iter()
            .map(|t| object_type(&t.input_schema, "args", 0, &mut Vec::new()))
            .collect();
        types.sort();
        types.dedup();
        // The oldest entry types a disputed name; a listed one the others.
        let listed = entries.iter().position(|t| t.dropped.is_none());
        let keep = if types.len() > 1 {
            0
        } else {
            listed.unwrap_or(0)
        };
        let mut first = entries.swap_remove(keep);
        if types.len() > 1 {
            notes.push(format!(
                "`{name}`: servers list it with {} different argument types; its typed action is dropped and the tool is decided under `{}` (write policies on `action in Gateway::Action::\"{}\"` with `resource == Gateway::Tool::\"{name}\"`, or give the servers distinct prefixes)",
                types.len(),
                first.group.name(),
                first.group.name(),
            ));
            first.dropped = Some(DROPPED_NOTE.to_string());
        }
        out.push(first);
    }
    (out, notes)
}

/// The declaration of one tool's typed action (its `context.args` type
/// is `args`, its principals and optional context attributes its group's
/// `shape`); a dropped one carries the [`DROPPED`] annotation, whose text
/// is one of the fixed notes.
fn action_text(tool: &ToolSchema, args: &str, shape: &GroupShape) -> String {
    let mut text = String::new();
    if let Some(reason) = &tool.dropped {
        let note = if reason == UNLISTED_NOTE {
            UNLISTED_NOTE
        } else {
            DROPPED_NOTE
        };
        let _ = writeln!(text, "  @{DROPPED}(\"{note}\")");
    }
    let mut extras = String::new();
    for (name, ty) in &shape.extras {
        let _ = write!(extras, ", {name}?: {ty}");
    }
    let _ = write!(
        text,
        "  action {} in [{}] appliesTo {{\n    principal: [{}],\n    resource: [Tool],\n    context: {{ session: Session, time: datetime, args: {args}, usage?: {{ callsLastMinute: Long, agentCallsLastMinute: Long, orgCallsLastMinute: Long }}{extras} }},\n  }};\n",
        quote(&tool.name),
        tool.group.name(),
        shape.principals.join(", "),
    );
    text
}

/// Checks one generated action on its own: it must parse, and declare
/// exactly the action `name` (so one tool's text can never break, or add
/// to, the schema every org shares).
fn declares_only(action: &str, name: &str) -> Result<(), String> {
    let text = format!("namespace {NAMESPACE} {{\n{action}}}\n");
    let (fragment, _) = SchemaFragment::from_cedarschema_str(&text).map_err(|e| e.to_string())?;
    let json = fragment.to_json_value().map_err(|e| e.to_string())?;
    let ids: Vec<&String> = json
        .get(NAMESPACE)
        .and_then(|ns| ns.get("actions"))
        .and_then(Value::as_object)
        .map(|a| a.keys().collect())
        .unwrap_or_default();
    match ids.as_slice() {
        [id] if id.as_str() == name => Ok(()),
        _ => Err(format!("it declares {ids:?}")),
    }
}

fn quote(s: &str) -> String {
    cedar_names::quote(s)
}

/// The Cedar type of a JSON Schema, or `None` (with a note) when it has none.
fn cedar_type(schema: &Value, path: &str, depth: usize, notes: &mut Vec<String>) -> Option<String> {
    if depth > MAX_DEPTH {
        notes.push(format!("`{path}` nests deeper than {MAX_DEPTH}; left out"));
        return None;
    }
    let ty = schema.get("type");
    let ty = match ty {
        Some(Value::String(t)) => t.as_str(),
        Some(_) => {
            notes.push(format!("`{path}` has a union type; left out"));
            return None;
        }
        None => {
            let strings = |v: Option<&Value>| match v {
                Some(Value::Array(a)) => !a.is_empty() && a.iter().all(Value::is_string),
                Some(Value::String(_)) => true,
                _ => false,
            };
            if strings(schema.get("enum")) || strings(schema.get("const")) {
                "string"
            } else if schema.get("properties").is_some() {
                "object"
            } else {
                notes.push(format!("`{path}` has no single type; left out"));
                return None;
            }
        }
    };
    match ty {
        "string" => Some("String".into()),
        "integer" => Some("Long".into()),
        "number" => Some("decimal".into()),
        "boolean" => Some("Bool".into()),
        "array" => {
            let items = schema.get("items").filter(|i| i.is_object());
            match items.and_then(|i| cedar_type(i, &format!("{path}[]"), depth + 1, notes)) {
                Some(t) => Some(format!("Set<{t}>")),
                None => {
                    notes.push(format!(
                        "`{path}`: array items have no Cedar type; left out"
                    ));
                    None
                }
            }
        }
        "object" => object_type(schema, path, depth, notes),
        other => {
            notes.push(format!("`{path}` has type `{other}`; left out"));
            None
        }
    }
}

fn object_type(
    schema: &Value,
    path: &str,
    depth: usize,
    notes: &mut Vec<String>,
) -> Option<String> {
    match schema.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        None if schema.get("properties").is_some() => {}
        _ => return None,
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut attrs: Vec<(String, String)> = Vec::new();
    if let Some(Value::Object(props)) = schema.get("properties") {
        let mut names: Vec<&String> = props.keys().collect();
        names.sort();
        for name in names {
            if matches!(name.as_str(), "__entity" | "__extn" | "__expr") {
                notes.push(format!("`{path}.{name}` is a reserved name; left out"));
                continue;
            }
            if !cedar_names::writable(name) {
                notes.push(format!(
                    "`{path}.{}` cannot be written in Cedar; left out",
                    name.escape_debug()
                ));
                continue;
            }
            let Some(prop) = props.get(name) else {
                continue;
            };
            let child = format!("{path}.{name}");
            if let Some(t) = cedar_type(prop, &child, depth + 1, notes) {
                let opt = if required.contains(&name.as_str()) {
                    ""
                } else {
                    "?"
                };
                attrs.push((format!("{}{opt}", quote(name)), t));
            }
        }
    }
    if attrs.is_empty() {
        return Some("{}".into());
    }
    let inner = attrs
        .iter()
        .map(|(n, t)| format!("{n}: {t}"))
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!("{{ {inner} }}"))
}

/// The Cedar type of `context.args` of a typed action, read from the schema.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgType {
    /// `String`
    String,
    /// `Long`
    Long,
    /// `Bool`
    Bool,
    /// `decimal`
    Decimal,
    /// `Set<T>`
    Set(Box<ArgType>),
    /// A record: `(name, type, required)`.
    Record(Vec<(String, ArgType, bool)>),
    /// Anything else (entities, other extensions): arguments never carry it.
    Unsupported,
}

/// A tool decided under its own typed action.
#[derive(Debug, Clone)]
pub struct TypedTool {
    /// The group it belongs to.
    pub group: Action,
    /// `Gateway::Action::"<tool>"`.
    pub action: EntityUid,
    /// The type of `context.args` (shared with the contexts built from it).
    pub args: std::sync::Arc<ArgType>,
}

/// Tools with a typed action in the effective schema, by tool name: every
/// action that is a member of `call_tool` or `a2a_invoke`, whose context
/// declares `args`, and that is not marked [`DROPPED`].
pub fn typed_tools(effective_schema: &str) -> HashMap<String, TypedTool> {
    let mut out = HashMap::new();
    for (id, group, action, common) in group_actions(effective_schema) {
        if action.pointer(&format!("/annotations/{DROPPED}")).is_some() {
            continue;
        }
        let args = action
            .pointer("/appliesTo/context/attributes/args")
            .map(|t| arg_type(t, &common, 0));
        let Some(args) = args else { continue };
        out.insert(
            id.clone(),
            TypedTool {
                group,
                action: Action::uid_of(&id).0,
                args: std::sync::Arc::new(args),
            },
        );
    }
    out
}

/// The typed actions the effective schema declares but marks [`DROPPED`]
/// (see [`agreeing`]): action id → the group its tools are decided under.
pub fn dropped_actions(effective_schema: &str) -> HashMap<String, (Action, String)> {
    let annotation = format!("/annotations/{DROPPED}");
    group_actions(effective_schema)
        .into_iter()
        .filter_map(|(id, group, action, _)| {
            let note = action.pointer(&annotation)?.as_str().unwrap_or_default();
            Some((id, (group, note.to_string())))
        })
        .collect()
}

/// Every action of the gateway's namespace that is a member of `call_tool`
/// or `a2a_invoke`: its id, that group, its JSON form and the namespace's
/// common types.
fn group_actions(effective_schema: &str) -> Vec<(String, Action, Value, Value)> {
    let mut out = Vec::new();
    let Ok((fragment, _)) = SchemaFragment::from_cedarschema_str(effective_schema) else {
        return out;
    };
    let Ok(json) = fragment.to_json_value() else {
        return out;
    };
    let Some(body) = json.get(NAMESPACE) else {
        return out;
    };
    let common = body.get("commonTypes").cloned().unwrap_or(Value::Null);
    let Some(actions) = body.get("actions").and_then(Value::as_object) else {
        return out;
    };
    for (id, action) in actions {
        let group = action
            .get("memberOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("id").and_then(Value::as_str))
            .find_map(|g| match Action::from_name(g) {
                Some(a @ (Action::CallTool | Action::A2aInvoke)) => Some(a),
                _ => None,
            });
        if let Some(group) = group {
            out.push((id.clone(), group, action.clone(), common.clone()));
        }
    }
    out
}

fn arg_type(t: &Value, common: &Value, depth: usize) -> ArgType {
    if depth > MAX_DEPTH * 2 {
        return ArgType::Unsupported;
    }
    let kind = t.get("type").and_then(Value::as_str).unwrap_or("");
    let named = |name: &str| -> ArgType {
        let bare = name.trim_start_matches("__cedar::");
        match bare {
            "String" => ArgType::String,
            "Long" => ArgType::Long,
            "Bool" | "Boolean" => ArgType::Bool,
            "decimal" => ArgType::Decimal,
            other => match common.get(other) {
                Some(def) => arg_type(def, common, depth + 1),
                None => ArgType::Unsupported,
            },
        }
    };
    match kind {
        "String" => ArgType::String,
        "Long" => ArgType::Long,
        "Boolean" => ArgType::Bool,
        "Extension" => match t.get("name").and_then(Value::as_str) {
            Some("decimal") => ArgType::Decimal,
            _ => ArgType::Unsupported,
        },
        "Set" => match t.get("element") {
            Some(e) => ArgType::Set(Box::new(arg_type(e, common, depth + 1))),
            None => ArgType::Unsupported,
        },
        "Record" => {
            let mut attrs = Vec::new();
            if let Some(map) = t.get("attributes").and_then(Value::as_object) {
                for (name, a) in map {
                    let required = a.get("required").and_then(Value::as_bool).unwrap_or(true);
                    attrs.push((name.clone(), arg_type(a, common, depth + 1), required));
                }
            }
            ArgType::Record(attrs)
        }
        "EntityOrCommon" => t
            .get("name")
            .and_then(Value::as_str)
            .map(named)
            .unwrap_or(ArgType::Unsupported),
        _ => t
            .get("type")
            .and_then(Value::as_str)
            .map(named)
            .unwrap_or(ArgType::Unsupported),
    }
}

/// Projects validated tool arguments onto `ty`, as Cedar context JSON:
/// attributes the type does not declare are dropped, numbers become
/// `decimal`s. `None` when a value does not fit (a required attribute
/// missing or of another type): the context then fails to build and the
/// decision denies.
pub fn project(ty: &ArgType, v: &Value) -> Option<Value> {
    match ty {
        ArgType::String => v.as_str().map(|s| Value::String(s.to_string())),
        ArgType::Long => match v {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| {
                    n.as_f64().and_then(|f| {
                        // Peers turn 2 into 2.0; an integral float is still an integer.
                        let in_range = f.fract() == 0.0 && f.abs() < 9.0e15;
                        in_range.then_some(f as i64)
                    })
                })
                .map(Value::from),
            _ => None,
        },
        ArgType::Bool => v.as_bool().map(Value::Bool),
        ArgType::Decimal => decimal(v),
        ArgType::Set(elem) => v
            .as_array()?
            .iter()
            .map(|item| project(elem, item))
            .collect::<Option<Vec<_>>>()
            .map(Value::Array),
        ArgType::Record(attrs) => {
            let obj = v.as_object()?;
            let mut out = Map::new();
            for (name, t, required) in attrs {
                match obj.get(name).and_then(|x| project(t, x)) {
                    Some(x) => {
                        out.insert(name.clone(), x);
                    }
                    None if *required => return None,
                    None => {}
                }
            }
            Some(Value::Object(out))
        }
        ArgType::Unsupported => None,
    }
}

/// The Cedar value of arguments already [`project`]ed onto `ty`, built
/// directly rather than parsed from their JSON (the context of a typed
/// tool decision; `Request::new` still checks it against the schema).
/// `None` when `v` is not such a projection.
pub fn restricted(ty: &ArgType, v: &Value) -> Option<RestrictedExpression> {
    match ty {
        ArgType::String => v
            .as_str()
            .map(|s| RestrictedExpression::new_string(s.to_string())),
        ArgType::Long => v.as_i64().map(RestrictedExpression::new_long),
        ArgType::Bool => v.as_bool().map(RestrictedExpression::new_bool),
        ArgType::Decimal => v
            .pointer("/__extn/arg")
            .and_then(Value::as_str)
            .map(super::extension_values::decimal),
        ArgType::Set(elem) => v
            .as_array()?
            .iter()
            .map(|item| restricted(elem, item))
            .collect::<Option<Vec<_>>>()
            .map(RestrictedExpression::new_set),
        ArgType::Record(attrs) => {
            let obj = v.as_object()?;
            let mut out = Vec::with_capacity(obj.len());
            for (name, t, _) in attrs {
                if let Some(x) = obj.get(name) {
                    out.push((name.clone(), restricted(t, x)?));
                }
            }
            // Anything the type does not declare is not a projection.
            if out.len() != obj.len() {
                return None;
            }
            RestrictedExpression::new_record(out).ok()
        }
        ArgType::Unsupported => None,
    }
}

/// A JSON number as a Cedar `decimal` (4 fractional digits, rounded).
fn decimal(v: &Value) -> Option<Value> {
    let f = v.as_f64()?;
    // Cedar decimals are i64 / 10^4.
    if !f.is_finite() || f.abs() >= 922_337_203_685_477.0 {
        return None;
    }
    let text = format!("{f:.4}");
    Some(json!({ "__extn": { "fn": "decimal", "arg": text } }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = include_str!("../../schemas/gateway.cedarschema");

    fn tool(name: &str, schema: Value) -> ToolSchema {
        ToolSchema {
            name: name.into(),
            group: Action::CallTool,
            input_schema: schema,
            dropped: None,
        }
    }

    #[test]
    fn maps_every_supported_json_schema_type() {
        let g = generate(
            &[tool(
                "deploy",
                json!({"type":"object","required":["branch"],"properties":{
                    "branch":{"type":"string"},
                    "replicas":{"type":"integer"},
                    "ratio":{"type":"number"},
                    "dry":{"type":"boolean"},
                    "tags":{"type":"array","items":{"type":"string"}},
                    "env":{"enum":["prod","dev"]},
                    "meta":{"type":"object","properties":{"owner":{"type":"string"}}},
                    "maybe":{"type":["string","null"]},
                    "any":{"oneOf":[{"type":"string"}]}
                }}),
            )],
            &SchemaBase::default(),
        );
        assert!(
            g.text.contains("action \"deploy\" in [call_tool]"),
            "{}",
            g.text
        );
        for part in [
            "\"branch\": String",
            "\"replicas\"?: Long",
            "\"ratio\"?: decimal",
            "\"dry\"?: Bool",
            "\"tags\"?: Set<String>",
            "\"env\"?: String",
            "\"meta\"?: { \"owner\"?: String }",
        ] {
            assert!(g.text.contains(part), "missing {part} in {}", g.text);
        }
        assert!(!g.text.contains("maybe") && !g.text.contains("\"any\""));
        assert!(g.notes.iter().any(|n| n.contains("args.maybe")));
        assert!(g.notes.iter().any(|n| n.contains("args.any")));
        let tools = [tool(
            "deploy",
            json!({"type":"object","required":["branch"],"properties":{"branch":{"type":"string"},"ratio":{"type":"number"}}}),
        )];
        let (effective, _) = crate::policy::load::effective_schema("s", BASE, &tools).unwrap();
        let _ = cedar_policy::Schema::from_cedarschema_str(&effective)
            .unwrap()
            .0;
        let typed = typed_tools(&effective);
        let t = typed.get("deploy").expect("typed");
        assert_eq!(t.group, Action::CallTool);
        let ArgType::Record(attrs) = &*t.args else {
            panic!("record expected")
        };
        assert!(attrs.contains(&("branch".into(), ArgType::String, true)));
        assert!(attrs.contains(&("ratio".into(), ArgType::Decimal, false)));
    }

    /// The context built from values and the one parsed from its JSON
    /// against the schema are the same to every policy.
    #[test]
    fn contexts_built_from_values_equal_the_parsed_ones() {
        let tools = [tool(
            "deploy",
            json!({"type":"object","required":["branch"],"properties":{
                "branch":{"type":"string"},
                "replicas":{"type":"integer"},
                "ratio":{"type":"number"},
                "dry":{"type":"boolean"},
                "tags":{"type":"array","items":{"type":"string"}},
                "meta":{"type":"object","properties":{"owner":{"type":"string"},"n":{"type":"integer"}}}
            }}),
        )];
        let (effective, _) = crate::policy::load::effective_schema("s", BASE, &tools).unwrap();
        let (schema, _) = cedar_policy::Schema::from_cedarschema_str(&effective).unwrap();
        let typed = typed_tools(&effective).remove("deploy").unwrap();
        let policies: cedar_policy::PolicySet = r#"
            permit (principal, action == Gateway::Action::"deploy", resource)
            when { context.args.branch == "main" && context.args.replicas == 3 &&
                   context.args.ratio.greaterThan(decimal("0.5")) && context.args.dry &&
                   context.args.tags.contains("blue") && context.args.meta has owner &&
                   context.args.meta.owner == "ops" && !(context.args.meta has n) &&
                   context.time > datetime("2026-01-01") &&
                   context.session == Gateway::Session::"s-1" };"#
            .parse()
            .unwrap();
        let decide = |args: Value| {
            let mut json =
                crate::policy::entities::session_context("s-1", "2026-11-22T08:00:00.000Z");
            json["args"] = project(&typed.args, &args).unwrap();
            let parsed = cedar_policy::Context::from_json_value(
                json.clone(),
                Some((&schema, &typed.action)),
            )
            .unwrap();
            let built = cedar_policy::Context::from_pairs(
                crate::policy::typed_pairs(&typed.args, &json).expect("fast path"),
            )
            .unwrap();
            [parsed, built].map(|ctx| {
                let request = cedar_policy::Request::new(
                    crate::policy::Kind::Agent.uid("a").0,
                    typed.action.clone(),
                    crate::policy::Kind::Tool.uid("deploy").0,
                    ctx,
                    Some(&schema),
                )
                .unwrap();
                cedar_policy::Authorizer::new()
                    .is_authorized(&request, &policies, &cedar_policy::Entities::empty())
                    .decision()
            })
        };
        let allowed = json!({"branch":"main","replicas":3,"ratio":0.75,"dry":true,
            "tags":["blue","green"],"meta":{"owner":"ops"},"extra":1});
        assert_eq!(decide(allowed.clone()), [cedar_policy::Decision::Allow; 2]);
        for change in [
            json!({"branch":"dev"}),
            json!({"replicas":4}),
            json!({"ratio":0.25}),
            json!({"dry":false}),
            json!({"tags":["green"]}),
            json!({"meta":{"owner":"ops","n":1}}),
        ] {
            let mut args = allowed.clone();
            for (k, v) in change.as_object().unwrap() {
                args[k] = v.clone();
            }
            assert_eq!(decide(args), [cedar_policy::Decision::Deny; 2], "{change}");
        }
    }

    #[test]
    fn orgs_share_a_typed_action_only_when_their_argument_types_agree() {
        let read = |extra: &str| {
            tool(
                "fs.read",
                json!({"type":"object","required":["path"],"properties":{
                    "path":{"type":"string","description":extra}}}),
            )
        };
        // Same Cedar type (descriptions differ): one action.
        let (kept, notes) = agreeing(vec![
            read("a"),
            read("b"),
            tool("fs.list", json!({"type":"object"})),
        ]);
        assert_eq!(
            kept.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["fs.list", "fs.read"]
        );
        assert!(notes.is_empty(), "{notes:?}");
        assert!(kept.iter().all(|t| t.dropped.is_none()));
        // Another type for the same name: dropped, declared with the first
        // entry's type, with a note naming it.
        let other = tool(
            "fs.read",
            json!({"type":"object","properties":{"path":{"type":"integer"}}}),
        );
        let (kept, notes) = agreeing(vec![read("a"), other, read("b")]);
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert!(kept[0].dropped.is_some());
        assert_eq!(kept[0].input_schema, read("a").input_schema);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("fs.read"), "{notes:?}");
        // Declared, marked dropped, typing no tool.
        let (effective, _) = crate::policy::load::effective_schema("s", BASE, &kept).unwrap();
        assert!(cedar_policy::Schema::from_cedarschema_str(&effective).is_ok());
        assert!(!typed_tools(&effective).contains_key("fs.read"));
        assert_eq!(
            dropped_actions(&effective).get("fs.read").map(|d| d.0),
            Some(Action::CallTool)
        );
    }

    #[test]
    fn an_unlisted_tool_stays_declared_but_dropped_unless_another_server_lists_it() {
        let schema = json!({"type":"object","properties":{"path":{"type":"string"}}});
        let unlisted = ToolSchema {
            dropped: Some(UNLISTED_NOTE.to_string()),
            ..tool("fs.write", schema.clone())
        };
        // Only unlisted: declared, dropped with its own note, typing nothing.
        let (kept, notes) = agreeing(vec![unlisted.clone()]);
        assert!(notes.is_empty(), "{notes:?}");
        let (effective, _) = crate::policy::load::effective_schema("s", BASE, &kept).unwrap();
        assert!(!typed_tools(&effective).contains_key("fs.write"));
        assert_eq!(
            dropped_actions(&effective).get("fs.write"),
            Some(&(Action::CallTool, UNLISTED_NOTE.to_string()))
        );
        // Another org's server still lists it alike: typed.
        let (kept, _) = agreeing(vec![unlisted, tool("fs.write", schema)]);
        assert!(kept[0].dropped.is_none(), "{kept:?}");
        let (effective, _) = crate::policy::load::effective_schema("s", BASE, &kept).unwrap();
        assert!(typed_tools(&effective).contains_key("fs.write"));
    }

    /// Names from outside never break the schema: one Cedar cannot hold
    /// is left out (a property) or untyped (a tool), quotes and
    /// backslashes are escaped the Cedar way.
    #[test]
    fn names_cedar_cannot_hold_never_reach_the_schema() {
        let path = json!({"type":"object","properties":{"path":{"type":"string"}}});
        let tools = [
            tool("back\u{8}space", path.clone()),
            tool("nul\u{0}", path.clone()),
            tool(
                "props",
                json!({"type":"object","properties":{
                    "pa\u{1}th":{"type":"string"},
                    "ok":{"type":"object","properties":{"de\u{8}ep":{"type":"integer"}}}}}),
            ),
            tool("we\"ird\\name", path),
        ];
        let (effective, generated) =
            crate::policy::load::effective_schema("s", BASE, &tools).unwrap();
        assert!(
            cedar_policy::Schema::from_cedarschema_str(&effective).is_ok(),
            "{effective}"
        );
        let typed = typed_tools(&effective);
        assert!(typed.contains_key("we\"ird\\name"), "{effective}");
        assert!(!typed.keys().any(|k| k.chars().any(char::is_control)));
        let ArgType::Record(attrs) = &*typed["props"].args else {
            panic!("record expected")
        };
        assert_eq!(
            attrs,
            &[("ok".to_string(), ArgType::Record(Vec::new()), false)]
        );
        let notes = generated.notes.join("\n");
        for part in ["back\\u{8}space", "nul\\0", "pa\\u{1}th", "de\\u{8}ep"] {
            assert!(notes.contains(part), "{part} not in {notes}");
        }
        assert!(!notes.chars().any(|c| c.is_control() && c != '\n'));
    }

    #[test]
    fn non_object_and_clashing_tools_stay_untyped() {
        let g = generate(
            &[
                tool("call_tool", json!({"type":"object"})),
                tool("scalar", json!({"type":"string"})),
            ],
            &SchemaBase::default(),
        );
        assert!(g.text.is_empty());
        assert_eq!(g.notes.len(), 2, "{:?}", g.notes);
    }

    #[test]
    fn projection_drops_undeclared_and_converts_numbers() {
        let ty = ArgType::Record(vec![
            ("branch".into(), ArgType::String, true),
            ("n".into(), ArgType::Long, false),
            ("c".into(), ArgType::Decimal, false),
        ]);
        let v = project(&ty, &json!({"branch":"main","n":2.0,"c":0.9,"extra":1})).unwrap();
        assert_eq!(
            v,
            json!({"branch":"main","n":2,"c":{"__extn":{"fn":"decimal","arg":"0.9000"}}})
        );
        assert_eq!(project(&ty, &json!({"n": 1})), None);
    }
}
