//! An upstream with several endpoints: the choice of endpoint by load, the requests sent again
//! to another one after a 503, and the endpoints skipped after 5xx answers in a row or failed
//! readiness checks. Each on both front ends (the HTTP/1.1 fast path and hyper's) and, where the
//! protocol matters, over HTTP/1.1 and HTTP/2.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use pms_net::serve::{self, Drain, NoObserver, ServeConfig};
use pms_testkit::client::{Proto, TestClient};
use pms_testkit::Spawned;

use crate::admin::{scrape, value};
use crate::support::{simple, Gw};

/// A back-end replica: `/readyz` answers 200 while `ready`, 503 otherwise; every other request
/// gets `status` with the replica's name as its body, after `delay`, and is counted.
struct Replica {
    ready: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
    server: Spawned<Drain>,
}

impl Replica {
    async fn start(name: &'static str, status: StatusCode, delay: Duration) -> Self {
        let ready = Arc::new(AtomicBool::new(true));
        let status = Arc::new(AtomicU16::new(status.as_u16()));
        let served = Arc::new(AtomicUsize::new(0));
        let (r, s, n) = (ready.clone(), status.clone(), served.clone());
        let server = Spawned::start(move |listener, stop| {
            serve::serve(
                listener,
                ServeConfig::default(),
                move |_| {
                    let (ready, status, served) = (r.clone(), s.clone(), n.clone());
                    hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (ready, status, served) =
                            (ready.clone(), status.clone(), served.clone());
                        async move {
                            let check = req.uri().path() == "/readyz";
                            let _ = req.into_body().collect().await;
                            let (status, body) = if check {
                                let ok = ready.load(Ordering::SeqCst);
                                let status = if ok { 200 } else { 503 };
                                (status, if ok { "ready" } else { "not ready" })
                            } else {
                                served.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(delay).await;
                                (status.load(Ordering::SeqCst), name)
                            };
                            let mut resp = Response::new(Full::new(Bytes::from(body)));
                            *resp.status_mut() =
                                StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
                            Ok::<_, Infallible>(resp)
                        }
                    })
                },
                Arc::new(NoObserver),
                stop,
            )
        })
        .await;
        Self {
            ready,
            served,
            server,
        }
    }

    fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

/// A gateway with one worker (so that every connection sees the same counts) over
/// `replicas`, fast path on or off, with `extra` in the upstream's table.
async fn over(replicas: &[&Replica], fast: bool, extra: &str) -> Gw {
    let endpoints: Vec<String> = replicas
        .iter()
        .map(|r| format!("\"http://{}\"", r.server.addr))
        .collect();
    let listed = if endpoints.is_empty() {
        String::new()
    } else {
        format!("endpoints = [{}]\n", endpoints.join(", "))
    };
    simple(
        &format!("{listed}{extra}"),
        "",
        &format!("[limits]\nhttp1_fast_path = {fast}\n\n[runtime]\nworkers = 1"),
        &[],
    )
    .await
}

/// Sends `n` requests on one connection; the bodies of the answers (replica names), with
/// their statuses.
async fn calls(
    c: &mut TestClient,
    n: usize,
    method: &str,
    headers: &[(&str, &str)],
) -> Vec<(u16, String)> {
    let mut got = Vec::new();
    for _ in 0..n {
        let r = c.call(method, "/x", headers, "").await.expect("an answer");
        got.push((r.status().as_u16(), r.text()));
    }
    got
}

