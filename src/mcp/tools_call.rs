//! `tools/call`: one pipeline for every tool adapter, read top to bottom:
//!
//! parse → resolve (name or legacy alias) → `view_tool` (decided for an
//! unknown name too, so a hidden tool answers exactly like an unknown one,
//! after the same durable write) → validate the arguments against
//! the `inputSchema` → inject the tenant context → decide (`call_tool` or
//! `a2a_invoke`, typed with `context.args` when the schema types the tool;
//! `write_node` for graph writes) → execute through the adapter (graph
//! reads filter every node through `read_node`) → record → answer.
//!
//! **Architecture Invariant:** an answer is sent only after the call's
//! decision records and its writes are durably committed; a denied call
//! commits its record and never reaches the adapter (no byte leaves for a
//! remote tool); a failed commit answers -32603, never success.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::call::Call;
use super::error::{BadArgument, Denial, McpError};
use super::{protocol, relay, step_up};
use crate::audit::Decided;
use crate::policy::identity::CheckedToken;
use crate::policy::{Action, Kind, PreparedContext, UsageFacts};
use crate::store::WriteOp;
use crate::tools::spec::echo;
use crate::tools::{
    Executed, Failed, Failure, Invocation, Relay, ToolAdapter, ToolCall, ToolSpec, text_result,
};

/// `params` of a `tools/call`.
struct Request {
    /// The name as called (canonical or a legacy alias).
    name: String,
    arguments: Map<String, Value>,
    /// What goes on to a server the tool fronts (`relay`).
    relay: Relay,
}

/// The decisions that let a call run: the tool's own, and `write_node`
/// for graph writes.
struct Allowed {
    call: Decided,
    write: Option<Decided>,
}

/// Runs one `tools/call`.
pub async fn tools_call(call: &Call, params: Value) -> Result<Value, McpError> {
    // Every call ends in a durable commit: announced, so a group commit
    // under concurrent calls can wait for this one (the store writer's
    // commit delay). A remote tool is announced only once its peer
    // answered: a commit must not wait on calls still out on the network.
    let mut announced = Some(call.gw.store.writer().expect_commit());
    // Counted from the start, remote or not: a lone call commits on its
    // own thread, overlapping ones share the writer's group commit.
    let _in_flight = call.gw.store.writer().call_started();
    let mut request = parse(call, params)?;
    let tool = match resolve(call, &request.name) {
        Resolved::Tool(tool) => tool,
        Resolved::Answer(result) => return Ok(result),
        Resolved::Unknown => {
            // Always refused, after its record is durable.
            check_view(call, &echo(&request.name), &request.name, false).await?;
            return Err(McpError::UnknownTool(request.name));
        }
    };
    let spec = Arc::clone(tool.spec());
    if spec.class.is_some() {
        announced = None;
    }
    check_view(call, &spec.name, &request.name, true).await?;
    let arguments = std::mem::take(&mut request.arguments);
    let (args, notes) = validated_arguments(call, &spec, request.name.as_str(), arguments)?;
    let inv = call.invocation();
    if !still_offered(tool.as_ref(), &inv, &request.name).await? {
        return Err(McpError::UnknownTool(request.name));
    }
    let allowed = decide(call, tool.as_ref(), &inv, &args, notes, &request.name).await?;
    let started = Instant::now();
    let tool_call = ToolCall {
        args: &args,
        decision_id: allowed.call.id(),
        relay: &request.relay,
    };
    let executed = tool.execute(&inv, tool_call).await;
    let _announced = announced.unwrap_or_else(|| call.gw.store.writer().expect_commit());
    let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    let output = record(call, allowed, executed, duration_ms, &request.name, &spec).await?;
    Ok(tool.render(output, protocol::has_structured_content(&call.version)))
}

