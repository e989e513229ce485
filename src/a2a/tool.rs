//! A remote A2A agent's skill as a tool adapter. The `tools/call` pipeline
//! decides `a2a_invoke` on the canonical tool (child of its `PeerAgent`);
//! this adapter then emits the `pre-verb` event, sends the message through
//! the bridge, emits `post-verb` (and `verb-error`), and reports the
//! outcome for the decision record. A denied call emits only `pre-verb`
//! (marked denied).
//!
//! **Architecture Invariant:** the bridge is reached only from
//! [`ToolAdapter::execute`], which the pipeline calls after an allowing
//! decision: a denied call sends no byte to the peer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::A2a;
use super::bridge::{self, BridgeError, Outbound};
use super::hooks::{EventContext, EventError, Phase, VerbEvent};
use super::registry::{A2aTool, OrgPeers};
use crate::tools::{
    Executed, Failed, Failure, Invocation, ToolAdapter, ToolCall, ToolFuture, ToolOutput, ToolSpec,
};

/// One A2A tool of a session's view, with the runtime that calls it.
#[derive(Debug)]
pub struct A2aAdapter {
    tool: Arc<A2aTool>,
    a2a: Arc<A2a>,
}

/// The org's A2A tools as adapters, in registration order.
pub fn adapters(peers: &OrgPeers, a2a: &Arc<A2a>) -> Vec<Arc<dyn ToolAdapter>> {
    peers
        .tools
        .iter()
        .map(|tool| {
            Arc::new(A2aAdapter {
                tool: Arc::clone(tool),
                a2a: Arc::clone(a2a),
            }) as Arc<dyn ToolAdapter>
        })
        .collect()
}

impl A2aAdapter {
    /// The tool as registered now (a refresh may have changed its peer's
    /// interface), with the org's call timeout; `None` once deregistered.
    async fn live(&self, org_id: &str) -> Result<Option<(Arc<A2aTool>, Duration)>, Failed> {
        let peers = self.a2a.org(org_id).await.map_err(|e| {
            tracing::error!(error = %e, "internal error");
            Failed::internal(e.to_string())
        })?;
        Ok(peers
            .by_name
            .get(&self.tool.spec.name)
            .map(|t| (Arc::clone(t), peers.timeout)))
    }

    /// The hook event of a call of `tool` in `phase`.
    fn event(
        tool: &A2aTool,
        inv: &Invocation<'_>,
        call: ToolCall<'_>,
        phase: Phase,
        call_id: &str,
        denied: bool,
    ) -> VerbEvent {
        let session = &inv.tenant.session;
        VerbEvent {
            phase,
            verb: tool.spec.name.clone(),
            legacy_alias: tool.alias.clone().unwrap_or_default(),
            org_id: session.org_id.clone(),
            agent_card_id: tool.target.card_id.clone(),
            agent_url: tool.target.interface_url.clone(),
            skill_id: tool.skill_id.clone(),
            session_id: session.id.clone(),
            args: call.args.clone(),
            emitted_at: crate::ids::now_rfc3339(),
            call_id: call_id.to_string(),
            context: EventContext {
                denied,
                decision_id: call.decision_id.to_string(),
            },
            duration_ms: None,
            outcome: None,
            error: None,
            bytes: None,
        }
    }

    /// Sends the call and reports it on the bus; the record's outcome
    /// names the peer and the protocol generation either way.
    async fn run(&self, inv: &Invocation<'_>, call: ToolCall<'_>) -> Result<Executed, Failed> {
        let Some((tool, timeout)) = self.live(&inv.tenant.session.org_id).await? else {
            return Err(gone());
        };
        let call_id = uuid::Uuid::now_v7().to_string();
        let bus = &self.a2a.bus;
        bus.emit(Self::event(
            &tool,
            inv,
            call,
            Phase::PreVerb,
            &call_id,
            false,
        ));
        let started = Instant::now();
        let result = send(&self.a2a, &tool, call.args, &inv.tenant.session.id, timeout).await;
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        let mut post = Self::event(&tool, inv, call, Phase::PostVerb, &call_id, false);
        post.duration_ms = Some(duration_ms);
        let mut outcome = Map::new();
        outcome.insert("peer".into(), tool.target.slug.clone().into());
        outcome.insert(
            "protocolVersion".into(),
            tool.target.version.as_str().into(),
        );
        match result {
            Ok(out) => {
                post.outcome = Some("completed");
                post.bytes = Some((out.request_bytes, out.response_bytes));
                bus.emit(post);
                outcome.insert("responseBytes".into(), out.response_bytes.into());
                Ok(Executed {
                    output: output(out.value),
                    ops: Vec::new(),
                    after_commit: None,
                    outcome,
                })
            }
            Err(e) => {
                post.outcome = Some("failed");
                bus.emit(post);
                let mut err_event =
                    Self::event(&tool, inv, call, Phase::VerbError, &call_id, false);
                err_event.duration_ms = Some(duration_ms);
                err_event.error = Some(EventError {
                    code: e.code,
                    message: e.message.clone(),
                });
                bus.emit(err_event);
                outcome.insert(
                    "error".into(),
                    json!({ "code": e.code, "class": e.class(), "message": e.message }),
                );
                tracing::warn!(tool = %self.tool.spec.name, code = e.code, error = %e.message, "A2A call failed");
                Err(Failed {
                    failure: Failure::Remote {
                        code: e.code,
                        class: e.class(),
                        message: e.message,
                        detail: e.detail,
                    },
                    ops: Vec::new(),
                    outcome,
                })
            }
        }
    }
}

impl ToolAdapter for A2aAdapter {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.tool.spec
    }

    fn still_offered<'a>(
        &'a self,
        inv: &'a Invocation<'a>,
    ) -> ToolFuture<'a, Result<bool, Failed>> {
        Box::pin(async move { Ok(self.live(&inv.tenant.session.org_id).await?.is_some()) })
    }

    /// Announces the denied call (with the view's registration of the
    /// peer: nothing is sent, so its live interface does not matter).
    fn denied(&self, inv: &Invocation<'_>, call: ToolCall<'_>) {
        let call_id = uuid::Uuid::now_v7().to_string();
        self.a2a.bus.emit(Self::event(
            &self.tool,
            inv,
            call,
            Phase::PreVerb,
            &call_id,
            true,
        ));
    }

    fn execute<'a>(
        &'a self,
        inv: &'a Invocation<'a>,
        call: ToolCall<'a>,
    ) -> ToolFuture<'a, Result<Executed, Failed>> {
        Box::pin(self.run(inv, call))
    }
}

/// A tool deregistered between the decision and the send.
fn gone() -> Failed {
    Failed {
        failure: Failure::Gone,
        ops: Vec::new(),
        outcome: Map::new(),
    }
}

/// Resolves the peer's credential, then sends through the bridge within
/// the peer's concurrency slots and the org's timeout.
async fn send(
    a2a: &A2a,
    tool: &A2aTool,
    args: &Value,
    session_id: &str,
    timeout: Duration,
) -> Result<bridge::BridgeOutput, BridgeError> {
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
            session_id,
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
