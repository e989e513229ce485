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
use std::sync::Arc;

use cedar_policy::Entities;
use serde_json::Value;

use super::{Action, PolicyBundle, PreparedContext, Uid, UidError, Verdict, schema_gen};

/// A recorded request, parsed once so several bundles can decide it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Principal uid.
    pub principal: Uid,
    /// Group action.
    pub action: Action,
    /// Resource uid.
    pub resource: Uid,
    /// The recorded context JSON.
    pub context: Value,
}

/// Why a recorded request cannot be decided again.
#[derive(Debug, thiserror::Error)]
pub enum RecordedRequestError {
    /// The principal column is not a uid.
    #[error("recorded principal `{text}` does not parse: {source}")]
    Principal {
        /// The recorded text.
        text: String,
        /// The parse error.
        source: UidError,
    },
    /// The resource column is not a uid.
    #[error("recorded resource `{text}` does not parse: {source}")]
    Resource {
        /// The recorded text.
        text: String,
        /// The parse error.
        source: UidError,
    },
    /// The action is not one of the vocabulary's.
    #[error("recorded action `{0}` is not in the vocabulary")]
    Action(String),
    /// The context column is not JSON.
    #[error("recorded context is not JSON: {0}")]
    Context(#[source] serde_json::Error),
}

impl RecordedRequest {
    /// Parses the trail's text columns.
    pub fn parse(
        principal: &str,
        action: &str,
        resource: &str,
        context: &str,
    ) -> Result<Self, RecordedRequestError> {
        let principal =
            Uid::from_str(principal).map_err(|source| RecordedRequestError::Principal {
                text: principal.to_string(),
                source,
            })?;
        let resource =
            Uid::from_str(resource).map_err(|source| RecordedRequestError::Resource {
                text: resource.to_string(),
                source,
            })?;
        Self::with_uids(principal, action, resource, context)
    }

    /// Parses the action and context columns of a record whose uids are
    /// already parsed (replay parses each distinct uid of a trail once).
    pub fn with_uids(
        principal: Uid,
        action: &str,
        resource: Uid,
        context: &str,
    ) -> Result<Self, RecordedRequestError> {
        let action = Action::from_name(action)
            .ok_or_else(|| RecordedRequestError::Action(action.to_string()))?;
        let context = serde_json::from_str(context).map_err(RecordedRequestError::Context)?;
        Ok(RecordedRequest {
            principal,
            action,
            resource,
            context,
        })
    }
}

/// One recorded context that several decisions of a record share (its
/// prelude: `access_session` and `view_tool` under the same `{session,
/// time}`), parsed once. Decisions of untyped actions share one prepared
/// context, and with it one Cedar context and one check of `time`; any
/// other decision gets its own, exactly as [`RecordedRequest`] would.
#[derive(Debug)]
pub struct SharedContext {
    json: Value,
    plain: std::sync::OnceLock<Option<PreparedContext>>,
}

impl SharedContext {
    /// Parses a recorded context column.
    pub fn parse(context: &str) -> Result<Self, RecordedRequestError> {
        Ok(SharedContext {
            json: serde_json::from_str(context).map_err(RecordedRequestError::Context)?,
            plain: std::sync::OnceLock::new(),
        })
    }

