//! A consumer's position in one producer's events (`event_positions`): the id of the last event
//! it applied, skipped or set aside. Everything at or below it is done; the next event is the
//! one whose `prev` the position reaches ([`crate::Event::prev`]).
//!
//! The position only moves forward by compare and set ([`Applied`], `EventConn::record_position`),
//! in the transaction that applies the events: two replicas of a service that both received an
//! event, or a replica still applying while a replay sets the position back, cannot both move it,
//! so nothing is applied twice. The loser's transaction rolls back and its consumer reads the
//! position again. Only a replay ([`rewind`]) moves it back.
//!
//! Beside the position, a broker consumer keeps a hint of where in the broker's stream to resume
//! (`broker_seq`): the stream sequence of a message at or before its position. It is written
//! after commits and may lag; what it lets through again is recognised by the position and
//! skipped.

use pms_service::{repeatable, transaction};

use crate::conn::EventConn;
use crate::event::Event;
use pms_service::store::Db;

/// What one transaction of a consumer applies (or skips, or sets aside): one producer's events
/// from the one after `prev` up to `last`, the first of them `first`. Small and `Copy`; a
/// service's store takes it to record the position with its effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied<'a> {
    /// The producing service.
    pub source: &'a str,
    /// The id before the first event (its [`Event::prev`]).
    pub prev: i64,
    /// The first event's id.
    pub first: i64,
    /// The last event's id: the position afterwards.
    pub last: i64,
}

impl<'a> Applied<'a> {
    /// `event` alone.
    pub fn one(event: &'a Event) -> Self {
        Self::run(event, event)
    }

    /// The events from `first` to `last` of one producer, in order.
    pub fn run(first: &'a Event, last: &'a Event) -> Self {
        Self {
            source: &first.source,
            prev: first.prev,
            first: first.id,
            last: last.id,
        }
    }

    /// Why `consumer`'s position could not move past these events.
    pub(crate) fn elsewhere(&self, consumer: &str) -> sqlx::Error {
        sqlx::Error::InvalidArgument(format!(
            "{consumer}'s position in {}'s events {MOVED} {} (between {} and {}): another \
             replica applied it, or a replay set the position back",
            self.source, self.first, self.prev, self.first
        ))
    }
}

/// The words that mark [`Applied::elsewhere`]'s error.
const MOVED: &str = "no longer lies just before event";

/// Whether `e` is the refusal of `EventConn::record_position` (the position stood elsewhere).
pub fn moved_elsewhere(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::InvalidArgument(m) if m.contains(MOVED))
}

/// `consumer`'s position in `source`'s events (0 before the first).
///
/// # Errors
/// When the database is unavailable.
pub async fn position(db: &Db, consumer: &str, source: &str) -> Result<i64, sqlx::Error> {
    Ok(broker_position(db, consumer, source).await?.0)
}

/// `consumer`'s position in `source`'s events and its hint of where to resume in the broker's
/// stream (the stream sequence of a message at or before the position; `None` to read the
/// stream from its start).
///
/// # Errors
/// When the database is unavailable.
pub async fn broker_position(
    db: &Db,
    consumer: &str,
    source: &str,
) -> Result<(i64, Option<u64>), sqlx::Error> {
    let row: Option<(i64, Option<i64>)> = repeatable!(db, |conn| sqlx::query_as(
        "SELECT position, broker_seq FROM event_positions WHERE consumer = $1 AND source = $2"
    )
    .bind(consumer)
    .bind(source)
    .fetch_optional(&mut *conn)
    .await)?;
    Ok(row.map_or((0, None), |(position, seq)| {
        (position, seq.and_then(|s| u64::try_from(s).ok()))
    }))
}

/// Notes that the broker's message `seq` carried an event at or before `position`, if the
/// position is still there (a replay that set it back meanwhile keeps its own hint).
///
/// # Errors
/// When the database is unavailable.
pub async fn note_broker_seq(
    db: &Db,
    consumer: &str,
    source: &str,
    position: i64,
    seq: u64,
) -> Result<(), sqlx::Error> {
    let seq = i64::try_from(seq).unwrap_or(i64::MAX);
    repeatable!(db, |conn| sqlx::query(
        "UPDATE event_positions SET broker_seq = $1 \
         WHERE consumer = $2 AND source = $3 AND position = $4"
    )
    .bind(seq)
    .bind(consumer)
    .bind(source)
    .bind(position)
    .execute(&mut *conn)
    .await
    .map(|_| ()))
}

/// Moves the position past `applied` in a transaction of its own (events the consumer skips).
///
/// # Errors
/// When the database is unavailable, or the position stood elsewhere.
pub(crate) async fn record(
    db: &Db,
    consumer: &str,
    applied: Applied<'_>,
) -> Result<(), sqlx::Error> {
    transaction!(db, |tx| tx.record_position(consumer, applied).await)
}

/// Keeps `event`, which `consumer` cannot apply, for a person to look at, and moves past it, in
/// one transaction.
///
/// # Errors
/// When the database is unavailable, or the position stood elsewhere.
pub(crate) async fn park(
    db: &Db,
    consumer: &str,
    event: &Event,
    reason: &str,
) -> Result<(), sqlx::Error> {
    let done: Result<(), sqlx::Error> = transaction!(db, |tx| {
        tx.park(consumer, event, reason).await?;
        tx.record_position(consumer, Applied::one(event)).await
    });
    done?;
    tracing::error!(consumer, source = %event.source, id = event.id, event_type = %event.event_type, %reason, "event parked");
    Ok(())
}

