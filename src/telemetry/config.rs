//! `[telemetry]`: where and how the gateway exports its traces (OTLP), and
//! how a decision links to them. Off unless an endpoint is named, here or
//! in the standard `OTEL_EXPORTER_OTLP_*` variables (`settings`
//! resolves the two).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies (`POST {endpoint}/v1/traces`, port 4318).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// OTLP/gRPC (port 4317).
    #[serde(rename = "grpc")]
    Grpc,
}

/// `[telemetry]` (every key optional; environment variables of the
/// OpenTelemetry SDK fill what is left unset, see the module doc of
/// [`super`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `false` turns export off whatever else is set; unset: on when an
    /// endpoint is named (here or by `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`).
    pub enabled: Option<bool>,
    /// The collector: for `http/protobuf` the base URL (`/v1/traces` is
    /// appended) or, ending in `/v1/traces`, the full one; for `grpc` the
    /// URL of the collector (`http://collector:4317`).
    pub endpoint: Option<String>,
    /// `http/protobuf` (default) or `grpc`.
    pub protocol: Option<Protocol>,
    /// Headers sent with every export (an API key of a hosted backend).
    /// Added to those of `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`; a name set
    /// in both takes the value here.
    pub headers: BTreeMap<String, String>,
    /// Share of new traces recorded, from 0 to 1 (default 1). A request
    /// whose caller's trace context says sampled or not follows its caller.
    pub sampling_ratio: Option<f64>,
    /// `service.name` of the exported spans (default `cedargate`).
    pub service_name: Option<String>,
    /// The console's link from a decision to its trace, `{trace_id}`
    /// replaced (e.g. `http://jaeger:16686/trace/{trace_id}`). Without it
    /// the console shows the id alone.
    pub trace_link: Option<String>,
    /// Gateway tool names (as `tools/list` shows them) whose call
    /// arguments and results go on the request's span as
    /// `gen_ai.tool.call.arguments` / `gen_ai.tool.call.result` (each cut
    /// to 4 KiB). Empty by default: tool data never leaves in a span
    /// unless an operator names the tool here.
    pub record_tool_io: Vec<String>,
    /// Spans waiting for export, at most (default 2048): beyond it a span
    /// is dropped and counted, never waited for.
    pub max_queue_spans: Option<usize>,
    /// Spans per export request, at most (default 512).
    pub max_batch_spans: Option<usize>,
    /// Milliseconds between two exports (default 5000).
    pub export_delay_ms: Option<u64>,
    /// Milliseconds one export may take, retries included (default
    /// 10000); a collector slower than this loses that batch (counted).
    pub export_timeout_ms: Option<u64>,
}
