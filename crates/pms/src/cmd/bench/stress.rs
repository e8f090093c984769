//! `pms bench stress URL`: users added at a fixed pace until the first failure (or an error-rate
//! limit); reports how many were active then, the throughput reached and the time series.

use std::time::Duration;

use pms_bench::closed;
use pms_bench::format::Format;
use pms_bench::report::{Environment, RunResult};
use pms_bench::stress::{StressConfig, StressOutcome};
use serde::Serialize;

use super::load::{labels, parse_pct, write_and_print};
use super::{OutputArgs, RequestArgs};
use crate::cmd::UsageError;

/// Arguments of `pms bench stress`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    request: RequestArgs,
    /// Users added per second: `200/s` (or just `200`).
    #[arg(long, default_value = "200/s", value_parser = parse_per_second)]
    add: f64,
    /// Pause after each answer.
    #[arg(long, default_value = "1s", value_parser = pms_bench::duration::parse)]
    think_time: Duration,
    /// Stop adding users at this many.
    #[arg(long, default_value_t = 20_000)]
    max_users: usize,
    /// End here if the target has not failed (default: the time to reach --max-users plus 30s).
    #[arg(long, value_parser = pms_bench::duration::parse)]
    max_duration: Option<Duration>,
    /// Stop when one second's errors exceed this percentage, instead of at the first failed
    /// request.
    #[arg(long, value_parser = parse_pct)]
    stop_at_error_rate: Option<f64>,
    #[command(flatten)]
    output: OutputArgs,
}

fn parse_per_second(text: &str) -> Result<f64, String> {
    let n = text.trim().trim_end_matches("/s");
    n.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or_else(|| format!("{text:?}: expected users per second, e.g. 200/s"))
}

/// What `result.json` records for a stress run.
#[derive(Debug, Serialize)]
struct StressRecord<'a> {
    url: &'a str,
    model: &'static str,
    stress: StressConfig,
    http: pms_bench::target::HttpVersion,
    method: &'a str,
    outcome: &'a StressOutcome,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.max_users == 0 {
        return Err(UsageError("--max-users must be at least 1".into()).into());
    }
    let to_max = Duration::from_secs_f64(args.max_users as f64 / args.add);
    let cfg = StressConfig {
        add_per_s: args.add,
        think_time: args.think_time,
        max_users: args.max_users,
        max_duration: args
            .max_duration
            .unwrap_or(to_max + Duration::from_secs(30)),
        timeout: args.request.timeout,
        stop_at_error_pct: args.stop_at_error_rate,
    };
    let (closed_cfg, rule) = cfg.plan();
    let prepared = args.request.prepare()?;
    let collect = args.output.collect_config(Duration::ZERO, false, rule);
    eprintln!(
        "pms bench stress: +{} users/s up to {} against {}, think time {:?}, until {} (at most {:?})",
        cfg.add_per_s,
        cfg.max_users,
        args.request.url,
        cfg.think_time,
        cfg.stop_at_error_pct
            .map_or_else(|| "the first failed request".to_owned(), |p| format!("{p}% errors in a second")),
        cfg.max_duration
    );
    let profile = closed_cfg.users.clone();
    let driven = super::drive(
        &args.output,
        collect,
        profile,
        cfg.max_duration,
        |collector| {
            closed::run(
                prepared.target.clone(),
                prepared.spec.clone(),
                closed_cfg,
                collector,
            )
        },
    )?;
    let (collected, watched) = (driven.collected, driven.watched);
    let outcome = StressOutcome::of(&collected);
    let result = RunResult {
        config: StressRecord {
            url: &args.request.url,
            model: "stress",
            stress: cfg,
            http: args.request.http,
            method: args.request.method.as_str(),
            outcome: &outcome,
        },
        environment: Environment::here(prepared.target.is_loopback()),
        labels: labels(&collected, Duration::ZERO),
        stop: collected.reason.clone(),
        ended_s: collected.ended.as_secs_f64(),
        schedule: None,
        timeline: collected.timeline.clone(),
        watch: watched,
        samples_file: args.output.samples_note(&collected),
    };
    // Stopped at the first failure, as k6's test.abort() stops at once: no think time after.
    write_and_print(&args.output, &result, &collected, Duration::ZERO)?;
    if args.output.format != Format::Json {
        if outcome.failed {
            println!(
                "stress: the target failed at {:.1} s with {} users active (most at once: {}); \
                 peak {:.1} req/s, {:.1} req/s over the run",
                outcome.ended_s,
                outcome.users_at_end,
                outcome.max_users,
                outcome.peak_rate,
                outcome.mean_rate
            );
        } else {
            println!(
                "stress: no failure in {:.1} s; {} users active at the end (most at once: {}); \
                 peak {:.1} req/s — raise --max-users or --max-duration to find the limit",
                outcome.ended_s, outcome.users_at_end, outcome.max_users, outcome.peak_rate
            );
        }
    }
    Ok(())
}
