//! Throwaway PostgreSQL servers for tests, started by the repository's `scripts/pg.sh` from
//! Debian's `postgresql` package: loopback only, a fresh cluster in a temp directory, stopped and
//! deleted when the test process exits (pg.sh watches its pid).
//!
//! [`shared`] is one server per test process; every test takes its own database from it with
//! [`Pg::fresh_database`]. Tests that stop the database start a [`Pg`] of their own.
//! Set `PMS_TEST_SKIP_PG=1` to skip PostgreSQL tests on a machine without the package; without it
//! a missing PostgreSQL is a test failure, not a silent skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// One PostgreSQL cluster.
#[derive(Debug)]
pub struct Pg {
    /// URL of the `postgres` database (superuser, trust auth, loopback).
    pub url: String,
    dir: PathBuf,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg.sh")
}

fn pg_sh(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(script())
        .args(args)
        .output()
        .expect("run scripts/pg.sh");
    assert!(
        out.status.success(),
        "scripts/pg.sh {args:?} failed (install Debian's postgresql package, or set \
         PMS_TEST_SKIP_PG=1 to skip PostgreSQL tests):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Whether PostgreSQL tests are switched off (`PMS_TEST_SKIP_PG=1`).
pub fn skipped() -> bool {
    std::env::var("PMS_TEST_SKIP_PG").is_ok_and(|v| v == "1")
}

/// The URL of a database for one test: on `postgres`, a fresh database of the [`shared`] server
/// (`None` where PostgreSQL tests are [`skipped`]); else a SQLite file `file` in `dir`.
pub fn test_database(postgres: bool, dir: &std::path::Path, file: &str) -> Option<String> {
    if !postgres {
        return Some(format!("sqlite://{}?mode=rwc", dir.join(file).display()));
    }
    if skipped() {
        return None;
    }
    Some(shared().fresh_database())
}

/// The process-wide server, started on first use.
///
/// # Panics
/// When it cannot be started.
pub fn shared() -> &'static Pg {
    static PG: OnceLock<Pg> = OnceLock::new();
    PG.get_or_init(Pg::start)
}

impl Pg {
    /// Starts a new cluster of its own.
    ///
    /// # Panics
    /// When pg.sh fails.
    pub fn start() -> Pg {
        let base = tempfile::Builder::new()
            .prefix("pms-pg-")
            .tempdir()
            .expect("temp dir")
            .keep();
        // The postgres user (pg.sh runs the server as it when we are root) must reach the dir.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755))
                .expect("chmod temp dir");
        }
        let dir = base.join("pg");
        let pid = std::process::id().to_string();
        let url = pg_sh(&["start", &dir.display().to_string(), "--watch", &pid]);
        Pg { url, dir }
    }

    /// Stops the server (its data stays).
    pub fn stop(&self) {
        pg_sh(&["stop", &self.dir.display().to_string()]);
    }

    /// Starts it again after [`Pg::stop`], on the same port.
    pub fn restart(&self) {
        pg_sh(&["start", &self.dir.display().to_string()]);
    }

    /// Creates an empty database and returns its URL.
    ///
    /// # Panics
    /// When `psql` fails.
    pub fn fresh_database(&self) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let out = Command::new("psql")
            .args([&self.url, "-v", "ON_ERROR_STOP=1", "-q", "-c"])
            .arg(format!("CREATE DATABASE {name}"))
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "CREATE DATABASE failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        match self.url.rsplit_once('/') {
            Some((base, _)) => format!("{base}/{name}"),
            None => panic!("unexpected URL {}", self.url),
        }
    }
}
