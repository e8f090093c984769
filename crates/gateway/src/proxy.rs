//! The request path: route → authenticate → rewrite headers → transform or stream the body →
//! upstream → response. Bodies stream in both directions unless the route transforms them; every
//! failure becomes a [`GatewayError`] answered by `respond`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, DATE};
use http::uri::Authority;
use http::{Request, Response, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use pms_net::serve::ConnInfo;

use crate::access::{AccessLog, Entry};
use crate::backend::Backends;
use crate::body::{
    find_source, BodyStalled, Capped, ClientBodyFailed, FromUpstream, ProxyBody, TooLarge,
};
use crate::fast;
use crate::headers::{self, X_REQUEST_ID};
use crate::jwt::JwtAuth;
use crate::metrics::RouteMetrics;
use crate::respond::GatewayError;
use crate::router::{NoRoute, Router};
use crate::transform;
use crate::upstream::{SendError, Upstream};

/// Everything the request path reads; one per worker thread, shared by that worker's
/// connections. The router, metrics and authenticator are shared by all workers; the upstream
/// pools belong to the worker, so a request never leaves its thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) router: Arc<Router>,
    pub(crate) route_metrics: Vec<RouteMetrics>,
    pub(crate) unrouted: RouteMetrics,
    /// Each upstream's client and fast-path pool, by index.
    pub(crate) backends: Backends,
    pub(crate) jwt: Arc<JwtAuth>,
    pub(crate) max_body_bytes: u64,
    pub(crate) transform_max_body_bytes: usize,
    /// Longest wait for the next part of a request body.
    pub(crate) body_read_timeout: Duration,
    /// Where a line per answered request goes, if anywhere.
    pub(crate) access_log: Option<AccessLog>,
}

impl AsRef<Backends> for Shared {
    fn as_ref(&self) -> &Backends {
        &self.backends
    }
}

/// The per-connection service.
#[derive(Debug, Clone)]
pub(crate) struct Proxy {
    pub(crate) shared: Arc<Shared>,
    pub(crate) conn: ConnInfo,
}

impl hyper::service::Service<Request<Incoming>> for Proxy {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let shared = self.shared.clone();
        let conn = self.conn;
        Box::pin(async move { Ok(shared.handle(conn, req).await) })
    }
}

impl Shared {
    async fn handle(&self, conn: ConnInfo, req: Request<Incoming>) -> Response<ProxyBody> {
        let started = Instant::now();
        let request_id = headers::request_id(req.headers());
        // What the access log needs of the request, which `forward` takes.
        let logged = self.access_log.as_ref().map(|_| {
            let target = match req.uri().path_and_query() {
                Some(pq) => pq.as_str().to_owned(),
                None => req.uri().to_string(),
            };
            (req.method().clone(), target, req.version())
        });
        let routed = match headers::check_host(req.version(), req.headers()) {
            Ok(()) => self
                .router
                .find(req.method(), req.uri().path().as_bytes())
                .map_err(|why| {
                    let path = req.uri().path().to_string();
                    match why {
                        NoRoute::BadPath => GatewayError::BadPath(path),
                        NoRoute::NotFound => GatewayError::NoRoute {
                            method: req.method().to_string(),
                            path,
                        },
                    }
                }),
            Err(why) => Err(GatewayError::BadRequest(why)),
        };
        let route = routed.as_ref().ok().copied();
        let (metrics, result) = match routed {
            Ok(i) => (
                &self.route_metrics[i],
                self.forward(i, conn, &request_id, req).await,
            ),
            Err(err) => (&self.unrouted, Err(err)),
        };
        let resp = match result {
            Ok(resp) => resp,
            Err(err) => {
                log_error(&request_id, &err);
                err.into_response(&request_id)
            }
        };
        let (status, elapsed) = (resp.status().as_u16(), started.elapsed());
        metrics.observe(status, elapsed.as_secs_f64());
        if let (Some(log), Some((method, target, version))) = (&self.access_log, logged) {
            log.record(&Entry {
                client: conn.peer.ip(),
                method: method.as_str(),
                target: &target,
                protocol: protocol(version),
                status,
                started,
                duration: elapsed,
                route: self.route_name(route),
                request_id: request_id.to_str().unwrap_or("-"),
            });
        }
        resp
    }

