//! The whole system for a test: the users, parks and payments services on loopback port 0, their
//! event consumers in process, and a gateway running the shipped route table in front, on a
//! fresh SQLite directory or fresh PostgreSQL databases.

use std::net::SocketAddr;
use std::time::Duration;

use pms_auth::VerifierConfig;
use pms_events::wiring::Sources;
use pms_net::serve::{Drain, ServeConfig};
use pms_parks::devices::{DeviceKeys, DEVICE_KEY_HEADER};
use pms_parks::model::DeviceType;
use pms_parks::store::seed::DemoParks;
use pms_service::store::StoreConfig;
use pms_testkit::client::{Collected, Proto, TestClient};
use pms_testkit::{certs, pg, Spawned};
use serde_json::{json, Value};

/// The demo accounts' password in tests.
pub const SEED_PASSWORD: &str = "Seed#Pass-2026";
/// The shared HS256 secret.
pub const SECRET: &[u8] = b"test-secret-that-is-long-enough-for-hs256";
/// The device secret.
pub const DEVICE_SECRET: &[u8] = b"device-secret-that-is-long-enough-too";

/// Which database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
}

/// Both, for tests that run on each.
pub const BOTH: [Db; 2] = [Db::Sqlite, Db::Postgres];

/// How the gateway is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// HTTP/1.1 cleartext.
    H1,
    /// HTTP/2 over TLS.
    H2Tls,
}

fn verifier() -> VerifierConfig {
    VerifierConfig {
        issuers: Some(vec![pms_auth::sign::DEFAULT_ISSUER.into()]),
        ..VerifierConfig::hs256(SECRET)
    }
}

/// One service's store: a SQLite file in `dir`, or on PostgreSQL one database for the three
/// services with parks and payments in schemas of their own, as `pms up --database-url` runs them.
fn store(db: Db, dir: &std::path::Path, pg_url: &str, name: &str) -> StoreConfig {
    let mut cfg = match db {
        Db::Sqlite => StoreConfig::sqlite_file(&dir.join(format!("{name}.db"))),
        Db::Postgres if name == "users" => StoreConfig::new(pg_url),
        Db::Postgres => StoreConfig::new(pg_url).in_schema(name),
    };
    cfg.acquire_timeout = Duration::from_secs(5);
    cfg.pool_size = 16;
    cfg
}

/// What [`System::start_with`] may change.
#[derive(Clone)]
pub struct Options {
    /// Start the payments service's consumers (off: payments is "down" for events).
    pub payments_consumers: bool,
    /// The exit's wait for its invoice.
    pub exit_wait: Duration,
    /// Carry the events through a real NATS JetStream (the distributed mode) instead of in
    /// process.
    pub nats: bool,
    /// On PostgreSQL: this database instead of a fresh one on the shared server (a test that
    /// stops its server brings its own).
    pub pg_url: Option<String>,
    /// With `nats`: a second parks replica on the same database, served on a port of its own
    /// ([`System::replica_client`]), applies every event parks consumes, and the one behind the
    /// gateway follows only the broker's live feeds (prices and changes), so its exits' prices
    /// always come from an invoice the other replica applied.
    pub parks_replica: bool,
    /// How far barrier times are believed. By default any time behind the server's clock is:
    /// most tests replay fixed dates of 2023 and 2024 (the clock's own tests use the service's
    /// defaults).
    pub clock: pms_parks::clock::ClockRules,
    /// How long a closed account's stay keeps its plate after the car left (none by default:
    /// the tests see the erasure at once).
    pub erase_after_exit: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            payments_consumers: true,
            exit_wait: Duration::from_millis(2000),
            nats: false,
            pg_url: None,
            parks_replica: false,
            clock: pms_parks::clock::ClockRules {
                delay: Duration::MAX,
                ..pms_parks::clock::ClockRules::default()
            },
            erase_after_exit: Duration::ZERO,
        }
    }
}

/// The running system.
pub struct System {
    pub users: pms_users::App,
    pub parks: pms_parks::App,
    pub payments: pms_payments::App,
    /// The second parks replica (with [`Options::parks_replica`]).
    pub replica: Option<(pms_parks::App, SocketAddr)>,
    pub gw_plain: SocketAddr,
    pub gw_tls: SocketAddr,
    pub keys: DeviceKeys,
    stop: tokio::sync::watch::Sender<bool>,
    /// The in-process consumers, stopped by `stop`.
    consumers: Vec<tokio::task::JoinHandle<()>>,
    /// The broker, with [`Options::nats`]; a closed account's key is erased at once here.
    pub broker: Option<(pms_testkit::nats::NatsServer, pms_events::nats::Nats)>,
    _spawned: Vec<Spawned<Drain>>,
    gateway: Option<Spawned<Result<Drain, pms_gateway::StartError>>>,
    /// What a restart starts again on.
    data: Data,
}

