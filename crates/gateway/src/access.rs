//! The access log: one JSON line per request answered, on both paths, written to stdout or
//! appended to a file (`[access_log]` in the config; off without it).
//!
//! Requests never wait for the log. Each worker formats its line and hands it to a bounded
//! queue; one writer thread takes what has gathered every [`FLUSH_EVERY`] and writes it with one
//! buffered write. A request therefore costs a formatted line and a queue push, and wakes no
//! thread. When the queue is full (the disk cannot keep up), lines are dropped and counted
//! (`pms_gateway_access_log_dropped_total`) instead of slowing the gateway down; so are lines
//! after a write failed for good (a full disk), which ends the writer with one logged error. At shutdown
//! the writer drains the queue, flushes and ends ([`Writer::finish`]).
//!
//! The file is opened when the gateway binds its sockets ([`Output::open`]), so a path that
//! cannot be written stops it before it listens; the writer starts with the workers. On
//! `SIGUSR1` (as nginx's `-s reopen`) the writer flushes and opens the path again, so a log
//! rotated by renaming goes on in a new file ([`Reopen`]).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::metrics::counter::Counter;

/// How often the writer thread takes the lines gathered.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Lines the queue holds: at 50,000 requests a second, a tenth of a second's worth three times
/// over.
const QUEUE: usize = 16_384;

/// Where the lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Standard output.
    Stdout,
    /// A file, appended to (created if missing). Rotate it by renaming it and sending
    /// `SIGUSR1`, or with copy-and-truncate.
    File(PathBuf),
}

/// The access log could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("access_log.path: cannot open {}: {error}", .path.display())]
pub struct OpenError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub error: std::io::Error,
}

/// Where the lines go, opened.
pub struct Output {
    target: Target,
    sink: Box<dyn std::io::Write + Send>,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Output")
    }
}

impl Output {
    /// Opens `target`: a file for appending (created if missing), or standard output.
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub fn open(target: &Target) -> Result<Self, OpenError> {
        let sink: Box<dyn std::io::Write + Send> = match target {
            Target::Stdout => Box::new(std::io::stdout()),
            Target::File(path) => Box::new(append(path)?),
        };
        Ok(Self {
            target: target.clone(),
            sink,
        })
    }

    /// Whether this is a file, which [`Reopen`] opens again.
    pub fn is_file(&self) -> bool {
        matches!(self.target, Target::File(_))
    }
}

/// What one request's line says.
#[derive(Debug)]
pub struct Entry<'a> {
    /// The client's address.
    pub client: IpAddr,
    /// Request method.
    pub method: &'a str,
    /// Request target: path and query.
    pub target: &'a str,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub protocol: &'a str,
    /// Response status.
    pub status: u16,
    /// When the request head had been read.
    pub started: Instant,
    /// From the request head read to the response head ready.
    pub duration: Duration,
    /// The route's name; `None` when no route took the request.
    pub route: Option<&'a str>,
    /// The request id, as sent upstream and in error bodies.
    pub request_id: &'a str,
}

/// The workers' end: formats lines and queues them. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AccessLog {
    lines: SyncSender<String>,
    dropped: Counter,
}

/// The writer thread, to be finished at shutdown.
#[derive(Debug)]
pub struct Writer {
    thread: JoinHandle<()>,
    flags: Arc<Flags>,
}

/// Has the writer open its file again (after the lines it holds went to the old one), for
/// log rotation. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Reopen {
    thread: std::thread::Thread,
    flags: Arc<Flags>,
}

impl Reopen {
    /// Asks for it; the writer does it within a flush period. A path that cannot be opened
    /// then is logged as an error, and the lines keep going to the file open before.
    pub fn ask(&self) {
        self.flags.reopen.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

impl AccessLog {
    /// Starts the writer thread on `out`. Lines that find the queue full are counted in
    /// `dropped`.
    ///
    /// # Errors
    /// When the thread cannot start.
    pub fn start(out: Output, dropped: Counter) -> std::io::Result<(Self, Writer)> {
        let (lines, rx) = mpsc::sync_channel(QUEUE);
        let flags = Arc::new(Flags::default());
        let shared = Arc::clone(&flags);
        let thread = std::thread::Builder::new()
            .name("pms-access-log".into())
            .spawn(move || write_lines(&rx, out, &shared))?;
        Ok((Self { lines, dropped }, Writer { thread, flags }))
    }

    /// Logs `entry`.
    pub fn record(&self, entry: &Entry<'_>) {
        let now = SystemTime::now();
        let started = now.checked_sub(entry.started.elapsed()).unwrap_or(now);
        let line = format_line(started, entry);
        match self.lines.try_send(line) {
            Ok(()) => {}
            // The writer is behind, or gone (its output failed for good).
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.inc();
            }
        }
    }
}

impl Writer {
    /// A handle that has the writer open its file again.
    pub fn reopen(&self) -> Reopen {
        Reopen {
            thread: self.thread.thread().clone(),
            flags: Arc::clone(&self.flags),
        }
    }

