//! The HTTP/1.1 upstream connections that the fast path relays over and the bridge sends hyper's
//! requests over: TCP, or TLS with ALPN `http/1.1`, to the HTTP/1.1 endpoints of one upstream,
//! one pool per worker thread. An `auto` upstream over TLS offers
//! `h2` too; the pool learns from its first connection which one the upstream picks, and the
//! fast path relays only when it was `http/1.1` (an upstream that picks `h2` stays with the
//! hyper client). A connection is checked out for one request and comes
//! back once its response has been read to the end, so a client idling between requests holds
//! no upstream connection. Connections take their permit from the same per-endpoint semaphore
//! as the hyper client's, so `max_connections` holds for both paths together. A request that
//! finds no idle connection queues: a connection checked back in goes straight to the request
//! that has waited longest, racing the new connection it opens (or, at the cap, the permit it
//! waits for), up to the queue timeout. A connect that loses the race goes on in the background
//! and its connection joins the pool, as hyper's pool does. (Handing returned connections to
//! whoever asks next starved some waiters past the timeout under the stress test; not racing the
//! connect turned a back-end's full accept queue into 502s, where the hyper client's pool, which
//! races, served every request; dropping the losing connect left the pool stuck below the
//! number of clients, and with TLS every request then cost the back-end an abandoned
//! handshake: 6,700 req/s where nginx served 26,000, with 1,000 users over TLS on both hops.)

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use pms_net::deadline::Deadline;
use pms_uring::UringTcp;
use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use crate::config::{UpstreamProtocol, UpstreamSettings};
use crate::health::{Busy, Health};
use crate::upstream::{Saturated, SendError, Upstream};

/// One endpoint: where to connect, what to send as `Host`, and its idle connections.
struct Endpoint {
    /// `host:port`, for connecting and for the `Host` header.
    authority: String,
    /// `http://host:port`, as errors name it.
    key: String,
    /// For https endpoints: the connector and the name the certificate must carry.
    tls: Option<(TlsConnector, ServerName<'static>)>,
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
pub(crate) struct Conn {
    pub(crate) stream: Stream,
    /// Whether it was opened for this request (a reused one may have been closed by the
    /// upstream just before it was written to).
    pub(crate) fresh: bool,
    /// Index of its endpoint in the pool.
    pub(crate) endpoint: usize,
    /// The answer deadline of the bridged requests it serves, kept with it between them: one
    /// timer for the connection's life rather than one per request (see [`Deadline`]). The
    /// fast path keeps its deadlines with the client connection instead.
    pub(crate) deadline: Option<Deadline>,
    /// Counts the request it serves as outstanding on its endpoint while checked out.
    busy: Option<Busy>,
    idle_since: Instant,
    _permit: OwnedSemaphorePermit,
}

impl Conn {
    /// The endpoint's `host:port`.
    pub(crate) fn authority<'a>(&self, pool: &'a Pool) -> &'a str {
        &pool.endpoints[self.endpoint].authority
    }
}

/// What an upstream speaks, as far as the pool knows.
const SPEAKS_UNKNOWN: u8 = 0;
const SPEAKS_HTTP1: u8 = 1;
const SPEAKS_H2: u8 = 2;

/// The fast path's connections to one upstream, for one worker.
pub(crate) struct Pool {
    endpoints: Vec<Endpoint>,
    /// `SPEAKS_*`: known up front (HTTP/1.1) except for `auto` upstreams over TLS, where each
    /// TLS handshake's ALPN result updates it.
    speaks: AtomicU8,
    /// When connecting to learn `speaks` last failed: the requests of the next second go to
    /// hyper without trying again, so an unreachable upstream does not cost them two connect
    /// timeouts.
    learn_failed: Mutex<Option<Instant>>,
    /// Which endpoints to skip for now, and whose turn it is (shared with hyper's client).
    health: Arc<Health>,
    max_idle: usize,
    idle_timeout: Duration,
    connect_timeout: Duration,
    queue_timeout: Duration,
    /// This worker's share of the cap, for the "busy" error.
    limit: usize,
    opened: Counter,
}

