//! Entity slices: the few Cedar entities one decision needs, built
//! server-side from the store (never from caller input), parsed against the
//! schema, and hashed so the decision trail can store each distinct slice
//! once and replay any decision against exactly the data it used.
//!
//! The tenant data comes in as plain facts ([`SessionFacts`] and its
//! parts) holding only what the entities carry, so this module does not
//! depend on how the store lays out its rows; the callers that load the
//! rows fill them in. The JSON built from them is the recorded format:
//! field order and values must not change, or slice hashes would.

use std::sync::Arc;

use cedar_policy::{Entities, Entity, RestrictedExpression};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::identity::{CheckedToken, CheckedUser};
use super::{Kind, PolicyBundle, Uid};

/// Parsed entities plus the exact JSON they came from.
#[derive(Debug, Clone)]
pub struct EntitySlice {
    /// What Cedar evaluates against.
    pub entities: Entities,
    /// The JSON array the entities were parsed from (recorded once per hash).
    pub json: Arc<str>,
    /// SHA-256 of `json`.
    pub hash: String,
    /// Hash of the schema the slice was checked against.
    pub schema_hash: String,
    /// Verdicts of this slice's sessions that repeat on every request
    /// (shared by clones of the slice).
    pub verdicts: Arc<crate::policy::session_verdicts::VerdictMemo>,
}

/// An org as policies see it (`Gateway::Org`).
#[derive(Debug, Clone, Copy)]
pub struct OrgFacts<'a> {
    /// Org id.
    pub id: &'a str,
    /// `plan` attribute.
    pub plan: &'a str,
    /// `entitlements` attribute (plan features, e.g. `kg_enabled`).
    pub entitlements: &'a [String],
}

/// A project as policies see it (`Gateway::Project`, child of its org).
#[derive(Debug, Clone, Copy)]
pub struct ProjectFacts<'a> {
    /// Owning org.
    pub org_id: &'a str,
    /// Project id.
    pub id: &'a str,
    /// `memoryEnabled` attribute.
    pub memory_enabled: bool,
    /// `graphEnabled` attribute.
    pub graph_enabled: bool,
}

/// An agent as policies see it (`Gateway::Agent`, child of its org and of
/// each of its roles).
#[derive(Debug, Clone, Copy)]
pub struct AgentFacts<'a> {
    /// Owning org.
    pub org_id: &'a str,
    /// Agent id.
    pub id: &'a str,
    /// `name` attribute.
    pub name: &'a str,
    /// Role ids (`Gateway::Role` parents).
    pub roles: &'a [String],
}

/// A daemon key as policies see it (`Gateway::ApiKey`, child of its org).
#[derive(Debug, Clone, Copy)]
pub struct KeyFacts<'a> {
    /// Owning org.
    pub org_id: &'a str,
    /// Key id (the public part of the key).
    pub id: &'a str,
    /// `label` attribute.
    pub label: &'a str,
}

/// What decisions inside a session know of its tenant: the session's org,
/// project and agent, and the key calling. The session entity refers to
/// the org, project and agent given here, so they must be the session's.
#[derive(Debug, Clone, Copy)]
pub struct SessionFacts<'a> {
    /// Session id.
    pub session_id: &'a str,
    /// The session's org.
    pub org: OrgFacts<'a>,
    /// The session's project.
    pub project: ProjectFacts<'a>,
    /// The session's agent.
    pub agent: AgentFacts<'a>,
    /// The key making the request.
    pub key: KeyFacts<'a>,
}

impl<'a> SessionFacts<'a> {
    /// These facts as a key-authenticated request's: the key calls, and
    /// the session acts for no person.
    pub fn call(&self) -> SessionCallFacts<'a> {
        SessionCallFacts {
            session_id: self.session_id,
            org: self.org,
            project: self.project,
            agent: self.agent,
            user: None,
            caller: Caller::Key(self.key),
        }
    }
}

/// Who makes a request: the principal of its `access_session` (and
/// `create_session`) decision. A person is also the principal of the
/// request's tool decisions; a key's requests decide those for the
/// session's agent.
#[derive(Debug, Clone, Copy)]
pub enum Caller<'a> {
    /// A daemon key (`Gateway::ApiKey`).
    Key(KeyFacts<'a>),
    /// A person with a bearer token (`Gateway::User`).
    User(&'a CheckedUser),
}

impl Caller<'_> {
    /// The caller's uid.
    pub fn uid(&self) -> Uid {
        match self {
            Caller::Key(key) => Kind::ApiKey.uid(key.id),
            Caller::User(user) => user.uid(),
        }
    }
}

/// What decisions inside a session know, whoever calls: the session's
/// org, project and agent, the person it acts for, and the caller. Every
/// person here must be of the session's org (tenant isolation is checked
/// before; a slice with a person of another org is refused).
#[derive(Debug, Clone, Copy)]
pub struct SessionCallFacts<'a> {
    /// Session id.
    pub session_id: &'a str,
    /// The session's org.
    pub org: OrgFacts<'a>,
    /// The session's project.
    pub project: ProjectFacts<'a>,
    /// The session's agent (for a person's session, the agent standing
    /// for their MCP client application).
    pub agent: AgentFacts<'a>,
    /// The person the session acts for (`Session.user`), when it was
    /// opened for one.
    pub user: Option<&'a CheckedUser>,
    /// Who makes the request.
    pub caller: Caller<'a>,
}

