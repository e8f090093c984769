//! The fee of a stay (spec §5.11, with its defects fixed): walk from the entry in blocks, each
//! block priced by the period its first minute falls in (read on the park's clock), the block
//! counter restarting when the period changes and the last block repeating; then the extras of
//! the table. Pure: no clock, no I/O, exact decimal money.
//!
//! What differs from the original, and why:
//! - periods are half-open `[start, end)` and may wrap midnight, so no minute belongs to two
//!   periods (the original closed both ends and took the first match in database order) or to
//!   none (22:00–23:59 in a 21:00–9:00 period crashed it);
//! - the time of day is read in the park's time zone, not on the UTC clock, and the walk moves in
//!   elapsed minutes, so a day when clocks change is priced by the time actually parked (no
//!   charge for the hour that does not exist, the repeated hour charged once per pass);
//! - the overnight fee, grace minutes, daily maximum and minimum charge are applied when the
//!   table has them (the original stored the overnight fee and never charged it);
//! - a stay of any length is priced, in time and rows that grow with its days: the repeats of a
//!   period's last block are one row per stretch of the period within a day (the original wrote
//!   a row per block, 35,040 for a year of 15-minute blocks).

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ZonedDateTime};
use pms_vocab::VehicleType;
use rust_decimal::{Decimal, RoundingStrategy};

use crate::table::{Period, PriceTable, TimeOfDay, MINUTES_PER_DAY};

/// PARKY coins worth one euro (spec §5.5).
pub const COINS_PER_EURO: i64 = 100;

/// A stay to price.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stay {
    /// When the vehicle entered.
    pub entry: Timestamp,
    /// When it left.
    pub exit: Timestamp,
    /// Automobiles pay the automobile price, anything else the motorcycle price.
    pub vehicle: VehicleType,
}

pms_vocab::names! {
    /// What a line of a bill charges for.
    RowKind {
        /// One started block of a period.
        Block => "BLOCK",
        /// One midnight spanned, with the overnight fee.
        Overnight => "OVERNIGHT",
        /// What a charging day's blocks cost above the daily maximum (a negative amount).
        DailyMaximum => "DAILY_MAXIMUM",
        /// What the stay cost below the minimum charge.
        Minimum => "MINIMUM",
    }
}

/// One line of a bill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// What it charges for.
    pub kind: RowKind,
    /// Start of the block (the midnight, for an overnight row; the charging day's first block,
    /// for a daily-maximum row).
    pub start: Timestamp,
    /// End of the block (for a block, start plus its length, which may lie after the exit).
    pub end: Timestamp,
    /// The period of the table the block was priced in (blocks only).
    pub period: Option<usize>,
    /// How many blocks of one length and price the row charges for, one after another (1 for
    /// anything but the repeats of a period's last block).
    pub blocks: u32,
    /// The amount of the row, exact as the table gives it, `blocks` times the block's price
    /// (negative only for a daily maximum).
    pub price: Decimal,
}

/// A priced stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bill {
    /// The entry, to the minute (seconds are not charged, as in the original).
    pub entry: Timestamp,
    /// The exit, to the minute.
    pub exit: Timestamp,
    /// Every line, in order: blocks, then extras.
    pub rows: Vec<Row>,
    /// The sum of the rows, rounded half-up to cents.
    pub total: Decimal,
}

/// A PARKY discount: coins spent and what they are worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Discount {
    /// Coins taken from the wallet.
    pub coins: i64,
    /// Their value in euros (coins ÷ 100), never more than the fee.
    pub amount: Decimal,
}

/// Why a stay cannot be priced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeeError {
    /// The exit is before the entry.
    #[error("leftPark is before enterPark")]
    ExitBeforeEntry,
    /// Time arithmetic left jiff's range (instants near year 9999).
    #[error("the stay's instants are out of range")]
    OutOfRange,
}

