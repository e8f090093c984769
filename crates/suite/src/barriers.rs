//! The parking suite's load: barrier clients, each a car going in and out of its park again
//! and again through the gateway of a running `pms up`, plus one customer asking for a price
//! quote the whole time and, at a fixed offered rate, the displays of each park's first pair of
//! barriers followed by long poll (how soon a display shows what its barrier wrote). Setting up
//! registers the cars' owners through the public API, waits until parks and payments have
//! applied every event of it, and reads the devices' keys with `pms device key`.
//!
//! Every call is timed from just before its request is written to the end of its answer and
//! recorded in the load generator's own collector ([`pms_bench::collect`]), which keeps the warm-up
//! apart and the per-second timeline, so the reports draw this load like any other. A call counts
//! as a success when it answers 200 with `"success": true`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{HeaderName, HeaderValue, Method};
use serde_json::{json, Value};

use pms_bench::collect::{CollectConfig, Collected, Collector, StopReason};
use pms_bench::stats::{ErrorKind, Sample};
use pms_bench::target::{Conn, HttpVersion, Target};

use super::soak::{self, Series, Windows};
use super::SuiteError;

/// Parks of the demo seed.
pub const PARKS: usize = 5;
/// The header a barrier's key goes in.
const DEVICE_KEY: HeaderName = HeaderName::from_static("x-device-key");
/// The seeded supervisor, whose token the quotes carry.
const SUPERVISOR: &str = "supervisor@isep.ipp.pt";
/// Registrations sent at once while setting up.
const REGISTERING: usize = 8;
/// Pause between two quotes: a customer's app refreshing a hundred times a second.
const QUOTE_PAUSE: Duration = Duration::from_millis(10);
/// Longest wait for parks and payments to apply the registrations' events.
const CATCH_UP: Duration = Duration::from_secs(120);
/// A display follower's longest wait for a change (well under the gateway's timeouts).
const DISPLAY_WAIT_MS: u64 = 2_000;

/// Where the system under test listens.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// The gateway's cleartext listener.
    pub gateway: u16,
    /// The parks service's own listener (its `/metrics`).
    pub parks: u16,
    /// The payments service's own listener (its `/metrics`).
    pub payments: u16,
    /// The users service's own listener (its `/metrics`: it credits the coins each visit
    /// earned from the parks service's `visit.closed`).
    pub users: u16,
}

/// What a run measured.
#[derive(Debug)]
pub struct Outcome {
    /// Every barrier call, both directions: the measured ones (a failure is a non-200 answer,
    /// `success: false` or a broken connection), the warm-up, the timeline.
    pub calls: Collected,
    /// Exits that succeeded.
    pub exits: u64,
    /// Of which with the price in the answer (quoted by the exit, or the invoice arrived
    /// within the exit's wait).
    pub priced_exits: u64,
    /// From the end of the load until parks, payments and users had applied every event: each
    /// exit's invoice issued, its price on the visit and its coins in the wallet. What the
    /// barriers' answers do not wait for.
    pub settled: Duration,
    /// The most events parks, payments and users had left to apply together, sampled during the
    /// measured window.
    pub most_lag: f64,
    /// Quotes, µs.
    pub quotes: Histogram<u64>,
    /// Quotes not answered 200.
    pub quote_failures: u64,
    /// Display delays, µs: from the time a barrier wrote its displays (their `updatedAt`) to a
    /// follower's long poll answering with it. Empty without `Load::rate`.
    pub display_delays: Histogram<u64>,
    /// Display long polls not answered 200.
    pub display_failures: u64,
    /// The measured window.
    pub window: Duration,
    /// The first few failures, for the report.
    pub failure_samples: Vec<String>,
    /// A soak's figures per window of time (empty otherwise).
    pub windows: Vec<crate::soak::WindowRow>,
    /// A soak's readings of the processes' resident memory (empty otherwise).
    pub rss: Vec<crate::soak::RssSample>,
}

/// The barrier pair a client uses: park, entrance id, exit id.
pub fn barriers_of(client: usize) -> (i64, i64, i64) {
    let park = (client % PARKS) as i64 + 1;
    // Each park has two active pairs (B1.1/B1.2 and B2.1/B2.2): ids 1–4 of its six.
    let pair = ((client / PARKS) % 2) as i64;
    let first = (park - 1) * 6 + 1 + 2 * pair;
    (park, first, first + 1)
}

