//! The broker transport against a real `nats-server -js`: every event applied once through a
//! relay that dies before marking, a broker that goes away and comes back, a consumer killed
//! mid-stream; unreadable events parked while the rest flow.

use std::sync::Arc;

use pms_testkit::nats::{skipped, NatsServer};

use super::*;
use crate::event::NewEvent;
use crate::testutil::*;

fn nats_consumer(pair: &Pair, nats: &Nats) -> NatsConsumer<Recorder> {
    NatsConsumer {
        name: "test",
        source: "producer",
        db: pair.consumer.clone(),
        handler: Arc::new(Recorder::new(pair.consumer.clone(), 0, 0)),
        nats: nats.clone(),
        gauges: crate::metrics::ConsumerGauges::default(),
    }
}

async fn until_seen(db: &Db, n: usize) {
    let db = db.clone();
    // Up to ACK_WAIT and a reconnection's backoff past a killed consumer or broker.
    pms_testkit::assert_eventually(&format!("{n} events applied"), 2000, || {
        let db = db.clone();
        async move { seen(&db).await.len() >= n }
    })
    .await;
}

#[tokio::test]
async fn a_relay_that_dies_before_marking_publishes_nothing_twice() {
    if skipped() {
        return;
    }
    let server = NatsServer::start();
    let nats = Nats::connect(&server.url).await.expect("connect");
    let pair = pair(Backend::Sqlite).await.expect("sqlite");
    let outbox = Outbox::new("producer", pair.producer.clone());
    produce(&pair.producer, &names(0..30)).await;
    // Published, then the relay "dies" before marking the rows; the next relay publishes them
    // again and JetStream's duplicate window discards the copies.
    assert_eq!(
        relay_once(&nats, &outbox, false).await.expect("publish"),
        30
    );
    assert_eq!(
        relay_once(&nats, &outbox, true)
            .await
            .expect("publish again"),
        30
    );
    assert_eq!(
        relay_once(&nats, &outbox, true)
            .await
            .expect("nothing left"),
        0
    );
    assert_eq!(nats.stream_messages().await.expect("info"), 30);
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = nats_consumer(&pair, &nats).spawn(rx);
    until_seen(&pair.consumer, 30).await;
    let all = seen(&pair.consumer).await;
    assert_eq!(all.len(), 30);
    assert!(all.windows(2).all(|w| w[0].0 + 1 == w[1].0), "in order");
    assert_eq!(all[3].1, "n3 | \"x\" \\ ü", "text crosses intact");
    let _ = stop.send(true);
    task.await.expect("consumer");
}

#[tokio::test]
async fn the_broker_and_a_consumer_go_away_and_every_event_is_applied_once() {
    if skipped() {
        return;
    }
    for backend in [Backend::Sqlite, Backend::Postgres] {
        broker_and_consumer_go_away(backend).await;
    }
}

async fn broker_and_consumer_go_away(backend: Backend) {
    let Some(pair) = pair(backend).await else {
        return;
    };
    let mut server = NatsServer::start();
    let nats = Nats::connect(&server.url).await.expect("connect");
    let outbox = Outbox::new("producer", pair.producer.clone());
    let (stop, rx) = tokio::sync::watch::channel(false);
    let relay_task = tokio::spawn(relay(nats.clone(), outbox.clone(), rx.clone()));
    let consumer = tokio::spawn(nats_consumer(&pair, &nats).run(rx.clone()));
    produce(&pair.producer, &names(0..20)).await;
    outbox.committed();
    until_seen(&pair.consumer, 20).await;
    // The consumer dies mid-stream; production goes on.
    consumer.abort();
    let _ = consumer.await;
    produce(&pair.producer, &names(20..40)).await;
    outbox.committed();
    // The broker goes away; production goes on into the outbox.
    server.stop();
    produce(&pair.producer, &names(40..60)).await;
    outbox.committed();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // The broker and the consumer come back: the backlog drains, every event once.
    server.restart();
    let consumer = nats_consumer(&pair, &nats).spawn(rx);
    until_seen(&pair.consumer, 60).await;
    let all = seen(&pair.consumer).await;
    assert_eq!(
        all.len(),
        60,
        "every event, none twice (the table's key refuses a second)"
    );
    assert!(all.windows(2).all(|w| w[0].0 + 1 == w[1].0), "in order");
    let _ = stop.send(true);
    consumer.await.expect("consumer");
    relay_task.await.expect("relay");
}

