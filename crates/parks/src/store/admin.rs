//! What an operator builds: parks (created, changed, closed to new cars and reopened) and their
//! spots, added in bulk. Each change is recorded in the audit trail (`pms_service::audit`) in
//! the transaction that makes it. A new park starts with its first price table, announced as
//! `price_table.changed` like every later one (the payments service bills from it); a park's
//! time zone changed is announced the same way, with its table, since billing reads the clock.

use jiff::Timestamp;
use pms_events::conn::EventConn;
use pms_events::NewEvent;
use pms_service::audit::{AuditConn, Entry};
use pms_service::transaction;
use pms_tariff::json::TableDoc;
use pms_tariff::PriceTable;
use pms_vocab::{EnergySource, VehicleType};
use serde::Serialize;

use super::parks::{
    billed, current_table, new_table_version, park_of, subject, Park, PriceTableChanged,
    PARK_COLUMNS,
};
use super::{ms, retry, Store, StoreError};
use crate::hours::OpeningHours;

/// A park to create, validated by the caller.
#[derive(Debug, Clone)]
pub struct NewPark {
    /// Its number; the next free one when `None`.
    pub number: Option<i64>,
    /// Name, address, place, clock, coins, fee and hours (`id`, `number` and `max_occupancy`
    /// are ignored: the store assigns them; a new park has no spots yet).
    pub settings: Park,
    /// Its first price table (without the overnight fee, which `settings` says).
    pub table: PriceTable,
}

/// A change of a park's settings: each field given replaces the stored one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParkChange {
    /// New name.
    pub name: Option<String>,
    /// New address.
    pub address: Option<String>,
    /// New latitude.
    pub latitude: Option<f64>,
    /// New longitude.
    pub longitude: Option<f64>,
    /// New time zone (IANA name, checked by the caller).
    pub time_zone: Option<String>,
    /// Open or close its entrances.
    pub entrances_open: Option<bool>,
    /// New opening hours (`Some(None)`: always open).
    pub opening_hours: Option<Option<OpeningHours>>,
}

impl ParkChange {
    /// `park` with this change applied.
    fn applied_to(&self, park: &Park) -> Park {
        let mut after = park.clone();
        let ParkChange {
            name,
            address,
            latitude,
            longitude,
            time_zone,
            entrances_open,
            opening_hours,
        } = self.clone();
        after.name = name.unwrap_or(after.name);
        after.address = address.unwrap_or(after.address);
        after.latitude = latitude.unwrap_or(after.latitude);
        after.longitude = longitude.unwrap_or(after.longitude);
        after.time_zone = time_zone.unwrap_or(after.time_zone);
        after.entrances_open = entrances_open.unwrap_or(after.entrances_open);
        after.opening_hours = opening_hours.unwrap_or(after.opening_hours);
        after
    }
}

/// Spots to add to a park: one floor, one vehicle type, one energy, these numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpotBatch {
    /// The floor (`A`, `-1`, …).
    pub floor_level: String,
    /// For which vehicles.
    pub vehicle_type: VehicleType,
    /// For which energy.
    pub energy: EnergySource,
    /// Their numbers, each new to the park.
    pub numbers: Vec<String>,
}

/// Takes the lock that makes the operator's creations, and the demo parks' seeding, one at a
/// time on PostgreSQL (ids are the highest plus one; SQLite serializes writers by itself).
macro_rules! one_creation_at_a_time {
    ($self:ident, $tx:ident) => {
        if $self.backend() == pms_service::store::Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(pms_service::store::SEED_LOCK_KEY)
                .execute(&mut *$tx)
                .await?;
        }
    };
}
pub(crate) use one_creation_at_a_time;

/// The opening hours as stored (JSON), or none.
fn hours_text(hours: Option<&OpeningHours>) -> Result<Option<String>, StoreError> {
    hours
        .map(serde_json::to_string)
        .transpose()
        .map_err(StoreError::internal)
}

