//! Latency and outcome recording with bounded memory, and the summary statistics the published
//! reports use. A [`Recorder`] lives in one worker (no locks on the request path); recorders are
//! merged when the run ends. Latencies go into an HdrHistogram (1 µs to 1 h, 3 significant
//! digits), so memory does not grow with the number of samples.
//!
//! Every request counts in the latency statistics, answered or not: one that got no response
//! (a timeout, a reset, a refused connection) counts the time until its failure, as JMeter,
//! vegeta and WSO2's reports count it. Its failure also counts in the error rate.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Percentiles every summary reports.
pub const PERCENTILES: &[f64] = &[50.0, 75.0, 90.0, 95.0, 98.0, 99.0, 99.9, 99.99];

/// Why a request counted as an error.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
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

/// Timings of opening one connection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnectTiming {
    /// TCP connect.
    pub tcp: Duration,
    /// TLS handshake after it (`None` on cleartext).
    pub tls: Option<Duration>,
}

impl ConnectTiming {
    /// TCP and TLS together (JMeter's connect time).
    pub fn total(&self) -> Duration {
        self.tcp + self.tls.unwrap_or_default()
    }
}

/// One request as a worker saw it; what [`Recorder::record`] takes.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// From the run's start to when the request was due (open model) or sent (closed model).
    pub due: Duration,
    /// How long after its due time the request actually went out (open model; zero otherwise).
    pub lag: Duration,
    /// From sending to the response head (`None`: no response).
    pub ttfb: Option<Duration>,
    /// From sending to the end of the response body, or to the failure.
    pub elapsed: Duration,
    /// Set on the first request of a freshly opened connection.
    pub connect: Option<ConnectTiming>,
    /// Request bytes (head and body).
    pub sent: u64,
    /// Response bytes (head and body).
    pub received: u64,
    /// Response status (`None`: no response).
    pub status: Option<u16>,
    /// Why it counts as an error, if it does.
    pub error: Option<ErrorKind>,
}

impl Sample {
    /// The latency this sample counts by `clock`; with `connect`, the opening of the connection
    /// it was the first request on is part of it (JMeter's elapsed time).
    pub fn latency(&self, clock: Clock, connect: bool) -> Duration {
        let sent = match clock {
            Clock::Due => self.lag + self.elapsed,
            Clock::Sent => self.elapsed,
        };
        match self.connect {
            Some(c) if connect => sent + c.total(),
            _ => sent,
        }
    }
}

/// Which latency a recorder keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// From the due time: schedule lag included (the honest open-model figure; equal to
    /// [`Clock::Sent`] in the closed model, where lag is zero).
    Due,
    /// From the actual send (what a closed-loop tool reports).
    Sent,
}

/// An empty latency histogram (µs, up to an hour) with `sigfig` significant digits.
pub fn histogram(sigfig: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, sigfig).expect("constant histogram bounds are valid")
}

/// Longest latency a histogram holds: one hour, in µs (longer values saturate).
const MAX_US: u64 = 3_600_000_000;

/// A point in the run, µs from its start.
fn offset(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A latency in µs for a histogram (which cannot hold 0).
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

impl ErrorKind {
    /// The kind's name as written in reports (`connect`, `tls`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Tls => "tls",
            Self::Timeout => "timeout",
            Self::Reset => "reset",
            Self::Status => "status",
            Self::Check => "check",
        }
    }
}

/// Outcomes of one label, in one shard or merged.
#[derive(Debug, Clone)]
pub struct Recorder {
    clock: Clock,
    /// Whether a request's latency includes opening the connection it was first on.
    with_connect: bool,
    /// Latencies of every request, µs (3 significant digits); one that got no response counts
    /// the time until its failure.
    latency: Histogram<u64>,
    /// The part of `latency` that got no response, µs.
    failed: Histogram<u64>,
    /// Time to the response head, µs (2 significant digits: a breakdown, not the headline).
    ttfb: Histogram<u64>,
    /// TCP connect per opened connection, µs.
    connect: Histogram<u64>,
    /// TLS handshake per opened connection, µs.
    tls: Histogram<u64>,
    /// Errors by kind.
    errors: BTreeMap<ErrorKind, u64>,
    /// Responses by status; `0` counts requests with no response (vegeta's code 0).
    statuses: BTreeMap<u16, u64>,
    /// Requests attempted (successes and errors).
    samples: u64,
    /// Requests cut off by the end of the run or an abort, not counted in `samples`.
    interrupted: u64,
    /// Response bytes received (head and body).
    received: u64,
    /// Request bytes sent (head and body).
    sent: u64,
    /// Earliest due time, latest due time, latest end (µs from the run's start).
    first_due: u64,
    last_due: u64,
    last_end: u64,
    /// Wait of the request with the latest due time (vegeta's `wait`), µs.
    last_wait: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new(Clock::Due)
    }
}

