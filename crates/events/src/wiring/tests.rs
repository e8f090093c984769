//! The wiring over a real SQLite database: the handler listed for a producer applies its events,
//! and a producer whose outbox was not given is refused by its name.

use pms_testkit::assert_eventually;

use super::{Sources, Wiring};
use crate::metrics::EventMetrics;
use crate::outbox::Outbox;
use crate::testutil::*;

#[tokio::test]
async fn the_listed_handler_applies_its_producers_events() {
    let pair = pair(Backend::Sqlite).await.expect("sqlite");
    let producer = Outbox::new("producer", pair.producer.clone());
    let own = Outbox::new("consumer", pair.consumer.clone());
    let metrics = EventMetrics::new("test");
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    // Every outbox of the process is given; the consumer takes its producer's by name.
    let sources = Sources::InProcess(vec![own.clone(), producer.clone()]);
    let tasks = Wiring::new("test", &own, &metrics, sources, stop_rx)
        .consume("producer", Recorder::new(pair.consumer.clone(), 0, 0))
        .spawn()
        .expect("wired");
    assert_eq!(tasks.len(), 1, "one consumer, no relay in one process");
    produce(&pair.producer, &names(0..3)).await;
    producer.committed();
    let db = pair.consumer.clone();
    assert_eventually("three events applied", 500, || {
        let db = db.clone();
        async move { seen(&db).await.len() == 3 }
    })
    .await;
    let _ = stop.send(true);
    for task in tasks {
        task.await.expect("consumer task");
    }
}

#[tokio::test]
async fn a_producer_not_given_is_named() {
    let pair = pair(Backend::Sqlite).await.expect("sqlite");
    let producer = Outbox::new("producer", pair.producer.clone());
    let own = Outbox::new("consumer", pair.consumer.clone());
    let metrics = EventMetrics::new("test");
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    let e = Wiring::new(
        "test",
        &own,
        &metrics,
        Sources::InProcess(vec![producer]),
        stop_rx,
    )
    .consume("producer", Recorder::new(pair.consumer.clone(), 0, 0))
    .consume("elsewhere", Recorder::new(pair.consumer.clone(), 0, 0))
    .spawn()
    .expect_err("the producer \"elsewhere\" has no outbox here");
    assert_eq!(e.0, "elsewhere");
    assert!(e.to_string().contains("\"elsewhere\""), "{e}");
}
