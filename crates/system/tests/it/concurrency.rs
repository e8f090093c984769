//! Many barriers at once: a nearly full park never gives one spot to two cars and never
//! overfills (by its spots or by its maximum), one car entering at two barriers at once gets in
//! once, and one car leaving at two barriers at once gets out once and spends its coin flag once.

use futures_util::future::join_all;
use serde_json::json;

use crate::support::{plate_read, System, Via, BOTH};

/// Registers `n` customers with fuel cars; returns their plates once parks knows them all.
async fn fuel_cars(sys: &System, n: usize) -> Vec<String> {
    let mut anyone = sys.client(Via::H1).await;
    let mut last = 0;
    let plates: Vec<String> = (0..n).map(|i| format!("{:02}-PK-{:02}", i, i)).collect();
    for (i, plate) in plates.iter().enumerate() {
        let r = anyone
            .send(
                "POST",
                "/users/createUser",
                &json!({"firstName": "Car", "lastName": format!("Owner{i}"), "email": format!("owner{i}@example.pt"),
                        "password": "123PasswordX#", "nif": 300_000_000 + i, "licensePlateNumber": plate,
                        "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "FUEL"}),
            )
            .await;
        assert_eq!(r.status(), 201, "{}", r.text());
        last = r.json()["id"].as_i64().expect("id");
    }
    // Events arrive in order: once the last customer is known, all are.
    let parks = sys.parks.clone();
    pms_testkit::assert_eventually("parks knows the new cars", 500, || {
        let parks = parks.clone();
        async move { parks.store.coin_flag(last).await.is_ok() }
    })
    .await;
    plates
}

/// Every car of `plates` at park 1's two active entrances (barriers 1 and 3) at once; the
/// barriers' answers.
async fn enter_park_1_at_once(sys: &System, plates: &[String]) -> Vec<serde_json::Value> {
    let attempts = plates.iter().enumerate().map(|(i, plate)| {
        let barrier = if i % 2 == 0 { 1 } else { 3 };
        let key = sys.barrier_key(barrier);
        let body = plate_read(barrier, 1, plate, "2024-01-10T10:00:00Z");
        let client = sys.client(Via::H1);
        async move {
            let mut c = client.await;
            c.barrier("entrance", &key, &body).await.json()
        }
    });
    join_all(attempts).await
}

/// How many of `answers` let the car in, and how many said the park is full.
fn admitted_and_full(answers: &[serde_json::Value]) -> (usize, usize) {
    let admitted = answers.iter().filter(|a| a["success"] == true).count();
    let full = answers
        .iter()
        .filter(|a| a["message"] == "The park is full. Please contact the park manager.")
        .count();
    (admitted, full)
}

#[tokio::test]
async fn parallel_entrances_never_overfill_a_park() {
    for db in BOTH {
        let Some(sys) = System::start(db).await else {
            continue;
        };
        let plates = fuel_cars(&sys, 12).await;
        // Park 1 has four free fuel spots.
        let answers = enter_park_1_at_once(&sys, &plates).await;
        let (admitted, full) = admitted_and_full(&answers);
        assert_eq!((admitted, full), (4, 8), "{db:?}: {answers:?}");
        let spots = sys.parks.store.spots(1).await.expect("spots");
        let fuel_free = spots
            .iter()
            .filter(|s| {
                s.spot_type == pms_vocab::EnergySource::Fuel
                    && s.spot_vehicle_type == pms_vocab::VehicleType::Automobile
                    && s.operational
                    && !s.occupied
            })
            .count();
        assert_eq!(fuel_free, 0);
        // Every admitted car has its own spot: the occupied count matches the spots taken.
        let occupied = spots.iter().filter(|s| s.occupied).count();
        assert_eq!(
            occupied,
            3 + 4,
            "{db:?}: three seeded cars and four new ones"
        );
    }
}

#[tokio::test]
async fn one_car_at_two_entrances_at_once_gets_in_once() {
    for db in BOTH {
        let Some(sys) = System::start(db).await else {
            continue;
        };
        let tries = [1, 3, 1, 3, 7, 9]
            .into_iter()
            .enumerate()
            .map(|(i, barrier)| {
                let park = if barrier > 6 { 2 } else { 1 };
                let key = sys.barrier_key(barrier);
                let body = plate_read(
                    barrier,
                    park,
                    "46-ON-05",
                    &format!("2024-01-10T10:00:0{i}Z"),
                );
                let client = sys.client(Via::H1);
                async move { client.await.barrier("entrance", &key, &body).await.json() }
            });
        let answers = join_all(tries).await;
        let admitted = answers.iter().filter(|a| a["success"] == true).count();
        assert_eq!(admitted, 1, "{db:?}: {answers:?}");
        assert_eq!(sys.parks.store.history_count(6).await.expect("count"), 1);
    }
}

/// Runs `sql` on the parks service's database (the test's stand-in for an operator's SQL).
async fn parks_sql(sys: &System, sql: &'static str) {
    let store = &sys.parks.store;
    pms_service::repeatable!(store, |conn| sqlx::query(sql)
        .execute(&mut *conn)
        .await
        .map(|_| ()))
    .expect("parks SQL");
}

/// Park 1's occupied count as the park's own counter has it.
async fn occupied_count(sys: &System) -> i64 {
    let store = &sys.parks.store;
    pms_service::repeatable!(store, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT occupied FROM parks WHERE id = 1"
    )
    .fetch_one(&mut *conn)
    .await)
    .expect("occupied")
}

#[tokio::test]
async fn parallel_entrances_stop_at_the_parks_maximum() {
    for db in BOTH {
        let Some(sys) = System::start(db).await else {
            continue;
        };
        let plates = fuel_cars(&sys, 8).await;
        // Room for two more cars by the park's maximum, while four fuel spots are free: the
        // counter, not the spots, is what refuses.
        parks_sql(
            &sys,
            "UPDATE parks SET max_occupancy = occupied + 2 WHERE id = 1",
        )
        .await;
        let before = occupied_count(&sys).await;
        let answers = enter_park_1_at_once(&sys, &plates).await;
        let (admitted, full) = admitted_and_full(&answers);
        assert_eq!((admitted, full), (2, 6), "{db:?}: {answers:?}");
        assert_eq!(occupied_count(&sys).await, before + 2, "{db:?}");
        let spots = sys.parks.store.spots(1).await.expect("spots");
        let taken = spots.iter().filter(|s| s.occupied).count();
        assert_eq!(taken, 3 + 2, "{db:?}: three seeded cars and two new ones");
    }
}

#[tokio::test]
async fn one_car_at_two_exits_at_once_gets_out_once_and_spends_its_flag_once() {
    for db in BOTH {
        let Some(sys) = System::start(db).await else {
            continue;
        };
        let mut dev = sys.client(Via::H1).await;
        let r = dev
            .barrier(
                "entrance",
                &sys.barrier_key(1),
                &plate_read(1, 1, "46-ON-05", "2024-01-10T09:00:00Z"),
            )
            .await;
        assert_eq!(r.json()["success"], true, "{}", r.text());
        let mut rui = sys.as_user(Via::H1, "ruiSoares@isep.ipp.pt").await;
        let r = rui.coin_flag(6, true).await;
        assert_eq!(r.json(), json!({"response": "Success"}));
        let inside = occupied_count(&sys).await;
        // Both exits of park 1 (barriers 2 and 4), each a few times, each at its own time.
        let tries = [2, 4, 2, 4, 2, 4]
            .into_iter()
            .enumerate()
            .map(|(i, barrier)| {
                let key = sys.barrier_key(barrier);
                let body = plate_read(barrier, 1, "46-ON-05", &format!("2024-01-10T10:00:0{i}Z"));
                let client = sys.client(Via::H1);
                async move { client.await.barrier("exit", &key, &body).await.json() }
            });
        let answers = join_all(tries).await;
        let out = answers.iter().filter(|a| a["success"] == true).count();
        assert_eq!(out, 1, "{db:?}: {answers:?}");
        let refused = answers
            .iter()
            .filter(|a| a["success"] == false && a["message"] != serde_json::Value::Null)
            .count();
        assert_eq!(
            refused, 5,
            "{db:?}: every other exit is told why: {answers:?}"
        );
        assert_eq!(occupied_count(&sys).await, inside - 1, "{db:?}");
        assert!(!sys.parks.store.coin_flag(6).await.expect("flag"), "{db:?}");
        let store = &sys.parks.store;
        let closed: Vec<(i64, i64)> = pms_service::repeatable!(store, |conn| sqlx::query_as(
            "SELECT use_coins, occupied FROM visits v JOIN spots s ON s.id = v.spot_id \
             WHERE v.plate = '46-ON-05' AND v.left_at_ms IS NOT NULL"
        )
        .fetch_all(&mut *conn)
        .await)
        .expect("visits");
        assert_eq!(
            closed,
            vec![(1, 0)],
            "{db:?}: one visit, paid with coins, its spot free"
        );
    }
}

/// Replicas of the parks service starting at once on a new PostgreSQL database: every one comes
/// up, one of them seeds the demo parks, and they are there once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_starting_at_once_seed_the_demo_parks_once() {
    if pms_testkit::pg::skipped() {
        return;
    }
    let url = pms_testkit::pg::shared().fresh_database();
    let mut config = pms_service::store::StoreConfig::new(url).in_schema("parks");
    config.statement_timeout = std::time::Duration::from_secs(60);
    let stores: Vec<pms_parks::store::Store> = (0..6)
        .map(|_| pms_parks::store::Store::open(&config).expect("store"))
        .collect();
    let demo = pms_parks::store::seed::DemoParks::default();
    let started = join_all(stores.iter().map(|s| async {
        s.migrate().await?;
        s.seed_if_empty(&demo).await
    }))
    .await;
    let seeded: Vec<bool> = started
        .into_iter()
        .map(|r| r.expect("every replica starts"))
        .collect();
    assert_eq!(seeded.iter().filter(|s| **s).count(), 1, "{seeded:?}");
    let parks = stores[0].occupancies().await.expect("parks");
    assert_eq!(parks.len(), 5);
}
