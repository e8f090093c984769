//! The HTTP accept loop shared by every PMS server: one bound listener in, connections served until
//! the shutdown future fires, then a bounded graceful drain.
//!
//! What it owns: TLS handshakes (with a time limit; a client speaking plain HTTP to a TLS port
//! gets a plain-HTTP 400 saying so), choosing HTTP/1.1 or HTTP/2 per connection
//! (h2c prior knowledge on cleartext, ALPN on TLS), the connection cap, header size and header-read
//! time limits (slowloris), the send timeout (a client that stops reading, [`crate::stall`], or
//! grants an HTTP/2 response no window, `starve`), idle connections (GOAWAY after the idle
//! timeout, HTTP/2 PINGs to a silent client, [`crate::idle`]), accept-error back-off, and the
//! drain (HTTP/2 GOAWAY, idle keep-alives closed, in-flight requests finished). What it must
//! not do: look at requests — that is the service's job — or bind sockets: callers pass a bound
//! listener (so tests can use port 0).
//!
//! A server may also pass an [`Http1Fast`] handler ([`serve_with`]): HTTP/1.1 connections
//! (cleartext, or TLS without h2 in ALPN) go to it first, and it hands a connection to hyper,
//! with the bytes it read put back, at the first request it does not take. The gateway uses
//! this to relay plain requests without two full HTTP codecs.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::idle::{Activity, IdleTimer};
use crate::rewind::Rewind;
use crate::stall::SendDeadline;
use crate::starve::{Starvation, StreamExecutor, Watched, Watching};

/// Boxed error type the serve loop accepts from services and bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client connection, cleartext or TLS, behind one type.
///
/// Every connection reaches the fast path and hyper as a `BoxIo`, so each of them is compiled
/// once per service rather than once per transport: hyper's HTTP/1.1 and HTTP/2 servers are
/// large generic state machines, and the `pms` binary has 240 KB less code this way. The price
/// is a virtual call per read and write, and for cleartext a small allocation per connection.
/// (It does not lower the gateway's resident code under load, which the hoped-for gain was:
/// that is set by how widely the touched code is spread, see `docs/benchmarks.md`.)
pub type BoxIo = Box<dyn Io>;

/// What a connection must be to be served: a byte stream that can move between threads.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// Default cap on concurrently open connections per listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default time a client has to send a complete request head (HTTP/1.1).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a client has to finish the TLS handshake.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default cap on the request head (HTTP/1.1 buffer, HTTP/2 header list).
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;
/// Default cap on concurrent HTTP/2 streams per connection.
pub const DEFAULT_H2_MAX_CONCURRENT_STREAMS: u32 = 250;
/// Default longest a write to a client may wait for it to read (nginx's `send_timeout`).
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// Default time an HTTP/2 connection (or any connection hyper serves) may go without a new
/// request before it is told to go away.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default time in-flight requests get to finish after shutdown is signalled.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// How a listener serves its connections.
#[derive(Clone)]
pub struct ServeConfig {
    /// TLS termination; `None` serves cleartext (HTTP/1.1 and, unless `http1_only`, h2c).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Serve HTTP/1.1 only (no h2c detection; over TLS, h2 is refused even if ALPN picked it).
    pub http1_only: bool,
    /// Most connections served at once; further clients wait (in the kernel backlog, or accepted
    /// but unserved, one per loop) until a connection closes.
    pub max_connections: usize,
    /// Time allowed to receive a full HTTP/1.1 request head.
    pub header_read_timeout: Duration,
    /// Time allowed for the TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// Longest a write to the client may wait for it to read; the connection is closed after
    /// it (see [`crate::stall`]). An HTTP/2 response that waits for flow-control window for
    /// one to two of these has its stream reset (see `starve`).
    pub send_timeout: Duration,
    /// How long a connection hyper serves may start no request before it is shut down
    /// gracefully (HTTP/2 GOAWAY; in-flight requests finish), within one to two of these (see
    /// [`crate::idle`]). Idle HTTP/1.1 keep-alives usually go sooner, after
    /// `header_read_timeout`. Also an HTTP/2 client's silence before it is sent a PING, and the
    /// time it has to answer before its connection is closed.
    pub idle_timeout: Duration,
    /// Largest request head accepted, in bytes.
    pub max_header_bytes: usize,
    /// Most concurrent streams per HTTP/2 connection.
    pub h2_max_concurrent_streams: u32,
    /// Time in-flight requests get to finish once shutdown starts.
    pub grace: Duration,
    /// Connection permits shared with other serve loops (thread-per-core workers of one
    /// listener), so `max_connections` holds for the listener as a whole. `None`: this loop
    /// has its own `max_connections` permits.
    pub shared_permits: Option<Arc<Semaphore>>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            tls: None,
            http1_only: false,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            tls_handshake_timeout: DEFAULT_TLS_HANDSHAKE_TIMEOUT,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            h2_max_concurrent_streams: DEFAULT_H2_MAX_CONCURRENT_STREAMS,
            grace: DEFAULT_GRACE,
            shared_permits: None,
        }
    }
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("tls", &self.tls.is_some())
            .field("http1_only", &self.http1_only)
            .field("max_connections", &self.max_connections)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("send_timeout", &self.send_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

/// What a service learns about the connection a request arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo {
    /// The client's address.
    pub peer: SocketAddr,
    /// The address the client connected to.
    pub local: SocketAddr,
    /// Whether the connection is TLS.
    pub tls: bool,
}

