//! The subcommands, one file each, and what they share: the runtime, the shutdown signal and
//! the private data directory.

mod bench;
mod certs;
mod device;
mod echo;
mod events;
mod gateway;
mod openapi;
mod parks;
mod payments;
mod service;
mod up;
mod users;
mod web;

use clap::{Parser, Subcommand};

/// PMS: the Park Management System backend and its benchmarks.
#[derive(Debug, Parser)]
#[command(name = "pms", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole system in one process on loopback (gateway, users, parks, payments, echo).
    Up(up::Args),
    /// Run the API gateway.
    Gateway(gateway::Args),
    /// Run the users service.
    Users(users::Args),
    /// Run the parks service.
    Parks(parks::Args),
    /// Run the payments service.
    Payments(payments::Args),
    /// Run the front office (the web pages) in front of a gateway.
    Web(web::Args),
    /// The barrier and display programs, and device keys.
    #[command(subcommand)]
    Device(device::Command),
    /// Look at and replay the domain events in a service's database.
    #[command(subcommand)]
    Events(events::Command),
    /// Run the echo back-end used by the benchmarks.
    Echo(echo::Args),
    /// The load generator.
    #[command(subcommand)]
    Bench(bench::Command),
    /// Certificates for local use.
    #[command(subcommand)]
    Certs(certs::Command),
    /// Print an OpenAPI 3.1 document: the whole public API, or one service's.
    Openapi(openapi::Args),
}

pub use bench::{ThresholdFailed, EXIT_THRESHOLD};

/// A mistake in the command line or configuration (exit 64).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Stopped by a signal before the work was done: exit 128 + the signal's number, as a shell
/// reports a process the signal killed.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Interrupted {
    /// The signal's number.
    pub signo: i32,
    /// What was stopped and what is left.
    pub message: String,
}

impl Cli {
    /// The name its traces go under (`OTEL_SERVICE_NAME` overrides it): `pms-users` and so on
    /// for a component run alone, `pms` for the whole system in one process and the tools.
    pub fn service_name(&self) -> &'static str {
        match self.command {
            Command::Gateway(_) => "pms-gateway",
            Command::Users(_) => "pms-users",
            Command::Parks(_) => "pms-parks",
            Command::Payments(_) => "pms-payments",
            Command::Web(_) => "pms-web",
            _ => "pms",
        }
    }
}

/// Runs the chosen subcommand; a gateway's spans go to `spans`, when there.
pub fn run(cli: Cli, spans: Option<pms_gateway::spans::Spans>) -> anyhow::Result<()> {
    match cli.command {
        Command::Up(args) => up::run(args, spans),
        Command::Gateway(args) => gateway::run(args, spans),
        Command::Users(args) => users::run(args),
        Command::Parks(args) => parks::run(args),
        Command::Payments(args) => payments::run(args),
        Command::Web(args) => web::run(args),
        Command::Device(c) => device::run(c),
        Command::Events(c) => events::run(c),
        Command::Openapi(args) => openapi::run(args),
        Command::Echo(args) => echo::run(args),
        Command::Bench(c) => bench::run(c),
        Command::Certs(c) => certs::run(c),
    }
}

/// Creates `dir` (and missing parents) for this user only: it holds the JWT secret, the TLS key
/// and the users database (password hashes, NIFs). A directory that already exists is left as
/// it is.
fn create_private_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
}

/// A multi-threaded runtime with one worker per core.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Installs the SIGTERM and SIGINT handlers now and returns a future that resolves on the first
/// of them. Call it inside the runtime and *before* binding anything: a port accepts connections
/// as soon as it is bound, and a SIGTERM that arrives before the handler exists kills the process
/// instead of draining it (`pms bench startup` found this).
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    async fn first(s: std::io::Result<tokio::signal::unix::Signal>) {
        match s {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    }
    let term = first(signal(SignalKind::terminate()));
    let int = first(signal(SignalKind::interrupt()));
    async move {
        tokio::select! {
            () = int => tracing::info!("SIGINT received"),
            () = term => tracing::info!("SIGTERM received"),
        }
    }
}
