//! The fee engine: the spec's worked examples, the original's defects, time zones and clock
//! changes, the extras, and properties over random tables and stays.

use jiff::tz::TimeZone;
use jiff::Timestamp;
use proptest::prelude::*;
use rust_decimal::Decimal;

use super::*;
use crate::seed;
use crate::table::{DailyMax, Grace, Period, PriceTable, Threshold, TimeOfDay};

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn utc() -> TimeZone {
    TimeZone::UTC
}

fn lisbon() -> TimeZone {
    TimeZone::get("Europe/Lisbon").expect("tzdb has Europe/Lisbon")
}

fn car(entry: &str, exit: &str) -> Stay {
    Stay {
        entry: ts(entry),
        exit: ts(exit),
        vehicle: VehicleType::Automobile,
    }
}

fn eur(cents: i64) -> Decimal {
    Decimal::new(cents, 2)
}

/// The blocks a bill charges for, however its rows group them.
fn block_count(bill: &Bill) -> u32 {
    bill.rows
        .iter()
        .filter(|r| r.kind == RowKind::Block)
        .map(|r| r.blocks)
        .sum()
}

/// A bill's block rows as the blocks they stand for: (start, period, price of one).
fn expand(bill: &Bill) -> Vec<(Timestamp, Option<usize>, Decimal)> {
    let mut out = Vec::new();
    for r in bill.rows.iter().filter(|r| r.kind == RowKind::Block) {
        let each = r.end.duration_since(r.start) / i32::try_from(r.blocks).expect("blocks");
        let unit = r.price / Decimal::from(r.blocks);
        for i in 0..r.blocks {
            out.push((
                r.start + each * i32::try_from(i).expect("i"),
                r.period,
                unit,
            ));
        }
    }
    out
}

/// The spec's walk (§5.11) as written, one block at a time, with PMS's half-open periods read on
/// the park's clock: what [`price`]'s rows must stand for.
fn block_by_block(
    table: &PriceTable,
    tz: &TimeZone,
    vehicle: VehicleType,
    from: Timestamp,
    exit: Timestamp,
) -> Vec<(Timestamp, Option<usize>, Decimal)> {
    let mut out = Vec::new();
    let (mut cursor, mut current, mut k) = (from, None, 0usize);
    while cursor < exit {
        let local = cursor.to_zoned_datetime(tz.clone());
        let minute = u16::from(local.hour() as u8) * 60 + u16::from(local.minute() as u8);
        let index = table.period_at(TimeOfDay::from_minutes(minute).expect("minute"));
        if current != Some(index) {
            current = Some(index);
            k = 0;
        }
        let thresholds = &table.periods()[index].thresholds;
        let block = &thresholds[k.min(thresholds.len() - 1)];
        let unit = match vehicle {
            VehicleType::Automobile => block.automobile,
            VehicleType::Motorcycle => block.motorcycle,
        };
        out.push((cursor, Some(index), unit));
        cursor += SignedDuration::from_mins(i64::from(block.minutes));
        k += 1;
    }
    out
}

fn blocks_of(bill: &Bill, tz: &TimeZone) -> Vec<(String, Decimal)> {
    bill.rows
        .iter()
        .map(|r| (hm(r.start, tz), r.price))
        .collect()
}

/// Spec §5.11 example 1 (the Postman request): 08:30–09:30 UTC, seed table, day then night.
#[test]
fn worked_example_1_postman() {
    let bill = price(
        &seed::table(),
        &utc(),
        &car("2023-11-26T08:30:00Z", "2023-11-26T09:30:00Z"),
    )
    .expect("priced");
    assert_eq!(
        blocks_of(&bill, &utc()),
        vec![
            ("8:30".into(), eur(15)),
            ("8:45".into(), eur(15)),
            ("9:0".into(), eur(15)),
            ("9:15".into(), eur(15)),
        ]
    );
    assert_eq!(bill.total, eur(60));
    // The first row as the Postman test expected it: 8:30 to 8:45 in the night period.
    assert_eq!(hm(bill.rows[0].end, &utc()), "8:45");
    assert_eq!(bill.rows[0].period, Some(1));
}

