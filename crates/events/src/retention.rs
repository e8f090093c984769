//! Keeping an outbox bounded: every event a service writes stays in its outbox until every
//! reader of the outbox has passed it and it is older than the retention window; then the
//! pruner deletes it, if it is of a passing kind.
//!
//! - **Readers say how far they got** ([`acknowledge`]): each reader of an outbox (a consumer
//!   reading it in place, `Consumer::run`; the relay to the broker) notes in the producer's
//!   database (`outbox_readers`) the id through which it will never read the outbox again. A
//!   consumer's is its position, or the event before the oldest it set aside, whichever is lower
//!   ([`consumer_floor`]): trying a set-aside event again rewinds it to just before that event.
//!   The relay's is what the broker has acknowledged. Notes are written every few seconds
//!   ([`ACK_EVERY`]); a note that lags is lower than the truth, so it only keeps more.
//! - **Only passing events go** ([`Retention::passing`]): events that tell of something that
//!   happened once (a visit opened or closed, an invoice, a coins debit). Events that carry the
//!   state of something (a customer as they are now, every version of a price table) are kept,
//!   so a consumer that starts later, or a replica built from events, finds every customer and
//!   every price table still there.
//! - **Nothing is deleted that a known reader needs**: the pruner deletes at most through the
//!   lowest note; an outbox nobody has noted reading is never pruned. A reader that went away
//!   for good keeps everything after its note until it is forgotten (`pms events readers
//!   --forget`); `outbox_reader_behind_events{reader}` shows it.
//! - **How far it went is kept** (`outbox_pruned`, [`pruned_through`]): the ids at or below it
//!   may be missing for good, so a reader passes them without waiting, and the relay and the
//!   gauges never take the highest remaining id for the newest.
//!
//! Why delete at all: until 2026-12 nothing did, and a 15-minute soak at 1,000 barrier calls a
//! second left 1.35 M rows in the outboxes — disk without end on a site that runs for years,
//! and tables that autovacuum reads again and again (`docs/benchmark-history.md`).

use std::time::{Duration, Instant};

use pms_service::store::{Db, DbError};
use pms_service::{repeatable, transaction};

use crate::outbox::Outbox;

/// The retention window unless a service is told otherwise: a week of events to replay, tail
/// or read from the start.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often a reader notes how far it got, at most.
pub const ACK_EVERY: Duration = Duration::from_secs(5);
/// How often the pruner looks.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Most events deleted in one statement: a delete holds SQLite's one writer for its length.
const PRUNE_BATCH: i64 = 5_000;
/// The pause between two batches, for the writes waiting behind one.
const BATCH_PAUSE: Duration = Duration::from_millis(10);

/// What a service keeps of its outbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// How long an event every reader passed is kept after it was written.
    pub window: Duration,
    /// The event types that may go: what happened once, not the state of something.
    pub passing: &'static [&'static str],
}

/// A reader of an outbox and its note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reader {
    /// Its name: the consumer's, or `relay`.
    pub reader: String,
    /// It will not read the events at or below this id again.
    pub through: i64,
    /// When it noted so.
    pub updated_at: String,
}

/// The name the relay notes under.
pub const RELAY: &str = "relay";

/// Notes in `outbox`'s database that `reader` will not read the events at or below `through`
/// again.
///
/// # Errors
/// When the database is unavailable.
pub async fn acknowledge(outbox: &Outbox, reader: &str, through: i64) -> Result<(), DbError> {
    let now = crate::conn::now();
    repeatable!(outbox.db(), |conn| sqlx::query(
        "INSERT INTO outbox_readers (reader, through, updated_at) VALUES ($1, $2, $3) \
         ON CONFLICT (reader) DO UPDATE SET through = excluded.through, updated_at = excluded.updated_at"
    )
    .bind(reader)
    .bind(through.max(0))
    .bind(&now)
    .execute(&mut *conn)
    .await
    .map(|_| ()))
    .map_err(|e| DbError::of(&e))
}

/// The readers of `outbox` and their notes, by name.
///
/// # Errors
/// When the database is unavailable.
pub async fn readers(outbox: &Outbox) -> Result<Vec<Reader>, DbError> {
    let rows: Vec<(String, i64, String)> = repeatable!(outbox.db(), |conn| sqlx::query_as(
        "SELECT reader, through, updated_at FROM outbox_readers ORDER BY reader"
    )
    .fetch_all(&mut *conn)
    .await)
    .map_err(|e| DbError::of(&e))?;
    Ok(rows
        .into_iter()
        .map(|(reader, through, updated_at)| Reader {
            reader,
            through,
            updated_at,
        })
        .collect())
}

/// Forgets `reader` (one that went away for good), so its note no longer holds the events
/// after it. Returns whether there was such a reader.
///
/// # Errors
/// When the database is unavailable.
pub async fn forget(outbox: &Outbox, reader: &str) -> Result<bool, DbError> {
    repeatable!(outbox.db(), |conn| sqlx::query(
        "DELETE FROM outbox_readers WHERE reader = $1"
    )
    .bind(reader)
    .execute(&mut *conn)
    .await
    .map(|done| done.rows_affected() > 0))
    .map_err(|e| DbError::of(&e))
}

/// The id through which the outbox in `db` was pruned (0 before the first prune): ids at or
/// below it may be missing for good.
///
/// # Errors
/// When the database is unavailable.
pub async fn pruned_through(db: &Db) -> Result<i64, sqlx::Error> {
    repeatable!(db, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT through FROM outbox_pruned WHERE only_row = 1"
    )
    .fetch_optional(&mut *conn)
    .await)
    .map(Option::unwrap_or_default)
}

