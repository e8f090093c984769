//! Gateway configuration: the TOML file's shape, its validation, and the resolved settings the
//! rest of the crate runs on.
//!
//! Two stages, as the style guide asks: [`RawConfig`] is what serde reads (unknown keys are errors),
//! [`RawConfig::resolve`] checks everything — collecting *every* problem with the file and the key
//! it concerns — and loads secrets and keys, producing [`Settings`]. Nothing here binds a socket
//! or starts a task. Environment variables are read through an injected lookup so tests never
//! mutate the process environment.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::{HeaderName, Method};
use serde::Deserialize;

use crate::transform::XmlLayout;

/// Default admin listener.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9901";
/// Default upstream connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 1_000;
/// Default time to wait for an upstream's response head.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Default idle connections kept per upstream endpoint.
pub const DEFAULT_POOL_MAX_IDLE: usize = 1_024;
/// Default time an idle upstream connection is kept.
pub const DEFAULT_POOL_IDLE_TIMEOUT_MS: u64 = 90_000;
/// Default largest request body forwarded (streamed bodies are cut off past it).
pub const DEFAULT_MAX_BODY_BYTES: u64 = 10 * 1024 * 1024;
/// Default largest body the JSON→XML transform reads.
pub const DEFAULT_TRANSFORM_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default root element of the generic JSON→XML layout.
pub const DEFAULT_XML_ROOT: &str = "root";
/// Default JWT clock-skew allowance.
pub const DEFAULT_LEEWAY_S: u64 = 30;

/// Everything wrong with a config file, one line per problem.
#[derive(Debug, thiserror::Error)]
#[error("{}", .problems.join("\n"))]
pub struct ConfigError {
    /// `file: key: problem` lines.
    pub problems: Vec<String>,
}

// === raw shape ===

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
}

/// `[limits]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// Most open client connections per listener.
    pub max_connections: Option<usize>,
    /// Time to receive a request head, in ms.
    pub header_read_timeout_ms: Option<u64>,
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
    fn into_vec(self) -> Vec<String> {
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
    pub endpoints: Vec<String>,
    /// `h1`, `h2`, `h2c` or `auto`.
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// Connect timeout, ms.
    pub connect_timeout_ms: Option<u64>,
    /// Time to the response head, ms.
    pub request_timeout_ms: Option<u64>,
    /// Idle connections kept per endpoint.
    pub pool_max_idle: Option<usize>,
    /// How long idle connections are kept, ms.
    pub pool_idle_timeout_ms: Option<u64>,
    /// TLS settings for https endpoints.
    pub tls: Option<RawClientTls>,
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

// === resolved settings ===

/// The validated, loaded configuration.
#[derive(Debug)]
pub struct Settings {
    /// Admin listener address.
    pub admin_listen: SocketAddr,
    /// Worker threads (at least one).
    pub workers: usize,
    /// Shared limits.
    pub limits: Limits,
    /// Public listeners.
    pub listeners: Vec<ListenerSettings>,
    /// JWT verification, when configured.
    pub jwt: Option<JwtSettings>,
    /// Transform settings.
    pub transform: TransformSettings,
    /// Upstreams, in file order; routes refer to them by index.
    pub upstreams: Vec<UpstreamSettings>,
    /// Routes, in file order.
    pub routes: Vec<RouteSettings>,
}

/// Resolved `[limits]`.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most open client connections per listener.
    pub max_connections: usize,
    /// Time to receive a request head.
    pub header_read_timeout: Duration,
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
    /// Endpoints (scheme + authority).
    pub endpoints: Vec<http::uri::Uri>,
    /// Protocol.
    pub protocol: UpstreamProtocol,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Time to the response head.
    pub request_timeout: Duration,
    /// Idle connections kept per endpoint.
    pub pool_max_idle: usize,
    /// Idle connection lifetime.
    pub pool_idle_timeout: Duration,
    /// Trust for https endpoints.
    pub trust: pms_net::tls::Trust,
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
}

