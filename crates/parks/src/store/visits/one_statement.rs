//! Entrance and exit on PostgreSQL in two round trips: the plate's read (at an exit, with the
//! park's table version in force, [`crate::store::quotes`]), then one
//! data-modifying statement (`WITH` parts) that makes every write of [`super::in_steps`] and
//! appends the event. A single statement commits alone, so no `BEGIN` and `COMMIT` either:
//! about 9 round trips fewer per call.
//!
//! How each statement stays all or nothing and safe beside others:
//! - Each part is gated on the one before (it reads that part's rows), which also fixes the
//!   order the parts run and take their locks in. A part that found nothing leaves every later
//!   part with nothing to do, and the statement returns no row.
//! - The entrance takes its spot first, skipping spots another entrance is taking
//!   (`FOR UPDATE SKIP LOCKED`), then raises the park's counter. A park found full in the
//!   statement's snapshot takes no spot; one that filled since trips the counter's CHECK, and the
//!   whole statement is undone (refused `Full`, as [`crate::store`] maps constraints). An
//!   entrance that took no spot while the park has room and a free spot that fits (held by
//!   passages in flight) runs again a moment later instead of answering `Full`: the passage
//!   holding the spot may be this car's own first try, still running in the database for a
//!   replica that died, and the second try must get its answer.
//! - The exit locks its visit before anything else: a second exit of the same visit waits, then
//!   finds it closed and changes nothing (the call is then read again and answered as a repeat).
//!   The coin flag is consumed only while the visit is still open, and the event says whether it
//!   was (the statement picks between the two payloads it is given).
//! - Locks are taken spot → park → report rows → displays → outbox at the entrance, and
//!   visit → customer → spot → park → report rows → displays → outbox at the exit, so calls of
//!   one park queue at the park's row and never wait for each other in a cycle.
//!
//! Running a call again is safe (the plate's read then finds what the first run did), so a call
//! whose connection broke runs once more on a new one.

use std::sync::LazyLock;

use jiff::tz::TimeZone;
use pms_events::conn::{bind_pg_append, pg_append_parts};
use pms_service::repeatable_in;
use pms_service::store::pool::Pool;
use sqlx::postgres::PgConnection;
use sqlx::{FromRow, Row};

use super::{
    closed_event, count_entrance_sql, count_exit_sql, entrance_counts, entrance_rules,
    exit_goodbye, exit_rules, opened_event, plate_of, plate_sql, stay_minutes, Barrier, Closing,
    Entering, ExitReads, Leaving, Passage, PlateRow,
};
use crate::clock::PassageTime;
use crate::rules::{self, Refusal};
use crate::store::quotes::Tables;
use crate::store::{ms, Store, StoreError};

/// The plate's read, and an id for the visit the entrance may open (column 14): the event that
/// goes out in the same statement as the visit carries it.
const PLATE_AND_VISIT_ID: &str = plate_sql!(", nextval(pg_get_serial_sequence('visits', 'id'))");

/// The entrance: `$1` park, `$2` vehicle type, `$3` energy source, `$4` visit id, `$5` customer,
/// `$6` plate, `$7` barrier, `$8` time (ms), `$9` report day, `$10`–`$15` the report's counts,
/// `$16` the displays' message, `$17` now (ms), `$18` the event's payload, `$19` the time said
/// (ms), `$20`– the event's other fields. Returns the spot's number, or no row when no spot
/// fits.
static ENTER: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH spot AS (UPDATE spots SET occupied = 1 WHERE id = (SELECT id FROM spots \
           WHERE park_id = $1 AND operational = 1 AND occupied = 0 AND spot_vehicle_type = $2 AND spot_type = $3 \
           AND (SELECT occupied < max_occupancy FROM parks WHERE id = $1) \
           ORDER BY floor_level, spot_number LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, spot_number), \
         raised AS (UPDATE parks SET occupied = occupied + 1, changes = changes + 1 WHERE id = $1 AND EXISTS (SELECT 1 FROM spot) RETURNING id), \
         visit AS (INSERT INTO visits (id, park_id, spot_id, customer_id, plate, vehicle_type, energy_source, entry_barrier_id, entered_at_ms, entry_said_ms) \
           SELECT $4, $1, spot.id, $5, $6, $2, $3, $7, $8, $19 FROM spot, raised RETURNING id), \
         counted AS ({counted} RETURNING 1), \
         shown AS (UPDATE displays SET message = $16, updated_at_ms = $17, changes = changes + 1 \
           WHERE barrier_id = $7 AND state = 'ACTIVE' AND EXISTS (SELECT 1 FROM counted) RETURNING 1), \
         ready AS (SELECT $18::text AS payload FROM visit WHERE (SELECT count(*) FROM shown) >= 0), \
         {append} \
         SELECT spot.spot_number FROM spot, appended",
        counted = count_entrance_sql!("SELECT $1, $9, 1, $10, $11, $12, $13, $14, $15 FROM visit"),
        append = pg_append_parts("ready", 20),
    )
});

