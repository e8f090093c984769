//! The whole API, the way the FrontOffice and the benchmarks use it, through the real gateway
//! over HTTP/1.1 and HTTP/2 with TLS, on SQLite and PostgreSQL.

use serde_json::json;

use crate::support::{assert_error, registration, Db, Stack, Via, SEED_PASSWORD};

async fn walkthrough(db: Db, via: Via) {
    let Some(stack) = Stack::start(db).await else {
        return;
    };
    let mut staff = stack.client(via).await;
    let login = staff
        .login("customermanager@isep.ipp.pt", SEED_PASSWORD)
        .await;
    assert_eq!(login["name"], "Customer");
    // PMS adds the caller's id and role, so a client need not decode the token to find them.
    assert_eq!(login["id"], 3);
    assert_eq!(login["role"], "CUSTOMER_MANAGER");

    // The seeded users, in id order, with the published shape.
    let r = staff.get("/users/getAllUsers").await;
    assert_eq!(r.status(), 200, "{}", r.text());
    assert!(r.header("x-request-id").is_some());
    let all = r.json();
    let all = all.as_array().expect("array");
    assert_eq!(all.len(), 6);
    let ids: Vec<i64> = all.iter().map(|u| u["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(
        all[4],
        json!({"id": 5, "firstName": "Maya", "lastName": "Gupta", "email": "mayaGupta@isep.ipp.pt",
               "nif": 506779330, "parkingHistory": [], "totalParkies": 0,
               "vehicles": [
                   {"licensePlateNumber": "19-SJ-63", "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "FUEL"},
                   {"licensePlateNumber": "AH-43-MR", "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "ELECTRIC"}],
               "role": "CUSTOMER", "paymentMethod": "PAYPAL", "userStatus": "ENABLED"})
    );
    assert_eq!(all[5]["vehicles"].as_array().unwrap().len(), 3);
    let r = staff.get("/users/getAllUsers?limit=2&offset=3").await;
    let page: Vec<i64> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["id"].as_i64().unwrap())
        .collect();
    assert_eq!(page, vec![4, 5]);

    // Registration is public; the new customer logs in (e-mail case does not matter).
    let mut me = stack.client(via).await;
    let r = me
        .send_json(
            "POST",
            "/users/createUser",
            &registration("john.doe@isep.ipp.pt", 123456789, "ab-12-aa"),
        )
        .await;
    assert_eq!(r.status(), 201, "{}", r.text());
    let created = r.json();
    assert_eq!(created["id"], 7);
    assert_eq!(created["role"], "CUSTOMER");
    assert_eq!(created["vehicles"][0]["licensePlateNumber"], "AB-12-AA");
    assert!(created.get("password").is_none() && !r.text().contains("argon2"));
    me.login("John.Doe@ISEP.ipp.pt", "123PasswordX#").await;
    let my = created["id"].as_i64().unwrap();

    // Vehicles: up to three, listed in the order added.
    let car = json!({"licensePlateNumber": "ZZ-45-XA", "vehicleType": "MOTORCYCLE", "vehicleEnergySource": "GPL"});
    let r = me
        .send_json("PUT", &format!("/users/vehicle/{my}"), &car)
        .await;
    assert_eq!(r.status(), 202, "{}", r.text());
    assert_eq!(r.json(), car);
    let r = me.get(&format!("/users/vehicles/{my}")).await;
    let plates: Vec<String> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["licensePlateNumber"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(plates, ["AB-12-AA", "ZZ-45-XA"]);
    let third = json!({"licensePlateNumber": "12-AB-34", "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "ELECTRIC"});
    assert_eq!(
        me.send_json("PUT", &format!("/users/vehicle/{my}"), &third)
            .await
            .status(),
        202
    );
    let fourth = json!({"licensePlateNumber": "12-34-CD", "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "FUEL"});
    let r = me
        .send_json("PUT", &format!("/users/vehicle/{my}"), &fourth)
        .await;
    assert_error(&r, 409, "too_many_vehicles", Some("vehicles"));

    // Payment method.
    assert_eq!(
        me.get(&format!("/users/paymentMethod/{my}")).await.json(),
        json!({"paymentMethod": "NOT_DEFINED"})
    );
    let r = me
        .send_json(
            "PUT",
            &format!("/users/paymentMethod/{my}"),
            &json!({"paymentMethod": "DEBIT"}),
        )
        .await;
    assert_eq!(r.status(), 202, "{}", r.text());
    assert_eq!(r.json(), json!({"paymentMethod": "DEBIT"}));
    assert_eq!(
        me.get(&format!("/users/paymentMethod/{my}")).await.json(),
        json!({"paymentMethod": "DEBIT"})
    );
    let r = me
        .send_json(
            "PUT",
            &format!("/users/paymentMethod/{my}"),
            &json!({"paymentMethod": "NOT_DEFINED"}),
        )
        .await;
    assert_error(&r, 400, "invalid_field", Some("paymentMethod"));

    // PARKY coins: a grant to two users, recorded per user with the manager's id.
    let r = staff
        .send_json("POST", "/users/parkies", &json!({"userIds": [my, "4"], "amount": 50, "reason": "For outstanding contributions to the park"}))
        .await;
    assert_eq!(r.status(), 201, "{}", r.text());
    assert_eq!(r.json(), json!(true));
    let r = staff
        .send_json(
            "POST",
            "/users/parkies",
            &json!({"userIds": [my], "amount": -20, "reason": "Correction"}),
        )
        .await;
    assert_eq!(r.status(), 201, "{}", r.text());
    // A reason with a NUL was a 500 from the database's length check (found by fuzzing).
    let r = staff
        .send_json(
            "POST",
            "/users/parkies",
            &json!({"userIds": [my], "amount": 5, "reason": "\u{0}Correction"}),
        )
        .await;
    assert_error(&r, 400, "invalid_field", Some("reason"));
    let wallet = me.get(&format!("/users/parkies/{my}")).await.json();
    assert_eq!(wallet["userId"], my);
    assert_eq!(wallet["parkies"], 30);
    let events = wallet["parkyEvents"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["amount"], 50);
    assert_eq!(events[0]["managerId"], 3);
    assert_eq!(events[1]["amount"], -20);
    let t = events[0]["transactionTime"].as_str().unwrap();
    assert_eq!(t.len(), "2023-11-28T21:15:04.422718".len(), "{t}");
    assert_eq!(&t[10..11], "T");

    // The report: customers only, most coins first.
    let top = me.get("/userReport/top10Parky").await.json();
    assert_eq!(
        top[0],
        json!({"name": "Leo Kim", "email": "leoKim@isep.ipp.pt", "parkies": 50})
    );
    assert_eq!(
        top[1],
        json!({"name": "John Doe", "email": "john.doe@isep.ipp.pt", "parkies": 30})
    );
    assert_eq!(
        top.as_array().unwrap().len(),
        4,
        "three seeded customers and John"
    );

    // The list now shows the new user with their balance and vehicles.
    let all = staff.get("/users/getAllUsers").await.json();
    assert_eq!(all.as_array().unwrap().len(), 7);
    assert_eq!(all[6]["totalParkies"], 30);
    assert_eq!(all[6]["vehicles"].as_array().unwrap().len(), 3);
    assert_eq!(all[6]["paymentMethod"], "DEBIT");
}

#[tokio::test]
async fn sqlite_through_the_gateway_over_http1() {
    walkthrough(Db::Sqlite, Via::GatewayH1).await;
}

#[tokio::test]
async fn sqlite_through_the_gateway_over_h2_tls() {
    walkthrough(Db::Sqlite, Via::GatewayH2Tls).await;
}

#[tokio::test]
async fn postgres_through_the_gateway_over_http1() {
    walkthrough(Db::Postgres, Via::GatewayH1).await;
}

#[tokio::test]
async fn postgres_through_the_gateway_over_h2_tls() {
    walkthrough(Db::Postgres, Via::GatewayH2Tls).await;
}

#[tokio::test]
async fn seeding_happens_once_and_can_be_switched_off() {
    let db = crate::support::Database::fresh(Db::Sqlite).unwrap();
    let first = crate::support::users(&db.url, true).await;
    assert_eq!(first.app.store.count_users().await.unwrap(), 6);
    // A second start on the same database does not seed again.
    assert!(!first.app.init().await.unwrap());
    first.spawned.shutdown().await;

    let empty = crate::support::Database::fresh(Db::Sqlite).unwrap();
    let mut cfg = crate::support::config(&empty.url);
    cfg.seed_password = None;
    let app = pms_users::App::new(cfg).unwrap();
    assert!(!app.init().await.unwrap());
    assert_eq!(app.store.count_users().await.unwrap(), 0);
}

/// The production key set-up: the users service signs with an Ed25519 private key, the gateway
/// and the service verify with the public half only, and an HS256 token is refused by both.
#[tokio::test]
async fn eddsa_tokens_from_login_pass_the_gateway_and_hs256_ones_do_not() {
    use pms_auth::{Algorithm, KeySource, Signer, VerifierConfig};

    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let public = dir.path().join("jwt-public.pem");
    std::fs::write(&public, kp.public_key_pem()).unwrap();
    let db = crate::support::Database::fresh(Db::Sqlite).unwrap();
    let mut cfg = crate::support::config(&db.url);
    cfg.signer = Signer::from_pem(Algorithm::EdDSA, kp.serialize_pem().as_bytes()).unwrap();
    cfg.verifier = VerifierConfig {
        algorithms: vec![Algorithm::EdDSA],
        keys: KeySource::PublicKeyPem(kp.public_key_pem().into_bytes()),
        ..VerifierConfig::hs256(Vec::new())
    };
    let users = crate::support::users_with(cfg).await;
    let (plain, _tls, _gw) = crate::support::gateway_with_jwt(
        users.addr(),
        &format!(
            "algorithms = [\"EdDSA\"]\npublic_key_file = {:?}",
            public.display().to_string()
        ),
    )
    .await;

    let mut api = crate::support::Api::connect(plain).await;
    api.login("supervisor@isep.ipp.pt", SEED_PASSWORD).await;
    let only_eddsa = pms_auth::Verifier::new(VerifierConfig {
        algorithms: vec![Algorithm::EdDSA],
        keys: KeySource::PublicKeyPem(kp.public_key_pem().into_bytes()),
        ..VerifierConfig::hs256(Vec::new())
    })
    .unwrap();
    let claims = only_eddsa
        .verify(api.token.as_ref().unwrap())
        .await
        .unwrap();
    assert_eq!(claims.text("sub").as_deref(), Some("1"));
    assert_eq!(claims.text("iss").as_deref(), Some("pms-users"));
    assert!(claims.text("jti").is_some() && claims.text("iat").is_some());
    assert_eq!(api.get("/users/getAllUsers").await.status(), 200);

    // An HS256 token with the same claims (as if someone knew an old shared secret) is refused
    // by the gateway and by the service.
    let hs = crate::support::signer().issue("1", "SUPERVISOR").unwrap();
    api.token = Some(hs.clone());
    assert_error(
        &api.get("/users/getAllUsers").await,
        401,
        "invalid_token",
        None,
    );
    let mut direct = crate::support::Api::connect(users.addr()).await;
    direct.token = Some(hs);
    assert_error(
        &direct.get("/users/getAllUsers").await,
        401,
        "invalid_token",
        None,
    );
}
