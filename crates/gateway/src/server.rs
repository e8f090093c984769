//! Starting and stopping the gateway: the sockets bound before anything runs ([`Bound`]), the
//! shared state built from the settings, the worker threads ([`worker`](crate::worker)), the
//! admin listener, the tasks beside them (readiness checks, DNS discovery, the rate limits'
//! pruning, the access log's writer), and the drain at shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pms_net::serve::{self, Drain, ServeConfig};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::apidocs::ApiDocs;
use crate::discovery::{self, Tasks};
use crate::start_error::StartError;
use crate::worker::{stopped, worker, Common, WorkerListener};
use crate::{access, admin, config, jwt, metrics, openfiles, ratelimit, router, Settings};

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
    // Readiness checks, resolvers and pruning, stopped when this returns, however it returns.
    let (upstreams, mut beside) = watch_upstreams(&settings, &metrics).await?;
    let rate_limits = Arc::new(ratelimit::RateLimits::new(
        &settings.routes,
        settings.forwarder.clone(),
        &metrics,
    ));
    beside.extend(prune(&rate_limits));
    let admin_listener = TcpListener::from_std(bound.admin).map_err(StartError::Worker)?;
    let (access_log, access_writer) = start_access_log(bound.access_log, &metrics)?;
    let workers = settings.workers.max(1);
    let sets = deal(
        bound.public,
        workers,
        settings.limits.max_connections,
        &metrics,
    );
    let route_metrics = settings
        .routes
        .iter()
        .map(|r| metrics.route(&r.name))
        .collect();
    let router = Arc::new(router::Router::new(settings.routes));
    let api_docs = match settings.openapi {
        Some(source) if settings.api_docs => Some(Arc::new(ApiDocs::new(source, router.clone()))),
        _ => None,
    };
    let common = Arc::new(Common {
        metrics: metrics.clone(),
        route_metrics,
        api_docs,
        router,
        rate_limits,
        jwt,
        access_log,
        upstreams,
        limits: settings.limits.clone(),
        transform_max_body_bytes: settings.transform.max_body_bytes,
        workers,
        io: settings.io,
        cors: settings.cors.clone().map(Arc::new),
        spans: settings.spans.clone(),
    });

    let (stop_tx, stop_rx) = watch::channel(false);
    let started = match start_workers(&common, sets, &stop_rx).await {
        Ok(started) => started,
        Err((e, started)) => {
            let _ = stop_tx.send(true);
            for done in started {
                let _ = done.await;
            }
            finish_access_log(access_writer).await;
            return Err(e);
        }
    };

    let ready = Arc::new(AtomicBool::new(false));
    let (admin_stop_tx, admin_stop_rx) = watch::channel(false);
    let admin = admin::Admin {
        ready: ready.clone(),
        metrics: metrics.clone(),
    };
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
    tracing::info!("gateway started");
    shutdown.await;
    tracing::info!("shutting down: readiness off, draining");
    ready.store(false, Ordering::Release);
    let _ = stop_tx.send(true);
    let mut outcome = Drain::Complete;
    for done in started {
        if !matches!(done.await, Ok(Drain::Complete)) {
            outcome = Drain::TimedOut;
        }
    }
    let _ = admin_stop_tx.send(true);
    let _ = admin_task.await;
    finish_access_log(access_writer).await;
    drop(beside);
    Ok(outcome)
}

/// Per upstream, its endpoint watch and whether discovery may change it; the tasks that keep
/// them (readiness checks, resolvers). The discovered upstreams' first resolutions run together:
/// a slow DNS delays the start once.
async fn watch_upstreams(
    settings: &Settings,
    metrics: &Arc<metrics::Metrics>,
) -> Result<
    (
        Vec<(watch::Receiver<Arc<discovery::EndpointSet>>, bool)>,
        Vec<Tasks>,
    ),
    StartError,
