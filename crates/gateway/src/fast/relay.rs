//! What the fast path writes to its client: the upstream's answer, its head rewritten and its
//! body relayed as its framing says, and the gateway's own error answers.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use http::header::HeaderValue;
use http::StatusCode;
use http_body_util::BodyExt;
use pms_h1::ChunkScanner;
use pms_net::stall::{ReadDeadline, ReadStalled};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Buffers, Failure};
use crate::h1up::fields;
use crate::h1up::head::write_headers;
use crate::h1up::response::{self, Framing};
use crate::h1up::{bad_gateway, gather_response, BUF, GATHER};
use crate::headers::rules;
use crate::headers::RequestId;
use crate::respond::GatewayError;
use crate::upstream::Upstream;

/// An upstream's answer on its way to the client.
pub(super) struct Relaying<'a> {
    /// Where it comes from: its name, its read timeout, the errors that blame it.
    pub(super) upstream: &'a Upstream,
    /// The request's id, which the answer carries.
    pub(super) request_id: &'a RequestId,
    /// Its head says `connection: close`.
    pub(super) close: bool,
}

impl Relaying<'_> {
    /// Writes the response head (parsed from `bufs.up`, its lines in `bufs.fields`), rewritten,
    /// and relays the body from `from` as its framing says; whether the upstream connection may
    /// carry another request.
    pub(super) async fn relay<IO, S>(
        &self,
        io: &mut IO,
        from: &mut S,
        head: &response::Head,
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
        if self.close {
            out.extend_from_slice(b"connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        up.advance(head.len);
        let read_timeout = self.upstream.read_timeout();
        match head.framing {
            Framing::Empty => write(io, out, &[]).await?,
            Framing::Length(n) => {
                if n > up.len() as u64 && n <= GATHER as u64 {
                    // At most GATHER, so it fits in usize.
                    gather_response(from, up, n as usize, deadline, self.upstream)
                        .await
                        .map_err(Relay::Unsent)?;
                }
                let first = n.min(up.len() as u64) as usize;
                write(io, out, &up[..first]).await?;
                up.advance(first);
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

    /// Relays a chunked body as it came, from what `up` holds after the head (`head`, which
    /// goes out with it) to the last chunk and the trailers.
    async fn relay_chunked<IO, S>(
        &self,
        io: &mut IO,
        from: &mut S,
        up: &mut BytesMut,
        head: &[u8],
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
        write(io, head, &up[..n]).await?;
        up.advance(n);
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
            write(io, &up[..n], &[]).await?;
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
        write(io, out, &[]).await?;
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
            write(io, out, &[]).await?;
        }
        write(io, b"0\r\n\r\n", &[]).await?;
        up.clear();
        Ok(())
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
}

/// Why a response was not relayed to its end.
pub(super) enum Relay {
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

/// Writes `head` and `body` to the client (in one vectored write); a failure ends the
/// connection.
async fn write<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    head: &[u8],
    body: &[u8],
) -> Result<(), Failure> {
    pms_h1::write_two(io, head, body)
        .await
        .map_err(|_| Failure::Abort)
}

/// Answers `err` as the hyper path would (the same JSON body and headers); `false` when the
/// client connection failed.
pub(super) async fn answer<IO>(
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
    write_headers(&parts.headers, out);
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
