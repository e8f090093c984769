//! Applying one producer's events in order, exactly once: a [`Consumer`] reads the producer's
//! outbox after its recorded position and hands each event to its [`Handler`], which applies it
//! and records the new position in the same transaction (`EventConn::record_position`). Events
//! the handler does not care about are skipped and their position recorded in batches; events it
//! cannot read are parked with the reason and the ones after them flow on; a database that is
//! away is waited out (the same event is tried again, never skipped).
//!
//! A handler may also apply a run of events at once ([`Handler::apply_run`]): the events at the
//! front of what was read, in one transaction that records the last one's position. A consumer
//! that has fallen behind then catches up in a few transactions rather than one per event (for
//! the payments service, most of its cost per event was the transaction around it), and the
//! events the run leaves out are applied one by one as before.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pms_service::store::Db;
use pms_service::{repeatable, transaction};

use crate::conn::EventConn;
use crate::event::Event;
use crate::outbox::Outbox;

/// How often a consumer reads when nobody rings (a wake-up after each commit makes it sooner).
pub const POLL_INTERVAL: Duration = Duration::from_millis(1000);
/// Most events read at once.
pub const BATCH: i64 = 200;
/// Most events offered to [`Handler::apply_run`] at once. A run commits as one transaction, so
/// its first event's effects are seen only when the last one is written: runs are kept short
/// enough that an exit waiting for its invoice is not kept waiting by the others.
pub const RUN: usize = 64;
/// Longest wait before trying a failed event again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a handler did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Applied, with the position recorded in the same transaction.
    Applied,
    /// Not of interest; the consumer records the position itself.
    Ignored,
}

/// Why a handler did not apply an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Something passing (the database is away, a lock race lost): try the same event again.
    #[error("will retry: {0}")]
    Retry(String),
    /// The event cannot be applied as it is (unknown version, malformed payload): park it.
    #[error("parked: {0}")]
    Park(String),
}

/// A consuming service's side: what to do with each event of one producer.
pub trait Handler: Send + Sync + 'static {
    /// Applies `event`. On [`Outcome::Applied`] the handler has recorded `event.id` as its
    /// position (`EventConn::record_position(consumer, &event.source, event.id)`) in the same
    /// transaction as the event's effects.
    fn apply(&self, event: &Event) -> impl Future<Output = Result<Outcome, ApplyError>> + Send;

    /// Applies the first `n` of `events` (at most [`RUN`] of them; in order, `n` of the
    /// handler's choosing, 0 for none)
    /// in one transaction that also records `events[n - 1].id` as the position, and returns
    /// `n`. Events the handler does not care about may be part of the run. An event that
    /// [`Handler::apply`] would park must not be: the run stops before it, and the consumer
    /// applies it alone. [`ApplyError::Retry`] means nothing was applied.
    ///
    /// The default applies none, so every event goes through [`Handler::apply`].
    fn apply_run(
        &self,
        events: &[Event],
    ) -> impl Future<Output = Result<usize, ApplyError>> + Send {
        let _ = events;
        std::future::ready(Ok(0))
    }
}

/// One consumer of one producer's events.
pub struct Consumer<H> {
    /// Its name, unique per consuming service (`parks`, `payments`, …).
    pub name: &'static str,
    /// The producer's outbox.
    pub source: Outbox,
    /// The consuming service's database (positions, parked events).
    pub db: Db,
    /// What to do with each event.
    pub handler: Arc<H>,
}

impl<H: Handler> Consumer<H> {
    /// The recorded position (0 before the first event).
    ///
    /// # Errors
    /// When the consumer's database is unavailable.
    pub async fn position(&self) -> Result<i64, sqlx::Error> {
        position(&self.db, self.name, self.source.source).await
    }

