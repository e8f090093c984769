//! The open model (vegeta, wrk2, k6's arrival-rate executors): request `k` is due at a fixed
//! time, the moment the rate [`Profile`] has integrated to `k` (`k / rate` for a constant rate),
//! whatever the target does. A pacer thread releases each due time when it comes (a thread's
//! sleep is good to tens of µs; tokio's timer wheel rounds up to whole milliseconds, which would
//! add up to a millisecond of made-up lag to every request), and the first free of
//! `connections × streams` workers sends it. When every worker is busy the next request goes out late, and its
//! latency is counted from when it was *due* (corrected: no coordinated omission) as well as from
//! when it was actually sent (uncorrected: what a closed-loop tool would report). Requests that
//! could not even be sent within the timeout of their due time are counted as dropped, not
//! silently skipped: the rate never slows down to suit the target.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::closed::{
    connect, exchange, failure, finish, outgoing, sleep_until, Exchange, RequestSpec,
};
use crate::collect::{Collector, StopReason};
use crate::profile::Profile;
use crate::stats::ErrorKind;
use crate::target::{Conn, Outgoing, Target};

/// A request sent more than this after its due time counts as late: it waited for a free
/// worker, not just for a thread to wake up. The delay itself, however small, is always in the
/// corrected latency.
pub const LATE_AFTER: Duration = Duration::from_millis(10);

/// The shape of an open-model run.
#[derive(Debug, Clone)]
pub struct OpenConfig {
    /// Requests per second over time.
    pub rate: Profile,
    /// Whole run.
    pub duration: Duration,
    /// Connections to open.
    pub connections: usize,
    /// Concurrent requests per connection (HTTP/2 streams; 1 for HTTP/1.1).
    pub streams: usize,
    /// Longest wait for one answer, and longest a due request may wait to be sent.
    pub timeout: Duration,
    /// How long requests in flight at the end may take to finish.
    pub grace: Duration,
}

/// How well an open-model run kept its schedule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Schedule {
    /// Requests due in the run.
    pub due: u64,
    /// Sent more than [`LATE_AFTER`] after their due time.
    pub late: u64,
    /// Never sent: no worker free within the timeout of their due time.
    pub dropped: u64,
}

struct Shared {
    target: Arc<Target>,
    spec: Arc<RequestSpec>,
    out: Option<Outgoing>,
    cfg: OpenConfig,
    collector: Arc<Collector>,
    total: u64,
    /// Due times released by the pacer.
    slots: flume::Receiver<Duration>,
    late: AtomicU64,
    dropped: AtomicU64,
    /// Slots taken by a worker whose connection turned out closed before sending: the next
    /// worker sends them first.
    retry: std::sync::Mutex<Vec<Duration>>,
}

/// Runs the open model against `target`, recording into `collector`; returns how the schedule
/// was kept.
pub async fn run(
    target: Arc<Target>,
    spec: Arc<RequestSpec>,
    cfg: OpenConfig,
    collector: Arc<Collector>,
) -> Schedule {
    let total = cfg.rate.due_count(cfg.duration);
    let (duration, grace) = (cfg.duration, cfg.grace);
    // Enough room for every worker to be far behind; beyond it the pacer counts drops.
    let (tx, slots) = flume::bounded(65_536);
    let shared = Arc::new(Shared {
        out: outgoing(&target, &spec),
        target,
        spec,
        total,
        slots,
        late: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        retry: std::sync::Mutex::new(Vec::new()),
        collector: collector.clone(),
        cfg,
    });
    let pacer = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("pms-bench-pacer".into())
            .spawn(move || pace(&shared, &tx))
    };
    if pacer.is_err() {
        collector.stop_because(StopReason::FirstError {
            kind: ErrorKind::Check,
            status: None,
        });
    }
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..shared.cfg.connections.max(1) {
        let shared = shared.clone();
        tasks.spawn(async move { connection(n, shared).await });
    }
    finish(tasks, &collector, duration, grace).await;
    Schedule {
        due: total,
        late: shared.late.load(Ordering::Relaxed),
        dropped: shared.dropped.load(Ordering::Relaxed),
    }
}

