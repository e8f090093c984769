//! Pruning over real databases (SQLite files and a real PostgreSQL): only what every reader
//! passed, only passing kinds, only past the window; set-aside events and their retries keep
//! theirs; readers of a pruned outbox, the relay's mark and the head are not misled.

use std::time::Duration;

use pms_testkit::assert_eventually;

use super::*;
use crate::event::NewEvent;
use crate::testutil::*;

/// The passing kind of the test events (`thing.named`); `thing.state` is kept.
const PASSING: Retention = Retention {
    window: Duration::ZERO,
    passing: &["thing.named"],
};

/// A moment after every event the test wrote, so a window of zero has passed for all of them.
fn later() -> jiff::Timestamp {
    jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1)
}

/// Appends `n` events, every fifth of the kept kind (`thing.state`), the rest passing; returns
/// their ids.
async fn mixed(db: &pms_service::store::Db, n: u32) -> Vec<(i64, bool)> {
    let mut ids = Vec::new();
    for i in 0..n {
        let kept = i % 5 == 4;
        let kind = if kept { "thing.state" } else { "thing.named" };
        let event = NewEvent::new(
            "thing",
            i.to_string(),
            kind,
            1,
            &Named {
                name: i.to_string(),
            },
        )
        .expect("event");
        ids.push((append_one(db, &event).await, kept));
    }
    ids
}

async fn ids_left(outbox: &Outbox) -> Vec<i64> {
    outbox
        .read_visible(0, 10_000)
        .await
        .expect("read")
        .iter()
        .map(|e| e.id)
        .collect()
}

#[tokio::test]
async fn only_passing_events_every_reader_passed_go() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(pair) = pair(backend).await else {
            continue;
        };
        let outbox = Outbox::new("producer", pair.producer.clone());
        let written = mixed(&pair.producer, 100).await;
        // Nobody said they read it: nothing goes.
        assert_eq!(prune(&outbox, PASSING, later()).await.expect("prune"), 0);
        assert_eq!(ids_left(&outbox).await.len(), 100, "{backend:?}");

        acknowledge(&outbox, "a", 60).await.expect("a");
        acknowledge(&outbox, "b", 80).await.expect("b");
        let gone = prune(&outbox, PASSING, later()).await.expect("prune");
        let left = ids_left(&outbox).await;
        let expected: Vec<i64> = written
            .iter()
            .filter(|(id, kept)| *kept || *id > 60)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(
            left, expected,
            "{backend:?}: through the lowest note, kept kinds stay"
        );
        assert_eq!(gone as usize, 100 - expected.len());
        assert_eq!(pruned_through(&pair.producer).await.expect("mark"), 59);
        assert_eq!(outbox.pruned_events(), gone);
        let text = crate::metrics::EventMetrics::new("p")
            .render(&outbox, &pair.consumer)
            .await;
        for line in [
            format!("pms_p_outbox_pruned_events_total {gone}"),
            "pms_p_outbox_reader_behind_events{reader=\"a\"} 40".to_owned(),
            "pms_p_outbox_reader_behind_events{reader=\"b\"} 20".to_owned(),
        ] {
            assert!(text.contains(&line), "{backend:?}: {line} in {text}");
        }

        // A reader that went away for good is forgotten; then the next one's note rules.
        assert!(forget(&outbox, "a").await.expect("forget"));
        assert!(!forget(&outbox, "a").await.expect("forget twice"));
        prune(&outbox, PASSING, later()).await.expect("prune");
        assert!(ids_left(&outbox)
            .await
            .iter()
            .all(|id| *id > 80 || written[(*id - 1) as usize].1));
        let names: Vec<String> = readers(&outbox)
            .await
            .expect("readers")
            .into_iter()
            .map(|r| r.reader)
            .collect();
        assert_eq!(names, ["b"]);
    }
}

