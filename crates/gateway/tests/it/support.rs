//! Spawning gateways and back-ends for the tests.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pms_gateway::StartError;
use pms_net::serve::{Drain, ServeConfig};
use pms_testkit::{certs, Spawned};

/// A running gateway.
pub struct Gw {
    pub spawned: Spawned<Result<Drain, StartError>>,
    /// Public listener addresses in config order.
    pub addrs: Vec<SocketAddr>,
    pub admin: SocketAddr,
}

impl Gw {
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }
}

/// Starts a gateway from TOML text. `{cert}`, `{key}` and `{ca}` are replaced by the test
/// certificate paths; listeners and admin should use port 0.
pub async fn gateway(toml: &str, env: &[(&str, &str)]) -> Gw {
    gateway_with(toml, env, |_| {}).await
}

/// [`gateway`], with `adjust` applied to the settings before it starts (what an embedding
/// program sets that no config file can, such as the OpenAPI document).
pub async fn gateway_with(
    toml: &str,
    env: &[(&str, &str)],
    adjust: impl FnOnce(&mut pms_gateway::config::Settings),
) -> Gw {
    let c = certs();
    let text = toml
        .replace("{cert}", &c.cert.display().to_string())
        .replace("{key}", &c.key.display().to_string())
        .replace("{ca}", &c.ca.display().to_string());
    let text = with_io_driver(&text);
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let settings = pms_gateway::config::parse(&text, "test.toml")
        .and_then(|raw| {
            raw.resolve("test.toml", std::path::Path::new("."), &|k| {
                env.get(k).cloned()
            })
        })
        .unwrap_or_else(|e| panic!("test config rejected:\n{e}"));
    let mut settings = settings;
    adjust(&mut settings);
    let bound = pms_gateway::Bound::bind(&settings).expect("bind");
    let addrs = bound.public_addrs().into_iter().map(|(_, a)| a).collect();
    let admin = bound.admin_addr();
    let spawned = Spawned::with(addrs_first(&bound), move |stop| {
        pms_gateway::run(settings, bound, stop)
    });
    Gw {
        spawned,
        addrs,
        admin,
    }
}

/// `PMS_TEST_IO=epoll` (or any other `runtime.io` value) runs every gateway of the suite with
/// it instead of the default, `auto` (`scripts/test.sh` runs the suite once more with epoll);
/// a config that sets `runtime.io` itself keeps its own.
fn with_io_driver(toml: &str) -> String {
    let Ok(io) = std::env::var("PMS_TEST_IO") else {
        return toml.to_string();
    };
    if toml.lines().any(|l| l.trim_start().starts_with("io =")) {
        return toml.to_string();
    }
    let line = format!("io = {io:?}");
    match toml.find("[runtime]") {
        Some(at) => {
            let end = at + "[runtime]".len();
            format!("{}\n{line}{}", &toml[..end], &toml[end..])
        }
        // A table of its own at the top, before any `[table]` header.
        None => format!("[runtime]\n{line}\n{toml}"),
    }
}

fn addrs_first(bound: &pms_gateway::Bound) -> SocketAddr {
    bound
        .public_addrs()
        .first()
        .map(|(_, a)| *a)
        .unwrap_or_else(|| bound.admin_addr())
}

/// Everything `conn` receives until the peer closes it, as text; panics after 10 s.
pub async fn read_until_closed(conn: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut resp = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut resp))
        .await
        .expect("still open after 10 s")
        .expect("reading until closed");
    String::from_utf8_lossy(&resp).into_owned()
}

/// The `endpoints = [...]` line of an `[[upstreams]]` entry for a cleartext back-end.
pub fn endpoint(addr: SocketAddr) -> String {
    format!(r#"endpoints = ["http://127.0.0.1:{}"]"#, addr.port())
}

/// TLS server config for back-ends.
pub fn server_tls(http1_only: bool) -> Arc<rustls::ServerConfig> {
    let c = certs();
    let alpn: &[&[u8]] = if http1_only {
        &[pms_net::ALPN_HTTP11]
    } else {
        &[pms_net::ALPN_H2, pms_net::ALPN_HTTP11]
    };
    Arc::new(pms_net::tls::server_config(&c.cert, &c.key, alpn).expect("server TLS"))
}

/// Starts `pms echo`'s component.
pub async fn echo(tls: bool, http1_only: bool, delay: Duration) -> Spawned<Drain> {
    let config = pms_echo::EchoConfig {
        delay,
        serve: ServeConfig {
            tls: tls.then(|| server_tls(http1_only)),
            http1_only,
            ..ServeConfig::default()
        },
        ..pms_echo::EchoConfig::default()
    };
    Spawned::start(|l, stop| pms_echo::run(l, config, stop)).await
}

/// Starts the header-reflecting inspector.
pub async fn inspector() -> Spawned<Drain> {
    pms_testkit::inspect::spawn(ServeConfig::default(), http::StatusCode::OK).await
}

/// A gateway with one cleartext listener routing everything under `/` to `upstream` (an
/// `[[upstreams]]` body without the header line) and `extra` appended (more routes, auth, …).
pub async fn simple(upstream: &str, route_extra: &str, extra: &str, env: &[(&str, &str)]) -> Gw {
    let toml = format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[[listeners]]
name = "public"
listen = "127.0.0.1:0"

[[upstreams]]
name = "up"
{upstream}

[[routes]]
name = "all"
match = {{ path_prefix = "/" }}
upstream = "up"
{route_extra}

{extra}
"#
    );
    gateway(&toml, env).await
}

/// Sends `request` on a new HTTP/2 connection to `addr` with `first` as the start of its body,
/// never ends the body, and returns the answer's status and body text; panics after 10 s.
pub async fn h2_stalled_upload(
    addr: SocketAddr,
    request: http::Request<()>,
    first: &'static [u8],
) -> (http::StatusCode, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let (response, mut body) = client.send_request(request, false).unwrap();
    body.send_data(bytes::Bytes::from_static(first), false)
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .expect("answered in time")
        .unwrap();
    let status = response.status();
    let mut data = response.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = data.data().await {
        text.extend_from_slice(&chunk.unwrap());
    }
    (status, String::from_utf8(text).unwrap())
}

/// What the gateways of this test binary logged at warn and above, kept from the first call on.
static LOGS: std::sync::OnceLock<Arc<std::sync::Mutex<Vec<u8>>>> = std::sync::OnceLock::new();

/// Starts keeping the logs (once per test binary: every gateway's worker threads log into it).
pub fn keep_logs() {
    LOGS.get_or_init(|| {
        let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
        let writer = Arc::clone(&kept);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || LogWriter(Arc::clone(&writer)))
            .finish();
        // Another test binary's choice cannot interfere: this is the only place that sets it.
        let _ = tracing::subscriber::set_global_default(subscriber);
        kept
    });
}

/// The kept log lines that name request `id`.
pub fn logged_for(id: &str) -> String {
    let needle = format!("request_id={id}");
    LOGS.get()
        .map(|l| String::from_utf8_lossy(&l.lock().unwrap_or_else(|e| e.into_inner())).into_owned())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&needle))
        .collect::<Vec<_>>()
        .join("\n")
}

struct LogWriter(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
