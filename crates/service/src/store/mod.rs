//! A service's database handle: one [`Db`] over SQLite (the embedded default) or PostgreSQL,
//! chosen by the URL, and the mechanics every service's queries share.
//!
//! What it owns: the connection pool and its per-connection settings, running a service's
//! migrations (one directory per backend, the same tables and names in both), telling a database
//! that is away from a request the database refused ([`is_unavailable`]), and running again a
//! transaction that lost a lock race ([`retry_transient`]). What it must not do: any service's
//! queries, or map a constraint to an API field (each service's own store does that).
//!
//! One set of queries serves both backends: all placeholders are `$N`, which SQLite accepts too.
//! Each query is written once and compiled once per backend ([`with_pool!`](crate::with_pool)),
//! so it runs on that backend's own driver. A service may write a hot path once more for one
//! backend ([`repeatable_in!`](crate::repeatable_in)) where a measurement says so: the parks
//! service's barrier calls are one statement on PostgreSQL, where every statement is a round
//! trip, and the same tests run both forms. (Until 2026-11 the users service used sqlx's `Any`
//! driver, which converts every row into its own representation first, an allocation per text
//! column: about 8 % of the service's CPU under load.)
//!
//! Layout: [`pool`] keeps the connections; [`error`] classifies failures for a service's API;
//! the macros below run query code on them.

pub mod error;
pub mod pool;
pub mod scripts;

pub use self::error::{retry, NoRefusal, Refusal, StoreError};
pub use self::scripts::Script;

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};

use self::pool::{Conn, Pool, PoolOptions, Pooled};

/// Evaluates `$body` with `$pool` bound to `$db`'s pool: a `&Pool<PgConnection>` or a
/// `&Pool<SqliteConnection>`. `$db` is anything with a `pools()` method ([`Db`], or a service's
/// store that derefs to one). The body is written once and compiled for each backend, so
/// everything it does with a connection (queries, rows, transactions) has that backend's types;
/// it must evaluate to the same type for both.
#[macro_export]
macro_rules! with_pool {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $db.pools() {
            $crate::store::Pools::Postgres($pool) => $body,
            $crate::store::Pools::Sqlite($pool) => $body,
        }
    };
}

/// Runs `$body` with `$conn` (a `&mut PgConnection` or `&mut SqliteConnection` from `$db`'s
/// pool, see [`with_pool!`]), hands the connection back by how the body ended, and evaluates to
/// the body's `Result<_, sqlx::Error>`. A body that failed because a connection taken from the
/// idle list was broken (the database restarted since it was last used) runs once more on a new
/// connection. Only for bodies that are safe to run twice: reads, and single statements that set
/// columns to given values (whether or not the first try reached the database, the second leaves
/// the same row). Never for inserts, increments or transactions; those use [`retry_transient`]
/// or nothing.
#[macro_export]
macro_rules! repeatable {
    ($db:expr, |$conn:ident| $body:expr) => {
        $crate::with_pool!($db, |pool| $crate::repeatable_in!(pool, |$conn| $body))
    };
}

/// [`repeatable!`] on one backend's pool (`&Pool<PgConnection>` or `&Pool<SqliteConnection>`),
/// for code written for that backend alone. The body's error type implements
/// [`pool::Outcome`] (`sqlx::Error`, a service's `StoreError`).
#[macro_export]
macro_rules! repeatable_in {
    ($pool:expr, |$conn:ident| $body:expr) => {{
        let pool = $pool;
        let mut may_retry = true;
        loop {
            let mut pooled = match pool.get().await {
                Ok(c) => c,
                Err(e) => break Err(::core::convert::From::from(e)),
            };
            let reused = pooled.reused();
            let result = {
                let $conn = &mut *pooled;
                $body
            };
            let broken = matches!(&result, Err(e) if $crate::store::pool::Outcome::breaks_connection(e));
            let result = pooled.settle(result);
            if broken && reused && std::mem::take(&mut may_retry) {
                continue;
            }
            break result;
        }
    }};
}

