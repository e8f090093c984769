//! Full-duplex exchanges: a request body that streams to the upstream while the upstream's
//! answer streams back. The client sends the first part of a large body, waits for the echo's
//! answer to carry those bytes back, and only then sends the rest — a proxy that sends the
//! whole body before it reads the answer never relays that first part, and the exchange
//! stalls. Every front end (the HTTP/1.1 fast path, hyper's HTTP/1.1 and HTTP/2) and every
//! request framing (`Content-Length`, chunked, HTTP/2 with and without a declared length).

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{echo, endpoint, simple, Gw};

/// The body's first part, sent before the answer is awaited: more than the fast path gathers
/// whole (64 KiB) would make the test pass for the wrong reason, so less.
const FIRST: usize = 40 * 1024;
/// The whole body: well over what the gateway gathers, so it streams.
const WHOLE: usize = 1024 * 1024;
/// How long a part of the answer may take before the exchange is called stalled.
const STALLED: Duration = Duration::from_secs(10);

/// A gateway in front of an echo back-end (TLS when `tls`), with the fast path on or off.
async fn gateway(back: std::net::SocketAddr, tls: bool, fast: bool) -> Gw {
    let upstream = if tls {
        format!(
            "endpoints = [\"https://127.0.0.1:{}\"]\nprotocol = \"h1\"\ntls = {{ ca = \"{{ca}}\" }}",
            back.port()
        )
    } else {
        endpoint(back)
    };
    simple(
        &upstream,
        "",
        &format!("[limits]\nhttp1_fast_path = {fast}"),
        &[],
    )
    .await
}

/// How many `byte`s `got` holds after its head (the first blank line).
fn after_head(got: &[u8], byte: u8) -> usize {
    got.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(0, |at| got[at + 4..].iter().filter(|&&b| b == byte).count())
}

/// Reads from `from` into `got` until its body holds `want` bytes equal to `byte`; panics,
/// naming `what`, when they do not come.
async fn read_until(
    from: &mut (impl AsyncReadExt + Unpin),
    got: &mut Vec<u8>,
    byte: u8,
    want: usize,
    what: &str,
) {
    let mut buf = vec![0u8; 64 * 1024];
    tokio::time::timeout(STALLED, async {
        while after_head(got, byte) < want {
            match from.read(&mut buf).await {
                Ok(0) => panic!("{what}: closed after {}", String::from_utf8_lossy(got)),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!("{what}: {e}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{what}: stalled with {} of {want} bytes",
            after_head(got, byte)
        )
    });
}

/// One HTTP/1.1 duplex exchange with `gw`: the body's first part is `x`s, the rest `y`s, sent
/// with `Content-Length` or as chunks.
async fn h1_exchange(gw: &Gw, chunked: bool, what: &str) {
    let conn = TcpStream::connect(gw.addr()).await.unwrap();
    let (mut from, mut to) = conn.into_split();
    let framing = if chunked {
        "transfer-encoding: chunked".to_string()
    } else {
        format!("content-length: {WHOLE}")
    };
    let head = format!("POST /echo HTTP/1.1\r\nhost: gw\r\n{framing}\r\n\r\n");
    let part = |byte: u8, n: usize| {
        let mut part = Vec::with_capacity(n + 16);
        if chunked {
            part.extend_from_slice(format!("{n:x}\r\n").as_bytes());
        }
        part.resize(part.len() + n, byte);
        if chunked {
            part.extend_from_slice(b"\r\n");
        }
        part
    };
    to.write_all(head.as_bytes()).await.unwrap();
    to.write_all(&part(b'x', FIRST)).await.unwrap();
    let mut got = Vec::new();
    read_until(&mut from, &mut got, b'x', FIRST, what).await;
    assert!(got.starts_with(b"HTTP/1.1 200"), "{what}");
    to.write_all(&part(b'y', WHOLE - FIRST)).await.unwrap();
    if chunked {
        to.write_all(b"0\r\n\r\n").await.unwrap();
    }
    read_until(&mut from, &mut got, b'y', WHOLE - FIRST, what).await;
    assert_eq!(after_head(&got, b'x'), FIRST, "{what}");
}

#[tokio::test]
async fn an_http1_body_streams_up_while_the_answer_streams_back() {
    for tls in [false, true] {
        let back = echo(tls, true, Duration::ZERO).await;
        for fast in [true, false] {
            let gw = gateway(back.addr, tls, fast).await;
            for chunked in [false, true] {
                let what = format!("tls upstream {tls}, fast path {fast}, chunked {chunked}");
                h1_exchange(&gw, chunked, &what).await;
            }
        }
    }
}

/// One HTTP/2 duplex exchange with `gw`, the body's length declared or not.
async fn h2_exchange(gw: &Gw, declared: bool, what: &str) {
    let tcp = TcpStream::connect(gw.addr()).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut request = http::Request::post("http://gw/echo");
    if declared {
        request = request.header("content-length", WHOLE);
    }
    let (response, mut body) = client
        .send_request(request.body(()).unwrap(), false)
        .unwrap();
    body.send_data(Bytes::from(vec![b'x'; FIRST]), false)
        .unwrap();
    let response = tokio::time::timeout(STALLED, response)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer head"))
        .unwrap();
    assert_eq!(response.status(), 200, "{what}");
    let mut data = response.into_body();
    let mut counts = [0usize; 2];
    h2_read(&mut data, &mut counts, 0, FIRST, what).await;
    body.send_data(Bytes::from(vec![b'y'; WHOLE - FIRST]), true)
        .unwrap();
    h2_read(&mut data, &mut counts, 1, WHOLE - FIRST, what).await;
    assert_eq!(counts, [FIRST, WHOLE - FIRST], "{what}");
}

/// Reads `data` until `counts[i]` reaches `want`; `counts` are the `x`s and `y`s read so far.
async fn h2_read(
    data: &mut h2::RecvStream,
    counts: &mut [usize; 2],
    i: usize,
    want: usize,
    what: &str,
) {
    tokio::time::timeout(STALLED, async {
        while counts[i] < want {
            let chunk = data.data().await.expect("more body").unwrap();
            let _ = data.flow_control().release_capacity(chunk.len());
            counts[0] += chunk.iter().filter(|&&b| b == b'x').count();
            counts[1] += chunk.iter().filter(|&&b| b == b'y').count();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: stalled with {} of {want}", counts[i]));
}

#[tokio::test]
async fn an_http2_body_streams_up_while_the_answer_streams_back() {
    for tls in [false, true] {
        let back = echo(tls, true, Duration::ZERO).await;
        let gw = gateway(back.addr, tls, true).await;
        for declared in [true, false] {
            let what = format!("tls upstream {tls}, length declared {declared}");
            h2_exchange(&gw, declared, &what).await;
        }
    }
}
