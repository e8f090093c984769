//! Parks, spots, PARKY thresholds, the overnight fee and price tables: what a park manager
//! reads and changes. Every change to what is billed (the table or the overnight fee) stores a
//! new version of the park's price table and appends `price_table.changed` in the same
//! transaction, so the payments service bills from exactly the table the manager set.

use jiff::Timestamp;
use pms_events::conn::EventConn;
use pms_events::NewEvent;
use pms_service::audit::{AuditConn, Entry};
use pms_service::{repeatable, transaction};
use pms_tariff::json::TableDoc;
use pms_tariff::PriceTable;
use pms_vocab::{EnergySource, VehicleType};
use rust_decimal::Decimal;
use serde::Serialize;
use sqlx::Row;

use super::{flag, instant, ms, retry, Store, StoreError};
use crate::hours::OpeningHours;
use crate::model::{NearbyPark, Occupancy, Spot, SpotChange, SpotTypeOccupancy};
use crate::rules;

/// A park's settings, as stored and as `getPark` answers them.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Park {
    /// Internal id (equal to the number for seeded parks).
    #[serde(rename = "parkId")]
    pub id: i64,
    /// Business number.
    #[serde(rename = "parkNumber")]
    pub number: i64,
    /// Its name.
    pub name: String,
    /// Its street address.
    pub address: String,
    /// Most cars at once: its spots, in service or not.
    #[serde(rename = "capacity")]
    pub max_occupancy: i64,
    /// Latitude.
    pub latitude: f64,
    /// Longitude.
    pub longitude: f64,
    /// IANA time zone of its clock.
    pub time_zone: String,
    /// PARKY earned per hour parked.
    pub parkies_per_hour: i64,
    /// PARKY earned per minute.
    pub parkies_per_minute: i64,
    /// Overnight fee, whole euros.
    pub overnight_fee: i64,
    /// Whether the overnight fee is charged.
    pub overnight_enabled: bool,
    /// Whether its entrances take cars (within its opening hours); exits always let cars out.
    pub entrances_open: bool,
    /// When its entrances take cars; none: always.
    pub opening_hours: Option<OpeningHours>,
}

pub(crate) const PARK_COLUMNS: &str =
    "id, park_number, max_occupancy, latitude, longitude, time_zone, \
     parkies_per_hour, parkies_per_minute, overnight_fee, overnight_enabled, name, address, \
     entrances_open, opening_hours";

pub(crate) fn park_of<R: Row>(r: &R) -> Result<Park, sqlx::Error>
where
    usize: sqlx::ColumnIndex<R>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> f64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let hours: Option<String> = r.try_get(13)?;
    Ok(Park {
        id: r.try_get(0)?,
        number: r.try_get(1)?,
        max_occupancy: r.try_get(2)?,
        latitude: r.try_get(3)?,
        longitude: r.try_get(4)?,
        time_zone: r.try_get(5)?,
        parkies_per_hour: r.try_get(6)?,
        parkies_per_minute: r.try_get(7)?,
        overnight_fee: r.try_get(8)?,
        overnight_enabled: flag(r.try_get(9)?),
        name: r.try_get(10)?,
        address: r.try_get(11)?,
        entrances_open: flag(r.try_get(12)?),
        opening_hours: hours
            .map(|h| serde_json::from_str(&h))
            .transpose()
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
    })
}

/// How the audit trail names park `number`.
pub(crate) fn subject(number: i64) -> String {
    format!("park {number}")
}

/// `price_table.changed`, version 1: the table a park bills with from `validFrom` on.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceTableChanged {
    /// Park id.
    pub park_id: i64,
    /// Park number.
    pub park_number: i64,
    /// The table's version (1, 2, …) for this park.
    pub version: i64,
    /// From when it applies (RFC 3339 UTC).
    pub valid_from: String,
    /// The park's clock.
    pub time_zone: String,
    /// The table, overnight fee included when the park charges one.
    pub table: TableDoc,
}

/// The table as billed: the manager's table with the park's overnight fee when enabled.
pub fn billed(table: PriceTable, park: &Park) -> Result<PriceTable, pms_tariff::TableError> {
    let overnight = park
        .overnight_enabled
        .then(|| Decimal::from(park.overnight_fee));
    let (grace, cap, min) = (table.grace, table.daily_max, table.minimum);
    table.with_extras(grace, cap, min, overnight)
}

