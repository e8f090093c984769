//! The dissertation's hypothesis tests (`pms_bench::compare`: normality, skewness, then Welch's
//! t-test or the Wilcoxon rank-sum test at α = 0.05) for the comparisons a suite's report makes:
//! HTTP/1.1 against HTTP/2 for the same load (the study's own question), and PMS against every
//! peer that ran the same cell. The samples are the runs' latency histograms.

use pms_bench::compare::{self, Comparison};

use super::results::{CellResult, RunRecord, SuiteResults};
use super::tables::{num, Table};

/// The level of every test.
pub const ALPHA: f64 = 0.05;

/// Most values per sample: above, evenly spaced order statistics of the histogram (the
/// distribution's shape kept, the memory and time bounded).
const MAX_VALUES: usize = 20_000;

/// One comparison to make: a label and the two runs.
struct Pair<'a> {
    what: String,
    a: (&'a str, &'a RunRecord),
    b: (&'a str, &'a RunRecord),
}

/// The HTTP/1.1 cell id of an HTTP/2 one in the same group (`k6/cfg1/h2` → `k6/cfg1/h1`).
fn http1_of(id: &str) -> Option<String> {
    let (group, hop) = id.rsplit_once('/')?;
    let h1 = match hop {
        "h2" => "h1",
        "h2c" => "h1c",
        _ => return None,
    };
    Some(format!("{group}/{h1}"))
}

fn pairs(cells: &[CellResult]) -> Vec<Pair<'_>> {
    let mut out = Vec::new();
    // HTTP/1.1 against HTTP/2, for every system that ran both.
    // (The stress test's latencies are of a load that grows to a failure: no comparison.)
    for h2 in cells.iter().filter(|c| c.part != "stress") {
        let Some(h1) = http1_of(&h2.id).and_then(|id| cells.iter().find(|c| c.id == id)) else {
            continue;
        };
        for b in &h2.runs {
            if let Some(a) = h1.runs.iter().find(|r| r.server == b.server) {
                out.push(Pair {
                    what: format!("{} vs {} ({})", h1.id, h2.id, b.server),
                    a: (hop_label(h1), a),
                    b: (hop_label(h2), b),
                });
            }
        }
    }
    // PMS against each peer on the same cell.
    for c in cells {
        let Some(pms) = c.runs.iter().find(|r| r.server == "pms") else {
            continue;
        };
        for peer in c.runs.iter().filter(|r| r.server != "pms") {
            out.push(Pair {
                what: format!("{}: pms vs {}", c.id, peer.server),
                a: ("pms", pms),
                b: (peer.server.as_str(), peer),
            });
        }
    }
    out
}

fn hop_label(c: &CellResult) -> &str {
    c.id.rsplit_once('/').map_or(c.id.as_str(), |(_, hop)| hop)
}

fn sample(r: &RunRecord) -> Option<Vec<f64>> {
    Some(r.measured()?.histogram.values_ms(MAX_VALUES))
}

fn normal(c: &Comparison, which: &compare::Describe) -> &'static str {
    if which.normality.result.p < c.alpha {
        "no"
    } else {
        "yes"
    }
}

/// The table of every comparison the results allow; `None` when there is none.
pub fn table(res: &SuiteResults) -> Option<Table> {
    table_of(&res.cells)
}