/// Connection-level events, for metrics. Every method has a no-op default.
pub trait Observer: Send + Sync + 'static {
    /// A connection was accepted (before any TLS handshake).
    fn connection_opened(&self) {}
    /// A connection ended, for whatever reason.
    fn connection_closed(&self) {}
    /// A TLS handshake finished, successfully or not.
    fn tls_handshake(&self, _ok: bool) {}
}

/// An [`Observer`] that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;
impl Observer for NoObserver {}

/// How the drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// Every connection finished within the grace period.
    Complete,
    /// The grace period ran out with connections still open; they were dropped.
    TimedOut,
}

/// Takes HTTP/1.1 connections before hyper does.
pub trait Http1Fast: Send + Sync + 'static {
    /// Serves requests on `io` for as long as it takes them. Returns `None` when the
    /// connection is done (closed, or `stop` was set between requests), or the connection with
    /// every byte it read but did not act on put back, for hyper to serve from there on. It
    /// must only hand over at a request boundary, before answering anything of that request.
    fn serve(
        &self,
        io: BoxIo,
        info: ConnInfo,
        stop: Stop,
    ) -> impl Future<Output = Option<Rewind<BoxIo>>> + Send;
}

/// No fast path: every connection goes straight to hyper.
#[derive(Debug, Clone, Copy)]
pub enum NoFast {}

impl Http1Fast for NoFast {
    #[allow(clippy::manual_async_fn)]
    fn serve(
        &self,
        _io: BoxIo,
        _info: ConnInfo,
        _stop: Stop,
    ) -> impl Future<Output = Option<Rewind<BoxIo>>> + Send {
        let never = *self;
        async move { match never {} }
    }
}

/// Set once the server starts draining: a fast-path connection finishes the request in hand
/// and closes.
#[derive(Debug, Clone)]
pub struct Stop(watch::Receiver<bool>);

