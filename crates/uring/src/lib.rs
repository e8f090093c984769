//! io_uring sockets for PMS's thread-per-core workers. Each worker thread installs one ring
//! ([`install`]); streams made on that thread ([`UringTcp`]) queue their reads and writes on it,
//! and the thread's tokio runtime submits everything queued in one system call just before it
//! parks ([`before_park`]) and hands completions back to the waiting tasks, there or when the
//! ring's descriptor turns readable ([`drive`]).
//!
//! Why: under load an HTTP/1.1 proxy makes four socket calls per request (read the request,
//! write it upstream, read the answer, write it back), and on loopback most of its CPU is in
//! the kernel. Through the ring the same work takes one `io_uring_enter` per batch of many
//! connections' operations instead of a system call each, plus the `epoll_wait`s between them.
//! Everything else about a connection (timers, TLS, hyper) stays as it was: a [`UringTcp`] is a
//! plain `AsyncRead + AsyncWrite`.

#![deny(missing_docs)]

mod bufring;
mod driver;
mod stream;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

pub use stream::UringTcp;

/// Submission entries per ring; in-flight operations are not bounded by it (a full queue is
/// submitted at once).
pub const DEFAULT_ENTRIES: u32 = 256;

/// Builds this thread's ring. Fails where the kernel has no io_uring or refuses it (as
/// `kernel.io_uring_disabled`, or a seccomp filter, may).
///
/// # Errors
/// The kernel's refusal.
pub fn install(entries: u32) -> io::Result<Ring> {
    Ok(Ring {
        fd: driver::install(entries)?,
    })
}

/// How many reads, on any thread, found every provided buffer of their ring taken and went
/// again with a buffer of their own: when it grows under load, the rings have too few.
pub fn reads_short_of_buffers() -> u64 {
    stream::SHORT_OF_BUFFERS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether this thread has a ring.
pub fn installed() -> bool {
    driver::current().is_some()
}

/// Submits what this thread's streams queued and wakes the tasks whose operations completed.
/// Give it to the runtime as its `on_thread_park` hook; it does nothing on a thread without a
/// ring.
pub fn before_park() {
    driver::submit_and_reap();
}

/// This thread's ring, as [`install`] made it: what [`drive`] waits on.
#[derive(Debug)]
pub struct Ring {
    fd: OwnedFd,
}

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Hands completions to their tasks whenever the ring's descriptor turns readable, for as long
/// as the runtime runs. Spawn it on the thread that installed `ring`, inside its runtime.
///
/// # Errors
/// The runtime could not watch the descriptor.
pub async fn drive(ring: Ring) -> io::Result<()> {
    // SAFETY: `ring` owns its descriptor, which stays open, the same description, until the
    // `AsyncFd` drops it.
    #[allow(unsafe_code)]
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE)
    }
    .map_err(io::Error::from)?;
    loop {
        let mut guard = fd.readable().await?;
        driver::reap();
        guard.clear_ready();
    }
}

#[cfg(test)]
mod tests;
