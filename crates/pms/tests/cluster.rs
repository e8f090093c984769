//! PMS as a cluster on one machine, as the proof of the distributed mode: PostgreSQL
//! (`scripts/pg.sh`), a real `nats-server`, two replicas each of users, parks and payments, and
//! one gateway with both replicas of each as its endpoints, all separate `pms` processes on
//! loopback. A mixed workload runs through the gateway — `getAllUsers`, park and invoice reads,
//! logins, registrations, and several barrier clients driving cars of their own in and out of two
//! parks at once (paced around one kill, as fast as answered around the next) — while one
//! replica of each service in turn is killed with SIGKILL, with requests in flight, and started
//! again. Then:
//!
//! - no idempotent request failed; a non-idempotent one that failed got a 502 or 503 and
//!   succeeded when the client sent it again (a registration whose first try had gone through
//!   finds itself already registered: also a success);
//! - the databases agree, read from them once the events have gone through: every closed visit
//!   has exactly one invoice and every invoice a closed visit, the visits open in payments are
//!   those open in parks, nothing was set aside, nothing waits to be published, every consumer's
//!   position has reached its producer's last event, and every customer the users service has
//!   reached parks and payments (no event lost or applied twice);
//! - the gateway stopped sending to each killed replica (no more failed connects to it) and sent
//!   to it again once it was ready; both times are printed.
//! - a display and a page following the parks through the gateway get the same versions from
//!   either parks replica, so their long polls wait instead of answering at once;
//! - a person signs in to the front office (two replicas, sessions shared in NATS), stays
//!   signed in and signs out, whichever replica the gateway picks for each request.
//!
//! It also prints the throughput of `getAllUsers` with two users replicas and with one, measured
//! in the same run. `scripts/cluster.sh` runs this test with a release build and more load;
//! `PMS_CLUSTER_SECONDS` sets how long the load runs around each kill (default 2), and
//! `PMS_CLUSTER_ROUNDS` how many times each service loses a replica (default 1; the rounds
//! alternate between the first and the second replica).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use common::{free_port, get, post, sign_in};

const PMS: &str = env!("CARGO_BIN_EXE_pms");
const SERVICES: [&str; 3] = ["users", "parks", "payments"];
/// The front office, two replicas behind the gateway too, sharing their sessions in NATS.
const WEB: &str = "web";
const PASSWORD: &str = "Cluster#Seed2026";
/// The key the gateway trusts the front offices with (`[auth.forwarder]`).
const FORWARDER_KEY: &str = "cluster-forwarder-key-0123456789";
/// What must be 0 once every event went through: the proof that none was lost or applied
/// twice.
const SETTLED: [(&str, &str); 6] = [
    (
        "closed visits without exactly one invoice",
        "SELECT count(*) FROM parks.visits v WHERE v.left_at_ms IS NOT NULL \
         AND (SELECT count(*) FROM payments.invoices i WHERE i.visit_id = v.id) <> 1",
    ),
    (
        "invoices of no closed visit",
        "SELECT count(*) FROM payments.invoices i WHERE NOT EXISTS \
         (SELECT 1 FROM parks.visits v WHERE v.id = i.visit_id AND v.left_at_ms IS NOT NULL)",
    ),
    (
        "visits open in parks and not in payments",
        "SELECT count(*) FROM parks.visits v WHERE v.left_at_ms IS NULL AND NOT EXISTS \
         (SELECT 1 FROM payments.open_visits o WHERE o.visit_id = v.id)",
    ),
    (
        "visits open in payments and not in parks",
        "SELECT count(*) FROM payments.open_visits o WHERE NOT EXISTS \
         (SELECT 1 FROM parks.visits v WHERE v.id = o.visit_id AND v.left_at_ms IS NULL)",
    ),
    (
        "events set aside",
        "SELECT (SELECT count(*) FROM users.parked_events) \
         + (SELECT count(*) FROM parks.parked_events) \
         + (SELECT count(*) FROM payments.parked_events)",
    ),
    (
        "events not yet on the broker",
        "SELECT (SELECT count(*) FROM users.outbox WHERE published_at IS NULL) \
         + (SELECT count(*) FROM parks.outbox WHERE published_at IS NULL) \
         + (SELECT count(*) FROM payments.outbox WHERE published_at IS NULL)",
    ),
];
/// Each consuming service and a producer it reads: its position must reach the producer's last
/// event.
const STREAMS: [(&str, &str); 5] = [
    ("parks", "users"),
    ("parks", "payments"),
    ("payments", "parks"),
    ("payments", "users"),
    ("users", "payments"),
];
/// Barrier clients at once, each with cars of its own.
const VISITORS: u64 = 8;
/// Cars per barrier client.
const CARS_EACH: u64 = 2;
/// A paced barrier client's pause after each passage: about 40 passages a second each, so the
/// event relays catch up between passages, and two passages close in time commit in either
/// order (where an out-of-order publish would show).
const PACE: Duration = Duration::from_millis(25);
/// Requests the workload has in flight at most (one per task): reads, logins, registrations
/// and the barrier clients.
const CLIENTS_AT_ONCE: u32 = 3 + VISITORS as u32;