async fn metric(gw: &Gw, name: &str) -> f64 {
    let m = scrape(gw.admin).await;
    value(
        &m,
        &format!(r#"pms_gateway_upstream_{name}_total{{upstream="up"}}"#),
    )
    .unwrap_or(0.0)
}

const NOW: Duration = Duration::ZERO;

#[tokio::test]
async fn a_503_to_a_request_that_may_be_repeated_is_answered_by_another_endpoint() {
    let down = Replica::start("down", StatusCode::SERVICE_UNAVAILABLE, NOW).await;
    let up = Replica::start("up", StatusCode::OK, NOW).await;
    let fine = |got: &[(u16, String)]| got.iter().all(|(s, b)| *s == 200 && b == "up");
    let refused = (503, "down".to_string());
    for fast in [true, false] {
        let gw = over(&[&down, &up], fast, "eject_after_5xx = 0").await;
        for proto in [Proto::H1c, Proto::H2c] {
            let at = format!("fast path {fast}, {proto:?}");
            let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
            let gets = calls(&mut c, 6, "GET", &[]).await;
            assert!(fine(&gets), "{at}: {gets:?}");
            let keyed = calls(&mut c, 4, "PUT", &[("idempotency-key", "k-1")]).await;
            assert!(fine(&keyed), "{at}: a PUT with a key: {keyed:?}");
            // Every other request goes to "down" first; these are never sent twice.
            let posts = calls(&mut c, 4, "POST", &[]).await;
            assert!(posts.contains(&refused), "{at}: a POST: {posts:?}");
            let bare = calls(&mut c, 4, "PUT", &[]).await;
            assert!(
                bare.contains(&refused),
                "{at}: a PUT without a key: {bare:?}"
            );
        }
        assert!(metric(&gw, "retries").await >= 4.0, "fast path {fast}");
    }
}

#[tokio::test]
async fn an_endpoint_answering_5xx_in_a_row_is_skipped() {
    let failing = Replica::start("failing", StatusCode::INTERNAL_SERVER_ERROR, NOW).await;
    let fine = Replica::start("fine", StatusCode::OK, NOW).await;
    for fast in [true, false] {
        let gw = over(&[&failing, &fine], fast, "eject_after_5xx = 2").await;
        let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
        let got = calls(&mut c, 12, "POST", &[]).await;
        let errors = got.iter().filter(|(s, _)| *s == 500).count();
        // In turn: failing, fine, failing (the second in a row: skipped from then on), fine...
        assert_eq!(errors, 2, "fast path {fast}: {got:?}");
        assert_eq!(metric(&gw, "ejections").await, 1.0, "fast path {fast}");
    }
}

#[tokio::test]
async fn an_endpoint_failing_its_readiness_check_gets_no_requests_until_it_passes() {
    let a = Replica::start("a", StatusCode::OK, NOW).await;
    let b = Replica::start("b", StatusCode::OK, NOW).await;
    let check = r#"health_check = { path = "/readyz", interval_ms = 20, unhealthy_after = 1 }"#;
    for fast in [true, false] {
        let gw = over(&[&a, &b], fast, check).await;
        a.ready.store(false, Ordering::SeqCst);
        let gw_ref = &gw;
        pms_testkit::assert_eventually("a found unready", 500, || async move {
            metric(gw_ref, "ejections").await >= 1.0
        })
        .await;
        let gauge = format!(
            r#"pms_gateway_upstream_endpoint_ready{{upstream="up",endpoint="http://{}"}}"#,
            a.server.addr
        );
        assert_eq!(value(&scrape(gw.admin).await, &gauge), Some(0.0));
        let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
        let got = calls(&mut c, 10, "POST", &[]).await;
        assert!(
            got.iter().all(|(s, n)| *s == 200 && n == "b"),
            "fast path {fast}: {got:?}"
        );
        a.ready.store(true, Ordering::SeqCst);
        let mut back = false;
        for _ in 0..500 {
            if calls(&mut c, 2, "POST", &[])
                .await
                .iter()
                .any(|(_, n)| n == "a")
            {
                back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(back, "fast path {fast}: a never got requests again");
        assert_eq!(value(&scrape(gw.admin).await, &gauge), Some(1.0));
    }
}

#[tokio::test]
async fn while_an_endpoint_holds_a_request_the_next_ones_go_to_the_other() {
    let slow = Replica::start("slow", StatusCode::OK, Duration::from_secs(1)).await;
    let quick = Replica::start("quick", StatusCode::OK, NOW).await;
    for fast in [true, false] {
        let gw = over(&[&slow, &quick], fast, "").await;
        let before = slow.served();
        // The first request goes to the first endpoint in turn: the slow one.
        let addr = gw.addr();
        let held = tokio::spawn(async move {
            let mut c = TestClient::connect(addr, Proto::H1c).await.unwrap();
            calls(&mut c, 1, "GET", &[]).await
        });
        let slow_ref = &slow;
        pms_testkit::assert_eventually("the slow one has a request", 500, || async move {
            slow_ref.served() > before
        })
        .await;
        let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
        let got = calls(&mut c, 10, "GET", &[]).await;
        assert!(
            got.iter().all(|(s, n)| *s == 200 && n == "quick"),
            "fast path {fast}: {got:?}"
        );
        assert_eq!(held.await.unwrap(), [(200, "slow".to_string())]);
    }
}

/// A back-end that reads each request's head and closes the connection without an answer, as
/// a replica killed while it worked on the request would.
async fn closer() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use tokio::io::AsyncReadExt;
    let listener = pms_testkit::listener().await;
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
            });
        }
    });
    (addr, task)
}

