//! A producer's outbox: the handle a service keeps to wake its consumers after a commit, and
//! what consumers read from it (in order, after a position). Writing is [`crate::conn`]'s
//! `append`, inside the service's own transaction.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pms_service::store::{Backend, Db, DbError, Pools};
use pms_service::{repeatable, transaction_in};
use tokio::sync::Notify;

use crate::conn::{OUTBOX_LOCK_KEY, PG_SETTLE};
use crate::event::Event;

/// The read of events after `$1`, oldest first, at most `$2`.
const READ: &str =
    "SELECT id, aggregate_type, aggregate_id, event_type, version, payload, created_at \
     FROM outbox WHERE id > $1 ORDER BY id LIMIT $2";

/// How long a reader waits, one pause after another, for a hole in the ids to fill before it
/// settles it under the outbox lock: an append in flight commits within a few milliseconds,
/// while a rolled-back one leaves its hole for good.
const HOLE_WAITS: [Duration; 5] = [
    Duration::from_millis(1),
    Duration::from_millis(2),
    Duration::from_millis(4),
    Duration::from_millis(8),
    Duration::from_millis(16),
];

/// How long a reader settling holes waits for the outbox lock. Appends that ask for it
/// meanwhile queue behind the reader, so this bounds how long a reader can hold them up.
const SETTLE_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '100ms'";

/// An outbox row as [`READ`] returns it on both backends: id, aggregate type, aggregate id,
/// event type, version, payload, time.
type OutboxRow = (i64, String, String, String, i64, String, String);

/// The events in `rows` of `source`'s outbox, read in id order after `after`: each one's `prev`
/// is the one before it, the first one's `after` (a reader passes no id that may still commit,
/// so what lies between never committed).
fn events_of(source: &str, after: i64, rows: Vec<OutboxRow>) -> Vec<Event> {
    let mut prev = after;
    rows.into_iter()
        .map(|row| {
            let (id, aggregate_type, aggregate_id, event_type, version, payload, created_at) = row;
            let event = Event {
                id,
                prev,
                source: source.to_owned(),
                aggregate_type,
                aggregate_id,
                event_type,
                version,
                // A payload that is not JSON is kept as a string, for the consumer to park with
                // a reason rather than to stop on.
                payload: serde_json::from_str(&payload)
                    .unwrap_or(serde_json::Value::String(payload)),
                created_at,
            };
            prev = id;
            event
        })
        .collect()
}

/// The first id after `after` that `events` (read in order after it) leave out, if any
/// event comes after one. Ids at or below `pruned` may be missing for good
/// ([`crate::retention`]): they are no holes.
fn holes_from(after: i64, pruned: i64, events: &[Event]) -> Option<i64> {
    events
        .iter()
        .filter(|e| e.id > pruned)
        .zip(after.max(pruned) + 1..)
        .find(|(e, expected)| e.id != *expected)
        .map(|(_, expected)| expected)
}

/// PostgreSQL gave up waiting for a lock (`lock_timeout`).
fn is_lock_timeout(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some("55P03"))
}

/// One service's outbox: its database and the bell its consumers listen to. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Outbox {
    /// The producing service's name (`users`, `parks`, `payments`).
    pub source: &'static str,
    db: Db,
    wake: Arc<Notify>,
    holes: Arc<Holes>,
    pruned: Arc<Pruned>,
}

/// How far this outbox was pruned, as this process last knew it, when it last asked the
/// database, and how many events this process's pruner deleted.
#[derive(Debug, Default)]
struct Pruned {
    through: AtomicI64,
    deleted: AtomicU64,
    asked: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How often at most a reader that meets a hole asks the database how far another process
/// pruned. Holes are common on PostgreSQL (ids drawn by transactions still running) and almost
/// never pruned ones, which only appear below events a week old; asking at every hole cost a
/// round trip per read under load. A pruned hole met between two asks is waited out and settled
/// as any other, so nothing is lost by asking less often.
const PRUNED_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Holes in the ids that this process's readers of one outbox could not wait out and settled
/// under the lock, or found the lock busy and left for a later read.
#[derive(Debug, Default)]
struct Holes {
    settled: AtomicU64,
    unsettled: AtomicU64,
}

impl Outbox {
    /// The outbox in `db`, written by `source`.
    pub fn new(source: &'static str, db: Db) -> Self {
        Self {
            source,
            db,
            wake: Arc::new(Notify::new()),
            holes: Arc::default(),
            pruned: Arc::default(),
        }
    }

