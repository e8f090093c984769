//! Giving up on a peer that makes no progress: [`Stall`], the clock of a wait without progress;
//! [`SendDeadline`], a connection wrapper whose writes fail when they have made no progress
//! for the send timeout (nginx's `send_timeout`); and [`ReadDeadline`], a reader that fails
//! when nothing has come for a read timeout (nginx's `proxy_read_timeout`, for a response body
//! an upstream stops sending). The gateway's request-body readers use the same clock for bodies
//! that stop coming.
//!
//! Why: a client that asks for a response and then never reads it keeps the server's write
//! waiting on a full socket buffer for good, and with it the connection, its task and (behind a
//! proxy) an upstream connection. The connection wrapper leaves reads alone: idle keep-alive
//! connections and slow request heads and bodies have their own limits.

use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The clock of a stall: how long something has been waiting without progress. Each poll of the
/// watched operation reports whether it had to wait; the timer starts at the first wait after
/// progress and is made once, so steady progress costs no timer operation at all.
pub struct Stall {
    timeout: Duration,
    // Made at the first wait; set again at each wait that follows progress.
    timer: Option<Pin<Box<Sleep>>>,
    waiting: bool,
}

impl Stall {
    /// A clock that runs out after `timeout` without progress.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            timer: None,
            waiting: false,
        }
    }

    /// The time without progress it allows.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the last poll reported was a wait.
    pub fn waiting(&self) -> bool {
        self.waiting
    }

    /// Notes how a poll of the watched operation went (`pending`: it had to wait) and returns
    /// true when the wait has now lasted the whole timeout. `cx` is woken when it does.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>, pending: bool) -> bool {
        if !pending {
            self.waiting = false;
            return false;
        }
        let timer = match &mut self.timer {
            Some(timer) => {
                if !self.waiting {
                    timer.as_mut().reset(Instant::now() + self.timeout);
                }
                timer
            }
            None => self
                .timer
                .insert(Box::pin(tokio::time::sleep(self.timeout))),
        };
        self.waiting = true;
        timer.as_mut().poll(cx).is_ready()
    }
}

/// A stream whose writes, flushes and shutdown fail with `TimedOut` after `timeout` without
/// progress.
pub struct SendDeadline<S> {
    inner: S,
    stall: Stall,
}

impl<S> SendDeadline<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            stall: Stall::new(timeout),
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Passes `polled` on, and turns a wait longer than the timeout into an error.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if self.stall.poll_expired(cx, polled.is_pending()) {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the peer read nothing for {} ms",
                    self.stall.timeout().as_millis()
                ),
            )));
        }
        polled
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SendDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SendDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}

/// Nothing came from the peer for the read timeout: the error inside the `TimedOut`
/// [`std::io::Error`] a [`ReadDeadline`] fails with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the peer sent nothing for {} ms", .after.as_millis())]
pub struct ReadStalled {
    /// The read timeout.
    pub after: Duration,
}

impl ReadStalled {
    /// The [`ReadStalled`] in `err`, if that is what it is.
    pub fn of(err: &std::io::Error) -> Option<&Self> {
        err.get_ref().and_then(|e| e.downcast_ref::<Self>())
    }
}

/// A reader whose reads fail with `TimedOut` ([`ReadStalled`] inside) after `timeout` without
/// a byte. Meant to be made for one stretch of reading (a response body), around a borrowed
/// stream: the clock runs from the first read that has to wait, and a wait that ends in data
/// starts it again. No timer is made while data is ready at every read.
pub struct ReadDeadline<R> {
    inner: R,
    stall: Stall,
}

impl<R> ReadDeadline<R> {
    /// Wraps `inner`.
    pub fn new(inner: R, timeout: Duration) -> Self {
        Self {
            inner,
            stall: Stall::new(timeout),
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for ReadDeadline<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.stall.poll_expired(cx, polled.is_pending()) {
            let after = self.stall.timeout();
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                ReadStalled { after },
            )));
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_reads_fails_after_the_timeout() {
        let (mut peer, ours) = tokio::io::duplex(16);
        let mut conn = SendDeadline::new(ours, Duration::from_secs(5));
        conn.write_all(b"0123456789abcdef").await.unwrap();
        let started = Instant::now();
        let err = conn.write_all(b"more").await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        // What was written is still there to read.
        let mut got = [0u8; 16];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"0123456789abcdef");
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_gets_nothing_fails_after_the_timeout_and_says_why() {
        let (mut peer, ours) = tokio::io::duplex(64);
        let mut reader = ReadDeadline::new(ours, Duration::from_secs(5));
        let writer = tokio::spawn(async move {
            // Slower than a read, faster than the timeout; then silence.
            for piece in [&b"abc"[..], b"def"] {
                tokio::time::sleep(Duration::from_secs(4)).await;
                peer.write_all(piece).await.unwrap();
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(peer);
        });
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        let err = loop {
            match reader.read(&mut buf).await {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => break e,
            }
        };
        assert_eq!(got, b"abcdef");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(
            ReadStalled::of(&err),
            Some(&ReadStalled {
                after: Duration::from_secs(5)
            })
        );
        writer.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_keeps_up_never_trips_it() {
        let (mut peer, ours) = tokio::io::duplex(16);
        let mut conn = SendDeadline::new(ours, Duration::from_secs(5));
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            let mut buf = [0u8; 8];
            loop {
                // Slower than a write, faster than the timeout.
                tokio::time::sleep(Duration::from_secs(4)).await;
                match peer.read(&mut buf).await.unwrap() {
                    0 => return all,
                    n => all.extend_from_slice(&buf[..n]),
                }
            }
        });
        let data = [7u8; 64];
        conn.write_all(&data).await.unwrap();
        conn.shutdown().await.unwrap();
        drop(conn);
        assert_eq!(reader.await.unwrap(), data);
    }
}
