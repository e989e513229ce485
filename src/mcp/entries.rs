//! Resources and prompts of the org's upstream MCP servers:
//! `resources/list`, `resources/templates/list`, `resources/read`,
//! `prompts/list` and `prompts/get`, in both eras.
//!
//! - **One action per kind, for listing and for reading.** An entry
//!   appears in its list only if Cedar lets the agent `read_resource` (a
//!   resource or template) or `get_prompt` (a prompt) on it, the decision
//!   a read or get would make: no separate view action, so a listed entry
//!   is one the agent may read, and a policy hides one by forbidding it.
//! - **Hidden answers like unknown.** A read or get of an entry Cedar
//!   denies, and of a name no server of the org can have (no prefix
//!   matches), is decided (the latter on an entity absent from the slice,
//!   so it fails closed), its record committed durably, then answered
//!   with the same error: `resource … not found` (-32002; -32602 at
//!   2026-07-28) or `unknown prompt …` (-32602). A name Cedar allows
//!   goes upstream, whose own answer (found or not) passes through: a
//!   deny never reveals whether the entry exists.
//! - **Before a byte goes upstream.** A read or get is decided first; a
//!   denied one sends nothing. The allowed decision's record carries the
//!   upstream's id and the outcome, and is committed before the answer.
//! - **Records.** Each listed entry is one deferred `read_resource` /
//!   `get_prompt` record (notes `{"list": "<method>"}`), riding the
//!   request's commit like `tools/list` visibility; the entity slice of
//!   these decisions is the session's plus one `Resource`/`Prompt` per
//!   entry, recorded with them for replay.
//! - **Cost.** A listing spends, on top of its element's token, one token
//!   per server it asks (before the requests go out) and one per entry it
//!   decides (before the decisions); over a bucket it answers -32029
//!   (429 at 2026-07-28) and decides nothing.
//! - **Results** pass through as the upstream gave them (a read's
//!   `contents[].uri` renamed to the gateway URI), bounded like tool
//!   results (4 MiB per answer); an upstream JSON-RPC error keeps its code
//!   and message, gateway-side failures answer -32201 / -32202 / -32203.
//!   A read without a `contents` array, or a get without `messages`, is an
//!   invalid response (-32203).
//! - **Names longer than [`MAX_NAME_CHARS`]** are refused (-32602) before
//!   any decision, so a huge name cannot bloat the trail.

use std::time::Instant;

use serde_json::{Map, Value, json};

use super::call::{Call, charge};
use super::cost;
use super::error::McpError;
use super::relay;
use crate::policy::entities::{EntitySlice, UpstreamEntryFacts, with_upstream_entries};
use crate::policy::{Action, Kind};
use crate::store::WriteOp;
use crate::tools::Relay;
use crate::upstream::client::{ClientError, Outgoing};
use crate::upstream::entries::{self, Entry, EntryKind};
use crate::upstream::input;
use crate::upstream::registry::{OrgUpstreams, ServerTarget};

/// Longest resource URI or prompt name accepted by a read or get.
pub const MAX_NAME_CHARS: usize = 4096;

/// The Cedar action and entity type deciding entries of `kind`.
fn vocabulary(prompt: bool) -> (Action, Kind) {
    if prompt {
        (Action::GetPrompt, Kind::Prompt)
    } else {
        (Action::ReadResource, Kind::Resource)
    }
}

/// A list result (`{"<key>": [...]}`) holding the entries of `kind` Cedar
/// lets the agent see; their records are deferred to the request's commit.
pub async fn list(call: &Call, kind: EntryKind) -> Result<Value, McpError> {
    let set = org_upstreams(call).await?;
    charge(call, cost::tokens(set.healthy.len())).await?;
    let listed = call.gw.upstreams.list_entries(&set, kind).await;
    charge(call, cost::tokens(listed.len())).await?;
    let facts: Vec<UpstreamEntryFacts> = listed.iter().map(|e| facts(kind, e)).collect();
    let slice = slice(call, &facts)?;
    let (action, entity) = vocabulary(kind.is_prompt());
    let agent = call.agent_uid();
    let notes = json!({ "list": kind.method() }).to_string();
    let mut shown = Vec::new();
    let mut records = Vec::new();
    for e in listed {
        let mut decided = call.decide_in(&slice, &agent, action, &entity.uid(&e.id), &call.context);
        decided.record.notes.clone_from(&notes);
        if decided.allowed() {
            shown.push(e.entry);
        }
        records.push(WriteOp::Decision(Box::new(decided.finish_default())));
    }
    call.defer(records);
    Ok(json!({ kind.key(): shown }))
}

/// `resources/read`: decided, then read upstream.
pub async fn read_resource(call: &Call, params: Value) -> Result<Value, McpError> {
    let (uri, params) = named(params, "uri", "resources/read needs `params.uri`")?;
    let result = get(call, false, &uri, params, "resources/read", "contents").await?;
    Ok(result)
}

/// `prompts/get`: decided, then fetched upstream.
pub async fn get_prompt(call: &Call, params: Value) -> Result<Value, McpError> {
    let (name, params) = named(params, "name", "prompts/get needs `params.name`")?;
    get(call, true, &name, params, "prompts/get", "messages").await
}

