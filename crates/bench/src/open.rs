//! The open model (vegeta, wrk2): requests are due at fixed times — `start + i / rate` — whatever
//! the target does. Each of `connections × streams` workers takes the next due time, waits for
//! it, and sends. When every worker is busy the next request goes out late, and its latency is
//! counted from when it was *due* (corrected: no coordinated omission) as well as from when it
//! was actually sent (uncorrected: what a closed-loop tool would report). Requests that could not
//! even be sent within the timeout of their due time are counted as dropped, not silently
//! skipped: the rate never slows down to suit the target.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::closed::{judge, RequestSpec};
use crate::stats::{ErrorKind, Recorder};
use crate::target::{head_bytes, Conn, Target};

/// A request sent more than this after its due time counts as late. Tokio's timers tick in
/// milliseconds, so anything tighter would call every request late; the delay itself, however
/// small, is always in the corrected latency.
pub const LATE_AFTER: Duration = Duration::from_millis(10);

/// The shape of an open-model run.
#[derive(Debug, Clone, Copy)]
pub struct OpenConfig {
    /// Requests per second.
    pub rate: f64,
    /// Whole run.
    pub duration: Duration,
    /// Requests due in this first part are reported as warm-up.
    pub warmup: Duration,
    /// Connections to open.
    pub connections: usize,
    /// Concurrent requests per connection (HTTP/2 streams; 1 for HTTP/1.1).
    pub streams: usize,
    /// Longest wait for one answer, and longest a due request may wait to be sent.
    pub timeout: Duration,
}

/// What an open-model run recorded.
#[derive(Debug, Clone)]
pub struct OpenOutcome {
    /// Latency from the due time (the honest figure), requests due after the warm-up.
    pub corrected: Recorder,
    /// Latency from the actual send, same requests.
    pub uncorrected: Recorder,
    /// Requests due during the warm-up (corrected).
    pub warmup: Recorder,
    /// Requests due in the run.
    pub due: u64,
    /// Requests sent more than [`LATE_AFTER`] after they were due.
    pub late: u64,
    /// Requests never sent because no worker was free within the timeout of their due time.
    pub dropped: u64,
    /// `duration − warmup`.
    pub window: Duration,
}

/// Runs the open model against `target`.
pub async fn run(target: Arc<Target>, spec: Arc<RequestSpec>, cfg: OpenConfig) -> OpenOutcome {
    let start = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let late = Arc::new(AtomicU64::new(0));
    let dropped = Arc::new(AtomicU64::new(0));
    let interval = Duration::from_secs_f64(1.0 / cfg.rate.max(f64::MIN_POSITIVE));
    let total = (cfg.duration.as_secs_f64() * cfg.rate).floor() as u64;
    let mut tasks = Vec::new();
    for _ in 0..cfg.connections.max(1) {
        let (target, spec) = (target.clone(), spec.clone());
        let (next, late, dropped) = (next.clone(), late.clone(), dropped.clone());
        tasks.push(tokio::spawn(async move {
            let shared = Shared {
                target,
                spec,
                cfg,
                start,
                interval,
                total,
                next,
                late,
                dropped,
            };
            connection(shared).await
        }));
    }
    let mut out = OpenOutcome {
        corrected: Recorder::new(),
        uncorrected: Recorder::new(),
        warmup: Recorder::new(),
        due: total,
        late: 0,
        dropped: 0,
        window: cfg.duration.saturating_sub(cfg.warmup),
    };
    for t in tasks {
        if let Ok(parts) = t.await {
            for (c, u, w) in parts {
                out.corrected.merge(&c);
                out.uncorrected.merge(&u);
                out.warmup.merge(&w);
            }
        }
    }
    out.late = late.load(Ordering::Relaxed);
    out.dropped = dropped.load(Ordering::Relaxed);
    out
}

