//! Starting the users service, alone or behind the gateway, on SQLite or PostgreSQL.

use std::net::SocketAddr;
use std::time::Duration;

use pms_auth::{Algorithm, Signer, VerifierConfig};
use pms_net::serve::{Drain, ServeConfig};
use pms_testkit::client::{Collected, Proto, TestClient};
use pms_testkit::{certs, pg, Spawned};
use pms_users::password::HashParams;
use pms_users::store::StoreConfig;
use pms_users::{App, UsersConfig};
use serde_json::Value;

/// The password every seeded account gets in tests.
pub const SEED_PASSWORD: &str = "Seed#Pass-2026";
/// The shared HS256 secret of the test stack.
pub const SECRET: &[u8] = b"test-secret-that-is-long-enough-for-hs256";

/// Which database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
}

/// Where a test database lives; keeps temp files alive.
pub struct Database {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Database {
    /// A fresh database, or `None` when PostgreSQL tests are switched off.
    pub fn fresh(db: Db) -> Option<Database> {
        match db {
            Db::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = StoreConfig::sqlite_file(&dir.path().join("users.db")).url;
                Some(Database {
                    url,
                    _dir: Some(dir),
                })
            }
            Db::Postgres if pg::skipped() => {
                eprintln!("PMS_TEST_SKIP_PG=1: skipping the PostgreSQL variant");
                None
            }
            Db::Postgres => Some(Database {
                url: pg::shared().fresh_database(),
                _dir: None,
            }),
        }
    }
}

/// How long the test service waits for a request body: short, for the test of a client that
/// stops sending one, and ample for a body sent at once.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(2);

/// The users service's configuration for tests: cheap hashing, HS256, demo data.
pub fn config(url: &str) -> UsersConfig {
    let mut store = StoreConfig::new(url);
    store.acquire_timeout = Duration::from_secs(2);
    UsersConfig {
        store,
        hash: HashParams::cheapest(),
        hash_parallelism: 4,
        signer: signer(),
        verifier: VerifierConfig {
            issuers: Some(vec![pms_auth::sign::DEFAULT_ISSUER.into()]),
            ..VerifierConfig::hs256(SECRET)
        },
        seed_password: Some(SEED_PASSWORD.into()),
        max_body_bytes: pms_users::DEFAULT_MAX_BODY_BYTES,
        body_timeout: BODY_TIMEOUT,
        awards: Default::default(),
    }
}

/// A signer with the test secret (for forging odd tokens in tests).
pub fn signer() -> Signer {
    Signer::hmac(Algorithm::HS256, SECRET).expect("signer")
}

/// The users service running on a loopback port.
pub struct Users {
    pub app: App,
    pub spawned: Spawned<Drain>,
}

impl Users {
    pub fn addr(&self) -> SocketAddr {
        self.spawned.addr
    }
}

/// Starts the service; waits until it is ready when `wait_ready`.
pub async fn users(url: &str, wait_ready: bool) -> Users {
    start_users(config(url), wait_ready).await
}

/// Starts the service with `config` and waits until it is ready.
pub async fn users_with(config: UsersConfig) -> Users {
    start_users(config, true).await
}

/// Starts the service with `config`, taking at most `max_in_flight` requests at once, and
/// waits until it is ready.
pub async fn users_serving(config: UsersConfig, max_in_flight: usize) -> Users {
    let app = App::new(config).expect("users config");
    app.init().await.expect("migrate and seed");
    let a = app.clone();
    let serving = pms_service::Serving {
        max_in_flight,
        ..pms_service::Serving::default()
    };
    let spawned = Spawned::start(move |l, stop| pms_users::run(l, a, serving, stop)).await;
    Users { app, spawned }
}

async fn start_users(config: UsersConfig, wait_ready: bool) -> Users {
    let app = App::new(config).expect("users config");
    if wait_ready {
        app.init().await.expect("migrate and seed");
    } else {
        app.init_in_background();
    }
    let a = app.clone();
    let spawned =
        Spawned::start(move |l, stop| pms_users::run(l, a, ServeConfig::default(), stop)).await;
    Users { app, spawned }
}

/// Service plus gateway.
pub struct Stack {
    pub users: Users,
    /// Cleartext listener (HTTP/1.1 + h2c).
    pub gw_plain: SocketAddr,
    /// TLS listener (h2 + HTTP/1.1).
    pub gw_tls: SocketAddr,
    _gateway: Spawned<Result<Drain, pms_gateway::StartError>>,
    _db: Database,
}

/// How a test reaches the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Gateway, HTTP/1.1 cleartext.
    GatewayH1,
    /// Gateway, HTTP/2 over TLS.
    GatewayH2Tls,
    /// Straight to the service, HTTP/1.1.
    Direct,
}

impl Stack {
    /// A stack on a fresh database of kind `db`; `None` when that kind is switched off.
    pub async fn start(db: Db) -> Option<Stack> {
        Self::start_with(db, |_| {}).await
    }

