//! A model-based test of two parks (issue 58): random sequences of entrances and exits at their
//! barriers, with device times now, behind, a little ahead, centuries ahead or in 1970, requests
//! sent again, spots switched off and on, coin grants and flags, and restarts of every service on
//! the same databases, run through the gateway against the whole system and checked against a
//! reference model after every step:
//!
//! - a barrier always answers, and a request sent again gets its first answer;
//! - no car is trapped: a car the model has in a park leaves through its exit, whatever time its
//!   barrier says; a car that is not there is refused at the exit, and one that is inside
//!   somewhere is refused at any entrance;
//! - the open visits are exactly the model's parked cars (so at most one per plate), and no two
//!   stays of a plate overlap;
//! - per park, the occupied spots are the seed's occupied ones plus one per open visit, the
//!   park's count says so, the spots in service are the ones the model switched on, and the open
//!   occupancy feed counts the spots both in service and free;
//! - once the events settle, every closed visit has exactly one invoice, at the price the tariff
//!   engine gives its stay with the table in force when it left, and issued;
//! - coins are conserved: with coin grants and "pay with coins" flags among the steps, each
//!   customer's wallet ends at what it started with, plus what was granted and what their visits
//!   earned, less the coins their invoices spent; each visit earned its stay at its park's rates,
//!   and each invoice's discount is its coins ÷ 100, never more than its total.
//!
//! CI runs a few cases on each database; a long search:
//! `PMS_MODEL_CASES=200 cargo test -p pms-system --test it model -- --nocapture`. A failing
//! sequence is printed shrunk; keep it as a regression test below.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use pms_parks::clock::ClockRules;
use pms_tariff::fee::{self, Stay};
use pms_vocab::VehicleType;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};

use crate::support::{plate_read, Api, Db, Options, System, Via, BOTH};

/// Customers' and staff's cars (one a motorcycle, for the two motorcycle spots), and a plate
/// nobody registered.
const CARS: [&str; 8] = [
    "46-ON-05", "32-VT-07", "28-XQ-51", "19-SJ-63", "AH-43-MR", "55-ND-41", "CC-20-CC", "ZZ-99-ZZ",
];
/// The plate nobody registered.
const STRANGER: &str = "ZZ-99-ZZ";
/// The customers: user id, e-mail.
const CUSTOMERS: [(i64, &str); 3] = [
    (4, "leoKim@isep.ipp.pt"),
    (5, "mayaGupta@isep.ipp.pt"),
    (6, "ruiSoares@isep.ipp.pt"),
];
/// Park number, its entrance barrier and its exit barrier (seed ids).
const PARKS: [(i64, i64, i64); 2] = [(1, 1, 2), (2, 7, 8)];
/// The seeded car spots of each park: number, in service, occupied without a visit (the two
/// motorcycle spots are free and in service).
const SPOTS: [(&str, bool, bool); 10] = [
    ("A1", false, false),
    ("A2", true, false),
    ("A3", true, false),
    ("A4", true, true),
    ("A5", true, false),
    ("B1", true, false),
    ("B2", true, false),
    ("B3", true, true),
    ("B4", true, true),
    ("B5", true, false),
];

/// The time a barrier writes, relative to the server's clock when it sends.
#[derive(Debug, Clone, Copy)]
enum When {
    Now,
    /// Minutes behind (a passage buffered by a barrier that was offline).
    Behind(i64),
    /// Seconds ahead, within the service's tolerance.
    Ahead(i64),
    /// In the year 2999.
    FarAhead,
    /// In 1970.
    FarBehind,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Enter {
        car: usize,
        park: usize,
        when: When,
    },
    Exit {
        car: usize,
        park: usize,
        when: When,
    },
    /// The last passage, sent again as it was.
    Again,
    Spot {
        park: usize,
        spot: usize,
        on: bool,
    },
    /// The customer manager grants a customer coins.
    Grant {
        customer: usize,
        coins: i64,
    },
    /// A customer sets or clears "pay my next visit with coins".
    Flag {
        customer: usize,
        on: bool,
    },
    /// Every service stops and starts again on the same databases.
    Restart,
}

