//! Other tools' per-request results, read as this crate's samples, so that a run made with
//! JMeter, k6 or vegeta gets the same statistics, report layouts and hypothesis tests as a run
//! of `pms bench`. Read here:
//! - JMeter JTL as CSV, with its header row or without (then in the default column order of
//!   `jmeter.save.saveservice`), and as XML (`httpSample` and `sample` elements); `pms bench`'s
//!   own `samples.csv` is a JTL CSV with a `Lag` column;
//! - k6's CSV output (`--out csv`) and JSON output (`--out json`): one sample per
//!   `http_req_duration` point;
//! - vegeta's `encode --to csv` and `--to json` results.
//!
//! Every request counts, answered or not, as in the tools' own reports; times are taken as the
//! tools define them (JMeter's elapsed includes connecting; vegeta's and k6's latency is the
//! request's duration).

use std::path::Path;
use std::time::Duration;

use crate::stats::{Clock, ConnectTiming, ErrorKind, Recorder, Sample};

/// Which tool wrote a file, and in which encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Encoding {
    /// JMeter JTL, CSV (with or without a header row; `pms bench`'s samples.csv too).
    JtlCsv,
    /// JMeter JTL, XML.
    JtlXml,
    /// k6 `--out csv`.
    K6Csv,
    /// k6 `--out json`.
    K6Json,
    /// `vegeta encode --to csv`.
    VegetaCsv,
    /// `vegeta encode --to json`.
    VegetaJson,
}

impl Encoding {
    /// How reports name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::JtlCsv => "JMeter JTL (CSV)",
            Self::JtlXml => "JMeter JTL (XML)",
            Self::K6Csv => "k6 CSV",
            Self::K6Json => "k6 JSON",
            Self::VegetaCsv => "vegeta CSV",
            Self::VegetaJson => "vegeta JSON",
        }
    }
}

/// One request as a tool recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// When it began, ms since the Unix epoch.
    pub start_ms: f64,
    /// Its duration to the end of the response or the failure, ms (connect included when the
    /// tool includes it).
    pub elapsed_ms: f64,
    /// Time to the response head, ms, when recorded (JMeter's latency, connect included).
    pub ttfb_ms: Option<f64>,
    /// Opening its connection, ms, when it opened one and the tool recorded it.
    pub connect_ms: Option<f64>,
    /// How late it went out after its due time, ms (`pms bench`'s `Lag`; 0 for the others).
    pub lag_ms: f64,
    /// Status code; 0 when no response came.
    pub code: u16,
    /// Whether the tool counted it as a success.
    pub success: bool,
    /// The tool's failure message, if any.
    pub failure: String,
    /// Response bytes.
    pub received: u64,
    /// Request bytes.
    pub sent: u64,
    /// The tool's label (`pms bench` writes `warmup` or `measured`).
    pub label: String,
}

/// A file read.
#[derive(Debug, Clone)]
pub struct Imported {
    /// What it was.
    pub encoding: Encoding,
    /// Its requests, in file order.
    pub rows: Vec<Row>,
}

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Reading the file.
    #[error("reading {0}: {1}")]
    Io(String, std::io::Error),
    /// Not one of the known encodings.
    #[error("{0}: not a JMeter JTL (CSV or XML), k6 CSV or JSON, or vegeta CSV or JSON file")]
    Unknown(String),
    /// A record that does not parse.
    #[error("{path}: record {record}: {why}")]
    Bad {
        /// The file.
        path: String,
        /// 1-based record (line, or element) number.
        record: usize,
        /// What is wrong.
        why: String,
    },
    /// Nothing to measure.
    #[error("{0}: no requests in it")]
    Empty(String),
}

/// JMeter's default CSV columns (`jmeter.save.saveservice` defaults), for a file written
/// without its header row.
pub const JTL_DEFAULT_COLUMNS: &[&str] = &[
    "timeStamp",
    "elapsed",
    "label",
    "responseCode",
    "responseMessage",
    "threadName",
    "dataType",
    "success",
    "failureMessage",
    "bytes",
    "sentBytes",
    "grpThreads",
    "allThreads",
    "URL",
    "Latency",
    "IdleTime",
    "Connect",
];

