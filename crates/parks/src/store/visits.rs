//! Entrance and exit: each one transaction. An entrance raises its park's occupied count (the
//! CHECK refuses a full park), takes the first free spot that fits the vehicle, opens the visit
//! on that spot, counts it in the day's report, writes the barrier's displays and appends
//! `visit.opened`. An exit closes the plate's open visit in that park, frees exactly its spot,
//! lowers the count, consumes the customer's "pay with coins" flag onto the visit, adds the
//! minutes to the parking-time report, writes the displays and appends `visit.closed`. Either
//! all of it happens or none: a refusal part-way rolls back.
//!
//! Retries by a barrier are harmless: an entrance or exit repeated with the same plate, barrier
//! and time answers as the first did and changes nothing.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use jiff::tz::TimeZone;
use jiff::Timestamp;
use pms_events::conn::EventConn;
use pms_events::NewEvent;
use pms_service::vocab::{EnergySource, UserStatus, VehicleType};
use pms_service::{repeatable, transaction};
use serde::Serialize;

use super::{instant, ms, retry, Store, StoreError};
use crate::model::{Direction, State};
use crate::rules::{self, Refusal};

/// A barrier, as the device endpoints need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Barrier {
    /// Id.
    pub id: i64,
    /// Its park's id.
    pub park_id: i64,
    /// Its park's number.
    pub park_number: i64,
    /// `B1.1`, …
    pub number: String,
    /// Entrance or exit.
    pub direction: Direction,
    /// Active or not.
    pub state: State,
    /// The park's clock.
    pub time_zone: String,
}

/// How long a barrier read from the database is used without reading it again.
pub const BARRIER_CACHE_TTL: Duration = Duration::from_secs(10);

/// Barriers read lately, by id.
#[derive(Debug, Default)]
pub struct BarrierCache(Mutex<HashMap<i64, (Barrier, Instant)>>);

impl BarrierCache {
    fn get(&self, id: i64) -> Option<Barrier> {
        let cached = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        cached
            .get(&id)
            .filter(|(_, at)| at.elapsed() < BARRIER_CACHE_TTL)
            .map(|(b, _)| b.clone())
    }

    fn put(&self, barrier: Barrier) {
        let mut cached = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        cached.insert(barrier.id, (barrier, Instant::now()));
    }
}

/// How an entrance or exit went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Passage {
    /// The barrier opens. `visit_id` is the visit opened or closed.
    Open {
        /// The visit.
        visit_id: i64,
        /// The customer's name, for the greeting.
        name: String,
        /// The spot taken or freed.
        spot: String,
        /// True when this repeats an earlier identical request.
        repeated: bool,
        /// On a repeated exit: the price and discount if already invoiced.
        price: Option<(String, String)>,
    },
    /// The barrier stays closed.
    Refused(Refusal),
}

/// `visit.opened`, version 1.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct VisitOpened<'a> {
    visit_id: i64,
    park_id: i64,
    park_number: i64,
    customer_id: i64,
    plate: &'a str,
    vehicle_type: VehicleType,
    energy_source: EnergySource,
    entered_at: String,
}

/// `visit.closed`, version 1: what the payments service needs to invoice the visit.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct VisitClosed<'a> {
    visit_id: i64,
    park_id: i64,
    park_number: i64,
    customer_id: i64,
    nif: i64,
    customer_name: &'a str,
    plate: &'a str,
    vehicle_type: VehicleType,
    energy_source: EnergySource,
    entered_at: String,
    left_at: String,
    use_coins: bool,
}

/// The owner and kind of a plate.
struct Owner {
    customer_id: i64,
    vehicle_type: VehicleType,
    energy: EnergySource,
    name: String,
    nif: i64,
    status: UserStatus,
    /// The "pay my next visit with coins" flag as read.
    use_coins: bool,
}

/// The plate's open visit, in whichever park.
struct OpenVisit {
    id: i64,
    park_id: i64,
    spot_id: i64,
    entry_barrier_id: i64,
    entered_at_ms: i64,
    spot_number: String,
}

