//! Closing a connection that sends no request for a while, without a timer operation per
//! request: the timer is set once per period, and when it fires it only ends a connection that
//! started no request since it was set. An idle connection so ends after one to two periods.
//!
//! Why: an idle connection that is never closed holds a slot under `max_connections` for good,
//! and enough of them keep every later client waiting in the backlog.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// One connection's idle timer.
pub struct IdleTimer {
    period: Duration,
    // Made when the connection is first waited on.
    timer: Option<std::pin::Pin<Box<Sleep>>>,
    busy: Activity,
}

/// Where the code that serves requests notes them; cheap to clone and to call.
#[derive(Debug, Clone, Default)]
pub struct Activity(Arc<AtomicBool>);

impl Activity {
    /// Notes that a request came: the connection was not idle this period.
    pub fn request(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl IdleTimer {
    /// A timer with the given period.
    pub fn new(period: Duration) -> Self {
        Self {
            period,
            timer: None,
            busy: Activity::default(),
        }
    }

    /// The handle requests are noted through.
    pub fn activity(&self) -> Activity {
        self.busy.clone()
    }

    /// Notes that a request came.
    pub fn request(&self) {
        self.busy.request();
    }

    /// Resolves when a whole period has gone by without a request. Cancel-safe: dropped and
    /// called again, it goes on with the same timer.
    pub async fn expired(&mut self) {
        let period = self.period;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(period)));
        loop {
            timer.as_mut().await;
            if !self.busy.0.swap(false, Ordering::Relaxed) {
                return;
            }
            timer.as_mut().reset(Instant::now() + period);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_requests_expires_after_the_period() {
        let mut idle = IdleTimer::new(Duration::from_secs(10));
        let started = Instant::now();
        idle.expired().await;
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn requests_keep_it_open_and_it_expires_within_two_periods_of_the_last() {
        let mut idle = IdleTimer::new(Duration::from_secs(10));
        let activity = idle.activity();
        let started = Instant::now();
        // A request every 4 s for 32 s: no expiry meanwhile.
        for _ in 0..8 {
            let wait = tokio::time::timeout(Duration::from_secs(4), idle.expired()).await;
            assert!(wait.is_err(), "expired while busy");
            activity.request();
        }
        let last = Instant::now();
        assert_eq!(last - started, Duration::from_secs(32));
        idle.expired().await;
        let quiet = last.elapsed();
        assert!(
            quiet >= Duration::from_secs(10) && quiet < Duration::from_secs(20),
            "{quiet:?}"
        );
    }
}
