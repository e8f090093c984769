//! The HTTP/1.1 upstream client both front ends use: the per-worker connection pools
//! ([`pool`]), a request written straight into bytes ([`head`]) and sent whole, the response
//! head read and parsed in place ([`send`], [`response`], with its header lines in [`fields`]),
//! and a chunked body scanned as it passes. The HTTP/1.1 fast path relays over it with its own
//! task; the hyper front end's bridge puts it behind hyper's requests and responses.
//!
//! Why one module: the fast path and the bridge send the same requests over the same
//! connections, and each of them once had its own pieces of this client.

pub(crate) mod fields;
pub(crate) mod head;
pub(crate) mod pool;
pub(crate) mod response;
mod send;

pub(crate) use send::{bad_gateway, gather, gather_response, read_head, send_whole, timed_out};
pub(crate) use send::{NoHead, Resend, Whole};

/// Read buffer growth step, for both hops.
pub(crate) const BUF: usize = 8 * 1024;
/// Bodies up to this size, on both hops, are read whole before they are passed on, so head and
/// body leave in one write (and such a request can be sent again on a fresh connection); larger
/// ones stream.
pub(crate) const GATHER: usize = 64 * 1024;
/// Largest upstream response head.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
