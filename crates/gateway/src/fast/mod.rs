//! The HTTP/1.1 fast path: plain requests relayed between a client connection and a pooled
//! upstream connection by one task, without building hyper requests and responses on either
//! hop. Heads are parsed in place with `httparse` and their header lines rewritten by the rules
//! hyper's path applies too ([`rules::Forward`], [`rules::Relay`]) straight into the outgoing
//! head, with no `HeaderMap` in between (see [`fields`]); bodies are copied as they
//! come, framed by `Content-Length` or chunked coding, a streamed request body and its answer
//! both ways at once (see `Exchange::duplex`).
//!
//! Why: profiling h1c→h1c under load put about half of the gateway's CPU in the kernel and the
//! user-space half in hyper's HTTP/1.1 codec on both hops, the pooled client's per-request
//! dispatch and allocation. A relay that parses only the heads, on one task per client
//! connection, does much less of the latter.
//!
//! What it takes: see [`request`] (plain HTTP/1.1 heads) and routes that forward to HTTP/1.1
//! upstreams (cleartext, TLS with `protocol = "h1"`, or TLS with `protocol = "auto"` where the
//! upstream's ALPN picks `http/1.1`) without transforming the body. At the first request it does
//! not take — another route, a chunked or `Expect` body, a failed authentication — it hands the
//! connection to hyper with the bytes it read, and hyper serves the rest of the connection as
//! before. A head that is not HTTP, or is over the size limit, it answers itself with the
//! gateway's JSON error and closes the connection. Requests hyper's server takes (HTTP/2 among
//! them) can use the same upstream connections: see [`bridge`]. Switch both off per gateway with
//! `limits.http1_fast_path = false`.

pub(crate) mod bridge;
mod fields;
mod request;
mod response;
mod upload;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use http::header::HeaderValue;
use http::{Method, StatusCode, Version};
use http_body_util::BodyExt;
use pms_net::deadline::Deadline;
use pms_net::head::{between_requests, read_head_bytes};
use pms_net::linger::linger;
use pms_net::rewind::Rewind;
use pms_net::serve::{BoxIo, ConnInfo, Http1Fast, Stop};
use pms_net::stall::{ReadDeadline, ReadStalled};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::body::BodyStalled;
use crate::headers::rules::{self, Kind};
use crate::headers::{self, RequestId};
use crate::health;
use crate::metrics::FastPathCounters;
use crate::pipeline::{self, Asked, Shared};
use crate::respond::GatewayError;
use crate::upstream::{SendError, Upstream};

use self::fields::Fields;
use self::response::{ChunkScanner, Framing};
use self::upload::Upload;
use crate::h1pool::{self as pool, Conn, Pool};

/// Read buffer growth step, for both hops.
const BUF: usize = 8 * 1024;
/// Bodies up to this size, on both hops, are read whole before they are passed on, so head and
/// body leave in one write (and such a request can be sent again on a fresh connection); larger
/// ones stream.
const GATHER: usize = 64 * 1024;
/// Buffers larger than this are released between requests.
const KEEP: usize = 2 * BUF;
/// Largest upstream response head.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// One worker's fast path.
pub(crate) struct FastPath {
    shared: Arc<Shared>,
    /// Its `relayed`, `handed_over` and `refused` counts (`bridged` is the pools').
    counters: FastPathCounters,
    header_read_timeout: Duration,
    max_header_bytes: usize,
}

impl std::fmt::Debug for FastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastPath")
            .field("backends", &self.shared.backends)
            .finish_non_exhaustive()
    }
}

impl FastPath {
    /// The fast path over `shared`'s upstreams, through their backends' pools.
    pub(crate) fn new(
        shared: Arc<Shared>,
        counters: FastPathCounters,
        header_read_timeout: Duration,
        max_header_bytes: usize,
    ) -> Self {
        Self {
            shared,
            counters,
            header_read_timeout,
            max_header_bytes,
        }
    }
}

impl Http1Fast for FastPath {
    fn serve(
        &self,
        io: BoxIo,
        info: ConnInfo,
        stop: Stop,
    ) -> impl Future<Output = Option<Rewind<BoxIo>>> + Send {
        self.connection(io, info, stop)
    }
}

/// One client connection's buffers, kept from request to request.
struct Buffers {
    /// Bytes from the client.
    buf: BytesMut,
    /// Where the header lines of the head at hand are, on either hop (in `buf` or `up`).
    fields: Fields,
    /// Bytes from the upstream.
    up: BytesMut,
    /// Bytes on their way out, to either side.
    out: Vec<u8>,
    /// The upstream's answer deadline: one timer for all the connection's requests.
    deadline: Deadline,
}

impl Buffers {
    fn new() -> Self {
        Self {
            buf: BytesMut::with_capacity(BUF),
            fields: Fields::default(),
            up: BytesMut::new(),
            out: Vec::new(),
            deadline: Deadline::new(tokio::time::Instant::now()),
        }
    }

    /// After a request: a large body grew the buffers, and an idle connection does not keep
    /// that.
    fn shrink(&mut self) {
        if self.buf.is_empty() && self.buf.capacity() > KEEP {
            self.buf = BytesMut::with_capacity(BUF);
        }
        if self.up.capacity() > KEEP {
            self.up = BytesMut::new();
        }
        if self.out.capacity() > KEEP {
            self.out = Vec::new();
        }
    }
}

