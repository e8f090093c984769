//! `pms bench`: the load generator's command line. Today: `pms bench run URL` with the closed
//! model (`--users`) or the open model (`--rate`), see `crates/bench`; stages, stress, start-up
//! and compare come next.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use pms_bench::closed::{self, ClosedConfig, RequestSpec};
use pms_bench::open::{self, OpenConfig};
use pms_bench::report::{self, Environment, RunResult, Schedule};
use pms_bench::stats::Summary;
use pms_bench::target::{HttpVersion, Target};
use pms_net::tls::Trust;
use serde::Serialize;

use super::UsageError;

/// Exit code when a `--threshold` fails (k6's).
pub const EXIT_THRESHOLD: u8 = 99;

/// `pms bench` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Load one URL — closed model (`--users`) or open model (`--rate`) — and report the
    /// statistics.
    Run(Box<RunArgs>),
    /// Time exec → ready (and RSS at that moment) of a command, several times:
    /// `pms bench startup --ready-url http://127.0.0.1:9901/readyz -- pms gateway --config F`.
    Startup(StartupArgs),
}

/// Arguments of `pms bench startup`.
#[derive(Debug, clap::Args)]
pub struct StartupArgs {
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

/// Arguments of `pms bench run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The URL every request goes to (http:// or https://).
    url: String,
    /// Closed model: concurrent users, each with its own persistent connection.
    #[arg(long, default_value_t = 10)]
    users: usize,
    /// Open model: requests per second, sent on schedule whatever the target does; latency is
    /// measured from each request's due time.
    #[arg(long, conflicts_with_all = ["users", "ramp_up", "think_time"])]
    rate: Option<f64>,
    /// Open model: connections to spread the requests over.
    #[arg(long, default_value_t = 10, requires = "rate")]
    connections: usize,
    /// Open model over HTTP/2: concurrent streams per connection.
    #[arg(long, default_value_t = 1, requires = "rate")]
    streams_per_connection: usize,
    /// Whole run, ramp-up and warm-up included (`30s`, `2m`).
    #[arg(long, default_value = "10s", value_parser = pms_bench::duration::parse)]
    duration: Duration,
    /// Users start evenly over this time.
    #[arg(long, default_value = "0s", value_parser = pms_bench::duration::parse)]
    ramp_up: Duration,
    /// Pause after each answer (k6's `sleep(1)` is `--think-time 1s`).
    #[arg(long, default_value = "0s", value_parser = pms_bench::duration::parse)]
    think_time: Duration,
    /// Samples that start in this first part of the run are reported apart.
    #[arg(long, default_value = "0s", value_parser = pms_bench::duration::parse)]
    warmup: Duration,
    /// Longest wait for one answer.
    #[arg(long, default_value = "30s", value_parser = pms_bench::duration::parse)]
    timeout: Duration,
    /// HTTP version: 1.1, or 2 (h2c prior knowledge on http://, ALPN h2 on https://).
    #[arg(long, default_value = "1.1", value_parser = parse_http)]
    http: HttpVersion,
    /// Request method.
    #[arg(long, default_value = "GET")]
    method: http::Method,
    /// Extra header, `name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// Request body from a file.
    #[arg(long, conflicts_with = "payload_size")]
    body_file: Option<PathBuf>,
    /// Request body: the published suite's ARRAY payload of exactly N bytes (N >= 50).
    #[arg(long)]
    payload_size: Option<usize>,
    /// The status that counts as success (default: any 2xx).
    #[arg(long)]
    expect_status: Option<u16>,
    /// Text every response body must contain (the suite checked for `<N>B`).
    #[arg(long)]
    expect_body: Option<String>,
    /// Accept any server certificate.
    #[arg(long, conflicts_with = "ca")]
    insecure: bool,
    /// Trust this CA (PEM) in addition to the system roots.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Write DIR/result.json.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Sample this process's CPU and RSS once a second (the system under test; repeatable). The
    /// machine's CPU and load average are always sampled.
    #[arg(long)]
    watch_pid: Vec<u32>,
    /// Print a table or the JSON result.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
    /// Fail (exit 99) unless this holds for the measured samples: `p99<10ms`, `mean<2ms`,
    /// `max<1s`, `errors<1%` (repeatable).
    #[arg(long, value_parser = parse_threshold)]
    threshold: Vec<Threshold>,
}

/// The settings recorded in `result.json`.
#[derive(Debug, Serialize)]
struct RunConfig<'a> {
    url: &'a str,
    model: &'static str,
    users: Option<usize>,
    rate: Option<f64>,
    connections: Option<usize>,
    streams_per_connection: Option<usize>,
    duration_s: f64,
    ramp_up_s: f64,
    think_time_s: f64,
    warmup_s: f64,
    timeout_s: f64,
    http: HttpVersion,
    method: &'a str,
    body_bytes: usize,
}

/// A condition on the measured statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    metric: String,
    limit: f64,
    text: String,
}