/// A tool as the PEP sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolEntity {
    /// Canonical tool name (the Cedar id).
    pub name: String,
    /// Tool group: `memory`, `graph` or `a2a`.
    pub group: String,
    /// `kind` attribute.
    pub kind: String,
    /// `readOnly` attribute.
    pub read_only: bool,
    /// Slug of the peer agent for A2A tools.
    pub peer: Option<String>,
    /// What an upstream MCP server says of its tool (None for others).
    pub upstream: Option<UpstreamToolFacts>,
}

/// An upstream MCP server's tool as policies see it: the server it is a
/// child of, and the attributes its annotations give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamToolFacts {
    /// Slug of its `McpServer` parent.
    pub server: String,
    /// `destructive` (`annotations.destructiveHint`, MCP default true).
    pub destructive: bool,
    /// `openWorld` (`annotations.openWorldHint`, MCP default true).
    pub open_world: bool,
    /// `title` (`annotations.title`, else the tool's `title`), if any.
    pub title: Option<String>,
}

/// A registered upstream MCP server as the PEP sees it
/// (`Gateway::McpServer`, child of its org and of `ToolGroup::"upstream"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerEntity {
    /// Slug (the entity id).
    pub slug: String,
    /// Registered endpoint URL.
    pub url: String,
    /// `streamable-http`.
    pub transport: String,
    /// Owning org.
    pub org_id: String,
}

/// A registered A2A peer as the PEP sees it (`Gateway::PeerAgent`, child
/// of its org and of `ToolGroup::"a2a"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerEntity {
    /// Slug (the entity id).
    pub slug: String,
    /// Registered base URL.
    pub url: String,
    /// Display name.
    pub name: String,
    /// Owning org.
    pub org_id: String,
}

/// `{"__entity": {...}}`, the explicit entity-reference form (kept
/// explicit so replay does not depend on schema-directed parsing).
pub fn entity_ref(kind: Kind, id: &str) -> Value {
    let mut uid = serde_json::Map::with_capacity(2);
    uid.insert("type".into(), Value::String(kind.qualified()));
    uid.insert("id".into(), Value::String(id.to_owned()));
    wrapped("__entity", uid)
}

/// `{key: inner}`, built directly: `json!` serializes every interpolated
/// value again, a deep copy of each nested `Value` on every request.
fn wrapped(key: &str, inner: serde_json::Map<String, Value>) -> Value {
    let mut outer = serde_json::Map::with_capacity(1);
    outer.insert(key.into(), Value::Object(inner));
    Value::Object(outer)
}

fn parent(kind: Kind, id: &str) -> Value {
    json!({ "type": kind.qualified(), "id": id })
}

fn entity(kind: Kind, id: &str, attrs: Value, parents: Vec<Value>) -> Value {
    json!({ "uid": parent(kind, id), "attrs": attrs, "parents": parents })
}

fn org_entity(org: &OrgFacts<'_>) -> Value {
    entity(
        Kind::Org,
        org.id,
        json!({ "plan": org.plan, "entitlements": org.entitlements }),
        vec![],
    )
}

fn project_entity(p: &ProjectFacts<'_>) -> Value {
    entity(
        Kind::Project,
        p.id,
        json!({ "memoryEnabled": p.memory_enabled, "graphEnabled": p.graph_enabled }),
        vec![parent(Kind::Org, p.org_id)],
    )
}

fn agent_entities(a: &AgentFacts<'_>, out: &mut Vec<Value>) {
    let mut parents = vec![parent(Kind::Org, a.org_id)];
    for role in a.roles {
        parents.push(parent(Kind::Role, role));
        out.push(entity(
            Kind::Role,
            role,
            json!({}),
            vec![parent(Kind::Org, a.org_id)],
        ));
    }
    out.push(entity(
        Kind::Agent,
        a.id,
        json!({ "name": a.name }),
        parents,
    ));
}

/// A person's groups (children of their org) and the person (child of
/// their org and of each group, with their mapped claims as tags); a group
/// already in `groups_seen` is not added again.
fn user_entities(
    user: &CheckedUser,
    groups_seen: &mut std::collections::HashSet<String>,
    out: &mut Vec<Value>,
) {
    let facts = user.facts();
    let mut parents = Vec::with_capacity(1 + facts.groups.len());
    parents.push(parent(Kind::Org, &facts.org));
    for group in &facts.groups {
        parents.push(parent(Kind::Group, group));
        if groups_seen.insert(group.clone()) {
            out.push(entity(
                Kind::Group,
                group,
                json!({}),
                vec![parent(Kind::Org, &facts.org)],
            ));
        }
    }
    let mut attrs = serde_json::Map::with_capacity(6);
    attrs.insert("org".into(), entity_ref(Kind::Org, &facts.org));
    attrs.insert("label".into(), user.id().into());
    attrs.insert("issuer".into(), facts.issuer.as_str().into());
    attrs.insert("subject".into(), facts.subject.as_str().into());
    attrs.insert("name".into(), facts.name.as_str().into());
    if let Some(email) = &facts.email {
        attrs.insert("email".into(), email.as_str().into());
    }
    out.push(json!({
        "uid": parent(Kind::User, user.id()),
        "attrs": attrs,
        "parents": parents,
        "tags": facts.tags,
    }));
}

