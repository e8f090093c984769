//! `pms echo`: the benchmark back-end.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use pms_net::serve::ServeConfig;

use super::UsageError;

/// Arguments of `pms echo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8688")]
    listen: SocketAddr,
    /// PEM certificate chain; enables TLS (ALPN h2 and http/1.1).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve HTTP/1.1 only: no h2c on cleartext, no h2 in ALPN on TLS.
    #[arg(long)]
    http1_only: bool,
    /// Delay every response by this many milliseconds (a timer, not a blocked thread).
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Send every request through hyper, without the HTTP/1.1 fast path: the echo as the
    /// benchmark runs before it had one measured it.
    #[arg(long)]
    no_fast_path: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let alpn: &[&[u8]] = if args.http1_only {
                &[pms_net::ALPN_HTTP11]
            } else {
                &[pms_net::ALPN_H2, pms_net::ALPN_HTTP11]
            };
            Some(Arc::new(
                pms_net::tls::server_config(cert, key, alpn)
                    .map_err(|e| UsageError(format!("TLS: {e}")))?,
            ))
        }
        _ => None,
    };
    let config = pms_echo::EchoConfig {
        delay: Duration::from_millis(args.delay_ms),
        serve: ServeConfig {
            tls,
            http1_only: args.http1_only,
            ..ServeConfig::default()
        },
        fast_path: !args.no_fast_path,
    };
    super::runtime()?.block_on(async {
        let shutdown = super::shutdown_signal();
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        tracing::info!(addr = %args.listen, tls = config.serve.tls.is_some(), http1_only = args.http1_only, delay_ms = args.delay_ms, fast_path = config.fast_path, "echo listening");
        let drain = pms_echo::run(listener, config, shutdown).await;
        tracing::info!(?drain, "echo stopped");
        Ok(())
    })
}
