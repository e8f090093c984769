//! What the parks service keeps of other services' data, kept in step by their events: customers
//! and their vehicles (from users), and each visit's invoice (from payments). Every change here
//! records the consumer's position in the same transaction (see `pms-events`), and each is an
//! upsert keyed by the subject, so applying an event again leaves the same rows.

use std::collections::{HashMap, HashSet};

use pms_events::conn::EventConn;
use pms_events::{Applied, Event};
use pms_service::store::pool::Pool;
use pms_service::store::Pools;
use pms_service::{transaction, transaction_in};
use serde::Deserialize;
use sqlx::postgres::PgConnection;
use sqlx::sqlite::SqliteConnection;

use jiff::Timestamp;

use super::{ms, Store, StoreError};
use crate::rules;

/// The consumer name the parks service records its positions under.
pub const CONSUMER: &str = "parks";

pub use pms_vocab::customer::{CustomerDoc, VehicleDoc};

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

/// A visit an invoice priced: its id, exit barrier, customer's name and coins earned.
type InvoicedVisit = (i64, Option<i64>, Option<String>, Option<i64>);

/// The exit's goodbye to `name` with the invoice's price, and without (what the exit's displays
/// show until the invoice comes: only those still showing it get the price), each with the
/// `coins` the visit earned.
fn priced_goodbye(i: &InvoiceDoc, name: &str, coins: Option<i64>) -> (String, String) {
    let coins = coins.unwrap_or(0);
    let priced = rules::goodbye(
        name,
        Some((
            &rules::shown_money(&i.final_price),
            &rules::shown_money(&i.discount),
        )),
        coins,
    );
    (priced, rules::goodbye(name, None, coins))
}