/// The id through which `consumer` (whose positions and set-aside events are in `db`) will not
/// read `source`'s outbox again: its position, or the id before the oldest event it set aside
/// (a retry rewinds to there), whichever is lower.
///
/// # Errors
/// When the consumer's database is unavailable.
pub async fn consumer_floor(db: &Db, consumer: &str, source: &str) -> Result<i64, sqlx::Error> {
    let position = crate::position::position(db, consumer, source).await?;
    let set_aside: Vec<(i64, String, String)> = repeatable!(db, |conn| sqlx::query_as(
        "SELECT event_id, event_type, payload FROM parked_events \
         WHERE consumer = $1 AND source = $2"
    )
    .bind(consumer)
    .bind(source)
    .fetch_all(&mut *conn)
    .await)?;
    Ok(set_aside
        .iter()
        .map(|(id, kind, payload)| crate::parked::rewinds_to(*id, kind, payload))
        .fold(position, i64::min)
        .max(0))
}

/// Deletes the passing events of `outbox` that every reader has passed and that were written
/// before `now - window`, oldest first, in batches; notes how far it went. Returns how many
/// went.
///
/// # Errors
/// When the database is unavailable (what was deleted before stays deleted, and noted).
pub async fn prune(
    outbox: &Outbox,
    retention: Retention,
    now: jiff::Timestamp,
) -> Result<u64, DbError> {
    let floor: Option<i64> = repeatable!(outbox.db(), |conn| sqlx::query_scalar(
        "SELECT MIN(through) FROM outbox_readers"
    )
    .fetch_one(&mut *conn)
    .await)
    .map_err(|e| DbError::of(&e))?;
    let (Some(floor), false) = (floor, retention.passing.is_empty()) else {
        return Ok(0);
    };
    let cutoff = window_start(now, retention.window);
    let kinds: Vec<String> = (0..retention.passing.len())
        .map(|i| format!("${}", i + 4))
        .collect();
    let delete = format!(
        "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox \
         WHERE id <= $1 AND created_at < $2 AND event_type IN ({}) ORDER BY id LIMIT $3) \
         RETURNING id",
        kinds.join(", ")
    );
    let mut total = 0;
    loop {
        let deleted = prune_batch(outbox, &delete, floor, &cutoff, retention.passing).await?;
        total += deleted;
        if deleted < PRUNE_BATCH as u64 {
            return Ok(total);
        }
        tokio::time::sleep(BATCH_PAUSE).await;
    }
}

/// The time before which events may go, in the outbox's text form (RFC 3339; the comparison
/// is of text, exact to the second, which is all a window of minutes or days needs).
fn window_start(now: jiff::Timestamp, window: Duration) -> String {
    let window = jiff::SignedDuration::try_from(window).unwrap_or(jiff::SignedDuration::MAX);
    now.checked_sub(window)
        .unwrap_or(jiff::Timestamp::MIN)
        .to_string()
}

/// One statement of [`prune`] and the note of how far it went, in one transaction.
async fn prune_batch(
    outbox: &Outbox,
    delete: &str,
    floor: i64,
    cutoff: &str,
    passing: &[&str],
) -> Result<u64, DbError> {
    let now = crate::conn::now();
    let done: Result<Vec<i64>, sqlx::Error> = transaction!(outbox.db(), |tx| {
        let mut query = sqlx::query_scalar(delete)
            .bind(floor)
            .bind(cutoff)
            .bind(PRUNE_BATCH);
        for kind in passing {
            query = query.bind(*kind);
        }
        let ids: Vec<i64> = query.fetch_all(&mut *tx).await?;
        if let Some(last) = ids.iter().max() {
            sqlx::query(
                "INSERT INTO outbox_pruned (only_row, through, pruned_at) VALUES (1, $1, $2) \
                 ON CONFLICT (only_row) DO UPDATE SET pruned_at = excluded.pruned_at, \
                 through = CASE WHEN excluded.through > outbox_pruned.through \
                 THEN excluded.through ELSE outbox_pruned.through END",
            )
            .bind(last)
            .bind(&now)
            .execute(&mut *tx)
            .await?;
        }
        Ok::<_, sqlx::Error>(ids)
    });
    let ids = done.map_err(|e| DbError::of(&e))?;
    if let Some(last) = ids.iter().max() {
        outbox.pruned(*last, ids.len() as u64);
    }
    Ok(ids.len() as u64)
}

/// Settles `outbox`'s erasures ([`crate::erasure::settle`]) and prunes it every minute until
/// `shutdown` holds `true`.
pub fn spawn(
    outbox: Outbox,
    retention: Retention,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => return,
                () = tokio::time::sleep(PRUNE_EVERY) => {}
            }
            match crate::erasure::settle(outbox.db()).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(
                    source = outbox.source,
                    rewritten = n,
                    "erased events rewritten"
                ),
                Err(e) => {
                    tracing::warn!(source = outbox.source, error = %e, "erasures not settled this time");
                }
            }
            match prune(&outbox, retention, jiff::Timestamp::now()).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(source = outbox.source, pruned = n, "outbox pruned"),
                Err(e) => {
                    tracing::warn!(source = outbox.source, error = %e, "outbox not pruned this time");
                }
            }
        }
    })
}

/// A reader's notes, at most one per [`ACK_EVERY`].
#[derive(Debug, Default)]
pub(crate) struct Notes {
    last: Option<Instant>,
}

impl Notes {
    /// Whether a note is due.
    pub(crate) fn due(&self) -> bool {
        self.last.is_none_or(|at| at.elapsed() >= ACK_EVERY)
    }

    /// A note was written.
    pub(crate) fn written(&mut self) {
        self.last = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests;