/// What to do after a request.
enum Next {
    /// Read the next request.
    Continue,
    /// Close the connection.
    Close,
    /// Close the connection after an error answer, while the client may still be sending the
    /// request's body: see [`linger`].
    Linger,
    /// Give the connection, from this request on, to hyper.
    Handoff,
}

/// Why an exchange did not produce a relayed response.
enum Failure {
    /// Answer the client with this error. `consumed`: the request body is off the client
    /// connection, so it can carry another request.
    Answer { err: GatewayError, consumed: bool },
    /// The connection broke mid-exchange (or the response was cut): close it.
    Abort,
}

impl FastPath {
    async fn connection<IO>(&self, mut io: IO, info: ConnInfo, stop: Stop) -> Option<Rewind<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let mut bufs = Buffers::new();
        let draining = stop.clone();
        let (ended, activity) = between_requests(stop, self.header_read_timeout);
        let mut ended = std::pin::pin!(ended);
        loop {
            let head = match self
                .read_head(&mut io, &mut bufs.buf, &mut bufs.fields, ended.as_mut())
                .await
            {
                Read::Head(h) => {
                    activity.request();
                    h
                }
                Read::Closed => return None,
                Read::Decline => return Some(self.hand_over(bufs.buf, io)),
                Read::Refuse(err) => {
                    self.counters.refused.inc();
                    // Boxed, like the linger below: rare paths, kept out of the state every
                    // connection's task carries.
                    Box::pin(self.refuse(&mut io, info, err, &mut bufs.buf, &mut bufs.out)).await;
                    return None;
                }
            };
            match self.forward(&mut io, info, head, &mut bufs).await {
                Next::Continue if !draining.is_set() => bufs.shrink(),
                Next::Handoff => return Some(self.hand_over(bufs.buf, io)),
                Next::Continue | Next::Close => {
                    let _ = io.shutdown().await;
                    return None;
                }
                Next::Linger => {
                    let _ = io.shutdown().await;
                    Box::pin(linger(&mut io, &mut bufs.buf)).await;
                    return None;
                }
            }
        }
    }

    /// Answers a request head the fast path cannot read, logs it, then closes: nothing after
    /// a broken head can be trusted. The access log gets `-` for the method and the target,
    /// which such a head may not have.
    async fn refuse<IO>(
        &self,
        io: &mut IO,
        info: ConnInfo,
        err: GatewayError,
        buf: &mut BytesMut,
        out: &mut Vec<u8>,
    ) where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let request_id = headers::request_id(&http::HeaderMap::new());
        tracing::debug!(
            request_id = request_id.to_str().unwrap_or("-"),
            error = %err,
            "request head refused"
        );
        let asked = Asked {
            client: info.peer.ip(),
            method: "-",
            target: "-",
            protocol: "HTTP/1.1",
            request_id: request_id.to_str().unwrap_or("-"),
            started: Instant::now(),
        };
        // Logged, not counted on a route: the fast path's `refused` counts it.
        self.shared
            .log(None, &asked, err.status().as_u16(), Duration::ZERO);
        if answer(io, err, &request_id, false, out).await {
            let _ = io.shutdown().await;
            linger(io, buf).await;
        }
    }

    fn hand_over<IO>(&self, buf: BytesMut, io: IO) -> Rewind<IO> {
        self.counters.handed_over.inc();
        Rewind::new(buf.freeze(), io)
    }

    /// Waits for a complete request head at the start of `buf`: while the connection is idle,
    /// until `ended` resolves (it must not have yet); once a head has begun, for the
    /// header-read limit.
    async fn read_head<IO>(
        &self,
        io: &mut IO,
        buf: &mut BytesMut,
        fields: &mut Fields,
        mut ended: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Read
    where
        IO: AsyncRead + Unpin,
    {
        let mut deadline = None;
        loop {
            if !buf.is_empty() {
                match request::parse(buf, fields) {
                    request::Parsed::Take(h) => return Read::Head(h),
                    request::Parsed::Decline => return Read::Decline,
                    request::Parsed::Invalid(reason) => {
                        return Read::Refuse(GatewayError::BadRequest(reason))
                    }
                    request::Parsed::Partial if buf.len() >= self.max_header_bytes => {
                        let limit = self.max_header_bytes;
                        return Read::Refuse(if buf.contains(&b'\n') {
                            GatewayError::HeadTooLarge { limit }
                        } else {
                            GatewayError::UriTooLong { limit }
                        });
                    }
                    request::Parsed::Partial => {}
                }
            }
            buf.reserve(BUF);
            let header_read_timeout = self.header_read_timeout;
            if !read_head_bytes(io, buf, ended.as_mut(), &mut deadline, header_read_timeout).await {
                return Read::Closed;
            }
        }
    }

    /// Routes, authenticates and relays one request whose head starts `bufs.buf` (its header
    /// lines in `bufs.fields`); hands it back untouched when the fast path does not take it.
    async fn forward<IO>(
        &self,
        io: &mut IO,
        info: ConnInfo,
        head: request::Head,
        bufs: &mut Buffers,
    ) -> Next
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let Buffers {
            buf, fields, out, ..
        } = bufs;
        let shared = &*self.shared;
        let Some(index) = taken_route(shared, &head, buf) else {
            return Next::Handoff;
        };
        let backend = shared.backends.get(shared.router.route(index).upstream);
        let Some(pool) = backend.http1().await else {
            return Next::Handoff;
        };
        let upstream = &backend.upstream;
        let started = Instant::now();
        let request_id = RequestId::from_client(fields.first(buf, Kind::XRequestId));
        // Rate-limited routes went to hyper above, so this takes nothing from a bucket.
        let authorization = fields.first(buf, Kind::Authorization);
        let Ok(claims) = shared.admit(index, info.peer.ip(), authorization).await else {
            // hyper's path answers it (401, 403 or 503), from the same bytes.
            return Next::Handoff;
        };
        // From here on the request is the fast path's. Its head, rewritten, goes to `out`
        // while `buf` still holds it.
        out.clear();
        let rule = rules::Forward {
            conn: info,
            version: Version::HTTP_11,
            // Absolute-form targets are hyper's.
            authority: None,
            request_id: request_id.as_bytes(),
            identity: shared.jwt.identity(),
            claims: claims.as_ref(),
        };
        let host_at = head.write_upstream(buf, fields, &rule, out);
        let resend_after_503 = health::resend_after_503(&head.method, || {
            fields.get(buf, health::IDEMPOTENCY_KEY).is_some()
        });
        // The access log's copy of the target, before the head leaves the buffer.
        let target = shared
            .access_log
            .as_ref()
            .map(|_| String::from_utf8_lossy(head.target(buf)).into_owned());
        buf.advance(head.len);
        self.counters.relayed.inc();
        let exchange = Exchange {
            shared,
            head: &head,
            host_at,
            request_id: &request_id,
            pool,
            upstream,
            resend_after_503,
        };
        // Set when the response head is ready: the duration metric ends there on both paths.
        let mut answered = None;
        let result = exchange.run(io, bufs, &mut answered).await;
        let asked = target.as_deref().map(|target| Asked {
            client: info.peer.ip(),
            method: head.method.as_str(),
            target,
            protocol: "HTTP/1.1",
            request_id: request_id.as_str(),
            started,
        });
        if let Some((status, at)) = answered {
            shared.record(
                Some(index),
                asked.as_ref(),
                status,
                at.duration_since(started),
            );
        }
        match result {
            Ok(Done::Whole) if head.keep_alive => Next::Continue,
            Ok(Done::Whole | Done::Close) => Next::Close,
            Ok(Done::BodyLeft) => Next::Linger,
            Err(Failure::Answer { err, consumed }) => {
                let request_id = request_id.to_header_value();
                pipeline::log_error(&request_id, &err);
                let status = err.status().as_u16();
                shared.record(Some(index), asked.as_ref(), status, started.elapsed());
                let keep = consumed && head.keep_alive;
                match answer(io, err, &request_id, keep, &mut bufs.out).await {
                    true if keep => Next::Continue,
                    true if !consumed => Next::Linger,
                    _ => Next::Close,
                }
            }
            Err(Failure::Abort) => Next::Close,
        }
    }
}

