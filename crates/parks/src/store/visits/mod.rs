//! Entrance and exit: each all or nothing. An entrance takes the first free spot that fits the
//! vehicle, raises its park's occupied count (the CHECK refuses a full park), opens the visit on
//! that spot, counts it in the day's report, writes the barrier's displays and appends
//! `visit.opened`. An exit closes the plate's open visit in that park, frees exactly its spot,
//! lowers the count, consumes the customer's "pay with coins" flag onto the visit, adds the
//! minutes to the parking-time report, writes the displays (with the stay's price when quoted,
//! [`super::quotes`]) and appends `visit.closed`. A refusal part-way changes nothing.
//!
//! Retries by a barrier are harmless: an entrance or exit repeated with the same plate, barrier
//! and time said answers as the first did and changes nothing, while its visit is open and after
//! it closed.
//!
//! Times ([`crate::clock`]): the caller bounds the barrier's time by the server's clock; here it
//! is bounded by the plate's history. An exit before its visit's entrance is taken at the
//! server's clock (never before the entrance); an entrance at or before the plate's last exit is
//! refused by the database (no two stays of a plate overlap: triggers on both backends,
//! `visits_no_overlap`) and then, unless it is a retry, taken after that exit.
//!
//! The rules are checked here, once, on the plate's read (`entrance_rules`, `exit_rules`);
//! the writes are made one of two ways, with the same effects:
//! - `in_steps`: a transaction of one statement per table (SQLite, where a statement costs no
//!   round trip);
//! - `one_statement`: on PostgreSQL, the plate's read and then one data-modifying statement,
//!   because there every statement is a round trip to another process, and round trips were most
//!   of a barrier call's cost (`docs/benchmark-history.md`, 2026-11-29).
//!
//! The same tests run against both.

mod in_steps;
mod one_statement;

use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use pms_events::NewEvent;
use pms_service::store::Pools;
use pms_service::{repeatable, transaction};
use pms_tariff::PriceTable;
use pms_vocab::{EnergySource, UserStatus, VehicleType};
use rust_decimal::Decimal;
use serde::Serialize;

use super::{instant, ms, quotes, retry, Store, StoreError};
use crate::clock::{PassageTime, Replaced};
use crate::model::{Direction, State};
use crate::prices::Price;
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
    /// The last clock offset its passages showed, ms (positive: ahead of the server).
    pub clock_offset_ms: Option<i64>,
    /// Whether its park's entrances take cars, by its manager's switch.
    pub entrances_open: bool,
    /// What its park pays a visit in PARKY coins.
    pub coin_rates: rules::CoinRates,
    /// Its park's opening hours (none: always open).
    pub opening_hours: Option<std::sync::Arc<crate::hours::OpeningHours>>,
}

impl Barrier {
    /// Whether its park takes a car in at `at` (on the park's clock, `zone`): its entrances are
    /// open and it is within the park's opening hours. Exits never ask.
    pub fn park_takes_cars_at(&self, at: Timestamp, zone: &TimeZone) -> bool {
        self.entrances_open
            && self
                .opening_hours
                .as_ref()
                .is_none_or(|h| h.open_at(at, zone))
    }
}

/// How long a barrier read from the database is used without reading it again.
pub const BARRIER_CACHE_TTL: Duration = super::recent::TTL;

/// Barriers read lately, by id.
pub type BarrierCache = super::recent::Recent<i64, Barrier>;