/// Runs `$body` with `$conn` (a `&mut Conn<_>` from `$db`'s pool, see [`with_pool!`]) and hands
/// the connection back by how the body's `Result<_, sqlx::Error>` ended; without a connection,
/// the enclosing function returns the pool's error (converted with `?`). For transactions, which
/// run again through [`retry_transient`] rather than here.
#[macro_export]
macro_rules! on_conn {
    ($db:expr, |$conn:ident| $body:expr) => {
        $crate::with_pool!($db, |pool| {
            let mut pooled = pool.get().await?;
            let done = {
                let $conn = &mut pooled;
                $body
            };
            pooled.settle(done)
        })
    };
}

/// Runs `$body` in a transaction on a connection from `$db`'s pool (see [`with_pool!`]), with
/// `$tx` bound to the transaction (it derefs to the backend's connection). The body evaluates to
/// a `Result<T, E>` where `E: From<sqlx::Error>` and [`pool::Outcome`]: on `Ok` the
/// transaction commits, on `Err` it rolls back, and the macro evaluates to the same `Result`. A
/// `return` in the body ends the body alone: `return Ok(v)` commits, `return Err(e)` rolls back.
/// A connection found broken at `BEGIN` is marked for [`retry_transient`] (see [`begin`]). On
/// SQLite the transaction first waits for the pool's turn to write ([`pool::Pool::get_to_write`]),
/// so a transaction must not open another one inside its body.
#[macro_export]
macro_rules! transaction {
    ($db:expr, |$tx:ident| $body:expr) => {
        $crate::with_pool!($db, |pool| $crate::transaction_in!(pool, |$tx| $body))
    };
}

/// [`transaction!`] on one backend's pool (`&Pool<PgConnection>` or `&Pool<SqliteConnection>`),
/// for code written for that backend alone.
#[macro_export]
macro_rules! transaction_in {
    ($pool:expr, |$tx:ident| $body:expr) => {
        match $pool.get_to_write().await {
            Err(e) => Err(::core::convert::From::from(e)),
            Ok(mut pooled) => {
                let done = async {
                    #[allow(unused_mut)]
                    let mut $tx = $crate::store::begin(&mut pooled).await?;
                    // In a block of its own, so that a `return Ok(…)` in the body commits
                    // (it would skip the commit, and the transaction would roll back).
                    let value = async { $body }.await?;
                    $tx.commit().await?;
                    Ok(value)
                }
                .await;
                pooled.settle(done)
            }
        }
    };
}

/// Default pool size.
pub const DEFAULT_POOL_SIZE: u32 = 8;
/// Default number of connections opened at start and kept open: one, so the first request does
/// not wait for a connection to be set up. The pool grows on demand up to its size.
pub const DEFAULT_MIN_CONNECTIONS: u32 = 1;
/// Default time to wait for a pooled connection (and to connect) before answering 503.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);
/// Default per-statement time limit.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How many times a transaction that lost a lock race (deadlock, serialization failure, SQLite
/// busy) is run again before the failure is reported.
const TRANSIENT_RETRIES: u32 = 5;

/// Which database a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite:` URLs: a file (WAL mode, foreign keys on).
    Sqlite,
    /// `postgres:` / `postgresql:` URLs.
    Postgres,
}

impl Backend {
    /// The backend a URL names, if supported.
    pub fn of_url(url: &str) -> Option<Self> {
        let scheme = url.split_once(':')?.0.to_ascii_lowercase();
        match scheme.as_str() {
            "sqlite" => Some(Self::Sqlite),
            "postgres" | "postgresql" => Some(Self::Postgres),
            _ => None,
        }
    }
}

