//! An operator running a park of their own, through the gateway as the front office would: a
//! park manager creates a park with spots, two barriers and a display, issues the barriers'
//! keys, a customer's car goes in and out and is invoiced, the park is closed to new cars (a
//! car is refused, the one inside leaves), and a supervisor reads every step in the audit trail.

use serde_json::{json, Value};

use crate::support::{assert_error, System, Via, BOTH};

fn passage(barrier: i64, park: i64, plate: &str, at: &str) -> Value {
    json!({"barrierID": barrier, "parkID": park, "plateNumber": plate, "date": at})
}

#[tokio::test]
async fn a_park_made_from_nothing_takes_cars_bills_them_and_is_audited() {
    for db in BOTH {
        let Some(sys) = System::start(db).await else {
            continue;
        };
        let mut pm = sys.as_user(Via::H1, "parkmanager@isep.ipp.pt").await;
        let mut dev = sys.client(Via::H1).await;

        // Refusals first: they change nothing.
        let mut rui = sys.as_user(Via::H1, "ruiSoares@isep.ipp.pt").await;
        let park = json!({"name": "Aveiro Station", "address": "Largo da Estação",
            "latitude": 40.6436, "longitude": -8.641, "timeZone": "Europe/Lisbon",
            "parkiesPerHour": 10});
        assert_error(
            &rui.send("POST", "/parks", &park).await,
            403,
            "forbidden",
            None,
        );
        let mut bad = park.clone();
        bad["timeZone"] = json!("Europe/Atlantis");
        assert_error(
            &pm.send("POST", "/parks", &bad).await,
            400,
            "invalid_field",
            Some("timeZone"),
        );
        let mut bad = park.clone();
        bad["openingHours"] = json!({"weekly": {"monday": [{"from": "22:00", "to": "07:00"}]}});
        assert_error(
            &pm.send("POST", "/parks", &bad).await,
            400,
            "invalid_field",
            Some("openingHours"),
        );
        let mut bad = park.clone();
        bad["parkNumber"] = json!(1);
        assert_error(
            &pm.send("POST", "/parks", &bad).await,
            409,
            "park_number_taken",
            Some("parkNumber"),
        );

        let r = pm.send("POST", "/parks", &park).await;
        assert_eq!(r.status(), 201, "{db:?}: {}", r.text());
        assert_eq!(r.header("location"), Some("/parks/6"));
        let (park_id, number) = (r.json()["parkId"].as_i64().expect("id"), 6);
        assert_eq!(r.json()["capacity"], 0);
        assert_eq!(pm.get("/parks/6").await.json()["name"], "Aveiro Station");

        let spots = json!({"floorLevel": "A", "spotVehicleType": "AUTOMOBILE",
            "spotType": "FUEL", "count": 2});
        let r = pm.send("POST", "/parks/6/spots", &spots).await;
        assert_eq!(r.status(), 201, "{}", r.text());
        assert_eq!(r.json()["created"], json!(["A1", "A2"]));
        assert_eq!(r.json()["capacity"], 2);
        assert_error(
            &pm.send("POST", "/parks/6/spots", &spots).await,
            409,
            "spot_number_taken",
            Some("numbers"),
        );

        let barrier =
            |n: &str, direction: &str| json!({"barrierNumber": n, "direction": direction});
        let r = pm
            .send("POST", "/parks/6/barriers", &barrier("E1", "ENTRANCE"))
            .await;
        assert_eq!(r.status(), 201, "{}", r.text());
        let entrance = r.json()["barrierId"].as_i64().expect("entrance");
        let r = pm
            .send("POST", "/parks/6/barriers", &barrier("X1", "EXIT"))
            .await;
        let exit = r.json()["barrierId"].as_i64().expect("exit");
        let r = pm
            .send(
                "POST",
                "/parks/6/displays",
                &json!({"displayNumber": "D1", "barrierID": exit}),
            )
            .await;
        assert_eq!(r.status(), 201, "{}", r.text());
        let display = r.json()["displays"][0]["displayId"]
            .as_i64()
            .expect("display");

        for (method, path, body, status, code, field) in [
            (
                "PATCH",
                "/parks/6",
                json!({"latitude": 91}),
                400,
                "invalid_field",
                Some("latitude"),
            ),
            (
                "PATCH",
                "/parks/6",
                json!({"name": " "}),
                400,
                "invalid_field",
                Some("name"),
            ),
            (
                "PATCH",
                "/parks/99",
                json!({"name": "X"}),
                404,
                "park_not_found",
                None,
            ),
            (
                "POST",
                "/parks/6/spots",
                json!({"floorLevel": "-1", "spotVehicleType": "AUTOMOBILE",
                "spotType": "FUEL", "count": 1, "prefix": "B-"}),
                400,
                "invalid_field",
                Some("prefix"),
            ),
            (
                "POST",
                "/parks/6/spots",
                json!({"floorLevel": "B", "spotVehicleType": "AUTOMOBILE",
                "spotType": "FUEL", "count": 501}),
                400,
                "invalid_field",
                Some("count"),
            ),
            (
                "POST",
                "/parks/6/barriers",
                json!({"barrierNumber": "E1", "direction": "EXIT"}),
                409,
                "barrier_number_taken",
                Some("barrierNumber"),
            ),
            (
                "POST",
                "/parks/6/barriers",
                json!({"barrierNumber": "E 1", "direction": "EXIT"}),
                400,
                "invalid_field",
                Some("barrierNumber"),
            ),
            (
                "POST",
                "/parks/6/displays",
                json!({"displayNumber": "D9", "barrierID": 1}),
                404,
                "barrier_not_found",
                None,
            ),
            (
                "POST",
                "/parks/6/displays",
                json!({"displayNumber": "D1", "barrierID": exit}),
                409,
                "display_number_taken",
                Some("displayNumber"),
            ),
            (
                "POST",
                "/parks/devices/6/key",
                json!({"device": "DISPLAY", "deviceID": 1}),
                404,
                "display_not_found",
                None,
            ),
        ] {
            let r = pm.send(method, path, &body).await;
            assert_error(&r, status, code, field);
        }
        assert_eq!(
            rui.send(
                "POST",
                "/parks/devices/6/key",
                &json!({"device": "BARRIER", "deviceID": entrance})
            )
            .await
            .status(),
            403,
            "a customer issues no key"
        );
        // No other park manager's operation is a customer's either, and their refusal changes
        // nothing (the trail read at the end has exactly the manager's steps).
        for (method, path, body) in [
            ("PATCH", "/parks/6", json!({"entrancesOpen": false})),
            (
                "POST",
                "/parks/6/spots",
                json!({"floorLevel": "Z", "spotVehicleType": "AUTOMOBILE",
                "spotType": "FUEL", "count": 1}),
            ),
            ("DELETE", "/parks/6/spots/A1", serde_json::Value::Null),
            (
                "POST",
                "/parks/6/barriers",
                json!({"barrierNumber": "E9", "direction": "EXIT"}),
            ),
            (
                "POST",
                "/parks/6/displays",
                json!({"displayNumber": "D9", "barrierID": entrance}),
            ),
        ] {
            assert_error(&rui.send(method, path, &body).await, 403, "forbidden", None);
        }
        assert_error(&rui.get("/parks/audit").await, 403, "forbidden", None);
        assert_error(&pm.get("/parks/99").await, 404, "park_not_found", None);
        assert_error(
            &pm.get("/parks/x").await,
            400,
            "invalid_field",
            Some("parkNumber"),
        );
        assert_error(
            &pm.send("DELETE", "/parks/6/spots/A-1", &serde_json::Value::Null)
                .await,
            400,
            "invalid_field",
            Some("spotNumber"),
        );
        assert_eq!(
            rui.get("/parks/6").await.json()["name"],
            "Aveiro Station",
            "anyone reads it"
        );

        // Keys issued to each barrier: the derived key no longer opens them.
        let key = |id: i64| {
            let body = json!({"device": "BARRIER", "deviceID": id});
            (body, format!("/parks/devices/{number}/key"))
        };
        let (body, path) = key(entrance);
        let r = pm.send("POST", &path, &body).await;
        assert_eq!(r.status(), 200, "{}", r.text());
        assert_eq!(r.header("cache-control"), Some("no-store"));
        let entrance_key = r.json()["key"].as_str().expect("key").to_owned();
        let (body, path) = key(exit);
        let exit_key = pm.send("POST", &path, &body).await.json()["key"]
            .as_str()
            .expect("key")
            .to_owned();
        let at = |barrier: i64, plate: &str, time: &str| passage(barrier, park_id, plate, time);
        let derived = sys.barrier_key(entrance);
        let r = dev
            .barrier(
                "entrance",
                &derived,
                &at(entrance, "46-ON-05", "2026-12-07T09:00:00Z"),
            )
            .await;
        assert_error(&r, 401, "invalid_device_key", None);

        // In and out: the exit prices the stay, the invoice follows, the display says goodbye.
        let r = dev
            .barrier(
                "entrance",
                &entrance_key,
                &at(entrance, "46-ON-05", "2026-12-07T09:00:00Z"),
            )
            .await;
        assert_eq!(r.json()["success"], true, "{db:?}: {}", r.text());
        let r = dev
            .barrier(
                "exit",
                &exit_key,
                &at(exit, "46-ON-05", "2026-12-07T10:00:00Z"),
            )
            .await;
        assert_eq!(r.json()["success"], true, "{db:?}: {}", r.text());
        sys.settled().await;
        let mine = rui.get("/payments/mine").await.json();
        let invoices = mine.as_array().expect("invoices");
        assert_eq!(invoices.len(), 1, "{mine}");
        assert_eq!(invoices[0]["parkId"], park_id, "{mine}");
        let shown = dev
            .call(
                "POST",
                "/display/get",
                &[("x-device-key", &sys.display_key(display))],
                json!({"displayID": display}).to_string(),
            )
            .await;
        assert!(
            shown.json()["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Have a nice day")),
            "{}",
            shown.text()
        );

        // The device view says when each device was last heard from (the barriers and the
        // display just used), written to the database by the service's next round, where the
        // other replicas read it.
        let view = pm.get("/parks/devices/6").await.json();
        let heard = |b: &serde_json::Value| b["lastContactAt"].is_string();
        let barriers = view["barriers"].as_array().expect("barriers");
        assert!(barriers.iter().all(heard), "{view}");
        assert!(heard(
            &barriers
                .iter()
                .find(|b| b["barrierId"] == exit)
                .expect("exit")["displays"][0]
        ));
        assert!(sys.parks.store.write_contacts().await.expect("written") >= 3);
        let written: Result<Vec<Option<i64>>, sqlx::Error> =
            pms_service::repeatable!(sys.parks.store, |conn| {
                sqlx::query_scalar("SELECT last_contact_ms FROM barriers WHERE park_id = $1")
                    .bind(park_id)
                    .fetch_all(&mut *conn)
                    .await
            });
        assert!(written.expect("read").iter().all(Option::is_some), "{db:?}");
        assert_eq!(
            sys.parks.store.write_contacts().await.expect("none"),
            0,
            "nothing new"
        );

        // Closed to new cars: one is refused, the one inside leaves.
        let r = dev
            .barrier(
                "entrance",
                &entrance_key,
                &at(entrance, "32-VT-07", "2026-12-07T11:00:00Z"),
            )
            .await;
        assert_eq!(r.json()["success"], true, "{}", r.text());
        let r = pm
            .send("PATCH", "/parks/6", &json!({"entrancesOpen": false}))
            .await;
        assert_eq!(r.status(), 200, "{}", r.text());
        assert_eq!(r.json()["entrancesOpen"], false);
        let r = dev
            .barrier(
                "entrance",
                &entrance_key,
                &at(entrance, "28-XQ-51", "2026-12-07T11:30:00Z"),
            )
            .await;
        assert_eq!(r.json()["success"], false, "{}", r.text());
        assert_eq!(
            r.json()["message"],
            "The park is closed to new entrances now. Please come back during its opening hours."
        );
        let r = dev
            .barrier(
                "exit",
                &exit_key,
                &at(exit, "32-VT-07", "2026-12-07T12:00:00Z"),
            )
            .await;
        assert_eq!(
            r.json()["success"],
            true,
            "exits are always allowed: {}",
            r.text()
        );

        // Every step in the supervisor's trail, newest first; nobody else reads it.
        assert_error(&pm.get("/parks/audit").await, 403, "forbidden", None);
        let mut sup = sys.as_user(Via::H1, "supervisor@isep.ipp.pt").await;
        let trail = sup.get("/parks/audit?subject=park%206").await;
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
            ["park.changed", "spots.created", "park.created"],
            "{trail}"
        );
        let keys = sup.get("/parks/audit?action=device.").await.json();
        assert_eq!(keys.as_array().map(Vec::len), Some(2), "{keys}");
        let csv = sup.get("/parks/audit?format=csv&action=park.").await;
        assert_eq!(csv.header("content-type"), Some("text/csv; charset=utf-8"));
        assert!(
            csv.text()
                .starts_with("id,at,actorId,action,subject,before,after"),
            "{}",
            csv.text()
        );
        assert_error(
            &sup.get("/parks/audit?from=yesterday").await,
            400,
            "invalid_field",
            Some("from"),
        );
        assert_error(
            &sup.get("/users/audit?limit=0").await,
            400,
            "invalid_field",
            Some("limit"),
        );
        assert_error(&pm.get("/users/audit").await, 403, "forbidden", None);
    }
}
