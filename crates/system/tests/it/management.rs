//! What park managers do, and who may: spots on and off with their audit, thresholds, the
//! overnight fee, and the price table — validated before it replaces the old one, versioned, and
//! billed from exactly as set.

use std::time::Duration;

use pms_parks::clock::ClockRules;
use serde_json::json;

use crate::support::{assert_error, plate_read, Db, Options, System, Via};

#[tokio::test]
async fn managers_manage_customers_read_and_nobody_else_writes() {
    let sys = System::start(Db::Sqlite).await.expect("sqlite");
    let mut customer = sys.as_user(Via::H1, "leoKim@isep.ipp.pt").await;
    let mut manager = sys.as_user(Via::H2Tls, "parkmanager@isep.ipp.pt").await;

    assert_eq!(
        customer.get("/parks/getAllParks").await.json(),
        json!(["1", "2", "3", "4", "5"])
    );
    let occ = customer.get("/parks/getAllOccupancies").await.json();
    assert_eq!(
        occ[0],
        json!({"parkid": 1, "parkNumber": 1, "occupancy": 12, "currentCapacity": 8})
    );
    let near = customer
        .get("/parks/real-time/occupancy/41.178496516445534/-8.607637458224238/1500")
        .await
        .json();
    assert_eq!(near.as_array().map(Vec::len), Some(5));
    assert_eq!(near[0]["parkId"], 5, "the nearest first");
    assert_eq!(
        near[0]["spotTypeOccupancies"].as_array().map(Vec::len),
        Some(8)
    );
    let near = customer
        .get("/parks/real-time/occupancy/41.178496516445534/-8.607637458224238/4.5")
        .await
        .json();
    assert_eq!(near.as_array().map(Vec::len), Some(1));
    for bad in [
        "/parks/real-time/occupancy/91/0/10",
        "/parks/real-time/occupancy/0/0/-1",
        "/parks/real-time/occupancy/x/0/1",
    ] {
        assert_eq!(customer.get(bad).await.status(), 400, "{bad}");
    }
    assert_eq!(
        customer.get("/parks/getParkyThresholds/1").await.json(),
        json!({"parkiesPerHour": 15, "parkiesPerMinute": 1})
    );
    assert_eq!(
        customer.get("/parks/getOvernightConfig/3").await.json(),
        json!({"overnightFee": 8, "enabled": false})
    );
    assert_eq!(
        customer
            .get("/parks/getSpotsByParkNumber/2")
            .await
            .json()
            .as_array()
            .map(Vec::len),
        Some(12)
    );
    assert_error(
        &customer.get("/parks/getSpotsByParkNumber/9").await,
        404,
        "park_not_found",
        None,
    );
    // Other customers' data, and managers' endpoints.
    assert_error(
        &customer.get("/parks/parkingHistory/6").await,
        403,
        "forbidden",
        None,
    );
    assert_error(
        &customer.get("/parks/getUserParkyFlag/6").await,
        403,
        "forbidden",
        None,
    );
    assert_error(
        &customer.get("/parkReport/percentageOf/1").await,
        403,
        "forbidden",
        None,
    );
    let spot =
        json!({"parkNumber": "1", "spotNumber": "A3", "operational": false, "managerName": "Toni"});
    assert_error(
        &customer
            .send("PUT", "/parks/enableDisableSpot", &spot)
            .await,
        403,
        "forbidden",
        None,
    );
    assert_error(
        &customer
            .send("PUT", "/parks/defineTimePeriods/1", &json!([]))
            .await,
        403,
        "forbidden",
        None,
    );
    let mut nobody = sys.client(Via::H1).await;
    assert_eq!(nobody.get("/parks/getAllParks").await.status(), 401);
    assert_eq!(
        nobody.get("/parks/occupancy/1").await.json()["available"],
        8,
        "the open feed"
    );

    // Spots, with their audit sentence.
    let r = manager.send("PUT", "/parks/enableDisableSpot", &spot).await;
    assert_eq!(
        r.json(),
        json!({"response": "Spot A3 is now disabled and was changed by Toni"})
    );
    assert_eq!(
        manager.get("/parks/getAllOccupancies").await.json()[0]["currentCapacity"],
        7
    );
    let spots = manager.get("/parks/getSpotsByParkNumber/1").await.json();
    let a3 = spots
        .as_array()
        .and_then(|s| s.iter().find(|s| s["spotNumber"] == "A3"))
        .expect("A3");
    assert_eq!(a3["operational"], false);
    assert_eq!(a3["lastChange"]["by"], "Toni");
    assert_eq!(a3["lastChange"]["operational"], false);
    assert!(
        a3["lastChange"]["at"]
            .as_str()
            .is_some_and(|t| t.parse::<jiff::Timestamp>().is_ok()),
        "{a3}"
    );
    let a1 = spots
        .as_array()
        .and_then(|s| s.iter().find(|s| s["spotNumber"] == "A1"))
        .expect("A1");
    assert_eq!(a1["lastChange"], serde_json::Value::Null, "never changed");
    let r = manager
        .send(
            "PUT",
            "/parks/enableDisableSpot",
            &json!({"parkNumber": 1, "spotNumber": "Z9", "operational": true}),
        )
        .await;
    assert_error(&r, 404, "spot_not_found", None);
    let r = manager
        .send(
            "PUT",
            "/parks/enableDisableSpot",
            &json!({"parkNumber": 1, "spotNumber": "A3", "operational": "maybe"}),
        )
        .await;
    assert_error(&r, 400, "invalid_field", Some("operational"));
    let r = manager
        .send(
            "PUT",
            "/parks/changeParkyThresholds/1",
            &json!({"parkiesPerHour": "10", "parkiesPerMinute": "1"}),
        )
        .await;
    assert_eq!(r.json(), json!({"response": "Park 1 thresholds changed"}));
    assert_eq!(
        manager.get("/parks/getParkyThresholds/1").await.json()["parkiesPerHour"],
        10
    );
    let r = manager
        .send(
            "PUT",
            "/parks/changeParkyThresholds/1",
            &json!({"parkiesPerHour": -1, "parkiesPerMinute": 1}),
        )
        .await;
    assert_error(&r, 400, "invalid_field", Some("parkiesPerHour"));
    // The change feed: answers at once without `after`, waits with it, wakes on a change.
    let version = manager.get("/parks/changes").await.json()["version"].clone();
    assert!(version.is_u64(), "{version}");
    let same = manager
        .get(&format!("/parks/changes?after={version}&waitMs=0"))
        .await
        .json();
    assert_eq!(same["version"], version, "nothing changed");
    let mut follower = sys.as_user(Via::H1, "parkmanager@isep.ipp.pt").await;
    let waiting = format!("/parks/changes?after={version}&waitMs=20000");
    let back_on =
        json!({"parkNumber": 1, "spotNumber": "A3", "operational": true, "managerName": "Toni"});
    let off_again =
        json!({"parkNumber": 1, "spotNumber": "A3", "operational": false, "managerName": "Toni"});
    let (woken, _) = tokio::join!(follower.get(&waiting), async {
        // Let the follower start waiting first; if it has not, it answers at once anyway.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        manager
            .send("PUT", "/parks/enableDisableSpot", &back_on)
            .await;
        manager
            .send("PUT", "/parks/enableDisableSpot", &off_again)
            .await
    });
    assert_ne!(woken.json()["version"], version);
    assert_error(
        &manager.get("/parks/changes?after=1&waitMs=99999").await,
        400,
        "invalid_field",
        Some("waitMs"),
    );
    assert_error(
        &manager.get("/parks/changes?after=x").await,
        400,
        "invalid_field",
        Some("after"),
    );

    // The operator's view: each barrier with its displays and what they show.
    let devices = manager.get("/parks/devices/1").await.json();
    assert_eq!(devices["parkNumber"], 1);
    assert_eq!(devices["freeSpots"], 7, "A3 is out of service");
    let barriers = devices["barriers"].as_array().expect("barriers");
    assert_eq!(barriers.len(), 6);
    assert_eq!(barriers[0]["barrierNumber"], "B1.1");
    assert_eq!(barriers[0]["direction"], "ENTRANCE");
    assert_eq!(barriers[0]["state"], "ACTIVE");
    assert_eq!(barriers[0]["displays"][0]["displayNumber"], "D1.1");
    assert_eq!(barriers[1]["displays"].as_array().map(Vec::len), Some(2));
    assert_eq!(barriers[4]["state"], "DISABLED");
    assert_error(
        &customer.get("/parks/devices/1").await,
        403,
        "forbidden",
        None,
    );
    assert_error(
        &manager.get("/parks/devices/9").await,
        404,
        "park_not_found",
        None,
    );
    let r = manager.get("/parkReport/parkingTime/1/week").await;
    assert_error(&r, 400, "invalid_field", Some("timePeriod"));
}