/// `params` as an object with the string `field` (bounded), without the
/// caller's `_meta` (which is the caller's to its gateway, not upstream's).
fn named(
    params: Value,
    field: &'static str,
    message: &'static str,
) -> Result<(String, Map<String, Value>), McpError> {
    let invalid = McpError::InvalidParams { message, field };
    let Value::Object(mut params) = params else {
        return Err(invalid);
    };
    let Some(Value::String(name)) = params.get(field).cloned() else {
        return Err(invalid);
    };
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(McpError::InvalidParams {
            message: "the name is longer than 4096 characters",
            field,
        });
    }
    params.remove("_meta");
    Ok((name, params))
}

/// One read or get: resolve the server → decide → (refused: commit, answer
/// as unknown) → send upstream → commit the record with its outcome →
/// answer.
async fn get(
    call: &Call,
    prompt: bool,
    id: &str,
    mut params: Map<String, Value>,
    method: &'static str,
    required: &'static str,
) -> Result<Value, McpError> {
    let relay = relay::take(call, &mut params)?;
    let set = org_upstreams(call).await?;
    let resolved = entries::resolve(&set, prompt, id);
    let (action, entity) = vocabulary(prompt);
    let facts: Vec<UpstreamEntryFacts> = resolved
        .iter()
        .map(|(target, upstream)| UpstreamEntryFacts {
            kind: entity,
            id: id.to_string(),
            upstream: upstream.clone(),
            server: target.slug.clone(),
        })
        .collect();
    let slice = slice(call, &facts)?;
    let mut decided = call.decide_in(
        &slice,
        &call.agent_uid(),
        action,
        &entity.uid(id),
        &call.context,
    );
    let Some((target, upstream)) = resolved.filter(|_| decided.allowed()) else {
        let allowed = decided.allowed();
        if facts.is_empty() {
            decided.record.notes = json!({ "unknownEntry": true }).to_string();
        }
        let status = if allowed { "not_found" } else { "denied" };
        let record = decided.finish(json!({ "status": status }));
        call.commit(vec![WriteOp::Decision(Box::new(record))])
            .await?;
        return Err(unknown(prompt, id));
    };
    let field = if prompt { "name" } else { "uri" };
    params.insert(field.into(), upstream.into());
    let started = Instant::now();
    let out = Outgoing {
        schema: None,
        relay: Some(&relay),
    };
    let answer = call
        .gw
        .upstreams
        .forward(&target, method, Value::Object(params), out)
        .await
        .and_then(|r| input::checked(r, &relay, method, required));
    let outcome = outcome(&target, &answer, &relay, started);
    let decision_id = decided.id().to_string();
    call.commit(vec![WriteOp::Decision(Box::new(decided.finish(outcome)))])
        .await?;
    match answer {
        Ok(mut result) => {
            if !prompt {
                entries::renamed_contents(&target.prefix, &mut result);
            }
            Ok(result)
        }
        Err(e) => Err(remote(e, field, id, &decision_id)),
    }
}

/// The org's upstream servers.
async fn org_upstreams(call: &Call) -> Result<std::sync::Arc<OrgUpstreams>, McpError> {
    call.gw
        .upstreams
        .org(&call.view.tenant.session.org_id)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "internal error");
            McpError::Internal
        })
}

fn facts(kind: EntryKind, e: &Entry) -> UpstreamEntryFacts {
    UpstreamEntryFacts {
        kind: vocabulary(kind.is_prompt()).1,
        id: e.id.clone(),
        upstream: e.upstream.clone(),
        server: e.target.slug.clone(),
    }
}

/// The session slice plus `facts` (a slice Cedar refuses is an internal
/// error: nothing is decided or sent).
fn slice(call: &Call, facts: &[UpstreamEntryFacts]) -> Result<EntitySlice, McpError> {
    with_upstream_entries(&call.bundle, &call.view.slice, facts).map_err(|e| {
        tracing::error!(error = %e, "cannot build the entities of upstream entries");
        McpError::Internal
    })
}

/// The outcome of an allowed read or get, for its record.
fn outcome(
    target: &ServerTarget,
    answer: &Result<Value, ClientError>,
    relay: &Relay,
    started: Instant,
) -> Value {
    let mut outcome = Map::new();
    let status = if answer.is_ok() {
        "completed"
    } else {
        "failed"
    };
    outcome.insert("status".into(), status.into());
    outcome.insert("upstream".into(), target.id.clone().into());
    outcome.insert("server".into(), target.slug.clone().into());
    let upstream_ms = started.elapsed().as_secs_f64() * 1000.0;
    outcome.insert("upstreamMs".into(), upstream_ms.into());
    if let Err(e) = answer {
        outcome.insert(
            "error".into(),
            json!({ "code": e.code(), "class": e.class(), "message": e.to_string() }),
        );
    }
    input::note(&mut outcome, relay, answer.as_ref().ok());
    Value::Object(outcome)
}

fn unknown(prompt: bool, id: &str) -> McpError {
    if prompt {
        McpError::UnknownPrompt(id.to_string())
    } else {
        McpError::UnknownResource(id.to_string())
    }
}

/// An upstream failure: its code and message, the gateway's name and the
/// decision in `error.data`.
fn remote(e: ClientError, field: &str, id: &str, decision_id: &str) -> McpError {
    let detail = match &e {
        ClientError::Remote { data, .. } => data.clone(),
        _ => Value::Null,
    };
    let data = json!({
        field: crate::tools::spec::echo(id),
        "class": e.class(),
        "decisionId": decision_id,
    });
    McpError::remote(e.code(), e.to_string(), data, detail)
}
