//! Requests that hyper's server received (HTTP/2 from the client, or HTTP/1.1 on a connection
//! the fast path handed over) sent to an HTTP/1.1 upstream over the [`h1up`](crate::h1up)
//! client's pooled connections, which the fast path relays over too, instead of through hyper's
//! client.
//!
//! Why: with an HTTP/2 client in front of an HTTP/1.1 back-end, hyper's pooled client cost the
//! gateway about a tenth of its CPU per request (its dispatch channel, a task per upstream
//! connection woken twice per request, its HTTP/1.1 codec). Here the request's own task writes
//! the request and reads the response.
//!
//! What it takes: requests whose whole body is known to be small — none, or a `Content-Length`
//! up to [`GATHER`] and the body limit — so the body is read before an upstream connection is
//! taken and the request can be sent again on a fresh connection. Others (bodies of unknown or
//! large size, `CONNECT`) stay with hyper's client, which streams them. Responses of up to
//! [`GATHER`] bytes with a `Content-Length` are read whole and the connection goes back to the
//! pool at once; longer, chunked or close-delimited ones stream, and the connection goes back
//! when the body has been read to its end. The trailers of a chunked response are dropped.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::stream;
use http::header::{HeaderValue, CONTENT_LENGTH, EXPECT};
use http::{Method, Response};
use http_body::{Body as _, Frame};
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::Incoming;
use pms_h1::ChunkScanner;
use pms_net::deadline::Deadline;
use pms_net::stall::{ReadDeadline, ReadStalled};
use tokio::io::AsyncReadExt;

use crate::body::{BoxError, ProxyBody};
use crate::h1up::fields::Fields;
use crate::h1up::pool::{Conn, Pool};
use crate::h1up::response::Framing;
use crate::h1up::{
    bad_gateway, gather_response, head, send_whole, timed_out, NoHead, Resend, Whole, BUF, GATHER,
};
use crate::headers::rules::{self, Rule};
use crate::health;
use crate::pipeline::Shared;
use crate::respond::GatewayError;
use crate::upstream::Upstream;

/// What [`send`] did with a request.
pub(super) enum Bridged {
    /// It sent it; the response or the error to answer.
    Sent(Result<Response<ProxyBody>, GatewayError>),
    /// It does not take it (see the module doc): the request, untouched, for hyper's client.
    Declined(http::request::Parts, Incoming),
}

/// Sends the request (head already rewritten, see [`rules::Forward`]) to upstream `index` over
/// the fast path's pool when it takes it, and returns the upstream's response, rewritten by
/// [`rules::Relay`]. `declared` is the request's `Content-Length`.
pub(super) async fn send(
    shared: &Shared,
    index: usize,
    parts: http::request::Parts,
    body: Incoming,
    declared: Option<u64>,
    request_id: &HeaderValue,
) -> Bridged {
    let small = body.is_end_stream()
        || declared.is_some_and(|n| n <= shared.max_body_bytes.min(GATHER as u64));
    if !small || parts.method == Method::CONNECT {
        return Bridged::Declined(parts, body);
    }
    let backend = shared.backends.get(index);
    let Some(pool) = backend.http1().await else {
        return Bridged::Declined(parts, body);
    };
    shared.backends.bridged.inc();
    Bridged::Sent(
        exchange(
            shared,
            &backend.upstream,
            pool,
            parts,
            body,
            declared,
            request_id,
        )
        .await,
    )
}

