//! The column sets of the reports PMS is compared with, filled from one run's statistics, each
//! with that tool's own definitions where they differ:
//! - `jmeter`: JMeter's Aggregate Report (the dissertation's tables take Average, Max, Median,
//!   Min, 90 % and 95 % Line and Throughput from it).
//! - `ballerina`: the WSO2/Ballerina summary CSV columns; throughput is samples over the span
//!   the samples cover (first start → last end), as their statistics step computed it.
//! - `k6`: k6's end-of-test summary; the request rate is requests over the whole run time.
//! - `vegeta`: `vegeta report` text with its histogram; throughput is successes over attack +
//!   wait, and requests that got no response count as status 0.

use std::fmt::Write as _;
use std::time::Duration;

use crate::stats::Summary;

/// A report layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// PMS's own table.
    Text,
    /// The whole result as JSON.
    Json,
    /// JMeter Aggregate Report.
    Jmeter,
    /// WSO2/Ballerina performance summary.
    Ballerina,
    /// k6 end-of-test summary.
    K6,
    /// `vegeta report` text and histogram.
    Vegeta,
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "text" => Self::Text,
            "json" => Self::Json,
            "jmeter" => Self::Jmeter,
            "ballerina" => Self::Ballerina,
            "k6" => Self::K6,
            "vegeta" => Self::Vegeta,
            _ => {
                return Err(format!(
                    "{s:?}: expected text, json, jmeter, ballerina, k6 or vegeta"
                ))
            }
        })
    }
}

/// vegeta's histogram buckets in the published study.
pub const VEGETA_BUCKETS: &str = "0,100ms,200ms,300ms,500ms,1s,2s,3s,5s";

/// Parses `--buckets 0,100ms,1s`: increasing durations.
///
/// # Errors
/// A message naming the bad entry.
pub fn parse_buckets(text: &str) -> Result<Vec<Duration>, String> {
    let mut out: Vec<Duration> = Vec::new();
    for part in text.split(',') {
        let d = if part.trim() == "0" {
            Duration::ZERO
        } else {
            crate::duration::parse(part)?
        };
        if out.last().is_some_and(|last| *last >= d) {
            return Err(format!("{text:?}: buckets must increase"));
        }
        out.push(d);
    }
    Ok(out)
}

/// k6's test run time, which its `http_reqs` rate divides by: an iteration (a request, then
/// the think time) under way when the run's time is up is not cut off but finishes, so the
/// run lasts until the last answer plus one think time, or its planned length if that is
/// longer. `ended_s` is when the run's time was up; `think_s` the think time.
pub fn k6_run_s(ended_s: f64, measured: &Summary, think_s: f64) -> f64 {
    if measured.samples == 0 {
        ended_s
    } else {
        ended_s.max(measured.end_s + think_s)
    }
}

/// What a report needs besides the per-label statistics.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// Labels, the measured one first.
    pub labels: &'a [Summary],
    /// The whole run time as k6 counts it, seconds ([`k6_run_s`]; its rate divides by it).
    pub run_s: f64,
    /// Most users active at once (k6's `vus_max`).
    pub max_active: usize,
    /// vegeta histogram bucket bounds.
    pub buckets: &'a [Duration],
}

/// Renders `view` in the `format` layout (`Text` and `Json` are the caller's).
pub fn render(format: Format, view: &View<'_>) -> String {
    match format {
        Format::Text | Format::Json => crate::report::table(view.labels),
        Format::Jmeter => jmeter(view.labels),
        Format::Ballerina => ballerina(view.labels),
        Format::K6 => k6(view),
        Format::Vegeta => vegeta(view),
    }
}

fn p(s: &Summary, q: f64) -> f64 {
    s.percentile(q).unwrap_or(0.0)
}

/// Rounds half to even on two decimals, as the WSO2 statistics step printed its numbers.
fn two(x: f64) -> String {
    let scaled = x * 100.0;
    let r = scaled.round();
    let r = if (scaled - scaled.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - scaled.signum()
    } else {
        r
    };
    let v = r / 100.0;
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').to_owned()
    }
}

