//! Storage: the payments service's [`Store`] on the service kit's database handle (SQLite or
//! PostgreSQL, chosen by the URL).
//!
//! What it owns: the payments migrations, the queries ([`invoices`]: issuing and reading
//! invoices; [`replica`]: the price tables, customers and open visits other services' events
//! bring; `runs`: a run of the parks service's events in a few statements on PostgreSQL).
//! What it must not do: HTTP, or price anything itself (that is `pms-tariff`).
//!
//! Why invoices are never deleted: the original wiped every invoice on each start. Here an
//! invoice is written once per visit (`visit_id` is unique), in one transaction with its rows
//! and its event.

pub mod invoices;
pub mod replica;
mod runs;

pub use pms_service::store::{redact_url, Backend, StoreConfig};
use pms_service::store::{Db, Migrations};

/// What went wrong in the store.
pub type StoreError = pms_service::store::StoreError;

/// The payments service's database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    db: Db,
    /// Price table versions parsed so far (a version never changes once written).
    parsed: std::sync::Arc<pms_tariff::cache::Versions<replica::StoredTable>>,
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
    "0001_payments.sql",
    "0002_events.sql",
    "0003_domains.sql",
    "0004_broker_positions.sql",
    "0005_row_blocks.sql",
    "0006_outbox_retention.sql",
    "0007_outbox_erasures.sql"
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
            parsed: std::sync::Arc::default(),
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

/// The instant of epoch milliseconds (clamped into range).
pub(crate) fn instant(ms: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}
