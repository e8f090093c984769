//! The event tables' SQL, written once for both backends: [`EventConn`] is implemented for a
//! PostgreSQL and a SQLite connection (or transaction, which derefs to one) with the same
//! statements, so a service calls it from inside its own `with_pool!` transaction.

use std::future::Future;

use serde_json::{Map, Value};
use sqlx::postgres::PgConnection;
use sqlx::sqlite::SqliteConnection;

use crate::event::{Event, NewEvent};
use crate::position::Applied;

/// The first half of the advisory lock the PostgreSQL outbox appends under (see the crate docs
/// for why); the second half is the outbox table's own oid, so the services' outboxes in one
/// database (one schema each) are settled apart.
pub const OUTBOX_LOCK_KEY: i32 = 0x504d_4f42; // "PMOB"

/// What a service does with the event tables inside its own transactions.
pub trait EventConn: Send {
    /// Appends `event` to this database's outbox; returns its id. Call it inside the
    /// transaction that makes the change the event describes.
    fn append<'a>(
        &'a mut self,
        event: &'a NewEvent,
    ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'a;

    /// Appends `events` in their order (their ids ascend as the slice does), as many calls of
    /// [`EventConn::append`] would; returns their ids in that order. PostgreSQL takes one
    /// statement for them all (a consumer applying a run of events appends their answers at
    /// once), SQLite one per event.
    fn append_all<'a>(
        &'a mut self,
        events: &'a [NewEvent],
    ) -> impl Future<Output = Result<Vec<i64>, sqlx::Error>> + Send + 'a {
        async move {
            let mut ids = Vec::with_capacity(events.len());
            for event in events {
                ids.push(self.append(event).await?);
            }
            Ok(ids)
        }
    }

    /// Moves `consumer`'s position in a producer's events past `applied`, inside the
    /// transaction that applies them, if it stands just before them (compare and set): events
    /// are applied once even when two replicas, or a replica and a replay, race for them.
    ///
    /// # Errors
    /// [`sqlx::Error::InvalidArgument`] when the position is elsewhere (the events were applied
    /// meanwhile, or the position was set back): the transaction must roll back, and the
    /// consumer reads its position again.
    fn record_position<'a>(
        &'a mut self,
        consumer: &'a str,
        applied: Applied<'a>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;

    /// Replaces the payload of every event in this outbox about one thing (`aggregate_type`,
    /// `aggregate_id`) of the kinds `event_types` with `payload`, whether or not it was read or
    /// published already; returns how many. For erasure: the events that carry a thing's state
    /// are kept for readers that start later, so a person's data they carry is overwritten in
    /// place when the person's account is closed (`docs/events.md`, "Erasure").
    fn replace_payloads<'a>(
        &'a mut self,
        aggregate_type: &'a str,
        aggregate_id: &'a str,
        event_types: &'a [&'a str],
        payload: &'a str,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;

    /// Asks that the events about one thing (`aggregate_type`, `aggregate_id`) be rewritten
    /// with `fields` (those of them each event has, [`crate::event::rewrite`]) once every reader
    /// of this outbox has them, and rewrites those it has already; returns how many. The rest
    /// are rewritten by the retention round as the readers pass them ([`crate::erasure`]). An
    /// event still on its way is left as written, so its reader gets what the change said.
    fn erase_when_passed<'a>(
        &'a mut self,
        aggregate_type: &'a str,
        aggregate_id: &'a str,
        fields: &'a Map<String, Value>,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;

    /// Rewrites with `fields` the events about one thing that every reader has; returns how
    /// many it rewrote and whether any is still on its way (or nobody has noted reading).
    fn rewrite_passed<'a>(
        &'a mut self,
        aggregate_type: &'a str,
        aggregate_id: &'a str,
        fields: &'a Map<String, Value>,
    ) -> impl Future<Output = Result<(u64, bool), sqlx::Error>> + Send + 'a;

    /// Erases customer `owner`'s data from the events of the kinds `event_types` set aside here
    /// (their payloads as [`pms_vocab::personal`] says); returns how many. For a closure: a
    /// set-aside event is a copy like any other, and trying it again applies what it says then
    /// (so a service leaves out the kinds whose data it still owes someone: payments, a stay's
    /// `visit.closed`, whose invoice must name the tax number).
    fn erase_parked<'a>(
        &'a mut self,
        owner: i64,
        event_types: &'a [&'a str],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;

    /// Keeps an event `consumer` cannot apply, with the reason, for a person to look at.
    fn park<'a>(
        &'a mut self,
        consumer: &'a str,
        event: &'a Event,
        reason: &'a str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
}

