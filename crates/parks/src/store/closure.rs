//! A closed account's personal data in the parks service, erased when the users service's
//! `customer.closed` is read (`docs/users.md`, "Closing an account").
//!
//! What parks holds of a person: the customer's name and tax number (for the greeting and the
//! invoice), their vehicles' plates, each stay's plate, and the name on a display's greeting.
//! The closure marks the customer closed (`DISABLED`: an entrance refuses their cars as a closed
//! account's) and erases at once what no car needs: the plate of every stay that ended before
//! the grace ([`crate::ParksConfig::erase_after_exit`]; a stay keeps its customer and times,
//! which occupancy and reports count, under a plate of its own, `erased-<visit id>`), and the
//! vehicles with no stay under way or within the grace. A car still inside keeps what its exit
//! needs (its vehicle, the customer's name and tax number, which its invoice carries as the law
//! wants), and can always leave; the erasure round ([`Store::finish_erasures`], once a minute)
//! erases the rest once its stay has ended and the grace passed, during which a retried exit is
//! still recognised. The customer's name and tax number go last, with the greetings that show
//! the name.
//!
//! The stays' events in the outbox (`visit.opened`, `visit.closed`) are rewritten as the stays
//! are, once every reader has them (`pms_events::erasure`).

use std::time::Duration;

use jiff::Timestamp;
use pms_events::conn::EventConn;
use pms_events::{Applied, Event};
use pms_service::transaction;
use pms_vocab::customer::CustomerClosedDoc;
use pms_vocab::personal::erased_visit;

use super::devices::NEW_DISPLAY_MESSAGE;
use super::replica::CONSUMER;
use super::{ms, retry, Store, StoreError};
use crate::rules;

/// How long a closed account's stay keeps its plate after the car left, by default: a barrier
/// retries an exit whose answer it lost within seconds, and the retry must find the stay.
pub const DEFAULT_ERASE_AFTER_EXIT: Duration = Duration::from_secs(5 * 60);

/// How often the erasure round looks for closed accounts whose cars have since left.
pub const ERASURE_ROUND_EVERY: Duration = Duration::from_secs(60);

pub use pms_vocab::personal::ERASED_PLATE_PREFIX;

/// The kinds of set-aside events whose copy of a closed customer's data goes at the closure.
const PARKED_ERASED: &[&str] = &["customer.registered", "customer.changed", "invoice.issued"];

/// Erases on `$tx` what customer `$customer` has here that no car needs at `$now` (ms) with
/// stays ended before `$cutoff` (ms) past their grace; evaluates to whether the customer is now
/// erased entirely (name, tax number and the greetings showing the name included).
macro_rules! erase {
    ($tx:ident, $customer:expr, $cutoff:expr, $now:expr) => {{
        let (customer, cutoff, now): (i64, i64, i64) = ($customer, $cutoff, $now);
        let stays: Vec<i64> = sqlx::query_scalar(
            "UPDATE visits SET plate = $3 || CAST(id AS TEXT) \
             WHERE customer_id = $1 AND left_at_ms < $2 AND substr(plate, 1, length($3)) <> $3 \
             RETURNING id",
        )
        .bind(customer)
        .bind(cutoff)
        .bind(ERASED_PLATE_PREFIX)
        .fetch_all(&mut *$tx)
        .await?;
        // Their events in the outbox: as the stays now say, once every reader has them.
        for stay in stays {
            $tx.erase_when_passed("visit", &stay.to_string(), &erased_visit(stay))
                .await?;
        }
        sqlx::query(
            "DELETE FROM vehicles WHERE customer_id = $1 AND plate NOT IN \
             (SELECT plate FROM visits WHERE customer_id = $1 \
              AND (left_at_ms IS NULL OR left_at_ms >= $2))",
        )
        .bind(customer)
        .bind(cutoff)
        .execute(&mut *$tx)
        .await?;
        let name: Option<String> = sqlx::query_scalar(
            "SELECT name FROM customers WHERE id = $1 AND erased_at_ms IS NULL AND NOT EXISTS \
             (SELECT 1 FROM visits WHERE customer_id = $1 \
              AND (left_at_ms IS NULL OR left_at_ms >= $2))",
        )
        .bind(customer)
        .bind(cutoff)
        .fetch_optional(&mut *$tx)
        .await?;
        match name {
            None => false,
            Some(name) => {
                if !name.is_empty() {
                    // A display still greeting them, or saying goodbye, by name.
                    sqlx::query(
                        "UPDATE displays SET message = $1, updated_at_ms = $2, \
                         changes = changes + 1 \
                         WHERE message = $3 OR substr(message, 1, length($4)) = $4",
                    )
                    .bind(NEW_DISPLAY_MESSAGE)
                    .bind(now)
                    .bind(rules::welcome(&name))
                    .bind(rules::goodbye_start(&name))
                    .execute(&mut *$tx)
                    .await?;
                }
                sqlx::query(
                    "UPDATE customers SET name = '', nif = 0, erased_at_ms = $2 WHERE id = $1",
                )
                .bind(customer)
                .bind(now)
                .execute(&mut *$tx)
                .await?;
                true
            }
        }
    }};
}

