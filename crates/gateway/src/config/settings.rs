//! The resolved configuration the gateway runs on: typed, validated, secrets and keys loaded.

use std::net::SocketAddr;
use std::time::Duration;

use http::{HeaderName, Method};

use crate::transform::XmlLayout;

/// How the worker threads drive their sockets (`runtime.io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoDriver {
    /// io_uring where the kernel allows it, else epoll.
    #[default]
    Auto,
    /// tokio's reactor: readiness from `epoll`, a system call per read and write.
    Epoll,
    /// One io_uring per worker for client connections (cleartext and TLS) and the fast path's
    /// cleartext HTTP/1.1 upstream connections (see `pms_uring`); hyper's client and the admin
    /// listener stay on `epoll`.
    IoUring,
}

/// The validated, loaded configuration.
#[derive(Debug)]
pub struct Settings {
    /// Admin listener address.
    pub admin_listen: SocketAddr,
    /// Worker threads (at least one).
    pub workers: usize,
    /// How the workers drive their sockets.
    pub io: IoDriver,
    /// Shared limits.
    pub limits: Limits,
    /// Public listeners.
    pub listeners: Vec<ListenerSettings>,
    /// JWT verification, when configured.
    pub jwt: Option<JwtSettings>,
    /// The trusted forwarder, when configured (`[auth.forwarder]`).
    pub forwarder: Option<crate::forwarder::Forwarder>,
    /// Transform settings.
    pub transform: TransformSettings,
    /// Upstreams, in file order; routes refer to them by index.
    pub upstreams: Vec<UpstreamSettings>,
    /// Routes, in file order.
    pub routes: Vec<RouteSettings>,
    /// Where the access log goes; `None`: no access log.
    pub access_log: Option<crate::access::Target>,
    /// Whether `/openapi.json` and `/docs` are served (`[api_docs] enabled`, default true)
    /// when there is a document.
    pub api_docs: bool,
    /// The OpenAPI document of the services behind the gateway. Not read from the file: the
    /// program running the gateway sets it (`pms` sets every service's). The gateway serves
    /// the operations its routes reach; see [`apidocs`](crate::apidocs).
    pub openapi: Option<OpenApiSource>,
    /// Cross-origin requests from browsers (`[cors]`); none allowed without it.
    pub cors: Option<crate::cors::Cors>,
    /// Where the gateway's own spans go ([`spans`](crate::spans)). Not read from the file: the
    /// program running the gateway sets it (`pms` does when an OTLP endpoint is configured).
    pub spans: Option<crate::spans::Spans>,
}

/// Where the services' OpenAPI document comes from: made when `/openapi.json` or `/docs` is
/// first asked for, not at start. Building it runs every service's schema code, which a
/// gateway that is never asked would keep resident for nothing (about 8 MB under the proxy
/// benchmark, code and heap).
#[derive(Clone)]
pub struct OpenApiSource(std::sync::Arc<dyn Fn() -> serde_json::Value + Send + Sync>);

impl OpenApiSource {
    /// A source that calls `make` for the document.
    pub fn new(make: impl Fn() -> serde_json::Value + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(make))
    }

    /// The document, made now.
    pub fn document(&self) -> serde_json::Value {
        (self.0)()
    }
}

impl std::fmt::Debug for OpenApiSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OpenApiSource(..)")
    }
}

/// Resolved `[limits]`.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most open client connections per listener.
    pub max_connections: usize,
    /// Time to receive a request head.
    pub header_read_timeout: Duration,
    /// Longest wait for the next part of a request body.
    pub body_read_timeout: Duration,
    /// Longest a write to a client may wait for it to read.
    pub send_timeout: Duration,
    /// How long a connection hyper serves may start no request before it is shut down.
    pub idle_timeout: Duration,
    /// Time to finish a TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// Largest request head.
    pub max_header_bytes: usize,
    /// Largest request body forwarded.
    pub max_body_bytes: u64,
    /// Most concurrent HTTP/2 streams per connection.
    pub h2_max_concurrent_streams: u32,
    /// Drain time after SIGTERM.
    pub shutdown_grace: Duration,
    /// Whether plain HTTP/1.1 requests to HTTP/1.1 upstreams take the fast path, and requests
    /// hyper received go out over its connections (see the gateway docs).
    pub http1_fast_path: bool,
}

/// One public listener.
#[derive(Debug, Clone)]
pub struct ListenerSettings {
    /// Name for logs and metrics.
    pub name: String,
    /// Address to bind.
    pub listen: SocketAddr,
    /// TLS termination config (ALPN already set).
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// HTTP/1.1 only.
    pub http1_only: bool,
}

