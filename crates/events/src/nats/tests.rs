//! The broker transport against a real `nats-server -js`: every event applied once and in order
//! through a relay that dies before marking, a broker that goes away and comes back, a consumer
//! killed mid-stream, appends committing out of id order, a replica taking over; unreadable
//! events parked while the rest flow, missing ones set aside, duplicates skipped and counted.

use std::sync::Arc;

use pms_service::store::Db;
use pms_testkit::nats::{skipped, NatsServer};

use super::*;
use crate::conn::EventConn;
use crate::event::NewEvent;
use crate::outbox::Outbox;
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

/// A `nats-server` of the test's own, a connection to it, a producer and consumer database on
/// one backend, and the producer's outbox.
struct Broker {
    _server: NatsServer,
    nats: Nats,
    pair: Pair,
    outbox: Outbox,
}

/// A [`Broker`] on `backend`; `None` where NATS or PostgreSQL tests are switched off.
async fn broker(backend: Backend) -> Option<Broker> {
    if skipped() {
        return None;
    }
    let pair = pair(backend).await?;
    let server = NatsServer::start();
    let nats = Nats::connect(&server.url).await.expect("connect");
    let outbox = Outbox::new("producer", pair.producer.clone());
    Some(Broker {
        _server: server,
        nats,
        pair,
        outbox,
    })
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
    let Some(Broker {
        _server,
        nats,
        pair,
        outbox,
    }) = broker(Backend::Sqlite).await
    else {
        return;
    };
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
    assert_eq!(
        nats.stream_messages().await.expect("info"),
        1,
        "the 30 events in one message, its copy discarded"
    );
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
    let Some(Broker {
        _server,
        nats,
        pair,
        outbox,
    }) = broker(Backend::Sqlite).await
    else {
        return;
    };
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

/// A failed event is read again (never skipped) and the lag drains to zero; a consumer that
/// resumes from before what it applied (it died before noting where it was in the stream)
/// skips those events, counted as redeliveries.
#[tokio::test]
async fn a_failed_event_is_read_again_and_a_redelivery_is_skipped_and_counted() {
    let Some(Broker {
        _server,
        nats,
        pair,
        outbox,
    }) = broker(Backend::Sqlite).await
    else {
        return;
    };
    produce(&pair.producer, &names(0..5)).await;
    relay_once(&nats, &outbox, true).await.expect("publish");
    let metrics = crate::metrics::EventMetrics::new("test");
    let mut consumer = nats_consumer(&pair, &nats);
    consumer.gauges = metrics.broker_consumer("producer");
    // The first attempt fails: the event is read again.
    consumer.handler = Arc::new(Recorder::new(pair.consumer.clone(), 1, 0));
    let gauges = consumer.gauges.clone();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = consumer.spawn(rx);
    until_seen(&pair.consumer, 5).await;
    let _ = stop.send(true);
    task.await.expect("consumer");
    assert_eq!(gauges.redeliveries(), 0, "nothing applied was read again");
    let text = metrics
        .render(&Outbox::new("test", pair.consumer.clone()), &pair.consumer)
        .await;
    assert!(
        text.contains("pms_test_consumer_lag_events{source=\"producer\"} 0"),
        "{text}"
    );

    // As if it had died before noting where it was: the next one reads the stream from the
    // start, and skips the five it applied.
    let r: Result<_, sqlx::Error> = pms_service::repeatable!(pair.consumer, |conn| {
        sqlx::query("UPDATE event_positions SET broker_seq = NULL")
            .execute(&mut *conn)
            .await
            .map(|_| ())
    });
    r.expect("forget the hint");
    produce(&pair.producer, &names(5..6)).await;
    relay_once(&nats, &outbox, true).await.expect("publish");
    let mut consumer = nats_consumer(&pair, &nats);
    consumer.gauges = gauges.clone();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = consumer.spawn(rx);
    until_seen(&pair.consumer, 6).await;
    assert_eq!(seen(&pair.consumer).await.len(), 6, "none twice");
    assert_eq!(gauges.redeliveries(), 5, "the five applied before");
    let text = metrics
        .render(&Outbox::new("test", pair.consumer.clone()), &pair.consumer)
        .await;
    assert!(
        text.contains("pms_test_redelivered_events_total{source=\"producer\"} 5"),
        "{text}"
    );
    let _ = stop.send(true);
    task.await.expect("consumer");
}

#[tokio::test]
async fn a_replay_through_the_broker_applies_the_events_again_from_an_id() {
    let Some(Broker {
        _server,
        nats,
        pair,
        outbox,
    }) = broker(Backend::Sqlite).await
    else {
        return;
    };
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
    // `pms events replay --from 3`: the position set back; the running consumer, quiet, sees
    // it and reads the stream again from its start.
    crate::position::rewind(&pair.consumer, "test", "producer", 2)
        .await
        .expect("rewind");
    until_seen(&pair.consumer, 5).await;
    let all = seen(&pair.consumer).await;
    assert_eq!(
        all.iter().map(|r| r.0).collect::<Vec<_>>(),
        (1..=5).collect::<Vec<i64>>(),
        "3 to 5 applied again, 1 and 2 not twice"
    );
    let _ = stop.send(true);
    task.await.expect("consumer");
}

#[tokio::test]
async fn the_relays_backlog_is_shown_and_drains() {
    let Some(Broker {
        _server,
        nats,
        pair,
        outbox,
    }) = broker(Backend::Sqlite).await
    else {
        return;
    };
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

/// A `thing.named` event.
fn named(name: &str) -> NewEvent {
    NewEvent::new(
        "thing",
        name,
        "thing.named",
        1,
        &crate::testutil::Named {
            name: name.to_owned(),
        },
    )
    .expect("event")
}

/// The PostgreSQL pool under `db`.
fn pg_pool(db: &Db) -> &pms_service::store::pool::Pool<sqlx::PgConnection> {
    match db.pools() {
        pms_service::store::Pools::Postgres(pool) => pool,
        pms_service::store::Pools::Sqlite(_) => panic!("a PostgreSQL database"),
    }
}

/// Issue 63: an append that drew a lower id commits after one that drew a higher id. The relay
/// used to publish the higher one first (its read started after the lowest *committed*
/// unpublished id), and the consumer then dropped the lower one as "applied before": a closed
/// visit never invoiced. Now nothing past the hole is published while it may still fill, and
/// both reach the consumer in id order, once each.
#[tokio::test]
async fn a_lower_id_committing_after_a_higher_one_still_reaches_the_consumer() {
    let Some(Broker {
        _server,
        nats,
        pair,
        outbox,
    }) = broker(Backend::Postgres).await
    else {
        return;
    };
    let mut late = pg_pool(&pair.producer).get().await.expect("connection");
    sqlx::query("BEGIN")
        .execute(&mut *late)
        .await
        .expect("begin");
    let late_id = late.append(&named("late")).await.expect("append");
    produce(&pair.producer, &names(0..1)).await;
    relay_once(&nats, &outbox, true)
        .await
        .expect("relay while the lower id is in flight");
    sqlx::query("COMMIT")
        .execute(&mut *late)
        .await
        .expect("commit");
    drop(late);
    while relay_once(&nats, &outbox, true).await.expect("relay") > 0 {}
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = nats_consumer(&pair, &nats).spawn(rx);
    until_seen(&pair.consumer, 2).await;
    let all = seen(&pair.consumer).await;
    assert_eq!(
        all.iter().map(|s| s.0).collect::<Vec<_>>(),
        vec![late_id, late_id + 1],
        "both, in id order"
    );
    let _ = stop.send(true);
    task.await.expect("consumer");
}

/// Eight producers whose transactions commit out of id order (each holds its transaction open
/// a little after its append), the relay and the consumer running all along: every event
/// reaches the consumer once, in id order.
#[tokio::test]
async fn concurrent_producers_through_the_relay_lose_nothing_and_double_nothing() {
    let Some(Broker {
        _server,
        nats,
        pair,
        outbox,
    }) = broker(Backend::Postgres).await
    else {
        return;
    };
    let (stop, rx) = tokio::sync::watch::channel(false);
    let relay_task = tokio::spawn(relay(nats.clone(), outbox.clone(), rx.clone()));
    let consumer = nats_consumer(&pair, &nats).spawn(rx);
    let mut writers = Vec::new();
    for w in 0..8u64 {
        let (db, outbox) = (pair.producer.clone(), outbox.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..40u64 {
                let mut conn = pg_pool(&db).get().await.expect("connection");
                sqlx::query("BEGIN")
                    .execute(&mut *conn)
                    .await
                    .expect("begin");
                conn.append(&named(&format!("w{w}-{i}")))
                    .await
                    .expect("append");
                // One transaction in three stays open 10 ms after its append, so the ones
                // that drew later ids commit before it while the relay has caught up.
                let pause = if (w + i) % 3 == 0 { 10 } else { 0 };
                tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                sqlx::query("COMMIT")
                    .execute(&mut *conn)
                    .await
                    .expect("commit");
                outbox.committed();
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    outbox.committed();
    until_seen(&pair.consumer, 320).await;
    let all = seen(&pair.consumer).await;
    assert_eq!(all.len(), 320, "every event, none twice");
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "in id order");
    // The relay notes in the outbox's database how far the broker has it, so the pruner may
    // delete what lies before (docs/events.md, Retention); a note is written every 5 s.
    let last = outbox.head().await.expect("head");
    pms_testkit::assert_eventually("the relay's note", 1_000, || {
        let outbox = outbox.clone();
        async move {
            crate::retention::readers(&outbox)
                .await
                .is_ok_and(|readers| {
                    readers
                        .iter()
                        .any(|r| r.reader == crate::retention::RELAY && r.through == last)
                })
        }
    })
    .await;
    let _ = stop.send(true);
    consumer.await.expect("consumer");
    relay_task.await.expect("relay");
}

/// An event that never reached the broker (the stream lacks it, for whatever reason): the
/// consumer sees the next one name it as the one before, sets it aside as missing, with the
/// command that fetches it again, and counts the gap; the events around it are applied.
#[tokio::test]
async fn an_event_missing_from_the_broker_is_set_aside_said_and_counted() {
    let Some(Broker {
        _server,
        nats,
        pair,
        outbox,
    }) = broker(Backend::Sqlite).await
    else {
        return;
    };
    produce(&pair.producer, &names(0..3)).await;
    let events = outbox.read_visible(0, 10).await.expect("read");
    for event in [&events[0], &events[2]] {
        let carried = [wire::Carried::from(event.clone())];
        for message in wire::messages("producer", &carried).expect("message") {
            nats.publish(message).await.expect("publish");
        }
    }
    let mut consumer = nats_consumer(&pair, &nats);
    let metrics = crate::metrics::EventMetrics::new("test");
    consumer.gauges = metrics.broker_consumer("producer");
    let gauges = consumer.gauges.clone();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let task = consumer.spawn(rx);
    until_seen(&pair.consumer, 2).await;
    assert_eq!(
        seen(&pair.consumer)
            .await
            .iter()
            .map(|s| s.0)
            .collect::<Vec<_>>(),
        vec![1, 3]
    );
    let parked = parked(&pair.consumer).await;
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0].0, 2);
    assert!(
        parked[0]
            .1
            .contains("pms events replay --consumer test --source producer --from 2"),
        "{parked:?}"
    );
    assert_eq!(gauges.gaps(), 1);
    let text = metrics
        .render(&Outbox::new("test", pair.consumer.clone()), &pair.consumer)
        .await;
    assert!(
        text.contains("pms_test_event_gaps_total{source=\"producer\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("pms_test_parked_events{source=\"producer\"} 1"),
        "{text}"
    );
    let _ = stop.send(true);
    task.await.expect("consumer");
}

/// Two replicas of a consuming service on one PostgreSQL: one reads the producer's events (the
/// other stands by, holding no lease), each event is applied once; when the reader dies, the
/// other takes over and applies the rest.
#[tokio::test]
async fn a_second_replica_stands_by_and_takes_over_when_the_first_dies() {
    let Some(Broker {
        _server,
        nats,
        pair,
        outbox,
    }) = broker(Backend::Postgres).await
    else {
        return;
    };
    let (stop, rx) = tokio::sync::watch::channel(false);
    let first = nats_consumer(&pair, &nats).spawn(rx.clone());
    produce(&pair.producer, &names(0..20)).await;
    relay_once(&nats, &outbox, true).await.expect("publish");
    until_seen(&pair.consumer, 20).await;
    // The first holds the lease: the second waits for it.
    let second = nats_consumer(&pair, &nats).spawn(rx.clone());
    produce(&pair.producer, &names(20..40)).await;
    relay_once(&nats, &outbox, true).await.expect("publish");
    until_seen(&pair.consumer, 40).await;
    // Quiet a while, the reader notes where it is in the stream; the next resumes there.
    let db = pair.consumer.clone();
    pms_testkit::assert_eventually("the resume hint noted", 500, || {
        let db = db.clone();
        async move {
            crate::position::broker_position(&db, "test", "producer")
                .await
                .is_ok_and(|(at, seq)| at == 40 && seq.is_some())
        }
    })
    .await;
    // The first dies (its lease's connection closes with it); the second takes over.
    first.abort();
    let _ = first.await;
    produce(&pair.producer, &names(40..60)).await;
    relay_once(&nats, &outbox, true).await.expect("publish");
    until_seen(&pair.consumer, 60).await;
    let all = seen(&pair.consumer).await;
    assert_eq!(all.len(), 60, "every event, none twice");
    assert!(all.windows(2).all(|w| w[0].0 + 1 == w[1].0), "in order");
    let _ = stop.send(true);
    second.await.expect("second");
}

/// Appends one event of (aggregate, id, type) to `outbox` and relays what is unpublished.
async fn append_and_relay(
    nats: &Nats,
    outbox: &Outbox,
    (aggregate, id, event_type): (&'static str, i64, &'static str),
    payload: &serde_json::Value,
) {
    let event = NewEvent::new(aggregate, id, event_type, 1, payload).expect("event");
    append_one(outbox.db(), &event).await;
    relay_once(nats, outbox, true).await.expect("publish");
}

/// A person's data crosses the broker sealed: the stream's messages never hold it in the clear,
/// a reader gets the events as written, and once the closure's key is erased every reader gets
/// them erased; another customer's events, and events with no person, are untouched.
#[tokio::test]
async fn a_persons_data_crosses_sealed_and_goes_with_their_key() {
    let Some(Broker {
        _server,
        nats,
        pair,
        outbox,
    }) = broker(Backend::Sqlite).await
    else {
        return;
    };
    let nats = nats.erasing_after(std::time::Duration::ZERO);
    let customer = |id: i64, name: &str| {
        let doc = serde_json::json!({"userId": id, "firstName": name, "lastName": "Soares",
            "email": format!("{name}@isep.ipp.pt"), "nif": 514884112 + id, "role": "CUSTOMER",
            "userStatus": "ENABLED", "paymentMethod": "PAYPAL",
            "vehicles": [{"licensePlateNumber": format!("46-ON-0{id}"), "vehicleType": "AUTOMOBILE",
                          "vehicleEnergySource": "FUEL"}]});
        NewEvent::new("customer", id, "customer.registered", 1, &doc).expect("event")
    };
    let visit = serde_json::json!({"visitId": 12, "customerId": 6, "nif": 514884118,
        "customerName": "Ruizinho Soares", "plate": "46-ON-06", "useCoins": false});
    for event in [
        customer(6, "Ruizinho"),
        customer(7, "Anabela"),
        NewEvent::new("visit", 12, "visit.closed", 1, &visit).expect("event"),
    ] {
        append_one(&pair.producer, &event).await;
    }
    produce(&pair.producer, &names(0..1)).await;
    relay_once(&nats, &outbox, true).await.expect("publish");

    let (read, bodies) = nats.read_all("producer").await.expect("read");
    let raw = String::from_utf8(bodies.concat()).expect("utf-8");
    for secret in ["Ruizinho", "514884118", "46-ON-06", "Anabela", "46-ON-07"] {
        assert!(!raw.contains(secret), "{secret} in the clear: {raw}");
    }
    assert_eq!(read.len(), 4);
    assert_eq!(read[0].payload["firstName"], "Ruizinho", "opened: {read:?}");
    assert_eq!(
        read[0].payload["vehicles"][0]["licensePlateNumber"],
        "46-ON-06"
    );
    assert_eq!(read[2].payload["customerName"], "Ruizinho Soares");
    assert_eq!(read[3].payload["name"], "n0 | \"x\" \\ ü");

    // Customer 6 closes their account; the relay publishes it and erases the key at once (no
    // delay here).
    let closed = serde_json::json!({"userId": 6, "closedAt": "2026-12-06T20:00:00Z"});
    append_and_relay(&nats, &outbox, ("customer", 6, "customer.closed"), &closed).await;
    let (read, _) = nats.read_all("producer").await.expect("read");
    assert_eq!(read.len(), 5);
    assert_eq!(
        read[0].payload["firstName"], "",
        "erased: {:?}",
        read[0].payload
    );
    assert_eq!(read[0].payload["nif"], 0);
    assert_eq!(read[0].payload["vehicles"], serde_json::json!([]));
    assert_eq!(read[0].payload["userStatus"], "DISABLED");
    assert_eq!(read[0].payload["userId"], 6, "the id stays");
    assert_eq!(
        read[1].payload["firstName"], "Anabela",
        "another customer's stay"
    );
    assert_eq!(read[2].payload["plate"], "erased-12");
    assert_eq!(
        (&read[2].payload["customerName"], &read[2].payload["nif"]),
        (&"".into(), &0.into())
    );
    assert_eq!(
        read[2].payload["useCoins"], false,
        "what is not personal stays"
    );
    assert_eq!(read[4].payload["userId"], 6);

    // A car of theirs still inside leaves later: sealed under a key of its own, readable.
    let later = serde_json::json!({"visitId": 13, "customerId": 6, "nif": 514884118,
        "customerName": "Ruizinho Soares", "plate": "46-ON-06"});
    append_and_relay(&nats, &outbox, ("visit", 13, "visit.closed"), &later).await;
    let (read, bodies) = nats.read_all("producer").await.expect("read");
    assert!(!String::from_utf8(bodies.concat())
        .expect("utf-8")
        .contains("Ruizinho"));
    assert_eq!(read[5].payload["nif"], 514884118, "{:?}", read[5].payload);
    assert_eq!(read[0].payload["firstName"], "", "the old key stays erased");
    // That key goes after the delay too.
    assert_eq!(nats.erase_due_keys().await.expect("sweep"), 1);
    let (read, _) = nats.read_all("producer").await.expect("read");
    assert_eq!(read[5].payload["nif"], 0, "{:?}", read[5].payload);
    assert_eq!(read[1].payload["firstName"], "Anabela");
    assert_eq!(nats.erase_due_keys().await.expect("sweep"), 0);
}

/// A closure's key is kept for the delay (readers behind get what the events said), then the
/// relay's sweep erases it.
#[tokio::test]
async fn a_closures_key_goes_when_its_delay_is_over() {
    let Some(Broker {
        _server,
        nats,
        pair,
        outbox,
    }) = broker(Backend::Sqlite).await
    else {
        return;
    };
    let nats = nats.erasing_after(std::time::Duration::from_millis(300));
    let visit = serde_json::json!({"visitId": 1, "customerId": 9, "nif": 123456789,
        "customerName": "Inês", "plate": "AA-00-00"});
    let closed = serde_json::json!({"userId": 9, "closedAt": "2026-12-06T20:00:00Z"});
    for event in [
        NewEvent::new("visit", 1, "visit.closed", 1, &visit).expect("event"),
        NewEvent::new("customer", 9, "customer.closed", 1, &closed).expect("event"),
    ] {
        append_one(&pair.producer, &event).await;
    }
    relay_once(&nats, &outbox, true).await.expect("publish");
    // Another process reads too (and so knows the key).
    let other = Nats::connect(&_server.url).await.expect("connect");
    for reader in [&nats, &other] {
        let (read, _) = reader.read_all("producer").await.expect("read");
        assert_eq!(read[0].payload["nif"], 123456789, "within the delay");
    }
    assert_eq!(nats.erase_due_keys().await.expect("sweep"), 0);
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(nats.erase_due_keys().await.expect("sweep"), 1);
    let (read, _) = nats.read_all("producer").await.expect("read");
    assert_eq!(read[0].payload["nif"], 0, "{:?}", read[0].payload);
    assert_eq!(nats.erase_due_keys().await.expect("sweep"), 0, "done once");
    // The other process hears of it: what it knew of the key goes.
    pms_testkit::assert_eventually("the other process reads it erased", 2000, || {
        let other = other.clone();
        async move {
            let (read, _) = other.read_all("producer").await.expect("read");
            read[0].payload["nif"] == 0
        }
    })
    .await;
}
