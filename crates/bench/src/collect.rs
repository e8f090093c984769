//! Where workers put what they measured, while a run is going. A [`Collector`] keeps a few
//! shards (a small multiple of the CPU count), each a mutex over per-label [`Recorder`]s, the
//! current second's figures and a buffer of per-request rows; a worker always uses the same
//! shard, so the locks are almost never contended and memory does not grow with the number of
//! users or samples. Once a second a ticker sweeps the shards into a [`Tick`] (the time series
//! behind the live progress line, the stress test and the latency-over-time charts), and checks
//! the [`StopRule`]. The collector also carries the run's stop signal (an abort, or the end of
//! the grace period) and the gauge of active users.

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::stats::{Clock, ErrorKind, Recorder, Sample};

/// When a run stops itself before its time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct StopRule {
    /// At the first failed request (k6's `test.abort()` on a failed check).
    pub first_error: bool,
    /// When the errors of one second exceed this percentage of that second's requests.
    pub error_pct: Option<f64>,
}

/// Why a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum StopReason {
    /// Its duration was over.
    Completed,
    /// A request failed and the rule says stop at the first error.
    FirstError {
        /// What the failure was.
        kind: ErrorKind,
        /// The status it came back with, when it came back (`kind` is `status` or `check`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
    },
    /// One second's error rate crossed the limit.
    ErrorRate {
        /// That second's error percentage.
        pct: f64,
    },
}

/// One second of a run.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Tick {
    /// End of the second (or of the run, for the last part-second), from the run's start.
    pub t_s: f64,
    /// Users in their loop (closed model) or requests in flight (open model) at that moment.
    pub active: usize,
    /// What the profile asked for at that moment (users or requests per second).
    pub target: f64,
    /// Requests that ended in the second.
    pub requests: u64,
    /// Of which errors.
    pub errors: u64,
    /// Requests per second over the second (or the part-second at the end).
    pub rate: f64,
    /// Mean latency, ms (responses only).
    pub mean_ms: f64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Slowest, ms.
    pub max_ms: f64,
}

/// How a [`Collector`] files what it is given.
#[derive(Debug, Clone, Default)]
pub struct CollectConfig {
    /// Samples due before this (from the start) go to the `warmup` label.
    pub warmup: Duration,
    /// Open model: keep the uncorrected (from the send) latency too.
    pub open: bool,
    /// When to stop early.
    pub stop: StopRule,
    /// Write one CSV row per request here.
    pub samples: Option<std::path::PathBuf>,
    /// Count the opening of a connection in the latency of the request that opened it, as
    /// JMeter's elapsed time does.
    pub connect_in_latency: bool,
}

/// Everything a run recorded, when it is over.
#[derive(Debug, Clone)]
pub struct Collected {
    /// Samples due after the warm-up; latency from the due time.
    pub measured: Recorder,
    /// Open model: the same samples, latency from the actual send.
    pub uncorrected: Option<Recorder>,
    /// Samples due during the warm-up.
    pub warmup: Recorder,
    /// One entry per second.
    pub timeline: Vec<Tick>,
    /// Why the run ended.
    pub reason: StopReason,
    /// When it ended (the abort, or the planned end), from the start.
    pub ended: Duration,
    /// Users (closed) or requests in flight (open) when the run was stopped early; `None` when
    /// it ran its course.
    pub active_at_stop: Option<usize>,
    /// Rows written to the samples file.
    pub rows: u64,
}

/// Bytes a shard buffers before appending its rows to the samples file.
const ROW_FLUSH: usize = 64 * 1024;

/// The per-request CSV header: JMeter's JTL column names, with their meanings (times in ms
/// with µs decimals; `timeStamp` is when the sample began, `elapsed` and `Latency` include
/// `Connect` on the request that opened its connection, as JMeter's do), plus `Lag`, how long
/// after its due time the request went out.
pub const SAMPLES_HEADER: &str =
    "timeStamp,elapsed,label,responseCode,success,failureMessage,bytes,sentBytes,allThreads,Latency,Connect,Lag\n";

struct Shard {
    measured: Recorder,
    uncorrected: Option<Recorder>,
    warmup: Option<Recorder>,
    second: Second,
    rows: Vec<u8>,
    rows_count: u64,
}

/// The current second's figures in one shard.
struct Second {
    latency: Histogram<u64>,
    requests: u64,
    errors: u64,
}

impl Second {
    fn new() -> Self {
        Self {
            latency: Histogram::new_with_bounds(1, 3_600_000_000, 2)
                .expect("constant histogram bounds are valid"),
            requests: 0,
            errors: 0,
        }
    }
}

/// The shared recording point of one run.
pub struct Collector {
    start: Instant,
    epoch: SystemTime,
    cfg: CollectConfig,
    shards: Box<[Mutex<Shard>]>,
    active: AtomicUsize,
    stop: watch::Sender<bool>,
    reason: Mutex<Option<(StopReason, Duration, usize)>>,
    timeline: Mutex<Vec<Tick>>,
    file: Option<Mutex<std::io::BufWriter<std::fs::File>>>,
    file_error: Mutex<Option<std::io::Error>>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector")
            .field("shards", &self.shards.len())
            .field("active", &self.active)
            .finish_non_exhaustive()
    }
}

