//! The parking suite's cells: `pms up` on a fresh database (a new PostgreSQL database in the
//! suite's cluster, or SQLite files in the cell's directory), or the services apart over NATS
//! ([`super::distributed`]), loaded by [`super::barriers`], and
//! `pgbench`'s TPC-B-like transaction on a fresh database of the same cluster with as many
//! clients: the database's own transaction rate on this machine, to set the barriers' next to.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hdrhistogram::Histogram;

use pms_bench::startup::Ready;

use super::barriers::{self, Load, Outcome, Ports, SoakLoad, PARKS};
use super::distributed;
use super::gateway::{random_hex, Shared};
use super::metrics;
use super::plan::{ParkingJob, ParkingLoad};
use super::procs::{free_port, loopback, which, Proc, Spawn};
use super::proxy::READY_TIMEOUT;
use super::results::{RunOutput, RunRecord};
use super::spec::Backend;
use super::{Ctx, SuiteError};

/// Runs one parking cell.
///
/// # Errors
/// The database, `pms up`, `pgbench` or the set-up failed.
pub fn run(
    ctx: &Ctx<'_>,
    shared: &mut Shared,
    cell: &str,
    job: &ParkingJob,
) -> Result<RunRecord, SuiteError> {
    let dir = ctx.dir(cell, "pms")?;
    let mut record = RunRecord::new("pms");
    match job.load {
        ParkingLoad::Pgbench => pgbench(ctx, shared, cell, &dir, job, &mut record)?,
        ParkingLoad::Barriers(backend) => {
            barriers(ctx, shared, cell, &dir, backend, job, &mut record)?;
        }
    }
    Ok(record)
}

/// A PostgreSQL program: from `pg_config --bindir`, Debian's newest
/// `/usr/lib/postgresql/N/bin`, or `PATH`.
fn pg_tool(name: &str) -> Result<PathBuf, SuiteError> {
    let configured = std::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join(name));
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            Some((version, e.path().join("bin").join(name)))
        })
        .collect();
    debian.sort();
    configured
        .into_iter()
        .chain(debian.into_iter().rev().map(|(_, p)| p))
        .find(|p| p.is_file())
        .or_else(|| which(name))
        .ok_or_else(|| SuiteError::NotInstalled(name.into()))
}