/// Looks up environment variables; tests pass a map instead of mutating the process.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads the process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Reads, parses and resolves `path`. Relative paths inside the file are taken relative to the
/// file's directory.
///
/// # Errors
/// Every problem found, each naming the file and key.
pub fn load(path: &Path, env: EnvLookup<'_>) -> Result<Settings, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        problems: vec![format!("{file}: cannot read: {e}")],
    })?;
    let raw = parse(&text, &file)?;
    let base = path.parent().unwrap_or(Path::new("."));
    raw.resolve(&file, base, env)
}

/// Parses TOML text; `file` names it in errors.
///
/// # Errors
/// The TOML error with line, column and key.
pub fn parse(text: &str, file: &str) -> Result<RawConfig, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError {
        problems: vec![format!("{file}: {}", e.to_string().trim_end())],
    })
}

struct Problems<'a> {
    file: &'a str,
    list: Vec<String>,
}

impl Problems<'_> {
    fn add(&mut self, key: &str, problem: impl std::fmt::Display) {
        self.list.push(format!("{}: {key}: {problem}", self.file));
    }
}

fn ms(v: Option<u64>, default: u64) -> Duration {
    Duration::from_millis(v.unwrap_or(default))
}

impl RawConfig {
    /// Validates and loads referenced files and secrets.
    ///
    /// # Errors
    /// Every problem found.
    pub fn resolve(
        self,
        file: &str,
        base: &Path,
        env: EnvLookup<'_>,
    ) -> Result<Settings, ConfigError> {
        let mut p = Problems {
            file,
            list: Vec::new(),
        };
        let rel = |path: &Path| -> PathBuf {
            if path.is_absolute() {
                path.to_owned()
            } else {
                base.join(path)
            }
        };

        let admin_listen = parse_addr(&mut p, "admin.listen", &self.admin.listen);
        let workers = match self.runtime.workers {
            None | Some(0) => std::thread::available_parallelism().map_or(1, |n| n.get()),
            Some(n) if n > 1024 => {
                p.add("runtime.workers", format!("{n} is more than 1024"));
                1
            }
            Some(n) => n,
        };

        let l = &self.limits;
        let limits = Limits {
            max_connections: l
                .max_connections
                .unwrap_or(pms_net::serve::DEFAULT_MAX_CONNECTIONS),
            header_read_timeout: l.header_read_timeout_ms.map_or(
                pms_net::serve::DEFAULT_HEADER_READ_TIMEOUT,
                Duration::from_millis,
            ),
            tls_handshake_timeout: l.tls_handshake_timeout_ms.map_or(
                pms_net::serve::DEFAULT_TLS_HANDSHAKE_TIMEOUT,
                Duration::from_millis,
            ),
            max_header_bytes: l
                .max_header_bytes
                .unwrap_or(pms_net::serve::DEFAULT_MAX_HEADER_BYTES),
            max_body_bytes: l.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES),
            h2_max_concurrent_streams: l
                .h2_max_concurrent_streams
                .unwrap_or(pms_net::serve::DEFAULT_H2_MAX_CONCURRENT_STREAMS),
            shutdown_grace: l
                .shutdown_grace_ms
                .map_or(pms_net::serve::DEFAULT_GRACE, Duration::from_millis),
        };
        if limits.max_connections == 0 {
            p.add("limits.max_connections", "must be at least 1");
        }
        if limits.max_header_bytes < 1024 {
            p.add("limits.max_header_bytes", "must be at least 1024");
        }
        if limits.header_read_timeout.is_zero() {
            p.add("limits.header_read_timeout_ms", "must be positive");
        }

