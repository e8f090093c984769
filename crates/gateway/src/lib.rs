//! The PMS API gateway: a reverse proxy in front of the park-management services.
//!
//! Layout:
//! - [`config`]: the TOML file, its validation (every problem, with file and key) and the resolved
//!   [`Settings`].
//! - [`router`]: which route takes a request (exact beats prefix, longest prefix wins).
//! - [`jwt`]: bearer tokens, roles, identity headers (stripped on every route, set from claims).
//! - [`cors`]: cross-origin requests from browsers: preflights answered, answers marked.
//! - [`forwarder`]: the trusted forwarder (the front office), whose key lets it name the person
//!   a request is for, so per-client rate limits count people and not the front office.
//! - [`headers`]: request ids, `traceparent`, the values the gateway reads and writes, and the
//!   header rules both front ends apply (hop-by-hop removal, `X-Forwarded-*`, `Via`, identity).
//! - [`transform`]: the streaming JSON→XML converter.
//! - [`upstream`]: one pooled client per upstream (h1, h2 over TLS, h2c, ALPN auto).
//! - `health`: which endpoint of an upstream a request goes to, and which to skip for now
//!   (failed connects, 5xx in a row, failed readiness checks); `probe`: the readiness checks.
//! - `pipeline`: what every request goes through on either front end — route, admission (rate
//!   limit, token, role), the record of its answer; `ratelimit`: the per-route
//!   token buckets.
//! - `proxy`: the hyper front end (HTTP/2, TLS, and HTTP/1.1 the fast path hands over), with
//!   the bridge that sends its small requests over the HTTP/1.1 upstream pools;
//!   `unread`: a refused request's body, read to its end or the connection closed, so a
//!   keep-alive client is never left writing into a closed socket.
//! - [`respond`]: the JSON error responses.
//! - [`metrics`] and `admin`: Prometheus metrics, `/healthz`, `/readyz`, `/metrics`.
//! - [`body`]: the streamed body type, the size cap and the upstream read timeout.
//! - [`access`]: the access log (a JSON line per answered request, written off the request path);
//!   [`spans`]: the gateway's own spans, exported over OTLP when asked for.
//! - `fast`: the HTTP/1.1 fast path, relaying plain requests without hyper on either hop.
//! - `h1up`: the HTTP/1.1 upstream client both front ends use — per-worker pools, requests
//!   written and responses parsed in place.
//! - `openfiles`: the connection caps fitted into the open-file limit at start.
//! - `server`: binding, starting, serving and draining ([`Bound`], [`run`]), and what stops a
//!   start ([`StartError`]); `worker`: one worker thread's runtime, backends and serve loops.
//!
//! Serving itself (TLS, ALPN, h2c, limits, drain) is `pms_net::serve`, shared with the other
//! components. Why thread-per-core workers (see [`run`]): profiling the first, multi-threaded
//! version under wrk showed a fifth of the gateway's CPU in the kernel's scheduler, waking tasks
//! across threads; keeping each connection, its requests and its upstream connection on one
//! thread removes that. Why a bound-listener API ([`Bound`] then [`run`]): the caller binds (and can use
//! port 0 in tests), and a config error is reported before anything is bound.

#![deny(missing_docs)]

pub mod access;
mod admin;
pub mod apidocs;
mod backend;
pub mod body;
pub mod config;
pub mod cors;
mod discovery;
mod fast;
pub mod forwarder;
mod h1up;
pub mod headers;
mod health;
pub mod jwt;
pub mod metrics;
mod openfiles;
mod pipeline;
mod probe;
mod proxy;
mod ratelimit;
pub mod respond;
pub mod router;
mod server;
pub mod spans;
mod start_error;
pub mod transform;
mod unread;
pub mod upstream;
mod worker;

pub use config::Settings;
pub use server::{run, Bound};
pub use start_error::StartError;
