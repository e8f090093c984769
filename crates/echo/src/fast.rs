//! The echo's HTTP/1.1 fast path: plain requests answered straight from the bytes read, without
//! a hyper request and response (and their header maps) in between.
//!
//! Why: the echo sits behind every proxy the benchmarks compare, and its CPU per request is
//! spent on the same two cores as theirs. Through hyper it cost 2.6 µs of user time per
//! request with three request headers and 3.3 µs with seven (every header a name parsed and
//! hashed into a map), so a proxy that adds headers upstream paid for them twice, and the
//! differences between proxies shrank under the echo's own cost. Here a header costs a scan.
//!
//! What it takes: HTTP/1.1 requests in origin form, other than `HEAD` and `CONNECT`, whose
//! body (if any) is framed by one `Content-Length`, with no `Transfer-Encoding`, `Expect` or
//! `Upgrade`, at most one `Content-Type`, and a `Connection` naming only `keep-alive` or
//! `close`. At the first request it does not take, or a head that does not parse, it hands the
//! connection to hyper with the bytes it read, and hyper answers it (errors included) and the
//! rest of the connection, exactly as without the fast path.
//!
//! The answer is hyper's: `200`, the request's `Content-Type`, `content-length`,
//! `x-echo-protocol`, `x-echo-tls` and `date`, then the body streamed back as it arrives
//! (never held whole: at most one read buffer of it at a time).

use std::future::Future;
use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BytesMut};
use pms_net::head::{between_requests, read_head_bytes};
use pms_net::rewind::Rewind;
use pms_net::serve::{BoxIo, ConnInfo, Http1Fast, Stop};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Read buffer size, and growth step while a head is incomplete.
const BUF: usize = 8 * 1024;
/// Most header lines in a head the fast path takes; hyper serves longer heads.
const MAX_HEADERS: usize = 32;

/// Serves HTTP/1.1 connections before hyper does (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct FastEcho {
    /// Delay before every answer.
    pub(crate) delay: Duration,
    /// Time a client has to complete a head once it has begun one; also how long a
    /// connection may stay idle between requests (one to two of these), as on hyper's path.
    pub(crate) header_read_timeout: Duration,
    /// Time a client may go silent in the middle of a request body.
    pub(crate) body_read_timeout: Duration,
    /// Largest head taken; a longer one goes to hyper, which refuses it.
    pub(crate) max_header_bytes: usize,
}

impl Http1Fast for FastEcho {
    fn serve(
        &self,
        io: BoxIo,
        info: ConnInfo,
        stop: Stop,
    ) -> impl Future<Output = Option<Rewind<BoxIo>>> + Send {
        self.connection(io, info, stop)
    }
}

/// A request head the fast path takes.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    /// Length of the head, blank line included.
    len: usize,
    /// Length of the body.
    body: u64,
    /// Where the `Content-Length` value is in the buffer: it goes back as it came, as on
    /// hyper's path.
    content_length: Option<Range<usize>>,
    /// Where the `Content-Type` value is in the buffer.
    content_type: Option<Range<usize>>,
    /// The client asked to close after this request.
    close: bool,
}

/// What [`parse`] made of the start of the buffer.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    Take(Head),
    Partial,
    /// For hyper: not a request the fast path takes, or not a valid one.
    Decline,
}

/// How a connection between requests went on.
enum Read {
    Head(Head),
    Closed,
    Decline,
}

impl FastEcho {
    async fn connection<IO>(&self, mut io: IO, info: ConnInfo, stop: Stop) -> Option<Rewind<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let mut buf = BytesMut::with_capacity(BUF);
        let mut out = Vec::with_capacity(256);
        let mut date = Date::default();
        let draining = stop.clone();
        let (ended, activity) = between_requests(stop, self.header_read_timeout);
        let mut ended = std::pin::pin!(ended);
        loop {
            let head = match self.read_head(&mut io, &mut buf, ended.as_mut()).await {
                Read::Head(head) => head,
                Read::Closed => return None,
                Read::Decline => {
                    tracing::debug!(peer = %info.peer, "fast path hands the connection to hyper");
                    return Some(Rewind::new(buf.freeze(), io));
                }
            };
            activity.request();
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            if self
                .answer(&mut io, info, &head, &mut buf, &mut out, &mut date)
                .await
                .is_err()
                || head.close
                || draining.is_set()
            {
                let _ = io.shutdown().await;
                return None;
            }
            if buf.is_empty() && buf.capacity() > 2 * BUF {
                buf = BytesMut::with_capacity(BUF);
            }
        }
    }

    /// Waits for a complete head at the start of `buf`: while the connection is idle, until
    /// `ended` resolves; once a head has begun, for the header-read limit.
    async fn read_head<IO>(
        &self,
        io: &mut IO,
        buf: &mut BytesMut,
        mut ended: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Read
    where
        IO: AsyncRead + Unpin,
    {
        let mut deadline = None;
        loop {
            if !buf.is_empty() {
                match parse(buf) {
                    Parsed::Take(head) => return Read::Head(head),
                    Parsed::Decline => return Read::Decline,
                    Parsed::Partial if buf.len() >= self.max_header_bytes => return Read::Decline,
                    Parsed::Partial => {}
                }
            }
            let limit = self.header_read_timeout;
            if !read_head_bytes(io, buf, BUF, ended.as_mut(), &mut deadline, limit).await {
                return Read::Closed;
            }
        }
    }

    /// Writes the answer to the head at the start of `buf`, with the body streamed back as it
    /// comes; leaves in `buf` whatever follows the request (a pipelined next one).
    async fn answer<IO>(
        &self,
        io: &mut IO,
        info: ConnInfo,
        head: &Head,
        buf: &mut BytesMut,
        out: &mut Vec<u8>,
        date: &mut Date,
    ) -> std::io::Result<()>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        out.clear();
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        if let Some(range) = &head.content_type {
            out.extend_from_slice(b"content-type: ");
            out.extend_from_slice(&buf[range.clone()]);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"content-length: ");
        match &head.content_length {
            Some(range) => out.extend_from_slice(&buf[range.clone()]),
            None => out.push(b'0'),
        }
        out.extend_from_slice(if info.tls {
            b"\r\nx-echo-protocol: HTTP/1.1\r\nx-echo-tls: true\r\n"
        } else {
            b"\r\nx-echo-protocol: HTTP/1.1\r\nx-echo-tls: false\r\n"
        });
        if head.close {
            out.extend_from_slice(b"connection: close\r\n");
        }
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(date.now());
        out.extend_from_slice(b"\r\n\r\n");
        buf.advance(head.len);
        // The body bytes already read leave with the head, in one write.
        let mut left = head.body;
        let first = clamp(left, buf.len());
        pms_h1::write_two(io, out, &buf[..first]).await?;
        buf.advance(first);
        left -= first as u64;
        while left > 0 {
            buf.reserve(BUF);
            let n = match tokio::time::timeout(self.body_read_timeout, io.read_buf(buf)).await {
                Ok(Ok(0)) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(Ok(_)) => clamp(left, buf.len()),
                Ok(Err(err)) => return Err(err),
                Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
            };
            io.write_all(&buf[..n]).await?;
            buf.advance(n);
            left -= n as u64;
        }
        io.flush().await
    }
}