/// How far a stay's end must lie behind `now` for its plate to go, with `grace`.
fn cutoff(now: i64, grace: Duration) -> i64 {
    now.saturating_sub(i64::try_from(grace.as_millis()).unwrap_or(i64::MAX))
}

impl Store {
    /// Applies `customer.closed`: marks the customer closed and erases what no car of theirs
    /// needs (see the module documentation), with `event`'s position. Returns whether the
    /// customer is erased entirely (no car inside or within `grace` of its exit). A customer
    /// this service never had is only passed by.
    ///
    /// # Errors
    /// Database failures (nothing is written then).
    pub async fn apply_closure(
        &self,
        c: &CustomerClosedDoc,
        event: &Event,
        grace: Duration,
    ) -> Result<bool, StoreError> {
        let closed_at = ms(c.closed_at);
        retry(|| async {
            let now = ms(Timestamp::now());
            let r: Result<bool, StoreError> = transaction!(self, |tx| {
                let marked = sqlx::query(
                    "UPDATE customers SET closed_at_ms = COALESCE(closed_at_ms, $2), \
                     status = 'DISABLED' WHERE id = $1",
                )
                .bind(c.user_id)
                .bind(closed_at)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                let erased = if marked == 1 {
                    erase!(tx, c.user_id, cutoff(now, grace), now)
                } else {
                    false
                };
                // Set aside: their states, and invoices (read here for the price only).
                tx.erase_parked(c.user_id, PARKED_ERASED).await?;
                tx.record_position(CONSUMER, Applied::one(event)).await?;
                Ok::<bool, StoreError>(erased)
            });
            r
        })
        .await
    }

