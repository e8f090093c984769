//! Health of an upstream's endpoints, and which one a request goes to.
//!
//! - **Choice**: power of two choices over the endpoints not being skipped: the next in turn and
//!   one other at random, and of the two the one with fewer requests outstanding (a tie goes to
//!   the one in turn, so an even load is plain round-robin). A slow endpoint, which holds its
//!   requests longer, gets fewer new ones.
//! - **Passive ejection**: an endpoint that could not be connected to (refused, unreachable,
//!   connect or TLS handshake timed out), or that answered `eject_after_5xx` 5xx responses in a
//!   row, is skipped for `fail_timeout`. A connection made to it, or a passing active check,
//!   brings it back sooner. A request whose connect failed was never sent, so both paths try it
//!   on the next endpoint (nginx's `proxy_next_upstream error`).
//! - **Active checks** ([`Verdicts`], written by `probe`): an endpoint whose readiness check
//!   fails is skipped until one passes.
//! - **Retry budget**: a request may be sent to a second endpoint after a 503, or after its
//!   connection closed unanswered, only while the retries stay under a tenth of the requests
//!   (plus a burst of ten): a struggling upstream does not get its load doubled.
//!
//! One [`Health`] per upstream and worker, shared by the fast path's pool and hyper's client,
//! so the counts on the request path are the worker's own (no cache line shared between
//! threads); each worker learns of a dead endpoint from its own first failed connect. The
//! active checks' [`Verdicts`] are one per upstream, shared by every worker. With one endpoint
//! there is nowhere else to go: nothing is marked or counted but the failed connects
//! (`pms_gateway_upstream_connect_failures_total`).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

/// What the active checks last concluded about each endpoint of one upstream, for every
/// worker. Until a check has run, an endpoint counts as ready.
#[derive(Debug)]
pub(crate) struct Verdicts {
    /// Since when the times below count.
    base: Instant,
    /// Per endpoint: whether its last checks failed.
    failing: Box<[AtomicU8]>,
    /// How many are failing, so that the usual case — none — costs one load.
    count: AtomicUsize,
    /// Per endpoint: milliseconds after `base` when a check last passed after one failed; a
    /// passive mark made before that no longer counts.
    back_at: Box<[AtomicU64]>,
}

impl Verdicts {
    /// Every one of `endpoints` ready.
    pub(crate) fn new(endpoints: usize) -> Self {
        let n = endpoints.max(1);
        Self {
            base: Instant::now(),
            failing: (0..n).map(|_| AtomicU8::new(0)).collect(),
            count: AtomicUsize::new(0),
            back_at: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records a check's conclusion on endpoint `i` (named `name` in the log): `ready` or not,
    /// and `why` not. Returns whether that changed the verdict.
    pub(crate) fn set(&self, i: usize, ready: bool, name: &str, why: &str) -> bool {
        let Some(failing) = self.failing.get(i) else {
            return false;
        };
        let was_failing = failing.swap(u8::from(!ready), Ordering::Relaxed) != 0;
        match (was_failing, ready) {
            (false, false) => {
                self.count.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    endpoint = name,
                    error = why,
                    "an upstream endpoint failed its readiness check; its requests go to the others"
                );
                true
            }
            (true, true) => {
                self.count.fetch_sub(1, Ordering::Relaxed);
                self.recovered(i);
                tracing::info!(endpoint = name, "an upstream endpoint is ready again");
                true
            }
            _ => false,
        }
    }

    /// Records that a check of endpoint `i` passed after one failed: passive skips from before
    /// now no longer count.
    pub(crate) fn recovered(&self, i: usize) {
        if let Some(at) = self.back_at.get(i) {
            at.store(millis(self.base.elapsed()).max(1), Ordering::Relaxed);
        }
    }

    /// Whether endpoint `i`'s checks are failing.
    pub(crate) fn failing(&self, i: usize) -> bool {
        self.count.load(Ordering::Relaxed) != 0
            && self
                .failing
                .get(i)
                .is_some_and(|f| f.load(Ordering::Relaxed) != 0)
    }

    fn back_at(&self, i: usize) -> u64 {
        self.back_at
            .get(i)
            .map_or(0, |at| at.load(Ordering::Relaxed))
    }
}

/// What passive health counts and the counters it reports to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Passive {
    /// How long an ejected endpoint is skipped.
    pub fail_timeout: Duration,
    /// 5xx answers in a row that eject an endpoint; 0: never.
    pub eject_after_5xx: u32,
    /// Connects that failed, all endpoints together.
    pub connect_failures: Counter,
    /// Times an endpoint started being skipped (by this worker).
    pub ejections: Counter,
    /// Requests sent to a second endpoint after a 503 or a connection closed unanswered.
    pub retries: Counter,
}

