//! The echo's HTTP/1.1 fast path against hyper's answers, over raw loopback sockets: the bytes
//! a client sends are exactly the bytes written here, so pipelining, split bodies and heads
//! the fast path leaves to hyper can be put on the wire as they are meant.

use std::time::Duration;

use pms_echo::EchoConfig;
use pms_net::serve::{Drain, ServeConfig};
use pms_testkit::Spawned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Most that one exchange in these tests may take: a hang fails the test instead of holding it.
const PATIENCE: Duration = Duration::from_secs(10);

async fn spawn(fast_path: bool, serve: ServeConfig) -> Spawned<Drain> {
    let config = EchoConfig {
        serve,
        fast_path,
        ..EchoConfig::default()
    };
    Spawned::start(|l, stop| pms_echo::run(l, config, stop)).await
}

/// One response as read off the wire.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    /// Lower-cased names with their values, sorted, without `date` (which is checked to be
    /// there, then dropped: two servers a second apart differ in it).
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Reads one response from `stream`, `buf` holding what was read past the previous one.
async fn answer(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Answer {
    tokio::time::timeout(PATIENCE, read_answer(stream, buf))
        .await
        .expect("an answer in time")
}

async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) {
    let n = stream.read_buf(buf).await.expect("read");
    assert!(
        n > 0,
        "connection closed early; got {:?}",
        String::from_utf8_lossy(buf)
    );
}

async fn read_answer(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Answer {
    let (len, status, mut headers) = loop {
        let mut storage = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut storage);
        if let httparse::Status::Complete(len) = resp.parse(buf).expect("a valid response head") {
            let headers: Vec<(String, String)> = resp
                .headers
                .iter()
                .map(|h| {
                    let value = String::from_utf8(h.value.to_vec()).expect("text value");
                    (h.name.to_ascii_lowercase(), value)
                })
                .collect();
            break (len, resp.code.expect("status"), headers);
        }
        fill(stream, buf).await;
    };
    buf.drain(..len);
    let date = headers.iter().position(|(n, _)| n == "date");
    let date = headers.remove(date.expect("a date header"));
    assert!(httpdate::parse_http_date(&date.1).is_ok(), "{date:?}");
    headers.sort();
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let body = if let Some(length) = header("content-length") {
        let length: usize = length.parse().expect("a length");
        while buf.len() < length {
            fill(stream, buf).await;
        }
        buf.drain(..length).collect()
    } else if header("transfer-encoding").is_none() {
        Vec::new() // the answer to a HEAD request
    } else {
        assert_eq!(
            header("transfer-encoding").map(String::as_str),
            Some("chunked")
        );
        let mut body = Vec::new();
        loop {
            let line = loop {
                if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
                    break end;
                }
                fill(stream, buf).await;
            };
            let size = std::str::from_utf8(&buf[..line]).expect("chunk size");
            let size = usize::from_str_radix(size, 16).expect("hex chunk size");
            while buf.len() < line + 2 + size + 2 {
                fill(stream, buf).await;
            }
            body.extend_from_slice(&buf[line + 2..line + 2 + size]);
            buf.drain(..line + 2 + size + 2);
            if size == 0 {
                break body;
            }
        }
    };
    Answer {
        status,
        headers,
        body,
    }
}

/// A fresh connection to `echo` with `bytes` sent on it.
async fn send(echo: &Spawned<Drain>, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(echo.addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream
}

/// Everything `stream` gets until the server closes it, which must happen within `within`.
async fn until_closed(stream: &mut TcpStream, within: Duration) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(within, stream.read_to_end(&mut got))
        .await
        .expect("the server closes the connection in time")
        .expect("read");
    got
}

/// Sends `request` on a fresh connection and reads `count` answers.
async fn exchange(echo: &Spawned<Drain>, request: &[u8], count: usize) -> Vec<Answer> {
    let mut stream = send(echo, request).await;
    let mut buf = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..count {
        answers.push(answer(&mut stream, &mut buf).await);
    }
    answers
}

