//! One upstream as one worker holds it: hyper's client ([`Upstream`]) and, when the fast path
//! can relay to it, the fast path's pool over the same endpoints, both built from one
//! [`EndpointSet`]. A worker holds one per upstream in [`Backends`]. When discovery publishes a
//! new set, the worker builds a new one and swaps it in ([`follow`]); requests under way finish
//! on the one they started with, whose idle connections close when the last of them ends.

use std::sync::Arc;

use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::watch;

use crate::discovery::EndpointSet;
use crate::h1up::pool::Pool;
use crate::metrics::Metrics;
use crate::upstream::Upstream;

/// One upstream's client and pool, for one worker.
pub(crate) struct Backend {
    /// hyper's client: HTTP/2, TLS, streamed bodies, and whatever the fast path declines.
    pub(crate) upstream: Upstream,
    /// The fast path's HTTP/1.1 connections, when it serves this upstream.
    pool: Option<Arc<Pool>>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("upstream", &self.upstream)
            .field("fast_path", &self.pool.is_some())
            .finish()
    }
}

/// How a worker builds its backends.
#[derive(Debug, Clone)]
pub(crate) struct Build {
    /// Worker threads: each holds this share of an upstream's `max_connections`.
    pub(crate) workers: usize,
    /// Where the upstreams' counters live.
    pub(crate) metrics: Arc<Metrics>,
    /// Whether the fast path is on.
    pub(crate) fast_path: bool,
}

impl Backend {
    /// The client and pool for `set`.
    ///
    /// # Errors
    /// When the upstream's TLS trust cannot be loaded.
    pub(crate) fn new(set: &EndpointSet, build: &Build) -> Result<Self, pms_net::TlsError> {
        let s = &set.settings;
        let counters = build.metrics.upstream(&s.name);
        let upstream = Upstream::new(s, build.workers, counters, Arc::clone(&set.verdicts))?;
        let pool = if build.fast_path {
            Pool::new(s, &upstream).map(Arc::new)
        } else {
            None
        };
        Ok(Self { upstream, pool })
    }

    /// The fast path's pool, if it has one and the upstream speaks HTTP/1.1 (see
    /// [`Pool::speaks_http1`]).
    pub(crate) async fn http1(&self) -> Option<&Arc<Pool>> {
        let pool = self.pool.as_ref()?;
        pool.speaks_http1().await.then_some(pool)
    }
}

/// One worker's backends, by upstream index.
#[derive(Debug)]
pub(crate) struct Backends {
    current: Vec<ArcSwap<Backend>>,
    /// Requests the fast path's bridge sent (`proxy::bridge`).
    pub(crate) bridged: Counter,
}

impl Backends {
    /// `backends`, by upstream index.
    pub(crate) fn new(backends: Vec<Backend>, bridged: Counter) -> Self {
        Self {
            current: backends.into_iter().map(ArcSwap::from_pointee).collect(),
            bridged,
        }
    }

    /// Upstream `index`'s backend as it is now (an index from a route, so always in range).
    pub(crate) fn get(&self, index: usize) -> Arc<Backend> {
        self.current[index].load_full()
    }

    fn replace(&self, index: usize, backend: Backend) {
        if let Some(cell) = self.current.get(index) {
            cell.store(Arc::new(backend));
        }
    }
}

/// Rebuilds upstream `index`'s backend in `backends` each time `sets` publishes a new set, until
/// its sender is gone. Runs on the worker's runtime, so the new pools are the worker's own.
pub(crate) async fn follow(
    backends: Arc<impl AsRef<Backends>>,
    index: usize,
    mut sets: watch::Receiver<Arc<EndpointSet>>,
    build: Build,
) {
    while sets.changed().await.is_ok() {
        let set = Arc::clone(&sets.borrow_and_update());
        match Backend::new(&set, &build) {
            Ok(backend) => (*backends).as_ref().replace(index, backend),
            Err(e) => tracing::error!(
                upstream = %set.settings.name,
                error = %e,
                "the upstream's new endpoints cannot be used; its requests stay with the old ones"
            ),
        }
    }
}

impl AsRef<Backends> for Backends {
    fn as_ref(&self) -> &Backends {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use http::StatusCode;
    use http_body_util::{BodyExt, Empty};
    use pms_net::serve::ServeConfig;

    use super::*;
    use crate::discovery::tests::{discovered, Script};
    use crate::discovery::watch_with;

    /// The `Host` the back-end behind `backend` saw for a GET: which endpoint served it.
    async fn served_by(backend: &Backend) -> String {
        let uri = backend.upstream.target(None).expect("an endpoint");
        let req = http::Request::get(uri)
            .body(Empty::new().map_err(|e| match e {}).boxed_unsync())
            .expect("a request");
        let resp = backend.upstream.send(req).await.expect("an answer");
        assert_eq!(resp.status(), StatusCode::OK);
        let body = resp.into_body().collect().await.expect("a body").to_bytes();
        let doc: serde_json::Value = serde_json::from_slice(&body).expect("json");
        doc["headers"]["host"][0]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    #[tokio::test]
    async fn requests_go_to_the_endpoints_discovery_finds_now() {
        let a = pms_testkit::inspect::spawn(ServeConfig::default(), StatusCode::OK).await;
        let b = pms_testkit::inspect::spawn(ServeConfig::default(), StatusCode::OK).await;
        let script = Script::new(vec![Ok(vec![a.addr]), Ok(vec![a.addr]), Ok(vec![b.addr])]);
        let metrics = Arc::new(Metrics::new());
        let watched = watch_with(&discovered(""), &metrics, script.lookup())
            .await
            .expect("watching");
        let build = Build {
            workers: 1,
            metrics,
            fast_path: true,
        };
        let mut sets = watched.current.clone();
        let first = Backend::new(&sets.borrow_and_update(), &build).expect("a backend");
        let backends = Arc::new(Backends::new(vec![first], Counter::default()));
        let following = tokio::spawn(follow(backends.clone(), 0, sets, build));

        let host = |addr: SocketAddr| addr.to_string();
        assert_eq!(served_by(&backends.get(0)).await, host(a.addr));
        // A request that took the backend before the change, as one under way does.
        let old = backends.get(0);
        pms_testkit::assert_eventually("the backend follows the new set", 500, || async {
            served_by(&backends.get(0)).await == host(b.addr)
        })
        .await;
        // It finishes where it started: the old backend works until its last user lets go.
        assert_eq!(served_by(&old).await, host(a.addr));
        following.abort();
    }
}
