//! What `pms parks` and `pms payments` share: where to listen, the database, and the key that
//! verifies the users service's tokens (each service verifies tokens itself).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use pms_auth::{KeySource, VerifierConfig};
use pms_service::store::{Backend, StoreConfig};

use super::UsageError;

/// The options of a domain service that only verifies tokens.
#[derive(Debug, Clone, clap::Args)]
pub struct ServiceArgs {
    /// Directory for the default SQLite database.
    #[arg(long, default_value = "pms-data")]
    pub data_dir: PathBuf,
    /// PostgreSQL (`postgres://USER@HOST:PORT/DB`) or SQLite (`sqlite://PATH?mode=rwc`); default:
    /// a SQLite file in the data directory. On PostgreSQL the service keeps its tables in a
    /// schema named after it.
    #[arg(long, env = "PMS_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Most database connections.
    #[arg(long, default_value_t = pms_service::store::DEFAULT_POOL_SIZE)]
    pub pool_size: u32,
    #[command(flatten)]
    pub in_flight: InFlight,
    #[command(flatten)]
    pub retention: OutboxRetention,
    /// Environment variable holding the HS256 secret the users service signs tokens with.
    #[arg(long, default_value = "PMS_JWT_SECRET")]
    pub jwt_secret_env: String,
    /// File holding that secret (instead of the environment variable).
    #[arg(long, conflicts_with = "jwt_public_key")]
    pub jwt_secret_file: Option<PathBuf>,
    /// PEM public key of the users service's asymmetric signing key.
    #[arg(long)]
    pub jwt_public_key: Option<PathBuf>,
    /// Algorithm for --jwt-public-key: EdDSA, ES256, RS256, …
    #[arg(long, default_value = "EdDSA")]
    pub jwt_algorithm: String,
    /// NATS server with JetStream (`nats://HOST:4222`) that carries the domain events between
    /// the services' processes (the distributed mode). Without it the service runs without
    /// events.
    #[arg(long, env = "PMS_NATS_URL")]
    pub nats_url: Option<String>,
}

impl ServiceArgs {
    /// How tokens are verified.
    pub fn verifier(&self) -> anyhow::Result<VerifierConfig> {
        if let Some(public) = &self.jwt_public_key {
            let alg = pms_auth::parse_algorithm(&self.jwt_algorithm).map_err(UsageError)?;
            let pem =
                std::fs::read(public).with_context(|| format!("reading {}", public.display()))?;
            return Ok(VerifierConfig {
                algorithms: vec![alg],
                keys: KeySource::PublicKeyPem(pem),
                ..VerifierConfig::hs256(Vec::new())
            });
        }
        let secret = match &self.jwt_secret_file {
            Some(path) => read_secret(path)?,
            None => std::env::var(&self.jwt_secret_env).map_err(|_| {
                UsageError(format!(
                    "no token key: set {}, or pass --jwt-secret-file or --jwt-public-key",
                    self.jwt_secret_env
                ))
            })?,
        };
        Ok(VerifierConfig::hs256(secret.into_bytes()))
    }

    /// The database: the URL given (in schema `name` on PostgreSQL), else `NAME.db` in the data
    /// directory.
    pub fn store(&self, name: &str) -> anyhow::Result<StoreConfig> {
        let config = match &self.database_url {
            Some(url) => {
                if Backend::of_url(url).is_none() {
                    return Err(UsageError(format!(
                        "--database-url {:?}: expected sqlite:… or postgres:…",
                        pms_service::store::redact_url(url)
                    ))
                    .into());
                }
                StoreConfig::new(url.clone()).in_schema(name)
            }
            None => {
                super::create_private_dir(&self.data_dir)?;
                StoreConfig::sqlite_file(&self.data_dir.join(format!("{name}.db")))
            }
        };
        let mut config = config;
        config.pool_size = self.pool_size;
        config.statement_timeout = Duration::from_secs(5);
        Ok(config)
    }
}