/// `left`, or `available` if that is less.
fn clamp(left: u64, available: usize) -> usize {
    usize::try_from(left).map_or(available, |l| l.min(available))
}

/// Reads the head at the start of `buf`, if there is a whole one the fast path takes.
fn parse(buf: &[u8]) -> Parsed {
    let mut storage = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut storage);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Decline,
    };
    let origin_form = req.path.is_some_and(|p| p.starts_with('/'));
    if req.version != Some(1) || matches!(req.method, Some("HEAD" | "CONNECT")) || !origin_form {
        return Parsed::Decline;
    }
    let mut head = Head {
        len,
        body: 0,
        content_length: None,
        content_type: None,
        close: false,
    };
    // A value is a slice of `buf`: its place there is the distance between them.
    let place = |value: &[u8]| {
        let start = value.as_ptr() as usize - buf.as_ptr() as usize;
        start..start + value.len()
    };
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            match (&head.content_length, pms_h1::content_length(h.value)) {
                (None, Some(n)) => {
                    head.body = n;
                    head.content_length = Some(place(h.value));
                }
                _ => return Parsed::Decline,
            }
        } else if name.eq_ignore_ascii_case(b"content-type") {
            if head.content_type.is_some() {
                return Parsed::Decline;
            }
            head.content_type = Some(place(h.value));
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    head.close = true;
                } else if !token.eq_ignore_ascii_case(b"keep-alive") {
                    return Parsed::Decline;
                }
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"expect")
            || name.eq_ignore_ascii_case(b"upgrade")
        {
            return Parsed::Decline;
        }
    }
    Parsed::Take(head)
}

/// The `date` value, formatted once a second.
#[derive(Default)]
struct Date {
    second: u64,
    text: String,
}

impl Date {
    fn now(&mut self) -> &[u8] {
        let now = SystemTime::now();
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if second != self.second || self.text.is_empty() {
            self.second = second;
            self.text = httpdate::fmt_http_date(now);
        }
        self.text.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(head: &str) -> Head {
        match parse(head.as_bytes()) {
            Parsed::Take(h) => h,
            other => panic!("{head:?}: {other:?}"),
        }
    }

    #[test]
    fn plain_heads_are_taken_with_their_length_type_and_close() {
        let text = "POST /a?b HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                    Content-Length: 12\r\nConnection: keep-alive, close\r\n\r\n{\"a\":1}";
        let head = take(text);
        assert_eq!(head.len, text.len() - 7);
        assert_eq!(head.body, 12);
        assert_eq!(&text[head.content_length.unwrap()], "12");
        assert!(head.close);
        let range = head.content_type.unwrap();
        assert_eq!(&text[range], "application/json");

        let head = take("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!((head.body, head.content_type, head.close), (0, None, false));
    }

    #[test]
    fn anything_else_is_left_to_hyper() {
        for head in [
            "GET / HTTP/1.0\r\n\r\n",
            "HEAD / HTTP/1.1\r\n\r\n",
            "CONNECT x:443 HTTP/1.1\r\n\r\n",
            "OPTIONS * HTTP/1.1\r\n\r\n",
            "GET http://x/ HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n",
            "GET / HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Type: a\r\nContent-Type: b\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
            "NOT HTTP AT ALL\r\n\r\n",
        ] {
            assert_eq!(parse(head.as_bytes()), Parsed::Decline, "{head:?}");
        }
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: y\r\n")).collect();
        let head = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(parse(head.as_bytes()), Parsed::Decline, "too many headers");
    }

    #[test]
    fn incomplete_heads_wait_for_more() {
        assert_eq!(parse(b"POST / HTTP/1.1\r\nContent-Le"), Parsed::Partial);
    }

    #[test]
    fn the_date_is_an_http_date() {
        let mut date = Date::default();
        let text = String::from_utf8(date.now().to_vec()).unwrap();
        assert!(httpdate::parse_http_date(&text).is_ok(), "{text}");
        assert!(text.ends_with(" GMT"), "{text}");
    }
}
