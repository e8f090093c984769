//! The protocol matrix of the published reports, checked on both hops: the client sees what it
//! negotiated with the gateway, and the echo's `x-echo-protocol`/`x-echo-tls` prove what reached
//! the back-end.

use std::time::Duration;

use pms_testkit::client::{Proto, TestClient};

use crate::support::{echo, gateway};

/// One scenario.
struct Case {
    /// How the client talks to the gateway.
    client: Proto,
    /// The gateway listener is TLS.
    listener_tls: bool,
    /// Upstream `protocol`.
    upstream: &'static str,
    /// The echo serves TLS.
    echo_tls: bool,
    /// The echo refuses HTTP/2.
    echo_http1_only: bool,
    /// Expected version on the client hop.
    want_client: http::Version,
    /// Expected `x-echo-protocol`.
    want_backend: &'static str,
}

async fn check(case: Case) {
    check_on(case, "").await;
}

/// [`check`] with `runtime` lines added to the gateway's config.
async fn check_on(case: Case, runtime: &str) {
    let backend = echo(case.echo_tls, case.echo_http1_only, Duration::ZERO).await;
    let scheme = if case.echo_tls { "https" } else { "http" };
    let listener_tls = if case.listener_tls {
        r#"tls = { cert = "{cert}", key = "{key}" }"#
    } else {
        ""
    };
    let toml = format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[runtime]
{runtime}

[[listeners]]
listen = "127.0.0.1:0"
{listener_tls}

[[upstreams]]
name = "echo"
endpoints = ["{scheme}://127.0.0.1:{port}"]
protocol = "{proto}"
tls = {{ ca = "{{ca}}" }}

[[routes]]
match = {{ path = "/passthrough", methods = ["POST"] }}
upstream = "echo"
"#,
        port = backend.addr.port(),
        proto = case.upstream,
    );
    let gw = gateway(&toml, &[]).await;
    let mut client = TestClient::connect(gw.addr(), case.client).await.unwrap();
    assert_eq!(client.version, case.want_client, "client hop");
    let payload = pms_testkit::payload::array(500);
    for _ in 0..3 {
        let r = client
            .call(
                "POST",
                "/passthrough",
                &[("content-type", "application/json")],
                payload.clone(),
            )
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text());
        assert_eq!(r.body.as_ref(), payload.as_slice());
        assert_eq!(
            r.header("x-echo-protocol"),
            Some(case.want_backend),
            "back-end hop"
        );
        assert_eq!(
            r.header("x-echo-tls"),
            Some(if case.echo_tls { "true" } else { "false" }),
            "back-end TLS"
        );
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    gw.spawned.shutdown().await.unwrap();
}

use http::Version;

#[tokio::test]
async fn h1c_to_h1c() {
    check(Case {
        client: Proto::H1c,
        listener_tls: false,
        upstream: "h1",
        echo_tls: false,
        echo_http1_only: false,
        want_client: Version::HTTP_11,
        want_backend: "HTTP/1.1",
    })
    .await;
}

#[tokio::test]
async fn h1_to_h1_tls_both_sides() {
    check(Case {
        client: Proto::H1Tls,
        listener_tls: true,
        upstream: "h1",
        echo_tls: true,
        echo_http1_only: false,
        want_client: Version::HTTP_11,
        want_backend: "HTTP/1.1",
    })
    .await;
}

#[tokio::test]
async fn h2_to_h2() {
    check(Case {
        client: Proto::H2Tls,
        listener_tls: true,
        upstream: "h2",
        echo_tls: true,
        echo_http1_only: false,
        want_client: Version::HTTP_2,
        want_backend: "HTTP/2.0",
    })
    .await;
}

#[tokio::test]
async fn h2_to_h1_tls() {
    check(Case {
        client: Proto::H2Tls,
        listener_tls: true,
        upstream: "h1",
        echo_tls: true,
        echo_http1_only: false,
        want_client: Version::HTTP_2,
        want_backend: "HTTP/1.1",
    })
    .await;
}

