//! The distributed transport: NATS JetStream between services in separate processes.
//!
//! - A [`relay`] per producing service publishes its outbox to the stream [`STREAM`] on subject
//!   `pms.events.<source>.<event_type>`, with `Nats-Msg-Id: <source>-<id>`: in id order, one
//!   message after the other, each once the one before it was acknowledged, never past an id
//!   that may still commit ([`Outbox::read_after`]); then it marks the rows published. Each
//!   message names the id before it (`prev`). A relay that dies between publishing and marking
//!   publishes again, and JetStream's duplicate window ([`DUPLICATE_WINDOW`]) discards the
//!   copies. One replica of a service relays at a time (a lease, [`crate::lease`]).
//! - A [`NatsConsumer`] per (consuming service, producer) reads the producer's subjects with an
//!   ordered consumer (no acknowledgements: the broker's order, re-established after a lost
//!   message or connection) from just after its recorded position, and applies what arrives in
//!   batches, runs in one transaction each ([`crate::consumer`]). The position in its own
//!   database is the record of what it applied: events at or below it are skipped, and an
//!   event whose `prev` lies past it shows a gap, which is set aside as missing and said
//!   aloud. One replica of the consuming service reads each producer at a time (a lease).
//!
//! Why in order and a position, and not an inbox of every applied id: order is part of what
//! the events mean (a price table's new version before the visits it prices, a customer's
//! registration before its changes), so a consumer needs them in order anyway; once they are,
//! the position is the whole inbox, kept in one row that moves in the same transaction as the
//! effects. An inbox of ids would grow with every event, and would still have to wait for the
//! late ones to keep the order. Until 2026-12 the relay started after the lowest *committed*
//! unpublished id and so could publish past an append still in flight, and the consumer dropped
//! the late event as applied before: about one closed visit in 200 was never invoiced.
//!
//! A replay ([`crate::position::rewind`], `pms events replay`) sets the position back; the
//! running consumer notices within [`IDLE_CHECK`] when quiet (at its next write otherwise, which
//! the position refuses), and reads the stream from its start again.
//!
//! While the broker is away nothing is lost: the outbox keeps the events and the relay drains it
//! when the broker returns; the services stay ready.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::{self, stream};
use futures_util::StreamExt;
use pms_service::store::Db;
use serde::{Deserialize, Serialize};

use crate::consumer::{apply_in_order, Handler, BATCH};
use crate::event::Event;
use crate::metrics::ConsumerGauges;
use crate::outbox::Outbox;
use crate::position::{broker_position, note_broker_seq, position, set_aside_missing};

/// The stream all PMS events go to.
pub const STREAM: &str = "PMS_EVENTS";
/// How long JetStream remembers message ids to discard re-published copies.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(10 * 60);
/// How long a consumer waits for a message before it notes where to resume and looks whether
/// its position was moved by someone else.
pub const IDLE_CHECK: Duration = Duration::from_secs(1);
/// How often a consumer that is never quiet for [`IDLE_CHECK`] notes where to resume all the
/// same, so a restart does not read back far.
const NOTE_EVERY: Duration = Duration::from_secs(5);
/// Events published per relay round.
const RELAY_BATCH: i64 = 200;
/// How often the relay looks at the outbox when nobody rings: the bell rings in the replica
/// that holds the relay's lease only, so the other replicas' events wait up to this long.
const RELAY_POLL: Duration = Duration::from_millis(25);
/// Longest wait between two attempts while the broker or a database is away.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What went wrong talking to the broker.
#[derive(Debug, thiserror::Error)]
#[error("nats: {0}")]
pub struct NatsError(pub String);

fn nats_error(e: impl std::fmt::Display) -> NatsError {
    NatsError(e.to_string())
}

/// A connection to JetStream with the PMS stream in place.
#[derive(Clone)]
pub struct Nats {
    js: jetstream::Context,
}

impl std::fmt::Debug for Nats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nats(..)")
    }
}

/// An event as it travels on the broker.
#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    id: i64,
    /// The id before this one in the producer's outbox; absent from relays of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prev: Option<i64>,
    source: String,
    aggregate_type: String,
    aggregate_id: String,
    event_type: String,
    version: i64,
    payload: serde_json::Value,
    created_at: String,
}

impl Nats {
    /// Connects (retrying in the background if the server is not up yet) and makes sure the
    /// stream exists.
    ///
    /// # Errors
    /// When the URL is malformed or the stream cannot be created.
    pub async fn connect(url: &str) -> Result<Self, NatsError> {
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(url)
            .await
            .map_err(nats_error)?;
        let js = jetstream::new(client);
        js.get_or_create_stream(stream::Config {
            name: STREAM.into(),
            subjects: vec!["pms.events.>".into()],
            storage: stream::StorageType::File,
            duplicate_window: DUPLICATE_WINDOW,
            ..Default::default()
        })
        .await
        .map_err(nats_error)?;
        Ok(Self { js })
    }

