//! Throwaway NATS servers with JetStream for tests, from Debian's `nats-server` package: loopback
//! only, a free port, storage in a temp directory, killed when dropped. [`NatsServer::restart`]
//! stops it and starts it again on the same port and storage, as a broker that went away and came
//! back. Set `PMS_TEST_SKIP_NATS=1` to skip these tests on a machine without the package; without
//! it a missing `nats-server` is a test failure, not a silent skip.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether NATS tests are switched off (`PMS_TEST_SKIP_NATS=1`).
pub fn skipped() -> bool {
    std::env::var("PMS_TEST_SKIP_NATS").is_ok_and(|v| v == "1")
}

/// A running `nats-server -js`.
#[derive(Debug)]
pub struct NatsServer {
    /// `nats://127.0.0.1:PORT`.
    pub url: String,
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl NatsServer {
    /// Starts one.
    ///
    /// # Panics
    /// When `nats-server` cannot be started or does not listen within 10 s.
    pub fn start() -> NatsServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut server = NatsServer {
            url: format!("nats://127.0.0.1:{port}"),
            port,
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let bin = [
            "nats-server",
            "/usr/sbin/nats-server",
            "/usr/bin/nats-server",
        ]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok())
        .expect("nats-server (Debian's nats-server package, or PMS_TEST_SKIP_NATS=1)");
        let child = Command::new(bin)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (the broker goes away).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and storage.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