impl Threshold {
    fn value(&self, s: &Summary) -> Option<f64> {
        match self.metric.as_str() {
            "errors" => Some(s.error_pct),
            "mean" => Some(s.mean_ms),
            "max" => Some(s.max_ms),
            "min" => Some(s.min_ms),
            p => p
                .strip_prefix('p')?
                .parse()
                .ok()
                .and_then(|q| s.percentile(q)),
        }
    }
}

fn parse_http(text: &str) -> Result<HttpVersion, String> {
    match text {
        "1.1" | "1" | "http1" => Ok(HttpVersion::Http1),
        "2" | "h2" | "http2" => Ok(HttpVersion::Http2),
        _ => Err(format!("{text:?}: expected 1.1 or 2")),
    }
}

/// `metric<value`: `errors<1%`, or a latency (`mean`, `min`, `max`, `p50` … `p99.99`) with a unit.
fn parse_threshold(text: &str) -> Result<Threshold, String> {
    let (metric, value) = text
        .split_once('<')
        .ok_or_else(|| format!("{text:?}: expected METRIC<VALUE, e.g. p99<10ms or errors<1%"))?;
    let metric = metric.trim().to_owned();
    let value = value.trim();
    let limit = if metric == "errors" {
        value
            .strip_suffix('%')
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| format!("{text:?}: errors take a percentage, e.g. errors<1%"))?
    } else {
        let known = matches!(metric.as_str(), "mean" | "min" | "max")
            || metric
                .strip_prefix('p')
                .and_then(|p| p.parse::<f64>().ok())
                .is_some_and(|p| pms_bench::stats::PERCENTILES.contains(&p));
        if !known {
            return Err(format!(
                "{text:?}: unknown metric {metric:?} (errors, mean, min, max, p50, p75, p90, p95, p98, p99, p99.9, p99.99)"
            ));
        }
        if value.parse::<f64>().is_ok() {
            return Err(format!(
                "{text:?}: give the latency a unit, e.g. {metric}<{value}ms"
            ));
        }
        pms_bench::duration::parse(value)?.as_secs_f64() * 1000.0
    };
    Ok(Threshold {
        metric,
        limit,
        text: text.to_owned(),
    })
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(args) => run_load(*args),
        Command::Startup(args) => run_startup(args),
    }
}

fn run_load(args: RunArgs) -> anyhow::Result<()> {
    let trust = match (&args.ca, args.insecure) {
        (_, true) => Trust::InsecureSkipVerify,
        (Some(ca), false) => Trust::SystemAnd(ca.clone()),
        (None, false) if args.url.starts_with("https") => Trust::System,
        (None, false) => Trust::Nothing,
    };
    let target =
        Arc::new(Target::new(&args.url, args.http, &trust).map_err(|e| UsageError(e.to_string()))?);
    if args.warmup >= args.duration && !args.warmup.is_zero() {
        return Err(UsageError("--warmup must be shorter than --duration".into()).into());
    }
    let body = match (&args.body_file, args.payload_size) {
        (Some(path), _) => {
            Bytes::from(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?)
        }
        (None, Some(n)) => Bytes::from(pms_bench::payload::array(n)),
        (None, None) => Bytes::new(),
    };
    let mut headers = Vec::with_capacity(args.headers.len());
    for h in &args.headers {
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| UsageError(format!("--header {h:?}: expected 'name: value'")))?;
        let name = http::HeaderName::try_from(name.trim())
            .map_err(|e| UsageError(format!("--header {h:?}: {e}")))?;
        let value = http::HeaderValue::try_from(value.trim())
            .map_err(|e| UsageError(format!("--header {h:?}: {e}")))?;
        headers.push((name, value));
    }
    let spec = Arc::new(RequestSpec {
        method: args.method.clone(),
        headers,
        body: body.clone(),
        expect_status: args.expect_status,
        expect_body: args.expect_body.clone(),
    });
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(
                UsageError(format!("--rate {rate}: expected requests per second > 0")).into(),
            );
        }
    }
    let rt = super::runtime()?;
    let (stop_sampler, stopped) = tokio::sync::watch::channel(false);
    let run = async {
        let sampler = tokio::spawn(pms_bench::watch::sample(
            args.watch_pid.clone(),
            Duration::from_secs(1),
            stopped,
        ));
        let measured = measure(&args, target.clone(), spec).await;
        let _ = stop_sampler.send(true);
        (measured, sampler.await.ok())
    };
    let ((labels, schedule), watched) = rt.block_on(run);
    let result = RunResult {
        config: RunConfig {
            url: &args.url,
            model: if args.rate.is_some() {
                "open"
            } else {
                "closed"
            },
            users: args.rate.is_none().then_some(args.users),
            rate: args.rate,
            connections: args.rate.map(|_| args.connections),
            streams_per_connection: args.rate.map(|_| args.streams_per_connection),
            duration_s: args.duration.as_secs_f64(),
            ramp_up_s: args.ramp_up.as_secs_f64(),
            think_time_s: args.think_time.as_secs_f64(),
            warmup_s: args.warmup.as_secs_f64(),
            timeout_s: args.timeout.as_secs_f64(),
            http: args.http,
            method: args.method.as_str(),
            body_bytes: body.len(),
        },
        environment: Environment::here(target.is_loopback()),
        labels,
        schedule,
        watch: watched,
    };
    if let Some(dir) = &args.out {
        result
            .write_to(dir)
            .with_context(|| format!("writing {}/result.json", dir.display()))?;
    }
    if args.format == "json" {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print!("{}", report::table(&result.labels));
        if let Some(w) = &result.watch {
            for p in &w.processes {
                println!(
                    "pid {}: CPU {:.0}% of a core on average, RSS max {:.1} MiB",
                    p.pid,
                    p.cpu_mean_pct,
                    p.rss_max_kib as f64 / 1024.0
                );
            }
            println!(
                "machine: CPU {:.0}% of all cores on average",
                w.machine_cpu_mean_pct
            );
        }
        if let Some(s) = &result.schedule {
            println!(
                "schedule: {} due, {} late (sent over {:?} after their due time), {} dropped \
                 (no connection free in time)\n\
                 'measured' counts latency from each request's due time; 'uncorrected' from \
                 when it was sent. They differ when the target falls behind: a closed-loop tool \
                 would report only the second, hiding the wait (coordinated omission).",
                s.due,
                s.late,
                open::LATE_AFTER,
                s.dropped
            );
        }
    }
    let measured = &result.labels[0];
    let failed: Vec<String> = args
        .threshold
        .iter()
        .filter(|t| t.value(measured).is_none_or(|v| v >= t.limit))
        .map(|t| t.text.clone())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(ThresholdFailed(failed).into())
    }
}

