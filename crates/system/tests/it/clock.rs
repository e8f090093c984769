//! A barrier's clock is evidence, not truth (`pms_parks::clock`): a time far ahead or behind the
//! server's clock, an exit before its entrance, an entrance inside a closed stay or a retry of
//! one never traps a car, never opens a second visit and never makes two stays overlap. Run with
//! the service's default bounds and times around now, on both databases.

use jiff::{SignedDuration, Timestamp};
use pms_parks::clock::ClockRules;
use serde_json::Value;

use crate::support::{assert_error, plate_read, Api, Options, System, Via, BOTH};

/// The service's own clock rules (the other tests believe any time behind).
async fn start(db: crate::support::Db) -> Option<System> {
    let options = Options {
        clock: ClockRules::default(),
        ..Options::default()
    };
    System::start_with(db, options).await
}

/// Now moved by `minutes`, as a barrier writes it.
fn at(minutes: i64) -> String {
    (Timestamp::now() + SignedDuration::from_mins(minutes)).to_string()
}

/// The stays of `plate` as stored: entered, left, entrance said, exit said (ms).
async fn stays(sys: &System, plate: &str) -> Vec<(i64, Option<i64>, i64, Option<i64>)> {
    let store = &sys.parks.store;
    let plate = plate.to_owned();
    pms_service::repeatable!(store, |conn| sqlx::query_as(
        "SELECT entered_at_ms, left_at_ms, entry_said_ms, exit_said_ms FROM visits \
         WHERE plate = $1 ORDER BY entered_at_ms"
    )
    .bind(&plate)
    .fetch_all(&mut *conn)
    .await)
    .expect("stays")
}

/// No two of `stays` overlap (both ends included) and each ends after it starts.
fn assert_apart(stays: &[(i64, Option<i64>, i64, Option<i64>)], context: &str) {
    for pair in stays.windows(2) {
        let (first, next) = (pair[0], pair[1]);
        let left = first.1.expect("only the last stay is open");
        assert!(left < next.0, "{context}: overlapping stays {stays:?}");
    }
    for s in stays {
        assert!(s.1.is_none_or(|left| left >= s.0), "{context}: {stays:?}");
    }
}

fn ms(text: &str) -> i64 {
    text.parse::<Timestamp>().expect("time").as_millisecond()
}

async fn pass(dev: &mut Api, sys: &System, barrier: i64, plate: &str, date: &str) -> Value {
    let (direction, park) = match barrier {
        1 => ("entrance", 1),
        2 => ("exit", 1),
        7 => ("entrance", 2),
        8 => ("exit", 2),
        _ => unreachable!("a barrier of these tests"),
    };
    let r = dev
        .barrier(
            direction,
            &sys.barrier_key(barrier),
            &plate_read(barrier, park, plate, date),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text());
    r.json()
}

