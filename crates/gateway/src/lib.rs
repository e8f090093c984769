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
//! - `health`: which endpoint of an upstream a request goes to, and which to skip for now
//!   (failed connects, 5xx in a row, failed readiness checks); `probe`: the readiness checks.
//! - `proxy`: the request path tying the above together.
//! - [`respond`]: the JSON error responses.
//! - [`metrics`] and `admin`: Prometheus metrics, `/healthz`, `/readyz`, `/metrics`.
//! - [`body`]: the streamed body type, the size cap and the upstream read timeout.
//! - [`access`]: the access log (a JSON line per answered request, written off the request path).
//! - `fast`: the HTTP/1.1 fast path, relaying plain requests without hyper on either hop.
//! - `openfiles`: the connection caps fitted into the open-file limit at start.
//!
//! Serving itself (TLS, ALPN, h2c, limits, drain) is `pms_net::serve`, shared with the other
//! components. Why thread-per-core workers (see [`run`]): profiling the first, multi-threaded
//! version under wrk showed a fifth of the gateway's CPU in the kernel's scheduler, waking tasks
//! across threads; keeping each connection, its requests and its upstream connection on one
//! thread removes that. Why a bound-listener API ([`Bound`] then [`run`]): the caller binds (and can use
//! port 0 in tests), and a config error is reported before anything is bound.

#![deny(missing_docs)]

pub mod access;
mod admin;
mod backend;
pub mod body;
pub mod config;
mod discovery;
mod fast;
pub mod headers;
mod health;
pub mod jwt;
pub mod metrics;
mod openfiles;
mod pipeline;
mod probe;
mod proxy;
mod ratelimit;
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
use tokio::task::JoinHandle;

pub use config::Settings;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({name}): {error}")]
    Bind {
        /// Listener name.
        name: String,
        /// Address.
        addr: SocketAddr,
        /// The OS error.
        error: std::io::Error,
    },
    /// An upstream's TLS settings could not be loaded.
    #[error("upstream {name}: {error}")]
    Upstream {
        /// Upstream name.
        name: String,
        /// What failed.
        error: pms_net::TlsError,
    },
    /// The JWT verifier refused its settings.
    #[error("auth.jwt: {0}")]
    Jwt(pms_auth::verify::ConfigError),
    /// A worker thread or its runtime could not be started.
    #[error("worker: {0}")]
    Worker(std::io::Error),
    /// The access log could not be opened.
    #[error(transparent)]
    AccessLog(#[from] access::OpenError),
}

/// The gateway's sockets, bound before anything runs: the admin listener, and for each public
/// listener one socket per worker on the same port (`SO_REUSEPORT`).
#[derive(Debug)]
pub struct Bound {
    public: Vec<(config::ListenerSettings, Vec<std::net::TcpListener>)>,
    admin: std::net::TcpListener,
    /// The access log, opened first: a path that cannot be written stops the gateway before
    /// it binds anything.
    access_log: Option<access::Output>,
}

impl Bound {
    /// Opens the access log, if any, then binds the admin listener and every public listener
    /// of `settings`.
    ///
    /// # Errors
    /// An access log that cannot be opened, or the first address that cannot be bound.
    pub fn bind(settings: &Settings) -> Result<Self, StartError> {
        let access_log = settings
            .access_log
            .as_ref()
            .map(access::Output::open)
            .transpose()?;
        let bind = |name: &str, addr: SocketAddr, n: usize| {
            pms_net::listen::bind_many(addr, n).map_err(|error| StartError::Bind {
                name: name.to_string(),
                addr,
                error,
            })
        };
        let admin = bind("admin", settings.admin_listen, 1)?.remove(0);
        let mut public = Vec::new();
        for l in &settings.listeners {
            public.push((l.clone(), bind(&l.name, l.listen, settings.workers)?));
        }
        Ok(Self {
            public,
            admin,
            access_log,
        })
    }

