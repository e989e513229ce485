//! The Cedar policy enforcement point (PEP).
//!
//! A [`PolicyBundle`] is one immutable, strictly validated policy set with
//! its schema and content hash; the [`Pep`] holds the active bundle behind an
//! atomic pointer so a request decides against the bundle it started with.
//! Every decision fails closed: no permit, an error on a `forbid`, a context or
//! request that cannot be built, all deny.

pub mod action_slices;
pub mod application;
pub mod cedar_names;
pub mod cedar_request;
pub mod describe;
pub mod dropped;
pub mod entities;
mod extension_values;
mod fingerprinted;
pub mod fmt;
pub mod group_shapes;
pub mod identity;
mod literals;
pub mod load;
pub mod node_reads;
mod prove_assumptions;
pub mod prove_diff;
mod prove_fail_closed;
pub mod prove_lint;
pub mod prover;
pub mod recorded;
pub mod replay_verdicts;
pub mod schema_gen;
pub mod session_verdicts;
pub mod set_diff;
pub mod set_hash;
pub mod solver;
pub mod step_up;
pub mod tests_runner;
mod uid;
pub mod usage_reads;
pub mod witness;

use std::collections::BTreeSet;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;
use cedar_policy::{
    Authorizer, Context, Decision, Effect, Entities, EntityId, EntityTypeName, EntityUid, PolicyId,
    PolicySet, Request, RestrictedExpression, Schema,
};
use serde::Serialize;

pub use load::{PolicyLoadError, SourceDiagnostic, load_bundle};
pub use uid::{Uid, UidError};

/// Cedar namespace of the gateway vocabulary.
pub const NAMESPACE: &str = "Gateway";

/// The actions of the public vocabulary (`schemas/gateway.cedarschema`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A daemon key uses a session (every MCP request).
    AccessSession,
    /// A daemon key opens a session for an agent in a project.
    CreateSession,
    /// A tool appears in `tools/list`.
    ViewTool,
    /// A built-in tool is called.
    CallTool,
    /// A remote A2A peer is invoked.
    A2aInvoke,
    /// A knowledge-graph node is returned.
    ReadNode,
    /// The knowledge graph of a project is written.
    WriteNode,
    /// An upstream MCP server's resource is listed or read.
    ReadResource,
    /// An upstream MCP server's prompt is listed or fetched.
    GetPrompt,
}

impl Action {
    /// Every action, in vocabulary order.
    pub const ALL: [Action; 9] = [
        Action::AccessSession,
        Action::CreateSession,
        Action::ViewTool,
        Action::CallTool,
        Action::A2aInvoke,
        Action::ReadNode,
        Action::WriteNode,
        Action::ReadResource,
        Action::GetPrompt,
    ];

    /// The action's Cedar id.
    pub fn name(self) -> &'static str {
        match self {
            Action::AccessSession => "access_session",
            Action::CreateSession => "create_session",
            Action::ViewTool => "view_tool",
            Action::CallTool => "call_tool",
            Action::A2aInvoke => "a2a_invoke",
            Action::ReadNode => "read_node",
            Action::WriteNode => "write_node",
            Action::ReadResource => "read_resource",
            Action::GetPrompt => "get_prompt",
        }
    }

    /// The action's Cedar uid, e.g. `Gateway::Action::"call_tool"`.
    pub fn uid(self) -> Uid {
        static UIDS: LazyLock<Vec<Uid>> = LazyLock::new(|| {
            Action::ALL
                .iter()
                .map(|a| Action::uid_of(a.name()))
                .collect()
        });
        match UIDS.get(self as usize) {
            Some(uid) => uid.clone(),
            None => Action::uid_of(self.name()),
        }
    }

    /// The uid of any action id (typed tool actions are named after their tool).
    pub fn uid_of(id: &str) -> Uid {
        Uid(EntityUid::from_type_name_and_id(
            type_names().action.clone(),
            EntityId::new(id),
        ))
    }

    /// Parses an action name as stored in the decision trail.
    pub fn from_name(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// The entity types of the public vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `Gateway::Org`
    Org,
    /// `Gateway::Project`
    Project,
    /// `Gateway::Role`
    Role,
    /// `Gateway::Agent`
    Agent,
    /// `Gateway::ApiKey`
    ApiKey,
    /// `Gateway::Session`
    Session,
    /// `Gateway::ToolGroup`
    ToolGroup,
    /// `Gateway::PeerAgent`
    PeerAgent,
    /// `Gateway::McpServer`
    McpServer,
    /// `Gateway::Tool`
    Tool,
    /// `Gateway::GraphNode`
    GraphNode,
    /// `Gateway::Resource`
    Resource,
    /// `Gateway::Prompt`
    Prompt,
    /// `Gateway::User`
    User,
    /// `Gateway::Group`
    Group,
}