/// Reads a results file of any known encoding.
///
/// # Errors
/// [`ImportError`] naming the file and, for a bad record, its number.
pub fn read(path: &Path) -> Result<Imported, ImportError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ImportError::Io(name.clone(), e))?;
    parse(&name, &text)
}

/// Reads `text` (from `name`, for messages) in whichever known encoding it is in.
///
/// # Errors
/// [`ImportError`].
pub fn parse(name: &str, text: &str) -> Result<Imported, ImportError> {
    let text = text.trim_start_matches('\u{feff}');
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let first = first.trim_start();
    let bad = |record: usize, why: String| ImportError::Bad {
        path: name.to_owned(),
        record,
        why,
    };
    let (encoding, rows) = if first.starts_with('<') {
        (Encoding::JtlXml, jtl_xml(text, &bad)?)
    } else if first.starts_with('{') {
        if first.contains("\"metric\"") && first.contains("\"type\"") {
            (Encoding::K6Json, k6_json(text, &bad)?)
        } else if first.contains("\"latency\"") && first.contains("\"code\"") {
            (Encoding::VegetaJson, vegeta_json(text, &bad)?)
        } else {
            return Err(ImportError::Unknown(name.to_owned()));
        }
    } else {
        let head = csv_record(first);
        match head.first().map(String::as_str) {
            Some("timeStamp") => (Encoding::JtlCsv, jtl_csv(text, true, &bad)?),
            Some("metric_name") => (Encoding::K6Csv, k6_csv(text, &bad)?),
            Some(f) if f.len() >= 18 && f.bytes().all(|b| b.is_ascii_digit()) => {
                (Encoding::VegetaCsv, vegeta_csv(text, &bad)?)
            }
            Some(f) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => {
                (Encoding::JtlCsv, jtl_csv(text, false, &bad)?)
            }
            _ => return Err(ImportError::Unknown(name.to_owned())),
        }
    };
    if rows.is_empty() {
        return Err(ImportError::Empty(name.to_owned()));
    }
    Ok(Imported { encoding, rows })
}

fn csv_record(line: &str) -> Vec<String> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(line.as_bytes())
        .records()
        .next()
        .and_then(Result::ok)
        .map(|r| r.iter().map(str::to_owned).collect())
        .unwrap_or_default()
}

fn csv_rows(
    text: &str,
) -> impl Iterator<Item = (usize, Result<csv::StringRecord, csv::Error>)> + '_ {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes())
        .into_records()
        .enumerate()
        .map(|(i, r)| (i + 1, r))
}

fn number(v: Option<&str>, what: &str) -> Result<f64, String> {
    v.map(str::trim)
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| format!("{what} is not a number: {:?}", v.unwrap_or("")))
}

fn count(v: Option<&str>) -> u64 {
    v.and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0)
}

/// A JMeter response code: a number, or 0 for the "Non HTTP response code: …" of a request
/// that got no response.
fn jmeter_code(v: Option<&str>) -> u16 {
    v.and_then(|v| v.trim().parse::<u16>().ok()).unwrap_or(0)
}

/// What JMeter says about a failure: its failure message, and for a request that got no
/// response the "Non HTTP response code/message" it writes in place of the status.
fn jmeter_failure(parts: &[Option<&str>]) -> String {
    let parts: Vec<&str> = parts
        .iter()
        .flatten()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty() && p.parse::<u16>().is_err())
        .collect();
    parts.join("; ")
}

type Bad<'a> = dyn Fn(usize, String) -> ImportError + 'a;

