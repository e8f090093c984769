//! A run of the parks service's events written on PostgreSQL with one statement per kind of
//! write, however long the run: the open visits noted, the closed ones invoiced and no longer
//! open, the invoices' rows, their events, the read position (a kind with no rows is left out). The same effects as
//! [`Store::apply_parks_run`]'s statement per event, which SQLite keeps (a statement there is a
//! call into the library); on PostgreSQL each statement is a round trip to another process, and
//! under load a run holds dozens of events.

use std::collections::{HashMap, HashSet};

use pms_events::conn::EventConn;
use pms_events::Applied;
use pms_service::store::pool::Pool;
use pms_service::transaction_in;
use sqlx::postgres::PgConnection;

use super::invoices::{invoice_event, ParksChange, Priced};
use super::replica::{VisitOpened, CONSUMER};
use super::{Store, StoreError};
use crate::model::InvoiceStatus;

/// The open visits noted (`$1`–`$6`), skipping visits invoiced already. Planned for each run's
/// arrays (not kept prepared): a generic plan made while `invoices` was nearly empty joined it by
/// scanning it whole, and kept doing so for every run as the table grew (autovacuum had not
/// analyzed it yet), which made the consumer slower with every invoice.
const NOTE: &str = "INSERT INTO open_visits (visit_id, park_id, customer_id, plate, vehicle_type, entered_at_ms) \
     SELECT o.* FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::bigint[]) \
       AS o (visit_id, park_id, customer_id, plate, vehicle_type, entered_at_ms) \
     WHERE NOT EXISTS (SELECT 1 FROM invoices i WHERE i.visit_id = o.visit_id) \
     ON CONFLICT (visit_id) DO NOTHING";

/// The closed visits no longer open (`$1`) and their invoices (`$1`–`$13`, in the run's order;
/// `$14` now), once per visit. Returns each new invoice's id and visit.
const INVOICE: &str = "WITH gone AS (DELETE FROM open_visits WHERE visit_id = ANY($1::bigint[])) \
     INSERT INTO invoices (visit_id, customer_id, nif, park_id, plate, vehicle_type, entered_at_ms, left_at_ms, \
       time_zone, price_table_version, total, discount, coins, status, created_at_ms, issued_at_ms) \
     SELECT c.visit_id, c.customer_id, c.nif, c.park_id, c.plate, c.vehicle_type, c.entered_at_ms, c.left_at_ms, \
       c.time_zone, c.version, c.total, '0', 0, c.status, $14, c.issued_at_ms \
     FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::bigint[], \
       $8::bigint[], $9::text[], $10::bigint[], $11::text[], $12::text[], $13::bigint[]) WITH ORDINALITY \
       AS c (visit_id, customer_id, nif, park_id, plate, vehicle_type, entered_at_ms, left_at_ms, time_zone, version, \
       total, status, issued_at_ms, ord) \
     ORDER BY c.ord \
     ON CONFLICT (visit_id) DO NOTHING RETURNING id, visit_id";

/// The new invoices' rows: invoice, kind, start, end, price, blocks.
const ROWS: &str = "INSERT INTO invoice_rows (invoice_id, kind, start_ms, end_ms, price, blocks) \
     SELECT r.invoice_id, r.kind, r.start_ms, r.end_ms, r.price, r.blocks \
     FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bigint[]) \
       WITH ORDINALITY AS r (invoice_id, kind, start_ms, end_ms, price, blocks, ord) ORDER BY r.ord";

/// One array per column of the rows `items` give.
fn column<T, U>(items: &[&T], f: impl Fn(&T) -> U) -> Vec<U> {
    items.iter().map(|t| f(t)).collect()
}