/// After an entrance took no spot: whether park `$1` has room and a free spot that fits (`$2`
/// vehicle type, `$3` energy), which the entrance skipped because a passage in flight holds it.
const SPOTS_IN_FLIGHT: &str =
    "SELECT COALESCE((SELECT occupied < max_occupancy FROM parks WHERE id = $1), false) \
     AND EXISTS (SELECT 1 FROM spots WHERE park_id = $1 AND operational = 1 AND occupied = 0 \
     AND spot_vehicle_type = $2 AND spot_type = $3)";

/// The exit: `$1` visit, `$2` customer, `$3` the coin flag as read (0 or 1), `$4` time (ms),
/// `$5` barrier, `$6` park, `$7` report day, `$8` minutes, `$9` the displays' message, `$10` now
/// (ms), `$11` and `$12` the event's payload with and without coins, `$13` the time said (ms),
/// `$14` the PARKY coins earned, `$15`– the event's other fields. Returns whether coins pay, or no row when the visit was
/// closed meanwhile.
static EXIT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH coins AS (UPDATE customers SET use_parky_coins = 0 \
           WHERE id = $2 AND use_parky_coins = 1 AND $3 = 1 \
           AND EXISTS (SELECT 1 FROM visits WHERE id = $1 AND left_at_ms IS NULL FOR UPDATE) RETURNING id), \
         closed AS (UPDATE visits SET left_at_ms = $4, exit_said_ms = $13, exit_barrier_id = $5, use_coins = (SELECT count(*) FROM coins), \
           coins_earned = $14 \
           WHERE id = $1 AND left_at_ms IS NULL RETURNING spot_id, use_coins), \
         freed AS (UPDATE spots SET occupied = 0 WHERE id = (SELECT spot_id FROM closed) RETURNING 1), \
         lowered AS (UPDATE parks SET occupied = occupied - 1, changes = changes + 1 WHERE id = $6 AND EXISTS (SELECT 1 FROM freed) RETURNING 1), \
         timed AS ({timed} RETURNING 1), \
         shown AS (UPDATE displays SET message = $9, updated_at_ms = $10, changes = changes + 1 \
           WHERE barrier_id = $5 AND state = 'ACTIVE' AND EXISTS (SELECT 1 FROM timed) RETURNING 1), \
         ready AS (SELECT CASE WHEN use_coins = 1 THEN $11::text ELSE $12::text END AS payload FROM closed \
           WHERE (SELECT count(*) FROM shown) >= 0), \
         {append} \
         SELECT closed.use_coins FROM closed, appended",
        timed = count_exit_sql!("SELECT $6, $7, $2, $8 FROM lowered"),
        append = pg_append_parts("ready", 15),
    )
});

