//! The fee engine's cost for one visit of an hour, a day, thirty days, a year and fifty years on
//! the seed table with the overnight fee, read in Europe/Lisbon: `cargo bench -p pms-tariff`.

use criterion::{criterion_group, criterion_main, Criterion};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use pms_tariff::{fee, seed};
use pms_vocab::VehicleType;
use rust_decimal::Decimal;

fn bench(c: &mut Criterion) {
    let table = seed::table()
        .with_extras(None, None, None, Some(Decimal::from(5)))
        .expect("valid");
    let tz = TimeZone::get("Europe/Lisbon").expect("zone");
    let entry: Timestamp = "2024-03-20T08:30:00Z".parse().expect("instant");
    for (name, hours) in [
        ("1 hour", 1),
        ("1 day", 24),
        ("30 days", 30 * 24),
        ("365 days", 365 * 24),
        ("50 years", 50 * 8766),
    ] {
        let stay = fee::Stay {
            entry,
            exit: entry + SignedDuration::from_hours(hours),
            vehicle: VehicleType::Automobile,
        };
        c.bench_function(&format!("fee {name}"), |b| {
            b.iter(|| fee::price(&table, &tz, std::hint::black_box(&stay)).expect("priced"))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
