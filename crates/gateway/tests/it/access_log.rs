//! The access log: a JSON line per answered request, from both paths, written while the
//! gateway runs and all of it by the time it has shut down.

use std::time::Duration;

use pms_testkit::client::{Proto, TestClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{echo, gateway};

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A gateway config with one route, `api` (paths under `/api`), to `upstream` (`host:port`),
/// and the access log in `path`.
fn config(upstream: &str, path: &std::path::Path) -> String {
    format!(
        r#"
[admin]
listen = "127.0.0.1:0"
[[listeners]]
listen = "127.0.0.1:0"
[[upstreams]]
name = "echo"
endpoints = ["http://{upstream}"]
[[routes]]
name = "api"
match = {{ path_prefix = "/api" }}
upstream = "echo"
[access_log]
path = "{}"
"#,
        path.display()
    )
}

#[tokio::test]
async fn every_answered_request_gets_a_line_on_both_paths() {
    let back = echo(false, false, Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    // A line already there is kept: the file is appended to.
    std::fs::write(&path, "{\"earlier\":true}\n").unwrap();
    let gw = gateway(&config(&back.addr.to_string(), &path), &[]).await;

    // HTTP/1.1 takes the fast path; HTTP/2, and a request no route takes, hyper's.
    let mut h1 = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = h1
        .call("GET", "/api/a?x=1", &[("x-request-id", "log-1")], "")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut h2 = TestClient::connect(gw.addr(), Proto::H2c).await.unwrap();
    let r = h2
        .call("POST", "/api/b", &[("x-request-id", "log-2")], "hi")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = h1
        .call("DELETE", "/elsewhere", &[("x-request-id", "log-3")], "")
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // A head the gateway cannot read is answered, and logged, too.
    let mut raw = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    raw.write_all(b"GET / HTTP/1.1\r\nhost: gw\r\nbad header\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), raw.read_to_string(&mut answer)).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");

    // Written while the gateway runs, within a flush period or so.
    pms_testkit::assert_eventually("four new lines in the access log", 1000, || {
        let n = lines(&path).len();
        async move { n == 5 }
    })
    .await;
    let got = lines(&path);
    assert_eq!(got[0]["earlier"], true);
    let by_id = |id: &str| {
        got.iter()
            .find(|l| l["request_id"] == id)
            .unwrap_or_else(|| panic!("no line for {id}: {got:?}"))
            .clone()
    };
    let a = by_id("log-1");
    assert_eq!(
        (
            &a["method"],
            &a["target"],
            &a["protocol"],
            &a["status"],
            &a["route"]
        ),
        (
            &"GET".into(),
            &"/api/a?x=1".into(),
            &"HTTP/1.1".into(),
            &200.into(),
            &"api".into()
        ),
        "{a}"
    );
    assert_eq!(a["client"], "127.0.0.1");
    assert!(a["duration_ms"].as_f64().is_some_and(|d| d >= 0.0), "{a}");
    assert!(a["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{a}");
    let b = by_id("log-2");
    assert_eq!(
        (&b["method"], &b["target"], &b["protocol"], &b["status"]),
        (
            &"POST".into(),
            &"/api/b".into(),
            &"HTTP/2.0".into(),
            &200.into()
        ),
        "{b}"
    );
    let refused = got
        .iter()
        .find(|l| l["status"] == 400)
        .unwrap_or_else(|| panic!("no line for the refused head: {got:?}"));
    assert_eq!(
        (&refused["method"], &refused["target"], &refused["route"]),
        (&"-".into(), &"-".into(), &serde_json::Value::Null),
        "{refused}"
    );
    assert!(
        refused["request_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{refused}"
    );
    let c = by_id("log-3");
    assert_eq!(
        (&c["status"], &c["route"]),
        (&404.into(), &serde_json::Value::Null),
        "{c}"
    );

    // What comes just before shutdown is written by the time the gateway has stopped.
    let r = h1
        .call("GET", "/api/last", &[("x-request-id", "log-4")], "")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    drop((h1, h2));
    gw.spawned.shutdown().await.unwrap();
    let got = lines(&path);
    assert!(
        got.iter().any(|l| l["request_id"] == "log-4"),
        "the last line is missing: {got:?}"
    );
}

#[tokio::test]
async fn sigusr1_reopens_the_access_log_after_it_was_renamed() {
    let back = echo(false, false, Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let rotated = dir.path().join("access.log.1");
    let gw = gateway(&config(&back.addr.to_string(), &path), &[]).await;
    let ids = |p: &std::path::Path| -> Vec<String> {
        lines(p)
            .iter()
            .map(|l| l["request_id"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    let mut c = TestClient::connect(gw.addr(), Proto::H1c).await.unwrap();
    let r = c
        .call("GET", "/api/1", &[("x-request-id", "old-1")], "")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    pms_testkit::assert_eventually("the first line", 1000, || {
        let n = lines(&path).len();
        async move { n == 1 }
    })
    .await;

    // As logrotate does without copytruncate: rename, then signal. The gateway answered a
    // request, so its handler is in place (without one, SIGUSR1 would end this process).
    std::fs::rename(&path, &rotated).unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-USR1", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    pms_testkit::assert_eventually("a new access.log", 1000, || {
        let there = path.exists();
        async move { there }
    })
    .await;
    let r = c
        .call("GET", "/api/2", &[("x-request-id", "new-1")], "")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(c);
    gw.spawned.shutdown().await.unwrap();
    assert_eq!(ids(&rotated), ["old-1"]);
    assert_eq!(ids(&path), ["new-1"]);
}

#[tokio::test]
async fn an_access_log_that_cannot_be_opened_stops_the_gateway_before_it_binds() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir/access.log");
    let text = config("127.0.0.1:1", &missing);
    let settings = pms_gateway::config::parse(&text, "test.toml")
        .and_then(|raw| raw.resolve("test.toml", std::path::Path::new("."), &|_| None))
        .unwrap();
    let err = pms_gateway::Bound::bind(&settings).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("access_log.path: cannot open") && message.contains("no/such/dir"),
        "{message}"
    );
}