impl Store {
    pub(super) async fn enter_in_one(
        pool: &Pool<PgConnection>,
        barrier: &Barrier,
        plate: &str,
        time: PassageTime,
        tz: &TimeZone,
    ) -> Result<Passage, StoreError> {
        let at = time.at;
        let at_ms = ms(at);
        let now_ms = ms(time.now);
        let day = rules::report_day(at, tz);
        repeatable_in!(pool, |conn| async {
            let row = sqlx::query(PLATE_AND_VISIT_ID)
                .bind(plate)
                .fetch_optional(&mut *conn)
                .await?;
            let (read, visit_id) = match row {
                None => (None, 0),
                Some(row) => (
                    Some(plate_of(PlateRow::from_row(&row)?)?),
                    row.try_get::<i64, _>(14)?,
                ),
            };
            let owner = match entrance_rules(barrier, read, ms(time.said)) {
                Err(refusal) => return Ok(Passage::Refused(refusal)),
                Ok(Entering::Repeat(answer)) => return Ok(answer),
                Ok(Entering::New(owner)) => owner,
            };
            let event = opened_event(visit_id, barrier, &owner, plate, at)?;
            let [cars, motorcycles, fuel, gpl, electric, hybrid] = entrance_counts(&owner);
            let query = sqlx::query_as::<_, (String,)>(&ENTER)
                .bind(barrier.park_id)
                .bind(owner.vehicle_type.as_str())
                .bind(owner.energy.as_str())
                .bind(visit_id)
                .bind(owner.customer_id)
                .bind(plate)
                .bind(barrier.id)
                .bind(at_ms)
                .bind(&day)
                .bind(cars)
                .bind(motorcycles)
                .bind(fuel)
                .bind(gpl)
                .bind(electric)
                .bind(hybrid)
                .bind(rules::welcome(&owner.name))
                .bind(now_ms)
                .bind(&event.payload)
                .bind(ms(time.said));
            let spot = bind_pg_append(query, &event)
                .fetch_optional(&mut *conn)
                .await?;
            let Some((spot,)) = spot else {
                // No spot taken: the park is full for this car, or every spot that fits is
                // being taken by a passage in flight (skipped, locked). Those commit or roll
                // back within milliseconds: run the entrance again then (read again, it may
                // find its own first try committed, from a replica that died meanwhile).
                let in_flight: bool = sqlx::query_scalar(SPOTS_IN_FLIGHT)
                    .bind(barrier.park_id)
                    .bind(owner.vehicle_type.as_str())
                    .bind(owner.energy.as_str())
                    .fetch_one(&mut *conn)
                    .await?;
                return if in_flight {
                    Err(StoreError::Transient(
                        "the park's free spots that fit are being taken by passages in flight"
                            .into(),
                    ))
                } else {
                    Ok(Passage::Refused(Refusal::Full))
                };
            };
            Ok::<Passage, StoreError>(Passage::Open {
                visit_id,
                name: owner.name,
                spot,
                repeated: false,
                price: None,
                replaced: time.replaced,
                coins: 0,
            })
        }
        .await)
    }