/// The route of a request the fast path takes, or `None` for hyper to serve it: no route (or a
/// path hyper refuses), the gateway's own API pages, transformed and rate-limited routes,
/// bodies over the limit, which hyper's path refuses, and a browser's cross-origin requests
/// when CORS is on ([`crate::cors`]).
fn taken_route(shared: &Shared, head: &request::Head, buf: &[u8]) -> Option<usize> {
    if head.origin && shared.cors.is_some() {
        return None;
    }
    let path = head.path(buf);
    let index = shared.router.find(&head.method, path).ok()?;
    if shared.api_doc(&head.method, path).is_some() {
        return None;
    }
    let route = shared.router.route(index);
    let hypers = route.json_to_xml.is_some()
        || route.rate_limit.is_some()
        || head.body > shared.max_body_bytes;
    (!hypers).then_some(index)
}

/// How reading a request head ended.
enum Read {
    Head(request::Head),
    Closed,
    Decline,
    /// Not a request the gateway can read: answer this and close.
    Refuse(GatewayError),
}

/// One request relayed to an upstream and its response back.
struct Exchange<'a> {
    shared: &'a Shared,
    head: &'a request::Head,
    /// Where the `Host` line goes in the upstream head: see [`request::insert_host`].
    host_at: usize,
    request_id: &'a RequestId,
    pool: &'a Arc<Pool>,
    upstream: &'a Upstream,
    /// Whether the request may go to another endpoint after a 503.
    resend_after_503: bool,
}

/// Why no response head came.
enum NoHead {
    /// The upstream closed the connection (or reset it) before a byte of the response.
    Closed(String),
    /// The time to the response head ran out.
    Timeout,
    /// The response head was malformed or too large, or the connection broke mid-head.
    Invalid(String),
    /// A fresh connection, to send the request again on, could not be had.
    Reconnect(SendError),
}

