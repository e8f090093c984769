//! The store's database connections: a small pool of sqlx connections, most recently used first.
//!
//! What it owns: opening connections (with the per-connection settings), handing them out,
//! taking them back, and deciding whether a returned connection may serve again. What it must not
//! do: run queries of its own beyond the liveness check.
//!
//! Why not sqlx's own pool: it checks every connection as it goes back (one more database round
//! trip, a context switch in both processes, per request) and has no way to turn that off. It
//! does so because it cannot tell a connection whose query finished from one whose query was cut
//! off. Here the caller says how the work ended ([`Conn::settle`]):
//! - finished: the connection goes back at once, unchecked;
//! - the socket or the protocol broke: the connection is closed;
//! - anything else (the database refused a statement, or the request's future was dropped
//!   mid-query because its client went away): the connection is pinged before it goes back. The
//!   ping waits for the rest of the cut-off exchange and sends any rollback sqlx queued when a
//!   transaction was dropped, so no lock outlives its request and the next user reads only its
//!   own results. Closing instead would cost a new PostgreSQL connection (a process and several
//!   ms) for every client that gives up, just when the server is busiest.
//!
//! Liveness: a connection idle for [`PING_IF_IDLE_FOR`] or longer is pinged before it is handed
//! out. One used more recently goes out unchecked (pgbouncer's `server_check_delay` makes the same
//! bet, with the same 30 s): checking would cost a round trip on every request of a client that
//! calls once a second. When a connection turns out broken (a database restart, most often),
//! every idle connection is closed with it, so one request finds out, not one per connection;
//! the store runs a read that failed on a reused connection, or a transaction whose `BEGIN`
//! failed on one, once more on a new connection ([`Conn::reused`]).
//!
//! The most recently used idle connection is handed out first, so at a low request rate one warm
//! connection serves and the rest age out after [`IDLE_TIMEOUT`] (the pool never closes below its
//! minimum).
//!
//! Write transactions on SQLite take turns ([`Pool::get_to_write`]): the file has one writer at a
//! time, and the pool queues its own writers in arrival order instead of leaving them to SQLite's
//! busy handler. That handler sleeps and tries again in growing steps (up to 100 ms a try), so
//! under load a writer that kept losing the race to the ones that did not sleep waited seconds: a
//! barrier's call, at 100 barriers, up to 2.6 s.
//!
//! Overload is shed, not queued (`Queue`): the pool keeps how long a loan lasts and how long
//! the last requests waited for one (moving averages), and how many wait now. A request that
//! would wait longer than the acquire timeout — the waiters ahead of it, times a loan, over the
//! connections serving them — while the recent ones already waited half of it, is refused at
//! once with `PoolTimedOut` (the services answer 503) instead of waiting the whole timeout to be
//! refused then. Both must hold: loans that lasted through a short stall of the database (its
//! disk flushing, say) predict long waits that the end of the stall cuts short, and a soak at
//! 80 % of capacity shed five calls on the prediction alone. When the load drops, the next
//! request is served.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sqlx::Connection;
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

/// A connection type the pool can hold: either backend's (`PgConnection`, `SqliteConnection`).
pub trait Pooled: Connection + 'static {
    /// The statement that starts a write transaction. SQLite's is `BEGIN IMMEDIATE`: it takes
    /// the write lock at once, so two transactions that read and then write queue up on the
    /// busy timeout instead of one failing when it tries to upgrade its read lock.
    const BEGIN: &'static str;
    /// Whether the database takes one write transaction at a time (SQLite), so the pool hands
    /// out turns to write in arrival order ([`Pool::get_to_write`]).
    const ONE_WRITER: bool;
}

impl Pooled for sqlx::PgConnection {
    const BEGIN: &'static str = "BEGIN";
    const ONE_WRITER: bool = false;
}

impl Pooled for sqlx::SqliteConnection {
    const BEGIN: &'static str = "BEGIN IMMEDIATE";
    const ONE_WRITER: bool = true;
}

/// A pooled connection idle this long or longer is pinged before it is handed out.
pub const PING_IF_IDLE_FOR: Duration = Duration::from_secs(30);
/// Idle connections above the pool's minimum are closed after this long unused.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest wait for the check of a connection that comes back unsettled or after a refused
/// statement (it includes finishing a cut-off query).
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// How to open and keep connections of type `C`.
pub struct PoolOptions<C: Pooled> {
    /// Where to connect, and the per-connection settings (PRAGMAs, `statement_timeout`).
    pub connect: C::Options,
    /// Most open connections.
    pub max: u32,
    /// Connections [`Pool::warm`] opens and idle ageing keeps.
    pub min: u32,
    /// Longest wait for a connection, opening one included.
    pub acquire_timeout: Duration,
}

