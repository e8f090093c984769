//! Real sockets on loopback, a real ring, a runtime wired as the gateway's workers are.

use std::future::Future;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// Runs `f` on a current-thread runtime with this thread's ring installed and driven. `None`
/// where the kernel refuses io_uring (said on stderr): the gateway reports that at start.
fn run<F: Future>(f: impl FnOnce() -> F) -> Option<F::Output> {
    run_with(64, f)
}

/// [`run`] with a ring of `entries` submission entries (and twice as many for completions).
fn run_with<F: Future>(entries: u32, f: impl FnOnce() -> F) -> Option<F::Output> {
    let ring = match install(entries) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("io_uring unavailable here, test not run: {e}");
            return None;
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(before_park)
        .build()
        .expect("runtime");
    Some(rt.block_on(async move {
        tokio::spawn(async move { drive(ring).await.expect("drive") });
        f().await
    }))
}

/// A connected pair: the ring's end and a plain tokio end.
async fn pair() -> (UringTcp, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let peer = TcpStream::connect(l.local_addr().expect("addr"))
        .await
        .expect("connect");
    let (ours, _) = l.accept().await.expect("accept");
    (UringTcp::from_tokio(ours).expect("to io_uring"), peer)
}

/// `n` connected pairs, as [`pair`] makes them.
async fn many_pairs(n: usize) -> Vec<(UringTcp, TcpStream)> {
    let mut pairs = Vec::with_capacity(n);
    for _ in 0..n {
        pairs.push(pair().await);
    }
    pairs
}

/// Fails the test instead of hanging when `f` never finishes.
async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("did not finish within 10 s")
}

