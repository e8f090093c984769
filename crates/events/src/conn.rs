//! The event tables' SQL, written once for both backends: [`EventConn`] is implemented for a
//! PostgreSQL and a SQLite connection (or transaction, which derefs to one) with the same
//! statements, so a service calls it from inside its own `with_pool!` transaction.

use std::future::Future;

use sqlx::postgres::PgConnection;
use sqlx::sqlite::SqliteConnection;

use crate::event::{Event, NewEvent};

/// The first half of the advisory lock the PostgreSQL outbox appends under (see the crate docs
/// for why); the second half is the outbox table's own oid, so the services' outboxes in one
/// database (one schema each) do not queue behind each other.
pub const OUTBOX_LOCK_KEY: i32 = 0x504d_4f42; // "PMOB"

/// What a service does with the event tables inside its own transactions.
pub trait EventConn: Send {
    /// Appends `event` to this database's outbox; returns its id. Call it inside the
    /// transaction that makes the change the event describes.
    fn append<'a>(
        &'a mut self,
        event: &'a NewEvent,
    ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'a;

    /// Records that `consumer` has applied `source`'s events up to `position`. Call it inside
    /// the transaction that applies the event.
    fn record_position<'a>(
        &'a mut self,
        consumer: &'a str,
        source: &'a str,
        position: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;

    /// Keeps an event `consumer` cannot apply, with the reason, for a person to look at.
    fn park<'a>(
        &'a mut self,
        consumer: &'a str,
        event: &'a Event,
        reason: &'a str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
}

const APPEND: &str =
    "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, version, payload, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6) RETURNING id";
/// PostgreSQL's append: the lock first (a materialized CTE runs before the row it feeds is
/// formed, so the id is drawn under the lock), in the same round trip as the insert. The lock is
/// this outbox's: `'outbox'` resolves through the connection's `search_path` to its schema's
/// table.
const APPEND_LOCKED: &str = "WITH locked AS MATERIALIZED \
     (SELECT pg_advisory_xact_lock($7, 'outbox'::regclass::oid::int4)) \
     INSERT INTO outbox (aggregate_type, aggregate_id, event_type, version, payload, created_at) \
     SELECT $1, $2, $3, $4, $5, $6 FROM locked RETURNING id";
const RECORD: &str = "INSERT INTO event_positions (consumer, source, position, updated_at) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (consumer, source) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at";
const PARK: &str = "INSERT INTO parked_events (consumer, source, event_id, event_type, version, payload, reason, parked_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (consumer, source, event_id) DO NOTHING";

/// The statements, for one connection type; `$lock` is the advisory lock key `$append` takes.
macro_rules! event_conn {
    ($conn:ty, $append:expr, $lock:expr) => {
        impl EventConn for $conn {
            fn append<'a>(
                &'a mut self,
                event: &'a NewEvent,
            ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'a {
                async move {
                    let query = sqlx::query_scalar($append)
                        .bind(event.aggregate_type)
                        .bind(&event.aggregate_id)
                        .bind(event.event_type)
                        .bind(event.version)
                        .bind(&event.payload)
                        .bind(now());
                    match $lock {
                        Some(key) => query.bind(key),
                        None => query,
                    }
                    .fetch_one(&mut *self)
                    .await
                }
            }

            fn record_position<'a>(
                &'a mut self,
                consumer: &'a str,
                source: &'a str,
                position: i64,
            ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a {
                async move {
                    sqlx::query(RECORD)
                        .bind(consumer)
                        .bind(source)
                        .bind(position)
                        .bind(now())
                        .execute(&mut *self)
                        .await
                        .map(|_| ())
                }
            }

            fn park<'a>(
                &'a mut self,
                consumer: &'a str,
                event: &'a Event,
                reason: &'a str,
            ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a {
                async move {
                    sqlx::query(PARK)
                        .bind(consumer)
                        .bind(&event.source)
                        .bind(event.id)
                        .bind(&event.event_type)
                        .bind(event.version)
                        .bind(event.payload.to_string())
                        .bind(reason)
                        .bind(now())
                        .execute(&mut *self)
                        .await
                        .map(|_| ())
                }
            }
        }
    };
}

event_conn!(PgConnection, APPEND_LOCKED, Some(OUTBOX_LOCK_KEY));
event_conn!(SqliteConnection, APPEND, None::<i32>);

/// Now, RFC 3339 UTC.
pub fn now() -> String {
    jiff::Timestamp::now().to_string()
}
