//! What the payments service keeps of other services' data, kept in step by their events: each
//! park's price tables, every version (parks owns them; an invoice names the version it was
//! priced with), the customers and their vehicles (users), and the open visits (parks), for
//! quotes. Each write records the consumer's position in the same transaction and is keyed by
//! its subject, so an event applied again leaves the same rows. (Open visits are written with
//! the invoices, in a run of parks' events: [`super::invoices`].)

use std::sync::Arc;

use jiff::tz::TimeZone;
use pms_events::conn::EventConn;
use pms_events::{Applied, Event};
use pms_service::store::retry;
use pms_service::{repeatable, transaction};
use pms_tariff::json::TableDoc;
use pms_tariff::PriceTable;
use pms_vocab::VehicleType;
use serde::Deserialize;

use super::{Store, StoreError};

/// The consumer name the payments service records its positions under.
pub const CONSUMER: &str = "payments";

/// `price_table.changed` v1.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceTableDoc {
    /// Park id.
    pub park_id: i64,
    /// Park number.
    pub park_number: i64,
    /// Version.
    pub version: i64,
    /// From when (RFC 3339).
    pub valid_from: jiff::Timestamp,
    /// The park's clock.
    pub time_zone: String,
    /// The table.
    pub table: TableDoc,
}

pub use pms_vocab::customer::{CustomerDoc, VehicleDoc};

/// `visit.opened` v1.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VisitOpened {
    /// Visit id.
    pub visit_id: i64,
    /// Park id.
    pub park_id: i64,
    /// Customer.
    pub customer_id: i64,
    /// Plate.
    pub plate: String,
    /// Vehicle type.
    pub vehicle_type: VehicleType,
    /// Entry.
    pub entered_at: jiff::Timestamp,
}

/// A price table as stored, with what pricing needs besides it.
#[derive(Debug, Clone)]
pub struct StoredTable {
    /// Version.
    pub version: i64,
    /// The park's clock.
    pub time_zone: TimeZone,
    /// Its name.
    pub time_zone_name: String,
    /// The table.
    pub table: PriceTable,
}

/// A price table version as stored (the document not yet parsed).
#[derive(Debug, Clone)]
pub struct TableVersion {
    /// Park id.
    pub park_id: i64,
    /// Version.
    pub version: i64,
    /// In force from (epoch ms).
    pub valid_from_ms: i64,
    /// The park's clock.
    pub time_zone: String,
    /// The table, as JSON.
    pub document: String,
}

impl TableVersion {
    /// The version ready for pricing.
    ///
    /// # Errors
    /// A stored document or time zone that does not parse (a bug: they were checked when the
    /// event was applied).
    pub fn parse(&self) -> Result<StoredTable, StoreError> {
        let doc: TableDoc = serde_json::from_str(&self.document).map_err(StoreError::internal)?;
        Ok(StoredTable {
            version: self.version,
            time_zone: TimeZone::get(&self.time_zone).map_err(StoreError::internal)?,
            time_zone_name: self.time_zone.clone(),
            table: doc.to_table().map_err(StoreError::internal)?,
        })
    }
}

/// The version in force at `at_ms` ([`pms_tariff::version_in_force`]).
pub fn in_force(versions: &[TableVersion], at_ms: i64) -> Option<&TableVersion> {
    let version =
        pms_tariff::version_in_force(versions.iter().map(|t| (t.version, t.valid_from_ms)), at_ms)?;
    versions.iter().find(|t| t.version == version)
}

impl Store {
    /// Stores a price table version; records the position.
    ///
    /// # Errors
    /// Database failures.
    pub async fn apply_price_table(
        &self,
        t: &PriceTableDoc,
        event: &Event,
    ) -> Result<(), StoreError> {
        let doc = serde_json::to_string(&t.table).map_err(StoreError::internal)?;
        retry(|| async {
            let r: Result<(), StoreError> = transaction!(self, |tx| {
                sqlx::query(
                    "INSERT INTO price_tables (park_id, version, park_number, valid_from_ms, time_zone, document) \
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (park_id, version) DO NOTHING",
                )
                .bind(t.park_id)
                .bind(t.version)
                .bind(t.park_number)
                .bind(t.valid_from.as_millisecond())
                .bind(&t.time_zone)
                .bind(&doc)
                .execute(&mut *tx)
                .await?;
                tx.record_position(CONSUMER, Applied::one(event)).await?;
                Ok::<(), StoreError>(())
            });
            r
        })
        .await
    }