    /// Decides `action` on `resource` for `principal` under this context,
    /// as [`PolicyBundle::decide_recorded_reusing`] would.
    pub fn decide(
        &self,
        bundle: &PolicyBundle,
        (principal, action, resource): (Uid, &str, Uid),
        entities: &RecordedEntities,
    ) -> Result<Verdict, RecordedRequestError> {
        let action = Action::from_name(action)
            .ok_or_else(|| RecordedRequestError::Action(action.to_string()))?;
        // Only a call's context can be typed or carry arguments.
        let untyped = !matches!(action, Action::CallTool | Action::A2aInvoke);
        if untyped
            && let Some(context) = self.plain.get_or_init(|| {
                session_shape(&self.json, false)
                    .map(|(session_id, time)| bundle.prepare_session_context(session_id, time))
            })
            && context.schema_hash == bundle.schema_hash
        {
            return Ok(bundle.decide_reusing(&principal, action, &resource, context, entities));
        }
        let req = RecordedRequest {
            principal,
            action,
            resource,
            context: self.json.clone(),
        };
        Ok(bundle.decide_recorded_reusing(&req, entities))
    }
}

/// Why an entity snapshot of the trail does not load.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The snapshot is not JSON.
    #[error("{0}")]
    Json(#[source] serde_json::Error),
    /// Cedar refuses the entities under this schema.
    #[error("{0}")]
    Entities(#[source] super::ParseEntitiesError),
}

/// An entity snapshot of the trail parsed against one schema, with the
/// text it was parsed from (a batched `read_node` record rebuilds its node
/// entities from that text). Replay parses each distinct snapshot once.
#[derive(Debug)]
pub struct RecordedEntities {
    entities: Entities,
    text: Arc<str>,
    /// Verdicts replay decided against these entities and may reuse.
    verdicts: super::replay_verdicts::ReplayVerdicts,
}

impl RecordedEntities {
    /// The snapshot's text (a JSON array of entities).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The parsed entities, as [`PolicyBundle::decide_recorded`] takes them.
    pub fn entities(&self) -> &Entities {
        &self.entities
    }

    /// How many verdicts replay remembers on these entities (see
    /// [`super::replay_verdicts`]).
    pub fn remembered(&self) -> usize {
        self.verdicts.len()
    }
}

/// `(session id, time)` when `json` is exactly the session context
/// `{"session": {"__entity": {"type": "Gateway::Session", "id": …}},
/// "time": {"__extn": {"fn": "datetime", "arg": …}}}` and nothing more
/// (but for an `args` key when `ignore_args`, as it is then left out).
pub(super) fn session_shape(json: &Value, ignore_args: bool) -> Option<(&str, &str)> {
    let map = json.as_object()?;
    let extra = usize::from(ignore_args && map.contains_key("args"));
    if map.len() != 2 + extra {
        return None;
    }
    let entity = map
        .get("session")?
        .as_object()
        .filter(|m| m.len() == 1)?
        .get("__entity")?
        .as_object()
        .filter(|m| m.len() == 2)?;
    if entity.get("type")?.as_str()? != "Gateway::Session" {
        return None;
    }
    let extn = map
        .get("time")?
        .as_object()
        .filter(|m| m.len() == 1)?
        .get("__extn")?
        .as_object()
        .filter(|m| m.len() == 2)?;
    if extn.get("fn")?.as_str()? != "datetime" {
        return None;
    }
    Some((entity.get("id")?.as_str()?, extn.get("arg")?.as_str()?))
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
                let shaped = session_shape(&json, true).is_some();
                self.typed_context(t, json, fits, shaped)
            }
            None => {
                let drop_args = matches!(req.action, Action::CallTool | Action::A2aInvoke);
                // Most records carry the plain session context: build it
                // from values, as the live path did (same Cedar context,
                // about three times cheaper than parsing the JSON).
                if let Some((session_id, time)) = session_shape(&req.context, drop_args) {
                    return self.prepare_session_context(session_id, time);
                }
                let mut json = req.context.clone();
                if drop_args && let Value::Object(map) = &mut json {
                    map.remove("args");
                }
                self.prepare_context(req.action, json)
            }
        }
    }

    /// Parses an entity snapshot (the JSON array text the trail stores)
    /// against this bundle's schema.
    pub fn parse_snapshot(&self, text: &str) -> Result<Entities, SnapshotError> {
        let json = serde_json::from_str(text).map_err(SnapshotError::Json)?;
        self.parse_entities(&json).map_err(SnapshotError::Entities)
    }

    /// [`PolicyBundle::parse_snapshot`], keeping the text.
    pub fn parse_recorded_entities(&self, text: &str) -> Result<RecordedEntities, SnapshotError> {
        Ok(RecordedEntities {
            entities: self.parse_snapshot(text)?,
            text: Arc::from(text),
            verdicts: Default::default(),
        })
    }

    /// [`PolicyBundle::decide_recorded`] against a parsed snapshot of the
    /// trail, reusing what can be reused (see [`super::replay_verdicts`]).
    pub fn decide_recorded_reusing(
        &self,
        req: &RecordedRequest,
        entities: &RecordedEntities,
    ) -> Verdict {
        let context = self.recorded_context(req);
        self.decide_reusing(
            &req.principal,
            req.action,
            &req.resource,
            &context,
            entities,
        )
    }

    /// [`PolicyBundle::decide`] against a parsed snapshot of the trail,
    /// reusing the verdict of an earlier request that cannot be decided
    /// otherwise (see [`super::replay_verdicts`]).
    pub fn decide_reusing(
        &self,
        principal: &Uid,
        action: Action,
        resource: &Uid,
        context: &PreparedContext,
        entities: &RecordedEntities,
    ) -> Verdict {
        self.decide_remembering(
            (principal, action, resource),
            context,
            &entities.entities,
            &entities.verdicts,
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_columns_are_named_in_the_message() {
        let (p, r) = (r#"Gateway::Agent::"a""#, r#"Gateway::Tool::"t""#);
        let err = |principal, action, resource, context| {
            RecordedRequest::parse(principal, action, resource, context)
                .unwrap_err()
                .to_string()
        };
        assert!(
            err("nope", "call_tool", r, "{}")
                .starts_with("recorded principal `nope` does not parse: ")
        );
        assert!(
            err(p, "call_tool", "nope", "{}")
                .starts_with("recorded resource `nope` does not parse: ")
        );
        assert_eq!(
            err(p, "fly", r, "{}"),
            "recorded action `fly` is not in the vocabulary"
        );
        assert!(err(p, "call_tool", r, "{").starts_with("recorded context is not JSON: "));
        assert!(RecordedRequest::parse(p, "call_tool", r, "{}").is_ok());
    }

    #[test]
    fn only_the_exact_session_context_takes_the_fast_path() {
        let ctx = super::super::entities::session_context("s-1", "2026-11-22T08:00:00.000Z");
        let plain = Some(("s-1", "2026-11-22T08:00:00.000Z"));
        assert_eq!(session_shape(&ctx, false), plain);
        let mut extra = ctx.clone();
        extra["args"] = serde_json::json!({"q": 1});
        assert_eq!(session_shape(&extra, false), None);
        assert_eq!(session_shape(&extra, true), plain);
        extra["more"] = serde_json::json!(1);
        assert_eq!(session_shape(&extra, true), None);
        let mut other = ctx.clone();
        other["session"]["__entity"]["type"] = "Gateway::Agent".into();
        assert_eq!(session_shape(&other, false), None);
        let mut not_datetime = ctx;
        not_datetime["time"]["__extn"]["fn"] = "decimal".into();
        assert_eq!(session_shape(&not_datetime, false), None);
    }

    /// A person's decisions, recorded as the trail records them (uids as
    /// text, the context's text, the slice's JSON), replay to the verdicts
    /// they had live: the person's groups and tags are in the snapshot,
    /// the token's scopes in the context, typed tool calls included.
    #[test]
    fn a_persons_decisions_replay_to_their_live_verdicts() {
        use super::super::entities::{self, Caller, SessionCallFacts};
        use super::super::identity::{CheckedUser, TokenFacts, UserFacts};
        use super::super::{Kind, PolicyFile, load, schema_gen::ToolSchema};

        let tools = [ToolSchema {
            name: "notes.write".into(),
            group: Action::CallTool,
            input_schema: serde_json::json!({"type":"object","properties":{"content":{"type":"string"}}}),
            dropped: None,
        }];
        let base = include_str!("../../schemas/gateway.cedarschema");
        let (schema, _) = load::effective_schema("s", base, &tools).unwrap();
        let policies = r#"
            @id("sessions-of-own-org")
            permit (principal, action == Gateway::Action::"access_session", resource)
            when { principal.org == resource.org };

            @id("finance-sre-use-tools")
            permit (
              principal is Gateway::User,
              action in [Gateway::Action::"view_tool", Gateway::Action::"call_tool"],
              resource
            )
            when {
              principal in Gateway::Group::"sre" &&
              principal.hasTag("department") && principal.getTag("department") == "finance"
            };

            @id("writes-need-the-write-scope")
            forbid (principal, action in [Gateway::Action::"call_tool"], resource)
            unless { context has token && context.token.scopes.contains("mcp:write") };
        "#;
        let files = vec![PolicyFile {
            path: "p.cedar".into(),
            text: policies.into(),
        }];
        let bundle = load::bundle_from_sources("s", &schema, files)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        assert!(bundle.typed.contains_key("notes.write"));

        let person = |subject: &str, department: &str| -> CheckedUser {
            UserFacts {
                org: "acme".into(),
                issuer: "https://idp.test".into(),
                subject: subject.into(),
                name: subject.into(),
                email: None,
                groups: vec!["sre".into()],
                tags: [("department".to_string(), department.to_string())].into(),
            }
            .checked()
            .unwrap()
        };
        let token = |scopes: &[&str]| {
            TokenFacts {
                issuer: "https://idp.test".into(),
                audience: vec!["https://gw.test".into()],
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
                expires_at: 1_795_000_000,
                client_id: Some("desktop".into()),
            }
            .checked()
            .unwrap()
        };
        let (alice, bob) = (person("alice", "finance"), person("bob", "sales"));
        let (read, write) = (token(&["mcp:tools"]), token(&["mcp:tools", "mcp:write"]));
        let tool = entities::ToolEntity {
            name: "notes.write".into(),
            group: "memory".into(),
            kind: "memory".into(),
            read_only: false,
            peer: None,
            upstream: None,
        };
        let time = "2026-11-22T08:00:00.000Z";
        let args = serde_json::json!({"content": "hello"});
        let notes = Kind::Tool.uid("notes.write");
        // (who, token, action, expected verdict)
        let cases = [
            (&alice, &read, Action::AccessSession, true),
            (&alice, &read, Action::ViewTool, true),
            (&alice, &read, Action::CallTool, false),
            (&alice, &write, Action::CallTool, true),
            (&bob, &read, Action::ViewTool, false),
            (&bob, &write, Action::CallTool, false),
        ];
        for (who, token, action, expected) in cases {
            let session_id = format!("s-{}", who.facts().subject);
            let (entitlements, roles) = (Vec::new(), Vec::new());
            let facts = SessionCallFacts {
                session_id: &session_id,
                org: entities::OrgFacts {
                    id: "acme",
                    plan: "team",
                    entitlements: &entitlements,
                },
                project: entities::ProjectFacts {
                    org_id: "acme",
                    id: "web",
                    memory_enabled: true,
                    graph_enabled: false,
                },
                agent: entities::AgentFacts {
                    org_id: "acme",
                    id: "claude",
                    name: "Claude",
                    roles: &roles,
                },
                user: Some(who),
                caller: Caller::User(who),
            };
            let slice = entities::session_slice_for_call(
                &bundle,
                &facts,
                std::slice::from_ref(&tool),
                &[],
                &[],
            )
            .unwrap();
            let (resource, context) = match action {
                Action::AccessSession => (
                    Kind::Session.uid(&session_id),
                    bundle.prepare_session_context_with_token(&session_id, time, token),
                ),
                Action::CallTool => (
                    notes.clone(),
                    bundle.prepare_tool_context_with_token(
                        action,
                        "notes.write",
                        &session_id,
                        time,
                        &args,
                        None,
                        token,
                    ),
                ),
                _ => (
                    notes.clone(),
                    bundle.prepare_session_context_with_token(&session_id, time, token),
                ),
            };
            let principal = who.uid();
            let live = bundle.decide_in_session(
                (&principal, action, &resource),
                &context,
                &slice.entities,
                &slice.verdicts,
            );
            let label = format!("{} {}", who.id(), action.name());
            assert_eq!(live.allowed, expected, "{label}: {live:?}");
            assert!(live.errors.is_empty(), "{label}: {live:?}");

            let recorded = RecordedRequest::parse(
                &principal.text(),
                action.name(),
                &resource.text(),
                context.text(),
            )
            .unwrap();
            let snapshot = bundle.parse_recorded_entities(&slice.json).unwrap();
            for _ in 0..2 {
                let replayed = bundle.decide_recorded_reusing(&recorded, &snapshot);
                assert_eq!(
                    (replayed.allowed, &replayed.reasons, &replayed.errors),
                    (live.allowed, &live.reasons, &live.errors),
                    "{label}"
                );
            }
            let shared = SharedContext::parse(context.text()).unwrap();
            let replayed = shared
                .decide(
                    &bundle,
                    (principal.clone(), action.name(), resource.clone()),
                    &snapshot,
                )
                .unwrap();
            assert_eq!(
                (replayed.allowed, &replayed.reasons),
                (live.allowed, &live.reasons),
                "{label}"
            );
        }
    }
}
