//! PARKY coins spent and earned for real, exactly once: the discount of spec §5.5 comes off the
//! invoice and the coins leave the wallet with an event naming the invoice; the visit's own
//! earnings arrive with an event naming the visit and pay nothing of it; applying the events
//! again spends and credits nothing more.

use serde_json::json;

use crate::support::{plate_read, System, Via, BOTH};

#[tokio::test]
async fn coins_pay_part_of_a_visit_once() {
    for db in BOTH {
        let Some(sys) = System::start(db).await else {
            continue;
        };
        let mut cm = sys.as_user(Via::H1, "customermanager@isep.ipp.pt").await;
        let r = cm
            .send(
                "POST",
                "/users/parkies",
                &json!({"userIds": [6], "amount": 50, "reason": "welcome"}),
            )
            .await;
        assert_eq!(r.status(), 201, "{}", r.text());
        let mut rui = sys.as_user(Via::H1, "ruiSoares@isep.ipp.pt").await;
        // Only Rui may set Rui's flag.
        let mut leo = sys.as_user(Via::H1, "leoKim@isep.ipp.pt").await;
        let r = leo.coin_flag(6, true).await;
        assert_eq!(r.status(), 403, "{}", r.text());
        let r = rui.coin_flag(6, true).await;
        assert_eq!(r.json(), json!({"response": "Success"}));
        assert_eq!(rui.get("/parks/getUserParkyFlag/6").await.json(), true);

        // Spec §5.11 example 3 on the park's clock: 10:00–11:20 local, €1.20, 50 coins = €0.50.
        let mut dev = sys.client(Via::H1).await;
        dev.barrier(
            "entrance",
            &sys.barrier_key(1),
            &plate_read(1, 1, "46-ON-05", "2024-07-02T09:00:00Z"),
        )
        .await;
        let r = dev
            .barrier(
                "exit",
                &sys.barrier_key(2),
                &plate_read(2, 1, "46-ON-05", "2024-07-02T10:20:00Z"),
            )
            .await;
        assert_eq!(
            r.json()["message"],
            "Have a nice day Rui Soares! Your total will be 0.7€! With a discount of 0.5€. \
             You earned 35 PARKY coins.",
            "{db:?}"
        );
        sys.settled().await;
        let wallet = rui.get("/users/parkies/6").await.json();
        assert_eq!(
            wallet["parkies"], 35,
            "{db:?}: earned, after 50 spent: {wallet}"
        );
        let events = wallet["parkyEvents"].as_array().expect("events");
        let by = |amount: i64| {
            events
                .iter()
                .find(|e| e["amount"] == amount)
                .expect("event")
        };
        let invoice = rui.get("/payments/mine").await.json()[0].clone();
        assert_eq!(by(-50)["reason"], format!("Invoice {}", invoice["invoice"]));
        assert_eq!(
            by(35)["reason"],
            format!("Visit {} in park 1", invoice["visitId"]),
            "{db:?}: {wallet}"
        );
        assert_eq!(invoice["coins"], 50);
        assert_eq!(invoice["discount"], 0.5);
        assert_eq!(invoice["finalPrice"], 0.7);
        // The flag was one-shot.
        assert_eq!(rui.get("/parks/getUserParkyFlag/6").await.json(), false);

        // Apply every event of the saga again (a redelivery, or a crash before positions were
        // kept): no second debit, no second invoice.
        for (db_, name, source) in [
            (sys.payments.store.db().clone(), "payments", "parks"),
            (sys.users.store.db().clone(), "users", "payments"),
            (sys.users.store.db().clone(), "users", "parks"),
            (sys.payments.store.db().clone(), "payments", "users"),
        ] {
            pms_events::position::rewind(&db_, name, source, 0)
                .await
                .expect("rewind");
        }
        sys.parks.outbox.committed();
        sys.payments.outbox.committed();
        sys.users.outbox.committed();
        sys.settled().await;
        let wallet = rui.get("/users/parkies/6").await.json();
        assert_eq!(wallet["parkies"], 35);
        assert_eq!(
            wallet["parkyEvents"].as_array().map(Vec::len),
            Some(3),
            "{db:?}: {wallet}"
        );
        assert_eq!(
            rui.get("/payments/mine")
                .await
                .json()
                .as_array()
                .map(Vec::len),
            Some(1)
        );
    }
}
