//! The bad paths: forged identity headers, bad tokens, wrong roles and owners, malformed input,
//! duplicates — each with a JSON error, and nothing half-written.

use std::time::Duration;

use serde_json::json;

use crate::support::{assert_error, registration, signer, Db, Stack, Via, SEED_PASSWORD};

const LEO: &str = "leoKim@isep.ipp.pt";

async fn stack() -> Stack {
    Stack::start(Db::Sqlite)
        .await
        .expect("SQLite is always available")
}

#[tokio::test]
async fn forged_identity_headers_never_grant_anything() {
    let stack = stack().await;
    let forged = [("x-userid", "3"), ("x-userrole", "CUSTOMER_MANAGER")];
    let grant = json!({"userIds": [4], "amount": 1000, "reason": "free coins"}).to_string();
    for via in [Via::GatewayH1, Via::Direct] {
        // No token at all: the headers alone are worth nothing.
        let mut anon = stack.client(via).await;
        let r = anon
            .call("POST", "/users/parkies", &forged, grant.clone())
            .await;
        assert_error(&r, 401, "missing_token", None);
        assert_eq!(
            r.header("www-authenticate"),
            Some("Bearer realm=\"pms\""),
            "{via:?}"
        );
        let r = anon
            .call(
                "GET",
                "/users/getAllUsers",
                &[("x-userrole", "SUPERVISOR")],
                "",
            )
            .await;
        assert_error(&r, 401, "missing_token", None);

        // A customer's token plus a manager's headers is still a customer.
        let mut leo = stack.client(via).await;
        leo.login(LEO, SEED_PASSWORD).await;
        let r = leo
            .call("POST", "/users/parkies", &forged, grant.clone())
            .await;
        assert_error(&r, 403, "forbidden", None);
        let r = leo
            .call(
                "GET",
                "/users/vehicles/5",
                &[("x-userid", "5"), ("x-userrole", "CUSTOMER")],
                "",
            )
            .await;
        assert_error(&r, 403, "forbidden", None);
    }
    // A forged role on the public registration route still makes a customer.
    let mut anon = stack.client(Via::GatewayH1).await;
    let r = anon
        .call(
            "POST",
            "/users/createUser",
            &[("x-userrole", "SUPERVISOR")],
            registration("eve@example.com", 234567891, "EE-11-EE").to_string(),
        )
        .await;
    assert_eq!(r.status(), 201, "{}", r.text());
    assert_eq!(r.json()["role"], "CUSTOMER");
    let wallet = stack.users.app.store.wallet(4).await.unwrap().unwrap();
    assert_eq!(wallet.parkies, 0, "no forged grant went through");
}

