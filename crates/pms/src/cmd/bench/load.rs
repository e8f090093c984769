//! `pms bench run URL`: one load run, closed model (`--users`, `--ramp-up`, `--stage`) or open
//! model (`--rate`, `--stage`), reported in the chosen layout and gated by thresholds.

use std::time::Duration;

use anyhow::Context;
use pms_bench::closed::{self, ClosedConfig};
use pms_bench::collect::{Collected, StopReason, StopRule};
use pms_bench::format::{self, Format, View};
use pms_bench::open::{self, OpenConfig, Schedule};
use pms_bench::profile::{Profile, Stage};
use pms_bench::report::{Environment, RunResult};
use pms_bench::stats::Summary;
use serde::Serialize;

use super::{failed_thresholds, OutputArgs, RequestArgs, Threshold, ThresholdFailed};
use crate::cmd::UsageError;

/// Arguments of `pms bench run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    request: RequestArgs,
    /// Closed model: concurrent users, each with its own persistent connection (default 10;
    /// with --stage, the number at the start, default 0).
    #[arg(long)]
    users: Option<usize>,
    /// Open model: requests per second, sent on schedule whatever the target does; latency is
    /// measured from each request's due time (with --stage, the rate at the start).
    #[arg(long, conflicts_with_all = ["users", "ramp_up", "think_time"])]
    rate: Option<f64>,
    /// Ramp users or rate linearly to TARGET over DURATION, `30s:200` (repeatable, in order;
    /// the last target holds until the end of the run).
    #[arg(long = "stage", value_parser = Stage::parse, conflicts_with = "ramp_up")]
    stages: Vec<Stage>,
    /// Open model: connections to spread the requests over.
    #[arg(long, default_value_t = 10, requires = "rate")]
    connections: usize,
    /// Open model over HTTP/2: concurrent streams per connection.
    #[arg(long, default_value_t = 1, requires = "rate")]
    streams_per_connection: usize,
    /// Whole run, ramp-up and warm-up included (`30s`, `2m`; default: the stages' total, or
    /// 10s).
    #[arg(long, value_parser = pms_bench::duration::parse)]
    duration: Option<Duration>,
    /// Users start evenly over this time.
    #[arg(long, default_value = "0s", value_parser = pms_bench::duration::parse)]
    ramp_up: Duration,
    /// Pause after each answer (k6's `sleep(1)` is `--think-time 1s`).
    #[arg(long, default_value = "0s", value_parser = pms_bench::duration::parse)]
    think_time: Duration,
    /// Closed model: requests per user, then the user stops (JMeter's loop count); the run
    /// ends when every user is done, or at --duration.
    #[arg(long, conflicts_with = "rate", value_parser = clap::value_parser!(u64).range(1..))]
    iterations: Option<u64>,
    /// Samples that start in this first part of the run are reported apart.
    #[arg(long, default_value = "0s", value_parser = pms_bench::duration::parse)]
    warmup: Duration,
    /// How long requests in flight at the end may take to finish before they are cut off (and
    /// counted as interrupted, not as samples).
    #[arg(long, default_value = "5s", value_parser = pms_bench::duration::parse)]
    graceful_stop: Duration,
    /// Stop the run at the first failed request, as the k6 scripts' `test.abort()` did.
    #[arg(long)]
    abort_on_error: bool,
    /// Stop the run when one second's errors exceed this percentage (`10%`).
    #[arg(long, value_parser = parse_pct)]
    abort_at_error_rate: Option<f64>,
    #[command(flatten)]
    output: OutputArgs,
    /// Fail (exit 99) unless this holds for the measured samples: `p99<10ms`, `mean<2ms`,
    /// `max<1s`, `errors<1%` (repeatable).
    #[arg(long, value_parser = super::parse_threshold)]
    threshold: Vec<Threshold>,
}

pub(super) fn parse_pct(text: &str) -> Result<f64, String> {
    text.trim()
        .strip_suffix('%')
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| (0.0..=100.0).contains(v))
        .ok_or_else(|| format!("{text:?}: expected a percentage, e.g. 10%"))
}

/// The settings recorded in `result.json`.
#[derive(Debug, Serialize)]
struct RunConfig<'a> {
    url: &'a str,
    model: &'static str,
    users: Option<usize>,
    rate: Option<f64>,
    profile: &'a Profile,
    connections: Option<usize>,
    streams_per_connection: Option<usize>,
    duration_s: f64,
    ramp_up_s: f64,
    think_time_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    iterations: Option<u64>,
    warmup_s: f64,
    timeout_s: f64,
    graceful_stop_s: f64,
    stop_rule: StopRule,
    http: pms_bench::target::HttpVersion,
    method: &'a str,
    body_bytes: usize,
}

