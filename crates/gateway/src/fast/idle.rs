//! Closing a keep-alive connection that sends no request for the header-read timeout, as
//! hyper's path does, without a timer operation per request: the timer is set once per timeout
//! period, and when it fires it only closes a connection that carried no request since it was
//! set. An idle connection so closes after one to two timeouts.
//!
//! Why: without it an idle client connection stayed open for good, and `max_connections` idle
//! clients kept every later one waiting in the backlog.

use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// One connection's idle timer.
pub(super) struct Idle {
    timeout: Duration,
    // Made when the connection first waits for a request.
    timer: Option<Pin<Box<Sleep>>>,
    busy: bool,
}

impl Idle {
    pub(super) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            timer: None,
            busy: false,
        }
    }

    /// Notes that a request came: the connection was not idle this period.
    pub(super) fn request(&mut self) {
        self.busy = true;
    }

    /// Resolves when a whole timeout period has gone by without a request.
    pub(super) async fn expired(&mut self) {
        let timeout = self.timeout;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        loop {
            timer.as_mut().await;
            if !std::mem::take(&mut self.busy) {
                return;
            }
            timer.as_mut().reset(Instant::now() + timeout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_requests_expires_after_the_timeout() {
        let mut idle = Idle::new(Duration::from_secs(10));
        let started = Instant::now();
        idle.expired().await;
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn requests_keep_it_open_and_it_expires_within_two_timeouts_of_the_last() {
        let mut idle = Idle::new(Duration::from_secs(10));
        let started = Instant::now();
        // A request every 4 s for 30 s: no expiry meanwhile.
        for _ in 0..8 {
            let wait = tokio::time::timeout(Duration::from_secs(4), idle.expired()).await;
            assert!(wait.is_err(), "expired while busy");
            idle.request();
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
