//! The PMS parks service: parks, spots, barriers, displays, visits, price tables and park
//! reports, with the published API's paths and JSON (spec §3.2, §3.3), on SQLite or PostgreSQL.
//!
//! Layout:
//! - [`model`]: enumerations and JSON shapes.
//! - [`rules`]: the barrier's messages, spot fitting, distances, report keys — pure.
//! - [`clock`]: what time a passage is taken at, the barrier's clock being evidence — pure.
//! - [`hours`]: a park's opening hours and whether they take a car at an instant — pure.
//! - [`devices`]: barrier and display credentials.
//! - [`store`]: the database: migrations, queries, demo parks, the replicas kept by events.
//! - [`events`]: what parks does with the users and payments services' events.
//! - [`http`]: routes and handlers.
//! - [`bells`]: what wakes the long polls of displays and pages.
//! - [`metrics`]: the counters `/metrics` shows.
//!
//! Caller verification, JSON errors, the pool, readiness and serving are the service kit's
//! (`pms-service`). Customers and vehicles come from the users service's events and invoices
//! from the payments service's (`pms-events`); parks never reads another service's database.
//!
//! The driver should see the price at the barrier. An exit prices the stay itself, with the
//! park's table version it names in `visit.closed` and the tariff engine payments invoices with
//! ([`store::quotes`]), and says it at once. Only an exit paid with coins waits for its invoice
//! (the discount is the wallet's): as soon as the price is known, or after
//! [`ParksConfig::exit_wait`] at most with "your invoice will follow". A slow or absent payments
//! service delays an invoice, never a car.

#![deny(missing_docs)]

pub mod bells;
pub mod clock;
pub mod devices;
pub mod events;
pub mod hours;
pub mod http;

pub use crate::http::openapi;
pub mod metrics;
pub mod model;
pub mod prices;
pub mod rules;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use pms_auth::VerifierConfig;
use pms_events::Outbox;
use pms_service::http::BodyLimits;
use pms_service::Shell;

use crate::devices::{DeviceKeys, WeakSecret};
use crate::metrics::Metrics;
use crate::prices::PriceWaiters;
use crate::store::seed::DemoParks;
use crate::store::{Store, StoreConfig, StoreError};

/// Default longest wait of an exit for its invoice's price.
pub const DEFAULT_EXIT_WAIT: Duration = Duration::from_millis(700);

/// Everything the service needs.
pub struct ParksConfig {
    /// The database.
    pub store: StoreConfig,
    /// Verifies bearer tokens (the users service's key or its public half).
    pub verifier: VerifierConfig,
    /// The secret device keys derive from (see [`devices`]).
    pub device_secret: Vec<u8>,
    /// The demo parks to create in an empty database; `None` creates none.
    pub seed: Option<DemoParks>,
    /// Request body limits.
    pub limits: BodyLimits,
    /// Longest wait of an exit for its invoice's price.
    pub exit_wait: Duration,
    /// How far a barrier's time is believed ([`clock`]).
    pub clock: clock::ClockRules,
    /// How long a closed account's stay keeps its plate after the car left, so that a retried
    /// exit is still recognised ([`store::closure`]).
    pub erase_after_exit: Duration,
}

impl std::fmt::Debug for ParksConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParksConfig")
            .field("store", &self.store)
            .field("seed", &self.seed)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// Why the parks service could not be built: the kit's settings, the device secret or the demo
