//! `pms bench suite NAME`: the published studies rerun against PMS in one command. A suite file
//! ([`spec`]) names the matrix; [`plan`] expands one profile of it into cells with an expected
//! duration; the runners start what each cell needs as child processes on loopback ports
//! ([`procs`]), load it with `pms bench run` / `stress` / `startup`, and stop it again —
//! [`proxy`] for the reverse-proxy matrix (with nginx and haproxy as [`peers`]), [`gateway`] for
//! the users service behind the gateway, [`delay`] for the slow back-end, [`parking`] for cars
//! at the barriers of `pms up` or of the services apart over NATS ([`distributed`]) beside
//! `pgbench` (its load in [`barriers`], and a soak's people and per-window figures in [`soak`]).
//! The outcome
//! ([`results`]) becomes `results.json`, `report.md` ([`markdown`]) and `report.html`
//! ([`html`], charts from [`charts`]); with an envelope ([`envelope`]) each system under test
//! runs under the published container's limits, the load generator on cores of its own; both reports share their tables ([`tables`]), the
//! hypothesis tests among them ([`hypothesis`]). With `--repeats`, each cell runs in rounds of
//! rotating order, folded into one record per system with every round's figures ([`rounds`]).
//!
//! The suite never links a component: like every load generator it only talks to processes, so
//! the peers are measured exactly as PMS is. The load itself is `pms_bench`'s: this crate plans,
//! spawns, collects and reports.

pub mod barriers;
pub mod charts;
pub mod delay;
pub mod distributed;
pub mod envelope;
pub mod gateway;
pub mod html;
pub mod hypothesis;
pub mod markdown;
pub mod metrics;
pub mod parking;
pub mod peers;
pub mod plan;
pub mod procs;
pub mod proxy;
pub mod results;
pub mod rounds;
pub mod soak;
pub mod spec;
pub mod tables;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use self::plan::{Job, Plan};
use self::procs::Spawn;
use self::results::{CellResult, RunRecord, Status, SuiteEnvironment, SuiteResults};
use self::spec::SuiteSpec;

/// The profiles every suite has.
pub const PROFILES: &[&str] = &["quick", "standard", "published"];

/// The suites shipped with PMS (`config/suites/`), built into the binary.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "ballerina-rest",
        include_str!("../../../config/suites/ballerina-rest.toml"),
    ),
    (
        "ballerina-passthrough",
        include_str!("../../../config/suites/ballerina-passthrough.toml"),
    ),
    (
        "pms-gateway",
        include_str!("../../../config/suites/pms-gateway.toml"),
    ),
    (
        "async-delay",
        include_str!("../../../config/suites/async-delay.toml"),
    ),
    (
        "pms-parking",
        include_str!("../../../config/suites/pms-parking.toml"),
    ),
];

/// What went wrong running a suite.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The suite file, a name, or an option.
    #[error("{0}")]
    Usage(String),
    /// An I/O step, with what it was doing.
    #[error("{what}: {error}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        error: std::io::Error,
    },
    /// A component or a run failed.
    #[error("{0}")]
    Failed(String),
    /// A peer program is not on this machine.
    #[error("{0} is not installed")]
    NotInstalled(String),
    /// Stopped by a signal (its number) through [`procs::interrupt`].
    #[error("interrupted by {}", signal_name(*.0))]
    Interrupted(i32),
}

/// `SIGTERM` for 15 and so on, for messages.
pub fn signal_name(signo: i32) -> String {
    match signo {
        1 => "SIGHUP".into(),
        2 => "SIGINT".into(),
        15 => "SIGTERM".into(),
        n => format!("signal {n}"),
    }
}

impl SuiteError {
    /// An I/O error while doing `what`.
    pub fn io(what: &str, error: std::io::Error) -> Self {
        Self::Io {
            what: what.to_owned(),
            error,
        }
    }
}

/// Finds a suite: a built-in name, or a path to a suite file.
///
/// # Errors
/// Unknown name, unreadable file, or a suite file that does not parse.
pub fn load(name: &str) -> Result<SuiteSpec, SuiteError> {
    let (origin, text) = match BUILTIN.iter().find(|(n, _)| *n == name) {
        Some((_, text)) => (format!("built-in suite {name}"), (*text).to_owned()),
        None if Path::new(name).is_file() => (
            name.to_owned(),
            std::fs::read_to_string(name).map_err(|e| SuiteError::io(name, e))?,
        ),
        None => {
            let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
            return Err(SuiteError::Usage(format!(
                "no suite {name:?}: the suites are {}, or give the path of a suite file",
                names.join(", ")
            )));
        }
    };
    SuiteSpec::parse(&text).map_err(|e| SuiteError::Usage(format!("{origin}: {e}")))
}