    /// Has the writer write what is queued and end, and waits for it (at most a flush period
    /// and the write). Call when no more requests are answered: lines queued later are lost.
    pub fn finish(self) {
        self.flags.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

fn append(path: &Path) -> Result<std::fs::File, OpenError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|error| OpenError {
            path: path.to_path_buf(),
            error,
        })
}

/// What the gateway asks of the writer thread.
#[derive(Debug, Default)]
struct Flags {
    /// Write the rest and end.
    stop: AtomicBool,
    /// Open the file again.
    reopen: AtomicBool,
}

/// Why [`pump`] returned.
enum Pumped {
    /// Everything is written: stop was asked, or every sender is gone.
    Ended,
    /// Everything queued so far is written, and the file is to be opened again.
    Reopen,
}

/// The writer thread: every [`FLUSH_EVERY`], everything queued in one buffered write; at the
/// end (`stop` set, or every sender gone), the rest. A write that fails (a full disk) ends the
/// access log with one error in the log; the gateway goes on, and later lines are dropped.
fn write_lines(rx: &Receiver<String>, out: Output, flags: &Flags) {
    let buffered = |sink| std::io::BufWriter::with_capacity(64 * 1024, sink);
    let mut sink = buffered(out.sink);
    loop {
        match pump(rx, &mut sink, flags) {
            Ok(Pumped::Ended) => return,
            Ok(Pumped::Reopen) => match Output::open(&out.target) {
                Ok(new) => {
                    sink = buffered(new.sink);
                    tracing::info!("access log reopened");
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot reopen the access log; writing on to the file open before");
                }
            },
            Err(e) => {
                tracing::error!(error = %e, "cannot write the access log; it stops here");
                return;
            }
        }
    }
}

fn pump(
    rx: &Receiver<String>,
    out: &mut impl std::io::Write,
    flags: &Flags,
) -> std::io::Result<Pumped> {
    loop {
        let stopping = flags.stop.load(Ordering::Acquire);
        let reopen = flags.reopen.swap(false, Ordering::AcqRel);
        let ended = loop {
            match rx.try_recv() {
                Ok(line) => out.write_all(line.as_bytes())?,
                Err(TryRecvError::Empty) => break false,
                Err(TryRecvError::Disconnected) => break true,
            }
        };
        out.flush()?;
        if ended || stopping {
            return Ok(Pumped::Ended);
        }
        if reopen {
            return Ok(Pumped::Reopen);
        }
        std::thread::park_timeout(FLUSH_EVERY);
    }
}

/// One line, for a request that came at `time`: a JSON object and a newline.
fn format_line(time: SystemTime, e: &Entry<'_>) -> String {
    let mut line = String::with_capacity(192 + e.target.len());
    line.push_str("{\"time\":\"");
    pms_net::utc::write_rfc3339(&mut line, time, true);
    let _ = write!(line, "\",\"client\":\"{}\",\"method\":", e.client);
    json_string(e.method, &mut line);
    line.push_str(",\"target\":");
    json_string(e.target, &mut line);
    let _ = write!(
        line,
        ",\"protocol\":\"{}\",\"status\":{},\"duration_ms\":{:.3},\"route\":",
        e.protocol,
        e.status,
        e.duration.as_secs_f64() * 1000.0
    );
    match e.route {
        Some(route) => json_string(route, &mut line),
        None => line.push_str("null"),
    }
    line.push_str(",\"request_id\":");
    json_string(e.request_id, &mut line);
    line.push_str("}\n");
    line
}

/// `s` as a JSON string.
fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_json_object_with_every_field() {
        let entry = Entry {
            client: "::1".parse().unwrap(),
            method: "GET",
            target: "/a \"quoted\"\\path\u{1}?q=1",
            protocol: "HTTP/2.0",
            status: 404,
            started: Instant::now(),
            duration: Duration::from_micros(1_234),
            route: None,
            request_id: "abc",
        };
        let line = format_line(std::time::UNIX_EPOCH, &entry);
        assert!(
            line.ends_with("}\n") && line.matches('\n').count() == 1,
            "{line}"
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["time"], "1970-01-01T00:00:00.000Z");
        assert_eq!(v["client"], "::1");
        assert_eq!(v["method"], "GET");
        assert_eq!(v["target"], entry.target);
        assert_eq!(v["protocol"], "HTTP/2.0");
        assert_eq!(v["status"], 404);
        assert_eq!(v["duration_ms"], 1.234);
        assert_eq!(v["route"], serde_json::Value::Null);
        assert_eq!(v["request_id"], "abc");
    }