    pub(super) async fn exit_in_one(
        pool: &Pool<PgConnection>,
        tables: &Tables,
        barrier: &Barrier,
        plate: &str,
        time: PassageTime,
        tz: &TimeZone,
    ) -> Result<Passage, StoreError> {
        let now_ms = ms(time.now);
        repeatable_in!(pool, |conn| async {
            let read = conn
                .plate_at_exit(plate, barrier.park_id, ms(time.at))
                .await?;
            let mut closing = match exit_rules(barrier, read, time) {
                Err(refusal) => return Ok(Passage::Refused(refusal)),
                Ok(Leaving::Close(closing)) => closing,
                Ok(Leaving::Done(owner)) => {
                    let again = conn.exit_again(tables, plate, barrier, ms(time.said), owner, tz);
                    return Ok(again.await?.unwrap_or(Passage::Refused(Refusal::NotInside)));
                }
            };
            let price = conn
                .price_closing(tables, barrier.park_id, &mut closing, tz)
                .await?;
            let at = closing.time.at;
            let without = closed_event(&closing, barrier, plate, false)?;
            let with = if closing.owner.use_coins {
                closed_event(&closing, barrier, plate, true)?
            } else {
                without.clone()
            };
            let replaced = closing.time.replaced;
            let coins = closing.coins(barrier);
            let Closing { owner, visit, .. } = closing;
            let query = sqlx::query_as::<_, (i64,)>(&EXIT)
                .bind(visit.id)
                .bind(owner.customer_id)
                .bind(i64::from(owner.use_coins))
                .bind(ms(at))
                .bind(barrier.id)
                .bind(barrier.park_id)
                .bind(rules::report_day(at, tz))
                .bind(stay_minutes(visit.entered_at_ms, at))
                .bind(exit_goodbye(&owner.name, price.as_ref(), coins))
                .bind(now_ms)
                .bind(&with.payload)
                .bind(&without.payload)
                .bind(ms(time.said))
                .bind(coins);
            let closed = bind_pg_append(query, &without)
                .fetch_optional(&mut *conn)
                .await?;
            match closed {
                Some(_) => Ok(Passage::Open {
                    visit_id: visit.id,
                    name: owner.name,
                    spot: visit.spot_number,
                    repeated: false,
                    price,
                    replaced,
                    coins,
                }),
                // Another call closed it between the read and the statement: read again.
                None => Err(StoreError::Transient(format!(
                    "visit {} closed by another exit meanwhile",
                    visit.id
                ))),
            }
        }
        .await)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pms_events::Event;
    use pms_service::store::Pools;
    use serde_json::json;

    use super::super::Passage;
    use crate::clock::PassageTime;
    use crate::store::replica::CustomerDoc;

    /// An entrance that finds every free spot that fits held by a passage in flight does not
    /// answer "full": it waits for that passage and then takes its spot. The passage holding it
    /// may be the same car's first try, still running for a replica that died; answering "full"
    /// there refused a car the database was letting in (found by the cluster test, issue 63).
    #[tokio::test]
    async fn an_entrance_waits_for_spots_held_by_passages_in_flight() {
        let Some((store, _dir)) = crate::store::seeded_for_test(true).await else {
            return;
        };
        let customer: CustomerDoc = serde_json::from_value(json!({
            "userId": 1, "firstName": "Ana", "lastName": "Lima", "nif": 100_000_001,
            "email": "ana@example.pt", "role": "CUSTOMER", "userStatus": "ENABLED",
            "paymentMethod": "PAYPAL",
            "vehicles": [{"licensePlateNumber": "AA-00-01", "vehicleType": "AUTOMOBILE",
                          "vehicleEnergySource": "FUEL"}]
        }))
        .expect("customer");
        let event = Event {
            id: 1,
            prev: 0,
            source: "users".into(),
            aggregate_type: "customer".into(),
            aggregate_id: "1".into(),
            event_type: "customer.registered".into(),
            version: 1,
            payload: serde_json::Value::Null,
            created_at: String::new(),
        };
        store
            .apply_customer(&customer, &event)
            .await
            .expect("customer");
        let entrance = store.barrier(1).await.expect("B1.1");
        let Pools::Postgres(pool) = store.pools() else {
            panic!("PostgreSQL")
        };
        // A passage in flight: every free fuel spot of park 1 locked, not yet taken.
        let mut holder = pool.get().await.expect("connection");
        sqlx::query("BEGIN")
            .execute(&mut *holder)
            .await
            .expect("begin");
        let held: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM spots WHERE park_id = 1 AND operational = 1 AND occupied = 0 \
             AND spot_vehicle_type = 'AUTOMOBILE' AND spot_type = 'FUEL' FOR UPDATE",
        )
        .fetch_all(&mut *holder)
        .await
        .expect("lock the spots");
        assert!(!held.is_empty());
        let at = "2026-12-04T10:00:00Z".parse().expect("time");
        let waiting = {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .pass(&entrance, "AA-00-01", PassageTime::as_said(at))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!waiting.is_finished(), "answered while the spots were held");
        sqlx::query("ROLLBACK")
            .execute(&mut *holder)
            .await
            .expect("rollback");
        match waiting.await.expect("entrance").expect("passage") {
            Passage::Open { .. } => {}
            other => panic!("the entrance after the passage in flight: {other:?}"),
        }
    }
}
