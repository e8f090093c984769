//! The echo back-end over every protocol it serves, through real sockets.

use std::time::Duration;

use pms_echo::{EchoConfig, HEADER_PROTOCOL, HEADER_TLS};
use pms_net::serve::{Drain, ServeConfig};
use pms_testkit::client::{Proto, TestClient};
use pms_testkit::{certs, Spawned};

async fn spawn(tls: bool, http1_only: bool, delay: Duration) -> Spawned<Drain> {
    let tls = tls.then(|| {
        let alpn: &[&[u8]] = if http1_only {
            &[pms_net::ALPN_HTTP11]
        } else {
            &[pms_net::ALPN_H2, pms_net::ALPN_HTTP11]
        };
        let c = certs();
        std::sync::Arc::new(pms_net::tls::server_config(&c.cert, &c.key, alpn).unwrap())
    });
    let config = EchoConfig {
        delay,
        serve: ServeConfig {
            tls,
            http1_only,
            ..ServeConfig::default()
        },
        ..EchoConfig::default()
    };
    Spawned::start(|l, stop| pms_echo::run(l, config, stop)).await
}

async fn roundtrip(echo: &Spawned<Drain>, proto: Proto) -> (String, String, TestClient) {
    let mut c = TestClient::connect(echo.addr, proto).await.unwrap();
    let r = c
        .call(
            "POST",
            "/service/EchoService?x=1",
            &[("content-type", "application/json")],
            r#"{"size":"50B"}"#,
        )
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.body.as_ref(), br#"{"size":"50B"}"#);
    assert_eq!(r.header("content-type"), Some("application/json"));
    (
        r.header(HEADER_PROTOCOL).unwrap().to_string(),
        r.header(HEADER_TLS).unwrap().to_string(),
        c,
    )
}

#[tokio::test]
async fn cleartext_serves_http1_and_h2c_on_one_port() {
    let echo = spawn(false, false, Duration::ZERO).await;
    assert_eq!(roundtrip(&echo, Proto::H1c).await.0[..], *"HTTP/1.1", "h1");
    let (p, tls, _) = roundtrip(&echo, Proto::H2c).await;
    assert_eq!((p.as_str(), tls.as_str()), ("HTTP/2.0", "false"));
    assert_eq!(echo.shutdown().await, Drain::Complete);
}

#[tokio::test]
async fn tls_negotiates_h2_or_http11_by_alpn() {
    let echo = spawn(true, false, Duration::ZERO).await;
    let (p, tls, c) = roundtrip(&echo, Proto::H2Tls).await;
    assert_eq!((p.as_str(), tls.as_str()), ("HTTP/2.0", "true"));
    assert_eq!(c.alpn.as_deref(), Some(&b"h2"[..]));
    let (p, _, c) = roundtrip(&echo, Proto::H1Tls).await;
    assert_eq!(p, "HTTP/1.1");
    assert_eq!(c.alpn.as_deref(), Some(&b"http/1.1"[..]));
    let (p, _, c) = roundtrip(&echo, Proto::TlsNoAlpn).await;
    assert_eq!(p, "HTTP/1.1");
    assert_eq!(c.alpn, None);
}

#[tokio::test]
async fn http1_only_tls_never_agrees_to_h2() {
    let echo = spawn(true, true, Duration::ZERO).await;
    // Offer both; the server must pick http/1.1.
    let (p, _, c) = roundtrip(&echo, Proto::H1Tls).await;
    assert_eq!(p, "HTTP/1.1");
    assert_eq!(c.alpn.as_deref(), Some(&b"http/1.1"[..]));
    // A client that insists on h2 only cannot negotiate it.
    assert!(TestClient::connect(echo.addr, Proto::H2Tls).await.is_err());
}

#[tokio::test]
async fn cleartext_http1_only_refuses_h2c() {
    let echo = spawn(false, true, Duration::ZERO).await;
    roundtrip(&echo, Proto::H1c).await;
    let mut c = TestClient::connect(echo.addr, Proto::H2c).await.unwrap();
    assert!(c.call("GET", "/", &[], "").await.is_err());
}

#[tokio::test(start_paused = true)]
async fn delay_applies_on_http2_too_without_blocking() {
    let echo = spawn(false, false, Duration::from_secs(5)).await;
    let mut c = TestClient::connect(echo.addr, Proto::H2c).await.unwrap();
    let started = tokio::time::Instant::now();
    // Two concurrent streams on one connection both wait the delay, not twice the delay.
    let mut c2 = TestClient::connect(echo.addr, Proto::H2c).await.unwrap();
    let (a, b) = tokio::join!(
        c.call("POST", "/a", &[], "one"),
        c2.call("POST", "/b", &[], "two")
    );
    assert_eq!(a.unwrap().body.as_ref(), b"one");
    assert_eq!(b.unwrap().body.as_ref(), b"two");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(5), "{waited:?}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
}

#[tokio::test]
async fn large_body_streams_back_intact() {
    let echo = spawn(false, false, Duration::ZERO).await;
    let body: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    for proto in [Proto::H1c, Proto::H2c] {
        let mut c = TestClient::connect(echo.addr, proto).await.unwrap();
        let r = c
            .call("PUT", "/big", &[], bytes::Bytes::from(body.clone()))
            .await
            .unwrap();
        assert_eq!(r.body.len(), body.len(), "{proto:?}");
        assert!(r.body.as_ref() == body.as_slice(), "{proto:?}");
    }
}