    /// The erasure round: for each closed customer not yet erased entirely, erases what no car
    /// needs any more (stays ended before `grace` ago). Returns the customers erased entirely by
    /// this round.
    ///
    /// # Errors
    /// Database failures (what was erased before the failure stays erased).
    pub async fn finish_erasures(&self, grace: Duration) -> Result<Vec<i64>, StoreError> {
        let due: Vec<i64> = pms_service::repeatable!(self, |conn| {
            sqlx::query_scalar(
                "SELECT id FROM customers WHERE closed_at_ms IS NOT NULL AND erased_at_ms IS NULL \
                 ORDER BY id",
            )
            .fetch_all(&mut *conn)
            .await
        })?;
        let mut erased = Vec::new();
        for customer in due {
            let done = retry(|| async {
                let now = ms(Timestamp::now());
                let r: Result<bool, StoreError> = transaction!(self, |tx| {
                    Ok::<bool, StoreError>(erase!(tx, customer, cutoff(now, grace), now))
                });
                r
            })
            .await?;
            if done {
                erased.push(customer);
            }
        }
        Ok(erased)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use jiff::Timestamp;
    use pms_events::Event;
    use pms_service::repeatable;
    use serde_json::json;

    use super::*;
    use crate::clock::PassageTime;
    use crate::rules::Refusal;
    use crate::store::replica::CustomerDoc;
    use crate::store::visits::Passage;

    /// Event `id` of the users service, of `event_type`.
    fn users_event(id: i64, event_type: &str) -> Event {
        Event {
            id,
            prev: id - 1,
            source: "users".into(),
            aggregate_type: "customer".into(),
            aggregate_id: "1".into(),
            event_type: event_type.into(),
            version: 1,
            payload: serde_json::Value::Null,
            created_at: String::new(),
        }
    }

    fn ana() -> CustomerDoc {
        serde_json::from_value(json!({
            "userId": 1, "firstName": "Ana", "lastName": "Lima", "nif": 100_000_001,
            "email": "ana@example.pt", "role": "CUSTOMER", "userStatus": "ENABLED",
            "paymentMethod": "PAYPAL",
            "vehicles": [
                {"licensePlateNumber": "AA-00-01", "vehicleType": "AUTOMOBILE",
                 "vehicleEnergySource": "FUEL"},
                {"licensePlateNumber": "AA-00-02", "vehicleType": "AUTOMOBILE",
                 "vehicleEnergySource": "FUEL"}]
        }))
        .expect("customer")
    }

    /// A seeded store on either backend that has Ana as a customer.
    async fn with_ana(postgres: bool) -> Option<(Store, tempfile::TempDir)> {
        let (store, dir) = crate::store::seeded_for_test(postgres).await?;
        store
            .apply_customer(&ana(), &users_event(1, "customer.registered"))
            .await
            .expect("Ana");
        Some((store, dir))
    }

    /// Ana's closure, now.
    fn closed_now() -> CustomerClosedDoc {
        CustomerClosedDoc {
            user_id: 1,
            closed_at: Timestamp::now(),
        }
    }

    fn at(text: &str) -> PassageTime {
        PassageTime::as_said(text.parse::<Timestamp>().expect("time"))
    }

    async fn pass(store: &Store, barrier: i64, plate: &str, time: &str) -> Passage {
        let barrier = store.barrier(barrier).await.expect("barrier");
        store.pass(&barrier, plate, at(time)).await.expect("pass")
    }

    /// Ana's stays' plates, her vehicles, her name and tax number, and how many displays
    /// greet her by name.
    async fn what_parks_has(store: &Store) -> (Vec<String>, Vec<String>, (String, i64), i64) {
        let plates: Vec<String> = repeatable!(store, |conn| {
            sqlx::query_scalar("SELECT plate FROM visits WHERE customer_id = 1 ORDER BY id")
                .fetch_all(&mut *conn)
                .await
        })
        .expect("plates");
        let vehicles: Vec<String> = repeatable!(store, |conn| {
            sqlx::query_scalar("SELECT plate FROM vehicles WHERE customer_id = 1 ORDER BY plate")
                .fetch_all(&mut *conn)
                .await
        })
        .expect("vehicles");
        let person: (String, i64) = repeatable!(store, |conn| {
            sqlx::query_as("SELECT name, nif FROM customers WHERE id = 1")
                .fetch_one(&mut *conn)
                .await
        })
        .expect("customer");
        let greeting: i64 = repeatable!(store, |conn| {
            sqlx::query_scalar("SELECT count(*) FROM displays WHERE message LIKE '%Ana Lima%'")
                .fetch_one(&mut *conn)
                .await
        })
        .expect("displays");
        (plates, vehicles, person, greeting)
    }

    /// An event about Ana set aside here (one of her states, one of her invoices) is a copy
    /// like any other: the closure erases her data from it.
    #[tokio::test]
    async fn a_closure_erases_her_data_from_the_events_set_aside() {
        for postgres in [false, true] {
            let Some((store, _dir)) = with_ana(postgres).await else {
                continue;
            };
            let mut state = users_event(7, "customer.changed");
            state.payload = serde_json::to_value(ana()).expect("json");
            let mut invoice = users_event(3, "invoice.issued");
            invoice.source = "payments".into();
            invoice.payload = json!({"invoiceId": 3, "customerId": 1, "nif": 100_000_001,
                "plate": "AA-00-01", "finalPrice": "1.20"});
            let parked: Result<(), StoreError> = transaction!(&store, |tx| {
                tx.park(CONSUMER, &state, "a version not read here").await?;
                tx.park(CONSUMER, &invoice, "no such visit").await?;
                Ok::<(), StoreError>(())
            });
            parked.expect("parked");
            store
                .apply_closure(
                    &closed_now(),
                    &users_event(2, "customer.closed"),
                    Duration::ZERO,
                )
                .await
                .expect("closure");
            let kept: Vec<String> = repeatable!(&store, |conn| {
                sqlx::query_scalar("SELECT payload FROM parked_events ORDER BY source")
                    .fetch_all(&mut *conn)
                    .await
            })
            .expect("parked");
            assert_eq!(kept.len(), 2);
            for payload in kept {
                assert!(
                    !payload.contains("Ana") && !payload.contains("AA-00-01"),
                    "{payload}"
                );
                assert!(!payload.contains("100000001"), "{payload}");
            }
        }
    }

    #[tokio::test]
    async fn a_closure_erases_at_once_what_no_car_needs_and_the_rest_once_it_left() {
        for postgres in [false, true] {
            let Some((store, _dir)) = with_ana(postgres).await else {
                continue;
            };
            // One stay over, one car inside (barrier 1 is park 1's entrance, 2 its exit).
            pass(&store, 1, "AA-00-01", "2026-12-04T10:00:00Z").await;
            pass(&store, 2, "AA-00-01", "2026-12-04T11:00:00Z").await;
            pass(&store, 1, "AA-00-02", "2026-12-04T12:00:00Z").await;
            let closed = closed_now();
            let erased = store
                .apply_closure(&closed, &users_event(2, "customer.closed"), Duration::ZERO)
                .await
                .expect("closure");
            assert!(!erased, "a car is inside");
            let (plates, vehicles, person, _) = what_parks_has(&store).await;
            assert!(plates[0].starts_with(ERASED_PLATE_PREFIX), "{plates:?}");
            assert_eq!(plates[1], "AA-00-02", "the stay under way keeps its plate");
            assert_eq!(vehicles, ["AA-00-02"], "the car inside can still be read");
            assert_eq!(
                person,
                ("Ana Lima".to_owned(), 100_000_001),
                "for its invoice"
            );

            // The car inside leaves as any; it cannot come back in, nor can the other.
            match pass(&store, 2, "AA-00-02", "2026-12-04T13:00:00Z").await {
                Passage::Open { name, .. } => assert_eq!(name, "Ana Lima"),
                other => panic!("the exit of a closed account's car: {other:?}"),
            }
            assert_eq!(
                pass(&store, 1, "AA-00-02", "2026-12-04T14:00:00Z").await,
                Passage::Refused(Refusal::AccountClosed)
            );
            assert_eq!(
                pass(&store, 1, "AA-00-01", "2026-12-04T14:00:00Z").await,
                Passage::Refused(Refusal::UnknownPlateAtEntrance)
            );
            assert!(
                what_parks_has(&store).await.3 > 0,
                "the exit's goodbye names her"
            );

            // Within the grace nothing more goes; past it, the rest does.
            assert_eq!(
                store
                    .finish_erasures(Duration::from_secs(1_000_000_000))
                    .await
                    .expect("round"),
                Vec::<i64>::new()
            );
            assert_eq!(
                store.finish_erasures(Duration::ZERO).await.expect("round"),
                [1]
            );
            let (plates, vehicles, person, greeting) = what_parks_has(&store).await;
            assert!(
                plates.iter().all(|p| p.starts_with(ERASED_PLATE_PREFIX)),
                "{plates:?}"
            );
            assert_ne!(
                plates[0], plates[1],
                "each erased stay has a plate of its own"
            );
            assert!(vehicles.is_empty());
            assert_eq!(person, (String::new(), 0));
            assert_eq!(greeting, 0, "no display greets her by name any more");
            assert!(store
                .finish_erasures(Duration::ZERO)
                .await
                .expect("round")
                .is_empty());

            // An older state of hers read again (a replay) brings nothing back.
            store
                .apply_customer(&ana(), &users_event(3, "customer.changed"))
                .await
                .expect("replayed");
            let (_, vehicles, person, _) = what_parks_has(&store).await;
            assert!(vehicles.is_empty());
            assert_eq!(person, (String::new(), 0));
        }
    }

    #[tokio::test]
    async fn a_closure_and_the_exit_of_the_car_inside_at_once_both_go_through() {
        for postgres in [false, true] {
            let Some((store, _dir)) = with_ana(postgres).await else {
                continue;
            };
            pass(&store, 1, "AA-00-01", "2026-12-04T10:00:00Z").await;
            pass(&store, 1, "AA-00-02", "2026-12-04T10:05:00Z").await;
            let closed = closed_now();
            let event = users_event(2, "customer.closed");
            let exit = store.barrier(2).await.expect("exit");
            // The closure and both cars' exits at the same moment, in any order the database
            // takes them: each exit lets its car out, the closure goes through.
            let (erased, first, second) = tokio::join!(
                store.apply_closure(&closed, &event, Duration::ZERO),
                store.pass(&exit, "AA-00-01", at("2026-12-04T11:00:00Z")),
                store.pass(&exit, "AA-00-02", at("2026-12-04T11:00:00Z")),
            );
            erased.expect("the closure");
            for out in [first, second] {
                assert!(
                    matches!(out.expect("an exit"), Passage::Open { .. }),
                    "postgres {postgres}"
                );
            }
            // Whatever the order was, the round leaves nothing of her.
            let _ = store.finish_erasures(Duration::ZERO).await.expect("round");
            let (plates, vehicles, person, _) = what_parks_has(&store).await;
            assert!(
                plates.iter().all(|p| p.starts_with(ERASED_PLATE_PREFIX)),
                "{plates:?}"
            );
            assert!(vehicles.is_empty(), "{vehicles:?}");
            assert_eq!(person, (String::new(), 0));
        }
    }
}