impl Kind {
    /// The unqualified type name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Org => "Org",
            Kind::Project => "Project",
            Kind::Role => "Role",
            Kind::Agent => "Agent",
            Kind::ApiKey => "ApiKey",
            Kind::Session => "Session",
            Kind::ToolGroup => "ToolGroup",
            Kind::PeerAgent => "PeerAgent",
            Kind::McpServer => "McpServer",
            Kind::Tool => "Tool",
            Kind::GraphNode => "GraphNode",
            Kind::Resource => "Resource",
            Kind::Prompt => "Prompt",
            Kind::User => "User",
            Kind::Group => "Group",
        }
    }

    /// The namespaced type name, e.g. `Gateway::Org`.
    pub fn qualified(self) -> String {
        format!("{NAMESPACE}::{}", self.name())
    }

    /// A uid of this type.
    pub fn uid(self, id: &str) -> Uid {
        let names = type_names();
        let ty = match self {
            Kind::Org => &names.org,
            Kind::Project => &names.project,
            Kind::Role => &names.role,
            Kind::Agent => &names.agent,
            Kind::ApiKey => &names.api_key,
            Kind::Session => &names.session,
            Kind::ToolGroup => &names.tool_group,
            Kind::PeerAgent => &names.peer_agent,
            Kind::McpServer => &names.mcp_server,
            Kind::Tool => &names.tool,
            Kind::GraphNode => &names.graph_node,
            Kind::Resource => &names.resource,
            Kind::Prompt => &names.prompt,
            Kind::User => &names.user,
            Kind::Group => &names.group,
        };
        Uid(EntityUid::from_type_name_and_id(
            ty.clone(),
            EntityId::new(id),
        ))
    }
}

/// The parsed type names of the vocabulary, built once.
struct TypeNames {
    org: EntityTypeName,
    project: EntityTypeName,
    role: EntityTypeName,
    agent: EntityTypeName,
    api_key: EntityTypeName,
    session: EntityTypeName,
    tool_group: EntityTypeName,
    peer_agent: EntityTypeName,
    mcp_server: EntityTypeName,
    tool: EntityTypeName,
    graph_node: EntityTypeName,
    resource: EntityTypeName,
    prompt: EntityTypeName,
    user: EntityTypeName,
    group: EntityTypeName,
    action: EntityTypeName,
}

fn type_names() -> &'static TypeNames {
    static NAMES: LazyLock<TypeNames> = LazyLock::new(|| {
        #[expect(
            clippy::expect_used,
            reason = "constant identifiers, parsed in a unit test; no request input reaches this"
        )]
        let t = |name: &str| {
            EntityTypeName::from_str(&format!("{NAMESPACE}::{name}"))
                .expect("valid cedar type name")
        };
        TypeNames {
            org: t("Org"),
            project: t("Project"),
            role: t("Role"),
            agent: t("Agent"),
            api_key: t("ApiKey"),
            session: t("Session"),
            tool_group: t("ToolGroup"),
            peer_agent: t("PeerAgent"),
            mcp_server: t("McpServer"),
            tool: t("Tool"),
            graph_node: t("GraphNode"),
            resource: t("Resource"),
            prompt: t("Prompt"),
            user: t("User"),
            group: t("Group"),
            action: t("Action"),
        }
    });
    &NAMES
}

/// One policy file as loaded (kept for the audit trail and replay).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct PolicyFile {
    /// Path as given (relative to the working directory).
    pub path: String,
    /// The file's text.
    pub text: String,
}

/// One immutable, validated policy set: what a decision is made against.
#[derive(Debug)]
pub struct PolicyBundle {
    /// The Cedar schema policies were validated against.
    pub schema: Schema,
    /// The policies, keyed by their `@id`.
    pub policies: PolicySet,
    /// The same policies split by the action they can apply to; decisions
    /// evaluate only their action's slice.
    pub slices: action_slices::ActionSlices,
    /// SHA-256 over the schema and every policy file (name and text): the
    /// policy version recorded in every decision.
    pub hash: String,
    /// SHA-256 of the schema text alone; entity slices are built per schema.
    pub schema_hash: String,
    /// The schema source.
    pub schema_text: String,
    /// The schema file path.
    pub schema_path: String,
    /// The policy sources, sorted by path.
    pub files: Vec<PolicyFile>,
    /// Policy ids, sorted.
    pub policy_ids: Vec<String>,
    /// When the bundle was loaded (RFC 3339).
    pub loaded_at: String,
    /// Non-fatal validation warnings, rendered.
    pub warnings: Vec<String>,
    /// `@advice` of each policy that has one, looked up once at load
    /// (Cedar's annotation lookup re-parses the key on every call).
    pub advice: std::collections::HashMap<PolicyId, String>,
    /// What `read_node` verdicts can depend on, so nodes no policy can tell
    /// apart share one decision.
    pub node_reads: node_reads::NodeDependence,
    /// Actions whose verdicts, given the session, do not depend on the
    /// rest of the context: decided once per session slice.
    pub session_determined: session_verdicts::SessionDetermined,
    /// Actions whose policies read `context.usage`: only their decisions
    /// carry the caller's recent usage.
    pub usage_reads: usage_reads::UsageReaders,
    /// The scopes `@requires_scope` names, per action: what a denied
    /// person may be asked to re-authorize with (`step_up.rs`).
    pub required_scopes: step_up::RequiredScopes,
    /// Tools decided under their own typed action (read from the schema).
    pub typed: std::collections::HashMap<String, schema_gen::TypedTool>,
    /// Tools whose calls are denied because a forbid names their dropped
    /// typed action (`dropped.rs`).
    pub dropped: dropped::DroppedGuard,
    /// Observers of every decision made with this bundle (metrics, shadow
    /// evaluation); shared by every bundle a [`Pep`] activates.
    pub hooks: Arc<Hooks>,
}