    /// The name of route `index`, for the access log.
    pub(crate) fn route_name(&self, index: Option<usize>) -> Option<&str> {
        index.map(|i| self.router.route(i).name.as_str())
    }

    pub(crate) fn upstream_error(&self, upstream: &Upstream, err: SendError) -> GatewayError {
        match err {
            SendError::BodyTooLarge => GatewayError::TooLarge {
                limit: self.max_body_bytes,
            },
            SendError::Busy(saturated) => GatewayError::Busy {
                upstream: upstream.name().to_string(),
                reason: saturated.to_string(),
            },
            SendError::ClientBody(why) => GatewayError::BodyRead(why),
            SendError::ClientStalled(stalled) => GatewayError::BodyStalled(stalled),
            SendError::Timeout(after) => GatewayError::Timeout {
                upstream: upstream.name().to_string(),
                after_ms: after.as_millis(),
            },
            other => GatewayError::BadGateway {
                upstream: upstream.name().to_string(),
                reason: other.to_string(),
            },
        }
    }

    async fn forward(
        &self,
        route_index: usize,
        conn: ConnInfo,
        request_id: &HeaderValue,
        req: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, GatewayError> {
        let route = self.router.route(route_index);
        let backend = self.backends.get(route.upstream);
        let upstream = &backend.upstream;
        let (mut parts, body) = req.into_parts();

        self.jwt.strip_identity(&mut parts.headers);
        if route.jwt {
            let claims = self.jwt.authenticate(&parts.headers, &route.roles).await?;
            self.jwt.inject(&claims, &mut parts.headers);
        }

        let declared = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        rewrite_request(
            &mut parts.headers,
            conn,
            parts.version,
            parts.uri.authority(),
            request_id,
        );
        let (mut parts, body) = if route.json_to_xml.is_none() {
            let sent = fast::bridge::send(self, route.upstream, parts, body, declared, request_id);
            match sent.await {
                fast::bridge::Bridged::Sent(result) => return result,
                fast::bridge::Bridged::Declined(parts, body) => (parts, body),
            }
        } else {
            (parts, body)
        };
        parts.uri = upstream
            .target(parts.uri.path_and_query())
            .map_err(|e| self.upstream_error(upstream, e))?;

        // Set for a body streamed from the client: whether a timeout was the client's.
        let mut progress = None;
        let body: ProxyBody = match &route.json_to_xml {
            Some(layout) => {
                let limit = self.transform_max_body_bytes;
                if declared.is_some_and(|n| n > limit as u64) {
                    return Err(GatewayError::TooLarge {
                        limit: limit as u64,
                    });
                }
                let json = Capped::new(body, limit as u64, self.body_read_timeout)
                    .collect()
                    .await
                    .map_err(|e| read_error(&*e, limit as u64))?;
                let xml = transform::convert(&json.to_bytes(), layout)
                    .map_err(|e| GatewayError::BadBody(e.to_string()))?;
                parts
                    .headers
                    .insert(CONTENT_TYPE, HeaderValue::from_static("application/xml"));
                parts
                    .headers
                    .insert(CONTENT_LENGTH, HeaderValue::from(xml.len()));
                Full::new(Bytes::from(xml))
                    .map_err(|never| match never {})
                    .boxed_unsync()
            }
            None => {
                let limit = self.max_body_bytes;
                if declared.is_some_and(|n| n > limit) {
                    return Err(GatewayError::TooLarge { limit });
                }
                let capped = Capped::new(body, limit, self.body_read_timeout);
                progress = Some(capped.progress());
                capped.boxed_unsync()
            }
        };

        let resp = match upstream.send(Request::from_parts(parts, body)).await {
            Ok(resp) => resp,
            Err(SendError::Timeout(after)) => match &progress {
                // The upstream waited for the rest of the body, and so did the gateway.
                Some(p) if p.waiting_on_client() => {
                    return Err(GatewayError::SlowBody {
                        after_ms: after.as_millis(),
                        got: p.received(),
                        expected: declared,
                    })
                }
                _ => return Err(self.upstream_error(upstream, SendError::Timeout(after))),
            },
            Err(e) => return Err(self.upstream_error(upstream, e)),
        };
        let (mut head, body) = resp.into_parts();
        rewrite_response(&mut head.headers, head.version, request_id);
        head.version = http::Version::HTTP_11;
        let body = FromUpstream::new(body, upstream.read_timeout(), upstream.shared_name());
        Ok(Response::from_parts(head, body.boxed_unsync()))
    }
}

/// How the access log names an HTTP version.
fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// Why a request body read whole (for the transform) did not come, as the answer to give.
fn read_error(err: &(dyn std::error::Error + 'static), limit: u64) -> GatewayError {
    if find_source::<TooLarge>(err).is_some() {
        GatewayError::TooLarge { limit }
    } else if let Some(stalled) = find_source::<BodyStalled>(err) {
        GatewayError::BodyStalled(*stalled)
    } else if let Some(failed) = find_source::<ClientBodyFailed>(err) {
        GatewayError::BodyRead(crate::upstream::chain(&*failed.0))
    } else {
        GatewayError::BodyRead(crate::upstream::chain(err))
    }
}

/// The header changes every forwarded request gets, on either path: hop-by-hop headers out,
/// `X-Forwarded-*` and `Via` in, the request id and `traceparent` set. (Identity headers are the caller's: they
/// depend on authentication.)
pub(crate) fn rewrite_request(
    h: &mut HeaderMap,
    conn: ConnInfo,
    version: Version,
    authority: Option<&Authority>,
    request_id: &HeaderValue,
) {
    headers::strip_hop_by_hop(h);
    headers::add_forwarded(h, conn.peer.ip(), conn.tls, authority);
    headers::append_via(h, headers::via_token(version));
    let client = h.get(&headers::TRACEPARENT).map(HeaderValue::as_bytes);
    let trace =
        HeaderValue::from_bytes(headers::traceparent(client, request_id.as_bytes()).as_bytes());
    if let Ok(v) = trace {
        h.insert(headers::TRACEPARENT.clone(), v);
    }
    h.insert(X_REQUEST_ID.clone(), request_id.clone());
}

/// The header changes every relayed response gets, on either path: hop-by-hop headers out,
/// `Via` in, the request id set unless the upstream set one.
pub(crate) fn rewrite_response(h: &mut HeaderMap, version: Version, request_id: &HeaderValue) {
    headers::strip_hop_by_hop(h);
    headers::append_via(h, headers::via_token(version));
    h.entry(X_REQUEST_ID.clone())
        .or_insert_with(|| request_id.clone());
    // `Date` changes every second. Indexed over HTTP/2, each new value joins the connection's
    // HPACK table, and the encoder compares every response's date with all the earlier ones
    // still there. Sent as a literal, as nginx does, it costs 30 bytes and no search.
    if let Some(date) = h.get_mut(DATE) {
        date.set_sensitive(true);
    }
}

/// Logs an error the gateway answers itself: server-side ones at warn, refusals at debug.
pub(crate) fn log_error(request_id: &HeaderValue, err: &GatewayError) {
    // The id itself, as the client got it (a sensitive header value's `Debug` hides it).
    let request_id = String::from_utf8_lossy(request_id.as_bytes());
    if err.status().is_server_error() {
        tracing::warn!(request_id = %request_id, error = %err, "request failed");
    } else {
        tracing::debug!(request_id = %request_id, error = %err, "request refused");
    }
}