fn jtl_csv(text: &str, header: bool, bad: &Bad<'_>) -> Result<Vec<Row>, ImportError> {
    let mut rows = Vec::new();
    let mut columns: Vec<String> = JTL_DEFAULT_COLUMNS
        .iter()
        .map(|c| (*c).to_owned())
        .collect();
    for (n, record) in csv_rows(text) {
        let record = record.map_err(|e| bad(n, e.to_string()))?;
        if n == 1 && header {
            columns = record.iter().map(str::to_owned).collect();
            continue;
        }
        let get = |name: &str| {
            columns
                .iter()
                .position(|c| c == name)
                .and_then(|i| record.get(i))
        };
        let ms = |name: &str| get(name).and_then(|v| v.trim().parse::<f64>().ok());
        let start_ms = number(get("timeStamp"), "timeStamp (epoch ms)").map_err(|e| bad(n, e))?;
        let elapsed_ms = number(get("elapsed"), "elapsed").map_err(|e| bad(n, e))?;
        let success = get("success").is_none_or(|s| s.trim() == "true");
        rows.push(Row {
            start_ms,
            elapsed_ms,
            ttfb_ms: ms("Latency"),
            connect_ms: ms("Connect").filter(|c| *c > 0.0),
            lag_ms: ms("Lag").unwrap_or(0.0),
            code: jmeter_code(get("responseCode")),
            success,
            failure: if success {
                String::new()
            } else {
                jmeter_failure(&[
                    get("failureMessage"),
                    get("responseCode"),
                    get("responseMessage"),
                ])
            },
            received: count(get("bytes")),
            sent: count(get("sentBytes")),
            label: get("label").unwrap_or_default().to_owned(),
        });
    }
    Ok(rows)
}

fn jtl_xml(text: &str, bad: &Bad<'_>) -> Result<Vec<Row>, ImportError> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(text);
    let mut rows = Vec::new();
    let mut depth = 0usize;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| bad(rows.len() + 1, e.to_string()))?;
        let (element, opens) = match &event {
            Event::Start(e) => (e, true),
            Event::Empty(e) => (e, false),
            Event::End(_) => {
                depth = depth.saturating_sub(1);
                continue;
            }
            Event::Eof => break,
            _ => continue,
        };
        // Samples are the children of <testResults>; deeper ones are sub-results (redirects,
        // embedded resources) that their parent already counts.
        let name = element.name();
        if depth == 1 && matches!(name.as_ref(), b"httpSample" | b"sample") {
            let n = rows.len() + 1;
            let mut attrs = std::collections::HashMap::new();
            for a in element.attributes() {
                let a = a.map_err(|e| bad(n, e.to_string()))?;
                let value = a.unescape_value().map_err(|e| bad(n, e.to_string()))?;
                attrs.insert(a.key.as_ref().to_vec(), value.into_owned());
            }
            let get = |k: &str| attrs.get(k.as_bytes()).map(String::as_str);
            let ms = |k: &str| get(k).and_then(|v| v.parse::<f64>().ok());
            let success = get("s").is_none_or(|s| s == "true");
            rows.push(Row {
                start_ms: number(get("ts"), "ts (epoch ms)").map_err(|e| bad(n, e))?,
                elapsed_ms: number(get("t"), "t").map_err(|e| bad(n, e))?,
                ttfb_ms: ms("lt"),
                connect_ms: ms("ct").filter(|c| *c > 0.0),
                lag_ms: 0.0,
                code: jmeter_code(get("rc")),
                success,
                failure: if success {
                    String::new()
                } else {
                    jmeter_failure(&[get("rc"), get("rm")])
                },
                received: count(get("by")),
                sent: count(get("sby")),
                label: get("lb").unwrap_or_default().to_owned(),
            });
        }
        if opens {
            depth += 1;
        }
    }
    Ok(rows)
}

/// A k6 `http_req_duration` sample that ended at `end_ms` (k6 stamps it then), with its tags
/// read through `tag`: success is its `expected_response` tag when there is one, else its
/// status; without a status tag the request is taken as answered.
fn k6_row<'a>(end_ms: f64, duration: f64, tag: &dyn Fn(&str) -> Option<&'a str>) -> Row {
    let code = tag("status").map_or(200, |s| s.trim().parse().unwrap_or(0));
    let success = match tag("expected_response") {
        Some(e) if !e.is_empty() => e == "true",
        _ => (200..400).contains(&code),
    };
    Row {
        start_ms: end_ms - duration,
        elapsed_ms: duration,
        ttfb_ms: None,
        connect_ms: None,
        lag_ms: 0.0,
        code,
        success,
        failure: tag("error").unwrap_or_default().to_owned(),
        received: 0,
        sent: 0,
        label: tag("name").unwrap_or_default().to_owned(),
    }
}