/// Prices `stay` with `table`, reading times of day in `tz`.
///
/// # Errors
/// [`FeeError`] for an exit before the entry, or instants at the end of the representable range.
pub fn price(table: &PriceTable, tz: &TimeZone, stay: &Stay) -> Result<Bill, FeeError> {
    let entry = to_minute(stay.entry)?;
    let exit = to_minute(stay.exit)?;
    if exit < entry {
        return Err(FeeError::ExitBeforeEntry);
    }
    let parked = exit.duration_since(entry);
    let mut rows = Vec::new();
    let mut from = entry;
    if let Some(grace) = table.grace {
        let grace_len = SignedDuration::from_mins(i64::from(grace.minutes));
        if parked <= grace_len {
            return Ok(bill(entry, exit, rows));
        }
        if !grace.charge_from_start {
            from = entry
                .checked_add(grace_len)
                .map_err(|_| FeeError::OutOfRange)?;
        }
    }
    let day_start = table
        .daily_max
        .map_or(TimeOfDay::MIDNIGHT, |cap| cap.resets_at);
    blocks(table, tz, stay.vehicle, from, exit, day_start, &mut rows)?;
    if let Some(cap) = table.daily_max {
        daily_maximum(cap.amount, cap.resets_at, tz, &mut rows);
    }
    if let Some(fee) = table.overnight {
        overnight(fee, tz, entry, exit, &mut rows)?;
    }
    if let Some(min) = table.minimum {
        let sum: Decimal = rows.iter().map(|r| r.price).sum();
        if !rows.is_empty() && sum < min {
            rows.push(Row {
                kind: RowKind::Minimum,
                start: entry,
                end: exit,
                period: None,
                blocks: 1,
                price: min - sum,
            });
        }
    }
    Ok(bill(entry, exit, rows))
}

/// The blocks from `from` until `exit`, a row each, except that the last threshold of a period,
/// which repeats, is one row per stretch of that period within a charging day (`day_start` on the
/// park's clock): a bill grows with the days parked, not with the blocks, and is worked out a
/// stretch at a time. Each block is still priced by the period its first minute falls in, and
/// a row of `n` blocks costs what `n` rows of one would.
fn blocks(
    table: &PriceTable,
    tz: &TimeZone,
    vehicle: VehicleType,
    from: Timestamp,
    exit: Timestamp,
    day_start: TimeOfDay,
    rows: &mut Vec<Row>,
) -> Result<(), FeeError> {
    let mut cursor = from;
    let mut current: Option<usize> = None;
    let mut k = 0usize;
    while cursor < exit {
        let second = second_of_day(cursor, tz);
        let index = table
            .period_at(TimeOfDay::from_minutes(minute_of(second)).unwrap_or(TimeOfDay::MIDNIGHT));
        if current != Some(index) {
            current = Some(index);
            k = 0;
        }
        let period = &table.periods()[index];
        // Valid tables have at least one threshold per period.
        let Some(last) = period.thresholds.len().checked_sub(1) else {
            break;
        };
        let block = &period.thresholds[k.min(last)];
        let length = i64::from(block.minutes.max(1)) * 60;
        let count = if k < last {
            1
        } else {
            let until = stretch_end(period, day_start, tz, cursor, second).min(exit);
            let span = until.as_second() - cursor.as_second();
            (span + length - 1).div_euclid(length).max(1)
        };
        let end = cursor
            .checked_add(SignedDuration::from_secs(count * length))
            .map_err(|_| FeeError::OutOfRange)?;
        let unit = match vehicle {
            VehicleType::Automobile => block.automobile,
            VehicleType::Motorcycle => block.motorcycle,
        };
        let blocks = u32::try_from(count).map_err(|_| FeeError::OutOfRange)?;
        rows.push(Row {
            kind: RowKind::Block,
            start: cursor,
            end,
            period: Some(index),
            blocks,
            price: unit * Decimal::from(blocks),
        });
        cursor = end;
        k = k.saturating_add(blocks as usize);
    }
    Ok(())
}

/// The first instant after `cursor` (which is `second` seconds into the park's day, inside
/// `period`) at which the park's clock leaves `period`, starts a new charging day at `day_start`
/// or changes its offset: until then the clock runs evenly, so every block starting before it
/// falls in `period` and the same charging day.
fn stretch_end(
    period: &Period,
    day_start: TimeOfDay,
    tz: &TimeZone,
    cursor: Timestamp,
    second: i64,
) -> Timestamp {
    let until = |mark: TimeOfDay| match (i64::from(mark.minutes()) * 60 - second).rem_euclid(DAY) {
        0 => DAY,
        s => s,
    };
    let mut ahead = until(day_start);
    if period.length() < MINUTES_PER_DAY {
        ahead = ahead.min(until(period.end));
    }
    let even = cursor
        .checked_add(SignedDuration::from_secs(ahead))
        .unwrap_or(Timestamp::MAX);
    match tz.following(cursor).next() {
        Some(change) if change.timestamp() < even => change.timestamp(),
        _ => even,
    }
}

/// Seconds in a day.
const DAY: i64 = 86_400;

/// How far into its day `t` is on the park's clock, in seconds.
fn second_of_day(t: Timestamp, tz: &TimeZone) -> i64 {
    (t.as_second() + i64::from(tz.to_offset(t).seconds())).rem_euclid(DAY)
}

/// The minute of the day that second `s` of it falls in.
fn minute_of(s: i64) -> u16 {
    u16::try_from(s / 60).unwrap_or_default()
}

