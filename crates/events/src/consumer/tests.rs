//! Consumers over real databases (SQLite files and a real PostgreSQL): order, exactly once across
//! restarts, parking, retries, odd characters, and concurrent producers.

use std::sync::Arc;

use pms_testkit::assert_eventually;

use crate::event::NewEvent;
use crate::testutil::*;

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
async fn runs_apply_many_events_at_once_and_leave_the_unreadable_to_be_parked() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(pair) = pair(backend).await else {
            continue;
        };
        produce(&pair.producer, &names(0..10)).await;
        let bad = NewEvent {
            aggregate_type: "thing",
            aggregate_id: "x".into(),
            event_type: "thing.named",
            version: 9,
            payload: r#"{"name":"from the future"}"#.into(),
        };
        let bad_id = append_one(&pair.producer, &bad).await;
        produce(&pair.producer, &names(10..15)).await;
        // The first run fails once and applies nothing; the step after it starts again there.
        let c = consumer_in_runs(&pair, 1, 4);
        assert!(c.step().await.is_err(), "{backend:?}");
        assert!(seen(&pair.consumer).await.is_empty(), "{backend:?}");
        while c.step().await.expect("step") {}
        let all = seen(&pair.consumer).await;
        assert_eq!(all.len(), 15, "{backend:?}: every readable event once");
        assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "in order");
        assert_eq!(parked(&pair.consumer).await.len(), 1);
        assert_eq!(parked(&pair.consumer).await[0].0, bad_id);
        // Ten events in runs of four (three runs), the unreadable one alone, five more in two.
        assert_eq!(c.handler.runs.load(std::sync::atomic::Ordering::SeqCst), 5);
        assert_eq!(c.position().await.expect("position"), 16);
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

/// Many producers at once on PostgreSQL while a consumer reads: ids commit out of order, a read
/// passes no hole that may still fill, and the consumer ends with every event.
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

#[tokio::test]
async fn metrics_show_the_lag_its_age_and_the_parked_events() {
    let pair = pair(Backend::Sqlite).await.expect("sqlite");
    let metrics = crate::metrics::EventMetrics::new("test");
    let source = crate::Outbox::new("producer", pair.producer.clone());
    metrics.watch_sources(vec![source]);
    let own = crate::Outbox::new("test", pair.consumer.clone());
    produce(&pair.producer, &names(0..2)).await;
    let unreadable = NewEvent {
        aggregate_type: "thing",
        aggregate_id: "x".into(),
        event_type: "thing.named",
        version: 9,
        payload: "{}".into(),
    };
    append_one(&pair.producer, &unreadable).await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let text = metrics.render(&own, &pair.consumer).await;
    assert!(
        text.contains("pms_test_consumer_lag_events{source=\"producer\"} 3"),
        "{text}"
    );
    let age: f64 = text
        .lines()
        .find(|l| l.starts_with("pms_test_consumer_lag_seconds{source=\"producer\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .expect("lag seconds");
    assert!(
        age >= 0.05,
        "the oldest unapplied event is the first one: {text}"
    );
    let c = consumer(&pair, 0);
    while c.step().await.expect("step") {}
    let text = metrics.render(&own, &pair.consumer).await;
    for line in [
        "pms_test_consumer_lag_events{source=\"producer\"} 0",
        "pms_test_consumer_lag_seconds{source=\"producer\"} 0.0",
        "pms_test_parked_events{source=\"producer\"} 1",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

/// Many events appended at once keep the order they were given in, on both backends.
#[tokio::test]
async fn events_appended_at_once_keep_their_order() {
    use crate::conn::EventConn;
    use pms_service::transaction;

    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(pair) = pair(backend).await else {
            continue;
        };
        produce(&pair.producer, &names(0..2)).await;
        // Aggregate ids out of any sorted order, so that only the slice gives the order.
        let keys: Vec<String> = (0..40).map(|i| format!("k{}", (i * 17) % 40)).collect();
        let events: Vec<NewEvent> = keys
            .iter()
            .map(|k| NewEvent::new("thing", k, "thing.named", 1, &Named { name: k.clone() }))
            .collect::<Result<_, _>>()
            .expect("events");
        let r: Result<Vec<i64>, sqlx::Error> =
            transaction!(&pair.producer, |tx| tx.append_all(&events).await);
        let ids = r.expect("append all");
        assert_eq!(
            ids,
            (3..43).collect::<Vec<i64>>(),
            "{backend:?}: after the two before"
        );
        let empty: Result<Vec<i64>, sqlx::Error> =
            transaction!(&pair.producer, |tx| tx.append_all(&[]).await);
        assert_eq!(empty.expect("append none"), Vec::<i64>::new());
        let read = crate::Outbox::new("p", pair.producer.clone())
            .read_after(2, 100)
            .await
            .expect("read");
        let got: Vec<(i64, &str)> = read
            .iter()
            .map(|e| (e.id, e.aggregate_id.as_str()))
            .collect();
        let want: Vec<(i64, &str)> = ids
            .iter()
            .copied()
            .zip(keys.iter().map(String::as_str))
            .collect();
        assert_eq!(got, want, "{backend:?}");
        assert_eq!(read[5].payload["name"], keys[5], "{backend:?}");
    }
}
