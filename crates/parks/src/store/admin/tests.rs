//! The operator's changes on both backends: what is stored, what a refusal leaves (nothing),
//! and what the audit trail says.

use pms_service::audit::{self, Filter};
use pms_vocab::{EnergySource, VehicleType};

use super::*;
use crate::hours::{OpeningHours, Span, Weekly};
use crate::model::{DeviceType, Direction, State};
use crate::store::seeded_for_test;

const MANAGER: i64 = 42;

fn new_park(number: Option<i64>) -> NewPark {
    NewPark {
        number,
        settings: Park {
            id: 0,
            number: 0,
            name: "Aveiro Station".into(),
            address: "Largo da Estação".into(),
            max_occupancy: 0,
            latitude: 40.64,
            longitude: -8.64,
            time_zone: "Europe/Lisbon".into(),
            parkies_per_hour: 10,
            parkies_per_minute: 0,
            overnight_fee: 3,
            overnight_enabled: true,
            entrances_open: true,
            opening_hours: None,
        },
        table: pms_tariff::seed::table(),
    }
}

async fn trail(store: &Store, subject: &str) -> Vec<audit::Record> {
    let filter = Filter {
        subject: Some(subject.into()),
        ..Filter::default()
    };
    audit::read(store.db(), &filter).await.expect("audit")
}

async fn table_versions(store: &Store, park_id: i64) -> i64 {
    let r: Result<i64, sqlx::Error> = pms_service::repeatable!(store, |conn| {
        sqlx::query_scalar("SELECT COUNT(*) FROM price_tables WHERE park_id = $1")
            .bind(park_id)
            .fetch_one(&mut *conn)
            .await
    });
    r.expect("versions")
}

#[tokio::test]
async fn a_park_is_created_with_its_table_and_recorded() {
    for postgres in [false, true] {
        let Some((store, _dir)) = seeded_for_test(postgres).await else {
            continue;
        };
        let park = store
            .create_park(&new_park(None), MANAGER)
            .await
            .expect("created");
        assert_eq!(
            (park.id, park.number, park.max_occupancy),
            (6, 6, 0),
            "next after the five"
        );
        assert_eq!(
            store.park(6).await.expect("read"),
            park,
            "read back as answered"
        );
        assert_eq!(table_versions(&store, park.id).await, 1, "its first table");
        let (_, table) = store.price_table(park.id).await.expect("table");
        assert_eq!(
            table.overnight,
            Some(rust_decimal::Decimal::from(3)),
            "billed with its overnight fee"
        );

        let named = store
            .create_park(&new_park(Some(40)), MANAGER)
            .await
            .expect("numbered");
        assert_eq!((named.id, named.number), (7, 40));
        let taken = store.create_park(&new_park(Some(40)), MANAGER).await;
        assert!(
            matches!(
                taken,
                Err(StoreError::Conflict {
                    reason: "park_number_taken",
                    ..
                })
            ),
            "{taken:?}"
        );
        assert_eq!(
            store.parks().await.expect("parks").len(),
            7,
            "nothing half-made"
        );

        let entries = trail(&store, "park 40").await;
        assert_eq!(entries.len(), 1, "one entry, the refusal none: {entries:?}");
        assert_eq!(
            (entries[0].actor_id, entries[0].action.as_str()),
            (MANAGER, "park.created")
        );
        assert_eq!(
            entries[0].after.as_ref().expect("after")["name"],
            "Aveiro Station"
        );
        assert!(entries[0].before.is_none());
    }
}

#[tokio::test]
async fn spots_are_added_all_or_none() {
    for postgres in [false, true] {
        let Some((store, _dir)) = seeded_for_test(postgres).await else {
            continue;
        };
        let park = store
            .create_park(&new_park(None), MANAGER)
            .await
            .expect("created");
        let batch = |numbers: &[&str]| SpotBatch {
            floor_level: "C".into(),
            vehicle_type: VehicleType::Automobile,
            energy: EnergySource::Electric,
            numbers: numbers.iter().map(|n| (*n).to_owned()).collect(),
        };
        let capacity = store
            .create_spots(park.number, &batch(&["C1", "C2", "C3"]), MANAGER)
            .await
            .expect("added");
        assert_eq!(capacity, 3);
        let clash = store
            .create_spots(park.number, &batch(&["C4", "C2"]), MANAGER)
            .await;
        assert!(
            matches!(
                clash,
                Err(StoreError::Conflict {
                    reason: "spot_number_taken",
                    ..
                })
            ),
            "{clash:?}"
        );
        let spots = store.spots(park.number).await.expect("spots");
        let numbers: Vec<&str> = spots.iter().map(|s| s.spot_number.as_str()).collect();
        assert_eq!(numbers, ["C1", "C2", "C3"], "C4 rolled back with C2");
        assert!(spots.iter().all(|s| s.operational && !s.occupied));
        assert_eq!(
            store.park(park.number).await.expect("park").max_occupancy,
            3
        );
        assert!(matches!(
            store.create_spots(99, &batch(&["C9"]), MANAGER).await,
            Err(StoreError::NotFound { what: "park", .. })
        ));
        let actions: Vec<String> = trail(&store, &format!("park {}", park.number))
            .await
            .into_iter()
            .map(|e| e.action)
            .collect();
        assert_eq!(actions, ["spots.created", "park.created"], "newest first");
    }
}