/// Where a system keeps its data, and how it was started: what [`System::restart`] reuses.
#[derive(Clone)]
struct Data {
    db: Db,
    options: Options,
    /// The PostgreSQL database (empty on SQLite).
    pg_url: String,
    /// The SQLite files, and the front office's.
    dir: std::sync::Arc<tempfile::TempDir>,
}

impl Drop for System {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl System {
    /// The system on `db`, or `None` when PostgreSQL tests are switched off.
    pub async fn start(db: Db) -> Option<System> {
        Self::start_with(db, Options::default()).await
    }

    /// [`System::start`] with options.
    pub async fn start_with(db: Db, options: Options) -> Option<System> {
        if db == Db::Postgres && pg::skipped() {
            eprintln!("PMS_TEST_SKIP_PG=1: skipping the PostgreSQL variant");
            return None;
        }
        if options.nats && pms_testkit::nats::skipped() {
            eprintln!("PMS_TEST_SKIP_NATS=1: skipping the broker variant");
            return None;
        }
        let pg_url = match (db, &options.pg_url) {
            (Db::Postgres, Some(url)) => url.clone(),
            (Db::Postgres, None) => pg::shared().fresh_database(),
            (Db::Sqlite, _) => String::new(),
        };
        let data = Data {
            db,
            options,
            pg_url,
            dir: std::sync::Arc::new(tempfile::tempdir().expect("temp dir")),
        };
        Some(Self::boot(data).await)
    }

    /// Stops every component (servers, consumers, gateway) and starts them again on the same
    /// databases, as a restart of `pms up` does: what was written survives, what was only in
    /// memory does not. The gateway comes back on new ports: clients connect again. The
    /// in-process mode only (a broker would outlive its clients).
    pub async fn restart(&mut self) {
        assert!(
            !self.data.options.nats,
            "restarts are of the in-process mode"
        );
        let _ = self.stop.send(true);
        for task in std::mem::take(&mut self.consumers) {
            let _ = task.await;
        }
        for served in std::mem::take(&mut self._spawned) {
            served.shutdown().await;
        }
        if let Some(gateway) = self.gateway.take() {
            let _ = gateway.shutdown().await;
        }
        *self = Self::boot(self.data.clone()).await;
    }