    /// Messages in the stream now (for tests and operators).
    ///
    /// # Errors
    /// When the broker does not answer.
    pub async fn stream_messages(&self) -> Result<u64, NatsError> {
        let mut s = self.js.get_stream(STREAM).await.map_err(nats_error)?;
        Ok(s.info().await.map_err(nats_error)?.state.messages)
    }

    /// Deletes the durable consumer through which earlier versions read `source`'s events for
    /// `consumer` (`<consumer>-<source>`); returns whether there was one. Nothing reads through
    /// it now, and the broker would keep its state for good.
    ///
    /// # Errors
    /// When the broker does not answer.
    pub async fn forget_old_durable(
        &self,
        consumer: &str,
        source: &str,
    ) -> Result<bool, NatsError> {
        let stream = self.js.get_stream(STREAM).await.map_err(nats_error)?;
        match stream
            .delete_consumer(&format!("{consumer}-{source}"))
            .await
        {
            Ok(_) => Ok(true),
            Err(e)
                if matches!(e.kind(), stream::ConsumerErrorKind::JetStream(js)
                    if js.error_code() == jetstream::ErrorCode::CONSUMER_NOT_FOUND) =>
            {
                Ok(false)
            }
            Err(e) => Err(nats_error(e)),
        }
    }

    /// `source`'s events of `event_type` as they are published, to every subscriber, without a
    /// durable consumer.
    async fn live(&self, source: &str, event_type: &str) -> Result<LiveEvents, NatsError> {
        self.js
            .client()
            .subscribe(subject(source, event_type))
            .await
            .map(LiveEvents)
            .map_err(nats_error)
    }

    /// Calls `each` with every `source` event of `event_type` (`>` for all of them) as it is
    /// published, until
    /// `shutdown` holds `true`: a plain subscription, no durable consumer, so every subscriber
    /// gets each event once while connected and nothing is replayed. For notifications whose
    /// effects a [`NatsConsumer`] also records (an exit waiting in one replica for the price of
    /// an invoice that another replica's consumer applies). Subscribes again, backing off, when
    /// the subscription fails or ends.
    pub async fn follow(
        self,
        source: &str,
        event_type: &str,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
        mut each: impl FnMut(Event) + Send,
    ) {
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.live(source, event_type).await {
                Ok(mut live) => {
                    backoff = Duration::from_millis(100);
                    loop {
                        let event = tokio::select! {
                            _ = shutdown.wait_for(|stop| *stop) => return,
                            e = live.next() => e,
                        };
                        let Some(event) = event else { break };
                        each(event);
                    }
                }
                Err(e) => {
                    tracing::warn!(source, event_type, error = %e, retry_in = ?backoff, "live events waiting for the broker")
                }
            }
            tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Publishes `event` and waits for the broker's acknowledgement.
    async fn publish(&self, event: &Event) -> Result<(), NatsError> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            format!("{}-{}", event.source, event.id).as_str(),
        );
        let wire = Wire {
            id: event.id,
            prev: Some(event.prev),
            source: event.source.clone(),
            aggregate_type: event.aggregate_type.clone(),
            aggregate_id: event.aggregate_id.clone(),
            event_type: event.event_type.clone(),
            version: event.version,
            payload: event.payload.clone(),
            created_at: event.created_at.clone(),
        };
        let body = serde_json::to_vec(&wire).map_err(nats_error)?;
        let subject = subject(&event.source, &event.event_type);
        self.js
            .publish_with_headers(subject, headers, body.into())
            .await
            .map_err(nats_error)?
            .await
            .map_err(nats_error)?;
        Ok(())
    }
}

/// The subject `event_type` events of `source` are published on.
fn subject(source: &str, event_type: &str) -> String {
    format!("pms.events.{source}.{event_type}")
}

/// An event from a message's body.
fn from_wire(body: &[u8]) -> Result<Event, serde_json::Error> {
    let w: Wire = serde_json::from_slice(body)?;
    Ok(Event {
        id: w.id,
        // Without it (an earlier relay), nothing can be told about gaps: 0 lets it follow any
        // position.
        prev: w.prev.unwrap_or(0),
        source: w.source,
        aggregate_type: w.aggregate_type,
        aggregate_id: w.aggregate_id,
        event_type: w.event_type,
        version: w.version,
        payload: w.payload,
        created_at: w.created_at,
    })
}

/// A live subscription ([`Nats::follow`]).
#[derive(Debug)]
struct LiveEvents(async_nats::Subscriber);

