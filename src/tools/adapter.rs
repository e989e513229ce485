//! The seam every tool plugs into: a [`ToolAdapter`] has a spec (name,
//! schema, Cedar entity and action), runs an allowed call, and turns its
//! output into MCP content. The `tools/call` pipeline (`mcp/tools_call.rs`)
//! does everything else once, for every adapter: resolving the name,
//! `view_tool`, argument validation, the tenant context, the Cedar
//! decisions and the record.
//!
//! **Architecture Invariant:** an adapter never decides and never records
//! its own call; it runs only after the pipeline's decision allowed it, and
//! hands back the writes (observations, graph changes, per-node decision
//! records) to commit with the call's record.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::spec::ToolSpec;
use crate::audit::{NodeGuard, Scope};
use crate::graph::Graphs;
use crate::policy::entities::EntitySlice;
use crate::policy::{Kind, PolicyBundle, PreparedContext};
use crate::store::tenants::SessionTenant;
use crate::store::{Store, WriteOp};

/// What an adapter's futures look like (boxed: adapters are trait objects).
pub type ToolFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a tool produced.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    /// Text for the `content` part.
    pub text: String,
    /// The JSON result (`structuredContent` for clients that take it).
    pub structured: Value,
}

/// A tool that failed while executing (answered as -32603).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

/// The session a call runs in: who asks, and what the adapters need to
/// run and to filter what they return.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    /// Session, org, project, agent (from the session row, never the caller).
    pub tenant: &'a SessionTenant,
    /// Durable state.
    pub store: &'a Store,
    /// Knowledge graphs (in-memory views, write locks, embedder).
    pub graphs: &'a Arc<Graphs>,
    /// The policy set the request decides under.
    pub bundle: &'a PolicyBundle,
    /// The session's entity slice.
    pub slice: &'a EntitySlice,
    /// The request's session context.
    pub context: &'a PreparedContext,
    /// The request's time (all its decisions share it).
    pub time: &'a str,
}

impl<'a> Invocation<'a> {
    /// A `read_node` guard for this session's project: every node a graph
    /// read returns passes it, and its decisions become one record.
    pub fn node_guard(&self) -> NodeGuard<'a> {
        let s = &self.tenant.session;
        NodeGuard::new(
            self.bundle,
            self.slice,
            Kind::Agent.uid(&self.tenant.agent.id),
            &s.project_id,
            self.context,
            Scope {
                org_id: Some(&s.org_id),
                session_id: Some(&s.id),
            },
            self.time,
        )
    }
}

/// One allowed (or denied) call, as the pipeline hands it to the adapter.
#[derive(Debug, Clone, Copy)]
pub struct ToolCall<'a> {
    /// The validated arguments (with the authoritative `context` member
    /// when the spec keeps it).
    pub args: &'a Value,
    /// The id of the decision that let the call run (or denied it).
    pub decision_id: &'a str,
    /// What of the caller's request an adapter fronting another MCP
    /// server carries to it (built-in tools ignore it).
    pub relay: &'a Relay,
}

/// What a 2026-07-28 caller hands an adapter that fronts another MCP
/// server: the client capabilities it declared on this request and, when
/// it retries a call that asked it for input, its answers and the
/// server's opaque state. A caller of an older revision declares its
/// capabilities only at `initialize` and cannot take an input request, so
/// it hands nothing ([`Relay::default`]).
#[derive(Debug, Clone, Default)]
pub struct Relay {
    /// `_meta["io.modelcontextprotocol/clientCapabilities"]` of the
    /// request (`None`: a caller of an older revision).
    pub capabilities: Option<Map<String, Value>>,
    /// `params.inputResponses` of a retry.
    pub input_responses: Option<Map<String, Value>>,
    /// `params.requestState` of a retry.
    pub request_state: Option<String>,
}

impl Relay {
    /// Whether the caller can take an input request
    /// (`resultType: "input_required"`) and retry with its answers.
    pub fn takes_input(&self) -> bool {
        self.capabilities.is_some()
    }
}

/// A call that ran: its answer, the writes to commit with its record, and
/// what the record's outcome says besides status and duration.
#[derive(Debug)]
pub struct Executed {
    /// The answer.
    pub output: ToolOutput,
    /// Writes and records to commit in the call's transaction.
    pub ops: Vec<WriteOp>,
    /// Work to do once the writes are durable (a graph write applied to
    /// the project's in-memory view).
    pub after_commit: Option<Box<dyn AfterCommit>>,
    /// Outcome fields for the decision record (besides `status`, `durationMs`).
    pub outcome: Map<String, Value>,
}

impl Executed {
    /// A built-in tool's result, summarized in the record as `result`.
    pub fn summarized(output: ToolOutput, ops: Vec<WriteOp>) -> Executed {
        let mut outcome = Map::new();
        outcome.insert("result".into(), outcome_summary(&output));
        Executed {
            output,
            ops,
            after_commit: None,
            outcome,
        }
    }
}

/// What an adapter does once its call's writes are durable.
pub trait AfterCommit: Send + std::fmt::Debug {
    /// Runs after the commit succeeded (never after a failed one).
    fn apply(self: Box<Self>);
}

