//! An AuthZEN evaluation mapped onto an application's Cedar vocabulary.
//!
//! - **`type`** names an entity type of the application's one namespace:
//!   `user` (or `Records::user`) is `Records::user`. Any other type, the
//!   action type included, is refused.
//! - **`id`** is the entity id as it is, any string: it is never written
//!   into Cedar text, so quotes, `::` or backslashes are plain data.
//! - **`properties`** of a subject or resource: the members its entity
//!   type declares are attributes; the others are left out (no policy can
//!   read them, strict validation refuses that) and named in the record.
//!   When the stored data holds the entity, properties may *add* the
//!   attributes it lacks; a property equal to a stored value is accepted,
//!   one that differs is refused, and parents and tags always come from
//!   the stored data (a request never changes group membership). An
//!   entity the data lacks is built from its properties alone (no
//!   parents). Either way the entity is type-checked against the schema.
//! - **`action.name`** is an action of the namespace; `action.properties`
//!   become `context.actionProperties` when the action's context declares
//!   that record (its undeclared members left out), else are left out.
//! - **`context`**: the members the action's context declares, checked
//!   against its type; the others are left out. `actionProperties` may not
//!   be given in it.
//! - The request is then checked against the schema (the action must apply
//!   to the subject's and the resource's types).
//!
//! Every refusal is an [`InputError`] naming the field: an ill-typed
//! request is answered 400, never decided as a deny.

use std::borrow::Cow;
use std::collections::BTreeSet;

use cedar_policy::{Context, Entity, EntityId, EntityUid, Request, RequestValidationError};
use serde_json::{Map, Value};

use super::super::Uid;
use super::vocabulary::ActionType;
use super::{ACTION_PROPERTIES, AppSet, EntityInput, InputError, Prepared, RequestInput};

/// A subject or resource mapped: its uid and, when the request added to
/// the stored data, the entity to decide with (and its JSON).
struct Mapped {
    uid: EntityUid,
    overlay: Option<(Entity, Value)>,
}

/// Maps one evaluation (rules in the module doc).
pub(super) fn prepare<'s>(
    set: &'s AppSet,
    input: &RequestInput<'_>,
) -> Result<Prepared<'s>, InputError> {
    let at = input.at.as_str();
    let mut ignored = Vec::new();
    let action = set
        .vocabulary
        .actions
        .get(input.action.name)
        .ok_or_else(|| InputError::UnknownAction {
            field: format!("{at}action"),
            name: input.action.name.to_string(),
        })?;
    let subject = entity_of(set, &format!("{at}subject"), &input.subject, &mut ignored)?;
    let resource = entity_of(set, &format!("{at}resource"), &input.resource, &mut ignored)?;
    let (principal, resource_uid) = (subject.uid.clone(), resource.uid.clone());
    let overlay = overlay_of(at, subject, resource)?;
    let (context, context_json) = context_of(set, action, input, &mut ignored)?;
    let request = Request::new(
        principal.clone(),
        action.uid.clone(),
        resource_uid.clone(),
        context,
        Some(&set.bundle.schema),
    )
    .map_err(|e| request_error(at, &action.uid, &e))?;
    let (entities, overlay) = with_overlay(set, at, overlay)?;
    Ok(Prepared {
        request,
        entities,
        principal: Uid(principal),
        action: Uid(action.uid.clone()),
        resource: Uid(resource_uid),
        context: context_json.to_string(),
        overlay,
        ignored,
    })
}

/// A request the schema refuses, named by the field at fault: a context
/// of the wrong type, or a subject or resource type the action does not
/// apply to.
fn request_error(at: &str, action: &EntityUid, e: &RequestValidationError) -> InputError {
    let field = match e {
        RequestValidationError::InvalidContext(_) | RequestValidationError::TypeOfContext(_) => {
            return InputError::Context {
                field: format!("{at}context"),
                action: Uid(action.clone()).text(),
                message: e.to_string(),
            };
        }
        RequestValidationError::InvalidPrincipalType(_)
        | RequestValidationError::UndeclaredPrincipalType(_) => "subject",
        RequestValidationError::InvalidResourceType(_)
        | RequestValidationError::UndeclaredResourceType(_) => "resource",
        _ => "action",
    };
    InputError::Request {
        field: format!("{at}{field}"),
        message: e.to_string(),
    }
}

