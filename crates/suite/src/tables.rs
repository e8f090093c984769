//! The report's tables, built once from the results and rendered by both [`super::markdown`]
//! and [`super::html`]: the published column sets for each part of a suite, then PMS's figures
//! next to the published ones.

use super::metrics::{self, advantage};
use super::results::{CellResult, RunRecord, Status, SuiteResults};
use super::spec::Reference;

/// The figures of JMeter's summary report, after a table's lead columns.
const JMETER_SUMMARY: &[&str] = &[
    "Samples",
    "Average",
    "Min",
    "Max",
    "Std. Dev.",
    "Error (%)",
    "Throughput (sec)",
    "Received (KB/sec)",
    "Sent (KB/sec)",
    "Avg. Bytes",
];

/// Said under every table with latency figures.
const NO_RESPONSE: &str = "Requests that got no response (timeouts, resets) count in the latency figures with the time until their failure, as JMeter, vegeta and WSO2's reports count them, and in the errors.";

/// A titled table.
#[derive(Debug, Clone)]
pub struct Table {
    /// Heading.
    pub title: String,
    /// A sentence under the heading.
    pub note: String,
    /// Column headers.
    pub headers: Vec<String>,
    /// Cells, already formatted.
    pub rows: Vec<Vec<String>>,
}

/// A number with `d` decimals; `—` when absent.
pub fn num(v: Option<f64>, d: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.d$}"),
        _ => "—".into(),
    }
}

fn m(r: &RunRecord, k: &str) -> Option<f64> {
    r.metrics.get(k).copied()
}

fn status_text(r: &RunRecord) -> Option<String> {
    match &r.status {
        Status::Ok => None,
        Status::NotInstalled { program } => Some(format!("{program} not installed")),
        Status::Failed { error } => Some(format!(
            "failed: {}",
            error.lines().next().unwrap_or_default()
        )),
    }
}

fn cells<'a>(res: &'a SuiteResults, part: &'a str) -> impl Iterator<Item = &'a CellResult> {
    res.cells.iter().filter(move |c| c.part == part)
}

/// An empty table with these headers.
pub(crate) fn table(title: &str, note: &str, headers: &[&str]) -> Table {
    Table {
        title: title.into(),
        note: note.into(),
        headers: headers.iter().map(|h| (*h).to_owned()).collect(),
        rows: Vec::new(),
    }
}

impl Table {
    /// A row per run of `part`'s cells: the cell's `lead` columns, then the run's `figures`
    /// (`None`: no row). A run that produced nothing gets its status in the first figure
    /// column instead, the rest blank.
    fn fill(
        &mut self,
        res: &SuiteResults,
        part: &str,
        lead: impl Fn(&CellResult, &RunRecord) -> Vec<String>,
        figures: impl Fn(&CellResult, &RunRecord) -> Option<Vec<String>>,
    ) {
        for c in cells(res, part) {
            for r in &c.runs {
                let mut row = lead(c, r);
                if let Some(text) = status_text(r) {
                    row.push(text);
                    row.resize(self.headers.len().max(row.len()), String::new());
                } else if let Some(rest) = figures(c, r) {
                    row.extend(rest);
                } else {
                    continue;
                }
                self.rows.push(row);
            }
        }
    }
}

/// The cell's parameters `names`, in order.
fn params(c: &CellResult, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| c.param(n).unwrap_or_default().to_owned())
        .collect()
}

/// Lead columns that are the cell's parameters `names`; a run of another system than PMS (an
/// imported one) says whose it is in the first.
fn lead_params(names: &'static [&'static str]) -> impl Fn(&CellResult, &RunRecord) -> Vec<String> {
    move |c, r| {
        let mut lead = params(c, names);
        if r.server != "pms" {
            if let Some(first) = lead.first_mut() {
                first.push_str(&format!(" — {}", r.server));
            }
        }
        lead
    }
}