/// The entities of who calls and of the person a session acts for (each
/// person once), refusing a person of another org than `org_id`.
fn caller_entities(
    org_id: &str,
    caller: &Caller<'_>,
    user: Option<&CheckedUser>,
    out: &mut Vec<Value>,
) -> Result<(), EntitySliceError> {
    let mut groups = std::collections::HashSet::new();
    let mut people: Vec<&CheckedUser> = Vec::new();
    match caller {
        Caller::Key(key) => out.push(key_entity(key)),
        Caller::User(person) => people.push(person),
    }
    if let Some(person) = user
        && !people.iter().any(|p| p.id() == person.id())
    {
        people.push(person);
    }
    for person in people {
        if person.facts().org != org_id {
            return Err(EntitySliceError(SliceProblem::OtherOrg {
                user: person.id().to_string(),
            }));
        }
        user_entities(person, &mut groups, out);
    }
    Ok(())
}

fn key_entity(k: &KeyFacts<'_>) -> Value {
    entity(
        Kind::ApiKey,
        k.id,
        json!({ "org": entity_ref(Kind::Org, k.org_id), "label": k.label }),
        vec![parent(Kind::Org, k.org_id)],
    )
}

fn tool_entities(tools: &[ToolEntity], out: &mut Vec<Value>) {
    let mut groups: Vec<&str> = tools.iter().map(|t| t.group.as_str()).collect();
    groups.sort_unstable();
    groups.dedup();
    for g in groups {
        out.push(entity(Kind::ToolGroup, g, json!({}), vec![]));
    }
    for t in tools {
        let parents = match (&t.peer, &t.upstream) {
            (Some(peer), _) => vec![parent(Kind::PeerAgent, peer)],
            (None, Some(u)) => vec![parent(Kind::McpServer, &u.server)],
            (None, None) => vec![parent(Kind::ToolGroup, &t.group)],
        };
        let mut attrs = json!({ "kind": t.kind, "readOnly": t.read_only });
        if let (Some(u), Value::Object(map)) = (&t.upstream, &mut attrs) {
            map.insert("destructive".into(), u.destructive.into());
            map.insert("openWorld".into(), u.open_world.into());
            if let Some(title) = &u.title {
                map.insert("title".into(), title.as_str().into());
            }
        }
        out.push(entity(Kind::Tool, &t.name, attrs, parents));
    }
}

/// An entity slice that cannot be built: Cedar refuses it under the
/// bundle's schema, or it would hold a person of another org (the
/// decision that needed it fails closed).
#[derive(Debug, thiserror::Error)]
#[error("cannot build entities: {0}")]
pub struct EntitySliceError(#[source] SliceProblem);

#[derive(Debug, thiserror::Error)]
enum SliceProblem {
    #[error(transparent)]
    Parse(super::ParseEntitiesError),
    #[error("person `{user}` is not of the session's org")]
    OtherOrg { user: String },
}

/// Parses and hashes a slice.
pub fn finish(bundle: &PolicyBundle, values: Vec<Value>) -> Result<EntitySlice, EntitySliceError> {
    let value = Value::Array(values);
    let text = value.to_string();
    let entities = bundle
        .parse_entities(&value)
        .map_err(|e| EntitySliceError(SliceProblem::Parse(e)))?;
    Ok(EntitySlice {
        entities,
        hash: hex::encode(Sha256::digest(text.as_bytes())),
        json: Arc::from(text),
        schema_hash: bundle.schema_hash.clone(),
        verdicts: Arc::default(),
    })
}

/// Everything decisions inside a session need: org, project, agent and its
/// roles, the calling key, the session, and the session's tools.
pub fn session_slice(
    bundle: &PolicyBundle,
    facts: &SessionFacts<'_>,
    tools: &[ToolEntity],
) -> Result<EntitySlice, EntitySliceError> {
    session_slice_with_peers(bundle, facts, tools, &[])
}

/// [`session_slice`] plus the org's A2A peers (parents of their tools).
pub fn session_slice_with_peers(
    bundle: &PolicyBundle,
    facts: &SessionFacts<'_>,
    tools: &[ToolEntity],
    peers: &[PeerEntity],
) -> Result<EntitySlice, EntitySliceError> {
    session_slice_with_remotes(bundle, facts, tools, peers, &[])
}

/// [`session_slice`] plus the org's A2A peers and upstream MCP servers
/// (the parents of their tools).
pub fn session_slice_with_remotes(
    bundle: &PolicyBundle,
    facts: &SessionFacts<'_>,
    tools: &[ToolEntity],
    peers: &[PeerEntity],
    servers: &[McpServerEntity],
) -> Result<EntitySlice, EntitySliceError> {
    session_slice_for_call(bundle, &facts.call(), tools, peers, servers)
}

/// [`session_slice_with_remotes`] for any caller: a key-authenticated
/// request's facts ([`SessionFacts::call`]) give exactly the same slice;
/// a person's adds them (their groups, their tags) and the person the
/// session acts for, as `Session.user`.
pub fn session_slice_for_call(
    bundle: &PolicyBundle,
    facts: &SessionCallFacts<'_>,
    tools: &[ToolEntity],
    peers: &[PeerEntity],
    servers: &[McpServerEntity],
) -> Result<EntitySlice, EntitySliceError> {
    let mut values = vec![org_entity(&facts.org), project_entity(&facts.project)];
    agent_entities(&facts.agent, &mut values);
    caller_entities(facts.org.id, &facts.caller, facts.user, &mut values)?;
    let mut session = json!({
        "org": entity_ref(Kind::Org, facts.org.id),
        "project": entity_ref(Kind::Project, facts.project.id),
        "agent": entity_ref(Kind::Agent, facts.agent.id),
    });
    if let (Some(user), Value::Object(attrs)) = (facts.user, &mut session) {
        attrs.insert("user".into(), entity_ref(Kind::User, user.id()));
    }
    values.push(entity(
        Kind::Session,
        facts.session_id,
        session,
        vec![parent(Kind::Project, facts.project.id)],
    ));
    tool_entities(tools, &mut values);
    if !peers.is_empty() && !tools.iter().any(|t| t.group == "a2a") {
        values.push(entity(Kind::ToolGroup, "a2a", json!({}), vec![]));
    }
    for p in peers {
        values.push(entity(
            Kind::PeerAgent,
            &p.slug,
            json!({ "slug": p.slug, "url": p.url, "name": p.name }),
            vec![parent(Kind::Org, &p.org_id), parent(Kind::ToolGroup, "a2a")],
        ));
    }
    if !servers.is_empty() && !tools.iter().any(|t| t.group == "upstream") {
        values.push(entity(Kind::ToolGroup, "upstream", json!({}), vec![]));
    }
    for s in servers {
        values.push(entity(
            Kind::McpServer,
            &s.slug,
            json!({ "slug": s.slug, "url": s.url, "transport": s.transport }),
            vec![
                parent(Kind::Org, &s.org_id),
                parent(Kind::ToolGroup, "upstream"),
            ],
        ));
    }
    finish(bundle, values)
}

/// An upstream MCP server's resource or prompt as policies see it: a
/// `Gateway::Resource` (`uri`) or `Gateway::Prompt` (`name`), child of its
/// `McpServer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamEntryFacts {
    /// `Kind::Resource` or `Kind::Prompt`.
    pub kind: Kind,
    /// The gateway's name for it (the entity id).
    pub id: String,
    /// The upstream's own URI (resources) or name (prompts).
    pub upstream: String,
    /// Slug of its `McpServer` parent.
    pub server: String,
}

