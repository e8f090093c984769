//! A customer closes their account, on both databases, through the gateway: only with their own
//! token and password; then nothing of the person is left in the users service (the account,
//! vehicles, wallet and failed logins gone, the outbox's events about them erased in place), the
//! closure is announced and kept in the audit trail, the person may sign up again with the same
//! address, tax number and plate, and events that still come for the old account credit and
//! debit nothing. A closure and a grant at once: one is ordered before the other, never half.

use pms_events::conn::EventConn;
use pms_events::Event;
use pms_service::{repeatable, transaction};
use pms_users::store::coins::{CoinsRequested, VisitEarned, CONSUMER};
use pms_users::store::StoreError;
use pms_users::validate::Grant;
use serde_json::{json, Value};

use crate::support::{assert_error, registration, Db, Stack, Via, SEED_PASSWORD};

const RUI: &str = "ruiSoares@isep.ipp.pt";

/// An event from `source` as a consumer would hand it over.
fn event(source: &str, id: i64, event_type: &str, payload: Value) -> Event {
    Event {
        id,
        prev: id - 1,
        source: source.into(),
        aggregate_type: "visit".into(),
        aggregate_id: "900".into(),
        event_type: event_type.into(),
        version: 1,
        payload,
        created_at: "2026-12-06T10:00:00Z".into(),
    }
}

/// The users outbox's events about user `id`, as (type, payload).
async fn events_about(stack: &Stack, id: i64) -> Vec<(String, Value)> {
    let all = stack
        .users
        .app
        .outbox
        .read_after(0, 100_000)
        .await
        .expect("outbox");
    all.into_iter()
        .filter(|e| e.aggregate_type == "customer" && e.aggregate_id == id.to_string())
        .map(|e| (e.event_type, e.payload))
        .collect()
}

