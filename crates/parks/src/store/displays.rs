//! Displays: what each shows (the last message pushed to its barrier, and its park's free spots)
//! and pushing a message to a barrier's displays. Displays belong to a barrier by id, so a
//! message never reaches the same-numbered displays of other parks (the original's defect).
//!
//! Also the change versions that followers wait on, read from the database so that every
//! replica of the service gives the same ones: a display's is its own change counter plus its
//! park's, and the parks' version ([`Store::parks_version`]) is the sum of all of them. Every
//! transaction that changes what a display or a park shows moves one of the counters it
//! touches (migration `0003_changes.sql`).

use jiff::Timestamp;
use pms_service::{repeatable, transaction};

use super::visits::show_on_displays;
use super::{instant, ms, retry, Store, StoreError};
use crate::model::{DisplayView, State};

/// A display and where it belongs.
#[derive(Debug, Clone, PartialEq)]
pub struct Display {
    /// What it shows.
    pub view: DisplayView,
    /// Its park's id.
    pub park_id: i64,
    /// Its barrier's id.
    pub barrier_id: i64,
    /// Active or not.
    pub state: State,
    /// Its change version: moves whenever what it shows may have changed.
    pub version: u64,
}

/// A version read from the database: a sum of counters that only grow from 0.
fn version(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Internal(format!("a negative change version ({v})")))
}

impl Store {
    /// Display `id`, with its park's free spots now.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; database failures.
    pub async fn display(&self, id: i64) -> Result<Display, StoreError> {
        type Row = (i64, i64, i64, String, String, i64, i64, i64);
        let row: Option<Row> = repeatable!(self, |conn| {
            sqlx::query_as(
            "SELECT d.id, d.park_id, d.barrier_id, d.state, d.message, d.updated_at_ms, \
             (SELECT COUNT(*) FROM spots s WHERE s.park_id = d.park_id AND s.operational = 1 AND s.occupied = 0), \
             d.changes + (SELECT p.changes FROM parks p WHERE p.id = d.park_id) \
             FROM displays d WHERE d.id = $1"
        )
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        })?;
        let (id, park_id, barrier_id, state, message, updated, free, changes) =
            row.ok_or_else(|| StoreError::not_found("display", id))?;
        Ok(Display {
            view: DisplayView {
                display_id: id,
                message,
                occupancy: free,
                updated_at: instant(updated).to_string(),
            },
            park_id,
            barrier_id,
            state: State::parse(&state).ok_or_else(|| StoreError::Internal(state.clone()))?,
            version: version(changes)?,
        })
    }

    /// The parks' change version: moves whenever an entrance, exit, spot switched on or off,
    /// park setting or display message may have changed what any park looks like.
    ///
    /// # Errors
    /// Database failures.
    pub async fn parks_version(&self) -> Result<u64, StoreError> {
        let sum: i64 = repeatable!(self, |conn| {
            sqlx::query_scalar(
                "SELECT CAST(COALESCE((SELECT SUM(changes) FROM parks), 0) \
                 + COALESCE((SELECT SUM(changes) FROM displays), 0) AS BIGINT)",
            )
            .fetch_one(&mut *conn)
            .await
        })?;
        version(sum)
    }

    /// Shows `message` on the active displays of barrier `barrier_id`; returns how many.
    ///
    /// # Errors
    /// Database failures.
    pub async fn show(&self, barrier_id: i64, message: &str) -> Result<u64, StoreError> {
        let now = ms(Timestamp::now());
        retry(|| async {
            let r: Result<u64, StoreError> = transaction!(self, |tx| {
                let done = show_on_displays!(tx, barrier_id, message, now);
                Ok::<u64, StoreError>(done.rows_affected())
            });
            r
        })
        .await
    }
}
