//! A park's devices as an operator sees them: each barrier (direction, state, clock offset) with
//! its displays and the text each shows now (two reads of small tables; nothing on the barrier
//! path), and switching one on or off.

use pms_service::{repeatable, transaction};

use super::{instant, Store, StoreError};
use crate::model::{
    BarrierDevices, DeviceSwitched, DeviceType, Direction, DisplayDevice, ParkDevices, State,
};

impl Store {
    /// The barriers and displays of park `number`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for an unknown park; database failures.
    pub async fn devices(&self, number: i64) -> Result<ParkDevices, StoreError> {
        let park = self.park(number).await?;
        type BarrierRow = (i64, String, String, String, Option<i64>, Option<i64>);
        let barriers: Vec<BarrierRow> = repeatable!(self, |conn| {
            sqlx::query_as(
                "SELECT id, barrier_number, direction, state, clock_offset_ms, clock_seen_at_ms \
                 FROM barriers WHERE park_id = $1 ORDER BY barrier_number, id",
            )
            .bind(park.id)
            .fetch_all(&mut *conn)
            .await
        })?;
        let displays: Vec<(i64, String, i64, String, String, i64)> = repeatable!(self, |conn| {
            sqlx::query_as(
                "SELECT id, display_number, barrier_id, state, message, updated_at_ms FROM displays \
                 WHERE park_id = $1 ORDER BY display_number, id",
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
        let barriers = barriers
            .into_iter()
            .map(|(id, number, direction, s, offset, seen)| {
                Ok(BarrierDevices {
                    barrier_id: id,
                    barrier_number: number,
                    direction: Direction::parse(&direction)
                        .ok_or_else(|| StoreError::Internal(direction.clone()))?,
                    state: state(&s)?,
                    clock_offset_ms: offset,
                    clock_seen_at: seen.map(|at| instant(at).to_string()),
                    displays: displays
                        .iter()
                        .filter(|d| d.2 == id)
                        .map(|(did, dnumber, _, ds, message, at)| {
                            Ok(DisplayDevice {
                                display_id: *did,
                                display_number: dnumber.clone(),
                                state: state(ds)?,
                                message: message.clone(),
                                updated_at: instant(*at).to_string(),
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

    /// Switches device `id` of park `number` on or off: a switched-off barrier opens for
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
    ) -> Result<(i64, DeviceSwitched), StoreError> {
        let park = self.park(number).await?;
        let (table, what, moved) = match device {
            DeviceType::Barrier => ("barriers", "barrier", ""),
            DeviceType::Display => ("displays", "display", ", changes = changes + 1"),
        };
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
            self.barriers.forget(id);
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
