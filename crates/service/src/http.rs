//! What every service's HTTP face shares: the layer that keeps or makes the request id and
//! renders every [`ApiError`], reading JSON bodies under a size and time limit, JSON answers,
//! `/healthz` and `/readyz`, and the 404/405 answers for paths and methods no route has. Route
//! tables and handlers are each service's.

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::ready::Readiness;
use crate::store::Db;

/// Request/response header carrying the request id (kept from the gateway when valid).
pub const X_REQUEST_ID: &str = "x-request-id";

/// Default largest request body.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;
/// Default time a client has to send its whole request body (at most
/// [`DEFAULT_MAX_BODY_BYTES`]), as the gateway gives it for bodies of that size.
pub const DEFAULT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A handler's result.
pub type Answer = Result<Response, ApiError>;

/// The request id of the request being handled.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// How much body a request may send, and how fast.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Largest request body.
    pub max_bytes: usize,
    /// Time a client has to send its whole request body.
    pub timeout: std::time::Duration,
}

impl Default for BodyLimits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_BODY_BYTES,
            timeout: DEFAULT_BODY_TIMEOUT,
        }
    }
}

/// Finishes a service's route table: JSON 404 and 405 answers, and the request-id layer over
/// everything (so every [`ApiError`] a handler returns is rendered in the one format).
pub fn finish(router: Router) -> Router {
    router
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn(request_id))
}

/// Takes the caller's `X-Request-Id` when it is sane (the gateway sends one) or makes one, puts
/// it on the request and the response, and renders an [`ApiError`] a handler returned. The
/// request is handled in a `request` span carrying that id and the trace id of its
/// `traceparent` (W3C Trace Context, which the gateway always sends), so every log line written
/// while handling it names both.
async fn request_id(mut req: Request, next: Next) -> Response {
    let id = request_id_of(req.headers());
    let traceparent = req.headers().get(pms_net::trace::TRACEPARENT);
    let trace = traceparent
        .and_then(|v| pms_net::trace::trace_id(v.as_bytes()))
        .unwrap_or_default()
        .to_owned();
    let parent = traceparent.and_then(|v| pms_net::trace::remote_parent(v.as_bytes()));
    req.extensions_mut().insert(RequestId(id.clone()));
    // `otel.*` and the `http.*`/`url.*` names are what an OTLP exporter makes of the span
    // (`telemetry`): a server span named for its method, child of the caller's.
    let span = tracing::info_span!(
        "request",
        id = %id,
        trace = %trace,
        otel.name = %req.method(),
        otel.kind = "server",
        http.request.method = %req.method(),
        url.path = %req.uri().path(),
        http.response.status_code = tracing::field::Empty,
    );
    if let Some(parent) = parent {
        // Fails only without an OpenTelemetry layer, when there is nothing to parent.
        let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(&span, parent);
    }
    let mut resp = tracing::Instrument::instrument(next.run(req), span.clone()).await;
    if let Some(err) = resp.extensions_mut().remove::<ApiError>() {
        resp = err.render(&id);
    }
    span.record(
        "http.response.status_code",
        i64::from(resp.status().as_u16()),
    );
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(X_REQUEST_ID, v);
    }
    resp
}

/// The caller's `X-Request-Id` when it is sane (up to 128 letters, digits and `-_.:`), else a
/// new one.
pub(crate) fn request_id_of(headers: &HeaderMap) -> String {
    headers
        .get(X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 128
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        })
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned)
}

/// Reads a JSON object body within `limits`.
///
/// # Errors
/// 415 for a non-JSON content type, 413 over the size limit, 408 for a body not all there in
/// time, 400 for bytes that are not a JSON object (with the parser's line and column).
pub async fn json_object(
    limits: &BodyLimits,
    headers: &HeaderMap,
    body: Body,
) -> Result<Map<String, Value>, ApiError> {
    match json_value(limits, headers, body).await? {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::bad_body("the body must be a JSON object")),
    }
}

