//! `report.md`: what was run, where, the tables in the published column sets, PMS next to the
//! published figures (with plain words on how the hardware differs), the vegeta text reports
//! when the suite has them, and the commands to run every cell again.

use std::fmt::Write as _;

use super::results::{Status, SuiteResults};
use super::tables::{self, Table};

/// The hardware caveat, in one paragraph.
pub fn hardware_note(res: &SuiteResults) -> String {
    let e = &res.environment;
    format!(
        "Published: {}. Here: one {}-CPU host{}{} — the load generator, every proxy or service and the back-end shared it, so each competed with the others for the same cores. Ratios are a comparison of systems on different hardware: read them as orders of magnitude, and the PMS-versus-peer rows (same host, same run) as the like-for-like comparison.",
        res.spec.published.hardware,
        e.cpus,
        e.cpu_model
            .as_ref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default(),
        e.memory_gib
            .map(|g| format!(", {g} GiB"))
            .unwrap_or_default(),
    )
}

fn escape(cell: &str) -> String {
    cell.replace('|', "\\|").replace('\n', " ")
}

fn render_table(out: &mut String, t: &Table) {
    let _ = writeln!(out, "### {}\n\n{}\n", t.title, t.note);
    if t.rows.is_empty() {
        out.push_str("_No rows: no cell of this table was run._\n\n");
        return;
    }
    let _ = writeln!(
        out,
        "| {} |",
        t.headers
            .iter()
            .map(|h| escape(h))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let align: Vec<&str> = t
        .headers
        .iter()
        .enumerate()
        .map(|(i, _)| if i == 0 { "---" } else { "---:" })
        .collect();
    let _ = writeln!(out, "|{}|", align.join("|"));
    for r in &t.rows {
        let _ = writeln!(
            out,
            "| {} |",
            r.iter().map(|c| escape(c)).collect::<Vec<_>>().join(" | ")
        );
    }
    out.push('\n');
}

/// The whole `report.md`.
pub fn render(res: &SuiteResults) -> String {
    let mut out = String::new();
    let e = &res.environment;
    let _ = writeln!(out, "# {}\n", res.spec.title);
    let _ = writeln!(out, "{}\n", res.spec.about.trim());
    let _ = writeln!(
        out,
        "- Suite `{}`, profile `{}`: {}",
        res.suite,
        res.profile,
        profile_about(res)
    );
    let _ = writeln!(
        out,
        "- Run {}{} for {} (planned {}), commit `{}`, pms {} ({} build, `{}`)",
        res.started,
        resumed(res),
        super::human(std::time::Duration::from_secs_f64(res.elapsed_s)),
        super::human(std::time::Duration::from_secs_f64(res.expected_s)),
        e.commit.as_deref().unwrap_or("unknown"),
        e.pms_version,
        e.build,
        e.pms_binary
    );
    if e.build == "debug" {
        out.push_str(
            "- **A debug build**: the figures check the pipeline, they do not measure PMS.\n",
        );
    }
    let _ = writeln!(
        out,
        "- Host: {} CPUs{}, kernel {}; load generator and systems under test on this one host",
        e.cpus,
        e.cpu_model
            .as_ref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default(),
        e.kernel.as_deref().unwrap_or("unknown")
    );
    if !e.peers.is_empty() {
        let peers: Vec<String> = e.peers.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(out, "- Peers: {}", peers.join("; "));
    }
    let _ = writeln!(
        out,
        "- Envelope: {}",
        super::envelope::describe(res.envelope.as_ref())
    );
    if let Some(db) = &res.database {
        let _ = writeln!(out, "- Database: {db}");
    }
    let _ = writeln!(out, "- Command: `{}`\n", res.command);
    let _ = writeln!(
        out,
        "Published figures: {} ({}).\n",
        res.spec.published.source, res.spec.published.tool
    );
    let failed: Vec<String> = res
        .cells
        .iter()
        .flat_map(|c| {
            c.runs.iter().filter_map(move |r| match &r.status {
                Status::Failed { error } => Some(format!("- `{}` {}: {error}", c.id, r.server)),
                _ => None,
            })
        })
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(
            out,
            "**{} run(s) failed:**\n\n{}\n",
            failed.len(),
            failed.join("\n")
        );
    }
    out.push_str("## Results\n\n");
    let (results, comparisons) = tables::all(res);
    for t in &results {
        render_table(&mut out, t);
    }
    let texts: Vec<(&str, &str)> = res
        .cells
        .iter()
        .flat_map(|c| {
            c.runs
                .iter()
                .filter_map(|r| Some((c.id.as_str(), r.text.as_deref()?)))
        })
        .collect();
    for (id, text) in texts {
        let _ = writeln!(
            out,
            "#### `{id}` in vegeta's text layout\n\n```\n{}\n```\n",
            text.trim_end()
        );
    }
    out.push_str("## Next to the published figures\n\n");
    let _ = writeln!(out, "{}\n", hardware_note(res));
    if comparisons.is_empty() {
        out.push_str("_No cell of this run has a published counterpart (the quick profile uses smaller loads than the published ones)._\n\n");
    }
    for t in &comparisons {
        render_table(&mut out, t);
    }
    out.push_str("## How to run it again\n\n");
    let _ = writeln!(
        out,
        "The whole suite: `{}`. Every cell's processes, in the order they were started (secrets are passed in the environment and not shown; `$TOKEN` is a login token):\n",
        res.command
    );
    out.push_str("<details><summary>Commands per cell</summary>\n\n");
    for c in &res.cells {
        for r in &c.runs {
            if r.commands.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "`{}` — {}:\n\n```sh\n{}\n```\n",
                c.id,
                r.server,
                r.commands.join("\n")
            );
        }
    }
    out.push_str("</details>\n");
    out
}

/// The profile's own description.
pub fn profile_about(res: &SuiteResults) -> String {
    let s = &res.spec;
    let p = res.profile.as_str();
    s.proxy
        .as_ref()
        .and_then(|x| x.profiles.get(p).map(|p| p.about.clone()))
        .or_else(|| {
            s.gateway
                .as_ref()
                .and_then(|x| x.profiles.get(p).map(|p| p.about.clone()))
        })
        .or_else(|| {
            s.delay
                .as_ref()
                .and_then(|x| x.profiles.get(p).map(|p| p.about.clone()))
        })
        .or_else(|| {
            s.parking
                .as_ref()
                .and_then(|x| x.profiles.get(p).map(|p| p.about.clone()))
        })
        .unwrap_or_default()
}

/// ", resumed at T1, T2" when the run was taken up again with `--resume`.
pub(super) fn resumed(res: &SuiteResults) -> String {
    if res.resumed.is_empty() {
        String::new()
    } else {
        format!(", resumed at {}", res.resumed.join(", "))
    }
}
