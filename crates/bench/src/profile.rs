//! Load over time: a starting value and stages (`--stage 30s:200`), each moving the value linearly
//! to its target over its duration, as k6's `stages` do; the last value holds after the stages
//! end. The closed model reads it as the number of users, the open model as requests per second.
//!
//! Both models need exact answers, not polling: [`Profile::active`] gives the intervals in which
//! user `i` is wanted (`value(t) > i`), and [`Profile::due`] the time at which request `k` is
//! due (the `k`-th unit of the integrated rate), so ramps cost nothing while they run.

use std::time::Duration;

/// One stage: reach `target` linearly over `duration`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Stage {
    /// How long the ramp takes (zero: a step).
    #[serde(serialize_with = "secs")]
    pub duration: Duration,
    /// Users or requests per second at the end of the stage.
    pub target: f64,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Stage {
    /// Parses `DURATION:TARGET`, e.g. `30s:200` or `1m:50.5`.
    ///
    /// # Errors
    /// A message naming what did not parse.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (d, t) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?}: expected DURATION:TARGET, e.g. 30s:200"))?;
        let duration = crate::duration::parse(d)?;
        let target: f64 = t
            .trim()
            .parse()
            .map_err(|_| format!("{text:?}: target {t:?} is not a number"))?;
        if !(target.is_finite() && target >= 0.0) {
            return Err(format!("{text:?}: target must be a number >= 0"));
        }
        Ok(Self { duration, target })
    }
}

/// A value that changes over a run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Profile {
    /// Value at the run's start.
    pub start: f64,
    /// Stages in order.
    pub stages: Vec<Stage>,
}

/// One linear piece: from `t0` to `t1` (seconds), `v0` to `v1`, with `n0` units before it.
#[derive(Debug, Clone, Copy)]
struct Piece {
    t0: f64,
    t1: f64,
    v0: f64,
    v1: f64,
    n0: f64,
}

impl Profile {
    /// The same value all the time.
    pub fn constant(value: f64) -> Self {
        Self {
            start: value,
            stages: Vec::new(),
        }
    }

    /// A linear ramp from 0 to `value` over `ramp`, then `value` (JMeter's ramp-up).
    pub fn ramp(value: f64, ramp: Duration) -> Self {
        if ramp.is_zero() {
            return Self::constant(value);
        }
        Self {
            start: 0.0,
            stages: vec![Stage {
                duration: ramp,
                target: value,
            }],
        }
    }

    /// The stages' total duration.
    pub fn stages_duration(&self) -> Duration {
        self.stages.iter().map(|s| s.duration).sum()
    }

    /// The largest value the profile reaches.
    pub fn max(&self) -> f64 {
        self.stages
            .iter()
            .map(|s| s.target)
            .fold(self.start, f64::max)
    }

    /// The value at `t` from the start.
    pub fn value_at(&self, t: Duration) -> f64 {
        let t = t.as_secs_f64();
        for p in self.pieces(f64::INFINITY) {
            if t < p.t1 {
                return p.value(t);
            }
        }
        self.last()
    }

    fn last(&self) -> f64 {
        self.stages.last().map_or(self.start, |s| s.target)
    }

    /// The linear pieces up to `end` seconds, the last value held after the stages.
    fn pieces(&self, end: f64) -> Vec<Piece> {
        let mut out = Vec::with_capacity(self.stages.len() + 1);
        let (mut t, mut v, mut n) = (0.0, self.start, 0.0);
        for s in &self.stages {
            let d = s.duration.as_secs_f64();
            if t >= end {
                return out;
            }
            if d > 0.0 {
                let p = Piece {
                    t0: t,
                    t1: t + d,
                    v0: v,
                    v1: s.target,
                    n0: n,
                };
                n += (v + s.target) / 2.0 * d;
                out.push(p);
            }
            t += d;
            v = s.target;
        }
        if t < end {
            out.push(Piece {
                t0: t,
                t1: end,
                v0: v,
                v1: v,
                n0: n,
            });
        }
        out
    }

    /// When user `i` (counting from 0) is wanted over a run of `run`: the intervals where
    /// `value(t) > i`, in order, adjacent ones merged.
    pub fn active(&self, i: usize, run: Duration) -> Vec<(Duration, Duration)> {
        let level = i as f64;
        let mut out: Vec<(f64, f64)> = Vec::new();
        for p in self.pieces(run.as_secs_f64()) {
            let (a, b) = (p.v0 > level, p.v1 > level);
            let span = match (a, b) {
                (true, true) => Some((p.t0, p.t1)),
                (false, false) => None,
                (false, true) => Some((p.crossing(level), p.t1)),
                (true, false) => Some((p.t0, p.crossing(level))),
            };
            if let Some((s, e)) = span {
                match out.last_mut() {
                    Some(last) if (last.1 - s).abs() < 1e-9 => last.1 = e,
                    _ => out.push((s, e)),
                }
            }
        }
        out.into_iter()
            .filter(|(s, e)| e > s)
            .map(|(s, e)| (Duration::from_secs_f64(s), Duration::from_secs_f64(e)))
            .collect()
    }

