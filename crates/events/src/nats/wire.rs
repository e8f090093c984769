//! The events' form on the broker: one message carries a run of one producer's events,
//! consecutive in its outbox and in id order, as JSON (`{"events": [...]}`), on the subject
//! `pms.events.<source>.batch` with the message id `<source>-<first>-<last>`; each event names
//! the id before it (`prev`). Reading also takes the single-event messages relays sent before
//! 2026-12 (`pms.events.<source>.<event_type>`, the event alone). An event that carries a
//! person's data travels with those fields erased and the whole payload sealed beside it
//! (`sealed`: whose, and the box; the `sealing` module).
//!
//! Why several events to a message: the relay waits for the broker's acknowledgement of each
//! message before it sends the next (that keeps the stream in id order), so a message per event
//! capped the relay at one broker round trip per event. At 100 barriers (2,600 calls a second)
//! the parks relay fell 66,000 events behind and took 18 s to drain after the load; with a run
//! per message it keeps up ([`crate::nats`], `docs/benchmark-history.md`).

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::event::Event;

/// Most bytes of events in one message (a single larger event goes alone): well under NATS's
/// default largest payload (1 MiB).
pub(crate) const MESSAGE_BYTES: usize = 256 * 1024;

/// One event on the broker.
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
    /// The payload as written, sealed under its owner's key, when `payload` is the erased one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed: Option<Sealed>,
}

/// A payload sealed under a person's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Sealed {
    /// Whose data it holds: the customer's user id.
    pub(crate) owner: i64,
    /// The payload's JSON sealed (ChaCha20-Poly1305, the event's source and id as associated
    /// data), base64: the nonce, then the ciphertext and its tag.
    #[serde(rename = "box")]
    pub(crate) sealed: String,
}

/// An event as the broker carries it: its payload with any person's data erased, and the
/// payload as written sealed beside it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Carried {
    /// The event, its payload erased where `sealed` is given.
    pub(crate) event: Event,
    /// The payload as written, sealed.
    pub(crate) sealed: Option<Sealed>,
}

impl From<Event> for Carried {
    fn from(event: Event) -> Self {
        Self {
            event,
            sealed: None,
        }
    }
}

/// A message's body as read: a run of events, or one event alone (earlier relays).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Body {
    Run { events: Vec<Wire> },
    One(Wire),
}

/// One message to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    /// Its subject.
    pub(crate) subject: String,
    /// Its `Nats-Msg-Id`, which JetStream's duplicate window goes by.
    pub(crate) id: String,
    /// The JSON body.
    pub(crate) body: Bytes,
}

/// The subject every event of `source` goes on.
pub(crate) fn subject(source: &str) -> String {
    format!("pms.events.{source}.batch")
}

/// The subjects of `source`'s events, earlier relays' included.
pub(crate) fn subjects(source: &str) -> String {
    format!("pms.events.{source}.>")
}

/// `events` (one producer's, in id order) as messages of at most [`MESSAGE_BYTES`] of events
/// each, in order.
///
/// # Errors
/// When an event cannot be serialized (a payload that is not JSON cannot come from an outbox).
pub(crate) fn messages(
    source: &str,
    events: &[Carried],
) -> Result<Vec<Message>, serde_json::Error> {
    let mut out = Vec::new();
    let mut body: Vec<u8> = Vec::new();
    let mut first_last: Option<(i64, i64)> = None;
    let mut flush = |body: &mut Vec<u8>, first_last: &mut Option<(i64, i64)>| {
        if let Some((first, last)) = first_last.take() {
            body.extend_from_slice(b"]}");
            out.push(Message {
                subject: subject(source),
                id: format!("{source}-{first}-{last}"),
                body: Bytes::from(std::mem::take(body)),
            });
        }
    };
    for Carried { event, sealed } in events {
        let one = serde_json::to_vec(&Wire {
            id: event.id,
            prev: Some(event.prev),
            source: event.source.clone(),
            aggregate_type: event.aggregate_type.clone(),
            aggregate_id: event.aggregate_id.clone(),
            event_type: event.event_type.clone(),
            version: event.version,
            payload: event.payload.clone(),
            created_at: event.created_at.clone(),
            sealed: sealed.clone(),
        })?;
        if first_last.is_some() && body.len() + one.len() > MESSAGE_BYTES {
            flush(&mut body, &mut first_last);
        }
        match &mut first_last {
            Some((_, last)) => {
                body.push(b',');
                *last = event.id;
            }
            None => {
                body.extend_from_slice(b"{\"events\":[");
                first_last = Some((event.id, event.id));
            }
        }
        body.extend_from_slice(&one);
    }
    flush(&mut body, &mut first_last);
    Ok(out)
}

