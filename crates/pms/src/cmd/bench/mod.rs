//! `pms bench`: the load generator's command line, one file per subcommand (`run`, `stress`,
//! `startup`, `compare`, `import`, `suite`) over the `pms-bench` crate, and what `run` and `stress` share here: the
//! request to send, how to trust the target, and how to report and gate a result.

mod compare;
mod import;
mod load;
mod startup;
mod stress;
mod suite;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use pms_bench::closed::RequestSpec;
use pms_bench::collect::{CollectConfig, Collected, Collector, StopReason, StopRule, Tick};
use pms_bench::format::Format;
use pms_bench::profile::Profile;
use pms_bench::stats::Summary;
use pms_bench::target::{HttpVersion, Target};
use pms_bench::watch::WatchReport;
use pms_net::tls::Trust;

use super::UsageError;

/// Exit code when a `--threshold` fails (k6's).
pub const EXIT_THRESHOLD: u8 = 99;

/// `pms bench` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Load one URL — closed model (`--users`, `--stage`) or open model (`--rate`) — and report
    /// the statistics.
    Run(Box<load::Args>),
    /// Add users at a fixed pace (`--add 200/s`) until the target fails; report how many were
    /// active then.
    Stress(Box<stress::Args>),
    /// Time exec → ready (and RSS at that moment) of a command, several times:
    /// `pms bench startup --ready-url http://127.0.0.1:9901/readyz -- pms gateway --config F`.
    Startup(startup::Args),
    /// Test whether two runs' latencies differ (the dissertation's procedure): normality,
    /// skewness, then Welch's t-test or the Wilcoxon rank-sum test, with effect size and a
    /// confidence interval.
    Compare(compare::Args),
    /// Read another tool's per-request results (JMeter JTL CSV or XML, k6 CSV or JSON, vegeta
    /// CSV or JSON) and report them with the same statistics and layouts as a run.
    Import(import::Args),
    /// Rerun a published study in one command: start what it needs, run its matrix, write
    /// report.md, report.html and results.json (`pms bench suite ballerina-rest --profile
    /// standard --out DIR`; `--list` shows the suites).
    Suite(Box<suite::Args>),
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(args) => load::run(*args),
        Command::Stress(args) => stress::run(*args),
        Command::Startup(args) => startup::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Import(args) => import::run(args),
        Command::Suite(args) => suite::run(*args),
    }
}

/// What to send and how to judge the answer (shared by `run` and `stress`).
#[derive(Debug, clap::Args)]
pub struct RequestArgs {
    /// The URL every request goes to (http:// or https://).
    url: String,
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
    /// Longest wait for one answer (and for a connection).
    #[arg(long, default_value = "30s", value_parser = pms_bench::duration::parse)]
    timeout: Duration,
}

/// The target and the request spec the arguments describe.
struct Prepared {
    target: Arc<Target>,
    spec: Arc<RequestSpec>,
}

impl RequestArgs {
    fn prepare(&self) -> anyhow::Result<Prepared> {
        let trust = match (&self.ca, self.insecure) {
            (_, true) => Trust::InsecureSkipVerify,
            (Some(ca), false) => Trust::SystemAnd(ca.clone()),
            (None, false) if self.url.starts_with("https") => Trust::System,
            (None, false) => Trust::Nothing,
        };
        let target =
            Target::new(&self.url, self.http, &trust).map_err(|e| UsageError(e.to_string()))?;
        let body = match (&self.body_file, self.payload_size) {
            (Some(path), _) => Bytes::from(
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
            ),
            (None, Some(n)) if n < pms_payload::MIN_SIZE => {
                return Err(UsageError(format!(
                    "--payload-size {n}: the ARRAY payload is at least {} bytes",
                    pms_payload::MIN_SIZE
                ))
                .into())
            }
            (None, Some(n)) => Bytes::from(pms_payload::array(n)),
            (None, None) => Bytes::new(),
        };
        let mut headers = Vec::with_capacity(self.headers.len());
        for h in &self.headers {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| UsageError(format!("--header {h:?}: expected 'name: value'")))?;
            let name = http::HeaderName::try_from(name.trim())
                .map_err(|e| UsageError(format!("--header {h:?}: {e}")))?;
            let value = http::HeaderValue::try_from(value.trim())
                .map_err(|e| UsageError(format!("--header {h:?}: {e}")))?;
            headers.push((name, value));
        }
        Ok(Prepared {
            target: Arc::new(target),
            spec: Arc::new(RequestSpec {
                method: self.method.clone(),
                headers,
                body,
                expect_status: self.expect_status,
                expect_body: self.expect_body.clone(),
            }),
        })
    }
}

