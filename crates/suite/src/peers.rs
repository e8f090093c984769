//! nginx and haproxy as the reverse proxy in the passthrough scenarios, from the configs in
//! `config/peers/` with the cell's ports and TLS filled in. A peer that is not installed is
//! reported as such; nothing is ever made up for it.

use std::path::Path;
use std::time::Duration;

use pms_bench::startup::Ready;

use super::procs::{self, loopback, Proc, Spawn};
use super::spec::{Hop, Scenario};
use super::{Ctx, SuiteError};

/// The peers a suite knows how to run.
pub const KNOWN: &[&str] = &["nginx", "haproxy"];

const NGINX_CONF: &str = include_str!("../../../config/peers/nginx.conf");
const HAPROXY_CFG: &str = include_str!("../../../config/peers/haproxy.cfg");

/// The installed version of `peer`, as its `-v` prints it.
pub fn version(peer: &str) -> Option<String> {
    let program = procs::which(peer)?;
    let out = std::process::Command::new(program)
        .arg("-v")
        .output()
        .ok()?;
    // nginx prints to stderr, haproxy to stdout.
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| !l.trim().is_empty())
        .map(short_version)
}

/// The first line of `-v` without its decoration: nginx's "nginx version: " prefix, and
/// haproxy's release date and home page after " - ".
fn short_version(line: &str) -> String {
    let line = line.trim().trim_start_matches("nginx version: ");
    let line = line.split(" - ").next().unwrap_or(line);
    // haproxy: "HAProxy version 2.6.12-1+deb12u4 2026/10/17": keep the version.
    match line.strip_prefix("HAProxy version ") {
        Some(rest) => format!("HAProxy {}", rest.split_whitespace().next().unwrap_or(rest)),
        None => line.to_owned(),
    }
}

/// A running peer.
pub struct Peer {
    /// The process (nginx's master).
    pub proc: Proc,
    /// Every pid to watch (nginx's master and workers).
    pub pids: Vec<u32>,
    /// The command line.
    pub command: String,
}

/// Starts `peer` on `port` in front of the echo on `backend_port`, as `scenario` wants, with its
/// config and logs in `dir`.
///
/// # Errors
/// [`SuiteError::NotInstalled`] when the program is missing; start-up failures.
pub fn start(
    ctx: &Ctx<'_>,
    peer: &str,
    dir: &Path,
    scenario: &Scenario,
    port: u16,
    backend_port: u16,
) -> Result<Peer, SuiteError> {
    let program = procs::which(peer).ok_or_else(|| SuiteError::NotInstalled(peer.into()))?;
    let (text, spawn) = match peer {
        "nginx" => {
            let conf = dir.join("nginx.conf");
            let text = nginx_conf(ctx, dir, scenario, port, backend_port);
            let spawn = Spawn::new(peer, &program, &["-e", "stderr", "-g", "daemon off;", "-c"])
                .args([conf.display().to_string()]);
            (text.map(|t| (conf, t)), spawn)
        }
        "haproxy" => {
            let conf = dir.join("haproxy.cfg");
            let text = haproxy_cfg(ctx, dir, scenario, port, backend_port);
            let spawn =
                Spawn::new(peer, &program, &["-db", "-f"]).args([conf.display().to_string()]);
            (text.map(|t| (conf, t)), spawn)
        }
        other => return Err(SuiteError::Usage(format!("unknown peer {other:?}"))),
    };
    let (conf, text) = text?;
    std::fs::write(&conf, text)
        .map_err(|e| SuiteError::io(&format!("writing {}", conf.display()), e))?;
    let mut proc = spawn.start(&dir.join(format!("{peer}.log")))?;
    proc.wait_ready(&Ready::Port(loopback(port)), Duration::from_secs(20))?;
    let mut pids = vec![proc.pid()];
    pids.extend(procs::children(proc.pid()));
    Ok(Peer {
        proc,
        pids,
        command: spawn.shell_line(),
    })
}