fn when() -> impl Strategy<Value = When> {
    prop_oneof![
        4 => Just(When::Now),
        2 => (1i64..600).prop_map(When::Behind),
        1 => (1i64..100).prop_map(When::Ahead),
        1 => Just(When::FarAhead),
        1 => Just(When::FarBehind),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let car = 0..CARS.len();
    let park = 0..PARKS.len();
    prop_oneof![
        4 => (car.clone(), park.clone(), when()).prop_map(|(car, park, when)| Op::Enter { car, park, when }),
        4 => (car, park.clone(), when()).prop_map(|(car, park, when)| Op::Exit { car, park, when }),
        2 => Just(Op::Again),
        1 => (park, 0..SPOTS.len(), any::<bool>()).prop_map(|(park, spot, on)| Op::Spot { park, spot, on }),
        1 => (0..CUSTOMERS.len(), 1i64..300).prop_map(|(customer, coins)| Op::Grant { customer, coins }),
        2 => (0..CUSTOMERS.len(), prop::bool::weighted(0.75)).prop_map(|(customer, on)| Op::Flag { customer, on }),
        1 => Just(Op::Restart),
    ]
}

/// What the model knows.
#[derive(Debug, Default)]
struct Model {
    /// Cars inside, and the park they are in.
    parked: BTreeMap<&'static str, i64>,
    /// Spots out of service, by park and number.
    off: BTreeSet<(i64, &'static str)>,
    /// The last passage, if nothing else happened since: barrier, body, and the answer it got.
    last: Option<(i64, Value, Value)>,
    /// Coins granted to each customer (by index in [`CUSTOMERS`]).
    granted: [i64; CUSTOMERS.len()],
}

/// The device's, the park manager's, the customer manager's and the customers' clients of
/// `sys`, through its gateway.
async fn clients(sys: &System) -> (Api, Api, Api, Vec<Api>) {
    let mut customers = Vec::new();
    for (_, email) in CUSTOMERS {
        customers.push(sys.as_user(Via::H1, email).await);
    }
    (
        sys.client(Via::H1).await,
        sys.as_user(Via::H1, "parkmanager@isep.ipp.pt").await,
        sys.as_user(Via::H1, "customermanager@isep.ipp.pt").await,
        customers,
    )
}

/// The system under test and its clients.
struct Run {
    sys: System,
    dev: Api,
    manager: Api,
    coins_manager: Api,
    customers: Vec<Api>,
    /// Each customer's wallet at the start.
    wallets: Vec<i64>,
    model: Model,
    db: Db,
}

impl Run {
    async fn start(db: Db) -> Option<Self> {
        let options = Options {
            clock: ClockRules::default(),
            ..Options::default()
        };
        let sys = System::start_with(db, options).await?;
        let (dev, manager, mut coins_manager, mut customers) = clients(&sys).await;
        let mut wallets = Vec::new();
        for (i, (id, _)) in CUSTOMERS.iter().enumerate() {
            // Coins to spend from the first step on.
            let body = json!({"userIds": [id], "amount": 500, "reason": "model start"});
            let granted = coins_manager.send("POST", "/users/parkies", &body).await;
            assert_eq!(granted.status(), 201, "{}", granted.text());
            wallets.push(
                customers[i]
                    .get(&format!("/users/parkies/{id}"))
                    .await
                    .json()["parkies"]
                    .as_i64()?,
            );
        }
        let mut model = Model::default();
        for (park, _, _) in PARKS {
            for (spot, on, _) in SPOTS {
                if !on {
                    model.off.insert((park, spot));
                }
            }
        }
        Some(Self {
            sys,
            dev,
            manager,
            coins_manager,
            customers,
            wallets,
            model,
            db,
        })
    }

    /// Sends a passage and checks the barrier answered.
    async fn pass(&mut self, barrier: i64, body: &Value) -> Result<Value, TestCaseError> {
        let direction = if barrier % 2 == 1 { "entrance" } else { "exit" };
        let key = self.sys.barrier_key(barrier);
        let r = self.dev.barrier(direction, &key, body).await;
        prop_assert_eq!(
            r.status(),
            200,
            "{:?}: a barrier always gets an answer: {}",
            self.db,
            r.text()
        );
        let answer = r.json();
        self.model.last = Some((barrier, body.clone(), answer.clone()));
        Ok(answer)
    }

    async fn step(&mut self, i: usize, op: Op) -> Result<(), TestCaseError> {
        let db = self.db;
        match op {
            Op::Enter { car, park, when } | Op::Exit { car, park, when } => {
                let entering = matches!(op, Op::Enter { .. });
                let plate = CARS[car];
                let (park, entrance, exit) = PARKS[park];
                let barrier = if entering { entrance } else { exit };
                let body = plate_read(barrier, park, plate, &said(when, i));
                let answer = self.pass(barrier, &body).await?;
                let success = answer["success"] == true;
                let inside = self.model.parked.get(plate).copied();
                if entering {
                    if inside.is_some() || plate == STRANGER {
                        prop_assert!(
                            !success,
                            "{db:?}: {plate} let in while {inside:?}: {answer}"
                        );
                    } else if success {
                        self.model.parked.insert(plate, park);
                    }
                } else if inside == Some(park) {
                    prop_assert!(success, "{db:?}: {plate} trapped in park {park}: {answer}");
                    self.model.parked.remove(plate);
                } else {
                    prop_assert!(
                        !success,
                        "{db:?}: {plate} left park {park} while {inside:?}: {answer}"
                    );
                }
            }
            Op::Again => {
                if let Some((barrier, body, first)) = self.model.last.clone() {
                    let answer = self.pass(barrier, &body).await?;
                    prop_assert_eq!(&answer, &first, "{:?}: a request sent again", db);
                }
            }
            Op::Spot { park, spot, on } => {
                let (park, _, _) = PARKS[park];
                let spot = SPOTS[spot].0;
                let body = json!({"parkNumber": park, "spotNumber": spot, "operational": on, "managerName": "Model"});
                let r = self
                    .manager
                    .send("PUT", "/parks/enableDisableSpot", &body)
                    .await;
                prop_assert_eq!(r.status(), 200, "{:?}: {}", db, r.text());
                // A passage sent again after this is a new question.
                self.model.last = None;
                if on {
                    self.model.off.remove(&(park, spot));
                } else {
                    self.model.off.insert((park, spot));
                }
            }
            Op::Grant { customer, coins } => {
                let (id, _) = CUSTOMERS[customer];
                let body = json!({"userIds": [id], "amount": coins, "reason": "model"});
                let r = self
                    .coins_manager
                    .send("POST", "/users/parkies", &body)
                    .await;
                prop_assert_eq!(r.status(), 201, "{:?}: {}", db, r.text());
                self.model.granted[customer] += coins;
            }
            Op::Flag { customer, on } => {
                let (id, _) = CUSTOMERS[customer];
                let r = self.customers[customer].coin_flag(id, on).await;
                prop_assert_eq!(r.status(), 200, "{:?}: {}", db, r.text());
            }
            Op::Restart => {
                // What was written survives; the last passage sent again after it still gets
                // its first answer (`Again` keeps `model.last`).
                self.sys.restart().await;
                (self.dev, self.manager, self.coins_manager, self.customers) =
                    clients(&self.sys).await;
            }
        }
        self.check().await
    }

    /// The invariants of the module's docs that hold after every step.
    async fn check(&mut self) -> Result<(), TestCaseError> {
        let db = self.db;
        let store = &self.sys.parks.store;
        let visits: Vec<(String, i64, i64, Option<i64>)> =
            pms_service::repeatable!(store, |conn| sqlx::query_as(
                "SELECT v.plate, p.park_number, v.entered_at_ms, v.left_at_ms FROM visits v \
             JOIN parks p ON p.id = v.park_id ORDER BY v.plate, v.entered_at_ms"
            )
            .fetch_all(&mut *conn)
            .await)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let open: BTreeMap<&str, i64> = visits
            .iter()
            .filter(|v| v.3.is_none())
            .map(|v| (v.0.as_str(), v.1))
            .collect();
        let expected: BTreeMap<&str, i64> =
            self.model.parked.iter().map(|(p, k)| (*p, *k)).collect();
        prop_assert_eq!(
            &open,
            &expected,
            "{:?}: the open visits are the model's cars",
            db
        );
        prop_assert_eq!(
            open.len(),
            visits.iter().filter(|v| v.3.is_none()).count(),
            "{:?}: one open visit per plate",
            db
        );
        for pair in visits.windows(2).filter(|w| w[0].0 == w[1].0) {
            let left = pair[0].3.unwrap_or(i64::MAX);
            prop_assert!(left < pair[1].2, "{db:?}: overlapping stays {pair:?}");
        }
        for v in &visits {
            prop_assert!(v.3.is_none_or(|left| left >= v.2), "{db:?}: {v:?}");
        }
        for (park, _, _) in PARKS {
            let spots: Vec<(String, i64, i64)> =
                pms_service::repeatable!(store, |conn| sqlx::query_as(
                    "SELECT s.spot_number, s.operational, s.occupied FROM spots s \
                 JOIN parks p ON p.id = s.park_id WHERE p.park_number = $1 ORDER BY s.spot_number"
                )
                .bind(park)
                .fetch_all(&mut *conn)
                .await)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let count: i64 = pms_service::repeatable!(store, |conn| sqlx::query_scalar(
                "SELECT occupied FROM parks WHERE park_number = $1"
            )
            .bind(park)
            .fetch_one(&mut *conn)
            .await)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let occupied = spots.iter().filter(|s| s.2 == 1).count();
            let seeded = SPOTS.iter().filter(|s| s.2).count();
            let here = self.model.parked.values().filter(|p| **p == park).count();
            prop_assert_eq!(
                occupied,
                seeded + here,
                "{:?}: park {} spots {:?}",
                db,
                park,
                spots
            );
            prop_assert_eq!(count, occupied as i64, "{:?}: park {}'s count", db, park);
            for (number, operational, _) in &spots {
                let off = self.model.off.contains(&(park, number.as_str()));
                prop_assert_eq!(
                    *operational == 1,
                    !off,
                    "{:?}: park {} spot {}",
                    db,
                    park,
                    number
                );
            }
            let free = spots.iter().filter(|s| s.1 == 1 && s.2 == 0).count();
            let feed = self
                .manager
                .get(&format!("/parks/occupancy/{park}"))
                .await
                .json();
            prop_assert_eq!(
                &feed["available"],
                &json!(free),
                "{:?}: park {}: {}",
                db,
                park,
                feed
            );
        }
        Ok(())
    }

    /// Every car leaves, the events settle, and every closed visit has one invoice at the
    /// tariff's price.
    async fn finish(&mut self) -> Result<(), TestCaseError> {
        let db = self.db;
        let parked: Vec<(&str, i64)> = self.model.parked.iter().map(|(p, k)| (*p, *k)).collect();
        for (plate, park) in parked {
            let exit = PARKS.iter().find(|p| p.0 == park).map_or(0, |p| p.2);
            let answer = self
                .pass(
                    exit,
                    &plate_read(exit, park, plate, &Timestamp::now().to_string()),
                )
                .await?;
            prop_assert_eq!(
                &answer["success"],
                &json!(true),
                "{:?}: {} trapped: {}",
                db,
                plate,
                answer
            );
            self.model.parked.remove(plate);
        }
        self.check().await?;
        self.sys.settled().await;
        let store = &self.sys.parks.store;
        let closed: Vec<(i64, i64, i64, i64, String)> =
            pms_service::repeatable!(store, |conn| sqlx::query_as(
                "SELECT id, park_id, entered_at_ms, left_at_ms, vehicle_type FROM visits \
             WHERE left_at_ms IS NOT NULL ORDER BY id"
            )
            .fetch_all(&mut *conn)
            .await)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let payments = &self.sys.payments.store;
        let invoices: Vec<(i64, i64, String)> =
            pms_service::repeatable!(payments, |conn| sqlx::query_as(
                "SELECT visit_id, COUNT(*), MIN(total) FROM invoices WHERE status = 'ISSUED' \
             GROUP BY visit_id ORDER BY visit_id"
            )
            .fetch_all(&mut *conn)
            .await)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let invoiced: BTreeMap<i64, (i64, String)> =
            invoices.into_iter().map(|(v, n, t)| (v, (n, t))).collect();
        prop_assert_eq!(
            invoiced.len(),
            closed.len(),
            "{:?}: one invoice per closed visit",
            db
        );
        for (visit, park_id, entered, left, vehicle) in closed {
            let Some((count, total)) = invoiced.get(&visit) else {
                return Err(TestCaseError::fail(format!(
                    "{db:?}: visit {visit} not invoiced"
                )));
            };
            prop_assert_eq!(*count, 1, "{:?}: visit {}", db, visit);
            let table = payments
                .table_at(park_id, left)
                .await
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let stay = Stay {
                entry: Timestamp::from_millisecond(entered)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?,
                exit: Timestamp::from_millisecond(left)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?,
                vehicle: VehicleType::parse(&vehicle)
                    .ok_or_else(|| TestCaseError::fail(vehicle.clone()))?,
            };
            let bill = fee::price(&table.table, &table.time_zone, &stay)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(
                total,
                &bill.total.to_string(),
                "{:?}: visit {}'s invoice",
                db,
                visit
            );
        }
        self.coins_conserved().await
    }

    /// Each customer's wallet is what it was, plus what was granted and what their visits
    /// earned, less what their invoices spent; each visit earned its stay at its park's rates
    /// (the seed's 15 an hour and 1 a minute); each discount is its coins ÷ 100 and no more than
    /// the total.
    async fn coins_conserved(&mut self) -> Result<(), TestCaseError> {
        let db = self.db;
        let parks = &self.sys.parks.store;
        let closed: Vec<(i64, i64, i64, Option<i64>)> =
            pms_service::repeatable!(parks, |conn| sqlx::query_as(
                "SELECT customer_id, entered_at_ms, left_at_ms, coins_earned FROM visits \
                 WHERE left_at_ms IS NOT NULL ORDER BY id"
            )
            .fetch_all(&mut *conn)
            .await)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let rates = pms_parks::rules::CoinRates {
            per_hour: 15,
            per_minute: 1,
        };
        let at = |ms: i64| jiff::Timestamp::from_millisecond(ms).unwrap_or_default();
        for (_, entered, left, coins) in &closed {
            prop_assert_eq!(
                *coins,
                Some(rates.earned(at(*entered), at(*left))),
                "{:?}",
                db
            );
        }
        let payments = &self.sys.payments.store;
        let spent: Vec<(i64, i64, String, String)> =
            pms_service::repeatable!(payments, |conn| sqlx::query_as(
                "SELECT customer_id, coins, discount, total FROM invoices ORDER BY id"
            )
            .fetch_all(&mut *conn)
            .await)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (_, coins, discount, total) in &spent {
            let (discount, total): (rust_decimal::Decimal, rust_decimal::Decimal) = (
                discount
                    .parse()
                    .map_err(|_| TestCaseError::fail(discount.clone()))?,
                total
                    .parse()
                    .map_err(|_| TestCaseError::fail(total.clone()))?,
            );
            prop_assert_eq!(discount, rust_decimal::Decimal::new(*coins, 2), "{:?}", db);
            prop_assert!(
                discount <= total && *coins >= 0,
                "{db:?}: {discount} of {total}"
            );
        }
        for (i, (id, _)) in CUSTOMERS.iter().enumerate() {
            let wallet = self.customers[i]
                .get(&format!("/users/parkies/{id}"))
                .await
                .json();
            let used: i64 = spent.iter().filter(|s| s.0 == *id).map(|s| s.1).sum();
            let earned: i64 = closed
                .iter()
                .filter(|v| v.0 == *id)
                .filter_map(|v| v.3)
                .sum();
            prop_assert_eq!(
                wallet["parkies"].as_i64(),
                Some(self.wallets[i] + self.model.granted[i] + earned - used),
                "{:?}: customer {}'s coins: {}",
                db,
                id,
                wallet
            );
        }
        Ok(())
    }
}

/// The time said for `when`, distinct per step `i` where it is fixed (so that only a request
/// sent again repeats one).
fn said(when: When, i: usize) -> String {
    let now = Timestamp::now();
    let i = i as i64;
    let at = match when {
        When::Now => now,
        When::Behind(m) => now - SignedDuration::from_mins(m),
        When::Ahead(s) => now + SignedDuration::from_secs(s),
        When::FarAhead => {
            "2999-12-31T00:00:00Z".parse::<Timestamp>().unwrap_or(now)
                + SignedDuration::from_secs(i)
        }
        When::FarBehind => {
            "1970-01-01T00:00:00Z".parse::<Timestamp>().unwrap_or(now)
                + SignedDuration::from_secs(i)
        }
    };
    at.to_string()
}

/// Runs `ops` on a fresh system on `db`.
async fn run(db: Db, ops: &[Op]) -> Result<(), TestCaseError> {
    let Some(mut run) = Run::start(db).await else {
        return Ok(());
    };
    for (i, op) in ops.iter().enumerate() {
        run.step(i, *op)
            .await
            .map_err(|e| TestCaseError::fail(format!("step {i} {op:?}: {e}")))?;
    }
    run.finish().await
}

/// Random sequences on both databases; `PMS_MODEL_CASES` of them each (default 4).
#[test]
fn a_park_behaves_as_its_model() {
    let cases = std::env::var("PMS_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(4);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    for db in BOTH {
        let mut runner = TestRunner::new(Config {
            cases,
            max_shrink_iters: 64,
            failure_persistence: None,
            ..Config::default()
        });
        let outcome = runner.run(&prop::collection::vec(op(), 1..30), |ops| {
            runtime.block_on(run(db, &ops))
        });
        if let Err(e) = outcome {
            panic!("{db:?}: {e}");
        }
    }
}
