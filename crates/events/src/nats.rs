//! The distributed transport: NATS JetStream between services in separate processes.
//!
//! - A [`relay`] per producing service publishes its outbox in id order to the stream
//!   [`STREAM`] on subject `pms.events.<source>.<event_type>`, with `Nats-Msg-Id:
//!   <source>-<id>`, waits for each publish's acknowledgement, then marks the rows published. A
//!   relay that dies between publishing and marking publishes again after a restart, and
//!   JetStream's duplicate window ([`DUPLICATE_WINDOW`]) discards the copies.
//! - A [`NatsConsumer`] per (consuming service, producer) is a durable pull consumer named
//!   `<consumer>-<source>`, acknowledged explicitly after the handler's transaction committed,
//!   with at most one message unacknowledged so events arrive in order even when one is
//!   redelivered. Events at or below the recorded position (a redelivery of an event already
//!   applied) are acknowledged and skipped: the position is the inbox of applied ids.
//! - A replay ([`Nats::forget_consumer`], `pms events replay --nats-url`) sets the position back
//!   and deletes the durable; the running consumer's subscription ends, it creates the durable
//!   again from the stream's start, skips what its position covers and applies the rest again.
//!
//! While the broker is away nothing is lost: the outbox keeps the events and the relay drains it
//! when the broker returns; the services stay ready.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy, stream};
use futures_util::StreamExt;
use pms_service::store::Db;
use serde::{Deserialize, Serialize};

use crate::consumer::{park, position, record, ApplyError, Handler, Outcome};
use crate::event::Event;
use crate::metrics::ConsumerGauges;
use crate::outbox::Outbox;

/// The stream all PMS events go to.
pub const STREAM: &str = "PMS_EVENTS";
/// How long JetStream remembers message ids to discard re-published copies.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(10 * 60);
/// How long a delivered message may go unacknowledged before it is delivered again: how long a
/// consumer that died holding one delays its successor. A handler slower than this sees the
/// message again after it, and skips it by its position.
pub const ACK_WAIT: Duration = Duration::from_secs(5);
/// Events published per relay round.
const RELAY_BATCH: i64 = 200;
/// How often the relay looks at the outbox when nobody rings.
const RELAY_POLL: Duration = Duration::from_millis(500);
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

    /// Deletes the durable consumer of `consumer` for `source`'s events, so that its next
    /// subscription starts from the beginning of the stream; returns whether there was one.
    ///
    /// # Errors
    /// When the broker does not answer.
    pub async fn forget_consumer(&self, consumer: &str, source: &str) -> Result<bool, NatsError> {
        let stream = self.js.get_stream(STREAM).await.map_err(nats_error)?;
        match stream
            .delete_consumer(&durable_name(consumer, source))
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

/// Publishes what `outbox` has not published yet, once; returns how many. With `mark` false
/// it leaves the rows unmarked, as a relay that dies right after publishing would (tests).
///
/// # Errors
/// When the broker or the database is away.
pub async fn relay_once(nats: &Nats, outbox: &Outbox, mark: bool) -> Result<usize, NatsError> {
    let events = outbox.unpublished(RELAY_BATCH).await.map_err(nats_error)?;
    let (Some(first), Some(last)) = (events.first().map(|e| e.id), events.last().map(|e| e.id))
    else {
        return Ok(0);
    };
    for event in &events {
        nats.publish(event).await?;
    }
    if mark {
        outbox
            .mark_published(first, last)
            .await
            .map_err(nats_error)?;
    }
    Ok(events.len())
}

/// The relay of one service's outbox until `shutdown` holds `true`.
pub async fn relay(nats: Nats, outbox: Outbox, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let bell = outbox.bell();
    let mut backoff = Duration::from_millis(100);
    loop {
        let rung = bell.notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        let pause = match relay_once(&nats, &outbox, true).await {
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
            _ = shutdown.wait_for(|stop| *stop) => return,
            () = &mut rung => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// One consuming service's durable consumer of one producer's events on the broker.
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
    /// Where it reports its lag and redeliveries ([`crate::metrics::EventMetrics::broker_consumer`]).
    pub gauges: ConsumerGauges,
}

impl<H: Handler> NatsConsumer<H> {
    /// Applies the producer's events as the broker delivers them, until `shutdown` holds `true`.
    pub async fn run(self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let outcome = tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => return,
                r = self.session() => r,
            };
            if let Err(e) = outcome {
                tracing::warn!(consumer = self.name, source = self.source, error = %e, retry_in = ?backoff, "event consumer waiting");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }

    /// [`NatsConsumer::run`] on a task of its own.
    pub fn spawn(
        self,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(shutdown))
    }

    /// One subscription: applies messages until an error ends it.
    async fn session(&self) -> Result<(), NatsError> {
        let durable = durable_name(self.name, self.source);
        let stream = self.nats.js.get_stream(STREAM).await.map_err(nats_error)?;
        let consumer: jetstream::consumer::PullConsumer = stream
            .get_or_create_consumer(
                &durable,
                pull::Config {
                    durable_name: Some(durable.clone()),
                    filter_subject: format!("pms.events.{}.>", self.source),
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: ACK_WAIT,
                    max_ack_pending: 1,
                    ..Default::default()
                },
            )
            .await
            .map_err(nats_error)?;
        let mut messages = consumer.messages().await.map_err(nats_error)?;
        let mut at = position(&self.db, self.name, self.source)
            .await
            .map_err(nats_error)?;
        while let Some(message) = messages.next().await {
            let message = message.map_err(nats_error)?;
            let delivery = message.info().ok().map(|i| (i.delivered, i.pending));
            if delivery.is_some_and(|(delivered, _)| delivered > 1) {
                self.gauges.redelivered();
            }
            let event = match from_wire(&message.payload) {
                Ok(event) => event,
                Err(e) => {
                    // Not an event at all: nothing to park it under; drop it loudly.
                    tracing::error!(consumer = self.name, error = %e, "a message that is not an event");
                    message.ack().await.map_err(nats_error)?;
                    continue;
                }
            };
            if let Some((_, pending)) = delivery {
                self.gauges.delivered(pending, event.age());
            }
            if event.id <= at {
                // Applied before (the inbox says so): acknowledged again, applied once. Counted
                // unless the broker already counted it as a redelivery.
                if delivery.is_none_or(|(delivered, _)| delivered <= 1) {
                    self.gauges.redelivered();
                }
            } else {
                match self.handler.apply(&event).await {
                    Ok(Outcome::Applied) => {}
                    Ok(Outcome::Ignored) => record(&self.db, self.name, self.source, event.id)
                        .await
                        .map_err(nats_error)?,
                    Err(ApplyError::Park(reason)) => park(&self.db, self.name, &event, &reason)
                        .await
                        .map_err(nats_error)?,
                    Err(ApplyError::Retry(reason)) => {
                        let _ = message
                            .ack_with(jetstream::AckKind::Nak(Some(Duration::from_millis(500))))
                            .await;
                        return Err(NatsError(reason));
                    }
                }
                at = event.id;
            }
            message.ack().await.map_err(nats_error)?;
        }
        Ok(())
    }
}

/// The durable consumer of `consumer` (a service) for `source`'s events.
pub fn durable_name(consumer: &str, source: &str) -> String {
    format!("{consumer}-{source}")
}

#[cfg(test)]
mod tests;
