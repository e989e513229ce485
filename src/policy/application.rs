//! Decision applications: policy sets of other enforcement points (API
//! gateways, internal apps) that cedargate decides for over the AuthZEN
//! Authorization API (`crate::pdp`), each with its own schema, namespace,
//! policies, policy tests and entity data.
//!
//! An [`AppSet`] is one application's strictly validated set (a
//! [`PolicyBundle`], loaded by the gateway's own loader) with its entity
//! data and the names its schema declares ([`vocabulary`]). It maps an
//! AuthZEN request onto Cedar ([`mapping`], rules in its doc) and decides
//! it with the bundle's fail-closed decision; [`recorded`] decides a
//! recorded one again (replay, what-if). Nothing here knows HTTP,
//! AuthZEN's JSON framing or the store: the transport hands in plain
//! values and gets a verdict or a typed [`InputError`].

pub mod candidate;
pub mod load;
mod mapping;
pub mod recorded;
pub mod vocabulary;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use cedar_policy::{Entities, Request};
use serde_json::{Map, Value};

use super::{PolicyBundle, Uid, Verdict};
use vocabulary::Vocabulary;

/// The schema file of an application folder.
pub const SCHEMA_FILE: &str = "schema.cedarschema";
/// The folder of its `*.cedar` files.
pub const POLICIES_DIR: &str = "policies";
/// Its entity data, in Cedar's entity JSON format (optional).
pub const ENTITIES_FILE: &str = "entities.json";
/// The context attribute that holds `action.properties`.
pub const ACTION_PROPERTIES: &str = "actionProperties";

/// One application's active (or candidate) set.
#[derive(Debug)]
pub struct AppSet {
    /// The application's name (its folder's).
    pub name: String,
    /// Its policies and schema, strictly validated (shared with the
    /// replays and what-ifs that decide recorded requests under it).
    pub bundle: Arc<PolicyBundle>,
    /// What its schema declares.
    pub vocabulary: Vocabulary,
    /// Its stored entity data.
    pub data: AppData,
}

/// An application's stored entity data.
#[derive(Debug)]
pub struct AppData {
    /// Parsed against the schema.
    entities: Entities,
    /// The file's text: what decisions record as their entity snapshot.
    pub json: Arc<str>,
    /// SHA-256 of `json`.
    pub hash: String,
    /// Entities in the file.
    pub count: usize,
    /// The ids of the stored entities of each type (by its namespaced
    /// name), sorted: the candidates of a search.
    by_type: HashMap<String, Vec<String>>,
    /// The file's path (`entities.json`, which may be absent).
    pub path: String,
}

/// A subject or a resource as an AuthZEN request gives it.
#[derive(Debug, Clone, Copy)]
pub struct EntityInput<'a> {
    /// `type`: an entity type of the application.
    pub type_name: &'a str,
    /// `id`: any string.
    pub id: &'a str,
    /// `properties`, if any.
    pub properties: Option<&'a Map<String, Value>>,
}

/// An action as an AuthZEN request gives it.
#[derive(Debug, Clone, Copy)]
pub struct ActionInput<'a> {
    /// `name`: an action of the application.
    pub name: &'a str,
    /// `properties`, if any.
    pub properties: Option<&'a Map<String, Value>>,
}

/// One AuthZEN evaluation, with the defaults of its batch applied.
#[derive(Debug, Clone)]
pub struct RequestInput<'a> {
    /// `subject`.
    pub subject: EntityInput<'a>,
    /// `action`.
    pub action: ActionInput<'a>,
    /// `resource`.
    pub resource: EntityInput<'a>,
    /// `context`, if any.
    pub context: Option<&'a Map<String, Value>>,
    /// Where it sits in the request (`""`, or `evaluations[3].`), for
    /// naming a field in an error.
    pub at: String,
}

/// A request mapped onto the application's Cedar vocabulary and checked
/// against its schema: ready to decide, and to record.
#[derive(Debug)]
pub struct Prepared<'s> {
    request: Request,
    entities: Cow<'s, Entities>,
    /// The principal (the subject's entity).
    pub principal: Uid,
    /// The action.
    pub action: Uid,
    /// The resource.
    pub resource: Uid,
    /// The Cedar context as decided (JSON text).
    pub context: String,
    /// The entities the request added to the stored data, or completed
    /// with attributes from its properties (Cedar entity JSON).
    pub overlay: Vec<Value>,
    /// The members left out because the schema does not declare them
    /// (`subject.properties.department`, `context.ip`, …).
    pub ignored: Vec<String>,
}

