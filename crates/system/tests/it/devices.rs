//! The device endpoints' refusals and credentials: each refusal is a clear `success: false`
//! with the original's wording where it had one, never a 500, and changes nothing; bad keys are
//! 401, another park or direction 403, bad input 400. Displays stay in their own park and follow
//! changes as they happen.

use serde_json::json;

use crate::support::{assert_error, plate_read, Api, Options, System, Via, BOTH};

async fn free_spots(sys: &System, park: i64) -> i64 {
    sys.parks
        .store
        .occupancies()
        .await
        .expect("occupancies")
        .into_iter()
        .find(|o| o.park_number == park)
        .expect("park")
        .current_capacity
}

#[tokio::test]
async fn refusals_say_why_and_change_nothing() {
    for db in BOTH {
        let Some(sys) = System::start(db).await else {
            continue;
        };
        let mut dev = sys.client(Via::H1).await;
        let before = free_spots(&sys, 1).await;
        let entrance = |plate: &str| plate_read(1, 1, plate, "2024-01-10T10:00:00Z");
        let cases = [
            ("entrance", 1, entrance("99-ZZ-99"), "Please use the Park20 app to register and use the parking. Or use the QR code to download the app."),
            ("exit", 2, plate_read(2, 1, "99-ZZ-99", "2024-01-10T11:00:00Z"), "Your vehicle is not registered in the system. Please contact the park manager."),
            ("exit", 2, plate_read(2, 1, "55-ND-41", "2024-01-10T11:00:00Z"), "This vehicle has no open visit in this park. Please contact the park manager."),
            ("entrance", 5, plate_read(5, 1, "55-ND-41", "2024-01-10T10:00:00Z"), "The barrier is not active. Please contact the park manager."),
            ("entrance", 99, plate_read(99, 1, "55-ND-41", "2024-01-10T10:00:00Z"), "Please contact the park manager."),
        ];
        for (direction, barrier, body, message) in cases {
            let r = dev
                .barrier(direction, &sys.barrier_key(barrier), &body)
                .await;
            assert_eq!(r.status(), 200, "{}", r.text());
            assert_eq!(r.json()["success"], false, "{db:?} {body}");
            assert_eq!(r.json()["message"], message, "{db:?} {body}");
        }
        // A second entrance of a car already inside.
        let r = dev
            .barrier("entrance", &sys.barrier_key(1), &entrance("55-ND-41"))
            .await;
        assert_eq!(r.json()["success"], true, "{}", r.text());
        let inside = free_spots(&sys, 1).await;
        assert_eq!(inside, before - 1);
        let r = dev
            .barrier(
                "entrance",
                &sys.barrier_key(3),
                &plate_read(3, 1, "55-ND-41", "2024-01-10T10:05:00Z"),
            )
            .await;
        assert_eq!(r.json()["success"], false);
        assert_eq!(
            r.json()["message"],
            "This vehicle is already inside a park. Please contact the park manager."
        );
        assert_eq!(
            free_spots(&sys, 1).await,
            inside,
            "{db:?}: refusals changed nothing"
        );

        // Credentials, parks and directions.
        let r = dev
            .call(
                "POST",
                "/barriers/entrance",
                &[],
                entrance("55-ND-41").to_string(),
            )
            .await;
        assert_error(&r, 401, "missing_device_key", None);
        let r = dev
            .barrier("entrance", &sys.barrier_key(2), &entrance("55-ND-41"))
            .await;
        assert_error(&r, 401, "invalid_device_key", None);
        // The key is checked before the rest of the body: a caller without it learns nothing
        // of what the body should hold.
        let unfit = json!({"barrierID": 1, "plateNumber": 5, "date": "2024-01-10T11:00:00Z"});
        let r = dev
            .call("POST", "/barriers/entrance", &[], unfit.to_string())
            .await;
        assert_error(&r, 401, "missing_device_key", None);
        let r = dev.barrier("entrance", &sys.barrier_key(2), &unfit).await;
        assert_error(&r, 401, "invalid_device_key", None);
        let r = dev.barrier("entrance", &sys.barrier_key(1), &unfit).await;
        assert_error(&r, 400, "invalid_field", Some("plateNumber"));
        let bad_park = json!({"barrierID": 1, "parkID": "one", "plateNumber": "55-ND-41",
            "date": "2024-01-10T11:00:00Z"});
        let r = dev
            .barrier("entrance", &sys.barrier_key(2), &bad_park)
            .await;
        assert_error(&r, 401, "invalid_device_key", None);
        let r = dev
            .barrier("entrance", &sys.barrier_key(1), &bad_park)
            .await;
        assert_error(&r, 400, "invalid_field", Some("parkID"));
        let r = dev
            .barrier("entrance", &"0".repeat(64), &entrance("55-ND-41"))
            .await;
        assert_error(&r, 401, "invalid_device_key", None);
        let r = dev
            .barrier(
                "exit",
                &sys.barrier_key(1),
                &plate_read(1, 1, "55-ND-41", "2024-01-10T11:00:00Z"),
            )
            .await;
        assert_error(&r, 403, "forbidden", None);
        let r = dev
            .barrier(
                "entrance",
                &sys.barrier_key(7),
                &plate_read(7, 1, "55-ND-41", "2024-01-10T11:00:00Z"),
            )
            .await;
        assert_error(&r, 403, "forbidden", Some("parkID"));
        // A token is no device credential.
        let mut customer = sys.as_user(Via::H1, "leoKim@isep.ipp.pt").await;
        let r = customer
            .send(
                "POST",
                "/barriers/exit",
                &plate_read(2, 1, "55-ND-41", "2024-01-10T11:00:00Z"),
            )
            .await;
        assert_error(&r, 401, "missing_device_key", None);

        // Bad input names the field.
        let key = sys.barrier_key(1);
        for (body, field) in [
            (json!({"barrierID": 1, "plateNumber": "55-ND-41"}), "date"),
            (
                json!({"barrierID": 1, "plateNumber": "55-ND-41", "date": "yesterday"}),
                "date",
            ),
            // A clock in year 9999: such a visit could never be priced (found by fuzzing).
            (
                json!({"barrierID": 1, "plateNumber": "55-ND-41", "date": "9999-12-31T10:00:00Z"}),
                "date",
            ),
            (
                json!({"barrierID": 1, "plateNumber": "not a plate", "date": "2024-01-10T10:00:00Z"}),
                "plateNumber",
            ),
            (
                json!({"barrierID": "one", "plateNumber": "55-ND-41", "date": "2024-01-10T10:00:00Z"}),
                "barrierID",
            ),
        ] {
            let r = dev.barrier("entrance", &key, &body).await;
            assert_error(&r, 400, "invalid_field", Some(field));
        }
        let r = dev
            .call(
                "POST",
                "/barriers/entrance",
                &[("x-device-key", &key)],
                "{not json",
            )
            .await;
        assert_error(&r, 400, "invalid_json", None);
        let r = dev
            .call(
                "POST",
                "/barriers/entrance",
                &[("x-device-key", &key)],
                vec![b' '; 70_000],
            )
            .await;
        assert_eq!(r.status(), 413, "{}", r.text());
        assert_eq!(
            free_spots(&sys, 1).await,
            inside,
            "{db:?}: bad requests changed nothing"
        );

        // The refusals are counted by reason, and the consumers have no lag.
        let metrics = sys.metrics("parks").await;
        for line in [
            r#"pms_parks_barrier_passages_total{direction="entrance",outcome="unknown_plate"} 1"#,
            r#"pms_parks_barrier_passages_total{direction="entrance",outcome="already_inside"} 1"#,
            r#"pms_parks_barrier_passages_total{direction="entrance",outcome="opened"} 1"#,
            r#"pms_parks_consumer_lag_events{source="users"} 0"#,
        ] {
            assert!(metrics.contains(line), "{line} in\n{metrics}");
        }
    }
}

