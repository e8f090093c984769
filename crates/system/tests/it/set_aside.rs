//! Nothing is set aside silently (issue 58): an event payments cannot apply is shown to
//! supervisors through the gateway, with what, why and since when, and can be tried again; the
//! other roles cannot see or retry it. Both databases.

use pms_events::conn::EventConn;
use pms_events::NewEvent;

use crate::support::{assert_error, System, Via, BOTH};

#[tokio::test]
async fn supervisors_see_set_aside_events_and_try_them_again() {
    for db in BOTH {
        let Some(sys) = System::start(db).await else {
            continue;
        };
        // A visit.closed of a version payments does not know, as a newer parks would write.
        let event = NewEvent {
            aggregate_type: "visit",
            aggregate_id: "999".into(),
            event_type: "visit.closed",
            version: 9,
            payload: r#"{"visitId": 999}"#.into(),
        };
        let parks_db = sys.parks.store.db().clone();
        let appended: Result<i64, sqlx::Error> =
            pms_service::transaction!(parks_db, |tx| tx.append(&event).await);
        let id = appended.expect("appended");
        sys.parks.outbox.committed();
        sys.settled().await;

        let mut supervisor = sys.as_user(Via::H2Tls, "supervisor@isep.ipp.pt").await;
        let listed = supervisor.get("/payments/events/parked").await;
        assert_eq!(listed.status(), 200, "{db:?}: {}", listed.text());
        let listed = listed.json();
        let entries = listed.as_array().expect("a list");
        assert_eq!(entries.len(), 1, "{db:?}: {listed}");
        let entry = &entries[0];
        assert_eq!(entry["source"], "parks");
        assert_eq!(entry["eventId"], id);
        assert_eq!(entry["eventType"], "visit.closed");
        assert_eq!(entry["version"], 9);
        assert!(
            entry["reason"]
                .as_str()
                .is_some_and(|r| r.contains("version 9")),
            "{db:?}: {entry}"
        );
        assert!(entry["parkedAt"].is_string(), "{entry}");
        assert_eq!(entry["payload"]["visitId"], 999);
        // The users service reads visits too (for the coins they earned): it sets the same
        // event aside, on its own list; parks has nothing set aside.
        let users = supervisor.get("/users/events/parked").await.json();
        assert_eq!(users.as_array().map(Vec::len), Some(1), "{db:?}: {users}");
        assert_eq!(
            (&users[0]["consumer"], &users[0]["eventId"]),
            (&"users".into(), &id.into())
        );
        let parks = supervisor.get("/parks/events/parked").await;
        assert_eq!(parks.status(), 200, "{db:?}: {}", parks.text());
        assert_eq!(parks.json(), serde_json::json!([]), "{db:?}");

        // Other roles neither see nor retry.
        let retry = format!("/payments/events/parked/parks/{id}/retry");
        let mut manager = sys.as_user(Via::H1, "parkmanager@isep.ipp.pt").await;
        assert_error(
            &manager.get("/payments/events/parked").await,
            403,
            "forbidden",
            None,
        );
        let refused = manager.send("POST", &retry, &serde_json::Value::Null).await;
        assert_error(&refused, 403, "forbidden", None);
        // On every consuming service: a customer is refused, a malformed id is named, and no
        // token is 401 at the gateway.
        let mut customer = sys.as_user(Via::H1, "ruiSoares@isep.ipp.pt").await;
        let mut nobody = sys.client(Via::H1).await;
        for service in ["users", "parks", "payments"] {
            let list = format!("/{service}/events/parked");
            let retry = format!("/{service}/events/parked/payments/{id}/retry");
            assert_error(&customer.get(&list).await, 403, "forbidden", None);
            let r = customer
                .send("POST", &retry, &serde_json::Value::Null)
                .await;
            assert_error(&r, 403, "forbidden", None);
            assert_eq!(nobody.get(&list).await.status(), 401, "{service}");
            let bad = format!("/{service}/events/parked/parks/x1/retry");
            let r = supervisor
                .send("POST", &bad, &serde_json::Value::Null)
                .await;
            assert_error(&r, 400, "invalid_field", Some("eventId"));
        }

        // Tried again: the consumer applies it (and what came after) again; payments still
        // cannot read version 9, so it is set aside again, nothing else changes.
        let r = supervisor
            .send("POST", &retry, &serde_json::Value::Null)
            .await;
        assert_eq!(r.status(), 200, "{db:?}: {}", r.text());
        assert_eq!(r.json()["fromPosition"], id - 1, "{db:?}: {}", r.text());
        sys.settled().await;
        let listed = supervisor.get("/payments/events/parked").await.json();
        assert_eq!(listed.as_array().map(Vec::len), Some(1), "{db:?}: {listed}");
        assert_eq!(listed[0]["eventId"], id);
        let unknown = supervisor
            .send(
                "POST",
                &format!("/payments/events/parked/parks/{}/retry", id + 1000),
                &serde_json::Value::Null,
            )
            .await;
        assert_error(&unknown, 404, "event_not_found", None);
    }
}