/// How to reach the database.
#[derive(Clone)]
pub struct StoreConfig {
    /// `sqlite://PATH?mode=rwc` or `postgres://USER@HOST:PORT/DB`.
    pub url: String,
    /// Most open connections.
    pub pool_size: u32,
    /// Connections opened ahead of use and kept open (at most `pool_size`), so that the first
    /// requests after start do not each wait for a database connection to be set up.
    pub min_connections: u32,
    /// Time to wait for a connection.
    pub acquire_timeout: Duration,
    /// Per-statement limit (PostgreSQL `statement_timeout`; SQLite's lock wait).
    pub statement_timeout: Duration,
    /// PostgreSQL only: the schema the service's tables live in (created by [`Db::migrate`]
    /// when missing), so several services can share one database, each in its own schema.
    /// `None`: the database's default (`public`).
    pub schema: Option<String>,
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("url", &redact_url(&self.url))
            .field("pool_size", &self.pool_size)
            .field("min_connections", &self.min_connections)
            .finish_non_exhaustive()
    }
}

impl StoreConfig {
    /// Defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            pool_size: DEFAULT_POOL_SIZE,
            min_connections: DEFAULT_MIN_CONNECTIONS,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            schema: None,
        }
    }

    /// The same, in PostgreSQL schema `schema` (ignored for SQLite).
    pub fn in_schema(mut self, schema: &str) -> Self {
        self.schema = Some(schema.to_owned());
        self
    }

    /// A SQLite file, created when missing.
    pub fn sqlite_file(path: &std::path::Path) -> Self {
        Self::new(format!("sqlite://{}?mode=rwc", path.display()))
    }
}

/// A URL with any password replaced by `***`, for logs and errors.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Why a database handle could not be built or a migration failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DbError {
    /// The URL names no supported database, or does not parse.
    #[error("unsupported or malformed database URL {0:?} (expected sqlite:… or postgres:…)")]
    BadUrl(String),
    /// The database cannot be reached, is shutting down, or timed out.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Anything else (a bug or a schema problem).
    #[error("database error: {0}")]
    Internal(String),
}

impl DbError {
    /// True for failures of the database rather than of the request.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    /// [`DbError::Unavailable`] for an unreachable database, else [`DbError::Internal`].
    pub fn of(e: &sqlx::Error) -> Self {
        if is_unavailable(e) {
            Self::Unavailable(unavailable_reason(e))
        } else {
            Self::Internal(e.to_string())
        }
    }
}

/// One service's database: a pool of connections to one SQLite file or PostgreSQL database.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct Db {
    pools: Pools,
    schema: Option<String>,
}

/// The pool, typed by backend (see [`with_pool!`](crate::with_pool)).
#[derive(Debug, Clone)]
pub enum Pools {
    /// `postgres:` URLs.
    Postgres(Pool<PgConnection>),
    /// `sqlite:` URLs.
    Sqlite(Pool<SqliteConnection>),
}

/// The PostgreSQL advisory lock a service's first-start seeding takes inside its transaction,
/// so replicas starting at once seed one after another: the first writes the demo data, the
/// others then find it there (SQLite serializes writers by itself).
pub const SEED_LOCK_KEY: i64 = 0x504d_535f_5344; // "PMS_SD"

/// A service's migrations, one directory per backend (`migrations/sqlite` and
/// `migrations/postgres`, each listed with [`migration_scripts!`](crate::migration_scripts)),
/// defining the same tables.
#[derive(Debug, Clone, Copy)]
pub struct Migrations {
    /// For SQLite files.
    pub sqlite: &'static [Script],
    /// For PostgreSQL.
    pub postgres: &'static [Script],
}

impl Migrations {
    /// Checks both lists against `migrations/sqlite` and `migrations/postgres` under a crate's
    /// manifest directory (see [`Script::matches_directory`]). For each service's tests.
    ///
    /// # Errors
    /// What differs, in words.
    pub async fn match_directories(&self, manifest_dir: &str) -> Result<(), String> {
        let root = std::path::Path::new(manifest_dir).join("migrations");
        Script::matches_directory(self.sqlite, &root.join("sqlite")).await?;
        Script::matches_directory(self.postgres, &root.join("postgres")).await
    }

    /// [`Migrations::match_directories`] for a test: panics with what differs.
    ///
    /// # Panics
    /// When a list and its directory differ.
    pub async fn assert_match_directories(&self, manifest_dir: &str) {
        if let Err(e) = self.match_directories(manifest_dir).await {
            panic!("{e}");
        }
    }
}

