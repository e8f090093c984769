//! The gateway's own spans. Given a tracer ([`Settings::spans`](crate::Settings::spans); `pms`
//! makes one when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, exporting over OTLP as the services do),
//! every request the gateway answers (but a head it cannot read) gets a server span: a child of
//! the client's `traceparent` when it sent a valid one, else the root of a new trace; named for
//! its method, with its path and status, and the route and upstream when a route took it; from
//! the request's head to the answer's head, as the duration histogram measures it. The `traceparent` the upstream gets names this span as its parent, so
//! the services' spans hang under the gateway's. A 5xx marks the span as failed.
//!
//! Without a tracer none of this runs: no span is made, and the `traceparent` the upstream gets
//! is the one described in [`headers`](crate::headers).

use std::time::{Duration, SystemTime};

use http::Method;
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SdkTracer, Span};

/// Where the gateway's spans go.
#[derive(Clone, Debug)]
pub struct Spans {
    tracer: SdkTracer,
}

impl Spans {
    /// Spans made by `tracer`, and exported as its provider says.
    pub fn new(tracer: SdkTracer) -> Self {
        Self { tracer }
    }

    /// Opens the span of a request `method path`, at `start`, under the client's `traceparent`
    /// when it is valid.
    pub(crate) fn open(
        &self,
        client: Option<&[u8]>,
        method: &Method,
        path: &[u8],
        start: SystemTime,
    ) -> RequestSpan {
        let parent = client
            .and_then(pms_net::trace::remote_parent)
            .unwrap_or_default();
        let span = self
            .tracer
            .span_builder(method.as_str().to_owned())
            .with_kind(SpanKind::Server)
            .with_start_time(start)
            .with_attributes([
                KeyValue::new("http.request.method", method.as_str().to_owned()),
                KeyValue::new("url.path", String::from_utf8_lossy(path).into_owned()),
            ])
            .start_with_context(&self.tracer, &parent);
        let context = span.span_context();
        let traceparent = pms_net::trace::write_flags(
            u128::from_be_bytes(context.trace_id().to_bytes()),
            u64::from_be_bytes(context.span_id().to_bytes()),
            context.trace_flags().to_u8(),
        );
        RequestSpan {
            span,
            start,
            traceparent,
        }
    }
}

/// One request's span, open.
#[derive(Debug)]
pub(crate) struct RequestSpan {
    span: Span,
    start: SystemTime,
    traceparent: [u8; pms_net::trace::LEN],
}

impl RequestSpan {
    /// The `traceparent` that names this span as the parent: what the upstream gets.
    pub(crate) fn traceparent(&self) -> &[u8] {
        &self.traceparent
    }

    /// Closes the span `took` after it opened, with the route and upstream that took the
    /// request (none when no route did) and the answer's status.
    pub(crate) fn close(mut self, route: Option<(&str, &str)>, status: u16, took: Duration) {
        if let Some((route, upstream)) = route {
            self.span
                .set_attribute(KeyValue::new("pms.route", route.to_owned()));
            self.span
                .set_attribute(KeyValue::new("pms.upstream", upstream.to_owned()));
        }
        self.span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if status >= 500 {
            self.span.set_status(Status::error(""));
        }
        self.span.end_with_timestamp(self.start + took);
    }
}