impl<C: Pooled> std::fmt::Debug for PoolOptions<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The connect options are left out: they may hold a password.
        f.debug_struct("PoolOptions")
            .field("max", &self.max)
            .field("min", &self.min)
            .field("acquire_timeout", &self.acquire_timeout)
            .finish_non_exhaustive()
    }
}

/// The pool of connections of one backend's type (`PgConnection`, `SqliteConnection`); cheap
/// to clone.
pub struct Pool<C: Pooled>(Arc<Shared<C>>);

impl<C: Pooled> Clone for Pool<C> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<C: Pooled> std::fmt::Debug for Pool<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("open", &self.size())
            .field("max", &self.0.options.max)
            .finish_non_exhaustive()
    }
}

struct Shared<C: Pooled> {
    options: PoolOptions<C>,
    /// Idle connections, the most recently used last.
    idle: Mutex<Vec<Idle<C>>>,
    /// One permit per connection in use or being opened.
    permits: Arc<Semaphore>,
    /// Connections open, idle or not (kept by [`Counted`]).
    open: Arc<AtomicU32>,
    closed: AtomicBool,
    /// The turn to write, on a [`Pooled::ONE_WRITER`] database (a fair lock: first come, first
    /// served).
    writer: Arc<tokio::sync::Mutex<()>>,
    /// Requests for a connection: how many wait, how long a loan lasts.
    conns: Queue,
    /// Requests for the turn to write, likewise (one writer at a time).
    turns: Queue,
}

/// A queue the pool serves, as far as shedding needs to know it: how many wait now, and how long
/// each of its loans lasted lately (an exponentially weighted moving average, 1/8 of each new
/// loan: a few slow ones move it, one does not).
#[derive(Debug, Default)]
struct Queue {
    waiting: AtomicUsize,
    /// How long a loan lasts, µs; 0 until a loan has ended, so nothing is shed before the pool
    /// knows.
    loan_us: AtomicU64,
    /// How long the last requests waited for their turn, µs (a timed-out one counts the timeout).
    wait_us: AtomicU64,
}

/// Adds `sample` to the moving average in `average`, 1/8 of it (the first sets it).
fn average_in(average: &AtomicU64, sample: Duration) {
    let sample = u64::try_from(sample.as_micros()).unwrap_or(u64::MAX);
    // Racing updates may lose one sample to another; the average is a hint, not a count.
    let old = average.load(Ordering::Relaxed);
    let new = if old == 0 {
        sample
    } else {
        old - old / 8 + sample / 8
    };
    average.store(new, Ordering::Relaxed);
}

impl Queue {
    /// Counts a loan that lasted `held`.
    fn loan_ended(&self, held: Duration) {
        average_in(&self.loan_us, held);
    }

    /// Counts a request that waited `waited` for its turn (or gave up after it).
    fn waited(&self, waited: Duration) {
        average_in(&self.wait_us, waited);
    }

    /// Whether one more waiter, behind those waiting now, would be served by `servers` loans at
    /// a time later than `timeout`, while the recent waiters already waited half of it.
    fn would_overrun(&self, servers: u32, timeout: Duration) -> bool {
        let ahead = self.waiting.load(Ordering::Relaxed) as u64 + 1;
        let wait_us =
            ahead.saturating_mul(self.loan_us.load(Ordering::Relaxed)) / u64::from(servers.max(1));
        let timeout_us = timeout.as_micros();
        u128::from(wait_us) > timeout_us
            && u128::from(self.wait_us.load(Ordering::Relaxed)) * 2 >= timeout_us
    }

    /// Counts a waiter until the guard goes.
    fn wait(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(self)
    }
}

/// One waiter in a [`Queue`], for as long as it exists.
struct Waiting<'a>(&'a Queue);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Idle<C> {
    conn: Tracked<C>,
    since: Instant,
}

/// An open connection and its place in the count.
struct Tracked<C> {
    conn: C,
    _counted: Counted,
}

/// One in [`Shared::open`], for as long as it exists.
struct Counted(Arc<AtomicU32>);

