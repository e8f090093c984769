//! `pms web`: the front office on its own, in front of a gateway (`pms up` runs it in-process).
//! It calls the gateway as any client does, so it needs no database and no token key: only where
//! to listen and where the gateway is, and, when several run behind one gateway, the NATS server
//! their sessions are shared in. Its one secret is the gateway's forwarder key (its
//! `[auth.forwarder]`) in `PMS_FORWARDER_KEY`, with which each person's sign-ins count against
//! their own rate limit there.

use std::net::SocketAddr;

use anyhow::Context;
use pms_net::serve::ServeConfig;

use super::UsageError;

/// Arguments of `pms web`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (the gateway's route table sends `/app` here: 127.0.0.1:8096 in
    /// `config/gateway.toml`).
    #[arg(long, default_value = "127.0.0.1:8096")]
    listen: SocketAddr,
    /// The gateway the pages call, over plain HTTP (loopback or a private network).
    #[arg(long, env = "PMS_GATEWAY_URL", default_value = "http://127.0.0.1:8080")]
    gateway_url: String,
    /// Send the session cookie without `Secure`: only when browsers reach the front office
    /// over plain HTTP on a name other than `localhost` or `127.0.0.1` (never in production).
    #[arg(long)]
    insecure_cookies: bool,
    /// Keep the sessions in this NATS server (JetStream), shared by every front office that
    /// uses it: needed when more than one runs behind the gateway. Without it, in this process.
    #[arg(long, env = "PMS_NATS_URL")]
    nats_url: Option<String>,
    /// The environment variable holding the key the gateway trusts this front office with (its
    /// `[auth.forwarder]`): each person's sign-ins then count against their own rate limit.
    #[arg(long, default_value = "PMS_FORWARDER_KEY", value_name = "NAME")]
    forwarder_key_env: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let gateway = args.gateway_url.trim_end_matches('/');
    let Some(authority) = gateway.strip_prefix("http://") else {
        return Err(UsageError(format!(
            "--gateway-url {gateway}: the front office calls the gateway over plain http:// \
             (TLS ends at the gateway's public listener)"
        ))
        .into());
    };
    if authority.is_empty() || authority.contains('/') {
        return Err(UsageError(format!(
            "--gateway-url {gateway}: give the gateway's address only, such as http://127.0.0.1:8080"
        ))
        .into());
    }
    super::runtime()?.block_on(async {
        let shared_sessions = match &args.nats_url {
            Some(url) => Some(
                pms_web::session::connect(url)
                    .await
                    .with_context(|| format!("--nats-url {url}"))?,
            ),
            None => None,
        };
        let var = &args.forwarder_key_env;
        let forwarder_key = std::env::var(var).ok().filter(|k| !k.is_empty());
        if forwarder_key.is_none() {
            tracing::warn!(
                "{var} is not set: the gateway counts every sign-in and registration through \
                 this front office against one client's rate limit"
            );
        }
        let app = pms_web::App::new(&pms_web::WebConfig {
            gateway: gateway.to_owned(),
            secure_cookies: !args.insecure_cookies,
            forwarder_key,
            shared_sessions,
        })
        .map_err(|e| UsageError(format!("{var}: {e}")))?;
        let shutdown = super::shutdown_signal();
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let addr = listener.local_addr().unwrap_or(args.listen);
        tracing::info!(%addr, gateway, "front office listening");
        let drain = pms_web::run(listener, app, ServeConfig::default(), shutdown).await;
        tracing::info!(?drain, "front office stopped");
        Ok(())
    })
}