/// How to run a suite.
#[derive(Debug, Clone)]
pub struct Options {
    /// `quick`, `standard` or `published`.
    pub profile: String,
    /// Where results, reports and per-cell logs go.
    pub out: PathBuf,
    /// Run only cells whose id contains one of these (all when empty).
    pub only: Vec<String>,
    /// The `pms` binary that components and loads run from.
    pub pms: PathBuf,
    /// Add nginx and haproxy where a scenario allows them.
    pub peers: bool,
    /// PostgreSQL for the users service; without it a throwaway one is started with `pg_script`.
    pub database_url: Option<String>,
    /// `scripts/pg.sh`.
    pub pg_script: PathBuf,
    /// Start the throwaway PostgreSQL with fsync and synchronous commits off: figures of the
    /// CPU rather than of the disk. Default: durable, as an operator runs it.
    pub fast_database: bool,
    /// The command line that started the suite, for the report.
    pub command: String,
    /// Keep the cells that `out/results.json` already holds without a failed run, and run the
    /// rest (same suite, profile and commit only).
    pub resume: bool,
    /// Rounds per cell: each runs every system once, the order rotating from round to round.
    pub repeats: usize,
    /// The limits of each system under test, with the load generator on cores of its own
    /// (`None`: no envelope).
    pub envelope: Option<envelope::Limits>,
}

/// What each cell run needs: options, output directory, certificates and secrets.
pub struct Ctx<'a> {
    /// The options.
    pub opts: &'a Options,
    /// Dev CA, certificate and key (`pms certs dev`).
    pub ca: PathBuf,
    /// Server certificate.
    pub cert: PathBuf,
    /// Server key.
    pub key: PathBuf,
}

impl Ctx<'_> {
    /// `pms ARGS…`.
    pub fn pms(&self, name: &str, args: &[&str]) -> Spawn {
        Spawn::new(name, &self.opts.pms, args).env("PMS_LOG", "warn")
    }

    /// A cell's (and system's) directory, created.
    pub fn dir(&self, cell: &str, server: &str) -> Result<PathBuf, SuiteError> {
        let d = self
            .opts
            .out
            .join("cells")
            .join(cell.replace('/', "_"))
            .join(server);
        std::fs::create_dir_all(&d)
            .map_err(|e| SuiteError::io(&format!("creating {}", d.display()), e))?;
        Ok(d)
    }
}

