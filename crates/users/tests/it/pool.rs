//! The connection pool is opened ahead of use: after start the service holds its minimum of
//! database connections (capped by the pool size), so the first requests do not each wait for a
//! PostgreSQL connection to be set up.

use pms_testkit::assert_eventually;
use pms_users::store::{Store, StoreConfig};
use pms_users::App;

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