/// When a request whose body went out with its head may be sent again.
#[derive(Clone, Copy)]
struct Resend {
    /// When its connection closed before a byte of the answer came (RFC 9112 §9.3.1:
    /// idempotent requests only): once on a new connection to the same endpoint when the
    /// closed one was pooled (the keep-alive race), once to another endpoint otherwise or when
    /// that too closed. A request whose write failed is sent again whatever its method: the
    /// upstream had closed the connection, and cannot have read all of it.
    idempotent: bool,
    /// To another endpoint after a 503 ([`health::resend_after_503`]), once, within the retry
    /// budget.
    after_503: bool,
}

/// Sends `request` (head and whole body) on `conn` and reads the response head into `up`
/// (its header lines into `fields`) before `deadline`, as [`read_head`], sending it again as
/// `resend` allows. A request sent again on another endpoint has its `Host` changed in
/// `request`; `conn` is then the connection it went out on.
#[allow(clippy::too_many_arguments)]
async fn send_whole(
    pool: &Arc<Pool>,
    conn: &mut pool::Conn,
    request: &mut Vec<u8>,
    up: &mut BytesMut,
    fields: &mut Fields,
    head_request: bool,
    resend: Resend,
    deadline: &mut Deadline,
) -> Result<response::Head, NoHead> {
    // Sent again at most once on a new connection to the same endpoint (`reopened`) and once
    // to another endpoint (`moved`).
    let (mut reopened, mut moved) = (false, false);
    loop {
        let sent = deadline
            .run(async {
                conn.stream.write_all(request).await?;
                // TLS holds written records until flushed.
                conn.stream.flush().await
            })
            .await;
        let pooled = !conn.fresh;
        // When writing failed, the upstream had closed the connection and read none of the
        // request or part of it: it may go out again whatever its method.
        let unread = matches!(sent, Ok(Err(_)));
        let got = match sent {
            Err(_) => Err(NoHead::Timeout),
            Ok(Err(e)) => Err(NoHead::Closed(e.to_string())),
            Ok(Ok(())) => {
                // An `up` with no capacity (a request's own buffer, as the bridge's) is
                // allocated, on a cleartext connection, once the response starts to arrive, so
                // a request waiting for its upstream holds no read buffer: with a thousand
                // HTTP/2 streams in flight that was 8 MB of empty buffers. An error here comes
                // back from the read.
                if up.capacity() == 0 && deadline.run(conn.stream.readable()).await.is_err() {
                    Err(NoHead::Timeout)
                } else {
                    read_head(&mut conn.stream, up, fields, head_request, deadline).await
                }
            }
        };
        if let Ok(head) = &got {
            pool.answered(conn, head.status.as_u16());
        }
        let at = conn.endpoint;
        let again = unread || resend.idempotent;
        let next = match got {
            // A pooled connection the upstream had closed (the keep-alive race): the same
            // endpoint on a new connection (the others if it refuses).
            Err(NoHead::Closed(_)) if again && pooled && !reopened && !moved => {
                reopened = true;
                let new = pool.reopen(at).await.map_err(NoHead::Reconnect)?;
                moved = new.endpoint != at;
                new
            }
            // A new connection closed unanswered: the endpoint is in trouble (killed while it
            // worked on the request, say, or while it was being reconnected to); another one.
            Err(NoHead::Closed(why)) if again && !moved => match pool.checkout_retry(at).await {
                Some(other) => {
                    moved = true;
                    other
                }
                None => return Err(NoHead::Closed(why)),
            },
            Ok(head)
                if head.status == StatusCode::SERVICE_UNAVAILABLE && resend.after_503 && !moved =>
            {
                match pool.checkout_retry(at).await {
                    // The 503's connection goes, its answer unread.
                    Some(other) => {
                        moved = true;
                        other
                    }
                    None => return Ok(head),
                }
            }
            other => return other,
        };
        up.clear();
        if next.endpoint != at {
            request::replace_host(request, next.authority(pool));
        }
        *conn = next;
    }
}

/// The 502 for `upstream`.
fn bad_gateway(upstream: &Upstream, reason: impl Into<String>) -> GatewayError {
    GatewayError::BadGateway {
        upstream: upstream.name().to_string(),
        reason: reason.into(),
    }
}

/// The 504 for `upstream`, after its request timeout.
fn timed_out(upstream: &Upstream) -> GatewayError {
    GatewayError::Timeout {
        upstream: upstream.name().to_string(),
        after_ms: upstream.request_timeout().as_millis(),
    }
}

/// Reads a response body of `n` bytes (at most [`GATHER`]) into `up` before `deadline`; nothing
/// of it has reached the client yet, so a body cut short becomes a 502 and one that stops coming
/// a 504 at the same deadline as the head.
async fn gather_response<S: AsyncRead + Unpin>(
    stream: &mut S,
    up: &mut BytesMut,
    n: usize,
    deadline: &mut Deadline,
    upstream: &Upstream,
) -> Result<(), GatewayError> {
    match deadline.run(gather(stream, up, n)).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(bad_gateway(
            upstream,
            format!("connection closed after {} of {n} body bytes", up.len()),
        )),
        Ok(Err(e)) => Err(bad_gateway(
            upstream,
            format!("reading the response body failed: {e}"),
        )),
        Err(_) => Err(timed_out(upstream)),
    }
}