/// Defect: an entrance dated in the year 2999 was taken as said, and every exit with the real
/// time was then refused. Now the server's clock is taken, the car leaves, and the barrier's
/// clock offset shows in the metrics and the operator's device view.
#[tokio::test]
async fn a_clock_far_ahead_or_behind_traps_no_car() {
    for db in BOTH {
        let Some(sys) = start(db).await else {
            continue;
        };
        let mut dev = sys.client(Via::H1).await;
        let before = Timestamp::now().as_millisecond();
        let future = "2999-12-31T00:00:00Z";
        let r = pass(&mut dev, &sys, 7, "28-XQ-51", future).await;
        assert_eq!(r["success"], true, "{db:?}: {r}");
        let r = pass(&mut dev, &sys, 8, "28-XQ-51", &at(0)).await;
        assert_eq!(r["success"], true, "{db:?}: the car leaves: {r}");
        let after = Timestamp::now().as_millisecond();
        let stored = stays(&sys, "28-XQ-51").await;
        assert_eq!(stored.len(), 1, "{db:?}: {stored:?}");
        let (entered, left, said, _) = stored[0];
        assert!(
            (before..=after).contains(&entered),
            "{db:?}: taken at the server's clock: {stored:?}"
        );
        assert_eq!(said, ms(future), "{db:?}: the time said is kept");
        assert!(left.is_some_and(|l| l >= entered), "{db:?}: {stored:?}");
        // The same entrance again, after its visit closed: the first answer, nothing new.
        let r = pass(&mut dev, &sys, 7, "28-XQ-51", future).await;
        assert_eq!(r["success"], true, "{db:?}: {r}");
        assert_eq!(stays(&sys, "28-XQ-51").await, stored, "{db:?}: a retry");

        // A time from 1970 (a stay too long to price): the server's clock too.
        let r = pass(&mut dev, &sys, 1, "46-ON-05", "1970-01-01T00:00:00Z").await;
        assert_eq!(r["success"], true, "{db:?}: {r}");
        let r = pass(&mut dev, &sys, 2, "46-ON-05", &at(0)).await;
        assert_eq!(r["success"], true, "{db:?}: {r}");
        let stored = stays(&sys, "46-ON-05").await;
        assert!(stored[0].0 >= before, "{db:?}: {stored:?}");

        let metrics = sys.metrics("parks").await;
        for why in ["ahead", "late"] {
            let line = format!("direction=\"entrance\",why=\"{why}\"}} 1");
            assert!(metrics.contains(&line), "{db:?}: {line} in\n{metrics}");
        }
        let mut manager = sys.as_user(Via::H1, "parkmanager@isep.ipp.pt").await;
        let devices = manager.get("/parks/devices/2").await.json();
        let b7 = devices["barriers"]
            .as_array()
            .and_then(|b| b.iter().find(|b| b["barrierId"] == 7))
            .cloned()
            .expect("barrier 7");
        // The last offset written is the retry's, still centuries ahead.
        let offset = b7["clockOffsetMs"].as_i64().expect("an offset");
        assert!(offset > 900 * 365 * 86_400_000, "{db:?}: {b7}");
        assert!(b7["clockSeenAt"].is_string(), "{db:?}: {b7}");
    }
}

/// Defect: an exit dated before its visit's entrance was refused, trapping the car. It now
/// leaves, at the server's clock (never before the entrance).
#[tokio::test]
async fn an_exit_before_its_entrance_lets_the_car_out() {
    for db in BOTH {
        let Some(sys) = start(db).await else {
            continue;
        };
        let mut dev = sys.client(Via::H1).await;
        // The entrance's clock a minute fast (within the tolerance), the exit's half an hour slow.
        let entered = at(1);
        let r = pass(&mut dev, &sys, 1, "46-ON-05", &entered).await;
        assert_eq!(r["success"], true, "{db:?}: {r}");
        let said = at(-30);
        let r = pass(&mut dev, &sys, 2, "46-ON-05", &said).await;
        assert_eq!(r["success"], true, "{db:?}: {r}");
        let stored = stays(&sys, "46-ON-05").await;
        assert_eq!(stored.len(), 1, "{db:?}: {stored:?}");
        assert_eq!(stored[0].0, ms(&entered), "{db:?}: {stored:?}");
        assert_eq!(stored[0].1, Some(ms(&entered)), "{db:?}: not before it");
        assert_eq!(
            stored[0].3,
            Some(ms(&said)),
            "{db:?}: the time said is kept"
        );
        // The same exit again: the same answer, still one stay.
        let again = pass(&mut dev, &sys, 2, "46-ON-05", &said).await;
        assert_eq!(again, r, "{db:?}");
        assert_eq!(stays(&sys, "46-ON-05").await, stored, "{db:?}");
        let metrics = sys.metrics("parks").await;
        let line = "direction=\"exit\",why=\"before_entrance\"} 1";
        assert!(metrics.contains(line), "{db:?}: {line} in\n{metrics}");
    }
}

