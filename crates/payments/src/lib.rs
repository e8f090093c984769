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

use std::future::Future;
use std::sync::Arc;

use pms_auth::VerifierConfig;
use pms_events::Outbox;
use pms_net::serve::Drain;
use pms_service::http::BodyLimits;
use pms_service::Shell;
use tokio::net::TcpListener;

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

/// Why the service could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Database URL.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Token verification settings.
    #[error("token verification: {0}")]
    Verifier(pms_auth::verify::ConfigError),
}

/// The service's shared state. Cheap to clone.
#[derive(Debug, Clone)]
pub struct App(Arc<Inner>);

/// What [`App`] holds.
#[derive(Debug)]
pub struct Inner {
    /// The database.
    pub store: Store,
    /// Readiness (503 until migrated), token verification, request body limits.
    pub shell: Shell,
    /// This service's outbox.
    pub outbox: Outbox,
    /// `/metrics`: the event gauges.
    pub metrics: pms_events::metrics::EventMetrics,
}

impl std::ops::Deref for App {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

/// The kit extractors' view of the service: its readiness, token verifier and body limits.
impl pms_service::Guarded for App {
    fn shell(&self) -> &Shell {
        &self.shell
    }
}

/// The kit's view of the service: its database, and the event gauges `/metrics` shows.
impl pms_service::Service for App {
    fn db(&self) -> &pms_service::store::Db {
        self.store.db()
    }

    async fn metrics_text(&self) -> String {
        self.metrics.render(&self.outbox, self.store.db()).await
    }
}

impl App {
    /// Builds the service without touching the database. Call it inside a Tokio runtime.
    ///
    /// # Errors
    /// [`StartError`] for a bad URL or verifier settings.
    pub fn new(config: PaymentsConfig) -> Result<Self, StartError> {
        let store = Store::open(&config.store)?;
        let shell =
            Shell::new("payments", config.verifier, config.limits).map_err(StartError::Verifier)?;
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

    /// Runs [`App::init`] until it succeeds, backing off up to 5 s between tries.
    pub fn init_in_background(&self) -> tokio::task::JoinHandle<()> {
        let app = self.clone();
        pms_service::ready::retry_in_background("payments", move || {
            let app = app.clone();
            async move { app.init().await }
        })
    }
}

/// Serves the payments API on `listener` until `shutdown`, then drains and closes the database.
pub async fn run(
    listener: TcpListener,
    app: App,
    serving: impl Into<pms_service::Serving>,
    shutdown: impl Future<Output = ()>,
) -> Drain {
    let router = http::router(app.clone());
    pms_service::chassis::run(listener, app, router, serving, shutdown).await
}
