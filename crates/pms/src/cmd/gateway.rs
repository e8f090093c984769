//! `pms gateway --config FILE`.

use std::path::PathBuf;

use anyhow::Context;

use super::UsageError;

/// Arguments of `pms gateway`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Gateway configuration (TOML); see docs/gateway.md.
    #[arg(long, short)]
    config: PathBuf,
    /// Check the configuration and exit without binding anything.
    #[arg(long)]
    check: bool,
}

pub fn run(args: Args, spans: Option<pms_gateway::spans::Spans>) -> anyhow::Result<()> {
    let mut settings = pms_gateway::config::load(&args.config, &pms_gateway::config::process_env)
        .map_err(|e| UsageError(format!("invalid configuration:\n{e}")))?;
    settings.openapi = Some(pms_gateway::config::OpenApiSource::new(
        super::openapi::json,
    ));
    settings.spans = spans;
    if args.check {
        println!("{}: configuration OK", args.config.display());
        return Ok(());
    }
    // The caller's runtime only runs the admin listener and signals; public traffic runs on the
    // gateway's own per-core worker threads.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let shutdown = {
        let _runtime = rt.enter();
        super::shutdown_signal()
    };
    let bound = pms_gateway::Bound::bind(&settings).context("binding listeners")?;
    rt.block_on(async {
        tracing::info!(admin = %bound.admin_addr(), "admin listening");
        let drain = pms_gateway::run(settings, bound, shutdown).await?;
        tracing::info!(?drain, "gateway stopped");
        Ok(())
    })
}
