//! The closed model (JMeter threads, k6 virtual users): users in loops, each on its own
//! persistent connection, sending a request, waiting for the answer, optionally thinking, and
//! again. How many users run at each moment comes from a [`Profile`] (a JMeter ramp-up, or k6
//! stages up and down); user `i` runs whenever the profile is above `i`, so users join and leave
//! exactly on the ramp. When the run's time is up, requests in flight get a grace period to
//! finish before they are cut off and counted as interrupted; an abort cuts them at once.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::collect::{Collector, StopReason};
use crate::profile::Profile;
use crate::stats::{ErrorKind, Sample};
use crate::target::{Answer, Conn, HttpVersion, Outgoing, SendError, Target};

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
#[derive(Debug, Clone)]
pub struct ClosedConfig {
    /// Users over time.
    pub users: Profile,
    /// Whole run, ramp-up and warm-up included.
    pub duration: Duration,
    /// Pause after each answer (k6's `sleep(1)`).
    pub think_time: Duration,
    /// Longest wait for one answer.
    pub timeout: Duration,
    /// How long requests in flight at the end may take to finish.
    pub grace: Duration,
    /// Requests per user, after which the user stops (JMeter's loop count); `None`: loop until
    /// the run ends. The run ends early when every user has finished.
    pub iterations: Option<u64>,
}

/// Runs the closed model against `target`, recording into `collector`; returns when every
/// user has stopped (at the end of the run plus the grace period at the latest, or at an
/// abort).
pub async fn run(
    target: Arc<Target>,
    spec: Arc<RequestSpec>,
    cfg: ClosedConfig,
    collector: Arc<Collector>,
) {
    let users = cfg.users.max().ceil() as usize;
    let out = Arc::new(outgoing(&target, &spec));
    let cfg = Arc::new(cfg);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..users {
        let (target, spec, cfg, collector, out) = (
            target.clone(),
            spec.clone(),
            cfg.clone(),
            collector.clone(),
            out.clone(),
        );
        tasks.spawn(async move {
            user(i, &target, &spec, out.as_ref().as_ref(), &cfg, &collector).await
        });
    }
    finish(tasks, &collector, cfg.duration, cfg.grace).await;
}

/// The run's request, prepared once; `None` when it does not fit HTTP.
pub(crate) fn outgoing(target: &Target, spec: &RequestSpec) -> Option<Outgoing> {
    target
        .outgoing(&spec.method, &spec.headers, spec.body.clone())
        .ok()
}

/// Waits for the workers; stops the run at `duration + grace` if some are still busy.
pub(crate) async fn finish(
    mut tasks: tokio::task::JoinSet<()>,
    collector: &Collector,
    duration: Duration,
    grace: Duration,
) {
    let deadline = collector.start() + duration + grace;
    loop {
        tokio::select! {
            next = tasks.join_next() => if next.is_none() { break },
            () = tokio::time::sleep_until(deadline) => {
                collector.stop_because(StopReason::Completed);
                while tasks.join_next().await.is_some() {}
                break;
            }
        }
    }
}

/// Sleeps until `at`; `false` if the run stopped first.
pub(crate) async fn sleep_until(stop: &mut watch::Receiver<bool>, at: Instant) -> bool {
    let slept = tokio::select! {
        () = tokio::time::sleep_until(at) => true,
        _ = stop.wait_for(|s| *s) => false,
    };
    slept && !*stop.borrow()
}

/// User `i`: runs in each interval the profile wants it.
async fn user(
    i: usize,
    target: &Target,
    spec: &RequestSpec,
    out: Option<&Outgoing>,
    cfg: &ClosedConfig,
    c: &Arc<Collector>,
) {
    let start = c.start();
    let mut stop = c.stop_signal();
    let mut left = cfg.iterations;
    for (from, to) in cfg.users.active(i, cfg.duration) {
        if !sleep_until(&mut stop, start + from).await {
            return;
        }
        let _active = c.enter();
        let mut user = User {
            i,
            stop: &mut stop,
            left: &mut left,
        };
        if !session(&mut user, target, spec, out, cfg, c, start + to).await {
            return;
        }
    }
}

/// One user's state across its sessions.
struct User<'a> {
    /// Its number (the recorder shard it writes to).
    i: usize,
    /// The run's stop signal.
    stop: &'a mut watch::Receiver<bool>,
    /// Requests it may still send, when it has a quota.
    left: &'a mut Option<u64>,
}

impl User<'_> {
    /// Counts one request; `false` when that used up the user's quota.
    fn sent_one(&mut self) -> bool {
        match self.left {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n > 0
            }
            None => true,
        }
    }
}