/// The outbox's columns an append writes, in the order every append's values follow.
const OUTBOX_COLUMNS: &str =
    "aggregate_type, aggregate_id, event_type, version, payload, created_at";

/// SQLite's append. The payload is `$1`, as in PostgreSQL's, so one binding order serves both.
static APPEND: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("INSERT INTO outbox ({OUTBOX_COLUMNS}) VALUES ($2, $3, $4, $5, $1, $6) RETURNING id")
});
/// PostgreSQL's append: [`pg_append_parts`] after a part that carries the payload.
static APPEND_LOCKED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH event AS (SELECT $1::text AS payload), {} SELECT id FROM appended",
        pg_append_parts("event", 2)
    )
});

/// PostgreSQL's append of many: the events' fields as arrays (`$1` payloads, `$2` aggregate
/// types, `$3` aggregate ids, `$4` event types, `$5` versions), `$6` the time, `$7` the lock's
/// key. Rows go in in the arrays' order, so the ids drawn under the lock ascend with it.
static APPEND_ALL_LOCKED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH event AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[]) \
           WITH ORDINALITY AS e (payload, aggregate_type, aggregate_id, event_type, version, ord)), \
         {locked}, \
         appended AS (INSERT INTO outbox ({OUTBOX_COLUMNS}) \
           SELECT aggregate_type, aggregate_id, event_type, version, payload, $6 FROM locked ORDER BY ord RETURNING id) \
         SELECT id FROM appended ORDER BY id",
        locked = pg_locked_part("event", "g.*", 7)
    )
});

/// The outbox lock's second key: the outbox table's oid (`'outbox'` resolves through the
/// connection's `search_path` to its schema's table).
macro_rules! outbox_oid {
    () => {
        "'outbox'::regclass::oid::int4"
    };
}

/// The part `locked` of a PostgreSQL append: `columns` of every row of the part `gate` (as
/// `g`), once this outbox's lock is held shared (key `$key`). Materialized, so it runs before
/// the rows it feeds are formed: every id is drawn under the lock, which is held until the
/// transaction ends. Appends share the lock with each other; a reader settling a hole in the
/// ids takes it alone, and so waits for every append that may still fill one
/// ([`crate::Outbox::read_after`]).
fn pg_locked_part(gate: &str, columns: &str, key: usize) -> String {
    format!(
        "locked AS MATERIALIZED (SELECT {columns}, \
         pg_advisory_xact_lock_shared(${key}, {}) FROM {gate} g)",
        outbox_oid!()
    )
}

/// A reader's hold of the outbox lock alone (key `$1`), until its transaction ends.
pub(crate) const PG_SETTLE: &str = concat!("SELECT pg_advisory_xact_lock($1, ", outbox_oid!(), ")");

/// PostgreSQL: the outbox append as two parts of a `WITH` statement (`locked`, then
/// `appended`, which returns the new `id`), so a service can write a change and its event in
/// one statement, one round trip. One event is appended per row of the earlier part `gate`,
/// whose column `payload` is the event's payload (none when `gate` is empty). The other fields
/// and the lock's key are parameters `$first` to `$first + 5`, bound by [`bind_pg_append`].
///
/// The lock comes first (see `pg_locked_part`), so the id is drawn under it.
pub fn pg_append_parts(gate: &str, first: usize) -> String {
    let [aggregate_type, aggregate_id, event_type, version, created_at, key] =
        std::array::from_fn(|i| first + i);
    format!(
        "{locked}, \
         appended AS (INSERT INTO outbox ({OUTBOX_COLUMNS}) \
         SELECT ${aggregate_type}, ${aggregate_id}, ${event_type}, ${version}, payload, ${created_at} \
         FROM locked RETURNING id)",
        locked = pg_locked_part(gate, "g.payload", key)
    )
}