impl BarrierCache {
    /// Notes barrier `id`'s clock offset in its cached copy, without making that copy any
    /// younger: its state (switched off, say) is still read again within the TTL.
    fn note_offset(&self, id: i64, offset_ms: i64) {
        self.update(&id, |barrier| barrier.clock_offset_ms = Some(offset_ms));
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
        /// At an exit, the price and discount when known: quoted by the exit itself, or on a
        /// repeated exit from the invoice when it came.
        price: Option<(String, String)>,
        /// Why the passage was recorded at another time than the barrier's, when it was.
        replaced: Option<Replaced>,
        /// At an exit, the PARKY coins the visit earned (0 at an entrance).
        coins: i64,
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
    /// The park's table in force when the car left, which the exit was quoted with and the
    /// invoice is priced with (`None` when the park has no table).
    #[serde(skip_serializing_if = "Option::is_none")]
    price_table_version: Option<i64>,
    /// The PARKY coins the visit earned, at its park's rates when it closed (the users service
    /// credits them, once).
    coins_earned: i64,
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
    /// The entrance's time as its barrier said it.
    entry_said_ms: i64,
}

/// A plate's owner and open visit, read in one statement at the start of an entrance or exit.
/// `$extra` adds columns after the read ones (PostgreSQL's entrance draws the visit's id here).
macro_rules! plate_sql {
    ($($extra:expr),*) => {
        concat!(
            "SELECT v.customer_id, v.vehicle_type, v.energy_source, c.name, c.nif, c.status, c.use_parky_coins, \
             o.id, o.park_id, o.spot_id, o.entry_barrier_id, o.entered_at_ms, s.spot_number, o.entry_said_ms",
            $($extra,)*
            " FROM vehicles v JOIN customers c ON c.id = v.customer_id \
             LEFT JOIN visits o ON o.plate = v.plate AND o.left_at_ms IS NULL \
             LEFT JOIN spots s ON s.id = o.spot_id WHERE v.plate = $1"
        )
    };
}
use plate_sql;

/// The plate's read.
const PLATE: &str = plate_sql!();

/// The plate's read at an exit, and the version of the park's table in force when the car
/// leaves (column 14, [`super::quotes`]): `$1` plate, `$2` park, `$3` the exit's time (ms).
const PLATE_AT_EXIT: &str = plate_sql!(", ", super::quotes::in_force_sql!("$2", "$3"));

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
    Option<i64>,
);

