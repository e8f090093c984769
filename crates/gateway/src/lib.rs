//! The PMS API gateway: a reverse proxy in front of the park-management services.
//!
//! Layout:
//! - [`config`]: the TOML file, its validation (every problem, with file and key) and the resolved
//!   [`Settings`].
//! - [`router`]: which route takes a request (exact beats prefix, longest prefix wins).
//! - [`jwt`]: bearer tokens, roles, identity headers (stripped on every route, set from claims).
//! - [`headers`]: hop-by-hop removal, `X-Forwarded-*`, `Via`, request ids.
//! - [`transform`]: the streaming JSON→XML converter.
//! - [`upstream`]: one pooled client per upstream (h1, h2 over TLS, h2c, ALPN auto).
//! - `proxy`: the request path tying the above together.
//! - [`respond`]: the JSON error responses.
//! - [`metrics`] and `admin`: Prometheus metrics, `/healthz`, `/readyz`, `/metrics`.
//! - [`body`]: the streamed body type and the size cap.
//!
//! Serving itself (TLS, ALPN, h2c, limits, drain) is `pms_net::serve`, shared with the other
//! components. Why a bound-listener API ([`Bound`] then [`run`]): the caller binds (and can use
//! port 0 in tests), and a config error is reported before anything is bound.

#![deny(missing_docs)]

mod admin;
pub mod body;
pub mod config;
pub mod headers;
pub mod jwt;
pub mod metrics;
mod proxy;
pub mod respond;
pub mod router;
pub mod transform;
pub mod upstream;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pms_net::serve::{self, Drain, ServeConfig};
use tokio::net::TcpListener;

pub use config::Settings;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({name}): {source}")]
    Bind {
        /// Listener name.
        name: String,
        /// Address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// An upstream's TLS settings could not be loaded.
    #[error("upstream {name}: {source}")]
    Upstream {
        /// Upstream name.
        name: String,
        /// What failed.
        source: pms_net::TlsError,
    },
    /// The JWT verifier refused its settings.
    #[error("auth.jwt: {0}")]
    Jwt(#[from] pms_auth::verify::ConfigError),
}

/// The gateway's sockets, bound before anything runs.
#[derive(Debug)]
pub struct Bound {
    public: Vec<(config::ListenerSettings, TcpListener)>,
    admin: TcpListener,
}

impl Bound {
    /// Binds the admin listener and every public listener of `settings`.
    ///
    /// # Errors
    /// The first address that cannot be bound.
    pub async fn bind(settings: &Settings) -> Result<Self, StartError> {
        let bind = |name: String, addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Bind { name, addr, source })
        };
        let admin = bind("admin".into(), settings.admin_listen).await?;
        let mut public = Vec::new();
        for l in &settings.listeners {
            public.push((l.clone(), bind(l.name.clone(), l.listen).await?));
        }
        Ok(Self { public, admin })
    }

    /// The bound public addresses, by listener name, in config order.
    pub fn public_addrs(&self) -> Vec<(String, SocketAddr)> {
        self.public
            .iter()
            .filter_map(|(s, l)| Some((s.name.clone(), l.local_addr().ok()?)))
            .collect()
    }

    /// The bound admin address.
    ///
    /// # Panics
    /// Never for a bound TCP listener.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
            .local_addr()
            .expect("bound listener has an address")
    }
}

/// Runs the gateway on `bound` until `shutdown` resolves, then drains: readiness goes false, the
/// listeners stop accepting, in-flight requests get `limits.shutdown_grace`, then it returns.
///
/// # Errors
/// When upstream or JWT settings cannot be turned into clients and verifiers.
pub async fn run(
    settings: Settings,
    bound: Bound,
    shutdown: impl Future<Output = ()>,
) -> Result<Drain, StartError> {
    let metrics = Arc::new(metrics::Metrics::new());
    let mut upstreams = Vec::new();
    for u in &settings.upstreams {
        let (requests, opened) = metrics.upstream(&u.name);
        upstreams.push(
            upstream::Upstream::new(u, requests, opened).map_err(|source| {
                StartError::Upstream {
                    name: u.name.clone(),
                    source,
                }
            })?,
        );
    }
    let jwt = jwt::JwtAuth::new(settings.jwt.as_ref())?;
    if let Some(pms_auth::KeySource::Jwks(jwks)) = settings.jwt.as_ref().map(|j| &j.verifier.keys) {
        let jwks = jwks.clone();
        tokio::spawn(async move {
            // Prime the cache; failures are logged and retried on demand.
            let _ = jwks.refresh().await;
        });
    }
    let route_metrics = settings
        .routes
        .iter()
        .map(|r| metrics.route(&r.name))
        .collect();
    let shared = Arc::new(proxy::Shared {
        router: router::Router::new(settings.routes),
        route_metrics,
        unrouted: metrics.unrouted(),
        upstreams,
        jwt,
        max_body_bytes: settings.limits.max_body_bytes,
        transform_max_body_bytes: settings.transform.max_body_bytes,
    });

    let ready = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let limits = &settings.limits;
    let mut tasks = Vec::new();
    for (ls, listener) in bound.public {
        let config = ServeConfig {
            tls: ls.tls.clone(),
            http1_only: ls.http1_only,
            max_connections: limits.max_connections,
            header_read_timeout: limits.header_read_timeout,
            tls_handshake_timeout: limits.tls_handshake_timeout,
            max_header_bytes: limits.max_header_bytes,
            h2_max_concurrent_streams: limits.h2_max_concurrent_streams,
            grace: limits.shutdown_grace,
        };
        let shared = shared.clone();
        let observer = Arc::new(metrics.listener(&ls.name));
        tracing::info!(listener = %ls.name, addr = ?listener.local_addr().ok(), tls = ls.tls.is_some(), "listening");
        tasks.push(tokio::spawn(serve::serve(
            listener,
            config,
            move |conn| proxy::Proxy {
                shared: shared.clone(),
                conn,
            },
            observer,
            stopped(stop_rx.clone()),
        )));
    }

    let (admin_stop_tx, admin_stop_rx) = tokio::sync::watch::channel(false);
    let admin = admin::Admin {
        ready: ready.clone(),
        metrics: metrics.clone(),
    };
    let admin_task = tokio::spawn(serve::serve(
        bound.admin,
        ServeConfig {
            grace: std::time::Duration::from_secs(1),
            ..ServeConfig::default()
        },
        move |_| admin.clone(),
        Arc::new(serve::NoObserver),
        stopped(admin_stop_rx),
    ));

    ready.store(true, Ordering::Release);
    shutdown.await;
    tracing::info!("shutting down: readiness off, draining");
    ready.store(false, Ordering::Release);
    let _ = stop_tx.send(true);
    let mut outcome = Drain::Complete;
    for t in tasks {
        if !matches!(t.await, Ok(Drain::Complete)) {
            outcome = Drain::TimedOut;
        }
    }
    let _ = admin_stop_tx.send(true);
    let _ = admin_task.await;
    Ok(outcome)
}
