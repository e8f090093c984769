//! One profile of a suite expanded into cells — ids, parameters, the systems each runs against,
//! and what it should take — before anything starts, so a run can say how long it will be and
//! `--only` can pick cells by id.

use std::time::Duration;

use super::spec::{Backend, Hop, JmeterConfig, K6Config, Scenario, StressSpec, SuiteSpec};
use super::SuiteError;

/// Time to start and stop a cell's components, on top of its load.
const SETUP: Duration = Duration::from_secs(4);

/// The cells of one profile.
#[derive(Debug, Clone)]
pub struct Plan {
    /// In run order.
    pub cells: Vec<Cell>,
    /// Sum of the cells' estimates.
    pub expected: Duration,
}

/// One cell.
#[derive(Debug, Clone)]
pub struct Cell {
    /// Id (`h1c_h1c_passthrough/100u/500B/0ms`, `k6/cfg1/h2`).
    pub id: String,
    /// Table it belongs to.
    pub part: String,
    /// Display name.
    pub name: String,
    /// Parameters in display order.
    pub params: Vec<(String, String)>,
    /// `pms` first, then the peers.
    pub servers: Vec<String>,
    /// What to do.
    pub job: Job,
    /// Estimated wall time, all servers.
    pub expected: Duration,
}

/// What a cell does.
#[derive(Debug, Clone)]
pub enum Job {
    /// A closed-model run through a reverse proxy to the echo back-end.
    Proxy(ProxyJob),
    /// A measurement of `getAllUsers` through the gateway.
    Gateway(GatewayJob),
    /// An open-model run through the gateway to a slow back-end.
    Delay(DelayJob),
    /// Barrier cycles through `pms up`, or `pgbench` on the same PostgreSQL.
    Parking(ParkingJob),
}

/// One point of the proxy matrix.
#[derive(Debug, Clone)]
pub struct ProxyJob {
    /// The scenario.
    pub scenario: Scenario,
    /// Concurrent users.
    pub users: usize,
    /// Request body, bytes.
    pub size: usize,
    /// Back-end delay, ms.
    pub delay_ms: u64,
    /// Whole run.
    pub duration: Duration,
    /// Warm-up (reported apart).
    pub warmup: Duration,
    /// Ramp.
    pub ramp_up: Duration,
    /// Response timeout.
    pub timeout: Duration,
}

/// The dissertation's measurements.
#[derive(Debug, Clone)]
pub enum GatewayJob {
    /// A JMeter thread group.
    Jmeter(JmeterConfig, Hop),
    /// The k6 load test.
    K6(K6Config, Hop),
    /// The k6 stress test.
    Stress(StressSpec, Hop),
    /// Start-up of `gateway` or `users`, several times.
    Startup(String, usize),
    /// One request, broken down.
    Overview(Hop),
}

/// One rate against the slow back-end.
#[derive(Debug, Clone)]
pub struct DelayJob {
    /// Requests per second.
    pub rate: f64,
    /// Back-end delay, ms.
    pub delay_ms: u64,
    /// Attack length.
    pub duration: Duration,
    /// Per-request timeout.
    pub timeout: Duration,
}

/// What a parking cell loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkingLoad {
    /// Barrier clients through `pms up` on this database.
    Barriers(Backend),
    /// `pgbench`'s built-in TPC-B-like transaction on the suite's PostgreSQL.
    Pgbench,
}

/// One parking cell.
#[derive(Debug, Clone)]
pub struct ParkingJob {
    /// What runs.
    pub load: ParkingLoad,
    /// Concurrent barrier clients (or pgbench clients).
    pub clients: usize,
    /// Whole run.
    pub duration: Duration,
    /// Of which warm-up.
    pub warmup: Duration,
    /// `pgbench -i -s`.
    pub pgbench_scale: u32,
    /// Barrier calls per second offered on a fixed schedule; `None`: each client calls again
    /// as soon as it has its answer.
    pub rate: Option<f64>,
    /// A soak ([`crate::soak`]): people beside the barriers, and the figures per window of
    /// this length.
    pub soak_window: Option<Duration>,
    /// `pms up --outbox-retention` (`None`: its default).
    pub outbox_retention: Option<Duration>,
}

/// `h1`/`h2` as the reports name them.
pub fn hop_name(h: Hop) -> &'static str {
    match h {
        Hop::H1c => "h1c",
        Hop::H1 => "h1",
        Hop::H2 => "h2",
        Hop::H2c => "h2c",
        Hop::Auto => "auto",
    }
}