async fn exchange(
    shared: &Shared,
    upstream: &Upstream,
    pool: &Arc<Pool>,
    mut parts: http::request::Parts,
    body: Incoming,
    declared: Option<u64>,
    request_id: &HeaderValue,
) -> Result<Response<ProxyBody>, GatewayError> {
    let timeout = upstream.request_timeout();
    let body = read_body(body, declared.unwrap_or(0), timeout).await?;
    let mut conn = pool
        .checkout()
        .await
        .map_err(|e| shared.upstream_error(upstream, e))?;
    let mut out = whole_head(&mut parts, body.len(), conn.authority(pool));
    upstream.count_request();

    let at = tokio::time::Instant::now() + timeout;
    let mut deadline = conn.deadline.take().unwrap_or_else(|| Deadline::new(at));
    deadline.set(at);
    let head_request = parts.method == Method::HEAD;
    let resend = Resend {
        idempotent: health::idempotent(&parts.method),
        after_503: health::resend_after_503(&parts.method, || {
            parts.headers.contains_key(health::IDEMPOTENCY_KEY)
        }),
    };
    // Allocated when the response arrives (see `read_head`).
    let mut up = BytesMut::new();
    let mut fields = Fields::default();
    let request = Whole {
        head: &mut out,
        body: &body,
        head_request,
        resend,
    };
    let head = match send_whole(
        pool,
        &mut conn,
        request,
        &mut up,
        &mut fields,
        &mut deadline,
    )
    .await
    {
        Ok(h) => h,
        Err(NoHead::Timeout) => return Err(timed_out(upstream)),
        Err(NoHead::Reconnect(e)) => return Err(shared.upstream_error(upstream, e)),
        Err(NoHead::Closed(why) | NoHead::Invalid(why)) => return Err(bad_gateway(upstream, why)),
    };

    let mut headers = fields.to_header_map(&up);
    up.advance(head.len);
    let rule = rules::Relay {
        version: head.version(),
        request_id: request_id.as_bytes(),
        chunked: false,
    };
    rule.apply(&mut headers);
    // The deadline goes back with the connection (after a retry, the fresh one) for its next
    // request.
    let body = match head.framing {
        Framing::Empty => {
            conn.deadline = Some(deadline);
            if head.reusable && up.is_empty() {
                pool.checkin(conn);
            }
            Empty::new().map_err(|never| match never {}).boxed_unsync()
        }
        // At most GATHER, so it fits in usize.
        Framing::Length(n) if n <= GATHER as u64 => {
            let n = n as usize;
            gather_response(&mut conn.stream, &mut up, n, &mut deadline, upstream).await?;
            conn.deadline = Some(deadline);
            let data = body_bytes(&mut up, n);
            if head.reusable && up.is_empty() {
                pool.checkin(conn);
            }
            Full::new(data)
                .map_err(|never| match never {})
                .boxed_unsync()
        }
        framing => {
            if !matches!(framing, Framing::Length(_)) {
                headers.remove(CONTENT_LENGTH);
            }
            let upstream = (upstream.shared_name(), upstream.read_timeout());
            conn.deadline = Some(deadline);
            streamed(conn, pool.clone(), up, framing, head.reusable, upstream)
        }
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = head.status;
    *resp.headers_mut() = headers;
    Ok(resp)
}

/// The head of the request as it goes to the upstream at `authority`, its body (of `body`
/// bytes) read whole: `Expect` goes (there is nothing left to wait for), and `Content-Length`
/// states the body's length where there is a body or the method takes one.
fn whole_head(parts: &mut http::request::Parts, body: usize, authority: &str) -> Vec<u8> {
    parts.headers.remove(EXPECT);
    if body > 0
        || parts.headers.contains_key(CONTENT_LENGTH)
        || matches!(parts.method, Method::POST | Method::PUT | Method::PATCH)
    {
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(body));
    }
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = Vec::with_capacity(512);
    head::write_head(&parts.method, target, authority, &parts.headers, &mut out);
    out
}

/// The first `n` bytes of `up`, a gathered response body, taken out of it. A body much smaller
/// than the read buffer is copied out: sharing the buffer would keep all of it ([`BUF`] at
/// least) alive until the client has taken the body, once for every request in flight, where
/// the copy costs a small allocation and `n` bytes of `memcpy`.
fn body_bytes(up: &mut BytesMut, n: usize) -> Bytes {
    if n < up.capacity() / 2 {
        let data = Bytes::copy_from_slice(&up[..n]);
        up.advance(n);
        data
    } else {
        up.split_to(n).freeze()
    }
}

/// Reads the whole request body, `expected` bytes (it has none when hyper says the stream has
/// ended), within `timeout`.
async fn read_body(
    mut body: Incoming,
    expected: u64,
    timeout: Duration,
) -> Result<Bytes, GatewayError> {
    if body.is_end_stream() {
        return Ok(Bytes::new());
    }
    // At most GATHER (see `takes`), so it fits in usize.
    let mut got = BytesMut::with_capacity(expected as usize);
    let read = async {
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                got.extend_from_slice(&data);
            }
        }
        Ok::<_, hyper::Error>(())
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(())) if got.len() as u64 == expected => Ok(got.freeze()),
        Ok(Ok(())) => Err(GatewayError::BodyRead(format!(
            "{} body bytes where Content-Length said {expected}",
            got.len()
        ))),
        Ok(Err(e)) => Err(GatewayError::BodyRead(e.to_string())),
        Err(_) => Err(GatewayError::SlowBody {
            after_ms: timeout.as_millis(),
            got: got.len() as u64,
            expected: Some(expected),
        }),
    }
}

