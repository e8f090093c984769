//! Request bodies that the client breaks or stops sending, on the paths that stream them to the
//! upstream: the answer blames the client (400 or 408), never the upstream (502 or 504), and the
//! metrics count it as such.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{echo, endpoint, h2_stalled_upload, inspector, simple, Gw};

/// A gateway in front of the echo back-end, with `upstream_extra` in its `[[upstreams]]` entry.
async fn gateway(back: std::net::SocketAddr, upstream_extra: &str) -> Gw {
    simple(
        &format!("{}\n{upstream_extra}", endpoint(back)),
        "",
        "",
        &[],
    )
    .await
}

/// Sends `raw` and returns the response head and what follows it, up to the first 4 KiB, as
/// text; panics if nothing comes within 10 s.
async fn exchange(gw: &Gw, raw: &[u8], then: &[u8]) -> String {
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    conn.write_all(raw).await.unwrap();
    conn.write_all(then).await.unwrap();
    let mut got = vec![0u8; 4096];
    let mut n = 0;
    tokio::time::timeout(Duration::from_secs(10), async {
        while !String::from_utf8_lossy(&got[..n]).contains("}}") {
            match conn.read(&mut got[n..]).await {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
    })
    .await
    .expect("answered in time");
    String::from_utf8_lossy(&got[..n]).into_owned()
}

/// The `pms_gateway_requests_total` sample for `status`, or 0.
async fn requests_with_status(gw: &Gw, status: u16) -> f64 {
    let m = crate::admin::scrape(gw.admin).await;
    let key = format!(r#"pms_gateway_requests_total{{route="all",status="{status}"}}"#);
    crate::admin::value(&m, &key).unwrap_or(0.0)
}

#[tokio::test]
async fn a_malformed_chunked_body_is_a_400_not_an_upstream_failure() {
    // It answers once it has the whole body. (The echo back-end answers at once, streaming the
    // body back, so its 200 could reach the gateway before the broken chunk did.)
    let back = inspector().await;
    let gw = gateway(back.addr, "").await;
    let got = exchange(
        &gw,
        b"POST /echo HTTP/1.1\r\nhost: gw\r\nx-request-id: bad-chunk\r\ntransfer-encoding: chunked\r\n\r\n",
        b"zz\r\nabc\r\n0\r\n\r\n",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    assert!(got.contains(r#""code":"body_read_failed""#), "{got}");
    assert!(
        got.contains("chunk"),
        "the message says what was wrong: {got}"
    );
    assert!(got.contains(r#""request_id":"bad-chunk""#), "{got}");
    assert_eq!(requests_with_status(&gw, 400).await, 1.0);
    assert_eq!(requests_with_status(&gw, 502).await, 0.0);
}

#[tokio::test]
async fn a_chunked_body_that_stops_coming_is_a_408_not_a_504() {
    // It answers once it has the whole body.
    let back = inspector().await;
    let gw = gateway(back.addr, "request_timeout_ms = 300").await;
    let got = exchange(
        &gw,
        b"POST /echo HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\n",
        b"a\r\n0123456789\r\n",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains(r#""code":"request_timeout""#), "{got}");
    assert!(
        got.contains("10 bytes"),
        "the message says how far it got: {got}"
    );
    assert_eq!(requests_with_status(&gw, 504).await, 0.0);
}

#[tokio::test]
async fn a_streamed_body_that_stops_coming_is_a_408_not_a_504() {
    // Over 64 KiB: the HTTP/1.1 fast path streams it instead of reading it first.
    // It answers once it has the whole body.
    let back = inspector().await;
    let gw = gateway(back.addr, "request_timeout_ms = 300").await;
    let head = b"POST /echo HTTP/1.1\r\nhost: gw\r\ncontent-length: 200000\r\n\r\n";
    let got = exchange(&gw, head, &[b'x'; 100_000]).await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains(r#""code":"request_timeout""#), "{got}");
    assert!(got.contains("100000 of 200000 bytes"), "{got}");
    assert_eq!(requests_with_status(&gw, 504).await, 0.0);
}

#[tokio::test]
async fn an_unsized_http2_body_that_stops_coming_is_a_408_not_a_504() {
    // It answers once it has the whole body.
    let back = inspector().await;
    let gw = gateway(back.addr, "request_timeout_ms = 300").await;
    // No content-length: hyper's client streams it.
    let request = http::Request::post("http://gw/echo").body(()).unwrap();
    let (status, text) = h2_stalled_upload(gw.addr(), request, b"0123456789").await;
    assert_eq!(status, 408);
    assert!(text.contains(r#""code":"request_timeout""#), "{text}");
    assert!(text.contains("10 bytes"), "{text}");
}

#[tokio::test]
async fn a_slow_upstream_reading_a_streamed_body_is_still_a_504() {
    // The client sent everything; the upstream is what keeps the answer from coming.
    let slow = echo(false, false, Duration::from_secs(5)).await;
    let gw = gateway(slow.addr, "request_timeout_ms = 300").await;
    let got = exchange(
        &gw,
        b"POST /echo HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\n",
        b"a\r\n0123456789\r\n0\r\n\r\n",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 504"), "{got}");
    let head = b"POST /echo HTTP/1.1\r\nhost: gw\r\ncontent-length: 100000\r\n\r\n";
    let got = exchange(&gw, head, &[b'x'; 100_000]).await;
    assert!(got.starts_with("HTTP/1.1 504"), "{got}");
}

/// A gateway in front of `back` that gives a client 300 ms between two parts of a body, and
/// `request_timeout_ms` its default 30 s.
async fn impatient(back: std::net::SocketAddr, route_extra: &str) -> Gw {
    simple(
        &endpoint(back),
        route_extra,
        "[limits]\nbody_read_timeout_ms = 300",
        &[],
    )
    .await
}

#[tokio::test]
async fn a_body_that_stops_coming_is_cut_off_after_the_body_read_timeout() {
    // Streamed by the fast path (over 64 KiB), and by hyper's client (chunked).
    let back = inspector().await;
    let gw = impatient(back.addr, "").await;
    let head = b"POST /echo HTTP/1.1\r\nhost: gw\r\ncontent-length: 200000\r\n\r\n";
    let got = exchange(&gw, head, &[b'x'; 100_000]).await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(
        got.contains("stopped coming: nothing for 300 ms after 100000 bytes"),
        "{got}"
    );
    let got = exchange(
        &gw,
        b"POST /echo HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\n",
        b"a\r\n0123456789\r\n",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("nothing for 300 ms after 10 bytes"), "{got}");

    // On a transform route the body is read whole first.
    let gw = impatient(back.addr, r#"transform = "json-to-xml""#).await;
    let got = exchange(
        &gw,
        b"POST /x HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n",
        b"{\"a\":",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("nothing for 300 ms after 5 bytes"), "{got}");
}

#[tokio::test]
async fn a_body_that_stops_after_the_answer_started_closes_the_connection() {
    // The echo back-end answers before the body is all there; the gateway relays the answer
    // and, when the client sends nothing more, gives up on both connections instead of holding
    // them open.
    let back = echo(false, false, Duration::ZERO).await;
    let gw = impatient(back.addr, "").await;
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    conn.write_all(
        b"POST /echo HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\na\r\n0123456789\r\n",
    )
    .await
    .unwrap();
    let got = crate::support::read_until_closed(&mut conn).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(
        got.contains("0123456789"),
        "the part that came was relayed: {got}"
    );
}

/// A back-end that, like the PMS services, refuses a body over 64 KiB: it reads that much,
/// answers 413 and closes the connection with the rest of the body unread (the kernel then
/// resets it).
async fn refuses_large_bodies() -> std::net::SocketAddr {
    let listener = pms_testkit::listener().await;
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = vec![0u8; 16 * 1024];
                while got.len() < 64 * 1024 {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let body = r#"{"error":{"code":"payload_too_large"}}"#;
                let answer = format!(
                    "HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

/// An upstream that answers before it has read the whole body (a 413 for a body over its
/// limit) and closes: its answer reaches the client, as nginx relays it, not a 502 about the
/// broken connection; then the client's connection is closed, the rest of its body unread.
/// The HTTP/1.1 fast path, which serves such a client. (hyper's client, behind HTTP/2 clients
/// and with the fast path off, relays the answer when it reads it before its write fails, and
/// answers 502 otherwise: that order is hyper's.)
#[tokio::test]
async fn an_upstream_answer_that_comes_before_the_whole_body_is_relayed() {
    let back = refuses_large_bodies().await;
    let fast = true;
    let gw = simple(
        &endpoint(back),
        "",
        &format!("[limits]\nhttp1_fast_path = {fast}"),
        &[],
    )
    .await;
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    let size = 8 * 1024 * 1024;
    let head =
        format!("POST /users/createUser HTTP/1.1\r\nhost: gw\r\ncontent-length: {size}\r\n\r\n");
    conn.write_all(head.as_bytes()).await.unwrap();
    let (mut from, mut to) = conn.into_split();
    // The client goes on sending until the gateway stops reading.
    let sending = tokio::spawn(async move {
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..size / chunk.len() {
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
    });
    let mut answer = Vec::new();
    let whole = async {
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&answer).contains("payload_too_large\"}}") {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), whole)
        .await
        .expect("an answer within 10 s");
    sending.abort();
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 413"),
        "fast path {fast}: {answer}"
    );
    assert!(
        answer.contains("payload_too_large"),
        "fast path {fast}: {answer}"
    );
}
