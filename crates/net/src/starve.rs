//! HTTP/2 responses the client takes no data of: [`Starvation`] watches a connection's response
//! bodies, and resets the stream of one that has waited a whole period for hyper to ask for its
//! next frame.
//!
//! Why: an HTTP/2 client controls how much the server may send it (flow-control windows). One
//! that grants a stream no window, and answers PINGs, holds that response for good: hyper asks a
//! body for data only when the window has room, so nothing is written, the send timeout of
//! [`crate::stall`] never starts, and the connection never looks idle. Behind a proxy every
//! such response also holds an upstream connection. As nginx does after its `send_timeout`,
//! the stream is reset (`RST_STREAM` with `CANCEL`); the connection and its other streams go
//! on.
//!
//! How a stream is reset from outside hyper: hyper runs each HTTP/2 stream as a task it hands
//! to its executor. [`StreamExecutor`] runs it under a [`Stream`] handle (a task-local, which
//! the body picks up when it is watched) and ends the task when the handle is cancelled.
//! Dropping the task's future drops hyper's handles on the stream, and h2 then resets it.
//!
//! As with [`crate::idle`], there is no timer operation per request or per frame: the timer
//! goes off once per period while bodies are out, and a body counts as starved when it has
//! been waiting since before the previous tick, so after one to two periods. A body waiting
//! for its own source (an upstream that is slow to send) is not waiting for hyper, and never
//! counts.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use atomic_waker::AtomicWaker;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::Notify;

tokio::task_local! {
    /// The stream a task started by [`StreamExecutor`] serves.
    static STREAM: Arc<Stream>;
}

/// One response stream under watch: since when it has waited for hyper, and how to end it.
#[derive(Debug)]
pub(crate) struct Stream {
    /// The tick it started waiting for hyper in, plus one; 0 while it is not waiting for hyper.
    mark: AtomicU64,
    /// Whether a [`StreamExecutor`] task serves it, which can be ended alone.
    cancellable: bool,
    cancelled: AtomicBool,
    /// The serving task, woken to end itself.
    task: AtomicWaker,
}

impl Stream {
    fn new(cancellable: bool) -> Self {
        Self {
            mark: AtomicU64::new(0),
            cancellable,
            cancelled: AtomicBool::new(false),
            task: AtomicWaker::new(),
        }
    }

    /// Ends the task serving the stream; false when no task can be ended for it alone.
    fn cancel(&self) -> bool {
        if !self.cancellable {
            return false;
        }
        self.cancelled.store(true, Ordering::Release);
        self.task.wake();
        true
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }
}

/// hyper's executor for HTTP/2 servers: spawns each stream's task on the current tokio runtime,
/// under a [`Stream`] handle that the connection's [`Starvation`] watch can cancel it by.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StreamExecutor;

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, task: F) {
        let stream = Arc::new(Stream::new(true));
        tokio::spawn(Cancellable {
            inner: STREAM.scope(Arc::clone(&stream), task),
            stream,
        });
    }
}

pin_project_lite::pin_project! {
    /// A stream's task that ends, dropping what it was doing, once its stream is cancelled.
    struct Cancellable<F> {
        #[pin]
        inner: F,
        stream: Arc<Stream>,
    }
}

impl<F: Future<Output = ()>> Future for Cancellable<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        this.stream.task.register(cx.waker());
        if this.stream.is_cancelled() {
            return Poll::Ready(());
        }
        this.inner.poll(cx)
    }
}

/// One connection's watch over its response bodies.
#[derive(Debug)]
pub(crate) struct Starvation {
    period: Duration,
    /// Ticks so far; a body's mark is the tick it started waiting in, plus one.
    tick: AtomicU64,
    /// The streams of the bodies out. Dead entries are dropped when the list would grow, and at
    /// each tick.
    bodies: Mutex<Vec<Weak<Stream>>>,
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