/// Spec §5.11 example 2 (`PaymentsServiceImplTest`): night then day, four blocks
/// [0.15, 0.15, 0.15, 0.30], 08:30–10:14. The original charged 9:00 in the night period because
/// it closed both ends of a period and took the first match in database order: 7 rows, €1.20.
/// With half-open periods 9:00 is day, whatever the order: the counter restarts at 9:00, the
/// fourth day block (9:45) is the first at €0.30 and 10:00 repeats it: 7 blocks, €1.35.
#[test]
fn worked_example_2_half_open_periods() {
    let blocks = |p: &[i64]| {
        p.iter()
            .map(|c| Threshold {
                minutes: 15,
                automobile: eur(*c),
                motorcycle: eur(*c),
            })
            .collect::<Vec<_>>()
    };
    let t = |s| TimeOfDay::parse(s).expect("time");
    let night_then_day = vec![
        Period {
            start: t("21:00"),
            end: t("9:00"),
            thresholds: blocks(&[15, 15, 15, 30]),
        },
        Period {
            start: t("9:00"),
            end: t("21:00"),
            thresholds: blocks(&[15, 15, 15, 30]),
        },
    ];
    let mut day_then_night = night_then_day.clone();
    day_then_night.reverse();
    let stay = car("2023-11-26T08:30:00Z", "2023-11-26T10:14:00Z");
    let a = price(
        &PriceTable::try_new(night_then_day).expect("valid"),
        &utc(),
        &stay,
    )
    .expect("priced");
    let b = price(
        &PriceTable::try_new(day_then_night).expect("valid"),
        &utc(),
        &stay,
    )
    .expect("priced");
    assert_eq!(
        a.total, b.total,
        "the order of the periods never changes a price"
    );
    // Seven blocks; the fourth day block and its repeat are one row of two.
    assert_eq!(block_count(&a), 7);
    assert_eq!(
        blocks_of(&a, &utc()),
        vec![
            ("8:30".into(), eur(15)),
            ("8:45".into(), eur(15)),
            ("9:0".into(), eur(15)),
            ("9:15".into(), eur(15)),
            ("9:30".into(), eur(15)),
            ("9:45".into(), eur(60)),
        ]
    );
    assert_eq!(hm(a.rows[5].end, &utc()), "10:15");
    assert_eq!(a.total, eur(135));
}

/// Spec §5.11 example 3: 10:00–11:20 in the day period; with 50 coins, €0.50 off.
#[test]
fn worked_example_3_last_block_repeats_and_coins() {
    let bill = price(
        &seed::table(),
        &utc(),
        &car("2023-11-26T10:00:00Z", "2023-11-26T11:20:00Z"),
    )
    .expect("priced");
    // The fifth block and its repeat are one row of two blocks at €0.30.
    assert_eq!(
        bill.rows
            .iter()
            .map(|r| (r.blocks, r.price))
            .collect::<Vec<_>>(),
        vec![
            (1, eur(15)),
            (1, eur(15)),
            (1, eur(15)),
            (1, eur(15)),
            (2, eur(60))
        ]
    );
    assert_eq!(hm(bill.rows[4].start, &utc()), "11:0");
    assert_eq!(hm(bill.rows[4].end, &utc()), "11:30");
    assert_eq!(bill.total, eur(120));
    let d = coin_discount(bill.total, 50);
    assert_eq!((d.coins, d.amount), (50, eur(50)));
    assert_eq!(bill.total - d.amount, eur(70));
    // Never more coins than the fee is worth.
    let d = coin_discount(bill.total, 5000);
    assert_eq!((d.coins, d.amount), (120, eur(120)));
    assert_eq!(coin_discount(bill.total, -3).coins, 0);
}