/// The entity a subject or resource names, with its properties applied.
fn entity_of(
    set: &AppSet,
    field: &str,
    input: &EntityInput<'_>,
    ignored: &mut Vec<String>,
) -> Result<Mapped, InputError> {
    let ty = set.vocabulary.entity_type(input.type_name).ok_or_else(|| {
        InputError::UnknownEntityType {
            field: field.to_string(),
            type_name: input.type_name.to_string(),
        }
    })?;
    let uid = EntityUid::from_type_name_and_id(ty.name.clone(), EntityId::new(input.id));
    let declared = declared_members(
        input.properties,
        &ty.attributes,
        &format!("{field}.properties"),
        ignored,
    );
    let stored = set.data.entities.get(&uid);
    if stored.is_some() && declared.is_empty() {
        return Ok(Mapped { uid, overlay: None });
    }
    // A stored entity is decided as stored unless a property adds to it.
    let adds = stored.is_none_or(|s| declared.keys().any(|k| s.attr(k).is_none()));
    let properties = |message: String| InputError::Properties {
        field: field.to_string(),
        entity: Uid(uid.clone()).text(),
        message,
    };
    let json = merged_json(&uid, stored, &declared)
        .map_err(|e| properties(format!("cannot read the stored entity: {e}")))?;
    let entity = Entity::from_json_value(json.clone(), Some(&set.bundle.schema))
        .map_err(|e| properties(e.to_string()))?;
    if let Some(stored) = stored {
        unchanged(field, stored, &entity, &declared)?;
    }
    let overlay = adds.then_some((entity, json));
    Ok(Mapped { uid, overlay })
}

/// The members of `given` that `declared` names; the others are noted as
/// left out (`{field}.{name}`).
fn declared_members(
    given: Option<&Map<String, Value>>,
    declared: &BTreeSet<String>,
    field: &str,
    ignored: &mut Vec<String>,
) -> Map<String, Value> {
    let mut kept = Map::new();
    for (name, value) in given.into_iter().flatten() {
        if declared.contains(name) {
            kept.insert(name.clone(), value.clone());
        } else {
            ignored.push(format!("{field}.{name}"));
        }
    }
    kept
}

/// The entity JSON of the stored entity (or a new one) with `declared`
/// set over its attributes. A stored entity that cannot be written as JSON
/// refuses the request rather than be decided without its stored data.
fn merged_json(
    uid: &EntityUid,
    stored: Option<&Entity>,
    declared: &Map<String, Value>,
) -> Result<Value, Box<cedar_policy::entities_errors::EntitiesError>> {
    let mut json = match stored {
        Some(s) => s.to_json_value().map_err(Box::new)?,
        None => serde_json::json!({
            "uid": { "type": uid.type_name().to_string(), "id": uid.id().unescaped() },
            "attrs": {},
            "parents": [],
        }),
    };
    if let Some(Value::Object(attrs)) = json.get_mut("attrs") {
        for (name, value) in declared {
            attrs.insert(name.clone(), value.clone());
        }
    }
    Ok(json)
}

/// Refuses a property that changes an attribute the stored entity holds.
fn unchanged(
    field: &str,
    stored: &Entity,
    merged: &Entity,
    declared: &Map<String, Value>,
) -> Result<(), InputError> {
    for name in declared.keys() {
        let Some(before) = stored.attr(name) else {
            continue;
        };
        if before.ok() != merged.attr(name).and_then(Result::ok) {
            return Err(InputError::Conflict {
                field: field.to_string(),
                attribute: name.clone(),
                entity: Uid(stored.uid()).text(),
            });
        }
    }
    Ok(())
}

/// The entities the request adds: the subject's and the resource's (one,
/// when they are the same entity with the same properties).
fn overlay_of(
    at: &str,
    subject: Mapped,
    resource: Mapped,
) -> Result<Vec<(Entity, Value)>, InputError> {
    match (subject.overlay, resource.overlay) {
        (Some(s), Some(r)) if subject.uid == resource.uid => {
            if s.1 != r.1 {
                return Err(InputError::SameEntity {
                    field: format!("{at}resource"),
                    entity: Uid(subject.uid).text(),
                });
            }
            Ok(vec![s])
        }
        (s, r) => Ok(s.into_iter().chain(r).collect()),
    }
}