        if self.listeners.is_empty() {
            p.add("listeners", "at least one [[listeners]] entry is required");
        }
        let mut listeners = Vec::new();
        let mut names = HashSet::new();
        for (i, raw) in self.listeners.iter().enumerate() {
            let key = format!("listeners[{i}]");
            let name = raw.name.clone().unwrap_or_else(|| format!("listener{i}"));
            if !names.insert(name.clone()) {
                p.add(
                    &format!("{key}.name"),
                    format!("duplicate listener name {name:?}"),
                );
            }
            let listen = parse_addr(&mut p, &format!("{key}.listen"), &raw.listen);
            let tls = raw.tls.as_ref().and_then(|t| {
                let alpn: &[&[u8]] = if raw.http1_only {
                    &[pms_net::ALPN_HTTP11]
                } else {
                    &[pms_net::ALPN_H2, pms_net::ALPN_HTTP11]
                };
                match pms_net::tls::server_config(&rel(&t.cert), &rel(&t.key), alpn) {
                    Ok(c) => Some(std::sync::Arc::new(c)),
                    Err(e) => {
                        p.add(&format!("{key}.tls"), e);
                        None
                    }
                }
            });
            if let Some(listen) = listen {
                listeners.push(ListenerSettings {
                    name,
                    listen,
                    tls,
                    http1_only: raw.http1_only,
                });
            }
        }

        let jwt_declared = self.auth.jwt.is_some();
        let jwt = self
            .auth
            .jwt
            .map(|j| resolve_jwt(&mut p, j, &rel, env))
            .and_then(|j| j);

        let transform = TransformSettings {
            max_body_bytes: self
                .transform
                .max_body_bytes
                .unwrap_or(DEFAULT_TRANSFORM_MAX_BODY_BYTES),
            layout: resolve_layout(
                &mut p,
                "transform",
                self.transform.xml_layout.as_deref(),
                self.transform.xml_root.as_deref(),
                &XmlLayout::Generic {
                    root: DEFAULT_XML_ROOT.into(),
                },
            ),
        };

        let mut upstreams = Vec::new();
        let mut upstream_names = HashSet::new();
        for (i, raw) in self.upstreams.into_iter().enumerate() {
            let key = format!("upstreams[{i}]");
            if !upstream_names.insert(raw.name.clone()) {
                p.add(
                    &format!("{key}.name"),
                    format!("duplicate upstream name {:?}", raw.name),
                );
            }
            if let Some(u) = resolve_upstream(&mut p, &key, raw, &rel) {
                upstreams.push(u);
            }
        }

        let mut routes = Vec::new();
        for (i, raw) in self.routes.into_iter().enumerate() {
            let key = format!("routes[{i}]");
            if let Some(r) = resolve_route(
                &mut p,
                &key,
                raw,
                &upstreams,
                jwt_declared,
                &transform.layout,
            ) {
                routes.push(r);
            }
        }
        if routes.is_empty() && p.list.is_empty() {
            p.add("routes", "at least one [[routes]] entry is required");
        }

        if !p.list.is_empty() {
            return Err(ConfigError { problems: p.list });
        }
        Ok(Settings {
            admin_listen: admin_listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9901))),
            workers,
            limits,
            listeners,
            jwt,
            transform,
            upstreams,
            routes,
        })
    }
}

fn parse_addr(p: &mut Problems<'_>, key: &str, value: &str) -> Option<SocketAddr> {
    match value.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            p.add(
                key,
                format!("{value:?} is not an IP:port address (for example \"127.0.0.1:8080\")"),
            );
            None
        }
    }
}

fn resolve_layout(
    p: &mut Problems<'_>,
    key: &str,
    layout: Option<&str>,
    root: Option<&str>,
    default: &XmlLayout,
) -> XmlLayout {
    let default_root = match default {
        XmlLayout::Generic { root } => root.as_str(),
        XmlLayout::BallerinaCompat => DEFAULT_XML_ROOT,
    };
    let root = root.unwrap_or(default_root);
    if !crate::transform::is_xml_name(root) {
        p.add(
            &format!("{key}.xml_root"),
            format!("{root:?} is not a valid XML element name"),
        );
    }
    match layout {
        None => match (default, root) {
            (XmlLayout::Generic { .. }, r) => XmlLayout::Generic { root: r.into() },
            (XmlLayout::BallerinaCompat, _) => XmlLayout::BallerinaCompat,
        },
        Some("generic") => XmlLayout::Generic { root: root.into() },
        Some("ballerina-compat") => XmlLayout::BallerinaCompat,
        Some(other) => {
            p.add(
                &format!("{key}.xml_layout"),
                format!("{other:?} is not a layout (expected \"generic\" or \"ballerina-compat\")"),
            );
            default.clone()
        }
    }
}

