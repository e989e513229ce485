//! The policy and schema loader fed with upstream-declared fragments:
//! tools as registered upstream servers and A2A peers declare them
//! (hostile names and `inputSchema`s), through the typed-action generator
//! and the load of the shipped policy set, as a reload does.
//!
//! An input is a JSON array of `{"name": …, "inputSchema": …, "a2a": bool}`.
//!
//! The property: data an upstream sent never breaks the policy set. For
//! any tools, the effective schema is built (a tool that cannot be typed
//! is left untyped with a note) and the shipped policies load against it;
//! every tool typed without a note is read back as typed.
#![no_main]

use cedargate::policy::load::{bundle_from_sources, effective_schema};
use cedargate::policy::schema_gen::{self, ToolSchema};
use cedargate::policy::{Action, PolicyFile};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const SCHEMA_FILE: &str = "schemas/gateway.cedarschema";
const SCHEMA: &str = include_str!("../../schemas/gateway.cedarschema");
const POLICIES: [(&str, &str); 5] = [
    (
        "policies/a2a.cedar",
        include_str!("../../policies/a2a.cedar"),
    ),
    (
        "policies/graph.cedar",
        include_str!("../../policies/graph.cedar"),
    ),
    (
        "policies/sessions.cedar",
        include_str!("../../policies/sessions.cedar"),
    ),
    (
        "policies/tools.cedar",
        include_str!("../../policies/tools.cedar"),
    ),
    (
        "policies/upstream.cedar",
        include_str!("../../policies/upstream.cedar"),
    ),
];

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Array(declared)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let tools: Vec<ToolSchema> = declared.iter().filter_map(tool).collect();
    // Upstream tools are reduced to one per name, as the registry does.
    let (mcp, a2a): (Vec<_>, Vec<_>) = tools
        .into_iter()
        .partition(|t| matches!(t.group, Action::CallTool));
    let (mut tools, _) = schema_gen::agreeing(mcp);
    tools.extend(a2a);
    let (effective, generated) = match effective_schema(SCHEMA_FILE, SCHEMA, &tools) {
        Ok(e) => e,
        Err(e) => panic!("upstream tools broke the effective schema: {e}"),
    };
    let files = POLICIES
        .iter()
        .map(|(path, text)| PolicyFile {
            path: path.to_string(),
            text: text.to_string(),
        })
        .collect();
    if let Err(e) = bundle_from_sources(SCHEMA_FILE, &effective, files) {
        panic!("upstream tools broke the policy set: {e}");
    }
    let typed = schema_gen::typed_tools(&effective);
    for t in &tools {
        // Notes name a tool as written (escaped when Cedar cannot hold it).
        let noted = generated.notes.iter().any(|n| {
            n.starts_with(&format!("`{}`", t.name))
                || n.starts_with(&format!("`{}`", t.name.escape_debug()))
        });
        if !noted && t.input_schema.is_object() {
            assert!(
                typed.contains_key(&t.name),
                "`{}` typed but not read back",
                t.name
            );
        }
    }
    for name in typed.keys() {
        assert!(
            tools.iter().any(|t| &t.name == name),
            "`{name}` typed from nowhere"
        );
    }
});

fn tool(v: &Value) -> Option<ToolSchema> {
    Some(ToolSchema {
        name: v.get("name")?.as_str()?.to_string(),
        group: if v.get("a2a").and_then(Value::as_bool) == Some(true) {
            Action::A2aInvoke
        } else {
            Action::CallTool
        },
        input_schema: v.get("inputSchema").cloned().unwrap_or(Value::Null),
        dropped: None,
    })
}
