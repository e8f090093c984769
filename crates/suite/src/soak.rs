//! What a soak adds to the barriers' load (the `soak` cells of the parking suite): people beside
//! the barriers — a customer signing in through the API, and one using the front office (its
//! sign-in form, account and visits pages) — and, over the whole run, the figures per window of
//! time (calls, errors, latency percentiles) and the resident memory of every process of the
//! system under test, sampled as it goes, so that a leak or a slow drift shows as a trend.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How often the processes' resident memory is read.
pub const RSS_EVERY: Duration = Duration::from_secs(10);
/// Pause between a customer's sign-ins.
const SIGN_IN_EVERY: Duration = Duration::from_millis(1000);
/// Pause between the front-office visitor's rounds (sign-in form, sign in, account, visits).
const PAGES_EVERY: Duration = Duration::from_millis(2000);
/// Longest wait for one answer of the people's clients.
const PERSON_TIMEOUT: Duration = Duration::from_secs(10);

/// The series a soak keeps per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    /// Barrier calls.
    Barriers,
    /// `POST /users/login` through the gateway.
    SignIns,
    /// Front-office pages through the gateway.
    Pages,
}

/// One series in one window: answers, failures, latency (µs).
#[derive(Debug, Clone)]
struct Tally {
    ok: u64,
    failed: u64,
    latency: Histogram<u64>,
}

impl Tally {
    fn new() -> Self {
        Self {
            ok: 0,
            failed: 0,
            latency: pms_bench::stats::histogram(3),
        }
    }
}

/// The soak's windows from the start of the measured time, each with its three series.
#[derive(Debug)]
pub struct Windows {
    from: Instant,
    width: Duration,
    tallies: Mutex<Vec<[Tally; 3]>>,
}

/// One window as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct WindowRow {
    /// Start of the window, seconds into the measured time.
    pub from_s: f64,
    /// Barrier calls, failed ones, and their latency (ms): p50, p99, max.
    pub barriers: SeriesRow,
    /// Sign-ins through the API.
    pub sign_ins: SeriesRow,
    /// Front-office pages.
    pub pages: SeriesRow,
}

/// One series of a window.
#[derive(Debug, Clone, Serialize)]
pub struct SeriesRow {
    /// Answered as expected.
    pub ok: u64,
    /// Failed (wrong status, no answer).
    pub failed: u64,
    /// Latency, ms.
    pub p50_ms: f64,
    /// Latency, ms.
    pub p99_ms: f64,
    /// Latency, ms.
    pub max_ms: f64,
}

impl Windows {
    /// Windows of `width` from `from` (the end of the warm-up).
    pub fn new(from: Instant, width: Duration) -> Self {
        Self {
            from,
            width: width.max(Duration::from_millis(1)),
            tallies: Mutex::new(Vec::new()),
        }
    }

    /// Counts an answer of `series` to a call that began at `began` and took `took`; calls
    /// before the measured time are not counted.
    pub fn record(&self, series: Series, began: Instant, took: Duration, ok: bool) {
        let Some(since) = began.checked_duration_since(self.from) else {
            return;
        };
        let i = (since.as_nanos() / self.width.as_nanos()) as usize;
        let mut tallies = self
            .tallies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while tallies.len() <= i {
            tallies.push([Tally::new(), Tally::new(), Tally::new()]);
        }
        let t = &mut tallies[i][series as usize];
        if ok {
            t.ok += 1;
        } else {
            t.failed += 1;
        }
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        t.latency.saturating_record(us);
    }

    /// The windows, in order.
    pub fn rows(&self) -> Vec<WindowRow> {
        let tallies = self
            .tallies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tallies
            .iter()
            .enumerate()
            .map(|(i, [b, s, p])| WindowRow {
                from_s: self.width.as_secs_f64() * i as f64,
                barriers: row(b),
                sign_ins: row(s),
                pages: row(p),
            })
            .collect()
    }
}

fn row(t: &Tally) -> SeriesRow {
    let ms = |us: u64| us as f64 / 1000.0;
    let empty = t.latency.is_empty();
    SeriesRow {
        ok: t.ok,
        failed: t.failed,
        p50_ms: if empty {
            0.0
        } else {
            ms(t.latency.value_at_quantile(0.5))
        },
        p99_ms: if empty {
            0.0
        } else {
            ms(t.latency.value_at_quantile(0.99))
        },
        max_ms: if empty { 0.0 } else { ms(t.latency.max()) },
    }
}

/// One reading of a process's resident memory.
#[derive(Debug, Clone, Serialize)]
pub struct RssSample {
    /// Seconds into the measured time.
    pub at_s: f64,
    /// The process, as the suite named it (`pms up`, `pms parks`, …).
    pub process: String,
    /// Resident memory, MB (`VmRSS`).
    pub mb: f64,
}

/// A process's resident memory now, MB; `None` once it is gone.
pub fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// Reads every process's resident memory each [`RSS_EVERY`] from `start` (the start of the
/// measured time, as the windows count) until `end`.
pub async fn sample_rss(
    processes: Vec<(String, u32)>,
    start: Instant,
    end: Instant,
) -> Vec<RssSample> {
    let mut out = Vec::new();
    tokio::time::sleep_until(start.into()).await;
    loop {
        let now = Instant::now();
        for (process, pid) in &processes {
            if let Some(mb) = rss_mb(*pid) {
                out.push(RssSample {
                    at_s: now.duration_since(start).as_secs_f64(),
                    process: process.clone(),
                    mb,
                });
            }
        }
        if now >= end {
            return out;
        }
        tokio::time::sleep_until((now + RSS_EVERY).min(end).into()).await;
    }
}

