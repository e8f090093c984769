//! The parking suite's distributed system: PMS as an operator runs it across machines, on one
//! here — `pms users`, `pms parks` and `pms payments` as processes of their own on the cell's
//! PostgreSQL database (a schema each), their events through a `nats-server -js` of the cell's,
//! and `pms gateway` in front with the shipped route table (and `pms web` behind it, for a soak's
//! people). The barrier load is the same as for `pms up` ([`super::barriers`]); what differs is
//! every event crossing the broker, and the gateway and the services talking over sockets
//! between processes.

use std::path::{Path, PathBuf};

use pms_bench::startup::Ready;

use super::barriers::Ports;
use super::gateway::random_hex;
use super::procs::{free_port, loopback, which, Proc, Spawn};
use super::proxy::READY_TIMEOUT;
use super::results::RunRecord;
use super::{Ctx, SuiteError};

/// The shipped route table (`config/gateway.toml`), whose routes the cell's gateway takes.
const ROUTE_TABLE: &str = include_str!("../../../config/gateway.toml");

/// The services of a running distributed system, stopped when dropped.
pub struct System {
    /// nats-server, the three services, the gateway, the front office.
    pub procs: Vec<Proc>,
    /// The device secret's file (`pms device key … --device-secret-file`).
    pub device_secret: PathBuf,
}

/// What the cell's system is started with.
pub struct Setup<'a> {
    /// Where logs, service data and configs go.
    pub dir: &'a Path,
    /// The cell's database.
    pub database: &'a str,
    /// The demo accounts' password.
    pub password: &'a str,
    /// The ports the load uses.
    pub ports: Ports,
    /// Spots each demo park gets beyond the published ones.
    pub extra_spots: usize,
}

/// Starts the broker, the services and the gateway, and waits until each is ready.
///
/// # Errors
/// `nats-server` is not installed ([`SuiteError::NotInstalled`]), or a process failed to start
/// or to get ready.
pub fn start(
    ctx: &Ctx<'_>,
    setup: &Setup<'_>,
    record: &mut RunRecord,
) -> Result<System, SuiteError> {
    let Setup { dir, ports, .. } = *setup;
    let nats_bin = which("nats-server")
        .or_else(|| Some(PathBuf::from("/usr/sbin/nats-server")).filter(|p| p.is_file()))
        .ok_or_else(|| SuiteError::NotInstalled("nats-server".into()))?;
    let secret = random_hex(32)?;
    let device_secret = dir.join("device-secret");
    std::fs::write(&device_secret, random_hex(32)?)
        .map_err(|e| SuiteError::io(&format!("writing {}", device_secret.display()), e))?;
    let mut system = System {
        procs: Vec::new(),
        device_secret,
    };

    let nats_port = free_port()?;
    let store = dir.join("nats");
    let _ = std::fs::remove_dir_all(&store);
    let nats = Spawn::new(
        "nats-server",
        nats_bin,
        &[
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            &nats_port.to_string(),
            "-sd",
        ],
    )
    .args([store.display().to_string()]);
    record.commands.push(nats.shell_line());
    let mut proc = nats.start(&dir.join("nats.log"))?;
    proc.wait_ready(&Ready::Port(loopback(nats_port)), READY_TIMEOUT)?;
    system.procs.push(proc);
    let nats_url = format!("nats://127.0.0.1:{nats_port}");

    let users_port = ports.users;
    let mut services = Vec::new();
    for (name, port) in [
        ("users", users_port),
        ("parks", ports.parks),
        ("payments", ports.payments),
    ] {
        let mut spawn = ctx
            .pms(&format!("pms {name}"), &[name, "--listen"])
            .args([
                loopback(port).to_string(),
                "--data-dir".into(),
                dir.join("data").join(name).display().to_string(),
                "--database-url".into(),
                setup.database.to_owned(),
                "--nats-url".into(),
                nats_url.clone(),
            ])
            .env("PMS_JWT_SECRET", &secret)
            .env("PMS_SEED_PASSWORD", setup.password);
        if name == "parks" {
            spawn = spawn.args([
                "--device-secret-file".into(),
                system.device_secret.display().to_string(),
                "--demo-extra-spots".into(),
                setup.extra_spots.to_string(),
            ]);
        }
        record.commands.push(spawn.shell_line());
        services.push((spawn.start(&dir.join(format!("{name}.log")))?, port));
    }
    // Started together: their migrations and seeding go side by side, as replicas' do.
    for (mut proc, port) in services {
        let ready =
            Ready::url(&format!("http://127.0.0.1:{port}/readyz")).map_err(SuiteError::Failed)?;
        proc.wait_ready(&ready, READY_TIMEOUT)?;
        system.procs.push(proc);
    }

    let web_port = free_port()?;
    let forwarder_key = random_hex(32)?;
    let config = dir.join("gateway.toml");
    std::fs::write(&config, gateway_config(ports, users_port, web_port)?)
        .map_err(|e| SuiteError::io(&format!("writing {}", config.display()), e))?;
    let gateway = ctx
        .pms("pms gateway", &["gateway", "--config"])
        .args([config.display().to_string()])
        .env("PMS_JWT_SECRET", &secret)
        .env("PMS_FORWARDER_KEY", &forwarder_key);
    record.commands.push(gateway.shell_line());
    let mut proc = gateway.start(&dir.join("gateway.log"))?;
    proc.wait_ready(&Ready::Port(loopback(ports.gateway)), READY_TIMEOUT)?;
    system.procs.push(proc);

    // The front office, for the people of a soak; the barriers do not use it.
    let web = ctx
        .pms("pms web", &["web", "--listen"])
        .args([
            loopback(web_port).to_string(),
            "--gateway-url".into(),
            format!("http://{}", loopback(ports.gateway)),
        ])
        .env("PMS_FORWARDER_KEY", &forwarder_key);
    record.commands.push(web.shell_line());
    let mut proc = web.start(&dir.join("web.log"))?;
    let ready =
        Ready::url(&format!("http://127.0.0.1:{web_port}/readyz")).map_err(SuiteError::Failed)?;
    proc.wait_ready(&ready, READY_TIMEOUT)?;
    system.procs.push(proc);
    Ok(system)
}