fn header<'a>(a: &'a Answer, name: &str) -> Option<&'a str> {
    a.headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn the_fast_path_answers_as_hyper_does() {
    let fast = spawn(true, ServeConfig::default()).await;
    let hyper = spawn(false, ServeConfig::default()).await;
    let cases: &[&str] = &[
        "POST /service/EchoService?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"size\":\"50B\"}",
        "GET /anything HTTP/1.1\r\nHost: a\r\n\r\n",
        "PUT /x HTTP/1.1\r\nHost: a\r\ncontent-length: 0\r\n\r\n",
        "DELETE /x HTTP/1.1\r\nHost: a\r\nContent-Length: 03\r\nConnection: keep-alive\r\n\r\nabc",
        "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
        "POST /x HTTP/1.1\r\nHost: a\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\nX-Forwarded-For: 127.0.0.1\r\nVia: 1.1 pms\r\n\r\nhi",
    ];
    for case in cases {
        let a = exchange(&fast, case.as_bytes(), 1).await;
        let b = exchange(&hyper, case.as_bytes(), 1).await;
        assert_eq!(a, b, "{case:?}");
        assert_eq!(a[0].status, 200);
        assert_eq!(header(&a[0], "x-echo-protocol"), Some("HTTP/1.1"));
        assert_eq!(header(&a[0], "x-echo-tls"), Some("false"));
    }
    assert_eq!(fast.shutdown().await, Drain::Complete);
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_across_the_hand_over_to_hyper() {
    let echo = spawn(true, ServeConfig::default()).await;
    // Plain (fast path), chunked (handed to hyper), plain again (hyper has the connection).
    let answers = exchange(
        &echo,
        b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi\
          POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
          POST /c HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nxyz",
        3,
    )
    .await;
    let bodies: Vec<&[u8]> = answers.iter().map(|a| a.body.as_slice()).collect();
    assert_eq!(bodies, [&b"hi"[..], b"abc", b"xyz"]);
    assert_eq!(header(&answers[1], "transfer-encoding"), Some("chunked"));
}

#[tokio::test]
async fn heads_the_fast_path_leaves_get_hyper_answers() {
    let echo = spawn(true, ServeConfig::default()).await;
    // HTTP/1.0, HEAD, and two lengths hyper refuses.
    let a = exchange(&echo, b"GET / HTTP/1.0\r\n\r\n", 1).await;
    assert_eq!(header(&a[0], "x-echo-protocol"), Some("HTTP/1.0"));
    let a = exchange(&echo, b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n", 1).await;
    assert_eq!((a[0].status, a[0].body.len()), (200, 0));
    for bad in [
        &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"[..],
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
    ] {
        let mut stream = send(&echo, bad).await;
        let got = until_closed(&mut stream, PATIENCE).await;
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with("HTTP/1.1 400 "), "{got:?}");
    }
}

#[tokio::test]
async fn a_head_over_the_limit_goes_to_hyper_which_refuses_it() {
    let serve = ServeConfig {
        // hyper's smallest limit.
        max_header_bytes: 8192,
        ..ServeConfig::default()
    };
    let echo = spawn(true, serve).await;
    let mut stream = TcpStream::connect(echo.addr).await.unwrap();
    let long = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(9000)
    );
    // The server may close while the head is still being written; what it said is the point.
    let _ = stream.write_all(long.as_bytes()).await;
    let mut got = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut got)).await;
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 431 "), "{got:?}");
}

#[tokio::test]
async fn a_body_comes_back_before_all_of_it_has_arrived() {
    let echo = spawn(true, ServeConfig::default()).await;
    let mut stream = send(
        &echo,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n01234",
    )
    .await;
    // The head and the first half come back while the second half is not sent yet.
    let mut buf = Vec::new();
    let first = tokio::time::timeout(PATIENCE, async {
        loop {
            fill(&mut stream, &mut buf).await;
            if buf.ends_with(b"\r\n\r\n01234") {
                break;
            }
        }
    })
    .await;
    assert!(first.is_ok(), "{:?}", String::from_utf8_lossy(&buf));
    stream.write_all(b"56789").await.unwrap();
    let mut rest = [0u8; 5];
    tokio::time::timeout(PATIENCE, stream.read_exact(&mut rest))
        .await
        .expect("the rest in time")
        .unwrap();
    assert_eq!(&rest, b"56789");
    // And the connection carries the next request.
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    buf.clear();
    let next = answer(&mut stream, &mut buf).await;
    assert_eq!((next.status, next.body.len()), (200, 0));
}

#[tokio::test]
async fn connection_close_is_answered_then_the_connection_ends() {
    let echo = spawn(true, ServeConfig::default()).await;
    let mut stream = TcpStream::connect(echo.addr).await.unwrap();
    stream
        .write_all(
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        )
        .await
        .unwrap();
    let mut buf = Vec::new();
    let a = answer(&mut stream, &mut buf).await;
    assert_eq!(
        (a.body.as_slice(), header(&a, "connection")),
        (&b"ok"[..], Some("close"))
    );
    assert!(until_closed(&mut stream, PATIENCE).await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_client_silent_mid_body_is_closed_after_the_idle_timeout() {
    let serve = ServeConfig {
        idle_timeout: Duration::from_secs(30),
        ..ServeConfig::default()
    };
    let echo = spawn(true, serve).await;
    let mut stream = send(
        &echo,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n012",
    )
    .await;
    let started = tokio::time::Instant::now();
    let got = until_closed(&mut stream, Duration::from_secs(300)).await;
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got:?}");
    assert!(got.ends_with("\r\n\r\n012"), "only what came: {got:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_head_that_stops_coming_is_closed_after_the_header_read_timeout() {
    let echo = spawn(true, ServeConfig::default()).await;
    let mut stream = send(&echo, b"POST / HTTP/1.1\r\nHo").await;
    let started = tokio::time::Instant::now();
    let got = until_closed(&mut stream, Duration::from_secs(300)).await;
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    assert!(started.elapsed() >= ServeConfig::default().header_read_timeout);
}

#[tokio::test]
async fn an_idle_fast_path_connection_does_not_hold_up_the_drain() {
    let echo = spawn(true, ServeConfig::default()).await;
    let mut stream = send(&echo, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let mut buf = Vec::new();
    answer(&mut stream, &mut buf).await;
    // With the connection still open and idle, the drain ends at once, not after the grace.
    let drain = tokio::time::timeout(PATIENCE, echo.shutdown()).await;
    assert_eq!(drain.ok(), Some(Drain::Complete));
}
