//! HTTP/2 responses the client takes no data of: [`Starvation`] watches a connection's response
//! bodies and tells when one has waited a whole period for hyper to ask for its next frame.
//!
//! Why: an HTTP/2 client controls how much the server may send it (flow-control windows). One
//! that grants no window, and answers PINGs, holds each of its responses for good: hyper asks a
//! body for data only when the window has room, so nothing is written, the send timeout of
//! [`crate::stall`] never starts, and the connection never looks idle. Behind a proxy every
//! such response also holds an upstream connection. nginx closes such streams after its
//! `send_timeout`; the server here closes the connection (see `serve`).
//!
//! As with [`crate::idle`], there is no timer operation per request or per frame: the timer
//! goes off once per period while bodies are out, and a body counts as starved when it has
//! been waiting since before the previous tick, so after one to two periods. A body waiting
//! for its own source (an upstream that is slow to send) is not waiting for hyper, and never
//! counts.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::sync::Notify;

/// One connection's watch over its response bodies.
#[derive(Debug)]
pub(crate) struct Starvation {
    period: Duration,
    /// Ticks so far; a body's mark is the tick it started waiting in, plus one.
    tick: AtomicU64,
    /// The marks of the bodies out (0: not waiting for hyper). Dead entries are dropped when
    /// the list would grow, and at each tick.
    bodies: Mutex<Vec<Weak<AtomicU64>>>,
    /// Wakes the watch when a body comes out while none was.
    first: Notify,
}

impl Starvation {
    /// A watch that calls a body starved after it waited for at least `period`.
    pub(crate) fn new(period: Duration) -> Self {
        Self {
            period,
            tick: AtomicU64::new(0),
            bodies: Mutex::new(Vec::new()),
            first: Notify::new(),
        }
    }

    /// The period it was made with.
    pub(crate) fn period(&self) -> Duration {
        self.period
    }

    /// Watches `body`, which waits for its first poll from now on.
    pub(crate) fn watch<B>(self: &Arc<Self>, body: B) -> Watched<B> {
        let mark = Arc::new(AtomicU64::new(self.mark()));
        let was_empty = match self.bodies.lock() {
            Ok(mut bodies) => {
                if bodies.len() == bodies.capacity() {
                    bodies.retain(|b| b.strong_count() > 0);
                }
                let was_empty = bodies.is_empty();
                bodies.push(Arc::downgrade(&mark));
                was_empty
            }
            // A panic elsewhere left the list; this body goes unwatched.
            Err(_) => false,
        };
        if was_empty {
            self.first.notify_one();
        }
        Watched {
            inner: body,
            watch: Some((mark, Arc::clone(self))),
        }
    }

