//! The closed model against the real echo back-end on loopback, over every protocol it speaks,
//! and against a port nobody listens on.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pms_bench::closed::{self, ClosedConfig, RequestSpec};
use pms_bench::collect::{CollectConfig, Collected, Collector, StopReason, StopRule};
use pms_bench::profile::{Profile, Stage};
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
        ..pms_echo::EchoConfig::default()
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
        body: Bytes::from(pms_payload::array(500)),
        expect_status,
        expect_body: expect_body.map(str::to_owned),
    })
}

fn config(users: usize, secs: u64) -> ClosedConfig {
    ClosedConfig {
        users: Profile::constant(users as f64),
        duration: Duration::from_secs(secs),
        think_time: Duration::ZERO,
        timeout: Duration::from_secs(5),
        grace: Duration::from_secs(5),
        iterations: None,
    }
}

/// Runs the closed model with a ticker; returns everything it recorded.
async fn closed_run(
    target: Arc<Target>,
    spec: Arc<RequestSpec>,
    cfg: ClosedConfig,
    collect: CollectConfig,
) -> Collected {
    let collector = Collector::new(collect).unwrap();
    let ticker = tokio::spawn(collector.clone().tick(|_| 0.0, |_| {}));
    let planned = cfg.duration;
    closed::run(target, spec, cfg, collector.clone()).await;
    collector.stop_because(StopReason::Completed);
    ticker.await.unwrap();
    collector.finish(planned).unwrap()
}

/// [`closed_run`] with nothing but the defaults.
async fn closed_plain(target: Arc<Target>, spec: Arc<RequestSpec>, cfg: ClosedConfig) -> Collected {
    closed_run(target, spec, cfg, CollectConfig::default()).await
}

async fn run_clean(url: &str, version: HttpVersion, trust: &Trust) {
    let target = Arc::new(Target::new(url, version, trust).unwrap());
    assert!(target.is_loopback());
    let out = closed_plain(target, spec(Some(200), Some("\"500B\"")), config(4, 1)).await;
    let s = out.measured.summary("measured", out.ended);
    assert!(s.samples > 10, "{s:?}");
    assert_eq!(s.errors, 0, "{s:?}");
    assert!((s.throughput - s.samples as f64).abs() < 1e-6, "1 s window");
    assert!(
        s.avg_bytes > 500.0,
        "the echoed body and head: {}",
        s.avg_bytes
    );
    assert!(s.min_ms > 0.0 && s.min_ms <= s.mean_ms && s.mean_ms <= s.max_ms);
    // Four users, four connections, each timed once; every response timed to its head.
    let connect = s.breakdown.connect.as_ref().unwrap();
    assert_eq!(connect.count, 4, "{s:?}");
    assert_eq!(s.breakdown.tls.is_some(), url.starts_with("https"), "{s:?}");
    let ttfb = s.breakdown.ttfb.as_ref().unwrap();
    assert_eq!(ttfb.count, s.samples);
    assert!(
        ttfb.mean_ms <= s.mean_ms + 0.01,
        "{ttfb:?} vs {}",
        s.mean_ms
    );
    assert_eq!(s.status_codes.get(&200), Some(&s.samples));
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
    let out = closed_plain(target, spec(None, None), config(2, 1)).await;
    let s = out.measured.summary("measured", out.ended);
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
    let out = closed_plain(target, spec(None, None), config(3, 1)).await;
    // Refused connects do not stop the users: the run lasts its duration, and ends.
    assert_eq!(out.reason, StopReason::Completed);
    let s = out.measured.summary("measured", out.ended);
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
    cfg.think_time = Duration::from_millis(100);
    let collect = CollectConfig {
        warmup: Duration::from_secs(1),
        ..CollectConfig::default()
    };
    let out = closed_run(target.clone(), spec(Some(201), None), cfg, collect).await;
    let m = out.measured.summary("measured", Duration::from_secs(1));
    let w = out.warmup.summary("warmup", Duration::from_secs(1));
    assert!(m.samples > 0 && w.samples > 0, "{m:?} {w:?}");
    assert_eq!(m.errors, m.samples, "the echo answers 200, not 201");
    assert_eq!(
        m.errors_by_kind.keys().collect::<Vec<_>>(),
        vec![&ErrorKind::Status]
    );
    // Two users with 100 ms think time: about 10 samples each per second, never more.
    assert!(m.samples <= 2 * 11, "think time respected: {}", m.samples);
    let out = closed_plain(target, spec(None, Some("not in the body")), config(1, 1)).await;
    let s = out.measured.summary("measured", out.ended);
    assert_eq!(
        s.errors_by_kind.keys().collect::<Vec<_>>(),
        vec![&ErrorKind::Check]
    );
}

