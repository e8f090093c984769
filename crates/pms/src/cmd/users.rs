//! `pms users`: the users service on its own, and the options `pms up` shares with it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use pms_auth::{Algorithm, KeySource, Signer, VerifierConfig};
use pms_events::wiring::Sources;
use pms_net::serve::ServeConfig;
use pms_users::password::{self, HashParams};
use pms_users::store::{self, StoreConfig};
use pms_users::{App, UsersConfig};

use super::UsageError;

/// Environment variable holding the seeded accounts' password.
pub const ENV_SEED_PASSWORD: &str = "PMS_SEED_PASSWORD";
/// Shortest HMAC secret accepted (256 bits as hex or text).
const MIN_SECRET_BYTES: usize = 32;

/// Options of the users service that `pms up` offers too.
#[derive(Debug, Clone, clap::Args)]
pub struct ServiceOptions {
    /// PostgreSQL (`postgres://USER@HOST:PORT/DB`) or SQLite (`sqlite://PATH?mode=rwc`);
    /// default: SQLite file `users.db` in the data directory.
    #[arg(long, env = "PMS_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Most database connections.
    #[arg(long, default_value_t = store::DEFAULT_POOL_SIZE)]
    pub pool_size: u32,
    /// Database connections opened at start and kept open (at most --pool-size); more open on demand.
    #[arg(long, default_value_t = store::DEFAULT_MIN_CONNECTIONS)]
    pub pool_min: u32,
    #[command(flatten)]
    pub in_flight: super::service::InFlight,
    #[command(flatten)]
    pub retention: super::service::OutboxRetention,
    /// Per-statement time limit, in ms (PostgreSQL statement_timeout; SQLite lock wait).
    #[arg(long, default_value_t = 5000)]
    pub statement_timeout_ms: u64,
    /// Login token lifetime, in seconds: at most a day, the longest the services and the
    /// gateway accept.
    #[arg(long, default_value_t = pms_users::DEFAULT_TOKEN_LIFETIME.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=pms_auth::verify::DEFAULT_MAX_LIFETIME.as_secs()))]
    pub token_lifetime_s: u64,
    /// argon2id memory cost in KiB.
    #[arg(long, default_value_t = password::DEFAULT_M_COST_KIB)]
    pub argon2_m_kib: u32,
    /// argon2id passes.
    #[arg(long, default_value_t = password::DEFAULT_T_COST)]
    pub argon2_t: u32,
    /// argon2id lanes.
    #[arg(long, default_value_t = password::DEFAULT_P_COST)]
    pub argon2_p: u32,
    /// Do not create the demo accounts in an empty database.
    #[arg(long)]
    pub no_seed: bool,
    /// PARKY coins for a customer whose invitation code another used to register, when the
    /// other's first visit closes (0: none).
    #[arg(long, default_value_t = pms_users::store::awards::Awards::default().invitation,
          value_parser = clap::value_parser!(i64).range(0..=1_000_000))]
    pub invitation_coins: i64,
    /// PARKY coins on each anniversary of a customer's registration (0: none).
    #[arg(long, default_value_t = pms_users::store::awards::Awards::default().anniversary,
          value_parser = clap::value_parser!(i64).range(0..=1_000_000))]
    pub anniversary_coins: i64,
}

