//! The admin listener: `/healthz` (the process runs), `/readyz` (it takes traffic: false before
//! the listeners run and from the moment shutdown starts) and `/metrics` (Prometheus text). It is
//! never mounted on a public listener.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;

use crate::metrics::Metrics;

/// Shared admin state.
#[derive(Debug, Clone)]
pub(crate) struct Admin {
    pub(crate) ready: Arc<AtomicBool>,
    pub(crate) metrics: Arc<Metrics>,
}

impl hyper::service::Service<Request<Incoming>> for Admin {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let resp = self.answer(&req);
        Box::pin(async move { Ok(resp) })
    }
}

impl Admin {
    fn answer(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return json(StatusCode::METHOD_NOT_ALLOWED, r#"{"error":{"code":"method_not_allowed","message":"admin endpoints answer GET only"}}"#.into());
        }
        match req.uri().path() {
            "/healthz" => json(StatusCode::OK, r#"{"status":"ok"}"#.into()),
            "/readyz" => {
                if self.ready.load(Ordering::Acquire) {
                    json(StatusCode::OK, r#"{"ready":true}"#.into())
                } else {
                    json(StatusCode::SERVICE_UNAVAILABLE, r#"{"ready":false}"#.into())
                }
            }
            "/metrics" => {
                let mut r = Response::new(Full::new(Bytes::from(self.metrics.render())));
                r.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                r
            }
            _ => json(
                StatusCode::NOT_FOUND,
                r#"{"error":{"code":"not_found","message":"admin endpoints: /healthz /readyz /metrics"}}"#.into(),
            ),
        }
    }
}

fn json(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}