impl Stop {
    /// Whether draining has started.
    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves when draining starts (never, if it never does).
    pub async fn wait(&mut self) {
        if self.0.wait_for(|s| *s).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Serves `listener` until `shutdown` resolves, then drains for at most `config.grace`.
///
/// `make_service` is called once per connection with what is known about it.
pub async fn serve<M, S, B>(
    listener: TcpListener,
    config: ServeConfig,
    make_service: M,
    observer: Arc<dyn Observer>,
    shutdown: impl Future<Output = ()>,
) -> Drain
where
    M: Fn(ConnInfo) -> S,
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    serve_with(
        listener,
        config,
        make_service,
        None::<Arc<NoFast>>,
        observer,
        shutdown,
    )
    .await
}

/// [`serve`] with the same `service` for every connection and no observer: an application's
/// router (an axum router wrapped for hyper) on a listener.
pub async fn serve_cloned<S, B>(
    listener: TcpListener,
    config: ServeConfig,
    service: S,
    shutdown: impl Future<Output = ()>,
) -> Drain
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    serve(
        listener,
        config,
        move |_| service.clone(),
        Arc::new(NoObserver),
        shutdown,
    )
    .await
}

/// [`serve`], with HTTP/1.1 connections offered to `fast` first.
pub async fn serve_with<M, S, B, F>(
    listener: TcpListener,
    config: ServeConfig,
    make_service: M,
    fast: Option<Arc<F>>,
    observer: Arc<dyn Observer>,
    shutdown: impl Future<Output = ()>,
) -> Drain
where
    M: Fn(ConnInfo) -> S,
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    F: Http1Fast,
{
    let builders = Arc::new(Builders::new(&config));
    let tls = config.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let permits = config
        .shared_permits
        .clone()
        .unwrap_or_else(|| Arc::new(Semaphore::new(config.max_connections.max(1))));
    let graceful = GracefulShutdown::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    let local = listener.local_addr().ok();
    tokio::pin!(shutdown);

    let mut backoff = Duration::from_millis(5);
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(v) => v,
                Err(err) => {
                    // EMFILE and friends: back off rather than spin; the loop never ends on them.
                    tracing::warn!(error = %err, ?backoff, "accept failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    continue;
                }
            },
        };
        // Accept first, then wait for a permit. With permits shared by several loops (one per
        // worker, each on its own SO_REUSEPORT socket) taking the permit before accepting could
        // hand the last permit to a loop whose socket has nobody waiting, while the waiting
        // client sits on another loop's socket: a deadlock. Holding at most one accepted but
        // unserved connection per loop costs a file descriptor.
        let permit = tokio::select! {
            biased;
            () = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break, // the semaphore is never closed; treat as shutdown
            },
        };
        backoff = Duration::from_millis(5);
        let _ = stream.set_nodelay(true);
        let info = ConnInfo {
            peer,
            local: stream.local_addr().ok().or(local).unwrap_or(peer),
            tls: tls.is_some(),
        };
        let service = make_service(info);
        let builders = builders.clone();
        let tls = tls.clone();
        let observer = observer.clone();
        let fast = fast.clone();
        let stop = Stop(stop_rx.clone());
        // Held until the connection ends, whoever serves it, so the drain waits for it.
        let watcher = graceful.watcher();
        let handshake_timeout = config.tls_handshake_timeout;
        let send_timeout = config.send_timeout;
        let idle_timeout = config.idle_timeout;
        observer.connection_opened();
        tokio::spawn(async move {
            let _permit = permit;
            let svc = service;
            match tls {
                None => {
                    // With h2c allowed, the fast path declines the HTTP/2 preface and hyper's
                    // auto builder sees it in the bytes handed back.
                    let conn = Connection {
                        info,
                        svc,
                        builder: &builders.cleartext,
                        fast,
                        stop,
                        watcher,
                        idle_timeout,
                        send_timeout,
                    };
                    let io: BoxIo = if pms_uring::installed() {
                        // This worker drives its cleartext connections through its io_uring.
                        match pms_uring::UringTcp::from_tokio(stream) {
                            Ok(s) => Box::new(SendDeadline::new(s, send_timeout)),
                            Err(e) => {
                                tracing::warn!(error = %e, %peer, "cannot move the connection to io_uring");
                                observer.connection_closed();
                                return;
                            }
                        }
                    } else {
                        Box::new(SendDeadline::new(stream, send_timeout))
                    };
                    conn.run(io).await;
                }
                Some(acceptor) => {
                    let Some((io, h2)) = accept_tls(
                        &acceptor,
                        stream,
                        handshake_timeout,
                        send_timeout,
                        &*observer,
                        peer,
                    )
                    .await
                    else {
                        observer.connection_closed();
                        return;
                    };
                    let conn = if h2 && !builders.http1_only {
                        Connection {
                            info,
                            svc,
                            builder: &builders.h2,
                            fast: None,
                            stop,
                            watcher,
                            idle_timeout,
                            send_timeout,
                        }
                    } else {
                        Connection {
                            info,
                            svc,
                            builder: &builders.h1,
                            fast,
                            stop,
                            watcher,
                            idle_timeout,
                            send_timeout,
                        }
                    };
                    conn.run(io).await;
                }
            }
            observer.connection_closed();
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);

    tokio::select! {
        () = graceful.shutdown() => Drain::Complete,
        () = tokio::time::sleep(config.grace) => {
            tracing::warn!(grace = ?config.grace, "grace period over; dropping remaining connections");
            Drain::TimedOut
        }
    }
}