/// The original crashed for blocks starting 22:00–23:59 in a 21:00–9:00 period.
#[test]
fn late_evening_blocks_are_night_blocks() {
    let bill = price(
        &seed::table(),
        &utc(),
        &car("2023-11-26T22:10:00Z", "2023-11-27T00:20:00Z"),
    )
    .expect("priced");
    assert!(bill.rows.iter().all(|r| r.period == Some(1)));
    // 130 minutes: 9 blocks, four at 0.15 and five at 0.30, the repeats split at midnight.
    assert_eq!(block_count(&bill), 9);
    assert_eq!(
        bill.rows.iter().map(|r| r.blocks).collect::<Vec<_>>(),
        vec![1, 1, 1, 1, 4, 1]
    );
    assert_eq!(hm(bill.rows[5].start, &utc()), "0:10");
    assert_eq!(bill.total, eur(4 * 15 + 5 * 30));
}

#[test]
fn the_same_minute_costs_nothing_and_seconds_are_not_charged() {
    let bill = price(
        &seed::table(),
        &utc(),
        &car("2023-11-26T10:00:05Z", "2023-11-26T10:00:59Z"),
    )
    .expect("priced");
    assert!(bill.rows.is_empty());
    assert_eq!(bill.total, Decimal::ZERO);
    let one = price(
        &seed::table(),
        &utc(),
        &car("2023-11-26T10:00:59Z", "2023-11-26T10:01:00Z"),
    )
    .expect("priced");
    assert_eq!(one.total, eur(15), "a started block is charged in full");
}

#[test]
fn an_exit_before_the_entry_is_refused() {
    assert_eq!(
        price(
            &seed::table(),
            &utc(),
            &car("2023-11-26T10:00:00Z", "2023-11-26T09:00:00Z")
        ),
        Err(FeeError::ExitBeforeEntry)
    );
}

/// Issue 58, defects 2 and 9: a stay from 1970 was never priced (the original refused more
/// than 366 days) and a year's stay made 35,040 rows. Any stay is priced now, with a handful of
/// rows per day: the seed table's night and day periods each charge four single blocks and one
/// row of repeats, the night's repeats split at midnight (and a stretch at a clock change).
#[test]
fn a_stay_of_any_length_is_priced_in_rows_that_grow_with_days() {
    let tz = lisbon();
    let stay = car("1970-01-01T00:00:00Z", "2026-12-05T12:00:00Z");
    let days = stay.exit.duration_since(stay.entry).as_hours() / 24;
    let bill = price(&seed::table(), &tz, &stay).expect("priced");
    assert!(
        bill.rows.len() as i64 <= 12 * (days + 1),
        "{} rows for {days} days",
        bill.rows.len()
    );
    let minutes = stay.exit.duration_since(stay.entry).as_mins();
    assert!(i64::from(block_count(&bill)) * 15 >= minutes);
    // A year in one row of repeats per stretch costs what the spec's walk, block by block, does.
    let year = car("2024-01-01T10:00:00Z", "2025-01-01T10:00:00Z");
    let bill = price(&seed::table(), &tz, &year).expect("priced");
    assert!(bill.rows.len() <= 12 * 366, "{} rows", bill.rows.len());
    assert_eq!(
        expand(&bill),
        block_by_block(
            &seed::table(),
            &tz,
            VehicleType::Automobile,
            year.entry,
            year.exit
        )
    );
}

/// Lisbon is UTC+1 in summer: 08:30 UTC is 09:30 on the park's clock, in the day period.
#[test]
fn periods_are_read_on_the_parks_clock() {
    let stay = car("2024-07-01T07:45:00Z", "2024-07-01T08:15:00Z");
    let lisbon_bill = price(&seed::table(), &lisbon(), &stay).expect("priced");
    let utc_bill = price(&seed::table(), &utc(), &stay).expect("priced");
    // 08:45–09:15 Lisbon: the counter restarts at 9:00 local (08:00 UTC).
    assert_eq!(lisbon_bill.rows[0].period, Some(1));
    assert_eq!(lisbon_bill.rows[1].period, Some(0));
    assert_eq!(hm(lisbon_bill.rows[1].start, &lisbon()), "9:0");
    // On the UTC clock both blocks are night blocks.
    assert!(utc_bill.rows.iter().all(|r| r.period == Some(1)));
}

