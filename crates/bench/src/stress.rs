//! The dissertation's stress test: users join at a fixed pace (k6 stages of +200 VUs per
//! second), each sending a request and thinking, until the first failed request (a failed check,
//! a timeout, a refused connection) — or, if asked, until one second's error rate crosses a
//! limit. The answer is how many users were active at that moment, the throughput reached, and
//! the time series that led there.

use std::time::Duration;

use serde::Serialize;

use crate::closed::ClosedConfig;
use crate::collect::{Collected, StopReason, StopRule};
use crate::profile::{Profile, Stage};

/// How a stress run adds users and when it gives up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct StressConfig {
    /// Users added per second.
    pub add_per_s: f64,
    /// Pause after each answer.
    #[serde(serialize_with = "secs")]
    pub think_time: Duration,
    /// Users stop being added at this many.
    pub max_users: usize,
    /// The run ends here if nothing failed.
    #[serde(serialize_with = "secs")]
    pub max_duration: Duration,
    /// Longest wait for one answer.
    #[serde(serialize_with = "secs")]
    pub timeout: Duration,
    /// Stop when one second's errors exceed this percentage, instead of at the first error.
    pub stop_at_error_pct: Option<f64>,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl StressConfig {
    /// The closed-model run and stop rule this stress test is.
    pub fn plan(&self) -> (ClosedConfig, StopRule) {
        let ramp = Duration::from_secs_f64(self.max_users as f64 / self.add_per_s.max(1e-9));
        let users = Profile {
            start: 0.0,
            stages: vec![Stage {
                duration: ramp,
                target: self.max_users as f64,
            }],
        };
        let closed = ClosedConfig {
            users,
            duration: self.max_duration,
            think_time: self.think_time,
            timeout: self.timeout,
            // A stress run ends at a failure; requests still in flight then are cut off.
            grace: Duration::ZERO,
            iterations: None,
        };
        let rule = StopRule {
            first_error: self.stop_at_error_pct.is_none(),
            error_pct: self.stop_at_error_pct,
        };
        (closed, rule)
    }
}

/// What a stress run found.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct StressOutcome {
    /// Whether the target failed before the run's limits were reached.
    pub failed: bool,
    /// Why the run ended.
    pub reason: StopReason,
    /// Seconds from the start to the end.
    pub ended_s: f64,
    /// Users active when it ended (k6's "max VUs" at the abort).
    pub users_at_end: usize,
    /// The most users active in any second.
    pub max_users: usize,
    /// Highest requests per second in any one second.
    pub peak_rate: f64,
    /// Requests over the whole run divided by its length (k6's `http_reqs` rate).
    pub mean_rate: f64,
}

impl StressOutcome {
    /// Reads the outcome off a finished run.
    pub fn of(run: &Collected) -> Self {
        let requests = run.measured.samples() + run.warmup.samples();
        let ended_s = run.ended.as_secs_f64();
        let max_users = run.timeline.iter().map(|t| t.active).max().unwrap_or(0);
        let users_at_end = run
            .active_at_stop
            .or_else(|| run.timeline.last().map(|t| t.active))
            .unwrap_or(0);
        Self {
            failed: run.reason != StopReason::Completed,
            reason: run.reason.clone(),
            ended_s,
            users_at_end,
            max_users: max_users.max(users_at_end),
            peak_rate: run.timeline.iter().map(|t| t.rate).fold(0.0, f64::max),
            mean_rate: if ended_s > 0.0 {
                requests as f64 / ended_s
            } else {
                0.0
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_adds_users_at_the_pace_and_stops_at_the_first_error() {
        let cfg = StressConfig {
            add_per_s: 200.0,
            think_time: Duration::from_secs(1),
            max_users: 20_000,
            max_duration: Duration::from_secs(120),
            timeout: Duration::from_secs(60),
            stop_at_error_pct: None,
        };
        let (closed, rule) = cfg.plan();
        assert!((closed.users.value_at(Duration::from_secs(10)) - 2000.0).abs() < 1e-6);
        assert!((closed.users.value_at(Duration::from_secs(110)) - 20_000.0).abs() < 1e-6);
        assert!(rule.first_error && rule.error_pct.is_none());
        let (_, rule) = StressConfig {
            stop_at_error_pct: Some(10.0),
            ..cfg
        }
        .plan();
        assert!(!rule.first_error && rule.error_pct == Some(10.0));
    }
}