/// Resolved `[auth.jwt]`.
#[derive(Debug, Clone)]
pub struct JwtSettings {
    /// What the verifier checks.
    pub verifier: pms_auth::VerifierConfig,
    /// Claim → header, in a stable order.
    pub claims_to_headers: Vec<(String, HeaderName)>,
}

/// Resolved `[transform]`.
#[derive(Debug, Clone)]
pub struct TransformSettings {
    /// Largest body read.
    pub max_body_bytes: usize,
    /// Default layout.
    pub layout: XmlLayout,
}

/// Upstream protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// HTTP/1.1 (cleartext or TLS).
    H1,
    /// HTTP/2 over TLS (ALPN h2).
    H2,
    /// HTTP/2 cleartext with prior knowledge.
    H2c,
    /// Whatever ALPN negotiates (h2 preferred); HTTP/1.1 on cleartext.
    Auto,
}

/// One upstream.
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    /// Name.
    pub name: String,
    /// Endpoints (scheme + authority): the configured list, or what discovery last found.
    pub endpoints: Vec<http::uri::Uri>,
    /// Where the endpoints come from when they are not listed.
    pub discovery: Option<Discovery>,
    /// Protocol.
    pub protocol: UpstreamProtocol,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Time to the response head.
    pub request_timeout: Duration,
    /// Longest wait for the next bytes of a response body once the head has come.
    pub read_timeout: Duration,
    /// How long an endpoint that failed is skipped (with more than one).
    pub fail_timeout: Duration,
    /// 5xx answers in a row after which an endpoint is skipped; 0: never.
    pub eject_after_5xx: u32,
    /// Active readiness checks, when configured.
    pub health_check: Option<HealthCheck>,
    /// Idle connections kept per endpoint.
    pub pool_max_idle: usize,
    /// Idle connection lifetime.
    pub pool_idle_timeout: Duration,
    /// Most connections open to one endpoint, all workers together (each worker holds an
    /// even share).
    pub max_connections: usize,
    /// Longest a request waits for a connection when its endpoint is at `max_connections`.
    pub queue_timeout: Duration,
    /// Trust for https endpoints.
    pub trust: pms_net::tls::Trust,
}

/// Endpoints found by DNS: every address `host` resolves to, on `port`, over cleartext HTTP;
/// resolved again every `interval` (a Kubernetes headless Service lists its ready pods so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// The name to resolve.
    pub host: String,
    /// The port each address is connected to on.
    pub port: u16,
    /// Time between resolutions.
    pub interval: Duration,
    /// Most endpoints taken from one resolution (the first, in address order).
    pub max_endpoints: usize,
}

/// Active readiness checks of an upstream's endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// Path asked with GET; a 2xx answer is ready.
    pub path: http::uri::PathAndQuery,
    /// Time between checks of one endpoint.
    pub interval: Duration,
    /// Longest wait for a check's answer.
    pub timeout: Duration,
    /// Failed checks in a row that make an endpoint unready.
    pub unhealthy_after: u32,
    /// Passed checks in a row that make it ready again.
    pub healthy_after: u32,
}

/// How a route matches paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// The whole path equals this.
    Exact(String),
    /// The path starts with this.
    Prefix(String),
}

/// One route.
#[derive(Debug, Clone)]
pub struct RouteSettings {
    /// Name for logs and metrics.
    pub name: String,
    /// Path condition.
    pub path: PathMatch,
    /// Allowed methods; empty means any.
    pub methods: Vec<Method>,
    /// Index into [`Settings::upstreams`].
    pub upstream: usize,
    /// Requires a valid JWT.
    pub jwt: bool,
    /// Roles allowed, when not empty.
    pub roles: Vec<String>,
    /// JSON→XML layout, when the route transforms.
    pub json_to_xml: Option<XmlLayout>,
    /// Its rate limit, if any.
    pub rate_limit: Option<RateLimitSettings>,
}

/// Whose requests share one rate-limit bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitBy {
    /// The client's address (an IPv6 client's /64 network, which one host can fill).
    Client,
    /// The `sub` claim of the caller's token; the address when a token has none.
    Subject,
}

/// A route's token bucket: `burst` requests at once, then one every `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitSettings {
    /// Whose requests share a bucket.
    pub by: LimitBy,
    /// Time to earn one request back.
    pub period: Duration,
    /// Bucket size.
    pub burst: std::num::NonZeroU32,
}