/// A plate's owner and open visit, read in one statement at the start of an entrance or exit.
const PLATE: &str =
    "SELECT v.customer_id, v.vehicle_type, v.energy_source, c.name, c.nif, c.status, c.use_parky_coins, \
     o.id, o.park_id, o.spot_id, o.entry_barrier_id, o.entered_at_ms, s.spot_number \
     FROM vehicles v JOIN customers c ON c.id = v.customer_id \
     LEFT JOIN visits o ON o.plate = v.plate AND o.left_at_ms IS NULL \
     LEFT JOIN spots s ON s.id = o.spot_id WHERE v.plate = $1";

type PlateRow = (
    i64,
    String,
    String,
    String,
    i64,
    String,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<String>,
);

fn plate_of(row: PlateRow) -> Result<(Owner, Option<OpenVisit>), StoreError> {
    let bad = |what: &str| StoreError::Internal(format!("stored {what} is not a known name"));
    let open = match (row.7, row.8, row.9, row.10, row.11, row.12) {
        (
            Some(id),
            Some(park_id),
            Some(spot_id),
            Some(entry_barrier_id),
            Some(entered_at_ms),
            Some(spot_number),
        ) => Some(OpenVisit {
            id,
            park_id,
            spot_id,
            entry_barrier_id,
            entered_at_ms,
            spot_number,
        }),
        _ => None,
    };
    let owner = Owner {
        customer_id: row.0,
        vehicle_type: VehicleType::parse(&row.1).ok_or_else(|| bad("vehicle type"))?,
        energy: EnergySource::parse(&row.2).ok_or_else(|| bad("energy source"))?,
        name: row.3,
        nif: row.4,
        status: UserStatus::parse(&row.5).ok_or_else(|| bad("status"))?,
        use_coins: super::flag(row.6),
    };
    Ok((owner, open))
}

/// Sets the message of the active displays of a barrier (same park by construction: displays
/// belong to a barrier by id, not by a number repeated in every park).
macro_rules! show_on_displays {
    ($tx:ident, $barrier:expr, $message:expr, $at:expr) => {
        sqlx::query(
            "UPDATE displays SET message = $1, updated_at_ms = $2 WHERE barrier_id = $3 AND state = 'ACTIVE'",
        )
        .bind($message)
        .bind($at)
        .bind($barrier)
        .execute(&mut *$tx)
        .await?
    };
}
pub(crate) use show_on_displays;

impl Store {
    /// The barrier with id `id`, from the store's cache when read in the last
    /// [`BARRIER_CACHE_TTL`] (barriers change only with the seed or an operator's SQL; every
    /// entrance and exit names one).
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; database failures.
    pub async fn barrier(&self, id: i64) -> Result<Barrier, StoreError> {
        if let Some(b) = self.barriers.get(id) {
            return Ok(b);
        }
        let row: Option<(i64, i64, i64, String, String, String, String)> = repeatable!(
            self,
            |conn| {
                sqlx::query_as(
            "SELECT b.id, b.park_id, p.park_number, b.barrier_number, b.direction, b.state, p.time_zone \
             FROM barriers b JOIN parks p ON p.id = b.park_id WHERE b.id = $1"
        )
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
            }
        )?;
        let (id, park_id, park_number, number, direction, state, time_zone) =
            row.ok_or_else(|| StoreError::not_found("barrier", id))?;
        let barrier = Barrier {
            id,
            park_id,
            park_number,
            number,
            direction: Direction::parse(&direction)
                .ok_or_else(|| StoreError::Internal(direction.clone()))?,
            state: State::parse(&state).ok_or_else(|| StoreError::Internal(state.clone()))?,
            time_zone,
        };
        self.barriers.put(barrier.clone());
        Ok(barrier)
    }

    /// A car with `plate` at `barrier` at `at`: an entrance or an exit by the barrier's
    /// direction. A refusal rolls everything back and is written to the barrier's displays.
    ///
    /// # Errors
    /// Database failures (refusals are [`Passage::Refused`]).
    pub async fn pass(
        &self,
        barrier: &Barrier,
        plate: &str,
        at: Timestamp,
    ) -> Result<Passage, StoreError> {
        let tz = rules::time_zone(&barrier.time_zone).map_err(StoreError::Internal)?;
        let outcome = match barrier.direction {
            Direction::Entrance => retry(|| self.enter_once(barrier, plate, at, &tz)).await,
            Direction::Exit => retry(|| self.exit_once(barrier, plate, at, &tz)).await,
        };
        match outcome {
            Err(StoreError::Refused(r)) => {
                self.show_refusal(barrier, r).await?;
                Ok(Passage::Refused(r))
            }
            other => other,
        }
    }

