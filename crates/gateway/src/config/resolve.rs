//! From [`RawConfig`] to [`Settings`]: every check, collecting all problems (file and key named)
//! before failing, and the loading of certificates, secrets and keys the file refers to.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::{HeaderName, Method};

use super::*;
use crate::forwarder::{self, Forwarder};
use crate::transform::XmlLayout;

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
        let io = match self.runtime.io.as_deref() {
            None | Some("auto") => IoDriver::Auto,
            Some("epoll") => IoDriver::Epoll,
            Some("io_uring") => IoDriver::IoUring,
            Some(other) => {
                p.add(
                    "runtime.io",
                    format!("{other:?} is not one of \"auto\", \"epoll\", \"io_uring\""),
                );
                IoDriver::Auto
            }
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
            body_read_timeout: l
                .body_read_timeout_ms
                .map_or(DEFAULT_BODY_READ_TIMEOUT, Duration::from_millis),
            send_timeout: l
                .send_timeout_ms
                .map_or(pms_net::serve::DEFAULT_SEND_TIMEOUT, Duration::from_millis),
            idle_timeout: l
                .idle_timeout_ms
                .map_or(pms_net::serve::DEFAULT_IDLE_TIMEOUT, Duration::from_millis),
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
            http1_fast_path: l.http1_fast_path.unwrap_or(true),
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
        if limits.body_read_timeout.is_zero() {
            p.add("limits.body_read_timeout_ms", "must be positive");
        }
        if limits.send_timeout.is_zero() {
            p.add("limits.send_timeout_ms", "must be positive");
        }
        if limits.idle_timeout.is_zero() {
            p.add("limits.idle_timeout_ms", "must be positive");
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

        let forwarder = self
            .auth
            .forwarder
            .as_ref()
            .and_then(|f| resolve_forwarder(&mut p, f, &rel, env));

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

        let access_log = self.access_log.and_then(|a| match a.path.as_str() {
            "-" => Some(crate::access::Target::Stdout),
            "" => {
                p.add(
                    "access_log.path",
                    "must be \"-\" (standard output) or a file",
                );
                None
            }
            path => Some(crate::access::Target::File(rel(Path::new(path)))),
        });

        let cors = self.cors.and_then(|c| {
            crate::cors::Cors::new(
                &c.allow_origins,
                c.allow_headers.as_deref(),
                c.expose_headers.as_deref(),
                c.max_age_s,
            )
            .map_err(|e| p.add("cors", e.to_string()))
            .ok()
        });

        if !p.list.is_empty() {
            return Err(ConfigError { problems: p.list });
        }
        Ok(Settings {
            admin_listen: admin_listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9901))),
            workers,
            io,
            limits,
            listeners,
            jwt,
            forwarder,
            transform,
            upstreams,
            routes,
            access_log,
            api_docs: self.api_docs.enabled.unwrap_or(true),
            openapi: None,
            spans: None,
            cors,
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

/// The secret in environment variable `var`, or a problem at `key` when it is unset or empty.
fn secret_from_env(
    p: &mut Problems<'_>,
    key: &str,
    var: &str,
    env: EnvLookup<'_>,
) -> Option<Vec<u8>> {
    match env(var) {
        Some(s) if !s.is_empty() => Some(s.into_bytes()),
        _ => {
            p.add(key, format!("environment variable {var} is unset or empty"));
            None
        }
    }
}

/// The secret in the file at `path` without its trailing line ends, or a problem at `key`.
fn secret_from_file(p: &mut Problems<'_>, key: &str, path: &Path) -> Option<Vec<u8>> {
    match std::fs::read(path) {
        Ok(mut s) => {
            while s.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                s.pop();
            }
            Some(s)
        }
        Err(e) => {
            p.add(key, format!("{}: {e}", path.display()));
            None
        }
    }
}

