//! `pms bench startup -- CMD`: exec → ready time and RSS of a command, several times.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use pms_bench::report::Environment;

use crate::cmd::UsageError;

/// Arguments of `pms bench startup`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Ready when this http:// URL answers 200.
    #[arg(
        long,
        required_unless_present = "ready_port",
        conflicts_with = "ready_port"
    )]
    ready_url: Option<String>,
    /// Ready when this port on 127.0.0.1 accepts a connection.
    #[arg(long)]
    ready_port: Option<u16>,
    /// Also time exec → the first line of the command's output (stdout or stderr) holding this
    /// text: the service's own "started" line.
    #[arg(long)]
    ready_line: Option<String>,
    /// How many starts to measure.
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Longest wait for one start.
    #[arg(long, default_value = "30s", value_parser = pms_bench::duration::parse)]
    timeout: Duration,
    /// Write DIR/startup.json.
    #[arg(long)]
    out: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    use pms_bench::startup::{self, Ready, Spread};
    let ready = match (&args.ready_url, args.ready_port) {
        (Some(url), _) => Ready::url(url).map_err(UsageError)?,
        (None, Some(port)) => Ready::Port(std::net::SocketAddr::from(([127, 0, 0, 1], port))),
        (None, None) => {
            return Err(UsageError("--ready-url or --ready-port is required".into()).into())
        }
    };
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| UsageError("no command given after --".into()))?;
    let mut runs = Vec::with_capacity(args.runs);
    println!(
        "{:>4} {:>10} {:>10} {:>10} {:>6}",
        "run", "ready ms", "line ms", "RSS KiB", "exit"
    );
    let line = args.ready_line.as_deref();
    for i in 1..=args.runs.max(1) {
        let run = startup::measure(program, rest, &ready, line, args.timeout)
            .with_context(|| format!("run {i}"))?;
        println!(
            "{i:>4} {:>10.2} {:>10} {:>10} {:>6}",
            run.ready_ms,
            run.line_ms
                .map_or_else(|| "-".into(), |l| format!("{l:.2}")),
            run.rss_kib.map_or_else(|| "-".into(), |r| r.to_string()),
            run.exit_code
                .map_or_else(|| "signal".into(), |c| c.to_string())
        );
        runs.push(run);
    }
    let ready_ms: Vec<f64> = runs.iter().map(|r| r.ready_ms).collect();
    let rss: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.rss_kib)
        .map(|r| r as f64)
        .collect();
    let ready_spread = Spread::of(&ready_ms);
    let line_ms: Vec<f64> = runs.iter().filter_map(|r| r.line_ms).collect();
    let line_spread = Spread::of(&line_ms);
    let rss_spread = Spread::of(&rss);
    if let Some(s) = &ready_spread {
        println!(
            "ready ms: mean {:.2}, median {:.2}, min {:.2}, max {:.2}, stdev {:.2}",
            s.mean, s.median, s.min, s.max, s.stdev
        );
    }
    if let Some(s) = &line_spread {
        println!(
            "line ms: mean {:.2}, median {:.2}, min {:.2}, max {:.2}, stdev {:.2}",
            s.mean, s.median, s.min, s.max, s.stdev
        );
    }
    if let Some(s) = &rss_spread {
        println!(
            "RSS KiB at ready: mean {:.0}, median {:.0}, max {:.0}",
            s.mean, s.median, s.max
        );
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let json = serde_json::json!({
            "command": args.command,
            "environment": Environment::here(true),
            "runs": runs,
            "ready_ms": ready_spread,
            "ready_line": args.ready_line,
            "line_ms": line_spread,
            "rss_kib": rss_spread,
        });
        let path = dir.join("startup.json");
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
