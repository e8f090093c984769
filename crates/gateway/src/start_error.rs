//! Why the gateway could not start: what [`run`](crate::run) and [`Bound`](crate::Bound) report
//! before anything serves.

use std::net::SocketAddr;

use crate::access;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({name}): {error}")]
    Bind {
        /// Listener name.
        name: String,
        /// Address.
        addr: SocketAddr,
        /// The OS error.
        error: std::io::Error,
    },
    /// An upstream's TLS settings could not be loaded.
    #[error("upstream {name}: {error}")]
    Upstream {
        /// Upstream name.
        name: String,
        /// What failed.
        error: pms_net::TlsError,
    },
    /// The JWT verifier refused its settings.
    #[error("auth.jwt: {0}")]
    Jwt(pms_auth::verify::ConfigError),
    /// A worker thread or its runtime could not be started.
    #[error("worker: {0}")]
    Worker(std::io::Error),
    /// The access log could not be opened.
    #[error(transparent)]
    AccessLog(#[from] access::OpenError),
}