fn jmeter(labels: &[Summary]) -> String {
    let mut out = String::from(
        "Label,# Samples,Average,Median,90% Line,95% Line,99% Line,Min,Max,Error %,Throughput,Received KB/sec,Sent KB/sec,Std. Dev.\n",
    );
    for s in labels {
        let _ = writeln!(
            out,
            "{},{},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.2}%,{:.1}/sec,{:.2},{:.2},{:.2}",
            s.label,
            s.samples,
            s.mean_ms,
            p(s, 50.0),
            p(s, 90.0),
            p(s, 95.0),
            p(s, 99.0),
            s.min_ms,
            s.max_ms,
            s.error_pct,
            s.throughput,
            s.received_kb_s,
            s.sent_kb_s,
            s.stdev_ms
        );
    }
    out
}

fn ballerina(labels: &[Summary]) -> String {
    let mut out = String::from(
        "Label,# Samples,Error Count,Error %,Throughput (Requests/sec),Average Response Time (ms),\
         Average Users in the System,Standard Deviation of Response Time (ms),\
         Minimum Response Time (ms),Maximum Response Time (ms),\
         75th Percentile of Response Time (ms),90th Percentile of Response Time (ms),\
         95th Percentile of Response Time (ms),98th Percentile of Response Time (ms),\
         99th Percentile of Response Time (ms),99.9th Percentile of Response Time (ms),\
         Received (KB/sec),Sent (KB/sec)\n",
    );
    for s in labels {
        // Their throughput and KB/s divide by the span the samples cover.
        let span = s.span_s.max(f64::MIN_POSITIVE);
        let throughput = s.samples as f64 / span;
        let kb = |bytes: u64| bytes as f64 / 1024.0 / span;
        let cols = [
            s.samples.to_string(),
            s.errors.to_string(),
            two(s.error_pct),
            two(throughput),
            two(s.mean_ms),
            format!("{:.0}", throughput * s.mean_ms / 1000.0),
            two(s.stdev_ms),
            two(s.min_ms),
            two(s.max_ms),
            two(p(s, 75.0)),
            two(p(s, 90.0)),
            two(p(s, 95.0)),
            two(p(s, 98.0)),
            two(p(s, 99.0)),
            two(p(s, 99.9)),
            two(kb(s.received_bytes)),
            two(kb(s.sent_bytes)),
        ];
        let _ = writeln!(out, "{},{}", s.label, cols.join(","));
    }
    out
}

fn k6(view: &View<'_>) -> String {
    let mut out = String::new();
    let run = view.run_s.max(f64::MIN_POSITIVE);
    for s in view.labels {
        let requests = s.samples;
        let failed = s.errors;
        let _ = writeln!(out, "  [{}]", s.label);
        let line = |out: &mut String, name: &str, value: String| {
            let dots = ".".repeat(32usize.saturating_sub(name.len()));
            let _ = writeln!(out, "     {name}{dots}: {value}");
        };
        line(
            &mut out,
            "checks",
            format!(
                "{:.2}% ✓ {} ✗ {}",
                100.0 - s.error_pct,
                s.successes(),
                failed
            ),
        );
        for (name, total) in [
            ("data_received", s.received_bytes),
            ("data_sent", s.sent_bytes),
        ] {
            let total = total as f64;
            line(
                &mut out,
                name,
                format!("{} {}/s", bytes(total), bytes(total / run)),
            );
        }
        line(
            &mut out,
            "http_req_duration",
            format!(
                "avg={} min={} med={} max={} p(90)={} p(95)={} p(99)={} p(99.99)={}",
                go(s.mean_ms),
                go(s.min_ms),
                go(p(s, 50.0)),
                go(s.max_ms),
                go(p(s, 90.0)),
                go(p(s, 95.0)),
                go(p(s, 99.0)),
                go(p(s, 99.99))
            ),
        );
        line(
            &mut out,
            "http_req_failed",
            format!("{:.2}% ✓ {failed} ✗ {}", s.error_pct, s.successes()),
        );
        line(
            &mut out,
            "http_reqs",
            format!("{requests} {:.6}/s", requests as f64 / run),
        );
        line(&mut out, "vus_max", view.max_active.to_string());
    }
    out
}

/// Bytes as k6 prints them (decimal kB/MB).
fn bytes(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}