/// Runs the planned cells, printing a line per run through `say`, and returns the results (also
/// written to `opts.out/results.json` after every cell, so an interrupted run keeps what it had).
///
/// # Errors
/// Setup failures (certificates, the output directory); a failing cell is recorded as failed
/// and the suite goes on. After [`procs::interrupt`], [`SuiteError::Interrupted`] once the
/// children are stopped and the reports hold the cells finished before it.
pub fn run(
    spec: &SuiteSpec,
    plan: &Plan,
    opts: &Options,
    say: &mut dyn FnMut(&str),
) -> Result<SuiteResults, SuiteError> {
    let started_at = Instant::now();
    std::fs::create_dir_all(&opts.out)
        .map_err(|e| SuiteError::io(&format!("creating {}", opts.out.display()), e))?;
    // Absolute from here on: generated configs name certificates and logs, and each program
    // resolves relative paths from somewhere else (its config's directory, nginx's prefix).
    let mut absolute = opts.clone();
    absolute.out = std::fs::canonicalize(&opts.out)
        .map_err(|e| SuiteError::io(&format!("resolving {}", opts.out.display()), e))?;
    let opts = &absolute;
    let certs = opts.out.join("certs");
    let ctx = Ctx {
        opts,
        ca: certs.join("ca.pem"),
        cert: certs.join("server.pem"),
        key: certs.join("server-key.pem"),
    };
    if !ctx.key.exists() {
        Spawn::new("certs", &opts.pms, &["certs", "dev", "--out"])
            .args([certs.display().to_string()])
            .run(&opts.out.join("certs.log"))?;
    }
    let mut results = SuiteResults {
        suite: spec.name.clone(),
        profile: opts.profile.clone(),
        started: utc_now(),
        resumed: Vec::new(),
        elapsed_s: 0.0,
        expected_s: plan.expected.as_secs_f64(),
        command: opts.command.clone(),
        environment: environment(opts),
        spec: spec.clone(),
        repeats: opts.repeats.max(1),
        envelope: None,
        database: None,
        cells: Vec::new(),
    };
    // Dropped (its groups removed) when the run ends, however it ends.
    let placed = opts
        .envelope
        .map(|limits| std::sync::Arc::new(envelope::Envelope::new(limits)));
    if let Some(e) = &placed {
        e.pin_self_to_load();
        results.envelope = Some(e.record());
    }
    procs::set_envelope(placed.clone());
    let _unset = Unset;
    let earlier = if opts.resume {
        resumable(&opts.out, &results)?
    } else {
        None
    };
    let mut elapsed_before = 0.0;
    if let Some(earlier) = &earlier {
        results.started.clone_from(&earlier.started);
        results.resumed = earlier.resumed.clone();
        results.resumed.push(utc_now());
        elapsed_before = earlier.elapsed_s;
    }
    let mut shared = gateway::Shared::default();
    let total = plan.cells.len();
    for (n, cell) in plan.cells.iter().enumerate() {
        if let Some(done) = earlier.as_ref().and_then(|e| finished(e, cell)) {
            say(&format!(
                "[{}/{total}] {}: kept from the earlier run",
                n + 1,
                cell.id
            ));
            results.cells.push(done.clone());
            continue;
        }
        let mut result = CellResult {
            id: cell.id.clone(),
            part: cell.part.clone(),
            name: cell.name.clone(),
            params: cell.params.clone(),
            runs: Vec::new(),
        };
        let rounds = results.repeats;
        let mut per_server: Vec<Vec<(usize, RunRecord)>> = vec![Vec::new(); cell.servers.len()];
        for (round, position, i) in rounds::order(cell.servers.len(), rounds) {
            let server = &cell.servers[i];
            let t = Instant::now();
            let record = run_one(&ctx, &mut shared, cell, server);
            if let Some(signo) = procs::interrupted() {
                // This cell is left out, so that `--resume` runs it again; what came before is
                // already in results.json.
                say(&format!(
                    "[{}/{total}] {} {server}: interrupted by {}",
                    n + 1,
                    cell.id,
                    signal_name(signo)
                ));
                results.elapsed_s = elapsed_before + started_at.elapsed().as_secs_f64();
                write_reports(&results, &opts.out)?;
                return Err(SuiteError::Interrupted(signo));
            }
            let outcome = match &record.status {
                Status::Ok => summary_line(&record),
                Status::NotInstalled { program } => format!("{program} not installed"),
                Status::Failed { error } => format!("FAILED: {error}"),
            };
            let of_rounds = if rounds > 1 {
                format!(" (round {}/{rounds})", round + 1)
            } else {
                String::new()
            };
            say(&format!(
                "[{}/{total}] {} {server}{of_rounds}: {outcome} ({:.0}s)",
                n + 1,
                cell.id,
                t.elapsed().as_secs_f64()
            ));
            per_server[i].push((position, record));
        }
        result.runs = per_server.into_iter().map(rounds::fold).collect();
        results.cells.push(result);
        if shared.database.is_some() {
            results.database.clone_from(&shared.database);
        }
        results.elapsed_s = elapsed_before + started_at.elapsed().as_secs_f64();
        results.write(&opts.out)?;
    }
    shared.close();
    results.elapsed_s = elapsed_before + started_at.elapsed().as_secs_f64();
    write_reports(&results, &opts.out)?;
    Ok(results)
}

/// Takes the envelope away from the processes started after a suite run, however it ends.
struct Unset;

impl Drop for Unset {
    fn drop(&mut self) {
        procs::set_envelope(None);
    }
}

/// The earlier results in `out` that a resumed run may build on: `None` when there are none,
/// a usage error when they are another suite's, profile's or build's (mixing them would make
/// one report of two different things).
fn resumable(out: &Path, now: &SuiteResults) -> Result<Option<SuiteResults>, SuiteError> {
    if !out.join("results.json").exists() {
        return Ok(None);
    }
    let earlier = SuiteResults::read(out)?;
    let what = |r: &SuiteResults| {
        format!(
            "{} ({}) at commit {}",
            r.suite,
            r.profile,
            r.environment.commit.as_deref().unwrap_or("unknown")
        )
    };
    let (a, b) = (&earlier.environment, &now.environment);
    let same_build = a.commit == b.commit
        && !a.commit.as_deref().unwrap_or_default().ends_with("-dirty")
        && (&a.pms_version, &a.build, &a.pms_binary) == (&b.pms_version, &b.build, &b.pms_binary);
    if earlier.suite != now.suite || earlier.profile != now.profile || !same_build {
        return Err(SuiteError::Usage(format!(
            "{} holds {}; this is {}: resume only the same suite and profile with the same pms \
             binary from the same clean commit, or give another --out",
            out.display(),
            what(&earlier),
            what(now)
        )));
    }
    Ok(Some(earlier))
}

