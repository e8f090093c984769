//! What the gateway does to requests and responses on the way through, routing, streaming, limits
//! and the drain on shutdown.

use std::time::Duration;

use pms_net::serve::{Drain, ServeConfig};
use pms_testkit::client::{Proto, TestClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{echo, endpoint, gateway, inspector, simple};

/// Writes raw bytes to the gateway and reads until it closes (bounded by `limit`).
async fn raw_exchange(
    addr: std::net::SocketAddr,
    request: &[u8],
    limit: Duration,
) -> (bool, String) {
    let mut raw = tokio::net::TcpStream::connect(addr).await.unwrap();
    raw.write_all(request).await.unwrap();
    let mut resp = Vec::new();
    let closed = tokio::time::timeout(limit, raw.read_to_end(&mut resp))
        .await
        .is_ok();
    (closed, String::from_utf8_lossy(&resp).into_owned())
}

#[tokio::test]
async fn headers_are_rewritten_as_a_proxy_should() {
    let back = inspector().await;
    let gw = simple(&endpoint(back.addr), "", "", &[]).await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c
        .call(
            "PUT",
            "/users/vehicle/3?plate=AA-00-BB&x=%20y",
            &[
                ("connection", "x-private, keep-alive"),
                ("x-private", "secret"),
                ("keep-alive", "timeout=9"),
                ("x-forwarded-for", "203.0.113.9"),
                ("x-forwarded-proto", "https"),
                ("x-userid", "1"),
                ("X-UserRole", "SUPERVISOR"),
                ("x-request-id", "client-id-1"),
                ("x-custom", "kept"),
                ("content-type", "application/json"),
            ],
            r#"{"plate":"AA-00-BB"}"#,
        )
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = r.json();
    let h = &seen["headers"];
    assert_eq!(seen["method"], "PUT");
    assert_eq!(seen["path"], "/users/vehicle/3");
    assert_eq!(seen["query"], "plate=AA-00-BB&x=%20y", "query string kept");
    assert_eq!(seen["body"], r#"{"plate":"AA-00-BB"}"#);
    for gone in [
        "x-private",
        "keep-alive",
        "connection",
        "x-userid",
        "x-userrole",
    ] {
        assert!(
            h.get(gone).is_none(),
            "{gone} must not reach the upstream: {h}"
        );
    }
    assert_eq!(h["x-forwarded-for"][0], "203.0.113.9, 127.0.0.1");
    assert_eq!(h["x-forwarded-proto"][0], "http");
    assert_eq!(h["x-forwarded-host"][0], "localhost");
    assert_eq!(h["via"][0], "1.1 pms");
    assert_eq!(h["x-request-id"][0], "client-id-1");
    assert_eq!(h["x-custom"][0], "kept");
    assert_eq!(h["content-type"][0], "application/json");
    // Back to the client: the upstream's hop-by-hop header is gone, Via and the id are there.
    assert!(r.header("keep-alive").is_none());
    assert_eq!(r.header("via"), Some("1.1 pms"));
    assert_eq!(r.header("x-request-id"), Some("client-id-1"));
}

#[tokio::test]
async fn a_request_id_is_made_when_missing_or_unsafe() {
    let back = inspector().await;
    let gw = simple(&endpoint(back.addr), "", "", &[]).await;
    let mut c = TestClient::connect(gw.addr(), Proto::H2c).await.unwrap();
    let r = c
        .call("GET", "/", &[("x-request-id", "bad id<>")], "")
        .await
        .unwrap();
    let sent = r.json()["headers"]["x-request-id"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sent.len(), 32);
    assert_eq!(r.header("x-request-id"), Some(sent.as_str()));
    assert_eq!(
        r.json()["headers"]["via"][0],
        "2 pms",
        "Via names the received protocol"
    );
}

#[tokio::test]
async fn upstream_status_codes_pass_through() {
    let back = pms_testkit::inspect::spawn(ServeConfig::default(), http::StatusCode::CREATED).await;
    let gw = simple(&endpoint(back.addr), "", "", &[]).await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    assert_eq!(
        c.call("POST", "/users/createUser", &[], "{}")
            .await
            .unwrap()
            .status(),
        201
    );
    let back =
        pms_testkit::inspect::spawn(ServeConfig::default(), http::StatusCode::CONFLICT).await;
    let gw = simple(&endpoint(back.addr), "", "", &[]).await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    assert_eq!(
        c.call("POST", "/users/createUser", &[], "{}")
            .await
            .unwrap()
            .status(),
        409
    );
}

#[tokio::test]
async fn routes_pick_the_most_specific_match_unmatched_is_404_and_a_wrong_method_405() {
    let a = inspector().await;
    let b = echo(false, false, Duration::ZERO).await;
    let toml = format!(
        r#"
[admin]
listen = "127.0.0.1:0"
[[listeners]]
listen = "127.0.0.1:0"
[[upstreams]]
name = "inspect"
endpoints = ["http://127.0.0.1:{}"]
[[upstreams]]
name = "echo"
endpoints = ["http://127.0.0.1:{}"]
[[routes]]
match = {{ path_prefix = "/users/", methods = ["GET"] }}
upstream = "inspect"
[[routes]]
match = {{ path = "/users/login", methods = ["POST"] }}
upstream = "echo"
"#,
        a.addr.port(),
        b.addr.port()
    );
    let gw = gateway(&toml, &[]).await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c.call("POST", "/users/login", &[], "creds").await.unwrap();
    assert_eq!(r.text(), "creds", "exact route to echo");
    let r = c.call("GET", "/users/getAllUsers", &[], "").await.unwrap();
    assert_eq!(
        r.json()["path"],
        "/users/getAllUsers",
        "prefix route to inspector"
    );
    for (m, p) in [("GET", "/parks/1"), ("GET", "/users")] {
        let r = c.call(m, p, &[], "").await.unwrap();
        assert_eq!(r.status(), 404, "{m} {p}");
        let e = r.json();
        assert_eq!(e["error"]["code"], "not_found");
        assert_eq!(e["error"]["message"], format!("no route for {m} {p}"));
        assert_eq!(e["error"]["request_id"].as_str(), r.header("x-request-id"));
    }
    // A path routes take with other methods: 405, naming them (RFC 9110 §15.5.6), on both
    // front ends.
    for proto in [Proto::H1c, Proto::H2c] {
        let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
        for (m, p, allow) in [
            ("DELETE", "/users/1", "GET"),
            ("PUT", "/users/login", "GET, POST"),
        ] {
            let r = c.call(m, p, &[], "").await.unwrap();
            assert_eq!(r.status(), 405, "{proto:?} {m} {p}");
            assert_eq!(r.header("allow"), Some(allow), "{proto:?} {m} {p}");
            let e = r.json();
            assert_eq!(e["error"]["code"], "method_not_allowed");
            assert_eq!(e["error"]["request_id"].as_str(), r.header("x-request-id"));
        }
    }
}

#[tokio::test]
async fn large_bodies_stream_both_ways_over_h1_and_h2() {
    let back = echo(false, false, Duration::ZERO).await;
    let gw = simple(&endpoint(back.addr), "", "", &[]).await;
    let body: Vec<u8> = (0..5_000_000u32).map(|i| (i * 7 % 256) as u8).collect();
    for proto in [Proto::H1c, Proto::H2c] {
        let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
        let r = c.call("POST", "/big", &[], body.clone()).await.unwrap();
        assert_eq!(r.status(), 200, "{proto:?}");
        assert!(
            r.body.as_ref() == body.as_slice(),
            "{proto:?}: body changed"
        );
    }
}

#[tokio::test]
async fn oversized_bodies_are_refused_with_413() {
    let back = echo(false, false, Duration::ZERO).await;
    let gw = simple(
        &endpoint(back.addr),
        "",
        "[limits]\nmax_body_bytes = 1000",
        &[],
    )
    .await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    // Declared length over the limit: refused before anything is sent upstream.
    let r = c.call("POST", "/x", &[], vec![b'a'; 1001]).await.unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(r.json()["error"]["code"], "payload_too_large");
    let r = c.call("POST", "/x", &[], vec![b'a'; 1000]).await.unwrap();
    assert_eq!(r.status(), 200);

    // No declared length (chunked): cut off while streaming.
    let chunk = "a".repeat(600);
    let req = format!(
        "POST /x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n258\r\n{chunk}\r\n258\r\n{chunk}\r\n0\r\n\r\n"
    );
    let (_, text) = raw_exchange(gw.addr(), req.as_bytes(), Duration::from_secs(10)).await;
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
}

/// An echo back-end, and a gateway in front of it that takes request heads of up to 8 KiB;
/// `limits` adds lines to its `[limits]`.
async fn small_heads(limits: &str) -> (pms_testkit::Spawned<Drain>, crate::support::Gw) {
    let back = echo(false, false, Duration::ZERO).await;
    let gw = simple(
        &endpoint(back.addr),
        "",
        &format!("[limits]\nmax_header_bytes = 8192\n{limits}"),
        &[],
    )
    .await;
    (back, gw)
}

/// Heads the gateway cannot read get its JSON error, with a request id, and the connection
/// closes; with the fast path off, hyper still refuses an oversized head (431, no body).
#[tokio::test]
async fn broken_request_heads_get_json_errors_and_the_connection_closes() {
    let (_back, gw) = small_heads("").await;
    let big = "b".repeat(20_000);
    for (req, status, code) in [
        (
            format!("GET / HTTP/1.1\r\nhost: x\r\nx-big: {big}\r\n\r\n"),
            "431",
            "headers_too_large",
        ),
        (
            format!("GET /{big} HTTP/1.1\r\nhost: x\r\n\r\n"),
            "414",
            "uri_too_long",
        ),
        (
            "GET / HTTP/1.1\r\nhost: x\r\nbad header\r\n\r\n".to_owned(),
            "400",
            "bad_request",
        ),
        (
            "GET /a<b HTTP/1.1\r\nhost: x\r\n\r\n".to_owned(),
            "400",
            "bad_request",
        ),
    ] {
        let (closed, text) = raw_exchange(gw.addr(), req.as_bytes(), Duration::from_secs(10)).await;
        assert!(closed, "connection left open: {text}");
        assert!(text.starts_with(&format!("HTTP/1.1 {status} ")), "{text}");
        let (head, body) = text
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("{text}"));
        assert!(head.contains("\r\nx-request-id: "), "{text}");
        let json: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(json["error"]["code"], code, "{text}");
    }
    let metrics = crate::admin::scrape(gw.admin).await;
    assert_eq!(
        crate::admin::value(
            &metrics,
            r#"pms_gateway_http1_fast_path_total{outcome="refused"}"#
        ),
        Some(4.0),
        "{metrics}"
    );

    let (_back, hyper_only) = small_heads("http1_fast_path = false").await;
    let req = format!("GET / HTTP/1.1\r\nhost: x\r\nx-big: {big}\r\n\r\n");
    let (_, text) = raw_exchange(hyper_only.addr(), req.as_bytes(), Duration::from_secs(10)).await;
    assert!(text.starts_with("HTTP/1.1 431"), "{text}");
}

/// A client still sending when its oversized head is refused can keep writing and then read the
/// answer: the gateway reads and drops what follows instead of resetting the connection.
#[tokio::test]
async fn a_refused_head_does_not_reset_a_client_still_sending() {
    let (_back, gw) = small_heads("").await;
    let mut raw = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let head = format!("GET / HTTP/1.1\r\nhost: x\r\nx-big: {}", "b".repeat(20_000));
    raw.write_all(head.as_bytes()).await.unwrap();
    // Give the gateway time to answer and shut down its side before the rest arrives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..10 {
        raw.write_all(&[b'b'; 10_000]).await.unwrap();
    }
    let text = crate::support::read_until_closed(&mut raw).await;
    assert!(text.starts_with("HTTP/1.1 431 "), "{text}");
}