fn resolve_jwt(
    p: &mut Problems<'_>,
    raw: RawJwt,
    rel: &dyn Fn(&Path) -> PathBuf,
    env: EnvLookup<'_>,
) -> Option<JwtSettings> {
    let before = p.list.len();
    let mut algorithms = Vec::new();
    for (i, name) in raw.algorithms.iter().enumerate() {
        match pms_auth::parse_algorithm(name) {
            Ok(a) => algorithms.push(a),
            Err(e) => p.add(&format!("auth.jwt.algorithms[{i}]"), e),
        }
    }
    if raw.algorithms.is_empty() {
        p.add("auth.jwt.algorithms", "list at least one algorithm");
    }
    let sources = [
        raw.secret_env.is_some(),
        raw.secret_file.is_some(),
        raw.public_key_file.is_some(),
        raw.jwks_url.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if sources != 1 {
        p.add(
            "auth.jwt",
            "set exactly one of secret_env, secret_file, public_key_file, jwks_url",
        );
    }
    let keys = if let Some(var) = &raw.secret_env {
        match env(var) {
            Some(s) if !s.is_empty() => Some(pms_auth::KeySource::Secret(s.into_bytes())),
            _ => {
                p.add(
                    "auth.jwt.secret_env",
                    format!("environment variable {var} is unset or empty"),
                );
                None
            }
        }
    } else if let Some(path) = &raw.secret_file {
        match std::fs::read(rel(path)) {
            Ok(mut s) => {
                while s.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    s.pop();
                }
                Some(pms_auth::KeySource::Secret(s))
            }
            Err(e) => {
                p.add("auth.jwt.secret_file", format!("{}: {e}", path.display()));
                None
            }
        }
    } else if let Some(path) = &raw.public_key_file {
        match std::fs::read(rel(path)) {
            Ok(pem) => Some(pms_auth::KeySource::PublicKeyPem(pem)),
            Err(e) => {
                p.add(
                    "auth.jwt.public_key_file",
                    format!("{}: {e}", path.display()),
                );
                None
            }
        }
    } else if let Some(url) = &raw.jwks_url {
        let trust = match &raw.jwks_ca {
            Some(ca) => pms_net::tls::Trust::SystemAnd(rel(ca)),
            None => pms_net::tls::Trust::System,
        };
        let made = pms_net::tls::client_config(&trust, &[])
            .map_err(|e| e.to_string())
            .and_then(|tls| {
                pms_auth::jwks::Jwks::new(
                    url,
                    tls,
                    raw.jwks_refresh_s
                        .map_or(pms_auth::jwks::DEFAULT_REFRESH, Duration::from_secs),
                    pms_auth::jwks::DEFAULT_MIN_REFETCH,
                )
                .map_err(|e| e.to_string())
            });
        match made {
            Ok(j) => Some(pms_auth::KeySource::Jwks(std::sync::Arc::new(j))),
            Err(e) => {
                p.add("auth.jwt.jwks_url", e);
                None
            }
        }
    } else {
        None
    };

    let mut claims_to_headers = Vec::new();
    let map = raw.claims_to_headers.unwrap_or_else(|| {
        BTreeMap::from([
            ("sub".to_string(), "X-UserId".to_string()),
            ("role".to_string(), "X-UserRole".to_string()),
        ])
    });
    for (claim, header) in map {
        match HeaderName::from_bytes(header.as_bytes()) {
            Ok(h) => claims_to_headers.push((claim, h)),
            Err(_) => p.add(
                &format!("auth.jwt.claims_to_headers.{claim}"),
                format!("{header:?} is not a valid header name"),
            ),
        }
    }

    let keys = keys?;
    let verifier = pms_auth::VerifierConfig {
        algorithms,
        keys,
        require_exp: raw.require_exp,
        leeway: Duration::from_secs(raw.leeway_s.unwrap_or(DEFAULT_LEEWAY_S)),
        issuers: raw.issuer.map(StringOrList::into_vec),
        audiences: raw.audience.map(StringOrList::into_vec),
    };
    if p.list.len() == before {
        // Let the verifier check family/key agreement now, so a bad pairing fails at load time.
        if let Err(e) = pms_auth::Verifier::new(verifier.clone()) {
            p.add("auth.jwt", e);
        }
    }
    (p.list.len() == before).then_some(JwtSettings {
        verifier,
        claims_to_headers,
    })
}

