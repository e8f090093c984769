//! A deadline that moves with each request on a connection, without a timer operation per
//! request: [`Deadline`].
//!
//! Why: `tokio::time::timeout_at` makes a timer for every wait, and a wait that has to sleep
//! (an upstream's answer nearly always does) puts it into the runtime's timer wheel and takes it
//! out again, under the driver's lock: about 440 instructions of a proxied request's 16,000. A
//! connection's deadlines only move forward (each is "now plus the request timeout"), so one
//! timer can serve them all: left where it is while it is not later than the deadline at hand,
//! it goes off early at most once per timeout, and is then set to the deadline of that moment.

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::{ready, Context, Poll};

use tokio::time::{Instant, Sleep};

/// A deadline and the timer that watches it; one per connection, kept across its requests.
pub struct Deadline {
    at: Instant,
    // Made at the first wait. When set, it goes off at `armed`, never after `at`.
    timer: Option<Pin<Box<Sleep>>>,
    armed: Instant,
}

/// The deadline passed before the bounded operation finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl Deadline {
    /// A deadline at `at`.
    pub fn new(at: Instant) -> Self {
        Self {
            at,
            timer: None,
            armed: at,
        }
    }

    /// Moves the deadline to `at` (earlier or later). No timer operation.
    pub fn set(&mut self, at: Instant) {
        self.at = at;
    }

    /// Where the deadline is.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// Runs `operation` until it finishes or the deadline passes, whichever comes first; the
    /// operation is polled first, as with `tokio::time::timeout_at`.
    ///
    /// # Errors
    /// [`Elapsed`] when the deadline passed first; the operation is dropped.
    pub async fn run<F: Future>(&mut self, operation: F) -> Result<F::Output, Elapsed> {
        let mut operation = pin!(operation);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(out) = operation.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
            self.poll_passed(cx).map(|()| Err(Elapsed))
        })
        .await
    }

    /// Ready once the deadline has passed; until then `cx` is woken when it does (or earlier,
    /// spuriously, when the timer was set for an earlier deadline).
    pub fn poll_passed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let at = self.at;
        let timer = match &mut self.timer {
            Some(timer) => {
                if self.armed > at {
                    timer.as_mut().reset(at);
                    self.armed = at;
                }
                timer
            }
            None => {
                self.armed = at;
                self.timer.insert(Box::pin(tokio::time::sleep_until(at)))
            }
        };
        loop {
            ready!(timer.as_mut().poll(cx));
            if self.armed >= at {
                return Poll::Ready(());
            }
            // It went off for an earlier deadline: on to this one.
            timer.as_mut().reset(at);
            self.armed = at;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn an_operation_that_finishes_in_time_gives_its_output() {
        let mut deadline = Deadline::new(Instant::now() + 10 * SECOND);
        let out = deadline
            .run(async {
                tokio::time::sleep(9 * SECOND).await;
                7
            })
            .await;
        assert_eq!(out, Ok(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_operation_ends_at_the_deadline() {
        let started = Instant::now();
        let mut deadline = Deadline::new(started + 10 * SECOND);
        let out = deadline.run(std::future::pending::<()>()).await;
        assert_eq!(out, Err(Elapsed));
        assert_eq!(started.elapsed(), 10 * SECOND);
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_deadline_is_kept_after_the_timer_goes_off_for_the_earlier_one() {
        let started = Instant::now();
        let mut deadline = Deadline::new(started + 10 * SECOND);
        // The timer is made and set for 10 s, then the deadline moves to 15 s.
        assert_eq!(deadline.run(tokio::time::sleep(SECOND)).await, Ok(()));
        deadline.set(started + 15 * SECOND);
        assert_eq!(
            deadline.run(std::future::pending::<()>()).await,
            Err(Elapsed)
        );
        assert_eq!(started.elapsed(), 15 * SECOND);
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_sets_the_timer_back() {
        let started = Instant::now();
        let mut deadline = Deadline::new(started + 10 * SECOND);
        assert_eq!(deadline.run(tokio::time::sleep(SECOND)).await, Ok(()));
        deadline.set(started + 3 * SECOND);
        assert_eq!(
            deadline.run(std::future::pending::<()>()).await,
            Err(Elapsed)
        );
        assert_eq!(started.elapsed(), 3 * SECOND);
    }

    #[tokio::test(start_paused = true)]
    async fn a_passed_deadline_ends_an_operation_that_is_not_ready_at_once() {
        let started = Instant::now();
        let mut deadline = Deadline::new(started + SECOND);
        assert_eq!(
            deadline.run(std::future::pending::<()>()).await,
            Err(Elapsed)
        );
        // Already ready wins over a passed deadline, as with `timeout_at`.
        assert_eq!(deadline.run(async { 1 }).await, Ok(1));
        assert_eq!(
            deadline.run(std::future::pending::<()>()).await,
            Err(Elapsed)
        );
        assert_eq!(started.elapsed(), SECOND);
    }
}