> {
    let watched = futures_util::future::join_all(
        settings
            .upstreams
            .iter()
            .map(|u| discovery::watch(u, metrics)),
    )
    .await;
    let mut upstreams = Vec::new();
    let mut tasks = Vec::new();
    for (u, w) in settings.upstreams.iter().zip(watched) {
        let w = w.map_err(|error| StartError::Upstream {
            name: u.name.clone(),
            error,
        })?;
        upstreams.push((w.current, u.discovery.is_some()));
        tasks.push(w.tasks);
    }
    Ok((upstreams, tasks))
}

/// The task that forgets full rate-limit buckets, when a route has a limit.
fn prune(limits: &Arc<ratelimit::RateLimits>) -> Option<Tasks> {
    let limits = limits.clone();
    limits.any().then(|| {
        Tasks(vec![tokio::spawn(async move {
            let mut every = tokio::time::interval(ratelimit::PRUNE_EVERY);
            loop {
                every.tick().await;
                limits.prune();
            }
        })])
    })
}

/// A running access log and its writer thread.
type AccessWriter = Option<(access::Writer, Option<JoinHandle<()>>)>;

/// Starts the access log's writer, and its reopening on `SIGUSR1` when it writes to a file.
fn start_access_log(
    out: Option<access::Output>,
    metrics: &metrics::Metrics,
) -> Result<(Option<access::AccessLog>, AccessWriter), StartError> {
    let Some(out) = out else {
        return Ok((None, None));
    };
    let file = out.is_file();
    let (log, writer) =
        access::AccessLog::start(out, metrics.access_log_dropped()).map_err(StartError::Worker)?;
    let signals = if file {
        reopen_on_signal(writer.reopen())
    } else {
        None
    };
    Ok((Some(log), Some((writer, signals))))
}

/// Deals each listener's sockets out to the workers, with the listener's connection permits and
/// metrics shared by its sockets.
fn deal(
    public: Vec<(config::ListenerSettings, Vec<std::net::TcpListener>)>,
    workers: usize,
    max_connections: usize,
    metrics: &metrics::Metrics,
) -> Vec<Vec<WorkerListener>> {
    let mut sets: Vec<Vec<WorkerListener>> = (0..workers).map(|_| Vec::new()).collect();
    for (ls, sockets) in public {
        let permits = Arc::new(tokio::sync::Semaphore::new(max_connections.max(1)));
        let observer = Arc::new(metrics.listener(&ls.name));
        tracing::info!(listener = %ls.name, addr = ?sockets.first().and_then(|s| s.local_addr().ok()), tls = ls.tls.is_some(), workers, "listening");
        for (w, socket) in sockets.into_iter().enumerate() {
            sets[w % workers].push((ls.clone(), socket, permits.clone(), observer.clone()));
        }
    }
    sets
}

/// Starts a thread per worker and waits until each has started; each one's drain outcome to
/// come. On a failure, the first error and the workers that did start, to be stopped.
async fn start_workers(
    common: &Arc<Common>,
    sets: Vec<Vec<WorkerListener>>,
    stop_rx: &watch::Receiver<bool>,
) -> Result<Vec<oneshot::Receiver<Drain>>, (StartError, Vec<oneshot::Receiver<Drain>>)> {
    let mut started = Vec::new();
    let mut failure = None;
    for (w, set) in sets.into_iter().enumerate() {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let common = common.clone();
        let stop_rx = stop_rx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("pms-gw-{w}"))
            .spawn(move || worker(common, set, stop_rx, ready_tx, done_tx));
        if let Err(e) = spawned {
            failure = Some(StartError::Worker(e));
            break;
        }
        started.push((ready_rx, done_rx));
    }
    let mut done = Vec::new();
    for (ready, finished) in started {
        match ready.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(_) => {
                failure = failure.or(Some(StartError::Worker(std::io::Error::other(
                    "worker exited early",
                ))))
            }
        }
        done.push(finished);
    }
    match failure {
        None => Ok(done),
        Some(e) => Err((e, done)),
    }
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