fn protocol_label(h: Hop) -> &'static str {
    match h {
        Hop::H2 | Hop::H2c => "HTTP/2",
        _ => "HTTP/1.1",
    }
}

/// The JMeter groups as published ran cleartext; the TLS rows are extra and say so.
fn jmeter_protocol_label(h: Hop) -> &'static str {
    match h {
        Hop::H1c => "HTTP/1.1",
        Hop::H2c => "HTTP/2 (h2c)",
        Hop::H1 => "HTTP/1.1 over TLS (not published)",
        Hop::H2 | Hop::Auto => "HTTP/2 over TLS (not published)",
    }
}

/// Expands `profile` of `spec`; keeps the cells whose id contains one of `only` (all when
/// empty); adds the scenarios' peers when `peers` is set.
///
/// # Errors
/// An unknown profile, or an `--only` that matches nothing.
pub fn plan(
    spec: &SuiteSpec,
    profile: &str,
    only: &[String],
    peers: bool,
) -> Result<Plan, SuiteError> {
    let unknown = || {
        SuiteError::Usage(format!(
            "suite {} has no profile {profile:?} (profiles: {})",
            spec.name,
            spec.profiles().join(", ")
        ))
    };
    let mut cells = Vec::new();
    if let Some(proxy) = &spec.proxy {
        let p = proxy.profiles.get(profile).ok_or_else(unknown)?;
        for s in &proxy.scenarios {
            if p.scenarios.as_ref().is_some_and(|ids| !ids.contains(&s.id)) {
                continue;
            }
            for &users in &p.users {
                for &size in &p.sizes {
                    for &delay_ms in &p.delays_ms {
                        let mut servers = vec!["pms".to_owned()];
                        if peers {
                            servers.extend(s.peers.iter().cloned());
                        }
                        let expected = (p.duration + SETUP) * servers.len() as u32;
                        cells.push(Cell {
                            id: format!("{}/{users}u/{size}B/{delay_ms}ms", s.id),
                            part: "proxy".into(),
                            name: s.name.clone(),
                            params: vec![
                                ("Concurrent Users".into(), users.to_string()),
                                ("Message Size (Bytes)".into(), size.to_string()),
                                ("Back-end Service Delay (ms)".into(), delay_ms.to_string()),
                            ],
                            servers,
                            job: Job::Proxy(ProxyJob {
                                scenario: s.clone(),
                                users,
                                size,
                                delay_ms,
                                duration: p.duration,
                                warmup: p.warmup,
                                ramp_up: p.ramp_up,
                                timeout: p.timeout,
                            }),
                            expected,
                        });
                    }
                }
            }
        }
    }
    if let Some(g) = &spec.gateway {
        let p = g.profiles.get(profile).ok_or_else(unknown)?;
        let gw = |id: String, part: &str, name: String, params, job, expected| Cell {
            id,
            part: part.into(),
            name,
            params,
            servers: vec!["pms".into()],
            job: Job::Gateway(job),
            expected,
        };
        for cfg in &p.jmeter {
            for &h in &p.jmeter_protocols {
                let run = cfg.duration.min(cfg.ramp_up + Duration::from_secs(2));
                cells.push(gw(
                    format!("jmeter/cfg{}/{}", cfg.name, hop_name(h)),
                    "jmeter",
                    format!("Configuration {}", cfg.name),
                    vec![
                        ("Protocol".into(), jmeter_protocol_label(h).into()),
                        ("Configuration".into(), cfg.name.clone()),
                        ("Users".into(), cfg.users.to_string()),
                    ],
                    GatewayJob::Jmeter(cfg.clone(), h),
                    run + SETUP,
                ));
            }
        }
        for cfg in &p.jmeter_stress {
            for h in [Hop::H1c, Hop::H2c] {
                let run = cfg.duration.min(cfg.ramp_up + Duration::from_secs(2));
                cells.push(gw(
                    format!("jmeter-stress/{}u/{}", cfg.users, hop_name(h)),
                    "jmeter-stress",
                    format!("System stress test, {} users", cfg.users),
                    vec![
                        ("Protocol".into(), jmeter_protocol_label(h).into()),
                        ("Users".into(), cfg.users.to_string()),
                    ],
                    GatewayJob::Jmeter(cfg.clone(), h),
                    run + SETUP,
                ));
            }
        }
        for cfg in &p.k6 {
            for &h in &p.protocols {
                cells.push(gw(
                    format!("k6/cfg{}/{}", cfg.name, hop_name(h)),
                    "k6",
                    format!("Configuration {}", cfg.name),
                    vec![
                        ("Protocol".into(), protocol_label(h).into()),
                        ("Configuration".into(), cfg.name.clone()),
                        ("VUs".into(), cfg.users.to_string()),
                    ],
                    GatewayJob::K6(cfg.clone(), h),
                    cfg.duration + SETUP,
                ));
            }
        }
        for &h in &p.protocols {
            cells.push(gw(
                format!("overview/{}", hop_name(h)),
                "overview",
                "One request".into(),
                vec![("Protocol".into(), protocol_label(h).into())],
                GatewayJob::Overview(h),
                SETUP,
            ));
        }
        for component in ["gateway", "users"] {
            cells.push(gw(
                format!("startup/{component}"),
                "startup",
                format!("Start-up of the {component}"),
                vec![("Runs".into(), p.startup_runs.to_string())],
                GatewayJob::Startup(component.into(), p.startup_runs),
                Duration::from_secs(1) * p.startup_runs as u32 + SETUP,
            ));
        }
        for &h in &p.protocols {
            cells.push(gw(
                format!("stress/{}", hop_name(h)),
                "stress",
                "Stress test".into(),
                vec![
                    ("Protocol".into(), protocol_label(h).into()),
                    (
                        "Users added per second".into(),
                        p.stress.add_per_s.to_string(),
                    ),
                ],
                GatewayJob::Stress(p.stress.clone(), h),
                p.stress.max_duration + SETUP,
            ));
        }
    }
    if let Some(d) = &spec.delay {
        let p = d.profiles.get(profile).ok_or_else(unknown)?;
        for &rate in &p.rates {
            cells.push(Cell {
                id: format!("rate/{rate}"),
                part: "delay".into(),
                name: format!("{rate} req/s against a {} ms back-end", p.delay_ms),
                params: vec![
                    ("Rate (req/s)".into(), rate.to_string()),
                    ("Back-end delay (ms)".into(), p.delay_ms.to_string()),
                ],
                servers: vec!["pms".into()],
                job: Job::Delay(DelayJob {
                    rate,
                    delay_ms: p.delay_ms,
                    duration: p.duration,
                    timeout: p.timeout,
                }),
                expected: p.duration + p.timeout + SETUP,
            });
        }
    }
    if let Some(k) = &spec.parking {
        let p = k.profiles.get(profile).ok_or_else(unknown)?;
        let job = |load, clients, rate| {
            Job::Parking(ParkingJob {
                load,
                clients,
                duration: p.duration,
                warmup: p.warmup,
                pgbench_scale: p.pgbench_scale,
                rate,
                soak_window: None,
                outbox_retention: None,
            })
        };
        let params = |database: &str, clients: usize| {
            vec![
                ("Database".into(), database.into()),
                ("Clients".into(), clients.to_string()),
            ]
        };
        // pms up, customers registered and their events applied.
        let barrier_setup = |clients: usize| SETUP + Duration::from_millis(clients as u64 * 20);
        for &clients in &p.barriers {
            let mut loads = Vec::new();
            if p.backends.iter().any(|b| b.on_postgres()) {
                loads.push(ParkingLoad::Pgbench);
            }
            loads.extend(p.backends.iter().map(|b| ParkingLoad::Barriers(*b)));
            for load in loads {
                let (id, name, database, setup) = match load {
                    ParkingLoad::Pgbench => (
                        format!("pgbench/{clients}c"),
                        "pgbench (TPC-B-like)".to_owned(),
                        Backend::Postgres.label(),
                        // pgbench -i at the profile's scale.
                        SETUP + Duration::from_secs(u64::from(p.pgbench_scale) / 4),
                    ),
                    ParkingLoad::Barriers(b) => (
                        format!("barriers/{}/{clients}c", b.id()),
                        "Barrier cycles through the gateway".to_owned(),
                        b.label(),
                        barrier_setup(clients),
                    ),
                };
                cells.push(Cell {
                    id,
                    part: "parking".into(),
                    name,
                    params: params(database, clients),
                    servers: vec!["pms".into()],
                    job: job(load, clients, None),
                    expected: p.duration + setup,
                });
            }
        }
        for paced in &p.paced {
            for &b in &p.backends {
                cells.push(Cell {
                    id: format!("barriers/{}/{}c/{}ps", b.id(), paced.barriers, paced.rate),
                    part: "parking".into(),
                    name: format!("Barrier cycles at {} calls/s", paced.rate),
                    params: [
                        params(b.label(), paced.barriers),
                        vec![("Offered".into(), format!("{}/s", paced.rate))],
                    ]
                    .concat(),
                    servers: vec!["pms".into()],
                    job: job(ParkingLoad::Barriers(b), paced.barriers, Some(paced.rate)),
                    expected: p.duration + barrier_setup(paced.barriers),
                });
            }
        }
        if let Some(soak) = &p.soak {
            for &b in &p.backends {
                cells.push(Cell {
                    id: format!("soak/{}/{}c/{}ps", b.id(), soak.barriers, soak.rate),
                    part: "parking".into(),
                    name: format!(
                        "Soak: barriers at {} calls/s, quotes, displays, sign-ins and front-office pages",
                        soak.rate
                    ),
                    params: [
                        params(b.label(), soak.barriers),
                        vec![
                            ("Offered".into(), format!("{}/s", soak.rate)),
                            ("Window".into(), pms_bench::duration::show(soak.window)),
                        ],
                    ]
                    .concat(),
                    servers: vec!["pms".into()],
                    job: Job::Parking(ParkingJob {
                        load: ParkingLoad::Barriers(b),
                        clients: soak.barriers,
                        duration: p.duration,
                        warmup: p.warmup,
                        pgbench_scale: p.pgbench_scale,
                        rate: Some(soak.rate),
                        soak_window: Some(soak.window),
                        outbox_retention: soak.outbox_retention,
                    }),
                    expected: p.duration + barrier_setup(soak.barriers),
                });
            }
        }
    }

    if !only.is_empty() {
        cells.retain(|c| only.iter().any(|o| c.id.contains(o.as_str())));
        if cells.is_empty() {
            return Err(SuiteError::Usage(format!(
                "--only {}: no cell of {} ({profile}) matches",
                only.join(", "),
                spec.name
            )));
        }
    }
    let expected = cells.iter().map(|c| c.expected).sum();
    Ok(Plan { cells, expected })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_rest_matrix_is_scenarios_by_users_by_sizes_with_peers() {
        let spec = super::super::load("ballerina-rest").unwrap();
        let plan = plan(&spec, "standard", &[], true).unwrap();
        let scenarios = spec.proxy.as_ref().unwrap().scenarios.len();
        assert_eq!(scenarios, 8);
        assert_eq!(
            plan.cells.len(),
            8 * 4 * 3,
            "8 scenarios × 4 user counts × 3 sizes"
        );
        let first = &plan.cells[0];
        assert_eq!(first.id, "h1c_h1c_passthrough/100u/500B/0ms");
        assert_eq!(first.servers, ["pms", "nginx", "haproxy"]);
        let transform = plan
            .cells
            .iter()
            .find(|c| c.id.starts_with("h1c_transformation/"))
            .unwrap();
        assert_eq!(transform.servers, ["pms"], "peers cannot transform");
        let without = super::plan(&spec, "standard", &[], false).unwrap();
        assert!(without.cells.iter().all(|c| c.servers == ["pms"]));
        assert!(without.expected < plan.expected);
    }

    #[test]
    fn parking_cells_put_pgbench_before_the_barriers_at_each_client_count() {
        let spec = super::super::load("pms-parking").unwrap();
        let plan = plan(&spec, "standard", &[], false).unwrap();
        let ids: Vec<&str> = plan.cells.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids[..3],
            [
                "pgbench/10c",
                "barriers/postgres/10c",
                "barriers/sqlite/10c"
            ]
        );
        assert!(ids.contains(&"barriers/postgres/100c"), "{ids:?}");
        assert!(plan.cells.iter().all(|c| c.part == "parking"));
    }

    #[test]
    fn only_filters_by_id_and_must_match_something() {
        let spec = super::super::load("ballerina-rest").unwrap();
        let plan = plan(&spec, "standard", &["h2_h2_passthrough/100u".into()], false).unwrap();
        assert_eq!(plan.cells.len(), 3);
        assert!(super::plan(&spec, "standard", &["nothing".into()], false).is_err());
        assert!(super::plan(&spec, "fast", &[], false).is_err());
    }
}
