//! `tools/list`: the session's tools that Cedar lets the agent
//! `view_tool`, assembled from each tool's entry serialized once.
//!
//! Tools of one remote peer are decided per equivalence class instead of
//! once each (`tool_classes`): the decision made on a representative is
//! recorded with the class it covers (`notes.equivalenceClass`); replaying
//! that record with any tool of the class gives the same verdict. Built-in
//! tools are decided one by one.

use std::collections::HashMap;

use serde_json::json;

use super::call::Call;
use super::tool_classes::Classes;
use crate::policy::{Action, Kind};
use crate::store::WriteOp;
use crate::tools::list_result;

/// The `tools/list` result text; the decisions are deferred to the
/// request's commit.
pub fn tools_list(call: &Call) -> String {
    let agent = call.agent_uid();
    let classes = Classes::of(&call.gw, &call.bundle, &call.view);
    let mut class_verdict: HashMap<&str, bool> = HashMap::new();
    let mut entries: Vec<&str> = Vec::new();
    let mut records = Vec::new();
    for tool in &call.view.tools {
        let spec = tool.spec();
        let class = classes.class_of(&spec.name, spec.peer.as_deref());
        if let Some(peer) = class
            && let Some(allowed) = class_verdict.get(peer)
        {
            if *allowed {
                entries.push(spec.listing_json());
            }
            continue;
        }
        let mut decided = call.decide(
            &agent,
            Action::ViewTool,
            &Kind::Tool.uid(&spec.name),
            &call.context,
        );
        let allowed = decided.allowed();
        if let Some(peer) = class {
            class_verdict.insert(peer, allowed);
            decided.record.notes = json!({
                "equivalenceClass": { "peerAgent": peer, "tools": classes.size(peer) }
            })
            .to_string();
        }
        records.push(WriteOp::Decision(Box::new(decided.finish_default())));
        if allowed {
            entries.push(spec.listing_json());
        }
    }
    call.defer(records);
    list_result(&entries)
}