fn table_of(cells: &[CellResult]) -> Option<Table> {
    let mut rows = Vec::new();
    for p in pairs(cells) {
        let (Some(a), Some(b)) = (sample(p.a.1), sample(p.b.1)) else {
            continue;
        };
        let mut row = vec![p.what];
        match compare::compare(&a, &b, ALPHA, "ms") {
            Ok(c) => {
                let verdict = if !c.different {
                    "tie: no significant difference".to_owned()
                } else {
                    let (fast, slow) = if c.a_faster {
                        (p.a.0, p.b.0)
                    } else {
                        (p.b.0, p.a.0)
                    };
                    format!("{fast} faster than {slow}")
                };
                row.extend([
                    format!("{} / {}", c.a.n, c.b.n),
                    format!(
                        "{} / {}",
                        num(Some(c.a.median), 3),
                        num(Some(c.b.median), 3)
                    ),
                    format!("{} / {}", normal(&c, &c.a), normal(&c, &c.b)),
                    format!(
                        "{} / {}",
                        num(Some(c.a.skewness), 2),
                        num(Some(c.b.skewness), 2)
                    ),
                    if c.test == "welch-t" {
                        "Welch's t".into()
                    } else {
                        "Wilcoxon rank-sum".into()
                    },
                    format!("{:.2e}", c.result.p),
                    format!(
                        "{} [{} … {}]",
                        num(Some(c.shift.estimate), 3),
                        num(Some(c.shift.low), 3),
                        num(Some(c.shift.high), 3)
                    ),
                    verdict,
                ]);
            }
            Err(e) => {
                row.push(format!("not testable: {e}"));
                row.resize(9, String::new());
            }
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return None;
    }
    let mut t = super::tables::table(
        "Hypothesis tests",
        &format!(
            "The dissertation's procedure on each pair of runs' latencies (ms): normality of each sample (Lilliefors; Shapiro–Wilk under 30 values) and its skewness; both normal and |skewness| < 1: Welch's t-test, otherwise the unpaired Wilcoxon rank-sum test; α = {ALPHA}. The shift is Hodges–Lehmann's, first minus second, with its {:.0} % interval. Samples come from the latency histograms (3 significant digits); above {MAX_VALUES} values, that many evenly spaced order statistics.",
            (1.0 - ALPHA) * 100.0
        ),
        &[
            "Comparison (first vs second)",
            "n",
            "Median (ms)",
            "Normal?",
            "Skewness",
            "Test",
            "p",
            "Shift (ms) [CI]",
            "Verdict",
        ],
    );
    t.rows = rows;
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    use pms_bench::collect::StopReason;
    use pms_bench::stats::{Recorder, Sample};

    use crate::results::RunOutput;

    /// A run of `server` whose latencies are `ms` (each 20 times, 1 ms apart in time).
    fn run(server: &str, ms: &[u64]) -> RunRecord {
        let mut r = Recorder::default();
        for (i, v) in ms.iter().cycle().take(ms.len() * 20).enumerate() {
            r.record(&Sample {
                due: Duration::from_millis(i as u64),
                lag: Duration::ZERO,
                ttfb: None,
                elapsed: Duration::from_millis(*v),
                connect: None,
                sent: 0,
                received: 0,
                status: Some(200),
                error: None,
            });
        }
        let mut record = RunRecord::new(server);
        record.output = Some(RunOutput {
            labels: vec![r.summary("measured", Duration::from_secs(1))],
            stop: StopReason::Completed,
            ended_s: 1.0,
            schedule: None,
            timeline: Vec::new(),
            watch: None,
        });
        record
    }

    fn cell(id: &str, runs: Vec<RunRecord>) -> CellResult {
        CellResult {
            id: id.into(),
            part: id.split('/').next().unwrap_or_default().into(),
            name: id.into(),
            params: Vec::new(),
            runs,
        }
    }

    #[test]
    fn protocols_and_peers_are_tested_and_the_faster_side_named() {
        let cells = vec![
            cell("k6/cfg1/h1", vec![run("pms", &[2, 3, 4])]),
            cell("k6/cfg1/h2", vec![run("pms", &[6, 7, 9])]),
            cell(
                "proxy/x",
                vec![run("pms", &[2, 3, 4]), run("nginx", &[2, 3, 4])],
            ),
        ];
        let t = table_of(&cells).expect("a table");
        assert_eq!(t.rows.len(), 2, "{:?}", t.rows);
        let verdict = |row: &[String]| row.last().cloned().unwrap_or_default();
        assert_eq!(t.rows[0][0], "k6/cfg1/h1 vs k6/cfg1/h2 (pms)");
        assert_eq!(verdict(&t.rows[0]), "h1 faster than h2");
        assert_eq!(t.rows[1][0], "proxy/x: pms vs nginx");
        assert!(verdict(&t.rows[1]).starts_with("tie"), "{:?}", t.rows[1]);
        assert!(t.rows.iter().all(|r| r.len() == t.headers.len()));
    }

    #[test]
    fn an_http2_cell_pairs_with_its_http1_sibling() {
        assert_eq!(http1_of("k6/cfg1/h2").as_deref(), Some("k6/cfg1/h1"));
        assert_eq!(
            http1_of("jmeter/cfg2/h2c").as_deref(),
            Some("jmeter/cfg2/h1c")
        );
        assert_eq!(http1_of("k6/cfg1/h1"), None);
        assert_eq!(http1_of("startup/gateway"), None);
    }
}
