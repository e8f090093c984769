//! An event: what changed (`event_type`, with a schema `version`), to what (`aggregate_type`
//! and `aggregate_id`), the details as JSON (`payload`), when, and the producer's outbox id,
//! which orders a producer's events and identifies each one. Schemas per type are in
//! `docs/events.md`; a consumer ignores payload fields it does not know and parks versions it
//! cannot read.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// An event read from a producer's outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The outbox id: increasing within one producer, in the order a reader gets them (a read
    /// never passes an id that may still commit, [`crate::Outbox::read_after`]).
    pub id: i64,
    /// The id of the event before this one in the producer's outbox, as its reader found it (0
    /// before the first). Ids between the two never committed. A consumer whose position `p`
    /// has `prev <= p < id` has applied everything before this event and not this one; with
    /// `p < prev`, events it never saw lie between ([`crate::Applied`] checks it).
    pub prev: i64,
    /// The producing service (`users`, `parks`, `payments`).
    pub source: String,
    /// What kind of thing changed (`customer`, `visit`, `invoice`, …).
    pub aggregate_type: String,
    /// Which one.
    pub aggregate_id: String,
    /// What happened (`customer.registered`, …).
    pub event_type: String,
    /// The payload's schema version.
    pub version: i64,
    /// The details.
    pub payload: serde_json::Value,
    /// When it was written (RFC 3339, UTC).
    pub created_at: String,
}

impl Event {
    /// How long ago it was written to its outbox; zero when its time does not parse or lies
    /// ahead (another machine's clock).
    pub fn age(&self) -> std::time::Duration {
        self.created_at
            .parse::<jiff::Timestamp>()
            .ok()
            .and_then(|t| jiff::Timestamp::now().duration_since(t).try_into().ok())
            .unwrap_or_default()
    }

    /// The payload as `T`, when the version is one `T` reads (`readable`).
    ///
    /// # Errors
    /// Why it cannot be read: an unknown version or a payload of another shape. Consumers park
    /// the event with this reason.
    pub fn decode<T: DeserializeOwned>(&self, readable: &[i64]) -> Result<T, String> {
        if !readable.contains(&self.version) {
            return Err(format!(
                "{} version {} is not readable here (reads {readable:?})",
                self.event_type, self.version
            ));
        }
        serde_json::from_value(self.payload.clone())
            .map_err(|e| format!("{} payload does not match its schema: {e}", self.event_type))
    }
}

/// An event to append to the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// What kind of thing changed.
    pub aggregate_type: &'static str,
    /// Which one.
    pub aggregate_id: String,
    /// What happened.
    pub event_type: &'static str,
    /// The payload's schema version.
    pub version: i64,
    /// The details, serialized.
    pub payload: String,
}

impl NewEvent {
    /// An event with `payload` serialized to JSON.
    ///
    /// # Errors
    /// When the payload cannot be serialized (a bug in its type).
    pub fn new<T: Serialize>(
        aggregate_type: &'static str,
        aggregate_id: impl ToString,
        event_type: &'static str,
        version: i64,
        payload: &T,
    ) -> Result<Self, serde_json::Error> {
        Ok(Self {
            aggregate_type,
            aggregate_id: aggregate_id.to_string(),
            event_type,
            version,
            payload: serde_json::to_string(payload)?,
        })
    }
}

/// `payload` (an event's JSON object) with each of `fields` that it has set to the value given;
/// `None` when it is not an object or has none of them (nothing to rewrite). Fields it lacks are
/// not added, so a reader of an older version finds the shape it knows.
pub fn rewrite(
    payload: &str,
    fields: &serde_json::Map<String, serde_json::Value>,
) -> Option<String> {
    let doc: serde_json::Value = serde_json::from_str(payload).ok()?;
    erase(&doc, fields).map(|doc| doc.to_string())
}

/// [`rewrite`] for a payload already read.
pub fn erase(
    payload: &serde_json::Value,
    fields: &serde_json::Map<String, serde_json::Value>,
) -> Option<serde_json::Value> {
    let object = payload.as_object()?;
    let mut changed = false;
    let mut out = object.clone();
    for (name, value) in fields {
        if let Some(slot) = out.get_mut(name) {
            slot.clone_from(value);
            changed = true;
        }
    }
    changed.then_some(serde_json::Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Named {
        name: String,
    }

    fn event(version: i64, payload: serde_json::Value) -> Event {
        Event {
            id: 1,
            prev: 0,
            source: "users".into(),
            aggregate_type: "customer".into(),
            aggregate_id: "4".into(),
            event_type: "customer.registered".into(),
            version,
            payload,
            created_at: "2026-11-27T00:00:00Z".into(),
        }
    }

    #[test]
    fn an_events_age_is_the_time_since_it_was_written_and_never_negative() {
        let mut e = event(1, serde_json::json!({}));
        e.created_at = (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(10)).to_string();
        assert!(
            (10.0..11.0).contains(&e.age().as_secs_f64()),
            "{:?}",
            e.age()
        );
        e.created_at = "2999-01-01T00:00:00Z".into();
        assert_eq!(e.age(), std::time::Duration::ZERO);
        e.created_at = "not a time".into();
        assert_eq!(e.age(), std::time::Duration::ZERO);
    }

    #[test]
    fn unknown_fields_are_ignored_unknown_versions_refused() {
        let e = event(1, serde_json::json!({"name": "A | B", "later": true}));
        assert_eq!(
            e.decode::<Named>(&[1]),
            Ok(Named {
                name: "A | B".into()
            })
        );
        assert!(event(2, serde_json::json!({"name": "x"}))
            .decode::<Named>(&[1])
            .unwrap_err()
            .contains("version 2"));
        assert!(event(1, serde_json::json!({"nom": "x"}))
            .decode::<Named>(&[1])
            .is_err());
    }

    #[test]
    fn only_the_fields_present_are_rewritten() {
        let visit =
            r#"{"visitId":7,"plate":"46-ON-05","nif":514884112,"customerName":"Rui Soares"}"#;
        let fields =
            serde_json::json!({"plate": "erased-7", "nif": 0, "customerName": "", "email": ""});
        let fields = fields.as_object().expect("object");
        let erased = rewrite(visit, fields).expect("rewritten");
        let doc: serde_json::Value = serde_json::from_str(&erased).expect("json");
        assert_eq!(
            doc,
            serde_json::json!({"visitId": 7, "plate": "erased-7", "nif": 0, "customerName": ""})
        );
        let nif = serde_json::json!({"nif": 0});
        let nif = nif.as_object().expect("object");
        assert_eq!(rewrite(r#"{"invoiceId":1}"#, nif), None);
        assert_eq!(rewrite("[1]", nif), None);
        assert_eq!(rewrite("not json", nif), None);
    }
}
