//! Applying one producer's events in order, exactly once: a [`Consumer`] reads the producer's
//! outbox after its recorded position and hands each event to its [`Handler`], which applies it
//! and moves the position past it in the same transaction (`EventConn::record_position`, a
//! compare and set: [`crate::position`]). Events the handler does not care about are skipped and
//! their position recorded with the next write; events it cannot read are parked with the reason
//! and the ones after them flow on; a database that is away is waited out (the same event is
//! tried again, never skipped). The broker's reader ([`crate::nats::NatsConsumer`]) applies what
//! it receives through the same `apply_in_order`.
//!
//! A handler may also apply a run of events at once ([`Handler::apply_run`]): the events at the
//! front of what was read, in one transaction that records the last one's position. A consumer
//! that has fallen behind then catches up in a few transactions rather than one per event (for
//! the payments service, most of its cost per event was the transaction around it), and the
//! events the run leaves out are applied one by one as before.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pms_service::store::Db;

use crate::event::Event;
use crate::outbox::Outbox;
use crate::position::{park, record, Applied};
use crate::retention::{acknowledge, consumer_floor, Notes};

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
    /// Applies `event`. On [`Outcome::Applied`] the handler has moved its position past it
    /// (`EventConn::record_position(consumer, Applied::one(event))`) in the same transaction as
    /// the event's effects; when that refuses (the position moved elsewhere), the transaction
    /// rolls back and the handler answers [`ApplyError::Retry`].
    fn apply(&self, event: &Event) -> impl Future<Output = Result<Outcome, ApplyError>> + Send;

    /// Applies the first `n` of `events` (at most [`RUN`] of them; in order, `n` of the
    /// handler's choosing, 0 for none) in one transaction that also moves the position past
    /// them (`Applied::run(&events[0], &events[n - 1])`), and returns `n`. Events the handler
    /// does not care about may be part of the run. An event that [`Handler::apply`] would park
    /// must not be: the run stops before it, and the consumer applies it alone.
    /// [`ApplyError::Retry`] means nothing was applied.
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
        crate::position::position(&self.db, self.name, self.source.source).await
    }

    /// Notes in the producer's database how far this consumer will not read its outbox again
    /// ([`crate::retention`]), so the events before that can go.
    ///
    /// # Errors
    /// When either database is unavailable.
    pub async fn acknowledge(&self) -> Result<(), String> {
        let floor = consumer_floor(&self.db, self.name, self.source.source)
            .await
            .map_err(|e| e.to_string())?;
        acknowledge(&self.source, self.name, floor)
            .await
            .map_err(|e| e.to_string())
    }

    /// Applies every event the producer has until `shutdown`, waiting for new ones, and notes
    /// every few seconds how far it got ([`Consumer::acknowledge`]).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let bell = self.source.bell();
        let mut backoff = Duration::from_millis(50);
        let mut notes = Notes::default();
        loop {
            let rung = bell.notified();
            tokio::pin!(rung);
            rung.as_mut().enable();
            let stepped = self.step().await;
            if notes.due() {
                match self.acknowledge().await {
                    Ok(()) => notes.written(),
                    Err(e) => {
                        tracing::debug!(consumer = self.name, source = self.source.source, error = %e, "reader's note not written");
                    }
                }
            }
            let pause = match stepped {
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
        apply_in_order(&*self.handler, &self.db, self.name, &batch).await?;
        Ok(batch.len() as i64 == BATCH)
    }
}

/// Applies `events` of one producer, in order, for `consumer`: runs where the handler takes
/// them ([`Handler::apply_run`]), the rest one by one; events the handler ignores are skipped,
/// events it cannot read are parked. The first event is the one after the consumer's position.
///
/// Skipped events cost no transaction of their own while something follows them: the next
/// event is handed to [`Handler::apply`] with its `prev` set back to the first skipped one's,
/// so the write that applies it moves the position past them too ([`Applied`]). Only skips at
/// the end of the events, or before a stop, are recorded alone.
///
/// # Errors
/// Why it stopped before the end (a handler asked to retry, the database is away, the position
/// moved elsewhere); what was applied before stays applied, and the consumer starts again from
/// its recorded position.
pub(crate) async fn apply_in_order<H: Handler>(
    handler: &H,
    db: &Db,
    consumer: &str,
    events: &[Event],
) -> Result<(), String> {
    let mut skipped = Skipped::default();
    let mut next = 0;
    while let Some(event) = events.get(next) {
        if skipped.0.is_none() {
            let offered = &events[next..events.len().min(next + RUN)];
            let run = match handler.apply_run(offered).await {
                Ok(n) => n.min(offered.len()),
                Err(ApplyError::Retry(reason)) => return Err(reason),
                Err(ApplyError::Park(reason)) => {
                    return Err(format!("a run of events cannot park one: {reason}"))
                }
            };
            if run > 0 {
                next += run;
                continue;
            }
        }
        let covered = skipped.cover(event);
        match handler.apply(&covered).await {
            Ok(Outcome::Applied) => skipped = Skipped::default(),
            Ok(Outcome::Ignored) => skipped.add(event),
            Err(ApplyError::Park(reason)) => {
                park(db, consumer, &covered, &reason)
                    .await
                    .map_err(|e| e.to_string())?;
                skipped = Skipped::default();
            }
            Err(ApplyError::Retry(reason)) => return skipped.stop(db, consumer, reason).await,
        }
        next += 1;
    }
    skipped.record(db, consumer).await
}

/// Events a consumer skipped whose position no write has recorded yet: the first and the last,
/// and the `prev` the first had when it was handed over.
#[derive(Debug, Default)]
struct Skipped<'a>(Option<(i64, &'a Event, &'a Event)>);

impl<'a> Skipped<'a> {
    fn add(&mut self, event: &'a Event) {
        let (prev, first) = self.0.map_or((event.prev, event), |(p, f, _)| (p, f));
        self.0 = Some((prev, first, event));
    }

    /// `event`, the one after the skipped events, with its `prev` set back to cover them.
    fn cover<'e>(&self, event: &'e Event) -> Cow<'e, Event> {
        match self.0 {
            Some((prev, _, _)) => Cow::Owned(Event {
                prev,
                ..event.clone()
            }),
            None => Cow::Borrowed(event),
        }
    }

    /// Records the position past the skipped events, in a transaction of its own.
    async fn record(self, db: &Db, consumer: &str) -> Result<(), String> {
        let Some((prev, first, last)) = self.0 else {
            return Ok(());
        };
        let applied = Applied {
            prev,
            ..Applied::run(first, last)
        };
        record(db, consumer, applied)
            .await
            .map_err(|e| e.to_string())
    }

    /// Ends early with `reason`, after recording the skipped events' position.
    async fn stop(self, db: &Db, consumer: &str, reason: String) -> Result<(), String> {
        self.record(db, consumer).await?;
        Err(reason)
    }
}

#[cfg(test)]
mod tests;
