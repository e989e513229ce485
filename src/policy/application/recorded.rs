//! Deciding an application's recorded decision again, under the set that
//! made it or under a candidate: what `audit replay`, the console's replay
//! and its what-if do with the records of the decision applications.
//!
//! An evaluation's record holds the Cedar request exactly as it was
//! decided (principal, action, resource, the context as decided) and the
//! entity data it was decided on: the application's data as loaded (the
//! record's snapshot, which the [`AppSet`] deciding it again is built on)
//! and the entities the request added to it (`notes.authzen.entities`).
//! Deciding it again maps nothing: the recorded request is parsed against
//! the deciding set's schema and decided, so under the set that made it
//! the verdict is the one recorded.
//!
//! A search page's record holds the search as asked
//! (`notes.authzen.search.request`, [`search_request_json`]) and its
//! results: each result is decided again as the evaluation it was (the
//! request with the result in the searched place), mapped by the deciding
//! set as the search mapped it live. A result the set no longer maps (its
//! type or action gone, a property it now refuses) is a deny naming why.

use cedar_policy::{Context, Entities, Entity, EntityUid, Request};
use serde_json::{Map, Value, json};

use super::super::{Uid, Verdict};
use super::{ActionInput, AppSet, EntityInput, RequestInput};

/// A recorded evaluation, as the trail's columns and notes hold it.
#[derive(Debug, Clone, Copy)]
pub struct RecordedEvaluation<'a> {
    /// The principal's uid (Cedar text).
    pub principal: &'a str,
    /// The action's name in the application's namespace (`write`).
    pub action: &'a str,
    /// The resource's uid (Cedar text).
    pub resource: &'a str,
    /// The Cedar context as decided (JSON text).
    pub context: &'a str,
    /// The entities the request added to the stored data (entity JSON).
    pub added: &'a [Value],
}

/// Why a recorded request cannot be decided under a set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordedError {
    /// A recorded uid does not parse.
    #[error("recorded {field} `{text}` does not parse: {message}")]
    Uid {
        /// `principal` or `resource`.
        field: &'static str,
        /// The recorded text.
        text: String,
        /// Cedar's reason.
        message: String,
    },
    /// The set's schema does not declare the action.
    #[error("the action `{0}` is not declared by the deciding set's schema")]
    Action(String),
    /// The recorded context is not JSON or does not fit the action.
    #[error("the recorded context does not fit `{action}`: {message}")]
    Context {
        /// The action.
        action: String,
        /// Why.
        message: String,
    },
    /// The request does not fit the schema (a principal or resource type
    /// the action does not apply to).
    #[error("the recorded request does not fit the deciding schema: {0}")]
    Request(String),
    /// An entity the request added does not fit the schema.
    #[error("an entity the request added does not fit the deciding schema: {0}")]
    Added(String),
    /// A search page's record does not hold its request.
    #[error("the search page's record holds no readable request: {0}")]
    Search(String),
}

impl AppSet {
    /// Decides a recorded evaluation again on this set's data with what
    /// the request added.
    pub fn decide_recorded(&self, r: &RecordedEvaluation<'_>) -> Result<Verdict, RecordedError> {
        let principal = uid("principal", r.principal)?;
        let resource = uid("resource", r.resource)?;
        let action = self
            .vocabulary
            .actions
            .get(r.action)
            .ok_or_else(|| RecordedError::Action(r.action.to_string()))?;
        let context_error = |message: String| RecordedError::Context {
            action: r.action.to_string(),
            message,
        };
        let json: Value =
            serde_json::from_str(r.context).map_err(|e| context_error(e.to_string()))?;
        let context = Context::from_json_value(json, Some((&self.bundle.schema, &action.uid)))
            .map_err(|e| context_error(e.to_string()))?;
        let request = Request::new(
            principal,
            action.uid.clone(),
            resource,
            context,
            Some(&self.bundle.schema),
        )
        .map_err(|e| RecordedError::Request(e.to_string()))?;
        if r.added.is_empty() {
            return Ok(self.bundle.decide_request(&request, &self.data.entities));
        }
        let entities = self.with_added(r.added)?;
        Ok(self.bundle.decide_request(&request, &entities))
    }