#[tokio::test]
async fn a_free_spot_retires_and_a_taken_one_does_not() {
    for postgres in [false, true] {
        let Some((store, _dir)) = seeded_for_test(postgres).await else {
            continue;
        };
        let capacity = store.park(1).await.expect("park").max_occupancy;
        // A4 is taken in the seed; A2 is free.
        let taken = store.retire_spot(1, "A4", MANAGER).await;
        assert!(
            matches!(
                taken,
                Err(StoreError::Conflict {
                    reason: "spot_occupied",
                    ..
                })
            ),
            "{taken:?}"
        );
        assert_eq!(
            store.retire_spot(1, "A2", MANAGER).await.expect("retired"),
            capacity - 1
        );
        let again = store.retire_spot(1, "A2", MANAGER).await;
        assert!(
            matches!(again, Err(StoreError::NotFound { what: "spot", .. })),
            "{again:?}"
        );
        assert!(matches!(
            store.retire_spot(1, "Z9", MANAGER).await,
            Err(StoreError::NotFound { what: "spot", .. })
        ));
        let spots = store.spots(1).await.expect("spots");
        assert!(
            spots.iter().all(|s| s.spot_number != "A2"),
            "gone from the list"
        );
        assert!(
            spots.iter().any(|s| s.spot_number == "A4"),
            "the taken one stays"
        );
        assert_eq!(
            store.park(1).await.expect("park").max_occupancy,
            capacity - 1
        );
        let switched = store.set_spot(1, "A2", true, "Toni", MANAGER).await;
        assert!(
            matches!(switched, Err(StoreError::NotFound { what: "spot", .. })),
            "a retired spot is not put back in service: {switched:?}"
        );
        let reuse = SpotBatch {
            floor_level: "A".into(),
            vehicle_type: VehicleType::Automobile,
            energy: EnergySource::Fuel,
            numbers: vec!["A2".into()],
        };
        assert!(matches!(
            store.create_spots(1, &reuse, MANAGER).await,
            Err(StoreError::Conflict {
                reason: "spot_number_taken",
                ..
            })
        ));
        let actions: Vec<String> = trail(&store, "park 1")
            .await
            .into_iter()
            .map(|e| e.action)
            .collect();
        assert_eq!(actions, ["spot.retired"], "refusals leave no entry");
    }
}

#[tokio::test]
async fn a_park_changed_keeps_what_was_not_given_and_a_new_clock_is_announced() {
    for postgres in [false, true] {
        let Some((store, _dir)) = seeded_for_test(postgres).await else {
            continue;
        };
        let hours = OpeningHours {
            weekly: Weekly {
                monday: vec![Span {
                    from: "07:00".into(),
                    to: "22:00".into(),
                }],
                ..Weekly::default()
            },
            exceptions: vec![],
        };
        let change = ParkChange {
            name: Some("Park One".into()),
            entrances_open: Some(false),
            opening_hours: Some(Some(hours.clone())),
            ..ParkChange::default()
        };
        let (before, after) = store
            .update_park(1, &change, MANAGER)
            .await
            .expect("changed");
        assert_eq!(before.name, "Park 1");
        assert_eq!(
            (
                after.name.as_str(),
                after.entrances_open,
                after.opening_hours.as_ref()
            ),
            ("Park One", false, Some(&hours))
        );
        assert_eq!(after.time_zone, before.time_zone, "not given, kept");
        assert_eq!(store.park(1).await.expect("read"), after);
        assert_eq!(
            table_versions(&store, 1).await,
            1,
            "the same clock: no new table"
        );

        let zone = ParkChange {
            time_zone: Some("Atlantic/Azores".into()),
            opening_hours: Some(None),
            ..ParkChange::default()
        };
        let (_, after) = store.update_park(1, &zone, MANAGER).await.expect("changed");
        assert_eq!(
            (after.time_zone.as_str(), after.opening_hours),
            ("Atlantic/Azores", None)
        );
        assert_eq!(
            table_versions(&store, 1).await,
            2,
            "billing learns the new clock"
        );

        let (same, again) = store.update_park(1, &zone, MANAGER).await.expect("same");
        assert_eq!(same, again);
        let entries = trail(&store, "park 1").await;
        assert_eq!(
            entries.len(),
            2,
            "a change that changes nothing is not recorded"
        );
        assert_eq!(
            entries[1].before.as_ref().expect("before")["name"],
            "Park 1"
        );
        assert_eq!(
            entries[1].after.as_ref().expect("after")["entrancesOpen"],
            false
        );
        assert!(matches!(
            store.update_park(99, &zone, MANAGER).await,
            Err(StoreError::NotFound { what: "park", .. })
        ));
    }
}

