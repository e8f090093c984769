//! The distributed transport: NATS JetStream between services in separate processes.
//!
//! - A [`relay()`] per producing service publishes its outbox to the stream [`STREAM`], runs of
//!   events to a message (the `wire` module): in id order, one message after the other, each
//!   once the one before it was acknowledged, never past an id that may still commit
//!   ([`crate::Outbox::read_after`]); then it marks the rows published. Each event names the id
//!   before it (`prev`). A relay that dies between publishing and marking publishes again, and
//!   JetStream's duplicate window ([`DUPLICATE_WINDOW`]) discards the copies (consumers skip
//!   those it does not catch). One replica of a service relays at a time (a lease,
//!   [`crate::lease`]).
//! - A [`NatsConsumer`] (the `reader` module) per (consuming service, producer) reads the
//!   producer's subjects with an ordered consumer (no acknowledgements: the broker's order,
//!   re-established after a lost message or connection) from just after its recorded position,
//!   and applies what arrives in batches, runs in one transaction each ([`crate::consumer`]).
//!   The position in its own database is the record of what it applied: events at or below it
//!   are skipped, and an event whose `prev` lies past it shows a gap, which is set aside as
//!   missing and said aloud. One replica of the consuming service reads each producer at a
//!   time (a lease).
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
//! A person's data travels sealed under a key of their own, which a closure of their account
//! erases after a delay (the `sealing` module): then no copy on the broker opens any more, and
//! every reader gets the erased payloads.
//!
//! While the broker is away nothing is lost: the outbox keeps the events and the relay drains it
//! when the broker returns; the services stay ready.

use std::collections::VecDeque;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use futures_util::StreamExt;

use crate::event::Event;

mod keycache;
mod reader;
mod relay;
mod sealing;
mod wire;

pub use reader::NatsConsumer;
pub use relay::{relay, relay_once};
pub use sealing::{DEFAULT_ERASE_AFTER, ERASURES_BUCKET, KEYS_BUCKET};

/// The stream all PMS events go to.
pub const STREAM: &str = "PMS_EVENTS";
/// How long JetStream remembers message ids to discard re-published copies.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(10 * 60);
/// How long a consumer waits for a message before it notes where to resume and looks whether
/// its position was moved by someone else.
pub const IDLE_CHECK: Duration = Duration::from_secs(1);
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
    /// The JetStream context (large: shared).
    js: std::sync::Arc<jetstream::Context>,
    /// The customers' keys to their data on the broker (the buckets' handles are large: shared).
    keyring: std::sync::Arc<sealing::Keyring>,
}

impl std::fmt::Debug for Nats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nats(..)")
    }
}

impl Nats {
    /// Connects (retrying in the background if the server is not up yet) and makes sure the
    /// stream and the key buckets ([`KEYS_BUCKET`], [`ERASURES_BUCKET`]) exist.
    ///
    /// # Errors
    /// When the URL is malformed or the stream or a bucket cannot be created.
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
        let keyring = std::sync::Arc::new(sealing::Keyring::new(&js).await?);
        Ok(Self {
            js: std::sync::Arc::new(js),
            keyring,
        })
    }

    /// The same connection, erasing a closed account's key `after` the relay published its
    /// closure (instead of [`DEFAULT_ERASE_AFTER`]).
    #[must_use]
    pub fn erasing_after(mut self, after: Duration) -> Self {
        self.keyring = std::sync::Arc::new(self.keyring.erasing_after(after));
        self
    }

    /// Erases the keys of closed accounts whose time has come; returns how many (the relay does
    /// this once a minute, and right after it published a closure).
    ///
    /// # Errors
    /// When the broker does not answer.
    pub async fn erase_due_keys(&self) -> Result<usize, NatsError> {
        self.keyring.sweep().await
    }

    /// Every event of `source` on the broker now, in order, as a reader starting now applies
    /// them (sealed payloads opened where their key is still there), with the raw bodies of the
    /// messages they came in (for operators and tests).
    ///
    /// # Errors
    /// When the broker does not answer.
    pub async fn read_all(&self, source: &str) -> Result<(Vec<Event>, Vec<Bytes>), NatsError> {
        let stream = self.js.get_stream(STREAM).await.map_err(nats_error)?;
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                filter_subject: wire::subjects(source),
                ..Default::default()
            })
            .await
            .map_err(nats_error)?;
        let mut left = consumer.cached_info().num_pending;
        let mut messages = consumer.messages().await.map_err(nats_error)?;
        let (mut carried, mut bodies) = (Vec::new(), Vec::new());
        while left > 0 {
            let Some(message) = messages.next().await else {
                break;
            };
            let message = message.map_err(nats_error)?;
            left = message.info().map(|i| i.pending).unwrap_or(0);
            carried.extend(wire::events(&message.payload).map_err(nats_error)?);
            bodies.push(message.payload.clone());
        }
        Ok((sealing::open(&self.keyring, carried).await?, bodies))
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

    /// `source`'s events of `event_type` (`>` for all) as they are published, to every
    /// subscriber, without a durable consumer.
    async fn live(&self, source: &str, event_type: &str) -> Result<LiveEvents, NatsError> {
        self.js
            .client()
            .subscribe(wire::subjects(source))
            .await
            .map(|subscriber| LiveEvents {
                subscriber,
                event_type: event_type.to_owned(),
                next: VecDeque::new(),
            })
            .map_err(nats_error)
    }

    /// Calls `each` with every `source` event of `event_type` (`>` for all of them) as it is
    /// published, until
    /// `shutdown` holds `true`: a plain subscription, no durable consumer, so every subscriber
    /// gets each event once while connected and nothing is replayed. For notifications whose
    /// effects a [`NatsConsumer`] also records (an exit waiting in one replica for the price of
    /// an invoice that another replica's consumer applies). A person's data comes erased (the
    /// sealed payloads are not opened: a notification needs none). Subscribes again, backing
    /// off, when the subscription fails or ends.
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

    /// Publishes `message` and waits for the broker's acknowledgement.
    async fn publish(&self, message: wire::Message) -> Result<(), NatsError> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, message.id.as_str());
        self.js
            .publish_with_headers(message.subject, headers, message.body)
            .await
            .map_err(nats_error)?
            .await
            .map_err(nats_error)?;
        Ok(())
    }
}

/// A live subscription ([`Nats::follow`]): the events of one type (or all) of one producer.
#[derive(Debug)]
struct LiveEvents {
    subscriber: async_nats::Subscriber,
    /// The type followed, `>` for all.
    event_type: String,
    /// The rest of the last message's events.
    next: VecDeque<Event>,
}

impl LiveEvents {
    /// The next event of the type followed; `None` once the connection is closed for good. A
    /// message that is not events is skipped.
    async fn next(&mut self) -> Option<Event> {
        loop {
            while let Some(event) = self.next.pop_front() {
                if self.event_type == ">" || event.event_type == self.event_type {
                    return Some(event);
                }
            }
            let message = self.subscriber.next().await?;
            match wire::events(&message.payload) {
                Ok(events) => self.next.extend(events.into_iter().map(|c| c.event)),
                Err(e) => {
                    tracing::warn!(subject = %message.subject, error = %e, "a message that is not events")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