fn resolve_upstream(
    p: &mut Problems<'_>,
    key: &str,
    raw: RawUpstream,
    rel: &dyn Fn(&Path) -> PathBuf,
) -> Option<UpstreamSettings> {
    let before = p.list.len();
    let protocol = match raw.protocol.as_str() {
        "h1" => UpstreamProtocol::H1,
        "h2" => UpstreamProtocol::H2,
        "h2c" => UpstreamProtocol::H2c,
        "auto" => UpstreamProtocol::Auto,
        other => {
            p.add(
                &format!("{key}.protocol"),
                format!("{other:?} is not a protocol (expected h1, h2, h2c or auto)"),
            );
            UpstreamProtocol::H1
        }
    };
    if raw.endpoints.is_empty() {
        p.add(&format!("{key}.endpoints"), "list at least one endpoint");
    }
    let mut endpoints = Vec::new();
    for (i, e) in raw.endpoints.iter().enumerate() {
        let ekey = format!("{key}.endpoints[{i}]");
        let uri: http::Uri = match e.parse() {
            Ok(u) => u,
            Err(_) => {
                p.add(&ekey, format!("{e:?} is not a URL"));
                continue;
            }
        };
        let scheme = uri.scheme_str();
        if !matches!(scheme, Some("http" | "https")) || uri.host().is_none() {
            p.add(
                &ekey,
                format!("{e:?} must be http://host:port or https://host:port"),
            );
            continue;
        }
        if uri.path_and_query().is_some_and(|pq| pq.as_str() != "/") {
            p.add(
                &ekey,
                format!("{e:?} must not carry a path; routes forward the request path"),
            );
            continue;
        }
        match (protocol, scheme) {
            (UpstreamProtocol::H2, Some("http")) => p.add(
                &ekey,
                "protocol h2 needs an https:// endpoint (use h2c for cleartext HTTP/2)",
            ),
            (UpstreamProtocol::H2c, Some("https")) => p.add(
                &ekey,
                "protocol h2c needs an http:// endpoint (use h2 for HTTP/2 over TLS)",
            ),
            _ => {}
        }
        endpoints.push(uri);
    }
    let tls = raw.tls.unwrap_or_default();
    let trust = if tls.insecure_skip_verify {
        if tls.ca.is_some() {
            p.add(
                &format!("{key}.tls"),
                "ca and insecure_skip_verify exclude each other",
            );
        }
        pms_net::tls::Trust::InsecureSkipVerify
    } else if let Some(ca) = &tls.ca {
        let ca = rel(ca);
        if let Err(e) = pms_net::tls::load_certs(&ca) {
            p.add(&format!("{key}.tls.ca"), e);
        }
        pms_net::tls::Trust::SystemAnd(ca)
    } else {
        pms_net::tls::Trust::System
    };
    let pool_max_idle = raw.pool_max_idle.unwrap_or(DEFAULT_POOL_MAX_IDLE);
    let request_timeout = ms(raw.request_timeout_ms, DEFAULT_REQUEST_TIMEOUT_MS);
    if request_timeout.is_zero() {
        p.add(&format!("{key}.request_timeout_ms"), "must be positive");
    }
    (p.list.len() == before).then_some(UpstreamSettings {
        name: raw.name,
        endpoints,
        protocol,
        connect_timeout: ms(raw.connect_timeout_ms, DEFAULT_CONNECT_TIMEOUT_MS),
        request_timeout,
        pool_max_idle,
        pool_idle_timeout: ms(raw.pool_idle_timeout_ms, DEFAULT_POOL_IDLE_TIMEOUT_MS),
        trust,
    })
}

