//! Start-up time: run a command, time exec → first HTTP 200 on a URL (or first accepted TCP
//! connection on a port), read its RSS at that moment, stop it with SIGTERM and wait for it; N
//! times. Plain threads and blocking sockets: nothing here may compete with the process being
//! measured for a runtime.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

/// How readiness is detected.
#[derive(Debug, Clone)]
pub enum Ready {
    /// An `http://host:port/path` URL answering 200 to GET.
    Url {
        /// Where to connect.
        addr: SocketAddr,
        /// `Host` header.
        host: String,
        /// Path and query.
        path: String,
    },
    /// A TCP port accepting connections.
    Port(SocketAddr),
}

impl Ready {
    /// Parses an `http://` URL (TLS is not supported: readiness probes are cleartext).
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn url(url: &str) -> Result<Self, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url:?}: only http:// readiness URLs are supported"))?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)
            .map_err(|e| format!("{url:?}: {e}"))?
            .next()
            .ok_or_else(|| format!("{url:?}: no address"))?;
        Ok(Self::Url {
            addr,
            host: authority.to_owned(),
            path: if path.is_empty() {
                "/".into()
            } else {
                path.into()
            },
        })
    }

    /// Whether the target is ready now: its port takes a connection, or its URL answers 200.
    pub fn check(&self) -> bool {
        match self {
            Ready::Port(addr) => {
                TcpStream::connect_timeout(addr, Duration::from_millis(50)).is_ok()
            }
            Ready::Url { addr, host, path } => http_ok(addr, host, path).unwrap_or(false),
        }
    }
}

fn http_ok(addr: &SocketAddr, host: &str, path: &str) -> std::io::Result<bool> {
    let mut s = TcpStream::connect_timeout(addr, Duration::from_millis(50))?;
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head)?;
    Ok(head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"))
}

/// One measured start.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize)]
pub struct Run {
    /// exec → ready, milliseconds.
    pub ready_ms: f64,
    /// Resident set size when it became ready, KiB (`None` off Linux).
    pub rss_kib: Option<u64>,
    /// Exit code after SIGTERM (`None`: killed by a signal).
    pub exit_code: Option<i32>,
}

/// Statistics over the runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Spread {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Sample standard deviation (n − 1).
    pub stdev: f64,
}

impl Spread {
    /// Of `values` (not empty).
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let median = if v.len() % 2 == 1 {
            v[v.len() / 2]
        } else {
            (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
        };
        let stdev = if v.len() > 1 {
            (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        Some(Self {
            mean,
            median,
            min: v[0],
            max: v[v.len() - 1],
            stdev,
        })
    }
}

/// Why a start could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The command did not start.
    #[error("cannot run {0}: {1}")]
    Spawn(String, std::io::Error),
    /// It exited before it was ready.
    #[error("{0} exited with {1} before it was ready")]
    Exited(String, std::process::ExitStatus),
    /// It was not ready in time.
    #[error("{0} was not ready within {1:?}")]
    Timeout(String, Duration),
}

/// Measures one start of `program args…`.
///
/// # Errors
/// [`StartupError`]; the process is stopped in every case.
pub fn measure(
    program: &str,
    args: &[String],
    ready: &Ready,
    timeout: Duration,
) -> Result<Run, StartupError> {
    let started = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| StartupError::Spawn(program.to_owned(), e))?;
    let result = wait_ready(&mut child, program, ready, started, timeout);
    let rss_kib = rss_kib(child.id());
    let exit_code = stop(&mut child);
    let ready_ms = result?;
    Ok(Run {
        ready_ms,
        rss_kib,
        exit_code,
    })
}

fn wait_ready(
    child: &mut Child,
    program: &str,
    ready: &Ready,
    started: Instant,
    timeout: Duration,
) -> Result<f64, StartupError> {
    loop {
        if ready.check() {
            return Ok(started.elapsed().as_secs_f64() * 1000.0);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(StartupError::Exited(program.to_owned(), status));
        }
        if started.elapsed() > timeout {
            return Err(StartupError::Timeout(program.to_owned(), timeout));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// A child's id as the system calls take it (`None` for 0 or one past `i32`, which a child
/// never has).
pub fn pid(id: u32) -> Option<rustix::process::Pid> {
    i32::try_from(id)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
}

/// SIGTERM, then up to 10 s for a clean exit, then SIGKILL.
pub fn stop(child: &mut Child) -> Option<i32> {
    if let Some(pid) = pid(child.id()) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    child.wait().ok().and_then(|s| s.code())
}

/// `VmRSS` of a process in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_matches_hand_computed_values() {
        let s = Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.mean, s.median, s.min, s.max), (2.5, 2.5, 1.0, 4.0));
        assert!((s.stdev - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        let one = Spread::of(&[7.0]).unwrap();
        assert_eq!((one.median, one.stdev), (7.0, 0.0));
        assert!(Spread::of(&[]).is_none());
    }

    #[test]
    fn readiness_urls_parse() {
        match Ready::url("http://127.0.0.1:9901/readyz").unwrap() {
            Ready::Url { addr, path, .. } => {
                assert_eq!(addr.port(), 9901);
                assert_eq!(path, "/readyz");
            }
            Ready::Port(_) => panic!("expected a URL"),
        }
        assert!(Ready::url("https://127.0.0.1/").is_err());
    }

    #[test]
    fn a_command_that_exits_early_is_an_error_not_a_hang() {
        let ready = Ready::Port("127.0.0.1:9".parse().unwrap());
        let e = measure("true", &[], &ready, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, StartupError::Exited(..)), "{e}");
    }
}
