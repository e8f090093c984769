//! The body type the gateway moves in both directions, and the limiter that cuts a streamed
//! request body off at the configured size without buffering it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;

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

pin_project_lite::pin_project! {
    /// Passes frames through until more than `limit` bytes have gone by, then fails.
    pub struct Capped<B> {
        #[pin]
        inner: B,
        seen: u64,
        limit: u64,
    }
}

impl<B> Capped<B> {
    /// Wraps `inner`.
    pub fn new(inner: B, limit: u64) -> Self {
        Self {
            inner,
            seen: 0,
            limit,
        }
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
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    *this.seen += data.len() as u64;
                    if *this.seen > *this.limit {
                        return Poll::Ready(Some(Err(Box::new(TooLarge { limit: *this.limit }))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
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

/// True when `err` or anything in its source chain is a [`TooLarge`].
pub fn is_too_large(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if e.is::<TooLarge>() {
            return true;
        }
        cur = e.source();
    }
    false
}