impl LiveEvents {
    /// The next event published; `None` once the connection is closed for good. A message that
    /// is not an event is skipped.
    async fn next(&mut self) -> Option<Event> {
        while let Some(message) = self.0.next().await {
            match from_wire(&message.payload) {
                Ok(event) => return Some(event),
                Err(e) => {
                    tracing::warn!(subject = %message.subject, error = %e, "a message that is not an event")
                }
            }
        }
        None
    }
}

/// The publisher of one outbox: reads on after what it published last (from the database at
/// first, then from memory), publishes in id order, and marks what the broker acknowledged.
struct Relay<'a> {
    nats: &'a Nats,
    outbox: &'a Outbox,
    /// Everything up to this id is on the broker (`None`: read it from the outbox first).
    through: Option<i64>,
}

impl Relay<'_> {
    /// Publishes up to [`RELAY_BATCH`] events after what is on the broker, one after the other,
    /// each once the broker acknowledged the one before: the stream holds each producer's
    /// events in id order. Returns how many. With `mark` false it leaves the rows unmarked, as a
    /// relay that dies right after publishing would (tests).
    ///
    /// Why one at a time: with several publishes in flight, one that fails while the next
    /// succeeds puts a later event on the stream first, and the earlier one behind it when it is
    /// sent again; consumers would see the order broken.
    async fn round(&mut self, mark: bool) -> Result<usize, NatsError> {
        let after = match self.through {
            Some(id) => id,
            None => self.outbox.published_through().await.map_err(nats_error)?,
        };
        let events = self
            .outbox
            .read_after(after, RELAY_BATCH)
            .await
            .map_err(nats_error)?;
        let (Some(first), Some(last)) = (events.first(), events.last()) else {
            self.through = Some(after);
            return Ok(0);
        };
        for event in &events {
            if let Err(e) = self.nats.publish(event).await {
                self.through = None;
                return Err(e);
            }
        }
        if mark {
            if let Err(e) = self.outbox.mark_published(first.id, last.id).await {
                self.through = None;
                return Err(nats_error(e));
            }
            self.through = Some(last.id);
        }
        Ok(events.len())
    }
}

/// Publishes what `outbox` has not published yet, once; returns how many. With `mark` false
/// it leaves the rows unmarked, as a relay that dies right after publishing would (tests).
///
/// # Errors
/// When the broker or the database is away.
pub async fn relay_once(nats: &Nats, outbox: &Outbox, mark: bool) -> Result<usize, NatsError> {
    Relay {
        nats,
        outbox,
        through: None,
    }
    .round(mark)
    .await
}

/// The relay of one service's outbox until `shutdown` holds `true`: in the replica that holds
/// the outbox's relay lease ([`crate::lease`]), the others standing by.
pub async fn relay(nats: Nats, outbox: Outbox, shutdown: tokio::sync::watch::Receiver<bool>) {
    let name = format!("relay:{}", outbox.source);
    crate::lease::while_held(outbox.db().clone(), name, shutdown, || {
        relay_while_leased(&nats, &outbox)
    })
    .await;
}

/// Publishes `outbox` as it fills, for as long as it is not stopped.
async fn relay_while_leased(nats: &Nats, outbox: &Outbox) {
    let bell = outbox.bell();
    let mut relay = Relay {
        nats,
        outbox,
        through: None,
    };
    let mut backoff = Duration::from_millis(100);
    loop {
        let rung = bell.notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        let pause = match relay.round(true).await {
            Ok(n) if n as i64 == RELAY_BATCH => continue,
            Ok(_) => {
                backoff = Duration::from_millis(100);
                RELAY_POLL
            }
            Err(e) => {
                tracing::warn!(source = outbox.source, error = %e, retry_in = ?backoff, "event relay waiting");
                let wait = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                wait
            }
        };
        tokio::select! {
            () = &mut rung => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
}

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
    /// until an error or a change of the position by someone else ends it (the next session
    /// starts from the position again).
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
                filter_subject: format!("pms.events.{}.>", self.source),
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
            .ready_chunks(BATCH as usize);
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
                return Ok(());
            };
            let mut events = Vec::with_capacity(chunk.len());
            // The broker's count of messages after the last one delivered.
            let mut pending = 0;
            for message in chunk {
                let message = message.map_err(nats_error)?;
                if let Ok(info) = message.info() {
                    seen = Some(info.stream_sequence);
                    pending = info.pending;
                }
                match from_wire(&message.payload) {
                    Ok(event) => events.push(event),
                    // Not an event at all: nothing to park it under. Said loudly; if it was an
                    // event, the next one's `prev` shows the gap.
                    Err(e) => {
                        tracing::error!(consumer = self.name, subject = %message.subject, error = %e, "a message that is not an event");
                    }
                }
            }
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

#[cfg(test)]
mod tests;