mod open_model {
    use super::*;
    use pms_bench::open::{self, OpenConfig, Schedule};

    async fn slow_echo(delay_ms: u64) -> Echo {
        echo_with(None, Duration::from_millis(delay_ms)).await
    }

    fn cfg(rate: f64, connections: usize, streams: usize) -> OpenConfig {
        OpenConfig {
            rate: Profile::constant(rate),
            duration: Duration::from_secs(1),
            connections,
            streams,
            timeout: Duration::from_secs(2),
            grace: Duration::from_secs(5),
        }
    }

    /// Runs the open model; returns the schedule and what was recorded.
    async fn open_run(target: Arc<Target>, cfg: OpenConfig) -> (Schedule, Collected) {
        let collector = Collector::new(CollectConfig {
            open: true,
            ..CollectConfig::default()
        })
        .unwrap();
        let planned = cfg.duration;
        let schedule = open::run(target, spec(None, None), cfg, collector.clone()).await;
        (schedule, collector.finish(planned).unwrap())
    }

    #[tokio::test]
    async fn every_due_request_is_sent_or_counted_as_dropped() {
        let (addr, _stop) = echo(None).await;
        let target = cleartext(addr, HttpVersion::Http1);
        let (sched, out) = open_run(target, cfg(200.0, 4, 1)).await;
        assert_eq!(sched.due, 200);
        let c = out.measured.summary("measured", out.ended);
        assert_eq!(c.samples + sched.dropped, 200, "{c:?}");
        assert_eq!(c.errors, 0);
        assert_eq!(out.uncorrected.unwrap().samples(), c.samples);
        // Due every 5 ms from 0: the last one at 995 ms.
        assert!((c.attack_s - 0.995).abs() < 0.001, "{}", c.attack_s);
    }

    #[tokio::test]
    async fn a_slow_target_makes_requests_late_and_the_correction_shows_it() {
        // 2 connections to a back-end that takes 200 ms: 10 requests/s of capacity for 50 due.
        let (addr, _stop) = slow_echo(200).await;
        let target = cleartext(addr, HttpVersion::Http1);
        let (sched, out) = open_run(target, cfg(50.0, 2, 1)).await;
        assert_eq!(sched.due, 50);
        let c = out.measured.summary("measured", out.ended);
        let u = out.uncorrected.unwrap().summary("uncorrected", out.ended);
        assert_eq!(
            c.samples + sched.dropped,
            50,
            "every due request is accounted for"
        );
        assert!(sched.late > 0, "{sched:?}");
        assert!(
            sched.dropped > 0,
            "2 s of timeout cannot absorb a 5x overload: {sched:?}"
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
        let (many, m) = open_run(h2, cfg(100.0, 1, 10)).await;
        let h1 = cleartext(addr, HttpVersion::Http1);
        let (one, _) = open_run(h1, cfg(100.0, 1, 10)).await;
        // 10 streams x 20/s of capacity covers 100/s; one HTTP/1.1 connection (streams ignored)
        // manages 20/s.
        let m = m.measured.summary("m", m.ended);
        assert_eq!((m.samples, m.errors, many.dropped), (100, 0, 0), "{m:?}");
        assert_eq!(
            m.breakdown.connect.as_ref().map(|c| c.count),
            Some(1),
            "one connection carried all 100: {m:?}"
        );
        assert!(
            one.late > many.late + 50,
            "h2 late {} vs h1 late {}",
            many.late,
            one.late
        );
    }

    #[tokio::test]
    async fn a_rate_stage_ramps_the_arrivals() {
        // 0 → 200 req/s over 1 s: 100 requests, three quarters of them in the second half.
        let (addr, _stop) = echo(None).await;
        let mut c = cfg(0.0, 4, 1);
        c.rate = Profile {
            start: 0.0,
            stages: vec![Stage::parse("1s:200").unwrap()],
        };
        let (sched, out) = open_run(cleartext(addr, HttpVersion::Http1), c).await;
        assert_eq!(sched.due, 100);
        let s = out.measured.summary("m", out.ended);
        assert_eq!(s.samples + sched.dropped, 100);
        // The first request is due at 0 and the second at sqrt(1/100) s = 100 ms: the attack
        // spans the last due time, sqrt(99/100) s.
        assert!((s.attack_s - 0.99499).abs() < 0.001, "{}", s.attack_s);
    }
}

mod collect {
    use super::*;