/// A duration in ms the way Go prints a rounded `time.Duration`: `812µs`, `202.073ms`, `2.034s`.
fn go(ms: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    };
    if ms <= 0.0 {
        "0s".into()
    } else if ms < 1.0 {
        format!("{}µs", trim(format!("{:.3}", ms * 1000.0)))
    } else if ms < 1000.0 {
        format!("{}ms", trim(format!("{ms:.3}")))
    } else {
        format!("{}s", trim(format!("{:.3}", ms / 1000.0)))
    }
}

fn vegeta(view: &View<'_>) -> String {
    let mut out = String::new();
    for s in view.labels {
        let _ = writeln!(out, "[{}]", s.label);
        // Histogram: every request, answered or not, by the time it took.
        let total = s.samples.max(1) as f64;
        let _ = writeln!(out, "Bucket           #     %       Histogram");
        for (i, low) in view.buckets.iter().enumerate() {
            let high = view.buckets.get(i + 1);
            let lo = u64::try_from(low.as_micros()).unwrap_or(u64::MAX);
            let hi = high.map_or(u64::MAX, |h| {
                u64::try_from(h.as_micros()).unwrap_or(u64::MAX)
            });
            let n = s.histogram.count_between(lo, hi);
            let ratio = n as f64 / total;
            let range = format!(
                "[{}, {}]",
                go_d(*low),
                high.map_or_else(|| "+Inf".to_owned(), |h| go_d(*h))
            );
            let _ = writeln!(
                out,
                "{range:<16} {n:<5} {:<7} {}",
                format!("{:.2}%", ratio * 100.0),
                "#".repeat((ratio * 75.0) as usize)
            );
        }
        let attack = s.attack_s;
        let wait = s.wait_s;
        let rate = if attack > 0.0 {
            s.samples as f64 / attack
        } else {
            0.0
        };
        let throughput = s.successes() as f64 / (attack + wait).max(f64::MIN_POSITIVE);
        let _ = writeln!(
            out,
            "Requests      [total, rate, throughput]         {}, {rate:.2}, {throughput:.2}",
            s.samples
        );
        let _ = writeln!(
            out,
            "Duration      [total, attack, wait]             {}, {}, {}",
            go((attack + wait) * 1000.0),
            go(attack * 1000.0),
            go(wait * 1000.0)
        );
        let _ = writeln!(
            out,
            "Latencies     [min, mean, 50, 90, 95, 99, max]  {}, {}, {}, {}, {}, {}, {}",
            go(s.min_ms),
            go(s.mean_ms),
            go(p(s, 50.0)),
            go(p(s, 90.0)),
            go(p(s, 95.0)),
            go(p(s, 99.0)),
            go(s.max_ms)
        );
        let mean = |b: u64| b as f64 / s.samples.max(1) as f64;
        let _ = writeln!(
            out,
            "Bytes In      [total, mean]                     {}, {:.2}",
            s.received_bytes,
            mean(s.received_bytes)
        );
        let _ = writeln!(
            out,
            "Bytes Out     [total, mean]                     {}, {:.2}",
            s.sent_bytes,
            mean(s.sent_bytes)
        );
        let _ = writeln!(
            out,
            "Success       [ratio]                           {:.2}%",
            100.0 - s.error_pct
        );
        let codes: Vec<String> = s
            .status_codes
            .iter()
            .map(|(c, n)| format!("{c}:{n}"))
            .collect();
        let _ = writeln!(
            out,
            "Status Codes  [code:count]                      {}",
            codes.join("  ")
        );
        let _ = writeln!(out, "Error Set:");
        for (kind, n) in &s.errors_by_kind {
            let _ = writeln!(out, "{} ({n})", kind.name());
        }
    }
    out.push_str(
        "(Bytes count heads and bodies; vegeta counts bodies only. Requests that got no \
         response count in the histogram and the latencies with the time until their failure, \
         as vegeta counts them.)\n",
    );
    out
}

