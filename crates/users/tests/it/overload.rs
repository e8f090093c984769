//! More requests than the service takes at once: past its bound (`max_in_flight`) a request is
//! answered 503 `busy` with `Retry-After` at once, the probes still answer, and the service takes
//! requests again as soon as a place frees up. Real sockets, a request held by a body still on
//! its way.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{assert_error, config, users_serving, Api, Database, Db};

#[tokio::test]
async fn past_its_bound_the_service_sheds_at_once_and_recovers() {
    let Some(database) = Database::fresh(Db::Sqlite) else {
        return;
    };
    let mut cfg = config(&database.url);
    // The held request must not time out while the test looks.
    cfg.body_timeout = Duration::from_secs(120);
    let users = users_serving(cfg, 1).await;

    // A sign-up whose body is still coming holds the only place.
    let mut held = tokio::net::TcpStream::connect(users.addr())
        .await
        .expect("connect");
    let head = "POST /users/createUser HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                content-length: 16\r\n\r\n{\"firstName\"";
    held.write_all(head.as_bytes()).await.expect("send head");

    let mut api = Api::connect(users.addr()).await;
    let mut refused = None;
    for _ in 0..2_000 {
        let r = api.get("/users/vehicles/1").await;
        if r.status() == 503 {
            refused = Some(r);
            break;
        }
        // Not yet held: the service answers as usual (no token).
        assert_eq!(r.status(), 401, "{}", r.text());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let refused = refused.expect("a request past the bound is refused");
    assert_error(&refused, 503, "busy", None);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(api.get("/healthz").await.status(), 200);
    assert_eq!(api.get("/readyz").await.status(), 200);

    // The rest of the body: the held request is answered, and its place is free again.
    held.write_all(b":1}  ").await.expect("send the rest");
    let mut got = vec![0u8; 4096];
    let n = held.read(&mut got).await.expect("answer");
    let got = String::from_utf8_lossy(&got[..n]);
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    let mut served = None;
    for _ in 0..2_000 {
        let r = api.get("/users/vehicles/1").await;
        if r.status() != 503 {
            served = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let served = served.expect("served again once the place is free");
    assert_eq!(served.status(), 401, "{}", served.text());
}
