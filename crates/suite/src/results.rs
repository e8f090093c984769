//! What a suite run leaves in `results.json`: the environment, the suite as it was run, and per
//! cell and system the command lines, the named figures and the full statistics of each load run
//! (histograms and timeline included), so `pms bench compare` and later reports can reuse them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use pms_bench::collect::{StopReason, Tick};
use pms_bench::open::Schedule;
use pms_bench::stats::Summary;
use pms_bench::watch::WatchReport;

use super::spec::SuiteSpec;
use super::SuiteError;

/// A whole suite run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SuiteResults {
    /// Suite name.
    pub suite: String,
    /// Profile run.
    pub profile: String,
    /// Start, UTC, RFC 3339.
    pub started: String,
    /// When the run was taken up again with `--resume` (UTC, RFC 3339), if it was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed: Vec<String>,
    /// Wall time of the whole run, seconds.
    pub elapsed_s: f64,
    /// What the plan said it would take, seconds.
    pub expected_s: f64,
    /// The command that ran it (the last one, when resumed).
    pub command: String,
    /// Where it ran.
    pub environment: SuiteEnvironment,
    /// The suite file as run.
    pub spec: SuiteSpec,
    /// Rounds per cell (`--repeats`).
    #[serde(default = "one")]
    pub repeats: usize,
    /// The resource envelope the systems ran in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope: Option<super::envelope::Record>,
    /// The database the services ran on, when a cell used one (durable or fast, or given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// Every cell, in plan order.
    pub cells: Vec<CellResult>,
}

/// Where a suite ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SuiteEnvironment {
    /// `pms` version.
    pub pms_version: String,
    /// Git commit of the working tree, when known.
    pub commit: Option<String>,
    /// Logical CPUs.
    pub cpus: usize,
    /// CPU model, from `/proc/cpuinfo`.
    pub cpu_model: Option<String>,
    /// Memory, GiB.
    pub memory_gib: Option<f64>,
    /// Kernel release.
    pub kernel: Option<String>,
    /// Load generator and every system under test on this one host (always true for suites).
    pub shared_host: bool,
    /// The `pms` binary the components and loads ran from.
    pub pms_binary: String,
    /// How that binary was built: `release`, `debug`, or `unknown` (another binary).
    pub build: String,
    /// Peer → version, or "not installed".
    pub peers: BTreeMap<String, String>,
}

/// One cell of the matrix: the same load against each system.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellResult {
    /// Id (`h1c_h1c_passthrough/100u/500B/0ms`), what `--only` and published rows match.
    pub id: String,
    /// Which table it belongs to (`passthrough`, `jmeter`, `k6`, …).
    pub part: String,
    /// Display name (the published scenario name).
    pub name: String,
    /// Parameters, in display order.
    pub params: Vec<(String, String)>,
    /// One run per system.
    pub runs: Vec<RunRecord>,
}

impl CellResult {
    /// The parameter `key`, if set.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// How one system's run of a cell went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Status {
    /// It ran.
    Ok,
    /// The peer is not on this machine: no row is invented.
    NotInstalled {
        /// The program looked for.
        program: String,
    },
    /// Something failed; the message says what and where the logs are.
    Failed {
        /// What happened.
        error: String,
    },
}

/// One system's run of a cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// `pms`, `nginx`, `haproxy`.
    pub server: String,
    /// How it went.
    #[serde(flatten)]
    pub status: Status,
    /// The command lines, components first, load last.
    pub commands: Vec<String>,
    /// Named figures (see [`super::metrics`]).
    pub metrics: BTreeMap<String, f64>,
    /// The load run's statistics.
    pub output: Option<RunOutput>,
    /// A report in another tool's layout (vegeta's text), when the suite asks for one.
    pub text: Option<String>,
    /// Anything else the cell measured (start-up runs, stress outcome, one request's
    /// breakdown).
    pub extra: Option<serde_json::Value>,
    /// With several rounds: every round's figures, in round order; this record is then the
    /// round with the median throughput (see [`super::rounds`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<Round>,
}