/// Reads `params.name` and `params.arguments` (absent or null: none), and
/// what goes on to a fronted server (`relay::take`).
fn parse(call: &Call, params: Value) -> Result<Request, McpError> {
    let Value::Object(mut params) = params else {
        return Err(McpError::InvalidParams {
            message: "tools/call needs `params` with a `name`",
            field: "params",
        });
    };
    let Some(Value::String(name)) = params.remove("name") else {
        return Err(McpError::InvalidParams {
            message: "tools/call is missing `params.name`",
            field: "name",
        });
    };
    let arguments = relay::optional(
        &mut params,
        "arguments",
        relay::object,
        "`params.arguments` must be an object",
    )?
    .unwrap_or_default();
    let relay = relay::take(call, &mut params)?;
    Ok(Request {
        name,
        arguments,
        relay,
    })
}

enum Resolved {
    Tool(Arc<dyn ToolAdapter>),
    /// Answered without a decision (a graph tool of a project whose graph
    /// is off answers `{"disabled": true}`, not an error).
    Answer(Value),
    /// No tool of this session has the name.
    Unknown,
}

/// The tool by canonical name or legacy alias.
fn resolve(call: &Call, name: &str) -> Resolved {
    if let Some(tool) = call.view.tool(name) {
        return Resolved::Tool(Arc::clone(tool));
    }
    match call.gw.catalog.disabled_answer(name, &call.view.tenant) {
        Some(output) => {
            let structured = protocol::has_structured_content(&call.version);
            Resolved::Answer(text_result(output, structured))
        }
        None => Resolved::Unknown,
    }
}

/// Decides `view_tool` on `Tool::"<tool_id>"`, for a tool of the session
/// (`exists`) and for an unknown name alike, so neither the answer nor its
/// timing tells a hidden tool from an unknown one: a refusal (a denial, or
/// any verdict on a name no tool has) is committed durably, then answered
/// -32601. An unknown name is no entity of the slice, so a policy reading
/// the tool fails closed; its record notes `unknownTool`. A name longer
/// than any tool's is decided on its prefix ([`echo`]), keeping the record
/// small.
async fn check_view(
    call: &Call,
    tool_id: &str,
    called_as: &str,
    exists: bool,
) -> Result<(), McpError> {
    let mut view = call.decide(
        &call.agent_uid(),
        Action::ViewTool,
        &Kind::Tool.uid(tool_id),
        &call.context,
    );
    if view.allowed() && exists {
        call.defer([WriteOp::Decision(Box::new(view.finish_default()))]);
        return Ok(());
    }
    let record = if exists {
        view.finish_default()
    } else {
        view.record.notes = json!({ "unknownTool": true }).to_string();
        let status = if view.allowed() {
            "not_found"
        } else {
            "denied"
        };
        view.finish(json!({ "status": status }))
    };
    call.commit(vec![WriteOp::Decision(Box::new(record))])
        .await?;
    Err(McpError::UnknownTool(called_as.to_string()))
}

/// Validates the arguments against the tool's `inputSchema`, then replaces
/// whatever `context` the caller sent with the session's identity (kept in
/// the arguments only for tools that take it). Returns the arguments and
/// the notes for the decision record (a replaced caller context, an alias
/// the tool was called by).
fn validated_arguments(
    call: &Call,
    spec: &ToolSpec,
    called_as: &str,
    mut arguments: Map<String, Value>,
) -> Result<(Value, Value), McpError> {
    let supplied_context = arguments.remove("context");
    let mut args = Value::Object(arguments);
    if let Err(errors) = spec.validate(&args) {
        return Err(McpError::InvalidArguments {
            tool: called_as.to_string(),
            errors: errors
                .into_iter()
                .map(|e| BadArgument {
                    field: e.field,
                    message: e.message,
                })
                .collect(),
        });
    }
    let session = &call.view.tenant.session;
    let authoritative = json!({
        "orgId": session.org_id,
        "projectId": session.project_id,
        "sessionId": session.id,
        "agentId": session.agent_id,
    });
    let mut notes = Map::new();
    if let Some(supplied) = supplied_context
        && supplied != authoritative
    {
        notes.insert("callerContextReplaced".into(), true.into());
        notes.insert("callerContext".into(), supplied);
    }
    if called_as != spec.name {
        notes.insert("calledAs".into(), called_as.into());
    }
    if spec.keeps_tenant_context
        && let Value::Object(map) = &mut args
    {
        map.insert("context".into(), authoritative);
    }
    let notes = if notes.is_empty() {
        Value::Null
    } else {
        Value::Object(notes)
    };
    Ok((args, notes))
}

