//! `tools/list`: the session's tools that Cedar lets the agent
//! `view_tool`, assembled from each tool's entry serialized once.
//!
//! Remote tools (an A2A peer's, an upstream server's) are decided per
//! equivalence class instead of once each (`tool_classes`). The tools of a
//! class are indistinguishable to any policy that does not name one of
//! them, so every unnamed tool of a class shares one decision made on a
//! representative (unless that decision carries errors, which may name
//! the tool: the next one is then decided alone). Built-in tools are
//! decided one by one.
//!
//! The list's decisions are recorded as one batched `view_tool` record
//! (`audit::tool_list`) listing every tool with its verdict and each
//! class with the tool it was decided on; replay decides each tool alone,
//! so every record re-proves the sharing.

use std::collections::HashMap;

use super::call::Call;
use super::tool_classes::Classes;
use crate::tools::{ToolSpec, list_result};

/// The `tools/list` result text; its record is deferred to the request's
/// commit.
pub fn tools_list(call: &Call) -> String {
    let entries: Vec<&str> = visible(call).iter().map(|s| s.listing_json()).collect();
    list_result(&entries)
}

/// The session's tools Cedar lets the agent `view_tool`, in the session's
/// order; their batched record is deferred to the request's commit.
pub fn visible(call: &Call) -> Vec<&ToolSpec> {
    let classes = Classes::of(&call.gw, &call.bundle, &call.view);
    let mut list = call.tool_list();
    // The decision each class's unnamed tools share, once made.
    let mut decided: HashMap<&str, usize> = HashMap::new();
    let mut entries: Vec<&ToolSpec> = Vec::new();
    for tool in &call.view.tools {
        let spec = tool.spec();
        let class = classes.class_of(&spec.name, spec.class.as_ref());
        let shown = match class.and_then(|c| decided.get(c.key.as_str())) {
            Some(at) => list.share(&spec.name, *at),
            None => {
                let listed = list.decide(&spec.name);
                if let Some(c) = class.filter(|_| listed.shareable) {
                    let parent = (c.parent_kind, c.parent.as_str());
                    decided.insert(&c.key, list.open_class(parent, &spec.name, listed));
                }
                listed.allowed
            }
        };
        if shown {
            entries.push(spec);
        }
    }
    if let Some(record) = list.record() {
        call.record_listing(record);
    }
    entries
}
