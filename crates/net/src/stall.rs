//! Giving up on a client that stops reading: a connection wrapper whose writes fail when they
//! have made no progress for the send timeout (nginx's `send_timeout`).
//!
//! Why: a client that asks for a response and then never reads it keeps the server's write
//! waiting on a full socket buffer for good, and with it the connection, its task and (behind a
//! proxy) an upstream connection. Reads are left alone: idle keep-alive connections and slow
//! request heads and bodies have their own limits.

use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A stream whose writes, flushes and shutdown fail with `TimedOut` after `timeout` without
/// progress.
pub struct SendDeadline<S> {
    inner: S,
    timeout: Duration,
    // Made at the first write that has to wait; set again at each wait that follows progress.
    timer: Option<Pin<Box<Sleep>>>,
    waiting: bool,
}

impl<S> SendDeadline<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            timer: None,
            waiting: false,
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
        if polled.is_ready() {
            self.waiting = false;
            return polled;
        }
        let deadline = Instant::now() + self.timeout;
        let timer = match &mut self.timer {
            Some(timer) => {
                if !self.waiting {
                    timer.as_mut().reset(deadline);
                }
                timer
            }
            None => self
                .timer
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.waiting = true;
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the peer read nothing for {} ms", self.timeout.as_millis()),
            )));
        }
        Poll::Pending
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