#[derive(Clone)]
struct Shared {
    target: Arc<Target>,
    spec: Arc<RequestSpec>,
    cfg: OpenConfig,
    start: Instant,
    interval: Duration,
    total: u64,
    next: Arc<AtomicU64>,
    late: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
}

type Parts = Vec<(Recorder, Recorder, Recorder)>;

/// One connection and its streams; reconnects when it breaks.
async fn connection(s: Shared) -> Parts {
    let end = s.start + s.cfg.duration;
    let mut parts = Parts::new();
    while Instant::now() < end && s.next.load(Ordering::Relaxed) < s.total {
        let conn = match tokio::time::timeout(s.cfg.timeout, s.target.connect()).await {
            Ok(Ok(c)) => c,
            failed => {
                // The request that was due now could not go out: take its slot so the schedule
                // keeps its pace, and record why.
                let kind = match failed {
                    Ok(Err(k)) => k,
                    _ => ErrorKind::Timeout,
                };
                let mut r = Recorder::new();
                if let Some(_slot) = take_slot(&s) {
                    r.record_failure(kind);
                }
                parts.push((r, Recorder::new(), Recorder::new()));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // HTTP/2: one sender per stream, multiplexed on the connection; HTTP/1.1: just one.
        let mut senders: Vec<Conn> = (1..s.cfg.streams.max(1))
            .map_while(|_| conn.try_clone())
            .collect();
        senders.push(conn);
        let mut workers = Vec::with_capacity(senders.len());
        for c in senders {
            workers.push(tokio::spawn(stream(s.clone(), c)));
        }
        let mut broken = false;
        for w in workers {
            if let Ok((rec, was_broken)) = w.await {
                parts.push(rec);
                broken |= was_broken;
            }
        }
        if !broken {
            break;
        }
    }
    parts
}

/// The next due slot: its index and due time; `None` when the schedule is done.
fn take_slot(s: &Shared) -> Option<(u64, Instant)> {
    let i = s.next.fetch_add(1, Ordering::Relaxed);
    (i < s.total).then(|| (i, s.start + s.interval.mul_f64(i as f64)))
}

/// One request at a time on a shared connection. Returns its recorders and whether the
/// connection broke (so the caller reconnects).
async fn stream(s: Shared, mut conn: Conn) -> ((Recorder, Recorder, Recorder), bool) {
    let mut corrected = Recorder::new();
    let mut uncorrected = Recorder::new();
    let mut warmup = Recorder::new();
    let warm_end = s.start + s.cfg.warmup;
    while let Some((_, due)) = take_slot(&s) {
        tokio::time::sleep_until(due).await;
        let now = Instant::now();
        let behind = now.saturating_duration_since(due);
        if behind > s.cfg.timeout {
            s.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if behind > LATE_AFTER {
            s.late.fetch_add(1, Ordering::Relaxed);
        }
        let Ok(req) = s
            .target
            .request(&s.spec.method, &s.spec.headers, s.spec.body.clone())
        else {
            corrected.record_failure(ErrorKind::Check);
            continue;
        };
        let sent = head_bytes(req.headers()) + 16 + s.spec.body.len() as u64;
        let result = tokio::time::timeout(s.cfg.timeout, conn.send(req)).await;
        let rec = if due < warm_end {
            &mut warmup
        } else {
            &mut corrected
        };
        match result {
            Ok(Ok(answer)) => {
                let error = judge(&s.spec, &answer);
                rec.record(due.elapsed(), sent, answer.bytes, error);
                if due >= warm_end {
                    uncorrected.record(now.elapsed(), sent, answer.bytes, error);
                }
            }
            Ok(Err(kind)) => {
                rec.record_failure(kind);
                return ((corrected, uncorrected, warmup), true);
            }
            Err(_) => {
                rec.record_failure(ErrorKind::Timeout);
                return ((corrected, uncorrected, warmup), true);
            }
        }
    }
    ((corrected, uncorrected, warmup), false)
}