impl Store {
    /// [`Store::apply_parks_run`] on PostgreSQL: see the module's docs.
    pub(super) async fn apply_parks_run_pg(
        pool: &Pool<PgConnection>,
        changes: &[ParksChange],
        applied: Applied<'_>,
        now: i64,
    ) -> Result<usize, StoreError> {
        let closed: Vec<&Priced> = changes
            .iter()
            .filter_map(|c| match c {
                ParksChange::Closed(p) => Some(p),
                ParksChange::Opened(_) => None,
            })
            .collect();
        // A visit opened and closed in the same run is not noted (nothing to note, and it
        // would have to be dropped again).
        let ended: HashSet<i64> = closed.iter().map(|p| p.visit.visit_id).collect();
        let opened: Vec<&VisitOpened> = changes
            .iter()
            .filter_map(|c| match c {
                ParksChange::Opened(v) if !ended.contains(&v.visit_id) => Some(v),
                _ => None,
            })
            .collect();
        transaction_in!(pool, |tx| {
            // Each statement only when it has rows: at a few events a run, a statement's set-up
            // costs as much as its rows.
            if !opened.is_empty() {
                sqlx::query(NOTE)
                    .persistent(false)
                    .bind(column(&opened, |v| v.visit_id))
                    .bind(column(&opened, |v| v.park_id))
                    .bind(column(&opened, |v| v.customer_id))
                    .bind(column(&opened, |v| v.plate.clone()))
                    .bind(column(&opened, |v| v.vehicle_type.as_str()))
                    .bind(column(&opened, |v| v.entered_at.as_millisecond()))
                    .execute(&mut *tx)
                    .await?;
            }
            let mut drawn: HashMap<i64, i64> = if closed.is_empty() {
                HashMap::new()
            } else {
                sqlx::query_as::<_, (i64, i64)>(INVOICE)
                    .bind(column(&closed, |p| p.visit.visit_id))
                    .bind(column(&closed, |p| p.visit.customer_id))
                    .bind(column(&closed, |p| p.visit.nif))
                    .bind(column(&closed, |p| p.visit.park_id))
                    .bind(column(&closed, |p| p.visit.plate.clone()))
                    .bind(column(&closed, |p| p.visit.vehicle_type.as_str()))
                    .bind(column(&closed, |p| p.visit.entered_at.as_millisecond()))
                    .bind(column(&closed, |p| p.visit.left_at.as_millisecond()))
                    .bind(column(&closed, |p| p.time_zone_name.clone()))
                    .bind(column(&closed, |p| p.version))
                    .bind(column(&closed, |p| p.bill.total.to_string()))
                    .bind(column(&closed, |p| {
                        if p.awaits_coins() {
                            InvoiceStatus::AwaitingCoins
                        } else {
                            InvoiceStatus::Issued
                        }
                        .as_str()
                    }))
                    .bind(column(&closed, |p| (!p.awaits_coins()).then_some(now)))
                    .bind(now)
                    .fetch_all(&mut *tx)
                    .await?
                    .into_iter()
                    .map(|(id, visit)| (visit, id))
                    .collect()
            };
            // In the run's order; a visit closed twice in one run is invoiced once.
            let issued: Vec<(i64, &Priced)> = closed
                .iter()
                .filter_map(|p| drawn.remove(&p.visit.visit_id).map(|id| (id, *p)))
                .collect();
            let rows: Vec<(i64, &pms_tariff::fee::Row)> = issued
                .iter()
                .flat_map(|(id, p)| p.bill.rows.iter().map(move |r| (*id, r)))
                .collect();
            if !rows.is_empty() {
                let rows: Vec<&(i64, &pms_tariff::fee::Row)> = rows.iter().collect();
                sqlx::query(ROWS)
                    .bind(column(&rows, |(id, _)| *id))
                    .bind(column(&rows, |(_, r)| r.kind.as_str()))
                    .bind(column(&rows, |(_, r)| r.start.as_millisecond()))
                    .bind(column(&rows, |(_, r)| r.end.as_millisecond()))
                    .bind(column(&rows, |(_, r)| r.price.to_string()))
                    .bind(column(&rows, |(_, r)| i64::from(r.blocks)))
                    .execute(&mut *tx)
                    .await?;
            }
            let events = issued
                .iter()
                .map(|(id, p)| invoice_event(*id, p))
                .collect::<Result<Vec<_>, _>>()?;
            tx.append_all(&events).await?;
            tx.record_position(CONSUMER, applied).await?;
            Ok::<usize, StoreError>(events.len())
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use jiff::{Timestamp, ToSpan};
    use pms_events::{Applied, Event, Outbox};
    use pms_tariff::json::TableDoc;
    use pms_vocab::VehicleType;

    use super::super::invoices::{ParksChange, Tables, VisitClosed};
    use super::super::replica::{PriceTableDoc, VisitOpened, CONSUMER};
    use super::super::{Store, StoreConfig};

    /// A migrated store on SQLite (a temp file) or PostgreSQL (a fresh database), with park 1's
    /// seed price table; `None` where PostgreSQL tests are skipped.
    pub(in crate::store) async fn store(postgres: bool) -> Option<(Store, tempfile::TempDir)> {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = pms_testkit::pg::test_database(postgres, dir.path(), "payments.db")?;
        let store = Store::open(&StoreConfig::new(url)).expect("open");
        store.migrate().await.expect("migrate");
        let table = PriceTableDoc {
            park_id: 1,
            park_number: 1,
            version: 1,
            valid_from: Timestamp::UNIX_EPOCH,
            time_zone: "Europe/Lisbon".into(),
            table: TableDoc::from(&pms_tariff::seed::table()),
        };
        store
            .apply_price_table(&table, &parks_event(1))
            .await
            .expect("price table");
        Some((store, dir))
    }

    fn parks_event(id: i64) -> Event {
        Event {
            id,
            prev: id - 1,
            source: "parks".into(),
            aggregate_type: "park".into(),
            aggregate_id: "1".into(),
            event_type: "price_table.changed".into(),
            version: 1,
            payload: serde_json::Value::Null,
            created_at: String::new(),
        }
    }

    const ENTERED: &str = "2026-11-30T10:00:00Z";

    fn opened(visit_id: i64) -> ParksChange {
        ParksChange::Opened(VisitOpened {
            visit_id,
            park_id: 1,
            customer_id: visit_id * 10,
            plate: format!("AA-00-{visit_id:02}"),
            vehicle_type: VehicleType::Automobile,
            entered_at: ENTERED.parse().expect("time"),
        })
    }

    async fn closed(store: &Store, visit_id: i64, minutes: i64, coins: bool) -> ParksChange {
        let entered: Timestamp = ENTERED.parse().expect("time");
        let v = VisitClosed {
            visit_id,
            park_id: 1,
            customer_id: visit_id * 10,
            nif: 100_000_000 + visit_id,
            plate: format!("AA-00-{visit_id:02}"),
            vehicle_type: VehicleType::Automobile,
            entered_at: entered,
            left_at: entered + minutes.minutes(),
            use_coins: coins,
            price_table_version: None,
        };
        ParksChange::Closed(
            store
                .price(v, &mut Tables::default())
                .await
                .expect("priced"),
        )
    }

    async fn open_visits(store: &Store) -> Vec<i64> {
        let r: Result<Vec<i64>, sqlx::Error> = pms_service::repeatable!(store, |conn| {
            sqlx::query_scalar("SELECT visit_id FROM open_visits ORDER BY visit_id")
                .fetch_all(&mut *conn)
                .await
        });
        r.expect("open visits")
    }

    async fn position(store: &Store) -> i64 {
        let r: Result<i64, sqlx::Error> = pms_service::repeatable!(store, |conn| {
            sqlx::query_scalar(
                "SELECT position FROM event_positions WHERE consumer = $1 AND source = 'parks'",
            )
            .bind(CONSUMER)
            .fetch_one(&mut *conn)
            .await
        });
        r.expect("position")
    }

    /// What a run left, on either backend: the visits still open, and per event appended its
    /// type, invoice, visit, and the invoice's status, total and number of rows.
    async fn outcome(store: &Store) -> (Vec<i64>, Vec<(String, i64, i64, String, String, usize)>) {
        let events = Outbox::new("payments", store.db().clone())
            .read_after(0, 100)
            .await
            .expect("outbox");
        let mut invoiced = Vec::new();
        for e in events {
            let id = e.payload["invoiceId"].as_i64().expect("invoice id");
            let (dto, _) = store.invoice(id).await.expect("invoice");
            invoiced.push((
                e.event_type,
                id,
                e.payload["visitId"].as_i64().expect("visit id"),
                dto.status,
                dto.total.to_string(),
                dto.payments_table_rows_dto.len(),
            ));
        }
        (open_visits(store).await, invoiced)
    }

    #[tokio::test]
    async fn a_run_has_the_same_effects_on_both_backends_and_once() {
        let mut outcomes = Vec::new();
        for postgres in [false, true] {
            let Some((store, _dir)) = store(postgres).await else {
                continue;
            };
            // Visit 4 was invoiced in an earlier run: its opening, replayed, is not noted.
            let earlier = [opened(4), closed(&store, 4, 20, false).await];
            let second = Applied {
                source: "parks",
                prev: 1,
                first: 2,
                last: 2,
            };
            assert_eq!(store.apply_parks_run(&earlier, second).await, Ok(1));
            let run = [
                opened(1),
                opened(2),
                opened(3),
                opened(4),
                // Opened and closed in this run: invoiced and not left open.
                closed(&store, 1, 60, false).await,
                // Closed twice (a replayed event): invoiced once.
                closed(&store, 3, 0, false).await,
                closed(&store, 3, 0, false).await,
                // Never seen open here; pays with coins, so it waits for them.
                closed(&store, 5, 95, true).await,
                // Invoiced already: nothing more.
                closed(&store, 4, 20, false).await,
            ];
            let third_to_ninth = Applied {
                source: "parks",
                prev: 2,
                first: 3,
                last: 9,
            };
            assert_eq!(store.apply_parks_run(&run, third_to_ninth).await, Ok(3));
            assert_eq!(position(&store).await, 9);
            let first = outcome(&store).await;
            // The same run again: refused, the position is past it.
            assert!(store.apply_parks_run(&run, third_to_ninth).await.is_err());
            // Again after a replay set the position back: nothing new.
            pms_events::position::rewind(store.db(), CONSUMER, "parks", 2)
                .await
                .expect("rewind");
            assert_eq!(store.apply_parks_run(&run, third_to_ninth).await, Ok(0));
            assert_eq!(outcome(&store).await, first, "postgres: {postgres}");
            outcomes.push(first);
        }
        let (open, invoiced) = &outcomes[0];
        assert_eq!(open, &[2]);
        let summary: Vec<(&str, i64, &str, usize)> = invoiced
            .iter()
            .map(|(t, _, visit, status, _, rows)| (t.as_str(), *visit, status.as_str(), *rows))
            .collect();
        assert_eq!(
            summary,
            [
                ("invoice.issued", 4, "ISSUED", 2),
                ("invoice.issued", 1, "ISSUED", 4),
                ("invoice.issued", 3, "ISSUED", 0),
                // 95 minutes: four blocks, then the last step's three repeats in one row.
                ("coins.requested", 5, "AWAITING_COINS", 5),
            ]
        );
        assert!(
            invoiced.windows(2).all(|w| w[0].1 < w[1].1),
            "invoices numbered in the run's order: {invoiced:?}"
        );
        if let [sqlite, postgres] = &outcomes[..] {
            assert_eq!(sqlite, postgres, "the same effects on both backends");
        }
    }

    #[tokio::test]
    async fn a_visit_is_priced_with_the_version_its_exit_named() {
        let Some((store, _dir)) = store(false).await else {
            return;
        };
        // Version 2 is in force from half an hour after the entry.
        let entered: Timestamp = ENTERED.parse().expect("time");
        let second = PriceTableDoc {
            park_id: 1,
            park_number: 1,
            version: 2,
            valid_from: entered + 30.minutes(),
            time_zone: "Europe/Lisbon".into(),
            table: TableDoc::from(&pms_tariff::seed::table()),
        };
        store
            .apply_price_table(&second, &parks_event(2))
            .await
            .expect("version 2");
        let priced = |named: Option<i64>, minutes: i64| {
            let store = store.clone();
            async move {
                let v = VisitClosed {
                    visit_id: 1,
                    park_id: 1,
                    customer_id: 10,
                    nif: 100_000_001,
                    plate: "AA-00-01".into(),
                    vehicle_type: VehicleType::Automobile,
                    entered_at: entered,
                    left_at: entered + minutes.minutes(),
                    use_coins: false,
                    price_table_version: named,
                };
                store
                    .price(v, &mut Tables::default())
                    .await
                    .expect("priced")
                    .version
            }
        };
        assert_eq!(priced(None, 20).await, 1, "in force at the exit");
        assert_eq!(priced(None, 60).await, 2, "in force at the exit");
        assert_eq!(priced(Some(1), 60).await, 1, "the one the exit named");
        assert_eq!(priced(Some(2), 20).await, 2, "the one the exit named");
        assert_eq!(
            priced(Some(9), 60).await,
            2,
            "unknown here: the one in force"
        );
    }
}
