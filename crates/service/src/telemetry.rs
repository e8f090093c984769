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

use opentelemetry::trace::TracerProvider as _;
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