/// `url` naming database `name` instead of its own.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let host_from = base.find("://").map_or(0, |i| i + 3);
    let base = match base[host_from..].find('/') {
        Some(i) => &base[..host_from + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// The database a cell gets: `pms_` and its id, in the characters PostgreSQL takes unquoted.
pub fn database_name(cell: &str) -> String {
    let id: String = cell
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("pms_{id}")
}

/// Drops and creates the cell's database in the suite's cluster; returns its URL.
fn fresh_database(
    ctx: &Ctx<'_>,
    shared: &mut Shared,
    cell: &str,
    dir: &Path,
    record: &mut RunRecord,
) -> Result<String, SuiteError> {
    let url = shared.database_url(ctx)?;
    let name = database_name(cell);
    let psql = Spawn::new(
        "psql",
        pg_tool("psql")?,
        &["-X", "-q", "-v", "ON_ERROR_STOP=1"],
    )
    .args([
        url.clone(),
        "-c".into(),
        format!("DROP DATABASE IF EXISTS {name}"),
        "-c".into(),
        format!("CREATE DATABASE {name}"),
    ]);
    record.commands.push(psql.shell_line());
    psql.run(&dir.join("createdb.log"))?;
    Ok(with_database(&url, &name))
}

fn pgbench(
    ctx: &Ctx<'_>,
    shared: &mut Shared,
    cell: &str,
    dir: &Path,
    job: &ParkingJob,
    record: &mut RunRecord,
) -> Result<(), SuiteError> {
    let bin = pg_tool("pgbench")?;
    let url = fresh_database(ctx, shared, cell, dir, record)?;
    let init = Spawn::new("pgbench -i", &bin, &["-i", "-q", "-s"])
        .args([job.pgbench_scale.to_string(), url.clone()]);
    record.commands.push(init.shell_line());
    init.run(&dir.join("pgbench-init.log"))?;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(job.clients);
    let window = measured(job);
    let logs = dir.join("pgbench-log");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)
        .map_err(|e| SuiteError::io(&format!("creating {}", logs.display()), e))?;
    let prefix = logs.join("tx");
    let load = Spawn::new("pgbench", &bin, &["-n", "-M", "simple", "-c"]).args([
        job.clients.to_string(),
        "-j".into(),
        threads.to_string(),
        "-T".into(),
        window.as_secs().max(1).to_string(),
        "-l".into(),
        "--log-prefix".into(),
        prefix.display().to_string(),
        url,
    ]);
    record.commands.push(load.shell_line());
    let log = dir.join("pgbench.log");
    load.run(&log)?;
    let printed = std::fs::read_to_string(&log)
        .map_err(|e| SuiteError::io(&format!("reading {}", log.display()), e))?;
    let summary = PgbenchSummary::parse(&printed).ok_or_else(|| {
        SuiteError::Failed(format!(
            "pgbench printed no tps: {}",
            super::procs::tail(&log)
        ))
    })?;
    let latencies = transaction_log(&logs)?;
    let m = &mut record.metrics;
    m.insert("throughput".into(), summary.tps);
    if let Some(failed) = summary.failed_pct {
        m.insert("error_pct".into(), failed);
    }
    put_latencies(m, &latencies, "");
    m.insert("transactions".into(), summary.transactions as f64);
    record.extra = Some(serde_json::json!({ "report": printed }));
    Ok(())
}

/// The measured part of a cell.
fn measured(job: &ParkingJob) -> Duration {
    job.duration.saturating_sub(job.warmup)
}

/// What pgbench prints at the end.
#[derive(Debug, Clone, PartialEq)]
pub struct PgbenchSummary {
    /// `tps = N (without initial connection time)`.
    pub tps: f64,
    /// `number of transactions actually processed: N`.
    pub transactions: u64,
    /// `number of failed transactions: N (P%)` (PostgreSQL 15 on).
    pub failed_pct: Option<f64>,
}

impl PgbenchSummary {
    /// Reads pgbench's report.
    pub fn parse(text: &str) -> Option<Self> {
        let after = |prefix: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(prefix).map(str::trim))
        };
        let first_number = |s: &str| {
            s.split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .find(|w| !w.is_empty())
                .and_then(|w| w.parse::<f64>().ok())
        };
        let tps = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("tps = "))
            .find(|l| !l.contains("including"))
            .and_then(first_number)?;
        let transactions = after("number of transactions actually processed:")
            .and_then(|s| s.split('/').next())
            .and_then(|s| s.trim().parse().ok())?;
        let failed_pct = after("number of failed transactions:")
            .and_then(|s| s.split_once('(').map(|(_, p)| p))
            .and_then(first_number);
        Some(Self {
            tps,
            transactions,
            failed_pct,
        })
    }
}

/// Every transaction's latency (µs) from pgbench's `-l` files in `logs`: one line a
/// transaction, `client_id transaction_no time script_no time_epoch time_us`, where `time` is
/// not a number for a failed one.
fn transaction_log(logs: &Path) -> Result<Histogram<u64>, SuiteError> {
    let mut h = pms_bench::stats::histogram(3);
    let entries = std::fs::read_dir(logs)
        .map_err(|e| SuiteError::io(&format!("reading {}", logs.display()), e))?;
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path())
            .map_err(|e| SuiteError::io(&format!("reading {}", entry.path().display()), e))?;
        record_log(&text, &mut h);
    }
    Ok(h)
}

/// Adds the latencies of one pgbench log's text to `h`.
pub fn record_log(text: &str, h: &mut Histogram<u64>) {
    for line in text.lines() {
        if let Some(us) = line
            .split_whitespace()
            .nth(2)
            .and_then(|t| t.parse::<u64>().ok())
        {
            h.saturating_record(us.max(1));
        }
    }
}

/// `mean`, `median`, `p99` and `max` of `h` (µs) as `<prefix>mean_ms` and so on.
fn put_latencies(
    m: &mut std::collections::BTreeMap<String, f64>,
    h: &Histogram<u64>,
    prefix: &str,
) {
    if h.is_empty() {
        return;
    }
    let ms = |us: f64| us / 1000.0;
    m.insert(format!("{prefix}mean_ms"), ms(h.mean()));
    m.insert(
        format!("{prefix}median_ms"),
        ms(h.value_at_quantile(0.5) as f64),
    );
    m.insert(
        format!("{prefix}p99_ms"),
        ms(h.value_at_quantile(0.99) as f64),
    );
    m.insert(format!("{prefix}max_ms"), ms(h.max() as f64));
}