impl Recorder {
    /// An empty recorder keeping latencies by `clock`.
    ///
    /// # Panics
    /// Never: the histogram bounds are constants known to be valid.
    pub fn new(clock: Clock) -> Self {
        Self {
            clock,
            with_connect: false,
            latency: histogram(3),
            failed: histogram(2),
            ttfb: histogram(2),
            connect: histogram(2),
            tls: histogram(2),
            errors: BTreeMap::new(),
            statuses: BTreeMap::new(),
            samples: 0,
            interrupted: 0,
            received: 0,
            sent: 0,
            first_due: u64::MAX,
            last_due: 0,
            last_end: 0,
            last_wait: 0,
        }
    }

    /// The same recorder, counting the opening of a connection in the latency of the request
    /// that opened it, as JMeter's elapsed time does.
    pub fn counting_connect(mut self, yes: bool) -> Self {
        self.with_connect = yes;
        self
    }

    /// Records one request.
    pub fn record(&mut self, s: &Sample) {
        self.samples += 1;
        self.sent += s.sent;
        self.received += s.received;
        *self.statuses.entry(s.status.unwrap_or(0)).or_default() += 1;
        if let Some(kind) = s.error {
            *self.errors.entry(kind).or_default() += 1;
        }
        if let Some(c) = s.connect {
            self.connected(c);
        }
        let latency = s.latency(self.clock, self.with_connect);
        self.latency.saturating_record(micros(latency));
        if s.status.is_none() {
            self.failed.saturating_record(micros(latency));
        }
        if let Some(t) = s.ttfb {
            self.ttfb.saturating_record(micros(t));
        }
        let due = offset(s.due);
        let end = due.saturating_add(offset(s.lag + s.elapsed));
        self.first_due = self.first_due.min(due);
        if due >= self.last_due {
            self.last_due = due;
            self.last_wait = micros(latency);
        }
        self.last_end = self.last_end.max(end);
    }

    /// Records the opening of a connection that carried no request (it failed before one).
    pub fn connected(&mut self, c: ConnectTiming) {
        self.connect.saturating_record(micros(c.tcp));
        if let Some(t) = c.tls {
            self.tls.saturating_record(micros(t));
        }
    }

    /// Counts a request cut off by the end of the run or an abort.
    pub fn interrupted(&mut self) {
        self.interrupted += 1;
    }

    /// Adds `other`'s outcomes to this one.
    pub fn merge(&mut self, other: &Recorder) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.latency.add(&other.latency);
        let _ = self.failed.add(&other.failed);
        let _ = self.ttfb.add(&other.ttfb);
        let _ = self.connect.add(&other.connect);
        let _ = self.tls.add(&other.tls);
        for (k, v) in &other.errors {
            *self.errors.entry(*k).or_default() += v;
        }
        for (k, v) in &other.statuses {
            *self.statuses.entry(*k).or_default() += v;
        }
        self.samples += other.samples;
        self.interrupted += other.interrupted;
        self.received += other.received;
        self.sent += other.sent;
        self.first_due = self.first_due.min(other.first_due);
        if other.last_due >= self.last_due && other.samples > 0 {
            self.last_due = other.last_due;
            self.last_wait = other.last_wait;
        }
        self.last_end = self.last_end.max(other.last_end);
    }

    /// Requests recorded.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Errors recorded.
    pub fn errors(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The latency histogram (µs).
    pub fn latency(&self) -> &Histogram<u64> {
        &self.latency
    }

    /// Summary statistics over a measured window of `window`.
    pub fn summary(&self, label: &str, window: Duration) -> Summary {
        let h = &self.latency;
        let secs = window.as_secs_f64().max(f64::MIN_POSITIVE);
        let errors = self.errors();
        let throughput = self.samples as f64 / secs;
        let mean_ms = if h.is_empty() { 0.0 } else { ms(h.mean()) };
        let (span_s, attack_s, wait_s, end_s) = if self.samples == 0 {
            (0.0, 0.0, 0.0, 0.0)
        } else {
            let s = |us: u64| us as f64 / 1e6;
            (
                s(self.last_end.saturating_sub(self.first_due)),
                s(self.last_due.saturating_sub(self.first_due)),
                s(self.last_wait),
                s(self.last_end),
            )
        };
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
            status_codes: self.statuses.clone(),
            interrupted: self.interrupted,
            throughput,
            mean_ms,
            stdev_ms: if h.is_empty() { 0.0 } else { ms(h.stdev()) },
            min_ms: if h.is_empty() {
                0.0
            } else {
                ms(h.min() as f64)
            },
            max_ms: if h.is_empty() {
                0.0
            } else {
                ms(h.max() as f64)
            },
            percentiles_ms: PERCENTILES
                .iter()
                .map(|p| (format!("p{p}"), quantile(h, *p)))
                .collect(),
            received_kb_s: self.received as f64 / 1024.0 / secs,
            sent_kb_s: self.sent as f64 / 1024.0 / secs,
            received_bytes: self.received,
            sent_bytes: self.sent,
            avg_bytes: if self.samples == 0 {
                0.0
            } else {
                self.received as f64 / self.samples as f64
            },
            avg_users: throughput * mean_ms / 1000.0,
            window_s: window.as_secs_f64(),
            span_s,
            end_s,
            attack_s,
            wait_s,
            breakdown: Breakdown {
                connect: Brief::of(&self.connect),
                tls: Brief::of(&self.tls),
                ttfb: Brief::of(&self.ttfb),
            },
            histogram: HistogramDump::of(h),
            failures_histogram: HistogramDump::of(&self.failed),
        }
    }
}