#[tokio::test]
async fn a_customer_closes_their_own_account_and_nothing_of_them_stays() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(stack) = Stack::start(db).await else {
            continue;
        };
        let store = &stack.users.app.store;
        let mut cm = stack.client(Via::GatewayH1).await;
        cm.login("customermanager@isep.ipp.pt", SEED_PASSWORD).await;
        let grant = json!({"userIds": [6], "amount": 40, "reason": "welcome"});
        assert_eq!(
            cm.send_json("POST", "/users/parkies", &grant)
                .await
                .status(),
            201
        );
        let coins = store
            .wallet(6)
            .await
            .expect("wallet")
            .expect("Rui's")
            .parkies;
        assert!(coins >= 40);
        let mut rui = stack.client(Via::GatewayH1).await;
        rui.login(RUI, SEED_PASSWORD).await;
        let mut leo = stack.client(Via::GatewayH1).await;
        leo.login("leoKim@isep.ipp.pt", SEED_PASSWORD).await;
        let right = json!({"password": SEED_PASSWORD});
        let wrong = json!({"password": "not Rui's"});

        // Refused, and nothing changes: another customer, staff, no token, a wrong password,
        // a body without one.
        assert_error(
            &leo.send_json("POST", "/users/6/closure", &right).await,
            403,
            "forbidden",
            None,
        );
        assert_error(
            &cm.send_json("POST", "/users/6/closure", &right).await,
            403,
            "forbidden",
            None,
        );
        let mut anyone = stack.client(Via::GatewayH1).await;
        assert_eq!(
            anyone
                .send_json("POST", "/users/6/closure", &right)
                .await
                .status(),
            401
        );
        assert_error(
            &rui.send_json("POST", "/users/6/closure", &wrong).await,
            403,
            "wrong_password",
            Some("password"),
        );
        assert_error(
            &rui.send_json("POST", "/users/6/closure", &json!({})).await,
            400,
            "invalid_field",
            Some("password"),
        );
        let attempt = store.login_record(RUI).await.expect("record");
        assert_eq!(
            attempt.failures, 1,
            "{db:?}: a wrong password counts as a login's"
        );
        assert!(attempt.account.is_some());
        let before = events_about(&stack, 6).await;
        assert!(
            before.iter().any(|(_, p)| p["email"] == RUI),
            "{db:?}: {before:?}"
        );

        // A stay of his that this service set aside (a copy of his plate and number).
        let stay = event(
            "parks",
            40,
            "visit.closed",
            json!({"visitId": 900, "customerId": 6, "nif": 514_884_112, "plate": "46-ON-05"}),
        );
        let parked: Result<(), sqlx::Error> = transaction!(store, |tx| {
            tx.park(CONSUMER, &stay, "cannot read it").await
        });
        parked.expect("parked");

        // Closed: told what went and what stayed, the coins forfeited.
        let r = rui.send_json("POST", "/users/6/closure", &right).await;
        assert_eq!(r.status(), 200, "{db:?}: {}", r.text());
        let told = r.json();
        assert_eq!(told["userId"], 6);
        assert_eq!(told["coinsForfeited"], coins, "{told}");
        assert!(told["closedAt"].as_str().is_some_and(|t| t.ends_with('Z')));
        assert!(told["erased"].as_array().is_some_and(|e| !e.is_empty()));
        let kept = told["kept"].as_array().expect("kept");
        assert!(
            kept.iter()
                .any(|k| k["what"] == "Invoices" && k["why"].as_str().is_some()),
            "{told}"
        );

        // Nothing of Rui is left: no login, no wallet, no vehicles, no failed logins, not
        // listed; his old token finds a closed account, and a second closure says so.
        assert_eq!(store.login_record(RUI).await.expect("record").failures, 0);
        assert_error(
            &anyone
                .send_json(
                    "POST",
                    "/users/login",
                    &json!({"email": RUI, "password": SEED_PASSWORD}),
                )
                .await,
            401,
            "invalid_credentials",
            None,
        );
        assert_eq!(store.wallet(6).await.expect("wallet"), None);
        assert_eq!(store.vehicles(6).await.expect("vehicles"), None);
        assert_error(
            &rui.get("/users/vehicles/6").await,
            404,
            "user_not_found",
            None,
        );
        assert_error(
            &rui.send_json("POST", "/users/6/closure", &right).await,
            410,
            "account_closed",
            None,
        );
        let listed = cm.get("/users/getAllUsers").await.json();
        assert!(
            listed
                .as_array()
                .expect("users")
                .iter()
                .all(|u| u["id"] != 6 && u["email"] != RUI),
            "{listed}"
        );

        // The outbox: every state event about him now says nothing of him, and the closure
        // is announced after them.
        let after = events_about(&stack, 6).await;
        assert_eq!(after.len(), before.len() + 1, "{db:?}");
        let (last, rest) = after.split_last().expect("events");
        assert_eq!(last.0, "customer.closed");
        assert_eq!(last.1["userId"], 6);
        for (kind, payload) in rest {
            assert!(kind == "customer.registered" || kind == "customer.changed");
            assert_eq!(
                (&payload["email"], &payload["nif"], &payload["firstName"]),
                (&json!(""), &json!(0), &json!("")),
                "{db:?}: {payload}"
            );
            assert_eq!(payload["vehicles"], json!([]), "{payload}");
        }

        // The stay set aside says nothing of him either.
        let parked: Result<String, sqlx::Error> = repeatable!(store, |conn| {
            sqlx::query_scalar("SELECT payload FROM parked_events WHERE event_id = 40")
                .fetch_one(&mut *conn)
                .await
        });
        let parked = parked.expect("parked");
        assert!(
            !parked.contains("46-ON-05") && !parked.contains("514884112"),
            "{db:?}: {parked}"
        );

        // The audit trail has the closure, by Rui, without his data.
        let mut boss = stack.client(Via::GatewayH1).await;
        boss.login("supervisor@isep.ipp.pt", SEED_PASSWORD).await;
        let trail = boss.get("/users/audit?action=account.closed").await;
        assert_eq!(trail.status(), 200, "{}", trail.text());
        let text = trail.text();
        let entries = trail.json();
        assert_eq!(entries[0]["actorId"], 6, "{entries}");
        assert_eq!(entries[0]["subject"], "user 6", "{entries}");
        assert!(
            !text.contains("Soares") && !text.contains("46-ON-05"),
            "{text}"
        );

        // Events still on their way for the old account credit and debit nothing.
        let visit: VisitEarned = serde_json::from_value(
            json!({"visitId": 900, "parkNumber": 1, "customerId": 6, "coinsEarned": 12}),
        )
        .expect("visit");
        let closed = event("parks", 1, "visit.closed", json!({}));
        assert_eq!(
            store
                .credit_for_visit(&visit, 100, &closed)
                .await
                .expect("credit"),
            (0, 0)
        );
        let request: CoinsRequested = serde_json::from_value(
            json!({"invoiceId": 77, "visitId": 900, "customerId": 6, "maxCoins": 10}),
        )
        .expect("request");
        let requested = event("payments", 1, "coins.requested", json!({}));
        assert_eq!(
            store
                .debit_for_invoice(&request, &requested)
                .await
                .expect("debit"),
            0
        );

        // The same person may sign up again: a new account, a new number.
        let again = registration(RUI, 514_884_112, "46-ON-05");
        let r = anyone.send_json("POST", "/users/createUser", &again).await;
        assert_eq!(r.status(), 201, "{db:?}: {}", r.text());
        assert_ne!(r.json()["id"], 6);
    }
}

#[tokio::test]
async fn a_closure_and_a_grant_at_once_are_one_before_the_other() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(stack) = Stack::start(db).await else {
            continue;
        };
        let store = &stack.users.app.store;
        let grant = Grant {
            user_ids: vec![5],
            amount: 25,
            reason: "at the same moment".into(),
        };
        let (closed, granted) = tokio::join!(store.close_account(5), store.grant(&grant, 3, None));
        let closed = closed.expect("the closure goes through either way");
        match granted {
            // The grant came first: the closure took its coins with the rest.
            Ok(_) => assert_eq!(closed.coins_forfeited, 25, "{db:?}"),
            // The closure came first: there was no account to grant to.
            Err(e) => {
                assert_eq!(e, StoreError::UsersNotFound(vec![5]), "{db:?}");
                assert_eq!(closed.coins_forfeited, 0, "{db:?}");
            }
        }
        assert_eq!(store.wallet(5).await.expect("wallet"), None);
        assert_eq!(
            store.close_account(5).await,
            Err(StoreError::AccountClosed(5))
        );
        assert_eq!(
            store.close_account(1).await,
            Err(StoreError::NotACustomer(1)),
            "staff accounts are not closed here"
        );
        assert_eq!(
            store.close_account(999).await,
            Err(StoreError::UserNotFound(999))
        );
    }
}