/// One `pms` process, killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The cluster's processes and where they listen.
struct Cluster {
    dir: tempfile::TempDir,
    db: String,
    nats: String,
    /// `users1`, `parks2`, …, `gateway`.
    procs: BTreeMap<String, Proc>,
    ports: BTreeMap<String, u16>,
    gateway: u16,
    admin: u16,
}

impl Cluster {
    fn start(db: String, nats: String) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("device-secret"),
            "cluster-device-secret-0123456789",
        )
        .expect("device secret");
        let mut ports = BTreeMap::new();
        for svc in SERVICES.iter().chain(&[WEB]) {
            for r in 1..=2 {
                ports.insert(format!("{svc}{r}"), free_port());
            }
        }
        let (gateway, admin) = (free_port(), free_port());
        let mut c = Cluster {
            dir,
            db,
            nats,
            procs: BTreeMap::new(),
            ports,
            gateway,
            admin,
        };
        // Both replicas of each service at once: their migrations and seeding race.
        for r in 1..=2 {
            for svc in SERVICES {
                c.start_replica(svc, r);
            }
            c.start_web(r);
        }
        for name in c.ports.keys() {
            wait_ready(c.ports[name], "/readyz");
        }
        c.start_gateway();
        c
    }

    fn start_replica(&mut self, svc: &str, r: u8) {
        let name = format!("{svc}{r}");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.log")))
            .expect("log file");
        let mut cmd = Command::new(PMS);
        cmd.arg(svc)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.ports[&name]))
            .arg("--data-dir")
            .arg(self.dir.path().join(&name))
            .args(["--database-url", &self.db, "--nats-url", &self.nats]);
        match svc {
            "users" => cmd.args(["--argon2-m-kib", "64", "--argon2-t", "1"]),
            "parks" => cmd
                .arg("--device-secret-file")
                .arg(self.dir.path().join("device-secret")),
            _ => &mut cmd,
        };
        let child = cmd
            .env("PMS_JWT_SECRET", "cluster-jwt-secret-0123456789abcdef")
            .env("PMS_SEED_PASSWORD", PASSWORD)
            .env("PMS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start a replica");
        self.procs.insert(name, Proc(child));
    }

    /// Front office `r`, calling the cluster's gateway, its sessions in the cluster's NATS.
    fn start_web(&mut self, r: u8) {
        let name = format!("{WEB}{r}");
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log"))).expect("log");
        let child = Command::new(PMS)
            .arg(WEB)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.ports[&name]))
            .arg("--gateway-url")
            .arg(format!("http://127.0.0.1:{}", self.gateway))
            .args(["--nats-url", &self.nats])
            .env("PMS_FORWARDER_KEY", FORWARDER_KEY)
            .env("PMS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start a front office");
        self.procs.insert(name, Proc(child));
    }

    fn start_gateway(&mut self) {
        let text = std::fs::read_to_string(repo().join("config/gateway.toml")).expect("config");
        let mut out = String::new();
        let mut upstream = None;
        for line in text.lines() {
            if line == "[[upstreams]]" {
                upstream = Some(String::new());
            } else if line.starts_with('[') {
                upstream = None;
            }
            if let (Some(u), Some(name)) = (upstream.as_mut(), line.strip_prefix("name = ")) {
                *u = name.trim_matches('"').to_owned();
            }
            let line = match (line, upstream.as_deref()) {
                ("listen = \"127.0.0.1:9901\"", _) => {
                    format!("listen = \"127.0.0.1:{}\"", self.admin)
                }
                ("listen = \"127.0.0.1:9090\"", _) => {
                    format!("listen = \"127.0.0.1:{}\"", self.gateway)
                }
                (l, Some(u))
                    if l.starts_with("endpoints = ") && (SERVICES.contains(&u) || u == WEB) =>
                {
                    format!(
                        "endpoints = [\"{}\", \"{}\"]",
                        self.endpoint(&format!("{u}1")),
                        self.endpoint(&format!("{u}2"))
                    )
                }
                (l, _) => l.to_owned(),
            };
            out.push_str(&line);
            out.push('\n');
        }
        let config = self.dir.path().join("gateway.toml");
        std::fs::write(&config, out).expect("gateway config");
        let log = std::fs::File::create(self.dir.path().join("gateway.log")).expect("log");
        let child = Command::new(PMS)
            .arg("gateway")
            .arg("--config")
            .arg(&config)
            .env("PMS_JWT_SECRET", "cluster-jwt-secret-0123456789abcdef")
            .env("PMS_FORWARDER_KEY", FORWARDER_KEY)
            .env("PMS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the gateway");
        self.procs.insert("gateway".into(), Proc(child));
        wait_ready(self.admin, "/readyz");
    }

    fn endpoint(&self, replica: &str) -> String {
        format!("http://127.0.0.1:{}", self.ports[replica])
    }

    fn kill(&mut self, replica: &str) {
        if let Some(mut p) = self.procs.remove(replica) {
            let _ = p.0.kill();
            let _ = p.0.wait();
        }
    }

    /// The key of device `kind` (`barrier`, `display`) `id`.
    fn device_key(&self, kind: &str, id: u8) -> String {
        let out = Command::new(PMS)
            .args(["device", "key", kind, &id.to_string()])
            .arg("--device-secret-file")
            .arg(self.dir.path().join("device-secret"))
            .output()
            .expect("pms device key");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Every process's log, each under its name.
    fn logs(&self) -> String {
        let mut names: Vec<String> = self.ports.keys().cloned().collect();
        names.push("gateway".into());
        names
            .iter()
            .map(|n| format!("--- {n}\n{}", self.log(n)))
            .collect()
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Waits until `GET path` on `port` answers 200 (60 s at most: debug builds migrate slowly).
fn wait_ready(port: u16, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
            let mut resp = String::new();
            if std::io::Write::write_all(&mut s, req.as_bytes()).is_ok()
                && std::io::Read::read_to_string(&mut s, &mut resp).is_ok()
                && resp.starts_with("HTTP/1.1 200")
            {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{port}{path} never answered 200");
        std::thread::sleep(Duration::from_millis(50));
    }
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// A client of the gateway (keep-alive, as an application's would be).
#[derive(Clone)]
struct Api {
    client: HttpClient,
    base: String,
}

impl Api {
    /// One request: the status and the body as JSON (`Null` when not JSON), or why none came.
    async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<(u16, Value), String> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
        let resp = tokio::time::timeout(Duration::from_secs(30), self.client.request(req))
            .await
            .map_err(|_| "no answer in 30 s".to_string())?
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }
}

/// What the workload saw, by kind of request.
#[derive(Default, Debug)]
struct Tally {
    /// Kind → requests answered as they should be, first time.
    ok: BTreeMap<&'static str, u64>,
    /// Kind → requests that failed with a 502/503 (or no answer) and succeeded when sent again.
    retried: BTreeMap<&'static str, u64>,
    /// What went wrong that must not: an idempotent request that failed, a retry that never
    /// succeeded, an answer of the wrong kind.
    wrong: Vec<String>,
}

impl Tally {
    fn ok(&mut self, kind: &'static str, retried: bool) {
        let map = if retried {
            &mut self.retried
        } else {
            &mut self.ok
        };
        *map.entry(kind).or_default() += 1;
    }
}

type Shared = Arc<Mutex<Tally>>;

fn record(tally: &Shared, f: impl FnOnce(&mut Tally)) {
    let mut t = tally
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(&mut t);
}

/// Whether a failed request is one the client may send again: a 502 or 503 from the gateway,
/// or no answer at all.
fn retryable(got: &Result<(u16, Value), String>) -> bool {
    matches!(got, Err(_) | Ok((502 | 503, _)))
}

/// Sends a non-idempotent request until it gets an answer that is not a retryable failure
/// (at most 20 tries, 100 ms apart, besides the waits for the rate limit); whether it had to be
/// sent again, and the last answer.
async fn until_answered(
    api: &Api,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (bool, Result<(u16, Value), String>) {
    let mut got = within_limits(api, method, path, headers, body).await;
    let mut again = false;
    for _ in 0..20 {
        if !retryable(&got) {
            break;
        }
        again = true;
        tokio::time::sleep(Duration::from_millis(100)).await;
        got = within_limits(api, method, path, headers, body).await;
    }
    (again, got)
}

/// One request, sent again while the gateway's rate limit refuses it (429, before the upstream
/// saw it) as a client honouring `Retry-After` would: the shipped limits on logins and
/// registrations are tighter than this workload's pace.
async fn within_limits(
    api: &Api,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Result<(u16, Value), String> {
    loop {
        match api.call(method, path, headers, Some(body)).await {
            Ok((429, v)) if v["error"]["code"] == "too_many_requests" => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            other => return other,
        }
    }
}

async fn login(api: &Api, email: &str) -> String {
    let body = json!({"email": email, "password": PASSWORD});
    let (_, got) = until_answered(api, "POST", "/users/login", &[], &body).await;
    match got {
        Ok((200, v)) => v["token"].as_str().unwrap_or_default().to_owned(),
        other => panic!("login of {email}: {other:?}"),
    }
}

/// Reads that must never fail, one of each service (as the supervisor).
async fn reads(api: Api, token: String, stop: Arc<AtomicBool>, tally: Shared) {
    let auth = format!("Bearer {token}");
    let paths = [
        ("getAllUsers", "/users/getAllUsers?limit=5"),
        ("park list", "/parks/getAllParks"),
        ("invoices", "/payments/getAllPayments?limit=5"),
    ];
    while !stop.load(Ordering::Relaxed) {
        for (kind, path) in paths {
            match api
                .call("GET", path, &[("authorization", &auth)], None)
                .await
            {
                Ok((200, _)) => record(&tally, |t| t.ok(kind, false)),
                other => record(&tally, |t| t.wrong.push(format!("GET {path}: {other:?}"))),
            }
        }
    }
}

/// Logins of a demo customer, sent again after a 502/503 as a client would.
async fn logins(api: Api, stop: Arc<AtomicBool>, tally: Shared) {
    let body = json!({"email": "leoKim@isep.ipp.pt", "password": PASSWORD});
    while !stop.load(Ordering::Relaxed) {
        match until_answered(&api, "POST", "/users/login", &[], &body).await {
            (again, Ok((200, _))) => record(&tally, |t| t.ok("login", again)),
            (_, other) => record(&tally, |t| t.wrong.push(format!("login: {other:?}"))),
        }
    }
}

/// New customers, one after another; returns how many were registered.
async fn registrations(api: Api, stop: Arc<AtomicBool>, tally: Shared) -> u64 {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let body = json!({
            "firstName": "Cluster", "lastName": format!("Driver {n}"),
            "email": format!("driver{n}@cluster.pms.test"), "password": PASSWORD,
            "nif": 400_000_000 + n, "licensePlateNumber": plate(n),
            "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "FUEL",
        });
        match until_answered(&api, "POST", "/users/createUser", &[], &body).await {
            (again, Ok((201, _))) => record(&tally, |t| t.ok("registration", again)),
            // The first try went through before its answer was lost (this e-mail and NIF
            // are no one else's).
            (true, Ok((409, v))) if v["error"]["code"] == "already_registered" => {
                record(&tally, |t| t.ok("registration", true));
            }
            (_, other) => record(&tally, |t| {
                t.wrong.push(format!("registration {n}: {other:?}"))
            }),
        }
        n += 1;
    }
    n
}

/// Plate number `n` in the `00-AA-00` form.
fn plate(n: u64) -> String {
    let letters = |k: u64| {
        let a = char::from(b'A' + u8::try_from(k / 26 % 26).unwrap_or(0));
        let b = char::from(b'A' + u8::try_from(k % 26).unwrap_or(0));
        format!("{a}{b}")
    };
    format!(
        "{:02}-{}-{:02}",
        n % 100,
        letters(n / 100),
        n / 100 / 676 % 100
    )
}

/// A park's pair of barriers: park id, entrance and exit barrier ids, and their keys.
#[derive(Clone)]
struct Gate {
    park: u8,
    entrance: (u8, String),
    exit: (u8, String),
}

/// Registers the cars the visitors drive (`count` drivers, one plate each, apart from the
/// registrations the workload makes); returns their plates.
async fn register_drivers(api: &Api, count: u64) -> Vec<String> {
    let mut plates = Vec::new();
    for k in 0..count {
        let plate = plate(10_000 + k);
        let body = json!({
            "firstName": "Visiting", "lastName": format!("Driver {k}"),
            "email": format!("visitor{k}@visitors.pms.test"), "password": PASSWORD,
            "nif": 500_000_000 + k, "licensePlateNumber": plate,
            "vehicleType": "AUTOMOBILE", "vehicleEnergySource": "FUEL",
        });
        match until_answered(api, "POST", "/users/createUser", &[], &body).await {
            (_, Ok((201, _))) => plates.push(plate),
            other => panic!("registering driver {k}: {other:?}"),
        }
    }
    plates
}

/// Now, at least a millisecond after `last` (a plate's last passage), as RFC 3339.
fn passage_time(last: &mut i64) -> String {
    let now = jiff::Timestamp::now().as_millisecond().max(*last + 1);
    *last = now;
    jiff::Timestamp::from_millisecond(now)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// One barrier client: its `plates` in and out of `gate`'s park, one after another, at the
/// time of the day; a pause between passages while `paced` holds, none otherwise. A barrier
/// sends its read again after a 502/503: the same plate, barrier and time is the same passage
/// to parks, so a retry never opens a second visit. Returns the visits completed.
async fn visitor(
    api: Api,
    gate: Gate,
    plates: Vec<String>,
    paced: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    tally: Shared,
) -> u64 {
    let mut last = vec![0i64; plates.len()];
    let mut done = 0u64;
    let mut turn = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let i = turn % plates.len();
        turn += 1;
        let plate = &plates[i];
        for (kind, path, (barrier, key)) in [
            ("entrance", "/barriers/entrance", &gate.entrance),
            ("exit", "/barriers/exit", &gate.exit),
        ] {
            let date = passage_time(&mut last[i]);
            let body = json!({
                "barrierID": barrier, "parkID": gate.park, "parkNumber": gate.park,
                "plateNumber": plate, "date": date,
            });
            let headers = [("x-device-key", key.as_str())];
            match until_answered(&api, "POST", path, &headers, &body).await {
                (again, Ok((200, v))) if v["success"] == true => {
                    record(&tally, |t| t.ok(kind, again))
                }
                (_, other) => {
                    record(&tally, |t| {
                        t.wrong.push(format!("{kind} {plate} {date}: {other:?}"))
                    });
                    return done;
                }
            }
            if paced.load(Ordering::Relaxed) {
                tokio::time::sleep(PACE).await;
            }
        }
        done += 1;
    }
    done
}

/// `getAllUsers` answered per second by `clients` clients for `over`.
async fn throughput(api: &Api, token: &str, clients: usize, over: Duration) -> f64 {
    let auth = format!("Bearer {token}");
    let until = Instant::now() + over;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (api, auth) = (api.clone(), auth.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < until {
                if let Ok((200, _)) = api
                    .call(
                        "GET",
                        "/users/getAllUsers?limit=5",
                        &[("authorization", &auth)],
                        None,
                    )
                    .await
                {
                    n += 1;
                }
            }
            n
        }));
    }
    let mut total = 0u64;
    for t in tasks {
        total += t.await.unwrap_or(0);
    }
    total as f64 / over.as_secs_f64()
}

