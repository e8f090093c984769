//! `pms up`: the whole system in one process on loopback, for a first look.
//!
//! The gateway (cleartext HTTP/1.1 + h2c, and TLS with a dev certificate) runs the shipped PMS
//! route table (`config/gateway.toml`) in front of the users service, plus the benchmark's
//! `/passthrough` and `/transform` routes to the echo back-end. The data directory keeps what must
//! survive a restart: the dev certificate, the JWT secret shared by gateway and users service, the
//! SQLite database (unless `--database-url` names PostgreSQL) and the gateway config written for
//! this run. The parks and payments services run beside the users service, each with its own
//! database (SQLite files, or one schema each on PostgreSQL), and their domain events flow
//! between them in process (`pms-events`): a registered customer can park, and an exit is
//! invoiced. The data directory also keeps the device secret and the gateway's URL, for
//! `pms device`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use pms_events::wiring::Sources;
use pms_net::serve::ServeConfig;

use super::parks::ParksOptions;
use super::service::ServiceArgs;
use super::users::{ServiceOptions, TokenKeys};
use super::{device, UsageError};

/// The JWT secret's file name in the data directory.
const SECRET_FILE: &str = "jwt-secret";
/// The file of the key the gateway trusts the front office with (`[auth.forwarder]`).
const FORWARDER_KEY_FILE: &str = "forwarder-key";

/// Arguments of `pms up`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory for state kept between runs (certificate, JWT secret, SQLite database).
    #[arg(long, default_value = "pms-data")]
    data_dir: PathBuf,
    /// The gateway's cleartext listener (HTTP/1.1 and h2c).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The gateway's TLS listener (ALPN h2 and http/1.1).
    #[arg(long, default_value = "127.0.0.1:8443")]
    tls_listen: SocketAddr,
    /// The gateway's admin listener (/healthz, /readyz, /metrics).
    #[arg(long, default_value = "127.0.0.1:9901")]
    admin_listen: SocketAddr,
    /// An origin whose web pages may call the API from the browser (`https://app.example.com`;
    /// repeat the flag for more). None by default: no cross-origin request is allowed.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    cors_origins: Vec<String>,
    /// The users service's own listener (the gateway reaches it here).
    #[arg(long, default_value = "127.0.0.1:8090")]
    users_listen: SocketAddr,
    /// The parks service's own listener.
    #[arg(long, default_value = "127.0.0.1:8094")]
    parks_listen: SocketAddr,
    /// The payments service's own listener.
    #[arg(long, default_value = "127.0.0.1:8086")]
    payments_listen: SocketAddr,
    /// The front office's own listener (people use it through the gateway, at `/app/`).
    #[arg(long, default_value = "127.0.0.1:8096")]
    web_listen: SocketAddr,
    #[command(flatten)]
    users: ServiceOptions,
    #[command(flatten)]
    parks: ParksOptions,
}