/// Retry budget, in tenths of a retry: each request adds one, a retry takes ten.
const BUDGET_CAP: u32 = 100;
const RETRY_COST: u32 = 10;

/// Which endpoints of one upstream to skip for now, and which to send the next request to.
#[derive(Debug)]
pub(crate) struct Health {
    passive: Passive,
    verdicts: Arc<Verdicts>,
    /// Per endpoint: milliseconds after `verdicts.base` until which it is skipped; 0 when it is
    /// not.
    down_until: Box<[AtomicU64]>,
    /// How many endpoints are marked (expired marks included), so that the usual case — none —
    /// costs no clock read.
    marked: AtomicUsize,
    /// Per endpoint: requests sent and not yet answered (with more than one endpoint).
    outstanding: Box<[AtomicUsize]>,
    /// Per endpoint: 5xx answers in a row.
    errors_in_a_row: Box<[AtomicU32]>,
    /// Round-robin position.
    next: AtomicUsize,
    /// State of the generator that draws the second choice (xorshift).
    draw: AtomicU64,
    /// Retries that may be made now, in tenths.
    budget: AtomicU32,
}

impl Health {
    /// All `endpoints` up, as far as this worker knows; `verdicts` are the upstream's active
    /// checks (never failing when it has none).
    pub(crate) fn new(endpoints: usize, passive: Passive, verdicts: Arc<Verdicts>) -> Self {
        let n = endpoints.max(1);
        Self {
            passive,
            verdicts,
            down_until: (0..n).map(|_| AtomicU64::new(0)).collect(),
            marked: AtomicUsize::new(0),
            outstanding: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            errors_in_a_row: (0..n).map(|_| AtomicU32::new(0)).collect(),
            next: AtomicUsize::new(0),
            draw: AtomicU64::new(seed()),
            budget: AtomicU32::new(BUDGET_CAP),
        }
    }

    fn len(&self) -> usize {
        self.down_until.len()
    }

    /// The endpoint for a new request: of the next in turn and one other drawn at random, the
    /// one not skipped with fewer requests outstanding. When every endpoint is skipped, the
    /// next in turn all the same (a request must go somewhere, and that is how one comes back).
    pub(crate) fn pick(&self) -> usize {
        let n = self.len();
        if n == 1 {
            return 0;
        }
        if self.budget.load(Ordering::Relaxed) < BUDGET_CAP {
            self.budget.fetch_add(1, Ordering::Relaxed);
        }
        let a = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let b = (a + 1 + self.random() % (n - 1)) % n;
        let any_down = self.anything_down();
        let now = if any_down { self.now_ms() } else { 0 };
        let up = |i: usize| !any_down || !self.is_down_at(i, now);
        match (up(a), up(b)) {
            (true, true) => {
                if self.load(b) < self.load(a) {
                    b
                } else {
                    a
                }
            }
            (true, false) => a,
            (false, true) => b,
            (false, false) => (1..n).map(|k| (a + k) % n).find(|&i| up(i)).unwrap_or(a),
        }
    }

    /// The endpoints to try, in order, after a connect to `first` failed: the others, in turn.
    /// Those being skipped are left out as the caller comes to them ([`Health::is_down`]).
    pub(crate) fn after(&self, first: usize) -> impl Iterator<Item = usize> {
        let n = self.len();
        (1..n).map(move |k| (first + k) % n)
    }