/// Run `r`'s metrics `keys`, each with its number of decimals.
fn figures(r: &RunRecord, keys: &[(&str, usize)]) -> Vec<String> {
    keys.iter().map(|&(k, d)| num(m(r, k), d)).collect()
}

/// The report's tables: the results in the published column sets, and PMS next to the
/// published figures (one table per part of the suite).
pub fn all(res: &SuiteResults) -> (Vec<Table>, Vec<Table>) {
    let mut out = Vec::new();
    if res.cells.iter().any(|c| c.part == "proxy") {
        out.extend(proxy(res));
    }
    let gateway_parts = [
        "jmeter",
        "jmeter-stress",
        "k6",
        "stress",
        "startup",
        "overview",
    ];
    if res
        .cells
        .iter()
        .any(|c| gateway_parts.contains(&c.part.as_str()))
    {
        out.extend(gateway(res));
    }
    if res.cells.iter().any(|c| c.part == "delay") {
        out.push(delay(res));
    }
    if res.cells.iter().any(|c| c.part == "parking") {
        out.push(parking(res));
        out.extend(soak(res));
    }
    out.extend(super::rounds::table(res));
    out.extend(super::hypothesis::table(res));
    (out, side_by_side(res))
}

fn proxy(res: &SuiteResults) -> Vec<Table> {
    let mut summary = table(
        "Summary (the published columns)",
        &format!("Measured window only (after the warm-up). Memory is the proxy's resident set size, averaged over the measured window (MB); the published column was the JVM heap after full GC, which has no equivalent here. {NO_RESPONSE}"),
        &[
            "Scenario Name",
            "System",
            "Concurrent Users",
            "Message Size (Bytes)",
            "Back-end Service Delay (ms)",
            "Error %",
            "Throughput (Requests/sec)",
            "Average Response Time (ms)",
            "Standard Deviation of Response Time (ms)",
            "99th Percentile of Response Time (ms)",
            "Proxy RSS, measured window (MB)",
        ],
    );
    let mut full = table(
        "Full statistics (the 2024 column set)",
        &format!("Average users in the system is throughput × mean (Little's law); KB/s count headers and bodies. {NO_RESPONSE}"),
        &[
            "Scenario Name",
            "System",
            "Concurrent Users",
            "Message Size (Bytes)",
            "Back-end Service Delay (ms)",
            "Label",
            "# Samples",
            "Error Count",
            "Error %",
            "Throughput (Requests/sec)",
            "Average Response Time (ms)",
            "Average Users in the System",
            "Standard Deviation of Response Time (ms)",
            "Minimum Response Time (ms)",
            "75th Percentile (ms)",
            "90th Percentile (ms)",
            "95th Percentile (ms)",
            "98th Percentile (ms)",
            "99th Percentile (ms)",
            "99.9th Percentile (ms)",
            "Received (KB/sec)",
            "Sent (KB/sec)",
        ],
    );
    let lead = |c: &CellResult, r: &RunRecord| {
        let mut lead = vec![c.name.clone(), r.server.clone()];
        lead.extend(params(
            c,
            &[
                "Concurrent Users",
                "Message Size (Bytes)",
                "Back-end Service Delay (ms)",
            ],
        ));
        lead
    };
    summary.fill(res, "proxy", lead, |_, r| {
        Some(figures(
            r,
            &[
                ("error_pct", 2),
                ("throughput", 2),
                ("mean_ms", 2),
                ("stdev_ms", 2),
                ("p99_ms", 2),
                ("rss_mb", 1),
            ],
        ))
    });
    full.fill(res, "proxy", lead, |_, r| {
        let s = r.measured()?;
        let p = |q: f64| num(s.percentile(q), 2);
        Some(vec![
            "HTTP Request".into(),
            s.samples.to_string(),
            s.errors.to_string(),
            num(Some(s.error_pct), 2),
            num(Some(s.throughput), 2),
            num(Some(s.mean_ms), 2),
            num(Some(s.avg_users), 0),
            num(Some(s.stdev_ms), 2),
            num(Some(s.min_ms), 2),
            p(75.0),
            p(90.0),
            p(95.0),
            p(98.0),
            p(99.0),
            p(99.9),
            num(Some(s.received_kb_s), 2),
            num(Some(s.sent_kb_s), 2),
        ])
    });
    vec![summary, full]
}

