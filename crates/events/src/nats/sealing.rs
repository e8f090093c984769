//! A person's data on the broker, sealed so that it can be erased there too.
//!
//! JetStream cannot rewrite a message, and deleting one leaves a gap that a reader starting
//! before it must set aside as missing. So an event that carries a person's data
//! ([`pms_vocab::personal`]) travels with those fields erased in its payload, and the payload as
//! written sealed beside it under a key of that person's own (ChaCha20-Poly1305; the event's
//! source and id as associated data, so a box opens for its own event only). The keys live in
//! the JetStream key-value bucket [`KEYS_BUCKET`] (one value per customer, no history), drawn by
//! the first relay that needs one. A reader opens each box with its owner's key and applies the
//! event as written.
//!
//! When the relay publishes a `customer.closed`, it schedules the erasure of that customer's key
//! ([`ERASURES_BUCKET`]) after a delay ([`DEFAULT_ERASE_AFTER`], `--nats-erase-after-s`): the
//! readers that were behind get what the events said meanwhile (a stay that ended before the
//! closure is invoiced with its tax number, as the outbox's erasure waits for its readers too),
//! and a car still inside that leaves within the delay is sealed under the same key. Once the
//! key is replaced by a mark ([`Keyring::sweep`]), no copy on the broker opens any more: every
//! reader gets the erased payloads, the same as the outboxes hold after their erasure. A key
//! drawn over the mark (a car that left after the delay) is scheduled for erasure in turn.
//! Each process keeps the keys it read, current by a watch of the bucket (the `keycache`
//! module).

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use base64::Engine as _;
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use super::keycache::{key_in, owner_of, Key, KeyCache};
use super::wire::{Carried, Sealed};
use super::{nats_error, NatsError};
use crate::event::{self, Event};

/// The bucket of the customers' keys.
pub const KEYS_BUCKET: &str = "PMS_KEYS";
/// The bucket of the keys to erase, each with when (ms since the epoch).
pub const ERASURES_BUCKET: &str = "PMS_ERASURES";
/// How long after a closure its customer's key is erased, unless told otherwise.
pub const DEFAULT_ERASE_AFTER: Duration = Duration::from_secs(24 * 3600);
/// What a customer's entry holds once their key is erased.
const ERASED: &[u8] = b"erased";
/// Keys read at once.
const READS_AT_ONCE: usize = 16;

/// The customers' keys, and the erasures scheduled.
#[derive(Clone)]
pub(crate) struct Keyring {
    keys: kv::Store,
    /// The keys as last read, kept current (shared by the copies).
    cache: std::sync::Arc<KeyCache>,
    erasures: kv::Store,
    /// How long after a closure its customer's key is erased.
    erase_after: Duration,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keyring(..)")
    }
}

/// The name of `owner`'s entry in either bucket.
fn entry(owner: i64) -> String {
    format!("customer.{owner}")
}