/// Why a call that was allowed did not produce a result.
#[derive(Debug)]
pub enum Failure {
    /// The tool itself failed (-32603, `tool … failed`).
    Tool(ToolError),
    /// A remote agent or server failed; `code` is one of the bridge's
    /// (-32201 timeout, -32202 transport, -32203 invalid response,
    /// -32204 task failed).
    Remote {
        /// JSON-RPC code.
        code: i64,
        /// Failure class (`timeout`, `transport`, …).
        class: &'static str,
        /// Message for the caller.
        message: String,
        /// Structured detail.
        detail: Value,
    },
    /// The gateway could not serve the call (storage): -32603, no detail.
    Internal(String),
    /// The tool is no longer offered (answered as unknown, -32601).
    Gone,
}

/// A failed call: why, the records made meanwhile (committed anyway), and
/// the record's outcome fields.
#[derive(Debug)]
pub struct Failed {
    /// Why.
    pub failure: Failure,
    /// Writes to commit (decision records of nodes already filtered).
    pub ops: Vec<WriteOp>,
    /// Outcome fields for the decision record (besides `status`, `durationMs`).
    pub outcome: Map<String, Value>,
}

impl Failed {
    /// A built-in tool's failure, recorded as `error`.
    pub fn tool(error: ToolError, ops: Vec<WriteOp>) -> Failed {
        let mut outcome = Map::new();
        outcome.insert("error".into(), Value::String(error.0.clone()));
        Failed {
            failure: Failure::Tool(error),
            ops,
            outcome,
        }
    }

    /// A failure of the gateway itself, before the tool ran.
    pub fn internal(message: impl Into<String>) -> Failed {
        Failed {
            failure: Failure::Internal(message.into()),
            ops: Vec::new(),
            outcome: Map::new(),
        }
    }
}

/// A tool the gateway can call. Built-in tools (memory, graph) and remote
/// ones (A2A skills, upstream MCP servers' tools) implement it, so the
/// `tools/call` pipeline has one path for all of them.
pub trait ToolAdapter: Send + Sync + std::fmt::Debug {
    /// Name, schema, Cedar entity and action.
    fn spec(&self) -> &Arc<ToolSpec>;

    /// Whether the tool is still offered now (a remote peer may have been
    /// deregistered since the session's view was built). Asked after
    /// `view_tool` and before the call is decided; `Ok(false)` answers as
    /// an unknown tool, with no decision made.
    fn still_offered<'a>(
        &'a self,
        _inv: &'a Invocation<'a>,
    ) -> ToolFuture<'a, Result<bool, Failed>> {
        Box::pin(std::future::ready(Ok(true)))
    }

    /// Told of a call its decision denied, before the denial is answered
    /// (an adapter that announces calls announces this one as denied).
    fn denied(&self, _inv: &Invocation<'_>, _call: ToolCall<'_>) {}

    /// Runs a call its decisions allowed.
    fn execute<'a>(
        &'a self,
        inv: &'a Invocation<'a>,
        call: ToolCall<'a>,
    ) -> ToolFuture<'a, Result<Executed, Failed>>;

    /// The `tools/call` result: the output as text content, and as
    /// `structuredContent` for clients whose protocol has it.
    fn render(&self, output: ToolOutput, structured_content: bool) -> Value {
        text_result(output, structured_content)
    }
}

/// A `tools/call` result holding `output` as one text part, plus
/// `structuredContent` for clients whose protocol has it.
pub fn text_result(output: ToolOutput, structured_content: bool) -> Value {
    let mut result = json!({
        "content": [ { "type": "text", "text": output.text } ],
        "isError": false,
    });
    if structured_content && let Value::Object(map) = &mut result {
        map.insert("structuredContent".into(), output.structured);
    }
    result
}

/// A compact outcome for the decision record (ids and counts, not payloads).
fn outcome_summary(output: &ToolOutput) -> Value {
    let s = &output.structured;
    let mut summary = Map::new();
    if let Some(id) = s.get("id") {
        summary.insert("id".into(), id.clone());
    }
    if let Some(obs) = s.get("observations").and_then(Value::as_array) {
        summary.insert("observations".into(), obs.len().into());
    }
    if let Some(t) = s.get("tokensUsed") {
        summary.insert("tokensUsed".into(), t.clone());
    }
    for key in [
        "processed",
        "totalNodesCreated",
        "totalEdgesCreated",
        "mergedCount",
        "nodeUpdates",
        "edgeUpdates",
        "tripletEmbeddings",
        "disabled",
    ] {
        if let Some(v) = s.get(key) {
            summary.insert(key.into(), v.clone());
        }
    }
    for key in ["triplets", "nodes", "edges", "graph"] {
        if let Some(v) = s.get(key).and_then(Value::as_array) {
            summary.insert(key.into(), v.len().into());
        }
    }
    if let Some(p) = s.get("path") {
        summary.insert(
            "pathLength".into(),
            p.get("length").cloned().unwrap_or(Value::Null),
        );
    }
    Value::Object(summary)
}
