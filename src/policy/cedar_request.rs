//! One request written in Cedar's own terms (uids, the context as Cedar
//! JSON, the entities as Cedar JSON), decided by a bundle: how a proof's
//! counterexample is asked again in the console's what-if, exactly as
//! [`super::witness`] decided it after the proof (the action's slice, an
//! erroring `forbid` denies). Every part is checked against the bundle's
//! schema, so a request the schema does not admit is refused, never
//! decided.

use cedar_policy::{Context, EntityUid, Request};

use super::{PolicyBundle, Verdict};

/// A request in Cedar's terms, as text and JSON a form carries.
#[derive(Debug, Clone, Copy)]
pub struct CedarAsk<'a> {
    /// The principal's uid, e.g. `Gateway::Agent::"a"`.
    pub principal: &'a str,
    /// The action's uid, e.g. `Gateway::Action::"write_node"`.
    pub action: &'a str,
    /// The resource's uid.
    pub resource: &'a str,
    /// The context, as Cedar JSON.
    pub context: &'a serde_json::Value,
    /// The entities (action entities come from the schema), as Cedar JSON.
    pub entities: &'a serde_json::Value,
}

/// Why a request in Cedar's terms cannot be decided by a bundle.
#[derive(Debug, thiserror::Error)]
pub enum CedarAskError {
    /// A uid does not parse.
    #[error("the {field} `{text}` is not an entity uid: {message}")]
    Uid {
        /// `principal`, `action` or `resource`.
        field: &'static str,
        /// What was given.
        text: String,
        /// Cedar's message.
        message: String,
    },
    /// The context does not fit the action's context type.
    #[error("the context does not fit the action: {0}")]
    Context(String),
    /// The schema does not admit the request.
    #[error("the schema does not admit this request: {0}")]
    Request(String),
    /// The entities do not load under the schema.
    #[error("the entities do not load under this set's schema: {0}")]
    Entities(String),
}

impl PolicyBundle {
    /// Decides `ask` as the gateway would (see the module doc).
    pub fn decide_cedar(&self, ask: &CedarAsk<'_>) -> Result<Verdict, CedarAskError> {
        let principal = uid("principal", ask.principal)?;
        let action = uid("action", ask.action)?;
        let resource = uid("resource", ask.resource)?;
        let context = Context::from_json_value(ask.context.clone(), Some((&self.schema, &action)))
            .map_err(|e| CedarAskError::Context(e.to_string()))?;
        let request = Request::new(principal, action, resource, context, Some(&self.schema))
            .map_err(|e| CedarAskError::Request(e.to_string()))?;
        let entities = self
            .parse_entities(ask.entities)
            .map_err(|e| CedarAskError::Entities(e.to_string()))?;
        Ok(self.decide_request(&request, &entities))
    }
}

fn uid(field: &'static str, text: &str) -> Result<EntityUid, CedarAskError> {
    text.trim()
        .parse::<EntityUid>()
        .map_err(|e| CedarAskError::Uid {
            field,
            text: text.to_string(),
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> PolicyBundle {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        crate::policy::load::load_bundle(
            &root.join("schemas/gateway.cedarschema"),
            &root.join("policies"),
        )
        .unwrap_or_else(|e| panic!("the shipped set loads: {e}"))
    }

    #[test]
    fn a_request_outside_the_schema_is_refused_not_decided() {
        let bundle = shipped();
        let empty = serde_json::json!([]);
        let context = serde_json::json!({});
        let ask = |principal, action| CedarAsk {
            principal,
            action,
            resource: r#"Gateway::Project::"p""#,
            context: &context,
            entities: &empty,
        };
        let err = bundle
            .decide_cedar(&ask("nope", r#"Gateway::Action::"write_node""#))
            .map(|v| v.allowed);
        assert!(
            matches!(
                err,
                Err(CedarAskError::Uid {
                    field: "principal",
                    ..
                })
            ),
            "{err:?}"
        );
        let err = bundle
            .decide_cedar(&ask(
                r#"Gateway::Agent::"a""#,
                r#"Gateway::Action::"no_such""#,
            ))
            .map(|v| v.allowed);
        assert!(err.is_err(), "{err:?}");
    }
}