impl Counted {
    fn new(open: &Arc<AtomicU32>) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(open))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What happens to a connection when its [`Conn`] goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Return {
    /// The work finished: back into the pool as it is.
    Reuse,
    /// Not known to have finished: ping (which finishes the exchange and flushes any queued
    /// rollback), then back.
    Check,
    /// Broken: close it.
    Close,
}

impl<C: Pooled> Pool<C> {
    /// A pool that opens nothing until asked.
    pub fn new(options: PoolOptions<C>) -> Self {
        let max = options.max.max(1);
        Self(Arc::new(Shared {
            options: PoolOptions { max, ..options },
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(max as usize)),
            open: Arc::new(AtomicU32::new(0)),
            closed: AtomicBool::new(false),
            writer: Arc::new(tokio::sync::Mutex::new(())),
            conns: Queue::default(),
            turns: Queue::default(),
        }))
    }

    /// Connections open right now, idle or in use.
    pub fn size(&self) -> u32 {
        self.0.open.load(Ordering::Relaxed)
    }

    /// A connection: an idle one (pinged first when it sat idle a while) or a new one.
    ///
    /// # Errors
    /// `PoolTimedOut` after the acquire timeout, `PoolClosed` after [`Pool::close`], or why a new
    /// connection could not be opened.
    pub async fn get(&self) -> Result<Conn<C>, sqlx::Error> {
        if self.0.closed.load(Ordering::Acquire) {
            return Err(sqlx::Error::PoolClosed);
        }
        let shared = &*self.0;
        if shared.permits.available_permits() == 0
            && shared
                .conns
                .would_overrun(shared.options.max, shared.options.acquire_timeout)
        {
            return Err(shed("a connection"));
        }
        let _waiting = shared.conns.wait();
        let asked = tokio::time::Instant::now();
        let got = self.within_acquire_timeout(self.get_unbounded()).await;
        shared.conns.waited(asked.elapsed());
        got
    }

    /// A connection for a write transaction. On a [`Pooled::ONE_WRITER`] database it comes
    /// with this pool's turn to write, after every writer that asked before it, and the turn
    /// goes with the connection (after the rollback of a transaction left unfinished, when there
    /// was one); elsewhere it is [`Pool::get`].
    ///
    /// # Errors
    /// As [`Pool::get`]; the acquire timeout covers the wait for the turn too.
    pub async fn get_to_write(&self) -> Result<Conn<C>, sqlx::Error> {
        if !C::ONE_WRITER {
            return self.get().await;
        }
        if self.0.closed.load(Ordering::Acquire) {
            return Err(sqlx::Error::PoolClosed);
        }
        let shared = &*self.0;
        if shared.writer.try_lock().is_err()
            && shared
                .turns
                .would_overrun(1, shared.options.acquire_timeout)
        {
            return Err(shed("the turn to write"));
        }
        let _waiting = shared.turns.wait();
        let asked = tokio::time::Instant::now();
        let got = self
            .within_acquire_timeout(async {
                let turn = Arc::clone(&self.0.writer).lock_owned().await;
                let mut conn = self.get_unbounded().await?;
                conn.turn = Some(turn);
                Ok(conn)
            })
            .await;
        shared.turns.waited(asked.elapsed());
        got
    }

    async fn get_unbounded(&self) -> Result<Conn<C>, sqlx::Error> {
        let permit = self.permit().await?;
        if let Some(mut idle) = self.0.pop_idle() {
            if idle.since.elapsed() < PING_IF_IDLE_FOR {
                return Ok(Conn::new(idle.conn, permit, &self.0, true));
            }
            match idle.conn.conn.ping().await {
                Ok(()) => return Ok(Conn::new(idle.conn, permit, &self.0, true)),
                Err(e) => {
                    tracing::debug!(error = %e, "a pooled connection failed its check");
                    self.0.evict_idle();
                }
            }
        }
        let conn = self.0.open().await?;
        Ok(Conn::new(conn, permit, &self.0, false))
    }

    /// Opens connections until the pool holds its minimum, and returns how many it holds. The
    /// first opens alone, the rest side by side; they are only borrowed while they open.
    ///
    /// Why the first alone: a connection's settings may need the database to itself once. On a
    /// new SQLite file the first connection switches the file to WAL, and two connections doing
    /// that at once can make one fail at once with "database is locked" (SQLite does not wait
    /// when waiting could deadlock). After that, setting WAL again changes nothing.
    ///
    /// # Errors
    /// Why a connection could not be opened.
    pub async fn warm(&self) -> Result<u32, sqlx::Error> {
        let want = self.0.options.min.min(self.0.options.max);
        let missing = want.saturating_sub(self.size());
        if missing == 0 {
            return Ok(self.size());
        }
        let first = self.open_unpooled().await?;
        let rest =
            futures_util::future::try_join_all((1..missing).map(|_| self.open_unpooled())).await?;
        first.keep();
        for conn in rest {
            conn.keep();
        }
        Ok(self.size())
    }

    /// A new connection even when idle ones exist (warming).
    async fn open_unpooled(&self) -> Result<Conn<C>, sqlx::Error> {
        self.within_acquire_timeout(async {
            let permit = self.permit().await?;
            let conn = self.0.open().await?;
            Ok(Conn::new(conn, permit, &self.0, false))
        })
        .await
    }

    /// A connection of its own, with the pool's settings but outside it: neither counted nor
    /// ever handed back. For a session-level lock that must end with the connection (a replica's
    /// lease on a stream of events), which a pooled connection would carry on to its next user.
    ///
    /// # Errors
    /// `PoolClosed` after [`Pool::close`], `PoolTimedOut` after the acquire timeout, or why the
    /// connection could not be opened.
    pub async fn connect_apart(&self) -> Result<C, sqlx::Error> {
        if self.0.closed.load(Ordering::Acquire) {
            return Err(sqlx::Error::PoolClosed);
        }
        tokio::time::timeout(
            self.0.options.acquire_timeout,
            C::connect_with(&self.0.options.connect),
        )
        .await
        .unwrap_or(Err(sqlx::Error::PoolTimedOut))
    }

    /// Room for one more connection in use; `PoolClosed` once the pool is closed.
    async fn permit(&self) -> Result<OwnedSemaphorePermit, sqlx::Error> {
        Arc::clone(&self.0.permits)
            .acquire_owned()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)
    }

    /// `acquire` or `PoolTimedOut`, whichever comes first.
    async fn within_acquire_timeout(
        &self,
        acquire: impl std::future::Future<Output = Result<Conn<C>, sqlx::Error>>,
    ) -> Result<Conn<C>, sqlx::Error> {
        tokio::time::timeout(self.0.options.acquire_timeout, acquire)
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut))
    }

    /// Refuses new requests for connections and closes the idle ones; connections in use are
    /// closed as they come back.
    pub async fn close(&self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.permits.close();
        let idle = std::mem::take(&mut *self.0.lock_idle());
        for i in idle {
            let Tracked { conn, _counted } = i.conn;
            if let Err(e) = conn.close().await {
                tracing::debug!(error = %e, "closing a pooled connection");
            }
        }
    }
}

