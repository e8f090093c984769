//! The client side of a request body the fast path streams to the upstream (one over 64 KiB):
//! a reader that counts what it passes on, remembers whether its last read was waiting for the
//! client, and gives up when the client sends nothing for the body read timeout. When the
//! response does not come in time, that tells a client that stopped sending its body (408) from
//! an upstream that stopped answering (504), and a client whose connection failed mid-body from
//! an upstream that did.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pms_net::stall::Stall;
use tokio::io::{AsyncRead, ReadBuf};

/// Reads a request body from the client, keeping track as it goes.
pub(super) struct Upload<R> {
    client: R,
    received: u64,
    failed: bool,
    stalled: bool,
    stall: Stall,
}

impl<R> Upload<R> {
    /// Reads from `client`, failing when it sends nothing for `idle`.
    pub(super) fn new(client: R, idle: Duration) -> Self {
        Self {
            client,
            received: 0,
            failed: false,
            stalled: false,
            stall: Stall::new(idle),
        }
    }

    /// Bytes read from the client.
    pub(super) fn received(&self) -> u64 {
        self.received
    }

    /// True when the last read found nothing from the client yet.
    pub(super) fn waiting_on_client(&self) -> bool {
        self.stall.waiting()
    }

    /// True when reading from the client failed.
    pub(super) fn client_failed(&self) -> bool {
        self.failed
    }

    /// True when the client sent nothing for the idle time and reading gave up.
    pub(super) fn stalled(&self) -> bool {
        self.stalled
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Upload<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.client).poll_read(cx, buf);
        if this.stall.poll_expired(cx, polled.is_pending()) {
            this.stalled = true;
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client stopped sending its request body",
            )));
        }
        match &polled {
            Poll::Ready(Ok(())) => this.received += (buf.filled().len() - before) as u64,
            Poll::Ready(Err(_)) => this.failed = true,
            Poll::Pending => {}
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn it_counts_and_says_who_it_waits_for() {
        let (mut client, gateway_end) = tokio::io::duplex(64);
        let mut upload = Upload::new(gateway_end, Duration::from_secs(60));
        client.write_all(b"0123456789").await.unwrap();
        let mut buf = [0u8; 32];
        assert_eq!(upload.read(&mut buf).await.unwrap(), 10);
        assert_eq!(upload.received(), 10);
        assert!(!upload.waiting_on_client());
        // Nothing more sent: the next read waits for the client.
        let more =
            tokio::time::timeout(std::time::Duration::from_millis(20), upload.read(&mut buf));
        assert!(more.await.is_err(), "nothing to read yet");
        assert!(upload.waiting_on_client());
        assert!(!upload.client_failed());
        client.write_all(b"ab").await.unwrap();
        assert_eq!(upload.read(&mut buf).await.unwrap(), 2);
        assert_eq!(upload.received(), 12);
        assert!(!upload.waiting_on_client());
    }

    /// A client connection that fails on the first read.
    struct Broken;

    impl AsyncRead for Broken {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            Poll::Ready(Err(std::io::ErrorKind::ConnectionReset.into()))
        }
    }

    #[tokio::test]
    async fn it_notes_a_client_that_failed() {
        let mut upload = Upload::new(Broken, Duration::from_secs(60));
        let mut buf = [0u8; 8];
        assert!(upload.read(&mut buf).await.is_err());
        assert!(upload.client_failed());
        assert!(!upload.waiting_on_client());
        assert_eq!(upload.received(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn it_gives_up_on_a_client_that_stops_sending() {
        let (mut client, gateway_end) = tokio::io::duplex(64);
        let mut upload = Upload::new(gateway_end, Duration::from_secs(5));
        client.write_all(b"0123").await.unwrap();
        let mut buf = [0u8; 32];
        assert_eq!(upload.read(&mut buf).await.unwrap(), 4);
        let err = upload.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(upload.stalled());
        assert!(!upload.client_failed());
        assert_eq!(upload.received(), 4);
    }
}
