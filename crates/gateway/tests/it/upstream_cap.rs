//! The cap on connections per upstream endpoint: requests past it wait for a pooled connection
//! and are all served on no more than the cap; one that waits past the queue timeout is a 503
//! that says so, and the connection that was busy still finishes its own request.

use std::time::Duration;

use pms_testkit::client::{Proto, TestClient};

use crate::admin::{scrape, value};
use crate::support::{echo, simple};

const OPENED: &str = r#"pms_gateway_upstream_connections_opened_total{upstream="up"}"#;

#[tokio::test]
async fn requests_past_the_cap_wait_and_share_its_connections() {
    let slow = echo(false, false, Duration::from_millis(200)).await;
    let gw = simple(
        &format!(
            "endpoints = [\"http://127.0.0.1:{}\"]\nmax_connections = 2\nqueue_timeout_ms = 30000",
            slow.addr.port()
        ),
        "",
        "[runtime]\nworkers = 1",
        &[],
    )
    .await;
    // Eight clients at once, each on its own connection, against a back-end that takes 200 ms.
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let addr = gw.addr();
            tokio::spawn(async move {
                let mut c = TestClient::connect(addr, Proto::H1c).await.unwrap();
                let r = c.call("POST", "/", &[], format!("body {i}")).await.unwrap();
                (r.status().as_u16(), r.text())
            })
        })
        .collect();
    for (i, call) in calls.into_iter().enumerate() {
        let (status, text) = call.await.unwrap();
        assert_eq!(status, 200, "{text}");
        assert_eq!(text, format!("body {i}"));
    }
    let m = scrape(gw.admin).await;
    assert_eq!(value(&m, OPENED), Some(2.0), "{m}");
    assert_eq!(
        value(&m, r#"pms_gateway_upstream_requests_total{upstream="up"}"#),
        Some(8.0)
    );
}

#[tokio::test]
async fn a_request_that_waits_past_the_queue_timeout_is_a_503() {
    crate::support::keep_logs();
    let slow = echo(false, false, Duration::from_secs(2)).await;
    let gw = simple(
        &format!(
            "endpoints = [\"http://127.0.0.1:{}\"]\nmax_connections = 1\nqueue_timeout_ms = 100",
            slow.addr.port()
        ),
        "",
        "[runtime]\nworkers = 1",
        &[],
    )
    .await;
    let addr = gw.addr();
    let first = tokio::spawn(async move {
        let mut c = TestClient::connect(addr, Proto::H1c).await.unwrap();
        c.call("POST", "/", &[], "first").await.unwrap()
    });
    // Until the first request holds the only connection.
    while value(&scrape(gw.admin).await, OPENED) != Some(1.0) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for proto in [Proto::H1c, Proto::H2c] {
        let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
        let r = c
            .call("POST", "/", &[("x-request-id", "req-busy")], "second")
            .await
            .unwrap();
        assert_eq!(r.status(), 503, "{proto:?}: {}", r.text());
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(r.header("content-type"), Some("application/json"));
        let e = r.json();
        assert_eq!(e["error"]["code"], "upstream_busy");
        assert_eq!(e["error"]["request_id"], "req-busy");
        assert_eq!(
            e["error"]["message"],
            "upstream up busy: all its connections stayed busy"
        );
        let logged = crate::support::logged_for("req-busy");
        assert!(logged.contains("all 1 connections"), "{logged}");
    }
    let r = first.await.unwrap();
    assert_eq!((r.status().as_u16(), r.text()), (200, "first".to_owned()));
    assert_eq!(value(&scrape(gw.admin).await, OPENED), Some(1.0));
}

#[tokio::test]
async fn the_cap_and_queue_timeout_must_be_positive() {
    for (key, value) in [("max_connections", "0"), ("queue_timeout_ms", "0")] {
        let text = format!(
            r#"
[[listeners]]
name = "public"
listen = "127.0.0.1:0"

[[upstreams]]
name = "up"
endpoints = ["http://127.0.0.1:9"]
{key} = {value}

[[routes]]
match = {{ path_prefix = "/" }}
upstream = "up"
"#
        );
        let err = pms_gateway::config::parse(&text, "test.toml")
            .and_then(|raw| raw.resolve("test.toml", std::path::Path::new("."), &|_| None))
            .expect_err(key)
            .to_string();
        assert!(err.contains(&format!("upstreams[0].{key}")), "{err}");
    }
}