    /// Another endpoint than `first`, not skipped, to send a request to again (after a 503,
    /// or a connection closed unanswered) — if the retry budget allows one (it is then spent).
    pub(crate) fn retry_elsewhere(&self, first: usize) -> Option<usize> {
        let other = self.after(first).find(|&i| !self.is_down(i))?;
        self.budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                b.checked_sub(RETRY_COST)
            })
            .ok()?;
        self.passive.retries.inc();
        Some(other)
    }

    /// Whether endpoint `i` is being skipped.
    pub(crate) fn is_down(&self, i: usize) -> bool {
        self.anything_down() && self.is_down_at(i, self.now_ms())
    }

    /// Counts a request on endpoint `i` as outstanding until the returned guard is dropped
    /// (`None`, counting nothing, with one endpoint: there is no choice to inform).
    pub(crate) fn busy(self: &Arc<Self>, i: usize) -> Option<Busy> {
        let count = self.outstanding.get(i).filter(|_| self.len() > 1)?;
        count.fetch_add(1, Ordering::Relaxed);
        Some(Busy {
            health: Arc::clone(self),
            i,
        })
    }

    /// Records that connecting to endpoint `i` (named `name` in the log) failed with `why`.
    pub(crate) fn failed(&self, i: usize, name: &str, why: &str) {
        self.passive.connect_failures.inc();
        self.eject(i, name, why);
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

    /// Records the status of a response head from endpoint `i` (named `name`): the
    /// `eject_after_5xx`-th 5xx in a row ejects it.
    pub(crate) fn answered(&self, i: usize, name: &str, status: u16) {
        let after = self.passive.eject_after_5xx;
        if after == 0 || self.len() < 2 {
            return;
        }
        let Some(row) = self.errors_in_a_row.get(i) else {
            return;
        };
        if !(500..600).contains(&status) {
            if row.load(Ordering::Relaxed) != 0 {
                row.store(0, Ordering::Relaxed);
            }
            return;
        }
        if row.fetch_add(1, Ordering::Relaxed) + 1 >= after {
            row.store(0, Ordering::Relaxed);
            // Not the last one up: when every endpoint fails alike, the fault is not theirs
            // to be sorted by (a bad request, a shared database down), and skipping them
            // would only concentrate the load.
            if self.after(i).any(|j| !self.is_down(j)) {
                self.eject(
                    i,
                    name,
                    &format!("{after} answers with status 5xx in a row"),
                );
            }
        }
    }

    /// Skips endpoint `i` for `fail_timeout` (with more than one).
    fn eject(&self, i: usize, name: &str, why: &str) {
        if self.len() < 2 {
            return;
        }
        let Some(mark) = self.down_until.get(i) else {
            return;
        };
        let until = self.now_ms() + millis(self.passive.fail_timeout).max(1);
        if mark.swap(until, Ordering::Relaxed) == 0 {
            self.marked.fetch_add(1, Ordering::Relaxed);
            self.passive.ejections.inc();
            tracing::warn!(
                endpoint = name,
                error = why,
                skipped_for_ms = millis(self.passive.fail_timeout),
                "an upstream endpoint is failing; sending its requests to the others"
            );
        }
    }

    fn anything_down(&self) -> bool {
        self.marked.load(Ordering::Relaxed) != 0 || self.verdicts.count.load(Ordering::Relaxed) != 0
    }

    fn is_down_at(&self, i: usize, now: u64) -> bool {
        if self.verdicts.failing(i) {
            return true;
        }
        let Some(until) = self.down_until.get(i).map(|m| m.load(Ordering::Relaxed)) else {
            return false;
        };
        // A mark counts until it expires, unless a check found the endpoint ready since.
        let marked_at = until.saturating_sub(millis(self.passive.fail_timeout).max(1));
        now < until && marked_at >= self.verdicts.back_at(i)
    }

    fn load(&self, i: usize) -> usize {
        self.outstanding
            .get(i)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    fn now_ms(&self) -> u64 {
        millis(self.verdicts.base.elapsed())
    }

    /// A pseudo-random number (xorshift64): good enough to pick a second endpoint.
    fn random(&self) -> usize {
        let mut x = self.draw.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.draw.store(x, Ordering::Relaxed);
        // Truncation is fine: any bits will do.
        x as usize
    }
}

/// A request outstanding on one endpoint, until dropped.
#[derive(Debug)]
pub(crate) struct Busy {
    health: Arc<Health>,
    i: usize,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(c) = self.health.outstanding.get(self.i) {
            c.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A nonzero seed that differs between workers and runs.
fn seed() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return 0x9e37_79b9_7f4a_7c15;
    }
    u64::from_le_bytes(bytes) | 1
}

/// Whether sending a request twice does no more than sending it once (RFC 9110 §9.2.2): one
/// whose connection closed before a byte of its answer came may be sent again (RFC 9112
/// §9.3.1), on a new connection or to another endpoint. Both front ends ask this.
pub(crate) fn idempotent(method: &http::Method) -> bool {
    use http::Method;
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE
    )
}

