//! A park's devices as an operator sees them: each barrier (direction, state, clock offset) with
//! its displays and the text each shows now (two reads of small tables; nothing on the barrier
//! path); adding barriers and displays, switching one on or off, issuing one its own key, and
//! the keys issued, as the device endpoints check them; when each device was last heard from.
//! Each change is in the audit trail.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use pms_service::audit::{AuditConn, Entry};
use pms_service::{repeatable, transaction};
use serde::Serialize;

use super::admin::one_creation_at_a_time;
use super::{instant, ms, retry, Store, StoreError};
use crate::devices::IssuedKey;
use crate::model::{
    BarrierDevices, DeviceSwitched, DeviceType, Direction, DisplayDevice, ParkDevices, State,
};

/// The table of each kind of device, and what a 404 calls it.
fn table(kind: DeviceType) -> (&'static str, &'static str) {
    match kind {
        DeviceType::Barrier => ("barriers", "barrier"),
        DeviceType::Display => ("displays", "display"),
    }
}

/// How the audit trail names a device.
fn device_subject(kind: DeviceType, id: i64) -> String {
    format!("{} {id}", table(kind).1)
}

/// The keys issued to devices, as read lately (the SHA-256 of each, or none: the derived key
/// applies), by kind and id. A key issued through this replica applies here at once, through
/// another within [`TTL`](super::recent::TTL).
pub type IssuedKeys = super::recent::Recent<(DeviceType, i64), Option<String>>;

/// When devices last proved themselves with their key, as this replica saw it and has not
/// written yet: noted on every device request (memory only), written every
/// [`CONTACTS_WRITTEN_EVERY`] by [`Store::write_contacts`], so the barrier's path gains no write.
#[derive(Debug, Default)]
pub struct Contacts(Mutex<HashMap<(DeviceType, i64), i64>>);

/// How often the contacts noted are written.
pub const CONTACTS_WRITTEN_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

impl Contacts {
    fn note(&self, kind: DeviceType, id: i64, at_ms: i64) {
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let last = seen.entry((kind, id)).or_insert(at_ms);
        *last = (*last).max(at_ms);
    }

    fn get(&self, kind: DeviceType, id: i64) -> Option<i64> {
        let seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(&(kind, id)).copied()
    }