/// The plate of car `i` (`NN-BK-NN`, distinct for i < 10,000).
pub fn plate(i: usize) -> String {
    format!("{:02}-BK-{:02}", (i / 100) % 100, i % 100)
}

/// The displays followed with `clients` clients: of each park in use, the first display of its
/// first entrance and of its first exit (`D1.1` and `D1.2`, seeded nine to a park).
pub fn followed_displays(clients: usize) -> Vec<i64> {
    (0..clients.clamp(1, PARKS))
        .flat_map(|c| {
            let (park, ..) = barriers_of(c);
            let first = (park - 1) * 9 + 1;
            [first, first + 1]
        })
        .collect()
}

/// The barrier ids the clients use.
pub fn barrier_ids(clients: usize) -> Vec<i64> {
    let mut ids: Vec<i64> = (0..clients.max(1))
        .flat_map(|c| {
            let (_, entrance, exit) = barriers_of(c);
            [entrance, exit]
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The run's configuration.
#[derive(Debug, Clone)]
pub struct Load {
    /// Barrier clients.
    pub clients: usize,
    /// Whole run.
    pub duration: Duration,
    /// Not measured.
    pub warmup: Duration,
    /// The demo accounts' password (for the supervisor's token).
    pub password: String,
    /// Barrier id → key.
    pub keys: Vec<(i64, String)>,
    /// Display id → key, for [`followed_displays`].
    pub display_keys: Vec<(i64, String)>,
    /// Calls per second offered by all clients together, each client on its own fixed schedule
    /// (a call that is late is measured from when it was due); `None`: each client calls again
    /// as soon as it has its answer.
    pub rate: Option<f64>,
    /// A soak, when this is one.
    pub soak: Option<SoakLoad>,
}

/// What a soak adds to the load ([`crate::soak`]).
#[derive(Debug, Clone)]
pub struct SoakLoad {
    /// The figures are kept per window of this length.
    pub window: Duration,
    /// The system's processes whose resident memory is read: name, pid.
    pub processes: Vec<(String, u32)>,
}

/// When a client's calls are due: every `every`, from `first`.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    first: Instant,
    every: Duration,
}

impl Schedule {
    /// Client `i` of `clients` sharing `rate` calls per second from `start`, the clients'
    /// first calls spread over one interval.
    fn of(i: usize, clients: usize, rate: f64, start: Instant) -> Self {
        let every = Duration::from_secs_f64(clients as f64 / rate);
        Self {
            first: start + every.mul_f64(i as f64 / clients as f64),
            every,
        }
    }

    /// The `n`th call's due time.
    fn due(&self, n: u32) -> Instant {
        self.first + self.every * n
    }
}

/// Registers the cars, waits for the events, then runs the load.
///
/// # Errors
/// A failed setup step (the load's own failures are counted, not errors).
pub fn run(ports: Ports, load: &Load) -> Result<Outcome, SuiteError> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(|e| SuiteError::io("starting the load's runtime", e))?;
    rt.block_on(async {
        let api = Api::new(ports.gateway)?;
        // With a soak, one more customer: the person signing in beside the barriers.
        register(&api, load.clients + 1 + usize::from(load.soak.is_some())).await?;
        caught_up(ports).await?;
        let token = api.login(&load.password).await?;
        let measured = Instant::now() + load.warmup;
        let sampler = tokio::spawn(most_lag(
            ports,
            measured,
            measured + load.duration - load.warmup,
        ));
        let mut outcome = drive(Arc::new(api), load, token).await?;
        outcome.most_lag = sampler.await.unwrap_or(0.0);
        // The exits answered; the invoices they started may still be on their way.
        let ended = Instant::now();
        caught_up(ports).await?;
        outcome.settled = ended.elapsed();
        Ok(outcome)
    })
}

/// Requests to the gateway's cleartext listener.
struct Api {
    gateway: u16,
    entrance: Target,
    exit: Target,
}

/// One answer: status and JSON body (`Null` when not JSON).
struct Reply {
    status: http::StatusCode,
    body: Value,
}

impl Api {
    fn new(gateway: u16) -> Result<Self, SuiteError> {
        Ok(Self {
            gateway,
            entrance: target(gateway, "/barriers/entrance")?,
            exit: target(gateway, "/barriers/exit")?,
        })
    }

    async fn connect(&self) -> Result<Conn, SuiteError> {
        self.entrance
            .connect()
            .await
            .map_err(|k| SuiteError::Failed(format!("connecting to the gateway: {k:?}")))
    }

    /// One request on a fresh connection.
    async fn once(
        &self,
        method: &Method,
        path: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: Value,
    ) -> Result<Reply, SuiteError> {
        let t = target(self.gateway, path)?;
        let mut conn = self.connect().await?;
        send(&mut conn, &t, method, headers, body)
            .await
            .map_err(|e| SuiteError::Failed(format!("{method} {path}: {e}")))
    }

    async fn login(&self, password: &str) -> Result<String, SuiteError> {
        let r = self
            .once(
                &Method::POST,
                "/users/login",
                &[],
                json!({"email": SUPERVISOR, "password": password}),
            )
            .await?;
        r.body["token"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| SuiteError::Failed(format!("login answered {}: {}", r.status, r.body)))
    }
}

fn target(port: u16, path: &str) -> Result<Target, SuiteError> {
    let url = format!("http://127.0.0.1:{port}{path}");
    Target::new(&url, HttpVersion::Http1, &pms_net::tls::Trust::Nothing)
        .map_err(|e| SuiteError::Failed(format!("{url}: {e}")))
}

/// Sends one JSON request on `conn` (a `Null` body sends none).
async fn send(
    conn: &mut Conn,
    t: &Target,
    method: &Method,
    headers: &[(HeaderName, HeaderValue)],
    body: Value,
) -> Result<Reply, String> {
    let mut all = headers.to_vec();
    let bytes = if body.is_null() {
        Bytes::new()
    } else {
        all.push((
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        ));
        Bytes::from(body.to_string())
    };
    let out = t.outgoing(method, &all, bytes).map_err(|e| e.to_string())?;
    let (answer, _) = conn.send(&out).await.map_err(|e| format!("{e:?}"))?;
    Ok(Reply {
        status: answer.status,
        body: serde_json::from_slice(&answer.body).unwrap_or(Value::Null),
    })
}

/// Registers `n` customers, each with car `plate(i)`, through the public `createUser`.
/// The password of every registered driver.
const DRIVER_PASSWORD: &str = "Bench#Driver2026";

/// The e-mail address of driver `i`.
fn customer(i: usize) -> String {
    format!("driver{i}@bench.pms.test")
}

async fn register(api: &Api, n: usize) -> Result<(), SuiteError> {
    let t = target(api.gateway, "/users/createUser")?;
    let t = &t;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let next = &next;
    let workers = (0..REGISTERING.min(n)).map(|_| async move {
        let mut conn = api.connect().await?;
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if i >= n {
                return Ok::<(), SuiteError>(());
            }
            let body = json!({
                "firstName": "Bench", "lastName": format!("Driver {i}"),
                "email": customer(i), "password": DRIVER_PASSWORD,
                "nif": 300_000_000 + i, "licensePlateNumber": plate(i),
                "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "FUEL",
            });
            let mut r = send(&mut conn, t, &Method::POST, &[], body.clone()).await;
            // The gateway's limit on registrations per client, or the users service shedding
            // a burst of password hashing: wait, as `Retry-After` says.
            while r.as_ref().is_ok_and(|r| {
                r.status == http::StatusCode::TOO_MANY_REQUESTS
                    || r.status == http::StatusCode::SERVICE_UNAVAILABLE
            }) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                r = send(&mut conn, t, &Method::POST, &[], body.clone()).await;
            }
            let r = r.map_err(|e| SuiteError::Failed(format!("registering driver {i}: {e}")))?;
            if r.status != http::StatusCode::CREATED {
                return Err(SuiteError::Failed(format!(
                    "registering driver {i} answered {}: {}",
                    r.status, r.body
                )));
            }
        }
    });
    for r in futures_util::future::join_all(workers).await {
        r?;
    }
    Ok(())
}

