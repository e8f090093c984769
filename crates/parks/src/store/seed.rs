//! The parks of the published system (spec §6.2), created on first start when there is no park:
//! five parks with their spots, barriers (the first of each pair an entrance, the second an
//! exit), displays and the seed price table, each table announced as `price_table.changed` in
//! the same transaction. Customers are not seeded here: they come from the users service's
//! events.

use jiff::Timestamp;
use pms_events::conn::EventConn;
use pms_service::transaction;

use super::admin::one_creation_at_a_time;
use super::parks::{billed, new_table_version, Park, PriceTableChanged};
use super::{ms, retry, Store, StoreError};
use pms_events::NewEvent;
use pms_tariff::json::TableDoc;

/// The time zone parks get unless configured otherwise.
pub const DEFAULT_TIME_ZONE: &str = "Europe/Lisbon";

/// How the demo parks are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoParks {
    /// Their time zone (IANA name).
    pub time_zone: String,
    /// Free, operational fuel spots added to each park beyond the published ten (floor `C`,
    /// numbered `C1`, `C2`, …), so that a load test has room for its cars; 0 for the published
    /// seed.
    pub extra_spots: u32,
}

impl Default for DemoParks {
    fn default() -> Self {
        Self {
            time_zone: DEFAULT_TIME_ZONE.into(),
            extra_spots: 0,
        }
    }
}

/// Park number, latitude, longitude, overnight fee (whole euros) and whether it is charged.
const PARKS: [(i64, f64, f64, i64, bool); 5] = [
    (1, 40.36841685539075, -8.659655996430294, 5, true),
    (2, 41.15932631626018, -8.659665314733802, 4, true),
    (3, 40.63197951206417, -8.631234173497187, 8, false),
    (4, 41.538183003885216, -8.431420332359862, 6, false),
    (5, 41.17643631180696, -8.55806931330527, 7, true),
];

/// The published spots: number, floor, energy, occupied, operational (all automobiles).
const SPOTS: [(&str, &str, &str, bool, bool); 10] = [
    ("A1", "A", "FUEL", false, false),
    ("A2", "A", "FUEL", false, true),
    ("A3", "A", "FUEL", false, true),
    ("A4", "A", "FUEL", true, true),
    ("A5", "A", "FUEL", false, true),
    ("B1", "B", "FUEL", false, true),
    ("B2", "B", "ELECTRIC", false, true),
    ("B3", "B", "ELECTRIC", true, true),
    ("B4", "B", "GPL", true, true),
    ("B5", "B", "GPL", false, true),
];

/// Motorcycle spots PMS adds to the published ten (spot number, floor, energy), free and in
/// service: the published seed had none, so every motorcycle was told the park was full.
const MOTORCYCLE_SPOTS: [(&str, &str, &str); 2] = [("M1", "M", "FUEL"), ("M2", "M", "ELECTRIC")];

/// Barrier number, direction, state; ids follow (park 1: 1–6, park 2: 7–12, …).
const BARRIERS: [(&str, &str, &str); 6] = [
    ("B1.1", "ENTRANCE", "ACTIVE"),
    ("B1.2", "EXIT", "ACTIVE"),
    ("B2.1", "ENTRANCE", "ACTIVE"),
    ("B2.2", "EXIT", "ACTIVE"),
    ("B3.1", "ENTRANCE", "DISABLED"),
    ("B3.2", "EXIT", "DISABLED"),
];

/// Display number, index of its barrier in [`BARRIERS`], message, state; ids follow (park 1:
/// 1–9, …).
const DISPLAYS: [(&str, usize, &str, &str); 9] = [
    ("D1.1", 0, "Welcome!", "ACTIVE"),
    ("D1.2", 1, "Welcome!!", "ACTIVE"),
    ("D1.3", 1, "Welcome!", "ACTIVE"),
    ("D2.1", 2, "Welcome!", "ACTIVE"),
    ("D2.2", 3, "Welcome!", "ACTIVE"),
    ("D2.3", 3, "Welcome!", "ACTIVE"),
    ("D3.1", 4, "Welcome!", "DISABLED"),
    ("D3.2", 5, "Welcome!", "DISABLED"),
    ("D3.3", 5, "Welcome!", "DISABLED"),
];

