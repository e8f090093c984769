//! The PMS tariff engine: price tables, their validation, and the fee of a stay. Pure: no clock,
//! no I/O, money as exact decimals. The parks service validates a manager's table with it; the
//! payments service bills with it; neither imports the other.
//!
//! Layout:
//! - [`table`]: a valid [`PriceTable`] (periods, blocks, extras) and what makes one valid.
//! - [`fee`]: [`fee::price`], the fee of a stay, and the PARKY discount.
//! - [`json`]: the API's JSON form and the events' exact form ([`json::TableDoc`]).
//! - [`seed`]: the published system's table (spec §5.10).
//! - [`cache`]: versions parsed once per process.
//!
//! Vocabulary (APDS, ISO/TS 5206-1): a *rate table* of *rate periods* by time of day, each with
//! *rate steps* (blocks, the original's "thresholds"); *grace period*, *maximum fee* per
//! charging day, *minimum fee*, and an overnight fee per night spanned.

#![deny(missing_docs)]

pub mod cache;
pub mod fee;
pub mod json;
pub mod seed;
pub mod table;

pub use crate::fee::{price, Bill, Discount, FeeError, Row, RowKind, Stay};
pub use crate::table::{version_in_force, PriceTable, TableError, TimeOfDay};
