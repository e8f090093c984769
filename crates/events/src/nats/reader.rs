//! A consuming service's reader of one producer's events on the broker: an ordered consumer
//! from just after the recorded position, the events applied in batches, duplicates skipped and
//! gaps set aside, by the replica that holds the stream's lease; a person's data opened with
//! their key ([`super::sealing`]).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use futures_util::StreamExt;
use pms_service::store::Db;

use super::{nats_error, wire, Nats, NatsError, IDLE_CHECK, MAX_BACKOFF, STREAM};
use crate::consumer::{apply_in_order, Handler};
use crate::event::Event;
use crate::metrics::ConsumerGauges;
use crate::position::{broker_position, note_broker_seq, position, set_aside_missing};

/// How often a consumer that is never quiet for [`IDLE_CHECK`] notes where to resume all the
/// same, so a restart does not read back far.
const NOTE_EVERY: Duration = Duration::from_secs(5);
/// Most messages applied together (each a run of events).
const MESSAGES_AT_ONCE: usize = 16;

/// One consuming service's reader of one producer's events on the broker.
pub struct NatsConsumer<H> {
    /// The consuming service's name.
    pub name: &'static str,
    /// The producing service's name.
    pub source: &'static str,
    /// The consuming service's database (positions, parked events).
    pub db: Db,
    /// What to do with each event.
    pub handler: Arc<H>,
    /// The broker.
    pub nats: Nats,
    /// Where it reports its lag, duplicates and missing events
    /// ([`crate::metrics::EventMetrics::broker_consumer`]).
    pub gauges: ConsumerGauges,
}

impl<H: Handler> NatsConsumer<H> {
    /// Applies the producer's events as the broker delivers them, until `shutdown` holds
    /// `true`: in the replica that holds this stream's lease ([`crate::lease`]), the others
    /// standing by.
    pub async fn run(self, shutdown: tokio::sync::watch::Receiver<bool>) {
        let name = format!("{}:{}", self.name, self.source);
        crate::lease::while_held(self.db.clone(), name, shutdown, || self.while_leased()).await;
    }