    /// Upserts a customer and replaces their vehicles; records the position.
    ///
    /// # Errors
    /// Database failures.
    pub async fn apply_customer(&self, c: &CustomerDoc, event: &Event) -> Result<(), StoreError> {
        let name = format!("{} {}", c.first_name, c.last_name);
        retry(|| async {
            let r: Result<(), StoreError> = transaction!(self, |tx| {
                sqlx::query(
                    "INSERT INTO customers (id, nif, name) VALUES ($1, $2, $3) \
                     ON CONFLICT (id) DO UPDATE SET nif = excluded.nif, name = excluded.name",
                )
                .bind(c.user_id)
                .bind(c.nif)
                .bind(&name)
                .execute(&mut *tx)
                .await?;
                sqlx::query("DELETE FROM vehicles WHERE customer_id = $1")
                    .bind(c.user_id)
                    .execute(&mut *tx)
                    .await?;
                for v in &c.vehicles {
                    sqlx::query(
                        "INSERT INTO vehicles (plate, customer_id, vehicle_type) VALUES ($1, $2, $3) \
                         ON CONFLICT (plate) DO UPDATE SET customer_id = excluded.customer_id, vehicle_type = excluded.vehicle_type",
                    )
                    .bind(&v.license_plate_number)
                    .bind(c.user_id)
                    .bind(v.vehicle_type.as_str())
                    .execute(&mut *tx)
                    .await?;
                }
                tx.record_position(CONSUMER, Applied::one(event)).await?;
                Ok::<(), StoreError>(())
            });
            r
        })
        .await
    }

    /// Applies `customer.closed`: forgets the customer and their vehicles (their name, tax
    /// number and plates), and has the tax number and plate rewritten out of their invoices' events
    /// once every reader of the outbox has them (`pms_events::erasure`); records the position.
    /// Invoices stay as issued, tax number and plate included, as the law requires; an open
    /// visit stays until its invoice (the car inside can leave, and its stay is invoiced from its
    /// `visit.closed`).
    ///
    /// # Errors
    /// Database failures.
    pub async fn apply_closure(&self, user_id: i64, event: &Event) -> Result<(), StoreError> {
        let erased = pms_vocab::personal::erased_invoice();
        retry(|| async {
            let r: Result<(), StoreError> = transaction!(self, |tx| {
                let invoices: Vec<i64> =
                    sqlx::query_scalar("SELECT id FROM invoices WHERE customer_id = $1")
                        .bind(user_id)
                        .fetch_all(&mut *tx)
                        .await?;
                for invoice in invoices {
                    tx.erase_when_passed("invoice", &invoice.to_string(), &erased)
                        .await?;
                }
                sqlx::query("DELETE FROM vehicles WHERE customer_id = $1")
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM customers WHERE id = $1")
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
                // Set aside: their states go; a stay's events stay as written, for the invoice
                // still owed (it names the tax number, as the law wants).
                tx.erase_parked(user_id, &["customer.registered", "customer.changed"])
                    .await?;
                tx.record_position(CONSUMER, Applied::one(event)).await?;
                Ok::<(), StoreError>(())
            });
            r
        })
        .await
    }

    /// Every stored version of park `park_id`'s price table, unparsed.
    ///
    /// # Errors
    /// Database failures.
    pub async fn table_versions(&self, park_id: i64) -> Result<Vec<TableVersion>, StoreError> {
        let rows: Vec<(i64, i64, String, String)> = repeatable!(self, |conn| {
            sqlx::query_as(
                "SELECT version, valid_from_ms, time_zone, document FROM price_tables WHERE park_id = $1",
            )
            .bind(park_id)
            .fetch_all(&mut *conn)
            .await
        })?;
        Ok(rows
            .into_iter()
            .map(
                |(version, valid_from_ms, time_zone, document)| TableVersion {
                    park_id,
                    version,
                    valid_from_ms,
                    time_zone,
                    document,
                },
            )
            .collect())
    }

    /// Version `version` of park id `park_id`'s table, parsed once per process; `None` when
    /// payments does not have it.
    ///
    /// # Errors
    /// Database failures; a stored document that does not parse.
    pub async fn table_version(
        &self,
        park_id: i64,
        version: i64,
    ) -> Result<Option<Arc<StoredTable>>, StoreError> {
        if let Some(table) = self.parsed.get(park_id, version) {
            return Ok(Some(table));
        }
        let row: Option<(i64, String, String)> = repeatable!(self, |conn| {
            sqlx::query_as(
                "SELECT valid_from_ms, time_zone, document FROM price_tables WHERE park_id = $1 AND version = $2",
            )
            .bind(park_id)
            .bind(version)
            .fetch_optional(&mut *conn)
            .await
        })?;
        let Some((valid_from_ms, time_zone, document)) = row else {
            return Ok(None);
        };
        let stored = TableVersion {
            park_id,
            version,
            valid_from_ms,
            time_zone,
            document,
        };
        self.parsed_version(&stored).map(Some)
    }

    /// A stored version ready for pricing, parsed once per process.
    ///
    /// # Errors
    /// A stored document that does not parse.
    pub fn parsed_version(&self, stored: &TableVersion) -> Result<Arc<StoredTable>, StoreError> {
        match self.parsed.get(stored.park_id, stored.version) {
            Some(table) => Ok(table),
            None => Ok(self
                .parsed
                .keep(stored.park_id, stored.version, stored.parse()?)),
        }
    }

