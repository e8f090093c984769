//! PMS domain events: how one service learns what changed in another without reaching into its
//! database and without losing anything.
//!
//! Layout:
//! - [`event`]: the event as it is stored and read ([`Event`], [`NewEvent`]), versioned JSON.
//! - [`outbox`]: writing an event in the same transaction as the change it describes, and
//!   reading a producer's outbox in order ([`Outbox`]).
//! - [`conn`]: the SQL both backends run for the outbox, read positions and parked events.
//! - [`consumer`]: applying a producer's events in order, exactly once ([`Consumer`]).
//! - [`position`]: where a consumer stands in a producer's events, moved by compare and set
//!   ([`Applied`]).
//! - [`nats`]: the distributed transport (a relay to NATS JetStream, a reader of it).
//! - [`parked`]: the events a consumer set aside, listed for a person and tried again.
//! - [`lease`]: one replica of a service works each stream at a time.
//! - [`retention`]: keeping an outbox bounded: its readers say what they have passed, and the
//!   passing events every reader has passed are deleted once older than the retention window.
//! - [`erasure`]: rewriting a person's data out of events already written, when their account
//!   is closed.
//! - [`metrics`]: the events' gauges on a service's `/metrics`.
//! - [`wiring`]: a service's handlers started by producer, in one process or over NATS.
//! - [`SCHEMA_SQLITE`] / [`SCHEMA_POSTGRES`], then [`SCHEMA_BROKER_POSITIONS`],
//!   [`SCHEMA_RETENTION`] and [`SCHEMA_ERASURE`]: the tables,
//!   for each service's migrations.
//!
//! Why an outbox and not a message sent after the commit: a crash between the two would leave a
//! change without its event (the original lost every message published while a consumer was
//! down, spec §1.3). The event row commits with the change or not at all.
//!
//! Why a read position in the consumer's own database, advanced in the same transaction as the
//! event's effects: a consumer that crashes after applying an event but before remembering it
//! would apply it twice; here either both happened or neither. Nothing in between holds events in
//! memory (no broadcast channel that drops for a slow receiver): a consumer that falls behind
//! reads further back in the producer's table. The position moves by compare and set (only
//! from just before the events it passes, [`position`]), so two replicas, or a replica and a
//! replay, never both apply an event.
//!
//! Why a PostgreSQL read of the outbox settles holes: row ids come from a sequence when the row
//! is inserted, not when it commits, so two concurrent transactions can commit ids 8 and 7 in
//! that order, and a reader that took 8 as its position would skip 7 for good. So a reader
//! passes no hole (a missing id) that may still fill: it waits a few milliseconds for it, and
//! then settles it under the outbox's advisory lock, which every append holds shared from before
//! it draws its id until its transaction ends ([`Outbox::read_after`]). Appends share the lock,
//! so they do not queue behind each other's commits; until 2026-11-30 each append took it alone,
//! and at 10 barriers the appends' queue cost about an eighth of the barrier calls'
//! throughput (`docs/benchmark-history.md`). Each outbox has its own lock (keyed by its table).
//! SQLite has one writer at a time, so its reads have no holes to wait for.
//!
//! In one process (`pms up`) a consumer reads the producer's outbox table directly and is woken
//! by the producer after each commit (a wake-up carries no data, so a missed one only delays the
//! next read to the poll interval). Across machines the same handlers apply what a relay
//! publishes to NATS JetStream, in the same order under the same rules (the distributed mode,
//! [`nats`]; the rules in `docs/events.md`, "Order and duplicates").

#![deny(missing_docs)]

pub mod conn;
pub mod consumer;
pub mod erasure;
pub mod event;
pub mod lease;
pub mod metrics;
pub mod nats;
pub mod outbox;
pub mod parked;
pub mod position;
pub mod retention;
pub mod wiring;

#[cfg(test)]
mod testutil;

pub use crate::consumer::{ApplyError, Consumer, Handler, Outcome};
pub use crate::event::{Event, NewEvent};
pub use crate::outbox::Outbox;
pub use crate::position::Applied;

/// The event tables for a SQLite service database: the outbox it writes, the read positions of
/// its consumers, and the events they parked. Each service's migrations link to it (and to the
/// steps after it), so every service has the same tables.
pub const SCHEMA_SQLITE: &str = include_str!("schema_sqlite.sql");
/// The same tables for PostgreSQL.
pub const SCHEMA_POSTGRES: &str = include_str!("schema_postgres.sql");
/// The step after them, on either backend: the broker consumers' resume hint
/// ([`position::broker_position`]). A migration applied once is never edited, so later changes
/// to the tables come as steps like this one.
pub const SCHEMA_BROKER_POSITIONS: &str = include_str!("schema_broker_positions.sql");
/// The third step, on either backend: the outbox's readers and how far it was pruned
/// ([`retention`]).
pub const SCHEMA_RETENTION: &str = include_str!("schema_retention.sql");
/// The fourth step, on either backend: the erasures asked of the outbox's events ([`erasure`]).
pub const SCHEMA_ERASURE: &str = include_str!("schema_erasure.sql");
