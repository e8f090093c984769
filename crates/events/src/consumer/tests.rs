//! Consumers over real databases (SQLite files and a real PostgreSQL): order, exactly once across
//! restarts, parking, retries, odd characters, and concurrent producers.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use pms_service::store::{Db, StoreConfig};
use pms_service::transaction;
use pms_testkit::assert_eventually;
use serde::{Deserialize, Serialize};

use super::*;
use crate::event::NewEvent;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Named {
    name: String,
}

/// A producer and a consumer database of one backend, with the event tables and a `seen` table
/// the test handler writes to.
struct Pair {
    producer: Db,
    consumer: Db,
    _dir: tempfile::TempDir,
}

#[derive(Debug, Clone, Copy)]
enum Backend {
    Sqlite,
    Postgres,
}

async fn pair(backend: Backend) -> Option<Pair> {
    let dir = tempfile::tempdir().expect("temp dir");
    let (p, c) = match backend {
        Backend::Sqlite => (
            StoreConfig::sqlite_file(&dir.path().join("p.db")),
            StoreConfig::sqlite_file(&dir.path().join("c.db")),
        ),
        Backend::Postgres => {
            if pms_testkit::pg::skipped() {
                return None;
            }
            let pg = pms_testkit::pg::shared();
            (
                StoreConfig::new(pg.fresh_database()),
                StoreConfig::new(pg.fresh_database()),
            )
        }
    };
    let pair = Pair {
        producer: Db::open(&p).expect("producer"),
        consumer: Db::open(&c).expect("consumer"),
        _dir: dir,
    };
    let schema = match backend {
        Backend::Sqlite => crate::SCHEMA_SQLITE,
        Backend::Postgres => crate::SCHEMA_POSTGRES,
    };
    for db in [&pair.producer, &pair.consumer] {
        let done: Result<(), sqlx::Error> = transaction!(db, |tx| {
            sqlx::raw_sql(schema).execute(&mut *tx).await?;
            sqlx::raw_sql("CREATE TABLE seen (id BIGINT PRIMARY KEY, name TEXT NOT NULL)")
                .execute(&mut *tx)
                .await
                .map(|_| ())
        });
        done.expect("schema");
    }
    Some(pair)
}

/// Appends one `named` event per name, each in its own transaction.
async fn produce(db: &Db, names: &[String]) {
    for name in names {
        let event = NewEvent::new(
            "thing",
            name,
            "thing.named",
            1,
            &Named { name: name.clone() },
        )
        .expect("event");
        append_one(db, &event).await;
    }
}

async fn append_one(db: &Db, event: &NewEvent) -> i64 {
    let r: Result<i64, sqlx::Error> = transaction!(db, |tx| tx.append(event).await);
    r.expect("append")
}

/// Records each event's name in `seen`, keyed by the event id, with the position.
struct Recorder {
    db: Db,
    fail_first: AtomicU32,
}

impl Handler for Recorder {
    async fn apply(&self, event: &Event) -> Result<Outcome, ApplyError> {
        if event.event_type != "thing.named" {
            return Ok(Outcome::Ignored);
        }
        if self.fail_first.load(Ordering::SeqCst) > 0 {
            self.fail_first.fetch_sub(1, Ordering::SeqCst);
            return Err(ApplyError::Retry("the database blinked".into()));
        }
        let named: Named = event.decode(&[1]).map_err(ApplyError::Park)?;
        let r: Result<(), sqlx::Error> = transaction!(self.db, |tx| {
            // A plain INSERT: applying an event twice would fail on the key.
            sqlx::query("INSERT INTO seen (id, name) VALUES ($1, $2)")
                .bind(event.id)
                .bind(&named.name)
                .execute(&mut *tx)
                .await?;
            tx.record_position("test", &event.source, event.id).await
        });
        r.map_err(|e| ApplyError::Retry(e.to_string()))?;
        Ok(Outcome::Applied)
    }
}

fn consumer(pair: &Pair, fail_first: u32) -> Consumer<Recorder> {
    Consumer {
        name: "test",
        source: Outbox::new("producer", pair.producer.clone()),
        db: pair.consumer.clone(),
        handler: Arc::new(Recorder {
            db: pair.consumer.clone(),
            fail_first: AtomicU32::new(fail_first),
        }),
    }
}

async fn seen(db: &Db) -> Vec<(i64, String)> {
    let r: Result<Vec<(i64, String)>, sqlx::Error> = pms_service::repeatable!(db, |conn| {
        sqlx::query_as("SELECT id, name FROM seen ORDER BY id")
            .fetch_all(&mut *conn)
            .await
    });
    r.expect("seen")
}