    fn take(&self) -> HashMap<(DeviceType, i64), i64> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A key issued to a device, as `rotateDeviceKey` answers it: the only time it is shown.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyIssued {
    /// Barrier or display.
    pub device: DeviceType,
    /// Its id.
    #[serde(rename = "deviceID")]
    pub device_id: i64,
    /// The key (64 hex digits), for the device's `X-Device-Key`. Not stored, not shown again.
    pub key: String,
    /// When it was issued (RFC 3339): the key it had stopped working then.
    #[schema(format = DateTime)]
    pub issued_at: String,
}

impl Store {
    /// The barriers and displays of park `number`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown park; database failures.
    pub async fn devices(&self, number: i64) -> Result<ParkDevices, StoreError> {
        let park = self.park(number).await?;
        type BarrierRow = (
            i64,
            String,
            String,
            String,
            Option<i64>,
            Option<i64>,
            Option<i64>,
        );
        let barriers: Vec<BarrierRow> = repeatable!(self, |conn| {
            sqlx::query_as(
                "SELECT id, barrier_number, direction, state, clock_offset_ms, clock_seen_at_ms, \
                 last_contact_ms FROM barriers WHERE park_id = $1 ORDER BY barrier_number, id",
            )
            .bind(park.id)
            .fetch_all(&mut *conn)
            .await
        })?;
        type DisplayRow = (i64, String, i64, String, String, i64, Option<i64>);
        let displays: Vec<DisplayRow> = repeatable!(self, |conn| {
            sqlx::query_as(
                "SELECT id, display_number, barrier_id, state, message, updated_at_ms, \
                 last_contact_ms FROM displays WHERE park_id = $1 ORDER BY display_number, id",
            )
            .bind(park.id)
            .fetch_all(&mut *conn)
            .await
        })?;
        let free: i64 = repeatable!(self, |conn| {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM spots WHERE park_id = $1 AND operational = 1 AND occupied = 0",
            )
            .bind(park.id)
            .fetch_one(&mut *conn)
            .await
        })?;
        let state = |s: &str| State::parse(s).ok_or_else(|| StoreError::Internal(s.to_owned()));
        // What this replica saw and has not written yet is newer.
        let contact = |kind, id, written: Option<i64>| {
            self.contacts
                .get(kind, id)
                .max(written)
                .map(|at| instant(at).to_string())
        };
        let barriers = barriers
            .into_iter()
            .map(|(id, number, direction, s, offset, seen, last)| {
                Ok(BarrierDevices {
                    barrier_id: id,
                    barrier_number: number,
                    direction: Direction::parse(&direction)
                        .ok_or_else(|| StoreError::Internal(direction.clone()))?,
                    state: state(&s)?,
                    clock_offset_ms: offset,
                    clock_seen_at: seen.map(|at| instant(at).to_string()),
                    last_contact_at: contact(DeviceType::Barrier, id, last),
                    displays: displays
                        .iter()
                        .filter(|d| d.2 == id)
                        .map(|(did, dnumber, _, ds, message, at, last)| {
                            Ok(DisplayDevice {
                                display_id: *did,
                                display_number: dnumber.clone(),
                                state: state(ds)?,
                                message: message.clone(),
                                updated_at: instant(*at).to_string(),
                                last_contact_at: contact(DeviceType::Display, *did, *last),
                            })
                        })
                        .collect::<Result<_, StoreError>>()?,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(ParkDevices {
            park_number: park.number,
            free_spots: free,
            barriers,
        })
    }

    /// Notes that device `id` of `kind` proved itself now.
    pub fn note_contact(&self, kind: DeviceType, id: i64) {
        self.contacts
            .note(kind, id, jiff::Timestamp::now().as_millisecond());
    }

    /// Writes the contacts noted since the last call (each only forward in time); returns how
    /// many. Those not written (the database away) are noted again for the next call.
    ///
    /// # Errors
    /// Database failures.
    pub async fn write_contacts(&self) -> Result<usize, StoreError> {
        let seen = self.contacts.take();
        if seen.is_empty() {
            return Ok(0);
        }
        let mut rows: Vec<_> = seen
            .iter()
            .map(|(&(kind, id), &at)| (kind, id, at))
            .collect();
        rows.sort_by_key(|&(kind, id, _)| (table(kind).0, id));
        let written = retry(|| async {
            let r: Result<usize, StoreError> = transaction!(self, |tx| {
                for (kind, id, at) in &rows {
                    let sql = format!(
                        "UPDATE {} SET last_contact_ms = $1 WHERE id = $2 \
                         AND (last_contact_ms IS NULL OR last_contact_ms < $1)",
                        table(*kind).0
                    );
                    sqlx::query(&sql)
                        .bind(at)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                }
                Ok::<usize, StoreError>(rows.len())
            });
            r
        })
        .await;
        if written.is_err() {
            for (kind, id, at) in rows {
                self.contacts.note(kind, id, at);
            }
        }
        written
    }

    /// The SHA-256 of the key issued to device `id` of `kind`, or none (its derived key
    /// applies, and for a device that does not exist, which is not cached).
    ///
    /// # Errors
    /// Database failures.
    pub async fn issued_key(
        &self,
        kind: DeviceType,
        id: i64,
    ) -> Result<Option<String>, StoreError> {
        if let Some(hash) = self.keys.get(&(kind, id)) {
            return Ok(hash);
        }
        let sql = format!("SELECT key_hash FROM {} WHERE id = $1", table(kind).0);
        let hash: Option<Option<String>> = repeatable!(self, |conn| {
            sqlx::query_scalar(&sql)
                .bind(id)
                .fetch_optional(&mut *conn)
                .await
        })?;
        // Only a device that exists is kept: ids nobody has, sent by anyone, would fill the
        // cache.
        if let Some(on_file) = &hash {
            self.keys.put((kind, id), on_file.clone());
        }
        Ok(hash.flatten())
    }

    /// Issues device `id` of park `number` a new key of its own; `by` is the park manager. The
    /// key it had (issued or derived) stops working at once on this replica, on the others
    /// within [`TTL`](super::recent::TTL); no other device is touched.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown park, or a device that is not one of its own;
    /// database failures.
    pub async fn issue_key(
        &self,
        number: i64,
        kind: DeviceType,
        id: i64,
        by: i64,
    ) -> Result<KeyIssued, StoreError> {
        let park = self.park(number).await?;
        let issued = IssuedKey::new().map_err(StoreError::internal)?;
        let (table, what) = table(kind);
        let now = jiff::Timestamp::now();
        let set =
            format!("UPDATE {table} SET key_hash = $1 WHERE id = $2 AND park_id = $3 RETURNING id");
        retry(|| async {
            let r: Result<(), StoreError> = transaction!(self, |tx| {
                let found: Option<i64> = sqlx::query_scalar(&set)
                    .bind(&issued.hash)
                    .bind(id)
                    .bind(park.id)
                    .fetch_optional(&mut *tx)
                    .await?;
                if found.is_none() {
                    return Err(StoreError::not_found(what, id));
                }
                let entry = Entry::new(by, "device.key_issued", device_subject(kind, id))
                    .after(&serde_json::json!({"park": park.number, "issuedAt": now.to_string()}));
                tx.audit(&entry).await?;
                Ok(())
            });
            r
        })
        .await?;
        self.keys.put((kind, id), Some(issued.hash.clone()));
        Ok(KeyIssued {
            device: kind,
            device_id: id,
            key: issued.key,
            issued_at: now.to_string(),
        })
    }

    /// Adds a barrier numbered `barrier_number` to park `number`, in service; `by` is the park
    /// manager. Until it is issued a key of its own, its derived key works.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown park; [`StoreError::Conflict`]
    /// `barrier_number_taken`; database failures.
    pub async fn create_barrier(
        &self,
        number: i64,
        barrier_number: &str,
        direction: Direction,
        by: i64,
    ) -> Result<BarrierDevices, StoreError> {
        let park = self.park(number).await?;
        retry(|| async {
            let r: Result<BarrierDevices, StoreError> = transaction!(self, |tx| {
                one_creation_at_a_time!(self, tx);
                let taken: Option<i64> = sqlx::query_scalar(
                    "SELECT id FROM barriers WHERE park_id = $1 AND barrier_number = $2",
                )
                .bind(park.id)
                .bind(barrier_number)
                .fetch_optional(&mut *tx)
                .await?;
                if taken.is_some() {
                    return Err(StoreError::Conflict {
                        reason: "barrier_number_taken",
                        field: Some("barrierNumber"),
                        message: format!("park {number} has a barrier {barrier_number} already"),
                    });
                }
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO barriers (id, park_id, barrier_number, direction, state)                      SELECT COALESCE(MAX(id), 0) + 1, $1, $2, $3, 'ACTIVE' FROM barriers RETURNING id",
                )
                .bind(park.id)
                .bind(barrier_number)
                .bind(direction.as_str())
                .fetch_one(&mut *tx)
                .await?;
                let barrier = BarrierDevices {
                    barrier_id: id,
                    barrier_number: barrier_number.to_owned(),
                    direction,
                    state: State::Active,
                    clock_offset_ms: None,
                    clock_seen_at: None,
                    last_contact_at: None,
                    displays: Vec::new(),
                };
                let entry = Entry::new(by, "barrier.created", device_subject(DeviceType::Barrier, id))
                    .after(&serde_json::json!({"park": number, "barrier": &barrier}));
                tx.audit(&entry).await?;
                Ok(barrier)
            });
            r
        })
        .await
    }

    /// Adds a display numbered `display_number` by barrier `barrier_id` of park `number`, in
    /// service, showing a welcome; `by` is the park manager. Returns the barrier with its
    /// displays.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown park or a barrier not its own (as
    /// `setDeviceState` and `rotateDeviceKey` answer a device not the park's);
    /// [`StoreError::Conflict`] `display_number_taken`; database failures.
    pub async fn create_display(
        &self,
        number: i64,
        display_number: &str,
        barrier_id: i64,
        by: i64,
    ) -> Result<BarrierDevices, StoreError> {
        let park = self.park(number).await?;
        let now = ms(jiff::Timestamp::now());
        retry(|| async {
            let r: Result<i64, StoreError> = transaction!(self, |tx| {
                one_creation_at_a_time!(self, tx);
                let barrier: Option<i64> =
                    sqlx::query_scalar("SELECT id FROM barriers WHERE id = $1 AND park_id = $2")
                        .bind(barrier_id)
                        .bind(park.id)
                        .fetch_optional(&mut *tx)
                        .await?;
                if barrier.is_none() {
                    return Err(StoreError::not_found("barrier", barrier_id));
                }
                let taken: Option<i64> = sqlx::query_scalar(
                    "SELECT id FROM displays WHERE park_id = $1 AND display_number = $2",
                )
                .bind(park.id)
                .bind(display_number)
                .fetch_optional(&mut *tx)
                .await?;
                if taken.is_some() {
                    return Err(StoreError::Conflict {
                        reason: "display_number_taken",
                        field: Some("displayNumber"),
                        message: format!("park {number} has a display {display_number} already"),
                    });
                }
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO displays (id, park_id, display_number, barrier_id, state, message,                      updated_at_ms) SELECT COALESCE(MAX(id), 0) + 1, $1, $2, $3, 'ACTIVE', $4, $5                      FROM displays RETURNING id",
                )
                .bind(park.id)
                .bind(display_number)
                .bind(barrier_id)
                .bind(NEW_DISPLAY_MESSAGE)
                .bind(now)
                .fetch_one(&mut *tx)
                .await?;
                let entry = Entry::new(by, "display.created", device_subject(DeviceType::Display, id))
                    .after(&serde_json::json!({
                        "park": number, "displayNumber": display_number, "barrierId": barrier_id
                    }));
                tx.audit(&entry).await?;
                Ok(id)
            });
            r
        })
        .await?;
        let devices = self.devices(number).await?;
        devices
            .barriers
            .into_iter()
            .find(|b| b.barrier_id == barrier_id)
            .ok_or_else(|| StoreError::not_found("barrier", barrier_id))
    }

    /// Switches device `id` of park `number` on or off (`by`: the park manager): a switched-off barrier opens for
    /// nobody and writes no display, a switched-off display is given no message. A display's
    /// change version moves, so a display waiting on it learns at once. This replica forgets the
    /// barrier it cached; the others read it again within [`super::visits::BARRIER_CACHE_TTL`].
    /// Returns the park's id with the outcome.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown park, or a device that is not one of its own;
    /// database failures.
    pub async fn set_device_state(
        &self,
        number: i64,
        device: DeviceType,
        id: i64,
        state: State,
        by: i64,
    ) -> Result<(i64, DeviceSwitched), StoreError> {
        let park = self.park(number).await?;
        let (table, what) = table(device);
        let moved = match device {
            DeviceType::Barrier => "",
            DeviceType::Display => ", changes = changes + 1",
        };
        let entry = Entry::new(by, "device.switched", device_subject(device, id))
            .after(&serde_json::json!({"park": number, "state": state}));
        let switch = format!(
            "UPDATE {table} SET state = $1{moved} WHERE id = $2 AND park_id = $3 AND state <> $1 \
             RETURNING id"
        );
        let exists = format!("SELECT id FROM {table} WHERE id = $1 AND park_id = $2");
        let changed = super::retry(|| async {
            transaction!(self, |tx| {
                let switched: Option<i64> = sqlx::query_scalar(&switch)
                    .bind(state.as_str())
                    .bind(id)
                    .bind(park.id)
                    .fetch_optional(&mut *tx)
                    .await?;
                if switched.is_some() {
                    tx.audit(&entry).await?;
                    return Ok(true);
                }
                let found: Option<i64> = sqlx::query_scalar(&exists)
                    .bind(id)
                    .bind(park.id)
                    .fetch_optional(&mut *tx)
                    .await?;
                match found {
                    Some(_) => Ok(false),
                    None => Err(StoreError::not_found(what, id)),
                }
            })
        })
        .await?;
        if device == DeviceType::Barrier {
            self.barriers.forget(&id);
        }
        let switched = DeviceSwitched {
            device,
            device_id: id,
            state,
            changed,
        };
        Ok((park.id, switched))
    }
}

/// What a new display shows until it is given a message.
pub const NEW_DISPLAY_MESSAGE: &str = "Welcome!";
