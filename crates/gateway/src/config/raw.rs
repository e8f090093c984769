//! The TOML file as written: serde types, unknown keys rejected, defaults for optional sections.
//! No validation beyond types; that is `resolve`'s job.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::DEFAULT_ADMIN_LISTEN;

/// The TOML file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// The admin listener (`/healthz`, `/readyz`, `/metrics`).
    #[serde(default)]
    pub admin: RawAdmin,
    /// Threads and runtimes.
    #[serde(default)]
    pub runtime: RawRuntime,
    /// Limits shared by all public listeners.
    #[serde(default)]
    pub limits: RawLimits,
    /// Public listeners.
    #[serde(default)]
    pub listeners: Vec<RawListener>,
    /// Authentication settings.
    #[serde(default)]
    pub auth: RawAuth,
    /// Transform settings.
    #[serde(default)]
    pub transform: RawTransform,
    /// Back-end services.
    #[serde(default)]
    pub upstreams: Vec<RawUpstream>,
    /// The route table.
    #[serde(default)]
    pub routes: Vec<RawRoute>,
    /// The access log; none without it.
    pub access_log: Option<RawAccessLog>,
    /// `/openapi.json` and `/docs` on the public listeners.
    #[serde(default)]
    pub api_docs: RawApiDocs,
    /// Cross-origin requests from browsers; refused without it.
    pub cors: Option<RawCors>,
}

/// `[cors]`: the origins whose pages may call the API (see [`crate::cors`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCors {
    /// `scheme://host[:port]` each, or `["*"]`.
    pub allow_origins: Vec<String>,
    /// Request headers a page may send (default: authorization, content-type, idempotency-key,
    /// x-request-id).
    pub allow_headers: Option<Vec<String>>,
    /// Response headers a page may read (default: x-request-id, retry-after, location, allow).
    pub expose_headers: Option<Vec<String>>,
    /// How long a browser keeps a preflight's answer, seconds (default 600).
    pub max_age_s: Option<u64>,
}

/// `[api_docs]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApiDocs {
    /// Serve them (default: yes, when the program running the gateway has a document).
    pub enabled: Option<bool>,
}

/// `[access_log]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccessLog {
    /// `-` for standard output, or a file to append to (relative to the config file).
    pub path: String,
}

impl RawConfig {
    /// Points the upstream called `name` at `endpoints`. Returns false when there is none.
    pub fn set_endpoints(&mut self, name: &str, endpoints: Vec<String>) -> bool {
        match self.upstreams.iter_mut().find(|u| u.name == name) {
            Some(u) => {
                u.endpoints = endpoints;
                true
            }
            None => false,
        }
    }
}

/// `[admin]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// Address of the admin listener.
    #[serde(default = "default_admin_listen")]
    pub listen: String,
}

impl Default for RawAdmin {
    fn default() -> Self {
        Self {
            listen: default_admin_listen(),
        }
    }
}

fn default_admin_listen() -> String {
    DEFAULT_ADMIN_LISTEN.into()
}

/// `[runtime]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRuntime {
    /// Worker threads, each with its own runtime, listeners and upstream pools; 0 = one per core.
    pub workers: Option<usize>,
    /// How sockets are driven: `auto`, `epoll` (tokio's reactor) or `io_uring`.
    pub io: Option<String>,
}

/// `[limits]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// Most open client connections per listener.
    pub max_connections: Option<usize>,
    /// Time to receive a request head, in ms.
    pub header_read_timeout_ms: Option<u64>,
    /// Longest wait for the next part of a request body, in ms.
    pub body_read_timeout_ms: Option<u64>,
    /// Longest a write to a client may wait for it to read, in ms.
    pub send_timeout_ms: Option<u64>,
    /// How long a connection hyper serves (HTTP/2 above all) may start no request, in ms.
    pub idle_timeout_ms: Option<u64>,
    /// Time to finish a TLS handshake, in ms.
    pub tls_handshake_timeout_ms: Option<u64>,
    /// Largest request head, in bytes.
    pub max_header_bytes: Option<usize>,
    /// Largest request body forwarded, in bytes.
    pub max_body_bytes: Option<u64>,
    /// Most concurrent HTTP/2 streams per client connection.
    pub h2_max_concurrent_streams: Option<u32>,
    /// Time in-flight requests get after SIGTERM, in ms.
    pub shutdown_grace_ms: Option<u64>,
    /// Relay plain HTTP/1.1 requests to HTTP/1.1 upstreams without hyper, and send requests
    /// hyper received with small bodies over the same connections (default true).
    pub http1_fast_path: Option<bool>,
}

/// `[[listeners]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListener {
    /// A name for logs and metrics.
    pub name: Option<String>,
    /// Address to bind.
    pub listen: String,
    /// TLS termination.
    pub tls: Option<RawServerTls>,
    /// Serve HTTP/1.1 only (no h2c, no h2 in ALPN).
    #[serde(default)]
    pub http1_only: bool,
}

/// `tls = { cert, key }` on a listener.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServerTls {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

/// `[auth]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    /// `[auth.jwt]`.
    pub jwt: Option<RawJwt>,
    /// `[auth.forwarder]`.
    pub forwarder: Option<RawForwarder>,
}

/// `[auth.forwarder]`: the client trusted to name the people it calls for (the front office).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawForwarder {
    /// Environment variable holding its key.
    pub key_env: Option<String>,
    /// File holding its key (trailing newline ignored).
    pub key_file: Option<PathBuf>,
}

