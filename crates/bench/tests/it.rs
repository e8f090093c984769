//! The closed model against the real echo back-end on loopback, over every protocol it speaks,
//! and against a port nobody listens on.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pms_bench::closed::{self, ClosedConfig, RequestSpec};
use pms_bench::stats::ErrorKind;
use pms_bench::target::{HttpVersion, Target};
use pms_net::serve::ServeConfig;
use pms_net::tls::Trust;

type Echo = (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>);

/// Starts `pms echo` on a loopback port; returns its address and a stop handle.
async fn echo(tls: Option<Arc<rustls::ServerConfig>>) -> Echo {
    echo_with(tls, Duration::ZERO).await
}

/// Like [`echo`], answering every request after `delay`.
async fn echo_with(tls: Option<Arc<rustls::ServerConfig>>, delay: Duration) -> Echo {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = pms_echo::EchoConfig {
        delay,
        serve: ServeConfig {
            tls,
            ..ServeConfig::default()
        },
    };
    tokio::spawn(pms_echo::run(listener, config, async move {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// A target at `http://ADDR/` speaking `version`.
fn cleartext(addr: std::net::SocketAddr, version: HttpVersion) -> Arc<Target> {
    Arc::new(Target::new(&format!("http://{addr}/"), version, &Trust::Nothing).unwrap())
}

fn spec(expect_status: Option<u16>, expect_body: Option<&str>) -> Arc<RequestSpec> {
    Arc::new(RequestSpec {
        method: http::Method::POST,
        headers: vec![(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        )],
        body: Bytes::from(pms_bench::payload::array(500)),
        expect_status,
        expect_body: expect_body.map(str::to_owned),
    })
}

fn config(users: usize, secs: u64) -> ClosedConfig {
    ClosedConfig {
        users,
        duration: Duration::from_secs(secs),
        ramp_up: Duration::ZERO,
        think_time: Duration::ZERO,
        warmup: Duration::ZERO,
        timeout: Duration::from_secs(5),
    }
}

async fn run_clean(url: &str, version: HttpVersion, trust: &Trust) {
    let target = Arc::new(Target::new(url, version, trust).unwrap());
    assert!(target.is_loopback());
    let out = closed::run(target, spec(Some(200), Some("\"500B\"")), config(4, 1)).await;
    let s = out.measured.summary("measured", out.window);
    assert!(s.samples > 10, "{s:?}");
    assert_eq!(s.errors, 0, "{s:?}");
    assert!((s.throughput - s.samples as f64).abs() < 1e-6, "1 s window");
    assert!(
        s.avg_bytes > 500.0,
        "the echoed body and head: {}",
        s.avg_bytes
    );
    assert!(s.min_ms > 0.0 && s.min_ms <= s.mean_ms && s.mean_ms <= s.max_ms);
}

#[tokio::test]
async fn http1_cleartext() {
    let (addr, _stop) = echo(None).await;
    run_clean(
        &format!("http://{addr}/passthrough"),
        HttpVersion::Http1,
        &Trust::Nothing,
    )
    .await;
}

#[tokio::test]
async fn h2c_prior_knowledge() {
    let (addr, _stop) = echo(None).await;
    run_clean(
        &format!("http://{addr}/passthrough"),
        HttpVersion::Http2,
        &Trust::Nothing,
    )
    .await;
}

#[tokio::test]
async fn h2_and_http1_over_tls() {
    let certs = pms_net::dev::DevCerts::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    certs.write_to(dir.path()).unwrap();
    let cert = dir.path().join(pms_net::dev::CERT_FILE);
    let key = dir.path().join(pms_net::dev::KEY_FILE);
    let server =
        pms_net::tls::server_config(&cert, &key, &[pms_net::ALPN_H2, pms_net::ALPN_HTTP11])
            .unwrap();
    let (addr, _stop) = echo(Some(Arc::new(server))).await;
    let trust = Trust::Only(dir.path().join(pms_net::dev::CA_FILE));
    let url = format!("https://localhost:{}/passthrough", addr.port());
    run_clean(&url, HttpVersion::Http2, &trust).await;
    run_clean(&url, HttpVersion::Http1, &trust).await;
    // A client that trusts nothing we have: every connection is a TLS error, not a hang.
    let other = pms_net::dev::DevCerts::generate().unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    other.write_to(other_dir.path()).unwrap();
    let wrong = Trust::Only(other_dir.path().join(pms_net::dev::CA_FILE));
    let target = Arc::new(Target::new(&url, HttpVersion::Http2, &wrong).unwrap());
    let out = closed::run(target, spec(None, None), config(2, 1)).await;
    let s = out.measured.summary("measured", out.window);
    assert!(s.samples > 0 && s.errors == s.samples, "{s:?}");
    assert_eq!(
        s.errors_by_kind.keys().collect::<Vec<_>>(),
        vec![&ErrorKind::Tls]
    );
}

#[tokio::test]
async fn a_stopped_target_gives_connect_errors_and_the_run_still_ends() {
    let (addr, stop) = echo(None).await;
    drop(stop);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let target = cleartext(addr, HttpVersion::Http1);
    let started = std::time::Instant::now();
    let out = closed::run(target, spec(None, None), config(3, 1)).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded by the run's duration"
    );
    let s = out.measured.summary("measured", out.window);
    assert!(s.samples >= 3, "{s:?}");
    assert_eq!(s.errors, s.samples);
    assert_eq!(
        s.errors_by_kind.keys().collect::<Vec<_>>(),
        vec![&ErrorKind::Connect]
    );
}

#[tokio::test]
async fn failed_checks_count_as_errors_and_warmup_is_reported_apart() {
    let (addr, _stop) = echo(None).await;
    let target = cleartext(addr, HttpVersion::Http1);
    let mut cfg = config(2, 2);
    cfg.warmup = Duration::from_secs(1);
    cfg.think_time = Duration::from_millis(100);
    let out = closed::run(target.clone(), spec(Some(201), None), cfg).await;
    let m = out.measured.summary("measured", out.window);
    let w = out.warmup.summary("warmup", Duration::from_secs(1));
    assert!(m.samples > 0 && w.samples > 0, "{m:?} {w:?}");
    assert_eq!(m.errors, m.samples, "the echo answers 200, not 201");
    assert_eq!(
        m.errors_by_kind.keys().collect::<Vec<_>>(),
        vec![&ErrorKind::Status]
    );
    // Two users with 100 ms think time: about 10 samples each per second, never more.
    assert!(m.samples <= 2 * 11, "think time respected: {}", m.samples);
    let out = closed::run(target, spec(None, Some("not in the body")), config(1, 1)).await;
    let s = out.measured.summary("measured", out.window);
    assert_eq!(
        s.errors_by_kind.keys().collect::<Vec<_>>(),
        vec![&ErrorKind::Check]
    );
}

mod open_model {
    use super::*;
    use pms_bench::open::{self, OpenConfig};

    async fn slow_echo(delay_ms: u64) -> Echo {
        echo_with(None, Duration::from_millis(delay_ms)).await
    }

    fn cfg(rate: f64, connections: usize, streams: usize) -> OpenConfig {
        OpenConfig {
            rate,
            duration: Duration::from_secs(1),
            warmup: Duration::ZERO,
            connections,
            streams,
            timeout: Duration::from_secs(2),
        }
    }

    #[tokio::test]
    async fn every_due_request_is_sent_or_counted_as_dropped() {
        let (addr, _stop) = echo(None).await;
        let target = cleartext(addr, HttpVersion::Http1);
        let out = open::run(target, spec(Some(200), None), cfg(200.0, 4, 1)).await;
        assert_eq!(out.due, 200);
        let c = out.corrected.summary("measured", out.window);
        assert_eq!(c.samples + out.dropped, 200, "{c:?}");
        assert_eq!(c.errors, 0);
        assert_eq!(out.uncorrected.samples(), c.samples);
    }

    #[tokio::test]
    async fn a_slow_target_makes_requests_late_and_the_correction_shows_it() {
        // 2 connections to a back-end that takes 200 ms: 10 requests/s of capacity for 50 due.
        let (addr, _stop) = slow_echo(200).await;
        let target = cleartext(addr, HttpVersion::Http1);
        let out = open::run(target, spec(None, None), cfg(50.0, 2, 1)).await;
        assert_eq!(out.due, 50);
        let c = out.corrected.summary("measured", out.window);
        let u = out.uncorrected.summary("uncorrected", out.window);
        assert_eq!(
            c.samples + out.dropped,
            50,
            "every due request is accounted for"
        );
        assert!(out.late > 0, "{out:?}");
        assert!(
            out.dropped > 0,
            "2 s of timeout cannot absorb a 5x overload: {out:?}"
        );
        // Each request itself takes ~200 ms; measured from its due time it waited far longer.
        assert!(
            c.percentile(50.0).unwrap() > 2.0 * u.percentile(50.0).unwrap(),
            "{c:?} {u:?}"
        );
    }

    #[tokio::test]
    async fn http2_streams_multiplex_on_one_connection() {
        let (addr, _stop) = slow_echo(50).await;
        let h2 = cleartext(addr, HttpVersion::Http2);
        let many = open::run(h2, spec(None, None), cfg(100.0, 1, 10)).await;
        let h1 = cleartext(addr, HttpVersion::Http1);
        let one = open::run(h1, spec(None, None), cfg(100.0, 1, 10)).await;
        // 10 streams x 20/s of capacity covers 100/s; one HTTP/1.1 connection (streams ignored)
        // manages 20/s.
        let m = many.corrected.summary("m", many.window);
        assert_eq!((m.samples, m.errors, many.dropped), (100, 0, 0), "{m:?}");
        assert!(
            one.late > many.late + 50,
            "h2 late {} vs h1 late {}",
            many.late,
            one.late
        );
    }
}