/// Binds `event`'s fields but the payload, and the lock's key, for [`pg_append_parts`]: the
/// next six parameters of `query`.
pub fn bind_pg_append<'q, O>(
    query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    event: &'q NewEvent,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    query
        .bind(event.aggregate_type)
        .bind(&event.aggregate_id)
        .bind(event.event_type)
        .bind(event.version)
        .bind(now())
        .bind(OUTBOX_LOCK_KEY)
}

/// The compare and set of [`EventConn::record_position`]: `$3` the new position, `$5` and `$6`
/// the applied events' `prev` and first id. No row returned: the position stood elsewhere.
const RECORD: &str = "INSERT INTO event_positions (consumer, source, position, updated_at) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (consumer, source) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at \
     WHERE event_positions.position >= $5 AND event_positions.position < $6 \
     RETURNING position";
const REPLACE_PAYLOADS: &str = "UPDATE outbox SET payload = $1 \
     WHERE aggregate_type = $2 AND aggregate_id = $3 AND event_type = $4";
const ASK_ERASURE: &str =
    "INSERT INTO outbox_erasures (aggregate_type, aggregate_id, fields, asked_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (aggregate_type, aggregate_id) \
     DO UPDATE SET fields = excluded.fields, asked_at = excluded.asked_at";
/// The events about one thing, each with whether every reader has it (none has while nobody
/// has noted reading).
const ERASABLE: &str = "SELECT id, payload, \
     COALESCE(id <= (SELECT MIN(through) FROM outbox_readers), FALSE) FROM outbox \
     WHERE aggregate_type = $1 AND aggregate_id = $2 ORDER BY id";
const PARK: &str = "INSERT INTO parked_events (consumer, source, event_id, event_type, version, payload, reason, parked_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (consumer, source, event_id) DO NOTHING";