#[tokio::test]
async fn displays_stay_in_their_park_and_follow_changes() {
    let sys = System::start(crate::support::Db::Sqlite)
        .await
        .expect("sqlite");
    let mut dev = sys.client(Via::H1).await;
    let d1 = sys.display_key(1);
    let first = dev
        .call(
            "POST",
            "/display/get",
            &[("x-device-key", &d1)],
            json!({"displayID": 1}).to_string(),
        )
        .await;
    assert_eq!(first.status(), 200, "{}", first.text());
    assert_eq!(first.json()["message"], "Welcome!");
    assert_eq!(first.json()["occupancy"], 8);
    let version = first.json()["version"].as_i64().expect("version");
    // A long poll waits for the next change.
    let mut follower = sys.client(Via::H1).await;
    let wait = tokio::spawn(async move {
        let body = json!({"displayID": 1, "waitForChangeAfter": version, "waitMs": 10000});
        follower
            .call(
                "POST",
                "/display/get",
                &[("x-device-key", &d1)],
                body.to_string(),
            )
            .await
            .json()
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let r = dev
        .barrier(
            "entrance",
            &sys.barrier_key(1),
            &plate_read(1, 1, "46-ON-05", "2024-01-10T10:00:00Z"),
        )
        .await;
    assert_eq!(r.json()["success"], true);
    let seen = wait.await.expect("long poll");
    assert_eq!(seen["message"], "Welcome to the park Rui Soares!");
    assert_eq!(seen["occupancy"], 7);
    // Park 2's same-numbered display (id 10, D1.1 of park 2) was not touched.
    let d10 = sys.display_key(10);
    let other = dev
        .call(
            "POST",
            "/display/get",
            &[("x-device-key", &d10)],
            json!({"displayID": 10}).to_string(),
        )
        .await;
    assert_eq!(other.json()["message"], "Welcome!");
    // A display's key is its own.
    let r = dev
        .call(
            "POST",
            "/display/get",
            &[("x-device-key", &sys.display_key(2))],
            json!({"displayID": 1}).to_string(),
        )
        .await;
    assert_error(&r, 401, "invalid_device_key", None);
    // A barrier pushes a message to its own displays; none → success false.
    let r = dev
        .call(
            "POST",
            "/display/update",
            &[("x-device-key", &sys.barrier_key(1))],
            json!({"barrierID": 1, "parkID": 1, "message": "Closed at 22:00"}).to_string(),
        )
        .await;
    assert_eq!(r.json()["success"], true, "{}", r.text());
    let shown = dev
        .call(
            "POST",
            "/display/get",
            &[("x-device-key", &sys.display_key(1))],
            json!({"displayID": 1}).to_string(),
        )
        .await;
    assert_eq!(shown.json()["message"], "Closed at 22:00");
    let r = dev
        .call(
            "POST",
            "/display/update",
            &[("x-device-key", &sys.barrier_key(5))],
            json!({"barrierID": 5, "message": "x"}).to_string(),
        )
        .await;
    assert_eq!(
        r.json()["success"],
        false,
        "barrier 5 and its displays are switched off: {}",
        r.text()
    );
    assert_eq!(
        r.json()["message"],
        "The barrier is not active. Please contact the park manager."
    );
}

/// Defect: a switched-off barrier's passages were refused, but its key still wrote its displays.
#[tokio::test]
async fn a_switched_off_barrier_writes_no_display() {
    for db in BOTH {
        let Some(sys) = System::start(db).await else {
            continue;
        };
        // B2.1 (barrier 3) switched off by the operator, before anything read it.
        let store = &sys.parks.store;
        pms_service::repeatable!(store, |conn| sqlx::query(
            "UPDATE barriers SET state = 'DISABLED' WHERE id = 3"
        )
        .execute(&mut *conn)
        .await
        .map(|_| ()))
        .expect("switch off");
        let mut dev = sys.client(Via::H1).await;
        let before = display_get(&mut dev, 4, &sys.display_key(4), None, 0).await;
        let r = dev
            .call(
                "POST",
                "/display/update",
                &[("x-device-key", &sys.barrier_key(3))],
                json!({"barrierID": 3, "parkID": 1, "message": "Free parking today"}).to_string(),
            )
            .await;
        assert_eq!(r.status(), 200, "{}", r.text());
        assert_eq!(r.json()["success"], false, "{db:?}: {}", r.text());
        assert_eq!(
            r.json()["message"],
            "The barrier is not active. Please contact the park manager."
        );
        let after = display_get(&mut dev, 4, &sys.display_key(4), None, 0).await;
        assert_eq!(after, before, "{db:?}: D2.1 unchanged");
    }
}

/// `POST /display/get` for display `id` with its `key`, as a long poll when `after` is given.
async fn display_get(
    api: &mut Api,
    id: i64,
    key: &str,
    after: Option<&serde_json::Value>,
    wait_ms: u32,
) -> serde_json::Value {
    let mut body = json!({"displayID": id, "waitMs": wait_ms});
    if let Some(v) = after {
        body["waitForChangeAfter"] = v.clone();
    }
    let r = api
        .call(
            "POST",
            "/display/get",
            &[("x-device-key", key)],
            body.to_string(),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text());
    r.json()
}

/// Waits until at least `n` long polls wait in `app`.
async fn polls_waiting(app: &pms_parks::App, n: usize) {
    pms_testkit::assert_eventually("the long polls wait", 500, || {
        let app = app.clone();
        async move { app.bells.waiting() >= n }
    })
    .await;
}

#[tokio::test]
async fn long_polls_agree_across_replicas_and_wake_on_changes_made_through_any() {
    for db in BOTH {
        let Some(sys) = System::start_with(
            db,
            Options {
                nats: true,
                parks_replica: true,
                ..Default::default()
            },
        )
        .await
        else {
            continue;
        };
        let (replica, _) = sys.replica.clone().expect("a replica");
        let key = sys.display_key(1);
        // One replica behind the gateway, the other asked straight: the same versions.
        let mut through_gateway = sys.as_user(Via::H1, "parkmanager@isep.ipp.pt").await;
        let mut display = sys.replica_client().await;
        let mut page = sys.replica_client().await;
        page.token.clone_from(&through_gateway.token);
        let version = display_get(&mut through_gateway, 1, &key, None, 0).await["version"].clone();
        assert!(version.is_u64(), "{version}");
        assert_eq!(
            display_get(&mut display, 1, &key, None, 0).await["version"],
            version
        );
        let parks = through_gateway.get("/parks/changes").await.json()["version"].clone();
        assert!(parks.is_u64(), "{parks}");
        assert_eq!(page.get("/parks/changes").await.json()["version"], parks);
        // A version from one replica, sent to the other, waits there: nothing changed.
        let same = display_get(&mut display, 1, &key, Some(&version), 300).await;
        assert_eq!(same["version"], version, "{same}");
        let same = page
            .get(&format!("/parks/changes?after={parks}&waitMs=300"))
            .await
            .json();
        assert_eq!(same["version"], parks, "{same}");

        // An entrance through one replica wakes the long polls waiting in the other: its event
        // goes by on the broker.
        let waiting_page = format!("/parks/changes?after={parks}&waitMs=20000");
        let (seen, paged, entered) = tokio::join!(
            display_get(&mut display, 1, &key, Some(&version), 20_000),
            page.get(&waiting_page),
            async {
                polls_waiting(&replica, 2).await;
                through_gateway
                    .barrier(
                        "entrance",
                        &sys.barrier_key(1),
                        &plate_read(1, 1, "46-ON-05", "2024-01-10T10:00:00Z"),
                    )
                    .await
            }
        );
        assert_eq!(entered.json()["success"], true, "{}", entered.text());
        assert_eq!(seen["message"], "Welcome to the park Rui Soares!", "{seen}");
        assert_eq!(seen["occupancy"], 7, "{seen}");
        assert_ne!(seen["version"], version, "{seen}");
        let paged = paged.json()["version"].clone();
        assert_ne!(paged, parks);

        // A message pushed through one replica writes no event: the other finds it on its
        // periodic check.
        let version = seen["version"].clone();
        let (seen, pushed) = tokio::join!(
            display_get(&mut display, 1, &key, Some(&version), 20_000),
            async {
                polls_waiting(&replica, 1).await;
                through_gateway
                    .call(
                        "POST",
                        "/display/update",
                        &[("x-device-key", &sys.barrier_key(1))],
                        json!({"barrierID": 1, "parkID": 1, "message": "Closed at 22:00"})
                            .to_string(),
                    )
                    .await
            }
        );
        assert_eq!(pushed.json()["success"], true, "{}", pushed.text());
        assert_eq!(seen["message"], "Closed at 22:00", "{seen}");
        assert_ne!(seen["version"], version, "{seen}");
        // And both replicas agree on the versions again.
        let now = display_get(&mut through_gateway, 1, &key, None, 0).await;
        assert_eq!(now["version"], seen["version"], "{now}");
        let parks_now = through_gateway.get("/parks/changes").await.json()["version"].clone();
        assert_eq!(
            page.get("/parks/changes").await.json()["version"],
            parks_now
        );
        assert_ne!(parks_now, paged, "the message moved the parks' version too");
    }
}

/// `pms_parks_long_poll_reads_total` now.
async fn long_poll_reads(sys: &System) -> u64 {
    let text = sys.metrics("parks").await;
    text.lines()
        .find_map(|l| l.strip_prefix("pms_parks_long_poll_reads_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no long poll reads in\n{text}"))
}

#[tokio::test]
async fn a_waiting_display_is_not_read_again_for_another_park_s_changes() {
    let sys = System::start(crate::support::Db::Sqlite)
        .await
        .expect("sqlite");
    let mut dev = sys.client(Via::H1).await;
    let mut follower = sys.client(Via::H1).await;
    // Display 10 is park 2's D1.1, on its entrance B1.1 (barrier 7).
    let key = sys.display_key(10);
    let version = display_get(&mut dev, 10, &key, None, 0).await["version"].clone();
    let (seen, during) = tokio::join!(
        display_get(&mut follower, 10, &key, Some(&version), 20_000),
        async {
            let app = sys.parks.clone();
            pms_testkit::assert_eventually("the display waits on its park", 500, || {
                let app = app.clone();
                async move { app.bells.waiting_in(2) >= 1 }
            })
            .await;
            let before = long_poll_reads(&sys).await;
            // Three cars into park 1: its displays change, park 2's do not.
            for (i, plate) in ["46-ON-05", "32-VT-07", "28-XQ-51"].iter().enumerate() {
                let at = format!("2024-01-10T10:0{i}:00Z");
                let r = dev
                    .barrier(
                        "entrance",
                        &sys.barrier_key(1),
                        &plate_read(1, 1, plate, &at),
                    )
                    .await;
                assert_eq!(r.json()["success"], true, "{}", r.text());
            }
            let during = long_poll_reads(&sys).await - before;
            // Then one into park 2 wakes it.
            let r = dev
                .barrier(
                    "entrance",
                    &sys.barrier_key(7),
                    &plate_read(7, 2, "55-ND-41", "2024-01-10T10:05:00Z"),
                )
                .await;
            assert_eq!(r.json()["success"], true, "{}", r.text());
            during
        }
    );
    assert_eq!(
        during, 0,
        "park 1's entrances made park 2's display read again"
    );
    assert_ne!(seen["version"], version, "{seen}");
    assert!(
        seen["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Welcome to the park")),
        "{seen}"
    );
}

#[tokio::test]
async fn a_manager_switches_a_device_off_and_it_does_nothing_until_switched_on() {
    for db in BOTH {
        let Some(sys) = System::start(db).await else {
            continue;
        };
        let mut dev = sys.client(Via::H1).await;
        let mut manager = sys.as_user(Via::H1, "parkmanager@isep.ipp.pt").await;
        let switch = |device: &str, id: i64, state: &str| json!({"device": device, "deviceID": id, "state": state});
        let entrance = plate_read(1, 1, "55-ND-41", "2024-01-10T10:00:00Z");
        let key = sys.barrier_key(1);
        // A passage first, so that this replica has barrier 1 in its cache.
        let r = dev
            .barrier(
                "entrance",
                &key,
                &plate_read(1, 1, "00-XX-00", "2024-01-10T09:00:00Z"),
            )
            .await;
        assert_eq!(r.json()["success"], false, "{db:?}: an unknown plate");

        let off = switch("BARRIER", 1, "DISABLED");
        let r = manager.send("PUT", "/parks/devices/1/state", &off).await;
        assert_eq!(r.status(), 200, "{db:?}: {}", r.text());
        assert_eq!(
            r.json(),
            json!({"device": "BARRIER", "deviceID": 1, "state": "DISABLED", "changed": true})
        );
        let r = manager.send("PUT", "/parks/devices/1/state", &off).await;
        assert_eq!(r.json()["changed"], false, "{db:?}: it was off already");
        let devices = manager.get("/parks/devices/1").await.json();
        assert_eq!(devices["barriers"][0]["state"], "DISABLED");
        let r = dev.barrier("entrance", &key, &entrance).await;
        assert_eq!(r.status(), 200, "{}", r.text());
        assert_eq!(
            r.json()["success"],
            false,
            "{db:?}: a switched-off barrier opens for nobody"
        );
        assert_eq!(
            r.json()["message"],
            "The barrier is not active. Please contact the park manager."
        );
        let r = manager
            .send(
                "PUT",
                "/parks/devices/1/state",
                &switch("BARRIER", 1, "ACTIVE"),
            )
            .await;
        assert_eq!(r.json()["changed"], true);
        let r = dev.barrier("entrance", &key, &entrance).await;
        assert_eq!(r.json()["success"], true, "{db:?}: back on: {}", r.text());

        // A display switched off takes no message, and one waiting learns of it at once.
        let display_key = sys.display_key(1);
        let before = display_get(&mut dev, 1, &display_key, None, 0).await;
        assert_eq!(before["state"], "ACTIVE");
        let r = manager
            .send(
                "PUT",
                "/parks/devices/1/state",
                &switch("DISPLAY", 1, "DISABLED"),
            )
            .await;
        assert_eq!(r.json()["state"], "DISABLED", "{}", r.text());
        let after = display_get(&mut dev, 1, &display_key, Some(&before["version"]), 0).await;
        assert_eq!(after["state"], "DISABLED");
        assert_ne!(
            after["version"], before["version"],
            "{db:?}: its version moved"
        );
        let message = json!({"barrierID": 1, "parkID": 1, "message": "Closed for cleaning"});
        let r = dev
            .call(
                "POST",
                "/display/update",
                &[("x-device-key", &key)],
                message.to_string(),
            )
            .await;
        assert_eq!(r.json()["success"], false, "{db:?}: {}", r.text());

        // What is not the park's, not a device or not a state is said so.
        let r = manager
            .send(
                "PUT",
                "/parks/devices/1/state",
                &switch("BARRIER", 99, "ACTIVE"),
            )
            .await;
        assert_error(&r, 404, "barrier_not_found", None);
        let r = manager
            .send(
                "PUT",
                "/parks/devices/2/state",
                &switch("DISPLAY", 1, "ACTIVE"),
            )
            .await;
        assert_error(&r, 404, "display_not_found", None);
        let r = manager.send("PUT", "/parks/devices/9/state", &off).await;
        assert_error(&r, 404, "park_not_found", None);
        let r = manager
            .send(
                "PUT",
                "/parks/devices/1/state",
                &switch("BARRIER", 1, "OFF"),
            )
            .await;
        assert_error(&r, 400, "invalid_field", Some("state"));
        let r = manager
            .send(
                "PUT",
                "/parks/devices/1/state",
                &switch("GATE", 1, "ACTIVE"),
            )
            .await;
        assert_error(&r, 400, "invalid_field", Some("device"));
        let r = manager
            .send(
                "PUT",
                "/parks/devices/1/state",
                &json!({"device": "BARRIER", "state": "ACTIVE"}),
            )
            .await;
        assert_error(&r, 400, "invalid_field", Some("deviceID"));
        let mut customer = sys.as_user(Via::H1, "leoKim@isep.ipp.pt").await;
        let r = customer.send("PUT", "/parks/devices/1/state", &off).await;
        assert_error(&r, 403, "forbidden", None);
    }
}
