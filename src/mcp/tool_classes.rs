//! The equivalence classes of a session's remote tools, which
//! `tools/list` decides once per class, and so the number of decisions a
//! `tools/list` makes (what it costs against the rate limits).
//!
//! Two remote tools are indistinguishable to any policy that does not name
//! one of them when they have the same type, the same parent and the same
//! attributes, and share the context ([`crate::tools::ToolClass`]): every
//! tool of one A2A peer, and the tools of one upstream MCP server whose
//! annotations agree (`readOnly`, `destructive`, `openWorld`, `title`).
//! Cedar can tell them apart only by their uid, which a policy can compare
//! only with a literal. So a tool whose name appears as a string literal
//! (or template link) in the active set is decided on its own, and every
//! other tool of a class shares one decision made on a representative.
//! Built-in tools are decided one by one.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::gateway::{Gateway, SessionView};
use crate::policy::PolicyBundle;
use crate::tools::ToolClass;

/// The equivalence classes of a session's remote tools.
pub struct Classes<'a> {
    /// Tool names the active policy set names as literals (`None`: the
    /// session has no remote tools).
    named: Option<Arc<HashSet<String>>>,
    /// Members per class key (tools not named).
    sizes: HashMap<&'a str, usize>,
}

impl<'a> Classes<'a> {
    /// The classes of `view`'s tools under `bundle`.
    pub fn of(gw: &Gateway, bundle: &PolicyBundle, view: &'a SessionView) -> Classes<'a> {
        let remote = || {
            view.tools
                .iter()
                .map(|t| t.spec())
                .filter_map(|s| Some((s.name.as_str(), s.class.as_ref()?)))
        };
        if remote().next().is_none() {
            return Classes {
                named: None,
                sizes: HashMap::new(),
            };
        }
        let named = gw.a2a.policy_literals(bundle);
        let mut sizes: HashMap<&str, usize> = HashMap::new();
        for (_, class) in remote().filter(|(name, _)| !named.contains(*name)) {
            *sizes.entry(class.key.as_str()).or_default() += 1;
        }
        Classes {
            named: Some(named),
            sizes,
        }
    }

    /// The class a tool shares its decision with, unless the policies name
    /// it (or it is a built-in tool).
    pub fn class_of<'t>(&self, name: &str, class: Option<&'t ToolClass>) -> Option<&'t ToolClass> {
        let named = self.named.as_ref()?;
        class.filter(|_| !named.contains(name))
    }

    /// How many `view_tool` decisions a `tools/list` of `view` makes: one
    /// per tool, except one per class.
    pub fn decisions(&self, view: &SessionView) -> usize {
        let classed: usize = self.sizes.values().sum();
        view.tools.len() - classed.min(view.tools.len()) + self.sizes.len()
    }
}