/// The session slice `base` plus one entity per upstream resource or
/// prompt (an id given twice is added once): the slice of one request's
/// `read_resource` / `get_prompt` decisions, recorded with them.
pub fn with_upstream_entries(
    bundle: &PolicyBundle,
    base: &EntitySlice,
    entries: &[UpstreamEntryFacts],
) -> Result<EntitySlice, EntitySliceError> {
    let mut values: Vec<Value> = match serde_json::from_str(&base.json) {
        Ok(Value::Array(values)) => values,
        _ => Vec::new(),
    };
    let mut seen = std::collections::HashSet::new();
    for e in entries {
        if !seen.insert((e.kind.name(), e.id.as_str())) {
            continue;
        }
        let attrs = match e.kind {
            Kind::Prompt => json!({ "name": e.upstream }),
            _ => json!({ "uri": e.upstream }),
        };
        values.push(entity(
            e.kind,
            &e.id,
            attrs,
            vec![parent(Kind::McpServer, &e.server)],
        ));
    }
    finish(bundle, values)
}

/// What a `create_session` decision needs: the key, the project and the
/// agent, with their org.
pub fn create_session_slice(
    bundle: &PolicyBundle,
    org: &OrgFacts<'_>,
    project: &ProjectFacts<'_>,
    agent: &AgentFacts<'_>,
    key: &KeyFacts<'_>,
) -> Result<EntitySlice, EntitySliceError> {
    create_session_slice_for(bundle, org, project, agent, &Caller::Key(*key))
}

/// [`create_session_slice`] for any caller: a person (of `org`) opening a
/// session brings their groups and tags.
pub fn create_session_slice_for(
    bundle: &PolicyBundle,
    org: &OrgFacts<'_>,
    project: &ProjectFacts<'_>,
    agent: &AgentFacts<'_>,
    caller: &Caller<'_>,
) -> Result<EntitySlice, EntitySliceError> {
    let mut values = vec![org_entity(org), project_entity(project)];
    agent_entities(agent, &mut values);
    caller_entities(org.id, caller, None, &mut values)?;
    finish(bundle, values)
}

/// The context of a `create_session` decision: `{agent, time}`, with the
/// token's `token` and `client` when a person opens the session.
pub fn create_session_context(agent_id: &str, time: &str, token: Option<&CheckedToken>) -> Value {
    let mut context = serde_json::Map::with_capacity(4);
    context.insert("agent".into(), entity_ref(Kind::Agent, agent_id));
    context.insert("time".into(), datetime_value(time));
    if let Some(token) = token {
        insert_token(&mut context, token);
    }
    Value::Object(context)
}

/// Adds `token` (and `client`, when the token names one) to a context:
/// the attributes of a token-authenticated request.
pub fn insert_token(context: &mut serde_json::Map<String, Value>, token: &CheckedToken) {
    context.extend(token.context_members());
}

/// Only the calling key (a child of its org): what a refusal decided
/// before any session is known to belong to the key's org may show.
pub fn key_slice(
    bundle: &PolicyBundle,
    key: &KeyFacts<'_>,
) -> Result<EntitySlice, EntitySliceError> {
    finish(bundle, vec![key_entity(key)])
}

/// Only the calling person (a child of their org and groups, with their
/// groups): what a refusal decided before any session is known to belong
/// to the person's org may show.
pub fn user_slice(
    bundle: &PolicyBundle,
    user: &CheckedUser,
) -> Result<EntitySlice, EntitySliceError> {
    let mut values = Vec::new();
    user_entities(user, &mut std::collections::HashSet::new(), &mut values);
    finish(bundle, values)
}

