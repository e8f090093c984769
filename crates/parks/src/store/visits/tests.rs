//! The barrier rules as tables: what an entrance and an exit decide from the plate's read
//! (owner, open visit) and the barrier, before any SQL runs; and the barrier cache.

use jiff::ToSpan;

use super::*;

fn barrier(state: State) -> Barrier {
    Barrier {
        id: 7,
        park_id: 1,
        park_number: 1,
        number: "B1.1".into(),
        direction: Direction::Entrance,
        state,
        time_zone: "Europe/Lisbon".into(),
        clock_offset_ms: None,
        entrances_open: true,
        opening_hours: None,
        coin_rates: crate::rules::CoinRates::default(),
    }
}

fn owner(status: UserStatus) -> Owner {
    Owner {
        customer_id: 3,
        vehicle_type: VehicleType::Automobile,
        energy: EnergySource::Fuel,
        name: "Rui Soares".into(),
        nif: 123_456_789,
        status,
        use_coins: false,
    }
}

/// An open visit in `park_id`, entered through `barrier_id` at `said_ms` (as said and taken).
fn open(park_id: i64, barrier_id: i64, said_ms: i64) -> OpenVisit {
    OpenVisit {
        id: 40,
        park_id,
        spot_id: 9,
        entry_barrier_id: barrier_id,
        entered_at_ms: said_ms,
        spot_number: "A1".into(),
        entry_said_ms: said_ms,
    }
}

/// What a rule decided, in words a table can state.
#[derive(Debug, PartialEq, Eq)]
enum Decided {
    /// A new visit (entrance) or the open one closed (exit).
    Proceed,
    /// The first answer again (entrance) or a look for the same exit done before (exit).
    AsBefore,
    Refused(Refusal),
}

#[test]
fn the_entrance_decides_from_the_read_and_the_barrier() {
    const T: i64 = 1_720_000_000_000;
    use Decided::{AsBefore, Proceed, Refused};
    let active = State::Active;
    let off = State::Disabled;
    let enabled = Some(UserStatus::Enabled);
    let blocked = Some(UserStatus::Blocked);
    let cases = [
        (
            "a known plate, nothing open",
            active,
            enabled,
            None,
            Proceed,
        ),
        (
            "no such plate",
            active,
            None,
            None,
            Refused(Refusal::UnknownPlateAtEntrance),
        ),
        (
            "no such plate, barrier off",
            off,
            None,
            None,
            Refused(Refusal::UnknownPlateAtEntrance),
        ),
        (
            "a blocked customer",
            active,
            blocked,
            None,
            Refused(Refusal::Blocked),
        ),
        (
            "blocked, at a barrier off",
            off,
            blocked,
            None,
            Refused(Refusal::Blocked),
        ),
        (
            "a barrier switched off",
            off,
            enabled,
            None,
            Refused(Refusal::BarrierDisabled),
        ),
        (
            "a closed account's car",
            active,
            Some(UserStatus::Disabled),
            None,
            Refused(Refusal::AccountClosed),
        ),
        (
            "the same entrance again",
            active,
            enabled,
            Some(open(1, 7, T)),
            AsBefore,
        ),
        (
            "inside, entered at another time",
            active,
            enabled,
            Some(open(1, 7, T - 1)),
            Refused(Refusal::AlreadyInside),
        ),
        (
            "inside, through another barrier",
            active,
            enabled,
            Some(open(2, 8, T)),
            Refused(Refusal::AlreadyInside),
        ),
    ];
    for (case, state, status, visit, expected) in cases {
        let read = status.map(|s| (owner(s), visit));
        let decided = match entrance_rules(&barrier(state), read, T) {
            Ok(Entering::New(o)) => {
                assert_eq!(o.customer_id, 3, "{case}");
                Proceed
            }
            Ok(Entering::Repeat(Passage::Open {
                visit_id, repeated, ..
            })) => {
                assert_eq!((visit_id, repeated), (40, true), "{case}");
                AsBefore
            }
            Ok(Entering::Repeat(_)) => panic!("{case}: a repeat answers with the open visit"),
            Err(r) => Refused(r),
        };
        assert_eq!(decided, expected, "{case}");
    }
}

#[test]
fn the_exit_decides_from_the_read_and_never_keeps_a_car_inside() {
    use Decided::{AsBefore, Proceed, Refused};
    let entered: Timestamp = "2024-07-01T08:30:00Z".parse().expect("time");
    let now = entered + 2.hours();
    let at = |t: Timestamp| PassageTime {
        said: t,
        at: t,
        now,
        replaced: None,
    };
    let after = at(entered + 1.hour());
    let before = at(entered - 1.hour());
    let active = State::Active;
    let here = || Some(open(1, 7, entered.as_millisecond()));
    let cases = [
        ("inside this park", active, true, here(), after, Proceed),
        (
            "no such plate",
            active,
            false,
            None,
            after,
            Refused(Refusal::UnknownPlateAtExit),
        ),
        (
            "a barrier switched off",
            State::Disabled,
            true,
            here(),
            after,
            Refused(Refusal::BarrierDisabled),
        ),
        (
            "nothing open: the same exit done before, or not inside",
            active,
            true,
            None,
            after,
            AsBefore,
        ),
        (
            "open in another park",
            active,
            true,
            Some(open(2, 8, entered.as_millisecond())),
            after,
            AsBefore,
        ),
        (
            "said before its entrance",
            active,
            true,
            here(),
            before,
            Proceed,
        ),
    ];
    for (case, state, known, visit, time, expected) in cases {
        let read = known.then(|| (owner(UserStatus::Enabled), visit, Some(2)));
        let decided = match exit_rules(&barrier(state), read, time) {
            Ok(Leaving::Close(closing)) => {
                assert_eq!((closing.visit.id, closing.version), (40, Some(2)), "{case}");
                assert!(
                    closing.time.at >= entered,
                    "{case}: never before the entrance"
                );
                if time.said < entered {
                    // Taken at the server's clock, and the table in force read again.
                    assert_eq!(closing.time.at, now, "{case}");
                    assert!(closing.moved(), "{case}");
                } else {
                    assert_eq!(closing.time.at, time.said, "{case}");
                    assert!(!closing.moved(), "{case}");
                }
                Proceed
            }
            Ok(Leaving::Done(o)) => {
                assert_eq!(o.customer_id, 3, "{case}");
                AsBefore
            }
            Err(r) => Refused(r),
        };
        assert_eq!(decided, expected, "{case}");
    }
}

/// A clock offset noted in the cache does not make the cached barrier younger: its state
/// (switched off by an operator) is still read again within the TTL, however often its
/// clock moves.
#[test]
fn an_offset_noted_keeps_the_cached_barriers_age() {
    let cache = BarrierCache::default();
    cache.put(
        1,
        Barrier {
            id: 1,
            ..barrier(State::Active)
        },
    );
    let age = |cache: &BarrierCache| cache.0.lock().expect("cache")[&1].1;
    let cached_at = age(&cache);
    cache.note_offset(1, 5_000);
    assert_eq!(age(&cache), cached_at);
    assert_eq!(cache.get(&1).and_then(|b| b.clock_offset_ms), Some(5_000));
    cache.note_offset(2, 1);
    assert!(
        cache.get(&2).is_none(),
        "a barrier not cached is not made up"
    );
}
