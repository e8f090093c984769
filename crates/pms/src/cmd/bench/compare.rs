//! `pms bench compare A B`: the dissertation's hypothesis tests on two runs' per-request
//! latencies. A and B are each a run directory or `result.json` (per-request rows from its
//! `samples.csv` when there is one, else the values of its latency histogram), a `samples.csv`,
//! or another tool's results file as `pms bench import` reads them (JMeter JTL, k6 CSV or JSON
//! with its `http_req_duration` rows, as the dissertation's R script read them, or vegeta).

use std::path::{Path, PathBuf};

use anyhow::Context;
use pms_bench::compare::{self, Comparison, Describe};

use crate::cmd::UsageError;

/// Arguments of `pms bench compare`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// First run: a result directory, result.json, samples.csv, a JMeter, k6 or vegeta results
    /// file, or one run of a suite as `results.json:CELL[:SYSTEM]` (system default: pms).
    a: PathBuf,
    /// Second run, the same kinds.
    b: PathBuf,
    /// Significance level.
    #[arg(long, default_value_t = 0.05)]
    alpha: f64,
    /// Print a report or the JSON result.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

/// Most histogram values expanded into a sample (8 bytes each).
const MAX_VALUES: u64 = 20_000_000;

/// A sample read from a file, and where its values came from.
struct Loaded {
    values: Vec<f64>,
    source: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !(args.alpha > 0.0 && args.alpha < 1.0) {
        return Err(UsageError(format!("--alpha {}: expected 0 < alpha < 1", args.alpha)).into());
    }
    let a = load(&args.a)?;
    let b = load(&args.b)?;
    let c = compare::compare(&a.values, &b.values, args.alpha, "ms")
        .map_err(|e| UsageError(e.to_string()))?;
    if args.format == "json" {
        let json = serde_json::json!({
            "a": { "path": args.a, "source": a.source },
            "b": { "path": args.b, "source": b.source },
            "comparison": c,
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print_report(&args, &a, &b, &c);
    }
    Ok(())
}

fn print_report(args: &Args, a: &Loaded, b: &Loaded, c: &Comparison) {
    println!("A: {} ({})", args.a.display(), a.source);
    println!("B: {} ({})", args.b.display(), b.source);
    println!(
        "{:<3} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}  normality",
        "", "n", "mean ms", "median", "min", "max", "sd", "skewness"
    );
    for (name, d) in [("A", &c.a), ("B", &c.b)] {
        println!("{}", describe_row(name, d));
    }
    println!(
        "Welch's t-test: t = {:.3}, df = {:.1}, p = {:.3e}",
        c.welch.t, c.welch.df, c.welch.p
    );
    println!(
        "Wilcoxon rank-sum: W = {:.0}, z = {:.3}, p = {:.3e}",
        c.rank_sum.u, c.rank_sum.z, c.rank_sum.p
    );
    println!(
        "effect size: Cohen's d = {:.3}, rank-biserial r = {:.3}",
        c.cohens_d, c.rank_biserial
    );
    println!(
        "Hodges–Lehmann shift A − B: {:+.3} ms, {:.0} % CI {:+.3} … {:+.3}{}",
        c.shift.estimate,
        c.shift.level * 100.0,
        c.shift.low,
        c.shift.high,
        if c.shift.thinned {
            " (on 2,000 evenly spaced order statistics per side)"
        } else {
            ""
        }
    );
    println!("test used: {} — {}", c.test, c.why);
    println!("verdict: {}", c.verdict);
}

fn describe_row(name: &str, d: &Describe) -> String {
    format!(
        "{name:<3} {:>8} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>9.3}  {} {:.4} (p = {:.2e})",
        d.n,
        d.mean,
        d.median,
        d.min,
        d.max,
        d.sd,
        d.skewness,
        d.normality.test,
        d.normality.result.statistic,
        d.normality.result.p
    )
}

/// Reads the latencies (ms) of one run.
fn load(path: &Path) -> anyhow::Result<Loaded> {
    let text = path.to_string_lossy();
    if let Some((file, rest)) = text.split_once("results.json:") {
        return load_suite_run(&PathBuf::from(format!("{file}results.json")), rest);
    }
    let path = if path.is_dir() {
        let samples = path.join("samples.csv");
        if samples.exists() {
            samples
        } else {
            path.join("result.json")
        }
    } else {
        path.to_owned()
    };
    let is_json = path.extension().is_some_and(|e| e == "json");
    if is_json {
        if let Some(samples) = path.parent().map(|d| d.join("samples.csv")) {
            if samples.exists() {
                return load_csv(&samples);
            }
        }
        return load_histogram(&path);
    }
    load_csv(&path)
}

/// One run of a suite's `results.json`: `CELL` or `CELL:SYSTEM`.
fn load_suite_run(path: &Path, which: &str) -> anyhow::Result<Loaded> {
    let (cell, server) = which.rsplit_once(':').unwrap_or((which, "pms"));
    let results =
        pms_suite::results::SuiteResults::read(path).map_err(|e| UsageError(e.to_string()))?;
    let c = results
        .cells
        .iter()
        .find(|c| c.id == cell)
        .ok_or_else(|| UsageError(format!("{}: no cell {cell:?}", path.display())))?;
    let run = c.runs.iter().find(|r| r.server == server).ok_or_else(|| {
        UsageError(format!(
            "{}: cell {cell:?} has no run of {server:?}",
            path.display()
        ))
    })?;
    let summary = run.measured().ok_or_else(|| {
        UsageError(format!(
            "{}: {cell} {server} has no measurements ({:?})",
            path.display(),
            run.status
        ))
    })?;
    expand(&summary.histogram, path)
}

fn load_histogram(path: &Path) -> anyhow::Result<Loaded> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let hist = &json["labels"][0]["histogram"];
    let dump: pms_bench::stats::HistogramDump =
        serde_json::from_value(hist.clone()).map_err(|e| {
            UsageError(format!(
                "{}: no latency histogram in labels[0] ({e}); is it a pms bench result.json?",
                path.display()
            ))
        })?;
    expand(&dump, path)
}

/// A histogram's values, each repeated as often as it was recorded.
fn expand(dump: &pms_bench::stats::HistogramDump, path: &Path) -> anyhow::Result<Loaded> {
    let total: u64 = dump.buckets.iter().map(|(_, n)| n).sum();
    if total > MAX_VALUES {
        return Err(UsageError(format!(
            "{}: {total} values are too many to expand; run with --samples and compare a thinner run",
            path.display()
        ))
        .into());
    }
    let values = dump.values_ms(usize::try_from(total).unwrap_or(usize::MAX));
    Ok(Loaded {
        values,
        source: format!(
            "{total} values from the latency histogram, {} significant digits",
            dump.significant_digits
        ),
    })
}

/// A results file of any tool `pms bench import` reads (`samples.csv` included): the
/// latencies of the measured requests that got a response (a `Lag` column added, as the
/// corrected latency is).
fn load_csv(path: &Path) -> anyhow::Result<Loaded> {
    let imported = pms_bench::import::read(path).map_err(|e| UsageError(e.to_string()))?;
    let values: Vec<f64> = imported
        .rows
        .iter()
        .filter(|r| r.label != "warmup" && r.code != 0)
        .map(|r| r.elapsed_ms + r.lag_ms)
        .collect();
    let source = format!(
        "{} measured responses of a {} file",
        values.len(),
        imported.encoding.name()
    );
    Ok(Loaded { values, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k6_and_samples_csvs_load() {
        let dir = tempfile::tempdir().unwrap();
        let k6 = dir.path().join("k6.csv");
        std::fs::write(
            &k6,
            "metric_name,timestamp,metric_value,check\n\
             http_reqs,1,1.000000,\n\
             http_req_duration,1,12.500000,\n\
             http_req_duration,1,\"13.25\",\n",
        )
        .unwrap();
        assert_eq!(load(&k6).unwrap().values, vec![12.5, 13.25]);
        let ours = dir.path().join("samples.csv");
        std::fs::write(
            &ours,
            format!(
                "{}1,1.500,warmup,200,true,,1,1,1,1.0,0.0,0.000\n\
                 1,2.000,measured,200,true,,1,1,1,1.0,0.0,0.500\n\
                 1,5.000,measured,0,false,timeout,0,1,1,0.0,0.0,0.000\n",
                pms_bench::collect::SAMPLES_HEADER
            ),
        )
        .unwrap();
        assert_eq!(
            load(dir.path()).unwrap().values,
            vec![2.5],
            "measured responses only, lag included"
        );
        let other = dir.path().join("other.csv");
        std::fs::write(&other, "x,y\n1,2\n").unwrap();
        assert!(load(&other).is_err());
    }
}
