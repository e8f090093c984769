//! A producer's outbox: the handle a service keeps to wake its consumers after a commit, and
//! what consumers read from it (in order, after a position). Writing is [`crate::conn`]'s
//! `append`, inside the service's own transaction.

use std::sync::Arc;

use pms_service::repeatable;
use pms_service::store::{Db, DbError};
use sqlx::Row;
use tokio::sync::Notify;

use crate::event::Event;

/// One service's outbox: its database and the bell its consumers listen to. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Outbox {
    /// The producing service's name (`users`, `parks`, `payments`).
    pub source: &'static str,
    db: Db,
    wake: Arc<Notify>,
}

impl Outbox {
    /// The outbox in `db`, written by `source`.
    pub fn new(source: &'static str, db: Db) -> Self {
        Self {
            source,
            db,
            wake: Arc::new(Notify::new()),
        }
    }

    /// Tells waiting consumers that events were committed. Call it after the commit; a consumer
    /// that misses it reads at its next poll.
    pub fn committed(&self) {
        self.wake.notify_waiters();
    }

    /// The bell, for a consumer to wait on.
    pub fn bell(&self) -> Arc<Notify> {
        Arc::clone(&self.wake)
    }

    /// Up to `limit` events after `after`, oldest first.
    ///
    /// # Errors
    /// When the producer's database is unavailable.
    pub async fn read_after(&self, after: i64, limit: i64) -> Result<Vec<Event>, DbError> {
        let rows = repeatable!(self.db, |conn| {
            sqlx::query(
            "SELECT id, aggregate_type, aggregate_id, event_type, version, payload, created_at \
             FROM outbox WHERE id > $1 ORDER BY id LIMIT $2"
        )
        .bind(after)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await
        .and_then(|rows| {
            rows.iter()
                .map(|r| {
                    let payload: String = r.try_get(5)?;
                    Ok(Event {
                        id: r.try_get(0)?,
                        source: self.source.to_owned(),
                        aggregate_type: r.try_get(1)?,
                        aggregate_id: r.try_get(2)?,
                        event_type: r.try_get(3)?,
                        version: r.try_get(4)?,
                        // A payload that is not JSON is kept as a string, for the consumer to
                        // park with a reason rather than to stop on.
                        payload: serde_json::from_str(&payload)
                            .unwrap_or(serde_json::Value::String(payload)),
                        created_at: r.try_get(6)?,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()
        })
        })
        .map_err(|e| DbError::of(&e))?;
        Ok(rows)
    }

    /// Up to `limit` events not yet published to the broker, oldest first (for the relay).
    ///
    /// # Errors
    /// When the database is unavailable.
    pub async fn unpublished(&self, limit: i64) -> Result<Vec<Event>, DbError> {
        let after: i64 = repeatable!(self.db, |conn| sqlx::query_scalar::<_, Option<i64>>(
            "SELECT MIN(id) - 1 FROM outbox WHERE published_at IS NULL"
        )
        .fetch_one(&mut *conn)
        .await)
        .map_err(|e| DbError::of(&e))?
        .unwrap_or(i64::MAX);
        if after == i64::MAX {
            return Ok(Vec::new());
        }
        self.read_after(after, limit).await
    }

    /// How many events are not yet published to the broker (the relay's backlog).
    ///
    /// # Errors
    /// When the database is unavailable.
    pub async fn backlog(&self) -> Result<i64, DbError> {
        repeatable!(self.db, |conn| sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM outbox WHERE published_at IS NULL"
        )
        .fetch_one(&mut *conn)
        .await)
        .map_err(|e| DbError::of(&e))
    }

    /// Marks the events `first..=last` published (the relay has the broker's acknowledgement
    /// for each). Ids commit in order, so no unpublished row in that range was missed.
    ///
    /// # Errors
    /// When the database is unavailable.
    pub async fn mark_published(&self, first: i64, last: i64) -> Result<(), DbError> {
        let now = crate::conn::now();
        repeatable!(self.db, |conn| sqlx::query(
            "UPDATE outbox SET published_at = $1 WHERE id BETWEEN $2 AND $3 AND published_at IS NULL"
        )
        .bind(&now)
        .bind(first)
        .bind(last)
        .execute(&mut *conn)
        .await
        .map(|_| ()))
        .map_err(|e| DbError::of(&e))
    }

    /// The newest event's id (0 when there is none): what a consumer's lag is measured against.
    ///
    /// # Errors
    /// When the producer's database is unavailable.
    pub async fn head(&self) -> Result<i64, DbError> {
        repeatable!(self.db, |conn| sqlx::query_scalar::<_, Option<i64>>(
            "SELECT MAX(id) FROM outbox"
        )
        .fetch_one(&mut *conn)
        .await)
        .map(|v| v.unwrap_or(0))
        .map_err(|e| DbError::of(&e))
    }
}
