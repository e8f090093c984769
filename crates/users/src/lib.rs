//! The PMS users service: registration, login (JWT), vehicles, payment methods and PARKY
//! wallets, on SQLite or PostgreSQL, with the published API's paths and JSON.
//!
//! Layout:
//! - [`model`]: enumerations and JSON shapes (the published `UserDTO` and friends).
//! - [`validate`]: request bodies and their rules, as pure functions naming the bad field.
//! - [`password`]: argon2id hashing off the async threads.
//! - [`store`]: the database: pool, migrations, queries, demo data, error mapping.
//! - [`throttle`]: how failed logins hold an e-mail address.
//! - [`http`]: routes and handlers.
//! - [`events`]: what users does with the payments service's events (spending coins) and the
//!   parks service's (coins earned by visits and invitations).
//! - [`anniversaries`]: the hourly round crediting customers' anniversary coins.
//!
//! Every change another service needs (a registration, a vehicle, a payment method, a status)
//! appends `customer.registered` or `customer.changed` to the outbox in the same transaction.
//!
//! Caller verification, the JSON error format, the connection pool, readiness and serving are
//! the service kit's (`pms-service`), shared with the other domain services: the service
//! verifies every bearer token itself, never trusts identity headers, serves 503 until its
//! schema is migrated and recovers by itself when the database returns.

#![deny(missing_docs)]

pub mod anniversaries;
pub mod events;
pub mod http;
pub mod model;
pub mod password;
pub mod store;
pub mod throttle;
pub mod validate;

use std::sync::Arc;
use std::time::Duration;

use pms_auth::{Signer, VerifierConfig};
use pms_service::http::BodyLimits;
use pms_service::Shell;

use crate::password::{HashParams, PasswordError, Passwords};
use crate::store::{Store, StoreConfig, StoreError};

pub use crate::http::openapi;
pub use pms_service::http::{DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES};
/// Default token lifetime (the original's was 10 minutes; an hour with `exp` always enforced).
pub const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// Everything the service needs.
pub struct UsersConfig {
    /// The database.
    pub store: StoreConfig,
    /// argon2id costs.
    pub hash: HashParams,
    /// Most password hashes computed at once.
    pub hash_parallelism: usize,
    /// Issues login tokens.
    pub signer: Signer,
    /// Verifies bearer tokens (the signer's key or its public half).
    pub verifier: VerifierConfig,
    /// Password for the demo accounts, created when the database is empty; `None`: no demo data.
    pub seed_password: Option<String>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Time a client has to send its whole request body.
    pub body_timeout: std::time::Duration,
    /// The coins an invitation and an anniversary earn.
    pub awards: store::awards::Awards,
}

impl std::fmt::Debug for UsersConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsersConfig")
            .field("store", &self.store)
            .field("hash", &self.hash)
            .field("signer", &self.signer)
            .field("seed", &self.seed_password.is_some())
            .finish_non_exhaustive()
    }
}

/// Why the users service could not be built: the kit's settings or the password hashing
/// parameters.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Database or token verification settings.
    #[error(transparent)]
    Shell(#[from] pms_service::StartError),
    /// argon2 parameters.
    #[error(transparent)]
    Password(#[from] PasswordError),
}

pms_service::service! {
    /// The service's shared state. Cheap to clone.
    pub struct App(Inner);
    event_metrics: metrics,
    routes: http::router,
}

/// What [`App`] holds.
#[derive(Debug)]
pub struct Inner {
    /// The users' database: accounts, vehicles, payment methods, wallets.
    pub store: Store,
    /// Readiness (503 until migrated), token verification, request body limits.
    pub shell: Shell,
    /// Password hashing.
    pub passwords: Passwords,
    /// Token issuing.
    pub signer: Signer,
    /// This service's outbox (its consumers are woken after each commit).
    pub outbox: pms_events::Outbox,
    /// `/metrics`: the event gauges.
    pub metrics: pms_events::metrics::EventMetrics,
    /// The coins an invitation and an anniversary earn.
    pub awards: store::awards::Awards,
    seed_password: Option<String>,
}

impl App {
    /// Builds the service without touching the database. Call it inside a Tokio runtime.
    ///
    /// # Errors
    /// [`StartError`] for a bad URL, argon2 parameters or verifier settings.
    pub fn new(config: UsersConfig) -> Result<Self, StartError> {
        let store = Store::open(&config.store).map_err(pms_service::StartError::from)?;
        let outbox = pms_events::Outbox::new("users", store.db().clone());
        let passwords = Passwords::new(config.hash, config.hash_parallelism)?;
        let limits = BodyLimits {
            max_bytes: config.max_body_bytes,
            timeout: config.body_timeout,
        };
        let shell =
            Shell::new("users", config.verifier, limits).map_err(pms_service::StartError::from)?;
        Ok(Self(Arc::new(Inner {
            store,
            shell,
            passwords,
            signer: config.signer,
            outbox,
            metrics: pms_events::metrics::EventMetrics::new("users"),
            awards: config.awards,
            seed_password: config.seed_password,
        })))
    }

    /// Migrates the schema and, when configured and the database is empty, creates the demo
    /// accounts; then the service is ready. Returns whether it seeded.
    ///
    /// # Errors
    /// Database failures ([`StoreError::is_unavailable`] when it is just not reachable).
    pub async fn init(&self) -> Result<bool, StoreError> {
        self.store.migrate().await?;
        let mut seeded = false;
        if let Some(password) = &self.seed_password {
            if self.store.count_users().await? == 0 {
                let hash = self
                    .passwords
                    .hash(password.clone())
                    .await
                    .map_err(|e| StoreError::Internal(e.to_string()))?;
                seeded = self.store.seed_if_empty(&hash).await?;
            }
        }
        self.shell.ready.set();
        if seeded {
            self.outbox.committed();
        }
        let store = self.store.clone();
        tokio::spawn(async move {
            match store.warm().await {
                Ok(n) => tracing::debug!(connections = n, "database connections opened"),
                Err(e) => {
                    tracing::debug!(error = %e, "could not open database connections ahead of use")
                }
            }
        });
        Ok(seeded)
    }

    /// Whether [`App::init`] has succeeded.
    pub fn is_ready(&self) -> bool {
        self.shell.ready.is_ready()
    }
}