/// One series' value in a Prometheus text.
fn series(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The gateway admin listener's `/metrics`, as text.
fn scrape(admin: u16) -> String {
    let resp = common::exchange(
        admin,
        "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    resp.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

fn psql(db: &str, sql: &str) -> String {
    let bin = ["psql"]
        .into_iter()
        .map(PathBuf::from)
        .chain(
            std::fs::read_dir("/usr/lib/postgresql")
                .into_iter()
                .flatten()
                .flatten()
                .map(|v| v.path().join("bin/psql")),
        )
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .expect("psql");
    let out = Command::new(bin)
        .args(["-X", "-A", "-t", "-q", db, "-c", sql])
        .output()
        .expect("psql");
    assert!(out.status.success(), "{sql}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn replicas_killed_under_load_lose_no_request_and_no_event() {
    if pms_testkit::pg::skipped() || pms_testkit::nats::skipped() {
        eprintln!("skipped: PostgreSQL or NATS tests are switched off");
        return;
    }
    let db = pms_testkit::pg::shared().fresh_database();
    let nats = pms_testkit::nats::NatsServer::start();
    let mut cluster = Cluster::start(db.clone(), nats.url.clone());
    let seconds: u64 = std::env::var("PMS_CLUSTER_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let phase = Duration::from_secs(seconds);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let api = Api {
        client: Client::builder(TokioExecutor::new()).build_http(),
        base: format!("http://127.0.0.1:{}", cluster.gateway),
    };
    // Park 1's and park 2's first pairs of barriers.
    let gates: Vec<Gate> = [(1, 1, 2), (2, 7, 8)]
        .into_iter()
        .map(|(park, entrance, exit)| Gate {
            park,
            entrance: (entrance, cluster.device_key("barrier", entrance)),
            exit: (exit, cluster.device_key("barrier", exit)),
        })
        .collect();
    let rounds: u64 = std::env::var("PMS_CLUSTER_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let tally: Shared = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));

    // Parks and payments learn of the demo customers from the users service's events.
    let q = |sql: &str| psql(&db, sql);
    let customers_everywhere = || {
        let customers = q("SELECT count(*) FROM users.users");
        customers == q("SELECT count(*) FROM parks.customers")
            && customers == q("SELECT count(*) FROM payments.customers")
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !customers_everywhere() {
        assert!(
            Instant::now() < deadline,
            "the demo customers never reached parks and payments: {} in users, {} in parks, \
             {} in payments\n{}",
            q("SELECT count(*) FROM users.users"),
            q("SELECT count(*) FROM parks.customers"),
            q("SELECT count(*) FROM payments.customers"),
            cluster.logs(),
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let (two, one) = rt.block_on(async {
        let token = login(&api, "supervisor@isep.ipp.pt").await;
        // Two users replicas against one, in the same run: users2 drained with SIGTERM, and
        // measured once the gateway's checks have taken it out.
        let two = throughput(&api, &token, 8, phase).await;
        let _ = Command::new("kill")
            .args(["-TERM", &cluster.procs["users2"].0.id().to_string()])
            .status();
        let gauge = format!(
            r#"pms_gateway_upstream_endpoint_ready{{upstream="users",endpoint="{}"}}"#,
            cluster.endpoint("users2")
        );
        while series(&scrape(cluster.admin), &gauge) != 0.0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let one = throughput(&api, &token, 8, phase).await;
        (two, one)
    });
    cluster.kill("users2");
    cluster.start_replica("users", 2);
    wait_ready(cluster.ports["users2"], "/readyz");

    // The visitors' cars, known to parks and payments before they drive.
    let plates = rt.block_on(register_drivers(&api, VISITORS * CARS_EACH));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !customers_everywhere() {
        assert!(
            Instant::now() < deadline,
            "the drivers never reached parks and payments"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let paced = Arc::new(AtomicBool::new(true));
    let (registered, visited, timings) = rt.block_on(async {
        let token = login(&api, "supervisor@isep.ipp.pt").await;
        let tasks = (
            tokio::spawn(reads(api.clone(), token, stop.clone(), tally.clone())),
            tokio::spawn(logins(api.clone(), stop.clone(), tally.clone())),
            tokio::spawn(registrations(api.clone(), stop.clone(), tally.clone())),
        );
        let visitors: Vec<_> = plates
            .chunks(usize::try_from(CARS_EACH).unwrap_or(1))
            .zip(gates.iter().cycle())
            .map(|(cars, gate)| {
                tokio::spawn(visitor(
                    api.clone(),
                    gate.clone(),
                    cars.to_vec(),
                    paced.clone(),
                    stop.clone(),
                    tally.clone(),
                ))
            })
            .collect();
        tokio::time::sleep(phase).await;
        let mut timings = Vec::new();
        let kills =
            (0..rounds).flat_map(|round| SERVICES.map(|svc| (svc, u8::from(round % 2 == 1) + 1)));
        for (i, (svc, r)) in kills.enumerate() {
            // Paced around one kill, unpaced (as fast as the cluster answers) around the next.
            paced.store(i % 2 == 0, Ordering::Relaxed);
            let replica = format!("{svc}{r}");
            let failures =
                format!(r#"pms_gateway_upstream_connect_failures_total{{upstream="{svc}"}}"#);
            let gauge = format!(
                r#"pms_gateway_upstream_endpoint_ready{{upstream="{svc}",endpoint="{}"}}"#,
                cluster.endpoint(&replica)
            );
            let killed = Instant::now();
            let before = series(&scrape(cluster.admin), &failures);
            cluster.kill(&replica);
            // While the load runs without it: when the last connect to it failed.
            let mut last = (before, killed);
            while killed.elapsed() < phase.max(Duration::from_secs(3)) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let now = series(&scrape(cluster.admin), &failures);
                if now != last.0 {
                    last = (now, Instant::now());
                }
            }
            let (failed, ejected) = (last.0 - before, last.1.duration_since(killed));
            cluster.start_replica(svc, r);
            let port = cluster.ports[&replica];
            tokio::task::spawn_blocking(move || wait_ready(port, "/readyz"))
                .await
                .expect("waiting for the replica");
            let ready = Instant::now();
            while series(&scrape(cluster.admin), &gauge) != 1.0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            timings.push((replica, failed, ejected, ready.elapsed()));
            tokio::time::sleep(phase).await;
        }
        stop.store(true, Ordering::Relaxed);
        let _ = tasks.0.await;
        let _ = tasks.1.await;
        let registered = tasks.2.await.unwrap_or(0);
        let mut visited = 0;
        for v in visitors {
            visited += v.await.unwrap_or(0);
        }
        (registered, visited, timings)
    });

    // The last events through the broker; then what must hold between the databases.
    let broken = || -> Vec<String> {
        let mut broken: Vec<String> = SETTLED
            .iter()
            .filter_map(|(what, sql)| {
                let n = q(sql);
                (n != "0").then(|| format!("{what}: {n}"))
            })
            .collect();
        for (consumer, source) in STREAMS {
            let at = q(&format!(
                "SELECT COALESCE(MAX(position), 0) FROM {consumer}.event_positions WHERE source = '{source}'"
            ));
            let head = q(&format!("SELECT COALESCE(MAX(id), 0) FROM {source}.outbox"));
            if at != head {
                broken.push(format!("{consumer} at {at} of {source}'s {head} events"));
            }
        }
        if !customers_everywhere() {
            broken.push("a customer missing in parks or payments".into());
        }
        broken
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !broken().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }

    let t = tally
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    println!(
        "cluster: getAllUsers, 8 clients: {two:.0}/s with two users replicas, {one:.0}/s with one"
    );
    for (replica, failed, ejected, back) in &timings {
        println!(
            "cluster: {replica} killed: {failed} failed connects to it, the last {} ms after; \
             ready again → checked ready by the gateway in {} ms",
            ejected.as_millis(),
            back.as_millis()
        );
    }
    println!("cluster: answered first time {:?}", t.ok);
    println!(
        "cluster: answered when sent again after a 502/503 {:?}",
        t.retried
    );
    println!("cluster: {registered} registrations, {visited} visits");
    let closed = q("SELECT count(*) FROM parks.visits WHERE left_at_ms IS NOT NULL");
    let invoices = q("SELECT count(*) FROM payments.invoices");
    let distinct = q("SELECT count(DISTINCT visit_id) FROM payments.invoices");
    let priced = q(
        "SELECT count(*) FROM parks.visits WHERE left_at_ms IS NOT NULL AND invoice_id IS NOT NULL",
    );
    let emails = q("SELECT count(*) FROM users.users WHERE email LIKE '%@cluster.pms.test'");
    let customers = q("SELECT count(*) FROM users.users");
    let in_parks = q("SELECT count(*) FROM parks.customers");
    let in_payments = q("SELECT count(*) FROM payments.customers");
    println!(
        "cluster: closed visits {closed}, invoices {invoices} ({distinct} visits), priced {priced}; \
         customers {customers}, in parks {in_parks}, in payments {in_payments}"
    );

    assert!(
        t.wrong.is_empty(),
        "requests that went wrong: {:#?}\n{}",
        t.wrong,
        cluster.logs()
    );
    assert!(visited > 0 && registered > 0, "the workload ran");
    assert_eq!(closed, visited.to_string(), "every visit closed once");
    assert_eq!(invoices, closed, "one invoice per closed visit");
    assert_eq!(distinct, closed, "no visit invoiced twice");
    assert_eq!(priced, closed, "every closed visit has its invoice");
    assert_eq!(emails, registered.to_string(), "every registration once");
    assert_eq!(in_parks, customers, "every customer reached parks");
    assert_eq!(in_payments, customers, "every customer reached payments");
    let broken = broken();
    assert!(
        broken.is_empty(),
        "the databases disagree: {broken:#?}\n{}",
        cluster.logs()
    );
    // Each gateway worker (one per core) stops trying a dead endpoint at its first failed
    // connect; requests already connecting to it fail theirs too. Not one failure per request
    // while it is down.
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bound = f64::from(CLIENTS_AT_ONCE) + workers as f64;
    for (replica, failed, _, _) in &timings {
        assert!(
            *failed <= bound,
            "{failed} failed connects to {replica} while it was down: {}",
            cluster.log("gateway")
        );
    }

    // A display and a page following the parks through the round-robin gateway: both parks
    // replicas give the same versions (read from the database), so with nothing changing each
    // long poll waits out its time and answers the version it was given, whichever replica
    // takes it, instead of answering at once with the other replica's own count.
    let display_key = cluster.device_key("display", 1);
    let (display, pages) = rt.block_on(async {
        let token = login(&api, "parkmanager@isep.ipp.pt").await;
        let bearer = format!("Bearer {token}");
        let get = |after: Option<&Value>| {
            let mut body = serde_json::json!({"displayID": 1, "waitMs": 200});
            if let Some(v) = after {
                body["waitForChangeAfter"] = v.clone();
            }
            let (api, key) = (api.clone(), display_key.clone());
            async move {
                let (status, answer) = api
                    .call(
                        "POST",
                        "/display/get",
                        &[("x-device-key", &key)],
                        Some(&body),
                    )
                    .await
                    .expect("display/get");
                assert_eq!(status, 200, "{answer}");
                answer["version"].clone()
            }
        };
        let page = |after: Option<&Value>| {
            let path = match after {
                Some(v) => format!("/parks/changes?after={v}&waitMs=200"),
                None => "/parks/changes".to_owned(),
            };
            let (api, bearer) = (api.clone(), bearer.clone());
            async move {
                let (status, answer) = api
                    .call("GET", &path, &[("authorization", &bearer)], None)
                    .await
                    .expect("parks/changes");
                assert_eq!(status, 200, "{answer}");
                answer["version"].clone()
            }
        };
        // One after the other, so that the gateway's round-robin gives each kind of request to
        // both replicas.
        let first = get(None).await;
        let mut display = vec![first.clone()];
        for _ in 0..4 {
            display.push(get(Some(&first)).await);
        }
        let first = page(None).await;
        let mut pages = vec![first.clone()];
        for _ in 0..4 {
            pages.push(page(Some(&first)).await);
        }
        (display, pages)
    });
    assert!(
        display[0].is_u64() && pages[0].is_u64(),
        "{display:?} {pages:?}"
    );
    assert!(display.iter().all(|v| *v == display[0]), "{display:?}");
    assert!(pages.iter().all(|v| *v == pages[0]), "{pages:?}");

    // A person in the front office through the gateway, which sends each request to either
    // replica of it: the sessions are shared, so signing in, staying signed in and signing out
    // hold whichever replica answers.
    let port = cluster.gateway;
    let session = sign_in(port, "ruiSoares@isep.ipp.pt", PASSWORD);
    let mut csrf = String::new();
    for _ in 0..4 {
        let account = get(port, "/app/account", Some(&session));
        assert_eq!(account.status, 200, "{}", account.body);
        assert!(account.body.contains("46-ON-05"), "{}", account.body);
        csrf = account.csrf();
    }
    let out = post(port, "/app/signout", Some(&session), &[("csrf", &csrf)]);
    assert_eq!(out.status, 303, "{}", out.body);
    for _ in 0..2 {
        let after = get(port, "/app/account", Some(&session));
        assert_eq!(after.status, 303, "signed out everywhere: {}", after.body);
        assert_eq!(after.header("location"), Some("/app/signin"));
    }
    drop(nats);
}