/// 2024-03-31 in Lisbon: 01:00 jumps to 02:00. A stay from 00:30 to 03:30 local lasts two
/// hours and is charged two hours of blocks, not three.
#[test]
fn the_spring_gap_is_not_charged() {
    let tz = lisbon();
    let entry = ts("2024-03-31T00:30:00Z"); // 00:30 WET
    let exit = ts("2024-03-31T02:30:00Z"); // 03:30 WEST
    let bill = price(
        &seed::table(),
        &tz,
        &Stay {
            entry,
            exit,
            vehicle: VehicleType::Automobile,
        },
    )
    .expect("priced");
    assert_eq!(block_count(&bill), 8, "120 minutes in 15-minute blocks");
    assert_eq!(
        hm(bill.rows[2].start, &tz),
        "2:0",
        "01:00 local does not exist"
    );
}

/// 2024-10-27 in Lisbon: 02:00 falls back to 01:00. A stay from 00:30 to 02:30 local lasts three
/// hours and is charged three hours of blocks.
#[test]
fn the_autumn_hour_is_charged_once_per_pass() {
    let tz = lisbon();
    let bill = price(
        &seed::table(),
        &tz,
        &car("2024-10-26T23:30:00Z", "2024-10-27T02:30:00Z"),
    )
    .expect("priced");
    assert_eq!(block_count(&bill), 12, "180 minutes in 15-minute blocks");
}

#[test]
fn the_overnight_fee_is_charged_per_midnight_on_the_parks_clock() {
    let table = seed::table()
        .with_extras(None, None, None, Some(Decimal::from(5)))
        .expect("valid");
    let tz = lisbon();
    // 22:00 to 02:00 the next day (winter, Lisbon = UTC): one midnight.
    let one = price(
        &table,
        &tz,
        &car("2024-01-10T22:00:00Z", "2024-01-11T02:00:00Z"),
    )
    .expect("priced");
    let overnight: Vec<_> = one
        .rows
        .iter()
        .filter(|r| r.kind == RowKind::Overnight)
        .collect();
    assert_eq!(overnight.len(), 1);
    assert_eq!(overnight[0].start, ts("2024-01-11T00:00:00Z"));
    // Three nights.
    let three = price(
        &table,
        &tz,
        &car("2024-01-10T20:00:00Z", "2024-01-13T08:00:00Z"),
    )
    .expect("priced");
    assert_eq!(
        three
            .rows
            .iter()
            .filter(|r| r.kind == RowKind::Overnight)
            .count(),
        3
    );
    // Summer: 23:30 Lisbon is 22:30 UTC; leaving at 23:45 UTC is after local midnight.
    let summer = price(
        &table,
        &tz,
        &car("2024-07-10T22:30:00Z", "2024-07-10T23:45:00Z"),
    )
    .expect("priced");
    assert_eq!(
        summer
            .rows
            .iter()
            .filter(|r| r.kind == RowKind::Overnight)
            .count(),
        1
    );
    let utc_summer = price(
        &table,
        &utc(),
        &car("2024-07-10T22:30:00Z", "2024-07-10T23:45:00Z"),
    )
    .expect("priced");
    assert_eq!(
        utc_summer
            .rows
            .iter()
            .filter(|r| r.kind == RowKind::Overnight)
            .count(),
        0
    );
    // Half-open: entering at midnight spans it, leaving at midnight does not.
    let ends = price(
        &table,
        &utc(),
        &car("2024-01-10T20:00:00Z", "2024-01-11T00:00:00Z"),
    )
    .expect("priced");
    assert_eq!(
        ends.rows
            .iter()
            .filter(|r| r.kind == RowKind::Overnight)
            .count(),
        0
    );
    let starts = price(
        &table,
        &utc(),
        &car("2024-01-11T00:00:00Z", "2024-01-11T01:00:00Z"),
    )
    .expect("priced");
    assert_eq!(
        starts
            .rows
            .iter()
            .filter(|r| r.kind == RowKind::Overnight)
            .count(),
        1
    );
}