#[tokio::test]
async fn events_younger_than_the_window_stay() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(pair) = pair(backend).await else {
            continue;
        };
        let outbox = Outbox::new("producer", pair.producer.clone());
        produce(&pair.producer, &names(0..20)).await;
        acknowledge(&outbox, "a", 20).await.expect("a");
        let hour = Retention {
            window: Duration::from_secs(3600),
            ..PASSING
        };
        let now = jiff::Timestamp::now();
        assert_eq!(prune(&outbox, hour, now).await.expect("prune"), 0);
        // An hour and a second later they have all passed it.
        let then = now + jiff::SignedDuration::from_secs(3601);
        assert_eq!(
            prune(&outbox, hour, then).await.expect("prune"),
            20,
            "{backend:?}"
        );
        assert!(ids_left(&outbox).await.is_empty());
    }
}

#[tokio::test]
async fn a_consumer_keeps_what_it_set_aside_and_its_retry_finds_it() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(pair) = pair(backend).await else {
            continue;
        };
        produce(&pair.producer, &names(0..10)).await;
        // Event 11 is of a version nobody reads: set aside.
        let unreadable = NewEvent::new("thing", "x", "thing.named", 2, &Named { name: "x".into() })
            .expect("event");
        let bad = append_one(&pair.producer, &unreadable).await;
        produce(&pair.producer, &names(10..30)).await;
        let c = consumer(&pair, 0);
        while c.step().await.expect("step") {}
        assert_eq!(c.position().await.expect("position"), 31);
        assert_eq!(parked(&pair.consumer).await.len(), 1);

        c.acknowledge().await.expect("note");
        let notes = readers(&c.source).await.expect("readers");
        assert_eq!(
            notes[0].through,
            bad - 1,
            "{backend:?}: just before the set-aside event"
        );
        prune(&c.source, PASSING, later()).await.expect("prune");
        assert_eq!(ids_left(&c.source).await.first(), Some(&bad), "{backend:?}");

        // Tried again, the event and everything after it are read again: all still there.
        let from = crate::parked::retry(&pair.consumer, "test", "producer", bad)
            .await
            .expect("retry");
        let again: Vec<i64> = c
            .source
            .read_after(from, 200)
            .await
            .expect("read")
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(again, (bad..=31).collect::<Vec<_>>(), "{backend:?}");
    }
}

#[tokio::test]
async fn a_pruned_outbox_misleads_no_reader() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(pair) = pair(backend).await else {
            continue;
        };
        let outbox = Outbox::new("producer", pair.producer.clone());
        let written = mixed(&pair.producer, 49).await;
        let last = written.last().expect("written").0;
        outbox.mark_published(1, last).await.expect("published");
        acknowledge(&outbox, RELAY, last).await.expect("relay");
        prune(&outbox, PASSING, later()).await.expect("prune");

        // Another process (a fresh handle) reads it from the start: the kept events, no hole
        // waited for or settled.
        let fresh = Outbox::new("producer", pair.producer.clone());
        let events = fresh.read_after(0, 200).await.expect("read");
        assert_eq!(events.len(), 9, "{backend:?}: the kept kind");
        assert!(events.iter().all(|e| e.event_type == "thing.state"));
        assert_eq!(fresh.holes(), (0, 0), "{backend:?}");
        // The newest event (passing) is gone, yet the relay goes on after it and the head
        // stays where it was.
        assert!(!written.last().expect("written").1);
        assert_eq!(fresh.published_through().await.expect("published"), last);
        assert_eq!(outbox.head().await.expect("head"), last);
        // Appends go on from there.
        let next = append_one(
            &pair.producer,
            &NewEvent::new("thing", "n", "thing.named", 1, &Named { name: "n".into() })
                .expect("event"),
        )
        .await;
        assert!(next > last);
        assert_eq!(fresh.read_after(last - 1, 10).await.expect("read").len(), 1);
    }
}

#[tokio::test]
async fn a_running_consumer_notes_how_far_it_got() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(pair) = pair(backend).await else {
            continue;
        };
        produce(&pair.producer, &names(0..5)).await;
        let c = consumer(&pair, 0);
        let outbox = c.source.clone();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(c.run(async {
            let _ = stop_rx.await;
        }));
        assert_eventually("the consumer's note", 500, || {
            let outbox = outbox.clone();
            async move {
                readers(&outbox)
                    .await
                    .is_ok_and(|r| r.len() == 1 && r[0].reader == "test" && r[0].through == 5)
            }
        })
        .await;
        let _ = stop_tx.send(());
        task.await.expect("consumer task");
    }
}
