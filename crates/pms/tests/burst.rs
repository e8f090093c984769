//! Issue 59: a burst of sign-ups and logins against `pms up` inside the published container's
//! memory limit, so that a memory regression fails CI. Before argon2's work areas were reused and
//! the hashing queue bounded, 100 sign-ups took `pms up` past 1 GB, and a memory limit killed it.
//!
//! `pms up` runs with the default argon2 settings (19 MiB a hash: what costs memory) in a
//! control group of 1 CPU and [`LIMIT_MB`] (the suite's envelope: cgroup v2 or v1 where the
//! machine lets this process make groups). Where it does not, the same limit is read against
//! the process's peak resident memory (`VmHWM`) instead. Every sign-up and login must succeed
//! (503 `busy` is waited out, as its `Retry-After` says) and `pms up` must still be running.

mod common;

use std::io::Read as _;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{free_port, wait_for_port};
use pms_suite::envelope::{Envelope, Limits, Role};

const PMS: &str = env!("CARGO_BIN_EXE_pms");
/// Half the published container's 512 MB: the issue's budget for `pms up` through a burst.
const LIMIT_MB: u64 = 256;
/// Sign-ups, then as many logins.
const COUNT: usize = 100;
/// Clients at once.
const CLIENTS: usize = 50;

struct Up(std::process::Child);

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `POST path` with a JSON body on a fresh connection: the status and `Retry-After`.
fn post_json(port: u16, path: &str, body: &str) -> (u16, u64) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, 1);
    };
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    if std::io::Write::write_all(&mut s, request.as_bytes()).is_err() {
        return (0, 1);
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let page = common::Page::parse(&answer);
    let wait = page
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (page.status, wait)
}

/// Runs `jobs` (path, body) from [`CLIENTS`] threads, each job again after a 503 until it gets
/// another answer; returns the jobs whose final answer was not `want`.
fn burst(port: u16, jobs: Vec<(&'static str, String)>, want: u16) -> Vec<String> {
    let jobs = Arc::new(jobs);
    let next = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (jobs, next) = (Arc::clone(&jobs), Arc::clone(&next));
            std::thread::spawn(move || {
                let mut wrong = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((path, body)) = jobs.get(i) else {
                        return wrong;
                    };
                    loop {
                        let (status, wait) = post_json(port, path, body);
                        if status == 503 {
                            std::thread::sleep(Duration::from_secs(wait.max(1)));
                            continue;
                        }
                        if status != want {
                            wrong.push(format!("{path} {body}: {status}"));
                        }
                        break;
                    }
                }
            })
        })
        .collect();
    threads
        .into_iter()
        .flat_map(|t| t.join().expect("a client thread"))
        .collect()
}

/// The process's peak resident memory, MB.
fn peak_mb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

#[test]
fn a_burst_of_sign_ups_and_logins_stays_within_the_memory_limit() {
    let data = tempfile::tempdir().unwrap();
    // Made before `pms up` starts, so that it goes after it: a group is removed once empty.
    let envelope = Envelope::new(Limits {
        cpus: 1.0,
        memory_mb: LIMIT_MB,
    });
    let (port, users) = (free_port(), free_port());
    let child = Command::new(PMS)
        .args(["up", "--data-dir"])
        .arg(data.path().join("pd"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--tls-listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--admin-listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--users-listen", &format!("127.0.0.1:{users}")])
        .args([
            "--parks-listen",
            "127.0.0.1:0",
            "--payments-listen",
            "127.0.0.1:0",
        ])
        .args(["--web-listen", "127.0.0.1:0"])
        .env("PMS_SEED_PASSWORD", "Chosen#Password1")
        .env("PMS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut up = Up(child);
    envelope
        .place(pid, "up", Role::System)
        .expect("pms up placed in its envelope");
    let limited = envelope.record().limits.is_some();
    wait_for_port(users);

    let first = std::process::id() as usize % 10_000 * 100;
    let password = "Burst#Driver2026";
    let letters = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let sign_ups = (first..first + COUNT)
        .map(|i| {
            let plate = format!(
                "{}{}-{:02}-ZB",
                letters[i / 26 % 26] as char,
                letters[i % 26] as char,
                i / 676 % 100
            );
            let body = format!(
                r#"{{"firstName":"Burst","lastName":"Driver {i}","email":"burst{i}@burst.pms.test","password":"{password}","nif":{},"licensePlateNumber":"{plate}","vehicleType":"AUTOMOBILE","vehicleEnergySource":"FUEL"}}"#,
                300_000_000 + i
            );
            ("/users/createUser", body)
        })
        .collect();
    let refused = burst(users, sign_ups, 201);
    assert!(
        refused.is_empty(),
        "{} sign-ups failed (status 0: no answer, pms up gone?), first {:?}",
        refused.len(),
        refused.first()
    );
    let logins = (first..first + COUNT)
        .map(|i| {
            let body = format!(r#"{{"email":"burst{i}@burst.pms.test","password":"{password}"}}"#);
            ("/users/login", body)
        })
        .collect();
    let refused = burst(users, logins, 200);
    assert!(
        refused.is_empty(),
        "{} logins failed, first {:?}",
        refused.len(),
        refused.first()
    );

    assert!(
        up.0.try_wait().unwrap().is_none(),
        "pms up was killed ({:?}: {LIMIT_MB} MB)",
        envelope.record().mechanism
    );
    if !limited {
        let peak = peak_mb(pid);
        assert!(
            peak < LIMIT_MB,
            "no control group here: pms up's peak resident memory {peak} MB, over {LIMIT_MB} MB"
        );
    }
}