    /// Starts the system on `data`'s databases (creating and seeding them the first time).
    async fn boot(data: Data) -> System {
        let (db, options, pg_url, dir) = (
            data.db,
            data.options.clone(),
            data.pg_url.clone(),
            data.dir.clone(),
        );
        let pg_url = pg_url.as_str();
        let users = pms_users::App::new(pms_users::UsersConfig {
            store: store(db, dir.path(), pg_url, "users"),
            hash: pms_users::password::HashParams::cheapest(),
            hash_parallelism: 4,
            signer: pms_auth::Signer::hmac(pms_auth::Algorithm::HS256, SECRET).expect("signer"),
            verifier: verifier(),
            seed_password: Some(SEED_PASSWORD.into()),
            max_body_bytes: pms_users::DEFAULT_MAX_BODY_BYTES,
            body_timeout: pms_users::DEFAULT_BODY_TIMEOUT,
            awards: Default::default(),
        })
        .expect("users");
        let parks_config = || pms_parks::ParksConfig {
            store: store(db, dir.path(), pg_url, "parks"),
            verifier: verifier(),
            device_secret: DEVICE_SECRET.to_vec(),
            seed: Some(DemoParks {
                time_zone: "Europe/Lisbon".into(),
                extra_spots: 0,
            }),
            limits: pms_service::http::BodyLimits::default(),
            exit_wait: options.exit_wait,
            clock: options.clock,
            erase_after_exit: options.erase_after_exit,
        };
        let parks = pms_parks::App::new(parks_config()).expect("parks");
        let payments = pms_payments::App::new(pms_payments::PaymentsConfig {
            store: store(db, dir.path(), pg_url, "payments"),
            verifier: verifier(),
            limits: pms_service::http::BodyLimits::default(),
        })
        .expect("payments");
        users.init().await.expect("users init");
        parks.init().await.expect("parks init");
        payments.init().await.expect("payments init");
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let mut replica = None;
        let mut consumers = Vec::new();
        let broker = if options.nats {
            let server = pms_testkit::nats::NatsServer::start();
            let nats = pms_events::nats::Nats::connect(&server.url)
                .await
                .expect("nats")
                .erasing_after(std::time::Duration::ZERO);
            pms_users::events::spawn_consumers(
                &users,
                Sources::Nats(nats.clone()),
                stop_rx.clone(),
            )
            .expect("users' consumers");
            if options.parks_replica {
                let other = pms_parks::App::new(parks_config()).expect("parks replica");
                other.init().await.expect("parks replica init");
                pms_parks::events::spawn_consumers(
                    &other,
                    Sources::Nats(nats.clone()),
                    stop_rx.clone(),
                )
                .expect("parks replica's consumers");
                replica = Some(other);
                // The replica behind the gateway publishes its own commits (the relays of both
                // replicas publish the one outbox; the broker drops the copies), and applies
                // nothing.
                tokio::spawn(pms_events::nats::relay(
                    nats.clone(),
                    parks.outbox.clone(),
                    stop_rx.clone(),
                ));
                pms_parks::events::spawn_price_feed(&parks, nats.clone(), stop_rx.clone());
                pms_parks::events::spawn_change_feed(&parks, nats.clone(), stop_rx.clone());
            } else {
                pms_parks::events::spawn_consumers(
                    &parks,
                    Sources::Nats(nats.clone()),
                    stop_rx.clone(),
                )
                .expect("parks' consumers");
            }
            pms_payments::events::spawn_consumers(&payments, Sources::Nats(nats.clone()), stop_rx)
                .expect("payments' consumers");
            Some((server, nats))
        } else {
            let outboxes = Sources::InProcess(vec![
                users.outbox.clone(),
                parks.outbox.clone(),
                payments.outbox.clone(),
            ]);
            let wired = |tasks: Result<_, pms_events::wiring::MissingSource>| tasks.expect("wired");
            consumers.extend(wired(pms_parks::events::spawn_consumers(
                &parks,
                outboxes.clone(),
                stop_rx.clone(),
            )));
            if options.payments_consumers {
                consumers.extend(wired(pms_payments::events::spawn_consumers(
                    &payments,
                    outboxes.clone(),
                    stop_rx.clone(),
                )));
            }
            consumers.extend(wired(pms_users::events::spawn_consumers(
                &users, outboxes, stop_rx,
            )));
            None
        };
        let (u, p, m) = (users.clone(), parks.clone(), payments.clone());
        let mut spawned = vec![
            Spawned::start(move |l, s| pms_users::run(l, u, ServeConfig::default(), s)).await,
            Spawned::start(move |l, s| pms_parks::run(l, p, ServeConfig::default(), s)).await,
            Spawned::start(move |l, s| pms_payments::run(l, m, ServeConfig::default(), s)).await,
        ];
        let (gw_plain, gw_tls, gateway) =
            gateway(spawned[0].addr, spawned[1].addr, spawned[2].addr);
        let replica = match replica {
            Some(app) => {
                let served = app.clone();
                let s = Spawned::start(move |l, s| {
                    pms_parks::run(l, served, ServeConfig::default(), s)
                })
                .await;
                let addr = s.addr;
                spawned.push(s);
                Some((app, addr))
            }
            None => None,
        };
        let system = System {
            users,
            parks,
            payments,
            replica,
            gw_plain,
            gw_tls,
            keys: DeviceKeys::new(DEVICE_SECRET).expect("keys"),
            stop,
            broker,
            _spawned: spawned,
            consumers,
            gateway: Some(gateway),
            data,
        };
        // The demo customers reach parks through the users service's events.
        let parks_app = system.parks.clone();
        pms_testkit::assert_eventually("parks knows the demo customers", 500, || {
            let parks = parks_app.clone();
            async move { parks.store.coin_flag(6).await.is_ok() }
        })
        .await;
        // And payments, which prices their visits, of their vehicles (the last one seeded).
        if options.payments_consumers {
            let payments_app = system.payments.clone();
            pms_testkit::assert_eventually("payments knows the demo vehicles", 500, || {
                let payments = payments_app.clone();
                async move { matches!(payments.store.vehicle("28-XQ-51").await, Ok(Some(_))) }
            })
            .await;
        }
        system
    }

