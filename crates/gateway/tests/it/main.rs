//! Gateway integration tests: real listeners on port 0, real echo/inspector back-ends, real
//! HTTP/1.1, HTTP/2 and TLS clients. One binary, one module per theme.

mod access_log;
mod admin;
mod api_docs;
mod auth;
mod balancing;
mod client_bodies;
mod cors;
mod duplex;
mod errors;
mod fast_path;
mod protocols;
mod proxying;
mod rate_limits;
mod support;
mod transform;
mod upstream_cap;