fn gateway(res: &SuiteResults) -> Vec<Table> {
    let mut jmeter = table(
        "JMeter summary: configurations 1 and 2",
        &format!("Each user sends one request (JMeter's loop count), users start evenly over the ramp; getAllUsers with a token, over cleartext as published (HTTP/2 as h2c); the TLS rows are extra. Each request opens its connection, and its time includes connecting, as JMeter's elapsed time does. {NO_RESPONSE}"),
        &[&["Protocol", "Configuration"][..], JMETER_SUMMARY].concat(),
    );
    let summary = |_: &CellResult, r: &RunRecord| {
        let s = r.measured()?;
        Some(vec![
            s.samples.to_string(),
            num(Some(s.mean_ms), 2),
            num(Some(s.min_ms), 2),
            num(Some(s.max_ms), 2),
            num(Some(s.stdev_ms), 2),
            format!("{:.3}%", s.error_pct),
            num(Some(s.throughput), 5),
            num(Some(s.received_kb_s), 2),
            num(Some(s.sent_kb_s), 2),
            num(Some(s.avg_bytes), 1),
        ])
    };
    let lead = lead_params(&["Protocol", "Configuration"]);
    jmeter.fill(res, "jmeter", lead, summary);
    let mut jmeter_stress = table(
        "JMeter system stress test",
        &format!("As the JMeter summary, with as many users as the published stress test had (2,915 and 5,900, one request each over a 50 s ramp; the report gives no ramp, and 50 s matches its throughput), over cleartext HTTP/1.1 and h2c as published. The published runs had about 8 % errors. {NO_RESPONSE}"),
        &[&["Protocol", "Users"][..], JMETER_SUMMARY].concat(),
    );
    let lead = lead_params(&["Protocol", "Users"]);
    jmeter_stress.fill(res, "jmeter-stress", lead, summary);
    let mut k6 = table(
        "k6 load test (the dissertation's tables 4 and 5, and 20 to 27 for configuration 2)",
        &format!("VUs in a loop with a think time after each answer; throughput is requests over k6's run time, which lets the iterations under way at the end finish their sleep. {NO_RESPONSE}"),
        &[
            "Protocol",
            "Configuration",
            "VUs",
            "Average Response Time (ms)",
            "Max (ms)",
            "Median (ms)",
            "Min (ms)",
            "p90 (ms)",
            "p95 (ms)",
            "Throughput (req/s)",
        ],
    );
    let lead = lead_params(&["Protocol", "Configuration", "VUs"]);
    k6.fill(res, "k6", lead, |_, r| {
        Some(figures(
            r,
            &[
                ("mean_ms", 2),
                ("max_ms", 2),
                ("median_ms", 2),
                ("min_ms", 2),
                ("p90_ms", 2),
                ("p95_ms", 2),
                ("throughput", 2),
            ],
        ))
    });
    let mut stress = table(
        "Stress test (the dissertation's tables 8 and 9)",
        &format!("Users join at the given pace, each in a loop with a 1 s think time, until the first failed check; the figure is the number active at that moment. A run that reached its user or time cap without a failure says so (≥ N): the limit was not found. Users are capped at the open-file limit less 1,000 (one connection each), so a failure is never the load generator's own. {NO_RESPONSE}"),
        &[
            "Protocol",
            "Users added per second",
            "Number of simultaneous users",
            "Ended",
            "Requests",
            "Peak (req/s)",
            "Mean (ms)",
            "p99 (ms)",
        ],
    );
    let lead = lead_params(&["Protocol", "Users added per second"]);
    stress.fill(res, "stress", lead, |_, r| {
        let extra = r.extra.as_ref();
        let failed = extra
            .and_then(|e| e.get("failed")?.as_bool())
            .unwrap_or(false);
        let ended = if failed {
            stop_reason(extra.and_then(|e| e.get("reason")))
        } else {
            "cap reached, no failure".into()
        };
        // From the recorded outcome when there is one (results.json of an earlier build may
        // hold the users at the very end as `users_reached`), else from the figures.
        let figure = extra.and_then(super::gateway::stress_figure);
        let users = match figure {
            Some(("max_users", u)) => num(Some(u), 0),
            Some((_, u)) => format!("≥ {}", num(Some(u), 0)),
            None => match (m(r, "max_users"), m(r, "users_reached")) {
                (Some(u), _) => num(Some(u), 0),
                (None, Some(u)) => format!("≥ {}", num(Some(u), 0)),
                _ => "—".into(),
            },
        };
        Some(vec![
            users,
            ended,
            r.measured().map_or("—".into(), |s| s.samples.to_string()),
            num(extra.and_then(|e| e.get("peak_rate")?.as_f64()), 1),
            num(m(r, "mean_ms"), 2),
            num(m(r, "p99_ms"), 2),
        ])
    });
    let mut startup = table(
        "Start-up times",
        "Two definitions, both from exec: to the service's own started line on its output (\"gateway started\", \"users service listening\"), the bare-process stand-in for the \"Started …\" lines the published figures were read from; and to the first 200 from /readyz (the side-by-side compares this one). The service is stopped with SIGTERM after each run.",
        &[
            "Component",
            "Runs",
            "To its started line, mean (s)",
            "Average Startup Time (s)",
            "Median (s)",
            "Min (s)",
            "Max (s)",
            "RSS when ready (MB)",
        ],
    );
    let lead = |c: &CellResult, _: &RunRecord| {
        vec![
            c.id.trim_start_matches("startup/").to_owned(),
            c.param("Runs").unwrap_or_default().into(),
        ]
    };
    startup.fill(res, "startup", lead, |_, r| {
        let ms = |k: &str| {
            r.extra
                .as_ref()
                .and_then(|e| e.pointer(&format!("/ready_ms/{k}"))?.as_f64())
                .map(|v| v / 1000.0)
        };
        Some(vec![
            num(m(r, "startup_line_s"), 3),
            num(m(r, "startup_s"), 3),
            num(ms("median"), 3),
            num(ms("min"), 3),
            num(ms("max"), 3),
            num(m(r, "rss_mb"), 1),
        ])
    });
    let mut overview = table(
        "One request (JMeter's sample view)",
        "Median of five requests, each on a new connection: load time to the last byte, connect time (TCP and TLS), latency to the first byte (connect included, as JMeter counts it), the response's sizes and the request's (the published Sent bytes were 0: JMeter did not record them).",
        &[
            "Protocol",
            "Load Time (ms)",
            "Connect Time (ms)",
            "Latency (ms)",
            "Size in bytes",
            "Sent bytes",
            "Headers size in bytes",
            "Body size in bytes",
        ],
    );
    overview.fill(res, "overview", lead_params(&["Protocol"]), |_, r| {
        let size = m(r, "header_bytes")
            .zip(m(r, "body_bytes"))
            .map(|(h, b)| h + b);
        let mut row = figures(r, &[("load_ms", 2), ("connect_ms", 2), ("latency_ms", 2)]);
        row.push(num(size, 0));
        row.push(num(m(r, "sent_bytes"), 0));
        row.extend(figures(r, &[("header_bytes", 0), ("body_bytes", 0)]));
        Some(row)
    });
    vec![jmeter, jmeter_stress, k6, stress, startup, overview]
}

