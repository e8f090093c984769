//! A customer closes their account while one of their cars is inside a park, through the
//! gateway, on both databases: the services' copies of them go as each reads the closure, the
//! invoices stay as issued, the car inside leaves and its stay is invoiced to the same tax
//! number, no car of theirs enters again, and once the car is out the parks service keeps
//! nothing that names them.

use serde_json::{json, Value};

use crate::support::{assert_error, plate_read, Db, Options, System, Via, BOTH, SEED_PASSWORD};

const RUI: i64 = 6;
const RUI_NIF: i64 = 514_884_112;

/// The plates of Rui's stays in parks, oldest first.
async fn stays(sys: &System) -> Vec<String> {
    let plates: Result<Vec<String>, sqlx::Error> = pms_service::repeatable!(sys.parks.store, |c| {
        sqlx::query_scalar("SELECT plate FROM visits WHERE customer_id = $1 ORDER BY id")
            .bind(RUI)
            .fetch_all(&mut *c)
            .await
    });
    plates.expect("stays")
}

/// What parks keeps of Rui: his name, tax number and vehicles.
async fn parks_copy(sys: &System) -> (String, i64, i64) {
    let row: Result<(String, i64, i64), sqlx::Error> =
        pms_service::repeatable!(sys.parks.store, |c| {
            sqlx::query_as(
                "SELECT name, nif, (SELECT count(*) FROM vehicles WHERE customer_id = $1) \
                 FROM customers WHERE id = $1",
            )
            .bind(RUI)
            .fetch_one(&mut *c)
            .await
        });
    row.expect("parks' copy")
}

/// What payments keeps of Rui: his customer rows and vehicles, and his invoices' (nif, plate).
async fn payments_copy(sys: &System) -> (i64, Vec<(i64, String)>) {
    let kept: Result<(i64, Vec<(i64, String)>), sqlx::Error> =
        pms_service::repeatable!(sys.payments.store, |c| async {
            let copies: i64 = sqlx::query_scalar(
                "SELECT (SELECT count(*) FROM customers WHERE id = $1) \
                 + (SELECT count(*) FROM vehicles WHERE customer_id = $1)",
            )
            .bind(RUI)
            .fetch_one(&mut *c)
            .await?;
            let invoices = sqlx::query_as(
                "SELECT nif, plate FROM invoices WHERE customer_id = $1 ORDER BY id",
            )
            .bind(RUI)
            .fetch_all(&mut *c)
            .await?;
            Ok((copies, invoices))
        }
        .await);
    kept.expect("payments' copy")
}

fn opened(r: &Value) -> bool {
    r["success"] == true
}

#[tokio::test]
async fn a_closed_account_is_erased_everywhere_but_its_invoices_and_its_car_gets_out() {
    for db in BOTH {
        if let Some(sys) = System::start(db).await {
            closes_with_a_car_inside(&sys, &format!("{db:?}")).await;
        }
    }
}

/// The same, with every event between the services going through a real NATS JetStream.
#[tokio::test]
async fn a_closure_reaches_the_copies_across_the_broker() {
    let options = Options {
        nats: true,
        ..Default::default()
    };
    if let Some(sys) = System::start_with(Db::Sqlite, options).await {
        closes_with_a_car_inside(&sys, "NATS").await;
    }
}