/// Reads any JSON body within `limits` (an array, for endpoints that take one).
///
/// # Errors
/// As [`json_object`], without the "must be an object" rule.
pub async fn json_value(
    limits: &BodyLimits,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, ApiError> {
    if let Some(ct) = headers.get(CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
        if !ct.contains("json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("expected application/json, got {ct:?}"),
            ));
        }
    }
    let bytes = read_limited(body, limits.max_bytes, limits.timeout).await?;
    serde_json::from_slice::<Value>(&bytes).map_err(|e| {
        ApiError::bad_body(format!(
            "malformed JSON at line {} column {}: {e}",
            e.line(),
            e.column()
        ))
    })
}

/// The whole body, at most `limit` bytes, within `timeout`: a client that stops sending it gets a
/// 408 instead of holding the request (and its connection) for good.
async fn read_limited(
    body: Body,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Bytes, ApiError> {
    let read = http_body_util::Limited::new(body, limit).collect();
    let Ok(read) = tokio::time::timeout(timeout, read).await else {
        return Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request body did not arrive within {} ms",
                timeout.as_millis()
            ),
        ));
    };
    match read {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the body exceeds {limit} bytes"),
        )),
        Err(e) => Err(ApiError::bad_body(format!("reading the body failed: {e}"))),
    }
}

/// `value` as a JSON response.
pub fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => json_bytes(status, body),
        Err(e) => ApiError::internal(e).into_response(),
    }
}

/// Already-serialized JSON as a response.
pub fn json_bytes(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(CONTENT_TYPE, "application/json")], body).into_response()
}

/// A Prometheus text exposition as the `/metrics` answer.
pub fn metrics_text(body: String) -> Response {
    (
        StatusCode::OK,
        [(CONTENT_TYPE, "text/plain; version=0.0.4")],
        body,
    )
        .into_response()
}

/// `GET /healthz`: the process is alive.
pub async fn healthz() -> Response {
    json_bytes(StatusCode::OK, br#"{"status":"ok"}"#.to_vec())
}

/// The `/readyz` answer: started (`ready`) and the database answers.
///
/// # Errors
/// 503 while starting or while the database is away.
pub async fn readyz(ready: &Readiness, db: &Db) -> Answer {
    ready.check()?;
    db.ping().await?;
    Ok(json_bytes(
        StatusCode::OK,
        br#"{"status":"ready"}"#.to_vec(),
    ))
}

/// No route for the path.
pub async fn no_route(uri: http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        format!("no endpoint at {}", uri.path()),
    )
}

/// The path exists, the method does not.
pub async fn wrong_method(method: http::Method, uri: http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Log output, shared with the subscriber that writes it.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// One request to a service whose handler logs a line; what was logged.
    async fn logged_while_handling(headers: &str) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_current_span(true)
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let app = finish(Router::new().route(
            "/x",
            get(|| async {
                tracing::warn!("handling it");
                "ok"
            }),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(crate::serve(
            listener,
            app,
            crate::Serving::default(),
            std::future::pending(),
        ));
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET /x HTTP/1.1\r\nhost: x\r\n{headers}connection: close\r\n\r\n");
        conn.write_all(req.as_bytes()).await.unwrap();
        let mut resp = String::new();
        conn.read_to_string(&mut resp).await.unwrap();
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        server.abort();
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        text
    }

    #[tokio::test]
    async fn log_lines_written_while_handling_a_request_name_its_id_and_trace() {
        let text = logged_while_handling(
            "x-request-id: rid-1\r\n\
             traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n",
        )
        .await;
        let line: serde_json::Value = serde_json::from_str(
            text.lines()
                .find(|l| l.contains("handling it"))
                .expect("the handler's line"),
        )
        .unwrap();
        assert_eq!(line["span"]["id"], "rid-1", "{line}");
        assert_eq!(
            line["span"]["trace"], "4bf92f3577b34da6a3ce929d0e0e4736",
            "{line}"
        );
    }

    #[tokio::test]
    async fn a_request_without_a_valid_traceparent_logs_no_trace() {
        let text = logged_while_handling("traceparent: 00-bogus\r\n").await;
        let line: serde_json::Value = serde_json::from_str(
            text.lines()
                .find(|l| l.contains("handling it"))
                .expect("the handler's line"),
        )
        .unwrap();
        assert_eq!(line["span"]["trace"], "", "{line}");
    }
}
