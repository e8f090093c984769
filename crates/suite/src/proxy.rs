//! One cell of the reverse-proxy matrix against one system: a fresh `pms echo` with the
//! scenario's back-end protocol and delay, a fresh proxy (the PMS gateway with a generated
//! config, or a peer), then `pms bench run` with the published load shape — closed-loop users on
//! persistent connections, a ramp, a warm-up reported apart, the `<N>B` body check and the
//! protocol check — watching the proxy's CPU and RSS.

use std::path::Path;
use std::time::Duration;

use pms_bench::startup::Ready;

use super::metrics;
use super::plan::ProxyJob;
use super::procs::{free_port, loopback, Proc};
use super::results::{RunOutput, RunRecord};
use super::spec::{Hop, Scenario};
use super::{peers, Ctx, SuiteError};

/// How long a component may take to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `job` against `server` (`pms`, `nginx`, `haproxy`).
///
/// # Errors
/// A component that did not start, or a load run that failed.
pub fn run(
    ctx: &Ctx<'_>,
    cell: &str,
    job: &ProxyJob,
    server: &str,
) -> Result<RunRecord, SuiteError> {
    let dir = ctx.dir(cell, server)?;
    let mut record = RunRecord::new(server);
    let s = &job.scenario;
    if server != "pms" && super::procs::which(server).is_none() {
        return Err(SuiteError::NotInstalled(server.into()));
    }
    let (echo, echo_port, echo_cmd) = start_echo(ctx, &dir, s.backend, job.delay_ms)?;
    record.commands.push(echo_cmd);
    let port = free_port()?;
    let (proxy, pids): (Proc, Vec<u32>) = if server == "pms" {
        let (p, cmd) = start_gateway(ctx, &dir, s, port, echo_port)?;
        record.commands.push(cmd);
        let pid = p.pid();
        (p, vec![pid])
    } else {
        let peer = peers::start(ctx, server, &dir, s, port, echo_port)?;
        record.commands.push(peer.command);
        (peer.proc, peer.pids)
    };
    let path = if s.transform {
        "/transform"
    } else {
        "/passthrough"
    };
    let scheme = if s.client.tls() { "https" } else { "http" };
    let url = format!("{scheme}://127.0.0.1:{port}{path}");
    let mut load = ctx.pms(
        "load",
        &[
            "bench",
            "run",
            &url,
            "--method",
            "POST",
            "-H",
            "Content-Type: application/json",
        ],
    );
    load = load.args([
        "--http".to_owned(),
        if s.client == Hop::H2 { "2" } else { "1.1" }.to_owned(),
        "--payload-size".into(),
        job.size.to_string(),
        "--expect-body".into(),
        format!("{}B", job.size),
        "--users".into(),
        job.users.to_string(),
        "--ramp-up".into(),
        pms_bench::duration::show(job.ramp_up),
        "--duration".into(),
        pms_bench::duration::show(job.duration),
        "--warmup".into(),
        pms_bench::duration::show(job.warmup),
        "--timeout".into(),
        pms_bench::duration::show(job.timeout),
        "--progress".into(),
        "never".into(),
        "--out".into(),
        dir.display().to_string(),
    ]);
    if s.client.tls() {
        load = load.args(["--ca".to_owned(), ctx.ca.display().to_string()]);
    }
    for pid in &pids {
        load = load.args(["--watch-pid".to_owned(), pid.to_string()]);
    }
    record.commands.push(load.shell_line());
    let ran = load.run(&dir.join("load.log"));
    proxy.stop();
    echo.stop();
    ran?;
    let output = RunOutput::read(&dir)?;
    if let Some(m) = output.labels.first() {
        record.metrics = metrics::of_summary(m);
    }
    if let Some(rss) = output.rss_mb_from(job.warmup.as_secs_f64()) {
        record.metrics.insert("rss_mb".into(), rss);
    }
    record.output = Some(output);
    Ok(record)
}

