//! Upstream pools: one hyper-util client per upstream, shared by every worker thread, keeping a
//! keep-alive pool per endpoint (HTTP/1.1) or multiplexing streams on one connection (HTTP/2).
//!
//! Owns protocol choice toward the back-end (h1, h2 over TLS, h2c, or ALPN's pick), TLS trust,
//! connect and response-head timeouts, the choice of endpoint (see `health`), sending a request
//! again where that is safe (never sent; a 503 to a request that may be repeated, once, within
//! the retry budget), the cap on connections per
//! endpoint (a request past it waits for a pooled connection to come free, up to the queue
//! timeout), and the mapping of client failures to [`SendError`]. It does not touch headers or
//! decide statuses; the proxy does.
//!
//! The cap lives in the connector: opening a connection takes a permit from the endpoint's
//! semaphore and the connection holds it until it closes. hyper-util's pool races a checkout
//! (an idle connection coming back) against the connector, so a request that finds every
//! connection busy is served by the first one returned, and the connector's wait for a permit
//! is what bounds how long it may take.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::{Authority, Scheme};
use http::{Request, Response, Uri, Version};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::body::{find_source, BodyStalled, BoxError, ClientBodyFailed, ProxyBody, TooLarge};
use crate::config::{UpstreamProtocol, UpstreamSettings};
use crate::health::{self, Health, Passive, Verdicts};
use crate::metrics::UpstreamCounters;

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
    /// The client's streamed request body failed while being sent: the client's fault, not the
    /// upstream's.
    #[error("{0}")]
    ClientBody(String),
    /// The client stopped sending its streamed request body.
    #[error("{0}")]
    ClientStalled(BodyStalled),
    /// Anything else: reset, malformed response, protocol error.
    #[error("{0}")]
    Failed(String),
    /// The upstream has no usable endpoint.
    #[error("no endpoints")]
    NoEndpoint,
    /// Every connection the endpoint may have was busy for the whole queue timeout.
    #[error("{0}")]
    Busy(Saturated),
}

/// A connection could not be had within the queue timeout: the endpoint was at its cap.
#[derive(Debug, Clone, thiserror::Error)]
#[error("all {limit} connections to {endpoint} this worker may open stayed busy for {waited:?}")]
pub struct Saturated {
    /// The endpoint, `scheme://authority`.
    pub endpoint: String,
    /// This worker's share of `max_connections`.
    pub limit: usize,
    /// The queue timeout.
    pub waited: Duration,
}

type Connector = Limited<hyper_rustls::HttpsConnector<HttpConnector>>;

/// One configured upstream.
pub struct Upstream {
    /// Shared with the bodies that log under it.
    name: Arc<str>,
    endpoints: Vec<(Scheme, Authority)>,
    /// The endpoints' names in logs, `scheme://authority`, in the same order.
    keys: Arc<[String]>,
    /// Which endpoints to skip for now, and whose turn it is (shared with the fast path's pool).
    health: Arc<Health>,
    client: Client<Connector, ProxyBody>,
    request_timeout: Duration,
    read_timeout: Duration,
    requests: Counter,
    opened: Counter,
    /// Per-endpoint permits, keyed by [`endpoint_key`] (shared with the fast path's pool).
    slots: Arc<HashMap<String, Arc<Semaphore>>>,
    /// This worker's share of `max_connections` per endpoint.
    limit: usize,
    /// TLS settings for the fast path, for HTTP/1.1 upstreams with https endpoints.
    fast_tls: Option<Arc<rustls::ClientConfig>>,
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
    /// Builds one worker's client and pool for `s`, holding `1/workers` of its connection cap
    /// per endpoint; `counters` count its traffic for metrics, and `verdicts` are the active
    /// checks' conclusions about its endpoints.
    ///
    /// # Errors
    /// When the TLS trust cannot be loaded.
    pub(crate) fn new(
        s: &UpstreamSettings,
        workers: usize,
        counters: UpstreamCounters,
        verdicts: Arc<Verdicts>,
    ) -> Result<Self, pms_net::TlsError> {
        let UpstreamCounters {
            requests,
            opened,
            connect_failures,
            ejections,
            retries,
        } = counters;
        if matches!(s.trust, pms_net::tls::Trust::InsecureSkipVerify) {
            tracing::warn!(
                upstream = %s.name,
                "TLS certificate verification is DISABLED for this upstream (insecure_skip_verify)"
            );
        }
        let tls = client_tls(s)?;
        // The fast path's connections over TLS: the same trust; ALPN http/1.1 only for `h1`,
        // both for `auto` (the fast path relays only when the upstream picks http/1.1).
        let fast_alpn: Option<&[&[u8]]> = match s.protocol {
            UpstreamProtocol::H1 => Some(&[pms_net::ALPN_HTTP11]),
            UpstreamProtocol::Auto => Some(&[pms_net::ALPN_H2, pms_net::ALPN_HTTP11]),
            UpstreamProtocol::H2 | UpstreamProtocol::H2c => None,
        };
        let any_tls = s
            .endpoints
            .iter()
            .any(|e| e.scheme() == Some(&Scheme::HTTPS));
        let fast_tls = fast_alpn.filter(|_| any_tls).map(|alpn| {
            let mut c = tls.clone();
            c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            Arc::new(c)
        });
        let https = connector(s, tls);
        let mut cb = Client::builder(TokioExecutor::new());
        cb.pool_max_idle_per_host(s.pool_max_idle)
            .pool_idle_timeout(s.pool_idle_timeout)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http2_adaptive_window(true);
        if matches!(s.protocol, UpstreamProtocol::H2 | UpstreamProtocol::H2c) {
            cb.http2_only(true);
        }
        let limit = s.max_connections.div_ceil(workers.max(1)).max(1);
        let slots: Arc<HashMap<_, _>> = Arc::new(
            s.endpoints
                .iter()
                .map(|u| (endpoint_key(u), Arc::new(Semaphore::new(limit))))
                .collect(),
        );
        let passive = Passive {
            fail_timeout: s.fail_timeout,
            eject_after_5xx: s.eject_after_5xx,
            connect_failures,
            ejections,
            retries,
        };
        let health = Arc::new(Health::new(s.endpoints.len(), passive, verdicts));
        let keys: Arc<[String]> = s.endpoints.iter().map(endpoint_key).collect();
        let client = cb.build(Limited {
            inner: https,
            opened: opened.clone(),
            slots: slots.clone(),
            limit,
            queue_timeout: s.queue_timeout,
            health: Arc::clone(&health),
            keys: Arc::clone(&keys),
        });
        Ok(Self {
            name: Arc::from(s.name.as_str()),
            endpoints: s
                .endpoints
                .iter()
                .filter_map(|u| Some((u.scheme()?.clone(), u.authority()?.clone())))
                .collect(),
            keys,
            health,
            client,
            request_timeout: s.request_timeout,
            read_timeout: s.read_timeout,
            requests,
            opened,
            slots,
            limit,
            fast_tls,
        })
    }

