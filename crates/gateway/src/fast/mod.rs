//! The HTTP/1.1 fast path: plain requests relayed between a client connection and a pooled
//! upstream connection by one task, without building hyper requests and responses on either
//! hop. Heads are parsed in place with `httparse` and their header lines rewritten by the rules
//! hyper's path applies too ([`rules::Forward`], [`rules::Relay`]) straight into the outgoing
//! head, with no `HeaderMap` in between (see [`crate::h1up::fields`]); bodies are copied as
//! they come, framed by `Content-Length` or chunked coding, a streamed request body and its
//! answer both ways at once ([`exchange`]). The upstream side is [`crate::h1up`]'s client.
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
//! them) can use the same upstream connections through the hyper front end's bridge. Switch
//! both off per gateway with `limits.http1_fast_path = false`.

mod exchange;
mod relay;
mod request;
#[cfg(test)]
mod rules_match;
mod upload;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Buf, BytesMut};
use http::Version;
use pms_net::deadline::Deadline;
use pms_net::head::{between_requests, read_head_bytes};
use pms_net::linger::linger;
use pms_net::rewind::Rewind;
use pms_net::serve::{BoxIo, ConnInfo, Http1Fast, Stop};
use pms_net::spare;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::h1up::fields::Fields;
use crate::h1up::BUF;
use crate::headers::rules::{self, Kind};
use crate::headers::{self, RequestId};
use crate::health;
use crate::metrics::FastPathCounters;
use crate::pipeline::{self, Asked, Shared};
use crate::respond::GatewayError;
use crate::spans::RequestSpan;

use self::exchange::{Done, Exchange};
use self::relay::answer;

/// An outgoing buffer larger than this is released between requests.
const KEEP: usize = 2 * BUF;

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

/// One client connection's buffers. Between requests the two that take bodies go back to the
/// thread's spares ([`pms_net::spare`]): a thousand idle connections hold none, and a request
/// reads into the buffer that the thread's last request gave back, still in cache.
struct Buffers {
    /// Bytes from the client: none between requests (unless the client sent more than one).
    buf: BytesMut,
    /// Where the header lines of the head at hand are, on either hop (in `buf` or `up`).
    fields: Fields,
    /// Bytes from the upstream: none until its answer comes (see [`crate::h1up::read_head`]).
    up: BytesMut,
    /// Bytes on their way out, to either side.
    out: Vec<u8>,
    /// The upstream's answer deadline: one timer for all the connection's requests.
    deadline: Deadline,
}

impl Buffers {
    fn new() -> Self {
        Self {
            buf: BytesMut::new(),
            fields: Fields::default(),
            up: BytesMut::new(),
            out: Vec::new(),
            deadline: Deadline::new(tokio::time::Instant::now()),
        }
    }

    /// Gives `buf` back to the spares once all it held has gone (bytes the client sent ahead
    /// stay).
    fn release(buf: &mut BytesMut) {
        if buf.is_empty() {
            spare::give_back(std::mem::take(buf));
        }
    }

    /// After a request, with the connection going idle: the body buffers go back to the spares
    /// (what the client sent beyond the request stays in `buf`; bytes the upstream sent beyond
    /// its answer are dropped with its connection, as `up` is), a large head's outgoing buffer
    /// is freed.
    fn idle(&mut self) {
        Self::release(&mut self.buf);
        spare::give_back(std::mem::take(&mut self.up));
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
                Next::Continue if !draining.is_set() => bufs.idle(),
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
            let limit = self.header_read_timeout;
            if !read_head_bytes(io, buf, BUF, ended.as_mut(), &mut deadline, limit).await {
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
        let mut span = shared.spans.as_ref().map(|spans| {
            let client = fields.first(buf, Kind::Traceparent);
            spans.open(client, &head.method, head.path(buf), SystemTime::now())
        });
        out.clear();
        let rule = rules::Forward {
            conn: info,
            version: Version::HTTP_11,
            // Absolute-form targets are hyper's.
            authority: None,
            request_id: request_id.as_bytes(),
            identity: shared.jwt.identity(),
            claims: claims.as_ref(),
            traceparent: span.as_ref().map(RequestSpan::traceparent),
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
            let took = at.duration_since(started);
            shared.record(Some(index), asked.as_ref(), span.take(), status, took);
        }
        match result {
            Ok(Done::Whole) if head.keep_alive => Next::Continue,
            Ok(Done::Whole | Done::Close) => Next::Close,
            Ok(Done::BodyLeft) => Next::Linger,
            Err(Failure::Answer { err, consumed }) => {
                let request_id = request_id.to_header_value();
                pipeline::log_error(&request_id, &err);
                let status = err.status().as_u16();
                let took = started.elapsed();
                shared.record(Some(index), asked.as_ref(), span.take(), status, took);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_connection_holds_no_body_buffer_but_keeps_bytes_the_client_sent_ahead() {
        let mut bufs = Buffers::new();
        bufs.buf = spare::take();
        bufs.buf.extend_from_slice(&[b'x'; 10_240]);
        bufs.buf.advance(10_240);
        bufs.up = spare::take();
        bufs.up.extend_from_slice(&[b'y'; 10_240]);
        bufs.up.advance(10_240);
        bufs.idle();
        assert_eq!(bufs.buf.capacity(), 0, "the request buffer stayed");
        assert_eq!(bufs.up.capacity(), 0, "the answer buffer stayed");

        // A client that sent its next request already: those bytes are not let go.
        bufs.buf = spare::take();
        bufs.buf.extend_from_slice(b"GET /next HTTP/1.1\r\n");
        bufs.idle();
        assert_eq!(&bufs.buf[..], b"GET /next HTTP/1.1\r\n");
    }
}