    /// Like [`Stack::start`], with the users service's configuration adjusted by `adjust`.
    pub async fn start_with(db: Db, adjust: impl FnOnce(&mut UsersConfig)) -> Option<Stack> {
        let database = Database::fresh(db)?;
        let mut cfg = config(&database.url);
        adjust(&mut cfg);
        let users = users_with(cfg).await;
        let (gw_plain, gw_tls, gateway) = gateway(users.addr()).await;
        Some(Stack {
            users,
            gw_plain,
            gw_tls,
            _gateway: gateway,
            _db: database,
        })
    }

    /// A client connected the way `via` says, checking the negotiated protocol.
    pub async fn client(&self, via: Via) -> Api {
        let (addr, proto) = match via {
            Via::GatewayH1 => (self.gw_plain, Proto::H1c),
            Via::GatewayH2Tls => (self.gw_tls, Proto::H2Tls),
            Via::Direct => (self.users.addr(), Proto::H1c),
        };
        let client = TestClient::connect(addr, proto).await.expect("connect");
        if via == Via::GatewayH2Tls {
            assert_eq!(client.version, http::Version::HTTP_2);
            assert_eq!(client.alpn.as_deref(), Some(&b"h2"[..]));
        }
        Api {
            client,
            token: None,
        }
    }
}

type Gateway = (
    SocketAddr,
    SocketAddr,
    Spawned<Result<Drain, pms_gateway::StartError>>,
);

/// Starts a gateway from the shipped `config/gateway.toml` with the users upstream pointed at
/// `users`, its listeners on port 0, a TLS listener added and the test secret.
pub async fn gateway(users: SocketAddr) -> Gateway {
    gateway_with_jwt(users, "").await
}

/// Like [`gateway`], with the `[auth.jwt]` key lines (`algorithms`, `secret_env`, …) replaced by
/// `jwt_keys` when it is not empty.
pub async fn gateway_with_jwt(users: SocketAddr, jwt_keys: &str) -> Gateway {
    use pms_gateway::config::{RawListener, RawServerTls};
    let c = certs();
    let text = if jwt_keys.is_empty() {
        pms_gateway::config::PMS_ROUTE_TABLE.to_owned()
    } else {
        let shipped = "algorithms = [\"HS256\"]\nsecret_env = \"PMS_JWT_SECRET\"";
        assert!(pms_gateway::config::PMS_ROUTE_TABLE.contains(shipped));
        pms_gateway::config::PMS_ROUTE_TABLE.replace(shipped, jwt_keys)
    };
    let mut raw = pms_gateway::config::parse(&text, "gateway.toml").expect("config parses");
    assert!(raw.set_endpoints("users", vec![format!("http://{users}")]));
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
    /// An HTTP/1.1 client straight to `addr`, without a token.
    pub async fn connect(addr: SocketAddr) -> Api {
        let client = TestClient::connect(addr, Proto::H1c)
            .await
            .expect("connect");
        Api {
            client,
            token: None,
        }
    }

    /// Sends a request with the current token (if any), extra headers and a body.
    pub async fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<bytes::Bytes>,
    ) -> Collected {
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let mut all: Vec<(&str, &str)> = Vec::new();
        if let Some(a) = &auth {
            all.push(("authorization", a));
        }
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        {
            all.push(("content-type", "application/json"));
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

    pub async fn send_json(&mut self, method: &str, path: &str, body: &Value) -> Collected {
        self.call(method, path, &[], body.to_string()).await
    }

    /// Logs in and keeps the token. Panics unless login succeeds.
    pub async fn login(&mut self, email: &str, password: &str) -> Value {
        let r = self
            .send_json(
                "POST",
                "/users/login",
                &serde_json::json!({"email": email, "password": password}),
            )
            .await;
        assert_eq!(r.status(), 200, "login {email}: {}", r.text());
        let body = r.json();
        self.token = Some(body["token"].as_str().expect("token").to_owned());
        body
    }
}

/// Asserts an error answer: status, JSON error code, a request id, and the field when given.
pub fn assert_error(r: &Collected, status: u16, code: &str, field: Option<&str>) {
    assert_eq!(r.status(), status, "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "{}",
        r.text()
    );
    let body = r.json();
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["request_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{body}"
    );
    if let Some(f) = field {
        assert_eq!(body["error"]["field"], f, "{body}");
    }
}

/// A valid registration with the given unique parts.
pub fn registration(email: &str, nif: u32, plate: &str) -> Value {
    serde_json::json!({
        "firstName": "John", "lastName": "Doe", "email": email,
        "password": "123PasswordX#", "accountNumber": "1234567890", "nif": nif,
        "licensePlateNumber": plate, "vehicleType": "AUTOMOBILE",
        "vehicleEnergySource": "FUEL", "paymentMethod": "NOT_DEFINED"
    })
}