    /// The bound public addresses, by listener name, in config order.
    pub fn public_addrs(&self) -> Vec<(String, SocketAddr)> {
        self.public
            .iter()
            .filter_map(|(s, l)| Some((s.name.clone(), l.first()?.local_addr().ok()?)))
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

/// What every worker shares.
struct Common {
    metrics: Arc<metrics::Metrics>,
    router: Arc<router::Router>,
    route_metrics: Vec<metrics::RouteMetrics>,
    rate_limits: Arc<ratelimit::RateLimits>,
    jwt: Arc<jwt::JwtAuth>,
    access_log: Option<access::AccessLog>,
    /// Per upstream, by index: its endpoints now, and whether they may change (discovery).
    upstreams: Vec<(
        tokio::sync::watch::Receiver<Arc<discovery::EndpointSet>>,
        bool,
    )>,
    limits: config::Limits,
    transform_max_body_bytes: usize,
    /// Worker threads: each holds this share of an upstream's `max_connections`.
    workers: usize,
    /// How the workers drive their sockets.
    io: config::IoDriver,
}

/// One worker's listeners: settings, socket, listener-wide permits, metrics observer.
type WorkerListener = (
    config::ListenerSettings,
    std::net::TcpListener,
    Arc<tokio::sync::Semaphore>,
    Arc<metrics::ListenerObserver>,
);

/// Runs the gateway on `bound` until `shutdown` resolves, then drains: readiness goes false, the
/// listeners stop accepting, in-flight requests get `limits.shutdown_grace`, then it returns.
///
/// Public traffic is served by `settings.workers` threads, each with a single-threaded runtime,
/// its own socket per listener and its own upstream pools (thread-per-core: a request and its
/// upstream connection stay on one thread, with no cross-thread wake-ups). The admin listener and
/// the JWKS refresh run on the caller's runtime.
///
/// Client and upstream connection caps that would not fit in the open-file limit together are
/// lowered first (logged as a warning), so a client is never accepted without a socket left for
/// its upstream request.
///
/// # Errors
/// When upstream or JWT settings cannot be turned into clients and verifiers, or a worker thread
/// cannot start.
pub async fn run(
    mut settings: Settings,
    bound: Bound,
    shutdown: impl Future<Output = ()>,
) -> Result<Drain, StartError> {
    let sockets = bound.public.iter().map(|(_, s)| s.len()).sum::<usize>() + 1;
    openfiles::fit(&mut settings, sockets);
    let metrics = Arc::new(metrics::Metrics::new());
    let jwt = Arc::new(jwt::JwtAuth::new(settings.jwt.as_ref()).map_err(StartError::Jwt)?);
    if let Some(pms_auth::KeySource::Jwks(jwks)) = settings.jwt.as_ref().map(|j| &j.verifier.keys) {
        let jwks = jwks.clone();
        tokio::spawn(async move {
            // Prime the cache; failures are logged and retried on demand.
            let _ = jwks.refresh().await;
        });
    }
    // Readiness checks and resolvers, stopped when this returns, however it returns. The
    // discovered upstreams' first resolutions run together: a slow DNS delays the start once.
    let mut watchers = Vec::new();
    let mut upstreams = Vec::new();
    let watched = futures_util::future::join_all(
        settings
            .upstreams
            .iter()
            .map(|u| discovery::watch(u, &metrics)),
    )
    .await;
    for (u, w) in settings.upstreams.iter().zip(watched) {
        match w {
            Ok(w) => {
                upstreams.push((w.current, u.discovery.is_some()));
                watchers.push(w.tasks);
            }
            Err(error) => {
                return Err(StartError::Upstream {
                    name: u.name.clone(),
                    error,
                })
            }
        }
    }
    let route_metrics = settings
        .routes
        .iter()
        .map(|r| metrics.route(&r.name))
        .collect();
    let (access_log, access_writer) = match bound.access_log {
        Some(out) => {
            let file = out.is_file();
            let (log, writer) = access::AccessLog::start(out, metrics.access_log_dropped())
                .map_err(StartError::Worker)?;
            let signals = if file {
                reopen_on_signal(writer.reopen())
            } else {
                None
            };
            (Some(log), Some((writer, signals)))
        }
        None => (None, None),
    };
    let rate_limits = Arc::new(ratelimit::RateLimits::new(&settings.routes, &metrics));
    if rate_limits.any() {
        let limits = rate_limits.clone();
        watchers.push(discovery::Tasks(vec![tokio::spawn(async move {
            let mut every = tokio::time::interval(ratelimit::PRUNE_EVERY);
            loop {
                every.tick().await;
                limits.prune();
            }
        })]));
    }
    let common = Arc::new(Common {
        metrics: metrics.clone(),
        router: Arc::new(router::Router::new(settings.routes)),
        route_metrics,
        rate_limits,
        jwt,
        access_log,
        upstreams,
        limits: settings.limits.clone(),
        transform_max_body_bytes: settings.transform.max_body_bytes,
        workers: settings.workers.max(1),
        io: settings.io,
    });

    // Deal each listener's sockets out to the workers.
    let workers = settings.workers.max(1);
    let mut sets: Vec<Vec<WorkerListener>> = (0..workers).map(|_| Vec::new()).collect();
    for (ls, sockets) in bound.public {
        let permits = Arc::new(tokio::sync::Semaphore::new(
            settings.limits.max_connections.max(1),
        ));
        let observer = Arc::new(metrics.listener(&ls.name));
        tracing::info!(listener = %ls.name, addr = ?sockets.first().and_then(|s| s.local_addr().ok()), tls = ls.tls.is_some(), workers, "listening");
        for (w, socket) in sockets.into_iter().enumerate() {
            sets[w % workers].push((ls.clone(), socket, permits.clone(), observer.clone()));
        }
    }

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut started = Vec::new();
    for (w, set) in sets.into_iter().enumerate() {
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let common = common.clone();
        let stop_rx = stop_rx.clone();
        std::thread::Builder::new()
            .name(format!("pms-gw-{w}"))
            .spawn(move || worker(common, set, stop_rx, ready_tx, done_tx))
            .map_err(StartError::Worker)?;
        started.push((ready_rx, done_rx));
    }
    let mut failure = None;
    for (ready, _) in &mut started {
        match ready.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = Some(e),
            Err(_) => {
                failure = Some(StartError::Worker(std::io::Error::other(
                    "worker exited early",
                )))
            }
        }
    }
    if let Some(e) = failure {
        let _ = stop_tx.send(true);
        for (_, done) in started {
            let _ = done.await;
        }
        finish_access_log(access_writer).await;
        return Err(e);
    }

    let ready = Arc::new(AtomicBool::new(false));
    let (admin_stop_tx, admin_stop_rx) = tokio::sync::watch::channel(false);
    let admin = admin::Admin {
        ready: ready.clone(),
        metrics: metrics.clone(),
    };
    let admin_listener = TcpListener::from_std(bound.admin).map_err(StartError::Worker)?;
    let admin_task = tokio::spawn(serve::serve(
        admin_listener,
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
    for (_, done) in started {
        if !matches!(done.await, Ok(Drain::Complete)) {
            outcome = Drain::TimedOut;
        }
    }
    let _ = admin_stop_tx.send(true);
    let _ = admin_task.await;
    finish_access_log(access_writer).await;
    Ok(outcome)
}

/// Has the access log's writer write what is queued and end, and stops its `SIGUSR1` task.
async fn finish_access_log(writer: Option<(access::Writer, Option<JoinHandle<()>>)>) {
    if let Some((writer, signals)) = writer {
        if let Some(task) = signals {
            task.abort();
        }
        let _ = tokio::task::spawn_blocking(move || writer.finish()).await;
    }
}

/// Has the access log open its file again on every `SIGUSR1` (log rotation by renaming, as
/// nginx's `-s reopen`), until the task is aborted. The handler is in place when this returns,
/// before any request is served: a `SIGUSR1` without one would end the process.
fn reopen_on_signal(reopen: access::Reopen) -> Option<JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::user_defined1()) {
        Ok(mut usr1) => Some(tokio::spawn(async move {
            while usr1.recv().await.is_some() {
                tracing::info!("SIGUSR1: reopening the access log");
                reopen.ask();
            }
        })),
        Err(e) => {
            tracing::warn!(error = %e, "cannot handle SIGUSR1: the access log cannot be reopened");
            None
        }
    }
}

/// Resolves once the watch says stop.
async fn stopped(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// A worker thread: its own single-threaded runtime, upstream pools and serve loops.
fn worker(
    common: Arc<Common>,
    set: Vec<WorkerListener>,
    stop_rx: tokio::sync::watch::Receiver<bool>,
    ready_tx: tokio::sync::oneshot::Sender<Result<(), StartError>>,
    done_tx: tokio::sync::oneshot::Sender<Drain>,
) {
    let ring = match common.io {
        config::IoDriver::Epoll => None,
        io => match pms_uring::install(pms_uring::DEFAULT_ENTRIES) {
            Ok(ring) => Some(ring),
            Err(e) if io == config::IoDriver::Auto => {
                tracing::warn!(error = %e, "io_uring unavailable; this worker drives its sockets with epoll (runtime.io = \"epoll\" says so quietly)");
                None
            }
            Err(e) => {
                let e = std::io::Error::new(e.kind(), format!("runtime.io = \"io_uring\": {e}"));
                let _ = ready_tx.send(Err(StartError::Worker(e)));
                return;
            }
        },
    };
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    if ring.is_some() {
        // What the connections queued on the ring goes to the kernel in one call, when the
        // worker has nothing left to run.
        builder.on_thread_park(pms_uring::before_park);
    }
    let rt = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready_tx.send(Err(StartError::Worker(e)));
            return;
        }
    };
    rt.block_on(async move {
        if let Some(ring) = ring {
            tokio::spawn(async move {
                if let Err(e) = pms_uring::drive(ring).await {
                    tracing::error!(error = %e, "io_uring completions can no longer be taken");
                }
            });
        }
        let build = backend::Build {
            workers: common.workers,
            metrics: common.metrics.clone(),
            fast_path: common.limits.http1_fast_path,
        };
        let mut backends = Vec::new();
        let mut sets = Vec::new();
        for (current, changes) in &common.upstreams {
            let mut current = current.clone();
            let set = Arc::clone(&current.borrow_and_update());
            match backend::Backend::new(&set, &build) {
                Ok(b) => backends.push(b),
                Err(error) => {
                    let _ = ready_tx.send(Err(StartError::Upstream {
                        name: set.settings.name.clone(),
                        error,
                    }));
                    return;
                }
            }
            sets.push(changes.then_some(current));
        }
        let counters = common.metrics.fast_path();
        let shared = Arc::new(pipeline::Shared {
            router: common.router.clone(),
            route_metrics: common.route_metrics.clone(),
            rate_limits: common.rate_limits.clone(),
            unrouted: common.metrics.unrouted(),
            backends: backend::Backends::new(backends, counters.bridged.clone()),
            jwt: common.jwt.clone(),
            max_body_bytes: common.limits.max_body_bytes,
            transform_max_body_bytes: common.transform_max_body_bytes,
            body_read_timeout: common.limits.body_read_timeout,
            access_log: common.access_log.clone(),
        });
        for (index, sets) in sets.into_iter().enumerate() {
            if let Some(sets) = sets {
                tokio::spawn(backend::follow(shared.clone(), index, sets, build.clone()));
            }
        }
        let limits = &common.limits;
        let fast = limits.http1_fast_path.then(|| {
            Arc::new(fast::FastPath::new(
                shared.clone(),
                counters,
                limits.header_read_timeout,
                limits.max_header_bytes,
            ))
        });
        let mut tasks = Vec::new();
        for (ls, socket, permits, observer) in set {
            let listener = match TcpListener::from_std(socket) {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(StartError::Worker(e)));
                    return;
                }
            };
            let config = ServeConfig {
                tls: ls.tls.clone(),
                http1_only: ls.http1_only,
                max_connections: limits.max_connections,
                header_read_timeout: limits.header_read_timeout,
                tls_handshake_timeout: limits.tls_handshake_timeout,
                send_timeout: limits.send_timeout,
                idle_timeout: limits.idle_timeout,
                max_header_bytes: limits.max_header_bytes,
                h2_max_concurrent_streams: limits.h2_max_concurrent_streams,
                grace: limits.shutdown_grace,
                shared_permits: Some(permits),
            };
            let shared = shared.clone();
            tasks.push(tokio::spawn(serve::serve_with(
                listener,
                config,
                move |conn| proxy::Proxy {
                    shared: shared.clone(),
                    conn,
                },
                fast.clone(),
                observer,
                stopped(stop_rx.clone()),
            )));
        }
        let _ = ready_tx.send(Ok(()));
        let mut outcome = Drain::Complete;
        for t in tasks {
            if !matches!(t.await, Ok(Drain::Complete)) {
                outcome = Drain::TimedOut;
            }
        }
        let _ = done_tx.send(outcome);
    });
}