/// Appends a new version of `$park`'s table (`$table`, already billed) and its event, on `$tx`.
macro_rules! new_table_version {
    ($tx:ident, $park:expr, $table:expr, $by:expr, $at:expr) => {{
        let park: &Park = $park;
        let doc = TableDoc::from($table);
        let version: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(version), 0) + 1 FROM price_tables WHERE park_id = $1",
        )
        .bind(park.id)
        .fetch_one(&mut *$tx)
        .await?;
        let text = serde_json::to_string(&doc).map_err(|e| StoreError::Internal(e.to_string()))?;
        sqlx::query(
            "INSERT INTO price_tables (park_id, version, valid_from_ms, document, changed_by) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(park.id)
        .bind(version)
        .bind(ms($at))
        .bind(&text)
        .bind($by)
        .execute(&mut *$tx)
        .await?;
        let event = NewEvent::new(
            "park",
            park.id,
            "price_table.changed",
            1,
            &PriceTableChanged {
                park_id: park.id,
                park_number: park.number,
                version,
                valid_from: $at.to_string(),
                time_zone: park.time_zone.clone(),
                table: doc,
            },
        )
        .map_err(|e| StoreError::Internal(e.to_string()))?;
        $tx.append(&event).await?;
        version
    }};
}
pub(crate) use new_table_version;

/// The newest table of park id `$park` on `$tx` (as billed).
macro_rules! current_table {
    ($tx:ident, $park:expr) => {{
        let doc: String = sqlx::query_scalar(
            "SELECT document FROM price_tables WHERE park_id = $1 ORDER BY version DESC LIMIT 1",
        )
        .bind($park)
        .fetch_optional(&mut *$tx)
        .await?
        .ok_or_else(|| StoreError::not_found("price table of park", $park))?;
        serde_json::from_str::<TableDoc>(&doc)
            .map_err(StoreError::internal)?
            .to_table()
            .map_err(StoreError::internal)?
    }};
}

pub(crate) use current_table;

impl Store {
    /// Every park, by number.
    ///
    /// # Errors
    /// Database failures.
    pub async fn parks(&self) -> Result<Vec<Park>, StoreError> {
        let sql = format!("SELECT {PARK_COLUMNS} FROM parks ORDER BY park_number");
        Ok(repeatable!(self, |conn| {
            let rows = sqlx::query(&sql).fetch_all(&mut *conn).await?;
            rows.iter().map(park_of).collect::<Result<Vec<_>, _>>()
        })?)
    }

    /// The park with business number `number`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; database failures.
    pub async fn park(&self, number: i64) -> Result<Park, StoreError> {
        self.park_where("park_number", number).await
    }

    /// The park with internal id `id`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; database failures.
    pub async fn park_by_id(&self, id: i64) -> Result<Park, StoreError> {
        self.park_where("id", id).await
    }

    /// The park whose `column` (a key: `id` or `park_number`) is `value`.
    async fn park_where(&self, column: &'static str, value: i64) -> Result<Park, StoreError> {
        let sql = format!("SELECT {PARK_COLUMNS} FROM parks WHERE {column} = $1");
        let park = repeatable!(self, |conn| {
            match sqlx::query(&sql)
                .bind(value)
                .fetch_optional(&mut *conn)
                .await?
            {
                Some(r) => park_of(&r).map(Some),
                None => Ok(None),
            }
        })?;
        park.ok_or_else(|| StoreError::not_found("park", value))
    }

    /// Free spots (operational, not occupied) per park id.
    async fn free_by_park(&self) -> Result<Vec<(i64, VehicleType, EnergySource, i64)>, StoreError> {
        let rows: Vec<(i64, String, String, i64)> = repeatable!(self, |conn| sqlx::query_as(
            "SELECT park_id, spot_vehicle_type, spot_type, COUNT(*) FROM spots \
             WHERE operational = 1 AND occupied = 0 GROUP BY park_id, spot_vehicle_type, spot_type"
        )
        .fetch_all(&mut *conn)
        .await)?;
        rows.into_iter()
            .map(|(p, v, e, n)| {
                let v = VehicleType::parse(&v).ok_or_else(|| StoreError::Internal(v.clone()))?;
                let e = EnergySource::parse(&e).ok_or_else(|| StoreError::Internal(e.clone()))?;
                Ok((p, v, e, n))
            })
            .collect()
    }

    /// `getAllOccupancies`.
    ///
    /// # Errors
    /// Database failures.
    pub async fn occupancies(&self) -> Result<Vec<Occupancy>, StoreError> {
        let free = self.free_by_park().await?;
        Ok(self
            .parks()
            .await?
            .into_iter()
            .map(|p| Occupancy {
                parkid: p.id,
                park_number: p.number,
                occupancy: p.max_occupancy,
                current_capacity: free.iter().filter(|f| f.0 == p.id).map(|f| f.3).sum(),
            })
            .collect())
    }

