//! `tools/call` of an A2A tool: Cedar `a2a_invoke` on the canonical tool
//! (child of its `PeerAgent`), the `pre-verb` event, then the outbound call
//! only if allowed, then `post-verb` (and `verb-error`), and the answer
//! once the decision record, with the call's outcome, is durable.
//!
//! **Architecture Invariant:** a denied call commits its record and
//! answers -32003 without the bridge being reached: no byte leaves.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::{Call, internal, tool_result};
use crate::a2a::bridge::{self, BridgeError, Outbound};
use crate::a2a::hooks::{EventContext, EventError, Phase, VerbEvent};
use crate::a2a::registry::A2aTool;
use crate::mcp::jsonrpc::{self, RpcError};
use crate::policy::{Action, Kind};
use crate::store::WriteOp;
use crate::tools::{ToolOutput, ToolSpec};

/// Runs an A2A tool; `args` are the validated arguments (the gateway's
/// `context` member is not forwarded to the peer), `notes` what the
/// endpoint recorded about the caller's context.
pub(super) async fn call_tool(
    call: &Call,
    spec: &Arc<ToolSpec>,
    called_as: &str,
    mut args: Value,
    notes: Value,
) -> Result<Value, RpcError> {
    let session = &call.view.tenant.session;
    let peers = call
        .gw
        .a2a
        .org(&session.org_id)
        .await
        .map_err(|e| internal(&e))?;
    let Some(tool) = peers.by_name.get(&spec.name).cloned() else {
        // Deregistered since this session's view was built.
        return Err(RpcError::with_data(
            jsonrpc::METHOD_NOT_FOUND,
            format!("unknown tool `{called_as}`"),
            json!({ "tool": called_as }),
        ));
    };
    if let Value::Object(map) = &mut args {
        map.remove("context");
    }

    // A tool the schema declares a typed action for is decided under it,
    // with its arguments as `context.args`; any other with the request's
    // session context.
    let typed_context = call.bundle.typed_tool_context(
        Action::A2aInvoke,
        &spec.name,
        &call.view.tenant.session.id,
        &call.time,
        &args,
    );
    let mut decided = call.decide(
        &call.agent_uid(),
        Action::A2aInvoke,
        &Kind::Tool.uid(&spec.name),
        typed_context.as_ref().unwrap_or(&call.context),
    );
    let mut notes = notes;
    if called_as != spec.name {
        match &mut notes {
            Value::Object(m) => {
                m.insert("calledAs".into(), called_as.into());
            }
            _ => notes = json!({ "calledAs": called_as }),
        }
    }
    decided.record.notes = notes.to_string();
    let allowed = decided.allowed();
    let decision_id = decided.id().to_string();
    let call_id = uuid::Uuid::now_v7().to_string();
    let event = |phase: Phase| VerbEvent {
        phase,
        verb: spec.name.clone(),
        legacy_alias: tool.alias.clone().unwrap_or_default(),
        org_id: session.org_id.clone(),
        agent_card_id: tool.target.card_id.clone(),
        agent_url: tool.target.interface_url.clone(),
        skill_id: tool.skill_id.clone(),
        session_id: session.id.clone(),
        args: args.clone(),
        emitted_at: crate::ids::now_rfc3339(),
        call_id: call_id.clone(),
        context: EventContext {
            denied: !allowed,
            decision_id: decision_id.clone(),
        },
        duration_ms: None,
        outcome: None,
        error: None,
        bytes: None,
    };
    let bus = &call.gw.a2a.bus;
    bus.emit(event(Phase::PreVerb));

    if !allowed {
        let data = json!({
            "decisionId": decision_id,
            "tool": spec.name,
            "reasons": decided.verdict.reasons,
            "advice": decided.verdict.advice,
        });
        call.commit(vec![WriteOp::Decision(Box::new(decided.finish_default()))])
            .await?;
        return Err(RpcError::with_data(
            jsonrpc::AUTH_DENIED,
            format!("call to `{}` is not authorized for this session", spec.name),
            data,
        ));
    }

    let started = Instant::now();
    let result = send(call, &tool, &args, peers.timeout).await;
    let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    match result {
        Ok(out) => {
            let mut post = event(Phase::PostVerb);
            post.duration_ms = Some(duration_ms);
            post.outcome = Some("completed");
            post.bytes = Some((out.request_bytes, out.response_bytes));
            bus.emit(post);
            let outcome = json!({
                "status": "completed",
                "durationMs": duration_ms,
                "peer": tool.target.slug,
                "protocolVersion": tool.target.version.as_str(),
                "responseBytes": out.response_bytes,
            });
            call.commit(vec![WriteOp::Decision(Box::new(decided.finish(outcome)))])
                .await?;
            Ok(tool_result(&call.version, output(out.value)))
        }
        Err(e) => {
            let mut post = event(Phase::PostVerb);
            post.duration_ms = Some(duration_ms);
            post.outcome = Some("failed");
            bus.emit(post);
            let mut err_event = event(Phase::VerbError);
            err_event.duration_ms = Some(duration_ms);
            err_event.error = Some(EventError {
                code: e.code,
                message: e.message.clone(),
            });
            bus.emit(err_event);
            let outcome = json!({
                "status": "failed",
                "durationMs": duration_ms,
                "peer": tool.target.slug,
                "protocolVersion": tool.target.version.as_str(),
                "error": { "code": e.code, "class": e.class(), "message": e.message },
            });
            call.commit(vec![WriteOp::Decision(Box::new(decided.finish(outcome)))])
                .await?;
            tracing::warn!(tool = %spec.name, code = e.code, error = %e.message, "A2A call failed");
            Err(RpcError::with_data(
                e.code,
                e.message.clone(),
                json!({
                    "tool": spec.name,
                    "class": e.class(),
                    "decisionId": decision_id,
                    "detail": e.detail,
                }),
            ))
        }
    }
}