/// `[auth.forwarder]`: its key, from exactly one of `key_env` and `key_file`, long enough.
fn resolve_forwarder(
    p: &mut Problems<'_>,
    raw: &RawForwarder,
    rel: &dyn Fn(&Path) -> PathBuf,
    env: EnvLookup<'_>,
) -> Option<Forwarder> {
    let key = match (&raw.key_env, &raw.key_file) {
        (Some(var), None) => secret_from_env(p, "auth.forwarder.key_env", var, env)?,
        (None, Some(path)) => secret_from_file(p, "auth.forwarder.key_file", &rel(path))?,
        _ => {
            p.add("auth.forwarder", "set exactly one of key_env, key_file");
            return None;
        }
    };
    if key.len() < forwarder::MIN_KEY_LEN {
        p.add(
            "auth.forwarder",
            format!(
                "the key has {} bytes; a key needs at least {}",
                key.len(),
                forwarder::MIN_KEY_LEN
            ),
        );
        return None;
    }
    Some(Forwarder::new(&key))
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
        secret_from_env(p, "auth.jwt.secret_env", var, env).map(pms_auth::KeySource::Secret)
    } else if let Some(path) = &raw.secret_file {
        secret_from_file(p, "auth.jwt.secret_file", &rel(path)).map(pms_auth::KeySource::Secret)
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
        max_lifetime: match raw.max_lifetime_s {
            None => Some(pms_auth::verify::DEFAULT_MAX_LIFETIME),
            Some(0) => None,
            Some(s) => Some(Duration::from_secs(s)),
        },
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
    let discovery = match (&raw.discover, raw.endpoints.is_empty()) {
        (Some(_), false) => {
            p.add(
                &format!("{key}.discover"),
                "list endpoints or discover them, not both",
            );
            None
        }
        (Some(d), true) => resolve_discovery(p, &format!("{key}.discover"), d, protocol),
        (None, true) => {
            p.add(
                &format!("{key}.endpoints"),
                "list at least one endpoint, or discover them (discover = { dns = \"http://name:port\" })",
            );
            None
        }
        (None, false) => None,
    };
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
    let read_timeout = ms(raw.read_timeout_ms, DEFAULT_READ_TIMEOUT_MS);
    if read_timeout.is_zero() {
        p.add(&format!("{key}.read_timeout_ms"), "must be positive");
    }
    let fail_timeout = ms(raw.fail_timeout_ms, DEFAULT_FAIL_TIMEOUT_MS);
    if fail_timeout.is_zero() {
        p.add(&format!("{key}.fail_timeout_ms"), "must be positive");
    }
    let health_check = raw
        .health_check
        .and_then(|c| resolve_health_check(p, &format!("{key}.health_check"), c));
    let max_connections = raw.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
    if max_connections == 0 {
        p.add(&format!("{key}.max_connections"), "must be at least 1");
    }
    let queue_timeout = ms(raw.queue_timeout_ms, DEFAULT_QUEUE_TIMEOUT_MS);
    if queue_timeout.is_zero() {
        p.add(&format!("{key}.queue_timeout_ms"), "must be positive");
    }
    (p.list.len() == before).then_some(UpstreamSettings {
        name: raw.name,
        endpoints,
        discovery,
        protocol,
        connect_timeout: ms(raw.connect_timeout_ms, DEFAULT_CONNECT_TIMEOUT_MS),
        request_timeout,
        read_timeout,
        fail_timeout,
        eject_after_5xx: raw.eject_after_5xx.unwrap_or(DEFAULT_EJECT_AFTER_5XX),
        health_check,
        pool_max_idle,
        pool_idle_timeout: ms(raw.pool_idle_timeout_ms, DEFAULT_POOL_IDLE_TIMEOUT_MS),
        max_connections,
        queue_timeout,
        trust,
    })
}

fn resolve_discovery(
    p: &mut Problems<'_>,
    key: &str,
    raw: &RawDiscover,
    protocol: UpstreamProtocol,
) -> Option<Discovery> {
    let before = p.list.len();
    let dkey = format!("{key}.dns");
    let uri = match raw.dns.parse::<http::Uri>() {
        Ok(u) => Some(u),
        Err(_) => {
            p.add(&dkey, format!("{:?} is not a URL", raw.dns));
            None
        }
    };
    let mut target = None;
    if let Some(uri) = uri {
        match (uri.scheme_str(), uri.host()) {
            (Some("http"), Some(host))
                if uri.path_and_query().is_none_or(|pq| pq.as_str() == "/") =>
            {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                target = Some((host.to_owned(), uri.port_u16().unwrap_or(80)));
            }
            (Some("https"), _) => p.add(
                &dkey,
                "discovery connects to each address the name resolves to, which no certificate \
                 names: discover over http:// inside the cluster, or list the https endpoints",
            ),
            _ => p.add(
                &dkey,
                format!("{:?} must be http://name:port, with no path", raw.dns),
            ),
        }
    }
    if protocol == UpstreamProtocol::H2 {
        p.add(
            key,
            "protocol h2 needs TLS, which discovery does not do (use h2c for cleartext HTTP/2)",
        );
    }
    let interval = ms(raw.interval_ms, DEFAULT_DISCOVER_INTERVAL_MS);
    if interval.is_zero() {
        p.add(&format!("{key}.interval_ms"), "must be positive");
    }
    let max_endpoints = raw.max_endpoints.unwrap_or(DEFAULT_DISCOVER_MAX_ENDPOINTS);
    if max_endpoints == 0 {
        p.add(&format!("{key}.max_endpoints"), "must be at least 1");
    }
    let (host, port) = target?;
    (p.list.len() == before).then_some(Discovery {
        host,
        port,
        interval,
        max_endpoints,
    })
}