/// The statements, for one connection type; `$lock` is the advisory lock key `$append` takes.
/// `$($more)*`: the connection's own way of what the trait does by default.
macro_rules! event_conn {
    ($conn:ty, $append:expr, $lock:expr $(, $($more:tt)*)?) => {
        impl EventConn for $conn {
            $($($more)*)?

            fn append<'a>(
                &'a mut self,
                event: &'a NewEvent,
            ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'a {
                async move {
                    let query = sqlx::query_scalar($append)
                        .bind(&event.payload)
                        .bind(event.aggregate_type)
                        .bind(&event.aggregate_id)
                        .bind(event.event_type)
                        .bind(event.version)
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
                applied: Applied<'a>,
            ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a {
                async move {
                    let moved: Option<i64> = sqlx::query_scalar(RECORD)
                        .bind(consumer)
                        .bind(applied.source)
                        .bind(applied.last)
                        .bind(now())
                        .bind(applied.prev)
                        .bind(applied.first)
                        .fetch_optional(&mut *self)
                        .await?;
                    match moved {
                        Some(_) => Ok(()),
                        None => Err(applied.elsewhere(consumer)),
                    }
                }
            }

            fn replace_payloads<'a>(
                &'a mut self,
                aggregate_type: &'a str,
                aggregate_id: &'a str,
                event_types: &'a [&'a str],
                payload: &'a str,
            ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a {
                async move {
                    let mut replaced = 0;
                    for event_type in event_types {
                        replaced += sqlx::query(REPLACE_PAYLOADS)
                            .bind(payload)
                            .bind(aggregate_type)
                            .bind(aggregate_id)
                            .bind(*event_type)
                            .execute(&mut *self)
                            .await?
                            .rows_affected();
                    }
                    Ok(replaced)
                }
            }

            fn erase_when_passed<'a>(
                &'a mut self,
                aggregate_type: &'a str,
                aggregate_id: &'a str,
                fields: &'a Map<String, Value>,
            ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a {
                async move {
                    sqlx::query(ASK_ERASURE)
                        .bind(aggregate_type)
                        .bind(aggregate_id)
                        .bind(Value::Object(fields.clone()).to_string())
                        .bind(now())
                        .execute(&mut *self)
                        .await?;
                    let (rewritten, _) = self.rewrite_passed(aggregate_type, aggregate_id, fields).await?;
                    Ok(rewritten)
                }
            }

            fn erase_parked<'a>(
                &'a mut self,
                owner: i64,
                event_types: &'a [&'a str],
            ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a {
                async move {
                    let rows: Vec<(String, String, i64, String, String)> = sqlx::query_as(
                        "SELECT consumer, source, event_id, event_type, payload FROM parked_events",
                    )
                    .fetch_all(&mut *self)
                    .await?;
                    let mut erased = 0;
                    for (consumer, source, id, event_type, payload) in rows {
                        if !event_types.contains(&event_type.as_str()) {
                            continue;
                        }
                        let Ok(doc) = serde_json::from_str::<Value>(&payload) else {
                            continue;
                        };
                        let Some(personal) = pms_vocab::personal::personal(&event_type, &doc)
                            .filter(|p| p.owner == owner)
                        else {
                            continue;
                        };
                        let Some(new) = crate::event::erase(&doc, &personal.erased) else {
                            continue;
                        };
                        erased += sqlx::query(
                            "UPDATE parked_events SET payload = $1 \
                             WHERE consumer = $2 AND source = $3 AND event_id = $4",
                        )
                        .bind(new.to_string())
                        .bind(&consumer)
                        .bind(&source)
                        .bind(id)
                        .execute(&mut *self)
                        .await?
                        .rows_affected();
                    }
                    Ok(erased)
                }
            }

            fn rewrite_passed<'a>(
                &'a mut self,
                aggregate_type: &'a str,
                aggregate_id: &'a str,
                fields: &'a Map<String, Value>,
            ) -> impl Future<Output = Result<(u64, bool), sqlx::Error>> + Send + 'a {
                async move {
                    let rows: Vec<(i64, String, bool)> = sqlx::query_as(ERASABLE)
                        .bind(aggregate_type)
                        .bind(aggregate_id)
                        .fetch_all(&mut *self)
                        .await?;
                    let mut rewritten = 0;
                    let mut pending = false;
                    for (id, payload, passed) in rows {
                        if !passed {
                            pending = true;
                            continue;
                        }
                        let Some(new) = crate::event::rewrite(&payload, fields) else {
                            continue;
                        };
                        if new != payload {
                            sqlx::query("UPDATE outbox SET payload = $1 WHERE id = $2")
                                .bind(&new)
                                .bind(id)
                                .execute(&mut *self)
                                .await?;
                            rewritten += 1;
                        }
                    }
                    Ok((rewritten, pending))
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

event_conn!(
    PgConnection,
    APPEND_LOCKED.as_str(),
    Some(OUTBOX_LOCK_KEY),
    async fn append_all(&mut self, events: &[NewEvent]) -> Result<Vec<i64>, sqlx::Error> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let column = |f: fn(&NewEvent) -> String| events.iter().map(f).collect::<Vec<_>>();
        sqlx::query_scalar(APPEND_ALL_LOCKED.as_str())
            .bind(column(|e| e.payload.clone()))
            .bind(column(|e| e.aggregate_type.to_owned()))
            .bind(column(|e| e.aggregate_id.clone()))
            .bind(column(|e| e.event_type.to_owned()))
            .bind(events.iter().map(|e| e.version).collect::<Vec<_>>())
            .bind(now())
            .bind(OUTBOX_LOCK_KEY)
            .fetch_all(&mut *self)
            .await
    }
);
event_conn!(SqliteConnection, APPEND.as_str(), None::<i32>);

/// Now, RFC 3339 UTC.
pub fn now() -> String {
    jiff::Timestamp::now().to_string()
}