/// The refusal of a request shed at once: the error a timed-out wait gives (503 from the
/// services), without the wait.
fn shed(what: &str) -> sqlx::Error {
    tracing::debug!(
        "shedding a request for {what}: the waiters ahead would outlast the acquire timeout"
    );
    sqlx::Error::PoolTimedOut
}

impl<C: Pooled> Shared<C> {
    fn lock_idle(&self) -> MutexGuard<'_, Vec<Idle<C>>> {
        // The lock guards plain pushes and pops; a panic cannot leave the list half-changed.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most recently used idle connection, after closing the oldest one if it has aged out.
    fn pop_idle(&self) -> Option<Idle<C>> {
        let mut idle = self.lock_idle();
        let aged = idle
            .first()
            .is_some_and(|oldest| oldest.since.elapsed() >= IDLE_TIMEOUT)
            && self.open.load(Ordering::Relaxed) > self.options.min;
        if aged {
            drop(idle.remove(0));
        }
        idle.pop()
    }

    async fn open(&self) -> Result<Tracked<C>, sqlx::Error> {
        let conn = C::connect_with(&self.options.connect).await?;
        Ok(Tracked {
            conn,
            _counted: Counted::new(&self.open),
        })
    }

    /// Closes every idle connection: one turned out broken, and whatever broke it (most often a
    /// database restart) broke the ones that sat beside it, which would otherwise each fail a
    /// request before they were found out.
    fn evict_idle(&self) {
        let evicted = std::mem::take(&mut *self.lock_idle());
        if !evicted.is_empty() {
            tracing::debug!(
                connections = evicted.len(),
                "closing idle database connections after one broke"
            );
        }
    }