fn fill(template: &str, fields: &[(&str, String)]) -> String {
    let mut out = template.to_owned();
    for (k, v) in fields {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    out
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn nginx_conf(
    ctx: &Ctx<'_>,
    dir: &Path,
    s: &Scenario,
    port: u16,
    backend_port: u16,
) -> Result<String, SuiteError> {
    if matches!(s.upstream, Hop::H2 | Hop::H2c) {
        return Err(SuiteError::Failed(
            "nginx has no HTTP/2 upstreams; the scenario should not list it".into(),
        ));
    }
    let tls_listener = s.client.tls();
    Ok(fill(
        NGINX_CONF,
        &[
            // Workers read the certificates as root; their temp files need a writable owner.
            (
                "user",
                if running_as_root() {
                    "user root;".into()
                } else {
                    String::new()
                },
            ),
            ("dir", dir.display().to_string()),
            ("port", port.to_string()),
            ("backend_port", backend_port.to_string()),
            (
                "listen_tls",
                if tls_listener {
                    " ssl http2".into()
                } else {
                    String::new()
                },
            ),
            (
                "tls",
                if tls_listener {
                    format!(
                        "ssl_certificate {};\n    ssl_certificate_key {};",
                        ctx.cert.display(),
                        ctx.key.display()
                    )
                } else {
                    String::new()
                },
            ),
            (
                "backend_scheme",
                if s.backend.tls() { "https" } else { "http" }.into(),
            ),
            (
                "backend_tls",
                if s.backend.tls() {
                    format!(
                        "proxy_ssl_verify on;\n      proxy_ssl_trusted_certificate {};\n      proxy_ssl_name localhost;\n      proxy_ssl_session_reuse on;",
                        ctx.ca.display()
                    )
                } else {
                    String::new()
                },
            ),
        ],
    ))
}

fn haproxy_cfg(
    ctx: &Ctx<'_>,
    dir: &Path,
    s: &Scenario,
    port: u16,
    backend_port: u16,
) -> Result<String, SuiteError> {
    let bind_tls = if s.client.tls() {
        // haproxy wants the certificate and its key in one file.
        let pem = dir.join("haproxy.pem");
        let read = |p: &Path| {
            std::fs::read_to_string(p)
                .map_err(|e| SuiteError::io(&format!("reading {}", p.display()), e))
        };
        let both = read(&ctx.cert)? + &read(&ctx.key)?;
        std::fs::write(&pem, both)
            .map_err(|e| SuiteError::io(&format!("writing {}", pem.display()), e))?;
        format!(" ssl crt {} alpn h2,http/1.1", pem.display())
    } else {
        String::new()
    };
    let verify = format!(
        " ssl verify required ca-file {} verifyhost localhost",
        ctx.ca.display()
    );
    let server_tls = match s.upstream {
        Hop::H1c => String::new(),
        Hop::H2c => " proto h2".into(),
        Hop::H1 => verify,
        Hop::H2 => format!("{verify} alpn h2"),
        Hop::Auto => format!("{verify} alpn h2,http/1.1"),
    };
    Ok(fill(
        HAPROXY_CFG,
        &[
            (
                "threads",
                std::thread::available_parallelism()
                    .map_or(1, |n| n.get())
                    .to_string(),
            ),
            // Two descriptors per proxied connection, within this process's limit (haproxy
            // refuses to start when it cannot raise its own to match).
            (
                "maxconn",
                ((procs::fd_limit().unwrap_or(4096).saturating_sub(100)) / 2)
                    .clamp(256, 20_000)
                    .to_string(),
            ),
            ("port", port.to_string()),
            ("backend_port", backend_port.to_string()),
            ("bind_tls", bind_tls),
            ("server_tls", server_tls),
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Options;

    #[test]
    fn versions_read_short() {
        assert_eq!(short_version("nginx version: nginx/1.22.1"), "nginx/1.22.1");
        assert_eq!(
            short_version("HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/"),
            "HAProxy 2.6.12-1+deb12u4"
        );
        assert_eq!(short_version("something 1.0"), "something 1.0");
    }

    fn scenario(client: Hop, upstream: Hop, backend: Hop) -> Scenario {
        Scenario {
            id: "s".into(),
            name: "s".into(),
            client,
            upstream,
            backend,
            transform: false,
            peers: Vec::new(),
        }
    }

    #[test]
    fn configs_are_filled_for_cleartext_and_tls() {
        let opts = Options {
            profile: "quick".into(),
            out: "/tmp/out".into(),
            only: Vec::new(),
            pms: "pms".into(),
            peers: true,
            database_url: None,
            pg_script: "scripts/pg.sh".into(),
            fast_database: false,
            command: String::new(),
            resume: false,
            repeats: 1,
            envelope: None,
        };
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert, "CERT\n").unwrap();
        std::fs::write(&key, "KEY\n").unwrap();
        let ctx = Ctx {
            opts: &opts,
            ca: "/c/ca.pem".into(),
            cert,
            key,
        };
        let plain = nginx_conf(
            &ctx,
            dir.path(),
            &scenario(Hop::H1c, Hop::H1c, Hop::H1c),
            1,
            2,
        )
        .unwrap();
        assert!(!plain.contains("{{"), "{plain}");
        assert!(plain.contains("listen 127.0.0.1:1;") && plain.contains("proxy_pass http://echo;"));
        let tls = nginx_conf(&ctx, dir.path(), &scenario(Hop::H2, Hop::H1, Hop::H1), 1, 2).unwrap();
        assert!(tls.contains("listen 127.0.0.1:1 ssl http2;"), "{tls}");
        assert!(tls.contains("proxy_pass https://echo;") && tls.contains("proxy_ssl_verify on;"));
        assert!(nginx_conf(&ctx, dir.path(), &scenario(Hop::H2, Hop::H2, Hop::H2), 1, 2).is_err());

        let h2 = haproxy_cfg(&ctx, dir.path(), &scenario(Hop::H2, Hop::H2, Hop::H2), 1, 2).unwrap();
        assert!(!h2.contains("{{"), "{h2}");
        let pem = std::fs::read_to_string(dir.path().join("haproxy.pem")).unwrap();
        assert_eq!(pem, "CERT\nKEY\n", "certificate and key in one file");
        assert!(
            h2.contains("alpn h2,http/1.1")
                && h2.contains("verify required ca-file /c/ca.pem verifyhost localhost alpn h2"),
            "{h2}"
        );
        let plain = haproxy_cfg(
            &ctx,
            dir.path(),
            &scenario(Hop::H1c, Hop::H1c, Hop::H1c),
            1,
            2,
        )
        .unwrap();
        assert!(
            plain.contains("bind 127.0.0.1:1\n") && plain.contains("server echo 127.0.0.1:2\n"),
            "{plain}"
        );
    }
}