/// Why a request cannot be decided: ill-typed for the application (an
/// answer of 400, never a deny). `field` names where, e.g.
/// `evaluations[2].subject`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// `type` names no entity type of the application.
    #[error("`{field}.type`: `{type_name}` is not an entity type of this application")]
    UnknownEntityType {
        /// Where.
        field: String,
        /// The type given.
        type_name: String,
    },
    /// `action.name` names no action of the application.
    #[error("`{field}.name`: `{name}` is not an action of this application")]
    UnknownAction {
        /// Where.
        field: String,
        /// The name given.
        name: String,
    },
    /// The entity built from the stored data and the properties does not
    /// fit the schema.
    #[error("`{field}.properties` do not fit the schema for `{entity}`: {message}")]
    Properties {
        /// Where.
        field: String,
        /// The entity.
        entity: String,
        /// Cedar's reason.
        message: String,
    },
    /// A property would change an attribute the stored data holds.
    #[error(
        "`{field}.properties.{attribute}` differs from the stored value of `{entity}`: properties may add attributes, never change stored ones"
    )]
    Conflict {
        /// Where.
        field: String,
        /// The attribute.
        attribute: String,
        /// The entity.
        entity: String,
    },
    /// The subject and the resource are one entity with different properties.
    #[error("`{field}` names the subject's entity `{entity}` with other properties")]
    SameEntity {
        /// Where.
        field: String,
        /// The entity.
        entity: String,
    },
    /// The context holds the member that carries `action.properties`.
    #[error("`{field}.{ACTION_PROPERTIES}` is reserved: it holds `action.properties`")]
    Reserved {
        /// Where.
        field: String,
    },
    /// The context does not fit the action's context type.
    #[error("`{field}` does not fit the context of `{action}`: {message}")]
    Context {
        /// Where.
        field: String,
        /// The action.
        action: String,
        /// Cedar's reason.
        message: String,
    },
    /// The request does not fit the schema (a subject or resource type the
    /// action does not apply to).
    #[error("`{field}`: {message}")]
    Request {
        /// Where.
        field: String,
        /// Cedar's reason.
        message: String,
    },
}

impl AppSet {
    /// Maps one evaluation onto Cedar, type-checked against the schema.
    pub fn prepare<'s>(&'s self, input: &RequestInput<'_>) -> Result<Prepared<'s>, InputError> {
        mapping::prepare(self, input)
    }

    /// Decides a prepared request (fail closed: an error on a `forbid`
    /// denies).
    pub fn decide(&self, prepared: &Prepared<'_>) -> Verdict {
        self.bundle
            .decide_request(&prepared.request, &prepared.entities)
    }

    /// The entity types the schema declares, by name inside its namespace.
    pub fn entity_type_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .vocabulary
            .entity_types
            .keys()
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        names
    }

    /// The ids of the stored entities of the type `type_name` names (as
    /// [`vocabulary::Vocabulary::entity_type`] reads it), sorted; none for
    /// a type the application does not declare.
    pub fn stored_ids(&self, type_name: &str) -> &[String] {
        self.vocabulary
            .entity_type(type_name)
            .and_then(|t| self.data.by_type.get(&t.name.to_string()))
            .map_or(&[], Vec::as_slice)
    }

    /// Whether the stored data holds the entity `type_name`/`id`.
    pub fn stores(&self, type_name: &str, id: &str) -> bool {
        self.stored_ids(type_name)
            .binary_search_by(|s| s.as_str().cmp(id))
            .is_ok()
    }

    /// The namespaced name of the entity type `type_name` names.
    pub fn type_text(&self, type_name: &str) -> Option<String> {
        self.vocabulary
            .entity_type(type_name)
            .map(|t| t.name.to_string())
    }

    /// The uid text of `type_name`/`id`, when the type is the
    /// application's.
    pub fn uid_text(&self, type_name: &str, id: &str) -> Option<String> {
        let ty = self.vocabulary.entity_type(type_name)?;
        Some(
            Uid(cedar_policy::EntityUid::from_type_name_and_id(
                ty.name.clone(),
                cedar_policy::EntityId::new(id),
            ))
            .text(),
        )
    }

    /// The actions the schema declares, sorted.
    pub fn action_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.vocabulary.actions.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}
