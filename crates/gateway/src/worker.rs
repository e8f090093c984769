//! One worker thread: its single-threaded runtime (with an io_uring where asked and allowed), its
//! own upstream clients and pools, the fast path, and a serve loop per public listener socket it
//! was dealt. A request and the upstream connection serving it never leave the thread.

use std::sync::Arc;

use pms_net::serve::{self, Drain, ServeConfig};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use crate::pipeline::Shared;
use crate::start_error::StartError;
use crate::{access, backend, config, discovery, fast, jwt, metrics, proxy, ratelimit, router};

/// What every worker shares.
pub(crate) struct Common {
    pub(crate) metrics: Arc<metrics::Metrics>,
    pub(crate) router: Arc<router::Router>,
    /// `/openapi.json` and `/docs`, when served.
    pub(crate) api_docs: Option<Arc<crate::apidocs::ApiDocs>>,
    pub(crate) route_metrics: Vec<metrics::RouteMetrics>,
    pub(crate) rate_limits: Arc<ratelimit::RateLimits>,
    pub(crate) jwt: Arc<jwt::JwtAuth>,
    pub(crate) access_log: Option<access::AccessLog>,
    /// Per upstream, by index: its endpoints now, and whether they may change (discovery).
    pub(crate) upstreams: Vec<(watch::Receiver<Arc<discovery::EndpointSet>>, bool)>,
    pub(crate) limits: config::Limits,
    pub(crate) transform_max_body_bytes: usize,
    /// Worker threads: each holds this share of an upstream's `max_connections`.
    pub(crate) workers: usize,
    /// How the workers drive their sockets.
    pub(crate) io: config::IoDriver,
    /// Cross-origin requests from browsers, when allowed.
    pub(crate) cors: Option<Arc<crate::cors::Cors>>,
    /// Where the gateway's own spans go, when they are exported.
    pub(crate) spans: Option<crate::spans::Spans>,
}

/// One worker's listeners: settings, socket, listener-wide permits, metrics observer.
pub(crate) type WorkerListener = (
    config::ListenerSettings,
    std::net::TcpListener,
    Arc<tokio::sync::Semaphore>,
    Arc<metrics::ListenerObserver>,
);

/// A worker thread's body: says on `ready_tx` whether it could start, serves until `stop_rx`
/// says stop, and says on `done_tx` how the drain went.
pub(crate) fn worker(
    common: Arc<Common>,
    set: Vec<WorkerListener>,
    stop_rx: watch::Receiver<bool>,
    ready_tx: oneshot::Sender<Result<(), StartError>>,
    done_tx: oneshot::Sender<Drain>,
) {
    let (rt, ring) = match runtime(common.io) {
        Ok(built) => built,
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
        let tasks = match start(&common, set, &stop_rx) {
            Ok(tasks) => tasks,
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                return;
            }
        };
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

/// The worker's runtime, and its io_uring when `io` asks for one and the kernel allows it.
fn runtime(
    io: config::IoDriver,
) -> std::io::Result<(tokio::runtime::Runtime, Option<pms_uring::Ring>)> {
    let ring = match io {
        config::IoDriver::Epoll => None,
        io => match pms_uring::install(pms_uring::DEFAULT_ENTRIES) {
            Ok(ring) => Some(ring),
            Err(e) if io == config::IoDriver::Auto => {
                tracing::warn!(error = %e, "io_uring unavailable; this worker drives its sockets with epoll (runtime.io = \"epoll\" says so quietly)");
                None
            }
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("runtime.io = \"io_uring\": {e}"),
                ))
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
    Ok((builder.build()?, ring))
}

/// Builds the worker's backends and starts a serve loop per listener socket; the loops' tasks.
fn start(
    common: &Common,
    set: Vec<WorkerListener>,
    stop_rx: &watch::Receiver<bool>,
) -> Result<Vec<tokio::task::JoinHandle<Drain>>, StartError> {
    let build = backend::Build {
        workers: common.workers,
        metrics: common.metrics.clone(),
        fast_path: common.limits.http1_fast_path,
    };
    let mut backends = Vec::new();
    let mut followed = Vec::new();
    for (current, changes) in &common.upstreams {
        let mut current = current.clone();
        let set = Arc::clone(&current.borrow_and_update());
        let b = backend::Backend::new(&set, &build).map_err(|error| StartError::Upstream {
            name: set.settings.name.clone(),
            error,
        })?;
        backends.push(b);
        followed.push(changes.then_some(current));
    }
    let counters = common.metrics.fast_path();
    let shared = Arc::new(Shared {
        router: common.router.clone(),
        api_docs: common.api_docs.clone(),
        route_metrics: common.route_metrics.clone(),
        rate_limits: common.rate_limits.clone(),
        unrouted: common.metrics.unrouted(),
        backends: backend::Backends::new(backends, counters.bridged.clone()),
        jwt: common.jwt.clone(),
        max_body_bytes: common.limits.max_body_bytes,
        transform_max_body_bytes: common.transform_max_body_bytes,
        body_read_timeout: common.limits.body_read_timeout,
        access_log: common.access_log.clone(),
        cors: common.cors.clone(),
        spans: common.spans.clone(),
    });
    for (index, sets) in followed.into_iter().enumerate() {
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
        let listener = TcpListener::from_std(socket).map_err(StartError::Worker)?;
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
    Ok(tasks)
}

/// Resolves once the watch says stop.
pub(crate) async fn stopped(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
