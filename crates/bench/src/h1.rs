//! The HTTP/1.1 hot path: a request written from bytes built once per run, and the response
//! read into one buffer the connection keeps, its head parsed by `httparse`. A general-purpose
//! client (hyper's) builds a request, a header map and a body channel per request and hands
//! them to a connection task; wrk writes prepared bytes, and a load generator that wants to keep
//! up with wrk has to do the same. Bodies are framed by `Content-Length`, chunked encoding or the
//! end of the connection; `Connection: close` and HTTP/1.0 close after the response (the rules,
//! and the chunked decoding, are `pms_h1`'s, as the gateway reads them).

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Method, StatusCode, Version};
use pms_h1::{ChunkScanner, Framed, Framing, ResponseFraming};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use crate::stats::ErrorKind;
use crate::target::Answer;

/// Most response headers accepted.
const MAX_HEADERS: usize = 100;
/// Largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;

/// A byte stream: TCP or TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The bytes of one request, built once.
pub fn request_bytes(
    method: &Method,
    path_and_query: &str,
    authority: &str,
    headers: &[(HeaderName, HeaderValue)],
    body: &[u8],
) -> Bytes {
    let mut out = Vec::with_capacity(128 + body.len());
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path_and_query.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(authority.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (k, v) in headers {
        out.extend_from_slice(k.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() || matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
        out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    Bytes::from(out)
}

/// One HTTP/1.1 connection.
pub struct Connection {
    io: Box<dyn Io>,
    buf: BytesMut,
    open: bool,
}

impl Connection {
    /// Wraps an established stream.
    pub fn new(io: Box<dyn Io>) -> Self {
        Self {
            io,
            buf: BytesMut::new(),
            open: true,
        }
    }

    /// Whether another request may be sent.
    pub fn is_open(&self) -> bool {
        self.open
    }

    async fn fill(&mut self) -> Result<usize, ErrorKind> {
        // Start small (10,000 users × a big buffer is most of a generator's memory) and grow
        // with the responses: twice the capacity each time the spare room runs low.
        if self.buf.capacity() - self.buf.len() < 512 {
            self.buf.reserve(self.buf.capacity().clamp(1024, 1 << 20));
        }
        self.io
            .read_buf(&mut self.buf)
            .await
            .map_err(|_| ErrorKind::Reset)
    }

    /// Sends `wire` and reads the whole response; `head_only` for HEAD requests.
    ///
    /// # Errors
    /// [`ErrorKind::Reset`] when the connection fails or the response is malformed; the
    /// connection is then closed.
    pub async fn send(&mut self, wire: &[u8], head_only: bool) -> Result<Answer, ErrorKind> {
        let result = self.exchange(wire, head_only).await;
        if result.is_err() {
            self.open = false;
        }
        result
    }

    async fn exchange(&mut self, wire: &[u8], head_only: bool) -> Result<Answer, ErrorKind> {
        let began = tokio::time::Instant::now();
        self.io
            .write_all(wire)
            .await
            .map_err(|_| ErrorKind::Reset)?;
        self.io.flush().await.map_err(|_| ErrorKind::Reset)?;
        let (status, version, head_len, framing) = loop {
            if let Some(head) = self.parse_head(head_only)? {
                if (100..200).contains(&head.0) {
                    // An interim response (100 Continue): skip it, the real one follows.
                    self.buf.advance(head.2);
                    continue;
                }
                break head;
            }
            if self.buf.len() > MAX_HEAD || self.fill().await? == 0 {
                return Err(ErrorKind::Reset);
            }
        };
        let ttfb = began.elapsed();
        self.buf.advance(head_len);
        let (body, wire_body) = match framing {
            Framing::Empty => (Bytes::new(), 0),
            Framing::Length(n) => {
                let n = usize::try_from(n).map_err(|_| ErrorKind::Reset)?;
                while self.buf.len() < n {
                    if self.fill().await? == 0 {
                        return Err(ErrorKind::Reset);
                    }
                }
                (self.buf.split_to(n).freeze(), n)
            }
            Framing::Chunked => self.chunked().await?,
            Framing::UntilClose => {
                while self.fill().await? > 0 {}
                self.open = false;
                let n = self.buf.len();
                (self.buf.split_to(n).freeze(), n)
            }
        };
        Ok(Answer {
            status: StatusCode::from_u16(status).map_err(|_| ErrorKind::Reset)?,
            version,
            body,
            bytes: (head_len + wire_body) as u64,
            ttfb,
        })
    }

    /// Parses the response head in the buffer: status, version, head length, body framing;
    /// `None` when more bytes are needed.
    fn parse_head(
        &mut self,
        head_only: bool,
    ) -> Result<Option<(u16, Version, usize, Framing)>, ErrorKind> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut r = httparse::Response::new(&mut headers);
        let n = match r.parse(&self.buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(ErrorKind::Reset),
        };
        let code = r.code.unwrap_or(0);
        let minor = r.version.unwrap_or(1);
        let version = if minor == 0 {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        let mut lines = ResponseFraming::new(minor);
        for h in r.headers.iter() {
            lines.line(h.name.as_bytes(), h.value);
        }
        let Framed { framing, reusable } = lines
            .finish(code, head_only)
            .map_err(|_| ErrorKind::Reset)?;
        // An interim response (100 Continue) says nothing about the connection.
        if !reusable && !(100..200).contains(&code) {
            self.open = false;
        }
        Ok(Some((code, version, n, framing)))
    }

    /// Reads a chunked body: the decoded body and the bytes it took on the wire.
    async fn chunked(&mut self) -> Result<(Bytes, usize), ErrorKind> {
        let mut scanner = ChunkScanner::default();
        let mut body = BytesMut::new();
        let mut wire = 0;
        loop {
            let buf = &self.buf;
            let n = scanner
                .feed_data(buf, |data| body.extend_from_slice(&buf[data]))
                .map_err(|_| ErrorKind::Reset)?;
            self.buf.advance(n);
            wire += n;
            if scanner.is_done() {
                return Ok((body.freeze(), wire));
            }
            if self.fill().await? == 0 {
                return Err(ErrorKind::Reset);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection whose peer answers with `response` (then closes).
    async fn answer(response: &'static [u8], head_only: bool) -> (Result<Answer, ErrorKind>, bool) {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let mut req = [0u8; 1024];
            let _ = server.read(&mut req).await;
            let _ = server.write_all(response).await;
        });
        let mut c = Connection::new(Box::new(client));
        let r = c
            .send(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", head_only)
            .await;
        (r, c.is_open())
    }

    #[test]
    fn request_bytes_are_what_wrk_would_send() {
        let wire = request_bytes(
            &Method::POST,
            "/p?q=1",
            "127.0.0.1:9",
            &[(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            b"{}",
        );
        assert_eq!(
            &wire[..],
            b"POST /p?q=1 HTTP/1.1\r\nhost: 127.0.0.1:9\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
        );
    }

    #[tokio::test]
    async fn content_length_chunked_and_close_framing() {
        let (r, open) = answer(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello", false).await;
        let a = r.unwrap();
        assert_eq!(
            (a.status.as_u16(), &a.body[..], open),
            (200, &b"hello"[..], true)
        );
        assert_eq!(a.bytes, 43);
        let (r, _) = answer(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nt: 1\r\n\r\n",
            false,
        )
        .await;
        assert_eq!(&r.unwrap().body[..], b"hello");
        let (r, open) = answer(b"HTTP/1.0 200 OK\r\n\r\nuntil close", false).await;
        let a = r.unwrap();
        assert_eq!(
            (&a.body[..], a.version, open),
            (&b"until close"[..], Version::HTTP_10, false)
        );
        let (r, open) = answer(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            false,
        )
        .await;
        assert_eq!((r.unwrap().status.as_u16(), open), (404, false));
        let (r, open) = answer(b"HTTP/1.1 200 OK\r\ncontent-length: 99\r\n\r\n", true).await;
        assert_eq!((r.unwrap().body.len(), open), (0, true), "HEAD has no body");
    }

    #[tokio::test]
    async fn truncated_and_malformed_responses_are_resets() {
        let (r, open) = answer(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", false).await;
        assert_eq!((r.err(), open), (Some(ErrorKind::Reset), false));
        let (r, _) = answer(b"NOT HTTP AT ALL\r\n\r\n", false).await;
        assert_eq!(r.err(), Some(ErrorKind::Reset));
        let (r, _) = answer(b"", false).await;
        assert_eq!(r.err(), Some(ErrorKind::Reset));
        // Where the body ends is unknown: not a length, or two that disagree.
        for response in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nab"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        ] {
            let (r, open) = answer(response, false).await;
            assert_eq!(
                (r.err(), open),
                (Some(ErrorKind::Reset), false),
                "{response:?}"
            );
        }
    }
}