/// The events in a message's body, in order.
///
/// # Errors
/// When the body is neither a run of events nor one event.
pub(crate) fn events(body: &[u8]) -> Result<Vec<Carried>, serde_json::Error> {
    let wires = match serde_json::from_slice(body)? {
        Body::Run { events } => events,
        Body::One(w) => vec![w],
    };
    Ok(wires
        .into_iter()
        .map(|w| Carried {
            event: Event {
                id: w.id,
                // Without it (an earlier relay), nothing can be told about gaps: 0 lets it follow
                // any position.
                prev: w.prev.unwrap_or(0),
                source: w.source,
                aggregate_type: w.aggregate_type,
                aggregate_id: w.aggregate_id,
                event_type: w.event_type,
                version: w.version,
                payload: w.payload,
                created_at: w.created_at,
            },
            sealed: w.sealed,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64, prev: i64, name: &str) -> Carried {
        Carried::from(Event {
            id,
            prev,
            source: "parks".into(),
            aggregate_type: "visit".into(),
            aggregate_id: id.to_string(),
            event_type: "visit.closed".into(),
            version: 1,
            payload: serde_json::json!({"name": name}),
            created_at: "2026-12-04T10:00:00Z".into(),
        })
    }

    #[test]
    fn a_run_of_events_travels_as_messages_and_comes_back_as_it_was() {
        let mut run = vec![
            event(3, 1, "a | \"b\" ü"),
            event(4, 3, "c"),
            event(7, 4, "d"),
        ];
        run[1].sealed = Some(Sealed {
            owner: 6,
            sealed: "AAAA".into(),
        });
        let sent = messages("parks", &run).expect("messages");
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].subject, "pms.events.parks.batch");
        assert_eq!(sent[0].id, "parks-3-7");
        assert_eq!(events(&sent[0].body).expect("read"), run);
        assert!(messages("parks", &[]).expect("none").is_empty());
    }

    #[test]
    fn messages_stay_under_their_size_and_keep_the_order() {
        let big = "x".repeat(MESSAGE_BYTES / 3);
        let run: Vec<Carried> = (1..=7).map(|id| event(id, id - 1, &big)).collect();
        let sent = messages("parks", &run).expect("messages");
        assert!(sent.len() >= 3, "{}", sent.len());
        assert!(sent.iter().all(|m| m.body.len() <= MESSAGE_BYTES + 1024));
        let back: Vec<Carried> = sent
            .iter()
            .flat_map(|m| events(&m.body).expect("read"))
            .collect();
        assert_eq!(back, run);
        // One event larger than a message goes alone.
        let huge = vec![event(9, 8, &"y".repeat(MESSAGE_BYTES * 2))];
        assert_eq!(messages("parks", &huge).expect("alone").len(), 1);
    }

    #[test]
    fn an_earlier_relays_single_event_is_read_with_no_prev() {
        let body = br#"{"id":5,"source":"parks","aggregate_type":"visit","aggregate_id":"5",
            "event_type":"visit.opened","version":1,"payload":{},"created_at":"2026-12-01T00:00:00Z"}"#;
        let read = events(body).expect("read");
        assert_eq!(read.len(), 1);
        assert_eq!((read[0].event.id, read[0].event.prev), (5, 0));
        assert_eq!(read[0].sealed, None);
        assert!(events(b"{\"nope\": 1}").is_err());
    }
}