fn plate_of(row: PlateRow) -> Result<(Owner, Option<OpenVisit>), StoreError> {
    let bad = |what: &str| StoreError::Internal(format!("stored {what} is not a known name"));
    let open = match (row.7, row.8, row.9, row.10, row.11, row.12, row.13) {
        (
            Some(id),
            Some(park_id),
            Some(spot_id),
            Some(entry_barrier_id),
            Some(entered_at_ms),
            Some(spot_number),
            Some(entry_said_ms),
        ) => Some(OpenVisit {
            id,
            park_id,
            spot_id,
            entry_barrier_id,
            entered_at_ms,
            spot_number,
            entry_said_ms,
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

/// What an entrance does once the plate is read.
enum Entering {
    /// Open a visit for this owner.
    New(Owner),
    /// The same entrance again (the barrier retried): answer as before.
    Repeat(Passage),
}

/// The entrance's rules, on the plate's read (`None`: no such plate); `said_ms` is the barrier's
/// time, which a retry repeats.
fn entrance_rules(
    barrier: &Barrier,
    read: Option<(Owner, Option<OpenVisit>)>,
    said_ms: i64,
) -> Result<Entering, Refusal> {
    let (owner, open) = read.ok_or(Refusal::UnknownPlateAtEntrance)?;
    match owner.status {
        UserStatus::Blocked => return Err(Refusal::Blocked),
        // Only a closed account is DISABLED here (`store::closure`).
        UserStatus::Disabled => return Err(Refusal::AccountClosed),
        UserStatus::Enabled => {}
    }
    if barrier.state != State::Active {
        return Err(Refusal::BarrierDisabled);
    }
    match open {
        None => Ok(Entering::New(owner)),
        Some(open) if open.entry_barrier_id == barrier.id && open.entry_said_ms == said_ms => {
            Ok(Entering::Repeat(Passage::Open {
                visit_id: open.id,
                name: owner.name,
                spot: open.spot_number,
                repeated: true,
                price: None,
                replaced: None,
                coins: 0,
            }))
        }
        Some(_) => Err(Refusal::AlreadyInside),
    }
}

/// What an exit does once the plate is read.
enum Leaving {
    /// Close this open visit.
    Close(Closing),
    /// No open visit in this park: look for the same exit done before ([`DONE`]).
    Done(Owner),
}

/// The exit's rules, on the plate's read at an exit (`None`: no such plate). An exit before its
/// visit's entrance is taken later ([`PassageTime::not_before`]): a device's time never keeps a
/// car inside.
fn exit_rules(
    barrier: &Barrier,
    read: Option<(Owner, Option<OpenVisit>, Option<i64>)>,
    time: PassageTime,
) -> Result<Leaving, Refusal> {
    let (owner, open, version) = read.ok_or(Refusal::UnknownPlateAtExit)?;
    if barrier.state != State::Active {
        return Err(Refusal::BarrierDisabled);
    }
    match open.filter(|v| v.park_id == barrier.park_id) {
        None => Ok(Leaving::Done(owner)),
        Some(visit) => {
            let time = time.not_before(instant(visit.entered_at_ms), Replaced::BeforeEntrance);
            Ok(Leaving::Close(Closing {
                owner,
                visit,
                version,
                time,
            }))
        }
    }
}

/// The same exit done before: plate, park, time said and barrier (`$1`–`$4`), with what its
/// answer needs: the invoice's price when it came, else what to quote the stay with again.
const DONE: &str = concat!(
    "SELECT v.id, s.spot_number, v.price, v.discount, v.use_coins, v.entered_at_ms, v.vehicle_type, ",
    super::quotes::in_force_sql!("$2", "v.left_at_ms"),
    ", v.left_at_ms, v.coins_earned FROM visits v JOIN spots s ON s.id = v.spot_id \
     WHERE v.plate = $1 AND v.park_id = $2 AND v.exit_said_ms = $3 AND v.exit_barrier_id = $4"
);

/// [`DONE`]'s row.
type DoneRow = (
    i64,
    String,
    Option<String>,
    Option<String>,
    i64,
    i64,
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// The reads both forms of an exit make ([`in_steps`] in a SQLite transaction,
/// [`one_statement`] on a PostgreSQL connection), written once for either connection.
trait ExitReads {
    /// The plate's owner and open visit, with park `park_id`'s table version in force at
    /// `at_ms` ([`PLATE_AT_EXIT`]); `None` for a plate nobody has.
    async fn plate_at_exit(
        &mut self,
        plate: &str,
        park_id: i64,
        at_ms: i64,
    ) -> Result<Option<(Owner, Option<OpenVisit>, Option<i64>)>, StoreError>;

    /// The answer of the same exit of `plate` through `barrier` at the time said, done before
    /// ([`DONE`]), as it was the first time; `None` when there was none (the car is not inside).
    async fn exit_again(
        &mut self,
        tables: &quotes::Tables,
        plate: &str,
        barrier: &Barrier,
        said_ms: i64,
        owner: Owner,
        tz: &TimeZone,
    ) -> Result<Option<Passage>, StoreError>;

    /// The stay's price at `closing`'s time, with the park's table in force then (its version
    /// read again when the time moved from the one the plate was read for).
    async fn price_closing(
        &mut self,
        tables: &quotes::Tables,
        park_id: i64,
        closing: &mut Closing,
        tz: &TimeZone,
    ) -> Result<Option<Price>, StoreError>;
}

macro_rules! exit_reads {
    ($($conn:ty),+) => {$(
        impl ExitReads for $conn {
            async fn plate_at_exit(
                &mut self,
                plate: &str,
                park_id: i64,
                at_ms: i64,
            ) -> Result<Option<(Owner, Option<OpenVisit>, Option<i64>)>, StoreError> {
                use sqlx::{FromRow, Row};
                let row = sqlx::query(PLATE_AT_EXIT)
                    .bind(plate)
                    .bind(park_id)
                    .bind(at_ms)
                    .fetch_optional(&mut *self)
                    .await?;
                let Some(row) = row else {
                    return Ok(None);
                };
                let (owner, open) = plate_of(PlateRow::from_row(&row)?)?;
                Ok(Some((owner, open, row.try_get::<Option<i64>, _>(14)?)))
            }

            async fn exit_again(
                &mut self,
                tables: &quotes::Tables,
                plate: &str,
                barrier: &Barrier,
                said_ms: i64,
                owner: Owner,
                tz: &TimeZone,
            ) -> Result<Option<Passage>, StoreError> {
                let conn = &mut *self;
                let done: Option<DoneRow> = sqlx::query_as(DONE)
                    .bind(plate)
                    .bind(barrier.park_id)
                    .bind(said_ms)
                    .bind(barrier.id)
                    .fetch_optional(&mut *conn)
                    .await?;
                let Some(done) = done.map(Done::of).transpose()? else {
                    return Ok(None);
                };
                let table = quotes::table_version!(conn, tables, barrier.park_id, done.to_quote());
                Ok(Some(done.answer(owner, table.as_deref(), tz)))
            }

            async fn price_closing(
                &mut self,
                tables: &quotes::Tables,
                park_id: i64,
                closing: &mut Closing,
                tz: &TimeZone,
            ) -> Result<Option<Price>, StoreError> {
                let conn = &mut *self;
                if closing.moved() {
                    closing.version = sqlx::query_scalar(quotes::VERSION_AT)
                        .bind(park_id)
                        .bind(ms(closing.time.at))
                        .fetch_one(&mut *conn)
                        .await?;
                }
                let table = quotes::table_version!(conn, tables, park_id, closing.version);
                Ok(closing.price(table.as_deref(), tz))
            }
        }
    )+};
}

exit_reads!(sqlx::SqliteConnection, sqlx::PgConnection);

/// The same exit done before, as [`DONE`] read it.
struct Done {
    visit_id: i64,
    spot: String,
    /// The invoice's price and discount, once it came.
    invoiced: Option<Price>,
    use_coins: bool,
    entered_at_ms: i64,
    vehicle: VehicleType,
    /// The park's table version in force at the exit.
    version: Option<i64>,
    /// The exit's time, as taken.
    left_at_ms: i64,
    /// The coins it earned (none recorded before they were).
    coins: i64,
}

impl Done {
    fn of(row: DoneRow) -> Result<Self, StoreError> {
        let (
            visit_id,
            spot,
            price,
            discount,
            use_coins,
            entered_at_ms,
            vehicle,
            version,
            left,
            coins,
        ) = row;
        Ok(Self {
            visit_id,
            spot,
            invoiced: price.zip(discount),
            use_coins: super::flag(use_coins),
            entered_at_ms,
            vehicle: VehicleType::parse(&vehicle)
                .ok_or_else(|| StoreError::Internal(format!("stored vehicle type {vehicle}")))?,
            version,
            left_at_ms: left
                .ok_or_else(|| StoreError::Internal("a done exit has no time".into()))?,
            coins: coins.unwrap_or(0),
        })
    }

    /// The table version to quote the stay with again: only while its invoice has not come.
    fn to_quote(&self) -> Option<i64> {
        self.version.filter(|_| self.invoiced.is_none())
    }

    /// The answer, as the first time: the invoice's price, else the stay quoted with `table`.
    fn answer(self, owner: Owner, table: Option<&PriceTable>, tz: &TimeZone) -> Passage {
        let price = self.invoiced.or_else(|| {
            quoted(
                table?,
                tz,
                self.entered_at_ms,
                instant(self.left_at_ms),
                self.vehicle,
                self.use_coins,
            )
        });
        Passage::Open {
            visit_id: self.visit_id,
            name: owner.name,
            spot: self.spot,
            repeated: true,
            price,
            replaced: None,
            coins: self.coins,
        }
    }
}

/// The price an exit says and shows for a stay from `entered_ms` to `at` (no discount), when
/// [`quotes::quote`] gives one.
fn quoted(
    table: &PriceTable,
    tz: &TimeZone,
    entered_ms: i64,
    at: Timestamp,
    vehicle: VehicleType,
    use_coins: bool,
) -> Option<Price> {
    let total = quotes::quote(table, tz, instant(entered_ms), at, vehicle, use_coins)?;
    Some((total.to_string(), Decimal::ZERO.to_string()))
}

/// The day report's counts for one entrance: cars, motorcycles, fuel, GPL, electric and
/// plug-in hybrid, each 0 or 1.
fn entrance_counts(owner: &Owner) -> [i64; 6] {
    let is = |b: bool| i64::from(b);
    [
        is(owner.vehicle_type == VehicleType::Automobile),
        is(owner.vehicle_type == VehicleType::Motorcycle),
        is(owner.energy == EnergySource::Fuel),
        is(owner.energy == EnergySource::Gpl),
        is(owner.energy == EnergySource::Electric),
        is(owner.energy == EnergySource::PlugInHybrid),
    ]
}

/// The day report's row for an entrance: one more vehicle, and one more of its kinds. `$rows`
/// gives park, day, 1 and the six [`entrance_counts`], as `VALUES` or a `SELECT`.
macro_rules! count_entrance_sql {
    ($rows:literal) => {
        concat!(
            "INSERT INTO park_reports (park_id, day, total_vehicles, cars, motorcycles, fuel, gpl, electric, plug_in_hybrid) ",
            $rows,
            " ON CONFLICT (park_id, day) DO UPDATE SET \
             total_vehicles = park_reports.total_vehicles + 1, cars = park_reports.cars + excluded.cars, \
             motorcycles = park_reports.motorcycles + excluded.motorcycles, fuel = park_reports.fuel + excluded.fuel, \
             gpl = park_reports.gpl + excluded.gpl, electric = park_reports.electric + excluded.electric, \
             plug_in_hybrid = park_reports.plug_in_hybrid + excluded.plug_in_hybrid"
        )
    };
}
use count_entrance_sql;

/// The parking-time report's row for an exit: the stay's minutes added to the customer's day
/// in the park. `$rows` gives park, day, customer and minutes, as `VALUES` or a `SELECT`.
macro_rules! count_exit_sql {
    ($rows:literal) => {
        concat!(
            "INSERT INTO park_time_reports (park_id, day, customer_id, minutes) ",
            $rows,
            " ON CONFLICT (park_id, day, customer_id) DO UPDATE SET minutes = park_time_reports.minutes + excluded.minutes"
        )
    };
}
use count_exit_sql;

/// Whole minutes from entrance to exit.
fn stay_minutes(entered_ms: i64, at: Timestamp) -> i64 {
    at.duration_since(instant(entered_ms)).as_mins().max(0)
}

/// `visit.opened` for a new visit.
fn opened_event(
    visit_id: i64,
    barrier: &Barrier,
    owner: &Owner,
    plate: &str,
    at: Timestamp,
) -> Result<NewEvent, StoreError> {
    NewEvent::new(
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
    .map_err(|e| StoreError::Internal(e.to_string()))
}

/// What an exit closes: the visit, its owner, the exit's time and the park's table version in
/// force then.
struct Closing {
    owner: Owner,
    visit: OpenVisit,
    version: Option<i64>,
    /// The exit's time, not before the visit's entrance.
    time: PassageTime,
}

impl Closing {
    /// True when the exit's time moved after the plate's read (it was before the entrance), so
    /// `version`, read for the time said, is to be read again ([`quotes::VERSION_AT`]).
    fn moved(&self) -> bool {
        self.time.replaced == Some(Replaced::BeforeEntrance)
    }

    /// The price the exit says and shows (no discount), when the stay is quoted with `table`.
    fn price(&self, table: Option<&PriceTable>, tz: &TimeZone) -> Option<Price> {
        quoted(
            table?,
            tz,
            self.visit.entered_at_ms,
            self.time.at,
            self.owner.vehicle_type,
            self.owner.use_coins,
        )
    }

    /// The PARKY coins the stay earns at `barrier`'s park's rates.
    fn coins(&self, barrier: &Barrier) -> i64 {
        barrier
            .coin_rates
            .earned(instant(self.visit.entered_at_ms), self.time.at)
    }
}

/// The exit's goodbye to `name`, with the price when quoted and the coins earned.
fn exit_goodbye(name: &str, price: Option<&Price>, coins: i64) -> String {
    let shown = price.map(|(p, d)| (rules::shown_money(p), rules::shown_money(d)));
    rules::goodbye(
        name,
        shown.as_ref().map(|(p, d)| (p.as_str(), d.as_str())),
        coins,
    )
}

/// `visit.closed` for the visit `closing` closes, paid with coins or not.
fn closed_event(
    closing: &Closing,
    barrier: &Barrier,
    plate: &str,
    use_coins: bool,
) -> Result<NewEvent, StoreError> {
    let (visit, owner) = (&closing.visit, &closing.owner);
    NewEvent::new(
        "visit",
        visit.id,
        "visit.closed",
        1,
        &VisitClosed {
            visit_id: visit.id,
            park_id: barrier.park_id,
            park_number: barrier.park_number,
            customer_id: owner.customer_id,
            nif: owner.nif,
            customer_name: &owner.name,
            plate,
            vehicle_type: owner.vehicle_type,
            energy_source: owner.energy,
            entered_at: instant(visit.entered_at_ms).to_string(),
            left_at: closing.time.at.to_string(),
            use_coins,
            price_table_version: closing.version,
            coins_earned: closing.coins(barrier),
        },
    )
    .map_err(|e| StoreError::Internal(e.to_string()))
}

/// Sets the message of the active displays of a barrier (same park by construction: displays
/// belong to a barrier by id, not by a number repeated in every park).
macro_rules! show_on_displays {
    ($tx:ident, $barrier:expr, $message:expr, $at:expr) => {
        sqlx::query(
            "UPDATE displays SET message = $1, updated_at_ms = $2, changes = changes + 1 \
             WHERE barrier_id = $3 AND state = 'ACTIVE'",
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
    /// [`BARRIER_CACHE_TTL`] (every entrance and exit names one; a barrier switched on or off
    /// through this replica is read again at once, through another within the TTL).
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; database failures.
    pub async fn barrier(&self, id: i64) -> Result<Barrier, StoreError> {
        if let Some(b) = self.barriers.get(&id) {
            return Ok(b);
        }
        type Row = (
            i64,
            i64,
            i64,
            String,
            String,
            String,
            String,
            Option<i64>,
            i64,
            Option<String>,
            i64,
            i64,
        );
        let row: Option<Row> = repeatable!(self, |conn| {
            sqlx::query_as(
                "SELECT b.id, b.park_id, p.park_number, b.barrier_number, b.direction, b.state, \
                 p.time_zone, b.clock_offset_ms, p.entrances_open, p.opening_hours, \
                 p.parkies_per_hour, p.parkies_per_minute \
                 FROM barriers b JOIN parks p ON p.id = b.park_id WHERE b.id = $1",
            )
            .bind(id)
            .fetch_optional(&mut *conn)
            .await
        })?;
        let (
            id,
            park_id,
            park_number,
            number,
            direction,
            state,
            time_zone,
            clock_offset_ms,
            entrances_open,
            opening_hours,
            per_hour,
            per_minute,
        ) = row.ok_or_else(|| StoreError::not_found("barrier", id))?;
        let opening_hours = opening_hours
            .map(|h| serde_json::from_str(&h).map(std::sync::Arc::new))
            .transpose()
            .map_err(StoreError::internal)?;
        let barrier = Barrier {
            id,
            park_id,
            park_number,
            number,
            direction: Direction::parse(&direction)
                .ok_or_else(|| StoreError::Internal(direction.clone()))?,
            state: State::parse(&state).ok_or_else(|| StoreError::Internal(state.clone()))?,
            time_zone,
            clock_offset_ms,
            entrances_open: super::flag(entrances_open),
            opening_hours,
            coin_rates: rules::CoinRates {
                per_hour,
                per_minute,
            },
        };
        self.barriers.put(barrier.id, barrier.clone());
        Ok(barrier)
    }

    /// A car with `plate` at `barrier` at `time` (bounded by the server's clock already,
    /// [`crate::clock::ClockRules::take`]): an entrance or an exit by the barrier's direction. A
    /// refusal changes nothing and is written to the barrier's displays.
    ///
    /// # Errors
    /// Database failures (refusals are [`Passage::Refused`]).
    pub async fn pass(
        &self,
        barrier: &Barrier,
        plate: &str,
        time: PassageTime,
    ) -> Result<Passage, StoreError> {
        let tz = rules::time_zone(&barrier.time_zone).map_err(StoreError::Internal)?;
        let outcome = match barrier.direction {
            Direction::Entrance => self.enter(barrier, plate, time, &tz).await,
            Direction::Exit => match self.pools() {
                Pools::Postgres(pool) => {
                    retry(|| Self::exit_in_one(pool, &self.tables, barrier, plate, time, &tz)).await
                }
                Pools::Sqlite(_) => retry(|| self.exit_in_steps(barrier, plate, time, &tz)).await,
            },
        };
        if let Err(e) = self.note_clock_offset(barrier, &time).await {
            // What the operator sees of the clock waits for the next passage; the car does not.
            tracing::warn!(barrier = barrier.id, error = %e, "the barrier's clock offset was not written");
        }
        match outcome {
            Err(StoreError::Refused(r)) | Ok(Passage::Refused(r)) => {
                self.show_refusal(barrier, r).await?;
                Ok(Passage::Refused(r))
            }
            other => other,
        }
    }

    /// An entrance: at `time`, or after the plate's last exit when `time` is not (unless it is
    /// the same entrance again, which answers as the first did).
    async fn enter(
        &self,
        barrier: &Barrier,
        plate: &str,
        time: PassageTime,
        tz: &TimeZone,
    ) -> Result<Passage, StoreError> {
        let once = |time: PassageTime| async move {
            match self.pools() {
                Pools::Postgres(pool) => {
                    retry(|| Self::enter_in_one(pool, barrier, plate, time, tz)).await
                }
                Pools::Sqlite(_) => retry(|| self.enter_in_steps(barrier, plate, time, tz)).await,
            }
        };
        // Outside its opening hours, or closed by its manager, a park takes no car in, unless
        // this is an entrance it took while open, sent again.
        if !barrier.park_takes_cars_at(time.at, tz) {
            return Ok(self
                .entrance_done(barrier, plate, time.said)
                .await?
                .unwrap_or(Passage::Refused(Refusal::Closed)));
        }
        // A time the server's clock replaced does not find an earlier stay to clash with: look
        // for the same request done before by the time it said.
        if time.replaced.is_some() {
            if let Some(answer) = self.entrance_done(barrier, plate, time.said).await? {
                return Ok(answer);
            }
        }
        match once(time).await {
            Err(StoreError::Refused(Refusal::OverlapsEarlierStay))
            | Ok(Passage::Refused(Refusal::OverlapsEarlierStay)) => {}
            other => return other,
        }
        // At or before the plate's last exit: the same entrance again after its visit closed,
        // or a barrier's clock behind.
        if let Some(answer) = self.entrance_done(barrier, plate, time.said).await? {
            return Ok(answer);
        }
        let last: Option<i64> = repeatable!(self, |conn| {
            sqlx::query_scalar("SELECT max(left_at_ms) FROM visits WHERE plate = $1")
                .bind(plate)
                .fetch_one(&mut *conn)
                .await
        })?;
        let after = last.map_or(time.at, |ms| instant(ms.saturating_add(1)));
        once(time.not_before(after, Replaced::BeforeLastExit)).await
    }

    /// The same entrance done before (plate, barrier and time said), answered as the first
    /// time, whether its visit is open or closed.
    async fn entrance_done(
        &self,
        barrier: &Barrier,
        plate: &str,
        said: Timestamp,
    ) -> Result<Option<Passage>, StoreError> {
        let done: Option<(i64, String, String)> = repeatable!(self, |conn| {
            sqlx::query_as(
                "SELECT v.id, s.spot_number, c.name FROM visits v \
                 JOIN spots s ON s.id = v.spot_id JOIN customers c ON c.id = v.customer_id \
                 WHERE v.plate = $1 AND v.entry_barrier_id = $2 AND v.entry_said_ms = $3",
            )
            .bind(plate)
            .bind(barrier.id)
            .bind(ms(said))
            .fetch_optional(&mut *conn)
            .await
        })?;
        Ok(done.map(|(visit_id, spot, name)| Passage::Open {
            visit_id,
            name,
            spot,
            repeated: true,
            price: None,
            replaced: None,
            coins: 0,
        }))
    }

    /// Writes the barrier's clock offset that `time` shows, when it differs from the one
    /// written by more than [`OFFSET_NOTED_WITHIN`] (the operator's device view shows it).
    async fn note_clock_offset(
        &self,
        barrier: &Barrier,
        time: &PassageTime,
    ) -> Result<(), StoreError> {
        let offset = time.offset().as_millis();
        let offset = i64::try_from(offset).unwrap_or(if offset < 0 { i64::MIN } else { i64::MAX });
        if barrier
            .clock_offset_ms
            .is_some_and(|was| was.abs_diff(offset) <= OFFSET_NOTED_WITHIN)
        {
            return Ok(());
        }
        repeatable!(self, |conn| {
            sqlx::query(
                "UPDATE barriers SET clock_offset_ms = $1, clock_seen_at_ms = $2 WHERE id = $3",
            )
            .bind(offset)
            .bind(ms(time.now))
            .bind(barrier.id)
            .execute(&mut *conn)
            .await
            .map(|r| r.rows_affected())
        })?;
        self.barriers.note_offset(barrier.id, offset);
        Ok(())
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

/// A barrier's clock offset is written again when it moved by more than this, ms (network delays
/// stay well inside).
pub const OFFSET_NOTED_WITHIN: u64 = 1_000;

#[cfg(test)]
mod tests;