fn delay(res: &SuiteResults) -> Table {
    let mut t = table(
        "Constant arrival rate against a slow back-end",
        &format!("Latency from each request's due time (corrected for coordinated omission); throughput as vegeta defines it, successes over attack + wait. The full vegeta text reports follow. {NO_RESPONSE}"),
        &[
            "Rate (req/s)",
            "Requests",
            "Success %",
            "Throughput (req/s)",
            "Mean (ms)",
            "p50 (ms)",
            "p90 (ms)",
            "p99 (ms)",
            "Max (ms)",
            "Late",
            "Dropped",
            "Gateway RSS (MB)",
        ],
    );
    t.fill(res, "delay", lead_params(&["Rate (req/s)"]), |_, r| {
        let schedule = r.output.as_ref().and_then(|o| o.schedule);
        let mut row = vec![r.measured().map_or("—".into(), |s| s.samples.to_string())];
        row.extend(figures(
            r,
            &[
                ("success_pct", 2),
                ("throughput", 2),
                ("mean_ms", 2),
                ("median_ms", 2),
                ("p90_ms", 2),
                ("p99_ms", 2),
                ("max_ms", 2),
            ],
        ));
        row.push(schedule.map_or("—".into(), |s| s.late.to_string()));
        row.push(schedule.map_or("—".into(), |s| s.dropped.to_string()));
        row.push(num(m(r, "rss_mb"), 1));
        Some(row)
    });
    t
}

