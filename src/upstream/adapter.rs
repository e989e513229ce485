//! An upstream MCP server's tool as a tool adapter. The `tools/call`
//! pipeline decides `call_tool` on the gateway's name for it (a child of
//! its `McpServer`); this adapter then sends `tools/call` upstream under
//! the upstream's own name and hands the result back as it came:
//! `content`, `structuredContent` and `isError` unchanged; for a
//! 2026-07-28 caller, a result asking for input (`input_required`) too,
//! its requests noted in the record, as are the answers a retry carries
//! (see `client`, "Relayed callers"). A JSON-RPC
//! error of the upstream keeps its code and message; the gateway's own
//! failures use -32201 (timeout), -32202 (transport) and -32203 (invalid
//! response).
//!
//! **Architecture Invariant:** the upstream is reached only from
//! [`ToolAdapter::execute`], which the pipeline calls after an allowing
//! decision: a denied call sends nothing upstream.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};

use super::Upstreams;
use super::client::ClientError;
use super::registry::UpstreamTool;
use crate::tools::spec::echo;
use crate::tools::{
    Executed, Failed, Failure, Invocation, Relay, ToolAdapter, ToolCall, ToolFuture, ToolOutput,
    ToolSpec,
};

/// One upstream tool of a session's view, with the runtime that calls it.
#[derive(Debug)]
pub struct UpstreamAdapter {
    tool: Arc<UpstreamTool>,
    upstreams: Arc<Upstreams>,
}

/// The org's upstream tools as adapters, in registration order.
pub fn adapters(
    set: &super::registry::OrgUpstreams,
    upstreams: &Arc<Upstreams>,
) -> Vec<Arc<dyn ToolAdapter>> {
    set.tools
        .iter()
        .map(|tool| {
            Arc::new(UpstreamAdapter {
                tool: Arc::clone(tool),
                upstreams: Arc::clone(upstreams),
            }) as Arc<dyn ToolAdapter>
        })
        .collect()
}

impl UpstreamAdapter {
    /// The tool as registered now, if it still is with the definition the
    /// session's view was built from (its pinned hash).
    async fn live(&self, org_id: &str) -> Result<Option<Arc<UpstreamTool>>, Failed> {
        let set = self.upstreams.org(org_id).await.map_err(|e| {
            tracing::error!(error = %e, "internal error");
            Failed::internal(e.to_string())
        })?;
        Ok(set
            .by_name
            .get(&self.tool.spec.name)
            .filter(|t| t.hash == self.tool.hash && t.target.id == self.tool.target.id)
            .map(Arc::clone))
    }

    async fn run(&self, inv: &Invocation<'_>, call: ToolCall<'_>) -> Result<Executed, Failed> {
        let Some(tool) = self.live(&inv.tenant.session.org_id).await? else {
            return Err(Failed {
                failure: Failure::Gone,
                ops: Vec::new(),
                outcome: Map::new(),
            });
        };
        let mut outcome = Map::new();
        outcome.insert("upstream".into(), tool.target.id.clone().into());
        outcome.insert("server".into(), tool.target.slug.clone().into());
        outcome.insert("pinnedHash".into(), tool.hash.clone().into());
        let started = Instant::now();
        let result = self
            .upstreams
            .call_tool(
                &tool.target,
                &tool.upstream_name,
                call.args,
                &tool.spec.input_schema,
                call.relay,
            )
            .await
            .and_then(|result| checked_result(result, call.relay));
        note_input(&mut outcome, call.relay, result.as_ref().ok());
        let upstream_ms = started.elapsed().as_secs_f64() * 1000.0;
        outcome.insert("upstreamMs".into(), upstream_ms.into());
        match result {
            Ok(result) => {
                let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
                outcome.insert("isError".into(), is_error.into());
                Ok(Executed {
                    output: ToolOutput {
                        text: String::new(),
                        structured: result,
                    },
                    ops: Vec::new(),
                    after_commit: None,
                    outcome,
                })
            }
            Err(e) => {
                tracing::warn!(tool = %tool.spec.name, code = e.code(), error = %e, "upstream call failed");
                outcome.insert(
                    "error".into(),
                    serde_json::json!({ "code": e.code(), "class": e.class(), "message": e.to_string() }),
                );
                let detail = match &e {
                    ClientError::Remote { data, .. } => data.clone(),
                    _ => Value::Null,
                };
                Err(Failed {
                    failure: Failure::Remote {
                        code: e.code(),
                        class: e.class(),
                        message: e.to_string(),
                        detail,
                    },
                    ops: Vec::new(),
                    outcome,
                })
            }
        }
    }
}

/// A `tools/call` result must be an object with a `content` array, or,
/// for a caller who can be asked (the client let it through only then),
/// a request for input: `inputRequests` (an object) or `requestState` (a
/// string).
fn checked_result(result: Value, relay: &Relay) -> Result<Value, ClientError> {
    let asks_input = result.get("resultType").and_then(Value::as_str) == Some("input_required");
    let well_formed = if asks_input {
        relay.takes_input()
            && (result.get("inputRequests").is_some_and(Value::is_object)
                || result.get("requestState").is_some_and(Value::is_string))
    } else {
        result.get("content").is_some_and(Value::is_array)
    };
    if well_formed {
        Ok(result)
    } else if asks_input {
        Err(ClientError::Invalid(
            "the upstream asked for input without `inputRequests` or `requestState`".into(),
        ))
    } else {
        Err(ClientError::Invalid(
            "the upstream's tools/call result has no `content` array".into(),
        ))
    }
}

/// What the record says of a round trip: the keys of the answers a retry
/// carried (`inputResponses`), and the methods a result asking for input
/// requests of the caller (`inputRequests`), so an auditor sees what the
/// server asked and that the answer was decided again.
fn note_input(outcome: &mut Map<String, Value>, relay: &Relay, result: Option<&Value>) {
    if let Some(responses) = &relay.input_responses {
        let keys: Vec<Value> = responses.keys().map(|k| echo(k).into()).collect();
        outcome.insert("inputResponses".into(), keys.into());
    }
    let Some(requests) = result
        .filter(|r| r.get("resultType").and_then(Value::as_str) == Some("input_required"))
        .map(|r| r.get("inputRequests").and_then(Value::as_object))
    else {
        return;
    };
    let methods: Vec<Value> = requests
        .into_iter()
        .flatten()
        .map(|(key, request)| {
            let method = request.get("method").and_then(Value::as_str).unwrap_or("");
            serde_json::json!({ "key": echo(key), "method": echo(method) })
        })
        .collect();
    outcome.insert("inputRequired".into(), true.into());
    outcome.insert("inputRequests".into(), methods.into());
}

impl ToolAdapter for UpstreamAdapter {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.tool.spec
    }

    fn still_offered<'a>(
        &'a self,
        inv: &'a Invocation<'a>,
    ) -> ToolFuture<'a, Result<bool, Failed>> {
        Box::pin(async move { Ok(self.live(&inv.tenant.session.org_id).await?.is_some()) })
    }

    fn execute<'a>(
        &'a self,
        inv: &'a Invocation<'a>,
        call: ToolCall<'a>,
    ) -> ToolFuture<'a, Result<Executed, Failed>> {
        Box::pin(self.run(inv, call))
    }

    /// The upstream's result as it came.
    fn render(&self, output: ToolOutput, _structured_content: bool) -> Value {
        output.structured
    }
}