/// The bucket `name` (no history: a value replaced or purged is gone), made if missing. Made as
/// a stream of the key-value layout, as `create_key_value` would (which first asks for the
/// account's details, whose answer from nats-server 2.9 the client cannot read).
async fn bucket(
    js: &jetstream::Context,
    name: &str,
    description: &str,
) -> Result<kv::Store, NatsError> {
    js.get_or_create_stream(jetstream::stream::Config {
        name: format!("KV_{name}"),
        description: Some(description.into()),
        subjects: vec![format!("$KV.{name}.>")],
        max_messages_per_subject: 1,
        storage: jetstream::stream::StorageType::File,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: jetstream::stream::DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .map_err(nats_error)?;
    js.get_key_value(name).await.map_err(nats_error)
}

impl Keyring {
    /// The buckets on `js`, made if missing.
    pub(crate) async fn new(js: &jetstream::Context) -> Result<Self, NatsError> {
        let keys = bucket(
            js,
            KEYS_BUCKET,
            "PMS: each customer's key to their data on the broker",
        )
        .await?;
        Ok(Self {
            cache: KeyCache::watching(keys.clone()),
            keys,
            erasures: bucket(
                js,
                ERASURES_BUCKET,
                "PMS: customers' keys to erase, and when",
            )
            .await?,
            erase_after: DEFAULT_ERASE_AFTER,
        })
    }

    /// The same buckets, a closure's key erased `after` it was published.
    pub(crate) fn erasing_after(&self, after: Duration) -> Self {
        Self {
            erase_after: after,
            ..self.clone()
        }
    }

    /// `owner`'s key; `None` once erased (or never drawn).
    async fn key_of(&self, owner: i64) -> Result<Option<Key>, NatsError> {
        if let Some(known) = self.cache.get(owner) {
            return Ok(known);
        }
        let epoch = self.cache.epoch();
        let now = self.keys.entry(entry(owner)).await.map_err(nats_error)?;
        let (revision, key) = match now {
            Some(e) if e.operation == kv::Operation::Put => (e.revision, key_in(&e.value)),
            Some(e) => (e.revision, None),
            None => (0, None),
        };
        self.cache.note(epoch, owner, revision, key);
        Ok(key)
    }

    /// `owner`'s key, drawn now if they have none. A customer whose key was erased (a closed
    /// account with a car still inside, leaving after the delay) gets a new one, scheduled for
    /// erasure after the delay in turn: no key of a closed account outlives it. Another relay
    /// drawing one at the same time wins, and both use its.
    async fn key_for(&self, owner: i64) -> Result<Key, NatsError> {
        if let Some(Some(key)) = self.cache.get(owner) {
            return Ok(key);
        }
        for _ in 0..3 {
            let epoch = self.cache.epoch();
            let now = self.keys.entry(entry(owner)).await.map_err(nats_error)?;
            let erased = match &now {
                Some(e) if e.operation == kv::Operation::Put => {
                    if let Some(key) = key_in(&e.value) {
                        self.cache.note(epoch, owner, e.revision, Some(key));
                        return Ok(key);
                    }
                    Some(e.revision)
                }
                _ => None,
            };
            let mut key = Key::default();
            SystemRandom::new()
                .fill(&mut key)
                .map_err(|_| NatsError("no randomness for a key".into()))?;
            let value = Bytes::copy_from_slice(&key);
            let drawn = match erased {
                Some(revision) => {
                    // Scheduled first: a relay that dies next leaves no key unscheduled.
                    self.schedule(owner).await?;
                    self.keys.update(entry(owner), value, revision).await.ok()
                }
                None => match self.keys.create(entry(owner), value).await {
                    Ok(revision) => Some(revision),
                    Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => None,
                    Err(e) => return Err(nats_error(e)),
                },
            };
            if let Some(revision) = drawn {
                self.cache.note(epoch, owner, revision, Some(key));
                return Ok(key);
            }
        }
        Err(NatsError(format!(
            "customer {owner}'s key kept changing as it was drawn"
        )))
    }

    /// Schedules the erasure of `owner`'s key, its delay from now (a later schedule replaces an
    /// earlier one).
    pub(crate) async fn schedule(&self, owner: i64) -> Result<(), NatsError> {
        let after = i64::try_from(self.erase_after.as_millis()).unwrap_or(i64::MAX);
        let due = jiff::Timestamp::now()
            .as_millisecond()
            .saturating_add(after);
        self.erasures
            .put(entry(owner), due.to_string().into())
            .await
            .map_err(nats_error)?;
        Ok(())
    }

    /// Erases the keys whose time has come; returns how many.
    pub(crate) async fn sweep(&self) -> Result<usize, NatsError> {
        let names: Vec<String> = self
            .erasures
            .keys()
            .await
            .map_err(nats_error)?
            .try_collect()
            .await
            .map_err(nats_error)?;
        let now = jiff::Timestamp::now().as_millisecond();
        let mut erased = 0;
        for name in names {
            let Some(due) = self.erasures.get(&name).await.map_err(nats_error)? else {
                continue;
            };
            // An entry that is not a time is erased at once: nothing but this writes there.
            let due: i64 = std::str::from_utf8(&due)
                .ok()
                .and_then(|d| d.parse().ok())
                .unwrap_or(0);
            if due <= now {
                // Replaced (the bucket keeps no history): the key is gone, and the mark says a
                // key drawn for them later is to go too.
                let epoch = self.cache.epoch();
                let revision = self
                    .keys
                    .put(&name, Bytes::from_static(ERASED))
                    .await
                    .map_err(nats_error)?;
                if let Some(owner) = owner_of(&name) {
                    // Known here at once; elsewhere as the watch tells.
                    self.cache.note(epoch, owner, revision, None);
                }
                self.erasures.purge(&name).await.map_err(nats_error)?;
                erased += 1;
            }
        }
        Ok(erased)
    }
}

/// `key` of each of `owners` (each once, a few at once).
async fn per_owner<T, F>(
    owners: impl Iterator<Item = i64>,
    key: impl Fn(i64) -> F,
) -> Result<HashMap<i64, T>, NatsError>
where
    F: std::future::Future<Output = Result<T, NatsError>>,
{
    let mut owners: Vec<i64> = owners.collect();
    owners.sort_unstable();
    owners.dedup();
    futures_util::stream::iter(owners)
        .map(|owner| {
            let read = key(owner);
            async move { Ok((owner, read.await?)) }
        })
        .buffer_unordered(READS_AT_ONCE)
        .try_collect()
        .await
}

/// The associated data a box is sealed with: its event, so it opens for that event only.
fn aad(event: &Event) -> String {
    format!("{}/{}", event.source, event.id)
}

/// `payload` sealed under `key` for `aad`: base64 of the nonce, the ciphertext and its tag.
fn seal_payload(key: &Key, aad: &str, payload: &serde_json::Value) -> Result<String, NatsError> {
    let sealing = LessSafeKey::new(
        UnboundKey::new(&CHACHA20_POLY1305, key).map_err(|_| NatsError("a bad key".into()))?,
    );
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| NatsError("no randomness for a nonce".into()))?;
    let mut text = serde_json::to_vec(payload).map_err(nats_error)?;
    sealing
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad.as_bytes()),
            &mut text,
        )
        .map_err(|_| NatsError("sealing failed".into()))?;
    let mut boxed = nonce.to_vec();
    boxed.extend_from_slice(&text);
    Ok(base64::engine::general_purpose::STANDARD.encode(boxed))
}