#[tokio::test]
async fn a_replaced_price_table_is_validated_versioned_and_billed() {
    // The visit below is dated years ahead, so that it is billed with the new table and spans a
    // winter midnight: believe barrier times that far ahead.
    let options = Options {
        clock: ClockRules {
            ahead: Duration::MAX,
            delay: Duration::MAX,
        },
        ..Options::default()
    };
    let sys = System::start_with(Db::Sqlite, options)
        .await
        .expect("sqlite");
    let mut manager = sys.as_user(Via::H1, "parkmanager@isep.ipp.pt").await;
    let before = manager.get("/parks/getAllPriceTableEntries/2").await.json();
    assert_eq!(before.as_array().map(Vec::len), Some(2));
    assert_eq!(before[0]["periodStart"], "9:00");
    assert_eq!(before[0]["thresholds"][4]["costPerMinuteAutomobiles"], 0.3);
    // A gap at 21:00–22:00: refused, naming it, and the old table stays.
    let gap = json!([
        {"periodStart": "9:00", "periodEnd": "21:00", "thresholds": [{"thresholdMinutes": 60, "costPerMinuteAutomobiles": 2, "costPerMinuteMotorcycles": 1}]},
        {"periodStart": "22:00", "periodEnd": "9:00", "thresholds": [{"thresholdMinutes": 60, "costPerMinuteAutomobiles": 1, "costPerMinuteMotorcycles": 1}]},
    ]);
    let r = manager
        .send("PUT", "/parks/defineTimePeriods/2", &gap)
        .await;
    assert_error(&r, 400, "invalid_price_table", Some("periods"));
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("21:00")),
        "{}",
        r.text()
    );
    assert_eq!(
        manager.get("/parks/getAllPriceTableEntries/2").await.json(),
        before
    );
    // The Postman table (string prices, 8:30 wrap): accepted.
    let postman = json!([
        {"parkId": 2, "periodStart": "08:30", "periodEnd": "09:30", "thresholds": [{"thresholdMinutes": 15, "costPerMinuteAutomobiles": "0.30", "costPerMinuteMotorcycles": "0.30"}]},
        {"parkId": 2, "periodStart": "09:30", "periodEnd": "8:30", "thresholds": [{"thresholdMinutes": 30, "costPerMinuteAutomobiles": "1.00", "costPerMinuteMotorcycles": "0.50"}]},
    ]);
    let r = manager
        .send("PUT", "/parks/defineTimePeriods/2", &postman)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(r.json()[1]["periodEnd"], "8:30");
    // The next visit in park 2 is billed with exactly that table (and park 2's overnight fee is
    // on: €4 per midnight spanned). The table applies from now on, so the visit is a later one
    // (a device's clock is its own): winter, Lisbon = UTC.
    let mut dev = sys.client(Via::H1).await;
    dev.barrier(
        "entrance",
        &sys.barrier_key(7),
        &plate_read(7, 2, "28-XQ-51", "2030-01-10T10:00:00Z"),
    )
    .await;
    let r = dev
        .barrier(
            "exit",
            &sys.barrier_key(8),
            &plate_read(8, 2, "28-XQ-51", "2030-01-11T11:00:00Z"),
        )
        .await;
    assert_eq!(r.json()["success"], true, "{}", r.text());
    // The exit quoted the stay with the new version, as the invoice bills it (below).
    assert_eq!(
        r.json()["message"],
        "Have a nice day Rui Soares! Your total will be 53.2€! With a discount of 0.0€. \
         You earned 375 PARKY coins."
    );
    sys.settled().await;
    let mut rui = sys.as_user(Via::H1, "ruiSoares@isep.ipp.pt").await;
    let invoice = rui.get("/payments/mine").await.json()[0].clone();
    let at = "2030-01-11T11:00:00Z"
        .parse::<jiff::Timestamp>()
        .expect("t")
        .as_millisecond();
    let t = sys.payments.store.table_at(2, at).await.expect("table");
    assert_eq!(t.version, 2, "{:?}", t.table);
    assert_eq!(
        invoice["priceTableVersion"],
        2,
        "{}",
        invoice.to_string().chars().take(700).collect::<String>()
    );
    let rows = invoice["paymentsTableRowsDTO"].as_array().expect("rows");
    let overnight: Vec<_> = rows.iter().filter(|r| r["kind"] == "OVERNIGHT").collect();
    assert_eq!(overnight.len(), 1);
    assert_eq!(overnight[0]["price"], 4.0);
    // 25 hours: 8:30–9:30 is four €0.30 blocks, the other 24 h are 48 blocks at €1.00.
    assert_eq!(
        invoice["finalPrice"],
        4.0 + 48.0 + 1.2,
        "{}",
        invoice["finalPrice"]
    );

    // Switching the overnight fee off makes a new version too.
    let r = manager
        .send(
            "PUT",
            "/parks/enableDisableOvernightFee",
            &json!({"parkNumber": "2", "status": false}),
        )
        .await;
    assert_eq!(r.json(), json!({"response": "Park 2 overnight fee false"}));
    assert_eq!(
        manager.get("/parks/getOvernightConfig/2").await.json(),
        json!({"overnightFee": 4, "enabled": false})
    );
    let (version, table) = sys.parks.store.price_table(2).await.expect("table");
    assert_eq!(version, 3);
    assert!(table.overnight.is_none());

    // The object form reads the extras back, and writing it back changes nothing.
    let mut with_extras = json!({"periods": postman, "graceMinutes": 10, "dailyMaximum": "20.50", "minimumCharge": 1});
    let r = manager
        .send("PUT", "/parks/defineTimePeriods/2", &with_extras)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text());
    let object = manager
        .get("/parks/getAllPriceTableEntries/2?form=object")
        .await
        .json();
    assert_eq!(object["graceMinutes"], 10);
    assert_eq!(object["graceChargeFromStart"], true);
    assert_eq!(object["dailyMaximum"], 20.5);
    assert_eq!(object["dailyMaximumResetsAt"], "0:00");
    assert_eq!(object["minimumCharge"], 1.0);
    assert_eq!(object["timeZone"], "Europe/Lisbon");
    assert_eq!(object["periods"][1]["periodStart"], "9:30");
    let r = manager
        .send("PUT", "/parks/defineTimePeriods/2", &object)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text());
    with_extras["periods"] = r.json();
    assert_eq!(
        manager
            .get("/parks/getAllPriceTableEntries/2?form=object")
            .await
            .json(),
        object
    );
    assert_eq!(
        manager.get("/parks/getAllPriceTableEntries/2").await.json(),
        with_extras["periods"],
        "the published form is still the array"
    );
    assert_error(
        &manager
            .get("/parks/getAllPriceTableEntries/2?form=xml")
            .await,
        400,
        "invalid_field",
        Some("form"),
    );
}

