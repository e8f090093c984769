//! Latency and outcome recording with bounded memory, and the summary statistics the published
//! reports use. A [`Recorder`] lives in one worker (no locks on the request path); recorders are
//! merged when the run ends. Latencies go into an HdrHistogram (1 µs to 1 h, 3 significant
//! digits), so memory does not grow with the number of samples.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Percentiles every summary reports.
pub const PERCENTILES: &[f64] = &[50.0, 75.0, 90.0, 95.0, 98.0, 99.0, 99.9, 99.99];

/// Why a request counted as an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The TCP connection could not be opened.
    Connect,
    /// The TLS handshake failed.
    Tls,
    /// No complete response within the timeout.
    Timeout,
    /// The connection failed mid-request (reset, closed, protocol error).
    Reset,
    /// The status was not the expected one.
    Status,
    /// A check on the response failed (body content, protocol).
    Check,
}

/// Outcomes of one label, in one worker or merged.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// Latencies of completed requests (errors included when they got a response), µs.
    latency: Histogram<u64>,
    /// Errors by kind.
    errors: BTreeMap<ErrorKind, u64>,
    /// Requests attempted (successes and errors).
    samples: u64,
    /// Response bytes received (head and body).
    received: u64,
    /// Request bytes sent (head and body).
    sent: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// An empty recorder.
    ///
    /// # Panics
    /// Never: the histogram bounds are constants known to be valid.
    pub fn new() -> Self {
        Self {
            latency: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("constant histogram bounds are valid"),
            errors: BTreeMap::new(),
            samples: 0,
            received: 0,
            sent: 0,
        }
    }

    /// Records one request that got a response after `elapsed`.
    pub fn record(
        &mut self,
        elapsed: Duration,
        sent: u64,
        received: u64,
        error: Option<ErrorKind>,
    ) {
        let us = u64::try_from(elapsed.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        self.latency.saturating_record(us);
        self.samples += 1;
        self.sent += sent;
        self.received += received;
        if let Some(kind) = error {
            *self.errors.entry(kind).or_default() += 1;
        }
    }

    /// Records a request that failed without a response (connect, TLS, reset, timeout).
    pub fn record_failure(&mut self, kind: ErrorKind) {
        self.samples += 1;
        *self.errors.entry(kind).or_default() += 1;
    }

    /// Adds `other`'s outcomes to this one.
    pub fn merge(&mut self, other: &Recorder) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.latency.add(&other.latency);
        for (k, v) in &other.errors {
            *self.errors.entry(*k).or_default() += v;
        }
        self.samples += other.samples;
        self.received += other.received;
        self.sent += other.sent;
    }

    /// Requests recorded.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Summary statistics over a measured window of `window`.
    pub fn summary(&self, label: &str, window: Duration) -> Summary {
        let h = &self.latency;
        let ms = |us: f64| us / 1000.0;
        let secs = window.as_secs_f64().max(f64::MIN_POSITIVE);
        let errors: u64 = self.errors.values().sum();
        let empty = h.is_empty();
        let throughput = self.samples as f64 / secs;
        let mean_ms = if empty { 0.0 } else { ms(h.mean()) };
        Summary {
            label: label.to_owned(),
            samples: self.samples,
            errors,
            error_pct: if self.samples == 0 {
                0.0
            } else {
                errors as f64 * 100.0 / self.samples as f64
            },
            errors_by_kind: self.errors.clone(),
            throughput,
            mean_ms,
            stdev_ms: if empty { 0.0 } else { ms(h.stdev()) },
            min_ms: if empty { 0.0 } else { ms(h.min() as f64) },
            max_ms: if empty { 0.0 } else { ms(h.max() as f64) },
            percentiles_ms: PERCENTILES
                .iter()
                .map(|p| {
                    let v = if empty {
                        0.0
                    } else {
                        ms(h.value_at_quantile(p / 100.0) as f64)
                    };
                    (format!("p{p}"), v)
                })
                .collect(),
            received_kb_s: self.received as f64 / 1024.0 / secs,
            sent_kb_s: self.sent as f64 / 1024.0 / secs,
            avg_bytes: if self.samples == 0 {
                0.0
            } else {
                self.received as f64 / self.samples as f64
            },
            avg_users: throughput * mean_ms / 1000.0,
            window_s: window.as_secs_f64(),
        }
    }
}

