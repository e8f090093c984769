//! The exit's quote: the price of a stay, known at the exit itself, so the barrier says it
//! without waiting for the invoice.
//!
//! The exit's plate read also finds the version of the park's table in force when the car left
//! ([`IN_FORCE_SQL`], [`pms_tariff::version_in_force`]'s rule), the exit prices the stay with it
//! through the same tariff engine payments bills with, and `visit.closed` names the version.
//! Payments invoices with that version, so the invoice's price is the quote. What only payments
//! knows is the wallet: a stay paid with coins (and not free) is not quoted, and its exit waits
//! for the invoice as before. The invoice is still what fills in the visit's price.
//!
//! A version never changes once written, so each is parsed once per process ([`Tables`],
//! [`pms_tariff::cache`]).

use std::sync::Arc;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use pms_tariff::cache::Versions;
use pms_tariff::json::TableDoc;
use pms_tariff::{fee, PriceTable, Stay};
use pms_vocab::VehicleType;
use rust_decimal::Decimal;

/// The version of park `$park`'s table in force at `$at` (epoch ms; SQL expressions), as a
/// column of a read: the newest version valid from then or earlier, else the oldest
/// ([`pms_tariff::version_in_force`]), or NULL when the park has no table.
macro_rules! in_force_sql {
    ($park:literal, $at:literal) => {
        concat!(
            "COALESCE((SELECT max(version) FROM price_tables WHERE park_id = ",
            $park,
            " AND valid_from_ms <= ",
            $at,
            "), (SELECT min(version) FROM price_tables WHERE park_id = ",
            $park,
            "))"
        )
    };
}
pub(crate) use in_force_sql;

/// The same SQL (`in_force_sql!`) for park `$2` at `$3`, for tests and tools.
pub const IN_FORCE_SQL: &str = in_force_sql!("$2", "$3");

/// The version of park `$1`'s table in force at `$2` (epoch ms), read alone: for an exit whose
/// time moved after its plate's read ([`crate::clock`]).
pub const VERSION_AT: &str = concat!("SELECT ", in_force_sql!("$1", "$2"));

/// Price tables parsed, by (park id, version).
#[derive(Debug, Default)]
pub struct Tables(Versions<PriceTable>);

impl Tables {
    /// Version `version` of park `park_id`'s table, if parsed already.
    pub fn get(&self, park_id: i64, version: i64) -> Option<Arc<PriceTable>> {
        self.0.get(park_id, version)
    }

    /// Parses a stored version's document and keeps it. `None` (logged) for a document that
    /// does not parse: it was checked when written, and a broken one must not hold up a car.
    pub fn parse(&self, park_id: i64, version: i64, document: &str) -> Option<Arc<PriceTable>> {
        let table = serde_json::from_str::<TableDoc>(document)
            .map_err(|e| e.to_string())
            .and_then(|doc| doc.to_table().map_err(|e| e.to_string()));
        match table {
            Ok(t) => Some(self.0.keep(park_id, version, t)),
            Err(e) => {
                tracing::error!(park = park_id, version, error = %e, "a stored price table does not parse");
                None
            }
        }
    }
}

/// Version `$version` (an `Option<i64>`) of park `$park`'s table, from `$tables` or read on
/// `$conn` and parsed; `None` for no version, or when its document does not parse.
macro_rules! table_version {
    ($conn:ident, $tables:expr, $park:expr, $version:expr) => {{
        let (tables, park, version): (&$crate::store::quotes::Tables, i64, Option<i64>) =
            ($tables, $park, $version);
        match version.map(|v| (v, tables.get(park, v))) {
            None => None,
            Some((_, Some(table))) => Some(table),
            Some((version, None)) => {
                let document: String = sqlx::query_scalar(
                    "SELECT document FROM price_tables WHERE park_id = $1 AND version = $2",
                )
                .bind(park)
                .bind(version)
                .fetch_one(&mut *$conn)
                .await?;
                tables.parse(park, version, &document)
            }
        }
    }};
}
pub(crate) use table_version;

/// What a stay costs the driver, as the invoice will say: its total with no discount, or `None`
/// when it pays with coins (and is not free) or cannot be priced (payments then says why).
pub fn quote(
    table: &PriceTable,
    tz: &TimeZone,
    entered: Timestamp,
    left: Timestamp,
    vehicle: VehicleType,
    use_coins: bool,
) -> Option<Decimal> {
    let stay = Stay {
        entry: entered,
        exit: left,
        vehicle,
    };
    let bill = fee::price(table, tz, &stay).ok()?;
    (!fee::awaits_coins(use_coins, bill.total)).then(|| fee::final_price(bill.total, Decimal::ZERO))
}