/// Defects: the same entrance sent again after its visit closed opened a second visit, and an
/// entrance dated inside a closed stay opened an overlapping one. The retry now answers as the
/// first did and changes nothing; the other entrance is taken after the last exit.
#[tokio::test]
async fn entrances_inside_a_closed_stay_neither_repeat_nor_overlap_it() {
    for db in BOTH {
        let Some(sys) = start(db).await else {
            continue;
        };
        let mut dev = sys.client(Via::H1).await;
        let (t, t10, t30) = (at(-60), at(-50), at(-30));
        let first = pass(&mut dev, &sys, 1, "46-ON-05", &t).await;
        assert_eq!(first["success"], true, "{db:?}: {first}");
        let r = pass(&mut dev, &sys, 2, "46-ON-05", &t30).await;
        assert_eq!(r["success"], true, "{db:?}: {r}");
        let closed = stays(&sys, "46-ON-05").await;
        let free = sys.parks.store.spots(1).await.expect("spots");

        let retry = pass(&mut dev, &sys, 1, "46-ON-05", &t).await;
        assert_eq!(retry, first, "{db:?}: the first answer");
        assert_eq!(stays(&sys, "46-ON-05").await, closed, "{db:?}: no new stay");
        assert_eq!(sys.parks.store.spots(1).await.expect("spots"), free);

        let before = Timestamp::now().as_millisecond();
        let inside = pass(&mut dev, &sys, 1, "46-ON-05", &t10).await;
        assert_eq!(inside["success"], true, "{db:?}: {inside}");
        let stored = stays(&sys, "46-ON-05").await;
        assert_eq!(stored.len(), 2, "{db:?}: {stored:?}");
        assert_apart(&stored, &format!("{db:?}"));
        assert!(
            stored[1].0 >= before,
            "{db:?}: the server's clock: {stored:?}"
        );
        assert_eq!(stored[1].2, ms(&t10), "{db:?}: {stored:?}");
        // And that entrance again: the same visit.
        let again = pass(&mut dev, &sys, 1, "46-ON-05", &t10).await;
        assert_eq!(again, inside, "{db:?}");
        assert_eq!(stays(&sys, "46-ON-05").await, stored, "{db:?}");
        let metrics = sys.metrics("parks").await;
        let line = "direction=\"entrance\",why=\"before_last_exit\"} 1";
        assert!(metrics.contains(line), "{db:?}: {line} in\n{metrics}");
    }
}

/// Overlapping stays of one plate are refused by the database itself, whatever writes them: an
/// operator's SQL here (a constraint trigger on PostgreSQL, triggers on SQLite).
#[tokio::test]
async fn the_database_refuses_overlapping_stays() {
    for db in BOTH {
        let Some(sys) = start(db).await else {
            continue;
        };
        let store = &sys.parks.store;
        let insert = |entered: i64, left: Option<i64>| async move {
            pms_service::repeatable!(store, |conn| {
                sqlx::query(
                "INSERT INTO visits (park_id, spot_id, customer_id, plate, vehicle_type, energy_source, \
                 entry_barrier_id, entered_at_ms, entry_said_ms, exit_barrier_id, left_at_ms, exit_said_ms) \
                 VALUES (1, (SELECT min(id) FROM spots WHERE park_id = 1 AND occupied = 0), 6, '46-ON-05', 'AUTOMOBILE', 'FUEL', 1, $1, $1, 2, $2, $2)"
            )
            .bind(entered)
            .bind(left)
            .execute(&mut *conn)
            .await
            .map(|_| ())
            })
        };
        insert(1_000, Some(2_000)).await.expect("a stay");
        insert(2_001, Some(3_000)).await.expect("the next stay");
        for (entered, left) in [
            (1_500, Some(1_600)),
            (500, Some(1_000)),
            (2_000, Some(2_500)),
            (2_500, None),
            (0, None),
        ] {
            let e = insert(entered, left).await.expect_err("overlaps");
            let text = e.to_string();
            assert!(text.contains("visits_no_overlap"), "{db:?}: {text}");
        }
        insert(3_001, None).await.expect("an open stay after them");
        insert(4_000, None).await.expect_err("a second open stay");
        // A stay grown into the next one by an update: refused too; shortened: allowed.
        let update = |left: i64| async move {
            pms_service::repeatable!(store, |conn| sqlx::query(
                "UPDATE visits SET left_at_ms = $1, exit_said_ms = $1 \
                 WHERE plate = '46-ON-05' AND entered_at_ms = 1000"
            )
            .bind(left)
            .execute(&mut *conn)
            .await
            .map(|_| ()))
        };
        let e = update(2_500).await.expect_err("grown into the next stay");
        assert!(e.to_string().contains("visits_no_overlap"), "{db:?}: {e}");
        update(1_500).await.expect("shortened");
    }
}

/// An RFC 3339 offset is at most ±23:59; `+25:00` was taken.
#[tokio::test]
async fn offsets_beyond_a_day_are_bad_input() {
    let Some(sys) = start(crate::support::Db::Sqlite).await else {
        return;
    };
    let mut dev = sys.client(Via::H1).await;
    let r = dev
        .barrier(
            "entrance",
            &sys.barrier_key(1),
            &plate_read(1, 1, "46-ON-05", "2024-01-10T10:00:00+25:00"),
        )
        .await;
    assert_error(&r, 400, "invalid_field", Some("date"));
}
