//! The fast path's upstream connections: plain TCP to the cleartext HTTP/1.1 endpoints of one
//! upstream, one pool per worker thread. A connection is checked out for one request and comes
//! back once its response has been read to the end, so a client idling between requests holds
//! no upstream connection. Connections take their permit from the same per-endpoint semaphore
//! as the hyper client's, so `max_connections` holds for both paths together. A request that
//! finds the endpoint at its cap queues: a connection checked back in goes straight to the
//! request that has waited longest, or a freed permit lets it connect, whichever comes first,
//! up to the queue timeout. (Handing returned connections to whoever asks next instead starved
//! some waiters past the timeout under the stress test.)

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

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
    /// Idle connections and the requests waiting for one.
    state: Mutex<Idle>,
}

/// An endpoint's idle connections (most recently used last) and its queue of requests waiting
/// at the cap (oldest first).
#[derive(Default)]
struct Idle {
    conns: Vec<Conn>,
    waiters: VecDeque<oneshot::Sender<Conn>>,
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
                state: Mutex::new(Idle::default()),
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
        let waiting = {
            let Ok(mut state) = ep.state.lock() else {
                return Err(SendError::Failed("upstream pool poisoned".into()));
            };
            while let Some(conn) = state.conns.pop() {
                if conn.idle_since.elapsed() < self.idle_timeout && still_open(&conn.stream) {
                    return Ok(conn);
                }
            }
            match ep.slot.clone().try_acquire_owned() {
                Ok(permit) => Err(permit),
                Err(tokio::sync::TryAcquireError::Closed) => {
                    return Err(SendError::Failed("connection permits closed".into()))
                }
                Err(tokio::sync::TryAcquireError::NoPermits) => {
                    let (tx, rx) = oneshot::channel();
                    state.waiters.push_back(tx);
                    Ok(rx)
                }
            }
        };
        let permit = match waiting {
            Err(permit) => permit,
            // At the cap: the first of a returned connection or a freed permit.
            Ok(mut returned) => tokio::select! {
                conn = &mut returned => match conn {
                    Ok(conn) => return Ok(conn),
                    Err(_) => return Err(SendError::Failed("upstream pool closed".into())),
                },
                p = ep.slot.clone().acquire_owned() => {
                    // Leaving the queue: a connection already on its way comes back.
                    returned.close();
                    if let Ok(conn) = returned.try_recv() {
                        self.checkin(conn);
                    }
                    match p {
                        Ok(p) => p,
                        Err(closed) => return Err(SendError::Failed(closed.to_string())),
                    }
                },
                () = tokio::time::sleep(self.queue_timeout) => {
                    returned.close();
                    if let Ok(conn) = returned.try_recv() {
                        return Ok(conn);
                    }
                    return Err(SendError::Busy(Saturated {
                        endpoint: ep.key.clone(),
                        limit: self.limit,
                        waited: self.queue_timeout,
                    }));
                }
            },
        };
        self.connect(i, permit).await
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

    /// Gives `conn` (its response was read to the end and it may stay open) to the request
    /// that has waited longest for one, or keeps it for the next request unless the endpoint
    /// already has `pool_max_idle` idle connections.
    pub(super) fn checkin(&self, mut conn: Conn) {
        let ep = &self.endpoints[conn.endpoint];
        conn.fresh = false;
        conn.idle_since = Instant::now();
        let Ok(mut state) = ep.state.lock() else {
            return;
        };
        while let Some(waiter) = state.waiters.pop_front() {
            match waiter.send(conn) {
                Ok(()) => return,
                // That request stopped waiting (it connected, timed out or was dropped).
                Err(back) => conn = back,
            }
        }
        if state.conns.len() < self.max_idle {
            state.conns.push(conn);
        }
    }
}

/// Whether an idle connection is still open: nothing to read yet. End of stream means the
/// upstream closed it; data means it sent something unasked, and it cannot be trusted either.
fn still_open(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}