    /// The TLS client settings the fast path uses for this upstream's https endpoints (`None`
    /// unless the upstream is `h1` or `auto` and has https endpoints).
    pub(crate) fn fast_tls(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.fast_tls.clone()
    }

    /// Which endpoints to skip for now, and whose turn it is.
    pub(crate) fn health(&self) -> Arc<Health> {
        Arc::clone(&self.health)
    }

    /// The endpoint's name in errors (`scheme://authority`) and its connection permits.
    pub(crate) fn slot(&self, endpoint: &Uri) -> Option<(String, Arc<Semaphore>)> {
        let key = endpoint_key(endpoint);
        let slot = self.slots.get(&key)?.clone();
        Some((key, slot))
    }

    /// This worker's share of the per-endpoint connection cap.
    pub(crate) fn worker_limit(&self) -> usize {
        self.limit
    }

    /// The counter of connections opened to this upstream.
    pub(crate) fn opened_counter(&self) -> Counter {
        self.opened.clone()
    }

    /// Counts a request sent without [`Upstream::send`] (the fast path).
    pub(crate) fn count_request(&self) {
        self.requests.inc();
    }

    /// Time allowed from sending a request to its response head.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Longest wait for the next bytes of a response body once its head has come.
    pub(crate) fn read_timeout(&self) -> Duration {
        self.read_timeout
    }

    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The upstream's name, to keep.
    pub(crate) fn shared_name(&self) -> Arc<str> {
        Arc::clone(&self.name)
    }

    /// The absolute URI for `path_and_query` on the next endpoint (round-robin, skipping those
    /// that could not be connected to lately).
    ///
    /// # Errors
    /// [`SendError::NoEndpoint`] when the upstream has none (config validation prevents it).
    pub fn target(
        &self,
        path_and_query: Option<&http::uri::PathAndQuery>,
    ) -> Result<Uri, SendError> {
        self.target_on(self.health.pick(), path_and_query)
    }