pub fn run(mut args: Args, spans: Option<pms_gateway::spans::Spans>) -> anyhow::Result<()> {
    // Absolute, so the paths written into the generated config do not depend on where it lives.
    super::create_private_dir(&args.data_dir)?;
    args.data_dir = std::fs::canonicalize(&args.data_dir)
        .with_context(|| format!("resolving {}", args.data_dir.display()))?;
    let certs = ensure_certs(&args.data_dir.join("certs"))?;
    let secret_path = args.data_dir.join(SECRET_FILE);
    let secret = ensure_secret(&secret_path)?;
    let (users_config, generated) = super::users::config(
        &args.users,
        &args.data_dir,
        TokenKeys::hs256(secret.as_bytes())?,
    )?;
    let device_secret = ensure_secret(&args.data_dir.join(device::SECRET_FILE))?;
    let forwarder_path = args.data_dir.join(FORWARDER_KEY_FILE);
    let forwarder_key = ensure_secret(&forwarder_path)?;
    let services = ServiceArgs {
        data_dir: args.data_dir.clone(),
        database_url: args.users.database_url.clone(),
        pool_size: args.users.pool_size,
        in_flight: args.users.in_flight,
        retention: args.users.retention,
        jwt_secret_env: String::new(),
        jwt_secret_file: None,
        jwt_public_key: None,
        jwt_algorithm: String::new(),
        nats_url: None,
    };
    let parks_config = args.parks.config(
        &services,
        users_config.verifier.clone(),
        Some(device_secret),
    )?;
    let payments_config = super::payments::config(&services, users_config.verifier.clone())?;
    let rt = super::runtime()?;
    rt.block_on(async {
        let shutdown = super::shutdown_signal();
        let app = pms_users::App::new(users_config).map_err(|e| UsageError(e.to_string()))?;
        let parks = pms_parks::App::new(parks_config).map_err(|e| UsageError(e.to_string()))?;
        let payments =
            pms_payments::App::new(payments_config).map_err(|e| UsageError(e.to_string()))?;
        let echo_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the echo back-end")?;
        let echo_addr = echo_listener.local_addr()?;
        let users_listener = tokio::net::TcpListener::bind(args.users_listen)
            .await
            .with_context(|| format!("cannot listen on {} (users service)", args.users_listen))?;
        let users_addr = users_listener.local_addr()?;
        let parks_listener = super::service::bind(args.parks_listen, "parks service").await?;
        let parks_addr = parks_listener.local_addr()?;
        let payments_listener =
            super::service::bind(args.payments_listen, "payments service").await?;
        let payments_addr = payments_listener.local_addr()?;
        let web_listener = super::service::bind(args.web_listen, "front office").await?;
        let web_addr = web_listener.local_addr()?;

        let upstreams = Upstreams {
            echo: echo_addr,
            users: users_addr,
            parks: parks_addr,
            payments: payments_addr,
            web: web_addr,
        };
        let toml = gateway_config(&args, &upstreams, &certs, &secret_path, &forwarder_path);
        let config_path = args.data_dir.join("gateway.toml");
        std::fs::write(&config_path, &toml)
            .with_context(|| format!("writing {}", config_path.display()))?;
        let mut settings =
            pms_gateway::config::load(&config_path, &pms_gateway::config::process_env)
                .map_err(|e| UsageError(format!("invalid configuration:\n{e}")))?;
        settings.openapi = Some(pms_gateway::config::OpenApiSource::new(
            super::openapi::json,
        ));
        settings.spans = spans;
        let bound = pms_gateway::Bound::bind(&settings).context("binding the gateway")?;

        let seeded = super::users::start(&app).await?;
        super::parks::start(&parks).await?;
        super::payments::start(&payments).await?;
        let backend = app.store.backend();
        let gateway_url = args.data_dir.join(device::GATEWAY_FILE);
        std::fs::write(&gateway_url, format!("http://{}\n", args.listen))
            .with_context(|| format!("writing {}", gateway_url.display()))?;

        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let echo = tokio::spawn(pms_echo::run(
            echo_listener,
            pms_echo::EchoConfig::default(),
            stopped(stop_rx.clone()),
        ));
        let outboxes = Sources::InProcess(vec![
            app.outbox.clone(),
            parks.outbox.clone(),
            payments.outbox.clone(),
        ]);
        let mut consumers =
            pms_parks::events::spawn_consumers(&parks, outboxes.clone(), stop_rx.clone())?;
        consumers.extend(pms_payments::events::spawn_consumers(
            &payments,
            outboxes.clone(),
            stop_rx.clone(),
        )?);
        consumers.extend(pms_users::events::spawn_consumers(
            &app,
            outboxes,
            stop_rx.clone(),
        )?);
        let retention = args.users.retention;
        retention.spawn(
            &app.outbox,
            pms_users::events::PASSING_EVENTS,
            stop_rx.clone(),
        );
        pms_users::anniversaries::spawn(&app, stop_rx.clone());
        retention.spawn(
            &parks.outbox,
            pms_parks::events::PASSING_EVENTS,
            stop_rx.clone(),
        );
        retention.spawn(
            &payments.outbox,
            pms_payments::events::PASSING_EVENTS,
            stop_rx.clone(),
        );
        let users = tokio::spawn(pms_users::run(
            users_listener,
            app,
            args.users.in_flight.serving(),
            stopped(stop_rx.clone()),
        ));
        let parks_task = tokio::spawn(pms_parks::run(
            parks_listener,
            parks,
            args.users.in_flight.serving(),
            stopped(stop_rx.clone()),
        ));
        let payments_task = tokio::spawn(pms_payments::run(
            payments_listener,
            payments,
            args.users.in_flight.serving(),
            stopped(stop_rx.clone()),
        ));
        let web = pms_web::App::new(&pms_web::WebConfig {
            gateway: format!("http://{}", args.listen),
            secure_cookies: true,
            forwarder_key: Some(forwarder_key),
            // One process: its sessions are its own.
            shared_sessions: None,
        })
        .map_err(|e| UsageError(format!("front office: {e}")))?;
        let web_task = tokio::spawn(pms_web::run(
            web_listener,
            web,
            ServeConfig::default(),
            stopped(stop_rx.clone()),
        ));
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        });
        print_banner(
            &args,
            &upstreams,
            &certs,
            &config_path,
            backend,
            seeded.then_some(generated.as_deref()),
        );
        let drain = pms_gateway::run(settings, bound, stopped(stop_rx)).await?;
        let _ = echo.await;
        let _ = users.await;
        let _ = parks_task.await;
        let _ = payments_task.await;
        let _ = web_task.await;
        for c in consumers {
            let _ = c.await;
        }
        tracing::info!(?drain, "pms up stopped");
        Ok(())
    })
}