impl Store {
    /// Upserts a customer and replaces their vehicles; records `event`'s position. A customer
    /// who closed their account stays as the closure left them ([`super::closure`]): an older
    /// state of theirs read again (a replay) changes nothing.
    ///
    /// # Errors
    /// Database failures.
    pub async fn apply_customer(&self, c: &CustomerDoc, event: &Event) -> Result<(), StoreError> {
        let name = format!("{} {}", c.first_name, c.last_name);
        super::retry(|| async {
            let r: Result<(), StoreError> = transaction!(self, |tx| {
                let closed: Option<Option<i64>> =
                    sqlx::query_scalar("SELECT closed_at_ms FROM customers WHERE id = $1")
                        .bind(c.user_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                if closed.flatten().is_some() {
                    tx.record_position(CONSUMER, Applied::one(event)).await?;
                    return Ok(());
                }
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
                tx.record_position(CONSUMER, Applied::one(event)).await?;
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
            .apply_invoices(std::slice::from_ref(i), Applied::one(event))
            .await?;
        Ok(known.first().copied().unwrap_or(false))
    }

    /// [`Store::apply_invoice`] for a run of invoices, in one transaction that moves the
    /// position past `applied` (the run's events). Returns, per invoice, whether its
    /// visit exists here. On PostgreSQL the run takes two statements whatever its length (each
    /// statement is a round trip there), on SQLite two per invoice.
    ///
    /// # Errors
    /// Database failures (nothing is written then).
    pub async fn apply_invoices(
        &self,
        invoices: &[InvoiceDoc],
        applied: Applied<'_>,
    ) -> Result<Vec<bool>, StoreError> {
        let now = ms(Timestamp::now());
        match self.pools() {
            Pools::Postgres(pool) => {
                super::retry(|| Self::apply_invoices_at_once(pool, invoices, applied, now)).await
            }
            Pools::Sqlite(pool) => {
                super::retry(|| Self::apply_invoices_in_steps(pool, invoices, applied, now)).await
            }
        }
    }

    /// [`Store::apply_invoices`], a visit and its displays at a time.
    async fn apply_invoices_in_steps(
        pool: &Pool<SqliteConnection>,
        invoices: &[InvoiceDoc],
        applied: Applied<'_>,
        now: i64,
    ) -> Result<Vec<bool>, StoreError> {
        transaction_in!(pool, |tx| {
            let mut known = Vec::with_capacity(invoices.len());
            for i in invoices {
                let visit: Option<(Option<i64>, Option<String>, Option<i64>)> = sqlx::query_as(
                    "UPDATE visits SET invoice_id = $1, price = $2, discount = $3 WHERE id = $4 \
                     RETURNING exit_barrier_id, (SELECT name FROM customers c WHERE c.id = visits.customer_id), \
                     coins_earned",
                )
                .bind(i.invoice_id)
                .bind(&i.final_price)
                .bind(&i.discount)
                .bind(i.visit_id)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some((Some(barrier), Some(name), coins)) = &visit {
                    let (priced, goodbye) = priced_goodbye(i, name, *coins);
                    sqlx::query(
                        "UPDATE displays SET message = $1, updated_at_ms = $2, changes = changes + 1 \
                         WHERE barrier_id = $3 AND state = 'ACTIVE' AND message = $4",
                    )
                    .bind(priced)
                    .bind(now)
                    .bind(barrier)
                    .bind(goodbye)
                    .execute(&mut *tx)
                    .await?;
                }
                known.push(visit.is_some());
            }
            tx.record_position(CONSUMER, applied).await?;
            Ok::<Vec<bool>, StoreError>(known)
        })
    }

    /// [`Store::apply_invoices`] with one statement for the visits and one for the displays.
    /// Both are planned for each run's arrays (not kept prepared): a generic plan made while
    /// `visits` was nearly empty joined it by scanning it whole, and kept doing so as the table
    /// grew (autovacuum had not analyzed it yet).
    async fn apply_invoices_at_once(
        pool: &Pool<PgConnection>,
        invoices: &[InvoiceDoc],
        applied: Applied<'_>,
        now: i64,
    ) -> Result<Vec<bool>, StoreError> {
        let column = |f: fn(&InvoiceDoc) -> String| invoices.iter().map(f).collect::<Vec<_>>();
        transaction_in!(pool, |tx| {
            let visits: Vec<InvoicedVisit> = sqlx::query_as(
                "UPDATE visits v SET invoice_id = i.invoice_id, price = i.price, discount = i.discount \
                 FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS i (invoice_id, price, discount, visit_id) \
                 WHERE v.id = i.visit_id \
                 RETURNING v.id, v.exit_barrier_id, (SELECT name FROM customers c WHERE c.id = v.customer_id), \
                 v.coins_earned",
            )
            .persistent(false)
            .bind(invoices.iter().map(|i| i.invoice_id).collect::<Vec<_>>())
            .bind(column(|i| i.final_price.clone()))
            .bind(column(|i| i.discount.clone()))
            .bind(invoices.iter().map(|i| i.visit_id).collect::<Vec<_>>())
            .fetch_all(&mut *tx)
            .await?;
            let by_visit: HashMap<i64, &InvoiceDoc> =
                invoices.iter().map(|i| (i.visit_id, i)).collect();
            // Sorted by barrier, so two runs lock displays in the same order.
            let mut shown: Vec<(i64, String, String)> = visits
                .iter()
                .filter_map(|(visit, barrier, name, coins)| {
                    let (priced, goodbye) =
                        priced_goodbye(by_visit.get(visit)?, name.as_deref()?, *coins);
                    Some(((*barrier)?, priced, goodbye))
                })
                .collect();
            shown.sort();
            if !shown.is_empty() {
                sqlx::query(
                    "UPDATE displays d SET message = s.priced, updated_at_ms = $4, changes = d.changes + 1 \
                     FROM unnest($1::bigint[], $2::text[], $3::text[]) AS s (barrier_id, priced, goodbye) \
                     WHERE d.barrier_id = s.barrier_id AND d.state = 'ACTIVE' AND d.message = s.goodbye",
                )
                .persistent(false)
                .bind(shown.iter().map(|s| s.0).collect::<Vec<_>>())
                .bind(shown.iter().map(|s| s.1.clone()).collect::<Vec<_>>())
                .bind(shown.iter().map(|s| s.2.clone()).collect::<Vec<_>>())
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            tx.record_position(CONSUMER, applied).await?;
            let found: HashSet<i64> = visits.iter().map(|v| v.0).collect();
            Ok::<Vec<bool>, StoreError>(
                invoices
                    .iter()
                    .map(|i| found.contains(&i.visit_id))
                    .collect(),
            )
        })
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

#[cfg(test)]
mod tests {
    use pms_events::{Applied, Event};
    use serde_json::json;

    use super::super::visits::Passage;
    use super::super::Store;
    use super::{CustomerDoc, InvoiceDoc};
    use crate::rules::goodbye;

    fn event(id: i64, source: &str) -> Event {
        Event {
            id,
            prev: id - 1,
            source: source.into(),
            aggregate_type: "x".into(),
            aggregate_id: "1".into(),
            event_type: "x".into(),
            version: 1,
            payload: serde_json::Value::Null,
            created_at: String::new(),
        }
    }

    fn invoice(id: i64, visit_id: i64, price: &str) -> InvoiceDoc {
        InvoiceDoc {
            invoice_id: id,
            visit_id,
            park_id: Some(1),
            final_price: price.into(),
            discount: "0".into(),
        }
    }

    /// Two cars of park 1 paying with coins in and out (the second out last), then what `run`
    /// leaves: per invoice
    /// whether its visit is known, each visit's (invoice, price), the exit's two displays'
    /// messages, and whether their versions moved.
    async fn priced_run(
        postgres: bool,
    ) -> Option<(Vec<bool>, Vec<(i64, String)>, Vec<String>, bool)> {
        let (store, _dir) = super::super::seeded_for_test(postgres).await?;
        for (id, first, plate) in [(1, "Ana", "AA-00-01"), (2, "Rui", "AA-00-02")] {
            let c: CustomerDoc = serde_json::from_value(json!({
                "userId": id, "firstName": first, "lastName": "Lima", "nif": 100_000_000 + id,
                "email": "ana@example.pt", "role": "CUSTOMER", "userStatus": "ENABLED",
                "paymentMethod": "PAYPAL",
                "vehicles": [{"licensePlateNumber": plate, "vehicleType": "AUTOMOBILE",
                              "vehicleEnergySource": "FUEL"}]
            }))
            .expect("customer");
            store
                .apply_customer(&c, &event(id, "users"))
                .await
                .expect("customer");
            // Paying with coins: the exits are not quoted, so their goodbyes wait for a price.
            store.set_coin_flag(id, true).await.expect("coin flag");
        }
        let (entrance, exit) = (
            store.barrier(1).await.expect("B1.1"),
            store.barrier(2).await.expect("B1.2"),
        );
        let mut visits = Vec::new();
        for (plate, out) in [("AA-00-01", "10:30"), ("AA-00-02", "10:45")] {
            let at = |hm: &str| {
                crate::clock::PassageTime::as_said(
                    format!("2026-11-30T{hm}:00Z").parse().expect("time"),
                )
            };
            store.pass(&entrance, plate, at("10:00")).await.expect("in");
            match store.pass(&exit, plate, at(out)).await.expect("out") {
                Passage::Open { visit_id, .. } => visits.push(visit_id),
                Passage::Refused(r) => panic!("{plate} refused: {r:?}"),
            }
        }
        let versions = |store: &Store| {
            let store = store.clone();
            async move {
                let mut v = Vec::new();
                for d in [2, 3] {
                    v.push(store.display(d).await.expect("display").version);
                }
                v
            }
        };
        let run = [
            invoice(11, visits[0], "0.6"),
            invoice(12, 999, "1"),
            invoice(13, visits[1], "0.75"),
        ];
        let unpriced = versions(&store).await;
        let seventh = Applied {
            source: "payments",
            prev: 6,
            first: 7,
            last: 7,
        };
        let known = store.apply_invoices(&run, seventh).await.expect("apply");
        let priced = versions(&store).await;
        // Again without a replay: refused, the position has moved past it.
        assert!(store.apply_invoices(&run, seventh).await.is_err());
        // Again after a replay set the position back: the same, and the displays are not
        // written again.
        pms_events::position::rewind(store.db(), super::CONSUMER, "payments", 6)
            .await
            .expect("rewind");
        assert_eq!(
            store.apply_invoices(&run, seventh).await.expect("again"),
            known
        );
        assert_eq!(versions(&store).await, priced, "postgres: {postgres}");
        let mut prices = Vec::new();
        for v in &visits {
            let r: Result<(i64, String), sqlx::Error> = pms_service::repeatable!(store, |conn| {
                sqlx::query_as("SELECT invoice_id, price FROM visits WHERE id = $1")
                    .bind(v)
                    .fetch_one(&mut *conn)
                    .await
            });
            prices.push(r.expect("visit"));
        }
        let mut shown = Vec::new();
        for d in [2, 3] {
            shown.push(store.display(d).await.expect("display").view.message);
        }
        let moved = priced.iter().zip(&unpriced).all(|(p, u)| p > u);
        Some((known, prices, shown, moved))
    }

    #[tokio::test]
    async fn a_run_of_invoices_prices_its_visits_and_the_exit_s_goodbye_on_both_backends() {
        let sqlite = priced_run(false).await.expect("sqlite");
        // 1 h 30 min in park 1, at its 15 coins an hour and 1 a minute.
        let rui = goodbye("Rui Lima", Some(("0.75", "0.0")), 45);
        assert_eq!(
            sqlite,
            (
                vec![true, false, true],
                vec![(11, "0.6".to_owned()), (13, "0.75".to_owned())],
                // The exit says goodbye to the last car out; only that goodbye gets its price.
                vec![rui.clone(), rui],
                true
            )
        );
        if let Some(postgres) = priced_run(true).await {
            assert_eq!(postgres, sqlite);
        }
    }
}
