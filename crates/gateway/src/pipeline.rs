//! What every request goes through, whichever front end took it — hyper's server
//! ([`proxy`](crate::proxy): HTTP/2, TLS, and HTTP/1.1 the fast path hands over) or the HTTP/1.1
//! fast path ([`fast`](crate::fast)): the route, the caller's admission (rate limit, token,
//! role), the errors' wording, and the record of the answer (route metrics, access log, the log
//! line of an error). The header rules both ways are
//! [`headers::rules`](crate::headers::rules). The front ends differ
//! in how they read and write HTTP, not in what they decide.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::HeaderValue;
use http::{Method, Version};
use pms_auth::verify::Claims;

use crate::access::{AccessLog, Entry};
use crate::apidocs::{ApiDocs, Doc};
use crate::backend::Backends;
use crate::jwt::JwtAuth;
use crate::metrics::RouteMetrics;
use crate::ratelimit::RateLimits;
use crate::respond::GatewayError;
use crate::router::{NoRoute, Router};
use crate::spans::RequestSpan;
use crate::upstream::{SendError, Upstream};

/// Everything the request path reads; one per worker thread, shared by that worker's
/// connections. The router, metrics and authenticator are shared by all workers; the upstream
/// pools belong to the worker, so a request never leaves its thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) router: Arc<Router>,
    /// `/openapi.json` and `/docs`, when served.
    pub(crate) api_docs: Option<Arc<ApiDocs>>,
    pub(crate) route_metrics: Vec<RouteMetrics>,
    /// Per-route rate limits, shared by all workers.
    pub(crate) rate_limits: Arc<RateLimits>,
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
    /// Cross-origin requests from browsers, when allowed: the hyper front end answers them
    /// (the fast path hands over every request with an `Origin` then).
    pub(crate) cors: Option<Arc<crate::cors::Cors>>,
    /// Where the gateway's own spans go, when they are exported.
    pub(crate) spans: Option<crate::spans::Spans>,
}

impl AsRef<Backends> for Shared {
    fn as_ref(&self) -> &Backends {
        &self.backends
    }
}

impl Shared {
    /// Which of the gateway's own API pages `method path` asks for, when they are served.
    pub(crate) fn api_doc(&self, method: &Method, path: &[u8]) -> Option<(&ApiDocs, Doc)> {
        let docs = self.api_docs.as_deref()?;
        ApiDocs::wants(method, path).map(|doc| (docs, doc))
    }

    /// The route that takes `method path`.
    ///
    /// # Errors
    /// 400 `bad_path` for dot segments, 404 `not_found` when no route takes the path, 405
    /// `method_not_allowed` (with the path's methods) when routes take it with other methods.
    pub(crate) fn route(&self, method: &Method, path: &str) -> Result<usize, GatewayError> {
        self.router
            .find(method, path.as_bytes())
            .map_err(|why| match why {
                NoRoute::BadPath => GatewayError::BadPath(path.to_owned()),
                NoRoute::NotFound => GatewayError::NoRoute {
                    method: method.to_string(),
                    path: path.to_owned(),
                },
                NoRoute::WrongMethod => GatewayError::MethodNotAllowed {
                    method: method.to_string(),
                    path: path.to_owned(),
                    allow: self
                        .router
                        .allowed(path.as_bytes())
                        .iter()
                        .map(Method::as_str)
                        .collect::<Vec<_>>()
                        .join(", "),
                },
            })
    }

    /// Lets a request from `client` on route `index` through, or says why not: its rate limit
    /// by address, then (on a `jwt` route) the bearer token in `authorization` and its role,
    /// then its rate limit by subject. The verified claims, on a `jwt` route.
    ///
    /// # Errors
    /// 429 for a used-up rate limit, 401/403/503 as [`JwtAuth::authenticate_with`].
    pub(crate) async fn admit(
        &self,
        index: usize,
        client: IpAddr,
        authorization: Option<&[u8]>,
    ) -> Result<Option<Claims>, GatewayError> {
        let route = self.router.route(index);
        let limit = self.rate_limits.route(index);
        if let Some(limit) = limit {
            limit.admit_client(client)?;
        }
        if !route.jwt {
            return Ok(None);
        }
        let claims = self
            .jwt
            .authenticate_with(authorization, &route.roles)
            .await?;
        if let Some(limit) = limit {
            limit.admit_subject(client, &claims)?;
        }
        Ok(Some(claims))
    }

    /// Counts an answered request on its route's metrics (`None`: no route took it), writes
    /// its access-log line when there is a log and `asked` (taken only then), and closes its
    /// span, if it has one.
    pub(crate) fn record(
        &self,
        route: Option<usize>,
        asked: Option<&Asked<'_>>,
        span: Option<RequestSpan>,
        status: u16,
        took: Duration,
    ) {
        let metrics = route.map_or(&self.unrouted, |i| &self.route_metrics[i]);
        metrics.observe(status, took.as_secs_f64());
        match (span, route) {
            (Some(span), Some(i)) => {
                let route = self.router.route(i);
                let backend = self.backends.get(route.upstream);
                let names = (route.name.as_str(), backend.upstream.name());
                span.close(Some(names), status, took);
            }
            (Some(span), None) => span.close(None, status, took),
            (None, _) => {}
        }
        if let Some(asked) = asked {
            self.log(route, asked, status, took);
        }
    }

    /// Writes the access-log line of an answered request, if there is a log.
    pub(crate) fn log(&self, route: Option<usize>, asked: &Asked<'_>, status: u16, took: Duration) {
        if let Some(log) = &self.access_log {
            log.record(&Entry {
                client: asked.client,
                method: asked.method,
                target: asked.target,
                protocol: asked.protocol,
                status,
                started: asked.started,
                duration: took,
                route: route.map(|i| self.router.route(i).name.as_str()),
                request_id: asked.request_id,
            });
        }
    }

    /// The answer to give for a request that `upstream` could not take.
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
}

/// What the access log keeps of a request, besides its answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked<'a> {
    /// The client's address.
    pub(crate) client: IpAddr,
    /// Its method (`-` for a head that could not be read).
    pub(crate) method: &'a str,
    /// Its target, path and query (`-` likewise).
    pub(crate) target: &'a str,
    /// `HTTP/1.1`, `HTTP/2.0`, … (see [`protocol`]).
    pub(crate) protocol: &'static str,
    /// The request id, as sent upstream and in error bodies.
    pub(crate) request_id: &'a str,
    /// When the request head had been read.
    pub(crate) started: Instant,
}

/// How the access log names an HTTP version.
pub(crate) fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
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
