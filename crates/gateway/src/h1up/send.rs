//! One request over a pooled HTTP/1.1 upstream connection: sent whole (and again, when the
//! connection turns out closed or the endpoint answers 503 and the request allows it), and the
//! response head read; a small response body gathered whole.

use std::sync::Arc;

use bytes::{Buf, BytesMut};
use http::StatusCode;
use pms_net::deadline::Deadline;
use pms_net::spare;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::fields::Fields;
use super::pool::{Conn, Pool};
use super::{head, response, BUF, MAX_RESPONSE_HEAD};
use crate::respond::GatewayError;
use crate::upstream::{SendError, Upstream};

/// Why no response head came.
pub(crate) enum NoHead {
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
pub(crate) struct Resend {
    /// When its connection closed before a byte of the answer came (RFC 9112 §9.3.1:
    /// idempotent requests only): once on a new connection to the same endpoint when the
    /// closed one was pooled (the keep-alive race), once to another endpoint otherwise or when
    /// that too closed. A request whose write failed is sent again whatever its method: the
    /// upstream had closed the connection, and cannot have read all of it.
    pub(crate) idempotent: bool,
    /// To another endpoint after a 503
    /// ([`health::resend_after_503`](crate::health::resend_after_503)), once, within the retry
    /// budget.
    pub(crate) after_503: bool,
}

/// A request whose body is all in hand, as it goes to an upstream.
pub(crate) struct Whole<'a> {
    /// The head as written; its `Host` changes when it goes to another endpoint.
    pub(crate) head: &'a mut Vec<u8>,
    /// The body, which leaves with the head in one vectored write (not copied behind it).
    pub(crate) body: &'a [u8],
    /// A `HEAD` request: its response has no body, whatever its head says.
    pub(crate) head_request: bool,
    /// When it may be sent again.
    pub(crate) resend: Resend,
}

/// Sends `request` on `conn` and reads the response head into `up` (its header lines into
/// `fields`) before `deadline`, as [`read_head`], sending it again as its `resend` allows. A
/// request sent again on another endpoint has its `Host` changed; `conn` is then the connection
/// it went out on.
pub(crate) async fn send_whole(
    pool: &Arc<Pool>,
    conn: &mut Conn,
    request: Whole<'_>,
    up: &mut BytesMut,
    fields: &mut Fields,
    deadline: &mut Deadline,
) -> Result<response::Head, NoHead> {
    let Whole {
        head: request,
        body,
        head_request,
        resend,
    } = request;
    // Sent again at most once on a new connection to the same endpoint (`reopened`) and once
    // to another endpoint (`moved`).
    let (mut reopened, mut moved) = (false, false);
    loop {
        let sent = deadline
            .run(async {
                pms_h1::write_two(&mut conn.stream, request, body).await?;
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
            head::replace_host(request, next.authority(pool));
        }
        *conn = next;
    }
}

/// The 502 for `upstream`.
pub(crate) fn bad_gateway(upstream: &Upstream, reason: impl Into<String>) -> GatewayError {
    GatewayError::BadGateway {
        upstream: upstream.name().to_string(),
        reason: reason.into(),
    }
}

/// The 504 for `upstream`, after its request timeout.
pub(crate) fn timed_out(upstream: &Upstream) -> GatewayError {
    GatewayError::Timeout {
        upstream: upstream.name().to_string(),
        after_ms: upstream.request_timeout().as_millis(),
    }
}

/// Reads a response body of `n` bytes (at most [`GATHER`](super::GATHER)) into `up` before `deadline`; nothing
/// of it has reached the client yet, so a body cut short becomes a 502 and one that stops coming
/// a 504 at the same deadline as the head.
pub(crate) async fn gather_response<S: AsyncRead + Unpin>(
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

/// Reads and parses the response head into `up` (skipping interim 1xx responses); on return
/// `up` starts with the head (`len` bytes, its header lines in `fields`), then what came after.
pub(crate) async fn read_head<S: AsyncRead + Unpin>(
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
        // Before the answer's first bytes `up` may have no room: it borrows a spare then, so
        // that a connection waiting on its upstream holds no buffer.
        let empty = up.is_empty();
        match deadline.run(spare::read_into(stream, up, BUF)).await {
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
pub(crate) async fn gather<S: AsyncRead + Unpin>(
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