fn resolve_route(
    p: &mut Problems<'_>,
    key: &str,
    raw: RawRoute,
    upstreams: &[UpstreamSettings],
    have_jwt: bool,
    default_layout: &XmlLayout,
) -> Option<RouteSettings> {
    let before = p.list.len();
    let path = match (&raw.matcher.path, &raw.matcher.path_prefix) {
        (Some(path), None) => PathMatch::Exact(path.clone()),
        (None, Some(prefix)) => PathMatch::Prefix(prefix.clone()),
        _ => {
            p.add(
                &format!("{key}.match"),
                "set exactly one of path, path_prefix",
            );
            PathMatch::Prefix("/".into())
        }
    };
    let (PathMatch::Exact(s) | PathMatch::Prefix(s)) = &path;
    if !s.starts_with('/') {
        p.add(
            &format!("{key}.match"),
            format!("{s:?} must start with '/'"),
        );
    }
    let mut methods = Vec::new();
    for (i, m) in raw.matcher.methods.iter().flatten().enumerate() {
        match Method::from_bytes(m.to_ascii_uppercase().as_bytes()) {
            Ok(m) => methods.push(m),
            Err(_) => p.add(
                &format!("{key}.match.methods[{i}]"),
                format!("{m:?} is not a method"),
            ),
        }
    }
    let upstream = upstreams.iter().position(|u| u.name == raw.upstream);
    if upstream.is_none() {
        p.add(
            &format!("{key}.upstream"),
            format!(
                "no upstream named {:?} (or it has errors of its own)",
                raw.upstream
            ),
        );
    }
    let jwt = match raw.auth.as_str() {
        "none" => false,
        "jwt" => {
            if !have_jwt {
                p.add(
                    &format!("{key}.auth"),
                    "\"jwt\" needs an [auth.jwt] section",
                );
            }
            true
        }
        other => {
            p.add(
                &format!("{key}.auth"),
                format!("{other:?} is not an auth mode (expected \"none\" or \"jwt\")"),
            );
            false
        }
    };
    let roles = raw.roles.unwrap_or_default();
    if !roles.is_empty() && !jwt {
        p.add(&format!("{key}.roles"), "roles need auth = \"jwt\"");
    }
    let json_to_xml = match raw.transform.as_deref() {
        None => {
            if raw.xml_layout.is_some() || raw.xml_root.is_some() {
                p.add(key, "xml_layout/xml_root need transform = \"json-to-xml\"");
            }
            None
        }
        Some("json-to-xml") => Some(resolve_layout(
            p,
            key,
            raw.xml_layout.as_deref(),
            raw.xml_root.as_deref(),
            default_layout,
        )),
        Some(other) => {
            p.add(
                &format!("{key}.transform"),
                format!("{other:?} is not a transform (expected \"json-to-xml\")"),
            );
            None
        }
    };
    let name = raw.name.unwrap_or_else(|| match &path {
        PathMatch::Exact(s) => s.clone(),
        PathMatch::Prefix(s) => format!("{s}*"),
    });
    (p.list.len() == before).then(|| RouteSettings {
        name,
        path,
        methods,
        upstream: upstream.unwrap_or(0),
        jwt,
        roles,
        json_to_xml,
    })
}

#[cfg(test)]
mod tests;
