//! What a `read_node` verdict can depend on, read once from a policy set
//! and its schema, so the nodes of one graph call that no policy can tell
//! apart share one Cedar decision.
//!
//! Within one call every `read_node` request has the same principal,
//! action, context and entity slice; nodes differ only by their uid and
//! their two attributes (`type`, `name`); their parent is always the
//! session's project and they carry no tags. A policy can observe:
//! - the uid only by comparing `resource` with another `GraphNode`, and a
//!   `GraphNode` value can come only from `resource` itself, an entity
//!   literal, or an attribute / context field of that type. So when no
//!   policy holds a `GraphNode` literal and the schema names `GraphNode`
//!   nowhere but as the resource of actions, no policy can tell two nodes
//!   apart by uid;
//! - an attribute only through `e.attr` or `e has attr` where `e` is built
//!   from `resource` (the only `GraphNode` expression left).
//!
//! Nodes with equal values of the attributes that are read therefore get
//! the same verdict. Every node is still recorded with its own verdict, and
//! replay decides each one on its own, so the batched record keeps proving
//! the sharing right.

use cedar_policy::{PolicySet, SchemaFragment};
use serde_json::Value;

use super::Kind;

/// What `read_node` verdicts of one policy set depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeDependence {
    /// A policy can single a node out by its uid: every node is decided alone.
    pub uid: bool,
    /// A policy reads `resource.type`.
    pub node_type: bool,
    /// A policy reads `resource.name`.
    pub name: bool,
}

/// The part of a node a shared verdict is keyed by.
pub type NodeKey<'a> = (Option<&'a str>, Option<&'a str>);

impl NodeDependence {
    /// Reads `policies` (static and linked) and the schema text. Anything it
    /// cannot read makes every node be decided alone.
    pub fn of(policies: &PolicySet, schema_text: &str) -> Self {
        let mut dep = NodeDependence {
            uid: schema_names_graph_node(schema_text),
            ..NodeDependence::default()
        };
        let node_type = Kind::GraphNode.qualified();
        for p in policies.policies() {
            let linked = p.template_links().unwrap_or_default();
            if p.entity_literals()
                .iter()
                .chain(linked.values())
                .any(|uid| uid.type_name().to_string() == node_type)
            {
                dep.uid = true;
            }
            match p.to_json() {
                Ok(est) => attributes_of_resource(&est, &mut dep),
                Err(_) => dep.uid = true,
            }
        }
        dep
    }

    /// The key nodes sharing a verdict agree on, or `None` when each node
    /// must be decided alone.
    pub fn key<'a>(&self, node_type: &'a str, name: &'a str) -> Option<NodeKey<'a>> {
        if self.uid {
            return None;
        }
        Some((
            self.node_type.then_some(node_type),
            self.name.then_some(name),
        ))
    }
}

/// Whether the schema mentions `GraphNode` anywhere but as the resource type
/// of an action (an attribute, a context field, a parent type, a principal):
/// then a policy could compare `resource` with another node. A schema that
/// does not parse counts as mentioning it.
fn schema_names_graph_node(schema_text: &str) -> bool {
    let Ok((fragment, _)) = SchemaFragment::from_cedarschema_str(schema_text) else {
        return true;
    };
    let Ok(mut json) = fragment.to_json_value() else {
        return true;
    };
    if let Some(namespaces) = json.as_object_mut() {
        for body in namespaces.values_mut() {
            if let Some(actions) = body.get_mut("actions").and_then(Value::as_object_mut) {
                for action in actions.values_mut() {
                    if let Some(applies) =
                        action.get_mut("appliesTo").and_then(Value::as_object_mut)
                    {
                        applies.remove("resourceTypes");
                    }
                }
            }
        }
    }
    mentions_graph_node(&json)
}

fn mentions_graph_node(v: &Value) -> bool {
    match v {
        Value::String(s) => s == "GraphNode" || s.ends_with("::GraphNode"),
        Value::Array(items) => items.iter().any(mentions_graph_node),
        Value::Object(map) => map.values().any(mentions_graph_node),
        _ => false,
    }
}

