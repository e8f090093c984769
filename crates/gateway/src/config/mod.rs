//! Gateway configuration: the TOML file's shape, its validation, and the resolved settings the
//! rest of the crate runs on.
//!
//! Two stages, as the style guide asks: [`RawConfig`] is what serde reads (unknown keys are errors),
//! [`RawConfig::resolve`] checks everything — collecting *every* problem with the file and the key
//! it concerns — and loads secrets and keys, producing [`Settings`]. Nothing here binds a socket
//! or starts a task. Environment variables are read through an injected lookup so tests never
//! mutate the process environment.

//!
//! Layout: `raw` (the file's shape), `settings` (what the gateway runs on), `resolve` (checks and
//! loading, from one to the other).

mod raw;
mod resolve;
mod settings;

use std::path::Path;
use std::time::Duration;

pub use raw::*;
pub use settings::*;

/// Default admin listener.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9901";
/// Default upstream connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 1_000;
/// Default time to wait for an upstream's response head.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Default longest wait for the next bytes of a response body once its head has come (nginx's
/// `proxy_read_timeout`).
pub const DEFAULT_READ_TIMEOUT_MS: u64 = 60_000;
/// Default time an endpoint that could not be connected to is skipped (nginx's `fail_timeout`).
pub const DEFAULT_FAIL_TIMEOUT_MS: u64 = 10_000;
/// Default 5xx answers in a row after which an endpoint is skipped (Envoy's `consecutive_5xx`).
pub const DEFAULT_EJECT_AFTER_5XX: u32 = 5;
/// Default time between active checks of one endpoint.
pub const DEFAULT_HEALTH_CHECK_INTERVAL_MS: u64 = 1_000;
/// Default longest wait for an active check's answer.
pub const DEFAULT_HEALTH_CHECK_TIMEOUT_MS: u64 = 1_000;
/// Default failed checks in a row that make an endpoint unready (as Kubernetes probes count).
pub const DEFAULT_UNHEALTHY_AFTER: u32 = 2;
/// Default passed checks in a row that make it ready again.
pub const DEFAULT_HEALTHY_AFTER: u32 = 1;
/// Default time between DNS resolutions of a discovered upstream.
pub const DEFAULT_DISCOVER_INTERVAL_MS: u64 = 5_000;
/// Default most endpoints taken from one DNS resolution.
pub const DEFAULT_DISCOVER_MAX_ENDPOINTS: usize = 16;
/// Default idle connections kept per upstream endpoint.
pub const DEFAULT_POOL_MAX_IDLE: usize = 1_024;
/// Default time an idle upstream connection is kept. Shorter than the 10 s after which PMS
/// services (and hyper servers with a header-read timeout) close an idle keep-alive connection:
/// a pooled connection older than that may be closing just as a request is written to it, and
/// that request then fails with a 502.
pub const DEFAULT_POOL_IDLE_TIMEOUT_MS: u64 = 4_000;
/// Default most connections open to one upstream endpoint, all workers together.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4_096;
/// Default longest wait for a connection to an endpoint at its `max_connections`, ms.
pub const DEFAULT_QUEUE_TIMEOUT_MS: u64 = 5_000;
/// Default largest request body forwarded (streamed bodies are cut off past it).
pub const DEFAULT_MAX_BODY_BYTES: u64 = 10 * 1024 * 1024;
/// Default longest wait for the next part of a request body (nginx's `client_body_timeout`).
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Default largest body the JSON→XML transform reads.
pub const DEFAULT_TRANSFORM_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default root element of the generic JSON→XML layout.
pub const DEFAULT_XML_ROOT: &str = "root";
/// Default JWT clock-skew allowance.
pub const DEFAULT_LEEWAY_S: u64 = 30;

/// Everything wrong with a config file, one line per problem.
#[derive(Debug, thiserror::Error)]
#[error("{}", .problems.join("\n"))]
pub struct ConfigError {
    /// `file: key: problem` lines.
    pub problems: Vec<String>,
}

/// Looks up environment variables; tests pass a map instead of mutating the process.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The PMS route table shipped as `config/gateway.toml` (users, parks, payments on loopback), for
/// `pms up` and tests that want exactly what operators get.
pub const PMS_ROUTE_TABLE: &str = include_str!("../../../../config/gateway.toml");

/// Reads the process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Reads, parses and resolves `path`. Relative paths inside the file are taken relative to the
/// file's directory.
///
/// # Errors
/// Every problem found, each naming the file and key.
pub fn load(path: &Path, env: EnvLookup<'_>) -> Result<Settings, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        problems: vec![format!("{file}: cannot read: {e}")],
    })?;
    let raw = parse(&text, &file)?;
    let base = path.parent().unwrap_or(Path::new("."));
    raw.resolve(&file, base, env)
}

/// Parses TOML text; `file` names it in errors.
///
/// # Errors
/// The TOML error with line, column and key.
pub fn parse(text: &str, file: &str) -> Result<RawConfig, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError {
        problems: vec![format!("{file}: {}", e.to_string().trim_end())],
    })
}

#[cfg(test)]
mod tests;
