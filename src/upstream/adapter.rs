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

use super::client::ClientError;
use super::registry::UpstreamTool;
use super::{Upstreams, input};
use crate::tools::{
    Executed, Failed, Failure, Invocation, ToolAdapter, ToolCall, ToolFuture, ToolOutput, ToolSpec,
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
            .and_then(|result| input::checked(result, call.relay, "tools/call", "content"));
        input::note(&mut outcome, call.relay, result.as_ref().ok());
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