/// A knowledge-graph node as `read_node` sees it.
#[derive(Debug, Clone, Copy)]
pub struct NodeRef<'a> {
    /// Node UUID (the `GraphNode` entity id).
    pub id: &'a str,
    /// `type` attribute.
    pub node_type: &'a str,
    /// `name` attribute.
    pub name: &'a str,
}

/// Why the node entities of a `read_node` batch could not be built.
#[derive(Debug, thiserror::Error)]
pub enum NodeEntitiesError {
    /// One node's entity was refused.
    #[error("cannot build node entity `{id}`: {source}")]
    Node {
        /// The node id.
        id: String,
        /// Cedar's reason.
        source: Box<cedar_policy::EntityAttrEvaluationError>,
    },
    /// The nodes could not be added to the session entities.
    #[error("cannot build node entities: {0}")]
    Add(#[source] Box<cedar_policy::entities_errors::EntitiesError>),
}

/// The session entities `base` plus one `GraphNode` per node (child of
/// `Gateway::Project::"<project_id>"`, with its `type` and `name`); a node
/// listed twice is added once.
pub fn with_graph_nodes(
    base: &Entities,
    project_id: &str,
    nodes: &[NodeRef<'_>],
) -> Result<Entities, NodeEntitiesError> {
    let project = Kind::Project.uid(project_id).0;
    let mut seen = std::collections::HashSet::new();
    let mut list = Vec::with_capacity(nodes.len());
    for n in nodes {
        if !seen.insert(n.id) {
            continue;
        }
        let attrs = std::collections::HashMap::from([
            (
                "type".to_string(),
                RestrictedExpression::new_string(n.node_type.to_string()),
            ),
            (
                "name".to_string(),
                RestrictedExpression::new_string(n.name.to_string()),
            ),
        ]);
        let entity = Entity::new(
            Kind::GraphNode.uid(n.id).0,
            attrs,
            std::collections::HashSet::from([project.clone()]),
        )
        .map_err(|source| NodeEntitiesError::Node {
            id: n.id.to_string(),
            source: Box::new(source),
        })?;
        list.push(entity);
    }
    // Built here from typed values (two strings and the project parent),
    // so they conform by construction; skipping the per-entity schema
    // check keeps a 1,000-node batch cheap.
    base.clone()
        .add_entities(list, None)
        .map_err(|e| NodeEntitiesError::Add(Box::new(e)))
}

/// Cedar JSON for a `datetime` value.
pub fn datetime_value(rfc3339: &str) -> Value {
    let mut extn = serde_json::Map::with_capacity(2);
    extn.insert("fn".into(), Value::String("datetime".into()));
    extn.insert("arg".into(), Value::String(rfc3339.to_owned()));
    wrapped("__extn", extn)
}

/// The context every in-session decision carries.
pub fn session_context(session_id: &str, time: &str) -> Value {
    let mut context = serde_json::Map::with_capacity(3);
    context.insert("session".into(), entity_ref(Kind::Session, session_id));
    context.insert("time".into(), datetime_value(time));
    Value::Object(context)
}

/// [`session_context`]'s text exactly as `serde_json` writes it (the text
/// the trail records), written directly: every request's decisions record
/// it, and serializing the value took 2.6% of a `tools/list`'s CPU. A unit
/// test holds the two equal.
pub fn session_context_text(session_id: &str, time: &str) -> String {
    session_context_text_with(session_id, time, None, None)
}

/// The text of a session context that also holds a token's members
/// ([`CheckedToken::context_text`], after `time`, as [`insert_token`]
/// puts them) and a typed tool's `args` (last), exactly as `serde_json`
/// writes that object.
pub fn session_context_text_with(
    session_id: &str,
    time: &str,
    token: Option<&CheckedToken>,
    args: Option<&Value>,
) -> String {
    let members = token.map_or("", CheckedToken::context_text);
    let mut out = String::with_capacity(120 + session_id.len() + time.len() + members.len());
    out.push_str("{\"session\":{\"__entity\":{\"type\":\"");
    out.push_str(&Kind::Session.qualified());
    out.push_str("\",\"id\":");
    push_quoted(&mut out, session_id);
    out.push_str("}},\"time\":{\"__extn\":{\"fn\":\"datetime\",\"arg\":");
    push_quoted(&mut out, time);
    out.push_str("}}");
    if !members.is_empty() {
        out.push(',');
        out.push_str(members);
    }
    if let Some(args) = args {
        out.push_str(",\"args\":");
        out.push_str(&args.to_string());
    }
    out.push('}');
    out
}

/// `s` as a JSON string: as it is when nothing in it needs escaping,
/// else escaped by `serde_json`.
fn push_quoted(out: &mut String, s: &str) {
    if s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(&Value::from(s).to_string());
    } else {
        out.push('"');
        out.push_str(s);
        out.push('"');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = include_str!("../../schemas/gateway.cedarschema");

    fn bundle() -> PolicyBundle {
        let files = vec![super::super::PolicyFile {
            path: "p.cedar".into(),
            text: "@id(\"all\")\npermit (principal, action, resource);".into(),
        }];
        super::super::load::bundle_from_sources("schemas/gateway.cedarschema", SCHEMA, files)
            .unwrap_or_else(|e| panic!("{}", e.render()))
    }

    #[test]
    fn the_session_context_text_is_the_values_text() {
        for id in [
            "s-1",
            "quote\"d",
            "back\\slash",
            "tab\tand\nline",
            "ünïcødé ✓",
            "\u{1}ctl",
            "",
        ] {
            let time = "2026-11-22T08:00:00.000Z";
            assert_eq!(
                session_context_text(id, time),
                session_context(id, time).to_string(),
                "{id:?}"
            );
        }
        assert_eq!(
            session_context_text("s", "t\"ime"),
            session_context("s", "t\"ime").to_string()
        );
    }

    /// The context text written directly with a token's members and a
    /// typed tool's `args` is what `serde_json` writes for the same value,
    /// whatever the identity provider put in the token's strings.
    #[test]
    fn a_tokens_context_text_is_the_values_text() {
        let odd = [
            "plain",
            "quote\"d",
            "back\\slash",
            "tab\tline\n",
            "\u{1}",
            "ünï ✓",
        ];
        for (i, s) in odd.iter().enumerate() {
            let token = super::super::identity::TokenFacts {
                issuer: format!("https://idp.test/{s}"),
                audience: vec![s.to_string(), "https://gw.test".into()],
                scopes: vec![s.to_string(), "mcp:tools".into()],
                expires_at: 1_795_000_000,
                client_id: (i % 2 == 0).then(|| s.to_string()),
            }
            .checked()
            .unwrap();
            let args = json!({ "path": s, "n": [1, 2.5, null], "deep": { "k": true } });
            for (token, args) in [
                (Some(&token), None),
                (Some(&token), Some(&args)),
                (None, Some(&args)),
                (None, None),
            ] {
                let mut value = session_context(s, "2026-11-22T08:00:00.000Z");
                if let Value::Object(map) = &mut value {
                    if let Some(token) = token {
                        insert_token(map, token);
                    }
                    if let Some(args) = args {
                        map.insert("args".into(), args.clone());
                    }
                }
                assert_eq!(
                    session_context_text_with(s, "2026-11-22T08:00:00.000Z", token, args),
                    value.to_string(),
                    "{s:?}"
                );
            }
        }
    }

    #[test]
    fn a_context_built_from_values_reads_as_the_same_context_parsed() {
        let bundle = bundle();
        let (id, time) = ("s \"1\"", "2026-11-22T08:00:00.000Z");
        let json = session_context(id, time);
        let built = bundle.prepare_session_context(id, time);
        let parsed = bundle.prepare_context(super::super::Action::AccessSession, json.clone());
        for ctx in [&built, &parsed] {
            assert_eq!(ctx.session_and_time(), Some((id, time)));
            assert_eq!(ctx.typed_session(), None);
            assert_eq!(ctx.text(), json.to_string());
            assert!(ctx.cedar().is_ok());
        }
        assert!(built.session.is_some() && parsed.session.is_none());
        // The JSON of a context built from values is made only when asked.
        assert!(built.json.get().is_none());
        assert_eq!(built.json(), &json);
    }

    /// The slice JSON is the recorded format: its exact text (and so its
    /// hash) must not change when the code building it does.
    #[test]
    fn the_session_slice_text_is_pinned() {
        let (entitlements, roles) = (vec!["kg_enabled".to_string()], vec!["dev".to_string()]);
        let facts = SessionFacts {
            session_id: "s-1",
            org: OrgFacts {
                id: "acme",
                plan: "team",
                entitlements: &entitlements,
            },
            project: ProjectFacts {
                org_id: "acme",
                id: "web",
                memory_enabled: true,
                graph_enabled: false,
            },
            agent: AgentFacts {
                org_id: "acme",
                id: "claude",
                name: "Claude",
                roles: &roles,
            },
            key: KeyFacts {
                org_id: "acme",
                id: "k-1",
                label: "daemon",
            },
        };
        let tools = [ToolEntity {
            name: "af_memory_recall".into(),
            group: "memory".into(),
            kind: "memory".into(),
            read_only: true,
            peer: None,
            upstream: None,
        }];
        let peers = [PeerEntity {
            slug: "ops".into(),
            url: "http://ops.test".into(),
            name: "Ops".into(),
            org_id: "acme".into(),
        }];
        let slice = session_slice_with_peers(&bundle(), &facts, &tools, &peers).unwrap();
        let expected = concat!(
            r#"[{"uid":{"type":"Gateway::Org","id":"acme"},"attrs":{"plan":"team","entitlements":["kg_enabled"]},"parents":[]},"#,
            r#"{"uid":{"type":"Gateway::Project","id":"web"},"attrs":{"memoryEnabled":true,"graphEnabled":false},"parents":[{"type":"Gateway::Org","id":"acme"}]},"#,
            r#"{"uid":{"type":"Gateway::Role","id":"dev"},"attrs":{},"parents":[{"type":"Gateway::Org","id":"acme"}]},"#,
            r#"{"uid":{"type":"Gateway::Agent","id":"claude"},"attrs":{"name":"Claude"},"parents":[{"type":"Gateway::Org","id":"acme"},{"type":"Gateway::Role","id":"dev"}]},"#,
            r#"{"uid":{"type":"Gateway::ApiKey","id":"k-1"},"attrs":{"org":{"__entity":{"type":"Gateway::Org","id":"acme"}},"label":"daemon"},"parents":[{"type":"Gateway::Org","id":"acme"}]},"#,
            r#"{"uid":{"type":"Gateway::Session","id":"s-1"},"attrs":{"org":{"__entity":{"type":"Gateway::Org","id":"acme"}},"project":{"__entity":{"type":"Gateway::Project","id":"web"}},"agent":{"__entity":{"type":"Gateway::Agent","id":"claude"}}},"parents":[{"type":"Gateway::Project","id":"web"}]},"#,
            r#"{"uid":{"type":"Gateway::ToolGroup","id":"memory"},"attrs":{},"parents":[]},"#,
            r#"{"uid":{"type":"Gateway::Tool","id":"af_memory_recall"},"attrs":{"kind":"memory","readOnly":true},"parents":[{"type":"Gateway::ToolGroup","id":"memory"}]},"#,
            r#"{"uid":{"type":"Gateway::ToolGroup","id":"a2a"},"attrs":{},"parents":[]},"#,
            r#"{"uid":{"type":"Gateway::PeerAgent","id":"ops"},"attrs":{"slug":"ops","url":"http://ops.test","name":"Ops"},"parents":[{"type":"Gateway::Org","id":"acme"},{"type":"Gateway::ToolGroup","id":"a2a"}]}]"#,
        );
        assert_eq!(&*slice.json, expected);
        assert_eq!(
            slice.hash,
            hex::encode(Sha256::digest(expected.as_bytes())),
            "the hash is of the text"
        );
    }

    fn person(subject: &str, org: &str, groups: &[&str]) -> CheckedUser {
        super::super::identity::UserFacts {
            org: org.into(),
            issuer: "https://idp.test".into(),
            subject: subject.into(),
            name: subject.to_uppercase(),
            email: None,
            groups: groups.iter().map(|g| g.to_string()).collect(),
            tags: [("department".to_string(), "finance".to_string())].into(),
        }
        .checked()
        .unwrap()
    }

    /// The slice of a person's request holds the person (their org and
    /// groups as parents, their claims as tags), their groups, and the
    /// session's `user`; the key's entity is not there.
    #[test]
    fn a_persons_slice_holds_them_their_groups_and_the_sessions_user() {
        let (entitlements, roles) = (Vec::new(), Vec::new());
        let alice = person("alice", "acme", &["sre"]);
        let facts = SessionCallFacts {
            session_id: "s-1",
            org: OrgFacts {
                id: "acme",
                plan: "team",
                entitlements: &entitlements,
            },
            project: ProjectFacts {
                org_id: "acme",
                id: "web",
                memory_enabled: true,
                graph_enabled: false,
            },
            agent: AgentFacts {
                org_id: "acme",
                id: "claude",
                name: "Claude",
                roles: &roles,
            },
            user: Some(&alice),
            caller: Caller::User(&alice),
        };
        let slice = session_slice_for_call(&bundle(), &facts, &[], &[], &[]).unwrap();
        let expected = concat!(
            r#"[{"uid":{"type":"Gateway::Org","id":"acme"},"attrs":{"plan":"team","entitlements":[]},"parents":[]},"#,
            r#"{"uid":{"type":"Gateway::Project","id":"web"},"attrs":{"memoryEnabled":true,"graphEnabled":false},"parents":[{"type":"Gateway::Org","id":"acme"}]},"#,
            r#"{"uid":{"type":"Gateway::Agent","id":"claude"},"attrs":{"name":"Claude"},"parents":[{"type":"Gateway::Org","id":"acme"}]},"#,
            r#"{"uid":{"type":"Gateway::Group","id":"sre"},"attrs":{},"parents":[{"type":"Gateway::Org","id":"acme"}]},"#,
            r#"{"uid":{"type":"Gateway::User","id":"https://idp.test|alice"},"attrs":{"org":{"__entity":{"type":"Gateway::Org","id":"acme"}},"label":"https://idp.test|alice","issuer":"https://idp.test","subject":"alice","name":"ALICE"},"parents":[{"type":"Gateway::Org","id":"acme"},{"type":"Gateway::Group","id":"sre"}],"tags":{"department":"finance"}},"#,
            r#"{"uid":{"type":"Gateway::Session","id":"s-1"},"attrs":{"org":{"__entity":{"type":"Gateway::Org","id":"acme"}},"project":{"__entity":{"type":"Gateway::Project","id":"web"}},"agent":{"__entity":{"type":"Gateway::Agent","id":"claude"}},"user":{"__entity":{"type":"Gateway::User","id":"https://idp.test|alice"}}},"parents":[{"type":"Gateway::Project","id":"web"}]}]"#,
        );
        assert_eq!(&*slice.json, expected);
        assert_eq!(facts.caller.uid(), alice.uid());

        // Another person of the org calling: both people, their shared
        // group once.
        let bob = person("bob", "acme", &["sre", "dev"]);
        let both = SessionCallFacts {
            caller: Caller::User(&bob),
            ..facts
        };
        let slice = session_slice_for_call(&bundle(), &both, &[], &[], &[]).unwrap();
        assert_eq!(
            slice
                .json
                .matches(r#"{"uid":{"type":"Gateway::Group","id":"sre"}"#)
                .count(),
            1
        );
        assert_eq!(
            slice
                .json
                .matches(r#"{"uid":{"type":"Gateway::User""#)
                .count(),
            2
        );

        // A person of another org never joins the slice.
        let carol = person("carol", "globex", &["sre"]);
        for other in [
            SessionCallFacts {
                caller: Caller::User(&carol),
                ..facts
            },
            SessionCallFacts {
                user: Some(&carol),
                ..facts
            },
        ] {
            let err = session_slice_for_call(&bundle(), &other, &[], &[], &[]).unwrap_err();
            assert_eq!(
                err.to_string(),
                "cannot build entities: person `https://idp.test|carol` is not of the session's org"
            );
        }
        let err = create_session_slice_for(
            &bundle(),
            &facts.org,
            &facts.project,
            &facts.agent,
            &Caller::User(&carol),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("not of the session's org"),
            "{err}"
        );
    }

    /// A token-authenticated request's contexts carry `token` and `client`,
    /// and Cedar accepts them for every action.
    #[test]
    fn a_tokens_context_carries_token_and_client() {
        let bundle = bundle();
        let token = super::super::identity::TokenFacts {
            issuer: "https://idp.test".into(),
            audience: vec!["https://gw.test/api/mcp".into()],
            scopes: vec!["mcp:tools".into()],
            expires_at: 1_795_000_000,
            client_id: Some("desktop".into()),
        }
        .checked()
        .unwrap();
        let expected = concat!(
            r#"{"session":{"__entity":{"type":"Gateway::Session","id":"s-1"}},"time":{"__extn":{"fn":"datetime","arg":"2026-11-22T08:00:00.000Z"}},"#,
            r#""token":{"issuer":"https://idp.test","audience":["https://gw.test/api/mcp"],"scopes":["mcp:tools"],"expiresAt":{"__extn":{"fn":"datetime","arg":"2026-11-18T11:06:40Z"}}},"#,
            r#""client":{"id":"desktop"}}"#,
        );
        let ctx =
            bundle.prepare_session_context_with_token("s-1", "2026-11-22T08:00:00.000Z", &token);
        assert_eq!(ctx.text(), expected);
        assert!(ctx.cedar().is_ok());
        // Built from values; a verdict of it is remembered under the token's
        // digest besides the session.
        assert_eq!(
            ctx.session_and_time(),
            Some(("s-1", "2026-11-22T08:00:00.000Z"))
        );
        assert_eq!(ctx.variant(), token.digest());
        assert_eq!(bundle.prepare_session_context("s-1", "t").variant(), "");
        let tool = bundle.prepare_tool_context_with_token(
            super::super::Action::CallTool,
            "t",
            "s-1",
            "2026-11-22T08:00:00.000Z",
            &json!({}),
            None,
            &token,
        );
        assert_eq!(tool.text(), expected);
        let create = create_session_context("claude", "2026-11-22T08:00:00.000Z", Some(&token));
        let create = bundle.prepare_context(super::super::Action::CreateSession, create);
        assert!(create.cedar().is_ok(), "{:?}", create.cedar());
        assert!(create.text().contains(r#""client":{"id":"desktop"}"#));
        // Without a client, no `client`; a key's `create_session` context
        // is what it always was.
        let mut no_client = token.facts().clone();
        no_client.client_id = None;
        let no_client = no_client.checked().unwrap();
        let ctx = bundle.prepare_session_context_with_token(
            "s-1",
            "2026-11-22T08:00:00.000Z",
            &no_client,
        );
        assert!(!ctx.text().contains("client") && ctx.cedar().is_ok());
        assert_eq!(
            create_session_context("claude", "t", None).to_string(),
            json!({ "agent": entity_ref(Kind::Agent, "claude"), "time": datetime_value("t") })
                .to_string()
        );
    }

    /// Whatever strings an identity provider sends within the limits, a
    /// person's slice builds and Cedar reads the values back unchanged:
    /// a tag named like one of Cedar's JSON escapes (`__entity`, `__extn`,
    /// `__expr`) is a tag like any other.
    #[test]
    fn hostile_claims_within_the_limits_always_build() {
        let odd = [
            "",
            "__entity",
            "__extn",
            "__expr",
            "quo\"te",
            "back\\slash",
            "nul\0",
            "\u{1}ctl",
            "line\nbreak",
            "|",
            "a|b",
            "\u{202E}rtl",
            "é ü ✓",
            "{\"__entity\":1}",
        ];
        let facts = super::super::identity::UserFacts {
            org: "acme".into(),
            issuer: "https://idp.test".into(),
            subject: "s|\"x\"".into(),
            name: odd.concat(),
            email: Some("\u{0}".into()),
            groups: odd.iter().map(|g| g.to_string()).collect(),
            tags: odd.iter().map(|k| (k.to_string(), k.to_string())).collect(),
        }
        .checked()
        .unwrap();
        let policies = vec![super::super::PolicyFile {
            path: "p.cedar".into(),
            text: r#"@id("tags") permit (principal is Gateway::User, action, resource)
                when { principal.hasTag("__entity") && principal.getTag("__entity") == "__entity"
                    && principal.hasTag("__extn") && principal.getTag("__extn") == "__extn" && principal in Gateway::Group::"{\"__entity\":1}" };"#
                .into(),
        }];
        let bundle = super::super::load::bundle_from_sources(
            "schemas/gateway.cedarschema",
            SCHEMA,
            policies,
        )
        .unwrap_or_else(|e| panic!("{}", e.render()));
        let slice = user_slice(&bundle, &facts).unwrap();
        let ctx = bundle.prepare_context(
            super::super::Action::CreateSession,
            create_session_context("claude", "2026-11-22T08:00:00Z", None),
        );
        let verdict = bundle.decide(
            &facts.uid(),
            super::super::Action::CreateSession,
            &Kind::Project.uid("web"),
            &ctx,
            &slice.entities,
        );
        assert!(verdict.allowed, "{verdict:?}");
    }
}