/// How many requests each service takes at once: the one `--max-in-flight` of every service
/// command and of `pms up`.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct InFlight {
    /// Most requests each service handles at once; past it a request is answered 503 `busy`
    /// with `Retry-After: 1` at once instead of waiting behind the others.
    #[arg(long, default_value_t = pms_service::in_flight::DEFAULT_MAX_IN_FLIGHT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_in_flight: usize,
}

impl InFlight {
    /// Serving with the default connection settings and this bound.
    pub fn serving(self) -> pms_service::Serving {
        pms_service::Serving {
            max_in_flight: self.max_in_flight,
            ..pms_service::Serving::default()
        }
    }
}

/// How long each service keeps the events of its outbox that every reader has passed: the one
/// `--outbox-retention` of every service command and of `pms up`.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct OutboxRetention {
    /// How long a service keeps an event of its outbox once every reader of the outbox has
    /// passed it, for replays and `pms events tail` (`7d`, `12h`, `30m`). Only events of what
    /// happened once go (visits, invoices, coins); customers and price tables are kept.
    #[arg(long, default_value = "7d", value_parser = parse_window)]
    pub outbox_retention: Duration,
}

impl OutboxRetention {
    /// Prunes `outbox`, whose passing events are `passing`, every minute until `stop`.
    pub fn spawn(
        self,
        outbox: &pms_events::Outbox,
        passing: &'static [&'static str],
        stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let retention = pms_events::retention::Retention {
            window: self.outbox_retention,
            passing,
        };
        pms_events::retention::spawn(outbox.clone(), retention, stop);
    }
}

/// A span of time as people write it (`7d`, `12h`, `1h 30m`; a day is 24 hours).
fn parse_window(text: &str) -> Result<Duration, String> {
    let span: jiff::Span = text
        .parse()
        .map_err(|e| format!("{e} (write it as 7d, 12h or 30m)"))?;
    let signed = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|e| e.to_string())?;
    Duration::try_from(signed).map_err(|_| "a retention cannot be negative".to_owned())
}

/// A secret from a file, without its trailing newline.
pub fn read_secret(path: &Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.trim_end_matches(['\r', '\n']).to_owned())
}

/// Binds `addr` for `what`.
pub async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({what})"))
}

/// Runs a service's start-up work (`init`: migrate, seed) once; when the database is merely
/// unreachable, logs it and calls `retry_later` (which keeps trying in the background while the
/// service answers 503). Any other failure ends the start.
pub async fn start<T: Default, E>(
    service: &str,
    init: impl std::future::Future<Output = Result<T, E>>,
    unavailable: impl Fn(&E) -> bool,
    retry_later: impl FnOnce(),
) -> anyhow::Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    match init.await {
        Ok(v) => Ok(v),
        Err(e) if unavailable(&e) => {
            tracing::warn!(error = %e, "database unreachable; serving 503 until it answers");
            retry_later();
            Ok(T::default())
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("preparing the {service} database"))),
    }
}

/// The process's shutdown signal twice: as a watch for background tasks (relays, consumers) and
/// as a future for the server.
pub fn stop_on(
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> (
    tokio::sync::watch::Receiver<bool>,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(true);
    });
    let mut for_server = rx.clone();
    (rx, async move {
        let _ = for_server.wait_for(|stop| *stop).await;
    })
}

/// Connects to the events' broker when `url` is given, else says that events are off.
pub async fn events_broker(
    url: Option<&str>,
    service: &str,
) -> anyhow::Result<Option<pms_events::nats::Nats>> {
    match url {
        Some(url) => {
            let nats = pms_events::nats::Nats::connect(url)
                .await
                .with_context(|| format!("connecting to the events' broker at {url}"))?;
            tracing::info!(%url, "domain events through NATS JetStream");
            Ok(Some(nats))
        }
        None => {
            tracing::warn!(
                "no --nats-url: the {service} service runs without domain events (pms up runs every service with them in one process)"
            );
            Ok(None)
        }
    }
}