/// What a decision observer sees: the request, the verdict and the record id.
#[derive(Debug)]
pub struct Observed<'a> {
    /// The bundle that decided.
    pub bundle: &'a PolicyBundle,
    /// The entities it decided with.
    pub entities: &'a Entities,
    /// The JSON those entities were parsed from, when it holds all of
    /// them (a shadow set with another schema re-parses it).
    pub entities_json: Option<&'a str>,
    /// Principal.
    pub principal: &'a Uid,
    /// Action (group action for typed tools).
    pub action: Action,
    /// Resource.
    pub resource: &'a Uid,
    /// The context it decided with.
    pub context: &'a PreparedContext,
    /// The verdict.
    pub verdict: &'a Verdict,
    /// The decision record's id.
    pub decision_id: &'a str,
    /// How long the decision took.
    pub elapsed: std::time::Duration,
}

/// Something that watches every decision (never changes it).
pub trait DecisionObserver: Send + Sync + std::fmt::Debug {
    /// Called once per decision, after the verdict.
    fn observe(&self, decision: &Observed<'_>);

    /// Whether the observer decides the observed requests again (shadow
    /// evaluation) and so needs each decision's own request and entities;
    /// when it does not, `read_node` decisions of nodes no policy can tell
    /// apart are shared (see [`node_reads`]).
    fn redecides(&self) -> bool {
        true
    }
}

/// The observer slot shared by the bundles of one [`Pep`].
#[derive(Debug, Default)]
pub struct Hooks {
    observer: std::sync::OnceLock<Arc<dyn DecisionObserver>>,
}

impl Hooks {
    /// The observer, once one is installed.
    pub fn observer(&self) -> Option<&Arc<dyn DecisionObserver>> {
        self.observer.get()
    }
}

/// A request's Cedar context, parsed once and shared by its decisions.
#[derive(Debug, Clone)]
pub struct PreparedContext {
    /// The context as Cedar JSON ([`PreparedContext::json`]): set when the
    /// context is made, but for a plain session context, whose JSON is
    /// built from `session` only if something asks (a live decision never
    /// does: its Cedar value and its text are built from the values).
    json: std::sync::OnceLock<serde_json::Value>,
    /// `json` serialized, as recorded in the decision trail: made on first
    /// use (a replayed decision records nothing and never needs it).
    text: std::sync::OnceLock<String>,
    /// The Cedar context; a plain session context is built from `json` on
    /// first use (a reused verdict needs none).
    cedar: std::sync::OnceLock<Result<Context, ContextError>>,
    schema_hash: String,
    /// The typed tool action the context was checked against, if any.
    action: Option<EntityUid>,
    /// `(session id, time)` when the context was built from them
    /// ([`PolicyBundle::prepare_session_context`], and a typed tool context
    /// with `args` besides): every decision of a request asks for them
    /// (the verdict memo's key, the Cedar value, the recorded text), and
    /// reading them back out of `json` cost more than the decision's other
    /// steps together. `None` for a context parsed from JSON (a recorded
    /// one, one with `usage`), which is read as it is.
    session: Option<(String, String)>,
    /// For a typed `{session, time, args}` context, the type its Cedar
    /// value is built from on first use (a reused verdict whose argument
    /// shape Cedar already accepted needs none).
    typed_args: Option<Arc<schema_gen::ArgType>>,
    /// A typed context built from `session`: the arguments projected onto
    /// its type. Its JSON (the session's part, the token's and these) is
    /// then built only if something asks: a live decision reads `args`,
    /// the verdict memo the session and the token's digest, and the text is
    /// written directly, so a person's call never copied the token's
    /// members into a map nobody read.
    args: Option<serde_json::Value>,
    /// The token of a token-authenticated request (`context.token`, and
    /// `context.client` when it names its client), built from values with
    /// the session's part.
    token: Option<Arc<identity::CheckedToken>>,
}

impl PreparedContext {
    /// The context as Cedar JSON.
    pub fn json(&self) -> &serde_json::Value {
        self.json.get_or_init(|| match &self.session {
            Some((session_id, time)) => {
                let mut json = entities::session_context(session_id, time);
                if let serde_json::Value::Object(map) = &mut json {
                    if let Some(token) = &self.token {
                        entities::insert_token(map, token);
                    }
                    if let Some(args) = &self.args {
                        map.insert("args".into(), args.clone());
                    }
                }
                json
            }
            // Unreachable: a context without `session` is made with its JSON.
            None => serde_json::Value::Null,
        })
    }

    /// The context serialized, as recorded in the decision trail.
    pub fn text(&self) -> &str {
        // A context built from `session` holds exactly the session's part,
        // the token's members and a typed action's `args`: written
        // directly, as for every request they cost more than deciding.
        self.text.get_or_init(|| match &self.session {
            Some((session_id, time)) => entities::session_context_text_with(
                session_id,
                time,
                self.token.as_deref(),
                self.args(),
            ),
            None => self.json().to_string(),
        })
    }

