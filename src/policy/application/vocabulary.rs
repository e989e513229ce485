//! What a decision application's schema declares, read once at load: its
//! one namespace, its entity types with the attributes each declares, and
//! its actions with the attributes each one's context declares.
//!
//! The mapping of AuthZEN requests reads it to name types (`type: "user"`
//! is the entity type `user` of the application's namespace), to keep only
//! the properties and context members the schema declares (no policy can
//! read any other: strict validation refuses it), and to find the declared
//! record type of `context.actionProperties`.

use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;

use cedar_policy::{EntityId, EntityTypeName, EntityUid};
use serde_json::Value;

use super::ACTION_PROPERTIES;

/// One entity type of the application.
#[derive(Debug, Clone)]
pub struct EntityType {
    /// Its Cedar name (namespaced).
    pub name: EntityTypeName,
    /// The attributes its shape declares.
    pub attributes: BTreeSet<String>,
}

/// One action of the application.
#[derive(Debug, Clone)]
pub struct ActionType {
    /// Its Cedar uid.
    pub uid: EntityUid,
    /// The attributes its context declares.
    pub context: BTreeSet<String>,
    /// The attributes of its `context.actionProperties` record, when the
    /// context declares one (`None`: `action.properties` is not read).
    pub action_properties: Option<BTreeSet<String>>,
}

/// The names an application's schema declares.
#[derive(Debug, Clone, Default)]
pub struct Vocabulary {
    /// The one namespace of the schema.
    pub namespace: String,
    /// Entity types by their name inside the namespace.
    pub entity_types: HashMap<String, EntityType>,
    /// Actions by name.
    pub actions: HashMap<String, ActionType>,
}

/// Why a schema cannot be an application's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VocabularyError {
    /// Declarations outside any namespace, or in several.
    #[error(
        "an application's schema declares everything inside exactly one `namespace {{ … }}`; found {0}"
    )]
    Namespaces(String),
    /// The gateway's own namespace.
    #[error("the namespace `{0}` is the gateway's own; name the application's namespace otherwise")]
    Reserved(String),
    /// A name Cedar reports that does not parse back (not expected).
    #[error("cannot read the declared name `{0}`")]
    Name(String),
}

impl Vocabulary {
    /// Reads the JSON form of a schema (`SchemaFragment::to_json_value`).
    pub fn of(schema_json: &Value) -> Result<Vocabulary, VocabularyError> {
        let namespaces = schema_json.as_object().cloned().unwrap_or_default();
        let (namespace, body) = only_namespace(&namespaces)?;
        if namespace == super::super::NAMESPACE {
            return Err(VocabularyError::Reserved(namespace.to_string()));
        }
        let common = body.get("commonTypes");
        let mut vocabulary = Vocabulary {
            namespace: namespace.to_string(),
            ..Vocabulary::default()
        };
        for (name, declared) in body
            .get("entityTypes")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let full = format!("{namespace}::{name}");
            let type_name =
                EntityTypeName::from_str(&full).map_err(|_| VocabularyError::Name(full.clone()))?;
            let attributes = record_attributes(declared.get("shape"), common);
            vocabulary.entity_types.insert(
                name.clone(),
                EntityType {
                    name: type_name,
                    attributes,
                },
            );
        }
        let action_type = EntityTypeName::from_str(&format!("{namespace}::Action"))
            .map_err(|_| VocabularyError::Name(format!("{namespace}::Action")))?;
        for (name, declared) in body
            .get("actions")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            vocabulary
                .actions
                .insert(name.clone(), action(&action_type, name, declared, common));
        }
        Ok(vocabulary)
    }

    /// The entity type `type` names: its name inside the namespace, or its
    /// namespaced name.
    pub fn entity_type(&self, type_name: &str) -> Option<&EntityType> {
        let local = match type_name.strip_prefix(&self.namespace) {
            Some(rest) => rest.strip_prefix("::").unwrap_or(type_name),
            None => type_name,
        };
        self.entity_types.get(local)
    }
}