impl Pool {
    /// A pool for `s`, or `None` when the fast path cannot serve it (`h2` and `h2c` upstreams:
    /// those requests stay with the hyper client).
    pub(crate) fn new(s: &UpstreamSettings, upstream: &Upstream) -> Option<Self> {
        if s.protocol != UpstreamProtocol::H1 && s.protocol != UpstreamProtocol::Auto {
            return None;
        }
        let mut endpoints = Vec::with_capacity(s.endpoints.len());
        for uri in &s.endpoints {
            let tls = match uri.scheme_str() {
                Some("http") => None,
                Some("https") => {
                    let config = upstream.fast_tls()?;
                    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
                    let name = ServerName::try_from(host.to_owned()).ok()?;
                    Some((TlsConnector::from(config), name))
                }
                _ => return None,
            };
            let authority = uri.authority()?.as_str().to_owned();
            let (key, slot) = upstream.slot(uri)?;
            endpoints.push(Endpoint {
                authority,
                key,
                tls,
                slot,
                state: Mutex::new(Idle::default()),
            });
        }
        if endpoints.is_empty() {
            return None;
        }
        let learns =
            s.protocol == UpstreamProtocol::Auto && endpoints.iter().any(|e| e.tls.is_some());
        Some(Self {
            endpoints,
            speaks: AtomicU8::new(if learns { SPEAKS_UNKNOWN } else { SPEAKS_HTTP1 }),
            learn_failed: Mutex::new(None),
            health: upstream.health(),
            max_idle: s.pool_max_idle,
            idle_timeout: s.pool_idle_timeout,
            connect_timeout: s.connect_timeout,
            queue_timeout: s.queue_timeout,
            limit: upstream.worker_limit(),
            opened: upstream.opened_counter(),
        })
    }

    /// Whether the fast path may relay to this upstream: `true` when it speaks HTTP/1.1. For an
    /// `auto` upstream over TLS not yet connected to, this connects once to learn what ALPN
    /// picks (the connection joins the pool); `false` when it picked `h2` or could not be
    /// reached (the hyper client then serves the request, and answers for the failure).
    pub(crate) async fn speaks_http1(self: &Arc<Self>) -> bool {
        match self.speaks.load(Ordering::Relaxed) {
            SPEAKS_HTTP1 => true,
            SPEAKS_H2 => false,
            _ => {
                let recently =
                    |at: &Option<Instant>| at.is_some_and(|t| t.elapsed() < Duration::from_secs(1));
                if self.learn_failed.lock().map_or(true, |at| recently(&at)) {
                    return false;
                }
                match self.checkout().await {
                    Ok(conn) => self.checkin(conn),
                    Err(_) => {
                        if let Ok(mut at) = self.learn_failed.lock() {
                            *at = Some(Instant::now());
                        }
                    }
                }
                self.speaks.load(Ordering::Relaxed) == SPEAKS_HTTP1
            }
        }
    }

    /// A connection to the next endpoint (round-robin, skipping those that could not be
    /// connected to lately): an idle one that is still open, or a new one once the endpoint has
    /// a permit free. When connecting fails, the other endpoints are tried in turn.
    ///
    /// # Errors
    /// [`SendError::Busy`] when no permit came within the queue timeout, [`SendError::Connect`]
    /// when connecting failed or timed out (everywhere it was tried).
    pub(crate) async fn checkout(self: &Arc<Self>) -> Result<Conn, SendError> {
        let first = self.health.pick();
        let mut conn = match self.checkout_at(first).await {
            Err(SendError::Connect(why)) if self.endpoints.len() > 1 => {
                // Boxed: the rare path's future stays out of every request's.
                Box::pin(self.fail_over(first, why)).await
            }
            other => other,
        }?;
        conn.busy = self.health.busy(conn.endpoint);
        Ok(conn)
    }

    /// A connection to an endpoint other than `not`, for a request that may be sent again
    /// after `not` answered 503 or closed its connection unanswered: `None` when there is no
    /// other endpoint up or the retry budget is spent, or no connection could be had.
    pub(crate) async fn checkout_retry(self: &Arc<Self>, not: usize) -> Option<Conn> {
        let i = self.health.retry_elsewhere(not)?;
        let mut conn = self.checkout_at(i).await.ok()?;
        conn.busy = self.health.busy(i);
        Some(conn)
    }

    /// Tells the endpoint's health what `conn`'s response said.
    pub(crate) fn answered(&self, conn: &Conn, status: u16) {
        self.health
            .answered(conn.endpoint, &self.endpoints[conn.endpoint].key, status);
    }

    /// Tries the endpoints after `first`, where connecting failed with `why`, in turn.
    async fn fail_over(self: &Arc<Self>, first: usize, mut why: String) -> Result<Conn, SendError> {
        for i in self.health.after(first) {
            if self.health.is_down(i) {
                continue;
            }
            match self.checkout_at(i).await {
                Err(SendError::Connect(again)) => why = again,
                other => return other,
            }
        }
        Err(SendError::Connect(why))
    }

