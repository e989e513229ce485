//! JSON log lines carry the trace ids of the request they were written in,
//! at the top level (`"trace_id"`, `"span_id"`), where log backends look
//! for them to join a line to its trace. The ids are the `trace_id` and
//! `span_id` fields the request's `tracing` span records when its trace
//! is exported and sampled (`mcp::dispatch::log_span`); [`TraceIdLayer`]
//! keeps them on the span, [`TracedJson`] writes them in front of the
//! JSON formatter's own fields. A line outside such a span is unchanged.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The ids a span recorded.
#[derive(Debug, Clone, Default)]
struct TraceIds {
    trace_id: Option<String>,
    span_id: Option<String>,
}

impl Visit for TraceIds {
    fn record_str(&mut self, field: &Field, value: &str) {
        // Hex ids only: nothing to escape in the JSON line.
        if !value.bytes().all(|b| b.is_ascii_hexdigit()) {
            return;
        }
        match field.name() {
            "trace_id" => self.trace_id = Some(value.to_string()),
            "span_id" => self.span_id = Some(value.to_string()),
            _ => {}
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn fmt::Debug) {}
}

/// Keeps each span's `trace_id` / `span_id` fields in its extensions.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceIdLayer;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for TraceIdLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut ids = TraceIds::default();
        attrs.record(&mut ids);
        if let Some(span) = ctx.span(id)
            && (ids.trace_id.is_some() || ids.span_id.is_some())
        {
            span.extensions_mut().insert(ids);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        let mut ids = extensions.remove::<TraceIds>().unwrap_or_default();
        values.record(&mut ids);
        if ids.trace_id.is_some() || ids.span_id.is_some() {
            extensions.insert(ids);
        }
    }
}

/// A JSON event format with the innermost span's trace ids in front.
#[derive(Debug)]
pub struct TracedJson<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for TracedJson<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let ids = ctx.event_scope().and_then(|scope| {
            scope
                .into_iter()
                .find_map(|span| span.extensions().get::<TraceIds>().cloned())
        });
        let (Some(ids), Some(rest)) = (ids, line.strip_prefix('{')) else {
            return writer.write_str(&line);
        };
        writer.write_char('{')?;
        if let Some(trace) = &ids.trace_id {
            write!(writer, "\"trace_id\":\"{trace}\",")?;
        }
        if let Some(span) = &ids.span_id {
            write!(writer, "\"span_id\":\"{span}\",")?;
        }
        writer.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]

    use std::io;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_inside_a_traced_span_starts_with_its_ids() {
        let lines = Lines::default();
        let out = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(TracedJson(tracing_subscriber::fmt::format().json()))
            .with_writer(move || out.clone())
            .finish()
            .with(TraceIdLayer);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "mcp",
                trace_id = tracing::field::Empty,
                span_id = tracing::field::Empty
            );
            span.record("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736");
            span.record("span_id", "00f067aa0ba902b7");
            span.in_scope(|| tracing::info!("inside"));
            tracing::info!("outside");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let mut parsed = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap());
        let inside = parsed.next().unwrap();
        assert_eq!(
            inside["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736",
            "{text}"
        );
        assert_eq!(inside["span_id"], "00f067aa0ba902b7");
        assert_eq!(inside["fields"]["message"], "inside");
        let outside = parsed.next().unwrap();
        assert!(outside.get("trace_id").is_none(), "{text}");
    }
}