    /// How many requests fall due in a run of `run` when the value is a rate: the number of
    /// `k` with `due(k) < run`.
    pub fn due_count(&self, run: Duration) -> u64 {
        let end = run.as_secs_f64();
        let total: f64 = self
            .pieces(end)
            .iter()
            .map(|p| (p.v0 + p.v1) / 2.0 * (p.t1 - p.t0))
            .sum();
        // ceil: request k is due at the moment k units have been integrated, so k = 0 is due at
        // once and a total of exactly N leaves N requests (0 … N−1) inside the run.
        (total - 1e-9).ceil().max(0.0) as u64
    }

    /// When request `k` (from 0) is due, if within `run`.
    pub fn due(&self, k: u64, run: Duration) -> Option<Duration> {
        let k = k as f64;
        let end = run.as_secs_f64();
        for p in self.pieces(end) {
            let n1 = p.n0 + (p.v0 + p.v1) / 2.0 * (p.t1 - p.t0);
            if k < n1 || (k <= n1 && p.t1 >= end) {
                let t = p.t0 + p.solve(k - p.n0);
                return (t < end).then(|| Duration::from_secs_f64(t));
            }
        }
        None
    }
}

impl Piece {
    fn value(&self, t: f64) -> f64 {
        let d = self.t1 - self.t0;
        if d <= 0.0 || !d.is_finite() {
            return self.v0;
        }
        self.v0 + (self.v1 - self.v0) * (t - self.t0) / d
    }

    /// Where the line crosses `level`.
    fn crossing(&self, level: f64) -> f64 {
        self.t0 + (level - self.v0) / (self.v1 - self.v0) * (self.t1 - self.t0)
    }

    /// The `τ` at which `x` units have been integrated in this piece:
    /// `v0·τ + (v1−v0)·τ²/(2d) = x`, in the form that stays exact when `v1 = v0`.
    fn solve(&self, x: f64) -> f64 {
        if x <= 0.0 {
            return 0.0;
        }
        let a = (self.v1 - self.v0) / (2.0 * (self.t1 - self.t0));
        let b = self.v0;
        let root = (b * b + 4.0 * a * x).max(0.0).sqrt();
        let den = b + root;
        if den <= 0.0 {
            return self.t1 - self.t0;
        }
        2.0 * x / den
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    fn close(a: Duration, b: f64) -> bool {
        (a.as_secs_f64() - b).abs() < 1e-6
    }

    #[test]
    fn stages_parse_and_reject_nonsense() {
        assert_eq!(
            Stage::parse("30s:200").unwrap(),
            Stage {
                duration: s(30.0),
                target: 200.0
            }
        );
        for bad in ["30s", "30s:-1", "x:1", "1s:many"] {
            assert!(Stage::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_ramp_starts_user_i_at_i_over_n_of_the_ramp_and_keeps_it() {
        let p = Profile::ramp(100.0, s(50.0));
        let run = s(60.0);
        let a = p.active(0, run);
        assert_eq!(a.len(), 1);
        assert!(close(a[0].0, 0.0) && close(a[0].1, 60.0), "{a:?}");
        let a = p.active(99, run);
        assert!(close(a[0].0, 49.5) && close(a[0].1, 60.0), "{a:?}");
        assert!(p.active(100, run).is_empty());
        assert!((p.value_at(s(25.0)) - 50.0).abs() < 1e-9);
        assert!((p.value_at(s(55.0)) - 100.0).abs() < 1e-9);
    }

    #[test]
    fn users_leave_on_the_way_down_and_come_back() {
        // 0 → 10 over 10 s, down to 0 over 10 s, back to 10 in a step.
        let p = Profile {
            start: 0.0,
            stages: vec![
                Stage::parse("10s:10").unwrap(),
                Stage::parse("10s:0").unwrap(),
                Stage::parse("0s:10").unwrap(),
            ],
        };
        let a = p.active(4, s(30.0));
        assert_eq!(a.len(), 2, "{a:?}");
        assert!(close(a[0].0, 4.0) && close(a[0].1, 16.0), "{a:?}");
        assert!(close(a[1].0, 20.0) && close(a[1].1, 30.0), "{a:?}");
        assert_eq!(p.max(), 10.0);
    }

    #[test]
    fn a_constant_rate_is_due_every_one_over_rate() {
        let p = Profile::constant(50.0);
        let run = s(10.0);
        assert_eq!(p.due_count(run), 500);
        assert!(close(p.due(0, run).unwrap(), 0.0));
        assert!(close(p.due(1, run).unwrap(), 0.02));
        assert!(close(p.due(499, run).unwrap(), 9.98));
        assert_eq!(p.due(500, run), None);
        // A rate that does not divide the run: 1.5/s for 1 s → due at 0 and 0.667.
        assert_eq!(Profile::constant(1.5).due_count(s(1.0)), 2);
    }

    #[test]
    fn a_rising_rate_integrates_exactly() {
        // 0 → 100 req/s over 10 s: 500 requests; the k-th at sqrt(k / 5) s.
        let p = Profile {
            start: 0.0,
            stages: vec![Stage::parse("10s:100").unwrap()],
        };
        let run = s(10.0);
        assert_eq!(p.due_count(run), 500);
        for k in [1u64, 20, 125, 499] {
            let want = (k as f64 / 5.0).sqrt();
            assert!(close(p.due(k, run).unwrap(), want), "k={k}");
        }
        // Held after the stage: 100/s more for another 2 s.
        assert_eq!(p.due_count(s(12.0)), 700);
        assert!(close(p.due(600, s(12.0)).unwrap(), 11.0));
    }
}
