//! Re-deciding a recorded decision: the principal, action, resource and
//! context exactly as the trail stored them, against any bundle. Used by
//! replay, shadow evaluation and the policy tests of the lifecycle.
//!
//! Typed tool actions are resolved against the *deciding* bundle: a record
//! whose context carries `args` is decided under the bundle's typed action
//! for the tool (arguments re-projected onto its types), and under the
//! group action with `args` removed when the bundle does not type the tool.
//! Under the bundle that made the record this is the identity, so replay
//! reproduces every record exactly.

use std::str::FromStr;

use cedar_policy::{Entities, EntityUid};
use serde_json::Value;

use super::{Action, PolicyBundle, PreparedContext, Verdict, schema_gen};

/// A recorded request, parsed once so several bundles can decide it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Principal uid.
    pub principal: EntityUid,
    /// Group action.
    pub action: Action,
    /// Resource uid.
    pub resource: EntityUid,
    /// The recorded context JSON.
    pub context: Value,
}

impl RecordedRequest {
    /// Parses the trail's text columns.
    pub fn parse(
        principal: &str,
        action: &str,
        resource: &str,
        context: &str,
    ) -> Result<Self, String> {
        let principal = EntityUid::from_str(principal)
            .map_err(|e| format!("recorded principal `{principal}` does not parse: {e}"))?;
        let resource = EntityUid::from_str(resource)
            .map_err(|e| format!("recorded resource `{resource}` does not parse: {e}"))?;
        let action = Action::from_name(action)
            .ok_or_else(|| format!("recorded action `{action}` is not in the vocabulary"))?;
        let context = serde_json::from_str(context)
            .map_err(|e| format!("recorded context is not JSON: {e}"))?;
        Ok(RecordedRequest {
            principal,
            action,
            resource,
            context,
        })
    }
}

impl PolicyBundle {
    /// The context `bundle` decides a recorded request with.
    pub fn recorded_context(&self, req: &RecordedRequest) -> PreparedContext {
        let typed = self.typed_for(req.action, &req.resource);
        match typed {
            Some(t) => {
                let mut json = req.context.clone();
                let mut fits = true;
                if let Value::Object(map) = &mut json
                    && let Some(args) = map.get("args")
                {
                    match schema_gen::project(&t.args, args) {
                        Some(a) => {
                            map.insert("args".into(), a);
                        }
                        None => fits = false,
                    }
                }
                self.typed_context(t, json, fits)
            }
            None => {
                let mut json = req.context.clone();
                if matches!(req.action, Action::CallTool | Action::A2aInvoke)
                    && let Value::Object(map) = &mut json
                {
                    map.remove("args");
                }
                self.prepare_context(req.action, json)
            }
        }
    }

    /// Decides a recorded request with its recorded entity data.
    pub fn decide_recorded(&self, req: &RecordedRequest, entities: &Entities) -> Verdict {
        let context = self.recorded_context(req);
        self.decide(
            &req.principal,
            req.action,
            &req.resource,
            &context,
            entities,
        )
    }
}