/// Whether a remote tool is still registered (built-ins always are).
async fn still_offered(
    tool: &dyn ToolAdapter,
    inv: &Invocation<'_>,
    called_as: &str,
) -> Result<bool, McpError> {
    tool.still_offered(inv)
        .await
        .map_err(|failed| failure_error(failed.failure, called_as, &tool.spec().name, ""))
}

/// Decides the call under its tool's action (typed, with `context.args`,
/// when the schema types the tool), then `write_node` for graph writes. A
/// denial is committed, announced to the adapter, and answered -32003 (or,
/// when a scope would allow it, with a step-up: `step_up`).
async fn decide(
    call: &Call,
    tool: &dyn ToolAdapter,
    inv: &Invocation<'_>,
    args: &Value,
    notes: Value,
    called_as: &str,
) -> Result<Allowed, McpError> {
    let spec = tool.spec();
    let agent = call.agent_uid();
    let usage = counted_usage(call, spec);
    let own_context = tool_context(call, spec, args, usage.as_ref());
    let context = own_context.as_ref().unwrap_or(&call.context);
    let resource = Kind::Tool.uid(&spec.name);
    let mut decided = call.decide(&agent, spec.action, &resource, context);
    decided.record.notes = notes.to_string();
    if !decided.allowed() {
        tool.denied(
            inv,
            ToolCall {
                args,
                decision_id: decided.id(),
                relay: &Relay::default(),
            },
        );
        let denied = step_up::Denied {
            bundle: &call.bundle,
            slice: &call.view.slice,
            person: call.person.as_deref(),
            identities: &call.gw.identities,
            principal: &agent,
            action: spec.action,
            resource: &resource,
        };
        let step_up = step_up::find(&denied, |token| {
            token_tool_context(call, spec, args, usage.as_ref(), token)
        })
        .map(|s| {
            let metadata = call.resource_metadata.as_deref();
            step_up::refusal(metadata, &mut decided, Some(&spec.name), s)
        });
        let denial = denial(&spec.name, &decided);
        call.commit(vec![WriteOp::Decision(Box::new(decided.finish_default()))])
            .await?;
        return Err(match step_up {
            Some(refusal) => McpError::StepUp(Box::new(refusal)),
            None => McpError::CallDenied(Box::new(denial)),
        });
    }
    if !spec.writes_graph {
        return Ok(Allowed {
            call: decided,
            write: None,
        });
    }
    let project = Kind::Project.uid(&call.view.tenant.session.project_id);
    let write = call.decide(&agent, Action::WriteNode, &project, &call.context);
    if !write.allowed() {
        let denial = denial(called_as, &write);
        let outcome =
            json!({ "status": "denied", "deniedBy": "write_node", "decisionId": write.id() });
        call.commit(vec![
            WriteOp::Decision(Box::new(decided.finish(outcome))),
            WriteOp::Decision(Box::new(write.finish_default())),
        ])
        .await?;
        return Err(McpError::WriteDenied(Box::new(denial)));
    }
    Ok(Allowed {
        call: decided,
        write: Some(write),
    })
}

/// Counts the call for `context.usage` whenever the active set reads it
/// anywhere (so a set that never reads it counts nothing); only calls that
/// reach the decision count, whatever its verdict. Returns the counts when
/// the deciding action's policies read them.
fn counted_usage(call: &Call, spec: &ToolSpec) -> Option<UsageFacts> {
    let bundle = &call.bundle;
    if !bundle.usage_reads.any() {
        return None;
    }
    let session = &call.view.tenant.session;
    let counted = call
        .gw
        .rate_limits
        .usage
        .call(&session.org_id, call.actor_id(), &spec.name);
    bundle
        .tool_reads_usage(spec.action, &spec.name)
        .then_some(counted)
}