#[test]
fn grace_minutes_make_short_stays_free() {
    let from_start = seed::table()
        .with_extras(
            Some(Grace {
                minutes: 10,
                charge_from_start: true,
            }),
            None,
            None,
            None,
        )
        .expect("valid");
    let after_grace = seed::table()
        .with_extras(
            Some(Grace {
                minutes: 10,
                charge_from_start: false,
            }),
            None,
            None,
            None,
        )
        .expect("valid");
    let short = car("2024-01-10T10:00:00Z", "2024-01-10T10:10:00Z");
    let longer = car("2024-01-10T10:00:00Z", "2024-01-10T10:26:00Z");
    assert_eq!(
        price(&from_start, &utc(), &short).expect("p").total,
        Decimal::ZERO
    );
    assert_eq!(
        price(&after_grace, &utc(), &short).expect("p").total,
        Decimal::ZERO
    );
    // 26 minutes charged from the start: two blocks; from the end of the grace: 16 minutes, two.
    assert_eq!(
        price(&from_start, &utc(), &longer).expect("p").total,
        eur(30)
    );
    let b = price(&after_grace, &utc(), &longer).expect("p");
    assert_eq!(b.rows[0].start, ts("2024-01-10T10:10:00Z"));
    assert_eq!(b.total, eur(30));
    let just_over = car("2024-01-10T10:00:00Z", "2024-01-10T10:11:00Z");
    assert_eq!(
        price(&from_start, &utc(), &just_over).expect("p").total,
        eur(15)
    );
    assert_eq!(
        price(&after_grace, &utc(), &just_over).expect("p").total,
        eur(15)
    );
}

#[test]
fn the_daily_maximum_caps_each_charging_day() {
    let table = seed::table()
        .with_extras(
            None,
            Some(DailyMax {
                amount: Decimal::from(10),
                resets_at: TimeOfDay::MIDNIGHT,
            }),
            None,
            None,
        )
        .expect("valid");
    // Two full days and a bit: each full day would cost far more than €10.
    let bill = price(
        &table,
        &utc(),
        &car("2024-01-10T00:00:00Z", "2024-01-12T00:30:00Z"),
    )
    .expect("p");
    let caps = bill
        .rows
        .iter()
        .filter(|r| r.kind == RowKind::DailyMaximum)
        .count();
    assert_eq!(caps, 2);
    // Two capped days at €10 and the 30 minutes of the third: 2 blocks at 0.30 (midnight is
    // inside the night period, so its block counter does not restart).
    assert_eq!(bill.total, Decimal::from(20) + eur(60));
}

#[test]
fn the_minimum_charge_lifts_small_fees() {
    let table = seed::table()
        .with_extras(None, None, Some(Decimal::from(1)), None)
        .expect("valid");
    let bill = price(
        &table,
        &utc(),
        &car("2024-01-10T10:00:00Z", "2024-01-10T10:20:00Z"),
    )
    .expect("p");
    assert_eq!(bill.total, Decimal::from(1));
    assert_eq!(bill.rows.last().map(|r| r.kind), Some(RowKind::Minimum));
    let free = price(
        &table,
        &utc(),
        &car("2024-01-10T10:00:00Z", "2024-01-10T10:00:00Z"),
    )
    .expect("p");
    assert_eq!(
        free.total,
        Decimal::ZERO,
        "a stay of no time is not charged the minimum"
    );
}

#[test]
fn motorcycles_pay_the_motorcycle_price() {
    let t = |s| TimeOfDay::parse(s).expect("time");
    let table = PriceTable::try_new(vec![Period {
        start: t("0:00"),
        end: t("0:00"),
        thresholds: vec![Threshold {
            minutes: 60,
            automobile: eur(200),
            motorcycle: eur(50),
        }],
    }])
    .expect("valid");
    let mut stay = car("2024-01-10T10:00:00Z", "2024-01-10T11:30:00Z");
    assert_eq!(price(&table, &utc(), &stay).expect("p").total, eur(400));
    stay.vehicle = VehicleType::Motorcycle;
    assert_eq!(price(&table, &utc(), &stay).expect("p").total, eur(100));
}

