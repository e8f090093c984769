//! A worker thread's spare buffers, so that keep-alive connections between requests hold none.
//!
//! A fast path that kept a read buffer in every connection would, at a thousand connections and
//! 10 KB requests, copy each request into memory that nothing has touched since that connection's
//! previous request: out of the CPU's caches, a miss for every line written. Instead an idle
//! connection's buffer goes back to its thread ([`give_back`]), and whichever request comes next
//! on the thread takes the one given back last ([`take`]), still in cache. [`read_into`] is the
//! read of an idle connection: it takes a spare only once bytes are there to read.

use std::cell::RefCell;
use std::future::Future;
use std::io;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The room a spare buffer has: a request or answer of 10 KB and its head in one read.
pub const SIZE: usize = 16 * 1024;

/// The most spares a thread keeps (4 MiB): enough for the requests a worker has in hand at once
/// under a hundred or so busy connections (each holds one buffer for the client's bytes, one for
/// the upstream's), so that a steady load allocates none. Beyond it a buffer given back is
/// freed, so a burst of connections does not leave all its buffers behind.
const KEPT: usize = 256;

/// A buffer grown past this for a large body is freed, not kept as a spare.
const LARGEST: usize = 2 * SIZE;

thread_local! {
    static SPARES: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for [`SIZE`] bytes: the one given back last on this thread, or a
/// new one.
pub fn take() -> BytesMut {
    SPARES
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| BytesMut::with_capacity(SIZE))
}

/// Gives `buf` back for the next request on this thread, if it is empty: bytes in it are
/// someone's, and stay with them. One with no room of [`SIZE`] (never allocated, or smaller),
/// or grown for a large body, is freed instead, and so is any beyond the 256 a thread keeps.
pub fn give_back(mut buf: BytesMut) {
    // An empty buffer's room behind what was read out of it comes back without a copy, or an
    // allocation: a connection that holds no buffer gives back nothing.
    if !buf.is_empty() || !buf.try_reclaim(SIZE) || buf.capacity() > LARGEST {
        return;
    }
    let _ = SPARES.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < KEPT {
            s.push(buf);
        }
    });
}

/// Reads from `io` into `buf`, as [`AsyncReadExt::read_buf`] does, with room for at least `room`
/// more bytes. A `buf` with no room at all (an idle connection's) borrows a spare instead, for
/// each try, and gives it back while nothing has come, so the connection holds a buffer only
/// once bytes are there; at the end of the stream, or on an error, it gives it back too.
pub async fn read_into<IO>(io: &mut IO, buf: &mut BytesMut, room: usize) -> io::Result<usize>
where
    IO: AsyncRead + Unpin,
{
    if buf.capacity() != 0 {
        buf.reserve(room);
        return io.read_buf(buf).await;
    }
    std::future::poll_fn(|cx| {
        *buf = take();
        let polled = std::pin::pin!(io.read_buf(buf)).poll(cx);
        if buf.is_empty() {
            give_back(std::mem::take(buf));
        }
        polled
    })
    .await
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// The spares this thread holds, by the address of their bytes.
    fn held() -> Vec<*const u8> {
        SPARES.with(|s| s.borrow().iter().map(|b| b.as_ptr()).collect())
    }

    #[test]
    fn the_buffer_given_back_last_is_taken_first() {
        let (a, b) = (take(), take());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        give_back(a);
        give_back(b);
        assert_eq!(take().as_ptr(), pb);
        assert_eq!(take().as_ptr(), pa);
    }

    #[test]
    fn a_buffer_with_bytes_in_it_or_grown_large_is_not_kept() {
        let before = held();
        let mut full = take();
        full.extend_from_slice(b"next request");
        give_back(full);
        let mut big = take();
        big.reserve(4 * SIZE);
        give_back(big);
        assert_eq!(held(), before);
    }

    #[test]
    fn a_buffer_read_out_comes_back_with_all_its_room() {
        let mut buf = take();
        let at = buf.as_ptr();
        buf.extend_from_slice(&[7; 10_000]);
        bytes::Buf::advance(&mut buf, 10_000);
        give_back(buf);
        let back = take();
        assert_eq!(back.as_ptr(), at);
        assert!(back.capacity() >= SIZE);
    }

    #[test]
    fn giving_back_no_buffer_adds_no_spare() {
        let before = held();
        give_back(BytesMut::new());
        give_back(BytesMut::with_capacity(100));
        assert_eq!(held(), before);
    }

    #[tokio::test]
    async fn an_idle_read_holds_no_buffer_until_bytes_come() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let mut buf = BytesMut::new();
        let spares = held().len();
        {
            let mut read = std::pin::pin!(read_into(&mut server, &mut buf, 1024));
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(read.as_mut().poll(&mut cx).is_pending());
        }
        // The spare it tried with is back.
        assert_eq!(buf.capacity(), 0);
        assert_eq!(held().len(), spares.max(1));
        client
            .write_all(b"GET / HTTP/1.1\r\n")
            .await
            .expect("write");
        assert_eq!(
            read_into(&mut server, &mut buf, 1024).await.expect("read"),
            16
        );
        assert_eq!(&buf[..], b"GET / HTTP/1.1\r\n");
        assert!(buf.capacity() >= SIZE);
    }

    #[tokio::test]
    async fn a_buffer_with_room_keeps_its_own_and_grows_by_the_room_asked() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let mut buf = BytesMut::with_capacity(8);
        buf.extend_from_slice(b"GET / HT");
        let spares = held();
        client.write_all(b"TP/1.1\r\n").await.expect("write");
        assert_eq!(
            read_into(&mut server, &mut buf, 4096).await.expect("read"),
            8
        );
        assert_eq!(&buf[..], b"GET / HTTP/1.1\r\n");
        assert!(buf.capacity() >= 8 + 4096);
        // No spare was borrowed for it.
        assert_eq!(held(), spares);
    }

    #[tokio::test]
    async fn a_closed_connection_gives_the_spare_back() {
        let (client, mut server) = tokio::io::duplex(64);
        drop(client);
        let mut buf = BytesMut::new();
        assert_eq!(
            read_into(&mut server, &mut buf, 1024).await.expect("read"),
            0
        );
        assert_eq!(buf.capacity(), 0);
        assert!(!held().is_empty());
    }
}