    /// The Cedar context (built now if it was deferred).
    fn cedar(&self) -> &Result<Context, ContextError> {
        self.cedar.get_or_init(|| {
            let mut pairs = self.values().ok_or(ContextError::NotPrepared)?;
            if let Some(token) = &self.token {
                pairs.extend(token_pairs(token)?);
            }
            Context::from_pairs(pairs).map_err(ContextError::values)
        })
    }

    /// The Cedar values of a deferred context's session part (and `args`,
    /// for a typed one); `None` for a context that was not deferred.
    fn values(&self) -> Option<Vec<(String, RestrictedExpression)>> {
        match (&self.typed_args, &self.session) {
            (Some(args_type), Some((session_id, time))) => {
                let args = schema_gen::restricted(args_type, self.args()?)?;
                let [session, time] = session_pairs(session_id, time);
                Some(vec![session, time, ("args".to_string(), args)])
            }
            (Some(args_type), None) => Some(typed_pairs(args_type, self.json())?.into()),
            (None, _) => {
                let (session_id, time) = self.session_and_time()?;
                Some(session_pairs(session_id, time).into())
            }
        }
    }

    /// `context.args` of a typed tool context (`None` for any other, and
    /// for a typed one whose arguments do not fit its type).
    pub fn args(&self) -> Option<&serde_json::Value> {
        self.action.as_ref()?;
        match &self.session {
            Some(_) => self.args.as_ref(),
            None => self.json().get("args"),
        }
    }

    /// What, besides the session, a reusable verdict of this context is
    /// remembered under: the digest of its token (`""` without one), as a
    /// verdict may read `context.token` and `context.client`.
    fn variant(&self) -> &str {
        self.token
            .as_deref()
            .map_or("", identity::CheckedToken::digest)
    }

    /// The session id of a typed tool context `{session, time, args}`.
    fn typed_session(&self) -> Option<&str> {
        self.action.as_ref()?;
        match &self.session {
            Some((session_id, _)) => Some(session_id),
            None => recorded::session_shape(self.json(), true).map(|(id, _)| id),
        }
    }

    /// `(session id, time)` of a session context `{session, time}` (a
    /// token-authenticated request's carries its token besides).
    fn session_and_time(&self) -> Option<(&str, &str)> {
        if self.action.is_some() {
            return None;
        }
        match &self.session {
            Some((session_id, time)) => Some((session_id, time)),
            None => recorded::session_shape(self.json(), false),
        }
    }
}

/// Why a request's Cedar context could not be built; a decision with it
/// denies, carrying this message. Cloneable (Cedar's error is shared)
/// because a prepared context is.
#[derive(Debug, Clone, thiserror::Error)]
enum ContextError {
    /// The context JSON does not fit the action's context type.
    #[error("cannot build context: {0}")]
    Json(Arc<cedar_policy::ContextJsonError>),
    /// The context values were refused.
    #[error("cannot build context: {0}")]
    Values(Arc<cedar_policy::ContextCreationError>),
    /// The tool arguments do not fit the Cedar type of the typed action.
    #[error("arguments do not fit the Cedar type of `context.args` of `{0}`")]
    ArgsDoNotFit(Uid),
    /// A deferred context that is not the plain session context.
    #[error("context was not prepared")]
    NotPrepared,
    /// A record of the context (`token`, `client`) was refused.
    #[error("cannot build context: {0}")]
    Record(Arc<cedar_policy::ExpressionConstructionError>),
}

impl ContextError {
    fn json(e: cedar_policy::ContextJsonError) -> Self {
        ContextError::Json(Arc::new(e))
    }

    fn values(e: cedar_policy::ContextCreationError) -> Self {
        ContextError::Values(Arc::new(e))
    }

    fn record(e: cedar_policy::ExpressionConstructionError) -> Self {
        ContextError::Record(Arc::new(e))
    }
}

/// The caller's recent usage, as policies read it in `context.usage`
/// (counted per instance over the last 60 seconds, before this call).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageFacts {
    /// Calls of this tool by this agent (`callsLastMinute`).
    pub calls_last_minute: u64,
    /// Calls of any tool by this agent (`agentCallsLastMinute`).
    pub agent_calls_last_minute: u64,
    /// Calls of any tool by any agent of the org (`orgCallsLastMinute`).
    pub org_calls_last_minute: u64,
}

impl UsageFacts {
    /// The Cedar JSON of `context.usage`.
    pub fn to_json(&self) -> serde_json::Value {
        let long = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        serde_json::json!({
            "callsLastMinute": long(self.calls_last_minute),
            "agentCallsLastMinute": long(self.agent_calls_last_minute),
            "orgCallsLastMinute": long(self.org_calls_last_minute),
        })
    }
}

/// The outcome of one authorization, before it is recorded.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// True only for a Cedar `Allow` with no error on any `forbid`.
    pub allowed: bool,
    /// Ids of the determining policies.
    pub reasons: Vec<String>,
    /// Evaluation or request-building errors (any of them on a forbid denies).
    pub errors: Vec<String>,
    /// `@advice` annotations of the determining policies.
    pub advice: Vec<String>,
}