impl Exchange<'_> {
    fn bad_gateway(&self, reason: impl Into<String>, consumed: bool) -> Failure {
        Failure::Answer {
            err: bad_gateway(self.upstream, reason),
            consumed,
        }
    }

    fn timeout(&self, consumed: bool) -> Failure {
        Failure::Answer {
            err: timed_out(self.upstream),
            consumed,
        }
    }

    /// A response body that failed once its head was sent: the client connection is closed,
    /// the body cut short. An upstream that stopped sending is worth a warning; a client that
    /// went away, or an upstream that closed, is not.
    fn cut_off(&self, err: &std::io::Error) -> Failure {
        if let Some(stalled) = ReadStalled::of(err) {
            crate::body::warn_stalled(self.upstream.name(), stalled);
        }
        Failure::Abort
    }

    /// Sends the request (head, then the body from `buf` and the client) and relays the
    /// response; `answered` gets its status and when its head was ready.
    async fn run<IO>(
        &self,
        io: &mut IO,
        bufs: &mut Buffers,
        answered: &mut Option<(u16, Instant)>,
    ) -> Result<Done, Failure>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send,
    {
        self.gather_body(io, &mut bufs.buf).await?;
        let (mut conn, streamed) = self.checkout(bufs).await?;
        if streamed > 0 {
            return self.duplex(io, conn, streamed, bufs, answered).await;
        }
        // The whole body is in `out` with the head: the request can be sent again.
        let resend = Resend {
            idempotent: self.head.idempotent(),
            after_503: self.resend_after_503,
        };
        let head_request = self.head.method == Method::HEAD;
        let Buffers {
            fields,
            up,
            out,
            deadline,
            ..
        } = &mut *bufs;
        let head = send_whole(
            self.pool,
            &mut conn,
            out,
            up,
            fields,
            head_request,
            resend,
            deadline,
        )
        .await
        .map_err(|no| self.no_head(no, true))?;
        *answered = Some((head.status.as_u16(), Instant::now()));
        let close = !self.head.keep_alive;
        let reusable = match self.relay(io, &mut conn.stream, &head, close, bufs).await {
            Ok(reusable) => reusable,
            Err(Relay::Unsent(err)) => {
                // Nothing of the response went out: the client gets the error instead.
                *answered = None;
                return Err(Failure::Answer {
                    err,
                    consumed: true,
                });
            }
            Err(Relay::Broken(failure)) => return Err(failure),
        };
        io.flush().await.map_err(|_| Failure::Abort)?;
        // Bytes past the end of the response: the upstream cannot be trusted with another.
        if reusable && bufs.up.is_empty() {
            self.pool.checkin(conn);
        }
        Ok(Done::Whole)
    }

    /// Reads a body of up to [`GATHER`] bytes whole into `buf` before an upstream connection is
    /// taken, so a slow client does not hold one.
    async fn gather_body<IO>(&self, io: &mut IO, buf: &mut BytesMut) -> Result<(), Failure>
    where
        IO: AsyncRead + Unpin,
    {
        let body = self.head.body;
        if body <= buf.len() as u64 || body > GATHER as u64 {
            return Ok(());
        }
        let limit = self.upstream.request_timeout();
        // At most GATHER, so it fits in usize.
        match tokio::time::timeout(limit, gather(io, buf, body as usize)).await {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false) | Err(_)) => Err(Failure::Abort),
            Err(_) => Err(Failure::Answer {
                err: GatewayError::SlowBody {
                    after_ms: limit.as_millis(),
                    got: buf.len() as u64,
                    expected: Some(body),
                },
                consumed: false,
            }),
        }
    }

    /// Takes an upstream connection and puts the request in `bufs.out`: the head (in `out`
    /// already, but for its `Host`) and the body that `buf` holds; how much of the body is
    /// still to come from the client. Starts the answer deadline.
    async fn checkout(&self, bufs: &mut Buffers) -> Result<(Conn, u64), Failure> {
        let Buffers {
            buf, out, deadline, ..
        } = bufs;
        let body = self.head.body;
        let conn = self.pool.checkout().await.map_err(|e| Failure::Answer {
            err: self.shared.upstream_error(self.upstream, e),
            consumed: body == 0,
        })?;
        request::insert_host(out, self.host_at, conn.authority(self.pool));
        let streamed = if body <= buf.len() as u64 {
            // At most buf.len(), so it fits in usize.
            let n = body as usize;
            out.extend_from_slice(&buf[..n]);
            buf.advance(n);
            0
        } else {
            out.extend_from_slice(buf);
            let rest = body - buf.len() as u64;
            buf.clear();
            rest
        };
        self.upstream.count_request();
        deadline.set(tokio::time::Instant::now() + self.upstream.request_timeout());
        Ok((conn, streamed))
    }

    /// The answer to the client when no response head came; `consumed`: the request body is
    /// all off the client connection.
    fn no_head(&self, no: NoHead, consumed: bool) -> Failure {
        match no {
            NoHead::Timeout => self.timeout(consumed),
            NoHead::Reconnect(e) => Failure::Answer {
                err: self.shared.upstream_error(self.upstream, e),
                consumed,
            },
            NoHead::Closed(why) | NoHead::Invalid(why) => self.bad_gateway(why, consumed),
        }
    }

    /// Sends the request in `bufs.out`, then streams the `streamed` bytes of body still to
    /// come from the client to the upstream while its answer is read and relayed back: an
    /// upstream may answer the first part of a body before it has the rest, and its client may
    /// wait for that answer before it sends more.
    ///
    /// An answer that comes before the whole body has gone up says `connection: close`; when it
    /// has been relayed and the body is still not all up, the rest stays unread (a 413 for a
    /// body over the upstream's limit, as nginx relays it) and both connections close.
    async fn duplex<IO>(
        &self,
        io: &mut IO,
        mut conn: Conn,
        streamed: u64,
        bufs: &mut Buffers,
        answered: &mut Option<(u16, Instant)>,
    ) -> Result<Done, Failure>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let sent = bufs
            .deadline
            .run(async {
                conn.stream.write_all(&bufs.out).await?;
                // TLS holds written records until flushed.
                conn.stream.flush().await
            })
            .await;
        match sent {
            Err(_) => return Err(self.timeout(false)),
            Ok(Err(e)) => return Err(self.bad_gateway(e.to_string(), false)),
            Ok(Ok(())) => {}
        }
        let body = self.head.body;
        let head_request = self.head.method == Method::HEAD;
        let (client_in, mut client_out) = tokio::io::split(&mut *io);
        let mut rest = Upload::new(client_in.take(streamed), self.shared.body_read_timeout);
        let mut uploaded = None;
        let (mut up_in, mut up_out) = tokio::io::split(&mut conn.stream);
        bufs.up.reserve(BUF);
        let ended = {
            let upload = async {
                let copied = match tokio::io::copy(&mut rest, &mut up_out).await {
                    Ok(n) if n == streamed => up_out.flush().await.map(|()| Uploaded::Whole),
                    Ok(_) => Ok(Uploaded::ClientGone),
                    Err(e) => Err(e),
                };
                match copied {
                    Ok(done) => done,
                    Err(_) if rest.stalled() => {
                        Uploaded::Stalled(body - streamed + rest.received())
                    }
                    Err(_) if rest.client_failed() => Uploaded::ClientGone,
                    // The upstream stopped reading: its answer, if one comes, decides.
                    Err(_) => Uploaded::Stopped,
                }
            };
            let mut upload = std::pin::pin!(upload);
            let got = {
                let Buffers {
                    up,
                    fields,
                    deadline,
                    ..
                } = &mut *bufs;
                let mut got =
                    std::pin::pin!(read_head(&mut up_in, up, fields, head_request, deadline));
                loop {
                    tokio::select! {
                        biased;
                        got = &mut got => break got,
                        done = &mut upload, if uploaded.is_none() => {
                            uploaded = Some(self.uploading(done)?);
                        }
                    }
                }
            };
            let whole = uploaded == Some(Uploaded::Whole);
            match got {
                Err(NoHead::Timeout) if !whole => Ended::TimedOut,
                Err(no) => return Err(self.no_head(no, whole)),
                Ok(head) => {
                    *answered = Some((head.status.as_u16(), Instant::now()));
                    let close = !self.head.keep_alive || !whole;
                    let mut relay =
                        std::pin::pin!(self.relay(&mut client_out, &mut up_in, &head, close, bufs));
                    let relayed = loop {
                        tokio::select! {
                            biased;
                            relayed = &mut relay => break relayed,
                            done = &mut upload, if uploaded.is_none() => {
                                // The answer has begun: a client that fails now is not answered.
                                uploaded = Some(self.uploading(done).map_err(|_| Failure::Abort)?);
                            }
                        }
                    };
                    Ended::Relayed {
                        status: head.status.as_u16(),
                        relayed,
                        close,
                    }
                }
            }
        };
        // The rest of the body, if any, stays unread.
        let waiting_on_client = rest.waiting_on_client();
        let got = body - streamed + rest.received();
        drop((rest, up_in, up_out, client_out));
        let whole = uploaded == Some(Uploaded::Whole);
        let (status, relayed, close) = match ended {
            Ended::TimedOut if waiting_on_client => {
                return Err(Failure::Answer {
                    err: GatewayError::SlowBody {
                        after_ms: self.upstream.request_timeout().as_millis(),
                        got,
                        expected: Some(body),
                    },
                    consumed: false,
                })
            }
            Ended::TimedOut => return Err(self.timeout(false)),
            Ended::Relayed {
                status,
                relayed,
                close,
            } => (status, relayed, close),
        };
        self.pool.answered(&conn, status);
        match relayed {
            Ok(reusable) => {
                io.flush().await.map_err(|_| Failure::Abort)?;
                if reusable && whole && bufs.up.is_empty() {
                    self.pool.checkin(conn);
                }
                Ok(match (whole, close) {
                    (false, _) => Done::BodyLeft,
                    (true, true) => Done::Close,
                    (true, false) => Done::Whole,
                })
            }
            Err(Relay::Unsent(err)) => {
                *answered = None;
                Err(Failure::Answer {
                    err,
                    consumed: whole,
                })
            }
            Err(Relay::Broken(failure)) => Err(failure),
        }
    }

    /// What an ended upload means while the answer is awaited: the body is up, or the upstream
    /// stopped reading it (its answer decides); a client that went away or stopped sending
    /// fails the exchange.
    fn uploading(&self, done: Uploaded) -> Result<Uploaded, Failure> {
        match done {
            Uploaded::Whole | Uploaded::Stopped => Ok(done),
            // Nobody to answer.
            Uploaded::ClientGone => Err(Failure::Abort),
            Uploaded::Stalled(received) => Err(Failure::Answer {
                err: GatewayError::BodyStalled(BodyStalled {
                    after: self.shared.body_read_timeout,
                    received,
                }),
                consumed: false,
            }),
        }
    }

    /// Writes the response head, rewritten (`connection: close` when `close`), and relays the
    /// body as its framing says; whether the upstream connection may carry another request.
    async fn relay<IO, S>(
        &self,
        io: &mut IO,
        from: &mut S,
        head: &response::Head,
        close: bool,
        bufs: &mut Buffers,
    ) -> Result<bool, Relay>
    where
        IO: AsyncWrite + Unpin,
        S: AsyncRead + Unpin,
    {
        let Buffers {
            fields,
            up,
            out,
            deadline,
            ..
        } = bufs;
        let chunked = matches!(head.framing, Framing::Chunked | Framing::UntilClose);
        out.clear();
        status_line(head.status, out);
        let rule = rules::Relay {
            version: head.version(),
            request_id: self.request_id.as_bytes(),
            chunked,
        };
        fields::write(fields, up, &rule, out);
        if close {
            out.extend_from_slice(b"connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        up.advance(head.len);
        let read_timeout = self.upstream.read_timeout();
        match head.framing {
            Framing::Empty => write(io, out).await?,
            Framing::Length(n) => {
                if n > up.len() as u64 && n <= GATHER as u64 {
                    // At most GATHER, so it fits in usize.
                    gather_response(from, up, n as usize, deadline, self.upstream)
                        .await
                        .map_err(Relay::Unsent)?;
                }
                let first = n.min(up.len() as u64) as usize;
                out.extend_from_slice(&up[..first]);
                up.advance(first);
                write(io, out).await?;
                let left = n - first as u64;
                if left > 0 {
                    let mut rest = ReadDeadline::new(from.take(left), read_timeout);
                    let copied = tokio::io::copy(&mut rest, io)
                        .await
                        .map_err(|e| self.cut_off(&e))?;
                    if copied < left {
                        return Err(Relay::Broken(Failure::Abort));
                    }
                }
            }
            Framing::Chunked => self.relay_chunked(io, from, up, out, read_timeout).await?,
            Framing::UntilClose => {
                self.relay_until_close(io, from, up, out, read_timeout)
                    .await?;
                return Ok(false);
            }
        }
        Ok(head.reusable)
    }

    /// Relays a chunked body as it came, from what `up` holds after the head (`out` holds the
    /// head) to the last chunk and the trailers.
    async fn relay_chunked<IO, S>(
        &self,
        io: &mut IO,
        from: &mut S,
        up: &mut BytesMut,
        out: &mut Vec<u8>,
        read_timeout: Duration,
    ) -> Result<(), Relay>
    where
        IO: AsyncWrite + Unpin,
        S: AsyncRead + Unpin,
    {
        let mut scanner = ChunkScanner::default();
        let n = scanner
            .feed(up)
            .map_err(|e| Relay::Unsent(bad_gateway(self.upstream, e)))?;
        out.extend_from_slice(&up[..n]);
        up.advance(n);
        write(io, out).await?;
        let mut from = ReadDeadline::new(from, read_timeout);
        while !scanner.is_done() {
            up.clear();
            up.reserve(BUF);
            match from.read_buf(up).await {
                Ok(0) => return Err(Relay::Broken(Failure::Abort)),
                Err(e) => return Err(self.cut_off(&e).into()),
                Ok(_) => {}
            }
            let n = scanner.feed(up).map_err(|_| Failure::Abort)?;
            write(io, &up[..n]).await?;
            up.advance(n);
        }
        Ok(())
    }

    /// Relays a body that ends when the upstream closes, re-framed as chunks (`out` holds the
    /// head); the connection cannot be used again.
    async fn relay_until_close<IO, S>(
        &self,
        io: &mut IO,
        from: &mut S,
        up: &mut BytesMut,
        out: &mut Vec<u8>,
        read_timeout: Duration,
    ) -> Result<(), Relay>
    where
        IO: AsyncWrite + Unpin,
        S: AsyncRead + Unpin,
    {
        if !up.is_empty() {
            chunk(up, out);
        }
        write(io, out).await?;
        let mut from = ReadDeadline::new(from, read_timeout);
        loop {
            up.clear();
            up.reserve(BUF);
            match from.read_buf(up).await {
                Ok(0) => break,
                Err(e) => return Err(self.cut_off(&e).into()),
                Ok(_) => {}
            }
            out.clear();
            chunk(up, out);
            write(io, out).await?;
        }
        write(io, b"0\r\n\r\n").await?;
        up.clear();
        Ok(())
    }
}

/// How the streaming of a request body to the upstream ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Uploaded {
    /// All of it went up.
    Whole,
    /// The upstream stopped reading it (it may have answered already).
    Stopped,
    /// The client's connection ended or failed before the whole body.
    ClientGone,
    /// The client sent nothing for the body read timeout; how much of the body came.
    Stalled(u64),
}