fn ms(us: f64) -> f64 {
    us / 1000.0
}

fn quantile(h: &Histogram<u64>, p: f64) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        ms(h.value_at_quantile(p / 100.0) as f64)
    }
}

/// The short form of a breakdown histogram.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Brief {
    /// Values recorded.
    pub count: u64,
    /// Mean, ms.
    pub mean_ms: f64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
}

impl Brief {
    fn of(h: &Histogram<u64>) -> Option<Self> {
        (!h.is_empty()).then(|| Self {
            count: h.len(),
            mean_ms: ms(h.mean()),
            p50_ms: quantile(h, 50.0),
            p99_ms: quantile(h, 99.0),
            max_ms: ms(h.max() as f64),
        })
    }
}

/// Where the time went: JMeter's connect time (TCP, then TLS, per opened connection), its
/// latency (time to the response head) and, in the summary itself, the full response time.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Breakdown {
    /// TCP connect, per connection opened.
    pub connect: Option<Brief>,
    /// TLS handshake, per connection opened.
    pub tls: Option<Brief>,
    /// Send → response head, per request.
    pub ttfb: Option<Brief>,
}

/// A latency histogram in a form any tool can read back: every recorded bucket as
/// `[highest value equivalent (µs), count]`, in increasing order. Merging two dumps is adding
/// the counts of equal values; percentiles are read by walking the cumulative counts.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct HistogramDump {
    /// Unit of the values.
    pub unit: String,
    /// Significant digits of the recording.
    pub significant_digits: u8,
    /// `[value, count]` pairs.
    pub buckets: Vec<(u64, u64)>,
}

impl HistogramDump {
    /// Values recorded in `[low, high)` µs.
    pub fn count_between(&self, low: u64, high: u64) -> u64 {
        self.buckets
            .iter()
            .filter(|(v, _)| *v >= low && *v < high)
            .map(|(_, n)| n)
            .sum()
    }

    /// The recorded values in ms, each as often as it was recorded; above `max` values, `max`
    /// evenly spaced order statistics of them (the i-th of `max` is the value at rank
    /// (i + ½)·n/max), which keep the distribution's shape with bounded memory.
    pub fn values_ms(&self, max: usize) -> Vec<f64> {
        let total: u64 = self.buckets.iter().map(|(_, n)| n).sum();
        let ms = |us: u64| us as f64 / 1000.0;
        if total <= max as u64 {
            return self
                .buckets
                .iter()
                .flat_map(|(v, n)| std::iter::repeat_n(ms(*v), *n as usize))
                .collect();
        }
        let mut out = Vec::with_capacity(max);
        let mut buckets = self.buckets.iter();
        let (mut value, mut upto) = (0u64, 0u64);
        for i in 0..max {
            let rank = ((i as f64 + 0.5) * total as f64 / max as f64) as u64;
            while upto <= rank {
                match buckets.next() {
                    Some((v, n)) => {
                        value = *v;
                        upto += n;
                    }
                    None => break,
                }
            }
            out.push(ms(value));
        }
        out
    }

    /// Dumps `h` (values in µs).
    pub fn of(h: &Histogram<u64>) -> Self {
        Self {
            unit: "us".into(),
            significant_digits: h.sigfig(),
            buckets: h
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
        }
    }
}

