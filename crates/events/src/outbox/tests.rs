//! The PostgreSQL outbox's lock and holes, on a real PostgreSQL: appends share the lock and draw
//! their ids under it, a reader never passes an id that may still commit, and a hole that never
//! fills is passed once settled.

use pms_service::store::{Db, StoreConfig};
use pms_testkit::assert_eventually;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

use crate::conn::{EventConn, OUTBOX_LOCK_KEY, PG_SETTLE};
use crate::testutil::{append_one, Named};
use crate::{NewEvent, Outbox};

/// A fresh database with the event tables, its URL, and an outbox over it.
async fn outbox() -> Option<(String, Outbox)> {
    if pms_testkit::pg::skipped() {
        return None;
    }
    let url = pms_testkit::pg::shared().fresh_database();
    let mut setup = PgConnection::connect(&url).await.expect("connect");
    for step in [crate::SCHEMA_POSTGRES, crate::SCHEMA_RETENTION] {
        sqlx::raw_sql(step)
            .execute(&mut setup)
            .await
            .expect("schema");
    }
    let db = Db::open(&StoreConfig::new(url.clone())).expect("db");
    Some((url, Outbox::new("p", db)))
}

fn event(name: &str) -> NewEvent {
    NewEvent::new(
        "thing",
        name,
        "thing.named",
        1,
        &Named {
            name: name.to_owned(),
        },
    )
    .expect("event")
}

fn ids(events: &[crate::Event]) -> Vec<i64> {
    events.iter().map(|e| e.id).collect()
}

/// Appends share the lock (two in flight at once, neither waits); a reader that takes it alone
/// waits for both; an append asked for while the reader holds it waits without drawing an id,
/// and draws the next one afterwards.
#[tokio::test]
async fn appends_share_the_outbox_lock_and_draw_ids_only_under_it() {
    let Some((url, _)) = outbox().await else {
        return;
    };
    let mut a = PgConnection::connect(&url).await.expect("connect");
    let mut a_tx = a.begin().await.expect("begin");
    assert_eq!(a_tx.append(&event("a")).await.expect("append a"), 1);
    let b = {
        let url = url.clone();
        tokio::spawn(async move {
            // A plain BEGIN, so the transaction outlives this task; the test ends it.
            let mut b = PgConnection::connect(&url).await.expect("connect");
            sqlx::query("BEGIN").execute(&mut b).await.expect("begin");
            // Many at once share it as one does.
            let ids = b
                .append_all(&[event("b1"), event("b2")])
                .await
                .expect("append b");
            (ids, b)
        })
    };
    assert_eventually("the second append ends or waits", 500, || {
        let done = b.is_finished();
        let url = url.clone();
        async move { done || advisory_lock_waits(&url).await > 0 }
    })
    .await;
    assert_eq!(
        advisory_lock_waits(&url).await,
        0,
        "the second append waited"
    );
    let (b_ids, mut b) = b.await.expect("b");
    assert_eq!(b_ids, vec![2, 3]);

    let reader = {
        let url = url.clone();
        tokio::spawn(async move {
            // A plain BEGIN, so the transaction outlives this task; the test ends it.
            let mut r = PgConnection::connect(&url).await.expect("connect");
            sqlx::query("BEGIN").execute(&mut r).await.expect("begin");
            sqlx::query(PG_SETTLE)
                .bind(OUTBOX_LOCK_KEY)
                .execute(&mut r)
                .await
                .expect("settle");
            r
        })
    };
    assert_eventually("the reader waits for the appends", 500, || {
        let url = url.clone();
        async move { advisory_lock_waits(&url).await == 1 }
    })
    .await;
    a_tx.commit().await.expect("commit a");
    sqlx::query("COMMIT")
        .execute(&mut b)
        .await
        .expect("commit b");
    let mut r = reader.await.expect("the reader holds the lock alone");

    let appender = {
        let url = url.clone();
        tokio::spawn(async move {
            let mut c = PgConnection::connect(&url).await.expect("connect");
            let mut tx = c.begin().await.expect("begin");
            let id = tx.append(&event("c")).await.expect("append c");
            tx.commit().await.expect("commit c");
            id
        })
    };
    assert_eventually("the append waits for the reader", 500, || {
        let url = url.clone();
        async move { advisory_lock_waits(&url).await == 1 }
    })
    .await;
    let drawn: i64 = sqlx::query_scalar("SELECT last_value FROM outbox_id_seq")
        .fetch_one(&mut r)
        .await
        .expect("sequence");
    assert_eq!(drawn, 3, "no id is drawn while a reader holds the lock");
    sqlx::query("COMMIT").execute(&mut r).await.expect("commit");
    assert_eq!(appender.await.expect("appender"), 4);
}

