//! Invoices: issued once per closed visit, priced with the park's table in force at the exit,
//! and read back in the published shape.
//!
//! Spending coins is a two-step saga across services, exactly once by construction:
//! 1. `visit.closed` with the coin flag: the invoice is written `AWAITING_COINS` with its total,
//!    and `coins.requested` (at most the total's cents) goes out in the same transaction;
//! 2. the users service debits what the wallet has, once per invoice (its wallet event is keyed
//!    by the invoice), and says how much in `wallet.coins_debited`;
//! 3. that event finishes the invoice (discount = coins ÷ 100, `ISSUED`) and `invoice.issued`
//!    goes out, again in one transaction.
//!
//! A crash between any two steps leaves an event not yet applied, which is applied when the
//! consumer comes back; applying one twice changes nothing (the invoice is unique per visit, the
//! debit per invoice, and an issued invoice is not finished again). Without the flag, or for a
//! free stay, step 1 issues the invoice at once.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use jiff::Timestamp;
use pms_events::conn::EventConn;
use pms_events::{Applied, Event, NewEvent};
use pms_service::store::pool::Pool;
use pms_service::store::retry;
use pms_service::store::Pools;
use pms_service::{repeatable, transaction, transaction_in};
use pms_tariff::fee::{self, Bill, Stay};
use pms_tariff::json::money;
use pms_vocab::VehicleType;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use sqlx::sqlite::SqliteConnection;

use super::replica::{in_force, StoredTable, TableVersion, VisitOpened, CONSUMER};
use super::{instant, Store, StoreError};
use crate::model::{InvoiceStatus, PaymentsDto, RowDto};

/// `visit.closed` v1, what payments needs.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VisitClosed {
    /// Visit id.
    pub visit_id: i64,
    /// Park id.
    pub park_id: i64,
    /// Customer (user) id.
    pub customer_id: i64,
    /// Their tax number.
    pub nif: i64,
    /// Plate.
    pub plate: String,
    /// Vehicle type.
    pub vehicle_type: VehicleType,
    /// Entry.
    pub entered_at: Timestamp,
    /// Exit.
    pub left_at: Timestamp,
    /// Pay with coins.
    pub use_coins: bool,
    /// The version of the park's table in force when the car left, as the parks service found
    /// it (and quoted the exit with); absent from events written before it said.
    #[serde(default)]
    pub price_table_version: Option<i64>,
}

/// `wallet.coins_debited` v1 (from users).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CoinsDebited {
    /// The invoice the coins pay for.
    pub invoice_id: i64,
    /// Coins taken from the wallet (0 when it was empty).
    pub coins: i64,
}

/// `coins.requested` v1.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct CoinsRequested {
    invoice_id: i64,
    visit_id: i64,
    customer_id: i64,
    max_coins: i64,
}

/// `invoice.issued` v1.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct InvoiceIssued {
    invoice_id: i64,
    visit_id: i64,
    customer_id: i64,
    nif: i64,
    park_id: i64,
    plate: String,
    total: String,
    discount: String,
    final_price: String,
    coins: i64,
    price_table_version: i64,
}

/// Why a visit cannot be invoiced as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssueError {
    /// The store failed (try again).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The visit's data cannot be priced (park the event).
    #[error("{0}")]
    Unpriceable(String),
}

const INVOICE_COLUMNS: &str =
    "id, visit_id, customer_id, nif, park_id, plate, vehicle_type, entered_at_ms, left_at_ms, \
     time_zone, price_table_version, total, discount, coins, status";

/// An invoice row as read.
type InvoiceRow = (
    i64,
    i64,
    i64,
    i64,
    i64,
    String,
    String,
    i64,
    i64,
    String,
    i64,
    String,
    String,
    i64,
    String,
);