async fn parked(db: &Db) -> Vec<(i64, String)> {
    let r: Result<Vec<(i64, String)>, sqlx::Error> = pms_service::repeatable!(db, |conn| {
        sqlx::query_as("SELECT event_id, reason FROM parked_events ORDER BY event_id")
            .fetch_all(&mut *conn)
            .await
    });
    r.expect("parked")
}

fn names(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| format!("n{i} | \"x\" \\ ü")).collect()
}

#[tokio::test]
async fn a_stopped_consumer_catches_up_and_applies_each_event_once() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(pair) = pair(backend).await else {
            continue;
        };
        produce(&pair.producer, &names(0..250)).await;
        // Drain it all in steps (two batches), then stop.
        let c = consumer(&pair, 0);
        while c.step().await.expect("step") {}
        assert_eq!(seen(&pair.consumer).await.len(), 250, "{backend:?}");
        drop(c);
        // Produce while nobody consumes; a new consumer starts from the recorded position.
        produce(&pair.producer, &names(250..300)).await;
        let c = consumer(&pair, 0);
        assert_eq!(c.position().await.expect("position"), 250);
        while c.step().await.expect("step") {}
        let all = seen(&pair.consumer).await;
        assert_eq!(all.len(), 300, "{backend:?}: every event once");
        assert!(all.windows(2).all(|w| w[0].0 + 1 == w[1].0), "in order");
        // Names with a pipe, quotes, a backslash and non-ASCII cross intact (the original split
        // messages on '|').
        assert_eq!(all[7].1, "n7 | \"x\" \\ ü");
    }
}

#[tokio::test]
async fn a_running_consumer_is_woken_by_commits() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(pair) = pair(backend).await else {
            continue;
        };
        let c = consumer(&pair, 0);
        let outbox = c.source.clone();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(c.run(async {
            let _ = stop_rx.await;
        }));
        produce(&pair.producer, &names(0..3)).await;
        outbox.committed();
        let db = pair.consumer.clone();
        assert_eventually("three events applied", 500, || {
            let db = db.clone();
            async move { seen(&db).await.len() == 3 }
        })
        .await;
        let _ = stop_tx.send(());
        task.await.expect("consumer task");
    }
}

#[tokio::test]
async fn unreadable_events_are_parked_and_the_rest_flow() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(pair) = pair(backend).await else {
            continue;
        };
        produce(&pair.producer, &names(0..1)).await;
        let future = NewEvent {
            aggregate_type: "thing",
            aggregate_id: "x".into(),
            event_type: "thing.named",
            version: 9,
            payload: r#"{"name":"from the future"}"#.into(),
        };
        let bad_id = append_one(&pair.producer, &future).await;
        let garbage = NewEvent {
            version: 1,
            payload: "not json {".into(),
            ..future.clone()
        };
        let garbage_id = append_one(&pair.producer, &garbage).await;
        let other = NewEvent {
            event_type: "thing.other",
            ..garbage.clone()
        };
        append_one(&pair.producer, &other).await;
        produce(&pair.producer, &names(1..2)).await;
        let c = consumer(&pair, 0);
        while c.step().await.expect("step") {}
        assert_eq!(seen(&pair.consumer).await.len(), 2, "{backend:?}");
        let parked = parked(&pair.consumer).await;
        assert_eq!(
            parked.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![bad_id, garbage_id]
        );
        assert!(parked[0].1.contains("version 9"), "{}", parked[0].1);
        assert_eq!(c.position().await.expect("position"), 5);
    }
}

#[tokio::test]
async fn a_failed_event_is_tried_again_never_skipped() {
    let pair = pair(Backend::Sqlite).await.expect("sqlite");
    produce(&pair.producer, &names(0..3)).await;
    let c = consumer(&pair, 2);
    assert!(c.step().await.is_err());
    assert!(c.step().await.is_err());
    assert!(!c.step().await.expect("third try"));
    assert_eq!(seen(&pair.consumer).await.len(), 3);
}

/// Many producers at once on PostgreSQL while a consumer reads: ids are taken under the outbox
/// lock, so none commits behind one already read, and the consumer ends with every event.
#[tokio::test]
async fn concurrent_producers_lose_nothing() {
    let Some(pair) = pair(Backend::Postgres).await else {
        return;
    };
    let c = Arc::new(consumer(&pair, 0));
    let reader = {
        let c = Arc::clone(&c);
        tokio::spawn(async move {
            for _ in 0..400 {
                let _ = c.step().await;
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        })
    };
    let mut writers = Vec::new();
    for w in 0..8u32 {
        let db = pair.producer.clone();
        writers.push(tokio::spawn(async move {
            produce(&db, &names(w * 100..w * 100 + 25)).await;
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    reader.await.expect("reader");
    while c.step().await.expect("step") {}
    assert_eq!(seen(&pair.consumer).await.len(), 200);
}