fn run_startup(args: StartupArgs) -> anyhow::Result<()> {
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
        "{:>4} {:>10} {:>10} {:>6}",
        "run", "ready ms", "RSS KiB", "exit"
    );
    for i in 1..=args.runs.max(1) {
        let run = startup::measure(program, rest, &ready, args.timeout)
            .with_context(|| format!("run {i}"))?;
        println!(
            "{i:>4} {:>10.2} {:>10} {:>6}",
            run.ready_ms,
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
    let rss_spread = Spread::of(&rss);
    if let Some(s) = &ready_spread {
        println!(
            "ready ms: mean {:.2}, median {:.2}, min {:.2}, max {:.2}, stdev {:.2}",
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
            "rss_kib": rss_spread,
        });
        let path = dir.join("startup.json");
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Runs the load the arguments describe; returns the labels and, for the open model, how the
/// schedule was kept.
async fn measure(
    args: &RunArgs,
    target: Arc<Target>,
    spec: Arc<RequestSpec>,
) -> (Vec<Summary>, Option<Schedule>) {
    let protocol = match args.http {
        HttpVersion::Http1 => "1.1",
        HttpVersion::Http2 => "2",
    };
    match args.rate {
        None => {
            eprintln!(
                "pms bench: closed model, {} users against {} for {:?} (HTTP/{protocol})",
                args.users, args.url, args.duration
            );
            let cfg = ClosedConfig {
                users: args.users,
                duration: args.duration,
                ramp_up: args.ramp_up,
                think_time: args.think_time,
                warmup: args.warmup,
                timeout: args.timeout,
            };
            let out = closed::run(target, spec, cfg).await;
            let mut labels = vec![out.measured.summary("measured", out.window)];
            if !args.warmup.is_zero() {
                labels.push(out.warmup.summary("warmup", args.warmup));
            }
            (labels, None)
        }
        Some(rate) => {
            eprintln!(
                "pms bench: open model, {rate} req/s against {} for {:?} over {} connections (HTTP/{protocol})",
                args.url, args.duration, args.connections
            );
            let cfg = OpenConfig {
                rate,
                duration: args.duration,
                warmup: args.warmup,
                connections: args.connections,
                streams: args.streams_per_connection,
                timeout: args.timeout,
            };
            let out = open::run(target, spec, cfg).await;
            let mut labels = vec![
                out.corrected.summary("measured", out.window),
                out.uncorrected.summary("uncorrected", out.window),
            ];
            if !args.warmup.is_zero() {
                labels.push(out.warmup.summary("warmup", args.warmup));
            }
            let schedule = Schedule {
                due: out.due,
                late: out.late,
                dropped: out.dropped,
            };
            (labels, Some(schedule))
        }
    }
}

/// Some `--threshold`s did not hold (exit 99).
#[derive(Debug, thiserror::Error)]
#[error("thresholds failed: {}", .0.join(", "))]
pub struct ThresholdFailed(pub Vec<String>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_with_units() {
        let t = parse_threshold("p99<10ms").unwrap();
        assert_eq!((t.metric.as_str(), t.limit), ("p99", 10.0));
        assert_eq!(parse_threshold("mean < 1.5s").unwrap().limit, 1500.0);
        assert_eq!(parse_threshold("errors<1%").unwrap().limit, 1.0);
        assert_eq!(parse_threshold("p99.9<2ms").unwrap().limit, 2.0);
        for bad in ["p99>10ms", "p42<1ms", "errors<1", "p99<10", "latency<1ms"] {
            assert!(parse_threshold(bad).is_err(), "{bad}");
        }
    }
}