/// Waits until parks, payments and users report no event of another service left to apply.
async fn caught_up(ports: Ports) -> Result<(), SuiteError> {
    let started = Instant::now();
    loop {
        let mut lagging = Vec::new();
        // Payments first: once it has nothing left, parks' reading after it sees every invoice
        // payments will write for what parks wrote so far.
        for (name, port) in [
            ("payments", ports.payments),
            ("parks", ports.parks),
            ("users", ports.users),
        ] {
            if lag(name, port).await? != Some(0.0) {
                lagging.push(name);
            }
        }
        if lagging.is_empty() {
            return Ok(());
        }
        if started.elapsed() > CATCH_UP {
            return Err(SuiteError::Failed(format!(
                "{} still had events to apply after {} s",
                lagging.join(" and "),
                CATCH_UP.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How often the lag is sampled during the load.
const LAG_EVERY: Duration = Duration::from_millis(250);

/// The most events parks, payments and users had left to apply together, sampled every
/// [`LAG_EVERY`] from `from` until `end`: whether the consumers keep up under the load.
async fn most_lag(ports: Ports, from: Instant, end: Instant) -> f64 {
    tokio::time::sleep_until(from.into()).await;
    let mut most = 0.0f64;
    while Instant::now() < end {
        let mut now = 0.0;
        for (name, port) in [
            ("payments", ports.payments),
            ("parks", ports.parks),
            ("users", ports.users),
        ] {
            now += lag(name, port).await.ok().flatten().unwrap_or(0.0);
        }
        most = most.max(now);
        tokio::time::sleep(LAG_EVERY).await;
    }
    most
}

/// The events a service (`name` on `port`) has left to apply, from its `/metrics`.
async fn lag(name: &str, port: u16) -> Result<Option<f64>, SuiteError> {
    let t = target(port, "/metrics")?;
    let mut conn = t
        .connect()
        .await
        .map_err(|k| SuiteError::Failed(format!("{name} /metrics: {k:?}")))?;
    let out = t
        .outgoing(&Method::GET, &[], Bytes::new())
        .map_err(|e| SuiteError::Failed(e.to_string()))?;
    let (answer, _) = conn
        .send(&out)
        .await
        .map_err(|e| SuiteError::Failed(format!("{name} /metrics: {e:?}")))?;
    Ok(lag_of(&String::from_utf8_lossy(&answer.body)))
}

/// The events a service's metrics' text shows on their way: its consumers' lags, and (with
/// the services apart) its own events not yet on the broker; `None` when it shows no consumer
/// lag yet.
pub fn lag_of(metrics: &str) -> Option<f64> {
    let value = |suffix: &str| -> Option<Vec<f64>> {
        metrics
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains(suffix))
            .map(|l| l.rsplit(' ').next().and_then(|v| v.parse().ok()))
            .collect()
    };
    let lags = value("_consumer_lag_events")?;
    let unpublished = value("_outbox_unpublished_events")?;
    (!lags.is_empty()).then(|| lags.iter().chain(&unpublished).sum())
}

/// The time of a plate read: now, but always after the client's previous one (an exit in the
/// same millisecond as its entrance is a stay of zero, and the next entrance must come after).
fn read_time(last: &mut i64) -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    *last = now.max(*last + 1);
    rfc3339_ms(*last)
}

/// `ms` since the epoch as RFC 3339 with milliseconds, UTC.
fn rfc3339_ms(ms: i64) -> String {
    let t = SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let mut s = String::new();
    pms_net::utc::write_rfc3339(&mut s, t, true);
    s
}

/// What one client counted.
struct Tally {
    exits: u64,
    priced_exits: u64,
    samples: Vec<String>,
}

async fn drive(api: Arc<Api>, load: &Load, token: String) -> Result<Outcome, SuiteError> {
    let collector = Collector::new(CollectConfig {
        warmup: load.warmup,
        ..CollectConfig::default()
    })
    .map_err(|e| SuiteError::io("starting the collector", e))?;
    let start = collector.start().into_std();
    let measure_from = start + load.warmup;
    let end = start + load.duration;
    let key = |id: i64| -> Result<HeaderValue, SuiteError> {
        let k = load
            .keys
            .iter()
            .find(|(b, _)| *b == id)
            .map(|(_, k)| k.as_str())
            .ok_or_else(|| SuiteError::Failed(format!("no key for barrier {id}")))?;
        HeaderValue::try_from(k).map_err(|e| SuiteError::Failed(format!("barrier key: {e}")))
    };
    // The quoted car parks in park 1 for the whole run.
    let parked = plate(load.clients);
    let (park, entrance, _) = barriers_of(0);
    let mut conn = api.connect().await?;
    let mut last = 0;
    let r = send(
        &mut conn,
        &api.entrance,
        &Method::POST,
        &[(DEVICE_KEY, key(entrance)?)],
        plate_read(entrance, park, &parked, &read_time(&mut last)),
    )
    .await
    .map_err(|e| SuiteError::Failed(format!("parking the quoted car: {e}")))?;
    if r.body["success"] != true {
        return Err(SuiteError::Failed(format!(
            "parking the quoted car answered {}: {}",
            r.status, r.body
        )));
    }
    let clients = load.clients as f64;
    let ticker = tokio::spawn(collector.clone().tick(move |_| clients, |_| {}));
    let windows = load
        .soak
        .as_ref()
        .map(|soak| Arc::new(Windows::new(measure_from, soak.window)));
    let mut tasks = Vec::new();
    for c in 0..load.clients {
        let (park, entrance, exit) = barriers_of(c);
        let keys = (key(entrance)?, key(exit)?);
        let api = api.clone();
        let collector = collector.clone();
        let schedule = load
            .rate
            .map(|rate| Schedule::of(c, load.clients, rate, start));
        let windows = windows.clone();
        tasks.push(tokio::spawn(async move {
            let _active = collector.enter();
            car(
                &api,
                c,
                park,
                (entrance, exit),
                keys,
                &collector,
                (measure_from, end),
                schedule,
                windows.as_deref(),
            )
            .await
        }));
    }
    // A soak's people and memory readings, beside the barriers.
    let people = match (&load.soak, &windows) {
        (Some(soak), Some(windows)) => {
            let (gateway, customer) = (api.gateway, customer(load.clients + 1));
            let password = DRIVER_PASSWORD.to_owned();
            let w = windows.clone();
            let signing = tokio::spawn({
                let (customer, password) = (customer.clone(), password.clone());
                async move { soak::sign_ins(gateway, customer, password, &w, end).await }
            });
            let w = windows.clone();
            let visiting = tokio::spawn(async move {
                soak::front_office(gateway, customer, password, &w, end).await;
            });
            let reading = tokio::spawn(soak::sample_rss(soak.processes.clone(), measure_from, end));
            Some((signing, visiting, reading))
        }
        _ => None,
    };
    let auth = HeaderValue::try_from(format!("Bearer {token}"))
        .map_err(|e| SuiteError::Failed(format!("token header: {e}")))?;
    let quoter = tokio::spawn(quotes(api.clone(), parked, auth, measure_from, end));
    // Followers change what they measure little at a fixed rate, but would add a poll per
    // display change at saturation: only the paced cells follow displays.
    let followers: Vec<_> = if load.rate.is_some() {
        load.display_keys
            .iter()
            .map(|(id, key)| {
                let key = HeaderValue::try_from(key.as_str())
                    .map_err(|e| SuiteError::Failed(format!("display key: {e}")))?;
                Ok(tokio::spawn(follow_display(
                    api.clone(),
                    *id,
                    key,
                    measure_from,
                    end,
                )))
            })
            .collect::<Result<_, SuiteError>>()?
    } else {
        Vec::new()
    };
    let mut all = Tally {
        exits: 0,
        priced_exits: 0,
        samples: Vec::new(),
    };
    for t in tasks {
        let t = t
            .await
            .map_err(|e| SuiteError::Failed(format!("a barrier client: {e}")))?;
        all.exits += t.exits;
        all.priced_exits += t.priced_exits;
        let room = 10usize.saturating_sub(all.samples.len());
        all.samples.extend(t.samples.into_iter().take(room));
    }
    collector.stop_because(StopReason::Completed);
    let _ = ticker.await;
    let calls = collector
        .finish(load.duration)
        .map_err(|e| SuiteError::io("collecting the barrier calls", e))?;
    let (quotes, quote_failures) = quoter
        .await
        .map_err(|e| SuiteError::Failed(format!("the quote client: {e}")))?;
    let mut display_delays = pms_bench::stats::histogram(3);
    let mut display_failures = 0;
    for f in followers {
        let (h, failed) = f
            .await
            .map_err(|e| SuiteError::Failed(format!("a display follower: {e}")))?;
        display_delays
            .add(&h)
            .map_err(|e| SuiteError::Failed(format!("display delays: {e}")))?;
        display_failures += failed;
    }
    let mut rss = Vec::new();
    if let Some((signing, visiting, reading)) = people {
        let _ = signing.await;
        let _ = visiting.await;
        rss = reading.await.unwrap_or_default();
    }
    Ok(Outcome {
        calls,
        exits: all.exits,
        priced_exits: all.priced_exits,
        settled: Duration::ZERO,
        most_lag: 0.0,
        quotes,
        quote_failures,
        display_delays,
        display_failures,
        window: load.duration - load.warmup,
        failure_samples: all.samples,
        windows: windows.map(|w| w.rows()).unwrap_or_default(),
        rss,
    })
}

fn plate_read(barrier: i64, park: i64, plate: &str, at: &str) -> Value {
    json!({"barrierID": barrier, "parkID": park, "parkNumber": park, "plateNumber": plate, "date": at})
}

/// One car: in and out until `end`, on one kept-alive connection (a new one after a failure),
/// each call when the last is answered or, with a `schedule`, when it is due.
#[allow(clippy::too_many_arguments)]
async fn car(
    api: &Api,
    i: usize,
    park: i64,
    (entrance, exit): (i64, i64),
    (entrance_key, exit_key): (HeaderValue, HeaderValue),
    collector: &Collector,
    (measure_from, end): (Instant, Instant),
    schedule: Option<Schedule>,
    windows: Option<&Windows>,
) -> Tally {
    let start = collector.start().into_std();
    let mut tally = Tally {
        exits: 0,
        priced_exits: 0,
        samples: Vec::new(),
    };
    let plate = plate(i);
    let mut inside = false;
    let mut last = 0;
    let mut conn: Option<Conn> = None;
    let mut calls = 0;
    while Instant::now() < end {
        // On a schedule the latency counts from when the call was due, so a late call is not
        // measured as if it had been sent on time.
        let due = schedule.map(|s| s.due(calls));
        calls += 1;
        if let Some(due) = due {
            if due >= end {
                break;
            }
            tokio::time::sleep_until(due.into()).await;
        }
        let (t, barrier, key) = if inside {
            (&api.exit, exit, &exit_key)
        } else {
            (&api.entrance, entrance, &entrance_key)
        };
        let body = plate_read(barrier, park, &plate, &read_time(&mut last));
        let began = Instant::now();
        let reply = match conn.as_mut() {
            Some(c) => send(c, t, &Method::POST, &[(DEVICE_KEY, key.clone())], body).await,
            None => match api.connect().await {
                Ok(c) => {
                    let c = conn.insert(c);
                    send(c, t, &Method::POST, &[(DEVICE_KEY, key.clone())], body).await
                }
                Err(e) => Err(e.to_string()),
            },
        };
        let elapsed = began.elapsed();
        let lag = due.map_or(Duration::ZERO, |d| began.saturating_duration_since(d));
        let measured = began >= measure_from;
        let (failure, status, kind) = match &reply {
            Ok(r) if r.status == http::StatusCode::OK && r.body["success"] == true => {
                (None, Some(r.status.as_u16()), None)
            }
            Ok(r) => (
                Some(format!("{} {}", r.status, r.body)),
                Some(r.status.as_u16()),
                Some(if r.status == http::StatusCode::OK {
                    ErrorKind::Check
                } else {
                    ErrorKind::Status
                }),
            ),
            Err(e) => {
                conn = None;
                (Some(e.clone()), None, Some(ErrorKind::Reset))
            }
        };
        if let Some(w) = windows {
            // From when it was due, as the collector counts it.
            w.record(
                Series::Barriers,
                due.unwrap_or(began),
                elapsed + lag,
                failure.is_none(),
            );
        }
        collector.record(
            i,
            &Sample {
                due: due.unwrap_or(began).saturating_duration_since(start),
                lag,
                ttfb: status.map(|_| elapsed),
                elapsed,
                connect: None,
                sent: 0,
                received: 0,
                status,
                error: kind,
            },
        );
        match failure {
            None => {
                if measured && inside {
                    tally.exits += 1;
                    let priced = reply.as_ref().is_ok_and(|r| {
                        r.body["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("Your total will be"))
                    });
                    tally.priced_exits += u64::from(priced);
                }
                inside = !inside;
            }
            Some(why) => {
                if measured && tally.samples.len() < 3 {
                    tally.samples.push(format!(
                        "{} {plate}: {why}",
                        if inside { "exit" } else { "entrance" }
                    ));
                }
                // Not straight back in: the refusal may last (a full park, a restart).
                if schedule.is_none() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
    tally
}

/// The parked car's price, asked for until `end`; returns the measured quotes and failures.
async fn quotes(
    api: Arc<Api>,
    plate: String,
    auth: HeaderValue,
    measure_from: Instant,
    end: Instant,
) -> (Histogram<u64>, u64) {
    let mut h = pms_bench::stats::histogram(3);
    let mut failures = 0;
    let Ok(t) = target(api.gateway, &format!("/payments/quote/{plate}")) else {
        return (h, 1);
    };
    let mut conn: Option<Conn> = None;
    while Instant::now() < end {
        let began = Instant::now();
        let ok = match conn.as_mut() {
            Some(c) => send(
                c,
                &t,
                &Method::GET,
                &[(http::header::AUTHORIZATION, auth.clone())],
                Value::Null,
            )
            .await
            .is_ok_and(|r| r.status == http::StatusCode::OK),
            None => {
                if let Ok(c) = api.connect().await {
                    conn = Some(c);
                }
                continue;
            }
        };
        if !ok {
            conn = None;
        }
        if began >= measure_from {
            let took = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
            h.saturating_record(took.max(1));
            failures += u64::from(!ok);
        }
        tokio::time::sleep(QUOTE_PAUSE).await;
    }
    (h, failures)
}

/// Display `id` followed by long poll until `end`; returns the delays measured after
/// `measure_from` (µs, see [`Outcome::display_delays`]) and the polls that failed.
async fn follow_display(
    api: Arc<Api>,
    id: i64,
    key: HeaderValue,
    measure_from: Instant,
    end: Instant,
) -> (Histogram<u64>, u64) {
    let mut h = pms_bench::stats::histogram(3);
    let mut failures = 0;
    let Ok(t) = target(api.gateway, "/display/get") else {
        return (h, 1);
    };
    let mut conn: Option<Conn> = None;
    // The version and text time of the last answer.
    let mut seen: Option<(Value, String)> = None;
    while Instant::now() < end {
        let Some(c) = conn.as_mut() else {
            match api.connect().await {
                Ok(c) => conn = Some(c),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
            continue;
        };
        let mut body = json!({"displayID": id, "waitMs": DISPLAY_WAIT_MS});
        if let Some((version, _)) = &seen {
            body["waitForChangeAfter"] = version.clone();
        }
        let reply = send(c, &t, &Method::POST, &[(DEVICE_KEY, key.clone())], body).await;
        let arrived = SystemTime::now();
        let measured = Instant::now() >= measure_from;
        let r = match reply {
            Ok(r) if r.status == http::StatusCode::OK => r,
            _ => {
                conn = None;
                failures += u64::from(measured);
                continue;
            }
        };
        let updated = r.body["updatedAt"].as_str().unwrap_or_default().to_owned();
        // A new text on the display (not only its park's free spots moving): how long after
        // its barrier wrote it.
        let new_text = seen.as_ref().is_some_and(|(_, was)| *was != updated);
        if let (true, true, Some(delay)) = (measured, new_text, delay_since(&updated, arrived)) {
            h.saturating_record(delay.max(1));
        }
        seen = Some((r.body["version"].clone(), updated));
    }
    (h, failures)
}

/// µs from the RFC 3339 instant `at` to `arrived` (0 when `at` is later); `None` when `at` does
/// not parse.
fn delay_since(at: &str, arrived: SystemTime) -> Option<u64> {
    let at = at.parse::<jiff::Timestamp>().ok()?;
    let arrived = jiff::Timestamp::try_from(arrived).ok()?;
    let us = arrived.as_microsecond().saturating_sub(at.as_microsecond());
    Some(u64::try_from(us).unwrap_or(0))
}

/// `pms device key barrier ID SECRET…` for every barrier the clients use, `secret` saying where
/// the device secret is (`--data-dir DATA` or `--device-secret-file FILE`).
///
/// # Errors
/// `pms` failed or printed nothing.
pub fn keys(
    pms: &Path,
    secret: &[String],
    clients: usize,
) -> Result<Vec<(i64, String)>, SuiteError> {
    device_keys(pms, secret, "barrier", barrier_ids(clients))
}

/// `pms device key display ID SECRET…` for every display followed.
///
/// # Errors
/// `pms` failed or printed nothing.
pub fn display_keys(
    pms: &Path,
    secret: &[String],
    clients: usize,
) -> Result<Vec<(i64, String)>, SuiteError> {
    device_keys(pms, secret, "display", followed_displays(clients))
}

/// `pms device key KIND ID SECRET…` for each of `ids`.
fn device_keys(
    pms: &Path,
    secret: &[String],
    kind: &str,
    ids: Vec<i64>,
) -> Result<Vec<(i64, String)>, SuiteError> {
    ids.into_iter()
        .map(|id| {
            let out = std::process::Command::new(pms)
                .args(["device", "key", kind, &id.to_string()])
                .args(secret)
                .output()
                .map_err(|e| SuiteError::io("running pms device key", e))?;
            let key = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if !out.status.success() || key.is_empty() {
                return Err(SuiteError::Failed(format!(
                    "pms device key {kind} {id}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            Ok((id, key))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_spread_over_the_parks_and_their_two_barrier_pairs() {
        assert_eq!(barriers_of(0), (1, 1, 2));
        assert_eq!(barriers_of(1), (2, 7, 8));
        assert_eq!(barriers_of(4), (5, 25, 26));
        assert_eq!(barriers_of(5), (1, 3, 4), "the second pair of park 1");
        assert_eq!(barriers_of(10), (1, 1, 2));
        assert_eq!(barrier_ids(3), [1, 2, 7, 8, 13, 14]);
        assert_eq!(barrier_ids(100).len(), 20, "every active barrier");
    }

    #[test]
    fn each_park_in_use_has_its_first_entrance_and_exit_display_followed() {
        assert_eq!(followed_displays(1), [1, 2]);
        assert_eq!(followed_displays(3), [1, 2, 10, 11, 19, 20]);
        assert_eq!(followed_displays(100).len(), 10, "five parks, two each");
    }

    #[test]
    fn a_display_delay_runs_from_its_text_time_to_the_answer() {
        let at = "2026-11-30T01:06:41.030Z";
        let arrived = SystemTime::UNIX_EPOCH
            + Duration::from_millis(
                u64::try_from(at.parse::<jiff::Timestamp>().unwrap().as_millisecond()).unwrap()
                    + 12,
            );
        assert_eq!(delay_since(at, arrived), Some(12_000));
        assert_eq!(
            delay_since("2026-11-30T01:06:41.050Z", arrived),
            Some(0),
            "never negative"
        );
        assert_eq!(delay_since("yesterday", arrived), None);
    }

    #[test]
    fn plates_are_portuguese_and_distinct() {
        assert_eq!(plate(0), "00-BK-00");
        assert_eq!(plate(1234), "12-BK-34");
        let all: std::collections::BTreeSet<String> = (0..10_000).map(plate).collect();
        assert_eq!(all.len(), 10_000);
    }

    #[test]
    fn a_schedule_shares_the_rate_and_spreads_the_first_calls() {
        let start = Instant::now();
        let schedules: Vec<Schedule> = (0..4).map(|i| Schedule::of(i, 4, 40.0, start)).collect();
        // 4 clients × 10 calls/s each.
        assert!(schedules
            .iter()
            .all(|s| s.every == Duration::from_millis(100)));
        assert_eq!(schedules[0].due(0), start);
        assert_eq!(schedules[1].due(0), start + Duration::from_millis(25));
        assert_eq!(schedules[3].due(2), start + Duration::from_millis(275));
    }

    #[test]
    fn read_times_always_move_forward() {
        let mut last = i64::MAX / 2;
        let a = read_time(&mut last);
        let b = read_time(&mut last);
        assert_ne!(a, b);
        assert_eq!(last, i64::MAX / 2 + 2);
    }

    #[test]
    fn the_lag_is_every_consumers_and_zero_only_when_each_says_so() {
        let caught = "# TYPE x gauge\npms_parks_consumer_lag_events{source=\"users\"} 0\npms_parks_consumer_lag_events{source=\"payments\"} 0\n";
        assert_eq!(lag_of(caught), Some(0.0));
        let behind = caught.replace("payments\"} 0", "payments\"} 3");
        assert_eq!(lag_of(&behind), Some(3.0));
        assert_eq!(
            lag_of("pms_parks_outbox_events 4\n"),
            None,
            "no lag reported yet"
        );
        let unpublished = format!("{caught}pms_parks_outbox_unpublished_events 2\n");
        assert_eq!(lag_of(&unpublished), Some(2.0), "not yet on the broker");
    }
}