#[tokio::test]
async fn h2_to_h1c() {
    check(Case {
        client: Proto::H2Tls,
        listener_tls: true,
        upstream: "h1",
        echo_tls: false,
        echo_http1_only: false,
        want_client: Version::HTTP_2,
        want_backend: "HTTP/1.1",
    })
    .await;
}

/// The published "client and server downgrade": an HTTP/1.1 client without ALPN into a listener
/// offering h2, and an HTTP/2-capable (`auto`) upstream client facing an HTTP/1.1-only TLS echo.
#[tokio::test]
async fn downgrade_on_both_sides() {
    check(Case {
        client: Proto::TlsNoAlpn,
        listener_tls: true,
        upstream: "auto",
        echo_tls: true,
        echo_http1_only: true,
        want_client: Version::HTTP_11,
        want_backend: "HTTP/1.1",
    })
    .await;
}

#[tokio::test]
async fn h1_client_with_alpn_into_h2_listener_stays_h1() {
    check(Case {
        client: Proto::H1Tls,
        listener_tls: true,
        upstream: "auto",
        echo_tls: true,
        echo_http1_only: true,
        want_client: Version::HTTP_11,
        want_backend: "HTTP/1.1",
    })
    .await;
}

#[tokio::test]
async fn auto_upstream_takes_h2_when_offered() {
    check(Case {
        client: Proto::H1c,
        listener_tls: false,
        upstream: "auto",
        echo_tls: true,
        echo_http1_only: false,
        want_client: Version::HTTP_11,
        want_backend: "HTTP/2.0",
    })
    .await;
}

#[tokio::test]
async fn h1c_to_h2c() {
    check(Case {
        client: Proto::H1c,
        listener_tls: false,
        upstream: "h2c",
        echo_tls: false,
        echo_http1_only: false,
        want_client: Version::HTTP_11,
        want_backend: "HTTP/2.0",
    })
    .await;
}

#[tokio::test]
async fn h2c_client_into_cleartext_listener() {
    check(Case {
        client: Proto::H2c,
        listener_tls: false,
        upstream: "h1",
        echo_tls: false,
        echo_http1_only: false,
        want_client: Version::HTTP_2,
        want_backend: "HTTP/1.1",
    })
    .await;
}

