//! Test helpers shared by the consumer and NATS tests: a producer and a consumer database on
//! either backend, a recording handler, and readers of what it recorded.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use pms_service::store::{Db, StoreConfig};
use pms_service::transaction;
use serde::{Deserialize, Serialize};

use crate::conn::EventConn;
use crate::consumer::{ApplyError, Consumer, Handler, Outcome};
use crate::event::{Event, NewEvent};
use crate::outbox::Outbox;
use crate::position::Applied;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Named {
    pub name: String,
}

/// A producer and a consumer database of one backend, with the event tables and a `seen` table
/// the test handler writes to.
pub struct Pair {
    pub producer: Db,
    pub consumer: Db,
    _dir: tempfile::TempDir,
}

#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub async fn pair(backend: Backend) -> Option<Pair> {
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
            sqlx::raw_sql(crate::SCHEMA_BROKER_POSITIONS)
                .execute(&mut *tx)
                .await?;
            sqlx::raw_sql(crate::SCHEMA_RETENTION)
                .execute(&mut *tx)
                .await?;
            sqlx::raw_sql(crate::SCHEMA_ERASURE)
                .execute(&mut *tx)
                .await?;
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
pub async fn produce(db: &Db, names: &[String]) {
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

pub async fn append_one(db: &Db, event: &NewEvent) -> i64 {
    let r: Result<i64, sqlx::Error> = transaction!(db, |tx| tx.append(event).await);
    r.expect("append")
}

/// Records each event's name in `seen`, keyed by the event id, with the position.
pub struct Recorder {
    pub db: Db,
    pub fail_first: AtomicU32,
    /// Longest run applied at once (0: one by one).
    pub run: usize,
    /// Runs applied.
    pub runs: AtomicU32,
}

impl Recorder {
    /// Failing its first `fail_first` tries, applying runs of up to `run` events.
    pub fn new(db: Db, fail_first: u32, run: usize) -> Self {
        Self {
            db,
            fail_first: AtomicU32::new(fail_first),
            run,
            runs: AtomicU32::new(0),
        }
    }
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
            tx.record_position("test", Applied::one(event)).await
        });
        r.map_err(|e| ApplyError::Retry(e.to_string()))?;
        Ok(Outcome::Applied)
    }

    /// Up to `run` events, stopping before one it cannot read.
    async fn apply_run(&self, events: &[Event]) -> Result<usize, ApplyError> {
        let mut names = Vec::new();
        for event in events.iter().take(self.run) {
            let name = match event.event_type.as_str() {
                "thing.named" => match event.decode::<Named>(&[1]) {
                    Ok(named) => Some((event.id, named.name)),
                    Err(_) => break,
                },
                _ => None,
            };
            names.push(name);
        }
        let Some(last) = names.len().checked_sub(1).map(|i| &events[i]) else {
            return Ok(0);
        };
        if self.fail_first.load(Ordering::SeqCst) > 0 {
            self.fail_first.fetch_sub(1, Ordering::SeqCst);
            return Err(ApplyError::Retry("the database blinked".into()));
        }
        let r: Result<(), sqlx::Error> = transaction!(self.db, |tx| {
            for (id, name) in names.iter().flatten() {
                sqlx::query("INSERT INTO seen (id, name) VALUES ($1, $2)")
                    .bind(id)
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.record_position("test", Applied::run(&events[0], last))
                .await
        });
        r.map_err(|e| ApplyError::Retry(e.to_string()))?;
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(names.len())
    }
}

pub fn consumer(pair: &Pair, fail_first: u32) -> Consumer<Recorder> {
    consumer_in_runs(pair, fail_first, 0)
}

/// A consumer whose handler applies up to `run` events at once.
pub fn consumer_in_runs(pair: &Pair, fail_first: u32, run: usize) -> Consumer<Recorder> {
    Consumer {
        name: "test",
        source: Outbox::new("producer", pair.producer.clone()),
        db: pair.consumer.clone(),
        handler: Arc::new(Recorder::new(pair.consumer.clone(), fail_first, run)),
    }
}

pub async fn seen(db: &Db) -> Vec<(i64, String)> {
    let r: Result<Vec<(i64, String)>, sqlx::Error> = pms_service::repeatable!(db, |conn| {
        sqlx::query_as("SELECT id, name FROM seen ORDER BY id")
            .fetch_all(&mut *conn)
            .await
    });
    r.expect("seen")
}

pub async fn parked(db: &Db) -> Vec<(i64, String)> {
    let r: Result<Vec<(i64, String)>, sqlx::Error> = pms_service::repeatable!(db, |conn| {
        sqlx::query_as("SELECT event_id, reason FROM parked_events ORDER BY event_id")
            .fetch_all(&mut *conn)
            .await
    });
    r.expect("parked")
}

pub fn names(range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| format!("n{i} | \"x\" \\ ü")).collect()
}