    /// The absolute URI for `path_and_query` on endpoint `i`.
    fn target_on(
        &self,
        i: usize,
        path_and_query: Option<&http::uri::PathAndQuery>,
    ) -> Result<Uri, SendError> {
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

    /// Sends `req` (absolute URI, headers prepared) and waits for the response head. A request
    /// with no body is sent again when that is safe:
    /// - to the other endpoints in turn when its endpoint cannot be connected to (nothing of it
    ///   was sent);
    /// - once, to another endpoint, when it is idempotent (`health::idempotent`) and its
    ///   connection closed or broke before an answer, or when it got a 503 and may be repeated
    ///   (`health::resend_after_503`); within the retry budget.
    ///
    /// (One with a body cannot: hyper's client has taken the body.)
    ///
    /// # Errors
    /// [`SendError`] saying what went wrong; the proxy maps it to 502, 504 or 413.
    pub async fn send(&self, mut req: Request<ProxyBody>) -> Result<Response<Incoming>, SendError> {
        // The client negotiates HTTP/2 per connection; HTTP/1.1 here means "let it choose".
        *req.version_mut() = Version::HTTP_11;
        self.requests.inc();
        let first = self.endpoint_of(req.uri()).ok_or(SendError::NoEndpoint)?;
        let copy = (self.endpoints.len() > 1 && req.body().is_end_stream()).then(|| HeadCopy {
            idempotent: health::idempotent(req.method()),
            after_503: health::resend_after_503(req.method(), || {
                req.headers().contains_key(health::IDEMPOTENCY_KEY)
            }),
            method: req.method().clone(),
            uri: req.uri().clone(),
            headers: req.headers().clone(),
        });
        let got = self.attempt_on(first, req).await;
        let Some(copy) = copy else {
            return got;
        };
        let (at, got) = match got {
            Err(SendError::Connect(why)) => self.fail_over(first, why, &copy).await?,
            other => (first, other),
        };
        match got {
            Err(SendError::Failed(why)) if copy.idempotent => {
                let Some(i) = self.health.retry_elsewhere(at) else {
                    return Err(SendError::Failed(why));
                };
                match self
                    .attempt_on(i, copy.to(self.target_on(i, copy.path())?))
                    .await
                {
                    Err(SendError::Failed(_)) => Err(SendError::Failed(why)),
                    other => other,
                }
            }
            Ok(resp)
                if copy.after_503 && resp.status() == http::StatusCode::SERVICE_UNAVAILABLE =>
            {
                let Some(i) = self.health.retry_elsewhere(at) else {
                    return Ok(resp);
                };
                match self
                    .attempt_on(i, copy.to(self.target_on(i, copy.path())?))
                    .await
                {
                    Ok(again) => Ok(again),
                    // The retry got nothing better: the first answer stands.
                    Err(_) => Ok(resp),
                }
            }
            other => other,
        }
    }

    /// Sends `copy` to the endpoints after `first`, where connecting failed with `why`, in turn,
    /// until one can be connected to: the endpoint and what it answered.
    async fn fail_over(
        &self,
        first: usize,
        mut why: String,
        copy: &HeadCopy,
    ) -> Result<(usize, Result<Response<Incoming>, SendError>), SendError> {
        for i in self.health.after(first) {
            if self.health.is_down(i) {
                continue;
            }
            match self
                .attempt_on(i, copy.to(self.target_on(i, copy.path())?))
                .await
            {
                Err(SendError::Connect(again)) => why = again,
                other => return Ok((i, other)),
            }
        }
        Err(SendError::Connect(why))
    }

    /// The index of the endpoint `uri` points at.
    fn endpoint_of(&self, uri: &Uri) -> Option<usize> {
        self.endpoints.iter().position(|(scheme, authority)| {
            Some(scheme) == uri.scheme() && Some(authority) == uri.authority()
        })
    }

    /// One exchange of hyper's client with endpoint `i`, up to the response head, counted as
    /// outstanding there meanwhile, its status told to the endpoint's health.
    async fn attempt_on(
        &self,
        i: usize,
        req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, SendError> {
        let _busy = self.health.busy(i);
        let got = match tokio::time::timeout(self.request_timeout, self.client.request(req)).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(err)) => Err(classify(&err)),
            Err(_) => Err(SendError::Timeout(self.request_timeout)),
        };
        if let (Ok(resp), Some(key)) = (&got, self.keys.get(i)) {
            self.health.answered(i, key, resp.status().as_u16());
        }
        got
    }
}

/// The TLS client settings for `s`'s https endpoints (none needed when it has only http ones).
///
/// # Errors
/// When the trust cannot be loaded.
pub(crate) fn client_tls(s: &UpstreamSettings) -> Result<rustls::ClientConfig, pms_net::TlsError> {
    let any_tls = s
        .endpoints
        .iter()
        .any(|e| e.scheme() == Some(&Scheme::HTTPS));
    let trust = if any_tls {
        &s.trust
    } else {
        &pms_net::tls::Trust::Nothing
    };
    pms_net::tls::client_config(trust, &[])
}

/// hyper's connector for `s`: TCP with its connect timeout, then TLS with `tls` for https
/// endpoints, offering by ALPN the protocols `s.protocol` allows.
pub(crate) fn connector(
    s: &UpstreamSettings,
    tls: rustls::ClientConfig,
) -> hyper_rustls::HttpsConnector<HttpConnector> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(s.connect_timeout));
    // hyper-rustls sets ALPN from the enabled versions (h1: http/1.1, h2: h2, auto: both).
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    match s.protocol {
        UpstreamProtocol::H1 | UpstreamProtocol::H2c => builder.enable_http1().wrap_connector(http),
        UpstreamProtocol::H2 => builder.enable_http2().wrap_connector(http),
        UpstreamProtocol::Auto => builder.enable_all_versions().wrap_connector(http),
    }
}