/// The Cedar context: the declared members of `context`, and
/// `action.properties` as `actionProperties` where declared.
fn context_of(
    set: &AppSet,
    action: &ActionType,
    input: &RequestInput<'_>,
    ignored: &mut Vec<String>,
) -> Result<(Context, Value), InputError> {
    let field = format!("{}context", input.at);
    if input
        .context
        .is_some_and(|c| c.contains_key(ACTION_PROPERTIES))
    {
        return Err(InputError::Reserved { field });
    }
    let mut members = declared_members(input.context, &action.context, &field, ignored);
    if let Some(given) = input.action.properties {
        let at = format!("{}action.properties", input.at);
        match &action.action_properties {
            Some(declared) => {
                let kept = declared_members(Some(given), declared, &at, ignored);
                members.insert(ACTION_PROPERTIES.to_string(), Value::Object(kept));
            }
            None => ignored.extend(given.keys().map(|k| format!("{at}.{k}"))),
        }
    }
    let json = Value::Object(members);
    let context = Context::from_json_value(json.clone(), Some((&set.bundle.schema, &action.uid)))
        .map_err(|e| InputError::Context {
        field,
        action: Uid(action.uid.clone()).text(),
        message: e.to_string(),
    })?;
    Ok((context, json))
}

/// The entities to decide with: the stored data as it is, or a copy with
/// the request's entities over it.
fn with_overlay<'s>(
    set: &'s AppSet,
    at: &str,
    overlay: Vec<(Entity, Value)>,
) -> Result<(Cow<'s, cedar_policy::Entities>, Vec<Value>), InputError> {
    if overlay.is_empty() {
        return Ok((Cow::Borrowed(&set.data.entities), Vec::new()));
    }
    let (entities, json): (Vec<Entity>, Vec<Value>) = overlay.into_iter().unzip();
    // Each entity was checked against the schema when it was built.
    let combined = set
        .data
        .entities
        .clone()
        .upsert_entities(entities, None)
        .map_err(|e| InputError::Request {
            field: format!("{at}subject"),
            message: format!("cannot add the request's entities to the stored data: {e}"),
        })?;
    Ok((Cow::Owned(combined), json))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::load::load_app;
    use super::super::{ActionInput, AppSet, EntityInput, InputError, RequestInput};

    fn records() -> AppSet {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pdp/records");
        load_app("records", &dir).unwrap_or_else(|e| panic!("{}", e.render()))
    }

    /// `(subject, action, resource, context)` as JSON, decided: the verdict,
    /// or the input error.
    fn decide(
        set: &AppSet,
        subject: serde_json::Value,
        action: serde_json::Value,
        resource: serde_json::Value,
        context: Option<serde_json::Value>,
    ) -> Result<(bool, Vec<String>, super::super::Prepared<'_>), InputError> {
        fn entity(v: &serde_json::Value) -> EntityInput<'_> {
            EntityInput {
                type_name: v["type"].as_str().unwrap(),
                id: v["id"].as_str().unwrap(),
                properties: v["properties"].as_object(),
            }
        }
        let input = RequestInput {
            subject: entity(&subject),
            action: ActionInput {
                name: action["name"].as_str().unwrap(),
                properties: action["properties"].as_object(),
            },
            resource: entity(&resource),
            context: context.as_ref().and_then(|c| c.as_object()),
            at: String::new(),
        };
        let prepared = set.prepare(&input)?;
        let verdict = set.decide(&prepared);
        Ok((verdict.allowed, verdict.reasons, prepared))
    }

    fn user(id: &str) -> serde_json::Value {
        json!({"type": "user", "id": id})
    }

    fn record(id: &str) -> serde_json::Value {
        json!({"type": "record", "id": id})
    }

    #[test]
    fn stored_entities_decide_as_stored() {
        let set = records();
        let (allowed, reasons, p) = decide(
            &set,
            user("alice"),
            json!({"name": "read"}),
            record("record-1"),
            None,
        )
        .unwrap();
        assert!(allowed);
        assert_eq!(reasons, ["users-read-records"]);
        assert!(p.overlay.is_empty() && p.ignored.is_empty());
        assert_eq!(p.principal.text(), r#"Records::user::"alice""#);
        assert_eq!(p.action.text(), r#"Records::Action::"read""#);
        let (allowed, ..) = decide(
            &set,
            user("bob"),
            json!({"name": "write"}),
            record("record-1"),
            None,
        )
        .unwrap();
        assert!(!allowed);
    }

    #[test]
    fn properties_add_what_the_data_lacks_and_never_change_it() {
        let set = records();
        let carol = json!({"type": "user", "id": "carol", "properties": {"role": "admin"}});
        let (allowed, _, p) = decide(
            &set,
            carol,
            json!({"name": "write"}),
            record("record-2"),
            None,
        )
        .unwrap();
        assert!(
            allowed,
            "a user the data lacks is built from its properties"
        );
        assert_eq!(p.overlay.len(), 1);
        let alice = json!({"type": "user", "id": "alice", "properties": {"role": "admin", "favourite": 1, "parents": []}});
        let (allowed, _, p) = decide(
            &set,
            alice,
            json!({"name": "write"}),
            record("record-2"),
            None,
        )
        .unwrap();
        assert!(allowed, "alice lacks a role: the property adds it");
        assert_eq!(
            p.ignored,
            ["subject.properties.favourite", "subject.properties.parents"]
        );
        assert_eq!(
            p.overlay[0]["parents"],
            json!([{"type": "Records::team", "id": "editors"}])
        );
        let same = json!({"type": "user", "id": "bob", "properties": {"role": "admin"}});
        let (_, _, p) = decide(
            &set,
            same,
            json!({"name": "read"}),
            record("record-1"),
            None,
        )
        .unwrap();
        assert!(
            p.overlay.is_empty(),
            "a property equal to the stored value adds nothing"
        );
        let other = json!({"type": "user", "id": "bob", "properties": {"role": "intern"}});
        let err = decide(
            &set,
            other,
            json!({"name": "write"}),
            record("record-1"),
            None,
        )
        .unwrap_err();
        assert!(
            matches!(err, InputError::Conflict { ref attribute, .. } if attribute == "role"),
            "{err}"
        );
    }

    #[test]
    fn ill_typed_input_is_an_error_not_a_deny() {
        let set = records();
        let typed = json!({"type": "user", "id": "alice", "properties": {"role": 5}});
        let err = decide(
            &set,
            typed,
            json!({"name": "read"}),
            record("record-1"),
            None,
        )
        .unwrap_err();
        assert!(matches!(err, InputError::Properties { .. }), "{err}");
        for unknown in ["spaceship", "Action", "Other::user", ""] {
            let err = decide(
                &set,
                json!({"type": unknown, "id": "x"}),
                json!({"name": "read"}),
                record("record-1"),
                None,
            )
            .unwrap_err();
            assert!(matches!(err, InputError::UnknownEntityType { .. }), "{err}");
        }
        let err = decide(
            &set,
            user("alice"),
            json!({"name": "fly"}),
            record("record-1"),
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "`action.name`: `fly` is not an action of this application"
        );
        let err = decide(
            &set,
            record("record-1"),
            json!({"name": "read"}),
            user("alice"),
            None,
        )
        .unwrap_err();
        assert!(matches!(err, InputError::Request { .. }), "{err}");
        let err = decide(
            &set,
            user("alice"),
            json!({"name": "read"}),
            record("record-1"),
            Some(json!({"ip": 5})),
        )
        .unwrap_err();
        assert!(matches!(err, InputError::Context { .. }), "{err}");
        let err = decide(
            &set,
            user("alice"),
            json!({"name": "delete"}),
            record("record-1"),
            Some(json!({"actionProperties": {"soft": true}})),
        )
        .unwrap_err();
        assert!(matches!(err, InputError::Reserved { .. }), "{err}");
    }

    #[test]
    fn context_and_action_properties() {
        let set = records();
        let ctx = Some(json!({"ip": "10.0.0.1", "time": "2025-06-27T18:03-07:00"}));
        let (allowed, _, p) = decide(
            &set,
            user("alice"),
            json!({"name": "read", "properties": {"method": "GET"}}),
            record("record-1"),
            ctx,
        )
        .unwrap();
        assert!(allowed);
        assert_eq!(p.context, r#"{"ip":"10.0.0.1"}"#);
        assert_eq!(p.ignored, ["context.time", "action.properties.method"]);
        for (soft, expected) in [(true, true), (false, false)] {
            let action = json!({"name": "delete", "properties": {"soft": soft}});
            let (allowed, ..) =
                decide(&set, user("alice"), action, record("record-1"), None).unwrap();
            assert_eq!(allowed, expected);
        }
    }

    /// An id is data: quotes, `::` and backslashes never reach Cedar text.
    #[test]
    fn ids_with_cedar_syntax_are_plain_data() {
        let set = records();
        let id = r#"alice" || principal == Records::user::"bob\"#;
        let (allowed, _, p) = decide(
            &set,
            user(id),
            json!({"name": "write"}),
            record("record-1"),
            None,
        )
        .unwrap();
        assert!(
            allowed,
            "an unknown user without a role may write an active record"
        );
        assert_eq!(p.principal.id(), id);
        let parsed: crate::policy::Uid = p.principal.text().parse().unwrap();
        assert_eq!(parsed, p.principal);
    }
}