/// The barrier cells next to pgbench's at the same client count: the database's own limit.
fn parking(res: &SuiteResults) -> Table {
    let mut t = table(
        "Barrier transactions next to pgbench",
        &format!("One barrier call (an entrance or an exit) is one transaction; pgbench's is its TPC-B-like one on the same PostgreSQL with as many clients. \"× pgbench\" is the barrier rate over pgbench's (target: at least 0.5 on PostgreSQL). Clients call again as soon as they are answered, except in the rows \"at N calls/s\": there the clients together offer N calls per second on a fixed schedule and a late call is measured from when it was due, so their latency is at that load rather than at saturation (target: p99 under 20 ms at 100 barriers). \"Priced\" is the share of exits whose answer carried the price. \"Settled\" is the time from the end of the load until parks, payments and users had applied every event: each exit's invoice issued, its price on the visit and its coins in the wallet; \"Lag max\" the most events they had left to apply (or, with the services apart, to publish) together, sampled every 250 ms during the measured window. The quote is a customer's price request for a parked car during the same run. In the rows at a fixed rate, the first entrance and exit display of each park is followed by long poll; the display delay runs from the time a barrier wrote a display's text to the follower's answer with it (target: within 100 ms). {NO_RESPONSE}"),
        &[
            "Load",
            "Database",
            "Clients",
            "Transactions/s",
            "× pgbench",
            "Mean (ms)",
            "p50 (ms)",
            "p99 (ms)",
            "Max (ms)",
            "Error %",
            "Priced %",
            "Settled (ms)",
            "Lag max",
            "Quote mean (ms)",
            "Quote p99 (ms)",
            "Display p99 (ms)",
            "Display max (ms)",
        ],
    );
    let pgbench = |clients: Option<&str>| {
        cells(res, "parking")
            .filter(|c| c.id.starts_with("pgbench/") && c.param("Clients") == clients)
            .flat_map(|c| c.runs.iter())
            .find_map(|r| m(r, "throughput"))
    };
    let lead = |c: &CellResult, _: &RunRecord| {
        let mut lead = vec![c.name.clone()];
        lead.extend(params(c, &["Database", "Clients"]));
        lead
    };
    t.fill(res, "parking", lead, |c, r| {
        let own = m(r, "throughput");
        // pgbench's own row, and cells at a fixed offered rate (their rate is the offer).
        let ratio = if c.id.starts_with("pgbench/") || c.param("Offered").is_some() {
            None
        } else {
            own.zip(pgbench(c.param("Clients")))
                .filter(|(_, p)| *p > 0.0)
                .map(|(o, p)| o / p)
        };
        let mut row = vec![num(own, 1), num(ratio, 2)];
        row.extend(figures(
            r,
            &[
                ("mean_ms", 2),
                ("median_ms", 2),
                ("p99_ms", 2),
                ("max_ms", 2),
                ("error_pct", 2),
                ("priced_pct", 1),
                ("settled_ms", 0),
                ("lag_max", 0),
                ("quote_mean_ms", 2),
                ("quote_p99_ms", 2),
                ("display_p99_ms", 2),
                ("display_max_ms", 2),
            ],
        ));
        Some(row)
    });
    t
}