/// The statistics of one label, with the published reports' definitions.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
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
    /// Responses by status code; `0`: no response.
    pub status_codes: BTreeMap<u16, u64>,
    /// Requests in flight when the run ended or was aborted and cut off; not in `samples`.
    pub interrupted: u64,
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
    /// Response bytes in all.
    pub received_bytes: u64,
    /// Request bytes in all.
    pub sent_bytes: u64,
    /// Mean response size in bytes.
    pub avg_bytes: f64,
    /// Average requests in the system: throughput × mean latency (Little's law).
    pub avg_users: f64,
    /// The measured window, seconds.
    pub window_s: f64,
    /// From the first request's start to the last response's end, seconds (the window the
    /// JMeter/WSO2 statistics divide by).
    pub span_s: f64,
    /// From the run's start to the last response's end (or failure), seconds.
    #[serde(default)]
    pub end_s: f64,
    /// From the first to the last request's start, seconds (vegeta's `attack`).
    pub attack_s: f64,
    /// Latency of the last request started, seconds (vegeta's `wait`).
    pub wait_s: f64,
    /// Connect, TLS and time-to-first-byte breakdown.
    pub breakdown: Breakdown,
    /// The latency histogram itself.
    pub histogram: HistogramDump,
    /// The part of `histogram` that got no response (time until the failure).
    pub failures_histogram: HistogramDump,
}

impl Summary {
    /// A percentile, if it is one of [`PERCENTILES`].
    pub fn percentile(&self, p: f64) -> Option<f64> {
        self.percentiles_ms.get(&format!("p{p}")).copied()
    }