    /// Applies every event the producer has until `shutdown`, waiting for new ones.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let bell = self.source.bell();
        let mut backoff = Duration::from_millis(50);
        loop {
            let rung = bell.notified();
            tokio::pin!(rung);
            rung.as_mut().enable();
            let pause = match self.step().await {
                Ok(true) => continue,
                Ok(false) => {
                    backoff = Duration::from_millis(50);
                    POLL_INTERVAL
                }
                Err(e) => {
                    tracing::warn!(consumer = self.name, source = self.source.source, error = %e, retry_in = ?backoff, "event consumer waiting");
                    let wait = backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    wait
                }
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = &mut rung => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// [`Consumer::run`] on a task of its own, until `shutdown` holds `true`.
    pub fn spawn(
        self,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        }))
    }

    /// Reads one batch after the recorded position and applies it. Returns whether there may be
    /// more right away.
    ///
    /// # Errors
    /// Why it stopped early (the next step starts again from the recorded position).
    pub async fn step(&self) -> Result<bool, String> {
        let from = self.position().await.map_err(|e| e.to_string())?;
        let batch = self
            .source
            .read_after(from, BATCH)
            .await
            .map_err(|e| e.to_string())?;
        let full = batch.len() as i64 == BATCH;
        let mut skipped_to = None;
        let mut next = 0;
        while let Some(event) = batch.get(next) {
            let offered = &batch[next..batch.len().min(next + RUN)];
            let run = match self.handler.apply_run(offered).await {
                Ok(n) => n.min(offered.len()),
                Err(ApplyError::Retry(reason)) => return self.stop(skipped_to, reason).await,
                Err(ApplyError::Park(reason)) => {
                    return Err(format!("a run of events cannot park one: {reason}"))
                }
            };
            if run > 0 {
                next += run;
                skipped_to = None;
                continue;
            }
            match self.handler.apply(event).await {
                Ok(Outcome::Applied) => skipped_to = None,
                Ok(Outcome::Ignored) => skipped_to = Some(event.id),
                Err(ApplyError::Park(reason)) => {
                    self.park(event, &reason).await.map_err(|e| e.to_string())?;
                    skipped_to = None;
                }
                Err(ApplyError::Retry(reason)) => return self.stop(skipped_to, reason).await,
            }
            next += 1;
        }
        if let Some(id) = skipped_to {
            self.record(id).await.map_err(|e| e.to_string())?;
        }
        Ok(full)
    }

    /// Ends a step early with `reason`, after recording the position of the events skipped
    /// just before.
    async fn stop(&self, skipped_to: Option<i64>, reason: String) -> Result<bool, String> {
        if let Some(id) = skipped_to {
            self.record(id).await.map_err(|e| e.to_string())?;
        }
        Err(reason)
    }

    async fn record(&self, id: i64) -> Result<(), sqlx::Error> {
        record(&self.db, self.name, self.source.source, id).await
    }

    async fn park(&self, event: &Event, reason: &str) -> Result<(), sqlx::Error> {
        park(&self.db, self.name, event, reason).await
    }
}

/// Records `consumer`'s position in `source`'s events (for events it skipped).
///
/// # Errors
/// When the database is unavailable.
pub(crate) async fn record(
    db: &Db,
    consumer: &str,
    source: &str,
    id: i64,
) -> Result<(), sqlx::Error> {
    repeatable!(db, |conn| conn.record_position(consumer, source, id).await)
}

/// Parks `event` for `consumer` and moves past it, in one transaction.
///
/// # Errors
/// When the database is unavailable.
pub(crate) async fn park(
    db: &Db,
    consumer: &str,
    event: &Event,
    reason: &str,
) -> Result<(), sqlx::Error> {
    tracing::error!(consumer, source = %event.source, id = event.id, event_type = %event.event_type, %reason, "event parked");
    transaction!(db, |tx| {
        tx.park(consumer, event, reason).await?;
        tx.record_position(consumer, &event.source, event.id).await
    })
}

/// `consumer`'s recorded position in `source`'s events (0 before the first).
///
/// # Errors
/// When the database is unavailable.
pub async fn position(db: &Db, consumer: &str, source: &str) -> Result<i64, sqlx::Error> {
    repeatable!(db, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT position FROM event_positions WHERE consumer = $1 AND source = $2"
    )
    .bind(consumer)
    .bind(source)
    .fetch_optional(&mut *conn)
    .await)
    .map(|p| p.unwrap_or(0))
}

/// Sets `consumer`'s position in `source`'s events back (or forward) to `position`, so the
/// events after it are applied again: for `pms events replay`. Handlers are idempotent per event
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
    repeatable!(db, |conn| conn
        .record_position(consumer, source, position.max(0))
        .await)
}

#[cfg(test)]
mod tests;