/// The statistics of one label, with the published reports' definitions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// What was measured (`measured`, `warmup`, …).
    pub label: String,
    /// Requests attempted.
    pub samples: u64,
    /// Requests that failed (any kind).
    pub errors: u64,
    /// `errors / samples × 100`.
    pub error_pct: f64,
    /// Errors by kind.
    pub errors_by_kind: BTreeMap<ErrorKind, u64>,
    /// `samples / window`, requests per second.
    pub throughput: f64,
    /// Mean latency.
    pub mean_ms: f64,
    /// Standard deviation of the latency.
    pub stdev_ms: f64,
    /// Fastest response.
    pub min_ms: f64,
    /// Slowest response.
    pub max_ms: f64,
    /// `p50` … `p99.99`.
    pub percentiles_ms: BTreeMap<String, f64>,
    /// Response bytes (head and body) per second, in KiB.
    pub received_kb_s: f64,
    /// Request bytes (head and body) per second, in KiB.
    pub sent_kb_s: f64,
    /// Mean response size in bytes.
    pub avg_bytes: f64,
    /// Average requests in the system: throughput × mean latency (Little's law).
    pub avg_users: f64,
    /// The measured window, seconds.
    pub window_s: f64,
}

impl Summary {
    /// A percentile, if it is one of [`PERCENTILES`].
    pub fn percentile(&self, p: f64) -> Option<f64> {
        self.percentiles_ms.get(&format!("p{p}")).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_matches_hand_computed_values() {
        let mut r = Recorder::new();
        // 1, 2, 3, 4 ms, 100 bytes each way; one of them a status error.
        for (i, ms) in [1u64, 2, 3, 4].iter().enumerate() {
            let err = (i == 3).then_some(ErrorKind::Status);
            r.record(Duration::from_millis(*ms), 100, 100, err);
        }
        r.record_failure(ErrorKind::Connect);
        let s = r.summary("measured", Duration::from_secs(2));
        assert_eq!(s.samples, 5);
        assert_eq!(s.errors, 2);
        assert!((s.error_pct - 40.0).abs() < 1e-9);
        assert!((s.throughput - 2.5).abs() < 1e-9);
        // Histogram precision is 3 significant digits: 1 µs in a few ms.
        assert!((s.mean_ms - 2.5).abs() < 0.01, "{}", s.mean_ms);
        let stdev = (((1.5f64).powi(2) + 0.25 + 0.25 + 1.5f64.powi(2)) / 4.0).sqrt();
        assert!(
            (s.stdev_ms - stdev).abs() < 0.01,
            "{} vs {stdev}",
            s.stdev_ms
        );
        assert!((s.min_ms - 1.0).abs() < 0.01);
        assert!((s.max_ms - 4.0).abs() < 0.01);
        assert!((s.percentile(50.0).unwrap() - 2.0).abs() < 0.01);
        assert!((s.percentile(99.0).unwrap() - 4.0).abs() < 0.01);
        assert!((s.received_kb_s - 400.0 / 1024.0 / 2.0).abs() < 1e-9);
        assert!(
            (s.avg_bytes - 80.0).abs() < 1e-9,
            "400 bytes over 5 samples"
        );
        assert!((s.avg_users - 2.5 * 2.5 / 1000.0).abs() < 1e-4);
        assert_eq!(s.errors_by_kind.get(&ErrorKind::Connect), Some(&1));
    }

    #[test]
    fn merging_equals_recording_in_one() {
        let mut a = Recorder::new();
        let mut b = Recorder::new();
        let mut both = Recorder::new();
        for ms in 1..=50u64 {
            let target = if ms % 2 == 0 { &mut a } else { &mut b };
            target.record(Duration::from_millis(ms), 10, 20, None);
            both.record(Duration::from_millis(ms), 10, 20, None);
        }
        a.merge(&b);
        let w = Duration::from_secs(1);
        assert_eq!(a.summary("x", w), both.summary("x", w));
    }

    #[test]
    fn an_empty_recorder_summarizes_to_zeros() {
        let s = Recorder::new().summary("empty", Duration::ZERO);
        assert_eq!(s.samples, 0);
        assert_eq!(s.mean_ms, 0.0);
        assert_eq!(s.error_pct, 0.0);
    }
}