impl Verdict {
    /// A deny carrying `error` (nothing could be decided).
    pub fn denied_with(error: String) -> Self {
        Verdict {
            allowed: false,
            reasons: Vec::new(),
            errors: vec![error],
            advice: Vec::new(),
        }
    }
}

impl PolicyBundle {
    /// Parses a Cedar context once so the several decisions of one request
    /// share it (parsing dominates a decision's cost: ~35 µs against ~15 µs
    /// for the authorization itself). It is checked against `action`'s
    /// context type here, and again against each decided action's type by
    /// `Request::new`.
    pub fn prepare_context(&self, action: Action, json: serde_json::Value) -> PreparedContext {
        let cedar = Context::from_json_value(json.clone(), Some((&self.schema, &action.uid().0)))
            .map_err(ContextError::json);
        self.prepared(Some(json), cedar.into())
    }

    /// The context of an in-session decision (`{session, time}`), built
    /// from values rather than parsed from JSON (about three times cheaper).
    /// `Request::new` checks it against each action's context type.
    pub fn prepare_session_context(&self, session_id: &str, time: &str) -> PreparedContext {
        let mut prepared = self.prepared(None, std::sync::OnceLock::new());
        prepared.session = Some((session_id.to_string(), time.to_string()));
        prepared
    }

    /// A context of `json` (`None` only for one the caller gives a
    /// `session` to build it from).
    fn prepared(
        &self,
        json: Option<serde_json::Value>,
        cedar: std::sync::OnceLock<Result<Context, ContextError>>,
    ) -> PreparedContext {
        PreparedContext {
            text: std::sync::OnceLock::new(),
            json: json.map_or_else(std::sync::OnceLock::new, std::sync::OnceLock::from),
            cedar,
            schema_hash: self.schema_hash.clone(),
            action: None,
            session: None,
            typed_args: None,
            args: None,
            token: None,
        }
    }

    /// The context of a `call_tool` / `a2a_invoke` decision. When this
    /// bundle has a typed action for `tool`, the context carries the
    /// arguments projected onto its Cedar type as `args`, and the decision
    /// is made under that action; otherwise it is the session context.
    pub fn prepare_tool_context(
        &self,
        group: Action,
        tool: &str,
        session_id: &str,
        time: &str,
        args: &serde_json::Value,
    ) -> PreparedContext {
        self.typed_tool_context(group, tool, session_id, time, args)
            .unwrap_or_else(|| self.prepare_session_context(session_id, time))
    }

    /// The context of a `call_tool` / `a2a_invoke` decision on a tool this
    /// bundle has a typed action for; `None` for an untyped tool, which is
    /// decided with the request's session context.
    pub fn typed_tool_context(
        &self,
        group: Action,
        tool: &str,
        session_id: &str,
        time: &str,
        args: &serde_json::Value,
    ) -> Option<PreparedContext> {
        self.typed_context_of((group, tool), (session_id, time), args, None)
    }

    /// [`PolicyBundle::typed_tool_context`] for a request with or without
    /// a token: the caller sets the context's `token`, which its Cedar
    /// value, text and JSON take the token's parts from (`token` is only
    /// written into the JSON of arguments that do not fit, made now).
    fn typed_context_of(
        &self,
        (group, tool): (Action, &str),
        (session_id, time): (&str, &str),
        args: &serde_json::Value,
        token: Option<&Arc<identity::CheckedToken>>,
    ) -> Option<PreparedContext> {
        let typed = self.typed.get(tool).filter(|t| t.group == group)?;
        let session = Some((session_id.to_string(), time.to_string()));
        let Some(projected) = schema_gen::project(&typed.args, args) else {
            // Arguments that do not fit deny: the context is recorded as
            // the session's (and token's) part alone.
            let mut json = entities::session_context(session_id, time);
            if let (Some(token), serde_json::Value::Object(map)) = (token, &mut json) {
                entities::insert_token(map, token);
            }
            let mut prepared = self.typed_context(typed, json, false, true);
            prepared.session = session;
            return Some(prepared);
        };
        // Built from values on first use (`PreparedContext::cedar`), its
        // JSON only if asked for (`PreparedContext::json`): values of a
        // projection always rebuild (the schema_gen tests cover every
        // type), and one that did not would deny.
        let mut prepared = self.prepared(None, std::sync::OnceLock::new());
        prepared.action = Some(typed.action.clone());
        prepared.typed_args = Some(Arc::clone(&typed.args));
        prepared.session = session;
        prepared.args = Some(projected);
        Some(prepared)
    }

    /// The scopes `@requires_scope` names on the policies that can apply
    /// to a decision of `action` on `resource` (under the tool's typed
    /// action when it has one).
    pub fn required_scopes(&self, action: Action, resource: &Uid) -> &BTreeSet<String> {
        match self.typed_for(action, resource) {
            Some(typed) => self.required_scopes.for_action(&typed.action),
            None => self.required_scopes.for_action(&action.uid().0),
        }
    }