/// The TLS handshake on `stream`, within `timeout`, counted by `observer`. A client whose first
/// byte starts an HTTP method instead gets [`refuse_plain_http`]'s answer, and no handshake. On
/// a worker with an io_uring the connection moves to it after that first look, handshake
/// included. Returns the connection ready to serve (its writes under `send_timeout`) and
/// whether ALPN picked HTTP/2.
///
/// The stream comes back boxed. rustls' connection state is over a kilobyte, and a future keeps
/// an `async fn`'s arguments, and locals it has moved from, for its whole life: inline, the
/// task of every TLS connection held the stream three to four times over (7.7 KB per task
/// where it is 2.8 KB now, plus the 1.2 KB box). The handshake's own future is boxed for the
/// same reason, and freed when it is done.
async fn accept_tls(
    acceptor: &tokio_rustls::TlsAcceptor,
    mut stream: tokio::net::TcpStream,
    timeout: Duration,
    send_timeout: Duration,
    observer: &dyn Observer,
    peer: SocketAddr,
) -> Option<(BoxIo, bool)> {
    // One deadline for the first byte and the handshake after it. Boxed like the handshake, so
    // that these futures' timers do not sit in every TLS task.
    let deadline = tokio::time::Instant::now() + timeout;
    match Box::pin(tokio::time::timeout_at(
        deadline,
        speaks_plain_http(&stream),
    ))
    .await
    {
        Ok(false) => {}
        Ok(true) => {
            observer.tls_handshake(false);
            tracing::debug!(%peer, "plain HTTP on a TLS port");
            Box::pin(refuse_plain_http(&mut stream)).await;
            return None;
        }
        Err(_) => {
            observer.tls_handshake(false);
            tracing::debug!(%peer, "TLS handshake timed out");
            return None;
        }
    }
    if !pms_uring::installed() {
        return handshake(acceptor, stream, deadline, send_timeout, observer, peer).await;
    }
    match pms_uring::UringTcp::from_tokio(stream) {
        Ok(s) => handshake(acceptor, s, deadline, send_timeout, observer, peer).await,
        Err(e) => {
            observer.tls_handshake(false);
            tracing::warn!(error = %e, %peer, "cannot move the connection to io_uring");
            None
        }
    }
}

