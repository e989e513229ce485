//! Traces of the gateway's work, exported over OTLP (`[telemetry]`, off by
//! default): one trace follows a request from the agent through admission,
//! its Cedar decisions and their durable record, to the upstream MCP
//! server or A2A peer and back.
//!
//! **Conventions.** Spans follow the OpenTelemetry GenAI semantic
//! conventions release v0.1.0 (`open-telemetry/semantic-conventions-genai`:
//! `docs/gen-ai/mcp.md` for the MCP server and client spans,
//! `gen-ai-spans.md` for `execute_tool`, `a2a.md` for the A2A client
//! span; all of Development status), with the general attributes
//! (`error.type`, `network.*`, `server.*`, `rpc.response.status_code`) of
//! semantic conventions v1.41:
//!
//! - a **server** span per JSON-RPC request, named `{mcp.method.name}`
//!   or `{mcp.method.name} {gen_ai.tool.name}` (`tools/call`,
//!   `prompts/get`), with `mcp.method.name`, `mcp.session.id` (the
//!   session of a legacy-era request; 2026-07-28 has no MCP session),
//!   `mcp.protocol.version`, `jsonrpc.request.id`, `network.transport`
//!   (`tcp`), `network.protocol.name` (`http`), for a tool call
//!   `gen_ai.operation.name = execute_tool` and `gen_ai.tool.name`; on
//!   failure `error.type` and `rpc.response.status_code` (the JSON-RPC code
//!   as text; `tool_error` for a result with `isError`) and status ERROR
//!   with the error's message;
//! - an internal span per Cedar decision (`cedar {action}`) with
//!   `cedar.action`, `cedar.decision` (`allow`/`deny`),
//!   `cedar.policy_ids` (the determining policies), `cedar.errors`,
//!   `cedar.policy_set.hash`, `cedargate.decision.id` (the record's id, as
//!   `/admin/decisions` and the console show it) and, once committed,
//!   `cedargate.decision.seq` (its place in the chain);
//! - an internal span per durable commit (`cedargate.commit`) with
//!   `db.system.name`, the records it holds and their sequence numbers;
//! - a **client** span per call to an upstream MCP server
//!   (`{mcp.method.name} {gen_ai.tool.name}`, as the MCP client span:
//!   `server.address`, `server.port`, `network.transport` `tcp` or `pipe`)
//!   and per call to an A2A peer (`{a2a.method.name}`: `SendMessage` or
//!   `message/send`, with `a2a.protocol.version`);
//! - a **client** span per HTTP request to an identity provider
//!   (discovery, key set, introspection, userinfo, token: the HTTP client
//!   span, named `GET` or `POST`, with `http.request.method`, `url.full`
//!   without its query, `server.address`, `server.port`,
//!   `http.response.status_code`, `error.type` for a 4xx/5xx or a failure).
//!
//! Tool arguments and results are never attributes, unless an operator
//! names the tool in `[telemetry] record_tool_io` (then
//! `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` on its
//! server span, each cut to 4 KiB).
//!
//! **Propagation.** A request's parent is the W3C trace context of its
//! message's `params._meta` (`traceparent`, `tracestate`; the MCP
//! conventions' carrier), else of its HTTP headers. A span started here
//! carries its own context on: into `params._meta` and the `traceparent`
//! / `tracestate` headers of each request to an upstream MCP server (every
//! transport; stdio only `_meta`), and into the headers of each A2A
//! call and identity provider request. The caller's sampled flag is
//! followed (parent-based sampling); `sampling_ratio` decides new traces.
//!
//! **Decisions where the issue is silent.**
//! - Each `Gateway` owns its tracer provider (several
//!   gateways share a test process, and a process-wide provider would
//!   mix their traces), so spans are made through the `opentelemetry` API
//!   with the gateway's own tracer, and the current request's span travels
//!   in the `opentelemetry::Context` of the future serving it (with a
//!   handle on that tracer): code below the transport asks for a child
//!   span of whatever request it serves, and gets none outside one.
//!   `tracing-opentelemetry` bridges the process-wide `tracing`
//!   subscriber to one tracer, which this design cannot use; it is not a
//!   dependency. Log lines get the ids instead from the request's
//!   `tracing` span (`trace_id`, `span_id` fields).
//! - A body holding one request is one server span from its first byte:
//!   admission (key, session, `access_session`) happens inside it. A
//!   batch's messages are a span each, from when each is answered; the
//!   batch's admission happens before any of them and has no span (its
//!   `access_session` record is folded into the first message's record).
//! - Decision spans are made for the decisions a request makes one by one
//!   (`Call::decide`: `access_session`, `view_tool`, `call_tool`,
//!   `a2a_invoke`, `write_node`, `read_resource`, `get_prompt`). The
//!   batched ones, a `tools/list`'s `view_tool` per tool and a graph read's
//!   `read_node` per node, each one record, have no span of their own: the
//!   request's span covers them.
//! - A decision span ends when the decision is made, but is exported only
//!   once its record is committed, so that it can carry the record's
//!   sequence number (a record queued without a durable commit, such as a
//!   listing's, has no sequence number on its span).
//! - Records of a sampled request note `traceId` (and the request span's
//!   `spanId`) besides the caller's `traceparent`, so a trace the gateway
//!   started is found from its records (`audit query --trace`, the
//!   console).
//! - A person's URL authenticates its caller before the body is read,
//!   so before the request's server span exists: that work runs in the
//!   caller's context from the HTTP headers ([`Telemetry::door`]), and
//!   the provider calls it makes are children of the caller's span (a
//!   trace of their own when the caller sent none).
//! - Export off costs the request path a branch per step (and an outbound
//!   call one thread-local look-up): no context is attached, no span is
//!   built, nothing is injected. With export off the caller's
//!   trace context is still noted in its records, but not forwarded.
//! - Export is bounded: spans wait in a queue of `max_queue_spans` and are
//!   sent in batches by the SDK's thread; a full queue drops the span
//!   (`cedargate_trace_spans_dropped_total{reason="queue_full"}`), a
//!   failed or timed-out export drops its batch (`reason="export_failed"`).
//!   A request never waits for the collector.

