//! `pms bench import FILE`: another tool's per-request results (JMeter JTL as CSV or XML, k6's
//! CSV or JSON output, vegeta's CSV or JSON encoding) reduced with `pms bench`'s statistics and
//! printed in any report layout; with `--out DIR`, written as `DIR/result.json`, which
//! `pms bench compare` reads like a run's; with `--into DIR --cell ID --system NAME`, added to
//! a suite's results as one more system's run of that cell, and the suite's reports rendered
//! again, so a published run and a PMS run sit in one report.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use pms_bench::collect::StopReason;
use pms_bench::format::{self, Format, View};
use pms_bench::import::{self, Encoding};
use pms_bench::report::{Environment, RunResult};
use serde::Serialize;

use crate::cmd::UsageError;

/// Arguments of `pms bench import`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The results file; its encoding is recognised from its content.
    file: PathBuf,
    /// Requests that began in this first part of the run are reported apart as `warmup` (the
    /// WSO2 splitter's rule, from the first request's start).
    #[arg(long, default_value = "0s", value_parser = pms_bench::duration::parse)]
    warmup: Duration,
    /// Report layout: text, json, or the columns of jmeter, ballerina, k6 or vegeta.
    #[arg(long, default_value = "text", value_parser = clap::value_parser!(Format))]
    format: Format,
    /// vegeta histogram buckets.
    #[arg(long, default_value = format::VEGETA_BUCKETS, value_parser = format::parse_buckets)]
    buckets: std::vec::Vec<Duration>,
    /// Write DIR/result.json.
    #[arg(long)]
    out: Option<PathBuf>,
    /// A suite run's directory (its results.json) to add the file to, as a run of --cell by
    /// --system; its report.md and report.html are then written again.
    #[arg(long, value_name = "DIR", requires_all = ["cell", "system"])]
    into: Option<PathBuf>,
    /// With --into: the cell the file is a run of (`jmeter/cfg1/h1c`).
    #[arg(long, requires = "into")]
    cell: Option<String>,
    /// With --into: the name the run goes by in the report (`JMeter, Ballerina AOT`); a run of
    /// that name already in the cell is replaced. Not `pms`.
    #[arg(long, requires = "into")]
    system: Option<String>,
}

/// The settings recorded in `result.json`.
#[derive(Debug, Serialize)]
struct ImportConfig<'a> {
    model: &'static str,
    source: &'a str,
    encoding: Encoding,
    rows: usize,
    warmup_s: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let imported = import::read(&args.file).map_err(|e| UsageError(e.to_string()))?;
    let reduced = imported.reduce(args.warmup);
    let mut labels = vec![reduced.measured.summary("measured", reduced.window)];
    if reduced.warmup.samples() > 0 {
        let warm = args.warmup.min(reduced.ended);
        labels.push(reduced.warmup.summary("warmup", warm));
    }
    let source = args.file.display().to_string();
    let result = RunResult {
        config: ImportConfig {
            model: "imported",
            source: &source,
            encoding: imported.encoding,
            rows: imported.rows.len(),
            warmup_s: args.warmup.as_secs_f64(),
        },
        environment: Environment::here(false),
        labels,
        stop: StopReason::Completed,
        ended_s: reduced.ended.as_secs_f64(),
        schedule: None,
        timeline: Vec::new(),
        watch: None,
        samples_file: None,
    };
    if let Some(dir) = &args.out {
        result
            .write_to(dir)
            .with_context(|| format!("writing {}/result.json", dir.display()))?;
    }
    if let (Some(dir), Some(cell), Some(system)) = (&args.into, &args.cell, &args.system) {
        add_to_suite(dir, cell, system, &result, &source)?;
        eprintln!(
            "pms bench: added to {0}/results.json as {system}'s run of {cell}; wrote {0}/report.md and {0}/report.html",
            dir.display()
        );
    }
    if args.format == Format::Json {
        println!("{}", serde_json::to_string_pretty(&result)?);
        return Ok(());
    }
    eprintln!(
        "pms bench: {} requests from {source} ({})",
        imported.rows.len(),
        imported.encoding.name()
    );
    let view = View {
        labels: &result.labels,
        run_s: result.ended_s,
        max_active: 0,
        buckets: &args.buckets,
    };
    print!("{}", format::render(args.format, &view));
    Ok(())
}

/// Adds `result` to the suite results in `dir` as `system`'s run of `cell`, and renders the
/// suite's reports again.
fn add_to_suite<C: Serialize>(
    dir: &std::path::Path,
    cell: &str,
    system: &str,
    result: &RunResult<C>,
    source: &str,
) -> anyhow::Result<()> {
    use pms_suite::results::{RunOutput, RunRecord, SuiteResults};
    if system == "pms" || system.trim().is_empty() {
        return Err(UsageError(format!(
            "--system {system:?}: name the tool or system the file is a run of; pms is the suite's own"
        ))
        .into());
    }
    let mut results = SuiteResults::read(dir).map_err(|e| UsageError(e.to_string()))?;
    let ids: Vec<String> = results.cells.iter().map(|c| c.id.clone()).collect();
    let c = results
        .cells
        .iter_mut()
        .find(|c| c.id == cell)
        .ok_or_else(|| {
            UsageError(format!(
                "{}: no cell {cell:?}; the cells are {}",
                dir.display(),
                ids.join(", ")
            ))
        })?;
    let mut record = RunRecord::new(system);
    record.commands.push(format!("pms bench import {source}"));
    if let Some(measured) = result.labels.first() {
        record.metrics = pms_suite::metrics::of_summary(measured);
    }
    record.output = Some(RunOutput {
        labels: result.labels.clone(),
        stop: result.stop.clone(),
        ended_s: result.ended_s,
        schedule: None,
        timeline: Vec::new(),
        watch: None,
    });
    c.runs.retain(|r| r.server != system);
    c.runs.push(record);
    results.write(dir).map_err(|e| UsageError(e.to_string()))?;
    pms_suite::render_reports(&results, dir).map_err(|e| UsageError(e.to_string()))?;
    Ok(())
}