/// Notes every attribute read (`.` or `has`) from an expression that
/// contains the `resource` variable.
fn attributes_of_resource(est: &Value, dep: &mut NodeDependence) {
    match est {
        Value::Object(map) => {
            if let (Some(left), Some(attr)) = (map.get("left"), map.get("attr"))
                && contains_resource(left)
            {
                match attr.as_str() {
                    Some("type") => dep.node_type = true,
                    Some("name") => dep.name = true,
                    Some(_) => {}
                    // An attribute path we do not understand: decide alone.
                    None => dep.uid = true,
                }
            }
            for v in map.values() {
                attributes_of_resource(v, dep);
            }
        }
        Value::Array(items) => {
            for v in items {
                attributes_of_resource(v, dep);
            }
        }
        _ => {}
    }
}

fn contains_resource(v: &Value) -> bool {
    match v {
        Value::Object(map) => {
            map.get("Var").and_then(Value::as_str) == Some("resource")
                || map.values().any(contains_resource)
        }
        Value::Array(items) => items.iter().any(contains_resource),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = include_str!("../../schemas/gateway.cedarschema");

    fn dep(policies: &str) -> NodeDependence {
        let set: PolicySet = policies.parse().unwrap();
        NodeDependence::of(&set, SCHEMA)
    }

    #[test]
    fn shipped_style_policies_read_nothing_of_a_node() {
        let d = dep(r#"
            permit (principal, action == Gateway::Action::"read_node", resource)
            when { resource in context.session.project };
            forbid (principal, action, resource) unless { principal == context.session.agent };
            permit (principal, action, resource) when { principal.name == "x" };"#);
        assert_eq!(d, NodeDependence::default());
        assert_eq!(d.key("Service", "Billing"), Some((None, None)));
    }

    #[test]
    fn attributes_read_from_resource_are_keys() {
        let d = dep(r#"
            forbid (principal, action == Gateway::Action::"read_node", resource)
            when { resource.type == "Secret" };"#);
        assert!(d.node_type && !d.name && !d.uid);
        assert_eq!(d.key("Secret", "vault"), Some((Some("Secret"), None)));
        let d = dep(r#"
            forbid (principal, action, resource)
            when { resource has name && (if true then resource else resource).name like "*key*" };"#);
        assert!(d.name && !d.node_type && !d.uid);
    }

    #[test]
    fn a_node_literal_or_a_node_typed_attribute_decides_each_node_alone() {
        let d = dep(r#"
            forbid (principal, action, resource == Gateway::GraphNode::"n-1");"#);
        assert!(d.uid);
        assert_eq!(d.key("Service", "Billing"), None);
        let d = dep(r#"
            forbid (principal, action, resource) when { resource in [Gateway::GraphNode::"n-2"] };"#);
        assert!(d.uid);
        let schema = SCHEMA.replace(
            "entity Agent in [Org, Role] = {\n    name: String,",
            "entity Agent in [Org, Role] = {\n    name: String,\n    pinned: GraphNode,",
        );
        assert_ne!(schema, SCHEMA, "the test must change the schema");
        let set: PolicySet = "permit (principal, action, resource);".parse().unwrap();
        assert!(NodeDependence::of(&set, &schema).uid);
        assert!(!NodeDependence::of(&set, SCHEMA).uid);
    }

    #[test]
    fn linked_templates_are_read_with_their_slots_filled() {
        let mut set: PolicySet = r#"
            @id("t")
            forbid (principal, action, resource == ?resource);"#
            .parse()
            .unwrap();
        assert!(!NodeDependence::of(&set, SCHEMA).uid);
        let template = set.templates().next().unwrap().id().clone();
        set.link(
            template,
            cedar_policy::PolicyId::new("t-1"),
            std::collections::HashMap::from([(
                cedar_policy::SlotId::resource(),
                Kind::GraphNode.uid("n-3").0,
            )]),
        )
        .unwrap();
        assert!(NodeDependence::of(&set, SCHEMA).uid);
    }
}
