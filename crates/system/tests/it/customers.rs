//! A customer blocked by a customer manager: the users service announces it, the parks service
//! refuses their cars at its entrances with the original's message, and lets a car already
//! inside leave; enabled again, their cars enter.

use serde_json::json;

use crate::support::{plate_read, System, Via, BOTH};

#[tokio::test]
async fn a_blocked_customers_cars_are_refused_at_entrances_and_can_always_leave() {
    for db in BOTH {
        let Some(sys) = System::start(db).await else {
            continue;
        };
        let mut dev = sys.client(Via::H1).await;
        let mut cm = sys.as_user(Via::H1, "customermanager@isep.ipp.pt").await;
        let (entrance, exit) = (sys.barrier_key(1), sys.barrier_key(2));
        let at = |barrier: i64, plate: &str, time: &str| plate_read(barrier, 1, plate, time);

        // Maya (user 5) has two cars; the first is inside when she is blocked.
        let r = dev
            .barrier(
                "entrance",
                &entrance,
                &at(1, "19-SJ-63", "2024-01-10T09:00:00Z"),
            )
            .await;
        assert_eq!(r.json()["success"], true, "{db:?}: {}", r.text());
        let block = json!({"status": "BLOCKED", "reason": "Unpaid visits"});
        let r = cm.send("PUT", "/users/5/status", &block).await;
        assert_eq!(r.status(), 200, "{db:?}: {}", r.text());
        sys.settled().await;

        let r = dev
            .barrier(
                "entrance",
                &entrance,
                &at(1, "AH-43-MR", "2024-01-10T09:30:00Z"),
            )
            .await;
        assert_eq!(r.json()["success"], false, "{db:?}: blocked: {}", r.text());
        assert_eq!(
            r.json()["message"],
            "You have reached the maximum number of unpaid parking sessions. Please pay your \
             parking sessions or contact the park manager."
        );
        let r = dev
            .barrier("exit", &exit, &at(2, "19-SJ-63", "2024-01-10T10:00:00Z"))
            .await;
        assert_eq!(
            r.json()["success"],
            true,
            "{db:?}: a car inside leaves: {}",
            r.text()
        );

        let r = cm
            .send(
                "PUT",
                "/users/5/status",
                &json!({"status": "ENABLED", "reason": "Paid"}),
            )
            .await;
        assert_eq!(r.json()["changed"], true, "{}", r.text());
        sys.settled().await;
        let r = dev
            .barrier(
                "entrance",
                &entrance,
                &at(1, "AH-43-MR", "2024-01-10T10:30:00Z"),
            )
            .await;
        assert_eq!(
            r.json()["success"],
            true,
            "{db:?}: enabled again: {}",
            r.text()
        );
    }
}
