//! The closed model (JMeter threads, k6 virtual users): `users` loops, each on its own persistent
//! connection, sending a request, waiting for the answer, optionally thinking, and again, until
//! the run's time is up. Users start spread linearly over the ramp-up. Samples that *started*
//! during the warm-up are recorded apart. Each user records into its own [`Recorder`]; they are
//! merged when the run ends, so nothing is shared on the request path.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use tokio::time::Instant;

use crate::stats::{ErrorKind, Recorder};
use crate::target::{head_bytes, Answer, Target};

/// Pause before reconnecting after a failed connection, so a dead target is not hammered.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// The request every user sends, and what makes its answer a success.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    /// Method.
    pub method: Method,
    /// Extra headers.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Body (may be empty).
    pub body: Bytes,
    /// Status that counts as success; `None`: any 2xx.
    pub expect_status: Option<u16>,
    /// Text the body must contain.
    pub expect_body: Option<String>,
}

/// The shape of a closed-model run.
#[derive(Debug, Clone, Copy)]
pub struct ClosedConfig {
    /// Concurrent users.
    pub users: usize,
    /// Whole run, ramp-up and warm-up included.
    pub duration: Duration,
    /// Users start evenly over this time.
    pub ramp_up: Duration,
    /// Pause after each answer (k6's `sleep(1)`).
    pub think_time: Duration,
    /// Samples that start before this (from the run's start) are reported as warm-up.
    pub warmup: Duration,
    /// Longest wait for one answer.
    pub timeout: Duration,
}

/// What a run recorded.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Samples started after the warm-up.
    pub measured: Recorder,
    /// Samples started during the warm-up.
    pub warmup: Recorder,
    /// `duration − warmup`: the window throughput is computed over.
    pub window: Duration,
}

/// Runs the closed model against `target`.
pub async fn run(target: Arc<Target>, spec: Arc<RequestSpec>, cfg: ClosedConfig) -> Outcome {
    let start = Instant::now();
    let users = cfg.users.max(1);
    let mut tasks = Vec::with_capacity(users);
    for i in 0..users {
        let delay = cfg.ramp_up.mul_f64(i as f64 / users as f64);
        let (target, spec) = (target.clone(), spec.clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(start + delay).await;
            user(&target, &spec, cfg, start).await
        }));
    }
    let mut measured = Recorder::new();
    let mut warmup = Recorder::new();
    for t in tasks {
        if let Ok((m, w)) = t.await {
            measured.merge(&m);
            warmup.merge(&w);
        }
    }
    Outcome {
        measured,
        warmup,
        window: cfg.duration.saturating_sub(cfg.warmup),
    }
}

/// One user's loop; returns its (measured, warm-up) recorders.
async fn user(
    target: &Target,
    spec: &RequestSpec,
    cfg: ClosedConfig,
    start: Instant,
) -> (Recorder, Recorder) {
    let end = start + cfg.duration;
    let warm_end = start + cfg.warmup;
    let mut measured = Recorder::new();
    let mut warmup = Recorder::new();
    'connect: while Instant::now() < end {
        let opened = Instant::now();
        let mut conn = match tokio::time::timeout(cfg.timeout, target.connect()).await {
            Ok(Ok(c)) => c,
            failed => {
                let kind = match failed {
                    Ok(Err(kind)) => kind,
                    _ => ErrorKind::Timeout,
                };
                recorder(&mut measured, &mut warmup, opened, warm_end).record_failure(kind);
                let left = end.saturating_duration_since(Instant::now());
                tokio::time::sleep(RECONNECT_PAUSE.min(left)).await;
                continue 'connect;
            }
        };
        loop {
            let sent_at = Instant::now();
            if sent_at >= end {
                break 'connect;
            }
            let req = match target.request(&spec.method, &spec.headers, spec.body.clone()) {
                Ok(r) => r,
                Err(_) => {
                    // A header that does not fit HTTP: every request would fail the same way.
                    recorder(&mut measured, &mut warmup, sent_at, warm_end)
                        .record_failure(ErrorKind::Check);
                    break 'connect;
                }
            };
            let sent = head_bytes(req.headers()) + 16 + spec.body.len() as u64;
            let result = tokio::time::timeout(cfg.timeout, conn.send(req)).await;
            let rec = recorder(&mut measured, &mut warmup, sent_at, warm_end);
            match result {
                Ok(Ok(answer)) => {
                    let error = judge(spec, &answer);
                    rec.record(sent_at.elapsed(), sent, answer.bytes, error);
                }
                Ok(Err(kind)) => {
                    rec.record_failure(kind);
                    continue 'connect;
                }
                Err(_) => {
                    rec.record_failure(ErrorKind::Timeout);
                    continue 'connect;
                }
            }
            if !cfg.think_time.is_zero() {
                tokio::time::sleep(cfg.think_time).await;
            }
        }
    }
    (measured, warmup)
}

fn recorder<'a>(
    measured: &'a mut Recorder,
    warmup: &'a mut Recorder,
    started: Instant,
    warm_end: Instant,
) -> &'a mut Recorder {
    if started < warm_end {
        warmup
    } else {
        measured
    }
}

/// The error an answer counts as, if any.
pub(crate) fn judge(spec: &RequestSpec, answer: &Answer) -> Option<ErrorKind> {
    let status_ok = match spec.expect_status {
        Some(code) => answer.status.as_u16() == code,
        None => answer.status.is_success(),
    };
    if !status_ok {
        return Some(ErrorKind::Status);
    }
    if let Some(text) = &spec.expect_body {
        let found = answer
            .body
            .windows(text.len().max(1))
            .any(|w| w == text.as_bytes());
        if !found {
            return Some(ErrorKind::Check);
        }
    }
    None
}