fn k6_csv(text: &str, bad: &Bad<'_>) -> Result<Vec<Row>, ImportError> {
    let mut rows = Vec::new();
    let mut columns = Vec::new();
    for (n, record) in csv_rows(text) {
        let record = record.map_err(|e| bad(n, e.to_string()))?;
        if n == 1 {
            columns = record.iter().map(str::to_owned).collect::<Vec<_>>();
            continue;
        }
        let get = |name: &str| {
            columns
                .iter()
                .position(|c| c == name)
                .and_then(|i| record.get(i))
        };
        if get("metric_name") != Some("http_req_duration") {
            continue;
        }
        let duration = number(get("metric_value"), "metric_value").map_err(|e| bad(n, e))?;
        // k6 writes whole seconds by default (K6_CSV_TIME_FORMAT=unix), when the request ended.
        let end_s = number(get("timestamp"), "timestamp").map_err(|e| bad(n, e))?;
        rows.push(k6_row(end_s * 1000.0, duration, &get));
    }
    Ok(rows)
}

fn epoch_ms(time: &str) -> Result<f64, String> {
    let t: jiff::Timestamp = time
        .parse()
        .map_err(|e| format!("time {time:?} is not RFC 3339: {e}"))?;
    Ok(t.as_nanosecond() as f64 / 1e6)
}

fn k6_json(text: &str, bad: &Bad<'_>) -> Result<Vec<Row>, ImportError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(n, e.to_string()))?;
        if v["type"] != "Point" || v["metric"] != "http_req_duration" {
            continue;
        }
        let data = &v["data"];
        let duration = data["value"]
            .as_f64()
            .ok_or_else(|| bad(n, "data.value is not a number".into()))?;
        let end = epoch_ms(data["time"].as_str().unwrap_or_default()).map_err(|e| bad(n, e))?;
        let tags = &data["tags"];
        rows.push(k6_row(end, duration, &|k: &str| tags[k].as_str()));
    }
    Ok(rows)
}

/// A vegeta result: success is a 2xx or 3xx code with no error, as vegeta's report counts it.
fn vegeta_row(start_ms: f64, latency_ns: f64, code: u16, out: u64, inb: u64, error: &str) -> Row {
    Row {
        start_ms,
        elapsed_ms: latency_ns / 1e6,
        ttfb_ms: None,
        connect_ms: None,
        lag_ms: 0.0,
        code,
        success: (200..400).contains(&code) && error.is_empty(),
        failure: error.to_owned(),
        received: inb,
        sent: out,
        label: String::new(),
    }
}

fn vegeta_csv(text: &str, bad: &Bad<'_>) -> Result<Vec<Row>, ImportError> {
    let mut rows = Vec::new();
    for (n, record) in csv_rows(text) {
        let r = record.map_err(|e| bad(n, e.to_string()))?;
        if r.len() < 6 {
            return Err(bad(
                n,
                format!("{} fields, vegeta writes at least 9", r.len()),
            ));
        }
        let ts_ns = number(r.get(0), "timestamp (ns)").map_err(|e| bad(n, e))?;
        let latency = number(r.get(2), "latency (ns)").map_err(|e| bad(n, e))?;
        let code = r.get(1).and_then(|c| c.trim().parse().ok()).unwrap_or(0);
        let (out, inb) = (count(r.get(3)), count(r.get(4)));
        rows.push(vegeta_row(
            ts_ns / 1e6,
            latency,
            code,
            out,
            inb,
            r.get(5).unwrap_or(""),
        ));
    }
    Ok(rows)
}