    #[tokio::test]
    async fn users_follow_the_stages_up_and_down() {
        let (addr, _stop) = echo_with(None, Duration::from_millis(20)).await;
        let target = cleartext(addr, HttpVersion::Http1);
        let mut cfg = config(0, 3);
        // 0 → 6 users in 1 s, hold 1 s, down to 0 in 1 s.
        cfg.users = Profile {
            start: 0.0,
            stages: ["1s:6", "1s:6", "1s:0"]
                .iter()
                .map(|s| Stage::parse(s).unwrap())
                .collect(),
        };
        let out = closed_plain(target, spec(None, None), cfg).await;
        let active: Vec<usize> = out.timeline.iter().map(|t| t.active).collect();
        assert_eq!(
            active.iter().max(),
            Some(&6),
            "all six active on the plateau: {active:?}"
        );
        let last = out.timeline.last().map(|t| t.active);
        assert!(last.is_none_or(|a| a <= 1), "gone by the end: {active:?}");
        let s = out.measured.summary("m", out.ended);
        assert_eq!(s.errors, 0);
        assert_eq!(
            s.breakdown.connect.as_ref().map(|c| c.count),
            Some(6),
            "each user connects once: {s:?}"
        );
    }

    #[tokio::test]
    async fn users_with_a_loop_count_send_that_many_and_the_run_ends_early() {
        let (addr, _stop) = echo(None).await;
        let target = cleartext(addr, HttpVersion::Http1);
        // JMeter's configuration 1 in small: 5 users over a 0.5 s ramp, one request each, in a
        // run that could have lasted an hour: it ends when the users are done (the test would
        // not end otherwise), well before its duration.
        let mut cfg = config(5, 3600);
        cfg.users = Profile::ramp(5.0, Duration::from_millis(500));
        cfg.iterations = Some(1);
        let out = closed_plain(target.clone(), spec(None, None), cfg).await;
        let s = out.measured.summary("m", out.ended);
        assert_eq!((s.samples, s.errors), (5, 0), "{s:?}");
        assert!(
            out.ended < Duration::from_secs(3600),
            "ended when the users were done: {:?}",
            out.ended
        );
        // Three each: 4 users × 3 = 12 samples, still one connection per user.
        let mut cfg = config(4, 30);
        cfg.iterations = Some(3);
        let out = closed_plain(target, spec(None, None), cfg).await;
        let s = out.measured.summary("m", out.ended);
        assert_eq!(s.samples, 12, "{s:?}");
        assert_eq!(s.breakdown.connect.as_ref().map(|c| c.count), Some(4));
    }

    #[tokio::test]
    async fn the_first_error_aborts_the_run_and_says_why() {
        let (addr, _stop) = echo(None).await;
        let target = cleartext(addr, HttpVersion::Http1);
        let collect = CollectConfig {
            stop: StopRule {
                first_error: true,
                error_pct: None,
            },
            ..CollectConfig::default()
        };
        // Expecting 418 from an echo that answers 200: the first response fails the check, and
        // the run of an hour stops there (the test would not end otherwise).
        let out = closed_run(target, spec(Some(418), None), config(2, 3600), collect).await;
        assert_eq!(
            out.reason,
            StopReason::FirstError {
                kind: ErrorKind::Status,
                status: Some(200),
            }
        );
        assert!(out.ended < Duration::from_secs(3600), "aborted early");
        assert_eq!(out.active_at_stop, Some(2), "{out:?}");
    }

