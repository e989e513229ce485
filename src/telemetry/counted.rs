//! The bound and the counts around the SDK's batch span processor: a span
//! enters only while fewer than `max_queue` wait between `on_end` and the
//! export that takes them (so the SDK's own queue, of the same size, never
//! fills and never drops silently), and every span ends up counted as
//! exported, dropped with the queue full, or dropped with a failed export.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter, SpanProcessor};

use crate::metrics::TraceMetrics;

/// Spans between `on_end` and their export, and the bound on them.
#[derive(Debug)]
pub struct Gate {
    waiting: AtomicUsize,
    max: usize,
    metrics: TraceMetrics,
}

impl Gate {
    pub fn new(max: usize, metrics: TraceMetrics) -> Arc<Gate> {
        Arc::new(Gate {
            waiting: AtomicUsize::new(0),
            max,
            metrics,
        })
    }

    /// Takes a place in the queue, or counts the span dropped.
    fn enter(&self) -> bool {
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            self.metrics.dropped("queue_full", 1);
            return false;
        }
        true
    }

    /// `n` spans left the queue for an export.
    fn leave(&self, n: usize) {
        let _ = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some(w.saturating_sub(n))
            });
    }
}

/// The batch processor behind the gate.
#[derive(Debug)]
pub struct GatedProcessor<P> {
    pub inner: P,
    pub gate: Arc<Gate>,
}

impl<P: SpanProcessor> SpanProcessor for GatedProcessor<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.gate.enter() {
            self.inner.on_end(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting what each export carried.
#[derive(Debug)]
pub struct CountedExporter<E> {
    pub inner: E,
    pub gate: Arc<Gate>,
}

impl<E: SpanExporter> SpanExporter for CountedExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        self.gate.leave(n);
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => self.gate.metrics.exported(n),
            Err(e) => {
                self.gate.metrics.dropped("export_failed", n);
                tracing::debug!(error = %e, spans = n, "trace export failed");
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
