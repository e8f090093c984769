//! PARKY coins the users service awards by itself, on both databases: what a visit earned and
//! the inviter's coins for an invited customer's first visit (from the parks service's
//! `visit.closed`, each credited once however often the event comes), and anniversaries (once a
//! year, also when two rounds run at once). Registration with an invitation code through the
//! gateway, refused beside the field when no customer has it.

use pms_events::Event;
use pms_users::store::coins::VisitEarned;
use serde_json::{json, Value};

use crate::support::{assert_error, registration, Db, Stack, Via, SEED_PASSWORD};

/// `visit.closed` number `id` from parks, as the users service's consumer would hand it over.
fn closed(id: i64, visit: i64, customer: i64, coins: i64) -> (VisitEarned, Event) {
    let payload = json!({"visitId": visit, "parkNumber": 1, "customerId": customer,
        "coinsEarned": coins});
    let event = Event {
        id,
        prev: id - 1,
        source: "parks".into(),
        aggregate_type: "visit".into(),
        aggregate_id: visit.to_string(),
        event_type: "visit.closed".into(),
        version: 1,
        payload: payload.clone(),
        created_at: "2026-12-06T10:00:00Z".into(),
    };
    (serde_json::from_value(payload).expect("visit"), event)
}

async fn wallet(stack: &Stack, user: i64) -> Value {
    let w = stack.users.app.store.wallet(user).await.expect("wallet");
    serde_json::to_value(w.expect("a wallet")).expect("json")
}

#[tokio::test]
async fn an_invitation_pays_once_on_the_friends_first_visit_and_visits_pay_once_each() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(stack) = Stack::start(db).await else {
            continue;
        };
        let mut rui = stack.client(Via::GatewayH1).await;
        rui.login("ruiSoares@isep.ipp.pt", SEED_PASSWORD).await;
        let code = rui.get("/users/parkies/6").await.json()["invitationCode"]
            .as_str()
            .expect("Rui's code")
            .to_owned();
        assert_eq!(code.len(), 10, "{code}");

        // A code nobody has, or one that is no code, is named; Rui's (any case) registers Ana.
        let mut anyone = stack.client(Via::GatewayH1).await;
        let mut ana = registration("ana@example.com", 231_456_789, "AA-11-BB");
        for (bad, status) in [("0123456789", 400), ("12345", 400)] {
            ana["invitationCode"] = json!(bad);
            let r = anyone.send_json("POST", "/users/createUser", &ana).await;
            assert_error(&r, status, "invalid_field", Some("invitationCode"));
        }
        ana["invitationCode"] = json!(code.to_lowercase());
        let r = anyone.send_json("POST", "/users/createUser", &ana).await;
        assert_eq!(r.status(), 201, "{db:?}: {}", r.text());
        let ana_id = r.json()["id"].as_i64().expect("id");
        let rui_before = wallet(&stack, 6).await["parkies"].as_i64().expect("coins");

        // Ana's first visit: her 15 coins and Rui's 100, each once, though the event comes
        // twice (a redelivery: the consumer's position stops it, the award key would too).
        let store = &stack.users.app.store;
        let (v, e) = closed(1, 500, ana_id, 15);
        assert_eq!(
            store.credit_for_visit(&v, 100, &e).await.expect("first"),
            (15, 100)
        );
        assert!(
            store.credit_for_visit(&v, 100, &e).await.is_err(),
            "{db:?}: applied already"
        );
        // Her second visit earns her coins, and Rui nothing more.
        let (v, e) = closed(2, 501, ana_id, 20);
        assert_eq!(
            store.credit_for_visit(&v, 100, &e).await.expect("second"),
            (20, 0)
        );
        // The first again, as a replay from an earlier position would bring it: nothing.
        pms_events::position::rewind(store.db(), "users", "parks", 0)
            .await
            .expect("rewind");
        let (v, e) = closed(1, 500, ana_id, 15);
        assert_eq!(
            store.credit_for_visit(&v, 100, &e).await.expect("replay"),
            (0, 0)
        );
        // A visit of a customer nobody invited, earning nothing: nothing, position kept.
        let (v, e) = closed(2, 502, 5, 0);
        assert_eq!(
            store.credit_for_visit(&v, 100, &e).await.expect("none"),
            (0, 0)
        );

        let ana_wallet = wallet(&stack, ana_id).await;
        assert_eq!(ana_wallet["parkies"], 35, "{db:?}: {ana_wallet}");
        let reasons: Vec<&str> = ana_wallet["parkyEvents"]
            .as_array()
            .expect("events")
            .iter()
            .filter_map(|e| e["reason"].as_str())
            .collect();
        assert_eq!(reasons, ["Visit 500 in park 1", "Visit 501 in park 1"]);
        let rui_wallet = wallet(&stack, 6).await;
        assert_eq!(rui_wallet["parkies"].as_i64(), Some(rui_before + 100));
        let last = rui_wallet["parkyEvents"]
            .as_array()
            .expect("events")
            .last()
            .cloned();
        assert_eq!(
            last.expect("the award")["reason"],
            format!("Invited customer {ana_id}, whose first visit closed (visit 500)")
        );
    }
}

