//! The dissertation's measurements of `getAllUsers`: `pms users` on a throwaway PostgreSQL
//! (`scripts/pg.sh`, started once per suite run) behind `pms gateway` with a TLS listener, both
//! started afresh for every cell and sharing a JWT secret generated for the run. A cell logs in
//! once for a token, then runs JMeter's thread groups (`--iterations`), the k6 load and stress
//! tests, start-up timings (`pms bench startup`), or one request's breakdown.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use pms_bench::collect::StopReason;
use pms_bench::startup::Ready;
use pms_bench::target::{HttpVersion, Target};

use super::metrics;
use super::plan::GatewayJob;
use super::procs::{free_port, loopback, Proc, Spawn};
use super::proxy::READY_TIMEOUT;
use super::results::{RunOutput, RunRecord};
use super::spec::Hop;
use super::{Ctx, SuiteError};

/// How a throwaway database was run, as the report says it.
fn describe_database(fast: bool) -> String {
    if fast {
        "throwaway PostgreSQL, fast: fsync, full-page writes and synchronous commits off \
         (--fast-database)"
            .into()
    } else {
        "throwaway PostgreSQL, durable: fsync, full-page writes and synchronous commits on".into()
    }
}

/// The seeded supervisor (spec §6.1), whose token every load carries.
const LOGIN_EMAIL: &str = "supervisor@isep.ipp.pt";

/// What the cells of one suite run share: the database and the secrets.
#[derive(Debug, Default)]
pub struct Shared {
    /// The database URL, once known.
    database_url: Option<String>,
    /// The throwaway cluster's directory, when this run started one.
    pg_dir: Option<PathBuf>,
    /// `scripts/pg.sh`, to remove the cluster at the end.
    pg_script: Option<PathBuf>,
    /// What the database was, for the report, once one was used.
    pub(super) database: Option<String>,
    /// HS256 secret shared by the gateway and the users service.
    secret: String,
    /// The seeded accounts' password.
    password: String,
}

