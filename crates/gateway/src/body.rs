//! The body type the gateway moves in both directions, and the wrappers bodies go through.
//! A streamed request body, on its way to hyper's client ([`Capped`]): cut off at the configured
//! size without buffering it, its client's own stream failures marked so they are not taken for
//! the upstream's, and the [`Progress`] kept that tells a client that stopped sending from an
//! upstream that stopped answering. A response body from hyper's client ([`FromUpstream`]):
//! given up when the upstream sends nothing of it for the read timeout.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use pms_net::stall::{ReadStalled, Stall};

/// Boxed error for bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A streamed body, request or response.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// The error a [`Capped`] body yields past its limit.
#[derive(Debug, thiserror::Error)]
#[error("request body exceeds {limit} bytes")]
pub struct TooLarge {
    /// The limit.
    pub limit: u64,
}

/// The client's request body stream failed (a malformed chunk, a reset, a connection closed
/// mid-body). Wrapped so the error, once hyper's client has passed it on, still says whose it was.
#[derive(Debug, thiserror::Error)]
#[error("the client's request body failed")]
pub struct ClientBodyFailed(#[source] pub BoxError);

/// The client sent nothing of its request body for the body read timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request body stopped coming: nothing for {} ms after {received} bytes", .after.as_millis())]
pub struct BodyStalled {
    /// The body read timeout.
    pub after: Duration,
    /// Bytes received before it stopped.
    pub received: u64,
}

/// How far a streamed request body has come, shared between the body (which hyper's client
/// polls) and the request's task.
#[derive(Debug, Default)]
pub struct Progress {
    received: AtomicU64,
    waiting: AtomicBool,
}

impl Progress {
    /// Body bytes received from the client so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// True when the body's last poll found nothing new from the client and the body was not
    /// finished: it was the client, not the upstream, that held the request up.
    pub fn waiting_on_client(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }
}

pin_project_lite::pin_project! {
    /// Passes frames through until more than `limit` bytes have gone by, then fails; fails too
    /// when the client sends nothing for `idle` ([`BodyStalled`]). The inner body's own errors
    /// come out as [`ClientBodyFailed`]; [`Progress`] follows it.
    pub struct Capped<B> {
        #[pin]
        inner: B,
        seen: u64,
        limit: u64,
        progress: Arc<Progress>,
        stall: Stall,
    }
}

impl<B> Capped<B> {
    /// Wraps `inner`.
    pub fn new(inner: B, limit: u64, idle: Duration) -> Self {
        Self {
            inner,
            seen: 0,
            limit,
            progress: Arc::default(),
            stall: Stall::new(idle),
        }
    }

    /// The body's progress, to read while hyper's client owns the body.
    pub fn progress(&self) -> Arc<Progress> {
        self.progress.clone()
    }
}

impl<B> Body for Capped<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        this.progress
            .waiting
            .store(polled.is_pending(), Ordering::Relaxed);
        if this.stall.poll_expired(cx, polled.is_pending()) {
            return Poll::Ready(Some(Err(Box::new(BodyStalled {
                after: this.stall.timeout(),
                received: *this.seen,
            }))));
        }
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    *this.seen += data.len() as u64;
                    this.progress.received.store(*this.seen, Ordering::Relaxed);
                    if *this.seen > *this.limit {
                        return Poll::Ready(Some(Err(Box::new(TooLarge { limit: *this.limit }))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                Poll::Ready(Some(Err(Box::new(ClientBodyFailed(e.into())))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pin_project_lite::pin_project! {
    /// A response body from the upstream that fails with [`ReadStalled`] (and a warning in the
    /// log) when the upstream sends nothing of it for `idle`, like nginx's `proxy_read_timeout`.
    /// Without it, an upstream that sends a head and then stalls would hold the client's
    /// request, and the upstream connection, for as long as the client waits.
    pub struct FromUpstream<B> {
        #[pin]
        inner: B,
        stall: Stall,
        upstream: Arc<str>,
    }
}

impl<B> FromUpstream<B> {
    /// Wraps `inner`, the body of a response from `upstream`.
    pub fn new(inner: B, idle: Duration, upstream: Arc<str>) -> Self {
        Self {
            inner,
            stall: Stall::new(idle),
            upstream,
        }
    }
}

impl<B> Body for FromUpstream<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if this.stall.poll_expired(cx, polled.is_pending()) {
            let stalled = ReadStalled {
                after: this.stall.timeout(),
            };
            warn_stalled(this.upstream, &stalled);
            return Poll::Ready(Some(Err(Box::new(stalled))));
        }
        polled.map(|frame| frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Logs that `upstream` stopped sending a response body, which is then cut off: the one warning
/// every path gives for it.
pub(crate) fn warn_stalled(upstream: &str, stalled: &ReadStalled) {
    tracing::warn!(
        upstream,
        after_ms = stalled.after.as_millis() as u64,
        "the upstream stopped sending a response body; cutting the response off"
    );
}

/// The first error of type `T` in `err`'s source chain, `err` itself included.
pub fn find_source<'a, T>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a T>
where
    T: std::error::Error + 'static,
{
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(t) = e.downcast_ref::<T>() {
            return Some(t);
        }
        cur = e.source();
    }
    None
}
