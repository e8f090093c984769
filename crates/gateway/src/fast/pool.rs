//! The fast path's upstream connections: plain TCP to the cleartext HTTP/1.1 endpoints of one
//! upstream, one pool per worker thread. A connection is checked out for one request and comes
//! back once its response has been read to the end, so a client idling between requests holds
//! no upstream connection. Connections take their permit from the same per-endpoint semaphore
//! as the hyper client's, so `max_connections` holds for both paths together. A request that
//! finds the endpoint at its cap takes whichever comes first: a connection checked back in, or
//! a permit (up to the queue timeout).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::config::{UpstreamProtocol, UpstreamSettings};
use crate::upstream::{Saturated, SendError, Upstream};

/// One endpoint: where to connect, what to send as `Host`, and its idle connections.
struct Endpoint {
    /// `host:port`, for connecting and for the `Host` header.
    authority: String,
    /// `http://host:port`, as errors name it.
    key: String,
    /// The endpoint's connection permits (shared with the hyper client).
    slot: Arc<Semaphore>,
    /// Idle connections, most recently used last.
    idle: Mutex<Vec<Conn>>,
    /// Signalled when a connection is checked in (for requests waiting at the cap).
    returned: Notify,
}

/// A checked-out upstream connection.
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    /// Whether it was opened for this request (a reused one may have been closed by the
    /// upstream just before it was written to).
    pub(super) fresh: bool,
    /// Index of its endpoint in the pool.
    pub(super) endpoint: usize,
    idle_since: Instant,
    _permit: OwnedSemaphorePermit,
}

impl Conn {
    /// The endpoint's `host:port`.
    pub(super) fn authority<'a>(&self, pool: &'a Pool) -> &'a str {
        &pool.endpoints[self.endpoint].authority
    }
}

/// The fast path's connections to one upstream, for one worker.
pub(super) struct Pool {
    endpoints: Vec<Endpoint>,
    next: AtomicUsize,
    max_idle: usize,
    idle_timeout: Duration,
    connect_timeout: Duration,
    queue_timeout: Duration,
    /// This worker's share of the cap, for the "busy" error.
    limit: usize,
    opened: Counter,
}

impl Pool {
    /// A pool for `s`, or `None` when the fast path cannot serve it (HTTP/2 or TLS endpoints:
    /// those requests stay with the hyper client).
    pub(super) fn new(s: &UpstreamSettings, upstream: &Upstream) -> Option<Self> {
        if s.protocol != UpstreamProtocol::H1 && s.protocol != UpstreamProtocol::Auto {
            return None;
        }
        let mut endpoints = Vec::with_capacity(s.endpoints.len());
        for uri in &s.endpoints {
            if uri.scheme_str() != Some("http") {
                return None;
            }
            let authority = uri.authority()?.as_str().to_owned();
            let (key, slot) = upstream.slot(uri)?;
            endpoints.push(Endpoint {
                authority,
                key,
                slot,
                idle: Mutex::new(Vec::new()),
                returned: Notify::new(),
            });
        }
        if endpoints.is_empty() {
            return None;
        }
        Some(Self {
            endpoints,
            next: AtomicUsize::new(0),
            max_idle: s.pool_max_idle,
            idle_timeout: s.pool_idle_timeout,
            connect_timeout: s.connect_timeout,
            queue_timeout: s.queue_timeout,
            limit: upstream.worker_limit(),
            opened: upstream.opened_counter(),
        })
    }

    /// A connection to the next endpoint (round-robin): an idle one that is still open, or a
    /// new one once the endpoint has a permit free.
    ///
    /// # Errors
    /// [`SendError::Busy`] when no permit came within the queue timeout, [`SendError::Connect`]
    /// when connecting failed or timed out.
    pub(super) async fn checkout(&self) -> Result<Conn, SendError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.endpoints.len();
        let ep = &self.endpoints[i];
        let deadline = tokio::time::Instant::now() + self.queue_timeout;
        loop {
            while let Some(conn) = self.pop_idle(ep) {
                if conn.idle_since.elapsed() < self.idle_timeout && still_open(&conn.stream) {
                    return Ok(conn);
                }
            }
            let permit = match ep.slot.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(tokio::sync::TryAcquireError::Closed) => {
                    return Err(SendError::Failed("connection permits closed".into()))
                }
                Err(tokio::sync::TryAcquireError::NoPermits) => {
                    // At the cap: a connection coming back serves as well as a new one.
                    tokio::select! {
                        p = ep.slot.clone().acquire_owned() => match p {
                            Ok(p) => p,
                            Err(closed) => return Err(SendError::Failed(closed.to_string())),
                        },
                        () = ep.returned.notified() => continue,
                        () = tokio::time::sleep_until(deadline) => {
                            return Err(SendError::Busy(Saturated {
                                endpoint: ep.key.clone(),
                                limit: self.limit,
                                waited: self.queue_timeout,
                            }))
                        }
                    }
                }
            };
            return self.connect(i, permit).await;
        }
    }

    /// A new connection to endpoint `i`, bypassing idle ones (for a retry).
    pub(super) async fn open(&self, i: usize) -> Result<Conn, SendError> {
        let ep = &self.endpoints[i];
        let permit =
            match tokio::time::timeout(self.queue_timeout, ep.slot.clone().acquire_owned()).await {
                Ok(Ok(p)) => p,
                Ok(Err(closed)) => return Err(SendError::Failed(closed.to_string())),
                Err(_) => {
                    return Err(SendError::Busy(Saturated {
                        endpoint: ep.key.clone(),
                        limit: self.limit,
                        waited: self.queue_timeout,
                    }))
                }
            };
        self.connect(i, permit).await
    }

    /// Connects to endpoint `i` under `permit`.
    async fn connect(&self, i: usize, permit: OwnedSemaphorePermit) -> Result<Conn, SendError> {
        let ep = &self.endpoints[i];
        let stream = match tokio::time::timeout(
            self.connect_timeout,
            TcpStream::connect(ep.authority.as_str()),
        )
        .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(SendError::Connect(format!("{}: {e}", ep.key))),
            Err(_) => {
                return Err(SendError::Connect(format!(
                    "{}: no connection within {:?}",
                    ep.key, self.connect_timeout
                )))
            }
        };
        let _ = stream.set_nodelay(true);
        self.opened.inc();
        Ok(Conn {
            stream,
            fresh: true,
            endpoint: i,
            idle_since: Instant::now(),
            _permit: permit,
        })
    }

    /// Keeps `conn` for the next request (its response was read to the end and it may stay
    /// open), unless the endpoint already has `pool_max_idle` idle connections.
    pub(super) fn checkin(&self, mut conn: Conn) {
        let ep = &self.endpoints[conn.endpoint];
        conn.fresh = false;
        conn.idle_since = Instant::now();
        if let Ok(mut idle) = ep.idle.lock() {
            if idle.len() < self.max_idle {
                idle.push(conn);
            }
        }
        ep.returned.notify_one();
    }

    fn pop_idle(&self, ep: &Endpoint) -> Option<Conn> {
        ep.idle.lock().ok()?.pop()
    }
}

/// Whether an idle connection is still open: nothing to read yet. End of stream means the
/// upstream closed it; data means it sent something unasked, and it cannot be trusted either.
fn still_open(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}