    /// Whether the decision of `tool` under `group` reads `context.usage`
    /// (its typed action's policies when it has one, else the group's).
    pub fn tool_reads_usage(&self, group: Action, tool: &str) -> bool {
        match self.typed.get(tool).filter(|t| t.group == group) {
            Some(typed) => self.usage_reads.reads(&Uid(typed.action.clone())),
            None => self.usage_reads.reads(&group.uid()),
        }
    }

    /// The context of a `call_tool` / `a2a_invoke` decision that carries
    /// the caller's recent usage as `context.usage` (with `args` too when
    /// the tool is typed). Parsed against the deciding action's context
    /// type, where `usage` is optional.
    pub fn prepare_tool_context_with_usage(
        &self,
        group: Action,
        tool: &str,
        session_id: &str,
        time: &str,
        args: &serde_json::Value,
        usage: &UsageFacts,
    ) -> PreparedContext {
        self.tool_context_with(group, tool, (session_id, time), args, Some(usage), None)
    }

    /// The context of an in-session decision of a token-authenticated
    /// request: `{session, time}` with the token's `context.token` (and
    /// `context.client` when the token names its client), built from values
    /// like [`PolicyBundle::prepare_session_context`] (a token's facts are
    /// within the limits that make them always build). Its verdicts are
    /// reused from the session memo under the token's digest.
    pub fn prepare_session_context_with_token(
        &self,
        session_id: &str,
        time: &str,
        token: &identity::CheckedToken,
    ) -> PreparedContext {
        let mut prepared = self.prepare_session_context(session_id, time);
        prepared.token = Some(Arc::new(token.clone()));
        prepared
    }