    /// The database the outbox is in.
    pub fn db(&self) -> &Db {
        &self.db
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

    /// How many holes in the ids readers in this process settled under the outbox lock, and how
    /// many times they found the lock held too long and read up to the hole instead
    /// ([`Outbox::read_after`]): both stay near zero unless appends roll back or stall.
    pub fn holes(&self) -> (u64, u64) {
        (
            self.holes.settled.load(Ordering::Relaxed),
            self.holes.unsettled.load(Ordering::Relaxed),
        )
    }

    /// The pruner deleted `deleted` events, the last `through`.
    pub(crate) fn pruned(&self, through: i64, deleted: u64) {
        self.pruned.through.fetch_max(through, Ordering::Relaxed);
        self.pruned.deleted.fetch_add(deleted, Ordering::Relaxed);
    }

    /// How many events this process's pruner deleted from the outbox ([`crate::retention`]).
    pub fn pruned_events(&self) -> u64 {
        self.pruned.deleted.load(Ordering::Relaxed)
    }

    /// How far the outbox was pruned: as known here, or from the database when `fresh`
    /// (another process may have pruned since) and it was not asked in the last
    /// [`PRUNED_RECHECK`].
    async fn pruned_through(&self, fresh: bool) -> Result<i64, sqlx::Error> {
        if fresh && self.time_to_ask() {
            let through = crate::retention::pruned_through(&self.db).await?;
            self.pruned.through.fetch_max(through, Ordering::Relaxed);
        }
        Ok(self.pruned.through.load(Ordering::Relaxed))
    }

    /// Whether the database's pruned mark is due to be asked again; if so, notes the ask.
    fn time_to_ask(&self) -> bool {
        let mut asked = self
            .pruned
            .asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let due = asked.is_none_or(|at| at.elapsed() >= PRUNED_RECHECK);
        if due {
            *asked = Some(std::time::Instant::now());
        }
        due
    }

    /// Up to `limit` events after `after`, oldest first, with no id left out that may still
    /// commit: a consumer can apply them and record the last one's id as its position.
    ///
    /// On PostgreSQL ids are drawn when an event is appended, not when it commits, so a read can
    /// find a hole (id 7 missing while 8 is there): either a transaction that drew 7 is still
    /// running, or it rolled back and 7 never comes. The read waits a little for holes to fill
    /// (`HOLE_WAITS`), then settles what is left under the outbox lock
    /// ([`crate::conn`]): every append holds that lock shared from before it draws its id until
    /// its transaction ends, so once the reader holds it alone no id it sees can still change.
    /// It waits for the lock at most 100 ms (`SETTLE_LOCK_TIMEOUT`), so appends are never held up
    /// longer than that; without the lock it returns what lies before the first hole.
    /// SQLite has one writer at a time: what a reader sees there is settled. Ids the pruner
    /// deleted are no holes ([`crate::retention`]).
    ///
    /// # Errors
    /// When the producer's database is unavailable.
    pub async fn read_after(&self, after: i64, limit: i64) -> Result<Vec<Event>, DbError> {
        let mut events = self.read_visible(after, limit).await?;
        if self.db.backend() == Backend::Sqlite {
            return Ok(events);
        }
        let mut pruned = self
            .pruned_through(false)
            .await
            .map_err(|e| DbError::of(&e))?;
        if holes_from(after, pruned, &events).is_some() {
            // Perhaps pruned by another process: ask once before waiting.
            pruned = self
                .pruned_through(true)
                .await
                .map_err(|e| DbError::of(&e))?;
        }
        for wait in HOLE_WAITS {
            if holes_from(after, pruned, &events).is_none() {
                return Ok(events);
            }
            tokio::time::sleep(wait).await;
            events = self.read_visible(after, limit).await?;
        }
        let Some(hole) = holes_from(after, pruned, &events) else {
            return Ok(events);
        };
        match self.read_settled(after, limit).await {
            Ok(settled) => {
                self.holes.settled.fetch_add(1, Ordering::Relaxed);
                Ok(settled)
            }
            Err(e) if is_lock_timeout(&e) => {
                self.holes.unsettled.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    source = self.source,
                    hole,
                    "outbox hole not settled: appends hold the lock"
                );
                events.retain(|e| e.id < hole);
                Ok(events)
            }
            Err(e) => Err(DbError::of(&e)),
        }
    }