/// Each soak cell's figures window by window, with every process's resident memory at the
/// window's end: what drifts over a long run shows as a trend down the rows.
fn soak(res: &SuiteResults) -> Vec<Table> {
    let mut out = Vec::new();
    for c in cells(res, "parking").filter(|c| c.id.starts_with("soak/")) {
        for r in &c.runs {
            let Some(extra) = r.extra.as_ref() else {
                continue;
            };
            let (Some(windows), rss) = (
                extra["soak_windows"].as_array(),
                extra["soak_rss"].as_array().cloned().unwrap_or_default(),
            ) else {
                continue;
            };
            let mut processes: Vec<&str> =
                rss.iter().filter_map(|s| s["process"].as_str()).collect();
            processes.sort_unstable();
            processes.dedup();
            let width = windows
                .get(1)
                .and_then(|w| w["from_s"].as_f64())
                .unwrap_or_else(|| extra["window_s"].as_f64().unwrap_or(0.0));
            let mut headers = vec![
                "From (s)".to_owned(),
                "Barrier calls".into(),
                "Failed".into(),
                "p50 (ms)".into(),
                "p99 (ms)".into(),
                "Max (ms)".into(),
                "Sign-ins".into(),
                "Failed".into(),
                "p99 (ms)".into(),
                "Pages".into(),
                "Failed".into(),
                "p99 (ms)".into(),
            ];
            headers.extend(processes.iter().map(|p| format!("{p} RSS (MB)")));
            let header_refs: Vec<&str> = headers.iter().map(String::as_str).collect();
            let mut t = table(
                &format!(
                    "{} ({})",
                    c.name,
                    c.params
                        .iter()
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "The run cut into windows of equal length, each with its barrier calls (latency from when each was due), a customer's sign-ins through the API (one a second) and a person's front-office pages (the sign-in form, signing in, the account and visits pages, every two seconds); then each process's resident memory (VmRSS) as last read in the window (read every 10 s). Steady latency and flat memory down the rows is the soak passed.",
                &header_refs,
            );
            for w in windows {
                // Latencies only where there were answers.
                let series = |name: &str| {
                    let s = &w[name];
                    let n = s["ok"].as_u64().unwrap_or(0) + s["failed"].as_u64().unwrap_or(0);
                    let ms = |k: &str| s[k].as_f64().filter(|_| n > 0);
                    (
                        n,
                        s["failed"].as_u64().unwrap_or(0),
                        ms("p50_ms"),
                        ms("p99_ms"),
                        ms("max_ms"),
                    )
                };
                let from = w["from_s"].as_f64().unwrap_or(0.0);
                let (b, bf, b50, b99, bmax) = series("barriers");
                let (si, sif, _, si99, _) = series("sign_ins");
                let (pg, pgf, _, pg99, _) = series("pages");
                let mut row = vec![
                    num(Some(from), 0),
                    b.to_string(),
                    bf.to_string(),
                    num(b50, 2),
                    num(b99, 2),
                    num(bmax, 2),
                    si.to_string(),
                    sif.to_string(),
                    num(si99, 2),
                    pg.to_string(),
                    pgf.to_string(),
                    num(pg99, 2),
                ];
                for p in &processes {
                    let last = rss
                        .iter()
                        .filter(|s| s["process"].as_str() == Some(p))
                        .filter(|s| {
                            s["at_s"]
                                .as_f64()
                                .is_some_and(|at| at < from + width + 1e-9)
                        })
                        .filter_map(|s| s["mb"].as_f64())
                        .next_back();
                    row.push(num(last, 1));
                }
                t.rows.push(row);
            }
            out.push(t);
        }
    }
    out
}

/// A part's metric names and its (cell, PMS run, published row) triples.
type PartRows<'a> = (
    String,
    Vec<String>,
    Vec<(&'a CellResult, &'a RunRecord, &'a Reference)>,
);

/// PMS next to every published row whose cell was run: one table per part, with a column per
/// metric the published rows of that part give.
pub fn side_by_side(res: &SuiteResults) -> Vec<Table> {
    let mut tables: Vec<PartRows<'_>> = Vec::new();
    for r in &res.spec.reference {
        let Some(cell) = res.cells.iter().find(|c| c.id == r.cell) else {
            continue;
        };
        let Some(run) = cell
            .runs
            .iter()
            .find(|x| x.server == "pms" && x.status == Status::Ok)
        else {
            continue;
        };
        let i = match tables.iter().position(|(part, ..)| *part == cell.part) {
            Some(i) => i,
            None => {
                tables.push((cell.part.clone(), Vec::new(), Vec::new()));
                tables.len() - 1
            }
        };
        let (_, names, rows) = &mut tables[i];
        for k in r.metrics.keys() {
            if !names.contains(k) {
                names.push(k.clone());
            }
        }
        rows.push((cell, run, r));
    }
    tables
        .into_iter()
        .map(|(part, names, rows)| {
            let mut headers = vec!["Cell".to_owned(), "Published system".to_owned()];
            headers.extend(names.iter().map(|n| match metrics::describe(n) {
                Some((label, unit, _)) => format!("{label} ({unit})"),
                None => n.clone(),
            }));
            let mut t = Table {
                title: format!("{} next to the published figures", part_title(&part)),
                note: "PMS / published, then PMS's advantage in brackets: above 1× means PMS did better (more throughput or users, less latency, errors or time) whatever the metric's direction; sizes get no verdict.".into(),
                headers,
                rows: Vec::new(),
            };
            let mut marks = std::collections::BTreeSet::new();
            for (cell, run, r) in rows {
                let mut row = vec![cell.id.clone(), r.who.clone()];
                for n in &names {
                    row.push(match (r.metrics.get(n), run.metrics.get(n)) {
                        (Some(p), Some(v)) => {
                            let mark = caveat(r, n);
                            marks.extend(mark);
                            let adv = advantage(n, *v, *p)
                                .map(|a| format!(" ({a:.2}×{})", mark.map_or("", |m| m.0)))
                                .unwrap_or_default();
                            format!("{} / {}{adv}", short(*v), short(*p))
                        }
                        (Some(p), None) => format!("— / {}", short(*p)),
                        _ => String::new(),
                    });
                }
                t.rows.push(row);
            }
            // Each sentence begins with its mark.
            for (_, why) in marks {
                t.note.push_str(&format!(" {why}"));
            }
            t
        })
        .collect()
}

fn part_title(part: &str) -> &str {
    match part {
        "proxy" => "The REST scenarios",
        "jmeter" => "JMeter configurations",
        "jmeter-stress" => "The JMeter system stress test",
        "k6" => "The k6 load test",
        "stress" => "The stress test",
        "startup" => "Start-up",
        "overview" => "One request",
        "delay" => "The constant-rate runs",
        other => other,
    }
}

/// Published error rates at or above this make a row's ratios not like for like.
const HIGH_ERROR_PCT: f64 = 1.0;

/// Why a ratio against published row `r` on metric `name` is not like for like, if it is not:
/// the mark put beside it and the sentence under the table. Such ratios belong in no headline.
fn caveat(r: &Reference, name: &str) -> Option<(&'static str, &'static str)> {
    if name == "startup_s" {
        return Some((
            "‡",
            "‡ A different definition: the published start-up was read from each service's own \"started\" line; this one is exec → the first 200 on /readyz (the start-up table has both). Not a headline figure.",
        ));
    }
    match r.metrics.get("error_pct") {
        Some(e) if *e >= HIGH_ERROR_PCT && name != "error_pct" => Some((
            "†",
            "† The published run failed a large share of its requests (its Error % column): its latencies and throughput are not those of a working system, so the ratio is not like for like and belongs in no headline.",
        )),
        _ => None,
    }
}

/// A figure with as many decimals as it needs: three significant digits below 10.
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        let decimals = (2 - a.log10().floor() as i32).clamp(2, 6) as usize;
        format!("{v:.decimals$}")
    }
}

