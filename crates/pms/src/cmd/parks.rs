//! `pms parks`: the parks service on its own. With `--nats-url` its domain events travel through
//! NATS JetStream (the distributed mode); without it, it serves its API but learns no new
//! customers. `pms up` runs it with the other services and their events in one process.

use std::net::SocketAddr;
use std::path::PathBuf;

use pms_events::wiring::Sources;
use pms_parks::store::seed::DemoParks;
use pms_parks::{App, ParksConfig};

use super::service::{bind, read_secret, ServiceArgs};
use super::UsageError;

/// Arguments of `pms parks`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (HTTP/1.1 and h2c).
    #[arg(long, default_value = "127.0.0.1:8094")]
    listen: SocketAddr,
    #[command(flatten)]
    service: ServiceArgs,
    #[command(flatten)]
    parks: ParksOptions,
}

/// Options of the parks service that `pms up` offers too.
#[derive(Debug, Clone, clap::Args)]
pub struct ParksOptions {
    /// File holding the secret device keys derive from (see `pms device key`); default: the
    /// PMS_DEVICE_SECRET environment variable.
    #[arg(long)]
    pub device_secret_file: Option<PathBuf>,
    /// IANA time zone of the demo parks (times of day and daily reports are read in it).
    #[arg(long, default_value = pms_parks::store::seed::DEFAULT_TIME_ZONE)]
    pub time_zone: String,
    /// Longest wait of an exit for its invoice's price, in ms.
    #[arg(long, default_value_t = pms_parks::DEFAULT_EXIT_WAIT.as_millis() as u64)]
    pub exit_wait_ms: u64,
    /// How far ahead of this server's clock a barrier's time is believed, in seconds; a time
    /// further ahead is replaced by the server's.
    #[arg(long, default_value_t = pms_parks::clock::DEFAULT_AHEAD.as_secs())]
    pub clock_ahead_s: u64,
    /// How late a barrier's buffered passage is believed, in hours (its time may be this far
    /// behind the server's clock); an older time is replaced by the server's.
    #[arg(long, default_value_t = pms_parks::clock::DEFAULT_DELAY.as_secs() / 3600,
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub passage_delay_h: u64,
    /// How long a closed account's stay keeps its plate after the car left, in seconds, so
    /// that a barrier's retried exit is still recognised; then the plate is erased.
    #[arg(long, default_value_t = pms_parks::store::closure::DEFAULT_ERASE_AFTER_EXIT.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub erase_after_exit_s: u64,
    /// Do not create the demo parks in an empty database.
    #[arg(long)]
    pub no_seed_parks: bool,
    /// Free fuel spots added to each demo park beyond the published ten (floor C), so that a
    /// load test has room for its cars.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub demo_extra_spots: u32,
}

/// Environment variable holding the device secret.
pub const ENV_DEVICE_SECRET: &str = "PMS_DEVICE_SECRET";

impl ParksOptions {
    /// The service configuration.
    pub fn config(
        &self,
        service: &ServiceArgs,
        verifier: pms_auth::VerifierConfig,
        secret: Option<String>,
    ) -> anyhow::Result<ParksConfig> {
        let secret = match (secret, &self.device_secret_file) {
            (Some(s), _) => s,
            (None, Some(path)) => read_secret(path)?,
            (None, None) => std::env::var(ENV_DEVICE_SECRET).map_err(|_| {
                UsageError(format!(
                    "no device secret: set {ENV_DEVICE_SECRET} or pass --device-secret-file"
                ))
            })?,
        };
        Ok(ParksConfig {
            store: service.store("parks")?,
            verifier,
            device_secret: secret.into_bytes(),
            seed: (!self.no_seed_parks).then(|| DemoParks {
                time_zone: self.time_zone.clone(),
                extra_spots: self.demo_extra_spots,
            }),
            limits: pms_service::http::BodyLimits::default(),
            exit_wait: std::time::Duration::from_millis(self.exit_wait_ms),
            clock: pms_parks::clock::ClockRules {
                ahead: std::time::Duration::from_secs(self.clock_ahead_s),
                delay: std::time::Duration::from_secs(self.passage_delay_h * 3600),
            },
            erase_after_exit: std::time::Duration::from_secs(self.erase_after_exit_s),
        })
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = args
        .parks
        .config(&args.service, args.service.verifier()?, None)?;
    super::runtime()?.block_on(async {
        let shutdown = super::shutdown_signal();
        let app = App::new(config).map_err(|e| UsageError(e.to_string()))?;
        let listener = bind(args.listen, "parks service").await?;
        start(&app).await?;
        let (stop, stopped) = super::service::stop_on(shutdown);
        args.service
            .retention
            .spawn(&app.outbox, pms_parks::events::PASSING_EVENTS, stop.clone());
        if let Some(nats) =
            super::service::events_broker(args.service.nats_url.as_deref(), "parks").await?
        {
            pms_parks::events::spawn_consumers(&app, Sources::Nats(nats), stop)?;
        }
        tracing::info!(addr = %args.listen, "parks service listening");
        let drain = pms_parks::run(listener, app, args.service.in_flight.serving(), stopped).await;
        tracing::info!(?drain, "parks service stopped");
        Ok(())
    })
}

/// Migrates and seeds once; if the database is merely unreachable, keeps trying in the
/// background (the service answers 503 meanwhile).
pub async fn start(app: &App) -> anyhow::Result<bool> {
    super::service::start(
        "parks",
        app.init(),
        |e| e.is_unavailable(),
        || {
            app.init_in_background();
        },
    )
    .await
}
