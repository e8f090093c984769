//! Passive health of an upstream's endpoints: which ones to skip for now. An endpoint that
//! could not be connected to (refused, unreachable, connect or TLS handshake timed out) is
//! skipped for `fail_timeout`; the first connection made to it after that brings it back. A
//! request whose connect failed was never sent, so both paths try it on the next endpoint
//! (nginx's `max_fails=1 fail_timeout=10s` with `proxy_next_upstream error`).
//!
//! One [`Health`] per upstream and worker, shared by the fast path's pool and hyper's client:
//! each worker learns of a dead endpoint from its own first failed connect. With one endpoint
//! there is nowhere else to go, and nothing is marked; every failed connect is counted either
//! way (`pms_gateway_upstream_connect_failures_total`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

/// Which endpoints of one upstream are skipped, and until when.
#[derive(Debug)]
pub(crate) struct Health {
    fail_timeout: Duration,
    /// Since when the marks count.
    base: Instant,
    /// Per endpoint: milliseconds after `base` until which it is skipped; 0 when it is not.
    down_until: Box<[AtomicU64]>,
    /// How many endpoints are marked (expired marks included), so that the usual case — none —
    /// costs no clock read.
    marked: AtomicUsize,
    /// Round-robin position.
    next: AtomicUsize,
    /// Connects that failed, all endpoints together.
    failures: Counter,
}

impl Health {
    /// All `endpoints` up; one that fails is skipped for `fail_timeout`, and counted in
    /// `failures`.
    pub(crate) fn new(endpoints: usize, fail_timeout: Duration, failures: Counter) -> Self {
        Self {
            fail_timeout,
            base: Instant::now(),
            down_until: (0..endpoints.max(1)).map(|_| AtomicU64::new(0)).collect(),
            marked: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            failures,
        }
    }

    /// The next endpoint in turn that is not being skipped; when every one is, the next in turn
    /// all the same (a request must go somewhere, and that is how one comes back).
    pub(crate) fn pick(&self) -> usize {
        let n = self.down_until.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        if self.marked.load(Ordering::Relaxed) == 0 {
            return start;
        }
        let now = self.now_ms();
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| !self.is_down_at(i, now))
            .unwrap_or(start)
    }

    /// The endpoints to try, in order, after a connect to `first` failed: the others, in turn.
    /// Those being skipped are left out as the caller comes to them ([`Health::is_down`]).
    pub(crate) fn after(&self, first: usize) -> impl Iterator<Item = usize> {
        let n = self.down_until.len();
        (1..n).map(move |k| (first + k) % n)
    }

    /// Whether endpoint `i` is being skipped.
    pub(crate) fn is_down(&self, i: usize) -> bool {
        self.marked.load(Ordering::Relaxed) != 0 && self.is_down_at(i, self.now_ms())
    }

    /// Records that connecting to endpoint `i` (named `name` in the log) failed with `why`.
    pub(crate) fn failed(&self, i: usize, name: &str, why: &str) {
        self.failures.inc();
        if self.down_until.len() < 2 {
            return;
        }
        let Some(mark) = self.down_until.get(i) else {
            return;
        };
        let until = self.now_ms() + millis(self.fail_timeout).max(1);
        if mark.swap(until, Ordering::Relaxed) == 0 {
            self.marked.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                endpoint = name,
                error = why,
                skipped_for_ms = millis(self.fail_timeout),
                "cannot connect to an upstream endpoint; sending its requests to the others"
            );
        }
    }

    /// Records that a connection to endpoint `i` (named `name`) was made.
    pub(crate) fn connected(&self, i: usize, name: &str) {
        if self.marked.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Some(mark) = self.down_until.get(i) else {
            return;
        };
        if mark.swap(0, Ordering::Relaxed) != 0 {
            self.marked.fetch_sub(1, Ordering::Relaxed);
            tracing::info!(endpoint = name, "an upstream endpoint is reachable again");
        }
    }

    fn is_down_at(&self, i: usize, now: u64) -> bool {
        self.down_until
            .get(i)
            .is_some_and(|m| now < m.load(Ordering::Relaxed))
    }

    fn now_ms(&self) -> u64 {
        millis(self.base.elapsed())
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_take_turns_until_one_fails_then_it_is_skipped() {
        let h = Health::new(3, Duration::from_secs(60), Counter::default());
        let turns: Vec<_> = (0..6).map(|_| h.pick()).collect();
        assert_eq!(turns, [0, 1, 2, 0, 1, 2]);
        h.failed(1, "b", "refused");
        let turns: Vec<_> = (0..4).map(|_| h.pick()).collect();
        assert_eq!(
            turns,
            [0, 2, 2, 0],
            "1 is skipped, its turn goes to the next"
        );
        h.connected(1, "b");
        let turns: Vec<_> = (0..3).map(|_| h.pick()).collect();
        assert_eq!(turns, [1, 2, 0], "back in turn once connected to");
    }

    #[test]
    fn a_failed_endpoint_comes_back_after_the_fail_timeout() {
        let h = Health::new(2, Duration::from_millis(1), Counter::default());
        h.failed(0, "a", "refused");
        std::thread::sleep(Duration::from_millis(5));
        let turns: Vec<_> = (0..2).map(|_| h.pick()).collect();
        assert_eq!(turns, [0, 1]);
    }

    #[test]
    fn with_every_endpoint_failed_requests_still_go_somewhere() {
        let h = Health::new(2, Duration::from_secs(60), Counter::default());
        h.failed(0, "a", "refused");
        h.failed(1, "b", "refused");
        let turns: Vec<_> = (0..2).map(|_| h.pick()).collect();
        assert_eq!(turns, [0, 1]);
        assert!(h.after(0).all(|i| h.is_down(i)), "nothing else to try");
    }

    #[test]
    fn after_a_failure_the_other_endpoints_up_are_tried_each_once() {
        let h = Health::new(4, Duration::from_secs(60), Counter::default());
        h.failed(3, "d", "refused");
        // A request started at 2 and failed there: 3 is skipped, then 0 and 1.
        h.failed(2, "c", "refused");
        let next: Vec<_> = h.after(2).filter(|&i| !h.is_down(i)).collect();
        assert_eq!(next, [0, 1]);
    }

    #[test]
    fn one_endpoint_is_never_skipped() {
        let h = Health::new(1, Duration::from_secs(60), Counter::default());
        h.failed(0, "a", "refused");
        assert_eq!(h.pick(), 0);
        assert_eq!(h.marked.load(Ordering::Relaxed), 0);
        assert_eq!(h.failures.get(), 1, "counted all the same");
    }
}