/// How a full-duplex exchange ended, its upload's futures dropped.
enum Ended {
    /// No answer head came in time while the body was still going up.
    TimedOut,
    /// The answer, with its status, relayed (or not); `close`: its head said so.
    Relayed {
        status: u16,
        relayed: Result<bool, Relay>,
        close: bool,
    },
}

/// Why a response was not relayed to its end.
enum Relay {
    /// Before any of it went out: the client can be answered with this error instead.
    Unsent(GatewayError),
    /// Part of it went out, or the client went away: close.
    Broken(Failure),
}

impl From<Failure> for Relay {
    fn from(f: Failure) -> Self {
        Self::Broken(f)
    }
}

/// How a relayed exchange ended for the client's connection.
enum Done {
    /// The request was read whole: the connection may carry the next one.
    Whole,
    /// The request was read whole, but the answer said the connection closes.
    Close,
    /// The answer came before the client's whole body was read: the connection is closed
    /// after it (lingering, so that the client gets the answer rather than a reset).
    BodyLeft,
}

/// Reads and parses the response head into `up` (skipping interim 1xx responses); on return
/// `up` starts with the head (`len` bytes, its header lines in `fields`), then what came after.
async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    up: &mut BytesMut,
    fields: &mut Fields,
    head_request: bool,
    deadline: &mut Deadline,
) -> Result<response::Head, NoHead> {
    up.clear();
    loop {
        if !up.is_empty() {
            match response::parse(up, head_request, fields) {
                response::Parsed::Head(h) if h.status == StatusCode::SWITCHING_PROTOCOLS => {
                    return Err(NoHead::Invalid(
                        "the upstream switched protocols unasked".into(),
                    ))
                }
                response::Parsed::Head(h) if h.status.is_informational() => {
                    up.advance(h.len);
                    continue;
                }
                response::Parsed::Head(h) => return Ok(h),
                response::Parsed::Invalid(why) => return Err(NoHead::Invalid(why)),
                response::Parsed::Partial if up.len() > MAX_RESPONSE_HEAD => {
                    return Err(NoHead::Invalid(format!(
                        "response head over {MAX_RESPONSE_HEAD} bytes"
                    )))
                }
                response::Parsed::Partial => {}
            }
        }
        up.reserve(BUF);
        let empty = up.is_empty();
        match deadline.run(stream.read_buf(up)).await {
            Err(_) => return Err(NoHead::Timeout),
            Ok(Ok(0)) if empty => {
                return Err(NoHead::Closed("connection closed before a response".into()))
            }
            Ok(Err(e)) if empty => return Err(NoHead::Closed(e.to_string())),
            Ok(Ok(0)) => return Err(NoHead::Invalid("connection closed mid-head".into())),
            Ok(Err(e)) => return Err(NoHead::Invalid(e.to_string())),
            Ok(Ok(_)) => {}
        }
    }
}