/// Waits (10 s at most) until the idle check sees something arrive or the peer close.
async fn no_longer_idle(ours: &mut UringTcp) {
    within(async {
        while ours.idle_and_open() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[test]
fn bytes_go_both_ways_unchanged_in_any_size() {
    run(|| async {
        let (mut ours, mut peer) = pair().await;
        ours.write_all(b"hello").await.expect("write");
        let mut got = [0u8; 5];
        within(peer.read_exact(&mut got)).await.expect("peer read");
        assert_eq!(&got, b"hello");

        // Larger than one read buffer and one write: many reads, and short writes resumed.
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let sent = big.clone();
        let writer = tokio::spawn(async move {
            peer.write_all(&sent).await.expect("peer write");
            let mut back = vec![0u8; sent.len()];
            peer.read_exact(&mut back).await.expect("peer read back");
            back
        });
        let mut got = vec![0u8; big.len()];
        within(ours.read_exact(&mut got)).await.expect("read");
        assert!(got == big, "bytes read differ from bytes sent");
        within(ours.write_all(&got)).await.expect("write back");
        within(ours.flush()).await.expect("flush");
        let back = within(writer).await.expect("peer task");
        assert!(back == big, "bytes echoed differ from bytes sent");
    });
}

#[test]
fn a_send_frees_its_buffer_once_it_has_all_gone_not_at_the_next_write() {
    run(|| async {
        let (mut ours, mut peer) = pair().await;
        let answer = vec![7u8; 10_240];
        ours.write_all(&answer).await.expect("write");
        ours.flush().await.expect("flush");
        let mut got = vec![0u8; answer.len()];
        within(peer.read_exact(&mut got)).await.expect("peer read");
        assert!(got == answer, "bytes read differ from bytes written");
        // The connection now waits for its next request: it should hold no write buffer.
        within(async {
            while ours.write_buffered() > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        // And it writes again as before.
        ours.write_all(b"next").await.expect("write again");
        let mut next = [0u8; 4];
        within(peer.read_exact(&mut next)).await.expect("peer read");
        assert_eq!(&next, b"next");
    });
}

#[test]
fn end_of_stream_reads_as_zero() {
    run(|| async {
        let (mut ours, mut peer) = pair().await;
        peer.write_all(b"last").await.expect("write");
        peer.shutdown().await.expect("shutdown");
        let mut all = Vec::new();
        within(ours.read_to_end(&mut all)).await.expect("read");
        assert_eq!(all, b"last");
        assert_eq!(ours.read(&mut [0u8; 8]).await.expect("read again"), 0);
    });
}

#[test]
fn shutdown_sends_what_was_written_then_the_end() {
    run(|| async {
        let (mut ours, mut peer) = pair().await;
        ours.write_all(b"bye").await.expect("write");
        within(ours.shutdown()).await.expect("shutdown");
        let mut all = Vec::new();
        within(peer.read_to_end(&mut all)).await.expect("peer read");
        assert_eq!(all, b"bye");
    });
}

#[test]
fn dropping_a_stream_with_a_read_in_flight_closes_the_connection() {
    run(|| async {
        let (mut ours, mut peer) = pair().await;
        // Starts a read that only the peer could complete.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(ours.poll_read_ready(&mut cx).is_pending());
        ours.write_all(b"queued").await.expect("write");
        drop(ours);
        // The queued write still goes out, then the end of the stream: the pending read was
        // cancelled, so nothing holds the socket open.
        let mut all = Vec::new();
        within(peer.read_to_end(&mut all)).await.expect("peer read");
        assert_eq!(all, b"queued");
    });
}

#[test]
fn idle_check_sees_data_and_close_and_keeps_the_data() {
    run(|| async {
        let (mut ours, mut peer) = pair().await;
        assert!(ours.idle_and_open(), "a quiet connection is open");
        assert!(ours.idle_and_open(), "and stays so when asked again");
        peer.write_all(b"x").await.expect("write");
        no_longer_idle(&mut ours).await;
        let mut got = [0u8; 1];
        ours.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"x", "the byte that arrived while idle is kept");

        assert!(ours.idle_and_open());
        drop(peer);
        no_longer_idle(&mut ours).await;
        assert_eq!(ours.read(&mut [0u8; 4]).await.expect("read"), 0);
    });
}

#[test]
fn idle_check_with_a_read_in_flight_sees_the_close() {
    run(|| async {
        let (mut ours, peer) = pair().await;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(ours.poll_read_ready(&mut cx).is_pending());
        assert!(ours.idle_and_open());
        drop(peer);
        no_longer_idle(&mut ours).await;
        assert_eq!(ours.read(&mut [0u8; 4]).await.expect("read"), 0);
    });
}

#[test]
fn writes_to_a_reset_peer_fail() {
    run(|| async {
        let (mut ours, peer) = pair().await;
        // Unread data makes the peer's close a reset.
        ours.write_all(b"unread").await.expect("write");
        ours.flush().await.expect("flush");
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(peer);
        let failed = within(async {
            for _ in 0..1000 {
                let r = async {
                    ours.write_all(b"more").await?;
                    ours.flush().await
                }
                .await;
                if let Err(e) = r {
                    return e;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            panic!("1000 writes to a closed peer all succeeded");
        })
        .await;
        assert!(
            matches!(
                failed.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ),
            "{failed:?}"
        );
    });
}

#[test]
fn a_stream_used_off_its_thread_fails_instead_of_touching_another_ring() {
    run(|| async {
        let (ours, _peer) = pair().await;
        let on_other_thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let mut ours = ours;
            rt.block_on(async move { ours.read(&mut [0u8; 4]).await })
        })
        .join()
        .expect("thread");
        let e = on_other_thread.expect_err("read off its thread");
        assert!(e.to_string().contains("outside the worker thread"), "{e}");
    });
}

#[test]
fn a_thread_without_a_ring_cannot_make_streams() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let s = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    assert!(!installed());
    assert!(UringTcp::from_std(s).is_err());
}

/// Whether this thread's ring has provided buffers; says so on stderr when not.
fn ring_provides_buffers() -> bool {
    let provided = driver::current().is_some_and(driver::provides_buffers);
    if !provided {
        eprintln!("this kernel refused a buffer ring, test not run");
    }
    provided
}

/// Starts a read on every stream, has every peer send a message of its own, then reads each
/// one back: its first byte alone, so the rest waits in its buffer for a second read.
async fn round(pairs: &mut [(UringTcp, TcpStream)], n: usize) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for (ours, _) in pairs.iter_mut() {
        assert!(ours.poll_read_ready(&mut cx).is_pending());
    }
    for (i, (_, peer)) in pairs.iter_mut().enumerate() {
        let msg = format!("round {n}, stream {i}");
        peer.write_all(msg.as_bytes()).await.expect("peer write");
    }
    for (i, (ours, _)) in pairs.iter_mut().enumerate() {
        let want = format!("round {n}, stream {i}");
        let mut got = vec![0u8; want.len()];
        within(ours.read_exact(&mut got[..1])).await.expect("read");
        within(ours.read_exact(&mut got[1..])).await.expect("read");
        assert_eq!(String::from_utf8_lossy(&got), want);
    }
}

#[test]
fn reads_beyond_the_provided_buffers_bring_their_own_and_every_buffer_comes_back() {
    // As the gateway's: room for all 140 completions at once.
    run_with(DEFAULT_ENTRIES, || async {
        if !ring_provides_buffers() {
            return;
        }
        let mut pairs = many_pairs(140).await;
        let short = reads_short_of_buffers();
        // 140 messages arrive before any is read: the ring's 128 buffers run out.
        round(&mut pairs, 1).await;
        assert!(
            reads_short_of_buffers() > short,
            "140 reads completed at once and none found the ring empty"
        );
        // Every buffer was given back: 100 reads at once all find one.
        pairs.truncate(100);
        let short = reads_short_of_buffers();
        round(&mut pairs, 2).await;
        assert_eq!(
            reads_short_of_buffers(),
            short,
            "buffers were not given back"
        );
    });
}

#[test]
fn a_stream_dropped_with_bytes_unread_gives_its_buffer_back() {
    run_with(DEFAULT_ENTRIES, || async {
        if !ring_provides_buffers() {
            return;
        }
        let mut pairs = many_pairs(128).await;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        for (ours, _) in &mut pairs {
            assert!(ours.poll_read_ready(&mut cx).is_pending());
        }
        for (_, peer) in &mut pairs {
            peer.write_all(b"never read").await.expect("peer write");
        }
        for (ours, _) in &mut pairs {
            within(ours.readable()).await.expect("readable");
        }
        // Each holds a provided buffer now; dropped, they give them back.
        drop(pairs);
        let mut pairs = many_pairs(100).await;
        let short = reads_short_of_buffers();
        round(&mut pairs, 1).await;
        assert_eq!(
            reads_short_of_buffers(),
            short,
            "buffers were not given back"
        );
    });
}
