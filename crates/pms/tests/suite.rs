//! `pms bench suite` end to end with the real binary: a whole suite (its quick profile) spawns
//! the gateway and the echo back-end, loads them, and leaves results.json, report.md and
//! report.html that say what happened; a component that fails is recorded as failed, the reports
//! are still written and the exit code says so; bad names and filters are usage errors.

use std::path::Path;
use std::process::Command;

use pms_suite::results::{Status, SuiteResults};

const PMS: &str = env!("CARGO_BIN_EXE_pms");

fn suite(args: &[&str]) -> std::process::Output {
    suite_in(Path::new("."), args)
}

/// Runs `pms bench suite ARGS` from `dir` (so relative paths are relative to it).
fn suite_in(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(PMS)
        .args(["bench", "suite"])
        .args(args)
        .current_dir(dir)
        .env("PMS_LOG", "warn")
        .output()
        .expect("pms runs")
}

fn text(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr)
}

/// Writes an executable `pms` into `dir` with `script` (a shell script that ends by running the
/// real binary), for tests that need a component to misbehave.
fn wrapper_pms(dir: &Path, script: &str) -> std::path::PathBuf {
    let wrapper = dir.join("pms");
    std::fs::write(&wrapper, script).unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&wrapper)
        .status()
        .unwrap();
    wrapper
}

#[test]
fn the_async_delay_suite_runs_and_reports_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("delay");
    // A relative --out: every generated config must still find the certificates and logs.
    let o = suite_in(
        dir.path(),
        &["async-delay", "--profile", "quick", "--out", "delay"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("expected about"),
        "says how long it will take"
    );

    let res = SuiteResults::read(&out).unwrap();
    assert_eq!(
        (res.suite.as_str(), res.profile.as_str()),
        ("async-delay", "quick")
    );
    assert!(res.environment.shared_host && res.environment.cpus >= 1);
    assert_eq!(res.cells.len(), 2, "two rates");
    for (cell, rate) in res.cells.iter().zip([50u64, 500]) {
        let run = &cell.runs[0];
        assert_eq!(run.status, Status::Ok, "{}", cell.id);
        let s = run.measured().unwrap();
        // One second at RATE: exactly RATE requests, each answered after the 200 ms delay.
        assert_eq!(s.samples, rate, "{}", cell.id);
        assert_eq!(s.errors, 0, "{}", cell.id);
        assert!(s.min_ms >= 200.0, "{}: {}", cell.id, s.min_ms);
        assert_eq!(run.metrics.get("success_pct"), Some(&100.0));
        assert!(
            run.metrics.contains_key("rss_mb"),
            "the gateway was watched"
        );
        assert!(run
            .text
            .as_deref()
            .unwrap_or_default()
            .contains("[200ms, 300ms]"));
        assert_eq!(run.commands.len(), 3, "echo, gateway, load");
    }

    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| 50 | 50 | 100.00 |"), "{md}");
    assert!(md.contains("in vegeta's text layout"));
    assert!(md.contains("## Next to the published figures"));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("<table>"));
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http") && !html.contains("<script"),
        "self-contained: nothing to fetch, nothing to run"
    );
    assert!(Path::new(&out.join("cells/rate_50/pms/gateway.log")).exists());

    // The reports can be rendered again from results.json alone, the same as the run wrote them.
    std::fs::remove_file(out.join("report.md")).unwrap();
    std::fs::remove_file(out.join("report.html")).unwrap();
    let o = suite(&["--report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("2 cells, 2 runs of async-delay (quick)"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read_to_string(out.join("report.md")).unwrap(), md);
    assert_eq!(
        std::fs::read_to_string(out.join("report.html")).unwrap(),
        html
    );

    // results.json feeds `pms bench compare` directly, one run per side.
    let results = out.join("results.json");
    let side = |cell: &str| format!("{}:{cell}", results.display());
    let o = Command::new(PMS)
        .args(["bench", "compare", &side("rate/50"), &side("rate/500:pms")])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("A         50 "), "{}", text(&o));
    assert!(text(&o).contains("B        500 "), "{}", text(&o));
    let o = Command::new(PMS)
        .args(["bench", "compare", &side("rate/50"), &side("rate/7")])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(64));
    assert!(text(&o).contains("no cell \"rate/7\""), "{}", text(&o));
}