/// Dev certificate paths inside the data directory.
struct Certs {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// Reuses the data directory's dev certificate, or makes one on first start.
fn ensure_certs(dir: &Path) -> anyhow::Result<Certs> {
    let certs = Certs {
        ca: dir.join(pms_net::dev::CA_FILE),
        cert: dir.join(pms_net::dev::CERT_FILE),
        key: dir.join(pms_net::dev::KEY_FILE),
    };
    if !(certs.ca.exists() && certs.cert.exists() && certs.key.exists()) {
        pms_net::dev::DevCerts::generate()?
            .write_to(dir)
            .with_context(|| format!("writing dev certificates to {}", dir.display()))?;
        tracing::info!(dir = %dir.display(), "generated a dev CA and localhost certificate");
    }
    Ok(certs)
}

/// Where the gateway reaches each component.
struct Upstreams {
    echo: SocketAddr,
    users: SocketAddr,
    parks: SocketAddr,
    payments: SocketAddr,
    web: SocketAddr,
}

/// The gateway's `[cors]` section for `origins` (none without any): the gateway checks each.
fn cors_section(origins: &[String]) -> String {
    if origins.is_empty() {
        return String::new();
    }
    let list: Vec<String> = origins.iter().map(|o| format!("{o:?}")).collect();
    format!("\n[cors]\nallow_origins = [{}]\n", list.join(", "))
}

/// Reuses a secret kept in the data directory (the JWT secret, the device secret), or writes a
/// random one (owner-only) on first start.
fn ensure_secret(path: &Path) -> anyhow::Result<String> {
    if let Ok(text) = std::fs::read_to_string(path) {
        return Ok(text.trim_end().to_owned());
    }
    let secret = pms_users::password::random_token(32);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    std::io::Write::write_all(&mut file, secret.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    tracing::info!(path = %path.display(), "generated a secret");
    Ok(secret)
}

/// The gateway config for this run: listeners, upstreams and secret from the flags, then the
/// route table exactly as shipped in `config/gateway.toml`, then the echo routes.
fn gateway_config(
    args: &Args,
    up: &Upstreams,
    certs: &Certs,
    secret: &Path,
    forwarder: &Path,
) -> String {
    let table = pms_gateway::config::PMS_ROUTE_TABLE;
    let routes = table.find("[[routes]]").map_or("", |i| &table[i..]);
    format!(
        r#"# Written by `pms up` on every start; edit the flags, not this file.
[admin]
listen = "{admin}"

[[listeners]]
name = "public"
listen = "{listen}"

[[listeners]]
name = "public-tls"
listen = "{tls}"
tls = {{ cert = {cert:?}, key = {key:?} }}

[auth.jwt]
algorithms = ["HS256"]
secret_file = {secret:?}
require_exp = true
leeway_s = 30
claims_to_headers = {{ sub = "X-UserId", role = "X-UserRole" }}

# The front office signs people in through this gateway and names each one's address.
[auth.forwarder]
key_file = {forwarder:?}

[[upstreams]]
name = "users"
endpoints = ["http://{users}"]

[[upstreams]]
name = "parks"
endpoints = ["http://{parks}"]

[[upstreams]]
name = "payments"
endpoints = ["http://{payments}"]

[[upstreams]]
name = "web"
endpoints = ["http://{web}"]

[[upstreams]]
name = "echo"
endpoints = ["http://{echo}"]

[[routes]]
name = "passthrough"
match = {{ path = "/passthrough", methods = ["POST"] }}
upstream = "echo"

[[routes]]
name = "transform"
match = {{ path = "/transform", methods = ["POST"] }}
upstream = "echo"
transform = "json-to-xml"
xml_layout = "ballerina-compat"

{cors}
# --- the PMS route table, as shipped in config/gateway.toml ---------------------------------
{routes}"#,
        cors = cors_section(&args.cors_origins),
        admin = args.admin_listen,
        listen = args.listen,
        tls = args.tls_listen,
        cert = certs.cert.display().to_string(),
        key = certs.key.display().to_string(),
        secret = secret.display().to_string(),
        forwarder = forwarder.display().to_string(),
        users = up.users,
        parks = up.parks,
        payments = up.payments,
        web = up.web,
        echo = up.echo,
    )
}

/// `seeded`: `None` when the demo accounts existed already; `Some(generated password)` when they
/// were created now (`Some(None)`: with the password from the environment).
fn print_banner(
    args: &Args,
    up: &Upstreams,
    certs: &Certs,
    config: &Path,
    backend: pms_users::store::Backend,
    seeded: Option<Option<&str>>,
) {
    let payload = r#"{"size":"50B","payload":["0123456789","ABCDEFGH"]}"#;
    let accounts: Vec<String> = pms_users::store::seed::demo_accounts()
        .map(|(email, role)| format!("{email} ({role})"))
        .collect();
    let password = match seeded {
        Some(Some(generated)) => format!(
            "{generated}   <- generated now and shown only once; set {} before the first start to choose it",
            super::users::ENV_SEED_PASSWORD
        ),
        Some(None) => format!("the value of {}", super::users::ENV_SEED_PASSWORD),
        None => "as printed when this data directory was first used".to_owned(),
    };
    let shown = match seeded {
        Some(Some(p)) => p.to_owned(),
        _ => "PASSWORD".to_owned(),
    };
    let login_body = serde_json::json!({"email": "supervisor@isep.ipp.pt", "password": shown});
    println!(
        "PMS is up.
  front office http://{listen}/app/  (sign in with a demo account below, or register)
  gateway      http://{listen}  (HTTP/1.1 and h2c)
               https://{tls}  (h2 and HTTP/1.1; CA: {ca})
  admin        http://{admin}/readyz  /metrics
  users        http://{users}  ({backend:?})
  parks        http://{parks}
  payments     http://{payments}
  config       {config}

Demo accounts: {accounts}
  password: {password}

Log in and list the users through the gateway:
  TOKEN=$(curl -s -X POST -H 'content-type: application/json' -d '{login}' http://{listen}/users/login | sed -E 's/.*\"token\":\"([^\"]+)\".*/\\1/')
  curl -s -H \"authorization: Bearer $TOKEN\" http://{listen}/users/getAllUsers
  curl -s --cacert {ca} --http2 -H \"authorization: Bearer $TOKEN\" https://localhost:{port}/users/getAllUsers

Drive a demo car in at park 1's entrance (barrier 1) and out at its exit (barrier 2):
  echo 28-XQ-51 | {exe} device barrier --data-dir {data} --park 1 --barrier 1 --direction entrance
  echo 28-XQ-51 | {exe} device barrier --data-dir {data} --park 1 --barrier 2 --direction exit
  {exe} device display --data-dir {data} --id 1      (follows display D1.1 as it changes)

The benchmark routes:
  curl -s -X POST -H 'content-type: application/json' --data '{payload}' http://{listen}/passthrough
  curl -s -X POST --data '{payload}' http://{listen}/transform

Ctrl-C stops everything.",
        listen = args.listen,
        tls = args.tls_listen,
        admin = args.admin_listen,
        ca = certs.ca.display(),
        config = config.display(),
        accounts = accounts.join(", "),
        login = login_body.to_string().replace('\'', "'\\''"),
        port = args.tls_listen.port(),
        users = up.users,
        parks = up.parks,
        payments = up.payments,
        exe = std::env::current_exe().map_or_else(|_| "pms".to_owned(), |p| p.display().to_string()),
        data = args.data_dir.display(),
    );
}