// === properties ===

/// A random valid table: 1–6 cut points around the clock, each period with 1–4 blocks of 1–90
/// minutes at €0.00–€3.00, and random extras.
fn tables() -> impl Strategy<Value = PriceTable> {
    let cuts = prop::collection::btree_set(0u16..1440, 1..6);
    let block = (1u32..90, 0i64..300, 0i64..300).prop_map(|(m, a, c)| Threshold {
        minutes: m,
        automobile: eur(a),
        motorcycle: eur(c),
    });
    let blocks = prop::collection::vec(prop::collection::vec(block, 1..4), 6);
    let extras = (
        prop::option::of((0u32..60, any::<bool>())),
        prop::option::of((500i64..5000, 0u16..1440)),
        prop::option::of(0i64..300),
        prop::option::of(0i64..800),
    );
    (cuts, blocks, extras).prop_map(|(cuts, blocks, (grace, cap, min, night))| {
        let cuts: Vec<u16> = cuts.into_iter().collect();
        let periods = cuts
            .iter()
            .enumerate()
            .map(|(i, s)| Period {
                start: TimeOfDay::from_minutes(*s).unwrap_or(TimeOfDay::MIDNIGHT),
                end: TimeOfDay::from_minutes(cuts[(i + 1) % cuts.len()])
                    .unwrap_or(TimeOfDay::MIDNIGHT),
                thresholds: blocks[i].clone(),
            })
            .collect();
        let cap = cap.map(|(a, r)| DailyMax {
            amount: eur(a),
            resets_at: TimeOfDay::from_minutes(r).unwrap_or(TimeOfDay::MIDNIGHT),
        });
        let min = min.map(eur).filter(|m| cap.is_none_or(|c| c.amount >= *m));
        PriceTable::try_new(periods)
            .and_then(|t| {
                t.with_extras(
                    grace.map(|(minutes, charge_from_start)| Grace {
                        minutes,
                        charge_from_start,
                    }),
                    cap,
                    min,
                    night.map(eur),
                )
            })
            .unwrap_or_else(|e| unreachable!("generated tables are valid: {e}"))
    })
}

fn zones() -> impl Strategy<Value = TimeZone> {
    prop::sample::select(vec![
        "UTC",
        "Europe/Lisbon",
        "America/New_York",
        "Australia/Lord_Howe",
    ])
    .prop_map(|name| TimeZone::get(name).expect("zone"))
}