/// HTTP/2 upstreams multiplex: many concurrent requests share one upstream connection.
#[tokio::test]
async fn h2_upstream_multiplexes_on_one_connection() {
    let backend = echo(false, false, Duration::from_millis(50)).await;
    let toml = format!(
        r#"
[admin]
listen = "127.0.0.1:0"
[runtime]
workers = 1
[[listeners]]
listen = "127.0.0.1:0"
[[upstreams]]
name = "echo"
endpoints = ["http://127.0.0.1:{}"]
protocol = "h2c"
[[routes]]
match = {{ path_prefix = "/" }}
upstream = "echo"
"#,
        backend.addr.port()
    );
    let gw = crate::support::gateway(&toml, &[]).await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let addr = gw.addr();
        tasks.push(tokio::spawn(async move {
            let mut c = TestClient::connect(addr, Proto::H1c).await.unwrap();
            c.call("POST", "/x", &[], format!("body {i}"))
                .await
                .unwrap()
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let r = t.await.unwrap();
        assert_eq!(r.text(), format!("body {i}"));
        assert_eq!(r.header("x-echo-protocol"), Some("HTTP/2.0"));
    }
    let metrics = crate::admin::scrape(gw.admin).await;
    assert_eq!(
        crate::admin::value(
            &metrics,
            r#"pms_gateway_upstream_connections_opened_total{upstream="echo"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        crate::admin::value(
            &metrics,
            r#"pms_gateway_upstream_requests_total{upstream="echo"}"#
        ),
        Some(20.0)
    );
}

/// Plain HTTP sent to a TLS port gets a plain-HTTP 400 that says to use TLS (not a TLS alert no
/// HTTP client can show), and the port goes on serving TLS. The echo back-end is a TLS server
/// built on the same serving code as the gateway's listeners.
#[tokio::test]
async fn plain_http_to_a_tls_port_is_told_to_use_tls() {
    use tokio::io::AsyncWriteExt;

    let tls = echo(true, false, Duration::ZERO).await;
    let mut raw = tokio::net::TcpStream::connect(tls.addr).await.unwrap();
    raw.write_all(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
        .await
        .unwrap();
    let text = crate::support::read_until_closed(&mut raw).await;
    assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text}");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(json["error"]["code"], "tls_required", "{text}");

    let mut c = TestClient::connect(tls.addr, Proto::H2Tls).await.unwrap();
    let r = c.call("POST", "/x", &[], "still TLS").await.unwrap();
    assert_eq!(r.text(), "still TLS");
    assert_eq!(r.header("x-echo-tls"), Some("true"));
}

/// A cleartext gateway in front of `back` with `idle_timeout_ms = 300`.
async fn idle_after_300_ms(back: std::net::SocketAddr) -> crate::support::Gw {
    crate::support::simple(
        &crate::support::endpoint(back),
        "",
        "[limits]\nidle_timeout_ms = 300",
        &[],
    )
    .await
}

#[tokio::test]
async fn an_idle_http2_connection_is_sent_away_and_a_slow_stream_still_finishes() {
    // Each response takes 700 ms; a connection that starts no stream for 300 ms (to 600) is
    // sent GOAWAY, and the stream in flight still gets its answer.
    let back = echo(false, false, Duration::from_millis(700)).await;
    let gw = idle_after_300_ms(back.addr).await;
    let tcp = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    let request = http::Request::get("http://gw/slow").body(()).unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(response.status(), 200);
    // Nothing more: the gateway ends the connection, and cleanly.
    let ended = tokio::time::timeout(Duration::from_secs(10), conn)
        .await
        .expect("the idle connection was closed");
    assert!(matches!(ended, Ok(Ok(()))), "{ended:?}");
}

#[tokio::test]
async fn an_http2_client_that_goes_silent_mid_stream_is_disconnected() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The answer takes 20 s; the client asks, then neither reads nor answers anything, like a
    // phone that lost its network. It gets a PING after 300 ms of silence, and when it does not
    // answer it within 300 ms more its connection is closed: a GOAWAY would wait for the stream.
    let back = echo(false, false, Duration::from_secs(20)).await;
    let gw = idle_after_300_ms(back.addr).await;
    let mut raw = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    // Preface, empty SETTINGS, and HEADERS for `GET http://gw/` on stream 1, END_STREAM and
    // END_HEADERS set (HPACK: :method GET, :scheme http, :path /, :authority "gw").
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    let block = [0x82, 0x86, 0x84, 0x41, 0x02, b'g', b'w'];
    out.extend_from_slice(&[0, 0, block.len() as u8, 0x1, 0x5, 0, 0, 0, 1]);
    out.extend_from_slice(&block);
    raw.write_all(&out).await.unwrap();
    let mut seen = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), raw.read_to_end(&mut seen)).await;
    assert!(closed.is_ok(), "still open after 10 s");
    // A PING frame (type 6, not an ACK) is among what came.
    let mut at = 0;
    let mut pinged = false;
    while at + 9 <= seen.len() {
        let len = usize::from(seen[at]) << 16
            | usize::from(seen[at + 1]) << 8
            | usize::from(seen[at + 2]);
        pinged |= seen[at + 3] == 0x6 && seen[at + 4] & 0x1 == 0;
        at += 9 + len;
    }
    assert!(pinged, "no PING among {} bytes", seen.len());
}

/// A new HTTP/2 connection to `addr` from a client that grants the gateway `window` bytes per
/// stream, and the connection's task.
async fn h2_connect(
    addr: std::net::SocketAddr,
    window: u32,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(window)
        .handshake(tcp)
        .await
        .unwrap();
    (client, tokio::spawn(conn))
}

/// POSTs `text` (nothing at all when empty) on `client`; returns the response head.
async fn h2_post(
    client: &mut h2::client::SendRequest<bytes::Bytes>,
    text: &'static str,
) -> http::Response<h2::RecvStream> {
    let request = http::Request::post("http://gw/x").body(()).unwrap();
    let (response, mut body) = client.send_request(request, text.is_empty()).unwrap();
    if !text.is_empty() {
        body.send_data(bytes::Bytes::from_static(text.as_bytes()), true)
            .unwrap();
    }
    tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .expect("answered")
        .unwrap()
}