/// Where results go and how they look (shared by `run` and `stress`).
#[derive(Debug, clap::Args)]
pub struct OutputArgs {
    /// Write DIR/result.json (and, with --samples, DIR/samples.csv).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write one CSV row per request to DIR/samples.csv (JMeter's JTL columns), as the
    /// requests end. Needs --out.
    #[arg(long, requires = "out")]
    samples: bool,
    /// Sample this process's CPU and RSS once a second (the system under test; repeatable). The
    /// machine's CPU and load average are always sampled.
    #[arg(long)]
    watch_pid: Vec<u32>,
    /// Report layout: text, json, or the columns of jmeter, ballerina, k6 or vegeta.
    #[arg(long, default_value = "text", value_parser = clap::value_parser!(Format))]
    format: Format,
    /// Count the opening of a connection (TCP and TLS) in the latency of the request that
    /// opened it, as JMeter's elapsed time does.
    #[arg(long)]
    connect_in_latency: bool,
    /// vegeta histogram buckets.
    #[arg(long, default_value = pms_bench::format::VEGETA_BUCKETS, value_parser = pms_bench::format::parse_buckets)]
    buckets: std::vec::Vec<Duration>,
    /// Live progress line on stderr, once a second: auto (when stderr is a terminal), always,
    /// never.
    #[arg(long, default_value = "auto", value_parser = ["auto", "always", "never"])]
    progress: String,
}

impl OutputArgs {
    fn collect_config(&self, warmup: Duration, open: bool, stop: StopRule) -> CollectConfig {
        CollectConfig {
            warmup,
            open,
            stop,
            samples: self
                .out
                .as_ref()
                .filter(|_| self.samples)
                .map(|d| d.join("samples.csv")),
            connect_in_latency: self.connect_in_latency,
        }
    }

    /// A progress printer for the ticker.
    fn progress(&self) -> impl FnMut(&Tick) + Send + 'static {
        use std::io::IsTerminal as _;
        let tty = std::io::stderr().is_terminal();
        let on = match self.progress.as_str() {
            "always" => true,
            "never" => false,
            _ => tty,
        };
        let mut total = 0u64;
        let mut errors = 0u64;
        move |t: &Tick| {
            if !on {
                return;
            }
            total += t.requests;
            errors += t.errors;
            let line = format!(
                "{:>6.0}s  active {:>6}  {:>9.1} req/s  p99 {:>9.3} ms  errors {} of {}",
                t.t_s, t.active, t.rate, t.p99_ms, errors, total
            );
            if tty {
                eprint!("\r\x1b[K{line}");
            } else {
                eprintln!("{line}");
            }
        }
    }

    /// What `result.json` says of the per-request file, when one was written.
    fn samples_note(&self, c: &Collected) -> Option<String> {
        self.samples
            .then(|| format!("samples.csv ({} rows)", c.rows))
    }

    /// Ends the progress line (a terminal's cursor is still on it).
    fn progress_done(&self) {
        use std::io::IsTerminal as _;
        if self.progress != "never" && std::io::stderr().is_terminal() {
            eprintln!();
        }
    }
}

/// What a run leaves for reporting: the recordings, the watched processes, and what the load
/// itself returned.
struct Driven<T> {
    collected: Collected,
    watched: Option<WatchReport>,
    load: T,
}

/// Runs `load` with everything around it: the process watcher, the collector, the once-a-second
/// ticker (timeline, stop rule, progress line), then the final merge. `profile` is what the
/// ticker reports as the target; `planned` is the run's length when nothing stops it early.
fn drive<T, F, Fut>(
    output: &OutputArgs,
    collect: CollectConfig,
    profile: Profile,
    planned: Duration,
    load: F,
) -> anyhow::Result<Driven<T>>
where
    F: FnOnce(Arc<Collector>) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let rt = super::runtime()?;
    rt.block_on(async {
        let (stop_sampler, stopped) = tokio::sync::watch::channel(false);
        let sampler = tokio::spawn(pms_bench::watch::sample(
            output.watch_pid.clone(),
            Duration::from_secs(1),
            stopped,
        ));
        let collector = Collector::new(collect).context("creating the samples file")?;
        let ticker = tokio::spawn(
            collector
                .clone()
                .tick(move |t| profile.value_at(t), output.progress()),
        );
        let load = load(collector.clone()).await;
        collector.stop_because(StopReason::Completed);
        let _ = ticker.await;
        output.progress_done();
        let _ = stop_sampler.send(true);
        let watched = sampler.await.ok();
        let collected = collector
            .finish(planned)
            .context("writing the samples file")?;
        Ok(Driven {
            collected,
            watched,
            load,
        })
    })
}

fn parse_http(text: &str) -> Result<HttpVersion, String> {
    match text {
        "1.1" | "1" | "http1" => Ok(HttpVersion::Http1),
        "2" | "h2" | "http2" => Ok(HttpVersion::Http2),
        _ => Err(format!("{text:?}: expected 1.1 or 2")),
    }
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

/// The thresholds `measured` fails; with no samples at all, every one (nothing was shown to hold).
fn failed_thresholds(thresholds: &[Threshold], measured: &Summary) -> Vec<String> {
    thresholds
        .iter()
        .filter(|t| measured.samples == 0 || t.value(measured).is_none_or(|v| v >= t.limit))
        .map(|t| t.text.clone())
        .collect()
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

    #[test]
    fn thresholds_fail_when_nothing_was_measured() {
        let empty =
            pms_bench::stats::Recorder::default().summary("measured", Duration::from_secs(1));
        let t = vec![parse_threshold("errors<1%").unwrap()];
        assert_eq!(failed_thresholds(&t, &empty), vec!["errors<1%".to_owned()]);
    }
}