async fn send(
    call: &Call,
    tool: &A2aTool,
    args: &Value,
    timeout: std::time::Duration,
) -> Result<bridge::BridgeOutput, BridgeError> {
    let a2a = &call.gw.a2a;
    let bearer = match &tool.target.auth {
        Some(auth) => Some(auth.resolve().map_err(|e| BridgeError {
            code: bridge::TRANSPORT,
            message: format!(
                "cannot authenticate to remote agent `{}`: {e}",
                tool.target.slug
            ),
            detail: Value::Null,
        })?),
        None => None,
    };
    bridge::send(
        &a2a.client,
        &a2a.slots(&tool.target),
        Outbound {
            target: &tool.target,
            skill_id: &tool.skill_id,
            args,
            session_id: &call.view.tenant.session.id,
            bearer: bearer.as_deref(),
            timeout,
            max_response_bytes: a2a.config.max_response_bytes,
        },
    )
    .await
}

/// A translated value as a tool output: text for `content`, an object for
/// `structuredContent`.
fn output(value: Value) -> ToolOutput {
    match value {
        Value::String(s) => ToolOutput {
            structured: json!({ "text": s }),
            text: s,
        },
        Value::Object(_) => ToolOutput {
            text: value.to_string(),
            structured: value,
        },
        other => ToolOutput {
            text: other.to_string(),
            structured: json!({ "result": other }),
        },
    }
}

/// `tools/list` for the session's A2A tools, deciding `view_tool` once per
/// equivalence class instead of once per tool.
///
/// Two A2A tools of the same peer are indistinguishable to any policy that
/// does not name one of them: same type, same parents (the peer), same
/// attributes (`kind`, `readOnly`), same context. Cedar can only tell them
/// apart by their uid, which a policy can only compare with a literal. So a
/// tool whose name appears as a string literal (or template link) in the
/// active policy set is decided on its own, and every other tool of a peer
/// shares one decision made on a representative, recorded with the class it
/// covers (`notes.equivalenceClass`); replaying that record with any tool
/// of the class gives the same verdict.
pub(super) fn list_tools<'a>(call: &'a Call, tools: &mut Vec<&'a str>, records: &mut Vec<WriteOp>) {
    let agent = call.agent_uid();
    let named = call.gw.a2a.policy_literals(&call.bundle);
    let a2a_tools = || {
        call.view
            .tools
            .iter()
            .filter(|t| t.adapter == crate::tools::Adapter::A2a)
    };
    let mut class_size: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for t in a2a_tools().filter(|t| !named.contains(&t.name)) {
        *class_size
            .entry(t.peer.as_deref().unwrap_or_default())
            .or_default() += 1;
    }
    let mut class_verdict: std::collections::HashMap<&str, bool> = std::collections::HashMap::new();
    for spec in a2a_tools() {
        let peer = spec.peer.as_deref().unwrap_or_default();
        let shared = !named.contains(&spec.name);
        let allowed = match class_verdict.get(peer) {
            Some(v) if shared => *v,
            _ => {
                let mut decided = call.decide(
                    &agent,
                    Action::ViewTool,
                    &Kind::Tool.uid(&spec.name),
                    &call.context,
                );
                let allowed = decided.allowed();
                if shared {
                    class_verdict.insert(peer, allowed);
                    decided.record.notes = json!({
                        "equivalenceClass": {
                            "peerAgent": peer,
                            "tools": class_size.get(peer).copied().unwrap_or(1),
                        }
                    })
                    .to_string();
                }
                records.push(WriteOp::Decision(Box::new(decided.finish_default())));
                allowed
            }
        };
        if allowed {
            tools.push(spec.listing_json());
        }
    }
}