/// The event of a new invoice: `coins.requested` when it waits for coins, else
/// `invoice.issued`.
pub(super) fn invoice_event(id: i64, p: &Priced) -> Result<NewEvent, StoreError> {
    let (v, total) = (&p.visit, p.bill.total);
    if p.awaits_coins() {
        let cents = fee::coin_discount(total, i64::MAX).coins;
        NewEvent::new(
            "invoice",
            id,
            "coins.requested",
            1,
            &CoinsRequested {
                invoice_id: id,
                visit_id: v.visit_id,
                customer_id: v.customer_id,
                max_coins: cents,
            },
        )
    } else {
        NewEvent::new(
            "invoice",
            id,
            "invoice.issued",
            1,
            &InvoiceIssued {
                invoice_id: id,
                visit_id: v.visit_id,
                customer_id: v.customer_id,
                nif: v.nif,
                park_id: v.park_id,
                plate: v.plate.clone(),
                total: total.to_string(),
                discount: "0".into(),
                final_price: fee::final_price(total, Decimal::ZERO).to_string(),
                coins: 0,
                price_table_version: p.version,
            },
        )
    }
    .map_err(StoreError::internal)
}

/// A closed visit priced with its park's table in force at the exit, ready to invoice.
#[derive(Debug, Clone)]
pub struct Priced {
    pub(super) visit: VisitClosed,
    pub(super) version: i64,
    pub(super) time_zone_name: String,
    pub(super) bill: Bill,
}

impl Priced {
    /// Whether its invoice waits for coins before it is issued.
    pub(super) fn awaits_coins(&self) -> bool {
        fee::awaits_coins(self.visit.use_coins, self.bill.total)
    }
}

/// One event of a run of the parks service's events that payments writes
/// ([`Store::apply_parks_run`]).
#[derive(Debug, Clone)]
pub enum ParksChange {
    /// A visit began: noted for quotes.
    Opened(VisitOpened),
    /// A visit ended: invoiced, and no longer open.
    Closed(Priced),
}

/// The price table versions read while pricing one run of visits for the events that name no
/// version, by park, so each park's are read once per run.
#[derive(Debug, Default)]
pub struct Tables {
    versions: HashMap<i64, Vec<TableVersion>>,
}