    /// A client through the gateway.
    pub async fn client(&self, via: Via) -> Api {
        let (addr, proto) = match via {
            Via::H1 => (self.gw_plain, Proto::H1c),
            Via::H2Tls => (self.gw_tls, Proto::H2Tls),
        };
        let client = TestClient::connect(addr, proto).await.expect("connect");
        if via == Via::H2Tls {
            assert_eq!(client.version, http::Version::HTTP_2);
        }
        Api {
            client,
            token: None,
        }
    }

    /// A client straight to the second parks replica (with [`Options::parks_replica`]).
    pub async fn replica_client(&self) -> Api {
        let (_, addr) = self.replica.as_ref().expect("started with a parks replica");
        let client = TestClient::connect(*addr, Proto::H1c)
            .await
            .expect("connect");
        Api {
            client,
            token: None,
        }
    }

    /// A client logged in as `email`.
    pub async fn as_user(&self, via: Via, email: &str) -> Api {
        let mut api = self.client(via).await;
        api.login(email, SEED_PASSWORD).await;
        api
    }

    /// `GET path` straight to a service (`users`, `parks`, `payments`).
    pub async fn direct(&self, service: &str, path: &str) -> Collected {
        let i = ["users", "parks", "payments"]
            .iter()
            .position(|s| *s == service)
            .expect("a service");
        let client = TestClient::connect(self._spawned[i].addr, Proto::H1c)
            .await
            .expect("connect");
        Api {
            client,
            token: None,
        }
        .get(path)
        .await
    }

    /// `GET /metrics` of a service (not routed by the gateway) (`users`, `parks`, `payments`), straight to it.
    pub async fn metrics(&self, service: &str) -> String {
        let i = ["users", "parks", "payments"]
            .iter()
            .position(|s| *s == service)
            .expect("a service");
        let client = TestClient::connect(self._spawned[i].addr, Proto::H1c)
            .await
            .expect("connect");
        let mut api = Api {
            client,
            token: None,
        };
        api.get("/metrics").await.text()
    }

    /// Waits until every consumer has applied every event written so far (invoices issued,
    /// coins spent, prices on the visits): what an exit started, finished. Needs the payments
    /// consumers running.
    pub async fn settled(&self) {
        use pms_events::position::position;
        use pms_events::Outbox;
        use pms_service::store::Db as Handle;
        let (users, parks, payments) = (
            self.users.store.db().clone(),
            self.parks.store.db().clone(),
            self.payments.store.db().clone(),
        );
        let (users_out, parks_out, payments_out) = (
            self.users.outbox.clone(),
            self.parks.outbox.clone(),
            self.payments.outbox.clone(),
        );
        // Who reads whom: (consumer's database, consumer, source, the source's outbox).
        let readers: Vec<(Handle, &'static str, &'static str, Outbox)> = vec![
            (payments.clone(), "payments", "parks", parks_out.clone()),
            (payments, "payments", "users", users_out.clone()),
            (users, "users", "payments", payments_out.clone()),
            (parks.clone(), "parks", "payments", payments_out),
            (parks, "parks", "users", users_out),
        ];
        pms_testkit::assert_eventually("every event is applied", 500, || {
            let readers = readers.clone();
            async move {
                for (db, consumer, source, outbox) in readers {
                    let head = outbox.head().await.unwrap_or(i64::MAX);
                    if position(&db, consumer, source).await.unwrap_or(0) < head {
                        return false;
                    }
                }
                true
            }
        })
        .await;
    }

    /// The key of barrier `id`.
    /// Park `park`'s visits earn no PARKY coins from now on (its thresholds set to 0 by the
    /// park manager), for tests of spending whose wallets must stay as granted.
    pub async fn earn_no_coins(&self, park: i64) {
        let mut pm = self.as_user(Via::H1, "parkmanager@isep.ipp.pt").await;
        let zero = json!({"parkiesPerHour": 0, "parkiesPerMinute": 0});
        let r = pm
            .send(
                "PUT",
                &format!("/parks/changeParkyThresholds/{park}"),
                &zero,
            )
            .await;
        assert_eq!(r.status(), 200, "{}", r.text());
    }

    pub fn barrier_key(&self, id: i64) -> String {
        self.keys.key_for(DeviceType::Barrier, id)
    }