#[tokio::test]
async fn an_http2_response_the_client_takes_no_data_of_is_reset_but_a_slow_upstream_is_not() {
    // `send_timeout_ms = 300`, and every answer takes 700 ms upstream.
    let back = echo(false, false, Duration::from_millis(700)).await;
    let gw = crate::support::simple(
        &crate::support::endpoint(back.addr),
        "",
        "[limits]\nsend_timeout_ms = 300",
        &[],
    )
    .await;

    // Waiting for the upstream is not waiting for the client: the answer comes whole.
    let (mut client, _conn) = h2_connect(gw.addr(), 65_535).await;
    let response = h2_post(&mut client, "all of it").await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = body.data().await {
        text.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(text, b"all of it");

    // A client that grants its streams no window gets the head (headers are not flow-controlled)
    // and never a byte of the body, and answers PINGs all along (the h2 crate does). Within two
    // send timeouts the stream is reset; before, it stayed open for good, holding an upstream
    // connection, and later the whole connection was closed for it.
    let (mut client, conn) = h2_connect(gw.addr(), 0).await;
    let response = h2_post(&mut client, "never read").await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let first = tokio::time::timeout(Duration::from_secs(10), body.data())
        .await
        .expect("the starved stream still open after 10 s");
    match first {
        Some(Err(e)) => assert_eq!(e.reason(), Some(h2::Reason::CANCEL), "{e}"),
        other => panic!("expected the stream to be reset, got {other:?}"),
    }

    // The connection and its other streams carry on: an answer with no body needs no window.
    let response = h2_post(&mut client, "").await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let end = tokio::time::timeout(Duration::from_secs(10), body.data())
        .await
        .expect("the empty answer ends");
    assert!(end.is_none(), "{end:?}");
    assert!(!conn.is_finished(), "the connection was closed");
}

/// The cleartext scenarios again with `runtime.io = "io_uring"`: client connections on a
/// cleartext listener and cleartext HTTP/1.1 upstream connections then go through the worker's
/// ring, under the fast path, hyper's HTTP/2 server and the bridge alike.
mod io_uring {
    use super::*;

    const IO_URING: &str = r#"io = "io_uring""#;

    #[tokio::test]
    async fn h1c_to_h1c() {
        check_on(
            Case {
                client: Proto::H1c,
                listener_tls: false,
                upstream: "h1",
                echo_tls: false,
                echo_http1_only: false,
                want_client: Version::HTTP_11,
                want_backend: "HTTP/1.1",
            },
            IO_URING,
        )
        .await;
    }

    #[tokio::test]
    async fn h2c_client_to_h1c() {
        check_on(
            Case {
                client: Proto::H2c,
                listener_tls: false,
                upstream: "h1",
                echo_tls: false,
                echo_http1_only: false,
                want_client: Version::HTTP_2,
                want_backend: "HTTP/1.1",
            },
            IO_URING,
        )
        .await;
    }

    #[tokio::test]
    async fn h2_tls_client_to_h1c() {
        check_on(
            Case {
                client: Proto::H2Tls,
                listener_tls: true,
                upstream: "h1",
                echo_tls: false,
                echo_http1_only: false,
                want_client: Version::HTTP_2,
                want_backend: "HTTP/1.1",
            },
            IO_URING,
        )
        .await;
    }

    #[tokio::test]
    async fn h1_tls_client_to_h1c() {
        check_on(
            Case {
                client: Proto::H1Tls,
                listener_tls: true,
                upstream: "h1",
                echo_tls: false,
                echo_http1_only: false,
                want_client: Version::HTTP_11,
                want_backend: "HTTP/1.1",
            },
            IO_URING,
        )
        .await;
    }

    #[tokio::test]
    async fn h1c_to_h2c() {
        check_on(
            Case {
                client: Proto::H1c,
                listener_tls: false,
                upstream: "h2c",
                echo_tls: false,
                echo_http1_only: false,
                want_client: Version::HTTP_11,
                want_backend: "HTTP/2.0",
            },
            IO_URING,
        )
        .await;
    }
}