    /// [`Pool::checkout`] on endpoint `i`, without trying others.
    async fn checkout_at(self: &Arc<Self>, i: usize) -> Result<Conn, SendError> {
        let ep = &self.endpoints[i];
        // Queued either way: a connection coming back serves this request as well as a new
        // one, and sooner when connecting is slow (a back-end's full accept queue drops SYNs,
        // and the retransmission comes a second later).
        let (permit, mut returned) = {
            let Ok(mut state) = ep.state.lock() else {
                return Err(SendError::Failed("upstream pool poisoned".into()));
            };
            while let Some(mut conn) = state.conns.pop() {
                if conn.idle_since.elapsed() < self.idle_timeout && conn.stream.still_open() {
                    return Ok(conn);
                }
            }
            let permit = match ep.slot.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(tokio::sync::TryAcquireError::Closed) => {
                    return Err(SendError::Failed("connection permits closed".into()))
                }
                Err(tokio::sync::TryAcquireError::NoPermits) => None,
            };
            let (tx, rx) = oneshot::channel();
            state.waiters.push_back(tx);
            (permit, rx)
        };
        // Not read before: a request that finds an idle connection has no use for it.
        let deadline = tokio::time::Instant::now() + self.queue_timeout;
        let permit = match permit {
            Some(p) => p,
            // At the cap: the first of a returned connection or a freed permit.
            None => tokio::select! {
                conn = &mut returned => {
                    return conn.map_err(|_| SendError::Failed("upstream pool closed".into()))
                }
                p = ep.slot.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(closed) => {
                        self.leave(returned);
                        return Err(SendError::Failed(closed.to_string()));
                    }
                },
                () = tokio::time::sleep_until(deadline) => {
                    return self.leave(returned).ok_or_else(|| self.busy(ep));
                }
            },
        };
        let pool = Arc::clone(self);
        let mut connecting = Box::pin(async move { pool.connect(i, permit).await });
        tokio::select! {
            conn = &mut returned => {
                // The new connection is wanted all the same: there were more requests than
                // connections. It joins the pool (or the next waiter) when it is ready.
                let pool = Arc::clone(self);
                tokio::spawn(async move {
                    if let Ok(made) = connecting.await {
                        pool.checkin(made);
                    }
                });
                conn.map_err(|_| SendError::Failed("upstream pool closed".into()))
            }
            made = &mut connecting => match made {
                Ok(conn) => {
                    if let Some(other) = self.leave(returned) {
                        self.checkin(other);
                    }
                    Ok(conn)
                }
                // Connections to the endpoint exist, so one will come back: wait for it rather
                // than fail the request (the endpoint is up, only busy accepting).
                Err(e) if ep.slot.available_permits() < self.limit => {
                    tokio::select! {
                        conn = &mut returned => conn.map_err(|_| e),
                        () = tokio::time::sleep_until(deadline) => {
                            self.leave(returned).ok_or(e)
                        }
                    }
                }
                Err(e) => {
                    self.leave(returned);
                    Err(e)
                }
            },
        }
    }

    /// Leaves the queue; a connection already handed over comes back to the caller.
    fn leave(&self, mut returned: oneshot::Receiver<Conn>) -> Option<Conn> {
        returned.close();
        returned.try_recv().ok()
    }

    fn busy(&self, ep: &Endpoint) -> SendError {
        SendError::Busy(Saturated {
            endpoint: ep.key.clone(),
            limit: self.limit,
            waited: self.queue_timeout,
        })
    }

    /// A new connection for a request whose connection to endpoint `i` turned out closed
    /// before its answer (nothing of the request was acted on): to `i` again, bypassing idle
    /// ones, or, if `i` cannot be connected to, to the others in turn.
    pub(crate) async fn reopen(self: &Arc<Self>, i: usize) -> Result<Conn, SendError> {
        let mut conn = match self.open(i).await {
            Err(SendError::Connect(why)) if self.endpoints.len() > 1 => {
                Box::pin(self.fail_over(i, why)).await
            }
            other => other,
        }?;
        conn.busy = self.health.busy(conn.endpoint);
        Ok(conn)
    }

    /// A new connection to endpoint `i`, bypassing idle ones (for a retry).
    async fn open(&self, i: usize) -> Result<Conn, SendError> {
        let ep = &self.endpoints[i];
        let permit =
            match tokio::time::timeout(self.queue_timeout, ep.slot.clone().acquire_owned()).await {
                Ok(Ok(p)) => p,
                Ok(Err(closed)) => return Err(SendError::Failed(closed.to_string())),
                Err(_) => return Err(self.busy(ep)),
            };
        // Boxed, as in `checkout`: connecting (TLS included) takes over a kilobyte of future
        // state, which would otherwise be part of every request's future for this rare retry.
        Box::pin(self.connect(i, permit)).await
    }

    /// Connects to endpoint `i` under `permit`.
    async fn connect(&self, i: usize, permit: OwnedSemaphorePermit) -> Result<Conn, SendError> {
        let ep = &self.endpoints[i];
        let deadline = tokio::time::Instant::now() + self.connect_timeout;
        let too_slow = || {
            format!(
                "{}: no connection within {:?}",
                ep.key, self.connect_timeout
            )
        };
        let failed = |why: String| {
            self.health.failed(i, &ep.key, &why);
            SendError::Connect(why)
        };
        let tcp = match tokio::time::timeout_at(deadline, TcpStream::connect(ep.authority.as_str()))
            .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(failed(format!("{}: {e}", ep.key))),
            Err(_) => return Err(failed(too_slow())),
        };
        let _ = tcp.set_nodelay(true);
        let stream = match &ep.tls {
            // On a worker with an io_uring, cleartext upstream connections are driven by it.
            None if pms_uring::installed() => match UringTcp::from_tokio(tcp) {
                Ok(s) => Stream::Uring(s),
                Err(e) => return Err(failed(format!("{}: io_uring: {e}", ep.key))),
            },
            None => Stream::Plain(tcp),
            Some((connector, name)) => {
                match tokio::time::timeout_at(deadline, connector.connect(name.clone(), tcp)).await
                {
                    Ok(Ok(s)) => {
                        let h2 = s.get_ref().1.alpn_protocol() == Some(pms_net::ALPN_H2);
                        self.speaks
                            .store(if h2 { SPEAKS_H2 } else { SPEAKS_HTTP1 }, Ordering::Relaxed);
                        if h2 {
                            // Only an `auto` upstream offers h2; this one changed its mind
                            // since it was first asked. Its next requests go to hyper.
                            return Err(SendError::Connect(format!(
                                "{}: the upstream now picks HTTP/2; the next requests use it",
                                ep.key
                            )));
                        }
                        Stream::Tls(Box::new(s))
                    }
                    Ok(Err(e)) => return Err(failed(format!("{}: TLS: {e}", ep.key))),
                    Err(_) => return Err(failed(too_slow())),
                }
            }
        };
        self.opened.inc();
        self.health.connected(i, &ep.key);
        Ok(Conn {
            stream,
            fresh: true,
            endpoint: i,
            deadline: None,
            busy: None,
            idle_since: Instant::now(),
            _permit: permit,
        })
    }

    /// Gives `conn` (its response was read to the end and it may stay open) to the request
    /// that has waited longest for one, or keeps it for the next request unless the endpoint
    /// already has `pool_max_idle` idle connections.
    pub(crate) fn checkin(&self, mut conn: Conn) {
        let ep = &self.endpoints[conn.endpoint];
        conn.fresh = false;
        conn.busy = None;
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

/// An upstream connection, cleartext or TLS.
pub(crate) enum Stream {
    Plain(TcpStream),
    Uring(UringTcp),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// Waits until a read may find bytes: cleartext, until the socket is readable (or has an
    /// error to report); over TLS at once, since rustls may already hold plaintext that the TCP
    /// socket's readiness would not announce.
    pub(crate) async fn readable(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(s) => s.readable().await,
            Self::Uring(s) => s.readable().await,
            Self::Tls(_) => Ok(()),
        }
    }

    /// Whether an idle connection is still open: nothing to read yet. End of stream means the
    /// upstream closed it; data (or a TLS alert) means it sent something unasked, and it cannot
    /// be trusted with a request either.
    fn still_open(&mut self) -> bool {
        let mut probe = [0u8; 1];
        match self {
            Self::Plain(s) => {
                matches!(s.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
            Self::Uring(s) => s.idle_and_open(),
            Self::Tls(s) => {
                let mut buf = ReadBuf::new(&mut probe);
                let mut cx = Context::from_waker(Waker::noop());
                Pin::new(s.as_mut())
                    .poll_read(&mut cx, &mut buf)
                    .is_pending()
            }
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Uring(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Uring(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Uring(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(s) => s.is_write_vectored(),
            Self::Uring(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Uring(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Uring(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