#[tokio::test]
async fn create_payment_prices_a_stay_for_staff_and_stores_nothing() {
    let sys = System::start(Db::Sqlite).await.expect("sqlite");
    let body = json!({"enterPark": "2023-11-26T08:30:00.000Z", "leftPark": "2023-11-26T09:30:00.000Z", "parkID": 1, "licensePlateNumber": "28-XQ-51"});
    let mut customer = sys.as_user(Via::H1, "ruiSoares@isep.ipp.pt").await;
    assert_error(
        &customer
            .send("POST", "/payments/createPayment", &body)
            .await,
        403,
        "forbidden",
        None,
    );
    let mut nobody = sys.client(Via::H1).await;
    assert_eq!(
        nobody
            .send("POST", "/payments/createPayment", &body)
            .await
            .status(),
        401
    );
    let mut manager = sys.as_user(Via::H1, "parkmanager@isep.ipp.pt").await;
    let r = manager.send("POST", "/payments/createPayment", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text());
    let quote = r.json();
    // Spec §5.11 example 1 (Lisbon is UTC in November).
    assert_eq!(quote["finalPrice"], 0.6);
    assert_eq!(quote["invoice"], serde_json::Value::Null);
    assert_eq!(quote["paymentsTableRowsDTO"][0]["fractionStart"], "8:30");
    assert_eq!(quote["nif"], 514884112);
    let mut bad = body.clone();
    bad["leftPark"] = json!("2023-11-26T07:30:00.000Z");
    assert_error(
        &manager.send("POST", "/payments/createPayment", &bad).await,
        400,
        "invalid_field",
        Some("leftPark"),
    );
    let mut unknown = body.clone();
    unknown["licensePlateNumber"] = json!("99-ZZ-99");
    assert_error(
        &manager
            .send("POST", "/payments/createPayment", &unknown)
            .await,
        404,
        "vehicle_not_found",
        Some("licensePlateNumber"),
    );
    let mut park = body.clone();
    park["parkID"] = json!(42);
    assert_error(
        &manager.send("POST", "/payments/createPayment", &park).await,
        404,
        "park_not_found",
        Some("parkID"),
    );
    assert_eq!(
        manager.get("/payments/getAllPayments").await.json(),
        json!([])
    );
}

