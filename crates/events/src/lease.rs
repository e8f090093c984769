//! Which replica of a service works one stream of events (a relay of its outbox, a consumer of
//! one producer) at a time: a lease, held as a PostgreSQL session advisory lock on a connection
//! of its own. Replicas that do not hold it try again every second; when the holder stops or
//! dies its connection closes, the database lets the lock go at once, and another replica takes
//! the work over within about a second.
//!
//! Why a lease when positions already move by compare and set ([`crate::position`]): the compare
//! and set keeps two replicas from applying an event twice, but both would still read every
//! event and all but one of their transactions would roll back. One reader per stream does the
//! work once; the compare and set is the fence for the moment two think they hold it (a holder
//! whose connection broke, not yet aware).
//!
//! Replicas share the work stream by stream: each stream's lease goes to whichever replica asks
//! first, so a service's streams spread over its replicas as they start, and move to the ones
//! left when one goes. A SQLite database belongs to one process: its leases are always held.

use std::future::Future;
use std::time::Duration;

use pms_service::store::{Db, Pools};
use sqlx::postgres::PgConnection;
use sqlx::Connection;

/// A lease's advisory lock: its name hashed ([`key`]), then the oid of the schema's
/// `event_positions` table, so services sharing a database in schemas of their own never share
/// a lease (as the outbox lock is keyed by its table).
const TAKE: &str = "SELECT pg_try_advisory_lock($1, 'event_positions'::regclass::oid::int4)";
/// How often a replica without the lease asks again, and the holder checks it still has it.
pub const LEASE_CHECK: Duration = Duration::from_secs(1);

/// A lease held: on PostgreSQL, the connection that holds the lock. Dropping it closes the
/// connection, which lets the lock go.
#[derive(Debug)]
pub struct Lease {
    conn: Option<PgConnection>,
}

impl Lease {
    /// Takes the lease `name` in `db` if no other replica holds it.
    ///
    /// # Errors
    /// When the database is unavailable.
    pub async fn try_take(db: &Db, name: &str) -> Result<Option<Lease>, sqlx::Error> {
        let Pools::Postgres(pool) = db.pools() else {
            return Ok(Some(Lease { conn: None }));
        };
        let mut conn = pool.connect_apart().await?;
        let taken: bool = sqlx::query_scalar(TAKE)
            .bind(key(name))
            .fetch_one(&mut conn)
            .await?;
        if taken {
            Ok(Some(Lease { conn: Some(conn) }))
        } else {
            let _ = conn.close().await;
            Ok(None)
        }
    }

    /// Returns once the lease is lost: its connection no longer answers (checked every
    /// [`LEASE_CHECK`]). Never returns for a lease that cannot be lost.
    pub async fn lost(&mut self) {
        let Some(conn) = self.conn.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(LEASE_CHECK).await;
            if let Err(e) = conn.ping().await {
                tracing::warn!(error = %e, "an event lease's connection failed");
                return;
            }
        }
    }
}

/// The lock key of the lease `name`: FNV-1a of the name, as PostgreSQL's `int4`.
fn key(name: &str) -> i32 {
    let hash = name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    i32::from_ne_bytes(hash.to_ne_bytes())
}

/// Runs `work` whenever this replica holds the lease `name` in `db`, until `shutdown` holds
/// `true`: asks for the lease every [`LEASE_CHECK`] (a little more, so replicas starting at once
/// do not ask in step), and stops the work when the lease is lost, to ask again. `work` runs
/// until it is stopped; a work that ends on its own is started again at the next turn.
pub async fn while_held<W, F>(
    db: Db,
    name: String,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    mut work: W,
) where
    W: FnMut() -> F,
    F: Future<Output = ()>,
{
    loop {
        match Lease::try_take(&db, &name).await {
            Ok(Some(mut lease)) => {
                tracing::debug!(lease = %name, "event lease taken");
                tokio::select! {
                    _ = shutdown.wait_for(|stop| *stop) => return,
                    () = work() => {}
                    () = lease.lost() => {
                        tracing::warn!(lease = %name, "event lease lost; another replica takes over");
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(lease = %name, error = %e, "event lease waiting for the database")
            }
        }
        let jitter = Duration::from_millis(u64::from(
            std::time::SystemTime::UNIX_EPOCH
                .elapsed()
                .map_or(0, |t| t.subsec_micros() % 250),
        ));
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(LEASE_CHECK + jitter) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stream_has_a_key_of_its_own() {
        let keys: std::collections::HashSet<i32> = [
            "relay:users",
            "relay:parks",
            "relay:payments",
            "parks:users",
            "parks:payments",
            "payments:parks",
            "payments:users",
            "users:payments",
        ]
        .iter()
        .map(|n| key(n))
        .collect();
        assert_eq!(keys.len(), 8);
        assert_eq!(key("payments:parks"), key("payments:parks"), "stable");
    }
}