/// A service's [`Migrations`]: the same script files, in order, under `migrations/sqlite` and
/// `migrations/postgres` of the calling crate, compiled in.
#[macro_export]
macro_rules! migrations {
    ($($file:literal),+ $(,)?) => {
        $crate::store::Migrations {
            sqlite: $crate::migration_scripts!("migrations/sqlite", $($file),+),
            postgres: $crate::migration_scripts!("migrations/postgres", $($file),+),
        }
    };
}

/// A test that a service's [`Migrations`] list every file of its `migrations/sqlite` and
/// `migrations/postgres`, in order (a script added to a directory but not to the list would
/// never run).
#[macro_export]
macro_rules! migrations_test {
    ($migrations:ident) => {
        #[cfg(test)]
        mod migrations_listed {
            #[tokio::test]
            async fn the_compiled_in_migrations_are_the_directories_files() {
                super::$migrations
                    .assert_match_directories(env!("CARGO_MANIFEST_DIR"))
                    .await;
            }
        }
    };
}

impl Db {
    /// Builds the pool without connecting: the first query (or [`Db::migrate`]) connects, and
    /// a database that is down is an error of that query, never of start-up.
    ///
    /// # Errors
    /// [`DbError::BadUrl`] for an unsupported or malformed URL.
    pub fn open(config: &StoreConfig) -> Result<Self, DbError> {
        let bad_url = || DbError::BadUrl(redact_url(&config.url));
        let backend = Backend::of_url(&config.url).ok_or_else(bad_url)?;
        let statement_timeout = config.statement_timeout.max(Duration::from_millis(1));
        let pools = match backend {
            Backend::Sqlite => {
                let connect: SqliteConnectOptions = config.url.parse().map_err(|_| bad_url())?;
                let connect = connect
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .foreign_keys(true)
                    .busy_timeout(statement_timeout);
                Pools::Sqlite(Pool::new(pool_options(config, connect)))
            }
            Backend::Postgres => {
                let connect: PgConnectOptions = config.url.parse().map_err(|_| bad_url())?;
                let mut connect = connect.options([(
                    "statement_timeout",
                    statement_timeout.as_millis().to_string(),
                )]);
                if let Some(schema) = &config.schema {
                    if !valid_schema(schema) {
                        return Err(DbError::BadUrl(format!("schema {schema:?}")));
                    }
                    connect = connect.options([("search_path", schema.as_str())]);
                }
                Pools::Postgres(Pool::new(pool_options(config, connect)))
            }
        };
        let schema = match backend {
            Backend::Postgres => config.schema.clone(),
            Backend::Sqlite => None,
        };
        Ok(Self { pools, schema })
    }