fn resolve_health_check(
    p: &mut Problems<'_>,
    key: &str,
    raw: RawHealthCheck,
) -> Option<HealthCheck> {
    let before = p.list.len();
    let path = raw.path.as_deref().unwrap_or("/readyz");
    let parsed = match path.parse::<http::uri::PathAndQuery>() {
        Ok(pq) if path.starts_with('/') => Some(pq),
        _ => {
            p.add(
                &format!("{key}.path"),
                format!("{path:?} is not a path (it starts with /)"),
            );
            None
        }
    };
    let interval = ms(raw.interval_ms, DEFAULT_HEALTH_CHECK_INTERVAL_MS);
    if interval.is_zero() {
        p.add(&format!("{key}.interval_ms"), "must be positive");
    }
    let timeout = ms(raw.timeout_ms, DEFAULT_HEALTH_CHECK_TIMEOUT_MS);
    if timeout.is_zero() {
        p.add(&format!("{key}.timeout_ms"), "must be positive");
    }
    let unhealthy_after = raw.unhealthy_after.unwrap_or(DEFAULT_UNHEALTHY_AFTER);
    if unhealthy_after == 0 {
        p.add(&format!("{key}.unhealthy_after"), "must be at least 1");
    }
    let healthy_after = raw.healthy_after.unwrap_or(DEFAULT_HEALTHY_AFTER);
    if healthy_after == 0 {
        p.add(&format!("{key}.healthy_after"), "must be at least 1");
    }
    (p.list.len() == before).then_some(HealthCheck {
        path: parsed?,
        interval,
        timeout,
        unhealthy_after,
        healthy_after,
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
    let rate_limit = raw
        .rate_limit
        .and_then(|r| resolve_rate_limit(p, &format!("{key}.rate_limit"), r, jwt));
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
        rate_limit,
    })
}

fn resolve_rate_limit(
    p: &mut Problems<'_>,
    key: &str,
    raw: RawRateLimit,
    jwt: bool,
) -> Option<RateLimitSettings> {
    let by = match raw.by.as_str() {
        "client" => LimitBy::Client,
        "subject" if jwt => LimitBy::Subject,
        "subject" => {
            p.add(&format!("{key}.by"), "\"subject\" needs auth = \"jwt\"");
            return None;
        }
        other => {
            p.add(
                &format!("{key}.by"),
                format!("{other:?} is not a key (expected \"client\" or \"subject\")"),
            );
            return None;
        }
    };
    let (count, window) = match (raw.per_second, raw.per_minute) {
        (Some(n), None) => (n, Duration::from_secs(1)),
        (None, Some(n)) => (n, Duration::from_secs(60)),
        _ => {
            p.add(key, "set exactly one of per_second, per_minute");
            return None;
        }
    };
    let Some(count) = std::num::NonZeroU32::new(count) else {
        p.add(
            key,
            "the rate must be at least 1 (remove the route to refuse it)",
        );
        return None;
    };
    let burst = match raw.burst.map(std::num::NonZeroU32::new) {
        None => count,
        Some(Some(b)) => b,
        Some(None) => {
            p.add(&format!("{key}.burst"), "must be at least 1");
            return None;
        }
    };
    let period = window / count.get();
    if period.is_zero() {
        p.add(key, "more than one request per nanosecond is no limit");
        return None;
    }
    Some(RateLimitSettings { by, period, burst })
}