impl Store {
    /// Creates a park with `new`'s settings and first price table, no spots and no devices;
    /// `by` is the park manager. Returns it as stored.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] `park_number_taken`; database failures.
    pub async fn create_park(&self, new: &NewPark, by: i64) -> Result<Park, StoreError> {
        let now = Timestamp::now();
        let hours = hours_text(new.settings.opening_hours.as_ref())?;
        retry(|| async {
            let r: Result<Park, StoreError> = transaction!(self, |tx| {
                one_creation_at_a_time!(self, tx);
                let (id, next): (i64, i64) = sqlx::query_as(
                    "SELECT COALESCE(MAX(id), 0) + 1, COALESCE(MAX(park_number), 0) + 1 FROM parks",
                )
                .fetch_one(&mut *tx)
                .await?;
                let number = new.number.unwrap_or(next);
                let taken: Option<i64> =
                    sqlx::query_scalar("SELECT id FROM parks WHERE park_number = $1")
                        .bind(number)
                        .fetch_optional(&mut *tx)
                        .await?;
                if taken.is_some() {
                    return Err(StoreError::Conflict {
                        reason: "park_number_taken",
                        field: Some("parkNumber"),
                        message: format!("there is a park {number} already"),
                    });
                }
                let s = &new.settings;
                let row = sqlx::query(&format!(
                    "INSERT INTO parks (id, park_number, max_occupancy, occupied, latitude, \
                     longitude, time_zone, parkies_per_hour, parkies_per_minute, overnight_fee, \
                     overnight_enabled, name, address, entrances_open, opening_hours, changes) \
                     VALUES ($1, $2, 0, 0, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 1) \
                     RETURNING {PARK_COLUMNS}"
                ))
                .bind(id)
                .bind(number)
                .bind(s.latitude)
                .bind(s.longitude)
                .bind(&s.time_zone)
                .bind(s.parkies_per_hour)
                .bind(s.parkies_per_minute)
                .bind(s.overnight_fee)
                .bind(i64::from(s.overnight_enabled))
                .bind(&s.name)
                .bind(&s.address)
                .bind(i64::from(s.entrances_open))
                .bind(hours.as_deref())
                .fetch_one(&mut *tx)
                .await?;
                let park = park_of(&row)?;
                let table = billed(new.table.clone(), &park).map_err(StoreError::internal)?;
                new_table_version!(tx, &park, &table, Some(by), now);
                tx.audit(&Entry::new(by, "park.created", subject(park.number)).after(&park))
                    .await?;
                Ok(park)
            });
            r
        })
        .await
    }

    /// Changes park `number`'s settings as `change` says; `by` is the park manager. Returns
    /// the park before and after. A change of time zone stores the park's table again under
    /// it (a new version, announced), since the payments service bills by the park's clock.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; database failures.
    pub async fn update_park(
        &self,
        number: i64,
        change: &ParkChange,
        by: i64,
    ) -> Result<(Park, Park), StoreError> {
        let now = Timestamp::now();
        let changed = retry(|| async {
            let r: Result<(Park, Park), StoreError> = transaction!(self, |tx| {
                // The park's row first (locked until commit), as every change of its table.
                let row = sqlx::query(&format!(
                    "UPDATE parks SET changes = changes + 1 WHERE park_number = $1 \
                     RETURNING {PARK_COLUMNS}"
                ))
                .bind(number)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(row) = row else {
                    return Err(StoreError::not_found("park", number));
                };
                let before = park_of(&row)?;
                let after = change.applied_to(&before);
                if after == before {
                    return Ok((before, after));
                }
                sqlx::query(
                    "UPDATE parks SET name = $1, address = $2, latitude = $3, longitude = $4, \
                     time_zone = $5, entrances_open = $6, opening_hours = $7 WHERE id = $8",
                )
                .bind(&after.name)
                .bind(&after.address)
                .bind(after.latitude)
                .bind(after.longitude)
                .bind(&after.time_zone)
                .bind(i64::from(after.entrances_open))
                .bind(hours_text(after.opening_hours.as_ref())?)
                .bind(after.id)
                .execute(&mut *tx)
                .await?;
                if after.time_zone != before.time_zone {
                    let table = current_table!(tx, after.id);
                    let table = billed(table, &after).map_err(StoreError::internal)?;
                    new_table_version!(tx, &after, &table, Some(by), now);
                }
                tx.audit(
                    &Entry::new(by, "park.changed", subject(number))
                        .before(&before)
                        .after(&after),
                )
                .await?;
                Ok((before, after))
            });
            r
        })
        .await?;
        // The barriers this replica keeps carry their park's clock and hours.
        self.barriers.clear();
        Ok(changed)
    }

