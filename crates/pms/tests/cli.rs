//! The real `pms` binary: exit codes, config errors before binding, dev certificates, and a clean
//! SIGTERM drain with the gateway in front of the echo back-end, `pms users` start-up errors, and
//! `pms up` with the services behind the gateway, `pms device` driving a barrier and
//! `pms events tail` showing what it wrote.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{exchange, free_port, wait_for_port};

const PMS: &str = env!("CARGO_BIN_EXE_pms");

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// Logs in through the gateway on `port` and returns the token.
fn login(port: u16, email: &str, password: &str) -> String {
    let body = format!(r#"{{"email":"{email}","password":"{password}"}}"#);
    let resp = exchange(
        port,
        &format!(
            "POST /users/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let start = resp.find("\"token\":\"").expect("token in the body") + 9;
    let end = resp[start..].find('"').expect("end of token") + start;
    resp[start..end].to_owned()
}

#[test]
fn users_without_a_token_key_exits_64_saying_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(PMS)
        .current_dir(dir.path())
        .args(["users", "--listen", "127.0.0.1:0"])
        .env_remove("PMS_JWT_SECRET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("set PMS_JWT_SECRET"), "{err}");
    let out = Command::new(PMS)
        .current_dir(dir.path())
        .args(["users", "--listen", "127.0.0.1:0"])
        .env("PMS_JWT_SECRET", "short")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 32"));
    let out = Command::new(PMS)
        .current_dir(dir.path())
        .args(["users", "--database-url", "mysql://x@y/z"])
        .env("PMS_JWT_SECRET", "0123456789abcdef0123456789abcdef")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected sqlite"));
}

#[test]
fn bad_config_exits_64_naming_file_and_key_without_binding() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        format!(
            "[[listeners]]\nlisten = \"127.0.0.1:{port}\"\n[[routes]]\nmatch = {{ path = \"/x\" }}\nupstream = \"ghost\"\n"
        ),
    )
    .unwrap();
    let out = Command::new(PMS)
        .args(["gateway", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml: routes[0].upstream: no upstream named \"ghost\""),
        "{err}"
    );
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing bound"
    );

    let out = Command::new(PMS)
        .args(["gateway", "--config", "/nonexistent.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.toml: cannot read"));
}