#[test]
fn a_tls_cell_runs_from_a_relative_output_directory() {
    // The JSON→XML scenario over TLS on both hops: the gateway's config names the certificates,
    // which must resolve wherever the suite was started from.
    let dir = tempfile::tempdir().unwrap();
    let o = suite_in(
        dir.path(),
        &[
            "ballerina-rest",
            "--only",
            "h1_transformation",
            "--no-peers",
            "--out",
            "rest",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let res = SuiteResults::read(&dir.path().join("rest")).unwrap();
    let run = &res.cells[0].runs[0];
    assert_eq!(run.status, Status::Ok);
    let s = run.measured().unwrap();
    assert!(s.samples > 0 && s.errors == 0, "{s:?}");
    // The echo sent back the XML the gateway made of the 500-byte JSON, plus its head.
    assert!(s.avg_bytes > 500.0, "{}", s.avg_bytes);
}

#[test]
fn a_component_that_fails_is_recorded_and_the_exit_code_says_so() {
    let dir = tempfile::tempdir().unwrap();
    // A `pms` whose gateway cannot start; everything else is the real binary.
    let wrapper = wrapper_pms(
        dir.path(),
        &format!(
            "#!/bin/sh\nif [ \"$1\" = gateway ]; then echo 'gateway: broken on purpose' >&2; exit 3; fi\nexec {PMS} \"$@\"\n"
        ),
    );
    let out = dir.path().join("rest");
    let o = suite(&[
        "ballerina-rest",
        "--only",
        "h1c_h1c_passthrough",
        "--no-peers",
        "--pms",
        wrapper.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("1 run(s) failed"), "{}", text(&o));
    let res = SuiteResults::read(&out).unwrap();
    let run = &res.cells[0].runs[0];
    match &run.status {
        Status::Failed { error } => assert!(error.contains("broken on purpose"), "{error}"),
        other => panic!("{other:?}"),
    }
    assert!(
        run.metrics.is_empty(),
        "no figures invented for a failed run"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("1 run(s) failed"), "{md}");
    assert!(md.contains("failed: gateway exited"), "{md}");
}

#[test]
fn an_interrupted_run_resumes_where_it_failed_and_keeps_what_it_had() {
    let dir = tempfile::tempdir().unwrap();
    // A `pms` whose gateway fails the second time it is started (the second cell).
    let count = dir.path().join("gateway-starts");
    let wrapper = wrapper_pms(
        dir.path(),
        &format!(
            "#!/bin/sh\nif [ \"$1\" = gateway ]; then\n  n=$(($(cat {count} 2>/dev/null || echo 0) + 1)); echo $n > {count}\n  if [ $n = 2 ]; then echo 'gateway: broken on purpose' >&2; exit 3; fi\nfi\nexec {PMS} \"$@\"\n",
            count = count.display()
        ),
    );
    let out = dir.path().join("delay");
    let args = |extra: &[&str]| {
        let mut a = vec![
            "async-delay",
            "--pms",
            wrapper.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    // From the temporary directory: outside a git checkout there is no commit to compare, so
    // the test does not depend on whether the working tree has changes.
    let run = |extra: &[&str]| {
        let a = args(extra);
        suite_in(
            dir.path(),
            &a.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let first = SuiteResults::read(&out).unwrap();
    assert_eq!(first.cells[0].runs[0].status, Status::Ok);
    assert!(matches!(
        first.cells[1].runs[0].status,
        Status::Failed { .. }
    ));

    // Another profile may not be mixed into these results.
    let o = run(&["--profile", "standard", "--resume"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("async-delay (quick)"), "{}", text(&o));

    // Resumed: the first cell is kept as it was, only the failed one runs again (the gateway's
    // third start, which works).
    let o = run(&["--resume"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("[1/2] rate/50: kept from the earlier run"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read_to_string(&count).unwrap().trim(), "3");
    let resumed = SuiteResults::read(&out).unwrap();
    assert_eq!(resumed.started, first.started);
    assert_eq!(resumed.resumed.len(), 1);
    assert_eq!(
        resumed.cells[0].runs[0].metrics,
        first.cells[0].runs[0].metrics
    );
    assert_eq!(resumed.cells[1].runs[0].status, Status::Ok);
    assert_eq!(
        resumed.cells[1].runs[0].metrics.get("success_pct"),
        Some(&100.0)
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains(", resumed at "), "{md}");
}

fn perms(p: &Path) -> std::fs::Permissions {
    std::fs::metadata(p).unwrap().permissions()
}

/// Removes a throwaway PostgreSQL cluster when dropped, so a failing test leaves none running.
struct Cluster<'a>(&'a Path, std::path::PathBuf);

impl Drop for Cluster<'_> {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(self.0)
            .arg("remove")
            .arg(&self.1)
            .output();
    }
}

#[test]
fn a_database_left_by_a_killed_run_is_replaced_not_reused() {
    use std::io::BufRead as _;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg.sh");
    let dir = tempfile::tempdir().unwrap();
    // Private, as `mktemp -d` makes it: run as root, the throwaway PostgreSQL (run as the
    // `postgres` user) could not be kept under it.
    std::fs::set_permissions(dir.path(), {
        let mut p = perms(dir.path());
        std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o700);
        p
    })
    .unwrap();
    let out = dir.path().join("gateway");
    std::fs::create_dir_all(&out).unwrap();
    let pg = pms_suite::gateway::throwaway_pg_dir(&out.canonicalize().unwrap());
    // What a run killed before its clean-up leaves: a stopped cluster whose demo accounts were
    // seeded with that run's password.
    let o = Command::new("bash")
        .arg(&script)
        .arg("start")
        .arg(&pg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let _cluster = Cluster(&script, pg.clone());
    let url = String::from_utf8_lossy(&o.stdout)
        .lines()
        .rev()
        .find(|l| l.starts_with("postgres://"))
        .expect("pg.sh prints the URL")
        .to_owned();
    let mut users = Command::new(PMS)
        .args(["users", "--listen", "127.0.0.1:0", "--database-url", &url])
        .args(["--argon2-m-kib", "64", "--argon2-t", "1"])
        .arg("--data-dir")
        .arg(dir.path().join("users"))
        .env("PMS_SEED_PASSWORD", "Earlier#Run2026")
        .env("PMS_JWT_SECRET", "an-earlier-run-secret-of-32-bytes")
        .env("PMS_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(users.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    users.kill().unwrap();
    users.wait().unwrap();
    assert!(line.contains("Created the demo accounts"), "{line}");
    let o = Command::new("bash")
        .arg(&script)
        .arg("stop")
        .arg(&pg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));

    // This run must start from an empty database, seeded with its own password.
    let o = suite(&[
        "pms-gateway",
        "--only",
        "overview/h1",
        "--pg-script",
        script.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let res = SuiteResults::read(&out).unwrap();
    assert_eq!(res.cells.len(), 1);
    assert_eq!(res.cells[0].runs[0].status, Status::Ok);
    assert!(!pg.exists(), "the run removes its cluster at the end");
    // Durable by default, as an operator runs it, and the report says so.
    let db = res.database.as_deref().unwrap_or_default();
    assert!(db.contains("durable"), "{db}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("- Database: throwaway PostgreSQL, durable"),
        "{md}"
    );
}

/// `pg.sh start --durable` runs PostgreSQL with fsync and synchronous commits on; without it,
/// off (the tests' cluster).
#[test]
fn pg_sh_starts_a_durable_cluster_when_asked() {
    if pms_testkit::pg::skipped() {
        eprintln!("skipped: PostgreSQL tests are switched off");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg.sh");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), {
        let mut p = perms(dir.path());
        std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
        p
    })
    .unwrap();
    let pg = dir.path().join("pg");
    for (flags, fsync) in [(&["--durable"][..], "on"), (&[][..], "off")] {
        let o = Command::new("bash")
            .arg(&script)
            .arg("start")
            .arg(&pg)
            .args(flags)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        let _cluster = Cluster(&script, pg.clone());
        let opts = std::fs::read_to_string(pg.join("data/postmaster.opts")).unwrap();
        for setting in ["fsync", "synchronous_commit", "full_page_writes"] {
            assert!(
                opts.contains(&format!("{setting}={fsync}")),
                "{flags:?}: {opts}"
            );
        }
        let o = Command::new("bash")
            .arg(&script)
            .arg("stop")
            .arg(&pg)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    let o = Command::new("bash")
        .arg(&script)
        .args(["start", pg.to_str().unwrap(), "--sideways"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("unknown option --sideways"),
        "{}",
        text(&o)
    );
}

#[test]
fn unknown_suites_profiles_and_filters_are_usage_errors() {
    let o = suite(&["no-such-suite"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(
        text(&o).contains("ballerina-rest"),
        "names the suites: {}",
        text(&o)
    );
    let o = suite(&["ballerina-rest", "--only", "nothing-matches", "--dry-run"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    // A profile the suite does not have: named with the ones it has.
    let o = suite(&["pms-parking", "--profile", "nope", "--dry-run"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(
        text(&o).contains("quick, standard, published, soak"),
        "{}",
        text(&o)
    );
    let o = suite(&["pms-parking", "--profile", "soak", "--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("1 cells"), "{}", text(&o));
    let o = suite(&["ballerina-rest", "--profile", "standard", "--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("96 cells"), "{}", text(&o));
    let dir = tempfile::tempdir().unwrap();
    let o = suite(&["--report", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("results.json"), "{}", text(&o));
}

#[test]
fn sigterm_stops_the_suites_processes_and_keeps_the_finished_cells() {
    let dir = tempfile::tempdir().unwrap();
    // A `pms` whose second load run hangs (after saying so in a file); the echo back-end and
    // the gateway it would load are the real ones.
    let count = dir.path().join("loads");
    let hung = dir.path().join("hung");
    let wrapper = wrapper_pms(
        dir.path(),
        &format!(
            "#!/bin/sh\nif [ \"$1\" = bench ]; then\n  n=$(($(cat {count} 2>/dev/null || echo 0) + 1)); echo $n > {count}\n  if [ $n = 2 ]; then echo $$ > {hung}; exec sleep 600; fi\nfi\nexec {PMS} \"$@\"\n",
            count = count.display(),
            hung = hung.display()
        ),
    );
    let out = dir.path().join("delay");
    let mut suite = Command::new(PMS)
        .args(["bench", "suite", "async-delay", "--pms"])
        .arg(&wrapper)
        .arg("--out")
        .arg(&out)
        .current_dir(dir.path())
        .env("PMS_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while !hung.exists() {
        if let Some(status) = suite.try_wait().unwrap() {
            let o = suite.wait_with_output().unwrap();
            panic!(
                "the suite ended ({status}) before its second load: {}",
                text(&o)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The echo back-end, the gateway and the hung load.
    let running = pms_suite::procs::children(suite.id());
    assert_eq!(running.len(), 3, "{running:?}");

    let killed = Command::new("kill")
        .arg("-TERM")
        .arg(suite.id().to_string())
        .status()
        .unwrap();
    assert!(killed.success());
    let o = suite.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(128 + 15), "{}", text(&o));
    assert!(text(&o).contains("interrupted by SIGTERM"), "{}", text(&o));
    assert!(text(&o).contains("--resume"), "{}", text(&o));
    for pid in running {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "child {pid} outlived the suite"
        );
    }
    // The first cell is kept; the interrupted one is not recorded, so `--resume` runs it.
    let res = SuiteResults::read(&out).unwrap();
    assert_eq!(res.cells.len(), 1, "{:?}", res.cells);
    assert_eq!(res.cells[0].runs[0].status, Status::Ok);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| 50 | 50 | 100.00 |"), "{md}");
}

#[test]
fn the_parking_suite_drives_cars_in_and_out_without_a_failed_call() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("parking");
    // SQLite only: no PostgreSQL needed (scripts/test.sh runs the whole quick profile, pgbench
    // and PostgreSQL included, for the report check).
    let o = suite(&[
        "pms-parking",
        "--profile",
        "quick",
        "--only",
        "barriers/sqlite",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // The closed-loop cell and the one on a fixed schedule.
    let res = SuiteResults::read(&out).unwrap();
    let ids: Vec<&str> = res.cells.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["barriers/sqlite/4c", "barriers/sqlite/4c/40ps"]);
    for cell in &res.cells {
        let run = &cell.runs[0];
        assert_eq!(run.status, Status::Ok, "{}", cell.id);
        let m = |k: &str| run.metrics.get(k).copied().unwrap_or(f64::NAN);
        assert!(m("throughput") > 0.0, "{}: {:?}", cell.id, run.metrics);
        assert_eq!(m("error_pct"), 0.0, "{}: {:?}", cell.id, run.extra);
        // Every exit waited for its invoice and showed the price; the quote client was answered.
        assert!(
            m("cycles_per_s") > 0.0 && m("priced_pct") > 0.0,
            "{}: {:?}",
            cell.id,
            run.metrics
        );
        assert!(m("quote_p99_ms") > 0.0, "{}: {:?}", cell.id, run.metrics);
        let extra = run.extra.as_ref().unwrap();
        assert_eq!(extra["quote_failures"], 0, "{}: {extra}", cell.id);
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("Barrier transactions next to pgbench"),
        "{report}"
    );
}

/// The soak cell, in seconds: barriers on a schedule, a customer signing in and a person using
/// the front office beside them, figures per window and the memory of `pms up` read through the
/// run, and the report's table of them.
#[test]
fn the_soak_reports_people_and_memory_window_by_window() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("soak");
    let o = suite(&[
        "pms-parking",
        "--profile",
        "quick",
        "--only",
        "soak/sqlite",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let res = SuiteResults::read(&out).unwrap();
    assert_eq!(res.cells.len(), 1);
    let run = &res.cells[0].runs[0];
    assert_eq!(run.status, Status::Ok);
    let extra = run.extra.as_ref().unwrap();
    let windows = extra["soak_windows"].as_array().expect("windows");
    assert!(windows.len() >= 2, "{extra}");
    let sum = |series: &str, field: &str| -> u64 {
        windows
            .iter()
            .map(|w| w[series][field].as_u64().unwrap())
            .sum()
    };
    assert!(sum("barriers", "ok") > 0, "{extra}");
    assert_eq!(sum("barriers", "failed"), 0, "{extra}");
    assert!(sum("sign_ins", "ok") > 0, "{extra}");
    assert_eq!(sum("sign_ins", "failed"), 0, "{extra}");
    // The sign-in form, signing in, the account and the visits pages.
    assert!(sum("pages", "ok") >= 4, "{extra}");
    assert_eq!(sum("pages", "failed"), 0, "{extra}");
    let rss = extra["soak_rss"].as_array().expect("memory readings");
    assert!(
        rss.iter()
            .any(|s| s["process"] == "pms up" && s["mb"].as_f64().unwrap() > 1.0),
        "{extra}"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("Soak: "), "{md}");
    assert!(md.contains("pms up RSS (MB)"), "{md}");
}

/// The distributed cell: users, parks, payments and the gateway as processes of their own, their
/// events through a nats-server, loaded like `pms up`: no failed call, every invoice settled,
/// the lag sampled.
#[test]
fn the_parking_suite_runs_the_services_apart_over_nats() {
    if pms_testkit::pg::skipped() || pms_testkit::nats::skipped() {
        eprintln!("skipped: PostgreSQL or NATS tests are switched off");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("parking");
    let url = pms_testkit::pg::shared().fresh_database();
    let o = suite(&[
        "pms-parking",
        "--profile",
        "quick",
        "--only",
        "barriers/distributed/4c",
        "--database-url",
        &url,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let res = SuiteResults::read(&out).unwrap();
    let ids: Vec<&str> = res.cells.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        ["barriers/distributed/4c", "barriers/distributed/4c/40ps"]
    );
    for cell in &res.cells {
        let run = &cell.runs[0];
        assert_eq!(run.status, Status::Ok, "{}", cell.id);
        let m = |k: &str| run.metrics.get(k).copied().unwrap_or(f64::NAN);
        assert!(m("throughput") > 0.0, "{}: {:?}", cell.id, run.metrics);
        assert_eq!(m("error_pct"), 0.0, "{}: {:?}", cell.id, run.extra);
        assert!(m("settled_ms") >= 0.0, "{}: {:?}", cell.id, run.metrics);
        assert!(m("lag_max") >= 0.0, "{}: {:?}", cell.id, run.metrics);
        // Each component ran as a process of its own, with its own log.
        let cell_dir = out
            .join("cells")
            .join(cell.id.replace('/', "_"))
            .join("pms");
        for log in ["nats", "users", "parks", "payments", "gateway"] {
            assert!(
                cell_dir.join(format!("{log}.log")).is_file(),
                "{}: no {log}.log",
                cell.id
            );
        }
        assert!(!cell_dir.join("up.log").exists(), "{}: not pms up", cell.id);
    }
}

#[test]
fn an_imported_run_joins_a_suite_report_beside_pms() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("passthrough");
    let o = suite(&[
        "ballerina-passthrough",
        "--no-peers",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let cell = "h1c_h1c_passthrough/8u/50B/0ms";
    // A vegeta run written as `vegeta encode --to json` writes it.
    let file = dir.path().join("vegeta.json");
    let lines: Vec<String> = (0..40)
        .map(|i| {
            format!(
                r#"{{"attack":"","seq":{i},"code":200,"timestamp":"2026-11-29T10:00:{:02}.{:03}Z","latency":{},"bytes_out":50,"bytes_in":50,"error":"","body":null,"method":"POST","url":"http://127.0.0.1:9090/","headers":{{}}}}"#,
                i / 10,
                (i % 10) * 100,
                40_000_000 + i * 100_000
            )
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let o = Command::new(PMS)
        .args(["bench", "import"])
        .arg(&file)
        .arg("--into")
        .arg(&out)
        .args(["--cell", cell, "--system", "vegeta file"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let res = SuiteResults::read(&out).unwrap();
    let c = res.cells.iter().find(|c| c.id == cell).unwrap();
    let servers: Vec<&str> = c.runs.iter().map(|r| r.server.as_str()).collect();
    assert_eq!(servers, ["pms", "vegeta file"]);
    assert_eq!(c.runs[1].output.as_ref().unwrap().labels[0].samples, 40);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    // The hypothesis tests take the imported run as one more system of the cell.
    let row = md
        .lines()
        .find(|l| l.starts_with(&format!("| {cell}: pms vs vegeta file |")))
        .unwrap_or_else(|| panic!("no test of pms against the file: {md}"));
    assert!(
        row.contains("Wilcoxon rank-sum") || row.contains("Welch's t"),
        "{row}"
    );
    assert!(
        md.contains(" — vegeta file |") || md.contains("| vegeta file |"),
        "{md}"
    );
    // A cell that is not there is a usage error naming the cells.
    let o = Command::new(PMS)
        .args(["bench", "import"])
        .arg(&file)
        .arg("--into")
        .arg(&out)
        .args(["--cell", "nope", "--system", "x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains(cell), "{}", text(&o));
}
