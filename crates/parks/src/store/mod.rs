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
//! Lock order: every entrance and exit takes its park's row first (raising or lowering the
//! counter), so the transactions of one park queue there and never deadlock on spots.
//!
//! Layout: [`parks`] (parks, spots, thresholds, overnight, price tables), [`visits`] (entrance
//! and exit), [`displays`], [`replica`] (customers and vehicles from the users service's events,
//! invoices from the payments service's), [`reports`], [`seed`].

pub mod displays;
pub mod history;
pub mod parks;
pub mod replica;
pub mod reports;
pub mod seed;
pub mod visits;

use pms_service::store::{pool, Db, DbError, Migrations, Transient};
pub use pms_service::store::{redact_url, Backend, StoreConfig};

use crate::rules::Refusal;

/// What went wrong in the store, in the terms the API answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The URL names no supported database, or does not parse.
    #[error("unsupported or malformed database URL {0:?} (expected sqlite:… or postgres:…)")]
    BadUrl(String),
    /// The database cannot be reached, is shutting down, or timed out.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// No such park, spot, customer, display, …
    #[error("{what} {id} not found")]
    NotFound {
        /// What was looked for (`park`, `spot`, …).
        what: &'static str,
        /// Which one.
        id: String,
    },
    /// A barrier rule refused, inside a transaction that is rolled back.
    #[error("refused: {}", .0.reason())]
    Refused(Refusal),
    /// Anything else (a bug or a schema problem); details are logged, not sent to clients.
    #[error("database error: {0}")]
    Internal(String),
    /// A lock race still lost, to run the transaction again.
    #[error("lost a lock race: {0}")]
    Transient(String),
}

impl StoreError {
    /// True for failures of the database rather than of the request.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    /// `what` `id` does not exist.
    pub fn not_found(what: &'static str, id: impl ToString) -> Self {
        Self::NotFound {
            what,
            id: id.to_string(),
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if pms_service::store::is_transient(&e) {
            return Self::Transient(e.to_string());
        }
        if pms_service::store::is_unavailable(&e) {
            return Self::Unavailable(pms_service::store::unavailable_reason(&e));
        }
        if let Some(what) = pms_service::store::unique_violation(&e) {
            // One open visit per plate: a second entrance raced the first.
            if what.contains("visits_one_open_per_plate") || what.contains("visits.plate") {
                return Self::Refused(Refusal::AlreadyInside);
            }
            if what.contains("visits_one_open_per_spot") || what.contains("visits.spot_id") {
                return Self::Transient(what);
            }
            return Self::Internal(what);
        }
        if pms_service::store::is_check_on(&e, "parks_not_overfilled") {
            return Self::Refused(Refusal::Full);
        }
        match e.as_database_error() {
            Some(db) => Self::Internal(db.message().to_owned()),
            None => Self::Internal(e.to_string()),
        }
    }
}

impl From<DbError> for StoreError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::BadUrl(u) => Self::BadUrl(u),
            DbError::Unavailable(m) => Self::Unavailable(m),
            DbError::Internal(m) => Self::Internal(m),
        }
    }
}

impl pool::Outcome for StoreError {
    fn breaks_connection(&self) -> bool {
        self.is_unavailable()
    }
}

impl Transient for StoreError {
    fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }
}

/// The parks service's database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    db: Db,
}

impl std::ops::Deref for Store {
    type Target = Db;

    fn deref(&self) -> &Db {
        &self.db
    }
}

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

impl Store {
    /// Builds the pool without connecting.
    ///
    /// # Errors
    /// [`StoreError::BadUrl`] for an unsupported or malformed URL.
    pub fn open(config: &StoreConfig) -> Result<Self, StoreError> {
        Ok(Self {
            db: Db::open(config)?,
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
        Ok(self
            .db
            .migrate(Migrations {
                sqlite: &SQLITE_MIGRATIONS,
                postgres: &POSTGRES_MIGRATIONS,
            })
            .await?)
    }
}

/// Runs a transaction body again while it loses lock races.
pub(crate) async fn retry<T, F, Fut>(op: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    match pms_service::store::retry_transient(op).await {
        Err(StoreError::Transient(m)) => Err(StoreError::Unavailable(m)),
        other => other,
    }
}

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
