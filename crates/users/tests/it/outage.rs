//! The database going away: 503 JSON errors and `/readyz` false while it is gone, and recovery
//! without a restart when it comes back. Each test owns its PostgreSQL server, so stopping it
//! disturbs no other test.

use pms_testkit::{assert_eventually, pg};

use crate::support::{assert_error, users, SEED_PASSWORD};

fn own_server() -> Option<pg::Pg> {
    if pg::skipped() {
        eprintln!("PMS_TEST_SKIP_PG=1: skipping");
        return None;
    }
    Some(pg::Pg::start())
}

async fn status_of(addr: std::net::SocketAddr, path: &str) -> u16 {
    let mut c = pms_testkit::client::TestClient::connect(addr, pms_testkit::client::Proto::H1c)
        .await
        .expect("connect");
    c.call("GET", path, &[], "")
        .await
        .expect("request")
        .status()
        .as_u16()
}

#[tokio::test]
async fn database_stopped_mid_run_gives_503_then_recovers() {
    let Some(server) = own_server() else {
        return;
    };
    let url = server.fresh_database();
    let svc = users(&url, true).await;
    let mut api = crate::support::Api::connect(svc.addr()).await;
    api.login("supervisor@isep.ipp.pt", SEED_PASSWORD).await;
    assert_eq!(api.get("/users/getAllUsers").await.status(), 200);

    server.stop();
    let r = api.get("/users/getAllUsers").await;
    assert_error(&r, 503, "database_unavailable", None);
    let r = api
        .send_json(
            "POST",
            "/users/login",
            &serde_json::json!({"email": "supervisor@isep.ipp.pt", "password": SEED_PASSWORD}),
        )
        .await;
    assert_error(&r, 503, "database_unavailable", None);
    assert_eq!(status_of(svc.addr(), "/readyz").await, 503);
    assert_eq!(
        status_of(svc.addr(), "/healthz").await,
        200,
        "alive, just not ready"
    );

    server.restart();
    let addr = svc.addr();
    assert_eventually("users service answers again", 1000, || async move {
        status_of(addr, "/readyz").await == 200
    })
    .await;
    let r = api.get("/users/getAllUsers").await;
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(r.json().as_array().unwrap().len(), 6, "nothing lost");
}

#[tokio::test]
async fn database_down_at_start_means_not_ready_until_it_comes() {
    let Some(server) = own_server() else {
        return;
    };
    let url = server.fresh_database();
    server.stop();
    let svc = users(&url, false).await;
    assert_eq!(status_of(svc.addr(), "/readyz").await, 503);
    let mut c =
        pms_testkit::client::TestClient::connect(svc.addr(), pms_testkit::client::Proto::H1c)
            .await
            .unwrap();
    let r = c
        .call(
            "POST",
            "/users/login",
            &[("content-type", "application/json")],
            r#"{"email":"a@b.pt","password":"x"}"#,
        )
        .await
        .unwrap();
    assert_error(&r, 503, "not_ready", None);

    server.restart();
    let addr = svc.addr();
    assert_eventually("users service becomes ready", 1500, || async move {
        status_of(addr, "/readyz").await == 200
    })
    .await;
    assert!(svc.app.is_ready());
    assert_eq!(
        svc.app.store.count_users().await.unwrap(),
        6,
        "seeded once ready"
    );
}

#[tokio::test]
async fn requests_right_after_a_database_restart_do_not_fail() {
    let Some(server) = own_server() else {
        return;
    };
    let url = server.fresh_database();
    let svc = users(&url, true).await;
    let mut api = crate::support::Api::connect(svc.addr()).await;
    api.login("supervisor@isep.ipp.pt", SEED_PASSWORD).await;
    assert_eq!(api.get("/users/getAllUsers").await.status(), 200);
    let pooled = svc.app.store.connections();
    assert!(pooled >= 1, "a connection waits in the pool");

    // The pooled connections are now broken, and were used too recently to be checked first.
    server.stop();
    server.restart();
    let r = api
        .send_json(
            "POST",
            "/users/createUser",
            &crate::support::registration("after@example.com", 523456789, "AF-00-AF"),
        )
        .await;
    assert_eq!(
        r.status(),
        201,
        "a transaction broken at BEGIN runs again: {}",
        r.text()
    );
    let me = r.json()["id"].as_i64().expect("the new user's id");
    let mut customer = crate::support::Api::connect(svc.addr()).await;
    customer.login("after@example.com", "123PasswordX#").await;

    server.stop();
    server.restart();
    let r = customer
        .send_json(
            "PUT",
            &format!("/users/paymentMethod/{me}"),
            &serde_json::json!({"paymentMethod": "DEBIT"}),
        )
        .await;
    assert_eq!(
        r.status(),
        202,
        "setting a column runs again on a new connection: {}",
        r.text()
    );
    assert_eq!(
        customer
            .get(&format!("/users/paymentMethod/{me}"))
            .await
            .json(),
        serde_json::json!({"paymentMethod": "DEBIT"})
    );

    server.stop();
    server.restart();
    let r = api.get("/users/getAllUsers").await;
    assert_eq!(
        r.status(),
        200,
        "a read runs again on a new connection: {}",
        r.text()
    );
    assert_eq!(r.json().as_array().map(Vec::len), Some(7));
    let r = api.get("/userReport/top10Parky").await;
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(
        svc.app.store.connections(),
        1,
        "the broken connections were closed together, not found out one request at a time"
    );
}
