//! The PMS payments service: invoices for closed visits, priced with the tariff engine from the
//! park's own table, and PARKY coins spent for real — with the published API's paths and JSON
//! (spec §3.4), on SQLite or PostgreSQL.
//!
//! Layout:
//! - [`model`]: the published `PaymentsDTO` and its rows.
//! - [`store`]: the database: invoices, and the price tables, customers and open visits that
//!   other services' events bring.
//! - [`events`]: what payments does with the parks and users services' events.
//! - [`http`]: routes and handlers.
//!
//! Why invoices come from events and not from an endpoint: the original let anyone who reached
//! `POST /payments` create an invoice. Here the parks service's `visit.closed` is the only way
//! an invoice is made, once per visit; `createPayment` prices a stay for staff without storing
//! anything.
//!
//! Why one price table: parks owns it (the manager edits it there) and announces every version;
//! payments stores each version and bills from the one in force at the exit, and the invoice
//! records which (the original billed from its own copy, reseeded on every start).

#![deny(missing_docs)]

pub mod events;
pub mod http;
pub mod model;
pub mod store;

pub use crate::http::openapi;

use std::sync::Arc;

use pms_auth::VerifierConfig;
use pms_events::Outbox;
use pms_service::http::BodyLimits;
use pms_service::Shell;

use crate::store::{Store, StoreConfig, StoreError};

/// Everything the service needs.
pub struct PaymentsConfig {
    /// The database.
    pub store: StoreConfig,
    /// Verifies bearer tokens.
    pub verifier: VerifierConfig,
    /// Request body limits.
    pub limits: BodyLimits,
}

impl std::fmt::Debug for PaymentsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentsConfig")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

pub use pms_service::StartError;

pms_service::service! {
    /// The service's shared state. Cheap to clone.
    pub struct App(Inner);
    event_metrics: metrics,
    routes: http::router,
}

/// What [`App`] holds.
#[derive(Debug)]
pub struct Inner {
    /// The payments' database: invoices, replicas of customers, visits and price tables.
    pub store: Store,
    /// Readiness (503 until migrated), token verification, request body limits.
    pub shell: Shell,
    /// This service's outbox.
    pub outbox: Outbox,
    /// `/metrics`: the event gauges.
    pub metrics: pms_events::metrics::EventMetrics,
}

impl App {
    /// Builds the service without touching the database. Call it inside a Tokio runtime.
    ///
    /// # Errors
    /// [`StartError`] for a bad URL or verifier settings.
    pub fn new(config: PaymentsConfig) -> Result<Self, StartError> {
        let store = Store::open(&config.store)?;
        let shell = Shell::new("payments", config.verifier, config.limits)?;
        let outbox = Outbox::new("payments", store.db().clone());
        Ok(Self(Arc::new(Inner {
            store,
            shell,
            outbox,
            metrics: pms_events::metrics::EventMetrics::new("payments"),
        })))
    }

    /// Migrates the schema; then the service is ready.
    ///
    /// # Errors
    /// Database failures.
    pub async fn init(&self) -> Result<(), StoreError> {
        self.store.migrate().await?;
        self.shell.ready.set();
        Ok(())
    }
}
