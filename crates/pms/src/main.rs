//! `pms`: one binary for every PMS component. It parses the command line, sets up logging and
//! the runtime, and hands over to a component's `run`; no component logic lives here.
//!
//! Exit codes: 0 on success (including a clean drain after SIGTERM/SIGINT), 64 for bad usage or
//! configuration (reported before anything is bound), 1 for a failure at run time, 99 when a
//! `pms bench` threshold fails, 128 + the signal's number when a signal stopped `pms bench
//! suite` half-way.

mod cmd;

use std::process::ExitCode;

use clap::Parser;

/// Exit code for bad usage or configuration (BSD `EX_USAGE`).
const EX_USAGE: u8 = 64;

fn main() -> ExitCode {
    let cli = cmd::Cli::parse();
    // Flushes the exported traces when main returns.
    let traces = init_tracing(cli.service_name());
    // The gateway makes its own spans (not `tracing`'s) and exports them the same way.
    let spans = traces
        .as_ref()
        .map(|t| pms_gateway::spans::Spans::new(t.tracer()));
    // Servers and the load generator alike hold a descriptor per connection: take all the
    // open files the hard limit allows, as HAProxy and Go programs do.
    match pms_net::fdlimit::raise_to_hard() {
        Ok(limit) => tracing::debug!(?limit, "open-file limit"),
        Err(err) => tracing::warn!(error = %err, "cannot raise the open-file limit"),
    }
    match cmd::run(cli, spans) {
        Ok(()) => ExitCode::SUCCESS,
        // Output piped into something that stopped reading (`| head`): done, not a failure.
        Err(err) if broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("pms: {err:#}");
            if err.downcast_ref::<cmd::UsageError>().is_some() {
                ExitCode::from(EX_USAGE)
            } else if err.downcast_ref::<cmd::ThresholdFailed>().is_some() {
                ExitCode::from(cmd::EXIT_THRESHOLD)
            } else if let Some(i) = err.downcast_ref::<cmd::Interrupted>() {
                ExitCode::from(u8::try_from(128 + i.signo).unwrap_or(1))
            } else {
                ExitCode::from(1)
            }
        }
    }
}

fn broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Logs to stderr, filtered by `PMS_LOG` (default `info`); one JSON object per line when
/// `PMS_LOG_FORMAT=json` (for a log collector), else text. With an OTLP endpoint in the
/// environment, the spans at level info and above are exported too (`pms_service::telemetry`,
/// named `service`), whatever `PMS_LOG` keeps of the logs.
fn init_tracing(service: &str) -> Option<pms_service::telemetry::Traces> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;

    let filter = tracing_subscriber::EnvFilter::try_from_env("PMS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = if std::env::var("PMS_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
        logs.json()
            .with_current_span(true)
            .with_span_list(false)
            .boxed()
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed()
    };
    let traces = match pms_service::telemetry::Traces::from_env(service) {
        Ok(traces) => traces,
        Err(e) => {
            eprintln!("pms: {e}; no traces are exported");
            None
        }
    };
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(traces.as_ref().map(|t| {
            t.layer()
                .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
        }))
        .init();
    traces
}
