//! Start-up time: run a command, time exec → first HTTP 200 on a URL (or first accepted TCP
//! connection on a port) and, when asked, exec → the first line of its output that holds a
//! given text (the service's own "started" line, what published start-up figures were read
//! from); read its RSS when ready, stop it with SIGTERM and wait for it; N times. Plain threads
//! and blocking sockets: nothing here may compete with the process being measured for a
//! runtime.

use std::io::{BufRead, Read, Write};
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
    /// exec → the first output line holding the awaited text, milliseconds (`None`: no text
    /// was asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_ms: Option<f64>,
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
    /// It never wrote the awaited line.
    #[error("{0} wrote no line holding {1:?} within {2:?}")]
    NoLine(String, String, Duration),
}

/// Watches a child's stdout and stderr for the first line holding a text; keeps reading to the
/// end either way, so the child never blocks on a full pipe. The reading threads end when the
/// pipes close; they are not joined, so a grandchild holding a pipe open cannot hang the
/// measurement.
struct LineWatch {
    seen: std::sync::mpsc::Receiver<f64>,
}

impl LineWatch {
    fn start(child: &mut Child, text: &str, started: Instant) -> Self {
        let (tx, seen) = std::sync::mpsc::channel();
        let pipes: [Option<Box<dyn Read + Send>>; 2] = [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ];
        for pipe in pipes.into_iter().flatten() {
            let (tx, text) = (tx.clone(), text.to_owned());
            std::thread::spawn(move || {
                let mut lines = std::io::BufReader::new(pipe).split(b'\n');
                let mut found = false;
                while let Some(Ok(line)) = lines.next() {
                    if !found && line.windows(text.len()).any(|w| w == text.as_bytes()) {
                        found = true;
                        let _ = tx.send(started.elapsed().as_secs_f64() * 1000.0);
                    }
                }
            });
        }
        Self { seen }
    }

    /// When the line came, waiting for it until `deadline`.
    fn wait(&self, deadline: Instant) -> Option<f64> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.seen.recv_timeout(left).ok()
    }
}

/// Measures one start of `program args…`; with `line`, also the time to the first line of its
/// output (stdout or stderr) that holds that text.
///
/// # Errors
/// [`StartupError`]; the process is stopped in every case.
pub fn measure(
    program: &str,
    args: &[String],
    ready: &Ready,
    line: Option<&str>,
    timeout: Duration,
) -> Result<Run, StartupError> {
    let output = || {
        if line.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    let started = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(output())
        .stderr(output())
        .spawn()
        .map_err(|e| StartupError::Spawn(program.to_owned(), e))?;
    let watch = line.map(|text| LineWatch::start(&mut child, text, started));
    let result = wait_ready(&mut child, program, ready, started, timeout);
    let rss_kib = rss_kib(child.id());
    let line_ms = match (&watch, &result) {
        (Some(w), Ok(_)) => Some(w.wait(started + timeout)),
        _ => None,
    };
    let exit_code = stop(&mut child);
    let ready_ms = result?;
    let line_ms = match (line_ms, line) {
        (Some(None), Some(text)) => {
            return Err(StartupError::NoLine(
                program.to_owned(),
                text.to_owned(),
                timeout,
            ))
        }
        (found, _) => found.flatten(),
    };
    Ok(Run {
        ready_ms,
        line_ms,
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
        let e = measure("true", &[], &ready, None, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, StartupError::Exited(..)), "{e}");
    }

    /// A port that takes connections for as long as the listener lives: the command under
    /// test is "ready" at once, and only its output decides the line's time.
    fn listening() -> (std::net::TcpListener, Ready) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ready = Ready::Port(l.local_addr().unwrap());
        (l, ready)
    }

    fn script(say: &str) -> Vec<String> {
        vec![
            "-c".into(),
            format!("echo noise; sleep 0.2; echo '{say}' >&2; exec sleep 30"),
        ]
    }

    #[test]
    fn the_started_line_is_timed_from_either_stream() {
        let (_l, ready) = listening();
        let run = measure(
            "sh",
            &script("service started on 9"),
            &ready,
            Some("started"),
            Duration::from_secs(20),
        )
        .unwrap();
        let line = run.line_ms.expect("the line was seen");
        assert!(line >= 200.0, "after the script's pause: {run:?}");
    }

    #[test]
    fn a_line_that_never_comes_is_an_error_not_a_hang() {
        let (_l, ready) = listening();
        let e = measure(
            "sh",
            &script("hello"),
            &ready,
            Some("started"),
            Duration::from_secs(2),
        )
        .unwrap_err();
        assert!(matches!(e, StartupError::NoLine(..)), "{e}");
    }
}