/// Spots each demo park gets beyond the published ones: room for its share of the cars and the
/// quoted one.
fn extra_spots(clients: usize) -> usize {
    clients.div_ceil(PARKS) + 1
}

fn barriers(
    ctx: &Ctx<'_>,
    shared: &mut Shared,
    cell: &str,
    dir: &Path,
    backend: Backend,
    job: &ParkingJob,
    record: &mut RunRecord,
) -> Result<(), SuiteError> {
    let data = dir.join("data");
    if data.exists() {
        std::fs::remove_dir_all(&data)
            .map_err(|e| SuiteError::io(&format!("removing {}", data.display()), e))?;
    }
    let database = if backend.on_postgres() {
        Some(fresh_database(ctx, shared, cell, dir, record)?)
    } else {
        None
    };
    let password = format!("Pms#{}", random_hex(8)?);
    let ports = Ports {
        gateway: free_port()?,
        parks: free_port()?,
        payments: free_port()?,
        users: free_port()?,
    };
    // The system, and where `pms device key` finds the device secret.
    let (procs, secret) = match (backend, &database) {
        (Backend::Distributed, Some(url)) => {
            let setup = distributed::Setup {
                dir,
                database: url,
                password: &password,
                ports,
                extra_spots: extra_spots(job.clients),
            };
            let system = distributed::start(ctx, &setup, record)?;
            let secret = [
                "--device-secret-file".to_owned(),
                system.device_secret.display().to_string(),
            ];
            (system.procs, secret)
        }
        _ => {
            let proc = pms_up(
                ctx,
                &data,
                database.as_deref(),
                &password,
                ports,
                job,
                record,
            )?;
            (
                vec![proc],
                ["--data-dir".to_owned(), data.display().to_string()],
            )
        }
    };
    let started = (|| {
        let keys = barriers::keys(&ctx.opts.pms, &secret, job.clients)?;
        let display_keys = barriers::display_keys(&ctx.opts.pms, &secret, job.clients)?;
        record.commands.push(format!(
            "{} device key barrier|display ID {}  # for each device in use",
            ctx.opts.pms.display(),
            secret.join(" ")
        ));
        let load = Load {
            clients: job.clients,
            duration: job.duration,
            warmup: job.warmup,
            password: password.clone(),
            keys,
            display_keys,
            rate: job.rate,
            soak: job.soak_window.map(|window| SoakLoad {
                window,
                processes: procs
                    .iter()
                    .map(|p| (p.name().to_owned(), p.pid()))
                    .collect(),
            }),
        };
        barriers::run(ports, &load)
    })();
    for proc in procs.into_iter().rev() {
        proc.stop();
    }
    let outcome = started?;
    figures(record, &outcome);
    Ok(())
}

/// `pms up` on `database` (SQLite files in `data` without one), ready for the load.
fn pms_up(
    ctx: &Ctx<'_>,
    data: &Path,
    database: Option<&str>,
    password: &str,
    ports: Ports,
    job: &ParkingJob,
    record: &mut RunRecord,
) -> Result<Proc, SuiteError> {
    let listen = |flag: &str, port: u16| [flag.to_owned(), loopback(port).to_string()];
    let mut up = ctx
        .pms("pms up", &["up", "--data-dir"])
        .args([data.display().to_string()])
        .args(listen("--listen", ports.gateway))
        .args(listen("--parks-listen", ports.parks))
        .args(listen("--payments-listen", ports.payments))
        .args(listen("--users-listen", ports.users))
        // What the load does not reach directly takes any free port (fewer ports picked ahead
        // of time, fewer races with other programs for them).
        .args(listen("--tls-listen", 0))
        .args(listen("--admin-listen", 0))
        .args(listen("--web-listen", 0))
        .args([
            "--demo-extra-spots".to_owned(),
            extra_spots(job.clients).to_string(),
        ])
        .env("PMS_SEED_PASSWORD", password);
    if let Some(url) = database {
        up = up.args(["--database-url".to_owned(), url.to_owned()]);
    }
    if let Some(window) = job.outbox_retention {
        up = up.args([
            "--outbox-retention".to_owned(),
            format!("{}s", window.as_secs()),
        ]);
    }
    record.commands.push(up.shell_line());
    let mut proc = up.start(&data.with_file_name("up.log"))?;
    // pms up migrates and seeds users before the gateway listens.
    for port in [ports.parks, ports.payments, ports.users] {
        let ready =
            Ready::url(&format!("http://127.0.0.1:{port}/readyz")).map_err(SuiteError::Failed)?;
        proc.wait_ready(&ready, READY_TIMEOUT)?;
    }
    proc.wait_ready(&Ready::Port(loopback(ports.gateway)), READY_TIMEOUT)?;
    Ok(proc)
}

