//! Inputs the fuzz targets (`fuzz/`, see its README) found failing, each
//! fed through the same public function as its target, so a fixed failure
//! stays fixed.
//!
//! - `policy_schema`: an upstream tool whose name, or an `inputSchema`
//!   property name, holds a control character must not break the
//!   effective schema or the policy set loaded against it (before, the
//!   generated typed action was written with JSON escapes Cedar rejects,
//!   and every reload and start-up was refused).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::path::Path;

use cedargate::policy::Action;
use cedargate::policy::load::load_bundle_with_tools;
use cedargate::policy::schema_gen::ToolSchema;
use serde_json::{Value, json};

/// The shipped schema and policies loaded with `tools` typed, as a reload
/// loads them.
fn loads_with(tools: &[ToolSchema]) {
    let loaded = load_bundle_with_tools(
        Path::new("schemas/gateway.cedarschema"),
        Path::new("policies"),
        tools,
    );
    if let Err(e) = loaded {
        panic!("upstream tools broke the policy set: {e}");
    }
}

fn tool(name: &str, input_schema: Value) -> ToolSchema {
    ToolSchema {
        name: name.to_string(),
        group: Action::CallTool,
        input_schema,
        dropped: None,
    }
}

/// `fuzz/seeds/policy_schema/03-*` and `04-*`: the failing inputs, and
/// the other control characters of issue 42.
#[test]
fn control_characters_in_upstream_tool_names_never_break_the_policy_set() {
    let string = json!({"type": "string"});
    for c in ['\u{8}', '\u{0}', '\u{1}', '\u{c}', '\u{7f}'] {
        let name = format!("a{c}b");
        let named = tool(
            &name,
            json!({"type": "object", "properties": {"x": string}}),
        );
        loads_with(std::slice::from_ref(&named));
        let property = tool(
            "ctl",
            json!({"type": "object", "properties": {name: string}}),
        );
        loads_with(&[property, tool("fine", json!({"type": "object"}))]);
    }
}

/// `jsonrpc`: a body whose duplicate keys hide a deeper member (serde keeps
/// the last `"method"`, a string, over an earlier object) is nested as
/// written: the pre-scan counts the hidden object, so it never lets more
/// nesting through than the text holds.
#[test]
fn the_depth_pre_scan_counts_nesting_that_duplicate_keys_hide() {
    let body = br#"[{"jsonrpc":"2.0","id":1,"method":{"deep":{"deeper":[1]}},"method":"ping"}]"#;
    let value: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(value[0]["method"], "ping", "serde keeps the last duplicate");
    assert!(
        cedargate::mcp::jsonrpc::depth_exceeds(body, 4),
        "the text nests 5 deep"
    );
    assert!(!cedargate::mcp::jsonrpc::depth_exceeds(body, 5));
    let found = std::fs::read("fuzz/seeds/jsonrpc/39-duplicate-keys-depth").unwrap();
    assert!(cedargate::mcp::jsonrpc::depth_exceeds(&found, 2));
}