impl Shared {
    /// Starts the database (unless given) and makes the secrets, the first time.
    fn prepare(&mut self, ctx: &Ctx<'_>) -> Result<(), SuiteError> {
        if self.database_url.is_some() {
            return Ok(());
        }
        self.secret = random_hex(32)?;
        // An existing database (--database-url) was seeded with its own password.
        self.password = match std::env::var("PMS_SEED_PASSWORD") {
            Ok(p) if !p.is_empty() => p,
            _ => format!("Pms#{}", random_hex(8)?),
        };
        if let Some(url) = &ctx.opts.database_url {
            self.database_url = Some(url.clone());
            self.database =
                Some("PostgreSQL given by --database-url (its settings its own)".into());
            return Ok(());
        }
        let script = &ctx.opts.pg_script;
        if !script.is_file() {
            return Err(SuiteError::Usage(format!(
                "the users service needs PostgreSQL: pass --database-url, or run from the repository so that {} can start a throwaway one",
                script.display()
            )));
        }
        let out = std::fs::canonicalize(&ctx.opts.out)
            .map_err(|e| SuiteError::io("resolving the output directory", e))?;
        let dir = throwaway_pg_dir(&out);
        // A cluster left by an interrupted run (killed before it could remove it) holds users
        // seeded with that run's password; reusing it would fail every login of this one.
        if dir.exists() {
            let out = std::process::Command::new("bash")
                .arg(script)
                .arg("remove")
                .arg(&dir)
                .output()
                .map_err(|e| SuiteError::io(&format!("running {}", script.display()), e))?;
            if !out.status.success() || dir.exists() {
                return Err(SuiteError::Failed(format!(
                    "could not remove the database left by an earlier run in {}: {}",
                    dir.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
        }
        let mut start = std::process::Command::new("bash");
        start
            .arg(script)
            .arg("start")
            .arg(&dir)
            .arg("--watch")
            .arg(std::process::id().to_string());
        if !ctx.opts.fast_database {
            start.arg("--durable");
        }
        let out = start
            .output()
            .map_err(|e| SuiteError::io(&format!("running {}", script.display()), e))?;
        if !out.status.success() {
            return Err(SuiteError::Failed(format!(
                "{} start failed: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let url = String::from_utf8_lossy(&out.stdout)
            .lines()
            .rev()
            .find(|l| l.starts_with("postgres://"))
            .map(str::to_owned)
            .ok_or_else(|| SuiteError::Failed(format!("{} printed no URL", script.display())))?;
        self.database_url = Some(url);
        self.database = Some(describe_database(ctx.opts.fast_database));
        self.pg_dir = Some(dir);
        self.pg_script = Some(script.clone());
        Ok(())
    }

    /// The suite's PostgreSQL (started the first time it is needed).
    pub(super) fn database_url(&mut self, ctx: &Ctx<'_>) -> Result<String, SuiteError> {
        self.prepare(ctx)?;
        self.database_url
            .clone()
            .ok_or_else(|| SuiteError::Failed("no database URL".into()))
    }

    /// Removes the throwaway database, if this run started one.
    pub fn close(&mut self) {
        if let (Some(dir), Some(script)) = (self.pg_dir.take(), self.pg_script.take()) {
            let _ = std::process::Command::new("bash")
                .arg(script)
                .arg("remove")
                .arg(dir)
                .output();
        }
    }

    fn env(&self, s: Spawn) -> Spawn {
        s.env("PMS_JWT_SECRET", &self.secret)
            .env("PMS_SEED_PASSWORD", &self.password)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.close();
    }
}

/// `n` random bytes from the kernel, as hex.
pub(super) fn random_hex(n: usize) -> Result<String, SuiteError> {
    use std::io::Read as _;
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| SuiteError::io("reading /dev/urandom", e))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// The two services of a cell.
struct Services {
    users: Proc,
    gateway: Proc,
    /// The gateway's listeners.
    ports: Ports,
}

/// The gateway's ports.
#[derive(Debug, Clone, Copy)]
struct Ports {
    /// TLS (HTTP/1.1 and h2 by ALPN).
    tls: u16,
    /// Cleartext (HTTP/1.1 and h2c).
    plain: u16,
    /// Admin (readiness).
    admin: u16,
}

impl Ports {
    fn free() -> Result<Self, SuiteError> {
        Ok(Self {
            tls: free_port()?,
            plain: free_port()?,
            admin: free_port()?,
        })
    }

    /// The port that speaks `h`.
    fn of(self, h: Hop) -> u16 {
        if h.tls() {
            self.tls
        } else {
            self.plain
        }
    }
}

/// Gateway config: one listener, TLS or cleartext as the cell's clients speak (the gateway
/// shares its client cap, fitted into the open-file limit, among its listeners: a second one
/// would halve what the stress test can reach), JWT on `/users/`, the login open, the users
/// service behind.
fn gateway_config(ctx: &Ctx<'_>, ports: Ports, users: u16, tls: bool) -> String {
    let listener = if tls {
        format!(
            "[[listeners]]\nname = \"public-tls\"\nlisten = \"127.0.0.1:{}\"\n\
             tls = {{ cert = {:?}, key = {:?} }}\n\n",
            ports.tls,
            ctx.cert.display().to_string(),
            ctx.key.display().to_string()
        )
    } else {
        format!(
            "[[listeners]]\nname = \"public\"\nlisten = \"127.0.0.1:{}\"\n\n",
            ports.plain
        )
    };
    format!(
        "# written by pms bench suite (pms-gateway)\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [limits]\nmax_connections = 30000\n\n\
         {listener}\
         [auth.jwt]\nalgorithms = [\"HS256\"]\nsecret_env = \"PMS_JWT_SECRET\"\n\n\
         [[upstreams]]\nname = \"users\"\nendpoints = [\"http://127.0.0.1:{users}\"]\nprotocol = \"h1\"\n\n\
         [[routes]]\nname = \"login\"\nmatch = {{ path = \"/users/login\", methods = [\"POST\"] }}\nupstream = \"users\"\nauth = \"none\"\n\n\
         [[routes]]\nname = \"users\"\nmatch = {{ path_prefix = \"/users/\", methods = [\"GET\", \"POST\", \"PUT\"] }}\nupstream = \"users\"\nauth = \"jwt\"\n",
        admin = ports.admin,
    )
}

/// `pms users` for this run.
fn users_spawn(ctx: &Ctx<'_>, shared: &Shared, dir: &Path, port: u16) -> Spawn {
    let s = ctx.pms("users", &["users", "--listen"]).args([
        loopback(port).to_string(),
        "--data-dir".into(),
        dir.join("data").display().to_string(),
        "--database-url".into(),
        shared.database_url.clone().unwrap_or_default(),
    ]);
    shared.env(s)
}

/// `pms gateway` for this run, its config written to `dir`.
fn gateway_spawn(
    ctx: &Ctx<'_>,
    shared: &Shared,
    dir: &Path,
    ports: Ports,
    users: u16,
    tls: bool,
) -> Result<Spawn, SuiteError> {
    let config = dir.join("gateway.toml");
    std::fs::write(&config, gateway_config(ctx, ports, users, tls))
        .map_err(|e| SuiteError::io(&format!("writing {}", config.display()), e))?;
    Ok(shared.env(
        ctx.pms("gateway", &["gateway", "--config"])
            .args([config.display().to_string()]),
    ))
}

fn ready(url: &str) -> Result<Ready, SuiteError> {
    Ready::url(url).map_err(SuiteError::Failed)
}

/// The users service and a gateway listening for `hop`'s clients.
fn start_services(
    ctx: &Ctx<'_>,
    shared: &Shared,
    dir: &Path,
    record: &mut RunRecord,
    hop: Hop,
) -> Result<Services, SuiteError> {
    let users_port = free_port()?;
    let users = users_spawn(ctx, shared, dir, users_port);
    record.commands.push(users.shell_line());
    let mut users_proc = users.start(&dir.join("users.log"))?;
    users_proc.wait_ready(
        &ready(&format!("http://127.0.0.1:{users_port}/readyz"))?,
        READY_TIMEOUT,
    )?;
    let ports = Ports::free()?;
    let gw = gateway_spawn(ctx, shared, dir, ports, users_port, hop.tls())?;
    record.commands.push(gw.shell_line());
    let mut gw_proc = gw.start(&dir.join("gateway.log"))?;
    gw_proc.wait_ready(
        &ready(&format!("http://127.0.0.1:{}/readyz", ports.admin))?,
        READY_TIMEOUT,
    )?;
    Ok(Services {
        users: users_proc,
        gateway: gw_proc,
        ports,
    })
}

/// Runs one gateway cell.
///
/// # Errors
/// The database, a service or a load run failed.
pub fn run(
    ctx: &Ctx<'_>,
    shared: &mut Shared,
    cell: &str,
    job: &GatewayJob,
) -> Result<RunRecord, SuiteError> {
    shared.prepare(ctx)?;
    let dir = ctx.dir(cell, "pms")?;
    let mut record = RunRecord::new("pms");
    let hop = match job {
        GatewayJob::Startup(component, runs) => {
            startup(ctx, shared, &dir, component, *runs, &mut record)?;
            return Ok(record);
        }
        GatewayJob::Jmeter(_, h)
        | GatewayJob::K6(_, h)
        | GatewayJob::Stress(_, h)
        | GatewayJob::Overview(h) => *h,
    };
    let services = start_services(ctx, shared, &dir, &mut record, hop)?;
    let outcome = load(ctx, shared, &dir, job, hop, &services, &mut record);
    services.gateway.stop();
    services.users.stop();
    outcome?;
    Ok(record)
}

/// `getAllUsers` on the gateway's listener for `h`.
fn url(ports: Ports, h: Hop) -> String {
    let scheme = if h.tls() { "https" } else { "http" };
    format!("{scheme}://127.0.0.1:{}/users/getAllUsers", ports.of(h))
}

fn http2(h: Hop) -> bool {
    matches!(h, Hop::H2 | Hop::H2c)
}

fn http_arg(h: Hop) -> &'static str {
    if http2(h) {
        "2"
    } else {
        "1.1"
    }
}

fn load(
    ctx: &Ctx<'_>,
    shared: &Shared,
    dir: &Path,
    job: &GatewayJob,
    hop: Hop,
    services: &Services,
    record: &mut RunRecord,
) -> Result<(), SuiteError> {
    let token = login(ctx, services.ports, hop, &shared.password)?;
    if let GatewayJob::Overview(_) = job {
        let (metrics, extra) = overview(ctx, services.ports, hop, &token)?;
        record.metrics = metrics;
        record.extra = Some(extra);
        return Ok(());
    }
    let sub = if matches!(job, GatewayJob::Stress(..)) {
        "stress"
    } else {
        "run"
    };
    let mut cmd = ctx.pms("load", &["bench", sub]).args([
        url(services.ports, hop),
        "--http".into(),
        http_arg(hop).into(),
        "--ca".into(),
        ctx.ca.display().to_string(),
        "-H".into(),
        format!("Authorization: Bearer {token}"),
        "--expect-status".into(),
        "200".into(),
        "--progress".into(),
        "never".into(),
        "--out".into(),
        dir.display().to_string(),
        "--watch-pid".into(),
        services.gateway.pid().to_string(),
        "--watch-pid".into(),
        services.users.pid().to_string(),
    ]);
    let show = pms_bench::duration::show;
    cmd = match job {
        // A JMeter thread group, of either table.
        GatewayJob::Jmeter(c, _) => cmd.args([
            "--users".to_owned(),
            c.users.to_string(),
            "--ramp-up".into(),
            show(c.ramp_up),
            "--duration".into(),
            show(c.duration),
            "--iterations".into(),
            c.iterations.to_string(),
            // JMeter's elapsed time includes connecting.
            "--connect-in-latency".into(),
        ]),
        GatewayJob::K6(c, _) => cmd.args([
            "--users".to_owned(),
            c.users.to_string(),
            "--think-time".into(),
            show(c.think_time),
            "--duration".into(),
            show(c.duration),
            "--abort-on-error".into(),
        ]),
        GatewayJob::Stress(c, _) => cmd.args([
            "--add".to_owned(),
            format!("{}/s", c.add_per_s),
            "--think-time".into(),
            show(c.think_time),
            "--max-users".into(),
            stress_cap(c.max_users).to_string(),
            "--max-duration".into(),
            show(c.max_duration),
            // k6's default request timeout.
            "--timeout".into(),
            "60s".into(),
        ]),
        _ => cmd,
    };
    record
        .commands
        .push(cmd.shell_line().replace(&token, "$TOKEN"));
    cmd.run(&dir.join("load.log"))?;
    let output = RunOutput::read(dir)?;
    if let Some(m) = output.labels.first() {
        record.metrics = metrics::of_summary(m);
        if let GatewayJob::K6(c, _) = job {
            // k6's rate: requests over its run time, which lets the last iterations finish
            // their sleep (not when the run was aborted).
            let think = if output.stop == StopReason::Completed {
                c.think_time.as_secs_f64()
            } else {
                0.0
            };
            let run_s = pms_bench::format::k6_run_s(output.ended_s, m, think);
            record
                .metrics
                .insert("throughput".into(), m.samples as f64 / run_s.max(1e-9));
        }
    }
    if let Some(rss) = output.rss_mb_from(0.0) {
        record.metrics.insert("rss_mb".into(), rss);
    }
    if let GatewayJob::Stress(..) = job {
        let outcome = read_json(&dir.join("result.json"))?
            .pointer("/config/outcome")
            .cloned()
            .ok_or_else(|| SuiteError::Failed("stress result.json has no outcome".into()))?;
        if let Some((key, users)) = stress_figure(&outcome) {
            record.metrics.insert(key.into(), users);
        }
        record.extra = Some(outcome);
    }
    record.output = Some(output);
    Ok(())
}

/// The stress test's figure from its outcome: `max_users`, the users active at the first
/// failure; or, for a run that reached its user or time cap without one, `users_reached`, the
/// most users it had at once (a lower bound; at the very end users are already leaving).
pub(super) fn stress_figure(outcome: &serde_json::Value) -> Option<(&'static str, f64)> {
    let failed = outcome.get("failed").and_then(serde_json::Value::as_bool) == Some(true);
    let (key, field) = if failed {
        ("max_users", "users_at_end")
    } else {
        ("users_reached", "max_users")
    };
    Some((key, outcome.get(field)?.as_f64()?))
}

/// Users a stress run may reach: one connection each, within the open-file limit (with room
/// for everything else), so a failure is the target's and never the load generator's EMFILE.
fn stress_cap(wanted: usize) -> usize {
    match super::procs::fd_limit() {
        Some(limit) => wanted.min(limit.saturating_sub(1000).max(1)),
        None => wanted,
    }
}

fn read_json(path: &Path) -> Result<serde_json::Value, SuiteError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SuiteError::io(&format!("reading {}", path.display()), e))?;
    serde_json::from_str(&text).map_err(|e| SuiteError::Failed(format!("{}: {e}", path.display())))
}

/// A client for the gateway's listener at `url`, trusting the run's CA.
fn target(ctx: &Ctx<'_>, url: &str, h: Hop) -> Result<Arc<Target>, SuiteError> {
    let version = if http2(h) {
        HttpVersion::Http2
    } else {
        HttpVersion::Http1
    };
    Target::new(url, version, &pms_net::tls::Trust::Only(ctx.ca.clone()))
        .map(Arc::new)
        .map_err(|e| SuiteError::Failed(format!("{url}: {e}")))
}

fn runtime() -> Result<tokio::runtime::Runtime, SuiteError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SuiteError::io("starting a runtime", e))
}

/// Logs in as the seeded supervisor through the listener for `hop`, over HTTP/1.1; returns
/// the token.
fn login(ctx: &Ctx<'_>, ports: Ports, hop: Hop, password: &str) -> Result<String, SuiteError> {
    let (scheme, h1) = if hop.tls() {
        ("https", Hop::H1)
    } else {
        ("http", Hop::H1c)
    };
    let t = target(
        ctx,
        &format!("{scheme}://127.0.0.1:{}/users/login", ports.of(hop)),
        h1,
    )?;
    let body = serde_json::json!({ "email": LOGIN_EMAIL, "password": password }).to_string();
    let out = t
        .outgoing(
            &http::Method::POST,
            &[(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            )],
            Bytes::from(body),
        )
        .map_err(|e| SuiteError::Failed(format!("building the login request: {e}")))?;
    let answer = runtime()?.block_on(async {
        let mut conn = t
            .connect()
            .await
            .map_err(|k| format!("connecting: {k:?}"))?;
        conn.send(&out)
            .await
            .map(|(a, _)| a)
            .map_err(|k| format!("login request: {k:?}"))
    });
    let answer = answer.map_err(SuiteError::Failed)?;
    if answer.status != http::StatusCode::OK {
        return Err(SuiteError::Failed(format!(
            "login answered {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        )));
    }
    serde_json::from_slice::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|v| v.get("token")?.as_str().map(str::to_owned))
        .ok_or_else(|| SuiteError::Failed("the login answer has no token".into()))
}

/// Requests, each on a fresh connection, whose medians make the overview.
const OVERVIEW_REQUESTS: usize = 5;

/// JMeter's sample view of `getAllUsers`: load time, connect time, latency, and the sizes of
/// the response's head and body — the median of a few requests, each on a new connection.
fn overview(
    ctx: &Ctx<'_>,
    ports: Ports,
    h: Hop,
    token: &str,
) -> Result<(std::collections::BTreeMap<String, f64>, serde_json::Value), SuiteError> {
    let t = target(ctx, &url(ports, h), h)?;
    let auth = http::HeaderValue::try_from(format!("Bearer {token}"))
        .map_err(|e| SuiteError::Failed(format!("token header: {e}")))?;
    let out = t
        .outgoing(
            &http::Method::GET,
            &[(http::header::AUTHORIZATION, auth)],
            Bytes::new(),
        )
        .map_err(|e| SuiteError::Failed(format!("building the request: {e}")))?;
    let rows = runtime()?.block_on(async {
        let mut rows = Vec::new();
        for _ in 0..OVERVIEW_REQUESTS {
            let start = tokio::time::Instant::now();
            let mut conn = t
                .connect()
                .await
                .map_err(|k| format!("connecting: {k:?}"))?;
            let connect = conn.take_timing().map_or(Duration::ZERO, |c| c.total());
            let (answer, sent) = conn
                .send(&out)
                .await
                .map_err(|k| format!("request: {k:?}"))?;
            if answer.status != http::StatusCode::OK {
                return Err(format!("getAllUsers answered {}", answer.status));
            }
            let body = answer.body.len() as f64;
            rows.push([
                start.elapsed().as_secs_f64() * 1000.0,
                connect.as_secs_f64() * 1000.0,
                (connect + answer.ttfb).as_secs_f64() * 1000.0,
                answer.bytes as f64 - body,
                body,
                sent as f64,
            ]);
        }
        Ok(rows)
    });
    let rows = rows.map_err(SuiteError::Failed)?;
    let names = [
        "load_ms",
        "connect_ms",
        "latency_ms",
        "header_bytes",
        "body_bytes",
        "sent_bytes",
    ];
    let mut m = std::collections::BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let mut v: Vec<f64> = rows.iter().map(|r| r[i]).collect();
        v.sort_by(f64::total_cmp);
        m.insert((*name).to_owned(), v[v.len() / 2]);
    }
    let extra = serde_json::json!({
        "requests": OVERVIEW_REQUESTS,
        "statistic": "median, each request on a new connection",
        "columns": names,
        "rows": rows,
    });
    Ok((m, extra))
}

/// `pms bench startup` of one component, `runs` times.
fn startup(
    ctx: &Ctx<'_>,
    shared: &Shared,
    dir: &Path,
    component: &str,
    runs: usize,
    record: &mut RunRecord,
) -> Result<(), SuiteError> {
    // Each service's own line once it serves, the bare-process stand-in for the "Started …"
    // lines the published figures were read from.
    let (inner, ready_url, line) = if component == "gateway" {
        let (ports, users) = (Ports::free()?, free_port()?);
        // With the TLS listener, so the start-up includes loading the certificate.
        let s = gateway_spawn(ctx, shared, dir, ports, users, true)?;
        let url = format!("http://127.0.0.1:{}/readyz", ports.admin);
        (s, url, "gateway started")
    } else {
        let port = free_port()?;
        let url = format!("http://127.0.0.1:{port}/readyz");
        (
            users_spawn(ctx, shared, dir, port),
            url,
            "users service listening",
        )
    };
    let mut cmd = ctx
        .pms("startup", &["bench", "startup", "--runs"])
        .args([
            runs.to_string(),
            "--ready-url".into(),
            ready_url,
            "--ready-line".into(),
            line.into(),
            "--out".into(),
            dir.display().to_string(),
            "--".into(),
            inner.program.display().to_string(),
        ])
        .args(inner.args.iter().cloned());
    for (k, v) in &inner.env {
        cmd = cmd.env(k, v);
    }
    // The started lines are info lines, whatever the suite's own log level.
    cmd = cmd.env("PMS_LOG", "info");
    record.commands.push(cmd.shell_line());
    cmd.run(&dir.join("startup.log"))?;
    let json = read_json(&dir.join("startup.json"))?;
    if let Some(mean) = json
        .pointer("/ready_ms/mean")
        .and_then(serde_json::Value::as_f64)
    {
        record.metrics.insert("startup_s".into(), mean / 1000.0);
    }
    if let Some(mean) = json
        .pointer("/line_ms/mean")
        .and_then(serde_json::Value::as_f64)
    {
        record
            .metrics
            .insert("startup_line_s".into(), mean / 1000.0);
    }
    if let Some(rss) = json
        .pointer("/rss_kib/mean")
        .and_then(serde_json::Value::as_f64)
    {
        record.metrics.insert("rss_mb".into(), rss * 1024.0 / 1e6);
    }
    record.extra = Some(json);
    Ok(())
}

/// Where the throwaway PostgreSQL of a run writing to `out` (canonical) keeps its cluster: in
/// the system's temporary directory, which every user can reach (run as root, `pg.sh` runs
/// PostgreSQL as the `postgres` user, which cannot enter an output directory made private, as
/// `mktemp -d` makes them), under a name fixed by `out`, so that a run finds what an
/// interrupted earlier run into the same directory left.
pub fn throwaway_pg_dir(out: &Path) -> PathBuf {
    // FNV-1a: stable across runs and builds, unlike the standard library's hasher.
    let hash = out
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    std::env::temp_dir().join(format!("pms-suite-pg-{hash:016x}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stress_figure_is_users_at_the_failure_or_the_most_reached() {
        let failed = serde_json::json!({"failed": true, "users_at_end": 9579, "max_users": 9600});
        assert_eq!(stress_figure(&failed), Some(("max_users", 9579.0)));
        // Reached the cap without a failure: 19,000 users at once, fewer when the run ended.
        let capped =
            serde_json::json!({"failed": false, "users_at_end": 11161, "max_users": 19000});
        assert_eq!(stress_figure(&capped), Some(("users_reached", 19000.0)));
        assert_eq!(stress_figure(&serde_json::json!({})), None);
    }
}
