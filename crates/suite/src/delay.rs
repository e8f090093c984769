//! The Spring Boot async study against PMS: `pms echo --delay-ms` (a timer per request, no
//! thread held) behind the PMS gateway, loaded at a constant arrival rate by `pms bench run
//! --rate` with vegeta's timeout, and reported in vegeta's text layout with its buckets.

use pms_bench::startup::Ready;

use super::metrics;
use super::plan::DelayJob;
use super::procs::free_port;
use super::proxy::{start_echo, READY_TIMEOUT};
use super::results::{RunOutput, RunRecord};
use super::spec::Hop;
use super::{Ctx, SuiteError};

/// vegeta's histogram buckets from the published report.
pub const BUCKETS: &str = "0,100ms,200ms,300ms,500ms,1s,2s,3s,5s";

/// Connections for `rate` requests a second that each take `delay_ms`: what Little's law says
/// are in flight, with room for the tail, so the generator never becomes the queue.
fn connections(rate: f64, delay_ms: u64) -> usize {
    let in_flight = rate * (delay_ms as f64 / 1000.0).max(0.01);
    ((in_flight * 1.5).ceil() as usize + 10).max(10)
}

/// Runs one rate.
///
/// # Errors
/// A component did not start, or the load run failed.
pub fn run(ctx: &Ctx<'_>, cell: &str, job: &DelayJob) -> Result<RunRecord, SuiteError> {
    let dir = ctx.dir(cell, "pms")?;
    let mut record = RunRecord::new("pms");
    let (echo, echo_port, echo_cmd) = start_echo(ctx, &dir, Hop::H1c, job.delay_ms)?;
    record.commands.push(echo_cmd);
    let (port, admin) = (free_port()?, free_port()?);
    let config = dir.join("gateway.toml");
    let text = format!(
        "# written by pms bench suite (async-delay)\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [limits]\nmax_connections = 30000\n\n\
         [[listeners]]\nname = \"public\"\nlisten = \"127.0.0.1:{port}\"\n\n\
         [[upstreams]]\nname = \"slow\"\nendpoints = [\"http://127.0.0.1:{echo_port}\"]\nprotocol = \"h1\"\n\n\
         [[routes]]\nname = \"slow\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"slow\"\n"
    );
    std::fs::write(&config, text)
        .map_err(|e| SuiteError::io(&format!("writing {}", config.display()), e))?;
    let gw = ctx
        .pms("gateway", &["gateway", "--config"])
        .args([config.display().to_string()]);
    record.commands.push(gw.shell_line());
    let mut gateway = gw.start(&dir.join("gateway.log"))?;
    gateway.wait_ready(
        &Ready::url(&format!("http://127.0.0.1:{admin}/readyz")).map_err(SuiteError::Failed)?,
        READY_TIMEOUT,
    )?;
    let load = ctx.pms("load", &["bench", "run"]).args([
        format!("http://127.0.0.1:{port}/message"),
        "--rate".into(),
        job.rate.to_string(),
        "--duration".into(),
        pms_bench::duration::show(job.duration),
        "--timeout".into(),
        pms_bench::duration::show(job.timeout),
        "--connections".into(),
        connections(job.rate, job.delay_ms).to_string(),
        "--format".into(),
        "vegeta".into(),
        "--buckets".into(),
        BUCKETS.into(),
        "--progress".into(),
        "never".into(),
        "--out".into(),
        dir.display().to_string(),
        "--watch-pid".into(),
        gateway.pid().to_string(),
    ]);
    record.commands.push(load.shell_line());
    let log = dir.join("load.log");
    let ran = load.run(&log);
    gateway.stop();
    echo.stop();
    ran?;
    let output = RunOutput::read(&dir)?;
    if let Some(m) = output.labels.first() {
        record.metrics = metrics::of_summary(m);
        // vegeta's throughput: successes over attack + wait.
        let span = m.attack_s + m.wait_s;
        if span > 0.0 {
            record
                .metrics
                .insert("throughput".into(), m.successes() as f64 / span);
        }
    }
    if let Some(rss) = output.rss_mb_from(0.0) {
        record.metrics.insert("rss_mb".into(), rss);
    }
    // The vegeta-layout report is what the load printed (its stderr notes aside).
    let printed = std::fs::read_to_string(&log).unwrap_or_default();
    record.text = Some(
        printed
            .lines()
            .filter(|l| !l.starts_with("pms bench:"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    record.output = Some(output);
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_cover_the_requests_in_flight() {
        assert_eq!(connections(50.0, 200), 25, "10 in flight, ×1.5, +10");
        assert_eq!(connections(5000.0, 200), 1510);
        assert_eq!(connections(1.0, 0), 11);
    }
}