/// Sets aside, for `consumer`, the events of `event`'s producer that should lie between
/// position `at` and `event` but never came (`event.prev` lies past `at`), and moves the
/// position to `event.prev`, in one transaction: a parked entry of type `missing` names the ids
/// and how to fetch them again, for a person to see; the metric and the log say so too.
///
/// # Errors
/// When the database is unavailable, or the position stood elsewhere.
pub(crate) async fn set_aside_missing(
    db: &Db,
    consumer: &str,
    event: &Event,
    at: i64,
) -> Result<(), sqlx::Error> {
    let missing = Event {
        id: event.prev,
        prev: at,
        event_type: MISSING.to_owned(),
        version: 1,
        payload: serde_json::json!({"after": at, "through": event.prev, "before": event.id}),
        ..event.clone()
    };
    let reason = format!(
        "events after {at} up to {} of {} never came from the broker (event {} names {} as the one \
         before it); apply them again with pms events replay --consumer {consumer} --source {} --from {}",
        event.prev,
        event.source,
        event.id,
        event.prev,
        event.source,
        at + 1
    );
    let done: Result<(), sqlx::Error> = transaction!(db, |tx| {
        tx.park(consumer, &missing, &reason).await?;
        tx.record_position(
            consumer,
            Applied {
                source: &event.source,
                prev: at,
                first: at + 1,
                last: event.prev,
            },
        )
        .await
    });
    done?;
    tracing::error!(consumer, source = %event.source, after = at, through = event.prev, %reason, "events missing from the broker");
    Ok(())
}

/// The `event_type` of a parked entry that stands for events that never came.
pub const MISSING: &str = "missing";

/// Sets `consumer`'s position in `source`'s events back (or forward) to `position`, so the
/// events after it are applied again: for `pms events replay`. The broker hint goes with it, so
/// a broker consumer reads the stream from its start again. Handlers are idempotent per event
/// (their effects are keyed by the event's subject), so a replay converges.
///
/// # Errors
/// When the database is unavailable.
pub async fn rewind(
    db: &Db,
    consumer: &str,
    source: &str,
    position: i64,
) -> Result<(), sqlx::Error> {
    let now = crate::conn::now();
    repeatable!(db, |conn| {
        sqlx::query(
        "INSERT INTO event_positions (consumer, source, position, updated_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (consumer, source) DO UPDATE \
         SET position = excluded.position, updated_at = excluded.updated_at, broker_seq = NULL"
    )
    .bind(consumer)
    .bind(source)
    .bind(position.max(0))
    .bind(&now)
    .execute(&mut *conn)
    .await
    .map(|_| ())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{pair, Backend};

    fn events(ids: &[i64], after: i64) -> Vec<Event> {
        let mut prev = after;
        ids.iter()
            .map(|&id| {
                let e = Event {
                    id,
                    prev,
                    source: "producer".into(),
                    aggregate_type: "thing".into(),
                    aggregate_id: "x".into(),
                    event_type: "thing.named".into(),
                    version: 1,
                    payload: serde_json::Value::Null,
                    created_at: String::new(),
                };
                prev = id;
                e
            })
            .collect()
    }

    /// The position moves past events only from just before them: not twice, not over events
    /// it never saw, not from where a replay left it unless from there.
    #[tokio::test]
    async fn the_position_moves_only_from_just_before_the_events() {
        for backend in [Backend::Sqlite, Backend::Postgres] {
            let Some(pair) = pair(backend).await else {
                continue;
            };
            let db = &pair.consumer;
            let first = events(&[1, 2, 3], 0);
            let run = Applied::run(&first[0], &first[2]);
            record(db, "c", run).await.expect("from the start");
            assert_eq!(position(db, "c", "producer").await.expect("read"), 3);
            let again = record(db, "c", run).await.expect_err("twice");
            assert!(moved_elsewhere(&again), "{again}");
            // Event 5 after a hole at 4 (never committed): its prev is 3.
            let next = events(&[5], 3);
            record(db, "c", Applied::one(&next[0]))
                .await
                .expect("past the hole");
            // Event 9 names 8 before it: 6 to 8 were never seen here.
            let over = events(&[9], 8);
            assert!(record(db, "c", Applied::one(&over[0])).await.is_err());
            assert_eq!(position(db, "c", "producer").await.expect("read"), 5);
            // A replay sets it back to 2: a reader still at 5 cannot move it on.
            rewind(db, "c", "producer", 2).await.expect("rewind");
            let stale = events(&[6], 5);
            assert!(record(db, "c", Applied::one(&stale[0])).await.is_err());
            let replayed = events(&[3, 5], 2);
            record(db, "c", Applied::run(&replayed[0], &replayed[1]))
                .await
                .expect("from where the replay left it");
            assert_eq!(position(db, "c", "producer").await.expect("read"), 5);
            // The broker hint follows only the position it was noted at.
            note_broker_seq(db, "c", "producer", 4, 40)
                .await
                .expect("note");
            assert_eq!(
                broker_position(db, "c", "producer").await.expect("read"),
                (5, None)
            );
            note_broker_seq(db, "c", "producer", 5, 50)
                .await
                .expect("note");
            assert_eq!(
                broker_position(db, "c", "producer").await.expect("read"),
                (5, Some(50))
            );
            rewind(db, "c", "producer", 1).await.expect("rewind");
            assert_eq!(
                broker_position(db, "c", "producer").await.expect("read"),
                (1, None),
                "{backend:?}: a replay reads the stream from its start"
            );
        }
    }
}
