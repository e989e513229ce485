//! `tools/list`: the session's tools that Cedar lets the agent
//! `view_tool`, assembled from each tool's entry serialized once.
//!
//! Tools of one remote peer are decided per equivalence class instead of
//! once each. Two such tools are indistinguishable to any policy that
//! does not name one of them: same type, same parents (the peer), same
//! attributes, same context. Cedar can tell them apart only by their uid,
//! which a policy can compare only with a literal. So a tool whose name
//! appears as a string literal (or template link) in the active set is
//! decided on its own, and every other tool of a peer shares one decision
//! made on a representative, recorded with the class it covers
//! (`notes.equivalenceClass`); replaying that record with any tool of the
//! class gives the same verdict. Built-in tools are decided one by one.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::json;

use super::call::Call;
use crate::policy::{Action, Kind};
use crate::store::WriteOp;
use crate::tools::{ToolSpec, list_result};

/// The `tools/list` result text; the decisions are deferred to the
/// request's commit.
pub fn tools_list(call: &Call) -> String {
    let entries: Vec<&str> = visible(call).iter().map(|s| s.listing_json()).collect();
    list_result(&entries)
}

/// The session's tools Cedar lets the agent `view_tool`, in the session's
/// order; the decisions are deferred to the request's commit.
pub fn visible(call: &Call) -> Vec<&ToolSpec> {
    let agent = call.agent_uid();
    let classes = Classes::of(call);
    let mut class_verdict: HashMap<&str, bool> = HashMap::new();
    let mut entries: Vec<&ToolSpec> = Vec::new();
    let mut records = Vec::new();
    for tool in &call.view.tools {
        let spec = tool.spec();
        let class = classes.class_of(&spec.name, spec.peer.as_deref());
        if let Some(peer) = class
            && let Some(allowed) = class_verdict.get(peer)
        {
            if *allowed {
                entries.push(spec);
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
            entries.push(spec);
        }
    }
    call.defer(records);
    entries
}

/// The equivalence classes of a session's peer tools.
struct Classes<'a> {
    /// Tool names the active policy set names as literals.
    named: Option<Arc<HashSet<String>>>,
    /// Members per peer (tools not named).
    sizes: HashMap<&'a str, usize>,
}

impl<'a> Classes<'a> {
    fn of(call: &'a Call) -> Classes<'a> {
        let peer_tools = || {
            call.view
                .tools
                .iter()
                .map(|t| t.spec())
                .filter(|s| s.peer.is_some())
        };
        if peer_tools().next().is_none() {
            return Classes {
                named: None,
                sizes: HashMap::new(),
            };
        }
        let named = call.gw.a2a.policy_literals(&call.bundle);
        let mut sizes: HashMap<&str, usize> = HashMap::new();
        for spec in peer_tools().filter(|s| !named.contains(&s.name)) {
            *sizes
                .entry(spec.peer.as_deref().unwrap_or_default())
                .or_default() += 1;
        }
        Classes {
            named: Some(named),
            sizes,
        }
    }

    /// The class a tool shares its decision with: its peer, unless the
    /// policies name it (or it has no peer).
    fn class_of<'t>(&self, name: &str, peer: Option<&'t str>) -> Option<&'t str> {
        let named = self.named.as_ref()?;
        peer.filter(|_| !named.contains(name))
    }

    fn size(&self, peer: &str) -> usize {
        self.sizes.get(peer).copied().unwrap_or(1)
    }
}