/// Starts `pms echo` for a back-end hop; returns it, its port and its command line.
///
/// # Errors
/// It did not start.
pub fn start_echo(
    ctx: &Ctx<'_>,
    dir: &Path,
    backend: Hop,
    delay_ms: u64,
) -> Result<(Proc, u16, String), SuiteError> {
    let port = free_port()?;
    let mut echo = ctx.pms("echo", &["echo", "--listen"]).args([
        loopback(port).to_string(),
        "--delay-ms".into(),
        delay_ms.to_string(),
    ]);
    if backend.tls() {
        echo = echo.args([
            "--tls-cert".to_owned(),
            ctx.cert.display().to_string(),
            "--tls-key".into(),
            ctx.key.display().to_string(),
        ]);
    }
    if backend != Hop::H2 {
        echo = echo.args(["--http1-only"]);
    }
    let mut p = echo.start(&dir.join("echo.log"))?;
    p.wait_ready(&Ready::Port(loopback(port)), READY_TIMEOUT)?;
    Ok((p, port, echo.shell_line()))
}

/// The gateway config of a scenario: one listener, the echo upstream, the scenario's route.
fn gateway_config(ctx: &Ctx<'_>, s: &Scenario, port: u16, admin: u16, echo: u16) -> String {
    let listener_tls = if s.client.tls() {
        format!(
            "tls = {{ cert = {:?}, key = {:?} }}\n",
            ctx.cert.display().to_string(),
            ctx.key.display().to_string()
        )
    } else {
        String::new()
    };
    let (scheme, protocol) = match s.upstream {
        Hop::H1c => ("http", "h1"),
        Hop::H2c => ("http", "h2c"),
        Hop::H1 => ("https", "h1"),
        Hop::H2 => ("https", "h2"),
        Hop::Auto => ("https", "auto"),
    };
    let upstream_tls = if s.upstream.tls() {
        format!("tls = {{ ca = {:?} }}\n", ctx.ca.display().to_string())
    } else {
        String::new()
    };
    let route = if s.transform {
        "name = \"transform\"\nmatch = { path = \"/transform\", methods = [\"POST\"] }\nupstream = \"echo\"\ntransform = \"json-to-xml\"\nxml_layout = \"ballerina-compat\"\n"
    } else {
        "name = \"passthrough\"\nmatch = { path = \"/passthrough\", methods = [\"POST\"] }\nupstream = \"echo\"\n"
    };
    format!(
        "# {name}: written by pms bench suite\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [limits]\nmax_connections = 20000\n\n\
         [[listeners]]\nname = \"public\"\nlisten = \"127.0.0.1:{port}\"\n{listener_tls}\n\
         [[upstreams]]\nname = \"echo\"\nendpoints = [\"{scheme}://127.0.0.1:{echo}\"]\nprotocol = \"{protocol}\"\nrequest_timeout_ms = 60000\n{upstream_tls}\n\
         [[routes]]\n{route}",
        name = s.name
    )
}

/// Starts the PMS gateway for a scenario; returns it and its command line.
fn start_gateway(
    ctx: &Ctx<'_>,
    dir: &Path,
    s: &Scenario,
    port: u16,
    echo_port: u16,
) -> Result<(Proc, String), SuiteError> {
    let admin = free_port()?;
    let config = dir.join("gateway.toml");
    std::fs::write(&config, gateway_config(ctx, s, port, admin, echo_port))
        .map_err(|e| SuiteError::io(&format!("writing {}", config.display()), e))?;
    let gw = ctx
        .pms("gateway", &["gateway", "--config"])
        .args([config.display().to_string()]);
    let mut p = gw.start(&dir.join("gateway.log"))?;
    p.wait_ready(
        &Ready::url(&format!("http://127.0.0.1:{admin}/readyz")).map_err(SuiteError::Failed)?,
        READY_TIMEOUT,
    )?;
    Ok((p, gw.shell_line()))
}