    /// [`NatsConsumer::run`] on a task of its own.
    pub fn spawn(
        self,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(shutdown))
    }

    /// Sessions one after another, waiting a little longer after each failed one.
    async fn while_leased(&self) {
        /// Clears the lag when the lease goes (this future is dropped then): the replica that
        /// takes the stream over reports it.
        struct Reading<'a>(&'a ConsumerGauges);
        impl Drop for Reading<'_> {
            fn drop(&mut self) {
                self.0.stopped();
            }
        }
        let _reading = Reading(&self.gauges);
        self.forget_durable_of_old().await;
        let mut backoff = Duration::from_millis(100);
        loop {
            if let Err(e) = self.session().await {
                tracing::warn!(consumer = self.name, source = self.source, error = %e, retry_in = ?backoff, "event consumer waiting");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            } else {
                backoff = Duration::from_millis(100);
            }
        }
    }

    /// Deletes the durable consumer of an earlier version, if one is left.
    async fn forget_durable_of_old(&self) {
        if let Ok(true) = self.nats.forget_old_durable(self.name, self.source).await {
            tracing::info!(
                consumer = self.name,
                source = self.source,
                "deleted the durable consumer of an earlier version"
            );
        }
    }

    /// One reading of the stream from the recorded position: applies what arrives, in batches,
    /// until a change of the position by someone else ends it (`Ok`: the next session starts
    /// from the position again at once) or an error does (the next one a little later).
    async fn session(&self) -> Result<(), NatsError> {
        let (mut at, hint) = broker_position(&self.db, self.name, self.source)
            .await
            .map_err(nats_error)?;
        let mut stream = self.nats.js.get_stream(STREAM).await.map_err(nats_error)?;
        let last = stream.info().await.map_err(nats_error)?.state.last_sequence;
        // A hint past the stream's end means the stream was made anew: read it whole.
        let deliver_policy = match hint {
            Some(seq) if seq <= last => DeliverPolicy::ByStartSequence {
                start_sequence: seq + 1,
            },
            _ => DeliverPolicy::All,
        };
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: wire::subjects(self.source),
                deliver_policy,
                ..Default::default()
            })
            .await
            .map_err(nats_error)?;
        self.gauges.behind(consumer.cached_info().num_pending);
        let mut messages = consumer
            .messages()
            .await
            .map_err(nats_error)?
            .ready_chunks(MESSAGES_AT_ONCE);
        // The hint written last (and when), and the stream sequence of the last message applied.
        let (mut noted, mut seen) = (hint, hint);
        let mut noted_at = tokio::time::Instant::now();
        loop {
            let chunk = tokio::select! {
                chunk = messages.next() => chunk,
                () = tokio::time::sleep(IDLE_CHECK) => {
                    // Quiet: note where to resume, and look whether a replay set the
                    // position back (or another replica moved it) meanwhile.
                    self.note(at, seen, &mut noted).await?;
                    noted_at = tokio::time::Instant::now();
                    let now = position(&self.db, self.name, self.source)
                        .await
                        .map_err(nats_error)?;
                    if now != at {
                        tracing::info!(consumer = self.name, source = self.source, from = at, to = now, "event position moved elsewhere; reading again from it");
                        return Ok(());
                    }
                    continue;
                }
            };
            let Some(chunk) = chunk else {
                return Err(NatsError("the broker ended the subscription".into()));
            };
            let mut carried = Vec::with_capacity(chunk.len());
            // The broker's count of messages after the last one delivered.
            let mut pending = 0;
            for message in chunk {
                let message = message.map_err(nats_error)?;
                if let Ok(info) = message.info() {
                    seen = Some(info.stream_sequence);
                    pending = info.pending;
                }
                match wire::events(&message.payload) {
                    Ok(run) => carried.extend(run),
                    // Not events at all: nothing to park it under. Said loudly; if it held
                    // events, the next one's `prev` shows the gap.
                    Err(e) => {
                        tracing::error!(consumer = self.name, subject = %message.subject, error = %e, "a message that is not events");
                    }
                }
            }
            // A person's data opened with their key, or erased where it was erased.
            let events = super::sealing::open(&self.nats.keyring, carried).await?;
            // Until they are applied, the delivered events count in the lag too.
            let (first_age, last_age) = (
                events.first().map(Event::age).unwrap_or_default(),
                events.last().map(Event::age).unwrap_or_default(),
            );
            self.gauges
                .delivered(pending + events.len() as u64, first_age);
            at = self.apply_delivered(at, events).await?;
            self.gauges.delivered(pending, last_age);
            // Busy for long: note where to resume now and then all the same.
            if noted_at.elapsed() >= NOTE_EVERY {
                self.note(at, seen, &mut noted).await?;
                noted_at = tokio::time::Instant::now();
            }
        }
    }

    /// Notes `seen`, the stream sequence of the message that carried position `at` (or one
    /// before it), as where to resume, unless it is `noted` already.
    async fn note(
        &self,
        at: i64,
        seen: Option<u64>,
        noted: &mut Option<u64>,
    ) -> Result<(), NatsError> {
        if let Some(seq) = seen.filter(|s| Some(*s) != *noted) {
            note_broker_seq(&self.db, self.name, self.source, at, seq)
                .await
                .map_err(nats_error)?;
            *noted = Some(seq);
        }
        Ok(())
    }

    /// Applies `events` (as delivered, in stream order) after position `at`, and returns the
    /// new position. Events at or below it were applied before (a relay that published again,
    /// a session that resumed from an older hint) and are counted as duplicates. An event whose
    /// `prev` lies past the position shows events missing between: once what came before is
    /// applied, they are set aside as missing (a parked entry naming the ids, a metric, an
    /// error in the log), never passed over silently.
    async fn apply_delivered(&self, mut at: i64, events: Vec<Event>) -> Result<i64, NatsError> {
        let mut next: Vec<Event> = Vec::with_capacity(events.len());
        for event in events {
            if event.id <= at {
                self.gauges.redelivered();
                continue;
            }
            if event.prev > at {
                self.apply(&next).await?;
                next.clear();
                set_aside_missing(&self.db, self.name, &event, at)
                    .await
                    .map_err(nats_error)?;
                self.gauges.gap();
            }
            at = event.id;
            next.push(event);
        }
        self.apply(&next).await?;
        Ok(at)
    }

    /// [`apply_in_order`] for this consumer.
    async fn apply(&self, events: &[Event]) -> Result<(), NatsError> {
        apply_in_order(&*self.handler, &self.db, self.name, events)
            .await
            .map_err(NatsError)
    }
}