    /// Parks within `max_km` of a point, nearest first, with free spots per type.
    ///
    /// # Errors
    /// Database failures.
    pub async fn nearby(
        &self,
        lat: f64,
        lon: f64,
        max_km: f64,
    ) -> Result<Vec<NearbyPark>, StoreError> {
        let free = self.free_by_park().await?;
        let mut out: Vec<NearbyPark> = self
            .parks()
            .await?
            .into_iter()
            .filter_map(|p| {
                let d = rules::distance_km(lat, lon, p.latitude, p.longitude);
                (d <= max_km).then(|| NearbyPark {
                    park_id: p.id,
                    distance_km: d,
                    spot_type_occupancies: VehicleType::ALL
                        .iter()
                        .flat_map(|v| EnergySource::ALL.iter().map(move |e| (*v, *e)))
                        .map(|(v, e)| SpotTypeOccupancy {
                            spot_vehicle_type: v,
                            spot_type: e,
                            available_spots: free
                                .iter()
                                .filter(|f| f.0 == p.id && f.1 == v && f.2 == e)
                                .map(|f| f.3)
                                .sum(),
                        })
                        .collect(),
                    latitude: p.latitude,
                    longitude: p.longitude,
                })
            })
            .collect();
        out.sort_by(|a, b| a.distance_km.total_cmp(&b.distance_km));
        Ok(out)
    }

    /// Every spot of a park, by number.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown park; database failures.
    pub async fn spots(&self, number: i64) -> Result<Vec<Spot>, StoreError> {
        let park = self.park(number).await?;
        type SpotRow = (
            String,
            String,
            String,
            String,
            i64,
            i64,
            Option<String>,
            Option<i64>,
            Option<i64>,
        );
        let rows: Vec<SpotRow> = repeatable!(self, |conn| {
            sqlx::query_as(
            "SELECT s.spot_number, s.spot_type, s.spot_vehicle_type, s.floor_level, s.occupied, s.operational, \
                    h.changed_by, h.changed_at_ms, h.operational \
             FROM spots s \
             LEFT JOIN spot_history h ON h.id = (SELECT max(id) FROM spot_history WHERE spot_id = s.id) \
             WHERE s.park_id = $1 AND s.retired_at_ms IS NULL ORDER BY s.floor_level, s.spot_number"
        )
        .bind(park.id)
        .fetch_all(&mut *conn)
        .await
        })?;
        rows.into_iter()
            .map(|(n, t, v, f, o, op, by, at, was)| {
                Ok(Spot {
                    spot_number: n,
                    spot_type: EnergySource::parse(&t)
                        .ok_or_else(|| StoreError::Internal(t.clone()))?,
                    spot_vehicle_type: VehicleType::parse(&v)
                        .ok_or_else(|| StoreError::Internal(v.clone()))?,
                    floor_level: f,
                    occupied: flag(o),
                    operational: flag(op),
                    last_change: match (by, at, was) {
                        (Some(by), Some(at), Some(was)) => Some(SpotChange {
                            by,
                            at: instant(at).to_string(),
                            operational: flag(was),
                        }),
                        _ => None,
                    },
                })
            })
            .collect()
    }

    /// Switches a spot on or off and records who did it; returns the audit sentence.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown park or spot; database failures.
    pub async fn set_spot(
        &self,
        number: i64,
        spot_number: &str,
        operational: bool,
        changed_by: &str,
        manager_id: i64,
    ) -> Result<String, StoreError> {
        let park = self.park(number).await?;
        let message = format!(
            "Spot {spot_number} is now {} and was changed by {changed_by}",
            if operational { "enabled" } else { "disabled" }
        );
        let now = ms(Timestamp::now());
        retry(|| async {
            let r: Result<(), StoreError> = transaction!(self, |tx| {
                let id: Option<i64> = sqlx::query_scalar(
                    "UPDATE spots SET operational = $1 WHERE park_id = $2 AND spot_number = $3 \
                     AND retired_at_ms IS NULL RETURNING id",
                )
                .bind(i64::from(operational))
                .bind(park.id)
                .bind(spot_number)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(id) = id else {
                    return Err(StoreError::not_found("spot", spot_number));
                };
                // Its park's free spots may have changed: followers read the counter again.
                sqlx::query("UPDATE parks SET changes = changes + 1 WHERE id = $1")
                    .bind(park.id)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO spot_history (spot_id, operational, changed_by, manager_id, changed_at_ms, message) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(id)
                .bind(i64::from(operational))
                .bind(changed_by)
                .bind(manager_id)
                .bind(now)
                .bind(&message)
                .execute(&mut *tx)
                .await?;
                let entry = Entry::new(manager_id, "spot.switched", subject(number)).after(
                    &serde_json::json!({"spot": spot_number, "operational": operational}),
                );
                tx.audit(&entry).await?;
                Ok(())
            });
            r
        })
        .await?;
        Ok(message)
    }