/// `cell` as the earlier run finished it: every system the plan names, none failed.
fn finished<'a>(earlier: &'a SuiteResults, cell: &plan::Cell) -> Option<&'a CellResult> {
    let done = earlier.cells.iter().find(|c| c.id == cell.id)?;
    let servers: Vec<&str> = done.runs.iter().map(|r| r.server.as_str()).collect();
    let complete = servers == cell.servers.iter().map(String::as_str).collect::<Vec<_>>()
        && done
            .runs
            .iter()
            .all(|r| !matches!(r.status, Status::Failed { .. }));
    complete.then_some(done)
}

/// Writes `results.json`, `report.md` and `report.html` into `dir`.
///
/// # Errors
/// I/O.
pub fn write_reports(results: &SuiteResults, dir: &Path) -> Result<(), SuiteError> {
    results.write(dir)?;
    render_reports(results, dir)
}

/// Writes `report.md` and `report.html` into `dir` from `results`.
///
/// # Errors
/// I/O.
pub fn render_reports(results: &SuiteResults, dir: &Path) -> Result<(), SuiteError> {
    for (name, text) in [
        ("report.md", markdown::render(results)),
        ("report.html", html::render(results)),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| SuiteError::io(&format!("writing {}", path.display()), e))?;
    }
    Ok(())
}

fn run_one(
    ctx: &Ctx<'_>,
    shared: &mut gateway::Shared,
    cell: &plan::Cell,
    server: &str,
) -> RunRecord {
    let outcome = match &cell.job {
        Job::Proxy(job) => proxy::run(ctx, &cell.id, job, server),
        Job::Gateway(job) => gateway::run(ctx, shared, &cell.id, job),
        Job::Delay(job) => delay::run(ctx, &cell.id, job),
        Job::Parking(job) => parking::run(ctx, shared, &cell.id, job),
    };
    outcome.unwrap_or_else(|e| {
        let mut r = RunRecord::new(server);
        r.status = match e {
            SuiteError::NotInstalled(program) => Status::NotInstalled { program },
            e => Status::Failed {
                error: e.to_string(),
            },
        };
        r
    })
}

/// One line for the progress output.
fn summary_line(r: &RunRecord) -> String {
    let m = &r.metrics;
    let get = |k: &str| m.get(k).copied();
    match (get("throughput"), get("mean_ms"), get("p99_ms")) {
        (Some(t), Some(mean), p99) => format!(
            "{t:.1} req/s, mean {mean:.2} ms{}{}",
            p99.map(|p| format!(", p99 {p:.2} ms")).unwrap_or_default(),
            get("error_pct")
                .filter(|e| *e > 0.0)
                .map(|e| format!(", {e:.2}% errors"))
                .unwrap_or_default()
        ),
        _ => m
            .iter()
            .map(|(k, v)| format!("{k} {v:.3}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn environment(opts: &Options) -> SuiteEnvironment {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map(|m| m.trim().to_owned())
    });
    let memory_gib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| (kb / 1024.0 / 1024.0 * 10.0).round() / 10.0)
    });
    let mut peers = BTreeMap::new();
    if opts.peers {
        for p in peers::KNOWN {
            peers.insert(
                (*p).to_owned(),
                peers::version(p).unwrap_or_else(|| "not installed".into()),
            );
        }
    }
    SuiteEnvironment {
        pms_version: env!("CARGO_PKG_VERSION").into(),
        commit: commit(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        memory_gib,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_owned()),
        shared_host: true,
        pms_binary: opts.pms.display().to_string(),
        build: build_of(&opts.pms),
        peers,
    }
}

/// How `pms` was built, when it is this very binary.
fn build_of(pms: &Path) -> String {
    let this = std::env::current_exe().ok();
    if this.as_deref() == Some(pms) {
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .into()
    } else {
        "unknown".into()
    }
}

/// The working tree's commit, with `-dirty` when it has changes.
fn commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// Now, UTC, as `2026-11-23T10:04:05Z`.
pub fn utc_now() -> String {
    let mut s = String::new();
    pms_net::utc::write_rfc3339(&mut s, std::time::SystemTime::now(), false);
    s
}

/// A duration for people: `45 s`, `12 min`, `3.5 h`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_suite_parses_and_has_every_profile() {
        for (name, _) in BUILTIN {
            let spec = load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(spec.name, *name);
            for p in PROFILES {
                let plan = plan::plan(&spec, p, &[], true).unwrap();
                assert!(!plan.cells.is_empty(), "{name}/{p}");
            }
        }
    }

    #[test]
    fn unknown_suites_name_the_known_ones() {
        let e = load("nope").unwrap_err().to_string();
        assert!(
            e.contains("ballerina-rest") && e.contains("async-delay"),
            "{e}"
        );
    }
}