/// The context of the call's own decision when it is not the request's
/// session context: with `args` when the schema types the tool, with
/// `usage` (see [`counted_usage`]) when the deciding action's policies
/// read `context.usage`, with `token` for a person.
fn tool_context(
    call: &Call,
    spec: &ToolSpec,
    args: &Value,
    usage: Option<&UsageFacts>,
) -> Option<PreparedContext> {
    let bundle = &call.bundle;
    let session = &call.view.tenant.session;
    if let Some(person) = &call.person {
        return Some(token_tool_context(call, spec, args, usage, &person.token));
    }
    if let Some(usage) = usage {
        return Some(bundle.prepare_tool_context_with_usage(
            spec.action,
            &spec.name,
            &session.id,
            &call.time,
            args,
            usage,
        ));
    }
    bundle.typed_tool_context(spec.action, &spec.name, &session.id, &call.time, args)
}

/// A person's tool context, carrying `token`.
fn token_tool_context(
    call: &Call,
    spec: &ToolSpec,
    args: &Value,
    usage: Option<&UsageFacts>,
    token: &CheckedToken,
) -> PreparedContext {
    call.bundle.prepare_tool_context_with_token(
        spec.action,
        &spec.name,
        &call.view.tenant.session.id,
        &call.time,
        args,
        usage,
        token,
    )
}

fn denial(tool: &str, decided: &Decided) -> Denial {
    Denial {
        tool: tool.to_string(),
        decision_id: decided.id().to_string(),
        reasons: decided.verdict.reasons.clone(),
        advice: decided.verdict.advice.clone(),
    }
}

/// Commits the call's writes with its decision records (outcome filled
/// in), applies a graph write to the in-memory view once durable, and
/// turns a failure into its error.
async fn record(
    call: &Call,
    allowed: Allowed,
    executed: Result<Executed, Failed>,
    duration_ms: f64,
    called_as: &str,
    spec: &ToolSpec,
) -> Result<crate::tools::ToolOutput, McpError> {
    let (status, mut ops, fields) = match &executed {
        Ok(done) => ("completed", Vec::new(), done.outcome.clone()),
        Err(failed) => ("failed", Vec::new(), failed.outcome.clone()),
    };
    let mut outcome = Map::new();
    outcome.insert("status".into(), status.into());
    outcome.insert("durationMs".into(), duration_ms.into());
    outcome.extend(fields);
    let outcome = Value::Object(outcome);
    let decision_id = allowed.call.id().to_string();
    let (result, after_commit) = match executed {
        Ok(done) => {
            ops.extend(done.ops);
            (Ok(done.output), done.after_commit)
        }
        Err(failed) => {
            ops.extend(failed.ops);
            (Err(failed.failure), None)
        }
    };
    if let Some(write) = allowed.write {
        ops.push(WriteOp::Decision(Box::new(write.finish(outcome.clone()))));
    }
    ops.push(WriteOp::Decision(Box::new(allowed.call.finish(outcome))));
    call.commit(ops).await?;
    if let Some(pending) = after_commit {
        pending.apply();
    }
    result.map_err(|failure| failure_error(failure, called_as, &spec.name, &decision_id))
}

/// The answer to a call that did not produce a result.
fn failure_error(failure: Failure, called_as: &str, tool: &str, decision_id: &str) -> McpError {
    match failure {
        Failure::Tool(e) => {
            tracing::warn!(tool = %called_as, error = %e, "tool execution failed");
            McpError::ToolFailed {
                tool: called_as.to_string(),
                message: e.0,
            }
        }
        Failure::Remote {
            code,
            class,
            message,
            detail,
        } => {
            let data = json!({ "tool": tool, "class": class, "decisionId": decision_id });
            McpError::remote(code, message, data, detail)
        }
        Failure::Internal(_) => McpError::Internal,
        Failure::Gone => McpError::UnknownTool(called_as.to_string()),
    }
}
