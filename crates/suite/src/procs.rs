//! The processes a suite starts: components (`pms echo`, `pms gateway`, `pms users`, nginx,
//! haproxy) and load runs (`pms bench run`), each with its output in a log file, a readiness
//! check before it is loaded, and SIGTERM (then SIGKILL) when its cell is over — also when the
//! suite fails half-way, because [`Proc`] stops its child on drop.
//!
//! Each process is placed in the run's resource envelope ([`super::envelope`]) when there is one.
//!
//! It also owns stopping a suite from outside: [`interrupt`] (called by the CLI on SIGTERM or
//! SIGINT) passes SIGTERM to every child running at that moment and refuses to start new ones,
//! so the suite unwinds through its usual clean-up instead of leaving its children behind.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rustix::process::{kill_process_group, waitid, Signal, WaitId, WaitIdOptions};

use pms_bench::startup::Ready;

use super::envelope::{Envelope, Role};
use super::SuiteError;

/// The envelope every process started from now on is placed in (`None`: none).
static ENVELOPE: Mutex<Option<std::sync::Arc<Envelope>>> = Mutex::new(None);

/// Places the processes started from now on in `envelope` (`None`: in none).
pub fn set_envelope(envelope: Option<std::sync::Arc<Envelope>>) {
    *ENVELOPE.lock().unwrap_or_else(PoisonError::into_inner) = envelope;
}

fn envelope() -> Option<std::sync::Arc<Envelope>> {
    ENVELOPE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// A free loopback port for a program the suite starts, outside the kernel's ephemeral range
/// ([`pms_net::port`]: a port from `bind(0)` could be taken by an outgoing connection before the
/// program binds it).
pub fn free_port() -> Result<u16, SuiteError> {
    pms_net::port::free_loopback_port().map_err(|e| SuiteError::io("picking a free port", e))
}

/// The children running now and the signal the suite was stopped by, under one lock: a child
/// that starts just as a signal arrives is either signalled with the others or never started.
static LIVE: Mutex<Live> = Mutex::new(Live {
    pids: Vec::new(),
    stopped_by: None,
});

#[derive(Debug)]
struct Live {
    pids: Vec<u32>,
    stopped_by: Option<i32>,
}

fn live() -> MutexGuard<'static, Live> {
    // Nothing that holds the lock can leave the list half-changed.
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Signals the process group `pid` leads: the child and whatever it started (nginx's workers,
/// the gateway `pms bench startup` is timing).
fn signal_group(pid: u32, signal: Signal) {
    if let Some(pid) = pms_bench::startup::pid(pid) {
        let _ = kill_process_group(pid, signal);
    }
}

/// Stops the suite because of signal `signo` (SIGTERM, SIGINT): SIGTERM to every child running
/// now and to the processes it started, and no child starts after this, so the run in progress ends, its cell is not recorded,
/// and [`super::run`] returns [`SuiteError::Interrupted`] after its clean-up. Returns `false`
/// when the suite was already stopping.
pub fn interrupt(signo: i32) -> bool {
    let mut live = live();
    if live.stopped_by.is_some() {
        return false;
    }
    live.stopped_by = Some(signo);
    for &pid in &live.pids {
        signal_group(pid, Signal::TERM);
    }
    true
}

/// SIGKILL to every child running now: for a second signal, when waiting for clean exits is no
/// longer wanted.
pub fn kill_all() {
    for &pid in &live().pids {
        signal_group(pid, Signal::KILL);
    }
}

/// The signal the suite was stopped by, if [`interrupt`] was called.
pub fn interrupted() -> Option<i32> {
    live().stopped_by
}

/// [`SuiteError::Interrupted`] when the suite was stopped.
///
/// # Errors
/// The suite was stopped.
pub fn check_interrupted() -> Result<(), SuiteError> {
    interrupted().map_or(Ok(()), |signo| Err(SuiteError::Interrupted(signo)))
}

/// Forgets `pid` (before it is reaped, so that a later signal cannot reach a process that
/// reuses the number).
fn forget(pid: u32) {
    live().pids.retain(|&p| p != pid);
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
    /// The program could not be started, or the suite was stopped.
    pub fn start(&self, log: &Path) -> Result<Proc, SuiteError> {
        let out = std::fs::File::create(log)
            .map_err(|e| SuiteError::io(&format!("creating {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| SuiteError::io("duplicating a log handle", e))?;
        let mut live = live();
        if let Some(signo) = live.stopped_by {
            return Err(SuiteError::Interrupted(signo));
        }
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            // Its own process group, so that stopping the suite reaches what it starts in turn.
            .process_group(0)
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
        live.pids.push(child.id());
        drop(live);
        let pid = child.id();
        let proc = Proc {
            name: self.name.clone(),
            child: Some(child),
            log: log.to_owned(),
        };
        if let (Some(envelope), Some(role)) = (envelope(), Role::of(&self.name)) {
            // On error the process is stopped as `proc` drops: it would run unconfined.
            envelope.place(pid, &self.name, role).map_err(|why| {
                SuiteError::Failed(format!("placing {} in the envelope: {why}", self.name))
            })?;
        }
        Ok(proc)
    }

    /// Runs it to the end with stdout and stderr in `log`; an exit code other than 0 is an
    /// error carrying the log's tail.
    ///
    /// # Errors
    /// It could not start, failed, or the suite was stopped.
    pub fn run(&self, log: &Path) -> Result<(), SuiteError> {
        let mut p = self.start(log)?;
        let status = p.wait()?;
        check_interrupted()?;
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
    /// The name the suite gave it (`pms up`, `pms parks`, …).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits for it to exit and reaps it.
    fn wait(&mut self) -> Result<Option<std::process::ExitStatus>, SuiteError> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        has_exited(&child, true);
        forget(child.id());
        let status = child
            .wait()
            .map_err(|e| SuiteError::io(&format!("waiting for {}", self.name), e))?;
        Ok(Some(status))
    }

    /// Waits until `ready` holds, failing early (with the log's tail) if the process exits.
    ///
    /// # Errors
    /// It exited, `timeout` passed, or the suite was stopped.
    pub fn wait_ready(&mut self, ready: &Ready, timeout: Duration) -> Result<(), SuiteError> {
        let deadline = Instant::now() + timeout;
        loop {
            check_interrupted()?;
            if self.child.as_ref().is_some_and(|c| has_exited(c, false)) {
                if let Some(status) = self.wait()? {
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
        self.terminate();
    }

    fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            forget(child.id());
            pms_bench::startup::stop(&mut child);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Whether `child` has exited, without reaping it, so that its pid cannot be reused before it is
/// forgotten; `block` waits for the exit.
fn has_exited(child: &Child, block: bool) -> bool {
    let Some(pid) = pms_bench::startup::pid(child.id()) else {
        return true;
    };
    let mut options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
    if !block {
        options |= WaitIdOptions::NOHANG;
    }
    loop {
        match waitid(WaitId::Pid(pid), options) {
            Ok(status) => return status.is_some(),
            Err(rustix::io::Errno::INTR) => {}
            // Already reaped: nothing left to wait for.
            Err(_) => return true,
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