/// The cell's named figures and notes from the load's outcome; its statistics (histogram and
/// timeline) become the run's output, so the reports chart it like any load.
fn figures(record: &mut RunRecord, o: &Outcome) {
    let window = o.window.as_secs_f64().max(f64::MIN_POSITIVE);
    let measured = o.calls.measured.summary("measured", o.window);
    let warmup = o
        .calls
        .warmup
        .summary("warmup", o.calls.ended.saturating_sub(o.window));
    let (calls, failures) = (measured.samples, measured.errors);
    let mut m = metrics::of_summary(&measured);
    // Barrier transactions: the calls that did what they were asked.
    m.insert("throughput".into(), measured.successes() as f64 / window);
    m.insert("cycles_per_s".into(), o.exits as f64 / window);
    if o.exits > 0 {
        m.insert(
            "priced_pct".into(),
            o.priced_exits as f64 * 100.0 / o.exits as f64,
        );
    }
    m.insert("transactions".into(), calls as f64);
    m.insert("settled_ms".into(), o.settled.as_secs_f64() * 1000.0);
    m.insert("lag_max".into(), o.most_lag);
    put_latencies(&mut m, &o.quotes, "quote_");
    if !o.display_delays.is_empty() {
        put_latencies(&mut m, &o.display_delays, "display_");
    }
    record.metrics = m;
    record.output = Some(RunOutput {
        labels: vec![measured, warmup],
        stop: o.calls.reason.clone(),
        ended_s: o.calls.ended.as_secs_f64(),
        schedule: None,
        timeline: o.calls.timeline.clone(),
        watch: None,
    });
    record.extra = Some(serde_json::json!({
        "barrier_calls": calls,
        "failures": failures,
        "failure_samples": o.failure_samples,
        "exits": o.exits,
        "priced_exits": o.priced_exits,
        "quotes": o.quotes.len(),
        "quote_failures": o.quote_failures,
        "display_changes": o.display_delays.len(),
        "display_failures": o.display_failures,
        "window_s": window,
    }));
    if !o.windows.is_empty() {
        if let Some(extra) = record.extra.as_mut().and_then(|e| e.as_object_mut()) {
            extra.insert("soak_windows".into(), serde_json::json!(o.windows));
            extra.insert("soak_rss".into(), serde_json::json!(o.rss));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_gets_another_database_and_keeps_its_options() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "pms_x"),
            "postgres://postgres@127.0.0.1:5432/pms_x"
        );
        assert_eq!(
            with_database("postgres://u:p@h:1/db?sslmode=disable", "b"),
            "postgres://u:p@h:1/b?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "b"), "postgres://h/b");
        assert_eq!(
            database_name("barriers/postgres/100c"),
            "pms_barriers_postgres_100c"
        );
    }

    #[test]
    fn pgbench_reports_are_read_as_printed() {
        let text = "transaction type: <builtin: TPC-B (sort of)>\nscaling factor: 4\n\
            query mode: simple\nnumber of clients: 4\nnumber of threads: 2\n\
            maximum number of tries: 1\nduration: 3 s\n\
            number of transactions actually processed: 12345\n\
            number of failed transactions: 2 (0.016%)\nlatency average = 0.972 ms\n\
            initial connection time = 5.123 ms\ntps = 4115.220000 (without initial connection time)\n";
        assert_eq!(
            PgbenchSummary::parse(text),
            Some(PgbenchSummary {
                tps: 4115.22,
                transactions: 12345,
                failed_pct: Some(0.016),
            })
        );
        assert_eq!(PgbenchSummary::parse("pgbench: error"), None);
    }

    #[test]
    fn transaction_logs_give_latencies_and_skip_failures() {
        let mut h = pms_bench::stats::histogram(3);
        record_log(
            "0 1 812 0 1700000000 1\n0 2 1200 0 1700000000 5\n1 1 failed 0 1700000000 9\n",
            &mut h,
        );
        assert_eq!(h.len(), 2);
        assert_eq!(h.max(), 1200);
    }

    #[test]
    fn every_park_has_room_for_its_cars_and_the_quoted_one() {
        assert_eq!(extra_spots(4), 2);
        assert_eq!(extra_spots(100), 21);
    }
}
