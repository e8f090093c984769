//! The admin listener: health, readiness across shutdown, and metrics.

use std::net::SocketAddr;
use std::time::Duration;

use pms_testkit::client::{Proto, TestClient};

use crate::support::{echo, endpoint, simple};

pub async fn scrape(admin: SocketAddr) -> String {
    let mut c = TestClient::connect(admin, Proto::H1c).await.unwrap();
    let r = c.call("GET", "/metrics", &[], "").await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    r.text()
}

/// The value of one exposition line, by its exact name-and-labels prefix.
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let backend = echo(false, false, Duration::ZERO).await;
    let gw = simple(&endpoint(backend.addr), "", "", &[]).await;
    let mut admin = TestClient::connect(gw.admin, Proto::H1c).await.unwrap();
    let r = admin.call("GET", "/healthz", &[], "").await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.json()["status"].as_str()),
        (200, Some("ok"))
    );
    let r = admin.call("GET", "/readyz", &[], "").await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.json()["ready"].as_bool()),
        (200, Some(true))
    );
    let r = admin.call("GET", "/nope", &[], "").await.unwrap();
    assert_eq!(r.status(), 404);
    let r = admin.call("POST", "/readyz", &[], "").await.unwrap();
    assert_eq!(r.status(), 405);

    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    for _ in 0..3 {
        assert_eq!(c.call("POST", "/a", &[], "x").await.unwrap().status(), 200);
    }
    assert_eq!(c.call("GET", "/../x", &[], "").await.unwrap().status(), 400);

    let m = scrape(gw.admin).await;
    assert_eq!(
        value(
            &m,
            r#"pms_gateway_requests_total{route="all",status="200"}"#
        ),
        Some(3.0),
        "{m}"
    );
    assert_eq!(
        value(
            &m,
            r#"pms_gateway_requests_total{route="(none)",status="400"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &m,
            r#"pms_gateway_request_duration_seconds_count{route="all"}"#
        ),
        Some(3.0)
    );
    // Three requests on one client connection reuse one upstream connection.
    assert_eq!(
        value(&m, r#"pms_gateway_upstream_requests_total{upstream="up"}"#),
        Some(3.0)
    );
    assert_eq!(
        value(
            &m,
            r#"pms_gateway_upstream_connections_opened_total{upstream="up"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&m, r#"pms_gateway_connections_active{listener="public"}"#),
        Some(1.0)
    );
    assert!(m.contains("pms_gateway_tls_handshakes_total"));
}

/// A gateway with one TLS listener named `tls`; `limits` adds lines to its `[limits]`.
async fn tls_gateway(limits: &str) -> crate::support::Gw {
    let toml = format!(
        r#"
[admin]
listen = "127.0.0.1:0"
[[listeners]]
name = "tls"
listen = "127.0.0.1:0"
tls = {{ cert = "{{cert}}", key = "{{key}}" }}
[limits]
{limits}
[[upstreams]]
name = "up"
endpoints = ["http://127.0.0.1:9"]
[[routes]]
match = {{ path_prefix = "/" }}
upstream = "up"
"#
    );
    crate::support::gateway(&toml, &[]).await
}

#[tokio::test]
async fn tls_handshakes_are_counted() {
    let gw = tls_gateway("").await;
    let _ok = TestClient::connect(gw.addr(), Proto::H2Tls).await.unwrap();
    // A cleartext client into a TLS listener fails the handshake (and is told to use TLS).
    let mut bad = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = bad.call("GET", "/", &[], "").await.unwrap();
    assert_eq!(r.status(), 400, "{}", r.text());
    pms_testkit::assert_eventually("handshake counters", 200, || async {
        let m = scrape(gw.admin).await;
        value(
            &m,
            r#"pms_gateway_tls_handshakes_total{listener="tls",result="ok"}"#,
        ) == Some(1.0)
            && value(
                &m,
                r#"pms_gateway_tls_handshakes_total{listener="tls",result="failed"}"#,
            ) == Some(1.0)
    })
    .await;
}

/// A client that connects to a TLS listener and sends nothing is closed once the handshake time
/// is up, and counted as a failed handshake.
#[tokio::test]
async fn a_silent_tls_client_is_closed_after_the_handshake_timeout() {
    use tokio::io::AsyncReadExt;

    let gw = tls_gateway("tls_handshake_timeout_ms = 300").await;
    let mut silent = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), silent.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "still open after 20 s");
    assert!(rest.is_empty(), "{rest:?}");
    let m = scrape(gw.admin).await;
    assert_eq!(
        value(
            &m,
            r#"pms_gateway_tls_handshakes_total{listener="tls",result="failed"}"#
        ),
        Some(1.0),
        "{m}"
    );
}