    fn put_back(&self, conn: Tracked<C>) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        self.lock_idle().push(Idle {
            conn,
            since: Instant::now(),
        });
    }
}

/// A connection on loan. Without [`Conn::settle`] or [`Conn::keep`] it is checked with a ping
/// before it serves again: a future dropped mid-query may have left an exchange unfinished.
pub struct Conn<C: Pooled> {
    conn: Option<Tracked<C>>,
    permit: Option<OwnedSemaphorePermit>,
    /// The turn to write ([`Pool::get_to_write`]), given up with the permit.
    turn: Option<OwnedMutexGuard<()>>,
    pool: Arc<Shared<C>>,
    on_return: Return,
    reused: bool,
    /// When it was lent, for the loans' average ([`Queue`]).
    lent: tokio::time::Instant,
}

impl<C: Pooled> Conn<C> {
    fn new(
        conn: Tracked<C>,
        permit: OwnedSemaphorePermit,
        pool: &Arc<Shared<C>>,
        reused: bool,
    ) -> Self {
        Self {
            conn: Some(conn),
            permit: Some(permit),
            turn: None,
            pool: Arc::clone(pool),
            on_return: Return::Check,
            reused,
            lent: tokio::time::Instant::now(),
        }
    }

    /// Whether the connection came from the idle list rather than being opened for this loan.
    /// Work that failed because a reused connection was broken may be tried again: it never
    /// reached the database.
    pub fn reused(&self) -> bool {
        self.reused
    }

    /// Hands the connection back according to how `result` ended, and passes `result` on.
    ///
    /// A transaction must have been committed or rolled back explicitly when the result is `Ok`:
    /// the connection then goes back unchecked, and a rollback that sqlx queued when the
    /// transaction was dropped would wait, holding its locks, until the connection's next use.
    pub fn settle<T, E: Outcome>(mut self, result: Result<T, E>) -> Result<T, E> {
        self.on_return = match &result {
            Ok(_) => Return::Reuse,
            Err(e) if e.breaks_connection() => Return::Close,
            Err(_) => Return::Check,
        };
        result
    }

    /// Hands the connection back as fit for reuse.
    pub fn keep(mut self) {
        self.on_return = Return::Reuse;
    }
}

/// An error that ended the work on a connection.
pub trait Outcome {
    /// True when the connection's state is unknown after it (it is then closed, not checked).
    fn breaks_connection(&self) -> bool;
}

impl Outcome for sqlx::Error {
    fn breaks_connection(&self) -> bool {
        use sqlx::Error as E;
        match self {
            E::Io(_) | E::Tls(_) | E::Protocol(_) | E::WorkerCrashed => true,
            E::PoolTimedOut | E::PoolClosed => true,
            // PostgreSQL's connection exceptions (class 08) and its shutdown or termination of
            // the session (57P01–57P03) end the connection.
            E::Database(db) => db
                .code()
                .is_some_and(|c| c.starts_with("08") || c.starts_with("57P")),
            _ => false,
        }
    }
}

impl<C: Pooled> std::ops::Deref for Conn<C> {
    type Target = C;

    fn deref(&self) -> &C {
        match &self.conn {
            Some(c) => &c.conn,
            // Taken only in `drop`.
            None => unreachable!("a pooled connection is used after its return"),
        }
    }
}

impl<C: Pooled> std::ops::DerefMut for Conn<C> {
    fn deref_mut(&mut self) -> &mut C {
        match &mut self.conn {
            Some(c) => &mut c.conn,
            None => unreachable!("a pooled connection is used after its return"),
        }
    }
}