/// Requests on one connection (reconnecting when it breaks) until `until`; `false` when the
/// run stopped or the user has sent all its requests.
async fn session(
    u: &mut User<'_>,
    target: &Target,
    spec: &RequestSpec,
    out: Option<&Outgoing>,
    cfg: &ClosedConfig,
    c: &Collector,
    until: Instant,
) -> bool {
    let start = c.start();
    let i = u.i;
    'connect: while Instant::now() < until {
        let opened = Instant::now();
        let mut conn = match connect(target, cfg.timeout, false).await {
            Ok(conn) => conn,
            Err(kind) => {
                c.record(i, &failure(opened - start, opened.elapsed(), kind));
                if !u.sent_one() {
                    return false;
                }
                let pause = (Instant::now() + RECONNECT_PAUSE).min(until);
                if !sleep_until(u.stop, pause).await {
                    return false;
                }
                continue 'connect;
            }
        };
        loop {
            let sent_at = Instant::now();
            if sent_at >= until {
                return true;
            }
            if *u.stop.borrow() {
                return false;
            }
            let due = sent_at - start;
            match exchange(&mut conn, target, spec, out, cfg.timeout, u.stop).await {
                Exchange::Done(mut sample) => {
                    sample.due = due;
                    c.record(i, &sample);
                    if !u.sent_one() {
                        return false;
                    }
                    if sample.status.is_none() {
                        continue 'connect;
                    }
                }
                Exchange::Cut => {
                    c.interrupted(i, due);
                    return false;
                }
                Exchange::Closed => continue 'connect,
                Exchange::Invalid => {
                    // A header that does not fit HTTP: every request would fail the same way.
                    c.record(i, &failure(due, Duration::ZERO, ErrorKind::Check));
                    c.stop_because(StopReason::FirstError {
                        kind: ErrorKind::Check,
                        status: None,
                    });
                    return false;
                }
            }
            if !cfg.think_time.is_zero() {
                let wake = (Instant::now() + cfg.think_time).min(until);
                if !sleep_until(u.stop, wake).await {
                    return false;
                }
            }
        }
    }
    true
}

/// Opens a connection within `timeout`; `shared` when several streams will use it at once.
pub(crate) async fn connect(
    target: &Target,
    timeout: Duration,
    shared: bool,
) -> Result<Conn, ErrorKind> {
    // Boxed, so that none of the connect's state is part of every user's task for its whole
    // life; the TLS and shared-HTTP/2 handshakes are boxed again inside it, which keeps this
    // allocation small while 10,000 users connect at once.
    let opening = async {
        if shared {
            target.connect_shared().await
        } else {
            target.connect().await
        }
    };
    match tokio::time::timeout(timeout, Box::pin(opening)).await {
        Ok(result) => result,
        Err(_) => Err(ErrorKind::Timeout),
    }
}

/// A request that got no response.
pub(crate) fn failure(due: Duration, elapsed: Duration, kind: ErrorKind) -> Sample {
    Sample {
        due,
        lag: Duration::ZERO,
        ttfb: None,
        elapsed,
        connect: None,
        sent: 0,
        received: 0,
        status: None,
        error: Some(kind),
    }
}

/// How one request went.
pub(crate) enum Exchange {
    /// Answered or failed; a sample with no status means the connection is unusable.
    Done(Sample),
    /// The run stopped while it was in flight.
    Cut,
    /// The request could not be built.
    Invalid,
    /// Nothing was processed: the connection had closed before the request went out, or an
    /// HTTP/2 server refused the stream unprocessed. The request may go out on a new one.
    Closed,
}

/// Sends one request on `conn` and judges the answer (`out: None`: the request could not be
/// built). The sample's `due` and `lag` are left for
/// the caller.
pub(crate) async fn exchange(
    conn: &mut Conn,
    target: &Target,
    spec: &RequestSpec,
    out: Option<&Outgoing>,
    timeout: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Exchange {
    let Some(out) = out else {
        return Exchange::Invalid;
    };
    let ready = tokio::select! {
        r = tokio::time::timeout(timeout, conn.ready()) => r.unwrap_or(false),
        _ = stop.wait_for(|s| *s) => return Exchange::Cut,
    };
    let connect = conn.take_timing();
    if !ready {
        if connect.is_none() {
            return Exchange::Closed;
        }
        // A connection closed before its first request: a failure, or a dead target would
        // spin through reconnects without a single error recorded.
        let mut s = failure(Duration::ZERO, Duration::ZERO, ErrorKind::Reset);
        s.connect = connect;
        return Exchange::Done(s);
    }
    let began = Instant::now();
    let result = tokio::select! {
        r = tokio::time::timeout(timeout, conn.send(out)) => r,
        _ = stop.wait_for(|s| *s) => return Exchange::Cut,
    };
    let elapsed = began.elapsed();
    let mut sample = Sample {
        due: Duration::ZERO,
        lag: Duration::ZERO,
        ttfb: None,
        elapsed,
        connect,
        sent: 0,
        received: 0,
        status: None,
        error: None,
    };
    match result {
        Ok(Ok((answer, sent))) => {
            sample.sent = sent;
            sample.ttfb = Some(answer.ttfb);
            sample.received = answer.bytes;
            sample.status = Some(answer.status.as_u16());
            sample.error = judge(spec, target.version, &answer);
        }
        Ok(Err(SendError::Failed(kind))) => sample.error = Some(kind),
        Ok(Err(SendError::Unprocessed)) if connect.is_none() => return Exchange::Closed,
        // Refused on a fresh connection: counted, or a server refusing everything would spin
        // through reconnects without a single error recorded.
        Ok(Err(SendError::Unprocessed)) => sample.error = Some(ErrorKind::Reset),
        Err(_) => sample.error = Some(ErrorKind::Timeout),
    }
    Exchange::Done(sample)
}

/// The error an answer counts as, if any: status, negotiated protocol, body content.
pub(crate) fn judge(
    spec: &RequestSpec,
    version: HttpVersion,
    answer: &Answer,
) -> Option<ErrorKind> {
    let status_ok = match spec.expect_status {
        Some(code) => answer.status.as_u16() == code,
        None => answer.status.is_success(),
    };
    if !status_ok {
        return Some(ErrorKind::Status);
    }
    let wanted = match version {
        HttpVersion::Http1 => http::Version::HTTP_11,
        HttpVersion::Http2 => http::Version::HTTP_2,
    };
    if answer.version != wanted {
        return Some(ErrorKind::Check);
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