    /// Resolves once a body has waited for its next poll for a whole period. Meant to be
    /// polled for the connection's life; with no bodies out it sets no timer.
    pub(crate) async fn starved(&self) {
        loop {
            if self.is_empty() {
                self.first.notified().await;
            }
            tokio::time::sleep(self.period).await;
            if self.tick() {
                return;
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.bodies.lock().map_or(true, |mut bodies| {
            bodies.retain(|b| b.strong_count() > 0);
            bodies.is_empty()
        })
    }

    /// Moves to the next tick; true when a body has been waiting since before the last one.
    fn tick(&self) -> bool {
        let now = self.tick.fetch_add(1, Ordering::Relaxed) + 1;
        let Ok(mut bodies) = self.bodies.lock() else {
            return false;
        };
        bodies.retain(|b| b.strong_count() > 0);
        bodies.iter().filter_map(Weak::upgrade).any(|mark| {
            let mark = mark.load(Ordering::Relaxed);
            // It has been waiting since tick `mark - 1`, before the previous tick: for a
            // whole period at least.
            mark != 0 && mark < now
        })
    }

    fn mark(&self) -> u64 {
        self.tick.load(Ordering::Relaxed) + 1
    }
}

pin_project_lite::pin_project! {
    /// A response body, under a [`Starvation`] watch or not.
    pub struct Watched<B> {
        #[pin]
        inner: B,
        // Its mark in the watch's list, and the watch.
        watch: Option<(Arc<AtomicU64>, Arc<Starvation>)>,
    }
}

impl<B> Watched<B> {
    /// `body` with no watch (HTTP/1.1, where a client that takes nothing stops the writes, and
    /// the send timeout sees that).
    pub(crate) fn unwatched(body: B) -> Self {
        Self {
            inner: body,
            watch: None,
        }
    }
}

impl<B: Body> Body for Watched<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let Some((mark, watch)) = this.watch else {
            return this.inner.poll_frame(cx);
        };
        // Asked: not waiting for hyper now. Waiting for the source, if it comes to that.
        mark.store(0, Ordering::Relaxed);
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            // A frame out: waiting for hyper to ask for the next one from here.
            mark.store(watch.mark(), Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pin_project_lite::pin_project! {
    /// A service's response future whose body comes out watched (when `watch` is set) or not.
    pub(crate) struct Watching<F> {
        #[pin]
        inner: F,
        watch: Option<Arc<Starvation>>,
    }
}

impl<F> Watching<F> {
    /// Watches the body `inner` answers with when `watch` is set.
    pub(crate) fn new(inner: F, watch: Option<Arc<Starvation>>) -> Self {
        Self { inner, watch }
    }
}

impl<F, B, E> std::future::Future for Watching<F>
where
    F: std::future::Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<Watched<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = std::task::ready!(this.inner.poll(cx))?;
        let watch = this.watch.take();
        Poll::Ready(Ok(response.map(|body| match watch {
            Some(watch) => watch.watch(body),
            None => Watched::unwatched(body),
        })))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::task::Waker;

    use bytes::Bytes;

    use super::*;

    /// A body that has a frame ready whenever asked, or never.
    struct Source {
        ready: bool,
    }

    impl Body for Source {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            if self.ready {
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
            } else {
                Poll::Pending
            }
        }
    }

    fn poll<B: Body + Unpin>(body: &mut B) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(body).poll_frame(&mut cx).is_ready()
    }

    fn watch() -> Arc<Starvation> {
        Arc::new(Starvation::new(Duration::from_secs(10)))
    }

    #[test]
    fn a_body_never_asked_for_data_is_starved_after_one_full_period() {
        let w = watch();
        let _body = w.watch(Source { ready: true });
        assert!(!w.tick(), "it may have come out just before this tick");
        assert!(w.tick(), "a whole period went by");
    }

    #[test]
    fn a_body_asked_again_after_each_frame_is_not_starved() {
        let w = watch();
        let mut body = w.watch(Source { ready: true });
        for _ in 0..5 {
            assert!(poll(&mut body));
            assert!(!w.tick());
        }
        // Then hyper stops asking (no window): starved one full period later.
        assert!(w.tick());
    }

    #[test]
    fn a_body_waiting_for_its_source_is_never_starved() {
        let w = watch();
        let mut body = w.watch(Source { ready: false });
        assert!(!poll(&mut body));
        for _ in 0..5 {
            assert!(!w.tick());
        }
    }

    #[test]
    fn dropped_and_unwatched_bodies_do_not_count() {
        let w = watch();
        drop(w.watch(Source { ready: true }));
        let _plain = Watched::unwatched(Source { ready: true });
        assert!(!w.tick());
        assert!(!w.tick());
        assert!(w.is_empty());
    }

    #[test]
    fn the_list_of_bodies_stays_as_long_as_the_bodies_out() {
        let w = watch();
        for _ in 0..10_000 {
            drop(w.watch(Source { ready: true }));
        }
        let _live = w.watch(Source { ready: true });
        let room = w.bodies.lock().unwrap().capacity();
        assert!(room <= 8, "room for {room} entries, for one body out");
    }

    #[tokio::test(start_paused = true)]
    async fn the_watch_resolves_only_for_a_starved_body_and_sets_no_timer_without_bodies() {
        let w = watch();
        let started = tokio::time::Instant::now();
        // No bodies out: nothing happens, however long.
        let quiet = tokio::time::timeout(Duration::from_secs(100), w.starved()).await;
        assert!(quiet.is_err());
        let _body = w.watch(Source { ready: true });
        let out_at = tokio::time::Instant::now();
        w.starved().await;
        let waited = out_at.elapsed();
        assert!(
            waited >= Duration::from_secs(10) && waited <= Duration::from_secs(20),
            "{waited:?}"
        );
        assert!(started.elapsed() >= Duration::from_secs(110));
    }
}
