//! Network plumbing shared by every PMS component that serves or calls HTTP.
//!
//! Layout:
//! - [`tls`]: rustls server and client configs from PEM files; the one place the crypto provider
//!   (`ring`) is chosen.
//! - [`dev`]: a throwaway local CA and `localhost` certificate, for `pms certs dev` and tests.
//! - [`fdlimit`]: the open-file limit, raised at start and split between client and upstream
//!   connections.
//! - [`listen`]: binding listeners, several per port (`SO_REUSEPORT`) for thread-per-core servers.
//! - [`port`]: a loopback port picked ahead of time for another program, outside the kernel's
//!   ephemeral range.
//! - [`serve`]: the accept loop: TLS handshakes, HTTP/1.1 and HTTP/2 (h2c prior knowledge or ALPN)
//!   on one port, connection limits, header-read, send and idle timeouts and graceful drain;
//!   optionally an HTTP/1.1 handler that sees connections before hyper ([`serve::Http1Fast`]).
//! - [`idle`]: closing connections that send no request for a while.
//! - [`head`]: how long a fast path waits for the bytes of a request head.
//! - [`deadline`]: a deadline that moves with each request, without a timer operation per
//!   request.
//! - [`linger`]: closing a connection the client may still be writing to, without resetting it.
//! - [`rewind`]: bytes read from a connection put back in front of it (to hand it to hyper).
//! - [`spare`]: a worker thread's spare buffers, so that idle keep-alive connections hold none.
//! - [`stall`]: writes that give up on a client that stops reading, reads that give up on a
//!   peer that stops sending.
//! - [`trace`]: W3C Trace Context's `traceparent`, read and written.
//! - `starve`: HTTP/2 responses whose client takes no data of them (their streams are reset).
//! - [`utc`]: RFC 3339 UTC timestamps for logs and reports.
//!
//! Why one crate: the gateway, the echo back-end, the services and the tests serve HTTP the same
//! way; the details (ALPN choice, slowloris limits, drain on SIGTERM) are easy to get subtly
//! different when every component writes its own loop.

#![deny(missing_docs)]

pub mod deadline;
pub mod dev;
pub mod fdlimit;
pub mod head;
pub mod idle;
pub mod linger;
pub mod listen;
pub mod port;
pub mod rewind;
pub mod serve;
pub mod spare;
pub mod stall;
mod starve;
pub mod tls;
pub mod trace;
pub mod utc;

pub use tls::{TlsError, ALPN_H2, ALPN_HTTP11};