    /// Sets a park's PARKY thresholds (`by`: the park manager).
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; database failures.
    pub async fn set_thresholds(
        &self,
        number: i64,
        per_hour: i64,
        per_minute: i64,
        by: i64,
    ) -> Result<(), StoreError> {
        retry(|| async {
            let r: Result<(), StoreError> = transaction!(self, |tx| {
                let before: Option<(i64, i64)> = sqlx::query_as(
                    "SELECT parkies_per_hour, parkies_per_minute FROM parks WHERE park_number = $1",
                )
                .bind(number)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(before) = before else {
                    return Err(StoreError::not_found("park", number));
                };
                sqlx::query(
                    "UPDATE parks SET parkies_per_hour = $1, parkies_per_minute = $2, \
                     changes = changes + 1 WHERE park_number = $3",
                )
                .bind(per_hour)
                .bind(per_minute)
                .bind(number)
                .execute(&mut *tx)
                .await?;
                let doc = |(h, m): (i64, i64)| {
                    serde_json::json!({"parkiesPerHour": h, "parkiesPerMinute": m})
                };
                let entry = Entry::new(by, "thresholds.changed", subject(number))
                    .before(&doc(before))
                    .after(&doc((per_hour, per_minute)));
                tx.audit(&entry).await?;
                Ok(())
            });
            r
        })
        .await?;
        // The barriers this replica keeps carry their park's coin rates.
        self.barriers.clear();
        Ok(())
    }

    /// Switches the overnight fee on or off, or sets its amount; either way a new version of the
    /// billed table.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; database failures.
    pub async fn set_overnight(
        &self,
        number: i64,
        enabled: Option<bool>,
        fee: Option<i64>,
        by: i64,
    ) -> Result<(), StoreError> {
        let now = Timestamp::now();
        retry(|| async {
            let r: Result<(), StoreError> = transaction!(self, |tx| {
                // The park's row first: table versions of one park are made one at a time.
                let row = sqlx::query(&format!(
                    "UPDATE parks SET overnight_enabled = COALESCE($1, overnight_enabled), \
                     overnight_fee = COALESCE($2, overnight_fee), changes = changes + 1 \
                     WHERE park_number = $3 RETURNING {PARK_COLUMNS}"
                ))
                .bind(enabled.map(i64::from))
                .bind(fee)
                .bind(number)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(row) = row else {
                    return Err(StoreError::not_found("park", number));
                };
                let park = park_of(&row)?;
                let current = current_table!(tx, park.id);
                let table = billed(current, &park).map_err(StoreError::internal)?;
                let version = new_table_version!(tx, &park, &table, Some(by), now);
                let entry = Entry::new(by, "overnight.changed", subject(number))
                    .after(&serde_json::json!({"overnightFee": park.overnight_fee,
                        "overnightEnabled": park.overnight_enabled, "tableVersion": version}));
                tx.audit(&entry).await?;
                Ok::<(), StoreError>(())
            });
            r
        })
        .await
    }

    /// The current price table of park id `park_id` (as billed) and its version.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the park has none; database failures.
    pub async fn price_table(&self, park_id: i64) -> Result<(i64, PriceTable), StoreError> {
        let row: Option<(i64, String)> = repeatable!(self, |conn| {
            sqlx::query_as(
            "SELECT version, document FROM price_tables WHERE park_id = $1 ORDER BY version DESC LIMIT 1"
        )
        .bind(park_id)
        .fetch_optional(&mut *conn)
        .await
        })?;
        let (version, doc) =
            row.ok_or_else(|| StoreError::not_found("price table of park", park_id))?;
        let doc: TableDoc =
            serde_json::from_str(&doc).map_err(|e| StoreError::Internal(e.to_string()))?;
        let table = doc
            .to_table()
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        Ok((version, table))
    }

    /// Replaces a park's table with `table` (validated by the caller); returns the new version.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; database failures.
    pub async fn replace_price_table(
        &self,
        number: i64,
        table: PriceTable,
        by: i64,
    ) -> Result<i64, StoreError> {
        let now = Timestamp::now();
        retry(|| async {
            let table = table.clone();
            let r: Result<i64, StoreError> = transaction!(self, |tx| {
                // The park's row first (locked until commit): the overnight fee read here is the
                // one in force, and table versions of one park are made one at a time. Its
                // change counter moves: the park's prices are part of what it shows.
                let row = sqlx::query(&format!(
                    "UPDATE parks SET changes = changes + 1 WHERE park_number = $1 RETURNING {PARK_COLUMNS}"
                ))
                .bind(number)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(row) = row else {
                    return Err(StoreError::not_found("park", number));
                };
                let park = park_of(&row)?;
                let table = billed(table, &park).map_err(StoreError::internal)?;
                let v = new_table_version!(tx, &park, &table, Some(by), now);
                let entry = Entry::new(by, "price_table.replaced", subject(number))
                    .after(&serde_json::json!({"version": v, "table": TableDoc::from(&table)}));
                tx.audit(&entry).await?;
                Ok::<i64, StoreError>(v)
            });
            r
        })
        .await
    }
}