#[tokio::test]
async fn a_run_of_closed_visits_credits_each_once_in_one_transaction() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(stack) = Stack::start(db).await else {
            continue;
        };
        let store = &stack.users.app.store;
        let mut anyone = stack.client(Via::GatewayH1).await;
        let code = wallet(&stack, 6).await["invitationCode"]
            .as_str()
            .expect("Rui's code")
            .to_owned();
        let mut ana = registration("ana@example.com", 231_456_789, "AA-11-BB");
        ana["invitationCode"] = json!(code);
        let r = anyone.send_json("POST", "/users/createUser", &ana).await;
        assert_eq!(r.status(), 201, "{db:?}: {}", r.text());
        let ana_id = r.json()["id"].as_i64().expect("id");
        let (leo, rui) = (
            wallet(&stack, 4).await["parkies"].as_i64().expect("coins"),
            wallet(&stack, 6).await["parkies"].as_i64().expect("coins"),
        );

        // Events 1–4: Ana's first visit, one of no interest, Leo's, Ana's second; one call.
        let visits: Vec<(VisitEarned, Event)> =
            [(1, 700, ana_id, 15), (3, 701, 4, 7), (4, 702, ana_id, 5)]
                .into_iter()
                .map(|(id, visit, customer, coins)| closed(id, visit, customer, coins))
                .collect();
        let mut opened = visits[0].1.clone();
        opened.id = 2;
        opened.prev = 1;
        opened.event_type = "visit.opened".into();
        let run = [&visits[0].1, &opened, &visits[1].1, &visits[2].1];
        let applied = pms_events::Applied::run(run[0], run[3]);
        let only: Vec<VisitEarned> = visits.iter().map(|(v, _)| v.clone()).collect();
        assert_eq!(
            store
                .credit_for_visits(&only, 100, applied)
                .await
                .expect("run"),
            [(15, 100), (7, 0), (5, 0)],
            "{db:?}"
        );
        // The same run again (a redelivery): the position refuses it, nothing moves.
        assert!(store.credit_for_visits(&only, 100, applied).await.is_err());
        assert_eq!(wallet(&stack, ana_id).await["parkies"], 20, "{db:?}");
        assert_eq!(wallet(&stack, 4).await["parkies"].as_i64(), Some(leo + 7));
        assert_eq!(wallet(&stack, 6).await["parkies"].as_i64(), Some(rui + 100));
        assert_eq!(
            pms_events::position::position(store.db(), "users", "parks")
                .await
                .expect("position"),
            4
        );
    }
}

#[tokio::test]
async fn anniversaries_pay_once_a_year_on_the_day() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(stack) = Stack::start(db).await else {
            continue;
        };
        let store = &stack.users.app.store;
        // Leo registered on 2024-02-29, Maya on 2025-03-01, Rui today (not a year yet).
        for (user, day) in [(4, "2024-02-29"), (5, "2025-03-01")] {
            let set: Result<u64, sqlx::Error> = pms_service::repeatable!(store, |conn| {
                sqlx::query("UPDATE users SET registered_on = $1 WHERE id = $2")
                    .bind(day)
                    .bind(user)
                    .execute(&mut *conn)
                    .await
                    .map(|r| r.rows_affected())
            });
            assert_eq!(set.expect("set"), 1);
        }
        let day = |d: &str| d.parse::<jiff::civil::Date>().expect("date");
        let balance = |w: Value| w["parkies"].as_i64().expect("coins");
        let (leo, maya) = (
            balance(wallet(&stack, 4).await),
            balance(wallet(&stack, 5).await),
        );
        // 2025-02-28 (no 29th that year): Leo's first; two rounds at once credit it once.
        let (a, b) = tokio::join!(
            store.award_anniversaries(day("2025-02-28"), 50),
            store.award_anniversaries(day("2025-02-28"), 50)
        );
        assert_eq!(a.expect("round") + b.expect("round"), 1, "{db:?}");
        assert_eq!(
            store
                .award_anniversaries(day("2025-03-01"), 50)
                .await
                .expect("round"),
            0,
            "{db:?}: Maya registered that day"
        );
        assert_eq!(
            store
                .award_anniversaries(day("2026-03-01"), 50)
                .await
                .expect("round"),
            1
        );
        assert_eq!(
            store
                .award_anniversaries(day("2026-03-01"), 50)
                .await
                .expect("round"),
            0
        );
        assert_eq!(
            store
                .award_anniversaries(day("2028-02-29"), 50)
                .await
                .expect("round"),
            1,
            "{db:?}: a leap year has Leo's own day"
        );
        assert_eq!(
            store
                .award_anniversaries(day("2027-02-28"), 0)
                .await
                .expect("none"),
            0
        );
        let leo_wallet = wallet(&stack, 4).await;
        assert_eq!(
            leo_wallet["parkies"].as_i64(),
            Some(leo + 100),
            "{db:?}: {leo_wallet}"
        );
        let last = leo_wallet["parkyEvents"]
            .as_array()
            .expect("events")
            .last()
            .cloned();
        assert_eq!(
            last.expect("award")["reason"],
            "4 year(s) with PMS: happy anniversary"
        );
        assert_eq!(balance(wallet(&stack, 5).await), maya + 50);
    }
}