impl Store {
    /// Creates the demo parks as `demo` says when there are none; returns whether it did.
    ///
    /// # Errors
    /// Database failures.
    pub async fn seed_if_empty(&self, demo: &DemoParks) -> Result<bool, StoreError> {
        let now = Timestamp::now();
        let time_zone = demo.time_zone.as_str();
        let capacity = (SPOTS.len() + MOTORCYCLE_SPOTS.len()) as i64 + i64::from(demo.extra_spots);
        let extra: Vec<(String, &str, &str, bool, bool)> = (1..=demo.extra_spots)
            .map(|n| (format!("C{n}"), "C", "FUEL", false, true))
            .collect();
        retry(|| async {
            let r: Result<bool, StoreError> = transaction!(self, |tx| {
                // Replicas starting at once: one seeds, the others wait here, then find it done.
                one_creation_at_a_time!(self, tx);
                let parks: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM parks").fetch_one(&mut *tx).await?;
                // Falls through to the commit either way (a `return` would skip it and leave the
                // connection in its transaction, holding the lock, until its next use).
                for (p, (number, lat, lon, fee, on)) in PARKS.iter().enumerate().filter(|_| parks == 0) {
                    let p = p as i64;
                    let occupied = SPOTS.iter().filter(|s| s.3).count() as i64;
                    sqlx::query(
                        "INSERT INTO parks (id, park_number, max_occupancy, occupied, latitude, longitude, time_zone, \
                         parkies_per_hour, parkies_per_minute, overnight_fee, overnight_enabled, name) \
                         VALUES ($1, $1, $8, $2, $3, $4, $5, 15, 1, $6, $7, $9)",
                    )
                    .bind(number)
                    .bind(occupied)
                    .bind(lat)
                    .bind(lon)
                    .bind(time_zone)
                    .bind(fee)
                    .bind(i64::from(*on))
                    .bind(capacity)
                    .bind(format!("Park {number}"))
                    .execute(&mut *tx)
                    .await?;
                    let cars = SPOTS
                        .iter()
                        .map(|(n, f, e, o, op)| ((*n).to_owned(), *f, *e, *o, *op))
                        .chain(extra.iter().cloned())
                        .map(|spot| ("AUTOMOBILE", spot));
                    let motorcycles = MOTORCYCLE_SPOTS
                        .iter()
                        .map(|(n, f, e)| ("MOTORCYCLE", ((*n).to_owned(), *f, *e, false, true)));
                    for (vehicle, (spot, floor, energy, occupied, operational)) in cars.chain(motorcycles) {
                        sqlx::query(
                            "INSERT INTO spots (park_id, spot_number, spot_type, spot_vehicle_type, floor_level, occupied, operational) \
                             VALUES ($1, $2, $3, $7, $4, $5, $6)",
                        )
                        .bind(number)
                        .bind(spot)
                        .bind(energy)
                        .bind(floor)
                        .bind(i64::from(occupied))
                        .bind(i64::from(operational))
                        .bind(vehicle)
                        .execute(&mut *tx)
                        .await?;
                    }
                    for (i, (barrier, direction, state)) in BARRIERS.iter().enumerate() {
                        sqlx::query(
                            "INSERT INTO barriers (id, park_id, barrier_number, direction, state) VALUES ($1, $2, $3, $4, $5)",
                        )
                        .bind(p * 6 + i as i64 + 1)
                        .bind(number)
                        .bind(barrier)
                        .bind(direction)
                        .bind(state)
                        .execute(&mut *tx)
                        .await?;
                    }
                    for (i, (display, barrier, message, state)) in DISPLAYS.iter().enumerate() {
                        sqlx::query(
                            "INSERT INTO displays (id, park_id, display_number, barrier_id, state, message, updated_at_ms) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7)",
                        )
                        .bind(p * 9 + i as i64 + 1)
                        .bind(number)
                        .bind(display)
                        .bind(p * 6 + *barrier as i64 + 1)
                        .bind(state)
                        .bind(message)
                        .bind(ms(now))
                        .execute(&mut *tx)
                        .await?;
                    }
                    let park = Park {
                        id: *number,
                        number: *number,
                        max_occupancy: capacity,
                        latitude: *lat,
                        longitude: *lon,
                        time_zone: time_zone.to_owned(),
                        parkies_per_hour: 15,
                        parkies_per_minute: 1,
                        overnight_fee: *fee,
                        overnight_enabled: *on,
                        name: format!("Park {number}"),
                        address: String::new(),
                        entrances_open: true,
                        opening_hours: None,
                    };
                    let table = billed(pms_tariff::seed::table(), &park)
                        .map_err(|e| StoreError::Internal(e.to_string()))?;
                    new_table_version!(tx, &park, &table, None::<i64>, now);
                }
                Ok::<bool, StoreError>(parks == 0)
            });
            r
        })
        .await
    }
}
