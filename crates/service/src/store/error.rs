//! The failures a domain service's store reports, in the terms its API answers with: the
//! database is away (503), a thing is not there (404), a domain rule refused inside a
//! transaction that was rolled back, a lock race lost (run it again), or a bug (500). A service
//! names its own refusals (`R`) and which constraint means which ([`Refusal::from_constraint`]);
//! everything else is classified here once.

use super::{
    exclusion_violation, is_check_on, is_transient, is_unavailable, unavailable_reason,
    unique_violation,
};
use super::{pool, DbError, Transient};

/// A service's domain refusals.
pub trait Refusal: std::fmt::Debug + Clone + PartialEq + Eq + Send + Sync + 'static {
    /// The refusal a violated unique, exclusion or CHECK constraint stands for (its name and
    /// the server's message are in `what`), if it stands for one.
    fn from_constraint(what: &str) -> Option<Self>;

    /// How the API states this refusal (409 with the refusal's code and message, usually).
    fn answer(&self) -> crate::ApiError;
}

/// For services without refusals of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRefusal {}

impl Refusal for NoRefusal {
    fn from_constraint(_: &str) -> Option<Self> {
        None
    }

    fn answer(&self) -> crate::ApiError {
        match *self {}
    }
}

/// What went wrong in a service's store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError<R: Refusal = NoRefusal> {
    /// The URL names no supported database, or does not parse.
    #[error("unsupported or malformed database URL {0:?} (expected sqlite:… or postgres:…)")]
    BadUrl(String),
    /// The database cannot be reached, is shutting down, or timed out.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// No such thing.
    #[error("{what} {id} not found")]
    NotFound {
        /// What was looked for (`park`, `invoice`, …).
        what: &'static str,
        /// Which one.
        id: String,
    },
    /// A domain rule refused, inside a transaction that is rolled back.
    #[error("refused: {0:?}")]
    Refused(R),
    /// The request conflicts with what is stored (a number taken, a spot with a car in it):
    /// nothing was changed. Answered 409 with `reason` as its code and `message` as its text.
    #[error("{message}")]
    Conflict {
        /// The error code (`park_number_taken`, …).
        reason: &'static str,
        /// The body field at fault, if one is.
        field: Option<&'static str>,
        /// What conflicts, for the caller.
        message: String,
    },
    /// A lock race lost; the transaction may run again.
    #[error("lost a lock race: {0}")]
    Transient(String),
    /// Anything else (a bug or a schema problem); details are logged, not sent to clients.
    #[error("database error: {0}")]
    Internal(String),
}

impl<R: Refusal> StoreError<R> {
    /// `what` `id` does not exist.
    pub fn not_found(what: &'static str, id: impl ToString) -> Self {
        Self::NotFound {
            what,
            id: id.to_string(),
        }
    }

    /// A bug or bad data, with what it was.
    pub fn internal(detail: impl ToString) -> Self {
        Self::Internal(detail.to_string())
    }

    /// The request conflicts with what is stored, as `reason` says (see [`StoreError::Conflict`]).
    pub fn conflict(reason: &'static str, message: impl Into<String>) -> Self {
        Self::Conflict {
            reason,
            field: None,
            message: message.into(),
        }
    }

    /// True for failures of the database rather than of the request.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

impl<R: Refusal> From<sqlx::Error> for StoreError<R> {
    fn from(e: sqlx::Error) -> Self {
        if is_transient(&e) {
            return Self::Transient(e.to_string());
        }
        if is_unavailable(&e) {
            return Self::Unavailable(unavailable_reason(&e));
        }
        let constraint = unique_violation(&e)
            .or_else(|| exclusion_violation(&e))
            .or_else(|| {
                let db = e.as_database_error()?;
                is_check_on(&e, "")
                    .then(|| format!("{} {}", db.constraint().unwrap_or(""), db.message()))
            });
        if let Some(what) = constraint {
            return match R::from_constraint(&what) {
                Some(r) => Self::Refused(r),
                None => Self::Internal(what),
            };
        }
        match e.as_database_error() {
            Some(db) => Self::Internal(db.message().to_owned()),
            None => Self::Internal(e.to_string()),
        }
    }
}

impl<R: Refusal> From<DbError> for StoreError<R> {
    fn from(e: DbError) -> Self {
        match e {
            DbError::BadUrl(u) => Self::BadUrl(u),
            DbError::Unavailable(m) => Self::Unavailable(m),
            DbError::Internal(m) => Self::Internal(m),
        }
    }
}

impl<R: Refusal> pool::Outcome for StoreError<R> {
    fn breaks_connection(&self) -> bool {
        self.is_unavailable()
    }
}

impl<R: Refusal> Transient for StoreError<R> {
    fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }
}

/// Runs a transaction again while it loses lock races ([`super::retry_transient`]); one still
/// lost after the retries is reported as the database being unavailable.
///
/// # Errors
/// The transaction's error.
pub async fn retry<T, R, F, Fut>(op: F) -> Result<T, StoreError<R>>
where
    R: Refusal,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError<R>>>,
{
    match super::retry_transient(op).await {
        Err(StoreError::Transient(m)) => Err(StoreError::Unavailable(m)),
        other => other,
    }
}