/// `[auth.jwt]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    /// Allowed algorithms, one key family.
    pub algorithms: Vec<String>,
    /// Environment variable holding the HMAC secret.
    pub secret_env: Option<String>,
    /// File holding the HMAC secret (trailing newline ignored).
    pub secret_file: Option<PathBuf>,
    /// PEM public key file (RSA, EC, Ed25519).
    pub public_key_file: Option<PathBuf>,
    /// JWKS endpoint.
    pub jwks_url: Option<String>,
    /// Extra CA for an https JWKS endpoint.
    pub jwks_ca: Option<PathBuf>,
    /// Seconds between JWKS refreshes.
    pub jwks_refresh_s: Option<u64>,
    /// Reject tokens without `exp`.
    #[serde(default = "yes")]
    pub require_exp: bool,
    /// Clock-skew allowance, seconds.
    pub leeway_s: Option<u64>,
    /// Longest accepted token lifetime, seconds (0: any).
    pub max_lifetime_s: Option<u64>,
    /// Accepted issuers.
    pub issuer: Option<StringOrList>,
    /// Accepted audiences.
    pub audience: Option<StringOrList>,
    /// Claim → header injected on authenticated routes.
    pub claims_to_headers: Option<BTreeMap<String, String>>,
}

fn yes() -> bool {
    true
}

/// A single string or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StringOrList {
    /// One value.
    One(String),
    /// Several values.
    Many(Vec<String>),
}

impl StringOrList {
    pub(crate) fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

/// `[transform]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTransform {
    /// Largest body the JSON→XML transform reads, bytes.
    pub max_body_bytes: Option<usize>,
    /// Default XML layout: `generic` or `ballerina-compat`.
    pub xml_layout: Option<String>,
    /// Root element of the generic layout.
    pub xml_root: Option<String>,
}

/// `[[upstreams]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// Referenced by routes.
    pub name: String,
    /// `http://host:port` or `https://host:port`; several are balanced round-robin.
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// Endpoints found by resolving a DNS name instead of listed.
    pub discover: Option<RawDiscover>,
    /// `h1`, `h2`, `h2c` or `auto`.
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// Connect timeout, ms.
    pub connect_timeout_ms: Option<u64>,
    /// Time to the response head, ms.
    pub request_timeout_ms: Option<u64>,
    /// Longest wait for the next bytes of a response body, ms.
    pub read_timeout_ms: Option<u64>,
    /// How long an endpoint that failed (connect, 5xx in a row) is skipped, ms.
    pub fail_timeout_ms: Option<u64>,
    /// 5xx answers in a row after which an endpoint is skipped; 0 turns this off.
    pub eject_after_5xx: Option<u32>,
    /// Active readiness checks of each endpoint.
    pub health_check: Option<RawHealthCheck>,
    /// Idle connections kept per endpoint.
    pub pool_max_idle: Option<usize>,
    /// How long idle connections are kept, ms.
    pub pool_idle_timeout_ms: Option<u64>,
    /// Most connections open to one endpoint at once.
    pub max_connections: Option<usize>,
    /// Longest wait for a free connection at `max_connections`, ms.
    pub queue_timeout_ms: Option<u64>,
    /// TLS settings for https endpoints.
    pub tls: Option<RawClientTls>,
}

/// `discover = { dns, interval_ms, max_endpoints }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiscover {
    /// `http://name:port`: every address `name` resolves to is an endpoint on `port`.
    pub dns: String,
    /// Time between resolutions, ms.
    pub interval_ms: Option<u64>,
    /// Most endpoints taken from one resolution.
    pub max_endpoints: Option<usize>,
}

/// `health_check = { path, interval_ms, timeout_ms, unhealthy_after, healthy_after }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealthCheck {
    /// Path asked with GET; a 2xx answer is ready.
    pub path: Option<String>,
    /// Time between checks of one endpoint, ms.
    pub interval_ms: Option<u64>,
    /// Longest wait for a check's answer, ms.
    pub timeout_ms: Option<u64>,
    /// Failed checks in a row that make an endpoint unready.
    pub unhealthy_after: Option<u32>,
    /// Passed checks in a row that make it ready again.
    pub healthy_after: Option<u32>,
}

fn default_protocol() -> String {
    "h1".into()
}

/// `tls = { ca, insecure_skip_verify }` on an upstream.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClientTls {
    /// Extra CA (PEM) trusted besides the system roots.
    pub ca: Option<PathBuf>,
    /// Accept any certificate. Logged loudly.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// `[[routes]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    /// A name for logs and metrics; derived from the match when absent.
    pub name: Option<String>,
    /// What requests the route takes.
    #[serde(rename = "match")]
    pub matcher: RawMatch,
    /// Target upstream name.
    pub upstream: String,
    /// `none` or `jwt`.
    #[serde(default = "default_auth")]
    pub auth: String,
    /// Roles allowed (claim `role`), on `jwt` routes.
    pub roles: Option<Vec<String>>,
    /// `json-to-xml`.
    pub transform: Option<String>,
    /// Per-route XML layout override.
    pub xml_layout: Option<String>,
    /// Per-route XML root override.
    pub xml_root: Option<String>,
    /// `rate_limit = { by, per_second | per_minute, burst }`.
    pub rate_limit: Option<RawRateLimit>,
}

/// `rate_limit = { by = "client" | "subject", per_second | per_minute, burst }` on a route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// Whose requests share a bucket: `client` (address) or `subject` (the token's `sub`).
    pub by: String,
    /// Sustained requests per second.
    pub per_second: Option<u32>,
    /// Sustained requests per minute.
    pub per_minute: Option<u32>,
    /// Requests allowed at once after a quiet spell; defaults to the sustained count.
    pub burst: Option<u32>,
}

fn default_auth() -> String {
    "none".into()
}

/// `match = { path | path_prefix, methods }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMatch {
    /// Exact path.
    pub path: Option<String>,
    /// Path prefix.
    pub path_prefix: Option<String>,
    /// Methods; absent means any.
    pub methods: Option<Vec<String>>,
}