/// One round of a system's runs of a cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Round {
    /// Where the system came in that round's order (0: first).
    pub position: usize,
    /// Whether the run worked.
    pub ok: bool,
    /// Its named figures.
    pub metrics: BTreeMap<String, f64>,
}

fn one() -> usize {
    1
}

impl RunRecord {
    /// A record for `server` with nothing in it yet.
    pub fn new(server: &str) -> Self {
        Self {
            server: server.into(),
            status: Status::Ok,
            commands: Vec::new(),
            metrics: BTreeMap::new(),
            output: None,
            text: None,
            extra: None,
            rounds: Vec::new(),
        }
    }

    /// The measured label.
    pub fn measured(&self) -> Option<&Summary> {
        self.output.as_ref()?.labels.first()
    }
}

/// The parts of a `pms bench run` / `stress` `result.json` a suite keeps.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunOutput {
    /// `measured` first, then `uncorrected` / `warmup`.
    pub labels: Vec<Summary>,
    /// Why it ended.
    pub stop: StopReason,
    /// When it ended, seconds.
    pub ended_s: f64,
    /// Open model: how well the schedule was kept.
    #[serde(default)]
    pub schedule: Option<Schedule>,
    /// Once-a-second series.
    pub timeline: Vec<Tick>,
    /// CPU and RSS of the watched processes.
    #[serde(default)]
    pub watch: Option<WatchReport>,
}

impl RunOutput {
    /// Reads `DIR/result.json`.
    ///
    /// # Errors
    /// Missing or not a `pms bench` result.
    pub fn read(dir: &Path) -> Result<Self, SuiteError> {
        let path = dir.join("result.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| SuiteError::io(&format!("reading {}", path.display()), e))?;
        serde_json::from_str(&text)
            .map_err(|e| SuiteError::Failed(format!("{}: {e}", path.display())))
    }

    /// Mean RSS, MB (10^6 bytes), of the watched processes together, over the samples taken
    /// from `from_s` on (the measured window).
    pub fn rss_mb_from(&self, from_s: f64) -> Option<f64> {
        let watch = self.watch.as_ref()?;
        let mut total = 0.0;
        let mut any = false;
        for p in &watch.processes {
            let window: Vec<u64> = p
                .samples
                .iter()
                .filter(|s| s.t_s >= from_s && s.rss_kib > 0)
                .map(|s| s.rss_kib)
                .collect();
            if window.is_empty() {
                continue;
            }
            any = true;
            total += window.iter().sum::<u64>() as f64 / window.len() as f64;
        }
        any.then(|| total * 1024.0 / 1e6)
    }
}

impl SuiteResults {
    /// Writes `DIR/results.json`.
    ///
    /// # Errors
    /// I/O.
    pub fn write(&self, dir: &Path) -> Result<(), SuiteError> {
        let path = dir.join("results.json");
        // Compact: a run holds a latency histogram and a per-second timeline, and indenting
        // them makes the file several times larger (`jq .` reads it).
        let text = serde_json::to_string(self)
            .map_err(|e| SuiteError::Failed(format!("serializing results: {e}")))?;
        std::fs::write(&path, text + "\n")
            .map_err(|e| SuiteError::io(&format!("writing {}", path.display()), e))
    }

    /// Reads `DIR/results.json` (or the file itself).
    ///
    /// # Errors
    /// Missing or not a suite's results.
    pub fn read(path: &Path) -> Result<Self, SuiteError> {
        let path = if path.is_dir() {
            path.join("results.json")
        } else {
            path.to_owned()
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| SuiteError::io(&format!("reading {}", path.display()), e))?;
        serde_json::from_str(&text)
            .map_err(|e| SuiteError::Failed(format!("{}: {e}", path.display())))
    }
}