/// The one namespace holding every declaration.
fn only_namespace(
    namespaces: &serde_json::Map<String, Value>,
) -> Result<(&str, &Value), VocabularyError> {
    let declaring: Vec<(&String, &Value)> = namespaces
        .iter()
        .filter(|(_, body)| declares_anything(body))
        .collect();
    match declaring.as_slice() {
        [(name, body)] if !name.is_empty() => Ok((name.as_str(), body)),
        [] => Err(VocabularyError::Namespaces("no declarations".into())),
        _ => Err(VocabularyError::Namespaces(
            declaring
                .iter()
                .map(|(name, _)| {
                    if name.is_empty() {
                        "declarations outside a namespace".to_string()
                    } else {
                        format!("`{name}`")
                    }
                })
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

fn declares_anything(body: &Value) -> bool {
    ["entityTypes", "actions", "commonTypes"].iter().any(|k| {
        body.get(*k)
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty())
    })
}

/// One action's uid and what its context declares.
fn action(
    action_type: &EntityTypeName,
    name: &str,
    declared: &Value,
    common: Option<&Value>,
) -> ActionType {
    let context = declared.pointer("/appliesTo/context");
    let context_record = context.and_then(|c| super::super::group_shapes::resolve(c, common));
    let action_properties = context_record
        .and_then(|r| r.pointer(&format!("/attributes/{ACTION_PROPERTIES}")))
        .map(|ty| record_attributes(Some(ty), common));
    ActionType {
        uid: EntityUid::from_type_name_and_id(action_type.clone(), EntityId::new(name)),
        context: record_attributes(context, common),
        action_properties,
    }
}

/// The attribute names of a record type (inline or a common type); none
/// for any other type.
fn record_attributes(ty: Option<&Value>, common: Option<&Value>) -> BTreeSet<String> {
    ty.and_then(|t| super::super::group_shapes::resolve(t, common))
        .and_then(|r| r.get("attributes"))
        .and_then(Value::as_object)
        .map(|attrs| attrs.keys().cloned().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocabulary(text: &str) -> Result<Vocabulary, VocabularyError> {
        let (fragment, _) = cedar_policy::SchemaFragment::from_cedarschema_str(text).unwrap();
        Vocabulary::of(&fragment.to_json_value().unwrap())
    }

    #[test]
    fn types_attributes_and_contexts_are_read() {
        let v = vocabulary(
            r#"namespace Records {
              type Env = { ip?: String };
              entity user { role?: String, dept: String };
              entity record { status: String };
              entity group;
              action read appliesTo { principal: [user], resource: [record], context: Env };
              action delete appliesTo { principal: [user], resource: [record],
                                        context: { actionProperties?: { soft: Bool } } };
            }"#,
        )
        .unwrap();
        assert_eq!(v.namespace, "Records");
        let user = v.entity_type("user").unwrap();
        assert_eq!(user.name.to_string(), "Records::user");
        assert_eq!(user.attributes.iter().collect::<Vec<_>>(), ["dept", "role"]);
        assert!(v.entity_type("Records::record").is_some());
        assert!(v.entity_type("Other::record").is_none());
        assert!(v.entity_type("Action").is_none());
        assert!(v.entity_type("group").unwrap().attributes.is_empty());
        let read = &v.actions["read"];
        assert_eq!(read.uid.to_string(), "Records::Action::\"read\"");
        assert_eq!(read.context.iter().collect::<Vec<_>>(), ["ip"]);
        assert!(read.action_properties.is_none());
        let delete = &v.actions["delete"];
        let soft = delete.action_properties.as_ref().unwrap();
        assert_eq!(soft.iter().collect::<Vec<_>>(), ["soft"]);
    }

    #[test]
    fn one_namespace_and_not_the_gateway_s() {
        let outside = vocabulary("entity a; namespace N { entity b; }").unwrap_err();
        assert!(
            outside.to_string().contains("outside a namespace"),
            "{outside}"
        );
        let two = vocabulary("namespace A { entity a; } namespace B { entity b; }").unwrap_err();
        assert!(two.to_string().contains("`A`, `B`"), "{two}");
        let gateway = vocabulary("namespace Gateway { entity a; }").unwrap_err();
        assert_eq!(gateway, VocabularyError::Reserved("Gateway".into()));
    }
}
