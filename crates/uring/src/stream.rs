//! [`UringTcp`]: a TCP stream whose reads and writes are io_uring operations on its thread's
//! ring, behind tokio's `AsyncRead` and `AsyncWrite`.
//!
//! Reads take one of the ring's provided buffers when their bytes arrive ([`crate::bufring`]),
//! which the stream gives back once its reader has taken them all; where the ring has no
//! buffer free (or no buffers at all), a read brings the stream's own. Writes are copied into a
//! buffer of the stream's, which the send takes along and the driver frees once it has all gone,
//! and reported done as soon as they are queued; the next write or a shutdown waits for the
//! kernel to have taken them, and reports an error it met (a flush reports one without
//! waiting). So a request's write upstream and the read of its answer leave in the same
//! `io_uring_enter`.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream as StdTcpStream};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{ready, Context, Poll};

use io_uring::{opcode, squeue, types};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::{bufring, driver};

/// Reads that found no provided buffer free: see [`crate::reads_short_of_buffers`].
pub(crate) static SHORT_OF_BUFFERS: AtomicU64 = AtomicU64::new(0);

/// For reads with a buffer of their own: bytes one read may bring at first, and again after a
/// read that did not fill its buffer.
/// A read that does fill it doubles the next one's, up to `MAX_READ_BUF`: small requests then
/// touch one page each, and large bodies still come in few reads. (16 KiB for every read
/// cost the gateway 3 MB more under h2load with 100 connections: freed and reused, the
/// buffers spread over the heap.)
const READ_BUF: usize = 4 * 1024;
/// Largest read buffer.
const MAX_READ_BUF: usize = 64 * 1024;
/// Most bytes one write takes.
const MAX_WRITE: usize = 256 * 1024;

/// A TCP stream served by this thread's io_uring. Made with [`UringTcp::from_tokio`] or
/// [`UringTcp::from_std`] on a thread where [`crate::install`] ran; used anywhere else, its
/// reads and writes fail with an error (they never touch another thread's ring).
#[derive(Debug)]
pub struct UringTcp {
    sock: Option<StdTcpStream>,
    driver: u64,
    rd: ReadSide,
    wr: WriteSide,
}

#[derive(Debug)]
struct ReadSide {
    /// The stream's own bytes: the buffer of a read in flight that brought its own, or the
    /// bytes such a read brought, `buf[start..]` not yet read.
    buf: Vec<u8>,
    start: usize,
    /// Bytes waiting in a provided buffer, lent by the driver until they are all read.
    lent: Option<Lent>,
    op: Option<u32>,
    eof: bool,
    /// Whether reads take provided buffers: the ring has them, and the last read found one.
    provided: bool,
    /// Capacity of the next read's own buffer.
    next: usize,
}

/// The bytes a read left in a provided buffer: `start..end` are not yet read.
#[derive(Debug, Clone, Copy)]
struct Lent {
    bid: u16,
    start: usize,
    end: usize,
}

impl ReadSide {
    /// Whether bytes are waiting to be read.
    fn holds(&self) -> bool {
        self.start < self.buf.len() || self.lent.is_some()
    }
}

#[derive(Debug)]
struct WriteSide {
    /// Bytes written and not yet sent; empty while a send is in flight (its buffer is in the
    /// driver's slot, and is freed there once it has all gone) unless a send's rest came back.
    buf: Vec<u8>,
    /// How much of `buf` the kernel has taken.
    sent: usize,
    op: Option<u32>,
}

impl UringTcp {
    /// Takes over a tokio stream (it leaves tokio's reactor). Fails when this thread has no
    /// ring.
    pub fn from_tokio(stream: tokio::net::TcpStream) -> io::Result<Self> {
        Self::from_std(stream.into_std()?)
    }

    /// Takes over a std stream. Fails when this thread has no ring.
    pub fn from_std(sock: StdTcpStream) -> io::Result<Self> {
        let driver = driver::current().ok_or_else(driver::foreign)?;
        // The ring waits for readiness itself; a blocking socket lets it (a non-blocking one
        // could hand EAGAIN back instead).
        sock.set_nonblocking(false)?;
        Ok(Self {
            sock: Some(sock),
            driver,
            rd: ReadSide {
                buf: Vec::new(),
                start: 0,
                lent: None,
                op: None,
                eof: false,
                provided: driver::provides_buffers(driver),
                next: READ_BUF,
            },
            wr: WriteSide {
                buf: Vec::new(),
                sent: 0,
                op: None,
            },
        })
    }

    fn sock(&self) -> io::Result<&StdTcpStream> {
        self.sock
            .as_ref()
            .ok_or_else(|| io::Error::other("socket already released"))
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock()?.peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock()?.local_addr()
    }