    /// [`PolicyBundle::prepare_tool_context`] (with `usage` when given,
    /// as [`PolicyBundle::prepare_tool_context_with_usage`]) for a
    /// token-authenticated request: the context also carries
    /// `context.token` and `context.client`.
    #[expect(
        clippy::too_many_arguments,
        reason = "the tool context's parts, each a plain value the caller has"
    )]
    pub fn prepare_tool_context_with_token(
        &self,
        group: Action,
        tool: &str,
        session_id: &str,
        time: &str,
        args: &serde_json::Value,
        usage: Option<&UsageFacts>,
        token: &identity::CheckedToken,
    ) -> PreparedContext {
        self.tool_context_with(group, tool, (session_id, time), args, usage, Some(token))
    }

    /// A tool decision's context with attributes besides the session's
    /// (`usage`, `token`, `client`; callers give at least one). With the
    /// token alone it is built from values, as the session's; with `usage`
    /// it is parsed against the deciding action's context type, where they
    /// are optional.
    fn tool_context_with(
        &self,
        group: Action,
        tool: &str,
        (session_id, time): (&str, &str),
        args: &serde_json::Value,
        usage: Option<&UsageFacts>,
        token: Option<&identity::CheckedToken>,
    ) -> PreparedContext {
        if let (None, Some(token)) = (usage, token) {
            let token = Arc::new(token.clone());
            let typed =
                self.typed_context_of((group, tool), (session_id, time), args, Some(&token));
            let mut prepared =
                typed.unwrap_or_else(|| self.prepare_session_context(session_id, time));
            prepared.token = Some(token);
            return prepared;
        }
        let typed = self.typed.get(tool).filter(|t| t.group == group);
        let projected = typed.and_then(|t| schema_gen::project(&t.args, args));
        let fits = projected.is_some();
        let mut json = entities::session_context(session_id, time);
        if let serde_json::Value::Object(map) = &mut json {
            if let Some(usage) = usage {
                map.insert("usage".into(), usage.to_json());
            }
            if let Some(token) = token {
                entities::insert_token(map, token);
            }
            if let Some(a) = projected {
                map.insert("args".into(), a);
            }
        }
        match typed {
            Some(typed) => self.typed_context(typed, json, fits, false),
            None => self.prepare_context(group, json),
        }
    }

    /// A typed tool context of `json`; `session_shaped` when `json` is
    /// exactly `{session, time}` besides `args` (a recorded one: its Cedar
    /// value is then built from values, on first use).
    fn typed_context(
        &self,
        typed: &schema_gen::TypedTool,
        json: serde_json::Value,
        fits: bool,
        session_shaped: bool,
    ) -> PreparedContext {
        if fits && session_shaped {
            // Values of a projection always rebuild (the schema_gen tests
            // cover every type), and one that did not would deny.
            let mut prepared = self.prepared(Some(json), std::sync::OnceLock::new());
            prepared.action = Some(typed.action.clone());
            prepared.typed_args = Some(Arc::clone(&typed.args));
            return prepared;
        }
        let cedar = if fits {
            match typed_pairs(&typed.args, &json) {
                Some(pairs) => Context::from_pairs(pairs).map_err(ContextError::values),
                None => Context::from_json_value(json.clone(), Some((&self.schema, &typed.action)))
                    .map_err(ContextError::json),
            }
        } else {
            Err(ContextError::ArgsDoNotFit(Uid(typed.action.clone())))
        };
        let mut prepared = self.prepared(Some(json), cedar.into());
        prepared.action = Some(typed.action.clone());
        prepared
    }

    /// The typed action of a tool resource for `group`, if this bundle has one.
    fn typed_for(&self, group: Action, resource: &Uid) -> Option<&schema_gen::TypedTool> {
        if !matches!(group, Action::CallTool | Action::A2aInvoke)
            || resource.0.type_name() != &type_names().tool
        {
            return None;
        }
        self.typed.get(resource.id()).filter(|t| t.group == group)
    }

    /// Why a call of a tool resource is denied for its dropped typed action.
    fn dropped_denial(&self, group: Action, resource: &Uid) -> Option<String> {
        if self.dropped.is_empty() || resource.0.type_name() != &type_names().tool {
            return None;
        }
        self.dropped.denial(group, resource.id())
    }

    /// Decides one request against a prepared context. A context or request
    /// that does not conform to the schema is a deny carrying the reason.
    pub fn decide(
        &self,
        principal: &Uid,
        action: Action,
        resource: &Uid,
        context: &PreparedContext,
        entities: &Entities,
    ) -> Verdict {
        match self.request(principal, action, resource, context) {
            Ok(request) => self.decide_request(&request, entities),
            Err(denied) => denied,
        }
    }

    /// The action a request is decided under: the tool's typed action when
    /// the context was prepared for it, else the group action; a deny when
    /// the context was prepared for another schema or action.
    fn deciding_action(
        &self,
        action: Action,
        resource: &Uid,
        context: &PreparedContext,
    ) -> Result<EntityUid, Verdict> {
        if context.schema_hash != self.schema_hash {
            return Err(Verdict::denied_with(
                "context was prepared for a different schema".into(),
            ));
        }
        match (&context.action, self.typed_for(action, resource)) {
            (None, None) => match self.dropped_denial(action, resource) {
                Some(reason) => Err(Verdict::denied_with(reason)),
                None => Ok(action.uid().0),
            },
            (Some(used), Some(t)) if *used == t.action => Ok(t.action.clone()),
            (None, Some(t)) => Err(Verdict::denied_with(format!(
                "`{resource}` is decided under its typed action `{}`, but the context carries no arguments",
                t.action
            ))),
            (Some(used), _) => Err(Verdict::denied_with(format!(
                "context was prepared for `{used}`, not for `{}` on `{resource}`",
                action.name()
            ))),
        }
    }

    /// The Cedar request of a decision, checked against the schema, or the
    /// deny a request that cannot be built is.
    fn request(
        &self,
        principal: &Uid,
        action: Action,
        resource: &Uid,
        context: &PreparedContext,
    ) -> Result<Request, Verdict> {
        let action_uid = self.deciding_action(action, resource, context)?;
        let ctx = match context.cedar() {
            Ok(c) => c.clone(),
            Err(e) => return Err(Verdict::denied_with(e.to_string())),
        };
        Request::new(
            principal.0.clone(),
            action_uid,
            resource.0.clone(),
            ctx,
            Some(&self.schema),
        )
        .map_err(|e| Verdict::denied_with(format!("cannot build request: {e}")))
    }

    /// Decides one action for many resources of one entity type with the
    /// same principal and context (the per-node `read_node` filter). The
    /// first request is checked against the schema; the others differ from
    /// it only by the resource id, so they are built without re-checking
    /// (a resource of another type is checked again).
    pub fn decide_many<'r>(
        &self,
        principal: &Uid,
        action: Action,
        resources: impl IntoIterator<Item = &'r Uid>,
        context: &PreparedContext,
        entities: &Entities,
    ) -> Vec<Verdict> {
        let mut checked: Option<EntityTypeName> = None;
        let mut out = Vec::new();
        for resource in resources {
            if context.schema_hash != self.schema_hash {
                out.push(Verdict::denied_with(
                    "context was prepared for a different schema".into(),
                ));
                continue;
            }
            let ctx = match context.cedar() {
                Ok(c) => c.clone(),
                Err(e) => {
                    out.push(Verdict::denied_with(e.to_string()));
                    continue;
                }
            };
            let same_type = checked.as_ref() == Some(resource.0.type_name());
            let schema = if same_type { None } else { Some(&self.schema) };
            match Request::new(
                principal.0.clone(),
                action.uid().0,
                resource.0.clone(),
                ctx,
                schema,
            ) {
                Ok(request) => {
                    if !same_type {
                        checked = Some(resource.0.type_name().clone());
                    }
                    out.push(self.decide_request(&request, entities));
                }
                Err(e) => out.push(Verdict::denied_with(format!("cannot build request: {e}"))),
            }
        }
        out
    }

    /// Decides an already-built request (used by replay, which rebuilds the
    /// recorded request itself).
    pub fn decide_request(&self, request: &Request, entities: &Entities) -> Verdict {
        let policies = request
            .action()
            .and_then(|a| self.slices.get(a))
            .unwrap_or(&self.policies);
        let response = Authorizer::new().is_authorized(request, policies, entities);
        let diagnostics = response.diagnostics();
        let mut errors = Vec::new();
        let mut forbid_errored = false;
        for e in diagnostics.errors() {
            let cedar_policy::AuthorizationError::PolicyEvaluationError(inner) = e;
            let id = inner.policy_id();
            let is_forbid = self
                .policies
                .policy(id)
                .map(|p| p.effect() == Effect::Forbid)
                // An error on a policy we cannot find is treated as a forbid.
                .unwrap_or(true);
            forbid_errored |= is_forbid;
            errors.push(format!("policy `{id}`: {e}"));
        }
        // Cedar reports its reasons as a set: sorted by id, so a record
        // (and the advice an agent gets) is the same on every run.
        let mut determining: Vec<&PolicyId> = diagnostics.reason().collect();
        determining.sort_unstable_by(|a, b| AsRef::<str>::as_ref(*a).cmp(b.as_ref()));
        errors.sort_unstable();
        let reasons: Vec<String> = determining.iter().map(ToString::to_string).collect();
        let advice = determining
            .into_iter()
            .filter_map(|id| self.advice.get(id).cloned())
            .collect();
        Verdict {
            allowed: response.decision() == Decision::Allow && !forbid_errored,
            reasons,
            errors,
            advice,
        }
    }

    /// Parses entity JSON (an array of Cedar entities) against this schema.
    pub fn parse_entities(&self, json: &serde_json::Value) -> Result<Entities, ParseEntitiesError> {
        Entities::from_json_value(json.clone(), Some(&self.schema))
            .map_err(|e| ParseEntitiesError(Box::new(e)))
    }
}

