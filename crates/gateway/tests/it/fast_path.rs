//! The HTTP/1.1 fast path: it forwards exactly what the hyper path forwards, hands anything
//! unusual to hyper without breaking the connection, relays every body framing, and copes with
//! upstream connections that close between requests. The `http1_fast_path` metric proves which
//! path served a request.

use std::net::SocketAddr;
use std::time::Duration;

use pms_testkit::client::{Proto, TestClient};
use pms_testkit::Spawned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{echo, endpoint, inspector, simple, Gw};

/// The fast path's counters: (requests relayed, connections handed to hyper).
async fn fast_counts(gw: &Gw) -> (u64, u64) {
    (
        fast_count(gw, "relayed").await,
        fast_count(gw, "handed_over").await,
    )
}

/// One series of `pms_gateway_http1_fast_path_total`.
async fn fast_count(gw: &Gw, outcome: &str) -> u64 {
    let mut c = TestClient::connect(gw.admin, Proto::H1c).await.unwrap();
    let text = c.call("GET", "/metrics", &[], "").await.unwrap().text();
    let series = format!("pms_gateway_http1_fast_path_total{{outcome=\"{outcome}\"}}");
    text.lines()
        .find(|l| l.starts_with(&series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A gateway in front of `upstream` with the fast path on or off.
async fn gateway_with(upstream: SocketAddr, fast: bool, upstream_extra: &str) -> Gw {
    simple(
        &format!("{}\n{upstream_extra}", endpoint(upstream)),
        "",
        &format!("[limits]\nhttp1_fast_path = {fast}"),
        &[],
    )
    .await
}

#[tokio::test]
async fn both_paths_forward_and_return_the_same_headers() {
    let back = inspector().await;
    let mut seen = Vec::new();
    for fast in [true, false] {
        let gw = gateway_with(back.addr, fast, "").await;
        let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
        let r = c
            .call(
                "POST",
                "/users/x?y=1&z=%20",
                &[
                    ("connection", "x-private, keep-alive"),
                    ("x-private", "secret"),
                    ("keep-alive", "timeout=9"),
                    ("proxy-connection", "keep-alive"),
                    ("te", "trailers"),
                    ("x-forwarded-for", "203.0.113.9"),
                    ("x-forwarded-proto", "https"),
                    ("via", "1.0 edge"),
                    ("x-userid", "1"),
                    ("x-userrole", "SUPERVISOR"),
                    // Hex: both paths start the same trace from it.
                    ("x-request-id", "0af7651916cd43dd8448eb211c80319c"),
                    ("x-custom", "a"),
                    ("content-type", "application/json"),
                ],
                r#"{"n":1}"#,
            )
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        seen.push((r.json(), sorted_headers(&r)));
        let (relayed, handed) = fast_counts(&gw).await;
        assert_eq!(
            (relayed, handed),
            if fast { (1, 0) } else { (0, 0) },
            "fast = {fast}"
        );
    }
    assert_eq!(seen[0].0, seen[1].0, "the upstream saw the same request");
    assert_eq!(seen[0].1, seen[1].1, "the client got the same headers");
    let h = &seen[0].0["headers"];
    assert_eq!(h["via"][0], "1.0 edge, 1.1 pms");
    assert!(h.get("x-private").is_none() && h.get("te").is_none(), "{h}");
}

/// A response's headers but `Date`, sorted: what must not depend on the path taken.
fn sorted_headers(r: &pms_testkit::client::Collected) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = r
        .head
        .headers
        .iter()
        .filter(|(n, _)| n.as_str() != "date")
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    headers.sort();
    headers
}

/// Writes `request` on `conn` and reads one response (head plus `Content-Length` body).
pub(crate) async fn one_response(conn: &mut TcpStream, request: &str) -> String {
    conn.write_all(request.as_bytes()).await.unwrap();
    read_response(conn).await
}

pub(crate) async fn read_response(conn: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut byte))
            .await
            .expect("a response in time")
            .unwrap();
        assert_eq!(n, 1, "closed mid-head: {:?}", String::from_utf8_lossy(&buf));
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut body = Vec::new();
        while !body.ends_with(b"0\r\n\r\n") {
            let n = conn.read(&mut byte).await.unwrap();
            assert_eq!(n, 1, "closed mid-body");
            body.push(byte[0]);
        }
        return head + &String::from_utf8(body).unwrap();
    }
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).await.unwrap();
    head + &String::from_utf8(body).unwrap()
}

