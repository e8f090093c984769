//! The echo back-end used by the benchmarks, in the spirit of the Netty echo service the published
//! reports put behind the system under test.
//!
//! Every request, whatever its method and path, gets `200` with the request body streamed back
//! unchanged (never buffered) and the request's `Content-Type`. Two headers tell tests and
//! benchmarks what actually reached the back-end: `x-echo-protocol` (`HTTP/1.1` or `HTTP/2.0`) and
//! `x-echo-tls` (`true`/`false`). An optional delay is a timer, not a blocked thread, on every
//! protocol (the original ignored it on HTTP/2).
//!
//! Serving (TLS, ALPN, h2c detection, drain) is `pms_net::serve`; this crate only answers:
//! plain HTTP/1.1 requests from the bytes read (the `fast` module), everything else through
//! hyper.

#![deny(missing_docs)]

mod fast;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, Request, Response, Version};
use hyper::body::Incoming;
use pms_net::serve::{self, ConnInfo, Drain, NoObserver, ServeConfig};
use tokio::net::TcpListener;

/// Response header naming the HTTP version the echo received.
pub const HEADER_PROTOCOL: &str = "x-echo-protocol";
/// Response header saying whether the request came over TLS.
pub const HEADER_TLS: &str = "x-echo-tls";

/// How the echo back-end answers.
#[derive(Debug, Clone)]
pub struct EchoConfig {
    /// Delay before every response.
    pub delay: Duration,
    /// TLS and protocol settings of the listener.
    pub serve: ServeConfig,
    /// Answer plain HTTP/1.1 requests without hyper (see the `fast` module); `false` sends
    /// every request through hyper, as before there was a fast path.
    pub fast_path: bool,
}

impl Default for EchoConfig {
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            serve: ServeConfig::default(),
            fast_path: true,
        }
    }
}

/// Serves the echo on `listener` until `shutdown` resolves.
pub async fn run(
    listener: TcpListener,
    config: EchoConfig,
    shutdown: impl Future<Output = ()>,
) -> Drain {
    let delay = config.delay;
    let fast = config.fast_path.then(|| {
        Arc::new(fast::FastEcho {
            delay,
            header_read_timeout: config.serve.header_read_timeout,
            body_read_timeout: config.serve.idle_timeout,
            max_header_bytes: config.serve.max_header_bytes,
        })
    });
    serve::serve_with(
        listener,
        config.serve,
        move |conn: ConnInfo| Echo {
            delay,
            tls: conn.tls,
        },
        fast,
        Arc::new(NoObserver),
        shutdown,
    )
    .await
}

/// The per-connection echo service.
#[derive(Debug, Clone, Copy)]
struct Echo {
    delay: Duration,
    tls: bool,
}

impl hyper::service::Service<Request<Incoming>> for Echo {
    type Response = Response<Incoming>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let Echo { delay, tls } = *self;
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Ok(echo(req, tls))
        })
    }
}

fn echo(req: Request<Incoming>, tls: bool) -> Response<Incoming> {
    let protocol = match req.version() {
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        Version::HTTP_10 => "HTTP/1.0",
        _ => "HTTP/1.1",
    };
    let (parts, body) = req.into_parts();
    let mut resp = Response::new(body);
    let headers = resp.headers_mut();
    if let Some(ct) = parts.headers.get(CONTENT_TYPE) {
        headers.insert(CONTENT_TYPE, ct.clone());
    }
    // A known length is passed on so HTTP/1.1 answers are not chunked.
    if let Some(len) = parts.headers.get(CONTENT_LENGTH) {
        headers.insert(CONTENT_LENGTH, len.clone());
    }
    headers.insert(HEADER_PROTOCOL, HeaderValue::from_static(protocol));
    headers.insert(
        HEADER_TLS,
        HeaderValue::from_static(if tls { "true" } else { "false" }),
    );
    resp
}