    /// The stored data with `added` over it, each checked against the
    /// schema.
    fn with_added(&self, added: &[Value]) -> Result<Entities, RecordedError> {
        let parsed = added
            .iter()
            .map(|v| {
                Entity::from_json_value(v.clone(), Some(&self.bundle.schema))
                    .map_err(|e| RecordedError::Added(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.data
            .entities
            .clone()
            .upsert_entities(parsed, None)
            .map_err(|e| RecordedError::Added(e.to_string()))
    }

    /// Decides one result of a recorded search page again: the recorded
    /// search `request` of `kind` (`subject`, `resource`, `action`) with
    /// `result` in the searched place, mapped and decided as live. Returns
    /// the verdict and the Cedar uids of the evaluation (principal,
    /// action, resource) as a record would name them.
    pub fn decide_search_result(
        &self,
        request: &Value,
        kind: &str,
        result: &str,
    ) -> Result<(Verdict, [String; 3]), RecordedError> {
        let mut input = request_input(request)
            .ok_or_else(|| RecordedError::Search("not a search request".into()))?;
        match kind {
            "subject" => input.subject.id = result,
            "resource" => input.resource.id = result,
            "action" => input.action.name = result,
            other => return Err(RecordedError::Search(format!("unknown kind `{other}`"))),
        }
        let names = [
            self.uid_text(input.subject.type_name, input.subject.id)
                .unwrap_or_else(|| input.subject.id.to_string()),
            input.action.name.to_string(),
            self.uid_text(input.resource.type_name, input.resource.id)
                .unwrap_or_else(|| input.resource.id.to_string()),
        ];
        let verdict = match self.prepare(&input) {
            Ok(prepared) => self.decide(&prepared),
            Err(e) => Verdict::denied_with(e.to_string()),
        };
        Ok((verdict, names))
    }
}

/// A recorded uid, parsed.
fn uid(field: &'static str, text: &str) -> Result<EntityUid, RecordedError> {
    text.parse::<Uid>()
        .map(|u| u.0)
        .map_err(|e| RecordedError::Uid {
            field,
            text: text.to_string(),
            message: e.to_string(),
        })
}

/// A search as its record keeps it: the evaluation each candidate is
/// decided as (the searched entity's `id`, or the action's `name`, empty),
/// in AuthZEN's own shape.
pub fn search_request_json(template: &RequestInput<'_>) -> Value {
    let entity = |e: &EntityInput<'_>| {
        let mut m = Map::new();
        m.insert("type".into(), json!(e.type_name));
        m.insert("id".into(), json!(e.id));
        if let Some(p) = e.properties {
            m.insert("properties".into(), Value::Object(p.clone()));
        }
        Value::Object(m)
    };
    let mut action = Map::new();
    action.insert("name".into(), json!(template.action.name));
    if let Some(p) = template.action.properties {
        action.insert("properties".into(), Value::Object(p.clone()));
    }
    let mut request = Map::new();
    request.insert("subject".into(), entity(&template.subject));
    request.insert("action".into(), Value::Object(action));
    request.insert("resource".into(), entity(&template.resource));
    if let Some(c) = template.context {
        request.insert("context".into(), Value::Object(c.clone()));
    }
    Value::Object(request)
}

/// The evaluation [`search_request_json`] wrote.
fn request_input(v: &Value) -> Option<RequestInput<'_>> {
    fn entity(v: &Value) -> Option<EntityInput<'_>> {
        Some(EntityInput {
            type_name: v.get("type")?.as_str()?,
            id: v.get("id")?.as_str()?,
            properties: v.get("properties").and_then(Value::as_object),
        })
    }
    let action = v.get("action")?;
    Some(RequestInput {
        subject: entity(v.get("subject")?)?,
        action: ActionInput {
            name: action.get("name")?.as_str()?,
            properties: action.get("properties").and_then(Value::as_object),
        },
        resource: entity(v.get("resource")?)?,
        context: v.get("context").and_then(Value::as_object),
        at: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::super::load::{load_app, with_data};
    use super::super::{ActionInput, AppSet, EntityInput, RequestInput};
    use super::{RecordedError, RecordedEvaluation, search_request_json};

    fn records() -> AppSet {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pdp/records");
        load_app("records", &dir).unwrap_or_else(|e| panic!("{}", e.render()))
    }

    /// A live decision, decided again from what its record holds, on a
    /// set rebuilt from the recorded data, is the same verdict.
    #[test]
    fn a_recorded_evaluation_decides_as_it_did() {
        let live = records();
        let carol = json!({"role": "admin"});
        let input = RequestInput {
            subject: EntityInput {
                type_name: "user",
                id: "carol",
                properties: carol.as_object(),
            },
            action: ActionInput {
                name: "write",
                properties: None,
            },
            resource: EntityInput {
                type_name: "record",
                id: "record-2",
                properties: None,
            },
            context: None,
            at: String::new(),
        };
        let prepared = live.prepare(&input).unwrap();
        let verdict = live.decide(&prepared);
        assert!(verdict.allowed);
        let again = with_data(
            "records",
            Arc::clone(&live.bundle),
            &live.data.json,
            "snapshot",
        )
        .unwrap();
        let (principal, resource) = (prepared.principal.text(), prepared.resource.text());
        let recorded = RecordedEvaluation {
            principal: &principal,
            action: "write",
            resource: &resource,
            context: &prepared.context,
            added: &prepared.overlay,
        };
        let replayed = again.decide_recorded(&recorded).unwrap();
        assert_eq!(
            (replayed.allowed, &replayed.reasons),
            (true, &verdict.reasons)
        );
        // Without what the request added, carol is no admin.
        let bare = RecordedEvaluation {
            added: &[],
            ..recorded
        };
        assert!(!again.decide_recorded(&bare).unwrap().allowed);
        let unknown = RecordedEvaluation {
            action: "fly",
            ..recorded
        };
        assert_eq!(
            again.decide_recorded(&unknown).unwrap_err(),
            RecordedError::Action("fly".into())
        );
    }

    #[test]
    fn a_search_result_is_decided_as_the_evaluation_it_was() {
        let set = records();
        let template = RequestInput {
            subject: EntityInput {
                type_name: "user",
                id: "",
                properties: None,
            },
            action: ActionInput {
                name: "write",
                properties: None,
            },
            resource: EntityInput {
                type_name: "record",
                id: "record-2",
                properties: None,
            },
            context: None,
            at: String::new(),
        };
        let request = search_request_json(&template);
        let (bob, names) = set
            .decide_search_result(&request, "subject", "bob")
            .unwrap();
        assert!(bob.allowed);
        assert_eq!(names[0], r#"Records::user::"bob""#);
        let (alice, _) = set
            .decide_search_result(&request, "subject", "alice")
            .unwrap();
        assert!(!alice.allowed);
        let (read, names) = set
            .decide_search_result(&request, "action", "read")
            .unwrap();
        assert!(read.allowed && names[1] == "read");
        let (fly, _) = set.decide_search_result(&request, "action", "fly").unwrap();
        assert!(!fly.allowed && !fly.errors.is_empty());
    }
}