#[tokio::test]
async fn unusual_requests_go_to_hyper_on_the_same_connection() {
    let back = echo(false, false, Duration::ZERO).await;
    let gw = gateway_with(back.addr, true, "").await;
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    let r = one_response(
        &mut conn,
        "POST /a HTTP/1.1\r\nhost: gw\r\ncontent-length: 5\r\n\r\nhello",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.ends_with("hello"), "{r}");
    assert_eq!(fast_counts(&gw).await, (1, 0));
    // Chunked request body: declined by the fast path, served by hyper on this connection.
    let r = one_response(
        &mut conn,
        "POST /a HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("abc"), "{r}");
    let r = one_response(&mut conn, "GET /b HTTP/1.1\r\nhost: gw\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert_eq!(fast_counts(&gw).await, (1, 1), "hyper kept the connection");

    // A malformed head gets hyper's 400, not silence.
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    conn.write_all(b"GET / HTTP/1.1\r\nhost: gw\r\nbad header\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut text)).await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text:?}");
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let back = inspector().await;
    let gw = gateway_with(back.addr, true, "").await;
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    conn.write_all(
        b"GET /first HTTP/1.1\r\nhost: gw\r\n\r\nPOST /second HTTP/1.1\r\nhost: gw\r\ncontent-length: 2\r\n\r\nhiGET /third HTTP/1.1\r\nhost: gw\r\n\r\n",
    )
    .await
    .unwrap();
    for path in ["/first", "/second", "/third"] {
        let r = read_response(&mut conn).await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(r.contains(&format!("\"path\":\"{path}\"")), "{path}: {r}");
    }
    assert_eq!(fast_counts(&gw).await, (3, 0));
}

/// A hand-written upstream: answers each request head with the canned response for its path,
/// and closes the connection after the ones marked so.
async fn canned_upstream() -> Spawned<()> {
    Spawned::start(|listener: TcpListener, stop| async move {
        tokio::select! {
            () = stop => {}
            () = async {
                loop {
                    let Ok((conn, _)) = listener.accept().await else { return };
                    tokio::spawn(canned_connection(conn));
                }
            } => {}
        }
    })
    .await
}

async fn canned_connection(mut conn: TcpStream) {
    let mut buf = Vec::new();
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            let mut chunk = [0u8; 1024];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        let (method, path) = {
            let mut parts = head.split(' ');
            (
                parts.next().unwrap_or("").to_string(),
                parts.next().unwrap_or("").to_string(),
            )
        };
        let (response, close): (&[u8], bool) = match (method.as_str(), path.as_str()) {
            (_, "/chunked") => (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-kind: chunked\r\n\r\n5\r\nhello\r\n6;ext\r\n world\r\n0\r\nx-trailer: t\r\n\r\n",
                false,
            ),
            (_, "/until-close") => (b"HTTP/1.1 200 OK\r\nx-kind: close\r\n\r\nall of this, then EOF", true),
            (_, "/no-content") => (b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n", false),
            ("HEAD", _) => (b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n", false),
            // Answers, then closes without saying so (as an idle timeout would, later).
            (_, "/then-close") => (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", true),
            (_, "/interim") => (
                b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfinal",
                false,
            ),
            (_, "/garbage") => (b"NOT HTTP AT ALL\r\n\r\n", true),
            // A 20,000-byte body in two writes with a pause between them.
            (_, "/in-pieces") => {
                let body = vec![b'p'; 20_000];
                let head = b"HTTP/1.1 200 OK\r\ncontent-length: 20000\r\n\r\n";
                let first = [&head[..], &body[..7_000]].concat();
                if conn.write_all(&first).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                if conn.write_all(&body[7_000..]).await.is_err() {
                    return;
                }
                continue;
            }
            // Answers after a quarter of a second.
            (_, "/late") => {
                tokio::time::sleep(Duration::from_millis(250)).await;
                (b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nlate", false)
            }
            // Announces 100 bytes, sends 10, and then nothing for a long time.
            (_, "/stalls") => {
                let head = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789";
                if conn.write_all(head).await.is_ok() {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                return;
            }
            // Longer than the fast path reads whole: streamed.
            (_, "/large") => {
                let mut response = b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n".to_vec();
                response.extend(std::iter::repeat_n(b'L', 100_000));
                if conn.write_all(&response).await.is_err() {
                    return;
                }
                continue;
            }
            // Bodies that stop coming partway and stay open: longer than the fast path reads
            // whole (70,000 of 100,000 bytes), chunked (one chunk), and until close (10 bytes).
            (_, "/large-stalls" | "/chunked-stalls" | "/close-stalls") => {
                let mut response: Vec<u8> = match path.as_str() {
                    "/large-stalls" => b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n".to_vec(),
                    "/chunked-stalls" => {
                        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n".to_vec()
                    }
                    _ => b"HTTP/1.1 200 OK\r\n\r\n0123456789".to_vec(),
                };
                if path == "/large-stalls" {
                    response.extend(std::iter::repeat_n(b'L', 70_000));
                }
                if conn.write_all(&response).await.is_ok() {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                return;
            }
            // Announces 100 bytes, sends 10, closes.
            (_, "/cut-short") => (b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789", true),
            _ => (b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n", false),
        };
        if conn.write_all(response).await.is_err() || close {
            return;
        }
    }
}

#[tokio::test]
async fn every_body_framing_is_relayed_and_the_client_connection_stays_open() {
    let back = canned_upstream().await;
    let gw = gateway_with(back.addr, true, "").await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    for _ in 0..2 {
        let r = c.call("GET", "/chunked", &[], "").await.unwrap();
        assert_eq!(
            (r.status().as_u16(), r.text().as_str()),
            (200, "hello world")
        );
        assert_eq!(r.header("x-kind"), Some("chunked"));
        let r = c.call("GET", "/until-close", &[], "").await.unwrap();
        assert_eq!(
            (r.status().as_u16(), r.text().as_str()),
            (200, "all of this, then EOF"),
            "re-framed for the client"
        );
        let r = c.call("GET", "/no-content", &[], "").await.unwrap();
        assert_eq!((r.status().as_u16(), r.text().as_str()), (204, ""));
        let r = c.call("HEAD", "/anything", &[], "").await.unwrap();
        assert_eq!((r.status().as_u16(), r.text().as_str()), (200, ""));
        assert_eq!(r.header("content-length"), Some("11"));
        let r = c.call("GET", "/interim", &[], "").await.unwrap();
        assert_eq!((r.status().as_u16(), r.text().as_str()), (200, "final"));
    }
    assert_eq!(
        fast_counts(&gw).await,
        (10, 0),
        "one client connection, all relayed"
    );
}

#[tokio::test]
async fn http2_requests_to_http1_upstreams_go_out_over_the_fast_pools_unchanged() {
    let back = inspector().await;
    let mut seen = Vec::new();
    for fast in [true, false] {
        let gw = gateway_with(back.addr, fast, "").await;
        let mut c = TestClient::connect(gw.addr(), Proto::H2c).await.unwrap();
        for (method, body) in [("POST", r#"{"n":1}"#), ("GET", "")] {
            let r = c
                .call(
                    method,
                    "/users/x?y=1&z=%20",
                    &[
                        ("te", "trailers"),
                        ("x-forwarded-for", "203.0.113.9"),
                        ("via", "1.0 edge"),
                        ("x-userid", "1"),
                        // Hex: both paths start the same trace from it.
                        ("x-request-id", "0af7651916cd43dd8448eb211c80319c"),
                        ("x-custom", "a"),
                        ("content-type", "application/json"),
                    ],
                    body,
                )
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            seen.push((fast, method, r.json(), sorted_headers(&r)));
        }
        // A body longer than the bridge holds goes through hyper's client, streamed.
        let big = "b".repeat(100_000);
        let r = c.call("PUT", "/big", &[], big).await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.json()["body"].as_str().map(str::len), Some(100_000));
        assert_eq!(
            fast_count(&gw, "bridged").await,
            if fast { 2 } else { 0 },
            "fast = {fast}"
        );
        assert_eq!(
            fast_counts(&gw).await,
            (0, u64::from(fast)),
            "the h2c preface went to hyper"
        );
    }
    let (bridged, hyper) = seen.split_at(2);
    for ((_, method, upstream_saw, client_got), (_, _, upstream_saw_h, client_got_h)) in
        bridged.iter().zip(hyper)
    {
        assert_eq!(
            upstream_saw, upstream_saw_h,
            "{method}: the upstream saw the same"
        );
        assert_eq!(
            client_got, client_got_h,
            "{method}: the client got the same"
        );
    }
    let post = &bridged[0].2;
    assert_eq!(post["version"], "HTTP/1.1", "{post}");
    assert_eq!(post["body"], r#"{"n":1}"#);
    assert_eq!(post["headers"]["via"][0], "1.0 edge, 2 pms");
    assert_eq!(post["headers"]["content-length"][0], "7");
    assert!(post["headers"].get("te").is_none(), "{post}");
}

#[tokio::test]
async fn every_response_framing_reaches_http2_clients_over_the_fast_pools() {
    crate::support::keep_logs();
    let back = canned_upstream().await;
    let gw = gateway_with(back.addr, true, "request_timeout_ms = 300").await;
    let mut c = TestClient::connect(gw.addr(), Proto::H2c).await.unwrap();
    let mut sent = 0;
    for _ in 0..2 {
        let mut call = async |method: &str, path: &str| {
            sent += 1;
            c.call(method, path, &[], "").await.unwrap()
        };
        let r = call("GET", "/chunked").await;
        assert_eq!(
            (r.status().as_u16(), r.text().as_str()),
            (200, "hello world")
        );
        assert_eq!(r.header("x-kind"), Some("chunked"));
        let r = call("GET", "/until-close").await;
        assert_eq!(
            (r.status().as_u16(), r.text().as_str()),
            (200, "all of this, then EOF")
        );
        let r = call("GET", "/no-content").await;
        assert_eq!((r.status().as_u16(), r.text().as_str()), (204, ""));
        let r = call("HEAD", "/anything").await;
        assert_eq!((r.status().as_u16(), r.text().as_str()), (200, ""));
        assert_eq!(r.header("content-length"), Some("11"));
        let r = call("GET", "/interim").await;
        assert_eq!((r.status().as_u16(), r.text().as_str()), (200, "final"));
        let r = call("GET", "/in-pieces").await;
        assert_eq!((r.status().as_u16(), r.text()), (200, "p".repeat(20_000)));
        let r = call("GET", "/large").await;
        assert_eq!((r.status().as_u16(), r.text()), (200, "L".repeat(100_000)));
        assert_eq!(r.header("content-length"), Some("100000"));
        // Closed by the upstream after each answer: the next request is not hurt.
        let r = call("GET", "/then-close").await;
        assert_eq!((r.status().as_u16(), r.text().as_str()), (200, "ok"));
        let r = call("POST", "/then-close").await;
        assert_eq!((r.status().as_u16(), r.text().as_str()), (200, "ok"));
        // Failures are JSON errors on the stream, and the connection carries on.
        let r = call("GET", "/cut-short").await;
        assert_eq!(r.status(), 502);
        // The client is told which upstream failed; the log says how, under the request id.
        assert_eq!(r.json()["error"]["message"], "upstream up unavailable");
        let id = r.json()["error"]["request_id"]
            .as_str()
            .unwrap()
            .to_string();
        let logged = crate::support::logged_for(&id);
        assert!(logged.contains("10 of 100 body bytes"), "{logged}");
        let r = call("GET", "/garbage").await;
        assert_eq!(r.status(), 502);
        assert_eq!(r.json()["error"]["code"], "bad_gateway");
        let r = call("GET", "/stalls").await;
        assert_eq!(r.status(), 504);
        assert_eq!(r.json()["error"]["code"], "gateway_timeout");
    }
    assert_eq!(fast_count(&gw, "bridged").await, sent);
}

/// Bridged requests on one upstream connection share its answer timer, set for the first of
/// them: each later request still gets its whole `request_timeout_ms`.
#[tokio::test]
async fn each_bridged_request_on_a_reused_connection_gets_its_whole_timeout() {
    let back = canned_upstream().await;
    let gw = gateway_with(back.addr, true, "request_timeout_ms = 400").await;
    let mut c = TestClient::connect(gw.addr(), Proto::H2c).await.unwrap();
    // Waits for its answer, so the connection's timer is made, for 400 ms from now.
    let r = c.call("GET", "/late", &[], "").await.unwrap();
    assert_eq!((r.status().as_u16(), r.text().as_str()), (200, "late"));
    // These start after that, and are still waiting when it goes off.
    for _ in 0..2 {
        let r = c.call("GET", "/late", &[], "").await.unwrap();
        assert_eq!((r.status().as_u16(), r.text().as_str()), (200, "late"));
    }
    let m = crate::admin::scrape(gw.admin).await;
    let opened = r#"pms_gateway_upstream_connections_opened_total{upstream="up"}"#;
    assert_eq!(
        crate::admin::value(&m, opened),
        Some(1.0),
        "the three went over one connection:\n{m}"
    );
    // And the timer still ends a request that gets no answer.
    let r = c.call("GET", "/stalls", &[], "").await.unwrap();
    assert_eq!(r.status(), 504);
    assert_eq!(fast_count(&gw, "bridged").await, 4);
}

#[tokio::test]
async fn an_http2_body_that_stops_coming_gets_408_before_any_upstream_connection() {
    let back = inspector().await;
    let gw = gateway_with(back.addr, true, "request_timeout_ms = 300").await;
    let request = http::Request::post("http://gw/echo")
        .header("content-length", "100")
        .body(())
        .unwrap();
    let (status, text) = crate::support::h2_stalled_upload(gw.addr(), request, b"0123456789").await;
    assert_eq!(status, 408);
    assert!(text.contains("10 of 100 bytes"), "{text}");
    assert_eq!(fast_count(&gw, "bridged").await, 1);
    let m = crate::admin::scrape(gw.admin).await;
    let opened = r#"pms_gateway_upstream_connections_opened_total{upstream="up"}"#;
    assert_eq!(
        crate::admin::value(&m, opened).unwrap_or(0.0),
        0.0,
        "no upstream connection was taken:\n{m}"
    );
}

#[tokio::test]
async fn an_upstream_closing_between_requests_costs_no_error() {
    let back = canned_upstream().await;
    let gw = gateway_with(back.addr, true, "").await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    for method in ["GET", "POST", "GET", "PUT"] {
        let r = c.call(method, "/then-close", &[], "x").await.unwrap();
        assert_eq!(
            (r.status().as_u16(), r.text().as_str()),
            (200, "ok"),
            "{method}"
        );
    }
}

/// A loopback address with nothing listening.
fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

#[tokio::test]
async fn upstream_failures_are_json_errors_and_bodyless_requests_keep_the_connection() {
    // A port with nothing listening.
    let closed = closed_port();
    let gw = gateway_with(closed, true, "").await;
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    for _ in 0..2 {
        let r = one_response(
            &mut conn,
            "GET /x HTTP/1.1\r\nhost: gw\r\nx-request-id: rid-1\r\n\r\n",
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 502"), "{r}");
        assert!(r.contains("\"code\":\"bad_gateway\""), "{r}");
        assert!(r.contains("\"request_id\":\"rid-1\""), "{r}");
    }

    let back = canned_upstream().await;
    let gw = gateway_with(back.addr, true, "").await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c.call("GET", "/garbage", &[], "").await.unwrap();
    assert_eq!(r.status(), 502);
    assert_eq!(r.json()["error"]["code"], "bad_gateway");

    let slow = echo(false, false, Duration::from_secs(3)).await;
    let gw = gateway_with(slow.addr, true, "request_timeout_ms = 200").await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c.call("GET", "/slow", &[], "").await.unwrap();
    assert_eq!(r.status(), 504);
    assert_eq!(r.json()["error"]["code"], "gateway_timeout");
}

/// A client still sending a body the gateway will not relay (here the upstream refuses
/// connections before any of the body is read) gets to read the 502 instead of being reset
/// mid-upload: after answering, the gateway reads and drops what follows for a while.
#[tokio::test]
async fn an_error_before_the_body_is_read_does_not_reset_a_client_still_sending() {
    let closed = closed_port();
    let gw = gateway_with(closed, true, "").await;
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    // Over the 64 KiB the fast path gathers, so the body streams and none of it is read first.
    conn.write_all(b"POST /x HTTP/1.1\r\nhost: gw\r\ncontent-length: 300000\r\n\r\n")
        .await
        .unwrap();
    conn.write_all(&[b'a'; 100_000]).await.unwrap();
    // The gateway answers and closes its side meanwhile; the client goes on sending.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..2 {
        conn.write_all(&[b'a'; 100_000]).await.unwrap();
    }
    let text = crate::support::read_until_closed(&mut conn).await;
    assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
    assert!(text.contains("connection: close\r\n"), "{text}");
}

/// A gateway config sending everything to one `https://` upstream on `port`, named `echo`;
/// `upstream` holds the rest of its lines (protocol, trust).
fn tls_upstream_config(port: u16, upstream: &str) -> String {
    format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[[listeners]]
listen = "127.0.0.1:0"

[[upstreams]]
name = "echo"
endpoints = ["https://127.0.0.1:{port}"]
{upstream}

[[routes]]
match = {{ path_prefix = "/" }}
upstream = "echo"
"#
    )
}

#[tokio::test]
async fn tls_upstreams_are_relayed_over_http1_with_verified_certificates() {
    crate::support::keep_logs();
    let back = echo(true, false, Duration::ZERO).await;
    let toml =
        |ca: &str| tls_upstream_config(back.addr.port(), &format!("protocol = \"h1\"\n{ca}"));
    let gw = crate::support::gateway(&toml(r#"tls = { ca = "{ca}" }"#), &[]).await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    for i in 0..3 {
        let r = c
            .call("POST", "/tls", &[], format!("body {i}"))
            .await
            .unwrap();
        assert_eq!((r.status().as_u16(), r.text()), (200, format!("body {i}")));
        assert_eq!(r.header("x-echo-tls"), Some("true"));
        assert_eq!(
            r.header("x-echo-protocol"),
            Some("HTTP/1.1"),
            "ALPN kept to http/1.1"
        );
    }
    assert_eq!(fast_counts(&gw).await, (3, 0));

    // Without the test CA the upstream's certificate is refused: a 502, never a request sent.
    let gw = crate::support::gateway(&toml(""), &[]).await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c.call("GET", "/tls", &[], "").await.unwrap();
    assert_eq!(r.status(), 502, "{}", r.text());
    let id = r.json()["error"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let logged = crate::support::logged_for(&id);
    assert!(logged.contains("TLS"), "{logged}");
}

#[tokio::test]
async fn an_auto_tls_upstream_is_relayed_when_alpn_picks_http1_and_left_to_hyper_when_h2() {
    let config =
        |port: u16| tls_upstream_config(port, "protocol = \"auto\"\ntls = { ca = \"{ca}\" }");
    // (back-end HTTP/1.1 only, protocol it is reached with, (relayed, handed over))
    for (http1_only, protocol, counts) in [(true, "HTTP/1.1", (3, 0)), (false, "HTTP/2.0", (0, 1))]
    {
        let back = echo(true, http1_only, Duration::ZERO).await;
        let gw = crate::support::gateway(&config(back.addr.port()), &[]).await;
        let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
        for i in 0..3 {
            let r = c
                .call("POST", "/auto", &[], format!("body {i}"))
                .await
                .unwrap();
            assert_eq!((r.status().as_u16(), r.text()), (200, format!("body {i}")));
            assert_eq!(r.header("x-echo-protocol"), Some(protocol), "{protocol}");
        }
        assert_eq!(fast_counts(&gw).await, counts, "{protocol}");
    }
}

/// Writes a POST head announcing `len` body bytes, then `body` in `pieces` writes with a pause
/// after each.
async fn post_in_pieces(conn: &mut TcpStream, len: usize, body: &[u8], pieces: usize) {
    let head = format!("POST /echo HTTP/1.1\r\nhost: gw\r\ncontent-length: {len}\r\n\r\n");
    conn.write_all(head.as_bytes()).await.unwrap();
    for piece in body.chunks(body.len().div_ceil(pieces)) {
        conn.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn bodies_that_arrive_in_pieces_are_relayed_whole_on_both_hops() {
    let back = echo(false, false, Duration::ZERO).await;
    let gw = gateway_with(back.addr, true, "").await;
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    // Under the size read whole before sending, and over it (streamed).
    for len in [20_000usize, 200_000] {
        let body: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        post_in_pieces(&mut conn, len, &body, 4).await;
        let r = read_response(&mut conn).await;
        assert!(
            r.starts_with("HTTP/1.1 200"),
            "{len}: {}",
            &r[..200.min(r.len())]
        );
        let got = r.split_once("\r\n\r\n").unwrap().1;
        assert!(
            got.as_bytes() == body.as_slice(),
            "{len}: the body came back changed"
        );
    }

    let canned = canned_upstream().await;
    let gw = gateway_with(canned.addr, true, "").await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    for _ in 0..2 {
        let r = c.call("GET", "/in-pieces", &[], "").await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text(), "p".repeat(20_000));
    }
    assert_eq!(fast_counts(&gw).await, (2, 0), "both relayed");
}

#[tokio::test]
async fn a_body_cut_short_is_never_passed_on_as_complete() {
    crate::support::keep_logs();
    let back = echo(false, false, Duration::ZERO).await;
    let gw = gateway_with(back.addr, true, "").await;
    // The client announces 100 bytes, sends 10 and stops writing: no answer, closed.
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    conn.write_all(b"POST /echo HTTP/1.1\r\nhost: gw\r\ncontent-length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    conn.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut rest))
        .await
        .expect("closed in time")
        .unwrap();
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));

    // The upstream does the same with a body small enough to be read whole before anything
    // is sent: the client gets a 502 instead, and keeps its connection.
    let canned = canned_upstream().await;
    let gw = gateway_with(canned.addr, true, "").await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    for _ in 0..2 {
        let r = c.call("GET", "/cut-short", &[], "").await.unwrap();
        assert_eq!(r.status(), 502);
        assert_eq!(r.json()["error"]["code"], "bad_gateway");
        // The client is told which upstream failed; the log says how, under the request id.
        assert_eq!(r.json()["error"]["message"], "upstream up unavailable");
        let id = r.json()["error"]["request_id"]
            .as_str()
            .unwrap()
            .to_string();
        let logged = crate::support::logged_for(&id);
        assert!(logged.contains("10 of 100 body bytes"), "{logged}");
    }
    assert_eq!(
        fast_counts(&gw).await,
        (2, 0),
        "one connection, both relayed"
    );
}

#[tokio::test]
async fn a_small_response_body_that_stops_coming_is_a_504() {
    let canned = canned_upstream().await;
    let gw = gateway_with(canned.addr, true, "request_timeout_ms = 300").await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c.call("GET", "/stalls", &[], "").await.unwrap();
    assert_eq!(r.status(), 504);
    assert_eq!(r.json()["error"]["code"], "gateway_timeout");
    // The client's connection is still good.
    let r = c.call("GET", "/no-content", &[], "").await.unwrap();
    assert_eq!(r.status(), 204);
}

#[tokio::test]
async fn a_client_too_slow_with_its_body_gets_408_and_the_connection_closes() {
    let back = echo(false, false, Duration::ZERO).await;
    let gw = gateway_with(back.addr, true, "request_timeout_ms = 200").await;
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    conn.write_all(
        b"POST /echo HTTP/1.1\r\nhost: gw\r\nx-request-id: slow-1\r\ncontent-length: 100\r\n\r\n0123456789",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut got))
        .await
        .expect("answered and closed in time")
        .unwrap();
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("\"code\":\"request_timeout\""), "{got}");
    assert!(got.contains("10 of 100 bytes"), "{got}");
    assert!(got.contains("\"request_id\":\"slow-1\""), "{got}");
}

/// A TCP relay to `target` that holds every connection after the first for `hold` before it
/// passes a byte: a back-end slow to take new connections (the TLS handshake waits).
async fn slow_to_connect(target: SocketAddr, hold: Duration) -> Spawned<()> {
    Spawned::start(move |listener: TcpListener, stop| async move {
        tokio::select! {
            () = stop => {}
            () = async {
                for n in 0u32.. {
                    let Ok((mut conn, _)) = listener.accept().await else { return };
                    tokio::spawn(async move {
                        if n > 0 {
                            tokio::time::sleep(hold).await;
                        }
                        let Ok(mut back) = TcpStream::connect(target).await else { return };
                        let _ = tokio::io::copy_bidirectional(&mut conn, &mut back).await;
                    });
                }
            } => {}
        }
    })
    .await
}

#[tokio::test]
async fn a_connect_that_loses_the_race_to_a_returned_connection_still_joins_the_pool() {
    // Each response takes a second; every connection after the first waits 1.5 s for its
    // TLS handshake.
    let back = echo(true, true, Duration::from_secs(1)).await;
    let relay = slow_to_connect(back.addr, Duration::from_millis(1500)).await;
    let gw = crate::support::gateway(
        &format!(
            r#"
[admin]
listen = "127.0.0.1:0"

[runtime]
workers = 1

[[listeners]]
listen = "127.0.0.1:0"

[[upstreams]]
name = "up"
endpoints = ["https://127.0.0.1:{}"]
protocol = "h1"
connect_timeout_ms = 5000
tls = {{ ca = "{{ca}}" }}

[[routes]]
match = {{ path_prefix = "/" }}
upstream = "up"
"#,
            relay.addr.port()
        ),
        &[],
    )
    .await;
    let call = |body: &'static str| {
        let addr = gw.addr();
        tokio::spawn(async move {
            let mut c = TestClient::connect(addr, Proto::H1c).await.unwrap();
            let r = c.call("POST", "/", &[], body).await.unwrap();
            (r.status().as_u16(), r.text())
        })
    };
    // The first request opens the first connection; the second finds none idle, starts a
    // connect, and gets the first connection when it comes back, before its own is ready.
    let first = call("first");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = call("second");
    assert_eq!(first.await.unwrap(), (200, "first".to_string()));
    assert_eq!(second.await.unwrap(), (200, "second".to_string()));
    // The second connection still opens: there were more requests than connections, and a
    // dropped connect would have cost the back-end a handshake for nothing.
    let opened = r#"pms_gateway_upstream_connections_opened_total{upstream="up"}"#;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let m = crate::admin::scrape(gw.admin).await;
        if crate::admin::value(&m, opened) == Some(2.0) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the losing connect never joined the pool:\n{m}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        fast_counts(&gw).await,
        (2, 0),
        "both relayed by the fast path"
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_on_both_paths() {
    // As hyper's path does after the header-read timeout; the fast path after one to two.
    let back = echo(false, false, Duration::ZERO).await;
    for fast in [true, false] {
        let gw = simple(
            &endpoint(back.addr),
            "",
            &format!("[limits]\nhttp1_fast_path = {fast}\nheader_read_timeout_ms = 300"),
            &[],
        )
        .await;
        let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
        // Busy for longer than the timeout: the connection stays.
        for _ in 0..6 {
            conn.write_all(b"GET /a HTTP/1.1\r\nhost: gw\r\n\r\n")
                .await
                .unwrap();
            assert!(read_response(&mut conn).await.starts_with("HTTP/1.1 200"));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let rest = crate::support::read_until_closed(&mut conn).await;
        assert_eq!(rest, "", "fast={fast}: closed without a word");
        assert_eq!(fast_count(&gw, "relayed").await, if fast { 6 } else { 0 });
    }
}

/// What each of the canned upstream's stalling paths sends of its body before it stops.
const STALLS: [(&str, &str); 3] = [
    ("/large-stalls", "70,000 bytes of L"),
    ("/chunked-stalls", "hello"),
    ("/close-stalls", "0123456789"),
];

#[tokio::test]
async fn a_response_body_the_upstream_stops_sending_is_cut_off_after_the_read_timeout() {
    let canned = canned_upstream().await;
    for fast in [true, false] {
        let gw = gateway_with(canned.addr, fast, "read_timeout_ms = 300").await;
        for (path, sent) in STALLS {
            let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
            conn.write_all(format!("GET {path} HTTP/1.1\r\nhost: gw\r\n\r\n").as_bytes())
                .await
                .unwrap();
            // Before, the connection stayed open for as long as the upstream held it.
            let text = crate::support::read_until_closed(&mut conn).await;
            let at = format!("fast path {fast}, {path}");
            assert!(text.starts_with("HTTP/1.1 200"), "{at}: {text:.200}");
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            // What the upstream sent went through, and the client can tell that the response
            // is cut short: fewer bytes than announced, or no last chunk.
            if path == "/large-stalls" {
                assert!(head.contains("content-length: 100000"), "{at}: {head}");
                assert_eq!(body.len(), 70_000, "{at}: {sent}");
                assert!(body.bytes().all(|b| b == b'L'), "{at}");
            } else {
                assert!(head.contains("transfer-encoding: chunked"), "{at}: {head}");
                assert!(body.contains(sent), "{at}: {body:?}");
                assert!(!body.ends_with("0\r\n\r\n"), "{at}: {body:?}");
            }
        }
    }
}

#[tokio::test]
async fn an_http2_response_the_upstream_stops_sending_is_reset_after_the_read_timeout() {
    let canned = canned_upstream().await;
    // With the fast path the request goes out over its pools (the bridge); without, through
    // hyper's client.
    for fast in [true, false] {
        let gw = gateway_with(canned.addr, fast, "read_timeout_ms = 300").await;
        let tcp = TcpStream::connect(gw.addr()).await.unwrap();
        let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
        let conn = tokio::spawn(conn);
        for (path, sent) in STALLS {
            let at = format!("fast path {fast}, {path}");
            let request = http::Request::get(format!("http://gw{path}"))
                .body(())
                .unwrap();
            let (response, _) = client.send_request(request, true).unwrap();
            let response = response.await.unwrap();
            assert_eq!(response.status(), 200, "{at}");
            let mut body = response.into_body();
            let mut got = Vec::new();
            let ended = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    match body.data().await {
                        Some(Ok(data)) => {
                            let _ = body.flow_control().release_capacity(data.len());
                            got.extend_from_slice(&data);
                        }
                        Some(Err(e)) => return Some(e),
                        None => return None,
                    }
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{at}: the stream is still open after 10 s"));
            assert!(ended.is_some(), "{at}: the body ended as if complete");
            let got = String::from_utf8(got).unwrap();
            if path == "/large-stalls" {
                assert_eq!(got, "L".repeat(70_000), "{at}: {sent}");
            } else {
                assert_eq!(got, sent, "{at}");
            }
        }
        assert!(
            !conn.is_finished(),
            "fast path {fast}: the connection was closed"
        );
    }
}