#[cfg(test)]
mod tests {
    use jiff::ToSpan;

    use super::*;

    #[test]
    fn a_stay_is_quoted_unless_coins_pay_for_it() {
        let table = pms_tariff::seed::table();
        let tz = TimeZone::get("Europe/Lisbon").expect("zone");
        let entered: Timestamp = "2024-07-01T08:30:00Z".parse().expect("time");
        let car = VehicleType::Automobile;
        let hour = quote(&table, &tz, entered, entered + 1.hour(), car, false);
        assert_eq!(hour, Some(Decimal::new(6, 1)));
        assert_eq!(
            quote(&table, &tz, entered, entered + 1.hour(), car, true),
            None,
            "the wallet decides the discount"
        );
        assert_eq!(
            quote(&table, &tz, entered, entered, car, true),
            Some(Decimal::ZERO),
            "a free stay spends no coins"
        );
        assert!(
            quote(
                &table,
                &tz,
                entered,
                entered + (400 * 24).hours(),
                car,
                false
            )
            .is_some(),
            "a stay of any length is priced"
        );
    }

    #[test]
    fn a_version_is_parsed_once_and_a_broken_one_is_not_kept() {
        let tables = Tables::default();
        let doc = serde_json::to_string(&TableDoc::from(&pms_tariff::seed::table())).expect("doc");
        assert!(tables.get(1, 1).is_none());
        let parsed = tables.parse(1, 1, &doc).expect("parses");
        assert!(Arc::ptr_eq(&parsed, &tables.get(1, 1).expect("kept")));
        assert!(tables.get(2, 1).is_none(), "by park and version");
        assert!(tables.parse(1, 2, "{\"periods\": []}").is_none());
        assert!(tables.get(1, 2).is_none());
    }

    /// The SQL form of the rule picks what [`pms_tariff::version_in_force`] picks, on both
    /// backends: versions made out of date order, times before, between and after them.
    #[tokio::test]
    async fn the_version_in_force_is_found_in_sql_as_the_tariff_engine_finds_it() {
        for postgres in [false, true] {
            let Some((store, _dir)) = crate::store::seeded_for_test(postgres).await else {
                continue;
            };
            // Park 1's seed table is version 1; 3 is valid from before 2, 5 from before 4.
            for (version, from) in [(2, 5_000), (3, 4_000), (4, 9_000), (5, 7_000)] {
                let r: Result<u64, sqlx::Error> = pms_service::repeatable!(store, |conn| {
                    sqlx::query(
                        "INSERT INTO price_tables (park_id, version, valid_from_ms, document) \
                         SELECT park_id, $1, $2, document FROM price_tables WHERE park_id = 1 AND version = 1",
                    )
                    .bind(version)
                    .bind(from)
                    .execute(&mut *conn)
                    .await
                    .map(|r| r.rows_affected())
                });
                r.expect("a version");
            }
            let r: Result<Vec<(i64, i64)>, sqlx::Error> = pms_service::repeatable!(store, |conn| {
                sqlx::query_as("SELECT version, valid_from_ms FROM price_tables WHERE park_id = 1")
                    .fetch_all(&mut *conn)
                    .await
            });
            let versions = r.expect("versions");
            let seed_from = versions.iter().find(|v| v.0 == 1).expect("seed").1;
            let mut times = vec![0, 3_999, 4_000, 4_500, 5_000, 6_999, 7_000, 8_999, 9_000];
            times.extend([seed_from - 1, seed_from, seed_from + 1, i64::MAX]);
            for at in times {
                let found: Result<Option<i64>, sqlx::Error> =
                    pms_service::repeatable!(store, |conn| {
                        sqlx::query_scalar(&format!("SELECT {IN_FORCE_SQL} WHERE $1 = 1"))
                            .bind(1_i64)
                            .bind(1_i64)
                            .bind(at)
                            .fetch_one(&mut *conn)
                            .await
                    });
                assert_eq!(
                    found.expect("read"),
                    pms_tariff::version_in_force(versions.iter().copied(), at),
                    "postgres: {postgres}, at {at}"
                );
            }
            let none: Result<Option<i64>, sqlx::Error> = pms_service::repeatable!(store, |conn| {
                sqlx::query_scalar(&format!("SELECT {IN_FORCE_SQL} WHERE $1 = 1"))
                    .bind(1_i64)
                    .bind(99_i64)
                    .bind(0_i64)
                    .fetch_one(&mut *conn)
                    .await
            });
            assert_eq!(none.expect("read"), None, "a park without a table");
        }
    }
}
