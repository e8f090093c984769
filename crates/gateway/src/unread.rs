//! A request body the hyper front end answered without reading (a refusal: rate limit, token,
//! route, size) on an HTTP/1.1 connection. hyper closes such a connection after the answer,
//! because the unread body is still on its way; a client that kept the connection for its next
//! request would then write into a closed socket. So a small body is read to its end and thrown
//! away, and the connection serves the next request; a body too large or too slow to read for
//! nothing gets an answer that says `Connection: close`. Either way the client knows.
//!
//! The fast path settles its own refusals (its answer closes unless the body was consumed);
//! HTTP/2 ends the one stream, not the connection.

use std::time::Duration;

use http::header::{HeaderValue, CONNECTION, EXPECT};
use http::{HeaderMap, Response, Version};
use http_body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::body::ProxyBody;

/// Most bytes of an unread body read for nothing so its connection goes on: a form or a JSON
/// document, not an upload.
pub(crate) const READ_AT_MOST: u64 = 64 * 1024;
/// Longest time spent reading it, so a client that sends slowly cannot hold the answer up.
pub(crate) const READ_FOR_AT_MOST: Duration = Duration::from_secs(1);

/// Settles `body`, which the answer `resp` leaves unread, of a request of `version` with
/// `headers`: read to its end within [`READ_AT_MOST`] and [`READ_FOR_AT_MOST`], or `resp` closes
/// the connection. A client waiting for `100 Continue` has sent nothing of its body, and is
/// answered with the close rather than asked for the body.
pub(crate) async fn settle(
    body: Incoming,
    version: Version,
    headers: &HeaderMap,
    resp: &mut Response<ProxyBody>,
) {
    if version >= Version::HTTP_2 || body.is_end_stream() {
        return;
    }
    let waits_for_continue = headers
        .get(EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if waits_for_continue || !read_to_end(body).await {
        resp.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
}

/// Reads `body` to its end and drops it; whether it ended within the bounds.
async fn read_to_end(mut body: Incoming) -> bool {
    if body.size_hint().lower() > READ_AT_MOST {
        return false;
    }
    let read = async {
        let mut read = 0u64;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            if let Some(data) = frame.data_ref() {
                read += data.len() as u64;
                if read > READ_AT_MOST {
                    return false;
                }
            }
        }
        true
    };
    tokio::time::timeout(READ_FOR_AT_MOST, read)
        .await
        .unwrap_or(false)
}
