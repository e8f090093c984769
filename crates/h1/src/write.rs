//! A head and a body from separate buffers, sent in one vectored write: the body is not copied
//! behind the head first. With a 10 KB body that copy was a third of the gateway's user-space
//! `memmove` (docs/benchmark-history.md, the profile after run 43).

use std::io::{self, IoSlice};

use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Writes `head` and then `body` to `w`, as one vectored write where the stream takes them
/// together (io_uring sockets, TCP, TLS) and as many writes as it needs otherwise. Not flushed.
///
/// # Errors
/// The stream's write error, or [`io::ErrorKind::WriteZero`] when it takes nothing.
pub async fn write_two<W>(w: &mut W, head: &[u8], body: &[u8]) -> io::Result<()>
where
    W: AsyncWrite + Unpin + ?Sized,
{
    let (mut head, mut body) = (head, body);
    while !head.is_empty() && !body.is_empty() {
        let n = w
            .write_vectored(&[IoSlice::new(head), IoSlice::new(body)])
            .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        match n.checked_sub(head.len()) {
            None => head = &head[n..],
            Some(into_body) => {
                head = &[];
                body = &body[into_body..];
            }
        }
    }
    w.write_all(head).await?;
    w.write_all(body).await
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::*;

    /// A stream that takes at most `step` bytes per write, vectored or not, and counts writes.
    struct Trickle {
        got: Vec<u8>,
        step: usize,
        writes: usize,
    }

    impl Trickle {
        fn new(step: usize) -> Self {
            Self {
                got: Vec::new(),
                step,
                writes: 0,
            }
        }
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.poll_write_vectored(cx, &[IoSlice::new(buf)])
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            this.writes += 1;
            let mut taken = 0;
            for b in bufs {
                let n = b.len().min(this.step - taken);
                this.got.extend_from_slice(&b[..n]);
                taken += n;
            }
            Poll::Ready(Ok(taken))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn head_and_body_arrive_whole_and_in_order_whatever_each_write_takes() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 26\r\n\r\n";
        let body = b"abcdefghijklmnopqrstuvwxyz";
        for step in [1, 3, head.len() - 1, head.len(), head.len() + 1, 1000] {
            for (h, b) in [
                (&head[..], &body[..]),
                (&[][..], &body[..]),
                (&head[..], &[][..]),
            ] {
                let mut w = Trickle::new(step);
                write_two(&mut w, h, b).await.expect("written");
                assert_eq!(w.got, [h, b].concat(), "step {step}");
            }
        }
        let mut w = Trickle::new(1000);
        write_two(&mut w, head, body).await.expect("written");
        assert_eq!(
            w.writes, 1,
            "a stream that takes both takes them in one write"
        );
    }

    #[tokio::test]
    async fn a_stream_that_takes_nothing_is_an_error() {
        let mut w = Trickle::new(0);
        let err = write_two(&mut w, b"head", b"body")
            .await
            .expect_err("no room");
        assert_eq!(err.kind(), io::ErrorKind::WriteZero);
    }
}