    /// The key of display `id`.
    pub fn display_key(&self, id: i64) -> String {
        self.keys.key_for(DeviceType::Display, id)
    }
}

/// Starts a gateway from the shipped route table with the three services as upstreams.
fn gateway(
    users: SocketAddr,
    parks: SocketAddr,
    payments: SocketAddr,
) -> (
    SocketAddr,
    SocketAddr,
    Spawned<Result<Drain, pms_gateway::StartError>>,
) {
    use pms_gateway::config::{RawListener, RawServerTls};
    let c = certs();
    let mut raw = pms_gateway::config::parse(pms_gateway::config::PMS_ROUTE_TABLE, "gateway.toml")
        .expect("config parses");
    for (name, addr) in [("users", users), ("parks", parks), ("payments", payments)] {
        assert!(raw.set_endpoints(name, vec![format!("http://{addr}")]));
    }
    raw.admin.listen = "127.0.0.1:0".into();
    raw.runtime.workers = Some(1);
    raw.listeners = vec![
        RawListener {
            name: Some("plain".into()),
            listen: "127.0.0.1:0".into(),
            tls: None,
            http1_only: false,
        },
        RawListener {
            name: Some("tls".into()),
            listen: "127.0.0.1:0".into(),
            tls: Some(RawServerTls {
                cert: c.cert.clone(),
                key: c.key.clone(),
            }),
            http1_only: false,
        },
    ];
    let secret = String::from_utf8(SECRET.to_vec()).expect("utf-8 secret");
    let settings = raw
        .resolve("gateway.toml", std::path::Path::new("."), &|k| match k {
            "PMS_JWT_SECRET" => Some(secret.clone()),
            "PMS_FORWARDER_KEY" => Some("a-forwarder-key-for-tests".into()),
            _ => None,
        })
        .unwrap_or_else(|e| panic!("shipped config rejected:\n{e}"));
    let bound = pms_gateway::Bound::bind(&settings).expect("bind gateway");
    let addrs: Vec<SocketAddr> = bound.public_addrs().into_iter().map(|(_, a)| a).collect();
    let spawned = Spawned::with(addrs[0], move |stop| {
        pms_gateway::run(settings, bound, stop)
    });
    (addrs[0], addrs[1], spawned)
}

/// A client plus the token it logged in with.
pub struct Api {
    pub client: TestClient,
    pub token: Option<String>,
}

impl Api {
    /// A request with the token (if any), JSON content type and extra headers.
    pub async fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<bytes::Bytes>,
    ) -> Collected {
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let mut all: Vec<(&str, &str)> = vec![("content-type", "application/json")];
        if let Some(a) = &auth {
            all.push(("authorization", a));
        }
        all.extend_from_slice(headers);
        self.client
            .call(method, path, &all, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub async fn get(&mut self, path: &str) -> Collected {
        self.call("GET", path, &[], bytes::Bytes::new()).await
    }

    /// `PUT /parks/changeUserParkyFlag`: customer `id`'s next visit paid with coins (`on`).
    pub async fn coin_flag(&mut self, id: i64, on: bool) -> Collected {
        self.send(
            "PUT",
            "/parks/changeUserParkyFlag",
            &json!({"customerID": id, "parkyFlag": on}),
        )
        .await
    }

    pub async fn send(&mut self, method: &str, path: &str, body: &Value) -> Collected {
        self.call(method, path, &[], body.to_string()).await
    }

    /// Logs in and keeps the token.
    pub async fn login(&mut self, email: &str, password: &str) {
        let r = self
            .send(
                "POST",
                "/users/login",
                &json!({"email": email, "password": password}),
            )
            .await;
        assert_eq!(r.status(), 200, "login {email}: {}", r.text());
        self.token = Some(r.json()["token"].as_str().expect("token").to_owned());
    }

    /// A barrier request with device `key`.
    pub async fn barrier(&mut self, direction: &str, key: &str, body: &Value) -> Collected {
        self.call(
            "POST",
            &format!("/barriers/{direction}"),
            &[(DEVICE_KEY_HEADER, key)],
            body.to_string(),
        )
        .await
    }
}

/// A barrier request's body.
pub fn plate_read(barrier: i64, park: i64, plate: &str, at: &str) -> Value {
    json!({"barrierID": barrier, "parkID": park, "parkNumber": park, "plateNumber": plate, "date": at})
}

/// Asserts an error answer: status, JSON error code and the field when given.
pub fn assert_error(r: &Collected, status: u16, code: &str, field: Option<&str>) {
    assert_eq!(r.status(), status, "{}", r.text());
    let body = r.json();
    assert_eq!(body["error"]["code"], code, "{body}");
    if let Some(f) = field {
        assert_eq!(body["error"]["field"], f, "{body}");
    }
}
