//! The equivalence classes of a session's remote peer tools, which
//! `tools/list` decides once per class, and so the number of decisions a
//! `tools/list` makes (what it costs against the rate limits).
//!
//! Two tools of one peer are indistinguishable to any policy that does not
//! name one of them: same type, same parents (the peer), same attributes,
//! same context. Cedar can tell them apart only by their uid, which a
//! policy can compare only with a literal. So a tool whose name appears as
//! a string literal (or template link) in the active set is decided on its
//! own, and every other tool of a peer shares one decision made on a
//! representative. Built-in tools are decided one by one.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::gateway::{Gateway, SessionView};
use crate::policy::PolicyBundle;

/// The equivalence classes of a session's peer tools.
pub struct Classes<'a> {
    /// Tool names the active policy set names as literals (`None`: the
    /// session has no peer tools).
    named: Option<Arc<HashSet<String>>>,
    /// Members per peer (tools not named).
    sizes: HashMap<&'a str, usize>,
}

impl<'a> Classes<'a> {
    /// The classes of `view`'s tools under `bundle`.
    pub fn of(gw: &Gateway, bundle: &PolicyBundle, view: &'a SessionView) -> Classes<'a> {
        let peer_tools = || {
            view.tools
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
        let named = gw.a2a.policy_literals(bundle);
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
    pub fn class_of<'t>(&self, name: &str, peer: Option<&'t str>) -> Option<&'t str> {
        let named = self.named.as_ref()?;
        peer.filter(|_| !named.contains(name))
    }

    /// Members of `peer`'s class.
    pub fn size(&self, peer: &str) -> usize {
        self.sizes.get(peer).copied().unwrap_or(1)
    }

    /// How many `view_tool` decisions a `tools/list` of `view` makes: one
    /// per tool, except one per class.
    pub fn decisions(&self, view: &SessionView) -> usize {
        let classed: usize = self.sizes.values().sum();
        view.tools.len() - classed.min(view.tools.len()) + self.sizes.len()
    }
}
