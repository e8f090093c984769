//! Storage: the users service's [`Store`], on the service kit's database handle (SQLite or
//! PostgreSQL, chosen by the URL; the pool, the macros and the retries are the kit's).
//!
//! What it owns: the users migrations (one directory per backend, the same tables, constraints
//! and names in both) and mapping database failures to [`StoreError`] (which constraint clashed,
//! "the database is unreachable", …). What it must not do: HTTP, or any rule a constraint could
//! not express (that is [`crate::validate`]).
//!
//! Every column is `TEXT` or a 64-bit integer. Why these integrity
//! rules live in the schema (unique e-mail ignoring case, NIF, plate; `parkies >= 0`; at most
//! three vehicles through a checked counter): they then hold under concurrency and for every
//! writer, not only for this code path.
//!
//! Layout: [`users`] has the queries, [`coins`] and [`awards`] the wallet's events, [`closure`]
//! closing an account, [`seed`] the demo data; [`pool`] is the kit's.

pub mod awards;
pub mod closure;
pub mod coins;
pub mod seed;
pub mod users;

use pms_service::store::Db;
pub(crate) use pms_service::store::{begin, is_check_on};
pub use pms_service::store::{
    pool, redact_url, Backend, StoreConfig, DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_MIN_CONNECTIONS,
    DEFAULT_POOL_SIZE, DEFAULT_STATEMENT_TIMEOUT,
};
pub(crate) use pms_service::{on_conn, repeatable, with_pool};

/// What went wrong in the store, in the terms the API answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The URL names no supported database, or does not parse.
    #[error("unsupported or malformed database URL {0:?} (expected sqlite:… or postgres:…)")]
    BadUrl(String),
    /// The database cannot be reached, is shutting down, or timed out.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A unique value is taken.
    #[error("{field} is already registered")]
    Conflict {
        /// The API field whose value clashed (`email`, `nif`, `licensePlateNumber`).
        field: &'static str,
    },
    /// No user with that id.
    #[error("user {0} not found")]
    UserNotFound(i64),
    /// The account was closed by its customer (its data is gone; the id stays taken).
    #[error("account {0} is closed")]
    AccountClosed(i64),
    /// Some users of a batch do not exist.
    #[error("users not found: {0:?}")]
    UsersNotFound(Vec<i64>),
    /// The user has three vehicles already.
    #[error("a user has at most 3 vehicles")]
    TooManyVehicles,
    /// A deduction would take a balance below zero.
    #[error("the balance of user {0} would drop below zero")]
    InsufficientBalance(i64),
    /// The account is not a customer's (only a customer's status is set, and only a customer
    /// closes their account, here).
    #[error("user {0} is not a customer: only customers are blocked, unblocked or closed")]
    NotACustomer(i64),
    /// No customer has the invitation code a registration gave.
    #[error("no customer has the invitation code {0}")]
    UnknownInvitation(String),
    /// The idempotency key was used before for another request.
    #[error("this Idempotency-Key was used for another request; send a new key")]
    IdempotencyKeyReused,
    /// Anything else (a bug or a schema problem); details are logged, not sent to clients.
    #[error("database error: {0}")]
    Internal(String),
}

impl StoreError {
    /// True for failures of the database rather than of the request.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// The users service's database: the kit's [`Db`] and the users queries on it ([`users`],
/// [`seed`]).
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

impl Store {
    /// Builds the pool without connecting: the first query (or [`Store::migrate`]) connects, and
    /// a database that is down is an error of that query, never of start-up.
    ///
    /// # Errors
    /// [`DbError::BadUrl`](pms_service::store::DbError::BadUrl) for an unsupported or malformed URL.
    pub fn open(config: &StoreConfig) -> Result<Self, pms_service::store::DbError> {
        Ok(Self {
            db: Db::open(config)?,
        })
    }

    /// Brings the schema up to date.
    ///
    /// # Errors
    /// When the database is unreachable or a migration fails.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        Ok(self.db.migrate(MIGRATIONS).await?)
    }

    /// The kit's handle (for the outbox and the event consumer).
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// See [`Db::warm`].
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the database cannot be reached.
    pub async fn warm(&self) -> Result<u32, StoreError> {
        Ok(self.db.warm().await?)
    }

    /// See [`Db::ping`].
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when it is not answering.
    pub async fn ping(&self) -> Result<(), StoreError> {
        Ok(self.db.ping().await?)
    }
}

/// The schema, per backend: every file of `migrations/sqlite` and `migrations/postgres`, in
/// order (a test checks the lists against the directories).
const MIGRATIONS: pms_service::store::Migrations = pms_service::migrations!(
    "0001_users.sql",
    "0002_events.sql",
    "0003_coins_and_snapshot.sql",
    "0004_login_failures.sql",
    "0005_broker_positions.sql",
    "0006_idempotency_keys.sql",
    "0007_outbox_retention.sql",
    "0008_status_reason.sql",
    "0009_audit.sql",
    "0010_coin_awards.sql",
    "0011_invitations.sql",
    "0012_closed_accounts.sql",
    "0013_outbox_erasures.sql"
);
pms_service::migrations_test!(MIGRATIONS);

impl From<pms_service::store::DbError> for StoreError {
    fn from(e: pms_service::store::DbError) -> Self {
        use pms_service::store::DbError as D;
        match e {
            D::BadUrl(u) => Self::BadUrl(u),
            D::Unavailable(m) => Self::Unavailable(m),
            D::Internal(m) => Self::Internal(m),
        }
    }
}

impl pool::Outcome for StoreError {
    fn breaks_connection(&self) -> bool {
        // Broken sockets and shutting-down servers are classified as unavailable.
        self.is_unavailable()
    }
}

/// Runs `op` again while it loses lock races (see the kit's `retry_transient`), then maps the
/// outcome to a [`StoreError`].
pub(crate) async fn retry_transient<T, F, Fut>(op: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
{
    pms_service::store::retry_transient::<T, sqlx::Error, _, _>(op)
        .await
        .map_err(db_error)
}

/// Maps a sqlx error to what the API says about it.
pub(crate) fn classify(e: &sqlx::Error) -> StoreError {
    if pms_service::store::is_unavailable(e) {
        return StoreError::Unavailable(pms_service::store::unavailable_reason(e));
    }
    if let Some(what) = pms_service::store::unique_violation(e) {
        let field = if what.contains("email") {
            "email"
        } else if what.contains("nif") {
            "nif"
        } else if what.contains("plate") {
            "licensePlateNumber"
        } else {
            return StoreError::Internal(what);
        };
        return StoreError::Conflict { field };
    }
    match e.as_database_error() {
        Some(db) => StoreError::Internal(db.message().to_owned()),
        None => StoreError::Internal(e.to_string()),
    }
}

/// [`classify`] for `map_err`.
pub(crate) fn db_error(e: sqlx::Error) -> StoreError {
    classify(&e)
}
