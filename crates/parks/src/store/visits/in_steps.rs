//! Entrance and exit as a transaction of one statement per table: the form for SQLite, where
//! the database runs in the process and a statement costs no round trip. Lock order: the park's
//! row first (raising or lowering its counter), so the transactions of one park queue there.

use jiff::tz::TimeZone;
use pms_events::conn::EventConn;
use pms_service::transaction;

use super::{
    closed_event, count_entrance_sql, count_exit_sql, entrance_counts, entrance_rules,
    exit_goodbye, exit_rules, opened_event, plate_of, show_on_displays, stay_minutes, Barrier,
    Closing, Entering, ExitReads, Leaving, Passage, PlateRow, PLATE,
};
use crate::clock::PassageTime;
use crate::rules::{self, Refusal};
use crate::store::{ms, Store, StoreError};

impl Store {
    pub(super) async fn enter_in_steps(
        &self,
        barrier: &Barrier,
        plate: &str,
        time: PassageTime,
        tz: &TimeZone,
    ) -> Result<Passage, StoreError> {
        let at = time.at;
        let at_ms = ms(at);
        let now_ms = ms(time.now);
        transaction!(self, |tx| {
            let row: Option<PlateRow> = sqlx::query_as(PLATE)
                .bind(plate)
                .fetch_optional(&mut *tx)
                .await?;
            let read = row.map(plate_of).transpose()?;
            let owner =
                match entrance_rules(barrier, read, ms(time.said)).map_err(StoreError::Refused)? {
                    Entering::New(owner) => owner,
                    Entering::Repeat(answer) => return Ok(answer),
                };
            // The park's row first: the counter's CHECK refuses a full park, and every entrance
            // and exit of this park queues here.
            let raised = sqlx::query(
                "UPDATE parks SET occupied = occupied + 1, changes = changes + 1 \
                 WHERE id = $1 AND occupied < max_occupancy",
            )
            .bind(barrier.park_id)
            .execute(&mut *tx)
            .await?;
            if raised.rows_affected() == 0 {
                return Err(StoreError::Refused(Refusal::Full));
            }
            // The first free spot that fits, taken in the same statement. Under the park's row
            // no other entrance of this park runs, so no spot here means the park is full for
            // this vehicle.
            let spot: Option<(i64, String)> = sqlx::query_as(
                "UPDATE spots SET occupied = 1 WHERE occupied = 0 AND id = (SELECT id FROM spots \
                 WHERE park_id = $1 AND operational = 1 AND occupied = 0 AND spot_vehicle_type = $2 AND spot_type = $3 \
                 ORDER BY floor_level, spot_number LIMIT 1) RETURNING id, spot_number",
            )
            .bind(barrier.park_id)
            .bind(owner.vehicle_type.as_str())
            .bind(owner.energy.as_str())
            .fetch_optional(&mut *tx)
            .await?;
            let Some((spot_id, spot_number)) = spot else {
                return Err(StoreError::Refused(Refusal::Full));
            };
            let visit_id: i64 = sqlx::query_scalar(
                "INSERT INTO visits (park_id, spot_id, customer_id, plate, vehicle_type, energy_source, entry_barrier_id, entered_at_ms, entry_said_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
            )
            .bind(barrier.park_id)
            .bind(spot_id)
            .bind(owner.customer_id)
            .bind(plate)
            .bind(owner.vehicle_type.as_str())
            .bind(owner.energy.as_str())
            .bind(barrier.id)
            .bind(at_ms)
            .bind(ms(time.said))
            .fetch_one(&mut *tx)
            .await?;
            let [cars, motorcycles, fuel, gpl, electric, hybrid] = entrance_counts(&owner);
            sqlx::query(count_entrance_sql!(
                "VALUES ($1, $2, 1, $3, $4, $5, $6, $7, $8)"
            ))
            .bind(barrier.park_id)
            .bind(rules::report_day(at, tz))
            .bind(cars)
            .bind(motorcycles)
            .bind(fuel)
            .bind(gpl)
            .bind(electric)
            .bind(hybrid)
            .execute(&mut *tx)
            .await?;
            show_on_displays!(tx, barrier.id, rules::welcome(&owner.name), now_ms);
            tx.append(&opened_event(visit_id, barrier, &owner, plate, at)?)
                .await?;
            Ok::<Passage, StoreError>(Passage::Open {
                visit_id,
                name: owner.name,
                spot: spot_number,
                repeated: false,
                price: None,
                replaced: time.replaced,
                coins: 0,
            })
        })
    }

    pub(super) async fn exit_in_steps(
        &self,
        barrier: &Barrier,
        plate: &str,
        time: PassageTime,
        tz: &TimeZone,
    ) -> Result<Passage, StoreError> {
        let now_ms = ms(time.now);
        transaction!(self, |tx| {
            let read = tx
                .plate_at_exit(plate, barrier.park_id, ms(time.at))
                .await?;
            let mut closing = match exit_rules(barrier, read, time).map_err(StoreError::Refused)? {
                Leaving::Close(closing) => closing,
                Leaving::Done(owner) => {
                    let said = ms(time.said);
                    let again = tx.exit_again(&self.tables, plate, barrier, said, owner, tz);
                    return again.await?.ok_or(StoreError::Refused(Refusal::NotInside));
                }
            };
            let price = tx
                .price_closing(&self.tables, barrier.park_id, &mut closing, tz)
                .await?;
            let at = closing.time.at;
            let Closing { owner, visit, .. } = &closing;
            // The park's row first, as at the entrance.
            sqlx::query(
                "UPDATE parks SET occupied = occupied - 1, changes = changes + 1 WHERE id = $1",
            )
            .bind(barrier.park_id)
            .execute(&mut *tx)
            .await?;
            sqlx::query("UPDATE spots SET occupied = 0 WHERE id = $1")
                .bind(visit.spot_id)
                .execute(&mut *tx)
                .await?;
            // The one-shot flag: consumed by this exit if (and only if) it is still set. A flag
            // read as clear is left alone: one set meanwhile counts for the next visit.
            let use_coins = owner.use_coins
                && sqlx::query(
                    "UPDATE customers SET use_parky_coins = 0 WHERE id = $1 AND use_parky_coins = 1",
                )
                .bind(owner.customer_id)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    == 1;
            let coins = closing.coins(barrier);
            sqlx::query(
                "UPDATE visits SET left_at_ms = $1, exit_said_ms = $5, exit_barrier_id = $2, use_coins = $3, \
                 coins_earned = $6 WHERE id = $4",
            )
            .bind(ms(at))
            .bind(barrier.id)
            .bind(i64::from(use_coins))
            .bind(visit.id)
            .bind(ms(time.said))
            .bind(coins)
            .execute(&mut *tx)
            .await?;
            sqlx::query(count_exit_sql!("VALUES ($1, $2, $3, $4)"))
                .bind(barrier.park_id)
                .bind(rules::report_day(at, tz))
                .bind(owner.customer_id)
                .bind(stay_minutes(visit.entered_at_ms, at))
                .execute(&mut *tx)
                .await?;
            show_on_displays!(
                tx,
                barrier.id,
                exit_goodbye(&owner.name, price.as_ref(), coins),
                now_ms
            );
            tx.append(&closed_event(&closing, barrier, plate, use_coins)?)
                .await?;
            let Closing {
                owner, visit, time, ..
            } = closing;
            Ok::<Passage, StoreError>(Passage::Open {
                visit_id: visit.id,
                name: owner.name,
                spot: visit.spot_number,
                repeated: false,
                price,
                replaced: time.replaced,
                coins,
            })
        })
    }
}