/// What is needed to send a request with no body again, and when it may be.
struct HeadCopy {
    method: http::Method,
    uri: Uri,
    headers: http::HeaderMap,
    /// After its connection closed before an answer.
    idempotent: bool,
    /// After a 503.
    after_503: bool,
}

impl HeadCopy {
    fn path(&self) -> Option<&http::uri::PathAndQuery> {
        self.uri.path_and_query()
    }

    /// The request again, to `uri`.
    fn to(&self, uri: Uri) -> Request<ProxyBody> {
        let mut req = Request::new(ProxyBody::default());
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = uri;
        *req.version_mut() = Version::HTTP_11;
        *req.headers_mut() = self.headers.clone();
        req
    }
}

/// What a failed exchange of hyper's client says about whose fault it was.
fn classify(err: &hyper_util::client::legacy::Error) -> SendError {
    if find_source::<TooLarge>(err).is_some() {
        SendError::BodyTooLarge
    } else if let Some(stalled) = find_source::<BodyStalled>(err) {
        SendError::ClientStalled(*stalled)
    } else if let Some(client) = find_source::<ClientBodyFailed>(err) {
        SendError::ClientBody(chain(&*client.0))
    } else if let Some(saturated) = find_source::<Saturated>(err) {
        SendError::Busy(saturated.clone())
    } else if err.is_connect() {
        SendError::Connect(chain(err))
    } else {
        SendError::Failed(chain(err))
    }
}

/// An error and its sources, joined with ": ".
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
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

/// How the connector names an endpoint: `scheme://authority`, as the pool keys it.
pub(crate) fn endpoint_key(uri: &Uri) -> String {
    format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map_or("", Authority::as_str)
    )
}

/// Wraps a connector to cap the connections open to each endpoint and to count those that
/// were actually established.
#[derive(Clone)]
pub struct Limited<C> {
    inner: C,
    opened: Counter,
    /// One semaphore per endpoint, keyed by [`endpoint_key`], `limit` permits each.
    slots: Arc<HashMap<String, Arc<Semaphore>>>,
    limit: usize,
    queue_timeout: Duration,
    /// Told of each connect and its outcome.
    health: Arc<Health>,
    /// The endpoints' keys, in the order `health` counts them.
    keys: Arc<[String]>,
}

impl<C> tower_service::Service<Uri> for Limited<C>
where
    C: tower_service::Service<Uri> + Clone + Send + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = Held<C::Response>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let key = endpoint_key(&uri);
        let slot = self.slots.get(&key).cloned();
        // The inner connector is ready (polled above); its clone connects once a permit is had.
        let mut inner = self.inner.clone();
        std::mem::swap(&mut inner, &mut self.inner);
        let opened = self.opened.clone();
        let (limit, queue_timeout) = (self.limit, self.queue_timeout);
        let (health, keys) = (Arc::clone(&self.health), Arc::clone(&self.keys));
        Box::pin(async move {
            let permit = match slot {
                Some(slot) => {
                    let acquire = slot.acquire_owned();
                    match tokio::time::timeout(queue_timeout, acquire).await {
                        Ok(Ok(permit)) => Some(permit),
                        Ok(Err(closed)) => return Err(closed.into()),
                        Err(_) => {
                            return Err(Saturated {
                                endpoint: key,
                                limit,
                                waited: queue_timeout,
                            }
                            .into())
                        }
                    }
                }
                // Not one of the configured endpoints (cannot happen: targets come from them).
                None => None,
            };
            let made = inner.call(uri).await.map_err(Into::into);
            if let Some(i) = keys.iter().position(|k| *k == key) {
                match &made {
                    Ok(_) => health.connected(i, &key),
                    Err(e) => health.failed(i, &key, &chain(&**e)),
                }
            }
            let conn = made?;
            opened.inc();
            Ok(Held {
                inner: conn,
                _permit: permit,
            })
        })
    }
}

pin_project_lite::pin_project! {
    /// An upstream connection holding its endpoint's permit until it is dropped (closed).
    pub struct Held<T> {
        #[pin]
        inner: T,
        _permit: Option<OwnedSemaphorePermit>,
    }
}

impl<T: Connection> Connection for Held<T> {
    fn connected(&self) -> Connected {
        self.inner.connected()
    }
}

impl<T: hyper::rt::Read> hyper::rt::Read for Held<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write> hyper::rt::Write for Held<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.project().inner.poll_write_vectored(cx, bufs)
    }
}
