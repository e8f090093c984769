//! Events a consumer set aside because it could not apply them (an unknown version, a payload
//! of another shape, a visit that could not be priced, events that never came from the broker):
//! listing them for a person, and trying one again once its cause is fixed.
//!
//! Trying again sets the consumer's position back to just before the event and forgets the
//! entry, in one transaction: the consumer then applies that event and every later one again,
//! in order. Handlers are idempotent per event ([`crate::position::rewind`]), so what was
//! applied before is not applied twice, and the event's effects cannot overtake later events of
//! the same thing (a customer's older details never overwrite newer ones, as applying the one
//! event alone could). An event that still cannot be applied is set aside again, with the new
//! reason and time. An entry for events that never came sets the position back to before the
//! first of them, so they are fetched again.
//!
//! Each consuming service shows its own to supervisors with the same two endpoints
//! ([`SetAside`]: `GET /{service}/events/parked`,
//! `POST /{service}/events/parked/{source}/{eventId}/retry`), and the front office gathers them
//! on one page.

use http::StatusCode;
use pms_service::http::{json, Answer};
use pms_service::store::Db;
use pms_service::{repeatable, transaction, ApiError};
use serde::Serialize;
use utoipa::ToSchema;

use crate::position::MISSING;

pub mod endpoints;

pub use self::endpoints::SetAside;

/// Most entries [`list`] returns.
pub const MOST_LISTED: i64 = 500;

/// One event set aside.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Parked {
    /// The consumer that set it aside (the consuming service).
    pub consumer: String,
    /// The producing service.
    pub source: String,
    /// Its id in the producer's outbox.
    pub event_id: i64,
    /// What happened (`visit.closed`, …; `missing` for events that never came).
    pub event_type: String,
    /// The payload's schema version.
    pub version: i64,
    /// Why it could not be applied.
    pub reason: String,
    /// When it was set aside (RFC 3339, UTC).
    pub parked_at: String,
    /// The details, as they came.
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
}

/// A retry as answered: the consumer goes on from `fromPosition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryStarted {
    /// The consumer (the consuming service).
    pub consumer: String,
    /// The producing service.
    pub source: String,
    /// The event tried again.
    pub event_id: i64,
    /// The position the consumer reads on from: this event and every later one are applied
    /// again, in order.
    pub from_position: i64,
}

/// `consumer`'s set-aside events as a JSON answer.
///
/// # Errors
/// 503 when the database does not answer.
pub async fn listed(db: &Db, consumer: &str) -> Answer {
    let parked = list(db, consumer).await.map_err(ApiError::unavailable)?;
    Ok(json(StatusCode::OK, &parked))
}

/// Tries an event again ([`retry`]) for the user `by` and answers 200 with [`RetryStarted`].
///
/// # Errors
/// 404 `event_not_found` when no such event is set aside; 503 when the database does not
/// answer.
pub async fn retried(db: &Db, consumer: &str, source: &str, event_id: i64, by: i64) -> Answer {
    match retry(db, consumer, source, event_id).await {
        Ok(from_position) => {
            tracing::warn!(
                consumer,
                source,
                event_id,
                by,
                from_position,
                "a supervisor tried a set-aside event again: its events are applied again from there"
            );
            Ok(json(
                StatusCode::OK,
                &RetryStarted {
                    consumer: consumer.to_owned(),
                    source: source.to_owned(),
                    event_id,
                    from_position,
                },
            ))
        }
        Err(e @ RetryError::NotFound { .. }) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "event_not_found",
            e.to_string(),
        )),
        Err(RetryError::Db(e)) => Err(ApiError::unavailable(e)),
    }
}

/// Why an entry could not be tried again.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    /// No such entry (never set aside, or tried again already).
    #[error("no event {event_id} of {source_name} is set aside")]
    NotFound {
        /// The producing service asked for.
        source_name: String,
        /// The event id asked for.
        event_id: i64,
    },
    /// The database did not answer.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// The events `consumer` has set aside, oldest first, at most [`MOST_LISTED`].
///
/// # Errors
/// When the database is unavailable.
pub async fn list(db: &Db, consumer: &str) -> Result<Vec<Parked>, sqlx::Error> {
    type Row = (String, String, i64, String, i64, String, String, String);
    let rows: Vec<Row> = repeatable!(db, |conn| sqlx::query_as(
        "SELECT consumer, source, event_id, event_type, version, reason, parked_at, payload \
         FROM parked_events WHERE consumer = $1 ORDER BY parked_at, source, event_id LIMIT $2"
    )
    .bind(consumer)
    .bind(MOST_LISTED)
    .fetch_all(&mut *conn)
    .await)?;
    Ok(rows
        .into_iter()
        .map(
            |(consumer, source, event_id, event_type, version, reason, parked_at, payload)| {
                Parked {
                    consumer,
                    source,
                    event_id,
                    event_type,
                    version,
                    reason,
                    parked_at,
                    payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
                }
            },
        )
        .collect())
}

/// Where trying the set-aside entry `event_id` (of type `event_type`, payload `payload`) again
/// sets its consumer's position back to: just before the event, or for a `missing` entry, which
/// stands for the events after its `after` up to its own id, to that `after`.
pub(crate) fn rewinds_to(event_id: i64, event_type: &str, payload: &str) -> i64 {
    let before = if event_type == MISSING {
        serde_json::from_str::<serde_json::Value>(payload)
            .ok()
            .and_then(|p| p["after"].as_i64())
            .unwrap_or(event_id - 1)
    } else {
        event_id - 1
    };
    before.max(0)
}

/// Tries event `event_id` of `source` again for `consumer`: forgets the entry and sets the
/// position back to just before it (never forward), in one transaction. Returns the position
/// the consumer goes on from.
///
/// # Errors
/// [`RetryError::NotFound`] when no such event is set aside; database failures.
pub async fn retry(
    db: &Db,
    consumer: &str,
    source: &str,
    event_id: i64,
) -> Result<i64, RetryError> {
    let done: Result<Option<i64>, sqlx::Error> = transaction!(db, |tx| {
        let found: Option<(String, String)> = sqlx::query_as(
            "DELETE FROM parked_events WHERE consumer = $1 AND source = $2 AND event_id = $3 \
             RETURNING event_type, payload",
        )
        .bind(consumer)
        .bind(source)
        .bind(event_id)
        .fetch_optional(&mut *tx)
        .await?;
        match found {
            None => Ok::<_, sqlx::Error>(None),
            Some((event_type, payload)) => {
                let before = rewinds_to(event_id, &event_type, &payload);
                let now = crate::conn::now();
                let position: i64 = sqlx::query_scalar(
                    "UPDATE event_positions SET position = $1, updated_at = $2, broker_seq = NULL \
                     WHERE consumer = $3 AND source = $4 AND position > $1 RETURNING position",
                )
                .bind(before)
                .bind(&now)
                .bind(consumer)
                .bind(source)
                .fetch_optional(&mut *tx)
                .await?
                .unwrap_or(before);
                Ok(Some(position))
            }
        }
    });
    let position = done?.ok_or_else(|| RetryError::NotFound {
        source_name: source.to_owned(),
        event_id,
    })?;
    Ok(position)
}

#[cfg(test)]
mod tests;
