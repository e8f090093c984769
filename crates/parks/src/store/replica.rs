//! What the parks service keeps of other services' data, kept in step by their events: customers
//! and their vehicles (from users), and each visit's invoice (from payments). Every change here
//! records the consumer's position in the same transaction (see `pms-events`), and each is an
//! upsert keyed by the subject, so applying an event again leaves the same rows.

use pms_events::conn::EventConn;
use pms_events::Event;
use pms_service::transaction;
use pms_service::vocab::{EnergySource, UserStatus, VehicleType};
use serde::Deserialize;

use jiff::Timestamp;

use super::{ms, Store, StoreError};
use crate::rules;

/// The consumer name the parks service records its positions under.
pub const CONSUMER: &str = "parks";

/// A vehicle as the users service's events carry it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VehicleDoc {
    /// Plate.
    pub license_plate_number: String,
    /// Vehicle type.
    pub vehicle_type: VehicleType,
    /// Energy source.
    pub vehicle_energy_source: EnergySource,
}

/// A customer as `customer.registered` (v1) and `customer.changed` (v1) carry them.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomerDoc {
    /// User id.
    pub user_id: i64,
    /// First name.
    pub first_name: String,
    /// Last name.
    pub last_name: String,
    /// Tax number.
    pub nif: i64,
    /// Account status.
    pub user_status: UserStatus,
    /// Every vehicle the customer has now.
    pub vehicles: Vec<VehicleDoc>,
}

/// `invoice.issued` (v1), what parks needs of it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvoiceDoc {
    /// Invoice id.
    pub invoice_id: i64,
    /// The visit it bills.
    pub visit_id: i64,
    /// The visit's park (its id), when the event says.
    #[serde(default)]
    pub park_id: Option<i64>,
    /// What the customer pays, exact decimal text.
    pub final_price: String,
    /// The PARKY discount, exact decimal text.
    pub discount: String,
}

impl Store {
    /// Upserts a customer and replaces their vehicles; records `event`'s position.
    ///
    /// # Errors
    /// Database failures.
    pub async fn apply_customer(&self, c: &CustomerDoc, event: &Event) -> Result<(), StoreError> {
        let name = format!("{} {}", c.first_name, c.last_name);
        super::retry(|| async {
            let r: Result<(), StoreError> = transaction!(self, |tx| {
                sqlx::query(
                    "INSERT INTO customers (id, nif, name, status) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (id) DO UPDATE SET nif = excluded.nif, name = excluded.name, status = excluded.status",
                )
                .bind(c.user_id)
                .bind(c.nif)
                .bind(&name)
                .bind(c.user_status.as_str())
                .execute(&mut *tx)
                .await?;
                sqlx::query("DELETE FROM vehicles WHERE customer_id = $1")
                    .bind(c.user_id)
                    .execute(&mut *tx)
                    .await?;
                for v in &c.vehicles {
                    sqlx::query(
                        "INSERT INTO vehicles (plate, customer_id, vehicle_type, energy_source) VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (plate) DO UPDATE SET customer_id = excluded.customer_id, \
                         vehicle_type = excluded.vehicle_type, energy_source = excluded.energy_source",
                    )
                    .bind(&v.license_plate_number)
                    .bind(c.user_id)
                    .bind(v.vehicle_type.as_str())
                    .bind(v.vehicle_energy_source.as_str())
                    .execute(&mut *tx)
                    .await?;
                }
                tx.record_position(CONSUMER, &event.source, event.id).await?;
                Ok::<(), StoreError>(())
            });
            r
        })
        .await
    }

    /// Puts an invoice's price on its visit and on its exit's displays (those still showing
    /// that visit's goodbye without a price); records `event`'s position. Returns whether the
    /// visit exists here.
    ///
    /// # Errors
    /// Database failures.
    pub async fn apply_invoice(&self, i: &InvoiceDoc, event: &Event) -> Result<bool, StoreError> {
        let known = self
            .apply_invoices(std::slice::from_ref(i), &event.source, event.id)
            .await?;
        Ok(known.first().copied().unwrap_or(false))
    }

    /// [`Store::apply_invoice`] for a run of invoices, in one transaction that records
    /// `position` in `source`'s events (the run's last). Returns, per invoice, whether its
    /// visit exists here.
    ///
    /// # Errors
    /// Database failures (nothing is written then).
    pub async fn apply_invoices(
        &self,
        invoices: &[InvoiceDoc],
        source: &str,
        position: i64,
    ) -> Result<Vec<bool>, StoreError> {
        let now = ms(Timestamp::now());
        super::retry(|| async {
            let r: Result<Vec<bool>, StoreError> = transaction!(self, |tx| {
                let mut known = Vec::with_capacity(invoices.len());
                for i in invoices {
                    let visit: Option<(Option<i64>, Option<String>)> = sqlx::query_as(
                        "UPDATE visits SET invoice_id = $1, price = $2, discount = $3 WHERE id = $4 \
                         RETURNING exit_barrier_id, (SELECT name FROM customers c WHERE c.id = visits.customer_id)",
                    )
                    .bind(i.invoice_id)
                    .bind(&i.final_price)
                    .bind(&i.discount)
                    .bind(i.visit_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some((Some(barrier), Some(name))) = &visit {
                        // The exit's displays still saying this visit's goodbye get its price.
                        let priced = rules::goodbye(
                            name,
                            Some((
                                &rules::shown_money(&i.final_price),
                                &rules::shown_money(&i.discount),
                            )),
                        );
                        sqlx::query(
                            "UPDATE displays SET message = $1, updated_at_ms = $2, changes = changes + 1 \
                             WHERE barrier_id = $3 AND state = 'ACTIVE' AND message = $4",
                        )
                        .bind(priced)
                        .bind(now)
                        .bind(barrier)
                        .bind(rules::goodbye(name, None))
                        .execute(&mut *tx)
                        .await?;
                    }
                    known.push(visit.is_some());
                }
                tx.record_position(CONSUMER, source, position).await?;
                Ok::<Vec<bool>, StoreError>(known)
            });
            r
        })
        .await
    }

    /// Sets a customer's "pay my next visit with coins" flag.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when parks does not know the customer; database failures.
    pub async fn set_coin_flag(&self, customer_id: i64, on: bool) -> Result<(), StoreError> {
        let n = pms_service::repeatable!(self, |conn| sqlx::query(
            "UPDATE customers SET use_parky_coins = $1 WHERE id = $2"
        )
        .bind(i64::from(on))
        .bind(customer_id)
        .execute(&mut *conn)
        .await
        .map(|r| r.rows_affected()))?;
        if n == 0 {
            return Err(StoreError::not_found("customer", customer_id));
        }
        Ok(())
    }

    /// A customer's coin flag.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; database failures.
    pub async fn coin_flag(&self, customer_id: i64) -> Result<bool, StoreError> {
        let v: Option<i64> = pms_service::repeatable!(self, |conn| sqlx::query_scalar(
            "SELECT use_parky_coins FROM customers WHERE id = $1"
        )
        .bind(customer_id)
        .fetch_optional(&mut *conn)
        .await)?;
        v.map(super::flag)
            .ok_or_else(|| StoreError::not_found("customer", customer_id))
    }
}
