//! Repeated runs of a cell: the order of each round (every system once, the order rotating, so
//! that no system always goes first), the folding of a system's rounds into one record, and the
//! spread the report shows — each figure's median and range, and each peer's throughput ratio
//! with its range over the rounds, a tie when that range holds 1.

use super::results::{CellResult, Round, RunRecord, Status, SuiteResults};
use super::tables::{num, Table};

/// `(round, position, system)` for `systems` systems over `rounds` rounds: round r runs the
/// systems starting from system r (mod the count).
pub fn order(systems: usize, rounds: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..rounds.max(1)).flat_map(move |r| {
        (0..systems).map(move |position| (r, position, (position + r) % systems.max(1)))
    })
}

/// One system's rounds as one record: the round with the median throughput (of those that
/// worked; the first round when none has a throughput), carrying every round's figures.
pub fn fold(mut runs: Vec<(usize, RunRecord)>) -> RunRecord {
    if runs.len() <= 1 {
        return runs
            .pop()
            .map(|(_, r)| r)
            .unwrap_or_else(|| RunRecord::new("?"));
    }
    let rounds: Vec<Round> = runs
        .iter()
        .map(|(position, r)| Round {
            position: *position,
            ok: r.status == Status::Ok,
            metrics: r.metrics.clone(),
        })
        .collect();
    let mut ranked: Vec<(f64, usize)> = runs
        .iter()
        .enumerate()
        .filter(|(_, (_, r))| r.status == Status::Ok)
        .filter_map(|(i, (_, r))| r.metrics.get("throughput").map(|t| (*t, i)))
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    let pick = ranked.get(ranked.len() / 2).map_or(0, |(_, i)| *i);
    let mut chosen = runs.swap_remove(pick).1;
    chosen.rounds = rounds;
    chosen
}

/// Median and range of `values` (not empty).
fn spread(values: &mut [f64]) -> Option<(f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    Some((median, values[0], values[n - 1]))
}

fn figure(rounds: &[Round], key: &str) -> String {
    let mut v: Vec<f64> = rounds
        .iter()
        .filter(|r| r.ok)
        .filter_map(|r| r.metrics.get(key).copied())
        .collect();
    match spread(&mut v) {
        Some((m, lo, hi)) => format!(
            "{} ({}–{})",
            num(Some(m), 2),
            num(Some(lo), 2),
            num(Some(hi), 2)
        ),
        None => "—".into(),
    }
}

/// PMS's throughput over `peer`'s, round by round (paired: the same round ran both).
fn ratio(pms: &RunRecord, peer: &RunRecord) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = pms
        .rounds
        .iter()
        .zip(&peer.rounds)
        .filter(|(a, b)| a.ok && b.ok)
        .filter_map(|(a, b)| {
            let (x, y) = (a.metrics.get("throughput")?, b.metrics.get("throughput")?);
            (*y > 0.0).then(|| x / y)
        })
        .collect();
    spread(&mut v)
}

fn rows_of(c: &CellResult) -> Vec<Vec<String>> {
    let pms = c.runs.iter().find(|r| r.server == "pms");
    c.runs
        .iter()
        .filter(|r| r.rounds.len() > 1)
        .map(|r| {
            let (vs, verdict) = match (pms, r.server == "pms") {
                (Some(p), false) => match ratio(p, r) {
                    Some((m, lo, hi)) => (
                        format!("{m:.2}× ({lo:.2}–{hi:.2})"),
                        if lo <= 1.0 && 1.0 <= hi {
                            "tie: inside the noise".to_owned()
                        } else if lo > 1.0 {
                            "PMS ahead in every round".to_owned()
                        } else {
                            format!("{} ahead in every round", r.server)
                        },
                    ),
                    None => ("—".into(), String::new()),
                },
                _ => ("—".into(), String::new()),
            };
            vec![
                c.id.clone(),
                r.server.clone(),
                r.rounds.len().to_string(),
                figure(&r.rounds, "throughput"),
                figure(&r.rounds, "mean_ms"),
                figure(&r.rounds, "p99_ms"),
                vs,
                verdict,
            ]
        })
        .collect()
}

/// The spread over the rounds, when the suite ran more than one.
pub fn table(res: &SuiteResults) -> Option<Table> {
    let rows: Vec<Vec<String>> = res.cells.iter().flat_map(rows_of).collect();
    if rows.is_empty() {
        return None;
    }
    let mut t = super::tables::table(
        "Rounds: median and range",
        &format!(
            "Each cell ran {} rounds, every system once per round in a rotating order (no system always first); the tables above show each system's round with the median throughput. Here: each figure's median and (min–max) over the rounds, and PMS's throughput over the peer's, taken within each round (same minutes, same machine state), with its range: a range that holds 1× is a tie, a difference inside the noise.",
            res.repeats
        ),
        &[
            "Cell",
            "System",
            "Rounds",
            "Throughput (req/s)",
            "Mean (ms)",
            "p99 (ms)",
            "PMS ÷ this system",
            "Verdict",
        ],
    );
    t.rows = rows;
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_runs_every_system_once_starting_from_another() {
        let got: Vec<(usize, usize, usize)> = order(3, 3).collect();
        let firsts: Vec<usize> = got
            .iter()
            .filter(|(_, p, _)| *p == 0)
            .map(|t| t.2)
            .collect();
        assert_eq!(firsts, vec![0, 1, 2], "each system goes first once");
        for r in 0..3 {
            let mut systems: Vec<usize> = got.iter().filter(|t| t.0 == r).map(|t| t.2).collect();
            systems.sort_unstable();
            assert_eq!(systems, vec![0, 1, 2]);
        }
        assert_eq!(order(2, 1).count(), 2);
    }

    fn record(server: &str, throughput: f64) -> RunRecord {
        let mut r = RunRecord::new(server);
        r.metrics.insert("throughput".into(), throughput);
        r
    }

    #[test]
    fn the_median_round_stands_for_the_system_and_a_ratio_range_across_one_is_a_tie() {
        let pms = fold(vec![
            (0, record("pms", 90.0)),
            (1, record("pms", 110.0)),
            (2, record("pms", 100.0)),
        ]);
        assert_eq!(pms.metrics["throughput"], 100.0);
        assert_eq!(pms.rounds.len(), 3);
        let close = fold(vec![
            (1, record("nginx", 95.0)),
            (0, record("nginx", 105.0)),
            (1, record("nginx", 100.0)),
        ]);
        let behind = fold(vec![
            (1, record("haproxy", 50.0)),
            (0, record("haproxy", 55.0)),
            (1, record("haproxy", 52.0)),
        ]);
        let cell = CellResult {
            id: "c".into(),
            part: "proxy".into(),
            name: "c".into(),
            params: Vec::new(),
            runs: vec![pms, close, behind],
        };
        let rows = rows_of(&cell);
        assert_eq!(rows.len(), 3);
        assert!(rows[1][7].starts_with("tie"), "{:?}", rows[1]);
        assert_eq!(rows[2][7], "PMS ahead in every round", "{:?}", rows[2]);
        assert_eq!(rows[0][3], "100.00 (90.00–110.00)");
    }
}