/// The payload sealed in `boxed` for `aad`; `None` when `key` does not open it (another key,
/// another event, or not a box at all).
fn open_payload(key: &Key, aad: &str, boxed: &str) -> Option<serde_json::Value> {
    let mut bytes = base64::engine::general_purpose::STANDARD
        .decode(boxed)
        .ok()?;
    if bytes.len() < NONCE_LEN {
        return None;
    }
    let mut text = bytes.split_off(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(&bytes).ok()?;
    let opening = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, key).ok()?);
    let plain = opening
        .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut text)
        .ok()?;
    serde_json::from_slice(plain).ok()
}

/// `events` as the broker is to carry them: each that carries a person's data with those fields
/// erased and its payload as written sealed under their key.
///
/// # Errors
/// When a key cannot be read or drawn (the broker is away).
pub(crate) async fn seal(keyring: &Keyring, events: &[Event]) -> Result<Vec<Carried>, NatsError> {
    let personal: Vec<_> = events
        .iter()
        .map(|e| pms_vocab::personal::personal(&e.event_type, &e.payload))
        .collect();
    let owners = personal.iter().flatten().map(|p| p.owner);
    let keys = per_owner(owners, |owner| keyring.key_for(owner)).await?;
    let mut carried = Vec::with_capacity(events.len());
    for (event, personal) in events.iter().zip(personal) {
        let Some(personal) = personal else {
            carried.push(Carried::from(event.clone()));
            continue;
        };
        let Some(key) = keys.get(&personal.owner) else {
            return Err(NatsError(format!(
                "no key drawn for customer {}",
                personal.owner
            )));
        };
        let sealed = seal_payload(key, &aad(event), &event.payload)?;
        let mut erased = event.clone();
        if let Some(payload) = event::erase(&event.payload, &personal.erased) {
            erased.payload = payload;
        }
        carried.push(Carried {
            event: erased,
            sealed: Some(Sealed {
                owner: personal.owner,
                sealed,
            }),
        });
    }
    Ok(carried)
}

/// The events in `carried` as their readers apply them: each sealed payload opened with its
/// owner's key; where the key was erased (or does not open it), the erased payload the broker
/// carries.
///
/// # Errors
/// When a key cannot be read (the broker is away): nothing is to be applied then, as written
/// or erased, until it can.
pub(crate) async fn open(
    keyring: &Keyring,
    carried: Vec<Carried>,
) -> Result<Vec<Event>, NatsError> {
    let owners = carried
        .iter()
        .filter_map(|c| c.sealed.as_ref().map(|s| s.owner));
    let keys = per_owner(owners, |owner| keyring.key_of(owner)).await?;
    Ok(carried
        .into_iter()
        .map(|Carried { mut event, sealed }| {
            let opened = sealed.and_then(|s| {
                let key = keys.get(&s.owner).copied().flatten()?;
                open_payload(&key, &aad(&event), &s.sealed)
            });
            if let Some(payload) = opened {
                event.payload = payload;
            }
            event
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_box_opens_with_its_key_for_its_event_only() {
        let (key, other) = ([7u8; 32], [8u8; 32]);
        let payload = json!({"customerName": "Rui Soares | ü", "nif": 514884112});
        let boxed = seal_payload(&key, "parks/12", &payload).expect("sealed");
        assert!(!boxed.contains("Rui"));
        assert_eq!(
            open_payload(&key, "parks/12", &boxed),
            Some(payload.clone())
        );
        // Sealed twice, two different boxes (a nonce of its own each).
        assert_ne!(
            seal_payload(&key, "parks/12", &payload).expect("again"),
            boxed
        );
        assert_eq!(
            open_payload(&other, "parks/12", &boxed),
            None,
            "another key"
        );
        assert_eq!(
            open_payload(&key, "parks/13", &boxed),
            None,
            "moved to another event"
        );
        assert_eq!(open_payload(&key, "parks/12", "AAAA"), None, "too short");
        assert_eq!(open_payload(&key, "parks/12", "not base64!"), None);
        let mut tampered = base64::engine::general_purpose::STANDARD
            .decode(&boxed)
            .expect("b64");
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        let tampered = base64::engine::general_purpose::STANDARD.encode(tampered);
        assert_eq!(open_payload(&key, "parks/12", &tampered), None, "tampered");
    }
}