fn go_d(d: Duration) -> String {
    if d.is_zero() {
        "0s".into()
    } else {
        go(d.as_secs_f64() * 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Recorder, Sample};

    fn summary() -> Summary {
        let mut r = Recorder::default();
        for (i, ms) in [150u64, 250, 250, 450, 1200].iter().enumerate() {
            r.record(&Sample {
                due: Duration::from_millis(i as u64 * 20),
                lag: Duration::ZERO,
                ttfb: Some(Duration::from_millis(*ms)),
                elapsed: Duration::from_millis(*ms),
                connect: None,
                sent: 10,
                received: 20,
                status: Some(200),
                error: None,
            });
        }
        r.record(&Sample {
            due: Duration::from_millis(100),
            lag: Duration::ZERO,
            ttfb: None,
            elapsed: Duration::from_secs(5),
            connect: None,
            sent: 10,
            received: 0,
            status: None,
            error: Some(crate::stats::ErrorKind::Timeout),
        });
        r.summary("measured", Duration::from_secs(1))
    }

    #[test]
    fn go_durations_print_like_go() {
        assert_eq!(go(202.073), "202.073ms");
        assert_eq!(go(5000.0), "5s");
        assert_eq!(go(2034.0), "2.034s");
        assert_eq!(go(0.812), "812µs");
        assert_eq!(go_d(Duration::from_millis(100)), "100ms");
    }

    #[test]
    fn half_even_rounding_on_two_decimals() {
        assert_eq!(two(29.0), "29");
        assert_eq!(two(0.125), "0.12");
        assert_eq!(two(0.375), "0.38");
        assert_eq!(two(17618.774), "17618.77");
    }

    #[test]
    fn vegeta_buckets_hold_responses_and_failures() {
        let s = summary();
        let buckets = parse_buckets(VEGETA_BUCKETS).unwrap();
        let view = View {
            labels: std::slice::from_ref(&s),
            run_s: 1.0,
            max_active: 1,
            buckets: &buckets,
        };
        let text = render(Format::Vegeta, &view);
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix} in {text}"))
                .to_owned()
        };
        assert!(line("[100ms, 200ms]").contains(" 1 "), "{text}");
        assert!(line("[200ms, 300ms]").contains(" 2 "), "{text}");
        assert!(line("[300ms, 500ms]").contains(" 1 "), "{text}");
        assert!(line("[1s, 2s]").contains(" 1 "), "{text}");
        assert!(line("[5s, +Inf]").contains(" 1 "), "the timeout: {text}");
        assert!(line("Status Codes").ends_with("0:1  200:5"), "{text}");
        assert!(line("Success").ends_with("83.33%"), "{text}");
        // attack: due 0 … 100 ms; wait: the last one started took 5 s.
        assert!(line("Duration").ends_with("5.1s, 100ms, 5s"), "{text}");
        assert!(line("Requests").contains("6, 60.00, 0.98"), "{text}");
        assert!(parse_buckets("0,1s,500ms").is_err());
    }

    #[test]
    fn ballerina_divides_by_the_span_and_k6_by_the_run() {
        let s = summary();
        let csv = ballerina(std::slice::from_ref(&s));
        let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        assert_eq!(row[0], "measured");
        assert_eq!(row[1], "6");
        assert_eq!(row[2], "1");
        // 6 samples over 0 → 5.1 s.
        assert_eq!(row[4], two(6.0 / 5.1));
        let view = View {
            labels: std::slice::from_ref(&s),
            run_s: 10.0,
            max_active: 7,
            buckets: &[],
        };
        let k = k6(&view);
        assert!(k.contains("http_reqs"), "{k}");
        assert!(k.contains(": 6 0.600000/s"), "{k}");
        assert!(k.contains("vus_max"), "{k}");
        let j = jmeter(std::slice::from_ref(&s));
        assert!(j.lines().nth(1).unwrap().starts_with("measured,6,"), "{j}");
    }

    #[test]
    fn k6s_run_time_lets_the_last_iterations_finish_their_sleep() {
        let mut s = summary();
        s.end_s = 30.2;
        assert!((k6_run_s(30.0, &s, 1.0) - 31.2).abs() < 1e-9);
        s.end_s = 28.5;
        assert!(
            (k6_run_s(30.0, &s, 1.0) - 30.0).abs() < 1e-9,
            "never shorter than planned"
        );
        s.samples = 0;
        assert!((k6_run_s(30.0, &s, 1.0) - 30.0).abs() < 1e-9);
    }
}