/// A response body read from the upstream connection as the client takes it. `upstream` is the
/// upstream's name and read timeout: a body it sends nothing of for that long fails.
fn streamed(
    conn: Conn,
    pool: Arc<Pool>,
    buf: BytesMut,
    framing: Framing,
    reusable: bool,
    upstream: (Arc<str>, Duration),
) -> ProxyBody {
    let left = match framing {
        Framing::Length(n) => Left::Length(n),
        Framing::Chunked => Left::Chunked(ChunkScanner::default()),
        Framing::Empty => Left::Length(0),
        Framing::UntilClose => Left::UntilClose,
    };
    let body = Streaming {
        conn: Some(conn),
        pool,
        buf,
        left,
        reusable,
        upstream: upstream.0,
        read_timeout: upstream.1,
    };
    let frames = stream::unfold(body, |mut body| async move {
        let data = body.next().await?;
        Some((data.map(Frame::data), body))
    });
    StreamBody::new(frames).boxed_unsync()
}

/// What is left of a streamed response body.
enum Left {
    /// This many bytes.
    Length(u64),
    /// Chunks up to the last one.
    Chunked(ChunkScanner),
    /// Everything until the upstream closes.
    UntilClose,
}

struct Streaming {
    /// `None` once the body has ended (the connection went back to the pool or was closed).
    conn: Option<Conn>,
    pool: Arc<Pool>,
    /// Bytes read from the upstream and not passed on yet.
    buf: BytesMut,
    left: Left,
    reusable: bool,
    upstream: Arc<str>,
    read_timeout: Duration,
}

impl Streaming {
    /// The next piece of the body; `None` at its end.
    async fn next(&mut self) -> Option<Result<Bytes, BoxError>> {
        loop {
            // Ended, or failed: the error was the last item.
            self.conn.as_ref()?;
            if !self.buf.is_empty() {
                if let Some(data) = self.take() {
                    return Some(data);
                }
            }
            if self.is_done() {
                if let Some(conn) = self.conn.take() {
                    if self.reusable && self.buf.is_empty() {
                        self.pool.checkin(conn);
                    }
                }
                return None;
            }
            let conn = self.conn.as_mut()?;
            self.buf.reserve(BUF);
            let read = {
                let mut from = ReadDeadline::new(&mut conn.stream, self.read_timeout);
                from.read_buf(&mut self.buf).await
            };
            match read {
                Ok(0) if matches!(self.left, Left::UntilClose) => {
                    self.conn = None;
                    return None;
                }
                Ok(0) => {
                    self.conn = None;
                    return Some(Err("the upstream closed the connection mid-body".into()));
                }
                Ok(_) => {}
                Err(e) => {
                    self.conn = None;
                    if let Some(stalled) = ReadStalled::of(&e) {
                        crate::body::warn_stalled(&self.upstream, stalled);
                    }
                    return Some(Err(e.into()));
                }
            }
        }
    }

    fn is_done(&self) -> bool {
        match &self.left {
            Left::Length(n) => *n == 0,
            Left::Chunked(scanner) => scanner.is_done(),
            Left::UntilClose => false,
        }
    }

    /// Body bytes from the start of `buf`, if it holds any.
    fn take(&mut self) -> Option<Result<Bytes, BoxError>> {
        match &mut self.left {
            Left::Length(0) => None,
            Left::Length(n) => {
                // At most buf.len(), so it fits in usize.
                let take = (*n).min(self.buf.len() as u64) as usize;
                *n -= take as u64;
                Some(Ok(self.buf.split_to(take).freeze()))
            }
            Left::UntilClose => Some(Ok(self.buf.split().freeze())),
            Left::Chunked(scanner) => {
                let mut data = BytesMut::new();
                let buf = &self.buf;
                match scanner.feed_data(buf, |r| data.extend_from_slice(&buf[r])) {
                    Ok(n) => self.buf.advance(n),
                    Err(e) => {
                        self.conn = None;
                        return Some(Err(format!("invalid chunked response body: {e}").into()));
                    }
                }
                (!data.is_empty()).then(|| Ok(data.freeze()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_body_is_copied_out_and_the_rest_stays() {
        let mut up = BytesMut::with_capacity(BUF);
        up.extend_from_slice(b"helloHTTP/1.1 200");
        let body = body_bytes(&mut up, 5);
        assert_eq!(&body[..], b"hello");
        assert_eq!(&up[..], b"HTTP/1.1 200");
    }

    #[test]
    fn a_body_filling_the_buffer_is_split_off() {
        let mut up = BytesMut::with_capacity(16);
        up.extend_from_slice(b"0123456789abcdefXY");
        let body = body_bytes(&mut up, 16);
        assert_eq!(&body[..], b"0123456789abcdef");
        assert_eq!(&up[..], b"XY");
    }
}