/// Reads from `stream` until `buf` holds at least `want` bytes; false when the stream ends
/// first.
async fn gather<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    want: usize,
) -> std::io::Result<bool> {
    buf.reserve(want.saturating_sub(buf.len()));
    while buf.len() < want {
        if stream.read_buf(buf).await? == 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `HTTP/1.1 <code> <reason>` and CRLF; the usual one in one copy.
fn status_line(status: StatusCode, out: &mut Vec<u8>) {
    if status == StatusCode::OK {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `data` as one chunk of chunked coding, appended to `out`.
fn chunk(data: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Writes to the client; a failure ends the connection.
async fn write<IO: AsyncWrite + Unpin>(io: &mut IO, data: &[u8]) -> Result<(), Failure> {
    io.write_all(data).await.map_err(|_| Failure::Abort)
}

/// Answers `err` as the hyper path would (the same JSON body and headers); `false` when the
/// client connection failed.
async fn answer<IO>(
    io: &mut IO,
    err: GatewayError,
    request_id: &HeaderValue,
    keep_alive: bool,
    out: &mut Vec<u8>,
) -> bool
where
    IO: AsyncWrite + Unpin,
{
    let (parts, body) = err.into_response(request_id).into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return false,
    };
    out.clear();
    status_line(parts.status, out);
    request::write_headers(&parts.headers, out);
    out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
    io.write_all(out).await.is_ok() && io.flush().await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_carry_the_code_and_its_reason() {
        for (code, line) in [
            (200, "HTTP/1.1 200 OK\r\n"),
            (201, "HTTP/1.1 201 Created\r\n"),
            (404, "HTTP/1.1 404 Not Found\r\n"),
            (599, "HTTP/1.1 599 Unknown\r\n"),
        ] {
            let mut out = b"before ".to_vec();
            let status = StatusCode::from_u16(code).expect("a valid code");
            status_line(status, &mut out);
            assert_eq!(String::from_utf8_lossy(&out), format!("before {line}"));
        }
    }
}
