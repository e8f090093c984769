//! The processes a suite starts: components (`pms echo`, `pms gateway`, `pms users`, nginx,
//! haproxy) and load runs (`pms bench run`), each with its output in a log file, a readiness
//! check before it is loaded, and SIGTERM (then SIGKILL) when its cell is over — also when the
//! suite fails half-way, because [`Proc`] stops its child on drop.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::startup::Ready;

use super::SuiteError;

/// A free loopback port (bound then released; the window for a clash is small and a clash shows
/// up as a start-up failure naming the port).
pub fn free_port() -> Result<u16, SuiteError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| SuiteError::io("binding port 0", e))?;
    let port = l
        .local_addr()
        .map_err(|e| SuiteError::io("reading a bound port", e))?
        .port();
    Ok(port)
}

/// `127.0.0.1:port`.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A command line to start: program, arguments and extra environment.
#[derive(Debug, Clone)]
pub struct Spawn {
    /// What it is, for logs and errors (`echo`, `gateway`, `nginx`).
    pub name: String,
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

impl Spawn {
    /// `program args…` with no extra environment.
    pub fn new(name: &str, program: impl Into<PathBuf>, args: &[&str]) -> Self {
        Self {
            name: name.into(),
            program: program.into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: Vec::new(),
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, more: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(more.into_iter().map(Into::into));
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The command as a shell line someone can paste (secrets in the environment are not shown,
    /// only their names).
    pub fn shell_line(&self) -> String {
        let mut line = String::new();
        for (k, _) in &self.env {
            let _ = write!(line, "{k}=… ");
        }
        line.push_str(&quote(&self.program.display().to_string()));
        for a in &self.args {
            line.push(' ');
            line.push_str(&quote(a));
        }
        line
    }

    /// Starts it with stdout and stderr in `log`.
    ///
    /// # Errors
    /// The program could not be started.
    pub fn start(&self, log: &Path) -> Result<Proc, SuiteError> {
        let out = std::fs::File::create(log)
            .map_err(|e| SuiteError::io(&format!("creating {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| SuiteError::io("duplicating a log handle", e))?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| {
                SuiteError::io(
                    &format!("starting {} ({})", self.name, self.shell_line()),
                    e,
                )
            })?;
        Ok(Proc {
            name: self.name.clone(),
            child: Some(child),
            log: log.to_owned(),
        })
    }

    /// Runs it to the end with stdout and stderr in `log`; an exit code other than 0 is an
    /// error carrying the log's tail.
    ///
    /// # Errors
    /// It could not start, or failed.
    pub fn run(&self, log: &Path) -> Result<(), SuiteError> {
        let mut p = self.start(log)?;
        let status = p
            .child
            .as_mut()
            .map(Child::wait)
            .transpose()
            .map_err(|e| SuiteError::io(&format!("waiting for {}", self.name), e))?;
        p.child = None;
        match status {
            Some(s) if s.success() => Ok(()),
            Some(s) => Err(SuiteError::Failed(format!(
                "{} exited with {s}; {}",
                self.name,
                tail(log)
            ))),
            None => Ok(()),
        }
    }
}

/// Quotes `s` for a POSIX shell when it needs it.
fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The last lines of a log, for an error message.
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(8).collect();
    if lines.is_empty() {
        format!("{} is empty", log.display())
    } else {
        let mut l = lines;
        l.reverse();
        format!("last lines of {}:\n{}", log.display(), l.join("\n"))
    }
}

/// A running child; stopped with SIGTERM (then SIGKILL) by [`Proc::stop`] or on drop.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Proc {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits until `ready` holds, failing early (with the log's tail) if the process exits.
    ///
    /// # Errors
    /// It exited, or `timeout` passed.
    pub fn wait_ready(&mut self, ready: &Ready, timeout: Duration) -> Result<(), SuiteError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(SuiteError::Failed(format!(
                        "{} exited with {status} before it was ready; {}",
                        self.name,
                        tail(&self.log)
                    )));
                }
            }
            if ready.check() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(SuiteError::Failed(format!(
                    "{} not ready after {timeout:?} ({ready:?}); {}",
                    self.name,
                    tail(&self.log)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, up to 10 s for a clean exit, then SIGKILL.
    pub fn stop(mut self) {
        if let Some(mut child) = self.child.take() {
            crate::startup::stop(&mut child);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::startup::stop(&mut child);
        }
    }
}

/// The pids of `pid`'s direct children (nginx's workers), from the parent field of each
/// `/proc/N/stat`.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|n| {
            std::fs::read_to_string(format!("/proc/{n}/stat"))
                .ok()
                .and_then(|stat| {
                    // `pid (comm) state ppid …`; comm may hold spaces, so split after the ')'.
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// The soft limit on open files, from `/proc/self/limits`.
pub fn fd_limit() -> Option<usize> {
    std::fs::read_to_string("/proc/self/limits")
        .ok()?
        .lines()
        .find(|l| l.starts_with("Max open files"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// Where `program` is on `PATH` (also `/usr/sbin`, where Debian puts nginx and haproxy).
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_lines_quote_what_needs_it_and_hide_secrets() {
        let s = Spawn::new(
            "x",
            "/bin/pms",
            &["bench", "run", "-H", "Authorization: Bearer t"],
        )
        .env("PMS_JWT_SECRET", "hunter2");
        let line = s.shell_line();
        assert_eq!(
            line,
            "PMS_JWT_SECRET=… /bin/pms bench run -H 'Authorization: Bearer t'"
        );
        assert!(!line.contains("hunter2"));
    }

    #[test]
    fn a_process_that_exits_early_is_reported_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        let mut p = Spawn::new("sh", "/bin/sh", &["-c", "echo broken config; exit 3"])
            .start(&log)
            .unwrap();
        let err = p
            .wait_ready(&Ready::Port(loopback(1)), Duration::from_secs(10))
            .unwrap_err()
            .to_string();
        assert!(err.contains("before it was ready"), "{err}");
        assert!(err.contains("broken config"), "{err}");
    }
}