#[tokio::test]
async fn unreadable_events_are_parked_and_the_rest_flow_through_the_broker() {
    if skipped() {
        return;
    }
    let server = NatsServer::start();
    let nats = Nats::connect(&server.url).await.expect("connect");
    let pair = pair(Backend::Sqlite).await.expect("sqlite");
    let outbox = Outbox::new("producer", pair.producer.clone());
    produce(&pair.producer, &names(0..1)).await;
    let future = NewEvent {
        aggregate_type: "thing",
        aggregate_id: "x".into(),
        event_type: "thing.named",
        version: 7,
        payload: r#"{"name":"later"}"#.into(),
    };
    let bad = append_one(&pair.producer, &future).await;
    produce(&pair.producer, &names(1..3)).await;
    relay_once(&nats, &outbox, true).await.expect("publish");
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = nats_consumer(&pair, &nats).spawn(rx);
    until_seen(&pair.consumer, 3).await;
    assert_eq!(
        parked(&pair.consumer)
            .await
            .iter()
            .map(|p| p.0)
            .collect::<Vec<_>>(),
        vec![bad]
    );
    let _ = stop.send(true);
    task.await.expect("consumer");
}

#[tokio::test]
async fn a_redelivery_is_counted_and_the_lag_drains_to_zero() {
    if skipped() {
        return;
    }
    let server = NatsServer::start();
    let nats = Nats::connect(&server.url).await.expect("connect");
    let pair = pair(Backend::Sqlite).await.expect("sqlite");
    let outbox = Outbox::new("producer", pair.producer.clone());
    produce(&pair.producer, &names(0..5)).await;
    relay_once(&nats, &outbox, true).await.expect("publish");
    let metrics = crate::metrics::EventMetrics::new("test");
    let mut consumer = nats_consumer(&pair, &nats);
    consumer.gauges = metrics.broker_consumer("producer");
    // The first attempt fails: the broker delivers that event again.
    consumer.handler = Arc::new(Recorder::new(pair.consumer.clone(), 1, 0));
    let gauges = consumer.gauges.clone();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = consumer.spawn(rx);
    until_seen(&pair.consumer, 5).await;
    assert_eq!(
        gauges.redeliveries(),
        1,
        "the failed event, delivered twice"
    );
    let text = metrics
        .render(&Outbox::new("test", pair.consumer.clone()), &pair.consumer)
        .await;
    assert!(
        text.contains("pms_test_consumer_lag_events{source=\"producer\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("pms_test_redelivered_events_total{source=\"producer\"} 1"),
        "{text}"
    );
    let _ = stop.send(true);
    task.await.expect("consumer");
}

#[tokio::test]
async fn a_replay_through_the_broker_applies_the_events_again_from_an_id() {
    if skipped() {
        return;
    }
    let server = NatsServer::start();
    let nats = Nats::connect(&server.url).await.expect("connect");
    let pair = pair(Backend::Sqlite).await.expect("sqlite");
    let outbox = Outbox::new("producer", pair.producer.clone());
    produce(&pair.producer, &names(0..5)).await;
    relay_once(&nats, &outbox, true).await.expect("publish");
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = nats_consumer(&pair, &nats).spawn(rx);
    until_seen(&pair.consumer, 5).await;
    // What the replay is for: the effects of events 3 to 5 were lost here.
    let r: Result<_, sqlx::Error> = pms_service::repeatable!(pair.consumer, |conn| {
        sqlx::query("DELETE FROM seen WHERE id >= 3")
            .execute(&mut *conn)
            .await
            .map(|done| done.rows_affected())
    });
    assert_eq!(r.expect("delete"), 3);
    // `pms events replay --from 3 --nats-url …`: the position back, the durable gone.
    crate::consumer::rewind(&pair.consumer, "test", "producer", 2)
        .await
        .expect("rewind");
    assert!(nats
        .forget_consumer("test", "producer")
        .await
        .expect("forget"));
    until_seen(&pair.consumer, 5).await;
    let all = seen(&pair.consumer).await;
    assert_eq!(
        all.iter().map(|r| r.0).collect::<Vec<_>>(),
        (1..=5).collect::<Vec<i64>>(),
        "3 to 5 applied again, 1 and 2 not twice"
    );
    assert!(
        !nats
            .forget_consumer("nobody", "producer")
            .await
            .expect("forget"),
        "no such durable"
    );
    let _ = stop.send(true);
    task.await.expect("consumer");
}

#[tokio::test]
async fn the_relays_backlog_is_shown_and_drains() {
    if skipped() {
        return;
    }
    let server = NatsServer::start();
    let nats = Nats::connect(&server.url).await.expect("connect");
    let pair = pair(Backend::Sqlite).await.expect("sqlite");
    let outbox = Outbox::new("producer", pair.producer.clone());
    let metrics = crate::metrics::EventMetrics::new("producer");
    produce(&pair.producer, &names(0..3)).await;
    let before = metrics.render(&outbox, &pair.producer).await;
    assert!(
        !before.contains("unpublished"),
        "no relay, no backlog: {before}"
    );
    metrics.watch_relay();
    let text = metrics.render(&outbox, &pair.producer).await;
    assert!(
        text.contains("pms_producer_outbox_unpublished_events 3"),
        "{text}"
    );
    relay_once(&nats, &outbox, true).await.expect("publish");
    let text = metrics.render(&outbox, &pair.producer).await;
    assert!(
        text.contains("pms_producer_outbox_unpublished_events 0"),
        "{text}"
    );
}