fn vegeta_json(text: &str, bad: &Bad<'_>) -> Result<Vec<Row>, ImportError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(n, e.to_string()))?;
        let start = epoch_ms(v["timestamp"].as_str().unwrap_or_default()).map_err(|e| bad(n, e))?;
        let latency = v["latency"]
            .as_f64()
            .ok_or_else(|| bad(n, "latency (ns) is not a number".into()))?;
        let code = v["code"].as_u64().and_then(|c| u16::try_from(c).ok());
        rows.push(vegeta_row(
            start,
            latency,
            code.unwrap_or(0),
            v["bytes_out"].as_u64().unwrap_or(0),
            v["bytes_in"].as_u64().unwrap_or(0),
            v["error"].as_str().unwrap_or(""),
        ));
    }
    Ok(rows)
}

/// What a failed request counts as, from its code and the tool's message.
fn error_kind(row: &Row) -> Option<ErrorKind> {
    if row.success {
        return None;
    }
    if row.code != 0 {
        return Some(if (200..400).contains(&row.code) {
            ErrorKind::Check
        } else {
            ErrorKind::Status
        });
    }
    let m = row.failure.to_ascii_lowercase();
    Some(
        if m.contains("timeout") || m.contains("timed out") || m.contains("deadline") {
            ErrorKind::Timeout
        } else if m.contains("ssl") || m.contains("tls") || m.contains("handshake") {
            ErrorKind::Tls
        } else if m.contains("refused") || m.contains("connect") {
            ErrorKind::Connect
        } else {
            ErrorKind::Reset
        },
    )
}

/// An imported file's requests, split at the warm-up and recorded.
#[derive(Debug, Clone)]
pub struct Reduced {
    /// Requests that began after the warm-up (and are not labelled `warmup`).
    pub measured: Recorder,
    /// The others.
    pub warmup: Recorder,
    /// From the first measured request's start to the last one's end: the span JMeter's and
    /// WSO2's throughput divides by.
    pub window: Duration,
    /// From the first request's start to the last one's end.
    pub ended: Duration,
}

impl Imported {
    /// Splits the requests at `warmup` from the first one's start (the WSO2 splitter's rule;
    /// rows `pms bench` labelled `warmup` stay in the warm-up too) and records them.
    pub fn reduce(&self, warmup: Duration) -> Reduced {
        let first = self
            .rows
            .iter()
            .map(|r| r.start_ms)
            .fold(f64::INFINITY, f64::min);
        let since = |ms: f64| Duration::from_secs_f64(((ms - first) / 1000.0).max(0.0));
        let recorder = || Recorder::new(Clock::Due).counting_connect(true);
        let (mut measured, mut warm) = (recorder(), recorder());
        let (mut m_first, mut m_end, mut end) = (f64::INFINITY, f64::NEG_INFINITY, first);
        for r in &self.rows {
            let connect = r.connect_ms.map(|c| Duration::from_secs_f64(c / 1000.0));
            let from_send = |ms: f64| {
                Duration::from_secs_f64((ms / 1000.0).max(0.0))
                    .saturating_sub(connect.unwrap_or_default())
            };
            let sample = Sample {
                due: since(r.start_ms),
                lag: Duration::from_secs_f64((r.lag_ms / 1000.0).max(0.0)),
                ttfb: r.ttfb_ms.filter(|_| r.code != 0).map(from_send),
                elapsed: from_send(r.elapsed_ms),
                connect: connect.map(|tcp| ConnectTiming { tcp, tls: None }),
                sent: r.sent,
                received: r.received,
                status: (r.code != 0).then_some(r.code),
                error: error_kind(r),
            };
            let stop = r.start_ms + r.lag_ms + r.elapsed_ms;
            end = end.max(stop);
            if sample.due < warmup || r.label == "warmup" {
                warm.record(&sample);
            } else {
                measured.record(&sample);
                m_first = m_first.min(r.start_ms);
                m_end = m_end.max(stop);
            }
        }
        let span = |a: f64, b: f64| Duration::from_secs_f64(((b - a) / 1000.0).max(0.0));
        Reduced {
            measured,
            warmup: warm,
            window: if m_first.is_finite() {
                span(m_first, m_end)
            } else {
                Duration::ZERO
            },
            ended: span(first, end),
        }
    }
}