    /// Adds `batch`'s spots to park `number`, free and in service, raising its capacity by as
    /// many; `by` is the park manager. Returns the park's capacity after.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown park; [`StoreError::Conflict`]
    /// `spot_number_taken` when one of the numbers is the park's already (nothing is added);
    /// database failures.
    pub async fn create_spots(
        &self,
        number: i64,
        batch: &SpotBatch,
        by: i64,
    ) -> Result<i64, StoreError> {
        let count = i64::try_from(batch.numbers.len()).map_err(StoreError::internal)?;
        retry(|| async {
            let r: Result<i64, StoreError> = transaction!(self, |tx| {
                // The park's row first: entrances and exits of the park queue behind it, and
                // its capacity grows with the spots, in one commit.
                let park: Option<(i64, i64)> = sqlx::query_as(
                    "UPDATE parks SET max_occupancy = max_occupancy + $1, changes = changes + 1 \
                     WHERE park_number = $2 RETURNING id, max_occupancy",
                )
                .bind(count)
                .bind(number)
                .fetch_optional(&mut *tx)
                .await?;
                let Some((park_id, capacity)) = park else {
                    return Err(StoreError::not_found("park", number));
                };
                for spot in &batch.numbers {
                    let added: Option<i64> = sqlx::query_scalar(
                        "INSERT INTO spots (park_id, spot_number, spot_type, spot_vehicle_type, \
                         floor_level, occupied, operational) VALUES ($1, $2, $3, $4, $5, 0, 1) \
                         ON CONFLICT (park_id, spot_number) DO NOTHING RETURNING id",
                    )
                    .bind(park_id)
                    .bind(spot)
                    .bind(batch.energy.as_str())
                    .bind(batch.vehicle_type.as_str())
                    .bind(&batch.floor_level)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if added.is_none() {
                        return Err(StoreError::Conflict {
                            reason: "spot_number_taken",
                            field: Some("numbers"),
                            message: format!("park {number} has a spot {spot} already"),
                        });
                    }
                }
                tx.audit(&Entry::new(by, "spots.created", subject(number)).after(batch))
                    .await?;
                Ok(capacity)
            });
            r
        })
        .await
    }
}

impl Store {
    /// Retires spot `spot` of park `number` (`by`: the park manager): out of service for good,
    /// out of the park's capacity and its spot list, kept for the visits that name it. Returns
    /// the park's capacity after.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown park or spot (or one retired already);
    /// [`StoreError::Conflict`] `spot_occupied` while a car is in it; database failures.
    pub async fn retire_spot(&self, number: i64, spot: &str, by: i64) -> Result<i64, StoreError> {
        let park = self.park(number).await?;
        let now = ms(Timestamp::now());
        retry(|| async {
            let r: Result<i64, StoreError> = transaction!(self, |tx| {
                // The spot's row, then the park's: the order entrances and exits take them in.
                let retired: Option<i64> = sqlx::query_scalar(
                    "UPDATE spots SET operational = 0, retired_at_ms = $1 WHERE park_id = $2 \
                     AND spot_number = $3 AND occupied = 0 AND retired_at_ms IS NULL RETURNING id",
                )
                .bind(now)
                .bind(park.id)
                .bind(spot)
                .fetch_optional(&mut *tx)
                .await?;
                if retired.is_none() {
                    let occupied: Option<i64> = sqlx::query_scalar(
                        "SELECT occupied FROM spots WHERE park_id = $1 AND spot_number = $2 \
                         AND retired_at_ms IS NULL",
                    )
                    .bind(park.id)
                    .bind(spot)
                    .fetch_optional(&mut *tx)
                    .await?;
                    return Err(match occupied {
                        Some(_) => StoreError::Conflict {
                            reason: "spot_occupied",
                            field: None,
                            message: format!(
                                "spot {spot} has a car in it: retire it once the car has left"
                            ),
                        },
                        None => StoreError::not_found("spot", spot),
                    });
                }
                let capacity: i64 = sqlx::query_scalar(
                    "UPDATE parks SET max_occupancy = max_occupancy - 1, changes = changes + 1 \
                     WHERE id = $1 RETURNING max_occupancy",
                )
                .bind(park.id)
                .fetch_one(&mut *tx)
                .await?;
                let entry = Entry::new(by, "spot.retired", subject(number))
                    .after(&serde_json::json!({"spot": spot, "capacity": capacity}));
                tx.audit(&entry).await?;
                Ok(capacity)
            });
            r
        })
        .await
    }
}

#[cfg(test)]
mod tests;
