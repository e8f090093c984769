//! The connection pool: opened ahead of use (after start the service holds its minimum of
//! connections, capped by the pool size, so the first requests do not each wait for a PostgreSQL
//! connection to be set up), connections handed back unchecked after finished work, checked after
//! a refused statement or a cut-off query, closed when broken, and no transaction left open by a
//! refused write.

use std::time::Duration;

use pms_testkit::assert_eventually;
use pms_users::model::{PaymentMethod, Role, Vehicle};
use pms_users::store::pool::{Conn, Pool, PoolOptions, Pooled};
use pms_users::store::users::Page;
use pms_users::store::{Store, StoreConfig, StoreError};
use pms_users::validate::{Grant, NewUser};
use pms_users::App;
use sqlx::{Connection, PgConnection, SqliteConnection};

use crate::support::{config, Database, Db};

#[tokio::test]
async fn warming_opens_the_minimum_and_never_more_than_the_pool() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(database) = Database::fresh(db) else {
            continue;
        };
        for (size, min, expected) in [(4, 2, 2), (3, 5, 3), (4, 0, 0)] {
            let mut cfg = StoreConfig::new(&database.url);
            cfg.pool_size = size;
            cfg.min_connections = min;
            let store = Store::open(&cfg).expect("store");
            assert_eq!(
                store.connections(),
                0,
                "{db:?}: nothing opened before asked"
            );
            assert_eq!(
                store.warm().await.expect("warm"),
                expected,
                "{db:?}: size {size}, min {min}"
            );
            store.close().await;
        }
    }
}

#[tokio::test]
async fn a_started_service_holds_its_connections_before_the_first_request() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(database) = Database::fresh(db) else {
            continue;
        };
        let mut cfg = config(&database.url);
        cfg.store.pool_size = 3;
        cfg.store.min_connections = 3;
        let app = App::new(cfg).expect("app");
        app.init().await.expect("init");
        let store = app.store.clone();
        assert_eventually("the pool holds 3 connections", 500, || {
            let store = store.clone();
            async move { store.connections() == 3 }
        })
        .await;
    }
}

/// A pool of at most `max` connections to `url`.
fn pool<C: Pooled>(url: &str, max: u32) -> Pool<C> {
    Pool::new(PoolOptions {
        connect: url.parse().expect("database URL"),
        max,
        min: 0,
        acquire_timeout: Duration::from_millis(300),
    })
}

/// The PostgreSQL server process behind `conn`: equal pids mean the same connection.
async fn backend_pid(conn: &mut Conn<PgConnection>) -> i32 {
    let pid = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut **conn)
        .await;
    pid.expect("pg_backend_pid")
}

#[tokio::test]
async fn finished_work_hands_the_connection_back_and_the_latest_goes_out_first() {
    let Some(database) = Database::fresh(Db::Postgres) else {
        return;
    };
    let pool = pool::<PgConnection>(&database.url, 2);
    let mut a = pool.get().await.expect("a");
    let first = backend_pid(&mut a).await;
    a.keep();
    let mut again = pool.get().await.expect("again");
    assert_eq!(backend_pid(&mut again).await, first, "reused, not reopened");

    let mut other = pool.get().await.expect("other");
    let second = backend_pid(&mut other).await;
    assert_ne!(first, second);
    assert_eq!(pool.size(), 2);
    again.keep();
    other.keep();
    let mut next = pool.get().await.expect("next");
    assert_eq!(
        backend_pid(&mut next).await,
        second,
        "the most recently returned connection goes out first"
    );
    next.keep();
    pool.close().await;
    assert_eq!(pool.size(), 0);
}

#[tokio::test]
async fn a_query_cut_off_is_finished_before_its_connection_serves_again() {
    let Some(database) = Database::fresh(Db::Postgres) else {
        return;
    };
    // One connection: the next `get` waits until the check has handed it back.
    let pool = pool::<PgConnection>(&database.url, 1);
    let mut conn = pool.get().await.expect("conn");
    let pid = backend_pid(&mut conn).await;
    let slow = sqlx::query_scalar::<_, i32>("SELECT 41 FROM pg_sleep(0.3)").fetch_one(&mut *conn);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), slow)
            .await
            .is_err(),
        "the query was still running"
    );
    drop(conn);
    let mut next = pool.get().await.expect("next");
    assert_eq!(backend_pid(&mut next).await, pid, "kept, not reopened");
    let seven: i32 = sqlx::query_scalar("SELECT 7")
        .fetch_one(&mut *next)
        .await
        .expect("select");
    assert_eq!(
        seven, 7,
        "the cut-off query's answer is not read as this one's"
    );
    next.keep();
}

#[tokio::test]
async fn a_broken_connection_is_closed_with_the_idle_ones() {
    let Some(database) = Database::fresh(Db::Postgres) else {
        return;
    };
    let pool = pool::<PgConnection>(&database.url, 2);
    let mut victim = pool.get().await.expect("victim");
    let pid = backend_pid(&mut victim).await;
    let mut killer = pool.get().await.expect("killer");
    let killed = sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .execute(&mut *killer)
        .await;
    killer.settle(killed).expect("terminate");
    let broken = sqlx::query("SELECT 1").execute(&mut *victim).await;
    assert!(victim.settle(broken).is_err(), "the server closed it");
    assert_eq!(
        pool.size(),
        0,
        "closed, not returned, and the idle connection beside it closed too"
    );
    let mut next = pool.get().await.expect("next");
    assert_ne!(backend_pid(&mut next).await, pid);
    next.keep();
}