    async fn enter_once(
        &self,
        barrier: &Barrier,
        plate: &str,
        at: Timestamp,
        tz: &TimeZone,
    ) -> Result<Passage, StoreError> {
        let at_ms = ms(at);
        let now_ms = ms(Timestamp::now());
        transaction!(self, |tx| {
            let Some(row) = sqlx::query_as(PLATE)
                .bind(plate)
                .fetch_optional(&mut *tx)
                .await?
            else {
                return Err(StoreError::Refused(Refusal::UnknownPlateAtEntrance));
            };
            let (owner, open) = plate_of(row)?;
            if owner.status == UserStatus::Blocked {
                return Err(StoreError::Refused(Refusal::Blocked));
            }
            if barrier.state != State::Active {
                return Err(StoreError::Refused(Refusal::BarrierDisabled));
            }
            if let Some(open) = open {
                if open.entry_barrier_id == barrier.id && open.entered_at_ms == at_ms {
                    return Ok(Passage::Open {
                        visit_id: open.id,
                        name: owner.name,
                        spot: open.spot_number,
                        repeated: true,
                        price: None,
                    });
                }
                return Err(StoreError::Refused(Refusal::AlreadyInside));
            }
            // The park's row first: the counter's CHECK refuses a full park, and every entrance
            // and exit of this park queues here.
            let raised = sqlx::query(
                "UPDATE parks SET occupied = occupied + 1 WHERE id = $1 AND occupied < max_occupancy",
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
                "INSERT INTO visits (park_id, spot_id, customer_id, plate, vehicle_type, energy_source, entry_barrier_id, entered_at_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            )
            .bind(barrier.park_id)
            .bind(spot_id)
            .bind(owner.customer_id)
            .bind(plate)
            .bind(owner.vehicle_type.as_str())
            .bind(owner.energy.as_str())
            .bind(barrier.id)
            .bind(at_ms)
            .fetch_one(&mut *tx)
            .await?;
            let is = |b: bool| i64::from(b);
            sqlx::query(
                "INSERT INTO park_reports (park_id, day, total_vehicles, cars, motorcycles, fuel, gpl, electric, plug_in_hybrid) \
                 VALUES ($1, $2, 1, $3, $4, $5, $6, $7, $8) ON CONFLICT (park_id, day) DO UPDATE SET \
                 total_vehicles = park_reports.total_vehicles + 1, cars = park_reports.cars + excluded.cars, \
                 motorcycles = park_reports.motorcycles + excluded.motorcycles, fuel = park_reports.fuel + excluded.fuel, \
                 gpl = park_reports.gpl + excluded.gpl, electric = park_reports.electric + excluded.electric, \
                 plug_in_hybrid = park_reports.plug_in_hybrid + excluded.plug_in_hybrid",
            )
            .bind(barrier.park_id)
            .bind(rules::report_day(at, tz))
            .bind(is(owner.vehicle_type == VehicleType::Automobile))
            .bind(is(owner.vehicle_type == VehicleType::Motorcycle))
            .bind(is(owner.energy == EnergySource::Fuel))
            .bind(is(owner.energy == EnergySource::Gpl))
            .bind(is(owner.energy == EnergySource::Electric))
            .bind(is(owner.energy == EnergySource::PlugInHybrid))
            .execute(&mut *tx)
            .await?;
            show_on_displays!(tx, barrier.id, rules::welcome(&owner.name), now_ms);
            let event = NewEvent::new(
                "visit",
                visit_id,
                "visit.opened",
                1,
                &VisitOpened {
                    visit_id,
                    park_id: barrier.park_id,
                    park_number: barrier.park_number,
                    customer_id: owner.customer_id,
                    plate,
                    vehicle_type: owner.vehicle_type,
                    energy_source: owner.energy,
                    entered_at: at.to_string(),
                },
            )
            .map_err(|e| StoreError::Internal(e.to_string()))?;
            tx.append(&event).await?;
            Ok::<Passage, StoreError>(Passage::Open {
                visit_id,
                name: owner.name,
                spot: spot_number,
                repeated: false,
                price: None,
            })
        })
    }

    async fn exit_once(
        &self,
        barrier: &Barrier,
        plate: &str,
        at: Timestamp,
        tz: &TimeZone,
    ) -> Result<Passage, StoreError> {
        let at_ms = ms(at);
        let now_ms = ms(Timestamp::now());
        transaction!(self, |tx| {
            let Some(row) = sqlx::query_as(PLATE)
                .bind(plate)
                .fetch_optional(&mut *tx)
                .await?
            else {
                return Err(StoreError::Refused(Refusal::UnknownPlateAtExit));
            };
            let (owner, open) = plate_of(row)?;
            if barrier.state != State::Active {
                return Err(StoreError::Refused(Refusal::BarrierDisabled));
            }
            let Some(open) = open.filter(|v| v.park_id == barrier.park_id) else {
                // The same exit again (the barrier retried): answer as before.
                let done: Option<(i64, String, Option<String>, Option<String>)> = sqlx::query_as(
                    "SELECT v.id, s.spot_number, v.price, v.discount FROM visits v JOIN spots s ON s.id = v.spot_id \
                     WHERE v.plate = $1 AND v.park_id = $2 AND v.exit_barrier_id = $3 AND v.left_at_ms = $4",
                )
                .bind(plate)
                .bind(barrier.park_id)
                .bind(barrier.id)
                .bind(at_ms)
                .fetch_optional(&mut *tx)
                .await?;
                return match done {
                    Some((visit_id, spot, price, discount)) => Ok(Passage::Open {
                        visit_id,
                        name: owner.name,
                        spot,
                        repeated: true,
                        price: price.zip(discount),
                    }),
                    None => Err(StoreError::Refused(Refusal::NotInside)),
                };
            };
            let OpenVisit {
                id: visit_id,
                spot_id,
                entered_at_ms: entered_ms,
                spot_number,
                ..
            } = open;
            if at_ms < entered_ms {
                return Err(StoreError::Refused(Refusal::ExitBeforeEntrance));
            }
            // The park's row first, as at the entrance.
            sqlx::query("UPDATE parks SET occupied = occupied - 1 WHERE id = $1")
                .bind(barrier.park_id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("UPDATE spots SET occupied = 0 WHERE id = $1")
                .bind(spot_id)
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
            sqlx::query(
                "UPDATE visits SET left_at_ms = $1, exit_barrier_id = $2, use_coins = $3 WHERE id = $4",
            )
            .bind(at_ms)
            .bind(barrier.id)
            .bind(i64::from(use_coins))
            .bind(visit_id)
            .execute(&mut *tx)
            .await?;
            let entered = instant(entered_ms);
            let minutes = at.duration_since(entered).as_mins().max(0);
            sqlx::query(
                "INSERT INTO park_time_reports (park_id, day, customer_id, minutes) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (park_id, day, customer_id) DO UPDATE SET minutes = park_time_reports.minutes + excluded.minutes",
            )
            .bind(barrier.park_id)
            .bind(rules::report_day(at, tz))
            .bind(owner.customer_id)
            .bind(minutes)
            .execute(&mut *tx)
            .await?;
            show_on_displays!(tx, barrier.id, rules::goodbye(&owner.name, None), now_ms);
            let event = NewEvent::new(
                "visit",
                visit_id,
                "visit.closed",
                1,
                &VisitClosed {
                    visit_id,
                    park_id: barrier.park_id,
                    park_number: barrier.park_number,
                    customer_id: owner.customer_id,
                    nif: owner.nif,
                    customer_name: &owner.name,
                    plate,
                    vehicle_type: owner.vehicle_type,
                    energy_source: owner.energy,
                    entered_at: entered.to_string(),
                    left_at: at.to_string(),
                    use_coins,
                },
            )
            .map_err(|e| StoreError::Internal(e.to_string()))?;
            tx.append(&event).await?;
            Ok::<Passage, StoreError>(Passage::Open {
                visit_id,
                name: owner.name,
                spot: spot_number,
                repeated: false,
                price: None,
            })
        })
    }

    /// Writes a refusal's message to the barrier's displays (as the original did).
    async fn show_refusal(&self, barrier: &Barrier, refusal: Refusal) -> Result<(), StoreError> {
        let now_ms = ms(Timestamp::now());
        retry(|| async {
            let r: Result<(), StoreError> = transaction!(self, |tx| {
                show_on_displays!(tx, barrier.id, refusal.message(), now_ms);
                Ok::<(), StoreError>(())
            });
            r
        })
        .await
    }
}
