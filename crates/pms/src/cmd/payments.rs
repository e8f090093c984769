//! `pms payments`: the payments service on its own; with `--nats-url` its domain events travel
//! through NATS JetStream (see `pms parks`).

use std::net::SocketAddr;

use pms_events::wiring::Sources;
use pms_payments::{App, PaymentsConfig};

use super::service::{bind, ServiceArgs};
use super::UsageError;

/// Arguments of `pms payments`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (HTTP/1.1 and h2c).
    #[arg(long, default_value = "127.0.0.1:8086")]
    listen: SocketAddr,
    #[command(flatten)]
    service: ServiceArgs,
}

/// The service configuration.
pub fn config(
    service: &ServiceArgs,
    verifier: pms_auth::VerifierConfig,
) -> anyhow::Result<PaymentsConfig> {
    Ok(PaymentsConfig {
        store: service.store("payments")?,
        verifier,
        limits: pms_service::http::BodyLimits::default(),
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = config(&args.service, args.service.verifier()?)?;
    super::runtime()?.block_on(async {
        let shutdown = super::shutdown_signal();
        let app = App::new(config).map_err(|e| UsageError(e.to_string()))?;
        let listener = bind(args.listen, "payments service").await?;
        start(&app).await?;
        let (stop, stopped) = super::service::stop_on(shutdown);
        args.service.retention.spawn(
            &app.outbox,
            pms_payments::events::PASSING_EVENTS,
            stop.clone(),
        );
        if let Some(nats) =
            super::service::events_broker(args.service.nats_url.as_deref(), "payments").await?
        {
            pms_payments::events::spawn_consumers(&app, Sources::Nats(nats), stop)?;
        }
        tracing::info!(addr = %args.listen, "payments service listening");
        let drain =
            pms_payments::run(listener, app, args.service.in_flight.serving(), stopped).await;
        tracing::info!(?drain, "payments service stopped");
        Ok(())
    })
}

/// Migrates once; if the database is merely unreachable, keeps trying in the background.
pub async fn start(app: &App) -> anyhow::Result<()> {
    super::service::start(
        "payments",
        app.init(),
        |e| e.is_unavailable(),
        || {
            app.init_in_background();
        },
    )
    .await
}