/// Releases every due time when it comes, on its own thread; ends with the schedule or the run.
fn pace(s: &Shared, tx: &flume::Sender<Duration>) {
    let start = s.collector.start().into_std();
    for k in 0..s.total {
        if s.collector.stopped() {
            return;
        }
        let Some(due) = s.cfg.rate.due(k, s.cfg.duration) else {
            return;
        };
        let wait = (start + due).saturating_duration_since(std::time::Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        match tx.try_send(due) {
            Ok(()) => {}
            Err(flume::TrySendError::Full(_)) => {
                s.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(flume::TrySendError::Disconnected(_)) => return,
        }
    }
}

impl Shared {
    /// The next due time, once it has come; `None` when the schedule is done or the run
    /// stopped.
    async fn take_slot(&self, stop: &mut tokio::sync::watch::Receiver<bool>) -> Option<Duration> {
        if let Some(due) = self.retries().pop() {
            return Some(due);
        }
        tokio::select! {
            slot = self.slots.recv_async() => slot.ok(),
            _ = stop.wait_for(|s| *s) => None,
        }
    }

    fn retries(&self) -> std::sync::MutexGuard<'_, Vec<Duration>> {
        self.retry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn done(&self) -> bool {
        (self.slots.is_disconnected() && self.slots.is_empty() && self.retries().is_empty())
            || self.collector.stopped()
    }
}

/// Connection `n` and its streams; reconnects when it breaks.
async fn connection(n: usize, s: Arc<Shared>) {
    let mut stop = s.collector.stop_signal();
    let streams = s.cfg.streams.max(1);
    while !s.done() {
        let opened = Instant::now();
        let conn = match connect(&s.target, s.cfg.timeout, streams > 1).await {
            Ok(c) => c,
            Err(kind) => {
                // The request due now could not go out: it takes its slot, so the schedule
                // keeps its pace, and records why.
                if let Some(due) = s.take_slot(&mut stop).await {
                    s.collector
                        .record(n * streams, &failure(due, opened.elapsed(), kind));
                }
                if !sleep_until(&mut stop, Instant::now() + Duration::from_millis(100)).await {
                    return;
                }
                continue;
            }
        };
        // HTTP/2: one sender per stream, multiplexed on the connection; HTTP/1.1: just one.
        let mut senders: Vec<Conn> = (1..streams).map_while(|_| conn.try_clone()).collect();
        senders.insert(0, conn);
        let mut workers = tokio::task::JoinSet::new();
        for (j, c) in senders.into_iter().enumerate() {
            workers.spawn(stream(n * streams + j, s.clone(), c));
        }
        let mut broken = false;
        while let Some(w) = workers.join_next().await {
            broken |= w.unwrap_or(true);
        }
        if !broken {
            return;
        }
    }
}

/// One request at a time on a shared connection, as worker `w`. Returns whether the
/// connection broke (so the caller reconnects).
async fn stream(w: usize, s: Arc<Shared>, mut conn: Conn) -> bool {
    let start = s.collector.start();
    let mut stop = s.collector.stop_signal();
    while let Some(due) = s.take_slot(&mut stop).await {
        let lag = start.elapsed().saturating_sub(due);
        if lag > s.cfg.timeout {
            s.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if lag > LATE_AFTER {
            s.late.fetch_add(1, Ordering::Relaxed);
        }
        let _in_flight = s.collector.enter();
        match exchange(
            &mut conn,
            &s.target,
            &s.spec,
            s.out.as_ref(),
            s.cfg.timeout,
            &mut stop,
        )
        .await
        {
            Exchange::Done(mut sample) => {
                sample.due = due;
                sample.lag = lag;
                s.collector.record(w, &sample);
                if sample.status.is_none() {
                    return true;
                }
            }
            Exchange::Cut => {
                s.collector.interrupted(w, due);
                return false;
            }
            Exchange::Invalid => {
                s.collector
                    .record(w, &failure(due, Duration::ZERO, ErrorKind::Check));
                s.collector.stop_because(StopReason::FirstError {
                    kind: ErrorKind::Check,
                    status: None,
                });
                return false;
            }
            Exchange::Closed => {
                // Nothing went out: the request is sent on the next connection, still
                // measured from its due time.
                s.retries().push(due);
                return true;
            }
        }
    }
    false
}
