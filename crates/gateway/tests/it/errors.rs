//! Upstream failures: refused connections and slow back-ends.

use std::time::Duration;

use pms_testkit::client::{Proto, TestClient};

use crate::support::{echo, simple};

#[tokio::test]
async fn unreachable_upstream_is_502_json() {
    let closed = pms_testkit::listener().await.local_addr().unwrap(); // dropped: nothing listens
    let gw = simple(&format!(r#"endpoints = ["http://{closed}"]"#), "", "", &[]).await;
    for proto in [Proto::H1c, Proto::H2c] {
        let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
        let r = c
            .call(
                "GET",
                "/users/getAllUsers",
                &[("x-request-id", "req-502")],
                "",
            )
            .await
            .unwrap();
        assert_eq!(r.status(), 502, "{proto:?}");
        assert_eq!(r.header("content-type"), Some("application/json"));
        let e = r.json();
        assert_eq!(e["error"]["code"], "bad_gateway");
        assert_eq!(e["error"]["request_id"], "req-502");
        // The upstream's name, not where it runs nor the OS error: those go to the log.
        assert_eq!(e["error"]["message"], "upstream up unavailable", "{e}");
    }
    // With one endpoint nothing is skipped, but every failed connect is counted.
    let m = crate::admin::scrape(gw.admin).await;
    let failures = r#"pms_gateway_upstream_connect_failures_total{upstream="up"}"#;
    assert_eq!(crate::admin::value(&m, failures), Some(2.0), "{m}");
}

#[tokio::test]
async fn slow_upstream_is_504_json() {
    let slow = echo(false, false, Duration::from_secs(5)).await;
    let gw = simple(
        &format!(
            "endpoints = [\"http://127.0.0.1:{}\"]\nrequest_timeout_ms = 100",
            slow.addr.port()
        ),
        "",
        "",
        &[],
    )
    .await;
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c.call("POST", "/x", &[], "hello").await.unwrap();
    assert_eq!(r.status(), 504);
    assert_eq!(r.json()["error"]["code"], "gateway_timeout");
    // The client connection stays usable.
    let r = c.call("POST", "/x", &[], "again").await.unwrap();
    assert_eq!(r.status(), 504);
}

/// Upstream TLS verification is on by default: a back-end whose certificate chains to a CA the
/// gateway was not told about is a 502, not a silent success. Trusting the CA, or the explicit
/// `insecure_skip_verify`, makes it work.
#[tokio::test]
async fn upstream_certificates_are_verified_unless_told_otherwise() {
    let backend = echo(true, false, Duration::ZERO).await;
    let endpoint = format!(
        r#"endpoints = ["https://127.0.0.1:{}"]"#,
        backend.addr.port()
    );

    let strict = simple(&endpoint, "", "", &[]).await;
    let mut c = TestClient::connect(strict.addr(), Proto::H1c)
        .await
        .unwrap();
    let r = c.call("POST", "/x", &[], "hi").await.unwrap();
    assert_eq!(r.status(), 502, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "bad_gateway");

    let trusting = simple(
        &format!("{endpoint}\ntls = {{ ca = \"{{ca}}\" }}"),
        "",
        "",
        &[],
    )
    .await;
    let mut c = TestClient::connect(trusting.addr(), Proto::H1c)
        .await
        .unwrap();
    let r = c.call("POST", "/x", &[], "hi").await.unwrap();
    assert_eq!((r.status().as_u16(), r.text().as_str()), (200, "hi"));
    assert_eq!(r.header("x-echo-tls"), Some("true"));

    let insecure = simple(
        &format!("{endpoint}\ntls = {{ insecure_skip_verify = true }}"),
        "",
        "",
        &[],
    )
    .await;
    let mut c = TestClient::connect(insecure.addr(), Proto::H1c)
        .await
        .unwrap();
    assert_eq!(c.call("POST", "/x", &[], "hi").await.unwrap().status(), 200);
}

/// Two endpoints, the first of which refuses connections: no request fails. The first request
/// each worker sends finds it in turn, and goes on to the next endpoint (nothing of it was sent);
/// later ones skip it. hyper's client, which takes a request's body, sends only requests
/// without one again, so on that path the first request is a GET.
#[tokio::test]
async fn an_endpoint_that_refuses_connections_is_skipped_and_its_requests_go_to_the_others() {
    let closed = pms_testkit::listener().await.local_addr().unwrap(); // dropped: nothing listens
    let back = echo(false, false, Duration::ZERO).await;
    for fast in [true, false] {
        let gw = simple(
            &format!(r#"endpoints = ["http://{closed}", "http://{}"]"#, back.addr),
            "",
            &format!("[limits]\nhttp1_fast_path = {fast}"),
            &[],
        )
        .await;
        for proto in [Proto::H1c, Proto::H2c] {
            let at = format!("fast path {fast}, {proto:?}");
            let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
            let (method, body) = if fast { ("POST", "first") } else { ("GET", "") };
            let r = c.call(method, "/first", &[], body).await.unwrap();
            assert_eq!(
                (r.status().as_u16(), r.text()),
                (200, body.to_string()),
                "{at}"
            );
            for i in 0..6 {
                let body = format!("body {i}");
                let r = c.call("POST", "/next", &[], body.clone()).await.unwrap();
                assert_eq!((r.status().as_u16(), r.text()), (200, body), "{at}");
            }
        }
        // The failed connects are counted.
        let m = crate::admin::scrape(gw.admin).await;
        let failures = r#"pms_gateway_upstream_connect_failures_total{upstream="up"}"#;
        assert!(
            crate::admin::value(&m, failures).is_some_and(|n| n >= 1.0),
            "fast path {fast}:\n{m}"
        );
    }
}
