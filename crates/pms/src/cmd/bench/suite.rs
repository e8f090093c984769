//! `pms bench suite NAME`: runs one of the shipped suites (or a suite file) in a profile, says
//! up front what it will run and for how long, and writes `report.md`, `report.html` and
//! `results.json`. Fails (exit 1) when any run failed, after writing the reports. SIGTERM or
//! SIGINT stops the suite's processes, writes the reports of the cells finished so far and exits
//! with 128 + the signal.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use pms_suite::{
    self as suite, plan, procs,
    results::{Status, SuiteResults},
    Options,
};

use crate::cmd::{Interrupted, UsageError};

/// Arguments of `pms bench suite`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// ballerina-rest, ballerina-passthrough, pms-gateway, async-delay, pms-parking, or the path
    /// of a suite file.
    #[arg(required_unless_present_any = ["list", "report"])]
    name: Option<String>,
    /// quick (seconds per cell, for CI), standard (about 30 s per cell, the full matrix),
    /// published (the published durations: hours), or another the suite defines (pms-parking:
    /// soak, half an hour; `--list` shows them).
    #[arg(long, default_value = "quick")]
    profile: String,
    /// Where report.md, report.html, results.json and each cell's logs go (default:
    /// bench-results/NAME-PROFILE).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run only the cells whose id contains this text, e.g. `h2_h2` or `k6/` (repeatable).
    #[arg(long)]
    only: Vec<String>,
    /// Leave nginx and haproxy out even when they are installed.
    #[arg(long)]
    no_peers: bool,
    /// PostgreSQL for the users service (pms-gateway); default: a throwaway one started with
    /// --pg-script.
    #[arg(long, env = "PMS_DATABASE_URL")]
    database_url: Option<String>,
    /// The script that starts a throwaway PostgreSQL.
    #[arg(long, default_value = "scripts/pg.sh")]
    pg_script: PathBuf,
    /// Run the throwaway PostgreSQL with fsync and synchronous commits off (figures of the CPU
    /// rather than the disk). Default: durable, as an operator runs it; the report says which.
    #[arg(long)]
    fast_database: bool,
    /// The `pms` binary to run components and loads from (default: this one).
    #[arg(long)]
    pms: Option<PathBuf>,
    /// Keep the cells OUT/results.json already holds (none of their runs failed) and run the
    /// rest: for a run that was interrupted. Only the same suite, profile and clean commit.
    #[arg(long)]
    resume: bool,
    /// Rounds per cell: each runs every system once, in an order that rotates from round to
    /// round; the report shows each figure's median and range, and ratios with their range
    /// (default: 3 for the published profile, else 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeats: Option<u32>,
    /// Run each system under test within the published container's limits (1 CPU, 512 MB, by
    /// cgroup where the machine allows it, else CPU affinity), the load generator on cores of
    /// its own: on or off (default: on for the published profile).
    #[arg(long, value_parser = ["on", "off"])]
    envelope: Option<String>,
    /// Print the cells and the expected duration, run nothing.
    #[arg(long)]
    dry_run: bool,
    /// List the suites and their profiles, run nothing.
    #[arg(long)]
    list: bool,
    /// Render report.md and report.html again from DIR/results.json, run nothing: for a run
    /// that was interrupted (results.json is written after every cell) or a newer renderer.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["name", "list", "dry_run"])]
    report: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // Listings go through a locked stdout so that a closed pipe (`| head`) ends them quietly.
    let mut stdout = std::io::stdout().lock();
    if args.list {
        for (name, _) in suite::BUILTIN {
            let spec = suite::load(name)?;
            writeln!(stdout, "{name}: {}", spec.title)?;
            for p in spec.profiles() {
                let plan = plan::plan(&spec, p, &[], true)?;
                writeln!(
                    stdout,
                    "  {p:<9} {:>4} cells, about {}",
                    plan.cells.len(),
                    suite::human(plan.expected)
                )?;
            }
        }
        return Ok(());
    }
    if let Some(dir) = &args.report {
        let results = SuiteResults::read(dir).map_err(|e| UsageError(e.to_string()))?;
        let dir = if dir.is_dir() {
            dir.clone()
        } else {
            dir.parent().map(PathBuf::from).unwrap_or_default()
        };
        suite::render_reports(&results, &dir)?;
        let runs: usize = results.cells.iter().map(|c| c.runs.len()).sum();
        writeln!(
            stdout,
            "wrote {0}/report.md and {0}/report.html: {1} cells, {runs} runs of {2} ({3})",
            dir.display(),
            results.cells.len(),
            results.suite,
            results.profile
        )?;
        return Ok(());
    }
    let name = args.name.as_deref().unwrap_or_default();
    let spec = suite::load(name).map_err(|e| UsageError(e.to_string()))?;
    let plan = plan::plan(&spec, &args.profile, &args.only, !args.no_peers)
        .map_err(|e| UsageError(e.to_string()))?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("bench-results/{}-{}", spec.name, args.profile)));
    let repeats = args
        .repeats
        .map_or(if args.profile == "published" { 3 } else { 1 }, |r| {
            r as usize
        });
    let runs: usize = plan.cells.iter().map(|c| c.servers.len()).sum::<usize>() * repeats;
    let rounds = if repeats > 1 {
        format!(" in {repeats} rounds")
    } else {
        String::new()
    };
    writeln!(
        stdout,
        "pms bench suite {} ({}): {} cells, {runs} runs{rounds}, expected about {}; results in {}",
        spec.name,
        args.profile,
        plan.cells.len(),
        suite::human(plan.expected * repeats as u32),
        out.display()
    )?;
    if args.dry_run {
        for c in &plan.cells {
            writeln!(
                stdout,
                "  {:<48} {:<24} ~{}",
                c.id,
                c.servers.join(","),
                suite::human(c.expected)
            )?;
        }
        return Ok(());
    }
    drop(stdout);
    let pms = match args.pms.clone() {
        Some(p) => p,
        None => std::env::current_exe().context("finding the pms binary")?,
    };
    let opts = Options {
        profile: args.profile.clone(),
        out: out.clone(),
        only: args.only.clone(),
        pms,
        peers: !args.no_peers,
        database_url: args.database_url.clone(),
        pg_script: args.pg_script.clone(),
        fast_database: args.fast_database,
        command: command_line(),
        resume: args.resume,
        repeats,
        envelope: match args.envelope.as_deref() {
            Some("on") => Some(suite::envelope::PUBLISHED),
            Some(_) => None,
            None => (args.profile == "published").then_some(suite::envelope::PUBLISHED),
        },
    };
    watch_signals()?;
    let results =
        suite::run(&spec, &plan, &opts, &mut |line| println!("{line}")).map_err(|e| match e {
            suite::SuiteError::Usage(message) => anyhow::Error::new(UsageError(message)),
            suite::SuiteError::Interrupted(signo) => anyhow::Error::new(Interrupted {
                signo,
                message: format!(
                    "{e}; the cells finished before it are in {0}/results.json and \
                     {0}/report.md; `--resume` runs the rest",
                    out.display()
                ),
            }),
            e => e.into(),
        })?;
    let failed = results
        .cells
        .iter()
        .flat_map(|c| &c.runs)
        .filter(|r| matches!(r.status, Status::Failed { .. }))
        .count();
    println!(
        "wrote {0}/report.md, {0}/report.html, {0}/results.json ({1})",
        out.display(),
        suite::human(std::time::Duration::from_secs_f64(results.elapsed_s))
    );
    if failed > 0 {
        anyhow::bail!("{failed} run(s) failed; see {}/report.md", out.display());
    }
    Ok(())
}

/// Hands SIGTERM and SIGINT to the suite: the first stops every child it runs and lets it
/// unwind (clean-up, reports, exit 128 + the signal); a second kills the children and exits at
/// once. Without this a signal would kill the suite and leave its children running.
fn watch_signals() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("starting the signal watcher")?;
    let (mut term, mut int) = {
        let _entered = rt.enter();
        (
            signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        )
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            rt.block_on(async move {
                loop {
                    let signo = tokio::select! {
                        _ = term.recv() => 15,
                        _ = int.recv() => 2,
                    };
                    if procs::interrupt(signo) {
                        eprintln!(
                            "pms: {} received: stopping the suite's processes (once more to kill them)",
                            suite::signal_name(signo)
                        );
                    } else {
                        procs::kill_all();
                        std::process::exit(128 + signo);
                    }
                }
            });
        })
        .context("starting the signal watcher")?;
    Ok(())
}

/// This process's command line, as the report records it (`pms` for the program).
fn command_line() -> String {
    let mut parts = vec!["pms".to_owned()];
    parts.extend(std::env::args().skip(1));
    parts.join(" ")
}