/// Entries over 2024 (both clock changes included), stays up to four days.
fn stays() -> impl Strategy<Value = (Timestamp, i64, i64)> {
    (
        1_704_067_200i64..1_735_689_600,
        0i64..4 * 24 * 60,
        1i64..600,
    )
        .prop_map(|(s, mins, more)| (Timestamp::from_second(s).expect("2024"), mins, more))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_minute_falls_in_exactly_one_period(table in tables()) {
        for m in 0..1440u16 {
            let t = TimeOfDay::from_minutes(m).expect("minute");
            let n = table.periods().iter().filter(|p| p.contains(t)).count();
            prop_assert_eq!(n, 1, "minute {} in {} periods", t, n);
        }
    }

    #[test]
    fn the_fee_never_decreases_as_the_stay_gets_longer(
        table in tables(), tz in zones(), (entry, mins, more) in stays(),
    ) {
        let exit = entry + SignedDuration::from_mins(mins);
        let later = exit + SignedDuration::from_mins(more);
        let a = price(&table, &tz, &Stay { entry, exit, vehicle: VehicleType::Automobile }).expect("priced");
        let b = price(&table, &tz, &Stay { entry, exit: later, vehicle: VehicleType::Automobile }).expect("priced");
        prop_assert!(a.total <= b.total, "{} then {}", a.total, b.total);
    }

    /// Rows of repeats charge exactly the blocks the spec's walk charges one at a time, split
    /// where a charging day starts, so the daily maximum caps the same amounts.
    #[test]
    fn rows_of_repeats_are_the_block_by_block_walk(
        table in tables(), tz in zones(), (entry, mins, more) in stays(), moto in any::<bool>(),
    ) {
        let vehicle = if moto { VehicleType::Motorcycle } else { VehicleType::Automobile };
        // Up to a fortnight, clock changes included.
        let exit = entry + SignedDuration::from_mins(mins * 3 + more);
        let bill = price(&table, &tz, &Stay { entry, exit, vehicle }).expect("priced");
        let Some(from) = bill.rows.iter().find(|r| r.kind == RowKind::Block).map(|r| r.start) else {
            return Ok(());
        };
        let walked = block_by_block(&table, &tz, vehicle, from, bill.exit);
        prop_assert_eq!(expand(&bill), walked.clone());
        if let Some(cap) = table.daily_max {
            let last_end = bill.rows.iter().rev().find(|r| r.kind == RowKind::Block).map_or(from, |r| r.end);
            let ends = walked.iter().skip(1).map(|w| w.0).chain([last_end]);
            let mut one_by_one: Vec<Row> = walked
                .iter()
                .zip(ends)
                .map(|(&(start, period, price), end)| Row { kind: RowKind::Block, start, end, period, blocks: 1, price })
                .collect();
            daily_maximum(cap.amount, cap.resets_at, &tz, &mut one_by_one);
            let caps = |rows: &[Row]| rows.iter().filter(|r| r.kind == RowKind::DailyMaximum).map(|r| r.price).collect::<Vec<_>>();
            prop_assert_eq!(caps(&bill.rows), caps(&one_by_one));
        }
    }

    #[test]
    fn the_total_is_the_sum_of_its_rows(
        table in tables(), tz in zones(), (entry, mins, _more) in stays(), moto in any::<bool>(),
    ) {
        let vehicle = if moto { VehicleType::Motorcycle } else { VehicleType::Automobile };
        let exit = entry + SignedDuration::from_mins(mins);
        let bill = price(&table, &tz, &Stay { entry, exit, vehicle }).expect("priced");
        let sum: Decimal = bill.rows.iter().map(|r| r.price).sum();
        prop_assert_eq!(bill.total, round_cents(sum));
        prop_assert!(bill.total >= Decimal::ZERO);
        // Blocks tile the charged time without gaps or overlaps.
        let blocks: Vec<_> = bill.rows.iter().filter(|r| r.kind == RowKind::Block).collect();
        for w in blocks.windows(2) {
            prop_assert_eq!(w[0].end, w[1].start);
        }
        if let Some(last) = blocks.last() {
            prop_assert!(last.end >= bill.exit);
        }
    }
}

/// The API takes instants from 1970 up to the year 3000 (`pms_vocab::fields`): a stay at
/// either end of that range, short or longer than a year, is priced in any zone.
#[test]
fn stays_at_the_ends_of_the_apis_range_are_priced() {
    use pms_vocab::fields::{END_INSTANT_MS, FIRST_INSTANT_MS};
    let first = Timestamp::from_millisecond(FIRST_INSTANT_MS).expect("first");
    let last = Timestamp::from_millisecond(END_INSTANT_MS - 1).expect("last");
    for tz in [
        "UTC",
        "Europe/Lisbon",
        "Pacific/Kiritimati",
        "Pacific/Pago_Pago",
    ] {
        let tz = TimeZone::get(tz).expect("zone");
        for (entry, exit) in [
            (first, first + SignedDuration::from_hours(30)),
            (last - SignedDuration::from_hours(30), last),
            (first, first + SignedDuration::from_hours(400 * 24)),
            (last - SignedDuration::from_hours(400 * 24), last),
        ] {
            let stay = Stay {
                entry,
                exit,
                vehicle: VehicleType::Automobile,
            };
            let bill = price(&seed::table(), &tz, &stay);
            assert!(bill.is_ok(), "{entry} to {exit} in {tz:?}: {bill:?}");
        }
    }
}
