//! Test-only helpers shared by the integration tests of every PMS crate.
//!
//! Layout:
//! - [`certs`]: one dev CA + localhost certificate per test process, written to a temp dir.
//! - [`Spawned`]: a component running on a port-0 listener, with an explicit `shutdown()` that
//!   returns how the drain ended and re-raises the component's panic.
//! - [`client`]: HTTP clients that speak exactly one protocol (HTTP/1.1, h2c, or TLS with a chosen
//!   ALPN list) and report what was negotiated, so tests can prove which protocol was used.
//!
//! - [`pg`]: throwaway PostgreSQL servers (`scripts/pg.sh`), one per test process, a database
//!   per test.
//!
//! Nothing here is a mock: every helper talks over real loopback sockets.

#![deny(missing_docs)]

pub mod client;
pub mod inspect;
/// The published suite's ARRAY payload (the `pms-payload` crate, shared with the load generator).
pub use pms_payload as payload;
pub mod nats;
pub mod pg;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;

use pms_net::dev::DevCerts;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Dev certificates on disk, shared by all tests of one process.
#[derive(Debug)]
pub struct Certs {
    /// The generated material (PEM and DER).
    pub dev: DevCerts,
    /// `ca.pem`.
    pub ca: PathBuf,
    /// `server.pem`.
    pub cert: PathBuf,
    /// `server-key.pem`.
    pub key: PathBuf,
    _dir: tempfile::TempDir,
}

/// The process-wide dev certificates (generated on first use).
///
/// # Panics
/// If generation or writing the temp files fails: a broken test environment.
pub fn certs() -> &'static Certs {
    static CERTS: OnceLock<Certs> = OnceLock::new();
    CERTS.get_or_init(|| {
        let dev = DevCerts::generate().expect("generate dev certificates");
        let dir = tempfile::tempdir().expect("temp dir for certificates");
        dev.write_to(dir.path()).expect("write certificates");
        Certs {
            ca: dir.path().join(pms_net::dev::CA_FILE),
            cert: dir.path().join(pms_net::dev::CERT_FILE),
            key: dir.path().join(pms_net::dev::KEY_FILE),
            dev,
            _dir: dir,
        }
    })
}

/// Binds `127.0.0.1:0`.
///
/// # Panics
/// If loopback cannot be bound.
pub async fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0")
}

/// A component serving on a loopback port until [`Spawned::shutdown`] (or drop).
#[derive(Debug)]
pub struct Spawned<T: Send + 'static> {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> Spawned<T> {
    /// Starts `run(listener, shutdown)` on a fresh loopback listener.
    pub async fn start<F, Fut>(run: F) -> Self
    where
        F: FnOnce(TcpListener, std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
    {
        let listener = listener().await;
        Self::start_on(listener, run)
    }

    /// Like [`Spawned::start`] on a listener the caller bound.
    ///
    /// # Panics
    /// If the listener has no local address.
    pub fn start_on<F, Fut>(listener: TcpListener, run: F) -> Self
    where
        F: FnOnce(TcpListener, std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
    {
        let addr = listener.local_addr().expect("listener address");
        Self::with(addr, move |stop| run(listener, stop))
    }

    /// Runs `run(shutdown)` for a component that bound its sockets already (reachable at `addr`).
    pub fn with<F, Fut>(addr: SocketAddr, run: F) -> Self
    where
        F: FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = Box::pin(async move {
            let _ = stopped.await;
        });
        let task = tokio::spawn(run(shutdown));
        Self {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Signals shutdown and waits for the component to return.
    ///
    /// # Panics
    /// Re-raises a panic of the component's task.
    pub async fn shutdown(mut self) -> T {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = self.task.take().expect("task present until shutdown");
        match task.await {
            Ok(v) => v,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("component task failed: {e}"),
        }
    }
}

impl<T: Send + 'static> Drop for Spawned<T> {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Retries `check` every 10 ms until it returns `true`, panicking after `attempts` tries.
///
/// # Panics
/// When the condition never held.
pub async fn assert_eventually<F, Fut>(what: &str, attempts: u32, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..attempts {
        if check().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("condition never held: {what}");
}