/// `pms up --demo-extra-spots N` (load tests): every demo park gets N more free fuel spots on
/// floor C, and its capacity grows with them; the published spots are as they were.
#[tokio::test]
async fn demo_parks_can_get_extra_spots_for_load_tests() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = pms_service::store::StoreConfig::sqlite_file(&dir.path().join("parks.db"));
    let store = pms_parks::store::Store::open(&config).expect("store");
    store.migrate().await.expect("migrate");
    let demo = pms_parks::store::seed::DemoParks {
        extra_spots: 3,
        ..Default::default()
    };
    assert!(store.seed_if_empty(&demo).await.expect("seed"));
    assert!(
        !store.seed_if_empty(&demo).await.expect("seed"),
        "only once"
    );
    for park in 1..=5 {
        let spots = store.spots(park).await.expect("spots");
        assert_eq!(spots.len(), 15, "park {park}");
        let extra: Vec<_> = spots
            .iter()
            .filter(|s| s.spot_number.starts_with('C'))
            .collect();
        assert_eq!(extra.len(), 3);
        assert!(extra
            .iter()
            .all(|s| s.operational && !s.occupied && s.spot_type == pms_vocab::EnergySource::Fuel));
        assert_eq!(store.park(park).await.expect("park").max_occupancy, 15);
    }
}