/// Entity JSON that Cedar refuses under a bundle's schema (displays as
/// Cedar's own message).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ParseEntitiesError(Box<cedar_policy::entities_errors::EntitiesError>);

/// The Cedar values of a typed tool context that is exactly
/// `{session, time, args}` with `args` projected onto the tool's type,
/// built from values (several times cheaper than parsing its JSON against
/// the schema); `None` for any other shape, which is then parsed.
pub(crate) fn typed_pairs(
    args_type: &schema_gen::ArgType,
    json: &serde_json::Value,
) -> Option<[(String, RestrictedExpression); 3]> {
    let (session_id, time) = recorded::session_shape(json, true)?;
    let args = schema_gen::restricted(args_type, json.get("args")?)?;
    let [session, time] = session_pairs(session_id, time);
    Some([session, time, ("args".to_string(), args)])
}

/// The Cedar values of `context.token` and `context.client` (when the token
/// names its client).
fn token_pairs(
    token: &identity::CheckedToken,
) -> Result<Vec<(String, RestrictedExpression)>, ContextError> {
    let facts = token.facts();
    let strings = |values: &[String]| {
        RestrictedExpression::new_set(values.iter().cloned().map(RestrictedExpression::new_string))
    };
    let record = RestrictedExpression::new_record([
        (
            "issuer".to_string(),
            RestrictedExpression::new_string(facts.issuer.clone()),
        ),
        ("audience".to_string(), strings(&facts.audience)),
        ("scopes".to_string(), strings(&facts.scopes)),
        (
            "expiresAt".to_string(),
            extension_values::datetime(token.expires_at()),
        ),
    ])
    .map_err(ContextError::record)?;
    let mut pairs = vec![("token".to_string(), record)];
    if let Some(id) = &facts.client_id {
        let client = RestrictedExpression::new_record([(
            "id".to_string(),
            RestrictedExpression::new_string(id.clone()),
        )])
        .map_err(ContextError::record)?;
        pairs.push(("client".to_string(), client));
    }
    Ok(pairs)
}

/// The Cedar values of the session context `{session, time}`.
fn session_pairs(session_id: &str, time: &str) -> [(String, RestrictedExpression); 2] {
    [
        (
            "session".to_string(),
            RestrictedExpression::new_entity_uid(Kind::Session.uid(session_id).0),
        ),
        ("time".to_string(), extension_values::datetime(time)),
    ]
}

/// The policy enforcement point: the active [`PolicyBundle`], swapped
/// atomically on reload so requests in flight keep the bundle they loaded.
#[derive(Debug)]
pub struct Pep {
    active: ArcSwap<PolicyBundle>,
    hooks: Arc<Hooks>,
}

impl Pep {
    /// A PEP starting with `bundle`.
    pub fn new(mut bundle: PolicyBundle) -> Self {
        let hooks = Arc::new(Hooks::default());
        bundle.hooks = Arc::clone(&hooks);
        Pep {
            active: ArcSwap::from_pointee(bundle),
            hooks,
        }
    }

    /// Installs the observer of every decision (once; later calls are ignored).
    pub fn set_observer(&self, observer: Arc<dyn DecisionObserver>) {
        let _ = self.hooks.observer.set(observer);
    }

    /// The bundle to decide a whole request with.
    pub fn current(&self) -> Arc<PolicyBundle> {
        self.active.load_full()
    }

    /// Makes `bundle` the active set; requests in flight keep the bundle
    /// they loaded.
    pub fn swap(&self, mut bundle: PolicyBundle) -> Arc<PolicyBundle> {
        bundle.hooks = Arc::clone(&self.hooks);
        let bundle = Arc::new(bundle);
        self.active.store(Arc::clone(&bundle));
        bundle
    }
}
