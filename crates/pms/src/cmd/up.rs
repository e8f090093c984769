//! `pms up`: the whole system in one process on loopback, for a first look.
//!
//! Today that is the gateway (cleartext HTTP/1.1 + h2c, and TLS with a dev certificate kept in
//! the data directory) in front of the echo back-end, with the benchmark's `/passthrough` and
//! `/transform` routes. The users service joins here when it exists; the flags are the ones it
//! will keep.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use pms_net::serve::ServeConfig;

use super::UsageError;

/// Arguments of `pms up`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory for state kept between runs (the dev TLS certificate today).
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
}

pub fn run(mut args: Args) -> anyhow::Result<()> {
    // Absolute, so the paths written into the generated config do not depend on where it lives.
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    args.data_dir = std::fs::canonicalize(&args.data_dir)
        .with_context(|| format!("resolving {}", args.data_dir.display()))?;
    let certs = ensure_certs(&args.data_dir.join("certs"))?;
    let rt = super::runtime()?;
    rt.block_on(async {
        let echo_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the echo back-end")?;
        let echo_addr = echo_listener.local_addr()?;

        let toml = gateway_config(&args, echo_addr, &certs);
        let config_path = args.data_dir.join("gateway.toml");
        std::fs::write(&config_path, &toml)
            .with_context(|| format!("writing {}", config_path.display()))?;
        let settings = pms_gateway::config::load(&config_path, &pms_gateway::config::process_env)
            .map_err(|e| UsageError(format!("invalid configuration:\n{e}")))?;
        let bound = pms_gateway::Bound::bind(&settings).context("binding the gateway")?;

        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let echo = tokio::spawn(pms_echo::run(
            echo_listener,
            pms_echo::EchoConfig {
                delay: std::time::Duration::ZERO,
                serve: ServeConfig::default(),
            },
            stopped(stop_rx.clone()),
        ));
        tokio::spawn(async move {
            super::shutdown_signal().await;
            let _ = stop_tx.send(true);
        });
        print_banner(&args, &certs, &config_path);
        let drain = pms_gateway::run(settings, bound, stopped(stop_rx)).await?;
        let _ = echo.await;
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

fn gateway_config(args: &Args, echo: SocketAddr, certs: &Certs) -> String {
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
"#,
        admin = args.admin_listen,
        listen = args.listen,
        tls = args.tls_listen,
        cert = certs.cert.display().to_string(),
        key = certs.key.display().to_string(),
    )
}

fn print_banner(args: &Args, certs: &Certs, config: &Path) {
    let payload = r#"{"size":"50B","payload":["0123456789","ABCDEFGH"]}"#;
    println!(
        "PMS is up.
  gateway      http://{listen}  (HTTP/1.1 and h2c)
               https://{tls}  (h2 and HTTP/1.1; CA: {ca})
  admin        http://{admin}/readyz  /metrics
  config       {config}

Try:
  curl -s -X POST -H 'content-type: application/json' --data '{payload}' http://{listen}/passthrough
  curl -s -X POST --data '{payload}' http://{listen}/transform
  curl -s --cacert {ca} --http2 -X POST --data 'over h2' https://localhost:{port}/passthrough

Ctrl-C stops everything.",
        listen = args.listen,
        tls = args.tls_listen,
        admin = args.admin_listen,
        ca = certs.ca.display(),
        config = config.display(),
        port = args.tls_listen.port(),
    );
}