/// Arguments of `pms users`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (HTTP/1.1 and h2c; with --tls-cert, TLS with ALPN h2/http1.1).
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: SocketAddr,
    /// Directory for the default SQLite database.
    #[arg(long, default_value = "pms-data")]
    data_dir: PathBuf,
    #[command(flatten)]
    service: ServiceOptions,
    /// Environment variable holding the HS256 secret shared with the gateway.
    #[arg(long, default_value = "PMS_JWT_SECRET")]
    jwt_secret_env: String,
    /// File holding the HS256 secret (instead of the environment variable).
    #[arg(long, conflicts_with = "jwt_private_key")]
    jwt_secret_file: Option<PathBuf>,
    /// PEM private key to sign tokens with an asymmetric algorithm (see --jwt-algorithm).
    #[arg(long, requires = "jwt_public_key")]
    jwt_private_key: Option<PathBuf>,
    /// PEM public key matching --jwt-private-key (what the gateway verifies with).
    #[arg(long, requires = "jwt_private_key")]
    jwt_public_key: Option<PathBuf>,
    /// Algorithm for --jwt-private-key: EdDSA, ES256, RS256, …
    #[arg(long, default_value = "EdDSA")]
    jwt_algorithm: String,
    /// PEM certificate chain; serves TLS.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// NATS server with JetStream (`nats://HOST:4222`) that carries the domain events between
    /// the services' processes (the distributed mode).
    #[arg(long, env = "PMS_NATS_URL")]
    nats_url: Option<String>,
    /// Seconds after a closed account's `customer.closed` reached the broker until its key is
    /// erased there, and with it every copy of the customer's data on the broker (readers that
    /// are behind by more than this get the copies erased). Distributed mode only.
    #[arg(long, env = "PMS_NATS_ERASE_AFTER_S", default_value_t = pms_events::nats::DEFAULT_ERASE_AFTER.as_secs())]
    nats_erase_after_s: u64,
}

/// How tokens are signed and checked.
pub struct TokenKeys {
    signer: Signer,
    verifier: VerifierConfig,
}

impl TokenKeys {
    /// HS256 with a shared secret.
    pub fn hs256(secret: &[u8]) -> anyhow::Result<Self> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(UsageError(format!(
                "the JWT secret is {} bytes; use at least {MIN_SECRET_BYTES} (e.g. `openssl rand -hex 32`)",
                secret.len()
            ))
            .into());
        }
        Ok(Self {
            signer: Signer::hmac(Algorithm::HS256, secret)
                .map_err(|e| UsageError(e.to_string()))?,
            verifier: VerifierConfig::hs256(secret.to_vec()),
        })
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let keys = token_keys(&args)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(Arc::new(
            pms_net::tls::server_config(cert, key, &[pms_net::ALPN_H2, pms_net::ALPN_HTTP11])
                .map_err(|e| UsageError(format!("TLS: {e}")))?,
        )),
        _ => None,
    };
    let (config, generated) = config(&args.service, &args.data_dir, keys)?;
    super::runtime()?.block_on(async {
        let shutdown = super::shutdown_signal();
        let app = App::new(config).map_err(|e| UsageError(e.to_string()))?;
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let seeded = start(&app).await?;
        if seeded {
            print_seeded(generated.as_deref());
        }
        tracing::info!(addr = %args.listen, tls = tls.is_some(), database = ?app.store.backend(), "users service listening");
        let serve = pms_service::Serving {
            net: ServeConfig {
                tls,
                ..ServeConfig::default()
            },
            ..args.service.in_flight.serving()
        };
        let (stop, stopped) = super::service::stop_on(shutdown);
        args.service
            .retention
            .spawn(&app.outbox, pms_users::events::PASSING_EVENTS, stop.clone());
        pms_users::anniversaries::spawn(&app, stop.clone());
        if let Some(nats) = super::service::events_broker(args.nats_url.as_deref(), "users").await? {
            let nats = nats.erasing_after(Duration::from_secs(args.nats_erase_after_s));
            pms_users::events::spawn_consumers(&app, Sources::Nats(nats), stop)?;
        }
        let drain = pms_users::run(listener, app, serve, stopped).await;
        tracing::info!(?drain, "users service stopped");
        Ok(())
    })
}

/// Migrates and seeds once; if the database is merely unreachable, keeps trying in the
/// background (the service answers 503 meanwhile). Returns whether it seeded now.
pub async fn start(app: &App) -> anyhow::Result<bool> {
    super::service::start(
        "users",
        app.init(),
        |e| e.is_unavailable(),
        || {
            app.init_in_background();
        },
    )
    .await
}

