//! Storage: the parks service's [`Store`] on the service kit's database handle (SQLite or
//! PostgreSQL, chosen by the URL).
//!
//! What it owns: the parks migrations (one directory per backend, the same tables, constraints
//! and names), mapping database failures to [`StoreError`], and the queries, one module per
//! concern. What it must not do: HTTP, or decide what a barrier says (that is
//! [`crate::rules`]); it reports which rule applied.
//!
//! Why these rules live in the schema: one open visit per plate and per spot (partial unique
//! indexes), a park's occupied count never above its maximum (a CHECK on the counter every
//! entrance raises), exits after entrances, enumerations by name. They then hold under any
//! number of barriers at once, on both backends.
//!
//! Lock order: the entrances and exits of one park queue at the park's row (raising or lowering
//! the counter) and never wait for each other in a cycle; [`visits`] says in which order each
//! form of them takes its locks.
//!
//! Layout: [`parks`] (parks, spots, thresholds, overnight, price tables), [`admin`] (parks
//! created and changed, spots added), [`devices`] (the operator's view of barriers and displays,
//! added, switched, keyed), [`visits`] (entrance
//! and exit), [`quotes`] (the exit's price), [`displays`], [`devices`] (the operator's view),
//! [`replica`] (customers and vehicles from the users service's events, invoices from the
//! payments service's), [`closure`] (erasing a closed account's data), [`reports`], [`seed`].

pub mod admin;
pub mod closure;
pub mod devices;
pub mod displays;
pub mod history;
pub mod parks;
pub mod quotes;
pub mod recent;
pub mod replica;
pub mod reports;
pub mod seed;
pub mod visits;

pub use pms_service::store::{redact_url, Backend, StoreConfig};
use pms_service::store::{Db, Migrations};

use crate::rules::Refusal;

/// What went wrong in the store: the kit's classes, with the barrier's refusals.
pub type StoreError = pms_service::store::StoreError<Refusal>;

impl pms_service::store::Refusal for Refusal {
    fn from_constraint(what: &str) -> Option<Self> {
        // One open visit per plate: a second entrance raced the first. The park's counter
        // CHECK: the park filled meanwhile. No overlapping stays: an entrance dated at or
        // before the plate's last exit (the caller moves it on, `visits`).
        if what.contains("visits_one_open_per_plate") || what.contains("visits.plate") {
            Some(Refusal::AlreadyInside)
        } else if what.contains("parks_not_overfilled") {
            Some(Refusal::Full)
        } else if what.contains("visits_no_overlap") {
            Some(Refusal::OverlapsEarlierStay)
        } else {
            None
        }
    }

    fn answer(&self) -> pms_service::ApiError {
        pms_service::ApiError::new(http::StatusCode::CONFLICT, self.reason(), self.message())
    }
}

/// The parks service's database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    db: Db,
    barriers: std::sync::Arc<visits::BarrierCache>,
    keys: std::sync::Arc<devices::IssuedKeys>,
    contacts: std::sync::Arc<devices::Contacts>,
    tables: std::sync::Arc<quotes::Tables>,
}

impl std::ops::Deref for Store {
    type Target = Db;

    fn deref(&self) -> &Db {
        &self.db
    }
}

/// The schema, per backend: every file of `migrations/sqlite` and `migrations/postgres`, in
/// order (a test checks the lists against the directories).
const MIGRATIONS: Migrations = pms_service::migrations!(
    "0001_parks.sql",
    "0002_events.sql",
    "0003_changes.sql",
    "0004_hot_updates.sql",
    "0005_domains.sql",
    "0006_broker_positions.sql",
    "0007_passage_times.sql",
    "0008_outbox_retention.sql",
    "0009_administration.sql",
    "0010_coins_earned.sql",
    "0011_retired_spots.sql",
    "0012_last_contact.sql",
    "0013_closed_customers.sql",
    "0014_outbox_erasures.sql"
);
pms_service::migrations_test!(MIGRATIONS);

impl Store {
    /// Builds the pool without connecting.
    ///
    /// # Errors
    /// [`DbError::BadUrl`](pms_service::store::DbError::BadUrl) for an unsupported or malformed URL.
    pub fn open(config: &StoreConfig) -> Result<Self, pms_service::store::DbError> {
        Ok(Self {
            db: Db::open(config)?,
            barriers: std::sync::Arc::default(),
            keys: std::sync::Arc::default(),
            contacts: std::sync::Arc::default(),
            tables: std::sync::Arc::default(),
        })
    }

    /// The kit's handle (for the event consumers and the outbox).
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Brings the schema up to date.
    ///
    /// # Errors
    /// When the database is unreachable or a migration fails.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        Ok(self.db.migrate(MIGRATIONS).await?)
    }
}

pub(crate) use pms_service::store::retry;

/// Milliseconds since the epoch of an instant.
pub(crate) fn ms(t: jiff::Timestamp) -> i64 {
    t.as_millisecond()
}

/// The instant of epoch milliseconds (clamped into range).
pub(crate) fn instant(ms: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// The boolean of a 0/1 column.
pub(crate) fn flag(v: i64) -> bool {
    v != 0
}

/// A migrated store with the demo parks, on SQLite (a file in the returned directory) or on a
/// fresh database of the shared test PostgreSQL; `None` where PostgreSQL tests are skipped.
#[cfg(test)]
pub(crate) async fn seeded_for_test(postgres: bool) -> Option<(Store, tempfile::TempDir)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = pms_testkit::pg::test_database(postgres, dir.path(), "parks.db")?;
    let store = Store::open(&StoreConfig::new(url)).expect("open");
    store.migrate().await.expect("migrate");
    store
        .seed_if_empty(&seed::DemoParks::default())
        .await
        .expect("seed");
    Some((store, dir))
}