#[tokio::test]
async fn devices_are_added_to_their_own_park_and_keyed_one_by_one() {
    for postgres in [false, true] {
        let Some((store, _dir)) = seeded_for_test(postgres).await else {
            continue;
        };
        let park = store
            .create_park(&new_park(None), MANAGER)
            .await
            .expect("created");
        let entrance = store
            .create_barrier(park.number, "E1", Direction::Entrance, MANAGER)
            .await
            .expect("barrier");
        assert_eq!(
            (entrance.barrier_id, entrance.state),
            (31, State::Active),
            "after the 30 seeded"
        );
        let taken = store
            .create_barrier(park.number, "E1", Direction::Exit, MANAGER)
            .await;
        assert!(
            matches!(
                taken,
                Err(StoreError::Conflict {
                    reason: "barrier_number_taken",
                    ..
                })
            ),
            "{taken:?}"
        );
        store
            .create_barrier(1, "E1", Direction::Exit, MANAGER)
            .await
            .expect("another park may use the number");
        let with_display = store
            .create_display(park.number, "D1", entrance.barrier_id, MANAGER)
            .await
            .expect("display");
        assert_eq!(with_display.displays.len(), 1);
        assert_eq!(
            with_display.displays[0].display_id, 46,
            "after the 45 seeded"
        );
        let elsewhere = store.create_display(park.number, "D2", 1, MANAGER).await;
        assert!(
            matches!(
                elsewhere,
                Err(StoreError::NotFound {
                    what: "barrier",
                    ..
                })
            ),
            "barrier 1 is park 1's: {elsewhere:?}"
        );

        assert_eq!(
            store
                .issued_key(DeviceType::Barrier, 31)
                .await
                .expect("read"),
            None
        );
        let first = store
            .issue_key(park.number, DeviceType::Barrier, 31, MANAGER)
            .await
            .expect("issued");
        for nobody in 1_000..1_100 {
            store
                .issued_key(DeviceType::Display, nobody)
                .await
                .expect("read");
        }
        assert_eq!(store.keys.len(), 1, "ids of no device are not cached");
        let on_file = store
            .issued_key(DeviceType::Barrier, 31)
            .await
            .expect("read");
        assert!(
            on_file.as_deref().is_some_and(|h| h != first.key),
            "only a hash is kept"
        );
        let second = store
            .issue_key(park.number, DeviceType::Barrier, 31, MANAGER)
            .await
            .expect("rotated");
        assert_ne!(
            store
                .issued_key(DeviceType::Barrier, 31)
                .await
                .expect("read"),
            on_file,
            "the first key's hash is replaced at once"
        );
        assert_ne!(first.key, second.key);
        assert_eq!(
            store
                .issued_key(DeviceType::Display, 46)
                .await
                .expect("read"),
            None,
            "no other device is touched"
        );
        assert!(matches!(
            store
                .issue_key(park.number, DeviceType::Barrier, 1, MANAGER)
                .await,
            Err(StoreError::NotFound {
                what: "barrier",
                ..
            })
        ));
        let actions: Vec<String> = trail(&store, "barrier 31")
            .await
            .into_iter()
            .map(|e| e.action)
            .collect();
        assert_eq!(
            actions,
            ["device.key_issued", "device.key_issued", "barrier.created"]
        );
        let issued = &trail(&store, "barrier 31").await[0];
        assert!(
            !issued
                .after
                .as_ref()
                .expect("after")
                .to_string()
                .contains(&second.key),
            "the trail keeps no key"
        );
    }
}