impl<C: Pooled> Drop for Conn<C> {
    fn drop(&mut self) {
        let turn = self.turn.take();
        let (Some(conn), Some(permit)) = (self.conn.take(), self.permit.take()) else {
            return;
        };
        let held = self.lent.elapsed();
        self.pool.conns.loan_ended(held);
        if turn.is_some() {
            self.pool.turns.loan_ended(held);
        }
        match self.on_return {
            Return::Reuse => {
                self.pool.put_back(conn);
                drop(permit);
            }
            Return::Check => {
                let Ok(rt) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                let pool = Arc::clone(&self.pool);
                rt.spawn(async move {
                    let mut conn = conn;
                    match tokio::time::timeout(CHECK_TIMEOUT, conn.conn.ping()).await {
                        Ok(Ok(())) => pool.put_back(conn),
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "a returned connection failed its check");
                            pool.evict_idle();
                        }
                        Err(_) => tracing::debug!("closing a connection whose check timed out"),
                    }
                    drop(permit);
                    drop(turn);
                });
            }
            Return::Close => self.pool.evict_idle(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt as _;
    use sqlx::sqlite::SqliteConnectOptions;

    fn pool(dir: &std::path::Path, max: u32) -> Pool<sqlx::SqliteConnection> {
        Pool::new(PoolOptions {
            connect: SqliteConnectOptions::new()
                .filename(dir.join("shed.db"))
                .create_if_missing(true),
            max,
            min: 0,
            acquire_timeout: Duration::from_secs(60),
        })
    }

    #[test]
    fn the_loans_average_follows_new_loans_an_eighth_at_a_time() {
        let q = Queue::default();
        assert!(
            !q.would_overrun(1, Duration::ZERO),
            "nothing known: no shedding"
        );
        q.loan_ended(Duration::from_millis(80));
        assert_eq!(
            q.loan_us.load(Ordering::Relaxed),
            80_000,
            "the first loan sets it"
        );
        q.loan_ended(Duration::ZERO);
        assert_eq!(q.loan_us.load(Ordering::Relaxed), 70_000);
        // One waiter ahead at 70 ms a loan, two connections: the next waits 70 ms in all.
        let _ahead = q.wait();
        // Loans that long, but nobody has waited yet: a stall, not yet an overload.
        assert!(!q.would_overrun(2, Duration::from_millis(69)));
        q.waited(Duration::from_millis(40));
        assert!(q.would_overrun(2, Duration::from_millis(69)));
        assert!(!q.would_overrun(2, Duration::from_millis(70)));
        // Recent waits under half the timeout: not shed, whatever the loans predict.
        assert!(!q.would_overrun(2, Duration::from_millis(81)));
    }

    /// With every connection lent, a request that would wait past the acquire timeout behind the
    /// waiters ahead of it is refused at once (the future is ready without waiting); one that
    /// would be served in time waits and is served; and once the load is gone, the next request
    /// gets a connection at once.
    #[tokio::test]
    async fn a_request_that_would_wait_past_the_timeout_is_refused_at_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pool = pool(dir.path(), 1);
        let held = pool.get().await.expect("the one connection");
        // Loans have lasted 40 s lately: one waiter is served within the 60 s, two are not.
        pool.0.conns.loan_us.store(40_000_000, Ordering::Relaxed);
        pool.0.conns.wait_us.store(35_000_000, Ordering::Relaxed);
        let first = tokio::spawn({
            let pool = pool.clone();
            async move { pool.get().await.map(Conn::keep) }
        });
        while pool.0.conns.waiting.load(Ordering::Relaxed) == 0 {
            tokio::task::yield_now().await;
        }
        match pool.get().now_or_never() {
            Some(Err(sqlx::Error::PoolTimedOut)) => {}
            other => panic!(
                "the second waiter is refused at once: {:?}",
                other.map(|r| r.map(|_| "a connection"))
            ),
        }
        assert!(!first.is_finished(), "the first still waits its turn");
        held.keep();
        first
            .await
            .expect("joined")
            .expect("the first waiter is served");
        pool.get()
            .await
            .expect("no one waits: served at once")
            .keep();
    }

    /// A turn to write on SQLite is shed the same way, one writer at a time.
    #[tokio::test]
    async fn a_writer_that_would_wait_past_the_timeout_is_refused_at_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pool = pool(dir.path(), 4);
        let writing = pool.get_to_write().await.expect("the turn to write");
        pool.0.turns.loan_us.store(40_000_000, Ordering::Relaxed);
        pool.0.turns.wait_us.store(35_000_000, Ordering::Relaxed);
        let next = tokio::spawn({
            let pool = pool.clone();
            async move { pool.get_to_write().await.map(Conn::keep) }
        });
        while pool.0.turns.waiting.load(Ordering::Relaxed) == 0 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(
            pool.get_to_write().now_or_never(),
            Some(Err(sqlx::Error::PoolTimedOut))
        ));
        // Readers are not behind the writers.
        pool.get().await.expect("a reader's connection").keep();
        writing.keep();
        next.await
            .expect("joined")
            .expect("the next writer is served");
    }
}