pub mod config;
mod counted;
mod export;
pub mod settings;
mod spans;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

pub use spans::{
    ClientFacts, ClientSpan, CommitSpan, DecisionFacts, DecisionSpan, Parent, RequestFacts,
    RequestSpan, SpanIds, client_span, commit_span, decision_span, inject_meta, scoped,
    trace_headers,
};

use crate::metrics::TraceMetrics;
use config::TelemetryConfig;
use settings::SettingsError;

/// How long stopping waits for the last spans to leave.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// A gateway's trace export: off, or its tracer provider.
#[derive(Debug, Clone, Default)]
pub struct Telemetry {
    inner: Option<Arc<Inner>>,
}

/// The tracer and what shapes its spans.
#[derive(Debug)]
pub(crate) struct Inner {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// Tools whose arguments and results go on their spans.
    record_io: HashSet<String>,
}

/// Why export cannot start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A setting the gateway cannot use.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The OTLP exporter refused its settings.
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
}

impl Telemetry {
    /// Starts export as `config` and the `OTEL_*` environment say (off
    /// when neither names a collector). The gRPC transport needs a tokio
    /// runtime: call this inside one.
    pub fn start(config: &TelemetryConfig, metrics: &TraceMetrics) -> Result<Self, TelemetryError> {
        let Some(settings) = settings::resolve(config, |k| std::env::var(k).ok())? else {
            return Ok(Telemetry::default());
        };
        let provider = export::provider(&settings, metrics)?;
        let tracer = provider.tracer_with_scope(
            opentelemetry::InstrumentationScope::builder("cedargate")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        tracing::info!(endpoint = %settings.endpoint, protocol = ?settings.protocol, ratio = settings.sampling_ratio, "exporting traces");
        Ok(Telemetry {
            inner: Some(Arc::new(Inner {
                provider,
                tracer,
                record_io: config.record_tool_io.iter().cloned().collect(),
            })),
        })
    }

    /// Whether spans are made and exported.
    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// Sends what waits and stops the exporter, waiting at most a few
    /// seconds (a collector that does not answer loses the rest). Blocks:
    /// call it off the async workers.
    pub fn shutdown(&self) {
        if let Some(inner) = &self.inner
            && let Err(e) = inner.provider.shutdown_with_timeout(SHUTDOWN_WAIT)
        {
            tracing::warn!(error = %e, "trace export did not stop cleanly");
        }
    }

    /// Exports what waits now (tests; never on a request's path).
    pub fn flush(&self) {
        if let Some(inner) = &self.inner {
            let _ = inner.provider.force_flush();
        }
    }
}