    #[tokio::test]
    async fn requests_in_flight_at_the_end_are_cut_after_the_grace_period() {
        // A back-end that takes 3 s, a 1 s run and 200 ms of grace: nothing completes.
        let (addr, _stop) = echo_with(None, Duration::from_secs(3)).await;
        let target = cleartext(addr, HttpVersion::Http1);
        let mut cfg = config(2, 1);
        cfg.grace = Duration::from_millis(200);
        let out = closed_plain(target, spec(None, None), cfg).await;
        // Both requests were still waiting on the back-end when the grace period ran out.
        let s = out.measured.summary("m", out.ended);
        assert_eq!((s.samples, s.interrupted), (0, 2), "{s:?}");
    }

    #[tokio::test]
    async fn samples_are_written_one_row_per_request() {
        let (addr, _stop) = echo(None).await;
        let target = cleartext(addr, HttpVersion::Http1);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut cfg = config(2, 1);
        cfg.think_time = Duration::from_millis(50);
        let collect = CollectConfig {
            samples: Some(path.clone()),
            connect_in_latency: true,
            ..CollectConfig::default()
        };
        let out = closed_run(target, spec(Some(200), None), cfg, collect).await;
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines();
        assert_eq!(
            lines.next().unwrap(),
            pms_bench::collect::SAMPLES_HEADER.trim_end()
        );
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len() as u64, out.measured.samples());
        assert_eq!(rows.len() as u64, out.rows);
        let first = &rows[0];
        assert_eq!(first.len(), 12);
        assert_eq!(first[2], "measured");
        assert_eq!(first[3], "200");
        assert_eq!(first[4], "true");
        let elapsed: f64 = first[1].parse().unwrap();
        let latency: f64 = first[9].parse().unwrap();
        let connect: f64 = first[10].parse().unwrap();
        assert!(latency <= elapsed, "{first:?}");
        assert!(
            connect > 0.0,
            "a user's first request carries the connect time"
        );
        assert!(
            connect <= latency,
            "JMeter's Latency includes Connect: {first:?}"
        );
        // The summary counts latency as the rows do (elapsed includes connecting), within the
        // histogram's precision.
        let total: f64 = rows.iter().map(|r| r[1].parse::<f64>().unwrap()).sum();
        let csv_mean = total / rows.len() as f64;
        let s = out.measured.summary("m", out.ended);
        assert!(
            (s.mean_ms - csv_mean).abs() <= csv_mean * 0.002 + 0.001,
            "summary mean {} against the rows' {csv_mean}",
            s.mean_ms
        );
        let reused = rows.iter().filter(|r| r[10] == "0.000").count();
        assert_eq!(
            reused,
            rows.len() - 2,
            "later requests reuse the connection"
        );
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let stamp: u128 = first[0].parse().unwrap();
        assert!(stamp <= now_ms && now_ms - stamp < 60_000, "epoch ms");
    }

    #[tokio::test]
    async fn a_stress_run_reports_the_users_active_when_the_target_failed() {
        use pms_bench::stress::{StressConfig, StressOutcome};
        let (addr, stop) = echo(None).await;
        let target = cleartext(addr, HttpVersion::Http1);
        let stress = StressConfig {
            add_per_s: 20.0,
            think_time: Duration::from_millis(100),
            max_users: 1000,
            max_duration: Duration::from_secs(10),
            timeout: Duration::from_secs(2),
            stop_at_error_pct: None,
        };
        let (cfg, rule) = stress.plan();
        // The target goes away after 1.5 s: about 30 users are in by then.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            drop(stop);
        });
        let collect = CollectConfig {
            stop: rule,
            ..CollectConfig::default()
        };
        let out = closed_run(target, spec(None, None), cfg, collect).await;
        let o = StressOutcome::of(&out);
        assert!(o.failed, "{o:?}");
        assert!(
            (20..=60).contains(&o.users_at_end),
            "about 20 users/s for 1.5 s: {o:?}"
        );
        assert!(o.ended_s < 5.0, "{o:?}");
        assert!(o.peak_rate > 0.0, "{o:?}");
    }
}
