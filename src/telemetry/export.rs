//! The tracer provider of resolved [`Settings`]: an OTLP exporter (HTTP
//! with protobuf bodies, or gRPC) behind the SDK's batch processor, the
//! queue bounded and counted ([`super::counted`]), parent-based sampling
//! at the configured ratio, and the service's resource.

use std::collections::HashMap;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider, SpanExporter,
};

use super::TelemetryError;
use super::config::Protocol;
use super::counted::{CountedExporter, Gate, GatedProcessor};
use super::settings::Settings;
use crate::metrics::TraceMetrics;

/// The provider exporting as `settings` say.
pub fn provider(
    settings: &Settings,
    metrics: &TraceMetrics,
) -> Result<SdkTracerProvider, TelemetryError> {
    let gate = Gate::new(settings.max_queue, metrics.clone());
    let processor = match settings.protocol {
        Protocol::HttpProtobuf => batched(settings, http_exporter(settings)?, &gate),
        Protocol::Grpc => batched(settings, grpc_exporter(settings)?, &gate),
    };
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
        settings.sampling_ratio,
    )));
    let resource = Resource::builder_empty()
        .with_attributes(
            settings
                .resource
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_service_name(settings.service_name.clone())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler)
        .with_resource(resource)
        .build())
}

/// `exporter` behind the gate, in the SDK's batch processor (its own
/// thread; the queue, batch size, delay and timeout of `settings`).
fn batched<E: SpanExporter + 'static>(
    settings: &Settings,
    exporter: E,
    gate: &std::sync::Arc<Gate>,
) -> GatedProcessor<BatchSpanProcessor> {
    let config = BatchConfigBuilder::default()
        .with_max_queue_size(settings.max_queue)
        .with_max_export_batch_size(settings.max_batch.min(settings.max_queue))
        .with_scheduled_delay(settings.delay)
        .build();
    let exporter = CountedExporter {
        inner: exporter,
        gate: std::sync::Arc::clone(gate),
    };
    GatedProcessor {
        inner: BatchSpanProcessor::builder(exporter)
            .with_batch_config(config)
            .build(),
        gate: std::sync::Arc::clone(gate),
    }
}

fn http_exporter(settings: &Settings) -> Result<opentelemetry_otlp::SpanExporter, TelemetryError> {
    let headers: HashMap<String, String> = settings.headers.iter().cloned().collect();
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(settings.endpoint.clone())
        .with_timeout(settings.timeout)
        .with_headers(headers)
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))
}

fn grpc_exporter(settings: &Settings) -> Result<opentelemetry_otlp::SpanExporter, TelemetryError> {
    let mut headers = axum::http::HeaderMap::new();
    for (k, v) in &settings.headers {
        let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(k.as_bytes()),
            axum::http::HeaderValue::from_str(v),
        ) else {
            return Err(TelemetryError::Exporter(format!(
                "header `{k}` is no gRPC metadata"
            )));
        };
        headers.insert(name, value);
    }
    let metadata = opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(headers);
    opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(settings.endpoint.clone())
        .with_timeout(settings.timeout)
        .with_metadata(metadata)
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))
}
