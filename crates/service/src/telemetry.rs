//! Traces over OTLP, when an operator asks for them with the standard OpenTelemetry variables:
//! with `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, every
//! `request` span a service opens (`http::finish`'s layer; child of the caller's `traceparent`)
//! is exported to that collector over OTLP/HTTP, in batches from a background thread, so that a
//! request shows in the tracing system as the gateway's trace with one span per service that
//! handled it. Without the variable nothing is built and nothing is exported.
//!
//! The exporter reads the rest of its settings from the standard variables too:
//! `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `http/json`),
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_TRACES_SAMPLER` (default
//! `parentbased_always_on`), `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`.

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::Context;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_subscriber::registry::LookupSpan;

/// The variables that turn the exporter on.
pub const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// Why the exporter could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("the OTLP trace exporter cannot be built: {0}")]
pub struct TelemetryError(#[from] opentelemetry_otlp::ExporterBuildError);

/// The trace exporter of this process; flushes what it holds when dropped.
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// The exporter the environment asks for, named `service` unless `OTEL_SERVICE_NAME` says
    /// otherwise; `None` when no endpoint variable is set.
    ///
    /// # Errors
    /// When the variables describe an exporter that cannot be built (an unknown protocol, say).
    pub fn from_env(service: &str) -> Result<Option<Self>, TelemetryError> {
        let configured = ENDPOINT_VARS
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|e| !e.is_empty()));
        if !configured {
            return Ok(None);
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()?;
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service.to_owned());
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        Ok(Some(Self { provider }))
    }

    /// A tracer of this exporter, for spans made without `tracing` (the gateway's).
    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer("pms")
    }

    /// The layer that turns `tracing` spans into exported spans.
    pub fn layer<S>(&self) -> tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        // Where in the code the span opened stays; thread names and busy/idle times go.
        tracing_opentelemetry::layer()
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_tracer(self.tracer())
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        // Exports what is queued (within the exporter's timeout) and stops the thread.
        if let Err(e) = self.provider.shutdown() {
            eprintln!("pms: exporting the last traces failed: {e}");
        }
    }
}

/// The remote parent a `traceparent` value names, as an OpenTelemetry context; `None` when the
/// value is not a valid one (see [`pms_net::trace::trace_id`]).
pub fn parent(traceparent: &[u8]) -> Option<Context> {
    let parent = pms_net::trace::parent(traceparent)?;
    let context = SpanContext::new(
        TraceId::from(parent.trace_id),
        SpanId::from(parent.span_id),
        TraceFlags::new(parent.flags),
        true,
        TraceState::default(),
    );
    Some(Context::new().with_remote_span_context(context))
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceContextExt as _;

    use super::*;

    #[test]
    fn a_traceparent_becomes_a_remote_parent_with_its_ids_and_flags() {
        let cx = parent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").expect("valid");
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        let not_sampled =
            parent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").expect("valid");
        assert!(!not_sampled.span().span_context().is_sampled());
        assert!(parent(b"00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none());
        assert!(parent(b"garbage").is_none());
    }
}