/// parks' time zone.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Database or token verification settings.
    #[error(transparent)]
    Shell(#[from] pms_service::StartError),
    /// The device secret.
    #[error(transparent)]
    Devices(#[from] WeakSecret),
    /// The parks' time zone.
    #[error("time zone: {0}")]
    TimeZone(String),
}

pms_service::service! {
    /// The service's shared state. Cheap to clone.
    pub struct App(Inner);
    event_metrics: metrics.events,
    routes: http::router,
}

/// What [`App`] holds.
#[derive(Debug)]
pub struct Inner {
    /// The parks' database: parks, spots, barriers, visits, price tables, replicas of customers.
    pub store: Store,
    /// Readiness (503 until migrated), token verification, request body limits.
    pub shell: Shell,
    /// Device keys.
    pub devices: DeviceKeys,
    /// This service's outbox (its consumers are woken after each commit).
    pub outbox: Outbox,
    /// Longest wait of an exit for its invoice.
    pub exit_wait: Duration,
    /// How far a barrier's time is believed.
    pub clock: clock::ClockRules,
    /// How long a closed account's stay keeps its plate after the car left.
    pub erase_after_exit: Duration,
    /// Exits waiting for their visit's price, handed it when its invoice is applied.
    pub prices: PriceWaiters,
    /// Rung when what a display or a park shows may have changed: the long polls waiting in
    /// this process read their version from the database again.
    pub bells: bells::Bells,
    /// Counters.
    pub metrics: Metrics,
    seed: Option<DemoParks>,
}

impl App {
    /// Builds the service without touching the database. Call it inside a Tokio runtime.
    ///
    /// # Errors
    /// [`StartError`] for a bad URL, verifier settings, device secret or time zone.
    pub fn new(config: ParksConfig) -> Result<Self, StartError> {
        if let Some(demo) = &config.seed {
            rules::time_zone(&demo.time_zone).map_err(StartError::TimeZone)?;
        }
        let store = Store::open(&config.store).map_err(pms_service::StartError::from)?;
        let shell = Shell::new("parks", config.verifier, config.limits)
            .map_err(pms_service::StartError::from)?;
        let devices = DeviceKeys::new(&config.device_secret)?;
        let outbox = Outbox::new("parks", store.db().clone());
        Ok(Self(Arc::new(Inner {
            store,
            shell,
            devices,
            outbox,
            exit_wait: config.exit_wait,
            clock: config.clock,
            erase_after_exit: config.erase_after_exit,
            prices: PriceWaiters::default(),
            bells: bells::Bells::default(),
            metrics: Metrics::default(),
            seed: config.seed,
        })))
    }

    /// Migrates the schema and seeds the demo parks when configured and the database has none;
    /// then the service is ready. Returns whether it seeded.
    ///
    /// # Errors
    /// Database failures ([`StoreError::is_unavailable`] when it is just not reachable).
    pub async fn init(&self) -> Result<bool, StoreError> {
        self.store.migrate().await?;
        let seeded = match &self.seed {
            Some(demo) => self.store.seed_if_empty(demo).await?,
            None => false,
        };
        if seeded {
            self.outbox.committed();
        }
        self.shell.ready.set();
        let store = self.store.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(store::devices::CONTACTS_WRITTEN_EVERY).await;
                if let Err(e) = store.write_contacts().await {
                    tracing::warn!(error = %e, "devices' last contacts not written; kept for later");
                }
            }
        });
        let app = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(store::closure::ERASURE_ROUND_EVERY).await;
                match app.store.finish_erasures(app.erase_after_exit).await {
                    Ok(erased) if !erased.is_empty() => {
                        tracing::info!(?erased, "closed accounts erased once their cars left");
                        app.changed();
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "erasure round failed; tried again later"),
                }
            }
        });
        Ok(seeded)
    }

    /// Something was committed, in a park not said: wake the outbox's consumers and every long
    /// poll.
    pub fn committed(&self) {
        self.outbox.committed();
        self.changed();
    }

    /// Something was committed in park `park_id`: wake the outbox's consumers and the long
    /// polls that park's changes concern.
    pub fn committed_in(&self, park_id: i64) {
        self.outbox.committed();
        self.bells.ring(park_id);
    }

    /// What a display or a park shows may have changed (in this process, or in another replica
    /// when the distributed mode says so), park not said: every long poll waiting here reads
    /// its version again.
    pub fn changed(&self) {
        self.bells.ring_all();
    }
}