/// The service configuration; also returns the seed password when it was generated here.
pub fn config(
    opts: &ServiceOptions,
    data_dir: &Path,
    keys: TokenKeys,
) -> anyhow::Result<(UsersConfig, Option<String>)> {
    let url = match &opts.database_url {
        Some(url) => url.clone(),
        None => {
            super::create_private_dir(data_dir)?;
            StoreConfig::sqlite_file(&data_dir.join("users.db")).url
        }
    };
    if store::Backend::of_url(&url).is_none() {
        return Err(UsageError(format!(
            "--database-url {:?}: expected sqlite:… or postgres:…",
            store::redact_url(&url)
        ))
        .into());
    }
    // On PostgreSQL in a schema of its own, as every service (ignored for SQLite).
    let mut store = StoreConfig::new(url).in_schema("users");
    store.pool_size = opts.pool_size;
    store.min_connections = opts.pool_min;
    store.statement_timeout = Duration::from_millis(opts.statement_timeout_ms);
    let (seed_password, generated) = if opts.no_seed {
        (None, None)
    } else {
        match std::env::var(ENV_SEED_PASSWORD) {
            Ok(p) if !p.is_empty() => (Some(p), None),
            _ => {
                let p = format!("Pms#{}x", password::random_token(8));
                (Some(p.clone()), Some(p))
            }
        }
    };
    let mut signer = keys.signer;
    signer.lifetime = Duration::from_secs(opts.token_lifetime_s.max(1));
    let issuer = signer.issuer.clone();
    let config = UsersConfig {
        store,
        hash: HashParams {
            m_cost_kib: opts.argon2_m_kib,
            t_cost: opts.argon2_t,
            p_cost: opts.argon2_p,
        },
        // Hashing is all CPU: more at once than cores only holds more work areas (each of
        // --argon2-m-kib) without finishing sooner. A container's CPU limit counts.
        hash_parallelism: std::thread::available_parallelism().map_or(1, |n| n.get()),
        signer,
        verifier: VerifierConfig {
            issuers: Some(vec![issuer]),
            ..keys.verifier
        },
        seed_password,
        max_body_bytes: pms_users::DEFAULT_MAX_BODY_BYTES,
        body_timeout: pms_users::DEFAULT_BODY_TIMEOUT,
        awards: pms_users::store::awards::Awards {
            invitation: opts.invitation_coins,
            anniversary: opts.anniversary_coins,
        },
    };
    Ok((config, generated))
}

fn token_keys(args: &Args) -> anyhow::Result<TokenKeys> {
    if let (Some(private), Some(public)) = (&args.jwt_private_key, &args.jwt_public_key) {
        let alg = pms_auth::parse_algorithm(&args.jwt_algorithm).map_err(UsageError)?;
        let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
        let signer = Signer::from_pem(alg, &read(private)?)
            .map_err(|e| UsageError(format!("--jwt-private-key: {e}")))?;
        return Ok(TokenKeys {
            signer,
            verifier: VerifierConfig {
                algorithms: vec![alg],
                keys: KeySource::PublicKeyPem(read(public)?),
                ..VerifierConfig::hs256(Vec::new())
            },
        });
    }
    let secret = match &args.jwt_secret_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            text.trim_end_matches(['\r', '\n']).as_bytes().to_vec()
        }
        None => std::env::var(&args.jwt_secret_env)
            .map_err(|_| {
                UsageError(format!(
                    "no token key: set {} (e.g. `openssl rand -hex 32`), or pass --jwt-secret-file or --jwt-private-key",
                    args.jwt_secret_env
                ))
            })?
            .into_bytes(),
    };
    TokenKeys::hs256(&secret)
}

/// Says, once, which password the demo accounts got.
pub fn print_seeded(generated: Option<&str>) {
    match generated {
        Some(p) => println!(
            "Created the demo accounts with the generated password {p}\n\
             (shown only now; set {ENV_SEED_PASSWORD} before the first start to choose it)."
        ),
        None => println!("Created the demo accounts with the password from {ENV_SEED_PASSWORD}."),
    }
}