/// The gateway's config: its listener, the services' and the front office's addresses, the
/// front office as its trusted forwarder, then the routes of the shipped table as they are.
fn gateway_config(ports: Ports, users: u16, web: u16) -> Result<String, SuiteError> {
    let routes = ROUTE_TABLE
        .find("[[routes]]")
        .map(|i| &ROUTE_TABLE[i..])
        .ok_or_else(|| SuiteError::Failed("config/gateway.toml has no routes".into()))?;
    let admin = free_port()?;
    let upstream = |name: &str, port: u16| {
        format!("[[upstreams]]\nname = \"{name}\"\nendpoints = [\"http://127.0.0.1:{port}\"]\n\n")
    };
    Ok(format!(
        "# written by pms bench suite (pms-parking, distributed)\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [[listeners]]\nname = \"public\"\nlisten = \"127.0.0.1:{gateway}\"\n\n\
         [auth.jwt]\nalgorithms = [\"HS256\"]\nsecret_env = \"PMS_JWT_SECRET\"\nrequire_exp = true\n\
         leeway_s = 30\nclaims_to_headers = {{ sub = \"X-UserId\", role = \"X-UserRole\" }}\n\n\
         [auth.forwarder]\nkey_env = \"PMS_FORWARDER_KEY\"\n\n\
         {users}{parks}{payments}{web}{routes}",
        gateway = ports.gateway,
        users = upstream("users", users),
        parks = upstream("parks", ports.parks),
        payments = upstream("payments", ports.payments),
        web = upstream("web", web),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_config_has_the_shipped_routes_behind_the_cells_services() {
        let ports = Ports {
            gateway: 41001,
            parks: 41002,
            payments: 41003,
            users: 41006,
        };
        let text = gateway_config(ports, 41004, 41005).expect("config");
        assert!(text.contains("listen = \"127.0.0.1:41001\""), "{text}");
        for (name, port) in [
            ("users", 41004),
            ("parks", 41002),
            ("payments", 41003),
            ("web", 41005),
        ] {
            assert!(
                text.contains(&format!(
                    "name = \"{name}\"\nendpoints = [\"http://127.0.0.1:{port}\"]"
                )),
                "{name}: {text}"
            );
        }
        assert!(text.contains("path_prefix = \"/barriers/\"") || text.contains("/barriers/"));
        assert_eq!(
            text.matches("[[routes]]").count(),
            ROUTE_TABLE.matches("[[routes]]").count()
        );
        // No listener or upstream of the shipped file's own.
        assert!(!text.contains("127.0.0.1:9090"), "{text}");
        assert!(!text.contains("127.0.0.1:8094"), "{text}");
    }
}