/// Rui closes his account with a stay over and a car inside; `db` names the run in failures.
async fn closes_with_a_car_inside(sys: &System, db: &str) {
    let mut dev = sys.client(Via::H1).await;
    let (entrance, exit) = (sys.barrier_key(1), sys.barrier_key(2));
    let pass = |barrier: i64, plate: &str, at: &str| plate_read(barrier, 1, plate, at);

    // A stay over and invoiced, and a car inside.
    let r = dev
        .barrier(
            "entrance",
            &entrance,
            &pass(1, "46-ON-05", "2026-12-07T09:00:00Z"),
        )
        .await;
    assert!(opened(&r.json()), "{db}: {}", r.text());
    let r = dev
        .barrier("exit", &exit, &pass(2, "46-ON-05", "2026-12-07T10:00:00Z"))
        .await;
    assert!(opened(&r.json()), "{}", r.text());
    let r = dev
        .barrier(
            "entrance",
            &entrance,
            &pass(1, "32-VT-07", "2026-12-07T11:00:00Z"),
        )
        .await;
    assert!(opened(&r.json()), "{}", r.text());
    sys.settled().await;
    assert_eq!(
        payments_copy(sys).await.1,
        [(RUI_NIF, "46-ON-05".to_owned())]
    );

    // Rui closes his account; the services read it.
    let mut rui = sys.as_user(Via::H1, "ruiSoares@isep.ipp.pt").await;
    let r = rui
        .send(
            "POST",
            "/users/6/closure",
            &json!({"password": SEED_PASSWORD}),
        )
        .await;
    assert_eq!(r.status(), 200, "{db}: {}", r.text());
    sys.settled().await;

    // Payments forgot him but keeps the invoice as issued; parks erased the stay that is
    // over and keeps what the car inside needs.
    assert_eq!(
        payments_copy(sys).await,
        (0, vec![(RUI_NIF, "46-ON-05".to_owned())]),
        "{db}"
    );
    let plates = stays(sys).await;
    assert!(plates[0].starts_with("erased-"), "{db}: {plates:?}");
    assert_eq!(plates[1], "32-VT-07");
    assert_eq!(parks_copy(sys).await, ("Rui Soares".to_owned(), RUI_NIF, 1));

    // No car of his enters; the one inside leaves, and its stay is invoiced to his number.
    let r = dev
        .barrier(
            "entrance",
            &entrance,
            &pass(1, "46-ON-05", "2026-12-07T12:00:00Z"),
        )
        .await;
    assert!(!opened(&r.json()), "{db}: {}", r.text());
    let r = dev
        .barrier("exit", &exit, &pass(2, "32-VT-07", "2026-12-07T13:00:00Z"))
        .await;
    assert!(opened(&r.json()), "{db}: {}", r.text());
    let r = dev
        .barrier(
            "entrance",
            &entrance,
            &pass(1, "32-VT-07", "2026-12-07T14:00:00Z"),
        )
        .await;
    assert!(!opened(&r.json()), "{db}: {}", r.text());
    assert!(
        r.text().contains("account is closed"),
        "the driver is told why: {}",
        r.text()
    );
    sys.settled().await;
    assert_eq!(
        payments_copy(sys).await.1,
        [
            (RUI_NIF, "46-ON-05".to_owned()),
            (RUI_NIF, "32-VT-07".to_owned())
        ],
        "{db}"
    );

    // Once it is out (the grace is none here), the erasure round leaves nothing of him.
    assert_eq!(
        sys.parks
            .store
            .finish_erasures(std::time::Duration::ZERO)
            .await
            .expect("round"),
        [RUI]
    );
    assert!(stays(sys).await.iter().all(|p| p.starts_with("erased-")));
    assert_eq!(parks_copy(sys).await, (String::new(), 0, 0));

    // The events in the parks outbox say nothing of him once every reader has them, nor does
    // the first invoice's (the second was issued after the closure, to his number, as the
    // invoice itself is; its event goes with the outbox's retention).
    let (parks_out, payments_out) = (sys.parks.outbox.clone(), sys.payments.outbox.clone());
    pms_testkit::assert_eventually("the stays' and invoice's events erased", 3000, || {
        let (parks_out, payments_out) = (parks_out.clone(), payments_out.clone());
        async move {
            let _ = pms_events::erasure::settle(parks_out.db()).await;
            let _ = pms_events::erasure::settle(payments_out.db()).await;
            let parks_events = parks_out.read_after(0, 10_000).await.unwrap_or_default();
            let quiet = parks_events.iter().all(|e| {
                let text = e.payload.to_string();
                !["46-ON-05", "32-VT-07", "Rui Soares", &RUI_NIF.to_string()]
                    .iter()
                    .any(|personal| text.contains(personal))
            });
            let payments_events = payments_out.read_after(0, 10_000).await.unwrap_or_default();
            let first = payments_events
                .iter()
                .find(|e| e.event_type == "invoice.issued")
                .map(|e| (e.payload["nif"].clone(), e.payload["plate"].clone()));
            quiet && first == Some((json!(0), json!("")))
        }
    })
    .await;

    // Across the broker, his data never travelled in the clear, and once the keys' time has
    // come (at once here) none of it opens: a reader starting now gets it erased. That includes
    // the events of the car that left after the closure, sealed under a key of their own,
    // which goes after the same delay.
    if let Some((_, nats)) = &sys.broker {
        // (The relay's own sweep, once a minute, may have been first.)
        nats.erase_due_keys().await.expect("sweep");
        // (No short text: a sealed box is base64, where "Rui" turns up by chance.)
        let nif = RUI_NIF.to_string();
        let personal = [
            "46-ON-05",
            "32-VT-07",
            "Rui Soares",
            "Soares",
            "ruiSoares@",
            &nif,
        ];
        for source in ["users", "parks", "payments"] {
            let (read, bodies) = nats.read_all(source).await.expect("read the stream");
            let raw = String::from_utf8_lossy(&bodies.concat()).into_owned();
            assert!(
                !personal.iter().any(|p| raw.contains(p)),
                "{source} in the clear: {raw}"
            );
            for event in read {
                let text = event.payload.to_string();
                if event.payload["userId"] == RUI || event.payload["customerId"] == RUI {
                    assert!(
                        !personal.iter().any(|p| text.contains(p)),
                        "{source} {} opens: {text}",
                        event.event_type
                    );
                }
            }
        }
    }

    // His old token finds no account; a supervisor still reads the park's day.
    assert_error(
        &rui.get("/users/vehicles/6").await,
        404,
        "user_not_found",
        None,
    );
    let mut boss = sys.as_user(Via::H1, "supervisor@isep.ipp.pt").await;
    let history = boss.get("/parks/parkingHistory/6").await;
    assert!(
        !history.text().contains("46-ON-05") && !history.text().contains("32-VT-07"),
        "{}",
        history.text()
    );
}