    /// Watches `body`, which waits for its first poll from now on. Called in a task that
    /// [`StreamExecutor`] started, the body's stream can be reset alone; elsewhere a starved
    /// body makes [`Starvation::starved`] resolve, for its connection to be closed.
    pub(crate) fn watch<B>(self: &Arc<Self>, body: B) -> Watched<B> {
        let stream = STREAM
            .try_with(Arc::clone)
            .unwrap_or_else(|_| Arc::new(Stream::new(false)));
        stream.mark.store(self.mark(), Ordering::Relaxed);
        let was_empty = match self.bodies.lock() {
            Ok(mut bodies) => {
                if bodies.len() == bodies.capacity() {
                    bodies.retain(|b| b.strong_count() > 0);
                }
                let was_empty = bodies.is_empty();
                bodies.push(Arc::downgrade(&stream));
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
            watch: Some((stream, Arc::clone(self))),
        }
    }

    /// Resets the streams of bodies that have waited for their next poll for a whole period,
    /// and resolves once such a body's stream cannot be reset alone (its connection should
    /// close). Meant to be polled for the connection's life; with no bodies out it sets no
    /// timer.
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

    /// Moves to the next tick and cancels the streams of bodies that have been waiting since
    /// before the last one. True when one of those could not be cancelled.
    fn tick(&self) -> bool {
        let now = self.tick.fetch_add(1, Ordering::Relaxed) + 1;
        let Ok(mut bodies) = self.bodies.lock() else {
            return false;
        };
        bodies.retain(|b| b.strong_count() > 0);
        let mut stuck = false;
        for stream in bodies.iter().filter_map(Weak::upgrade) {
            let mark = stream.mark.load(Ordering::Relaxed);
            // Waiting since tick `mark - 1`, before the previous tick: for a whole period at
            // least.
            if mark == 0 || mark >= now {
                continue;
            }
            if stream.cancel() {
                stream.mark.store(0, Ordering::Relaxed);
                tracing::debug!(
                    after = ?self.period,
                    "an HTTP/2 response waited that long for flow-control window; resetting its stream"
                );
            } else {
                stuck = true;
            }
        }
        stuck
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
        // Its stream in the watch's list, and the watch.
        watch: Option<(Arc<Stream>, Arc<Starvation>)>,
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
        let Some((stream, watch)) = this.watch else {
            return this.inner.poll_frame(cx);
        };
        // Asked: not waiting for hyper now. Waiting for the source, if it comes to that.
        stream.mark.store(0, Ordering::Relaxed);
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            // A frame out: waiting for hyper to ask for the next one from here.
            stream.mark.store(watch.mark(), Ordering::Relaxed);
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

    /// A watch. Bodies watched outside a [`StreamExecutor`] task, as in most tests here, cannot
    /// be reset alone: `tick` says so when one starves.
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

    #[tokio::test]
    async fn a_starved_body_in_a_stream_task_ends_that_task_and_nothing_else() {
        let w = watch();
        let (out_tx, out_rx) = tokio::sync::oneshot::channel();
        let (held_tx, held_rx) = tokio::sync::oneshot::channel::<()>();
        let in_task = Arc::clone(&w);
        hyper::rt::Executor::execute(&StreamExecutor, async move {
            // Dropped, closing its channel, only when the task ends.
            let _held = held_tx;
            let _body = in_task.watch(Source { ready: true });
            let _ = out_tx.send(());
            std::future::pending::<()>().await;
        });
        out_rx.await.expect("the task ran");
        assert!(!w.tick(), "it may have come out just before this tick");
        assert!(
            !w.tick(),
            "starved, but its stream is reset, not its connection"
        );
        let ended = tokio::time::timeout(Duration::from_secs(10), held_rx).await;
        assert!(matches!(ended, Ok(Err(_))), "the stream's task still runs");
        assert!(w.is_empty());
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
    async fn the_watch_resolves_for_a_starved_body_it_cannot_reset_and_sets_no_timer_without_bodies(
    ) {
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