#[test]
fn certs_dev_writes_a_usable_ca_and_leaf_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(PMS)
        .args(["certs", "dev", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in ["ca.pem", "server.pem", "server-key.pem"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    pms_net::tls::server_config(
        &dir.path().join("server.pem"),
        &dir.path().join("server-key.pem"),
        &[],
    )
    .expect("leaf and key fit together");
    let again = Command::new(PMS)
        .args(["certs", "dev", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(64));
}

/// Writes a gateway config routing `POST /passthrough` on `gw_port` to the echo on `echo_port`.
fn echo_gateway_config(
    dir: &std::path::Path,
    gw_port: u16,
    admin_port: u16,
    echo_port: u16,
) -> std::path::PathBuf {
    let cfg = dir.join("gw.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[admin]
listen = "127.0.0.1:{admin_port}"
[[listeners]]
listen = "127.0.0.1:{gw_port}"
[[upstreams]]
name = "echo"
endpoints = ["http://127.0.0.1:{echo_port}"]
[[routes]]
match = {{ path = "/passthrough", methods = ["POST"] }}
upstream = "echo"
"#
        ),
    )
    .unwrap();
    cfg
}

#[test]
fn gateway_in_front_of_echo_then_sigterm_exits_0() {
    let echo_port = free_port();
    let (gw_port, admin_port) = (free_port(), free_port());
    // Killed on drop, so a failed assertion leaves no process behind.
    let mut echo = KillOnDrop(
        Command::new(PMS)
            .args(["echo", "--listen", &format!("127.0.0.1:{echo_port}")])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = echo_gateway_config(dir.path(), gw_port, admin_port, echo_port);
    let mut gw = KillOnDrop(
        Command::new(PMS)
            .args(["gateway", "--config"])
            .arg(&cfg)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_port(echo_port);
    wait_for_port(gw_port);

    let mut s = TcpStream::connect(("127.0.0.1", gw_port)).unwrap();
    std::io::Write::write_all(
        &mut s,
        b"POST /passthrough HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.ends_with("hello"), "{resp}");

    // A second gateway on the same public port refuses to start (it must not join the first
    // one's SO_REUSEPORT group and take half its clients), saying why once.
    let dir2 = tempfile::tempdir().unwrap();
    let cfg2 = echo_gateway_config(dir2.path(), gw_port, free_port(), echo_port);
    let mut second = KillOnDrop(
        Command::new(PMS)
            .args(["gateway", "--config"])
            .arg(&cfg2)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = second.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "a second gateway is running on port {gw_port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    second
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{gw_port}")),
        "{err}"
    );
    assert_eq!(err.matches("Address already in use").count(), 1, "{err}");

    sigterm(&gw.0);
    assert_eq!(gw.0.wait().unwrap().code(), Some(0));
    let log: Vec<String> = BufReader::new(gw.0.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .collect();
    assert!(log.iter().any(|l| l.contains("gateway stopped")), "{log:?}");
    sigterm(&echo.0);
    assert_eq!(echo.0.wait().unwrap().code(), Some(0));
}

/// A request the gateway could not deliver: the client learns which upstream failed and its
/// request id, not where the upstream runs; the log has the detail under that same id (the
/// id itself, not a redacted header value).
#[test]
fn a_failed_upstream_is_named_to_the_client_and_detailed_in_the_log_under_the_request_id() {
    let closed = free_port(); // nothing listens there
    let (gw_port, admin_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let cfg = echo_gateway_config(dir.path(), gw_port, admin_port, closed);
    let mut gw = KillOnDrop(
        Command::new(PMS)
            .args(["gateway", "--config"])
            .arg(&cfg)
            .env("PMS_LOG", "warn")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_port(gw_port);
    let resp = exchange(
        gw_port,
        "POST /passthrough HTTP/1.1\r\nhost: x\r\nx-request-id: find-me-42\r\n\
         content-length: 0\r\nconnection: close\r\n\r\n",
    );
    assert!(resp.starts_with("HTTP/1.1 502"), "{resp}");
    assert!(
        resp.contains(r#""message":"upstream echo unavailable""#),
        "{resp}"
    );
    assert!(!resp.contains("127.0.0.1"), "{resp}");
    sigterm(&gw.0);
    assert_eq!(gw.0.wait().unwrap().code(), Some(0));
    let mut log = String::new();
    gw.0.stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("request failed"))
        .unwrap_or_else(|| panic!("no warning:\n{log}"));
    assert!(line.contains("request_id=find-me-42"), "{line}");
    assert!(line.contains(&format!("127.0.0.1:{closed}")), "{line}");
}

/// Under a small open-file limit the gateway lowers its caps at start, so 200 clients at once
/// all get their answer (the extra ones wait to be accepted) instead of a 502 for each request
/// that found no descriptor left for its upstream connection.
#[test]
fn gateway_fits_its_connections_into_a_small_open_file_limit() {
    let echo_port = free_port();
    let (gw_port, admin_port) = (free_port(), free_port());
    let _echo = KillOnDrop(
        Command::new(PMS)
            .args(["echo", "--listen", &format!("127.0.0.1:{echo_port}")])
            .args(["--delay-ms", "300"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = echo_gateway_config(dir.path(), gw_port, admin_port, echo_port);
    // `ulimit -n` without -S or -H sets both limits, so the gateway cannot raise it back.
    let mut gw = KillOnDrop(
        Command::new("sh")
            .args([
                "-c",
                r#"ulimit -n 300 && exec "$0" "$@""#,
                PMS,
                "gateway",
                "--config",
            ])
            .arg(&cfg)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_port(echo_port);
    wait_for_port(gw_port);

    let clients: Vec<_> = (0..200)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", gw_port))?;
                s.set_read_timeout(Some(Duration::from_secs(60)))?;
                std::io::Write::write_all(
                    &mut s,
                    b"POST /passthrough HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
                )?;
                let mut resp = String::new();
                s.read_to_string(&mut resp)?;
                Ok::<_, std::io::Error>(resp)
            })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    for c in clients {
        let status = match c.join().unwrap() {
            Ok(resp) => resp.lines().next().unwrap_or("").to_owned(),
            Err(err) => format!("client error: {err}"),
        };
        *statuses.entry(status).or_default() += 1;
    }
    assert_eq!(
        statuses.get("HTTP/1.1 200 OK"),
        Some(&200),
        "every client answered: {statuses:?}"
    );

    sigterm(&gw.0);
    assert_eq!(gw.0.wait().unwrap().code(), Some(0));
    let log: Vec<String> = BufReader::new(gw.0.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .collect();
    // One warning names every cap it lowered.
    let warnings: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("connection caps lowered to fit the open-file limit"))
        .collect();
    assert_eq!(warnings.len(), 1, "{log:?}");
    assert!(
        warnings[0].contains("limits.max_connections 10000 -> ")
            && warnings[0].contains("upstream echo max_connections "),
        "{log:?}"
    );
}

#[test]
fn up_runs_gateway_services_and_echo_and_keeps_its_state() {
    let data = tempfile::tempdir().unwrap();
    let (port, tls_port, admin_port) = (free_port(), free_port(), free_port());
    let spawn = || {
        // A relative data directory: the generated config must still find its certificates.
        Command::new(PMS)
            .current_dir(data.path())
            .args(["up", "--data-dir", "pd"])
            // The passages replay fixed dates of 2024: believe barrier times that far behind.
            .args(["--passage-delay-h", "1000000"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--tls-listen", &format!("127.0.0.1:{tls_port}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
            .args([
                "--users-listen",
                "127.0.0.1:0",
                "--parks-listen",
                "127.0.0.1:0",
                "--payments-listen",
                "127.0.0.1:0",
                "--web-listen",
                "127.0.0.1:0",
                "--argon2-m-kib",
                "64",
                "--argon2-t",
                "1",
            ])
            .env("PMS_SEED_PASSWORD", "Chosen#Password1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut up = spawn();
    wait_for_port(port);
    wait_for_port(tls_port);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(
        &mut s,
        b"POST /transform HTTP/1.1\r\nhost: x\r\ncontent-length: 50\r\nconnection: close\r\n\r\n{\"size\":\"50B\",\"payload\":[\"0123456789\",\"ABCDEFGH\"]}",
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(
        resp.ends_with(
            "<size>50B</size><payload><item>0123456789</item><item>ABCDEFGH</item></payload>"
        ),
        "{resp}"
    );
    // The users service behind the gateway, seeded with the password from the environment.
    let token = login(port, "supervisor@isep.ipp.pt", "Chosen#Password1");
    let users = exchange(port, &format!("GET /users/getAllUsers HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"));
    assert!(users.starts_with("HTTP/1.1 200"), "{users}");
    assert_eq!(users.matches("\"firstName\"").count(), 6, "{users}");
    // The banner's demo car: in at park 1's entrance, out at its exit, with the data directory's
    // gateway and device keys; the exit says the price.
    let barrier = |barrier: &str, direction: &str, at: &str| {
        let mut child = Command::new(PMS)
            .current_dir(data.path())
            .args([
                "device",
                "barrier",
                "--data-dir",
                "pd",
                "--park",
                "1",
                "--barrier",
                barrier,
            ])
            .args(["--direction", direction, "--at", at])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"28-XQ-51\n").unwrap();
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let entered = barrier("1", "entrance", "2024-07-01T08:30:00Z");
    assert!(entered.contains(r#""success":true"#), "{entered}");
    assert!(
        entered.contains("Welcome to the park Rui Soares!"),
        "{entered}"
    );
    let left = barrier("2", "exit", "2024-07-01T09:30:00Z");
    assert!(left.contains("Your total will be 0.6€!"), "{left}");
    let display = Command::new(PMS)
        .current_dir(data.path())
        .args([
            "device",
            "display",
            "--data-dir",
            "pd",
            "--id",
            "2",
            "--once",
        ])
        .output()
        .unwrap();
    let shown = String::from_utf8(display.stdout).unwrap();
    assert!(shown.contains("Have a nice day Rui Soares!"), "{shown}");
    // The events that visit wrote, as a person debugging would look at them.
    let tail = Command::new(PMS)
        .current_dir(data.path())
        .args(["events", "tail", "--service", "parks", "--data-dir", "pd"])
        .output()
        .unwrap();
    let tail = String::from_utf8(tail.stdout).unwrap();
    assert!(
        tail.lines()
            .any(|l| l.contains(r#""type":"visit.closed""#) && l.contains("28-XQ-51")),
        "{tail}"
    );
    // Payments applies the parks' events again from the first (a replay: idempotent, and the
    // running service follows its position set back).
    let replay = Command::new(PMS)
        .current_dir(data.path())
        .args([
            "events",
            "replay",
            "--service",
            "payments",
            "--data-dir",
            "pd",
        ])
        .args(["--consumer", "payments", "--source", "parks", "--from", "1"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&replay.stdout);
    assert!(replay.status.success(), "{replay:?}");
    assert!(
        said.contains("payments will apply the parks service's events from 1 on again"),
        "{said}"
    );
    let key = data.path().join("pd/certs/server-key.pem");
    let first_key = std::fs::read(&key).unwrap();
    // Secrets, keys and password hashes live there: for this user only.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(data.path().join("pd"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    sigterm(&up);
    assert_eq!(up.wait().unwrap().code(), Some(0));
    let mut banner = String::new();
    up.stdout
        .take()
        .unwrap()
        .read_to_string(&mut banner)
        .unwrap();
    assert!(
        banner.contains(&format!("http://127.0.0.1:{port}/passthrough")),
        "{banner}"
    );

    assert!(
        banner.contains("Demo accounts: supervisor@isep.ipp.pt"),
        "{banner}"
    );
    assert!(
        banner.contains("the value of PMS_SEED_PASSWORD"),
        "{banner}"
    );

    // A second start keeps the certificate, the JWT secret and the users it made the first time.
    let secret = std::fs::read(data.path().join("pd/jwt-secret")).unwrap();
    let mut again = spawn();
    wait_for_port(port);
    assert_eq!(std::fs::read(&key).unwrap(), first_key);
    assert_eq!(
        std::fs::read(data.path().join("pd/jwt-secret")).unwrap(),
        secret
    );
    login(port, "leoKim@isep.ipp.pt", "Chosen#Password1");
    sigterm(&again);
    assert_eq!(again.wait().unwrap().code(), Some(0));
}

#[test]
fn bench_run_writes_result_json_and_gates_on_thresholds() {
    let (port, mut echo) = echo_on_free_port();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}/passthrough");
    let bench = |extra: &[&str]| {
        Command::new(PMS)
            .args([
                "bench",
                "run",
                &url,
                "--users",
                "2",
                "--duration",
                "1s",
                "--method",
                "POST",
            ])
            .args([
                "--payload-size",
                "50",
                "--expect-body",
                "\"50B\"",
                "--http",
                "2",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let echo_pid = echo.0.id().to_string();
    let ok = bench(&[
        "--out",
        dir.path().to_str().unwrap(),
        "--threshold",
        "errors<1%",
        "--watch-pid",
        &echo_pid,
    ]);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let table = String::from_utf8_lossy(&ok.stdout);
    assert!(table.starts_with("label"), "{table}");
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("result.json")).unwrap()).unwrap();
    let measured = &result["labels"][0];
    assert_eq!(measured["label"], "measured");
    assert!(measured["samples"].as_u64().unwrap() > 0, "{result}");
    assert!(measured["throughput"].as_f64().unwrap() > 0.0, "{result}");
    assert_eq!(measured["errors"], 0);
    assert_eq!(result["config"]["body_bytes"], 50);
    assert_eq!(result["environment"]["target_on_this_host"], true);
    let watched = &result["watch"]["processes"][0];
    assert_eq!(watched["pid"].to_string(), echo_pid);
    assert!(watched["rss_max_kib"].as_u64().unwrap() > 0, "{result}");
    assert!(table.contains(&format!("pid {echo_pid}: CPU")), "{table}");

    // The open model: every due request accounted for, corrected and uncorrected figures.
    let open_dir = tempfile::tempdir().unwrap();
    let open = Command::new(PMS)
        .args([
            "bench",
            "run",
            &url,
            "--rate",
            "100",
            "--duration",
            "1s",
            "--connections",
            "2",
        ])
        .args(["--out", open_dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        open.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&open.stderr)
    );
    assert!(String::from_utf8_lossy(&open.stdout).contains("coordinated omission"));
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(open_dir.path().join("result.json")).unwrap())
            .unwrap();
    assert_eq!(result["config"]["model"], "open");
    assert_eq!(result["schedule"]["due"], 100);
    let sent = result["labels"][0]["samples"].as_u64().unwrap();
    assert_eq!(
        sent + result["schedule"]["dropped"].as_u64().unwrap(),
        100,
        "{result}"
    );
    assert_eq!(result["labels"][1]["label"], "uncorrected");

    // An impossible threshold fails the run with k6's exit code, after reporting.
    let strict = bench(&["--threshold", "p99<1us"]);
    assert!(
        String::from_utf8_lossy(&strict.stdout).starts_with("label"),
        "reported first"
    );
    assert_eq!(strict.status.code(), Some(99));
    assert!(String::from_utf8_lossy(&strict.stderr).contains("thresholds failed: p99<1us"));
    // A threshold that names no statistic is refused by the argument parser (exit 2).
    let bad = bench(&["--threshold", "p42<1ms"]);
    assert_eq!(bad.status.code(), Some(2));
    sigterm(&echo.0);
    assert_eq!(echo.0.wait().unwrap().code(), Some(0));
}

#[test]
fn bench_stages_formats_and_stress_from_the_command_line() {
    let (port, mut echo) = echo_on_free_port();
    let url = format!("http://127.0.0.1:{port}/passthrough");
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(PMS)
            .args(["bench"])
            .args(args)
            .output()
            .unwrap()
    };
    // Stages up and down, vegeta's report, and a per-request CSV.
    let out = run(&[
        "run",
        &url,
        "--stage",
        "500ms:4",
        "--stage",
        "500ms:0",
        "--format",
        "vegeta",
        "--out",
        dir.path().to_str().unwrap(),
        "--samples",
        "--progress",
        "always",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Requests      [total, rate, throughput]"),
        "{text}"
    );
    assert!(text.contains("[0s, 100ms]"), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("req/s  p99"),
        "progress lines"
    );
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("result.json")).unwrap()).unwrap();
    assert_eq!(result["config"]["duration_s"], 1.0, "the stages' total");
    assert_eq!(result["config"]["profile"]["stages"][0]["target"], 4.0);
    let samples = result["labels"][0]["samples"].as_u64().unwrap();
    let csv = std::fs::read_to_string(dir.path().join("samples.csv")).unwrap();
    assert_eq!(
        csv.lines().count() as u64,
        samples + 1,
        "header plus one row each"
    );
    assert!(
        result["labels"][0]["histogram"]["buckets"]
            .as_array()
            .unwrap()
            .len()
            > 1
    );
    // Usage mistakes are refused with exit 64 and a reason.
    let bad = run(&["run", &url, "--rate", "0"]);
    assert_eq!(bad.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--rate 0"));
    sigterm(&echo.0);
    assert_eq!(echo.0.wait().unwrap().code(), Some(0));
    // Stress against a port nobody listens on any more: the first user fails at once.
    let stress_dir = tempfile::tempdir().unwrap();
    let out = run(&[
        "stress",
        &url,
        "--add",
        "50/s",
        "--think-time",
        "100ms",
        "--max-duration",
        "5s",
        "--out",
        stress_dir.path().to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("stress: the target failed"), "{text}");
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(stress_dir.path().join("result.json")).unwrap())
            .unwrap();
    assert_eq!(result["config"]["outcome"]["failed"], true);
    assert_eq!(result["stop"]["reason"], "first_error");
    assert_eq!(result["stop"]["kind"], "connect");
}

/// `pms echo` on a free loopback port, ready to take connections.
fn echo_on_free_port() -> (u16, KillOnDrop) {
    let port = free_port();
    let echo = KillOnDrop(
        Command::new(PMS)
            .args(["echo", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(port);
    (port, echo)
}

/// Kills a child process when a test ends early, so it cannot outlive the test (and hold the
/// harness's output pipe open).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn bench_startup_times_a_real_start_and_stops_it_cleanly() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(PMS)
        .args([
            "bench",
            "startup",
            "--runs",
            "3",
            "--ready-port",
            &port.to_string(),
        ])
        .args(["--out", dir.path().to_str().unwrap(), "--"])
        .args([PMS, "echo", "--listen", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("startup.json")).unwrap()).unwrap();
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    for r in runs {
        assert!(r["ready_ms"].as_f64().unwrap() > 0.0);
        assert!(r["rss_kib"].as_u64().unwrap() > 0);
        assert_eq!(r["exit_code"], 0, "SIGTERM drains and exits 0");
    }
    let s = &json["ready_ms"];
    assert!(s["min"].as_f64() <= s["median"].as_f64() && s["median"].as_f64() <= s["max"].as_f64());
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing left running"
    );
}