    /// Requests that got a 2xx/3xx-free verdict: `samples − errors`.
    pub fn successes(&self) -> u64 {
        self.samples - self.errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(due_ms: u64, ms: u64) -> Sample {
        Sample {
            due: Duration::from_millis(due_ms),
            lag: Duration::ZERO,
            ttfb: Some(Duration::from_millis(ms) / 2),
            elapsed: Duration::from_millis(ms),
            connect: None,
            sent: 100,
            received: 100,
            status: Some(200),
            error: None,
        }
    }

    #[test]
    fn summary_matches_hand_computed_values() {
        let mut r = Recorder::new(Clock::Due);
        // 1, 2, 3, 4 ms, 100 bytes each way, due at 0, 10, 20, 30 ms; the last a status error.
        for (i, ms) in [1u64, 2, 3, 4].iter().enumerate() {
            let mut s = ok(i as u64 * 10, *ms);
            if i == 3 {
                s.status = Some(500);
                s.error = Some(ErrorKind::Status);
            }
            r.record(&s);
        }
        r.record(&Sample {
            status: None,
            ttfb: None,
            received: 0,
            sent: 0,
            error: Some(ErrorKind::Connect),
            ..ok(5, 1)
        });
        let s = r.summary("measured", Duration::from_secs(2));
        assert_eq!(s.samples, 5);
        assert_eq!(s.errors, 2);
        assert_eq!(s.successes(), 3);
        assert!((s.error_pct - 40.0).abs() < 1e-9);
        assert!((s.throughput - 2.5).abs() < 1e-9);
        // Every request counts in the latency, the connect failure (1 ms) too: 1, 2, 3, 4, 1 ms.
        // Histogram precision is 3 significant digits: 1 µs in a few ms.
        assert!((s.mean_ms - 2.2).abs() < 0.01, "{}", s.mean_ms);
        let stdev = ([1.0f64, 2.0, 3.0, 4.0, 1.0]
            .iter()
            .map(|v| (v - 2.2).powi(2))
            .sum::<f64>()
            / 5.0)
            .sqrt();
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
        assert!((s.avg_users - 2.5 * 2.2 / 1000.0).abs() < 1e-4);
        assert_eq!(s.errors_by_kind.get(&ErrorKind::Connect), Some(&1));
        assert_eq!(s.status_codes, BTreeMap::from([(0, 1), (200, 3), (500, 1)]));
        // First start 0 ms, last start 30 ms ending at 34 ms; the last one waited 4 ms.
        assert!((s.span_s - 0.034).abs() < 1e-6, "{}", s.span_s);
        assert!((s.end_s - 0.034).abs() < 1e-6, "{}", s.end_s);
        assert!((s.attack_s - 0.030).abs() < 1e-6);
        assert!((s.wait_s - 0.004).abs() < 1e-6);
        let ttfb = s.breakdown.ttfb.unwrap();
        assert_eq!(ttfb.count, 4);
        assert!((ttfb.mean_ms - 1.25).abs() < 0.02, "{ttfb:?}");
        assert!(s.breakdown.connect.is_none() && s.breakdown.tls.is_none());
        let count = |h: &HistogramDump| h.buckets.iter().map(|(_, n)| n).sum::<u64>();
        assert_eq!(count(&s.histogram), 5, "one bucket count per request");
        assert_eq!(
            count(&s.failures_histogram),
            1,
            "of which one got no answer"
        );
    }

    #[test]
    fn a_request_that_opened_its_connection_counts_the_opening_when_asked() {
        let first = Sample {
            connect: Some(ConnectTiming {
                tcp: Duration::from_millis(3),
                tls: Some(Duration::from_millis(7)),
            }),
            ..ok(0, 5)
        };
        let w = Duration::from_secs(1);
        let mut plain = Recorder::new(Clock::Sent);
        let mut jmeter = Recorder::new(Clock::Sent).counting_connect(true);
        for r in [&mut plain, &mut jmeter] {
            r.record(&first);
            r.record(&ok(20, 5));
        }
        assert!((plain.summary("p", w).max_ms - 5.0).abs() < 0.01);
        let j = jmeter.summary("j", w);
        assert!((j.max_ms - 15.0).abs() < 0.02, "{}", j.max_ms);
        assert!(
            (j.min_ms - 5.0).abs() < 0.01,
            "only the first request opened one"
        );
    }

    #[test]
    fn the_due_clock_adds_schedule_lag_and_the_sent_clock_does_not() {
        let late = Sample {
            lag: Duration::from_millis(40),
            ..ok(0, 10)
        };
        let mut due = Recorder::new(Clock::Due);
        let mut sent = Recorder::new(Clock::Sent);
        due.record(&late);
        sent.record(&late);
        let w = Duration::from_secs(1);
        assert!((due.summary("d", w).max_ms - 50.0).abs() < 0.1);
        assert!((sent.summary("s", w).max_ms - 10.0).abs() < 0.1);
    }

    #[test]
    fn connections_feed_the_breakdown() {
        let mut r = Recorder::new(Clock::Due);
        r.record(&Sample {
            connect: Some(ConnectTiming {
                tcp: Duration::from_micros(300),
                tls: Some(Duration::from_millis(2)),
            }),
            ..ok(0, 5)
        });
        r.connected(ConnectTiming {
            tcp: Duration::from_micros(500),
            tls: None,
        });
        let b = r.summary("m", Duration::from_secs(1)).breakdown;
        let (c, t) = (b.connect.unwrap(), b.tls.unwrap());
        assert_eq!((c.count, t.count), (2, 1));
        assert!((c.mean_ms - 0.4).abs() < 0.01, "{c:?}");
        assert!((t.max_ms - 2.0).abs() < 0.03, "{t:?}");
    }

    #[test]
    fn merging_equals_recording_in_one() {
        let mut a = Recorder::new(Clock::Due);
        let mut b = Recorder::new(Clock::Due);
        let mut both = Recorder::new(Clock::Due);
        for ms in 1..=50u64 {
            let target = if ms % 2 == 0 { &mut a } else { &mut b };
            target.record(&ok(ms * 3, ms));
            both.record(&ok(ms * 3, ms));
        }
        a.merge(&b);
        let w = Duration::from_secs(1);
        assert_eq!(a.summary("x", w), both.summary("x", w));
    }

    #[test]
    fn a_histogram_gives_back_its_values_or_evenly_spaced_order_statistics() {
        let dump = HistogramDump {
            unit: "us".into(),
            significant_digits: 3,
            buckets: vec![(1000, 3), (2000, 1), (5000, 4)],
        };
        assert_eq!(
            dump.values_ms(100),
            vec![1.0, 1.0, 1.0, 2.0, 5.0, 5.0, 5.0, 5.0]
        );
        // Ranks 1, 3, 5 and 7 of 8.
        assert_eq!(dump.values_ms(4), vec![1.0, 2.0, 5.0, 5.0]);
    }

    #[test]
    fn an_empty_recorder_summarizes_to_zeros() {
        let s = Recorder::default().summary("empty", Duration::ZERO);
        assert_eq!(s.samples, 0);
        assert_eq!(s.mean_ms, 0.0);
        assert_eq!(s.error_pct, 0.0);
        assert_eq!((s.span_s, s.attack_s), (0.0, 0.0));
        assert!(s.histogram.buckets.is_empty());
    }
}