    /// Up to `limit` events after `after` as they are visible now, holes and all (for a gauge's
    /// glance; consumers use [`Outbox::read_after`]).
    ///
    /// # Errors
    /// When the producer's database is unavailable.
    pub async fn read_visible(&self, after: i64, limit: i64) -> Result<Vec<Event>, DbError> {
        let rows = repeatable!(self.db, |conn| sqlx::query_as::<_, OutboxRow>(READ)
            .bind(after)
            .bind(limit)
            .fetch_all(&mut *conn)
            .await)
        .map_err(|e| DbError::of(&e))?;
        Ok(events_of(self.source, after, rows))
    }

    /// PostgreSQL: the read under the outbox lock held alone (see [`Outbox::read_after`]).
    async fn read_settled(&self, after: i64, limit: i64) -> Result<Vec<Event>, sqlx::Error> {
        let Pools::Postgres(pool) = self.db.pools() else {
            return Err(sqlx::Error::Protocol(
                "settling holes is for PostgreSQL".into(),
            ));
        };
        let rows: Result<Vec<OutboxRow>, sqlx::Error> = transaction_in!(pool, |tx| {
            sqlx::query(SETTLE_LOCK_TIMEOUT).execute(&mut *tx).await?;
            sqlx::query(PG_SETTLE)
                .bind(OUTBOX_LOCK_KEY)
                .execute(&mut *tx)
                .await?;
            let rows = sqlx::query_as(READ)
                .bind(after)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
            Ok::<_, sqlx::Error>(rows)
        });
        Ok(events_of(self.source, after, rows?))
    }

    /// The id up to which the relay has published the outbox (0 before the first): every event
    /// at or below it is on the broker, and the relay reads on after it. The relay publishes in
    /// id order what [`Outbox::read_after`] returns, so the published ids have no gap that an
    /// event may still fill.
    ///
    /// # Errors
    /// When the database is unavailable.
    pub async fn published_through(&self) -> Result<i64, DbError> {
        let published = repeatable!(self.db, |conn| sqlx::query_scalar::<_, Option<i64>>(
            "SELECT MAX(id) FROM outbox WHERE published_at IS NOT NULL"
        )
        .fetch_one(&mut *conn)
        .await)
        .map_err(|e| DbError::of(&e))?;
        // The pruner deletes only what the relay noted as published: what it deleted was.
        let pruned = self
            .pruned_through(true)
            .await
            .map_err(|e| DbError::of(&e))?;
        Ok(published.unwrap_or(0).max(pruned))
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
    /// for each). The relay read them with [`Outbox::read_after`], so an id in that range it did
    /// not see never commits.
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
        let newest = repeatable!(self.db, |conn| sqlx::query_scalar::<_, Option<i64>>(
            "SELECT MAX(id) FROM outbox"
        )
        .fetch_one(&mut *conn)
        .await)
        .map_err(|e| DbError::of(&e))?;
        // Pruning may have deleted the newest events too.
        let pruned = self
            .pruned_through(false)
            .await
            .map_err(|e| DbError::of(&e))?;
        Ok(newest.unwrap_or(0).max(pruned))
    }
}

#[cfg(test)]
mod tests;