/// An answer as the people's clients read it.
#[derive(Debug, Default)]
struct Page {
    status: u16,
    /// `Set-Cookie: pms_session=…`'s value, if any.
    session: Option<String>,
    body: String,
}

/// One HTTP/1.1 exchange on a fresh connection to the gateway (`connection: close`).
async fn exchange(port: u16, request: String) -> Option<Page> {
    let go = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.ok()?;
        Some(parse(&String::from_utf8_lossy(&raw)))
    };
    tokio::time::timeout(PERSON_TIMEOUT, go)
        .await
        .ok()
        .flatten()
}

fn parse(raw: &str) -> Page {
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let session = lines
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case("set-cookie"))
        .find_map(|(_, v)| {
            let value = v.trim().strip_prefix("pms_session=")?.split(';').next()?;
            (!value.is_empty()).then(|| value.to_owned())
        });
    Page {
        status,
        session,
        body: body.to_owned(),
    }
}

fn get(path: &str, session: Option<&str>) -> String {
    let cookie = session.map_or(String::new(), |s| format!("cookie: pms_session={s}\r\n"));
    format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{cookie}connection: close\r\n\r\n")
}

fn post(path: &str, content_type: &str, session: Option<&str>, body: &str) -> String {
    let cookie = session.map_or(String::new(), |s| format!("cookie: pms_session={s}\r\n"));
    format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{cookie}content-type: {content_type}\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The value of the page's hidden CSRF field.
fn csrf(body: &str) -> Option<&str> {
    let field = "name=\"csrf\" value=\"";
    let at = body.find(field)? + field.len();
    body.get(at..at + 64)
}

/// Form encoding of the characters the visitor sends.
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// A customer signing in through the API once a second until `end`.
pub async fn sign_ins(port: u16, email: String, password: String, windows: &Windows, end: Instant) {
    let body = serde_json::json!({"email": email, "password": password}).to_string();
    while Instant::now() < end {
        let began = Instant::now();
        let page = exchange(port, post("/users/login", "application/json", None, &body)).await;
        let ok = page.is_some_and(|p| p.status == 200 && p.body.contains("\"token\""));
        windows.record(Series::SignIns, began, began.elapsed(), ok);
        tokio::time::sleep(SIGN_IN_EVERY).await;
    }
}

/// A person using the front office every two seconds until `end`: the sign-in form, signing
/// in, the account page and the visits page, each a page counted on its own.
pub async fn front_office(
    port: u16,
    email: String,
    password: String,
    windows: &Windows,
    end: Instant,
) {
    while Instant::now() < end {
        let timed = async |request: String, expect: u16| {
            let began = Instant::now();
            let page = exchange(port, request).await;
            let ok = page.as_ref().is_some_and(|p| p.status == expect);
            windows.record(Series::Pages, began, began.elapsed(), ok);
            page.filter(|_| ok)
        };
        'round: {
            let Some(form) = timed(get("/app/signin", None), 200).await else {
                break 'round;
            };
            let (Some(visitor), Some(token)) = (form.session.as_deref(), csrf(&form.body)) else {
                break 'round;
            };
            let body = format!(
                "csrf={token}&email={}&password={}",
                encode(&email),
                encode(&password)
            );
            let form_type = "application/x-www-form-urlencoded";
            let Some(signed) =
                timed(post("/app/signin", form_type, Some(visitor), &body), 303).await
            else {
                break 'round;
            };
            let Some(session) = signed.session else {
                break 'round;
            };
            for path in ["/app/account", "/app/visits"] {
                if timed(get(path, Some(&session)), 200).await.is_none() {
                    break 'round;
                }
            }
        }
        tokio::time::sleep(PAGES_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_fall_in_the_window_they_began_in() {
        let start = Instant::now();
        let w = Windows::new(start, Duration::from_secs(60));
        let ms = Duration::from_millis;
        w.record(Series::Barriers, start + ms(10), ms(2), true);
        w.record(Series::Barriers, start + ms(59_999), ms(4), false);
        w.record(Series::Pages, start + ms(120_001), ms(8), true);
        // Before the measured time: not counted.
        w.record(Series::SignIns, start - ms(1), ms(1), true);
        let rows = w.rows();
        assert_eq!(rows.len(), 3);
        assert_eq!((rows[0].barriers.ok, rows[0].barriers.failed), (1, 1));
        assert!((rows[0].barriers.max_ms - 4.0).abs() < 0.01);
        assert_eq!(
            rows[1].barriers.ok + rows[1].pages.ok,
            0,
            "an empty window stays"
        );
        assert_eq!((rows[2].from_s, rows[2].pages.ok), (120.0, 1));
        assert_eq!(rows.iter().map(|r| r.sign_ins.ok).sum::<u64>(), 0);
    }

    #[test]
    fn answers_are_read_for_their_status_cookie_and_form() {
        let raw = "HTTP/1.1 200 OK\r\nSet-Cookie: pms_session=abc123; Path=/app; HttpOnly\r\n\
                   content-type: text/html\r\n\r\n<input name=\"csrf\" value=\"";
        let token = "f".repeat(64);
        let page = parse(&format!("{raw}{token}\">"));
        assert_eq!(page.status, 200);
        assert_eq!(page.session.as_deref(), Some("abc123"));
        assert_eq!(csrf(&page.body), Some(token.as_str()));
        assert_eq!(parse("HTTP/1.1 303 See Other\r\n\r\n").session, None);
        assert_eq!(encode("a b@c.pt#1"), "a%20b%40c.pt%231");
    }

    #[test]
    fn this_process_has_a_resident_size() {
        assert!(rss_mb(std::process::id()).is_some_and(|mb| mb > 0.0));
        assert_eq!(rss_mb(u32::MAX), None);
    }
}