    /// Sets `TCP_NODELAY`.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.sock()?.set_nodelay(on)
    }

    /// Waits until a read would not wait: bytes buffered or the end of the stream (`Ok`), or
    /// an error the read met.
    pub fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_fill(cx)
    }

    /// Waits until a read would not wait; see [`Self::poll_read_ready`].
    pub async fn readable(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_read_ready(cx)).await
    }

    /// Whether an idle connection is still open: nothing has arrived and the peer has not
    /// closed. Asks the socket itself (a peek that does not wait) unless a read is in flight,
    /// whose completion says it; what has arrived stays for the next read.
    pub fn idle_and_open(&mut self) -> bool {
        if self.rd.holds() || self.rd.eof {
            return false;
        }
        if let Some(slot) = self.rd.op {
            driver::reap();
            return !driver::is_done(self.driver, slot);
        }
        let Ok(sock) = self.sock() else {
            return false;
        };
        let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
        match rustix::net::recv(sock, &mut [0u8; 1], flags) {
            Err(rustix::io::Errno::AGAIN) => true,
            // Ended (0), sent something unasked (1), or failed.
            _ => false,
        }
    }

    fn start_read(&mut self) -> io::Result<()> {
        let fd = types::Fd(self.sock()?.as_raw_fd());
        if self.rd.provided {
            // No buffer named: the kernel takes one from the ring when bytes arrive.
            let slot = driver::start(self.driver, |data| {
                opcode::Recv::new(fd, std::ptr::null_mut(), bufring::SIZE as u32)
                    .buf_group(bufring::GROUP)
                    .build()
                    .flags(squeue::Flags::BUFFER_SELECT)
                    .user_data(data)
            })?;
            self.rd.op = Some(slot);
            return Ok(());
        }
        if self.rd.buf.capacity() == 0 {
            self.rd.buf = Vec::with_capacity(self.rd.next);
        }
        let ptr = self.rd.buf.as_mut_ptr();
        let len = self.rd.buf.capacity() as u32;
        let slot = driver::start(self.driver, |data| {
            opcode::Recv::new(fd, ptr, len).build().user_data(data)
        })?;
        self.rd.op = Some(slot);
        Ok(())
    }

    /// Brings bytes into the read buffer unless it has some, or the stream has ended.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.rd.holds() || self.rd.eof {
                return Poll::Ready(Ok(()));
            }
            let Some(slot) = self.rd.op else {
                self.start_read()?;
                continue;
            };
            let done = ready!(driver::poll(self.driver, slot, cx))?;
            let (res, buffer) = (done.res, done.buffer);
            self.rd.op = None;
            if let Some(bid) = buffer {
                if res > 0 {
                    self.rd.lent = Some(Lent {
                        bid,
                        start: 0,
                        end: res as usize,
                    });
                    continue;
                }
                driver::return_buffer(self.driver, bid);
            }
            match res {
                0 => self.rd.eof = true,
                e if -e == ENOBUFS => {
                    // Every provided buffer is out: this read, and those after it until one
                    // brings bytes, bring their own.
                    SHORT_OF_BUFFERS.fetch_add(1, Ordering::Relaxed);
                    self.rd.provided = false;
                }
                n if n > 0 => {
                    // SAFETY: the kernel wrote `n` bytes (at most the capacity it was given)
                    // at the start of the buffer, and its operation is over.
                    #[allow(unsafe_code)]
                    unsafe {
                        self.rd.buf.set_len(n as usize)
                    };
                    self.rd.start = 0;
                    self.rd.next = if self.rd.buf.len() == self.rd.buf.capacity() {
                        (self.rd.buf.capacity() * 2).min(MAX_READ_BUF)
                    } else {
                        READ_BUF
                    };
                    self.rd.provided = driver::provides_buffers(self.driver);
                }
                e if -e == EINTR || -e == EAGAIN => {}
                e => return Poll::Ready(Err(io::Error::from_raw_os_error(-e))),
            }
        }
    }

    /// Waits for the kernel to take everything written so far, sending what a short write
    /// left.
    fn poll_written(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if let Some(slot) = self.wr.op {
                let done = ready!(driver::poll(self.driver, slot, cx))?;
                self.wr.op = None;
                // `None`: all of it went, and the driver freed the buffer.
                if let Some((buf, sent)) = done.unsent {
                    self.wr.buf = buf;
                    self.wr.sent = sent;
                }
                match done.res {
                    n if n >= 0 => self.wr.sent += n as usize,
                    e if -e == EINTR || -e == EAGAIN => {}
                    e => {
                        self.wr.buf = Vec::new();
                        self.wr.sent = 0;
                        return Poll::Ready(Err(io::Error::from_raw_os_error(-e)));
                    }
                }
            }
            if self.wr.sent >= self.wr.buf.len() {
                self.wr.buf = Vec::new();
                self.wr.sent = 0;
                return Poll::Ready(Ok(()));
            }
            self.start_write()?;
        }
    }

    /// Takes a completed write's result without waiting: an error it met, or what a short
    /// write left, which is sent again.
    fn settle_write(&mut self) -> io::Result<()> {
        match self.wr.op {
            Some(slot) if driver::is_done(self.driver, slot) => {
                let mut cx = Context::from_waker(std::task::Waker::noop());
                match self.poll_written(&mut cx) {
                    Poll::Ready(r) => r,
                    // A short write's rest is now in flight.
                    Poll::Pending => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// Bytes of write buffer this stream holds, itself or in its send's slot.
    #[cfg(test)]
    pub(crate) fn write_buffered(&self) -> usize {
        self.wr.buf.capacity() + self.wr.op.map_or(0, |op| driver::held(self.driver, op))
    }

    /// Sends what `buf` holds past `sent`, handing the buffer to the driver: it comes back only
    /// if not all of it goes.
    fn start_write(&mut self) -> io::Result<()> {
        let fd = types::Fd(self.sock()?.as_raw_fd());
        let buf = std::mem::take(&mut self.wr.buf);
        let sent = std::mem::take(&mut self.wr.sent);
        let slot = driver::start_send(self.driver, buf, sent, |data, ptr, len| {
            opcode::Send::new(fd, ptr, len)
                // MSG_WAITALL: the ring sends the whole buffer, waiting for room as needed,
                // rather than completing a short write.
                .flags(MSG_NOSIGNAL | MSG_WAITALL)
                .build()
                .user_data(data)
        })?;
        self.wr.op = Some(slot);
        Ok(())
    }
}

const EINTR: i32 = 4;
const EAGAIN: i32 = 11;
const ENOBUFS: i32 = 105;
const MSG_NOSIGNAL: i32 = 0x4000;
const MSG_WAITALL: i32 = 0x100;

impl AsyncRead for UringTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if out.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        ready!(this.poll_fill(cx))?;
        if let Some(lent) = &mut this.rd.lent {
            // What fits in `out`; the rest stays where it is for the next read (the buffer
            // is back in the ring once it is all read).
            let n = driver::read_buffer(this.driver, lent.bid, lent.start..lent.end, |bytes| {
                let n = bytes.len().min(out.remaining());
                out.put_slice(&bytes[..n]);
                (n, n == bytes.len())
            })
            .ok_or_else(driver::foreign)?;
            lent.start += n;
            if lent.start == lent.end {
                this.rd.lent = None;
            }
            return Poll::Ready(Ok(()));
        }
        let have = &this.rd.buf[this.rd.start..];
        let n = have.len().min(out.remaining());
        out.put_slice(&have[..n]);
        this.rd.start += n;
        if this.rd.start == this.rd.buf.len() {
            // Freed like the write buffer: a connection between reads holds none (one waiting
            // for the peer does, with its read in flight).
            this.rd.buf = Vec::new();
            this.rd.start = 0;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for UringTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(data)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_written(cx))?;
        // One allocation for all the slices (a head and its body, say), not one that grows.
        let total = bufs.iter().map(|b| b.len()).sum::<usize>();
        this.wr.buf.reserve(total.min(MAX_WRITE));
        let mut taken = 0;
        for b in bufs {
            let n = b.len().min(MAX_WRITE - taken);
            this.wr.buf.extend_from_slice(&b[..n]);
            taken += n;
            if taken == MAX_WRITE {
                break;
            }
        }
        if taken > 0 {
            this.start_write()?;
        }
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Everything written is with the ring already, and goes to the kernel before the worker
    /// next waits, so a flush does not wait for it (waiting would cost a round through the
    /// ring between a request's write and the read of its answer). It reports an error a
    /// completed write met; the next write waits for the one in flight.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().settle_write())
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_written(cx))?;
        match this.sock()?.shutdown(Shutdown::Write) {
            Err(e) if e.kind() != io::ErrorKind::NotConnected => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(())),
        }
    }
}

impl Drop for UringTcp {
    fn drop(&mut self) {
        if let Some(lent) = self.rd.lent.take() {
            driver::return_buffer(self.driver, lent.bid);
        }
        if self.rd.op.is_none() && self.wr.op.is_none() {
            return;
        }
        let ops = [
            (self.rd.op.take(), std::mem::take(&mut self.rd.buf)),
            (self.wr.op.take(), std::mem::take(&mut self.wr.buf)),
        ];
        if let Err(bufs) = driver::abandon(self.driver, ops) {
            // No driver to hand them to (the thread is exiting, or this is not its thread):
            // the kernel may still write into the buffers, and a queued entry may still name
            // the descriptor, so neither may be freed or reused.
            std::mem::forget(bufs);
            std::mem::forget(self.sock.take());
        }
    }
}