    /// The table of park id `park_id` in force at `at_ms` ([`in_force`]).
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the park has no table; database failures.
    pub async fn table_at(&self, park_id: i64, at_ms: i64) -> Result<StoredTable, StoreError> {
        let versions = self.table_versions(park_id).await?;
        in_force(&versions, at_ms)
            .ok_or_else(|| StoreError::not_found("price table of park", park_id))?
            .parse()
    }

    /// The tax number payments knows for user `customer_id`.
    ///
    /// # Errors
    /// Database failures.
    pub async fn customer_nif(&self, customer_id: i64) -> Result<Option<i64>, StoreError> {
        Ok(repeatable!(self, |conn| sqlx::query_scalar(
            "SELECT nif FROM customers WHERE id = $1"
        )
        .bind(customer_id)
        .fetch_optional(&mut *conn)
        .await)?)
    }

    /// The owner (id, tax number) and type of the vehicle with `plate`.
    ///
    /// # Errors
    /// Database failures.
    pub async fn vehicle(
        &self,
        plate: &str,
    ) -> Result<Option<(i64, i64, VehicleType)>, StoreError> {
        let row: Option<(i64, i64, String)> = repeatable!(self, |conn| {
            sqlx::query_as(
            "SELECT c.id, c.nif, v.vehicle_type FROM vehicles v JOIN customers c ON c.id = v.customer_id WHERE v.plate = $1"
        )
        .bind(plate)
        .fetch_optional(&mut *conn)
        .await
        })?;
        row.map(|(id, nif, t)| {
            VehicleType::parse(&t)
                .map(|t| (id, nif, t))
                .ok_or_else(|| StoreError::internal(t))
        })
        .transpose()
    }

    /// The open visit of `plate`: (visit, park, customer, vehicle type, entry ms).
    ///
    /// # Errors
    /// Database failures.
    pub async fn open_visit(
        &self,
        plate: &str,
    ) -> Result<Option<(i64, i64, i64, VehicleType, i64)>, StoreError> {
        let row: Option<(i64, i64, i64, String, i64)> = repeatable!(self, |conn| {
            sqlx::query_as(
            "SELECT visit_id, park_id, customer_id, vehicle_type, entered_at_ms FROM open_visits \
             WHERE plate = $1 ORDER BY visit_id DESC LIMIT 1"
        )
        .bind(plate)
        .fetch_optional(&mut *conn)
        .await
        })?;
        row.map(|(v, p, c, t, e)| {
            VehicleType::parse(&t)
                .map(|t| (v, p, c, t, e))
                .ok_or_else(|| StoreError::internal(t))
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::runs::tests::store;

    fn event(id: i64, source: &str, event_type: &str, payload: serde_json::Value) -> Event {
        Event {
            id,
            prev: id - 1,
            source: source.into(),
            aggregate_type: "customer".into(),
            aggregate_id: "6".into(),
            event_type: event_type.into(),
            version: 1,
            payload,
            created_at: String::new(),
        }
    }

    /// A closure erases the customer's states set aside here, and keeps a stay of theirs set
    /// aside as written: the invoice still owed names the tax number.
    #[tokio::test]
    async fn a_closure_erases_the_states_set_aside_and_keeps_the_stays() {
        for postgres in [false, true] {
            let Some((store, _dir)) = store(postgres).await else {
                continue;
            };
            let state = event(
                5,
                "users",
                "customer.changed",
                json!({"userId": 6, "firstName": "Rui", "lastName": "Soares", "nif": 514884112}),
            );
            let stay = event(
                9,
                "parks",
                "visit.closed",
                json!({"visitId": 9, "customerId": 6, "nif": 514884112, "plate": "46-ON-05"}),
            );
            let parked: Result<(), sqlx::Error> = transaction!(&store, |tx| {
                tx.park(CONSUMER, &state, "a version not read here").await?;
                tx.park(CONSUMER, &stay, "no price table").await
            });
            parked.expect("parked");
            store
                .apply_closure(
                    6,
                    &event(1, "users", "customer.closed", json!({"userId": 6})),
                )
                .await
                .expect("closure");
            let kept: Vec<(String, String)> = repeatable!(&store, |conn| {
                sqlx::query_as("SELECT event_type, payload FROM parked_events ORDER BY event_id")
                    .fetch_all(&mut *conn)
                    .await
            })
            .expect("parked");
            assert_eq!(kept.len(), 2);
            assert!(
                !kept[0].1.contains("Soares") && !kept[0].1.contains("514884112"),
                "{kept:?}"
            );
            assert!(
                kept[1].1.contains("514884112") && kept[1].1.contains("46-ON-05"),
                "{kept:?}"
            );
        }
    }
}
