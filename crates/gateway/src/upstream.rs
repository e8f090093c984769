//! Upstream pools: one hyper-util client per upstream, shared by every worker thread, keeping a
//! keep-alive pool per endpoint (HTTP/1.1) or multiplexing streams on one connection (HTTP/2).
//!
//! Owns protocol choice toward the back-end (h1, h2 over TLS, h2c, or ALPN's pick), TLS trust,
//! connect and response-head timeouts, round-robin over endpoints, and the mapping of client
//! failures to [`SendError`]. It does not touch headers or decide statuses; the proxy does.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::{Authority, Scheme};
use http::{Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use prometheus_client::metrics::counter::Counter;

use crate::body::{is_too_large, BoxError, ProxyBody};
use crate::config::{UpstreamProtocol, UpstreamSettings};

/// Why a request to an upstream failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection could be made (refused, unreachable, connect timeout, TLS failure).
    #[error("connect failed: {0}")]
    Connect(String),
    /// No response head within the request timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The streamed request body went over its cap while being sent.
    #[error("request body over its limit")]
    BodyTooLarge,
    /// Anything else: reset, malformed response, protocol error.
    #[error("{0}")]
    Failed(String),
    /// The upstream has no usable endpoint.
    #[error("no endpoints")]
    NoEndpoint,
}

type Connector = Counting<hyper_rustls::HttpsConnector<HttpConnector>>;

/// One configured upstream.
pub struct Upstream {
    name: String,
    endpoints: Vec<(Scheme, Authority)>,
    next: AtomicUsize,
    client: Client<Connector, ProxyBody>,
    request_timeout: Duration,
    requests: Counter,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name)
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// Builds the client and pool for `s`; `requests`/`opened` count traffic for metrics.
    ///
    /// # Errors
    /// When the TLS trust cannot be loaded.
    pub fn new(
        s: &UpstreamSettings,
        requests: Counter,
        opened: Counter,
    ) -> Result<Self, pms_net::TlsError> {
        if matches!(s.trust, pms_net::tls::Trust::InsecureSkipVerify) {
            tracing::warn!(
                upstream = %s.name,
                "TLS certificate verification is DISABLED for this upstream (insecure_skip_verify)"
            );
        }
        // hyper-rustls sets ALPN from the enabled versions below (h1: http/1.1, h2: h2, auto: both).
        let any_tls = s
            .endpoints
            .iter()
            .any(|e| e.scheme() == Some(&Scheme::HTTPS));
        let trust = if any_tls {
            &s.trust
        } else {
            &pms_net::tls::Trust::Nothing
        };
        let tls = pms_net::tls::client_config(trust, &[])?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(s.connect_timeout));
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        let https = match s.protocol {
            UpstreamProtocol::H1 | UpstreamProtocol::H2c => {
                builder.enable_http1().wrap_connector(http)
            }
            UpstreamProtocol::H2 => builder.enable_http2().wrap_connector(http),
            UpstreamProtocol::Auto => builder.enable_all_versions().wrap_connector(http),
        };
        let mut cb = Client::builder(TokioExecutor::new());
        cb.pool_max_idle_per_host(s.pool_max_idle)
            .pool_idle_timeout(s.pool_idle_timeout)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http2_adaptive_window(true);
        if matches!(s.protocol, UpstreamProtocol::H2 | UpstreamProtocol::H2c) {
            cb.http2_only(true);
        }
        let client = cb.build(Counting {
            inner: https,
            opened,
        });
        Ok(Self {
            name: s.name.clone(),
            endpoints: s
                .endpoints
                .iter()
                .filter_map(|u| Some((u.scheme()?.clone(), u.authority()?.clone())))
                .collect(),
            next: AtomicUsize::new(0),
            client,
            request_timeout: s.request_timeout,
            requests,
        })
    }

    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The absolute URI for `path_and_query` on the next endpoint (round-robin).
    ///
    /// # Errors
    /// [`SendError::NoEndpoint`] when the upstream has none (config validation prevents it).
    pub fn target(
        &self,
        path_and_query: Option<&http::uri::PathAndQuery>,
    ) -> Result<Uri, SendError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.endpoints.len().max(1);
        let (scheme, authority) = self.endpoints.get(i).ok_or(SendError::NoEndpoint)?;
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(scheme.clone());
        parts.authority = Some(authority.clone());
        parts.path_and_query = Some(
            path_and_query
                .cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
        );
        Uri::from_parts(parts).map_err(|e| SendError::Failed(format!("bad target URI: {e}")))
    }

    /// Sends `req` (absolute URI, headers prepared) and waits for the response head.
    ///
    /// # Errors
    /// [`SendError`] saying what went wrong; the proxy maps it to 502, 504 or 413.
    pub async fn send(&self, mut req: Request<ProxyBody>) -> Result<Response<Incoming>, SendError> {
        // The client negotiates HTTP/2 per connection; HTTP/1.1 here means "let it choose".
        *req.version_mut() = Version::HTTP_11;
        self.requests.inc();
        match tokio::time::timeout(self.request_timeout, self.client.request(req)).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(err)) if is_too_large(&err) => Err(SendError::BodyTooLarge),
            Ok(Err(err)) if err.is_connect() => Err(SendError::Connect(chain(&err))),
            Ok(Err(err)) => Err(SendError::Failed(chain(&err))),
            Err(_) => Err(SendError::Timeout(self.request_timeout)),
        }
    }
}

/// An error and its sources, joined with ": ".
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut s = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let t = e.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = e.source();
    }
    s
}

/// Wraps a connector to count connections that were actually established.
#[derive(Clone)]
pub struct Counting<C> {
    inner: C,
    opened: Counter,
}

impl<C> tower_service::Service<Uri> for Counting<C>
where
    C: tower_service::Service<Uri>,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let fut = self.inner.call(uri);
        let opened = self.opened.clone();
        Box::pin(async move {
            let conn = fut.await.map_err(Into::into)?;
            opened.inc();
            Ok(conn)
        })
    }
}
