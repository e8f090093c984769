//! The named figures a suite reports and compares with the published ones: what each means, its
//! unit, and which way is better. Published rows and PMS runs speak these names, so the
//! side-by-side table is a join on them.

use std::collections::BTreeMap;

use pms_bench::stats::Summary;

/// Which way a metric improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// More is better (throughput, users).
    Higher,
    /// Less is better (latency, errors, memory, start-up).
    Lower,
    /// A fact, not a score (response sizes).
    Neither,
}

/// Name, label, unit and direction of every known metric.
const CATALOGUE: &[(&str, &str, &str, Better)] = &[
    ("error_pct", "Error %", "%", Better::Lower),
    ("throughput", "Throughput", "req/s", Better::Higher),
    ("mean_ms", "Mean", "ms", Better::Lower),
    ("stdev_ms", "Standard deviation", "ms", Better::Lower),
    ("min_ms", "Min", "ms", Better::Lower),
    ("max_ms", "Max", "ms", Better::Lower),
    ("median_ms", "Median", "ms", Better::Lower),
    ("p90_ms", "p90", "ms", Better::Lower),
    ("p95_ms", "p95", "ms", Better::Lower),
    ("p99_ms", "p99", "ms", Better::Lower),
    ("success_pct", "Success", "%", Better::Higher),
    ("received_kb_s", "Received", "KB/s", Better::Higher),
    ("avg_bytes", "Average bytes", "B", Better::Neither),
    (
        "rss_mb",
        "RSS in the measured window (mean)",
        "MB",
        Better::Lower,
    ),
    (
        "max_users",
        "Simultaneous users at the first failure",
        "users",
        Better::Higher,
    ),
    (
        "startup_s",
        "Start-up, exec to ready (mean)",
        "s",
        Better::Lower,
    ),
    (
        "startup_line_s",
        "Start-up, exec to the service's started line (mean)",
        "s",
        Better::Lower,
    ),
    ("load_ms", "Load time", "ms", Better::Lower),
    ("connect_ms", "Connect time", "ms", Better::Lower),
    ("latency_ms", "Latency (to first byte)", "ms", Better::Lower),
    ("header_bytes", "Header bytes", "B", Better::Neither),
    ("body_bytes", "Body bytes", "B", Better::Neither),
    ("sent_bytes", "Sent bytes", "B", Better::Neither),
    (
        "transactions",
        "Transactions measured",
        "tx",
        Better::Neither,
    ),
    (
        "cycles_per_s",
        "Entrance→exit cycles",
        "cycles/s",
        Better::Higher,
    ),
    (
        "priced_pct",
        "Exits answered with their price",
        "%",
        Better::Higher,
    ),
    (
        "settled_ms",
        "Every invoice issued, after the load",
        "ms",
        Better::Lower,
    ),
    ("quote_mean_ms", "Quote mean", "ms", Better::Lower),
    ("quote_median_ms", "Quote median", "ms", Better::Lower),
    ("quote_p99_ms", "Quote p99", "ms", Better::Lower),
    ("quote_max_ms", "Quote max", "ms", Better::Lower),
    ("display_mean_ms", "Display delay mean", "ms", Better::Lower),
    (
        "display_median_ms",
        "Display delay median",
        "ms",
        Better::Lower,
    ),
    ("display_p99_ms", "Display delay p99", "ms", Better::Lower),
    ("display_max_ms", "Display delay max", "ms", Better::Lower),
];

/// A metric's label, unit and direction; `None` for an unknown name.
pub fn describe(name: &str) -> Option<(&'static str, &'static str, Better)> {
    CATALOGUE
        .iter()
        .find(|(n, ..)| *n == name)
        .map(|(_, label, unit, better)| (*label, *unit, *better))
}

/// The latency figures of a measured summary, under their catalogue names.
pub fn of_summary(s: &Summary) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: f64| {
        m.insert(k.to_owned(), v);
    };
    put("error_pct", s.error_pct);
    put("throughput", s.throughput);
    put("mean_ms", s.mean_ms);
    put("stdev_ms", s.stdev_ms);
    put("min_ms", s.min_ms);
    put("max_ms", s.max_ms);
    put("received_kb_s", s.received_kb_s);
    put("avg_bytes", s.avg_bytes);
    put(
        "success_pct",
        if s.samples == 0 {
            0.0
        } else {
            s.successes() as f64 * 100.0 / s.samples as f64
        },
    );
    for (name, p) in [
        ("median_ms", 50.0),
        ("p90_ms", 90.0),
        ("p95_ms", 95.0),
        ("p99_ms", 99.0),
    ] {
        if let Some(v) = s.percentile(p) {
            put(name, v);
        }
    }
    m
}

/// PMS's figure over the published one, turned so that above 1 always means PMS did better.
pub fn advantage(name: &str, pms: f64, published: f64) -> Option<f64> {
    let (_, _, better) = describe(name)?;
    let ratio = match better {
        Better::Higher if published > 0.0 => pms / published,
        Better::Lower if pms > 0.0 => published / pms,
        Better::Higher | Better::Lower | Better::Neither => return None,
    };
    ratio.is_finite().then_some(ratio)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advantage_is_above_one_when_pms_does_better_either_way() {
        assert_eq!(advantage("throughput", 200.0, 100.0), Some(2.0));
        assert_eq!(advantage("mean_ms", 5.0, 10.0), Some(2.0));
        assert_eq!(advantage("mean_ms", 20.0, 10.0), Some(0.5));
        assert_eq!(advantage("error_pct", 0.0, 1.0), None, "no ratio to zero");
        assert_eq!(advantage("nonsense", 1.0, 1.0), None);
        assert_eq!(
            advantage("body_bytes", 100.0, 200.0),
            None,
            "sizes are facts"
        );
    }
}
