//! `report.html`: one self-contained page — inline CSS and SVG, no script, nothing fetched —
//! with the report's tables and its charts: throughput per scenario with PMS and the peers side
//! by side, and per cell the latency over time with the request rate and the percentile
//! distribution.

use std::fmt::Write as _;

use super::charts;
use super::markdown::{hardware_note, profile_about};
use super::results::{CellResult, SuiteResults};
use super::tables::{self, Table};

/// Escapes text for HTML.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}\
th,td{border:1px solid #ccc;padding:3px 6px;text-align:right}\
th:first-child,td:first-child{text-align:left}\
th{background:#f3f3f3}\
tbody tr:nth-child(even){background:#fafafa}\
.chart{margin:.5em 0 1.5em}\
.chart svg{max-width:100%;height:auto}\
details{margin:.3em 0}\
summary{cursor:pointer}\
.note{color:#555;max-width:70em}\
pre{background:#f6f6f6;padding:.6em;overflow:auto}";

fn render_table(out: &mut String, t: &Table) {
    let _ = write!(
        out,
        "<h3>{}</h3>\n<p class=\"note\">{}</p>\n",
        escape(&t.title),
        escape(&t.note)
    );
    if t.rows.is_empty() {
        out.push_str("<p><em>No rows: no cell of this table was run.</em></p>\n");
        return;
    }
    out.push_str("<table>\n<thead><tr>");
    for h in &t.headers {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for r in &t.rows {
        out.push_str("<tr>");
        for c in r {
            let _ = write!(out, "<td>{}</td>", escape(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
}

fn chart(out: &mut String, what: &str, svg: Result<Option<String>, String>) {
    match svg {
        Ok(Some(svg)) => {
            let _ = write!(
                out,
                "<figure class=\"chart\" data-chart=\"{}\">\n{svg}\n</figure>\n",
                escape(what)
            );
        }
        Ok(None) => {}
        Err(e) => {
            let _ = writeln!(out, "<p><em>{}: {}</em></p>", escape(what), escape(&e));
        }
    }
}

/// Cells grouped for the throughput charts: by scenario name, in order of first appearance.
fn groups(res: &SuiteResults) -> Vec<(String, Vec<&CellResult>)> {
    let mut out: Vec<(String, Vec<&CellResult>)> = Vec::new();
    for c in &res.cells {
        if !matches!(
            c.part.as_str(),
            "proxy" | "jmeter" | "k6" | "delay" | "parking"
        ) {
            continue;
        }
        let key = match c.part.as_str() {
            "proxy" => c.name.clone(),
            "jmeter" => "JMeter configurations".into(),
            "k6" => "k6 load test".into(),
            "parking" => "Barrier transactions and pgbench's, per second".into(),
            _ => "Constant arrival rate".into(),
        };
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(c),
            None => out.push((key, vec![c])),
        }
    }
    out
}

/// The whole page.
pub fn render(res: &SuiteResults) -> String {
    let mut out = String::new();
    let e = &res.environment;
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n<p class=\"note\">{}</p>\n<ul>\n",
        escape(&res.spec.title),
        escape(&res.spec.title),
        escape(res.spec.about.trim())
    );
    let _ = write!(
        out,
        "<li>Suite <code>{}</code>, profile <code>{}</code>: {}</li>\n<li>Run {}{} for {}, commit <code>{}</code>, pms {}</li>\n<li>Host: {} CPUs{}, kernel {}; load generator and systems under test on this one host</li>\n<li>Envelope: {}</li>\n{}<li>Command: <code>{}</code></li>\n</ul>\n",
        escape(&res.suite),
        escape(&res.profile),
        escape(&profile_about(res)),
        escape(&res.started),
        escape(&super::markdown::resumed(res)),
        escape(&super::human(std::time::Duration::from_secs_f64(res.elapsed_s))),
        escape(e.commit.as_deref().unwrap_or("unknown")),
        escape(&e.pms_version),
        e.cpus,
        escape(&e.cpu_model.as_ref().map(|m| format!(" ({m})")).unwrap_or_default()),
        escape(e.kernel.as_deref().unwrap_or("unknown")),
        escape(&super::envelope::describe(res.envelope.as_ref())),
        res.database
            .as_ref()
            .map(|db| format!("<li>Database: {}</li>\n", escape(db)))
            .unwrap_or_default(),
        escape(&res.command),
    );
    out.push_str("<h2>Throughput</h2>\n");
    for (name, cells) in groups(res) {
        chart(
            &mut out,
            &format!("throughput: {name}"),
            charts::throughput_bars(&name, &cells),
        );
    }
    out.push_str("<h2>Results</h2>\n");
    let (results, comparisons) = tables::all(res);
    for t in &results {
        render_table(&mut out, t);
    }
    out.push_str("<h2>Next to the published figures</h2>\n");
    let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(&hardware_note(res)));
    if comparisons.is_empty() {
        out.push_str("<p><em>No cell of this run has a published counterpart.</em></p>\n");
    }
    for t in &comparisons {
        render_table(&mut out, t);
    }
    out.push_str("<h2>Per cell</h2>\n");
    for (i, c) in res.cells.iter().enumerate() {
        let has_output = c
            .runs
            .iter()
            .any(|r| r.output.is_some() || r.text.is_some());
        if !has_output {
            continue;
        }
        let _ = write!(
            out,
            "<details{}>\n<summary>{} — <code>{}</code></summary>\n",
            if i == 0 { " open" } else { "" },
            escape(&c.name),
            escape(&c.id)
        );
        if let Some(pms) = c.runs.iter().find(|r| r.server == "pms") {
            chart(
                &mut out,
                &format!("latency over time: {}", c.id),
                charts::latency_over_time(
                    &format!("{}: latency and rate over time (pms)", c.id),
                    pms,
                ),
            );
        }
        chart(
            &mut out,
            &format!("percentiles: {}", c.id),
            charts::percentiles(&format!("{}: latency by percentile", c.id), c),
        );
        for r in &c.runs {
            if let Some(text) = &r.text {
                let _ = writeln!(out, "<pre>{}</pre>", escape(text));
            }
        }
        out.push_str("</details>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