/// The handshake itself, for [`accept_tls`], on either kind of socket.
async fn handshake<S: Io>(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: S,
    deadline: tokio::time::Instant,
    send_timeout: Duration,
    observer: &dyn Observer,
    peer: SocketAddr,
) -> Option<(BoxIo, bool)> {
    match Box::pin(tokio::time::timeout_at(deadline, acceptor.accept(stream))).await {
        Ok(Ok(s)) => {
            observer.tls_handshake(true);
            let h2 = s.get_ref().1.alpn_protocol() == Some(crate::ALPN_H2);
            Some((Box::new(SendDeadline::new(s, send_timeout)), h2))
        }
        Ok(Err(err)) => {
            observer.tls_handshake(false);
            tracing::debug!(%peer, error = %err, "TLS handshake failed");
            None
        }
        Err(_) => {
            observer.tls_handshake(false);
            tracing::debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}

/// Whether the client's first byte starts an HTTP method rather than a TLS record (`0x16` for a
/// handshake): someone typed `http://` for an `https://` port. Peeks, so the handshake still
/// reads everything.
async fn speaks_plain_http(stream: &tokio::net::TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(stream.peek(&mut first).await, Ok(1) if first[0].is_ascii_uppercase())
}

/// Answers a plain-HTTP request on a TLS port in plain HTTP, as a JSON error like every other,
/// then closes without resetting the client (see [`crate::linger`]). A TLS alert is all it would
/// get otherwise, which no HTTP client can show.
async fn refuse_plain_http(stream: &mut tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    const BODY: &str =
        r#"{"error":{"code":"tls_required","message":"this port speaks TLS: use https://"}}"#;
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    if stream.write_all(answer.as_bytes()).await.is_err() || stream.shutdown().await.is_err() {
        return;
    }
    crate::linger::linger(stream, &mut bytes::BytesMut::new()).await;
}

/// One accepted (and, for TLS, handshaken) connection and who serves it.
struct Connection<'a, S, F> {
    info: ConnInfo,
    svc: S,
    builder: &'a auto::Builder<StreamExecutor>,
    fast: Option<Arc<F>>,
    stop: Stop,
    watcher: hyper_util::server::graceful::Watcher,
    idle_timeout: Duration,
    send_timeout: Duration,
}

impl<S, B, F> Connection<'_, S, F>
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    F: Http1Fast,
{
    /// Offers `io` to the fast path, if any, then serves what it hands back (or all of it)
    /// with hyper.
    async fn run(self, io: BoxIo) {
        let peer = self.info.peer;
        // Boxed: the fast path's connection state is kilobytes, and inline it would be part of
        // every connection's task, HTTP/2 ones included, which never use it.
        let io = match &self.fast {
            Some(fast) => match Box::pin(fast.serve(io, self.info, self.stop.clone())).await {
                Some(rest) => rest,
                None => return,
            },
            None => Rewind::new(bytes::Bytes::new(), io),
        };
        let mut idle = IdleTimer::new(self.idle_timeout);
        let starvation = Arc::new(Starvation::new(self.send_timeout));
        let svc = Noted {
            inner: self.svc,
            activity: idle.activity(),
            starvation: starvation.clone(),
        };
        let conn = self
            .builder
            .serve_connection(TokioIo::new(io), svc)
            .into_owned();
        let mut conn = std::pin::pin!(conn);
        let mut stop = self.stop;
        let starved = starvation.starved();
        let mut starved = std::pin::pin!(starved);
        // Shut down gracefully when draining starts or the connection goes idle: no new
        // requests (HTTP/2 GOAWAY), those in flight finish. The starvation watch resets the
        // streams of HTTP/2 responses the client takes no data of for the send timeout (they
        // would hold the stream, and a graceful shutdown, for good), and comes back only for
        // one it could not reset alone: then the connection is cut off at once.
        let mut ending = false;
        let result = loop {
            tokio::select! {
                r = conn.as_mut() => break r,
                () = &mut starved => {
                    tracing::debug!(
                        %peer,
                        after = ?starvation.period(),
                        "an HTTP/2 response that cannot be reset alone waited that long for flow-control window; closing the connection"
                    );
                    break Ok(());
                }
                () = stop.wait(), if !ending => {
                    ending = true;
                    conn.as_mut().graceful_shutdown();
                }
                () = idle.expired(), if !ending => {
                    ending = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        };
        // The drain counts this connection until here.
        drop(self.watcher);
        log_conn_end(peer, result);
    }
}

/// A connection's service: notes each request for its [`IdleTimer`], and puts HTTP/2 response
/// bodies under its [`Starvation`] watch.
struct Noted<S> {
    inner: S,
    activity: Activity,
    starvation: Arc<Starvation>,
}

impl<S, B> Service<Request<Incoming>> for Noted<S>
where
    S: Service<Request<Incoming>, Response = Response<B>>,
{
    type Response = Response<Watched<B>>;
    type Error = S::Error;
    type Future = Watching<S::Future>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        self.activity.request();
        let watch = (req.version() == http::Version::HTTP_2).then(|| self.starvation.clone());
        Watching::new(self.inner.call(req), watch)
    }
}

fn log_conn_end(peer: SocketAddr, result: Result<(), BoxError>) {
    if let Err(err) = result {
        // Client resets and half-closed sockets are routine; keep them out of the warn level.
        tracing::debug!(%peer, error = %err, "connection ended with an error");
    }
}

/// The three connection flavours, configured once per listener.
struct Builders {
    /// Cleartext: HTTP/1.1 plus h2c prior knowledge, unless `http1_only`.
    cleartext: auto::Builder<StreamExecutor>,
    /// TLS without h2 in ALPN.
    h1: auto::Builder<StreamExecutor>,
    /// TLS with h2 negotiated.
    h2: auto::Builder<StreamExecutor>,
    http1_only: bool,
}

impl Builders {
    fn new(config: &ServeConfig) -> Self {
        let mut base = auto::Builder::new(StreamExecutor);
        base.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(config.header_read_timeout)
            .max_buf_size(config.max_header_bytes.max(8192))
            .keep_alive(true);
        base.http2()
            .timer(TokioTimer::new())
            // A client that sends nothing for the idle timeout gets a PING, and one that does
            // not answer it within as long again is gone: its connection is closed, streams in
            // flight or not (a graceful GOAWAY would wait for those for good).
            .keep_alive_interval(config.idle_timeout)
            .keep_alive_timeout(config.idle_timeout)
            .max_concurrent_streams(config.h2_max_concurrent_streams)
            .max_header_list_size(u32::try_from(config.max_header_bytes).unwrap_or(u32::MAX));
        let cleartext = if config.http1_only {
            base.clone().http1_only()
        } else {
            base.clone()
        };
        Self {
            cleartext,
            h1: base.clone().http1_only(),
            h2: base.http2_only(),
            http1_only: config.http1_only,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::Full;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn ok_service(
        _: ConnInfo,
    ) -> impl Service<
        Request<Incoming>,
        Response = Response<Full<Bytes>>,
        Error = Infallible,
        Future = impl Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send,
    > + Send {
        hyper::service::service_fn(|_req| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        })
    }

    async fn get(addr: SocketAddr) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    /// Two loops share one permit (as thread-per-core workers of one listener do). The loop that
    /// starts first must not sit on the permit while only the other loop has a client waiting.
    #[tokio::test]
    async fn shared_permits_go_to_loops_with_a_client() {
        let permits = Arc::new(Semaphore::new(1));
        let config = ServeConfig {
            shared_permits: Some(permits.clone()),
            ..ServeConfig::default()
        };
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b_addr = b.local_addr().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let loop_a = tokio::spawn(serve(
            a,
            config.clone(),
            ok_service,
            Arc::new(NoObserver),
            stop(stop_rx.clone()),
        ));
        // Let loop A run up to its first await before loop B exists.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let loop_b = tokio::spawn(serve(
            b,
            config,
            ok_service,
            Arc::new(NoObserver),
            stop(stop_rx),
        ));
        for i in 0..3 {
            let resp = tokio::time::timeout(Duration::from_secs(20), get(b_addr))
                .await
                .unwrap_or_else(|_| {
                    panic!("client {i} on loop B never served (permit stuck in loop A)")
                });
            assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        }
        let _ = stop_tx.send(true);
        assert_eq!(loop_a.await.unwrap(), Drain::Complete);
        assert_eq!(loop_b.await.unwrap(), Drain::Complete);
        assert_eq!(permits.available_permits(), 1);
    }
}