#[tokio::test]
async fn a_refused_statement_keeps_the_connection_once_it_answers_a_ping() {
    let Some(database) = Database::fresh(Db::Postgres) else {
        return;
    };
    // One connection: the next `get` waits until the check has handed it back.
    let pool = pool::<PgConnection>(&database.url, 1);
    let mut conn = pool.get().await.expect("conn");
    let pid = backend_pid(&mut conn).await;
    let refused = sqlx::query("SELECT 1 / 0").execute(&mut *conn).await;
    let err = conn.settle(refused).expect_err("division by zero");
    assert!(err.as_database_error().is_some(), "{err}");
    let mut next = pool.get().await.expect("next");
    assert_eq!(backend_pid(&mut next).await, pid, "kept after the check");
    next.keep();
}

#[tokio::test]
async fn waiting_for_a_connection_ends_at_the_timeout_and_a_closed_pool_refuses() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(database) = Database::fresh(db) else {
            continue;
        };
        match db {
            Db::Sqlite => {
                times_out_and_refuses_when_closed(pool::<SqliteConnection>(&database.url, 1), db)
                    .await
            }
            Db::Postgres => {
                times_out_and_refuses_when_closed(pool::<PgConnection>(&database.url, 1), db).await
            }
        }
    }
}

/// [`waiting_for_a_connection_ends_at_the_timeout_and_a_closed_pool_refuses`] on one backend's
/// pool of one connection.
async fn times_out_and_refuses_when_closed<C: Pooled>(pool: Pool<C>, db: Db) {
    {
        let held = pool.get().await.expect("held");
        assert!(
            matches!(pool.get().await, Err(sqlx::Error::PoolTimedOut)),
            "{db:?}: the only connection is taken"
        );
        held.keep();
        assert_eq!(pool.size(), 1);
        pool.close().await;
        assert_eq!(pool.size(), 0, "{db:?}");
        assert!(
            matches!(pool.get().await, Err(sqlx::Error::PoolClosed)),
            "{db:?}"
        );
    }
}

/// Sessions of the test database left inside a transaction.
async fn open_transactions(watcher: &mut PgConnection) -> i64 {
    let n = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
    )
    .fetch_one(watcher)
    .await;
    n.expect("pg_stat_activity")
}

#[tokio::test]
async fn refused_writes_leave_no_transaction_open() {
    let Some(database) = Database::fresh(Db::Postgres) else {
        return;
    };
    let mut cfg = StoreConfig::new(&database.url);
    cfg.pool_size = 2;
    let store = Store::open(&cfg).expect("store");
    store.migrate().await.expect("migrate");
    assert!(store.seed_if_empty("x").await.expect("seed"));
    let mut users = Vec::new();
    store
        .for_each_user(Page::ALL, |u| users.push(u))
        .await
        .expect("users");
    let someone = &users[0];
    let mut watcher = PgConnection::connect(&database.url).await.expect("watcher");

    // Refusals decided inside the transaction: each rolls back before it answers.
    let grant = |user_ids: Vec<i64>, amount: i64| Grant {
        user_ids,
        amount,
        reason: "test".into(),
    };
    let missing = store
        .grant(&grant(vec![someone.id, 999_999], 5), 1, None)
        .await;
    assert_eq!(missing, Err(StoreError::UsersNotFound(vec![999_999])));
    assert_eq!(open_transactions(&mut watcher).await, 0, "unknown user");
    let overdraft = store
        .grant(&grant(vec![someone.id], -1_000_000), 1, None)
        .await;
    assert_eq!(overdraft, Err(StoreError::InsufficientBalance(someone.id)));
    assert_eq!(open_transactions(&mut watcher).await, 0, "overdraft");
    let taken = users[1].vehicles[0].clone();
    let clash = store.add_vehicle(someone.id, &taken).await;
    assert_eq!(
        clash,
        Err(StoreError::Conflict {
            field: "licensePlateNumber"
        })
    );
    assert_eq!(open_transactions(&mut watcher).await, 0, "taken plate");

    // A statement the database refused: the connection's check sends the rollback.
    let dup = NewUser {
        first_name: "Dup".into(),
        last_name: "Licate".into(),
        email: someone.email.clone(),
        password: String::new(),
        nif: 299_999_990,
        vehicle: Vehicle {
            license_plate_number: "ZZ-99-ZZ".into(),
            ..taken
        },
        payment_method: PaymentMethod::NotDefined,
        invitation_code: None,
    };
    let clash = store.create_user(&dup, "x", Role::Customer).await;
    assert_eq!(clash.err(), Some(StoreError::Conflict { field: "email" }));
    let mut open = open_transactions(&mut watcher).await;
    for _ in 0..300 {
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        open = open_transactions(&mut watcher).await;
    }
    assert_eq!(open, 0, "the refused insert is rolled back");

    // The balance is untouched by the refused grants.
    let wallet = store.wallet(someone.id).await.expect("wallet");
    assert_eq!(wallet.map(|w| w.parkies), Some(someone.total_parkies));
    store.close().await;
}
