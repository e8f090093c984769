//! The price table every park of the published system was seeded with (spec §5.10): 9:00–21:00
//! and 21:00–9:00, each with blocks of 15 minutes at €0.15, €0.15, €0.15, €0.15, then €0.30
//! repeating, the same for automobiles and motorcycles.

use rust_decimal::Decimal;

use crate::table::{Period, PriceTable, Threshold, TimeOfDay};

/// The seed table's periods, in the seed's order (day, then night).
pub fn periods() -> Vec<Period> {
    let blocks = |prices: &[i64]| {
        prices
            .iter()
            .map(|cents| Threshold {
                minutes: 15,
                automobile: Decimal::new(*cents, 2),
                motorcycle: Decimal::new(*cents, 2),
            })
            .collect::<Vec<_>>()
    };
    let at = |h| TimeOfDay::from_hm(h, 0).unwrap_or(TimeOfDay::MIDNIGHT);
    vec![
        Period {
            start: at(9),
            end: at(21),
            thresholds: blocks(&[15, 15, 15, 15, 30]),
        },
        Period {
            start: at(21),
            end: at(9),
            thresholds: blocks(&[15, 15, 15, 15, 30]),
        },
    ]
}

/// The seed table, without extras.
pub fn table() -> PriceTable {
    // The seed is valid by construction; its test proves it.
    PriceTable::try_new(periods()).unwrap_or_else(|e| unreachable!("the seed table is valid: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_seed_table_is_valid() {
        assert!(crate::PriceTable::try_new(super::periods()).is_ok());
    }
}