/// A read stops before an id whose append is still in flight, however long it waits, and
/// returns it, in order, once it commits.
#[tokio::test]
async fn a_read_never_passes_an_append_in_flight() {
    let Some((url, outbox)) = outbox().await else {
        return;
    };
    assert_eq!(append_one(&outbox.db, &event("1")).await, 1);
    let mut a = PgConnection::connect(&url).await.expect("connect");
    let mut a_tx = a.begin().await.expect("begin");
    assert_eq!(a_tx.append(&event("2")).await.expect("append"), 2);
    assert_eq!(append_one(&outbox.db, &event("3")).await, 3);

    let visible = outbox.read_visible(0, 10).await.expect("visible");
    assert_eq!(ids(&visible), vec![1, 3], "the hole is there to see");
    let read = outbox.read_after(0, 10).await.expect("read");
    assert_eq!(ids(&read), vec![1], "up to the hole and no further");
    let read = outbox.read_after(1, 10).await.expect("read");
    assert_eq!(ids(&read), Vec::<i64>::new(), "nothing past the hole");

    assert_eq!(outbox.holes(), (0, 2), "the lock stayed busy both times");

    a_tx.commit().await.expect("commit");
    let read = outbox.read_after(0, 10).await.expect("read");
    assert_eq!(ids(&read), vec![1, 2, 3]);
    assert_eq!(outbox.holes(), (0, 2), "no hole left to settle");
}

/// An id whose append rolled back never comes: the read settles the hole and passes it.
#[tokio::test]
async fn a_read_passes_a_hole_that_never_fills() {
    let Some((url, outbox)) = outbox().await else {
        return;
    };
    let mut a = PgConnection::connect(&url).await.expect("connect");
    let mut a_tx = a.begin().await.expect("begin");
    assert_eq!(a_tx.append(&event("1")).await.expect("append"), 1);
    a_tx.rollback().await.expect("rollback");
    assert_eq!(append_one(&outbox.db, &event("2")).await, 2);
    assert_eq!(append_one(&outbox.db, &event("3")).await, 3);

    let read = outbox.read_after(0, 10).await.expect("read");
    assert_eq!(ids(&read), vec![2, 3]);
    assert_eq!(read[0].payload["name"], "2");
    assert_eq!(outbox.holes(), (1, 0));
    let text = crate::metrics::EventMetrics::new("p")
        .render(&outbox, &outbox.db)
        .await;
    assert!(
        text.contains("pms_p_outbox_holes_settled_total 1"),
        "{text}"
    );
    assert!(
        text.contains("pms_p_outbox_holes_unsettled_total 0"),
        "{text}"
    );
}

/// Each outbox has its own lock: `pms up` keeps every service in one PostgreSQL database, one
/// schema each, and a reader settling one service's outbox must not hold up another's appends.
#[tokio::test]
async fn a_reader_of_one_schemas_outbox_holds_up_only_its_appends() {
    if pms_testkit::pg::skipped() {
        return;
    }
    let url = pms_testkit::pg::shared().fresh_database();
    let mut setup = PgConnection::connect(&url).await.expect("connect");
    for schema in ["one", "two"] {
        let sql = format!(
            "CREATE SCHEMA {schema}; SET search_path = {schema}; {} {}",
            crate::SCHEMA_POSTGRES,
            crate::SCHEMA_RETENTION
        );
        sqlx::raw_sql(&sql)
            .execute(&mut setup)
            .await
            .expect("schema");
    }
    let options = |schema: &str| -> PgConnectOptions {
        let options: PgConnectOptions = url.parse().expect("url");
        options.options([("search_path", schema)])
    };
    let mut reader = PgConnection::connect_with(&options("one"))
        .await
        .expect("connect");
    let mut held = reader.begin().await.expect("begin");
    sqlx::query(PG_SETTLE)
        .bind(OUTBOX_LOCK_KEY)
        .execute(&mut *held)
        .await
        .expect("settle");

    let append_in = |schema: &str| {
        let options = options(schema);
        tokio::spawn(async move {
            let mut conn = PgConnection::connect_with(&options).await.expect("connect");
            let mut tx = conn.begin().await.expect("begin");
            let id = tx.append(&event("x")).await.expect("append");
            tx.commit().await.expect("commit");
            id
        })
    };
    let two = append_in("two");
    assert_eventually("two's append ends or waits", 500, || {
        let done = two.is_finished();
        let url = url.clone();
        async move { done || advisory_lock_waits(&url).await > 0 }
    })
    .await;
    assert_eq!(advisory_lock_waits(&url).await, 0, "two's append waited");
    assert_eq!(two.await.expect("two"), 1);
    let one = append_in("one");
    assert_eventually("one's append waits for its reader", 500, || {
        let url = url.clone();
        async move { advisory_lock_waits(&url).await == 1 }
    })
    .await;
    held.commit().await.expect("commit");
    assert_eq!(one.await.expect("one"), 1, "one's outbox numbers its own");
}

/// How many sessions of the PostgreSQL database at `url` wait for an advisory lock (in that
/// database only: the tests share one server, and run side by side).
async fn advisory_lock_waits(url: &str) -> i64 {
    let mut probe = PgConnection::connect(url).await.expect("connect");
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(&mut probe)
    .await
    .expect("pg_locks")
}