/// The run the arguments describe.
struct Plan {
    profile: Profile,
    duration: Duration,
    open: bool,
}

fn plan(args: &Args) -> Result<Plan, UsageError> {
    let open = args.rate.is_some();
    let profile = match (args.rate, args.stages.is_empty()) {
        (Some(rate), _) if !(rate.is_finite() && rate >= 0.0) => {
            return Err(UsageError(format!(
                "--rate {rate}: expected requests per second >= 0"
            )))
        }
        (Some(0.0), true) => {
            return Err(UsageError(
                "--rate 0 sends nothing; give a rate or --stage".into(),
            ))
        }
        (Some(rate), _) => Profile {
            start: rate,
            stages: args.stages.clone(),
        },
        (None, true) => Profile::ramp(args.users.unwrap_or(10) as f64, args.ramp_up),
        (None, false) => Profile {
            start: args.users.unwrap_or(0) as f64,
            stages: args.stages.clone(),
        },
    };
    if profile.max() <= 0.0 {
        return Err(UsageError(
            "no users or rate at any point of the run".into(),
        ));
    }
    let duration = match (args.duration, args.stages.is_empty()) {
        (Some(d), _) => d,
        (None, false) => profile.stages_duration(),
        (None, true) => Duration::from_secs(10),
    };
    if duration.is_zero() {
        return Err(UsageError("--duration must be longer than 0".into()));
    }
    if !args.warmup.is_zero() && args.warmup >= duration {
        return Err(UsageError(
            "--warmup must be shorter than --duration".into(),
        ));
    }
    Ok(Plan {
        profile,
        duration,
        open,
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let plan = plan(&args)?;
    let prepared = args.request.prepare()?;
    let rule = StopRule {
        first_error: args.abort_on_error,
        error_pct: args.abort_at_error_rate,
    };
    let collect = args.output.collect_config(args.warmup, plan.open, rule);
    let protocol = match args.request.http {
        pms_bench::target::HttpVersion::Http1 => "1.1",
        pms_bench::target::HttpVersion::Http2 => "2",
    };
    let driven = super::drive(
        &args.output,
        collect,
        plan.profile.clone(),
        plan.duration,
        |collector| async {
            let (target, spec) = (prepared.target.clone(), prepared.spec.clone());
            if plan.open {
                eprintln!(
                    "pms bench: open model, {} req/s{} against {} for {:?} over {} connections (HTTP/{protocol})",
                    plan.profile.start,
                    stages_note(&plan.profile),
                    args.request.url,
                    plan.duration,
                    args.connections
                );
                let cfg = OpenConfig {
                    rate: plan.profile.clone(),
                    duration: plan.duration,
                    connections: args.connections,
                    streams: args.streams_per_connection,
                    timeout: args.request.timeout,
                    grace: args.graceful_stop,
                };
                Some(open::run(target, spec, cfg, collector).await)
            } else {
                eprintln!(
                    "pms bench: closed model, {} users{} against {} for {:?} (HTTP/{protocol})",
                    plan.profile.max(),
                    stages_note(&plan.profile),
                    args.request.url,
                    plan.duration
                );
                let cfg = ClosedConfig {
                    users: plan.profile.clone(),
                    duration: plan.duration,
                    think_time: args.think_time,
                    timeout: args.request.timeout,
                    grace: args.graceful_stop,
                    iterations: args.iterations,
                };
                closed::run(target, spec, cfg, collector).await;
                None
            }
        },
    )?;
    let (collected, schedule, watched) = (driven.collected, driven.load, driven.watched);
    let labels = labels(&collected, args.warmup);
    let result = RunResult {
        config: RunConfig {
            url: &args.request.url,
            model: if plan.open { "open" } else { "closed" },
            users: (!plan.open).then(|| plan.profile.max().ceil() as usize),
            rate: args.rate,
            profile: &plan.profile,
            connections: plan.open.then_some(args.connections),
            streams_per_connection: plan.open.then_some(args.streams_per_connection),
            duration_s: plan.duration.as_secs_f64(),
            ramp_up_s: args.ramp_up.as_secs_f64(),
            think_time_s: args.think_time.as_secs_f64(),
            iterations: args.iterations,
            warmup_s: args.warmup.as_secs_f64(),
            timeout_s: args.request.timeout.as_secs_f64(),
            graceful_stop_s: args.graceful_stop.as_secs_f64(),
            stop_rule: rule,
            http: args.request.http,
            method: args.request.method.as_str(),
            body_bytes: prepared.spec.body.len(),
        },
        environment: Environment::here(prepared.target.is_loopback()),
        labels,
        stop: collected.reason.clone(),
        ended_s: collected.ended.as_secs_f64(),
        schedule,
        timeline: collected.timeline.clone(),
        watch: watched,
        samples_file: args.output.samples_note(&collected),
    };
    // k6 lets a running iteration finish its sleep, unless the run was aborted.
    let think = if result.stop == StopReason::Completed {
        args.think_time
    } else {
        Duration::ZERO
    };
    write_and_print(&args.output, &result, &collected, think)?;
    let failed = failed_thresholds(&args.threshold, &result.labels[0]);
    if failed.is_empty() {
        Ok(())
    } else {
        Err(ThresholdFailed(failed).into())
    }
}

fn stages_note(p: &Profile) -> String {
    if p.stages.is_empty() {
        String::new()
    } else {
        let s: Vec<String> = p
            .stages
            .iter()
            .map(|s| format!("{:?}:{}", s.duration, s.target))
            .collect();
        format!(" (stages {})", s.join(" "))
    }
}

/// The labels of a finished run: `measured` first, then `uncorrected` (open model) and
/// `warmup` (when there was one).
pub(super) fn labels(c: &Collected, warmup: Duration) -> Vec<Summary> {
    let window = c.ended.saturating_sub(warmup);
    let mut labels = vec![c.measured.summary("measured", window)];
    if let Some(u) = &c.uncorrected {
        labels.push(u.summary("uncorrected", window));
    }
    if !warmup.is_zero() {
        labels.push(c.warmup.summary("warmup", warmup.min(c.ended)));
    }
    labels
}

/// Writes `result.json` when asked and prints the report (`think_time`: the users', for k6's
/// run time).
pub(super) fn write_and_print<C: Serialize>(
    out: &OutputArgs,
    result: &RunResult<C>,
    collected: &Collected,
    think_time: Duration,
) -> anyhow::Result<()> {
    if let Some(dir) = &out.out {
        result
            .write_to(dir)
            .with_context(|| format!("writing {}/result.json", dir.display()))?;
    }
    if out.format == Format::Json {
        println!("{}", serde_json::to_string_pretty(result)?);
        return Ok(());
    }
    let max_active = collected
        .timeline
        .iter()
        .map(|t| t.active)
        .chain(collected.active_at_stop)
        .max()
        .unwrap_or(0);
    let view = View {
        labels: &result.labels,
        run_s: format::k6_run_s(result.ended_s, &result.labels[0], think_time.as_secs_f64()),
        max_active,
        buckets: &out.buckets,
    };
    print!("{}", format::render(out.format, &view));
    if out.format != Format::Text {
        return Ok(());
    }
    print_extras(result);
    Ok(())
}

fn print_extras<C: Serialize>(result: &RunResult<C>) {
    let m = &result.labels[0];
    if let Some(b) = &m.breakdown.ttfb {
        let mut line = format!(
            "breakdown: time to first byte mean {:.3} ms, p99 {:.3} ms",
            b.mean_ms, b.p99_ms
        );
        if let Some(c) = &m.breakdown.connect {
            line.push_str(&format!(
                "; {} connections, TCP connect mean {:.3} ms",
                c.count, c.mean_ms
            ));
        }
        if let Some(t) = &m.breakdown.tls {
            line.push_str(&format!(", TLS handshake mean {:.3} ms", t.mean_ms));
        }
        println!("{line}");
    }
    let interrupted: u64 = result.labels.iter().map(|l| l.interrupted).sum();
    if interrupted > 0 {
        println!(
            "interrupted: {interrupted} requests were still in flight when the run stopped; \
             they are not in the samples"
        );
    }
    match &result.stop {
        StopReason::Completed => {}
        StopReason::FirstError { kind, status } => println!(
            "stopped at {:.1} s: first failed request ({}{})",
            result.ended_s,
            kind.name(),
            status.map(|s| format!(" {s}")).unwrap_or_default()
        ),
        StopReason::ErrorRate { pct } => println!(
            "stopped at {:.1} s: {pct:.1} % of one second's requests failed",
            result.ended_s
        ),
    }
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
        print_schedule(s);
    }
    if let Some(f) = &result.samples_file {
        println!("per-request rows: {f}");
    }
}

fn print_schedule(s: &Schedule) {
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
