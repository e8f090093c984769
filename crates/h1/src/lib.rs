//! HTTP/1.1 on the wire, read and written the same way by every PMS component that speaks it
//! without hyper: the gateway's upstream client and fast path, the echo back-end's fast path and
//! the load generator.
//!
//! Layout:
//! - [`framing`]: the `Content-Length` syntax, and how a response's body ends and whether its
//!   connection can carry another request (RFC 9112 §6.3), gathered line by line from its head.
//! - [`chunked`]: the chunked coding scanned as it passes, its end found and its data located.
//! - [`write`](mod@write): a head and a body from separate buffers sent in one vectored write.
//!
//! Why one crate: each of them once kept its own copy of these rules, and the copies had drifted
//! (the load generator took `+5` for a length and let a second `Content-Length` win). Head
//! parsing itself is `httparse`'s; this crate holds what comes after it.

#![deny(missing_docs)]

pub mod chunked;
pub mod framing;
pub mod write;

pub use chunked::ChunkScanner;
pub use framing::{content_length, BadLength, Framed, Framing, ResponseFraming};
pub use write::write_two;