/// Whether a request that got a 503 may be sent to another endpoint: its method is safe (GET,
/// HEAD, OPTIONS), or it is a PUT or DELETE carrying an `Idempotency-Key`. Never a POST: its
/// body went out, and the upstream may have acted on it. Both front ends ask this.
pub(crate) fn resend_after_503(
    method: &http::Method,
    idempotency_key: impl FnOnce() -> bool,
) -> bool {
    use http::Method;
    match *method {
        Method::GET | Method::HEAD | Method::OPTIONS => true,
        Method::PUT | Method::DELETE => idempotency_key(),
        _ => false,
    }
}

/// The request header that makes a PUT or DELETE safe to send again after a 503.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(n: usize, fail_timeout: Duration) -> Arc<Health> {
        health_with(n, fail_timeout, Arc::new(Verdicts::new(n)))
    }

    fn health_with(n: usize, fail_timeout: Duration, verdicts: Arc<Verdicts>) -> Arc<Health> {
        let passive = Passive {
            fail_timeout,
            eject_after_5xx: 3,
            ..Passive::default()
        };
        Arc::new(Health::new(n, passive, verdicts))
    }

    fn picks(h: &Health, n: usize) -> Vec<usize> {
        (0..n).map(|_| h.pick()).collect()
    }

    #[test]
    fn with_nothing_outstanding_endpoints_take_turns() {
        let h = health(3, Duration::from_secs(60));
        assert_eq!(picks(&h, 6), [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn a_failed_endpoint_is_skipped_until_connected_to_again() {
        let h = health(3, Duration::from_secs(60));
        h.failed(1, "b", "refused");
        let turns = picks(&h, 30);
        assert!(!turns.contains(&1), "{turns:?}");
        assert!(turns.contains(&0) && turns.contains(&2), "{turns:?}");
        h.connected(1, "b");
        assert!(picks(&h, 3).contains(&1), "back in turn once connected to");
        assert_eq!(h.passive.ejections.get(), 1);
    }

    #[test]
    fn a_failed_endpoint_comes_back_after_the_fail_timeout() {
        let h = health(2, Duration::from_millis(1));
        h.failed(0, "a", "refused");
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(picks(&h, 2), [0, 1]);
    }

    #[test]
    fn with_every_endpoint_failed_requests_still_go_somewhere() {
        let h = health(2, Duration::from_secs(60));
        h.failed(0, "a", "refused");
        h.failed(1, "b", "refused");
        assert_eq!(picks(&h, 2), [0, 1]);
        assert!(h.after(0).all(|i| h.is_down(i)), "nothing else to try");
    }

    #[test]
    fn after_a_failure_the_other_endpoints_up_are_tried_each_once() {
        let h = health(4, Duration::from_secs(60));
        h.failed(3, "d", "refused");
        // A request started at 2 and failed there: 3 is skipped, then 0 and 1.
        h.failed(2, "c", "refused");
        let next: Vec<_> = h.after(2).filter(|&i| !h.is_down(i)).collect();
        assert_eq!(next, [0, 1]);
    }

    #[test]
    fn one_endpoint_is_never_skipped_nor_counted() {
        let h = health(1, Duration::from_secs(60));
        h.failed(0, "a", "refused");
        for _ in 0..5 {
            h.answered(0, "a", 503);
        }
        assert_eq!(h.pick(), 0);
        assert_eq!(h.marked.load(Ordering::Relaxed), 0);
        assert!(h.busy(0).is_none());
        assert_eq!(h.passive.connect_failures.get(), 1, "counted all the same");
    }

    #[test]
    fn the_endpoint_with_fewer_requests_outstanding_gets_the_next() {
        let h = health(2, Duration::from_secs(60));
        let held: Vec<_> = (0..3).filter_map(|_| h.busy(0)).collect();
        assert_eq!(picks(&h, 4), [1, 1, 1, 1], "0 is slower to answer");
        drop(held);
        assert_eq!(picks(&h, 2), [0, 1], "even again: in turn");
        // With more endpoints, the busiest is picked only when both draws land on it and
        // another... never: its rival is always less loaded.
        let h = health(3, Duration::from_secs(60));
        let _held: Vec<_> = (0..3).filter_map(|_| h.busy(2)).collect();
        assert!(!picks(&h, 60).contains(&2));
    }

    #[test]
    fn answers_with_5xx_in_a_row_eject_an_endpoint_and_one_success_resets_the_count() {
        let h = health(2, Duration::from_secs(60));
        h.answered(0, "a", 502);
        h.answered(0, "a", 500);
        h.answered(0, "a", 200);
        h.answered(0, "a", 503);
        h.answered(0, "a", 503);
        assert!(!h.is_down(0), "two in a row since the 200");
        h.answered(0, "a", 504);
        assert!(h.is_down(0), "the third in a row ejects it");
        assert!(!picks(&h, 10).contains(&0));
        // The last one up stays up however it answers.
        for _ in 0..6 {
            h.answered(1, "b", 500);
        }
        assert!(!h.is_down(1));
    }

    #[test]
    fn a_failing_check_skips_an_endpoint_for_every_worker_and_a_passing_one_clears_old_marks() {
        let verdicts = Arc::new(Verdicts::new(2));
        let (w1, w2) = (
            health_with(2, Duration::from_secs(60), Arc::clone(&verdicts)),
            health_with(2, Duration::from_secs(60), Arc::clone(&verdicts)),
        );
        assert!(verdicts.set(1, false, "b", "503"));
        assert!(!verdicts.set(1, false, "b", "503"), "no change");
        assert!(!picks(&w1, 10).contains(&1) && !picks(&w2, 10).contains(&1));
        w1.failed(1, "b", "refused");
        std::thread::sleep(Duration::from_millis(2));
        assert!(verdicts.set(1, true, "b", ""));
        assert!(
            !w1.is_down(1),
            "ready since the connect failed: the mark no longer counts"
        );
        assert!(picks(&w1, 4).contains(&1) && picks(&w2, 4).contains(&1));
        w1.failed(1, "b", "refused again");
        assert!(w1.is_down(1), "a new failure counts");
    }

    #[test]
    fn retries_stay_within_a_tenth_of_the_requests() {
        let h = health(2, Duration::from_secs(60));
        let burst = (0..50).filter(|_| h.retry_elsewhere(0).is_some()).count();
        assert_eq!(burst, 10, "a burst of ten at first");
        let _ = picks(&h, 100);
        let after = (0..50).filter(|_| h.retry_elsewhere(0).is_some()).count();
        assert_eq!(after, 10, "then one per ten requests");
        assert_eq!(h.passive.retries.get(), 20);
        h.failed(1, "b", "refused");
        let _ = picks(&h, 100);
        assert_eq!(h.retry_elsewhere(0), None, "nowhere else up");
    }

    #[test]
    fn only_requests_that_may_be_repeated_are_resent_after_a_503() {
        use http::Method;
        assert!(resend_after_503(&Method::GET, || false));
        assert!(resend_after_503(&Method::HEAD, || false));
        assert!(!resend_after_503(&Method::PUT, || false));
        assert!(resend_after_503(&Method::PUT, || true));
        assert!(!resend_after_503(&Method::POST, || true));
        assert!(!resend_after_503(&Method::PATCH, || false));
    }
}