#[tokio::test]
async fn an_idempotent_request_whose_connection_closes_unanswered_goes_to_another_endpoint() {
    let (dead, _task) = closer().await;
    let fine = Replica::start("fine", StatusCode::OK, NOW).await;
    for fast in [true, false] {
        let gw = simple(
            &format!(
                r#"endpoints = ["http://{dead}", "http://{}"]"#,
                fine.server.addr
            ),
            "",
            &format!("[limits]\nhttp1_fast_path = {fast}\n\n[runtime]\nworkers = 1"),
            &[],
        )
        .await;
        for proto in [Proto::H1c, Proto::H2c] {
            let at = format!("fast path {fast}, {proto:?}");
            let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
            let gets = calls(&mut c, 4, "GET", &[]).await;
            assert!(
                gets.iter().all(|(s, b)| *s == 200 && b == "fine"),
                "{at}: {gets:?}"
            );
            let puts = calls(&mut c, 4, "PUT", &[]).await;
            assert!(
                puts.iter().all(|(s, b)| *s == 200 && b == "fine"),
                "{at}: {puts:?}"
            );
            // The one that went to the closing endpoint may have been acted on: a 502.
            let posts = calls(&mut c, 4, "POST", &[]).await;
            assert!(posts.iter().any(|(s, _)| *s == 502), "{at}: {posts:?}");
        }
    }
}

#[tokio::test]
async fn an_upstream_discovered_by_dns_is_served_through_the_addresses_its_name_has() {
    // `localhost` through the system's resolver: 127.0.0.1, where the replica listens, and
    // often ::1 too, where nothing does on its port: a connect there fails and the request goes
    // to the other endpoint, never lost.
    let replica = Replica::start("pod", StatusCode::OK, NOW).await;
    let port = replica.server.addr.port();
    for fast in [true, false] {
        let before = replica.served();
        let gw = over(
            &[],
            fast,
            &format!("discover = {{ dns = \"http://localhost:{port}\", interval_ms = 200 }}"),
        )
        .await;
        for proto in [Proto::H1c, Proto::H2c] {
            let mut c = TestClient::connect(gw.addr(), proto).await.unwrap();
            let got = calls(&mut c, 5, "GET", &[]).await;
            assert!(
                got.iter().all(|(s, b)| *s == 200 && b == "pod"),
                "fast path {fast}, {proto:?}: {got:?}"
            );
            let posts = calls(&mut c, 2, "POST", &[]).await;
            assert!(
                posts.iter().all(|(s, b)| *s == 200 && b == "pod"),
                "fast path {fast}, {proto:?}: {posts:?}"
            );
        }
        assert_eq!(replica.served() - before, 14, "fast path {fast}");
    }
}
