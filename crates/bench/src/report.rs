//! What a run leaves behind: `result.json` (the configuration, the environment, and the
//! statistics per label) and a text table for people.

use std::io::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::collect::{StopReason, Tick};
use crate::open::Schedule;
use crate::stats::{Summary, PERCENTILES};

/// Where the run happened; a reader of a 2-core result must know the client shared the host.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    /// `pms` version.
    pub version: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// Kernel release (`/proc/sys/kernel/osrelease`), if readable.
    pub kernel: Option<String>,
    /// Whether the target address is loopback (load generator and target share the machine).
    pub target_on_this_host: bool,
}

impl Environment {
    /// The environment of this process.
    pub fn here(target_on_this_host: bool) -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_owned()),
            target_on_this_host,
        }
    }
}

/// The whole result of a run, as written to `result.json`.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult<C: Serialize> {
    /// The run's settings.
    pub config: C,
    /// Where it ran.
    pub environment: Environment,
    /// One summary per label (`measured`, `warmup`; open model: `uncorrected` too).
    pub labels: Vec<Summary>,
    /// Why the run ended, and when (seconds from the start).
    pub stop: StopReason,
    /// When the run ended, seconds from its start.
    pub ended_s: f64,
    /// Open model only: how well the schedule was kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// One entry per second: active users, rate, errors, latency.
    pub timeline: Vec<Tick>,
    /// CPU and RSS of the watched processes and the machine during the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch: Option<crate::watch::WatchReport>,
    /// The per-request CSV, when one was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples_file: Option<String>,
}

impl<C: Serialize> RunResult<C> {
    /// Writes `DIR/result.json` (creating DIR).
    ///
    /// # Errors
    /// I/O errors.
    pub fn write_to(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let mut f = std::fs::File::create(dir.join("result.json"))?;
        serde_json::to_writer_pretty(&mut f, self)?;
        f.write_all(b"\n")
    }
}

/// The summaries as a fixed-width table.
pub fn table(labels: &[Summary]) -> String {
    let mut out = format!(
        "{:<12} {:>9} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "label", "samples", "err%", "req/s", "mean ms", "stdev", "min", "max"
    );
    for p in PERCENTILES {
        out.push_str(&format!(" {:>8}", format!("p{p}")));
    }
    out.push('\n');
    for s in labels {
        out.push_str(&format!(
            "{:<12} {:>9} {:>7.2} {:>10.1} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            s.label,
            s.samples,
            s.error_pct,
            s.throughput,
            s.mean_ms,
            s.stdev_ms,
            s.min_ms,
            s.max_ms
        ));
        for p in PERCENTILES {
            out.push_str(&format!(" {:>8.3}", s.percentile(*p).unwrap_or(0.0)));
        }
        out.push('\n');
        if s.errors > 0 {
            let kinds: Vec<String> = s
                .errors_by_kind
                .iter()
                .map(|(k, n)| format!("{k:?}: {n}").to_lowercase())
                .collect();
            out.push_str(&format!("{:<12} errors: {}\n", "", kinds.join(", ")));
        }
    }
    out
}