impl Store {
    /// Prices a closed visit with its park's table in force at the exit: the version its event
    /// names, which the exit was quoted with (parsed once per process, read alone when not yet
    /// seen), or for an event that names none (or a version not known here) the one in force by
    /// [`in_force`] (the park's versions read into `tables` when not there yet).
    ///
    /// # Errors
    /// [`IssueError::Unpriceable`] when the stay cannot be priced or the park has no table;
    /// database failures.
    pub async fn price(&self, v: VisitClosed, tables: &mut Tables) -> Result<Priced, IssueError> {
        let named = match v.price_table_version {
            Some(n) => {
                let table = self.table_version(v.park_id, n).await?;
                if table.is_none() {
                    tracing::warn!(
                        park = v.park_id,
                        version = n,
                        visit = v.visit_id,
                        "visit.closed names a price table version payments does not have; pricing with the one in force"
                    );
                }
                table
            }
            None => None,
        };
        let table = match named {
            Some(table) => table,
            None => {
                let versions = match tables.versions.entry(v.park_id) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => e.insert(self.table_versions(v.park_id).await?),
                };
                let version = in_force(versions, v.left_at.as_millisecond()).ok_or_else(|| {
                    IssueError::Unpriceable(format!("park {} has no price table", v.park_id))
                })?;
                self.parsed_version(version)?
            }
        };
        let bill = fee::price(
            &table.table,
            &table.time_zone,
            &Stay {
                entry: v.entered_at,
                exit: v.left_at,
                vehicle: v.vehicle_type,
            },
        )
        .map_err(|e| IssueError::Unpriceable(e.to_string()))?;
        Ok(Priced {
            version: table.version,
            time_zone_name: table.time_zone_name.clone(),
            bill,
            visit: v,
        })
    }

    /// Invoices a closed visit (once: a visit already invoiced only has its position recorded).
    ///
    /// # Errors
    /// [`IssueError::Unpriceable`] when the stay cannot be priced or the park has no table;
    /// database failures.
    pub async fn issue(&self, v: &VisitClosed, event: &Event) -> Result<(), IssueError> {
        let priced = self.price(v.clone(), &mut Tables::default()).await?;
        self.apply_parks_run(&[ParksChange::Closed(priced)], Applied::one(event))
            .await?;
        Ok(())
    }

    /// Writes a run of the parks service's events in one transaction, in order, and moves the
    /// position past `applied` (the run's events). An opened visit is noted for quotes
    /// (unless already invoiced: events come in order, so that only happens on a replay); a
    /// closed one is invoiced once, with its rows and its event (`invoice.issued`, or
    /// `coins.requested` when coins are to pay), and is no longer open. Returns how many events
    /// it appended. On PostgreSQL the run takes a few statements whatever its length
    /// (`runs.rs`), on SQLite one per event.
    ///
    /// # Errors
    /// Database failures (nothing is written then).
    pub async fn apply_parks_run(
        &self,
        changes: &[ParksChange],
        applied: Applied<'_>,
    ) -> Result<usize, StoreError> {
        let now = Timestamp::now().as_millisecond();
        match self.pools() {
            Pools::Postgres(pool) => {
                retry(|| Self::apply_parks_run_pg(pool, changes, applied, now)).await
            }
            Pools::Sqlite(pool) => {
                retry(|| Self::apply_parks_run_in_steps(pool, changes, applied, now)).await
            }
        }
    }

    /// [`Store::apply_parks_run`] a statement per event (SQLite).
    async fn apply_parks_run_in_steps(
        pool: &Pool<SqliteConnection>,
        changes: &[ParksChange],
        applied: Applied<'_>,
        now: i64,
    ) -> Result<usize, StoreError> {
        transaction_in!(pool, |tx| {
            let mut appended = 0;
            for change in changes {
                match change {
                    ParksChange::Opened(v) => {
                        sqlx::query(
                                "INSERT INTO open_visits (visit_id, park_id, customer_id, plate, vehicle_type, entered_at_ms) \
                                 SELECT $1, $2, $3, $4, $5, $6 WHERE NOT EXISTS (SELECT 1 FROM invoices WHERE visit_id = $1) \
                                 ON CONFLICT (visit_id) DO NOTHING",
                            )
                            .bind(v.visit_id)
                            .bind(v.park_id)
                            .bind(v.customer_id)
                            .bind(&v.plate)
                            .bind(v.vehicle_type.as_str())
                            .bind(v.entered_at.as_millisecond())
                            .execute(&mut *tx)
                            .await?;
                    }
                    ParksChange::Closed(p) => {
                        let (v, bill) = (&p.visit, &p.bill);
                        let awaiting = p.awaits_coins();
                        // Once per visit: a visit invoiced already inserts nothing.
                        let issued: Option<i64> = sqlx::query_scalar(
                                "INSERT INTO invoices (visit_id, customer_id, nif, park_id, plate, vehicle_type, entered_at_ms, left_at_ms, \
                                 time_zone, price_table_version, total, discount, coins, status, created_at_ms, issued_at_ms) \
                                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, '0', 0, $12, $13, $14) \
                                 ON CONFLICT (visit_id) DO NOTHING RETURNING id",
                            )
                            .bind(v.visit_id)
                            .bind(v.customer_id)
                            .bind(v.nif)
                            .bind(v.park_id)
                            .bind(&v.plate)
                            .bind(v.vehicle_type.as_str())
                            .bind(v.entered_at.as_millisecond())
                            .bind(v.left_at.as_millisecond())
                            .bind(&p.time_zone_name)
                            .bind(p.version)
                            .bind(bill.total.to_string())
                            .bind(if awaiting {
                                InvoiceStatus::AwaitingCoins
                            } else {
                                InvoiceStatus::Issued
                            }
                            .as_str())
                            .bind(now)
                            .bind((!awaiting).then_some(now))
                            .fetch_optional(&mut *tx)
                            .await?;
                        if let Some(id) = issued {
                            let mut rest = &bill.rows[..];
                            while !rest.is_empty() {
                                let (chunk, tail) = rest.split_at(rows_per_insert(rest.len()));
                                rest = tail;
                                let mut insert = sqlx::query(rows_insert(chunk.len()));
                                for row in chunk {
                                    insert = insert
                                        .bind(id)
                                        .bind(row.kind.as_str())
                                        .bind(row.start.as_millisecond())
                                        .bind(row.end.as_millisecond())
                                        .bind(row.price.to_string())
                                        .bind(i64::from(row.blocks));
                                }
                                insert.execute(&mut *tx).await?;
                            }
                            tx.append(&invoice_event(id, p)?).await?;
                            appended += 1;
                        }
                        sqlx::query("DELETE FROM open_visits WHERE visit_id = $1")
                            .bind(v.visit_id)
                            .execute(&mut *tx)
                            .await?;
                    }
                }
            }
            tx.record_position(CONSUMER, applied).await?;
            Ok::<usize, StoreError>(appended)
        })
    }

    /// Finishes an invoice waiting for coins (once: an issued one only has the position
    /// recorded).
    ///
    /// # Errors
    /// Database failures; [`StoreError::NotFound`] for an unknown invoice.
    pub async fn finish_coins(&self, d: &CoinsDebited, event: &Event) -> Result<(), StoreError> {
        let now = Timestamp::now().as_millisecond();
        retry(|| async {
            let r: Result<(), StoreError> = transaction!(self, |tx| {
                let row: Option<(i64, i64, i64, i64, String, String, i64)> = sqlx::query_as(
                    "SELECT visit_id, customer_id, nif, park_id, plate, total, price_table_version FROM invoices \
                     WHERE id = $1 AND status = 'AWAITING_COINS'",
                )
                .bind(d.invoice_id)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some((visit_id, customer_id, nif, park_id, plate, total, version)) = row {
                    let total: Decimal = total.parse().map_err(StoreError::internal)?;
                    let coins = d.coins.max(0);
                    let discount = Decimal::new(coins, 2).min(total);
                    sqlx::query(
                        "UPDATE invoices SET discount = $1, coins = $2, status = 'ISSUED', issued_at_ms = $3 WHERE id = $4",
                    )
                    .bind(discount.to_string())
                    .bind(coins)
                    .bind(now)
                    .bind(d.invoice_id)
                    .execute(&mut *tx)
                    .await?;
                    let event = NewEvent::new("invoice", d.invoice_id, "invoice.issued", 1, &InvoiceIssued {
                        invoice_id: d.invoice_id,
                        visit_id,
                        customer_id,
                        nif,
                        park_id,
                        plate,
                        total: total.to_string(),
                        discount: discount.to_string(),
                        final_price: fee::final_price(total, discount).to_string(),
                        coins,
                        price_table_version: version,
                    })
                    .map_err(StoreError::internal)?;
                    tx.append(&event).await?;
                }
                tx.record_position(CONSUMER, Applied::one(event)).await?;
                Ok::<(), StoreError>(())
            });
            r
        })
        .await
    }

    /// Invoice `id` and its customer's id.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; database failures.
    pub async fn invoice(&self, id: i64) -> Result<(PaymentsDto, i64), StoreError> {
        let sql = format!("SELECT {INVOICE_COLUMNS} FROM invoices WHERE id = $1");
        let row: Option<InvoiceRow> = repeatable!(self, |conn| sqlx::query_as(&sql)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await)?;
        let row = row.ok_or_else(|| StoreError::not_found("invoice", id))?;
        let customer = row.2;
        let mut dtos = self.with_rows(vec![row]).await?;
        let dto = dtos
            .pop()
            .ok_or_else(|| StoreError::not_found("invoice", id))?;
        Ok((dto, customer))
    }

    /// Invoices by filter (`nif` or customer), newest first, one page.
    ///
    /// # Errors
    /// Database failures.
    pub async fn invoices(
        &self,
        filter: Filter,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<PaymentsDto>, StoreError> {
        let (clause, value) = match filter {
            Filter::All => ("1 = 1 OR $1 = 0", 0),
            Filter::Nif(n) => ("nif = $1", n),
            Filter::Customer(c) => ("customer_id = $1", c),
        };
        let sql = format!("SELECT {INVOICE_COLUMNS} FROM invoices WHERE {clause} ORDER BY id DESC LIMIT $2 OFFSET $3");
        let rows: Vec<InvoiceRow> = repeatable!(self, |conn| sqlx::query_as(&sql)
            .bind(value)
            .bind(limit)
            .bind(offset)
            .fetch_all(&mut *conn)
            .await)?;
        self.with_rows(rows).await
    }

    /// The invoices of `rows` with their lines.
    async fn with_rows(&self, rows: Vec<InvoiceRow>) -> Result<Vec<PaymentsDto>, StoreError> {
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let lines: Vec<(i64, String, i64, i64, String, i64)> = repeatable!(self, |conn| {
                sqlx::query_as(
                "SELECT id, kind, start_ms, end_ms, price, blocks FROM invoice_rows WHERE invoice_id = $1 ORDER BY id"
            )
            .bind(r.0)
            .fetch_all(&mut *conn)
            .await
            })?;
            let tz = jiff::tz::TimeZone::get(&r.9).map_err(StoreError::internal)?;
            let (entered, left) = (instant(r.7), instant(r.8));
            let dec = |t: &str| t.parse::<Decimal>().map_err(StoreError::internal);
            let (total, discount) = (dec(&r.11)?, dec(&r.12)?);
            let rows = lines
                .into_iter()
                .map(|(id, kind, s, e, price, blocks)| {
                    let blocks = u32::try_from(blocks).map_err(StoreError::internal)?;
                    let (price, unit_price) = RowDto::amounts(dec(&price)?, blocks);
                    Ok(RowDto {
                        payment_table_row_id: id,
                        period_start: fee::hm(entered, &tz),
                        period_end: fee::hm(left, &tz),
                        fraction_start: fee::hm(instant(s), &tz),
                        fraction_end: fee::hm(instant(e), &tz),
                        vehicle_type: r.6.clone(),
                        price,
                        kind,
                        blocks,
                        unit_price,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            out.push(PaymentsDto {
                invoice: Some(r.0),
                discount: money(discount),
                final_price: money(fee::final_price(total, discount)),
                nif: r.3,
                payments_table_rows_dto: rows,
                total: money(total),
                coins: r.13,
                status: r.14,
                visit_id: Some(r.1),
                park_id: r.4,
                license_plate_number: r.5,
                enter_park: entered.to_string(),
                left_park: left.to_string(),
                price_table_version: r.10,
                time_zone: r.9,
            });
        }
        Ok(out)
    }
}

/// Most invoice rows one statement writes on SQLite (six parameters each, well under its limit
/// of 32,766).
const ROWS_PER_INSERT: usize = 256;

/// How many of `left` rows the next statement writes: the largest power of two up to
/// [`ROWS_PER_INSERT`], so a long stay's hundreds of rows take a few statements and only nine
/// distinct ones are ever prepared.
fn rows_per_insert(left: usize) -> usize {
    match left.min(ROWS_PER_INSERT) {
        0 => 0,
        n => 1 << n.ilog2(),
    }
}

/// `INSERT INTO invoice_rows` of `n` rows, `n` a power of two up to [`ROWS_PER_INSERT`].
fn rows_insert(n: usize) -> &'static str {
    static BUILT: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let built = BUILT.get_or_init(|| {
        (0..=ROWS_PER_INSERT.ilog2())
            .map(|k| {
                let values: Vec<String> = (0..1usize << k)
                    .map(|i| {
                        let p = i * 6;
                        format!(
                            "(${}, ${}, ${}, ${}, ${}, ${})",
                            p + 1,
                            p + 2,
                            p + 3,
                            p + 4,
                            p + 5,
                            p + 6
                        )
                    })
                    .collect();
                format!(
                    "INSERT INTO invoice_rows (invoice_id, kind, start_ms, end_ms, price, blocks) VALUES {}",
                    values.join(", ")
                )
            })
            .collect()
    });
    &built[n.max(1).ilog2() as usize]
}

/// Which invoices to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// Every invoice.
    All,
    /// Of one tax number.
    Nif(i64),
    /// Of one customer.
    Customer(i64),
}

/// A bill in the published shape, not stored (a quote): `invoice` is `null`.
pub fn quote_dto(
    bill: &Bill,
    table: &StoredTable,
    vehicle: VehicleType,
    nif: i64,
    park_id: i64,
    plate: &str,
) -> PaymentsDto {
    let (tz, version) = (&table.time_zone, table.version);
    PaymentsDto {
        invoice: None,
        discount: money(Decimal::ZERO),
        final_price: money(bill.total),
        nif,
        payments_table_rows_dto: bill
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let (price, unit_price) = RowDto::amounts(r.price, r.blocks);
                RowDto {
                    payment_table_row_id: i as i64 + 1,
                    period_start: fee::hm(bill.entry, tz),
                    period_end: fee::hm(bill.exit, tz),
                    fraction_start: fee::hm(r.start, tz),
                    fraction_end: fee::hm(r.end, tz),
                    vehicle_type: vehicle.as_str().to_owned(),
                    price,
                    kind: r.kind.as_str().to_owned(),
                    blocks: r.blocks,
                    unit_price,
                }
            })
            .collect(),
        total: money(bill.total),
        coins: 0,
        status: InvoiceStatus::Quote.as_str().into(),
        visit_id: None,
        park_id,
        license_plate_number: plate.to_owned(),
        enter_park: bill.entry.to_string(),
        left_park: bill.exit.to_string(),
        price_table_version: version,
        time_zone: table.time_zone_name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use jiff::ToSpan;
    use serde_json::Value;

    use super::*;

    /// A visit of `hours` in park 1, paid with coins when `use_coins`, priced with the published
    /// table.
    fn priced(hours: i64, use_coins: bool) -> Priced {
        let entered: Timestamp = "2024-07-01T08:30:00Z".parse().expect("time");
        let visit = VisitClosed {
            visit_id: 40,
            park_id: 1,
            customer_id: 3,
            nif: 123_456_789,
            plate: "28-XQ-51".into(),
            vehicle_type: VehicleType::Automobile,
            entered_at: entered,
            left_at: entered + hours.hours(),
            use_coins,
            price_table_version: Some(1),
        };
        let tz = jiff::tz::TimeZone::get("Europe/Lisbon").expect("zone");
        let stay = Stay {
            entry: visit.entered_at,
            exit: visit.left_at,
            vehicle: visit.vehicle_type,
        };
        let bill = fee::price(&pms_tariff::seed::table(), &tz, &stay).expect("priced");
        Priced {
            visit,
            version: 1,
            time_zone_name: "Europe/Lisbon".into(),
            bill,
        }
    }

    fn payload(e: &NewEvent) -> Value {
        serde_json::from_str(&e.payload).expect("json")
    }

    /// A new invoice's event, by the coin flag and the price: coins are asked for only when the
    /// customer wants to pay with them and there is something to pay; otherwise the invoice is
    /// issued at once at its total.
    #[test]
    fn a_new_invoice_asks_for_coins_or_is_issued_at_once() {
        for (case, hours, use_coins, expected) in [
            ("priced, coin flag", 3, true, "coins.requested"),
            ("priced, no flag", 3, false, "invoice.issued"),
            (
                "free (within the grace period), coin flag",
                0,
                true,
                "invoice.issued",
            ),
            ("free, no flag", 0, false, "invoice.issued"),
        ] {
            let p = priced(hours, use_coins);
            let e = invoice_event(7, &p).expect("event");
            assert_eq!(
                (e.event_type, e.aggregate_id.as_str()),
                (expected, "7"),
                "{case}"
            );
            let body = payload(&e);
            assert_eq!(
                (&body["invoiceId"], &body["visitId"]),
                (&7.into(), &40.into()),
                "{case}"
            );
            let cents = (p.bill.total * Decimal::from(100)).trunc().to_string();
            if expected == "coins.requested" {
                assert!(p.bill.total > Decimal::ZERO, "{case}");
                assert_eq!(
                    body["maxCoins"].to_string(),
                    cents,
                    "{case}: at most the price"
                );
            } else {
                let total = p.bill.total.to_string();
                assert_eq!(body["total"], total.as_str(), "{case}");
                assert_eq!(body["finalPrice"], total.as_str(), "{case}");
                assert_eq!(
                    (&body["discount"], &body["coins"]),
                    (&"0".into(), &0.into()),
                    "{case}"
                );
                assert_eq!(body["priceTableVersion"], 1, "{case}");
            }
        }
    }

    /// A long stay's rows go out in a few statements of a power of two rows each, never more
    /// than [`ROWS_PER_INSERT`], and every row exactly once.
    #[test]
    fn rows_are_written_in_powers_of_two() {
        for (rows, statements) in [(0, 0), (1, 1), (3, 2), (256, 1), (257, 2), (1_000, 7)] {
            let mut left = rows;
            let mut sizes = Vec::new();
            while left > 0 {
                let n = rows_per_insert(left);
                assert!(
                    n.is_power_of_two() && n <= ROWS_PER_INSERT && n <= left,
                    "{rows}: {n}"
                );
                assert_eq!(
                    rows_insert(n).matches("($").count(),
                    n,
                    "{rows}: {n} rows bound"
                );
                sizes.push(n);
                left -= n;
            }
            assert_eq!(sizes.len(), statements, "{rows}: {sizes:?}");
        }
    }
}