#[tokio::test]
async fn bad_tokens_are_refused_by_the_gateway_and_by_the_service() {
    let stack = stack().await;
    let now = pms_auth::sign::now_secs();
    let s = signer();
    let good = s.issue("3", "CUSTOMER_MANAGER").unwrap();
    let expired = s
        .sign_claims(
            json!({"sub": "3", "role": "CUSTOMER_MANAGER", "iss": "pms-users", "exp": now - 3600}),
        )
        .unwrap();
    let no_exp = s
        .sign_claims(json!({"sub": "3", "role": "CUSTOMER_MANAGER", "iss": "pms-users"}))
        .unwrap();
    let other_key = pms_auth::Signer::hmac(
        pms_auth::Algorithm::HS256,
        b"some-other-secret-entirely-different",
    )
    .unwrap()
    .issue("3", "CUSTOMER_MANAGER")
    .unwrap();
    let tampered = {
        // Same signature, payload claiming a different subject.
        let parts: Vec<&str> = good.split('.').collect();
        let payload =
            base64url(br#"{"sub":"1","role":"SUPERVISOR","exp":9999999999,"iss":"pms-users"}"#);
        format!("{}.{}.{}", parts[0], payload, parts[2])
    };
    let alg_none = format!(
        "{}.{}.",
        base64url(br#"{"alg":"none","typ":"JWT"}"#),
        base64url(br#"{"sub":"1","role":"SUPERVISOR","exp":9999999999}"#)
    );
    let cases = [
        ("expired", expired),
        ("no exp", no_exp),
        ("other key", other_key),
        ("tampered", tampered),
        ("alg none", alg_none),
        ("garbage", "not.a.token".to_owned()),
    ];
    for via in [Via::GatewayH1, Via::GatewayH2Tls, Via::Direct] {
        let mut api = stack.client(via).await;
        for (what, token) in &cases {
            api.token = Some(token.clone());
            let r = api.get("/users/getAllUsers").await;
            assert_error(&r, 401, "invalid_token", None);
            assert_eq!(
                r.header("www-authenticate"),
                Some("Bearer realm=\"pms\", error=\"invalid_token\""),
                "{via:?} {what}"
            );
        }
        api.token = Some(good.clone());
        assert_eq!(
            api.get("/users/getAllUsers").await.status(),
            200,
            "{via:?} good token"
        );
    }
    // Straight to the service: a token whose subject is not a user id, or whose role is unknown.
    let mut direct = stack.client(Via::Direct).await;
    for (sub, role) in [("admin", "SUPERVISOR"), ("1", "ROOT")] {
        direct.token = Some(s.issue(sub, role).unwrap());
        assert_error(
            &direct.get("/users/getAllUsers").await,
            401,
            "invalid_token",
            None,
        );
    }
}

#[tokio::test]
async fn roles_and_ownership_are_enforced() {
    let stack = stack().await;
    let mut leo = stack.client(Via::GatewayH1).await;
    leo.login(LEO, SEED_PASSWORD).await;
    // Someone else's things.
    for path in [
        "/users/vehicles/5",
        "/users/paymentMethod/5",
        "/users/parkies/5",
    ] {
        assert_error(&leo.get(path).await, 403, "forbidden", None);
    }
    let car = json!({"licensePlateNumber": "ZZ-45-XA", "vehicleType": "MOTORCYCLE", "vehicleEnergySource": "GPL"});
    assert_error(
        &leo.send_json("PUT", "/users/vehicle/5", &car).await,
        403,
        "forbidden",
        None,
    );
    assert_error(&leo.get("/users/getAllUsers").await, 403, "forbidden", None);
    // Their own wallet is fine.
    assert_eq!(leo.get("/users/parkies/4").await.status(), 200);

    let mut park = stack.client(Via::GatewayH1).await;
    park.login("parkmanager@isep.ipp.pt", SEED_PASSWORD).await;
    assert_error(
        &park.get("/users/getAllUsers").await,
        403,
        "forbidden",
        None,
    );
    assert_error(&park.get("/users/parkies/4").await, 403, "forbidden", None);
    let grant = json!({"userIds": [4], "amount": 5, "reason": "x"});
    assert_error(
        &park.send_json("POST", "/users/parkies", &grant).await,
        403,
        "forbidden",
        None,
    );

    let mut sup = stack.client(Via::GatewayH1).await;
    sup.login("supervisor@isep.ipp.pt", SEED_PASSWORD).await;
    assert_eq!(sup.get("/users/getAllUsers").await.status(), 200);
    assert_eq!(
        sup.get("/users/parkies/4").await.status(),
        200,
        "staff read wallets"
    );
    assert_error(
        &sup.send_json("POST", "/users/parkies", &grant).await,
        403,
        "forbidden",
        None,
    );
    // Managers manage coins, not other people's cars.
    let mut cm = stack.client(Via::GatewayH1).await;
    cm.login("customermanager@isep.ipp.pt", SEED_PASSWORD).await;
    assert_error(
        &cm.send_json("PUT", "/users/vehicle/4", &car).await,
        403,
        "forbidden",
        None,
    );
}

#[tokio::test]
async fn malformed_input_gets_a_json_error_naming_the_problem() {
    let stack = stack().await;
    let mut api = stack.client(Via::Direct).await;
    let r = api
        .call(
            "POST",
            "/users/createUser",
            &[],
            "{\"firstName\": \"John\",\n \"lastName\": }",
        )
        .await;
    assert_error(&r, 400, "invalid_json", None);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("line 2"),
        "{}",
        r.text()
    );
    assert_error(
        &api.call("POST", "/users/createUser", &[], "[1,2]").await,
        400,
        "invalid_json",
        None,
    );
    let mut wrong = registration("a@b.pt", 123456780, "AB-12-CD");
    wrong["nif"] = json!(true);
    assert_error(
        &api.send_json("POST", "/users/createUser", &wrong).await,
        400,
        "invalid_field",
        Some("nif"),
    );
    let mut wrong = registration("a@b.pt", 123456780, "AB-12-CD");
    wrong["vehicleType"] = json!("TRUCK");
    assert_error(
        &api.send_json("POST", "/users/createUser", &wrong).await,
        400,
        "invalid_field",
        Some("vehicleType"),
    );
    let mut weak = registration("a@b.pt", 123456780, "AB-12-CD");
    weak["password"] = json!("password");
    assert_error(
        &api.send_json("POST", "/users/createUser", &weak).await,
        400,
        "invalid_field",
        Some("password"),
    );
    // Oversized, straight and through the gateway (whose own limit is larger).
    let big = format!(
        "{{\"firstName\": \"{}\"}}",
        "x".repeat(pms_users::DEFAULT_MAX_BODY_BYTES)
    );
    assert_error(
        &api.call("POST", "/users/createUser", &[], big.clone())
            .await,
        413,
        "body_too_large",
        None,
    );
    let mut gw = stack.client(Via::GatewayH2Tls).await;
    assert_error(
        &gw.call("POST", "/users/createUser", &[], big).await,
        413,
        "body_too_large",
        None,
    );
    let r = api
        .call(
            "POST",
            "/users/login",
            &[("content-type", "text/xml")],
            "<a/>",
        )
        .await;
    assert_error(&r, 415, "unsupported_media_type", None);
    // Paths and methods.
    api.login(LEO, SEED_PASSWORD).await;
    assert_error(
        &api.get("/users/vehicles/abc").await,
        400,
        "invalid_field",
        Some("userId"),
    );
    assert_error(&api.get("/users/nothing-here").await, 404, "no_route", None);
    assert_error(
        &api.call("DELETE", "/users/getAllUsers", &[], "").await,
        405,
        "method_not_allowed",
        None,
    );
    assert_eq!(
        stack.users.app.store.count_users().await.unwrap(),
        6,
        "nothing was created"
    );
}

#[tokio::test]
async fn duplicates_conflict_by_field_and_leave_nothing_half_written() {
    let stack = stack().await;
    let mut api = stack.client(Via::GatewayH1).await;
    let john = registration("john@example.com", 223456789, "JJ-11-JJ");
    assert_eq!(
        api.send_json("POST", "/users/createUser", &john)
            .await
            .status(),
        201
    );
    let cases = [
        (
            registration("JOHN@example.com", 323456789, "JJ-22-JJ"),
            "email",
        ),
        (
            registration("john2@example.com", 223456789, "JJ-22-JJ"),
            "nif",
        ),
        (
            registration("john3@example.com", 423456789, "AA-20-CC"),
            "licensePlateNumber",
        ),
    ];
    for (body, field) in &cases {
        let r = api.send_json("POST", "/users/createUser", body).await;
        assert_error(&r, 409, "already_registered", Some(field));
    }
    // The plate clash came after the user row was inserted: that row must be gone too.
    assert_eq!(stack.users.app.store.count_users().await.unwrap(), 7);
    let r = api
        .send_json(
            "POST",
            "/users/login",
            &json!({"email": "john3@example.com", "password": "123PasswordX#"}),
        )
        .await;
    assert_eq!(r.status(), 401);

    // A taken plate does not use up one of the three vehicle slots.
    api.login("john@example.com", "123PasswordX#").await;
    let taken = json!({"licensePlateNumber": "19-SJ-63", "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "FUEL"});
    let r = api.send_json("PUT", "/users/vehicle/7", &taken).await;
    assert_error(&r, 409, "already_registered", Some("licensePlateNumber"));
    let again = json!({"licensePlateNumber": "JJ-11-JJ", "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "FUEL"});
    assert_error(
        &api.send_json("PUT", "/users/vehicle/7", &again).await,
        409,
        "already_registered",
        Some("licensePlateNumber"),
    );
    for plate in ["JJ-33-JJ", "JJ-44-JJ"] {
        let v = json!({"licensePlateNumber": plate, "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "FUEL"});
        assert_eq!(
            api.send_json("PUT", "/users/vehicle/7", &v).await.status(),
            202,
            "{plate}"
        );
    }
    assert_eq!(
        stack
            .users
            .app
            .store
            .vehicles(7)
            .await
            .unwrap()
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn login_failures_do_not_say_which_part_was_wrong() {
    let stack = stack().await;
    let mut api = stack.client(Via::GatewayH1).await;
    let unknown = api
        .send_json(
            "POST",
            "/users/login",
            &json!({"email": "nobody@example.com", "password": "123PasswordX#"}),
        )
        .await;
    let wrong = api
        .send_json(
            "POST",
            "/users/login",
            &json!({"email": LEO, "password": "123PasswordX!"}),
        )
        .await;
    assert_error(&unknown, 401, "invalid_credentials", None);
    assert_error(&wrong, 401, "invalid_credentials", None);
    assert_eq!(
        unknown.json()["error"]["message"],
        wrong.json()["error"]["message"]
    );
    let missing = api
        .send_json("POST", "/users/login", &json!({"email": LEO}))
        .await;
    assert_error(&missing, 400, "invalid_field", Some("password"));

    // A blocked account cannot log in, even with the right password, and is told why.
    let mut cm = stack.client(Via::GatewayH1).await;
    cm.login("customermanager@isep.ipp.pt", SEED_PASSWORD).await;
    let block = json!({"status": "BLOCKED", "reason": "Three unpaid visits"});
    let r = cm.send_json("PUT", "/users/4/status", &block).await;
    assert_eq!(r.status(), 200, "{}", r.text());
    let r = api
        .send_json(
            "POST",
            "/users/login",
            &json!({"email": LEO, "password": SEED_PASSWORD}),
        )
        .await;
    assert_error(&r, 403, "forbidden", None);
    assert_eq!(
        r.json()["error"]["message"],
        "this account is blocked: Three unpaid visits"
    );
}

#[tokio::test]
async fn a_failed_grant_changes_no_balance() {
    let stack = stack().await;
    let mut cm = stack.client(Via::GatewayH1).await;
    cm.login("customermanager@isep.ipp.pt", SEED_PASSWORD).await;
    let r = cm
        .send_json(
            "POST",
            "/users/parkies",
            &json!({"userIds": [4, 999], "amount": 10, "reason": "x"}),
        )
        .await;
    assert_error(&r, 404, "user_not_found", None);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("999"),
        "{}",
        r.text()
    );
    let r = cm
        .send_json(
            "POST",
            "/users/parkies",
            &json!({"userIds": [4], "amount": 10, "reason": "x"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    // 4 has 10, 5 has 0: deducting 5 from both must fail as a whole.
    let r = cm
        .send_json(
            "POST",
            "/users/parkies",
            &json!({"userIds": [4, 5], "amount": -5, "reason": "x"}),
        )
        .await;
    assert_error(&r, 409, "insufficient_balance", Some("amount"));
    let store = &stack.users.app.store;
    let four = store.wallet(4).await.unwrap().unwrap();
    assert_eq!((four.parkies, four.parky_events.len()), (10, 1));
    let five = store.wallet(5).await.unwrap().unwrap();
    assert_eq!((five.parkies, five.parky_events.len()), (0, 0));
}

#[tokio::test]
async fn only_a_customer_manager_blocks_only_customers_and_says_why() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(stack) = Stack::start(db).await else {
            continue;
        };
        let mut cm = stack.client(Via::GatewayH1).await;
        cm.login("customermanager@isep.ipp.pt", SEED_PASSWORD).await;
        let mut leo = stack.client(Via::GatewayH1).await;
        leo.login(LEO, SEED_PASSWORD).await;
        let block = json!({"status": "BLOCKED", "reason": "  Three unpaid visits "});
        let events = || async { stack.users.app.outbox.head().await.expect("head") };

        // The refusals change nothing; a caller who may not set a status learns nothing of
        // what a body should hold.
        let unfit = json!({"status": 7});
        assert_error(
            &leo.send_json("PUT", "/users/4/status", &unfit).await,
            403,
            "forbidden",
            None,
        );
        assert_error(
            &leo.send_json("PUT", "/users/4/status", &block).await,
            403,
            "forbidden",
            None,
        );
        assert_error(
            &cm.send_json("PUT", "/users/2/status", &block).await,
            409,
            "not_a_customer",
            None,
        );
        assert_error(
            &cm.send_json("PUT", "/users/999/status", &block).await,
            404,
            "user_not_found",
            None,
        );
        for (body, field) in [
            (json!({"status": "BLOCKED"}), "reason"),
            (json!({"status": "ENABLED"}), "reason"),
            (json!({"status": "BLOCKED", "reason": "   "}), "reason"),
            (json!({"status": "BLOCKED", "reason": "a\u{0}b"}), "reason"),
            (json!({"status": "DISABLED", "reason": "x"}), "status"),
            (json!({"status": "ASLEEP", "reason": "x"}), "status"),
            (json!({"reason": "x"}), "status"),
        ] {
            let r = cm.send_json("PUT", "/users/4/status", &body).await;
            assert_error(&r, 400, "invalid_field", Some(field));
        }
        let before = events().await;
        let login = json!({"email": LEO, "password": SEED_PASSWORD});
        assert_eq!(
            cm.send_json("POST", "/users/login", &login).await.status(),
            200
        );

        // Blocked with why (trimmed), once: the same again changes nothing and says so.
        let r = cm.send_json("PUT", "/users/4/status", &block).await;
        assert_eq!(r.status(), 200, "{db:?}: {}", r.text());
        assert_eq!(
            r.json(),
            json!({"userId": 4, "status": "BLOCKED", "reason": "Three unpaid visits", "changed": true})
        );
        let announced = events().await;
        assert_eq!(announced, before + 1, "{db:?}: customer.changed");
        let r = cm.send_json("PUT", "/users/4/status", &block).await;
        assert_eq!(r.json()["changed"], false);
        assert_eq!(events().await, announced, "nothing announced again");
        let r = cm.send_json("POST", "/users/login", &login).await;
        assert_error(&r, 403, "forbidden", None);
        assert_eq!(
            r.json()["error"]["message"],
            "this account is blocked: Three unpaid visits"
        );

        // Enabled again: the customer signs in.
        let enable = json!({"status": "ENABLED", "reason": "Paid"});
        let r = cm.send_json("PUT", "/users/4/status", &enable).await;
        assert_eq!(
            r.json(),
            json!({"userId": 4, "status": "ENABLED", "reason": "Paid", "changed": true})
        );
        assert_eq!(
            cm.send_json("POST", "/users/login", &login).await.status(),
            200
        );

        // The same block sent twice at once (a double click): one change, one announcement.
        let mut other = stack.client(Via::GatewayH1).await;
        other
            .login("customermanager@isep.ipp.pt", SEED_PASSWORD)
            .await;
        let before = events().await;
        let (a, b) = tokio::join!(
            cm.send_json("PUT", "/users/4/status", &block),
            other.send_json("PUT", "/users/4/status", &block)
        );
        let changed: Vec<_> = [a, b].iter().map(|r| r.json()["changed"].clone()).collect();
        assert!(
            changed.contains(&json!(true)) && changed.contains(&json!(false)),
            "{db:?}: {changed:?}"
        );
        assert_eq!(events().await, before + 1, "{db:?}: announced once");

        // Each change in the supervisors' trail, once, with who and how it was; the refusals
        // and the change that changed nothing are not there.
        assert_error(&cm.get("/users/audit").await, 403, "forbidden", None);
        let mut sup = stack.client(Via::GatewayH1).await;
        sup.login("supervisor@isep.ipp.pt", SEED_PASSWORD).await;
        let trail = sup.get("/users/audit?subject=user%204").await;
        assert_eq!(trail.status(), 200, "{}", trail.text());
        let trail = trail.json();
        let actions: Vec<&str> = trail
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| e["action"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(
            actions,
            ["customer.blocked", "customer.enabled", "customer.blocked"],
            "{db:?}: {trail}"
        );
        let first = &trail[2];
        assert_eq!(first["actorId"], 3, "the customer manager");
        assert_eq!(first["before"]["status"], "ENABLED");
        assert_eq!(
            first["after"],
            json!({"status": "BLOCKED", "reason": "Three unpaid visits"})
        );
        let grant = json!({"userIds": [4], "amount": 5, "reason": "Welcome back"});
        let r = cm.send_json("POST", "/users/parkies", &grant).await;
        assert_eq!(r.status(), 201, "{}", r.text());
        let trail = sup
            .get("/users/audit?action=coins.&subject=user%204")
            .await
            .json();
        assert_eq!(trail.as_array().map(Vec::len), Some(1), "{trail}");
        assert_eq!(trail[0]["action"], "coins.granted");
        let (was, now) = (
            &trail[0]["before"]["parkies"],
            &trail[0]["after"]["parkies"],
        );
        assert_eq!(now.as_i64(), was.as_i64().map(|w| w + 5), "{trail}");
    }
}

fn base64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

#[tokio::test]
async fn a_body_that_stops_coming_is_a_408_not_a_request_held_for_good() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stack = stack().await;
    let mut raw = tokio::net::TcpStream::connect(stack.users.addr())
        .await
        .unwrap();
    raw.write_all(
        b"POST /users/createUser HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          content-length: 100\r\n\r\n{\"firstName\"",
    )
    .await
    .unwrap();
    let mut got = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), raw.read(&mut got))
        .await
        .expect("answered within 10 s")
        .unwrap();
    let got = String::from_utf8_lossy(&got[..n]);
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains(r#""code":"request_timeout""#), "{got}");
    assert!(
        got.contains(&format!(
            "within {} ms",
            crate::support::BODY_TIMEOUT.as_millis()
        )),
        "{got}"
    );
}

/// Thirty wrong passwords in a row through the gateway: the first few are 401s, the rest are
/// held (429 with `Retry-After`) without their password being looked at; an unknown address is
/// held alike; a success clears the count.
async fn failed_logins_hold_the_address(db: Db) {
    let Some(stack) = Stack::start(db).await else {
        return;
    };
    let mut api = stack.client(Via::GatewayH1).await;
    let login =
        |email: &'static str, password: &'static str| json!({"email": email, "password": password});
    let mut statuses = Vec::new();
    let mut held = None;
    for _ in 0..30 {
        let r = api
            .send_json("POST", "/users/login", &login(LEO, "123PasswordX!"))
            .await;
        statuses.push(r.status().as_u16());
        if r.status() == 429 {
            held.get_or_insert(r);
        }
    }
    let free = pms_users::throttle::FREE_FAILURES as usize;
    assert!(
        statuses[..free].iter().all(|&s| s == 401),
        "the first failures are answered as usual: {statuses:?}"
    );
    // Each hold doubles (1 s, 2 s, 4 s): more than a couple more 401s would take seconds of
    // stalls between these requests.
    let unheld = statuses.iter().filter(|&&s| s == 401).count();
    assert!(unheld <= free + 2, "{statuses:?}");
    assert!(
        statuses.iter().all(|&s| s == 401 || s == 429),
        "{statuses:?}"
    );
    let held = held.expect("the address was held");
    assert_error(&held, 429, "too_many_attempts", None);
    let retry: u64 = held
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=900).contains(&retry), "{retry}");

    // While held, the right password gets the same 429: nothing is checked.
    let r = api
        .send_json("POST", "/users/login", &login(LEO, SEED_PASSWORD))
        .await;
    assert_error(&r, 429, "too_many_attempts", None);

    // An address no account has is held the same way, with the same words.
    let mut unknown = Vec::new();
    for _ in 0..(free + 1) {
        let r = api
            .send_json(
                "POST",
                "/users/login",
                &login("nobody@example.com", "123PasswordX!"),
            )
            .await;
        unknown.push(r);
    }
    assert_error(&unknown[free - 1], 401, "invalid_credentials", None);
    assert_error(&unknown[free], 429, "too_many_attempts", None);
    assert_eq!(
        unknown[free].json()["error"]["message"]
            .as_str()
            .map(|m| m.split(';').next()),
        held.json()["error"]["message"]
            .as_str()
            .map(|m| m.split(';').next()),
    );

    // A success clears the count: the same number of failures again is not held. (Another
    // seeded customer, so no hold has to pass first.)
    const MAYA: &str = "mayaGupta@isep.ipp.pt";
    for _ in 0..(free - 1) {
        let r = api
            .send_json("POST", "/users/login", &login(MAYA, "123PasswordX!"))
            .await;
        assert_error(&r, 401, "invalid_credentials", None);
    }
    let r = api
        .send_json("POST", "/users/login", &login(MAYA, SEED_PASSWORD))
        .await;
    assert_eq!(r.status(), 200, "{}", r.text());
    for _ in 0..(free - 1) {
        let r = api
            .send_json("POST", "/users/login", &login(MAYA, "123PasswordX!"))
            .await;
        assert_error(&r, 401, "invalid_credentials", None);
    }
}

#[tokio::test]
async fn failed_logins_hold_the_address_on_sqlite() {
    failed_logins_hold_the_address(Db::Sqlite).await;
}

#[tokio::test]
async fn failed_logins_hold_the_address_on_postgres() {
    failed_logins_hold_the_address(Db::Postgres).await;
}

#[tokio::test]
async fn failures_far_apart_start_the_count_over() {
    let stack = stack().await;
    let store = &stack.users.app.store;
    let t0 = 1_800_000_000_000;
    let apart = i64::try_from(pms_users::throttle::FORGET_AFTER.as_millis()).unwrap() + 1;
    assert_eq!(
        store.login_failed("Someone@Example.com", t0).await.unwrap(),
        (1, 0)
    );
    assert_eq!(
        store
            .login_failed("someone@example.com", t0 + 10)
            .await
            .unwrap(),
        (2, 0)
    );
    let (third, until) = store
        .login_failed("someone@example.com", t0 + 20)
        .await
        .unwrap();
    assert_eq!(
        (third, until),
        (3, t0 + 20 + 1_000),
        "held for a second from the third"
    );
    assert_eq!(
        store
            .login_failed("someone@example.com", t0 + 20 + apart)
            .await
            .unwrap(),
        (1, 0),
        "a failure long after the last counts as the first"
    );
}