/// Locks a mutex, taking the data over if a panicking thread poisoned it (a recorder is
/// always in a usable state between two calls).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Collector {
    /// A collector for a run starting now.
    ///
    /// # Errors
    /// When the samples file cannot be created.
    pub fn new(cfg: CollectConfig) -> std::io::Result<Arc<Self>> {
        // Two shards per thread that can record at once keep the locks almost uncontended;
        // each shard's histograms take about 320 KB, so more would be memory for nothing.
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()) * 2;
        let with_connect = cfg.connect_in_latency;
        let shards = (0..n)
            .map(|_| {
                Mutex::new(Shard {
                    measured: Recorder::new(Clock::Due).counting_connect(with_connect),
                    uncorrected: None,
                    warmup: None,
                    second: Second::new(),
                    rows: Vec::new(),
                    rows_count: 0,
                })
            })
            .collect();
        let file = match &cfg.samples {
            Some(path) => Some(Mutex::new(samples_file(path)?)),
            None => None,
        };
        let (stop, _) = watch::channel(false);
        Ok(Arc::new(Self {
            start: Instant::now(),
            epoch: SystemTime::now(),
            cfg,
            shards,
            active: AtomicUsize::new(0),
            stop,
            reason: Mutex::new(None),
            timeline: Mutex::new(Vec::new()),
            file,
            file_error: Mutex::new(None),
        }))
    }

    /// When the run started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// An empty recorder of this run's latency definition, by `clock`.
    fn recorder(&self, clock: Clock) -> Recorder {
        Recorder::new(clock).counting_connect(self.cfg.connect_in_latency)
    }

    /// Records one request made by `worker`.
    pub fn record(&self, worker: usize, s: &Sample) {
        let mut guard = lock(&self.shards[worker % self.shards.len()]);
        let shard = &mut *guard;
        let warm = s.due < self.cfg.warmup;
        if warm {
            shard
                .warmup
                .get_or_insert_with(|| self.recorder(Clock::Due))
                .record(s);
        } else {
            shard.measured.record(s);
            if self.cfg.open {
                shard
                    .uncorrected
                    .get_or_insert_with(|| self.recorder(Clock::Sent))
                    .record(s);
            }
        }
        shard.second.requests += 1;
        let latency = s.latency(Clock::Due, self.cfg.connect_in_latency);
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        shard.second.latency.saturating_record(us.max(1));
        if s.error.is_some() {
            shard.second.errors += 1;
        }
        if self.file.is_some() {
            self.row(shard, s, warm);
        }
        drop(guard);
        if let (Some(kind), true) = (s.error, self.cfg.stop.first_error) {
            self.stop_because(StopReason::FirstError {
                kind,
                status: s.status,
            });
        }
    }

    fn row(&self, shard: &mut Shard, s: &Sample, warm: bool) {
        let connect = s.connect.map(|c| c.total()).unwrap_or_default();
        let began = (self.epoch + s.due + s.lag)
            .checked_sub(connect)
            .unwrap_or(self.epoch);
        let stamp = began
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let _ = writeln!(
            shard.rows,
            "{stamp},{:.3},{},{},{},{},{},{},{},{:.3},{:.3},{:.3}",
            ms(connect + s.elapsed),
            if warm { "warmup" } else { "measured" },
            s.status.unwrap_or(0),
            s.error.is_none(),
            s.error.map_or("", ErrorKind::name),
            s.received,
            s.sent,
            self.active.load(Ordering::Relaxed),
            ms(s.ttfb.map_or(Duration::ZERO, |t| connect + t)),
            ms(connect),
            ms(s.lag),
        );
        shard.rows_count += 1;
        if shard.rows.len() >= ROW_FLUSH {
            self.flush_rows(&mut shard.rows);
        }
    }

    fn flush_rows(&self, rows: &mut Vec<u8>) {
        if let Some(file) = &self.file {
            if let Err(e) = lock(file).write_all(rows) {
                lock(&self.file_error).get_or_insert(e);
            }
        }
        rows.clear();
    }

    /// Counts a request `worker` had in flight when the run was cut off.
    pub fn interrupted(&self, worker: usize, due: Duration) {
        let mut shard = lock(&self.shards[worker % self.shards.len()]);
        if due < self.cfg.warmup {
            shard
                .warmup
                .get_or_insert_with(|| self.recorder(Clock::Due))
                .interrupted();
        } else {
            shard.measured.interrupted();
        }
    }

    /// Marks a user (or an in-flight request) active until the guard drops.
    pub fn enter(self: &Arc<Self>) -> Active {
        self.active.fetch_add(1, Ordering::Relaxed);
        Active(self.clone())
    }

    /// Users or requests active now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Ends the run now (the first reason given wins).
    pub fn stop_because(&self, reason: StopReason) {
        {
            let mut r = lock(&self.reason);
            if r.is_none() {
                *r = Some((reason, self.start.elapsed(), self.active()));
            }
        }
        self.stop.send_replace(true);
    }

    /// Whether the run has been stopped.
    pub fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// A receiver that turns `true` when the run stops.
    pub fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Once a second until the run stops: sweeps the shards into a [`Tick`], applies the
    /// error-rate rule, and hands the tick to `progress`. `target` says what the profile asks
    /// for at a given time.
    pub async fn tick(
        self: Arc<Self>,
        target: impl Fn(Duration) -> f64,
        mut progress: impl FnMut(&Tick),
    ) {
        let mut stop = self.stop_signal();
        let mut next = self.start + Duration::from_secs(1);
        loop {
            let last = tokio::select! {
                () = tokio::time::sleep_until(next) => false,
                _ = stop.wait_for(|s| *s) => true,
            };
            if last {
                // The part-second since the last tick, so the timeline covers the whole run.
                let tick = self.sweep(self.start.elapsed(), &target);
                if tick.requests > 0 {
                    progress(&tick);
                    lock(&self.timeline).push(tick);
                }
                return;
            }
            let tick = self.sweep(next - self.start, &target);
            progress(&tick);
            if let Some(limit) = self.cfg.stop.error_pct {
                if tick.requests > 0 {
                    let pct = tick.errors as f64 * 100.0 / tick.requests as f64;
                    if pct > limit {
                        self.stop_because(StopReason::ErrorRate { pct });
                    }
                }
            }
            lock(&self.timeline).push(tick);
            next += Duration::from_secs(1);
        }
    }

    fn sweep(&self, at: Duration, target: &impl Fn(Duration) -> f64) -> Tick {
        let since = at.as_secs_f64() - lock(&self.timeline).last().map_or(0.0, |t| t.t_s);
        let mut all = Second::new();
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            let _ = all.latency.add(&shard.second.latency);
            all.requests += shard.second.requests;
            all.errors += shard.second.errors;
            shard.second.latency.reset();
            shard.second.requests = 0;
            shard.second.errors = 0;
        }
        let h = &all.latency;
        let ms = |us: f64| if h.is_empty() { 0.0 } else { us / 1000.0 };
        Tick {
            t_s: at.as_secs_f64(),
            active: self.active(),
            target: target(at),
            requests: all.requests,
            errors: all.errors,
            rate: all.requests as f64 / since.max(1e-3),
            mean_ms: ms(h.mean()),
            p50_ms: ms(h.value_at_quantile(0.5) as f64),
            p99_ms: ms(h.value_at_quantile(0.99) as f64),
            max_ms: ms(h.max() as f64),
        }
    }

    /// Merges the shards and flushes the samples file; `planned` is the run's planned length
    /// (the end when nothing stopped it early).
    ///
    /// # Errors
    /// The first error writing the samples file.
    pub fn finish(&self, planned: Duration) -> std::io::Result<Collected> {
        let mut out = Collected {
            measured: self.recorder(Clock::Due),
            uncorrected: self.cfg.open.then(|| self.recorder(Clock::Sent)),
            warmup: self.recorder(Clock::Due),
            timeline: std::mem::take(&mut *lock(&self.timeline)),
            reason: StopReason::Completed,
            ended: planned,
            active_at_stop: None,
            rows: 0,
        };
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            out.measured.merge(&shard.measured);
            if let (Some(all), Some(u)) = (&mut out.uncorrected, &shard.uncorrected) {
                all.merge(u);
            }
            if let Some(w) = &shard.warmup {
                out.warmup.merge(w);
            }
            out.rows += shard.rows_count;
            let mut rows = std::mem::take(&mut shard.rows);
            self.flush_rows(&mut rows);
        }
        if let Some(file) = &self.file {
            if let Err(e) = lock(file).flush() {
                lock(&self.file_error).get_or_insert(e);
            }
        }
        if let Some(e) = lock(&self.file_error).take() {
            return Err(e);
        }
        if let Some((reason, at, active)) = lock(&self.reason).clone() {
            // A run that completed before its planned end (every user used up its loop
            // count) ended then; one stopped early also says how many were active.
            out.ended = at.min(planned);
            if reason != StopReason::Completed {
                out.active_at_stop = Some(active);
            }
            out.reason = reason;
        }
        Ok(out)
    }
}

fn samples_file(path: &Path) -> std::io::Result<std::io::BufWriter<std::fs::File>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::io::BufWriter::with_capacity(ROW_FLUSH, std::fs::File::create(path)?);
    f.write_all(SAMPLES_HEADER.as_bytes())?;
    Ok(f)
}

/// A user or request counted as active; leaves when dropped.
pub struct Active(Arc<Collector>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Active {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Active")
    }
}