    /// The pool, for [`with_pool!`](crate::with_pool) and friends.
    pub fn pools(&self) -> &Pools {
        &self.pools
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        match self.pools {
            Pools::Postgres(_) => Backend::Postgres,
            Pools::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// Brings the schema up to date. Safe when several replicas start at once: on PostgreSQL,
    /// sqlx holds an advisory lock while it migrates.
    ///
    /// # Errors
    /// When the database is unreachable ([`DbError::Unavailable`]) or a migration fails.
    pub async fn migrate(&self, migrations: Migrations) -> Result<(), DbError> {
        if let Some(schema) = &self.schema {
            let create = format!("CREATE SCHEMA IF NOT EXISTS {schema}");
            let made: Result<(), sqlx::Error> = repeatable!(self, |conn| sqlx::query(&create)
                .execute(conn)
                .await
                .map(|_| ()));
            match made {
                Ok(()) => {}
                // Another replica made it at the same moment: `IF NOT EXISTS` looks before it
                // inserts, so of two racing sessions one trips over the other's new row.
                Err(sqlx::Error::Database(e))
                    if matches!(e.code().as_deref(), Some("23505" | "42P06")) => {}
                Err(e) => return Err(DbError::of(&e)),
            }
        }
        let outcome = with_pool!(self, |pool| {
            let scripts = match self.backend() {
                Backend::Sqlite => migrations.sqlite,
                Backend::Postgres => migrations.postgres,
            };
            let migrator = Script::migrator(scripts)
                .await
                .map_err(|e| DbError::Internal(format!("migration scripts: {e}")))?;
            let mut conn = pool.get().await.map_err(|e| DbError::of(&e))?;
            let outcome = migrator.run_direct(&mut *conn).await;
            if outcome.is_ok() {
                conn.keep();
            }
            outcome
        });
        match outcome {
            Ok(()) => Ok(()),
            Err(sqlx::migrate::MigrateError::Execute(e)) => Err(DbError::of(&e)),
            Err(other) => Err(DbError::Internal(other.to_string())),
        }
    }

    /// Opens the pool's minimum of connections now rather than on the first requests (a
    /// PostgreSQL connection costs a server process and a few round trips, several ms), and
    /// returns how many the pool holds.
    ///
    /// # Errors
    /// [`DbError::Unavailable`] when the database cannot be reached.
    pub async fn warm(&self) -> Result<u32, DbError> {
        with_pool!(self, |pool| pool.warm().await).map_err(|e| DbError::of(&e))
    }

    /// Connections open right now, idle or in use.
    pub fn connections(&self) -> u32 {
        with_pool!(self, |pool| pool.size())
    }

    /// One trivial query: is the database answering?
    ///
    /// # Errors
    /// [`DbError::Unavailable`] when it is not.
    pub async fn ping(&self) -> Result<(), DbError> {
        repeatable!(self, |conn| sqlx::query("SELECT 1")
            .execute(conn)
            .await
            .map(|_| ()))
        .map_err(|e| DbError::of(&e))
    }

    /// Closes every connection.
    pub async fn close(&self) {
        with_pool!(self, |pool| pool.close().await);
    }
}

/// A schema name safe to put in SQL unquoted: lower-case letters, digits and `_`, starting with a
/// letter.
fn valid_schema(name: &str) -> bool {
    name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The pool settings of `config`, for connections made with `connect`.
fn pool_options<C: Pooled>(config: &StoreConfig, connect: C::Options) -> PoolOptions<C> {
    PoolOptions {
        connect,
        max: config.pool_size,
        min: config.min_connections,
        acquire_timeout: config.acquire_timeout,
    }
}

/// Runs `op` again while it fails with a lock-race error ([`is_transient`]), a bounded number of
/// times, backing off a little more each time. The last error is returned as it is, for the
/// service to classify.
///
/// # Errors
/// `op`'s error once it is not transient, or when the retries are spent.
pub async fn retry_transient<T, E, F, Fut>(mut op: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: Transient + std::fmt::Display,
{
    let mut attempt = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_transient() && attempt < TRANSIENT_RETRIES => {
                attempt += 1;
                tracing::debug!(error = %e, attempt, "retrying a transaction that lost a lock race");
                tokio::time::sleep(Duration::from_millis(5 << attempt)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// An error that may say "lost a lock race; run it again" ([`is_transient`]).
pub trait Transient {
    /// Whether running the same work again may succeed.
    fn is_transient(&self) -> bool;
}

impl Transient for sqlx::Error {
    fn is_transient(&self) -> bool {
        is_transient(self)
    }
}

/// The mark [`begin`] puts on a connection found broken at `BEGIN`.
#[derive(Debug, thiserror::Error)]
#[error("a pooled connection was broken before the transaction began: {0}")]
struct BrokenAtBegin(String);

/// `BEGIN` (SQLite: `BEGIN IMMEDIATE`, see [`Pooled::BEGIN`]) on a pooled connection. A connection taken from the idle list that turns out broken
/// here (the database restarted while it sat idle) has sent nothing of the transaction, so the
/// error is marked for [`retry_transient`] to run the transaction again. It stays an I/O error,
/// so it still closes the connection (and every idle one with it: the next attempt opens a new
/// connection) and still means "unavailable" if the next attempt fails too.
///
/// # Errors
/// When `BEGIN` fails.
pub async fn begin<C: Pooled>(
    conn: &mut Conn<C>,
) -> Result<sqlx::Transaction<'_, C::Database>, sqlx::Error> {
    let reused = conn.reused();
    match sqlx::Connection::begin_with(&mut **conn, C::BEGIN).await {
        Err(e) if reused && pool::Outcome::breaks_connection(&e) => {
            Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                BrokenAtBegin(e.to_string()),
            )))
        }
        other => other,
    }
}

/// Deadlock, serialization failure, SQLite's busy/locked, or a broken connection found at
/// `BEGIN` ([`begin`]).
pub fn is_transient(e: &sqlx::Error) -> bool {
    if let sqlx::Error::Io(io) = e {
        return io
            .get_ref()
            .is_some_and(|inner| inner.is::<BrokenAtBegin>());
    }
    let Some(db) = e.as_database_error() else {
        return false;
    };
    matches!(
        db.code().as_deref(),
        Some("40P01" | "40001" | "5" | "6" | "261" | "262" | "517")
    )
}

/// True when `e` says the database is away rather than that it refused the request: no
/// connection, a broken socket, a server shutting down, a statement timeout, exhausted
/// resources, or a lock race still lost after the retries.
pub fn is_unavailable(e: &sqlx::Error) -> bool {
    use sqlx::Error as E;
    match e {
        E::PoolTimedOut | E::PoolClosed | E::Io(_) | E::Tls(_) | E::WorkerCrashed => true,
        E::Database(db) => {
            let code = db.code();
            let code = code.as_deref().unwrap_or("");
            // Class 08 connection exceptions, 57 operator intervention (shutdown, statement
            // timeout), 53 insufficient resources; SQLite busy/locked once retries are spent.
            code.starts_with("08")
                || code.starts_with("57")
                || code.starts_with("53")
                || is_transient(e)
        }
        _ => false,
    }
}

/// What to say about an [`is_unavailable`] error: the server's message, or the client's error.
pub fn unavailable_reason(e: &sqlx::Error) -> String {
    match e.as_database_error() {
        Some(db) => db.message().to_owned(),
        None => e.to_string(),
    }
}

/// True when `e` is a CHECK constraint failure whose constraint or message mentions `column`.
pub fn is_check_on(e: &sqlx::Error, column: &str) -> bool {
    e.as_database_error().is_some_and(|db| {
        db.kind() == sqlx::error::ErrorKind::CheckViolation
            && (db.constraint().is_some_and(|c| c.contains(column))
                || db.message().contains(column))
    })
}

/// When `e` is a unique-constraint violation: the constraint's name and the server's message,
/// for the service to say which field clashed.
pub fn unique_violation(e: &sqlx::Error) -> Option<String> {
    let db = e.as_database_error()?;
    (db.kind() == sqlx::error::ErrorKind::UniqueViolation)
        .then(|| format!("{} {}", db.constraint().unwrap_or(""), db.message()))
}

/// When `e` is a violation of a rule across rows other than uniqueness: PostgreSQL's exclusion
/// constraints, and SQLite's triggers that stand in for them (`RAISE(ABORT, '<name>: …')`).
/// The constraint's name and the server's message, as [`unique_violation`] gives them.
pub fn exclusion_violation(e: &sqlx::Error) -> Option<String> {
    /// PostgreSQL's `exclusion_violation`, SQLite's `SQLITE_CONSTRAINT_TRIGGER`.
    const CODES: [&str; 2] = ["23P01", "1811"];
    let db = e.as_database_error()?;
    db.code()
        .is_some_and(|c| CODES.contains(&c.as_ref()))
        .then(|| format!("{} {}", db.constraint().unwrap_or(""), db.message()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_come_from_the_scheme() {
        assert_eq!(
            Backend::of_url("sqlite://x.db?mode=rwc"),
            Some(Backend::Sqlite)
        );
        assert_eq!(
            Backend::of_url("postgres://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(
            Backend::of_url("postgresql://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(Backend::of_url("mysql://u@h/db"), None);
        assert_eq!(Backend::of_url("nonsense"), None);
        assert!(matches!(
            Db::open(&StoreConfig::new("mysql://u@h/db")),
            Err(DbError::BadUrl(_))
        ));
    }

    /// The settings each new connection gets from its connect options: a time limit per
    /// statement (PostgreSQL) or per lock wait (SQLite), WAL and foreign keys (SQLite).
    #[tokio::test]
    async fn connections_carry_their_settings() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cfg = StoreConfig::sqlite_file(&dir.path().join("settings.db"));
        cfg.statement_timeout = Duration::from_millis(1234);
        let db = Db::open(&cfg).expect("sqlite store");
        let pragmas: Result<(String, i64, i64), sqlx::Error> = repeatable!(db, |conn| async {
            let mode = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(&mut *conn)
                .await?;
            let busy = sqlx::query_scalar("PRAGMA busy_timeout")
                .fetch_one(&mut *conn)
                .await?;
            let fk = sqlx::query_scalar("PRAGMA foreign_keys")
                .fetch_one(&mut *conn)
                .await?;
            Ok((mode, busy, fk))
        }
        .await);
        assert_eq!(pragmas.expect("pragmas"), ("wal".to_owned(), 1234, 1));

        if pms_testkit::pg::skipped() {
            return;
        }
        let mut cfg = StoreConfig::new(pms_testkit::pg::shared().fresh_database());
        cfg.statement_timeout = Duration::from_millis(1234);
        let db = Db::open(&cfg).expect("postgres store");
        let shown: Result<String, sqlx::Error> =
            repeatable!(db, |conn| sqlx::query_scalar("SHOW statement_timeout")
                .fetch_one(conn)
                .await);
        assert_eq!(shown.expect("SHOW"), "1234ms");
    }

    /// SQLite's write transactions take turns in the pool: one that starts while another holds
    /// the file's write lock for longer than the lock wait (the busy timeout) waits for its turn
    /// and commits, where SQLite's busy handler alone would give up with "database is locked".
    /// And the turns go in arrival order.
    #[tokio::test]
    async fn a_transaction_body_that_returns_early_commits_with_ok_and_rolls_back_with_err() {
        for postgres in [false, true] {
            let dir = tempfile::tempdir().expect("temp dir");
            let Some(url) = pms_testkit::pg::test_database(postgres, dir.path(), "early.db") else {
                continue;
            };
            let db = Db::open(&StoreConfig::new(url)).expect("store");
            let made: Result<(), sqlx::Error> = transaction!(db, |tx| {
                sqlx::query("CREATE TABLE kept (n BIGINT)")
                    .execute(&mut *tx)
                    .await
                    .map(|_| ())
            });
            made.expect("table");
            for (n, keep) in [(1_i64, true), (2, false)] {
                let r: Result<i64, sqlx::Error> = transaction!(db, |tx| {
                    sqlx::query("INSERT INTO kept (n) VALUES ($1)")
                        .bind(n)
                        .execute(&mut *tx)
                        .await?;
                    if keep {
                        return Ok(n);
                    }
                    Err(sqlx::Error::RowNotFound)
                });
                assert_eq!(r.is_ok(), keep);
            }
            let kept: Result<Vec<i64>, sqlx::Error> = repeatable!(db, |conn| {
                sqlx::query_scalar("SELECT n FROM kept")
                    .fetch_all(&mut *conn)
                    .await
            });
            assert_eq!(kept.expect("read"), vec![1], "postgres: {postgres}");
        }
    }

    #[tokio::test]
    async fn sqlite_writers_wait_their_turn_in_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cfg = StoreConfig::sqlite_file(&dir.path().join("turns.db"));
        cfg.statement_timeout = Duration::from_millis(20);
        let db = Db::open(&cfg).expect("sqlite store");
        let made: Result<(), sqlx::Error> = transaction!(db, |tx| {
            sqlx::query("CREATE TABLE turns (n INTEGER PRIMARY KEY AUTOINCREMENT, who TEXT)")
                .execute(&mut *tx)
                .await
                .map(|_| ())
        });
        made.expect("table");

        // The first writer holds the write lock until told to finish.
        let (finish, finished) = tokio::sync::oneshot::channel::<()>();
        let (holding, held) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let db = db.clone();
            tokio::spawn(async move {
                let r: Result<(), sqlx::Error> = transaction!(db, |tx| async {
                    sqlx::query("INSERT INTO turns (who) VALUES ('first')")
                        .execute(&mut *tx)
                        .await?;
                    let _ = holding.send(());
                    let _ = finished.await;
                    Ok::<(), sqlx::Error>(())
                }
                .await);
                r
            })
        };
        held.await.expect("the first writer holds the lock");
        // Five more ask in a known order, each after the one before is waiting.
        let mut later = Vec::new();
        for i in 0..5 {
            let db = db.clone();
            later.push(tokio::spawn(async move {
                let r: Result<(), sqlx::Error> = transaction!(db, |tx| {
                    sqlx::query("INSERT INTO turns (who) VALUES ($1)")
                        .bind(format!("later {i}"))
                        .execute(&mut *tx)
                        .await
                        .map(|_| ())
                });
                r
            }));
            // The test's runtime has one thread: the new task runs when this one yields, up to
            // where it waits for its turn, so the writers queue in the order they were made.
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
        }
        // Long past the 20 ms lock wait, so that writers without turns would have given up.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = finish.send(());
        first.await.expect("first").expect("the first commits");
        for (i, t) in later.into_iter().enumerate() {
            t.await
                .expect("task")
                .unwrap_or_else(|e| panic!("writer {i} waited its turn and committed: {e}"));
        }
        let order: Result<Vec<String>, sqlx::Error> = repeatable!(db, |conn| {
            sqlx::query_scalar("SELECT who FROM turns ORDER BY n")
                .fetch_all(conn)
                .await
        });
        let expected: Vec<String> = std::iter::once("first".to_owned())
            .chain((0..5).map(|i| format!("later {i}")))
            .collect();
        assert_eq!(order.expect("rows"), expected, "turns in arrival order");
    }

    static TEST_SQLITE: &[Script] =
        crate::migration_scripts!("src/store/test-migrations/sqlite", "0001_replicas.sql");
    static TEST_POSTGRES: &[Script] =
        crate::migration_scripts!("src/store/test-migrations/postgres", "0001_replicas.sql");

    /// Replicas of a service starting at once against a new database, each with its own pool,
    /// all come up and the schema is made once.
    #[tokio::test]
    async fn replicas_starting_at_once_all_migrate_and_the_schema_is_made_once() {
        if pms_testkit::pg::skipped() {
            return;
        }
        let url = pms_testkit::pg::shared().fresh_database();
        let replicas: Vec<Db> = (0..8)
            .map(|_| Db::open(&StoreConfig::new(url.clone()).in_schema("replicated")))
            .collect::<Result<_, _>>()
            .expect("pools");
        let migrations = Migrations {
            sqlite: TEST_SQLITE,
            postgres: TEST_POSTGRES,
        };
        let outcomes =
            futures_util::future::join_all(replicas.iter().map(|db| db.migrate(migrations))).await;
        for outcome in outcomes {
            outcome.expect("every replica migrates");
        }
        let applied: Result<i64, sqlx::Error> = repeatable!(replicas[0], |conn| {
            sqlx::query_scalar("SELECT count(*) FROM replicated._sqlx_migrations")
                .fetch_one(conn)
                .await
        });
        assert_eq!(applied.expect("count"), 1);
    }

    #[test]
    fn passwords_never_reach_logs() {
        assert_eq!(
            redact_url("postgres://pms:s3cret@127.0.0.1:5432/pms"),
            "postgres://pms:***@127.0.0.1:5432/pms"
        );
        assert_eq!(redact_url("postgres://pms@h/db"), "postgres://pms@h/db");
        assert_eq!(redact_url("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db");
        let cfg = StoreConfig::new("postgres://a:b@h/db");
        assert!(!format!("{cfg:?}").contains(":b@"));
    }
}
