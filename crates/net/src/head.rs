//! How long a fast path ([`crate::serve::Http1Fast`]) waits for the bytes of a request head.
//!
//! Between requests a keep-alive connection may stay idle until something ends it (the drain,
//! the idle timer: [`between_requests`]); once a head has begun it must be complete within the
//! header-read limit, as on hyper's path, or a client sending one byte at a time would hold its
//! connection for ever (slowloris: [`read_head_bytes`]). The gateway's and the echo's fast paths
//! both read heads this way.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncRead;
use tokio::time::Instant;

use crate::idle::{Activity, IdleTimer};
use crate::serve::Stop;

/// What ends a keep-alive connection between requests: the drain starting (`stop`), or a whole
/// `period` without a request (noted through the [`Activity`]), as hyper's path closes an idle
/// connection after the header-read timeout. Make one for the connection's life, not one per
/// request: each new one would register with the drain signal and the timer again, and take
/// itself off them when dropped.
pub fn between_requests(
    mut stop: Stop,
    period: Duration,
) -> (impl Future<Output = ()> + Send, Activity) {
    let mut idle = IdleTimer::new(period);
    let activity = idle.activity();
    let ended = async move {
        tokio::select! {
            () = stop.wait() => {}
            () = idle.expired() => {}
        }
    };
    (ended, activity)
}

/// Reads more of a request head into `buf`, with room for at least `room` more bytes (an empty
/// `buf` with no room at all borrows a spare once bytes come: [`crate::spare::read_into`]). With
/// none of a head yet (`buf` empty) it waits until `ended` resolves; once a head has begun, until
/// `deadline`, which the first such read sets to `limit` from then. `false`: the connection is
/// done (closed or failed, ended, or out of time).
pub async fn read_head_bytes<IO>(
    io: &mut IO,
    buf: &mut BytesMut,
    room: usize,
    ended: Pin<&mut impl Future<Output = ()>>,
    deadline: &mut Option<Instant>,
    limit: Duration,
) -> bool
where
    IO: AsyncRead + Unpin,
{
    let read = if buf.is_empty() {
        tokio::select! {
            // The read first: `ended` is only polled when no request is there yet.
            biased;
            r = crate::spare::read_into(io, buf, room) => r,
            () = ended => return false,
        }
    } else {
        let until = *deadline.get_or_insert_with(|| Instant::now() + limit);
        match tokio::time::timeout_at(until, crate::spare::read_into(io, buf, room)).await {
            Ok(r) => r,
            Err(_) => return false,
        }
    };
    matches!(read, Ok(n) if n > 0)
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    const LIMIT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_waits_for_its_end_not_the_limit() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let mut buf = BytesMut::with_capacity(64);
        let started = Instant::now();
        let ended = std::pin::pin!(tokio::time::sleep(LIMIT * 3));
        let more = read_head_bytes(&mut server, &mut buf, 64, ended, &mut None, LIMIT).await;
        assert!(!more);
        assert_eq!(started.elapsed(), LIMIT * 3);

        client.write_all(b"GET").await.unwrap();
        let ended = std::pin::pin!(std::future::pending());
        assert!(read_head_bytes(&mut server, &mut buf, 64, ended, &mut None, LIMIT).await);
        assert_eq!(&buf[..], b"GET");
    }

    #[tokio::test(start_paused = true)]
    async fn a_begun_head_has_the_limit_from_its_first_wait_on() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let mut buf = BytesMut::from(&b"GET / HT"[..]);
        let mut deadline = None;
        let mut never = std::pin::pin!(std::future::pending::<()>());
        let started = Instant::now();
        // Bytes that come in time are taken; the deadline stays where the first wait set it.
        let write = async {
            tokio::time::sleep(LIMIT / 2).await;
            client.write_all(b"TP/1.1\r\n").await.unwrap();
        };
        let read = read_head_bytes(
            &mut server,
            &mut buf,
            64,
            never.as_mut(),
            &mut deadline,
            LIMIT,
        );
        let (more, ()) = tokio::join!(read, write);
        assert!(more);
        assert_eq!(deadline, Some(started + LIMIT));
        // Then nothing more comes: done at the deadline, not a limit after the last bytes.
        let more = read_head_bytes(&mut server, &mut buf, 64, never, &mut deadline, LIMIT).await;
        assert!(!more);
        assert_eq!(started.elapsed(), LIMIT);
    }

    #[tokio::test]
    async fn a_closed_connection_is_done() {
        let (client, mut server) = tokio::io::duplex(64);
        drop(client);
        let mut buf = BytesMut::with_capacity(64);
        let ended = std::pin::pin!(std::future::pending());
        assert!(!read_head_bytes(&mut server, &mut buf, 64, ended, &mut None, LIMIT).await);
    }
}
