//! The words and value shapes of the PMS API, shared by the services, the service kit, the
//! tariff engine and the front office: roles, account statuses, vehicle types and energy
//! sources, plates ([`words`], re-exported here), the [`names!`] macro that declares such a
//! closed set, request headers every side names, and reading JSON values as the original
//! services read them, naming the field at fault ([`fields`]), and the same as serde readers
//! for request body types ([`lenient`]); and the customer as the users service's events carry
//! them to parks and payments ([`customer`]); which events carry a person's data, and what they
//! say once it is erased ([`personal`]).
//!
//! A leaf: no I/O, no HTTP server, no database, so the pure parts of the house (the tariff
//! engine) and the front office use these words without the service kit behind them.

#![deny(missing_docs)]

pub mod customer;
pub mod fields;
pub mod lenient;
pub mod personal;
pub mod words;

pub use crate::fields::FieldError;
pub use crate::words::*;

#[doc(hidden)]
pub use serde as __serde;
#[doc(hidden)]
pub use utoipa as __utoipa;

/// The request header that makes a request that moves money idempotent (the IETF httpapi
/// draft's `Idempotency-Key`; the service kit's `idempotency` module keeps the first answer).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