#[tokio::test]
async fn slow_request_heads_are_cut_off() {
    let back = echo(false, false, Duration::ZERO).await;
    let gw = simple(
        &endpoint(back.addr),
        "",
        "[limits]\nheader_read_timeout_ms = 200",
        &[],
    )
    .await;
    // Never finish the head; the gateway must close the connection on its own.
    let (closed, text) = raw_exchange(
        gw.addr(),
        b"GET / HTTP/1.1\r\nhost: x\r\n",
        Duration::from_secs(30),
    )
    .await;
    assert!(closed, "connection left open");
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{text}"
    );
}

/// The cap is listener-wide across workers, and waiting clients are all served as slots free up
/// whichever worker's socket they landed on. (Regression: permits taken before `accept()` could
/// go to a worker with nobody waiting, deadlocking the others.)
#[tokio::test]
async fn connection_cap_holds_extra_clients_until_a_slot_frees() {
    let back = echo(false, false, Duration::ZERO).await;
    let gw = simple(
        &endpoint(back.addr),
        "",
        "[runtime]\nworkers = 2\n[limits]\nmax_connections = 1",
        &[],
    )
    .await;
    let mut first = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    assert_eq!(
        first.call("POST", "/", &[], "1").await.unwrap().status(),
        200
    );
    let waiting: Vec<_> = (0..6)
        .map(|i| {
            let addr = gw.addr();
            tokio::spawn(async move {
                let mut c = TestClient::connect(addr, Proto::H1c).await.unwrap();
                let text = c
                    .call("POST", "/", &[], format!("w{i}"))
                    .await
                    .unwrap()
                    .text();
                drop(c); // frees the slot for the next one
                text
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        waiting.iter().all(|t| !t.is_finished()),
        "a connection was served while the cap was reached"
    );
    drop(first);
    // Liveness bound only: a deadlock fails here instead of hanging the suite.
    let all = tokio::time::timeout(Duration::from_secs(60), futures_join_all(waiting))
        .await
        .expect("waiting clients were never served (deadlock)");
    for (i, text) in all.into_iter().enumerate() {
        assert_eq!(text, format!("w{i}"));
    }
}

async fn futures_join_all<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test]
async fn shutdown_finishes_in_flight_requests_then_stops() {
    let back = echo(false, false, Duration::from_millis(500)).await;
    let gw = simple(&endpoint(back.addr), "", "", &[]).await;
    let addr = gw.addr();
    let in_flight = tokio::spawn(async move {
        let mut c = TestClient::connect(addr, Proto::H2c).await.unwrap();
        c.call("POST", "/slow", &[], "done").await
    });
    // Wait until the request is at the back-end.
    let admin = gw.admin;
    pms_testkit::assert_eventually("request in flight", 500, || async move {
        let m = crate::admin::scrape(admin).await;
        crate::admin::value(&m, r#"pms_gateway_upstream_requests_total{upstream="up"}"#)
            == Some(1.0)
    })
    .await;
    let drain = gw.spawned.shutdown().await.unwrap();
    assert_eq!(drain, Drain::Complete);
    let r = in_flight.await.unwrap().unwrap();
    assert_eq!((r.status().as_u16(), r.text().as_str()), (200, "done"));
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener closed"
    );
}

#[tokio::test]
async fn round_robin_over_endpoints() {
    let a = echo(false, false, Duration::ZERO).await;
    let b = inspector().await;
    let gw = simple(
        &format!(
            r#"endpoints = ["http://127.0.0.1:{}", "http://127.0.0.1:{}"]"#,
            a.addr.port(),
            b.addr.port()
        ),
        "",
        "",
        &[],
    )
    .await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let mut echoes = 0;
    for _ in 0..4 {
        let r = c.call("POST", "/", &[], "ping").await.unwrap();
        if r.text() == "ping" {
            echoes += 1;
        }
    }
    assert_eq!(echoes, 2);
}

#[tokio::test]
async fn the_host_header_is_checked_as_rfc_9112_says() {
    let back = inspector().await;
    for fast in [true, false] {
        let gw = simple(
            &endpoint(back.addr),
            "",
            &format!("[limits]\nhttp1_fast_path = {fast}"),
            &[],
        )
        .await;
        let refused = [
            ("GET / HTTP/1.1\r\n", "needs a Host header"),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n",
                "more than one Host",
            ),
            (
                "GET / HTTP/1.1\r\nHost: a b\r\n",
                r#"Host \"a b\" is not a host[:port]"#,
            ),
            (
                "GET / HTTP/1.1\r\nHost: user@gw\r\n",
                "is not a host[:port]",
            ),
            ("GET / HTTP/1.1\r\nHost: gw/x\r\n", "is not a host[:port]"),
            ("GET / HTTP/1.1\r\nHost:\r\n", "is not a host[:port]"),
        ];
        for (head, why) in refused {
            let raw = format!("{head}connection: close\r\n\r\n");
            let (_, got) = raw_exchange(gw.addr(), raw.as_bytes(), Duration::from_secs(10)).await;
            assert!(
                got.starts_with("HTTP/1.1 400"),
                "fast={fast} {head:?}: {got}"
            );
            assert!(got.contains(r#""code":"bad_request""#), "{got}");
            assert!(got.contains(why), "fast={fast} {head:?}: {got}");
        }
        let fine = [
            ("GET / HTTP/1.1\r\nHost: gw:8080\r\n", "gw:8080"),
            ("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n", "[::1]:8080"),
            ("GET / HTTP/1.1\r\nHost: 192.0.2.1\r\n", "192.0.2.1"),
            // HTTP/1.0 may leave it out.
            ("GET / HTTP/1.0\r\n", ""),
            // An absolute-form target's authority wins over Host (RFC 9112 §3.2.2).
            (
                "GET http://x.example/ HTTP/1.1\r\nHost: y.example\r\n",
                "x.example",
            ),
        ];
        for (head, forwarded_host) in fine {
            let raw = format!("{head}connection: close\r\n\r\n");
            let (_, got) = raw_exchange(gw.addr(), raw.as_bytes(), Duration::from_secs(10)).await;
            assert!(got.contains(" 200 OK\r\n"), "fast={fast} {head:?}: {got}");
            let body = got.split_once("\r\n\r\n").map_or("", |(_, b)| b);
            let seen: serde_json::Value = serde_json::from_str(body).unwrap();
            let h = &seen["headers"]["x-forwarded-host"];
            if forwarded_host.is_empty() {
                assert!(h.is_null(), "{head:?}: {h}");
            } else {
                assert_eq!(h[0], forwarded_host, "{head:?}");
            }
        }
    }
}

/// An upstream that answers every request on a connection with `len` bytes, whatever it asked.
async fn large_answers(len: usize) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n");
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.write_all(&vec![b'x'; len]).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_client_that_stops_reading_is_dropped_after_the_send_timeout() {
    // More than the kernel can hold between the gateway and a client that reads nothing: the
    // gateway's send buffer (at most `tcp_wmem`'s 4 MiB by default) plus the client's receive
    // buffer, kept small below so that its autotuning cannot take the answer in.
    const BODY: usize = 16 << 20;
    let back = large_answers(BODY).await;
    for fast in [true, false] {
        let gw = simple(
            &endpoint(back),
            "",
            &format!("[limits]\nhttp1_fast_path = {fast}\nsend_timeout_ms = 300"),
            &[],
        )
        .await;
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(16 << 10).unwrap();
        let mut conn = socket.connect(gw.addr()).await.unwrap();
        conn.write_all(b"GET /large HTTP/1.1\r\nhost: gw\r\n\r\n")
            .await
            .unwrap();
        // The client reads nothing for a while, then all there is.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut got)).await;
        assert!(
            read.is_ok(),
            "fast={fast}: the gateway kept the connection open"
        );
        assert!(
            got.starts_with(b"HTTP/1.1 200 OK\r\n"),
            "fast={fast}: the answer began {:?}",
            String::from_utf8_lossy(&got[..got.len().min(200)])
        );
        assert!(
            got.len() < BODY,
            "fast={fast}: got {} bytes, the whole answer: it waited",
            got.len()
        );
    }
}

/// Every request goes upstream with a W3C `traceparent`: the client's when valid, else one
/// starting a trace whose id is the request id (when that is the gateway's own 32 hex digits).
#[tokio::test]
async fn every_request_goes_upstream_with_a_traceparent() {
    let back = inspector().await;
    let given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for fast in [true, false] {
        let gw = simple(
            &endpoint(back.addr),
            "",
            &format!("[limits]\nhttp1_fast_path = {fast}"),
            &[],
        )
        .await;
        for proto in [Proto::H1c, Proto::H2c] {
            let at = format!("fast path {fast}, {proto:?}");
            let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
            let r = c
                .call("GET", "/", &[("traceparent", given)], "")
                .await
                .unwrap();
            assert_eq!(
                r.json()["headers"]["traceparent"],
                serde_json::json!([given]),
                "{at}: the client's trace goes on"
            );
            for headers in [&[][..], &[("traceparent", "00-not-a-trace")][..]] {
                let r = c.call("GET", "/", headers, "").await.unwrap();
                let sent = &r.json()["headers"];
                let id = sent["x-request-id"][0].as_str().unwrap().to_owned();
                let trace = sent["traceparent"].as_array().unwrap();
                assert_eq!(trace.len(), 1, "{at}: {sent}");
                let trace = trace[0].as_str().unwrap();
                assert!(
                    trace.starts_with(&format!("00-{id}-")) && trace.ends_with("-01"),
                    "{at}: {trace} for request {id}"
                );
                assert!(pms_net::trace::trace_id(trace.as_bytes()).is_some(), "{at}");
            }
            // A client's request id that cannot be a trace id: a new one, valid all the same.
            let r = c
                .call("GET", "/", &[("x-request-id", "order-7")], "")
                .await
                .unwrap();
            let trace = r.json()["headers"]["traceparent"][0]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(
                pms_net::trace::trace_id(trace.as_bytes()).is_some(),
                "{at}: {trace}"
            );
        }
    }
}