/// Caps each charging day's blocks (days starting at `resets_at`, park time) at `cap`, with one
/// negative row per capped day.
fn daily_maximum(cap: Decimal, resets_at: TimeOfDay, tz: &TimeZone, rows: &mut Vec<Row>) {
    let shift = SignedDuration::from_mins(i64::from(resets_at.minutes()));
    let day_of = |t: Timestamp| {
        let local = t.to_zoned_datetime(tz.clone());
        local
            .datetime()
            .checked_sub(shift)
            .map(|d| d.date())
            .unwrap_or_else(|_| local.date())
    };
    let mut caps = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let day = day_of(rows[i].start);
        let mut j = i;
        let mut sum = Decimal::ZERO;
        while j < rows.len() && day_of(rows[j].start) == day {
            sum += rows[j].price;
            j += 1;
        }
        if sum > cap {
            caps.push(Row {
                kind: RowKind::DailyMaximum,
                start: rows[i].start,
                end: rows[j - 1].end,
                period: None,
                blocks: 1,
                price: cap - sum,
            });
        }
        i = j;
    }
    rows.extend(caps);
}

/// One row of `fee` per midnight `m` (park time) with `entry <= m < exit`.
fn overnight(
    fee: Decimal,
    tz: &TimeZone,
    entry: Timestamp,
    exit: Timestamp,
    rows: &mut Vec<Row>,
) -> Result<(), FeeError> {
    let local = entry.to_zoned_datetime(tz.clone());
    let mut midnight = local.start_of_day().map_err(|_| FeeError::OutOfRange)?;
    if midnight.timestamp() < entry {
        midnight = next_midnight(&midnight)?;
    }
    while midnight.timestamp() < exit {
        let next = next_midnight(&midnight)?;
        rows.push(Row {
            kind: RowKind::Overnight,
            start: midnight.timestamp(),
            end: next.timestamp(),
            period: None,
            blocks: 1,
            price: fee,
        });
        midnight = next;
    }
    Ok(())
}

/// The start of the day after `day`'s (in its zone; a day that begins at 01:00 because the
/// clocks skip midnight begins then).
fn next_midnight(day: &ZonedDateTime) -> Result<ZonedDateTime, FeeError> {
    day.date()
        .tomorrow()
        .and_then(|d| d.to_zoned_datetime(day.time_zone().clone()))
        .and_then(|z| z.start_of_day())
        .map_err(|_| FeeError::OutOfRange)
}

fn bill(entry: Timestamp, exit: Timestamp, rows: Vec<Row>) -> Bill {
    let total = round_cents(rows.iter().map(|r| r.price).sum());
    Bill {
        entry,
        exit,
        rows,
        total,
    }
}

/// Half-up (away from zero) to cents, as the original rounded.
pub fn round_cents(amount: Decimal) -> Decimal {
    amount.round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero)
}

/// What the customer pays: `total` less `discount`, half-up to cents.
pub fn final_price(total: Decimal, discount: Decimal) -> Decimal {
    round_cents(total - discount)
}

/// Whether a bill of `total` waits for the customer's coins before its price is known: they asked
/// to pay with coins, and there is something to pay. Any other bill's price is its total, with no
/// discount, as soon as the stay is priced.
pub fn awaits_coins(use_coins: bool, total: Decimal) -> bool {
    use_coins && total > Decimal::ZERO
}

/// The PARKY discount on a fee of `total` for a wallet of `balance` coins: 100 coins are €1,
/// and no more coins are spent than the fee is worth.
pub fn coin_discount(total: Decimal, balance: i64) -> Discount {
    let cents = (round_cents(total) * Decimal::from(COINS_PER_EURO))
        .trunc()
        .try_into()
        .unwrap_or(i64::MAX);
    let coins = balance.max(0).min(cents.max(0));
    Discount {
        coins,
        amount: Decimal::new(coins, 2),
    }
}

/// The time of day of `t` on the park's clock.
pub fn time_of_day(t: Timestamp, tz: &TimeZone) -> TimeOfDay {
    TimeOfDay::from_minutes(minute_of(second_of_day(t, tz))).unwrap_or(TimeOfDay::MIDNIGHT)
}

/// `H:M` on the park's clock, without zero padding (`9:0`, `10:5`), as the original's invoices
/// wrote times (spec §3.4.4).
pub fn hm(t: Timestamp, tz: &TimeZone) -> String {
    let local = t.to_zoned_datetime(tz.clone());
    format!("{}:{}", local.hour(), local.minute())
}

/// `t` with seconds and below dropped.
fn to_minute(t: Timestamp) -> Result<Timestamp, FeeError> {
    let secs = t.as_second().div_euclid(60) * 60;
    Timestamp::from_second(secs).map_err(|_| FeeError::OutOfRange)
}

#[cfg(test)]
mod tests;