    /// An output the test can read back, or one that fails every write.
    #[derive(Clone, Default)]
    struct Shared(Arc<std::sync::Mutex<Vec<u8>>>, bool);

    impl std::io::Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.1 {
                return Err(std::io::Error::other("disk full"));
            }
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn entry(request_id: &str) -> Entry<'_> {
        Entry {
            client: "127.0.0.1".parse().unwrap(),
            method: "GET",
            target: "/",
            protocol: "HTTP/1.1",
            status: 200,
            started: Instant::now(),
            duration: Duration::ZERO,
            route: Some("all"),
            request_id,
        }
    }

    #[test]
    fn every_line_queued_is_written_in_order_by_the_time_the_writer_finishes() {
        let seen = Shared::default();
        let out = Output {
            target: Target::Stdout,
            sink: Box::new(seen.clone()),
        };
        let (log, writer) = AccessLog::start(out, Counter::default()).unwrap();
        let ids: Vec<String> = (0..1000).map(|i| format!("r{i}")).collect();
        for id in &ids {
            log.record(&entry(id));
        }
        // The log is still held: `finish` must not wait for it to be dropped.
        writer.finish();
        let text = String::from_utf8(seen.0.lock().unwrap().clone()).unwrap();
        let written: Vec<String> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["request_id"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(written, ids);
        assert_eq!(log.dropped.get(), 0);
    }

    #[test]
    fn a_failing_output_ends_the_writer_and_requests_go_on() {
        let out = Output {
            target: Target::Stdout,
            sink: Box::new(Shared(Arc::default(), true)),
        };
        let (log, writer) = AccessLog::start(out, Counter::default()).unwrap();
        log.record(&entry("a"));
        writer.finish();
        // Nothing left to take the lines: recording neither blocks nor panics, and counts them.
        for _ in 0..(QUEUE + 10) {
            log.record(&entry("b"));
        }
        assert_eq!(log.dropped.get(), (QUEUE + 10) as u64);
    }

    /// `path`'s lines, by request id.
    fn ids_in(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["request_id"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    #[test]
    fn a_reopen_after_a_rename_sends_the_next_lines_to_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let rotated = dir.path().join("access.log.1");
        let out = Output::open(&Target::File(path.clone())).unwrap();
        assert!(out.is_file());
        let (log, writer) = AccessLog::start(out, Counter::default()).unwrap();
        let reopen = writer.reopen();
        log.record(&entry("before"));
        // Rotation as logrotate does it without copytruncate: rename, then signal.
        let deadline = Instant::now() + Duration::from_secs(10);
        while ids_in(&path).is_empty() && Instant::now() < deadline {
            std::thread::sleep(FLUSH_EVERY / 4);
        }
        std::fs::rename(&path, &rotated).unwrap();
        // Queued before the reopen is asked: still the old file's.
        log.record(&entry("queued"));
        reopen.ask();
        while !path.exists() && Instant::now() < deadline {
            std::thread::sleep(FLUSH_EVERY / 4);
        }
        log.record(&entry("after"));
        writer.finish();
        assert_eq!(ids_in(&rotated), ["before", "queued"]);
        assert_eq!(ids_in(&path), ["after"]);
    }

    #[test]
    fn a_reopen_that_fails_keeps_writing_to_the_file_open_before() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("logs");
        std::fs::create_dir(&sub).unwrap();
        let path = sub.join("access.log");
        let out = Output::open(&Target::File(path.clone())).unwrap();
        let (log, writer) = AccessLog::start(out, Counter::default()).unwrap();
        let moved = dir.path().join("moved");
        // The directory goes away: the path cannot be opened again.
        std::fs::rename(&sub, &moved).unwrap();
        let reopen = writer.reopen();
        // The writer takes a second request only once it has finished with the first: so the
        // failed reopen is over (and did not end the writer) when the line is recorded.
        for _ in 0..2 {
            reopen.ask();
            let deadline = Instant::now() + Duration::from_secs(10);
            while reopen.flags.reopen.load(Ordering::Acquire) {
                assert!(
                    Instant::now() < deadline,
                    "the writer stopped taking requests"
                );
                std::thread::sleep(FLUSH_EVERY / 4);
            }
        }
        log.record(&entry("still"));
        writer.finish();
        assert_eq!(ids_in(&moved.join("access.log")), ["still"]);
        assert!(!path.exists());
        assert_eq!(log.dropped.get(), 0);
    }

    #[test]
    fn lines_that_find_the_queue_full_are_counted_not_waited_for() {
        let (lines, rx) = mpsc::sync_channel(1);
        let log = AccessLog {
            lines,
            dropped: Counter::default(),
        };
        let entry = entry("r");
        for _ in 0..3 {
            log.record(&entry);
        }
        assert_eq!(log.dropped.get(), 2);
        assert!(rx.try_recv().unwrap().contains("\"route\":\"all\""));
    }
}