/// How a stress run's stop reason reads in its table: "first failure: status 502",
/// "first failure: reset", "error rate 12.5 %".
fn stop_reason(reason: Option<&serde_json::Value>) -> String {
    let Some(reason) = reason else {
        return "failure".into();
    };
    let text = |k: &str| reason.get(k).and_then(serde_json::Value::as_str);
    match text("reason") {
        Some("first_error") => {
            let kind = text("kind").unwrap_or("error");
            match reason.get("status").and_then(serde_json::Value::as_u64) {
                Some(code) => format!("first failure: {kind} {code}"),
                None => format!("first failure: {kind}"),
            }
        }
        Some("error_rate") => match reason.get("pct").and_then(serde_json::Value::as_f64) {
            Some(pct) => format!("error rate {pct:.1} %"),
            None => "error rate".into(),
        },
        Some(other) => other.replace('_', " "),
        None => "failure".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stress_stop_reasons_read_as_what_failed() {
        use pms_bench::collect::StopReason;
        use pms_bench::stats::ErrorKind;
        let read = |r: StopReason| stop_reason(Some(&serde_json::to_value(r).unwrap()));
        assert_eq!(
            read(StopReason::FirstError {
                kind: ErrorKind::Status,
                status: Some(502)
            }),
            "first failure: status 502"
        );
        assert_eq!(
            read(StopReason::FirstError {
                kind: ErrorKind::Reset,
                status: None
            }),
            "first failure: reset"
        );
        assert_eq!(
            read(StopReason::ErrorRate { pct: 12.54 }),
            "error rate 12.5 %"
        );
        assert_eq!(stop_reason(None), "failure");
    }

    #[test]
    fn ratios_against_failing_runs_or_other_definitions_are_marked() {
        let reference = |error_pct: f64| Reference {
            cell: "c".into(),
            who: "w".into(),
            metrics: [
                ("error_pct".to_owned(), error_pct),
                ("mean_ms".to_owned(), 5.0),
            ]
            .into_iter()
            .collect(),
        };
        assert_eq!(caveat(&reference(0.0), "mean_ms"), None);
        assert_eq!(caveat(&reference(99.7), "mean_ms").map(|c| c.0), Some("†"));
        assert_eq!(
            caveat(&reference(99.7), "error_pct"),
            None,
            "the error rate itself compares fine"
        );
        assert_eq!(caveat(&reference(0.0), "startup_s").map(|c| c.0), Some("‡"));
        // The sentence under the table carries its mark once, at its start (the note writes
        // the sentence alone).
        for (r, n) in [(reference(99.7), "mean_ms"), (reference(0.0), "startup_s")] {
            let (mark, why) = caveat(&r, n).expect("a caveat");
            assert!(why.starts_with(&format!("{mark} ")), "{why}");
            assert_eq!(why.matches(mark).count(), 1, "{why}");
        }
    }

    #[test]
    fn short_figures_keep_three_significant_digits() {
        assert_eq!(short(8935.69), "8936");
        assert_eq!(short(26.0), "26");
        assert_eq!(short(11.13), "11.1");
        assert_eq!(short(2.0196), "2.02");
        assert_eq!(short(0.0047), "0.00470");
        assert_eq!(short(0.066), "0.0660");
    }
}
