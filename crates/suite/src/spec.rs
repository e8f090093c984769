//! What a suite file says: the common header, one kind-specific section (`[proxy]`,
//! `[gateway]`, `[delay]` or `[parking]`) with its scenarios and profiles, and the published figures to set
//! PMS's next to. Only parsing and checking live here; nothing runs.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

/// A suite, as written in `config/suites/NAME.toml`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteSpec {
    /// Short name (`ballerina-rest`).
    pub name: String,
    /// Heading of the report.
    pub title: String,
    /// What the suite reproduces, for the report's first paragraph.
    pub about: String,
    /// Where the published figures come from.
    pub published: Published,
    /// The passthrough/transformation matrix through a reverse proxy.
    pub proxy: Option<ProxySpec>,
    /// `getAllUsers` through the gateway with the users service and PostgreSQL behind it.
    pub gateway: Option<GatewaySpec>,
    /// A slow back-end behind the gateway under an open-model load.
    pub delay: Option<DelaySpec>,
    /// Barrier clients driving parking visits through `pms up`, beside `pgbench`.
    pub parking: Option<ParkingSpec>,
    /// Published figures, one entry per cell and system.
    #[serde(default)]
    pub reference: Vec<Reference>,
}

/// Where the published figures come from and what they ran on.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Published {
    /// The report.
    pub source: String,
    /// The load tool and how it was driven.
    pub tool: String,
    /// The machines.
    pub hardware: String,
}

/// One published row: a system's figures for one of the suite's cells.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// The cell id it matches (`h1c_h1c_passthrough/100u/500B/0ms`).
    pub cell: String,
    /// The system measured (`Ballerina Swan Lake`, `Spring Boot`).
    pub who: String,
    /// Metric name → value, in the units of [`super::metrics`].
    pub metrics: BTreeMap<String, f64>,
}

/// `[proxy]`: scenarios × users × message sizes × back-end delays.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProxySpec {
    /// The scenarios, in report order.
    pub scenarios: Vec<Scenario>,
    /// `quick`, `standard`, `published`.
    pub profiles: BTreeMap<String, ProxyProfile>,
}

/// A protocol on one hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Hop {
    /// HTTP/1.1 cleartext.
    H1c,
    /// HTTP/1.1 over TLS.
    H1,
    /// HTTP/2 over TLS (ALPN).
    H2,
    /// HTTP/2 cleartext, prior knowledge.
    H2c,
    /// Whatever ALPN settles (the gateway's `auto`).
    Auto,
}

impl Hop {
    /// Whether the hop runs over TLS.
    pub fn tls(self) -> bool {
        matches!(self, Hop::H1 | Hop::H2 | Hop::Auto)
    }
}

/// One scenario of the proxy matrix.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Id used in cell ids and `--only` (`h1c_h1c_passthrough`).
    pub id: String,
    /// The published display name.
    pub name: String,
    /// Client → proxy: `h1c`, `h1` or `h2`.
    pub client: Hop,
    /// Proxy → back-end: `h1c`, `h1`, `h2`, `h2c` or `auto`.
    pub upstream: Hop,
    /// The echo back-end: `h1c` (cleartext, HTTP/1.1 only), `h1` (TLS, HTTP/1.1 only) or `h2`
    /// (TLS offering h2 and http/1.1).
    pub backend: Hop,
    /// JSON→XML on the way (PMS only; the peers cannot).
    #[serde(default)]
    pub transform: bool,
    /// Peers that can play this scenario (`nginx`, `haproxy`).
    #[serde(default)]
    pub peers: Vec<String>,
}

/// A proxy profile: the matrix and the load shape.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyProfile {
    /// What the profile is for.
    pub about: String,
    /// Scenario ids to run (default: all).
    pub scenarios: Option<Vec<String>>,
    /// Concurrent users.
    pub users: Vec<usize>,
    /// Message sizes, bytes.
    pub sizes: Vec<usize>,
    /// Back-end delays, ms.
    pub delays_ms: Vec<u64>,
    /// Whole run per cell.
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub duration: Duration,
    /// Of which warm-up (reported apart).
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub warmup: Duration,
    /// Linear ramp of the users (inside the warm-up).
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub ramp_up: Duration,
    /// Response timeout (published: 30 s).
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub timeout: Duration,
}

/// `[gateway]`: the dissertation's measurements of `getAllUsers`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySpec {
    /// `quick`, `standard`, `published`.
    pub profiles: BTreeMap<String, GatewayProfile>,
}

/// A gateway profile.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayProfile {
    /// What the profile is for.
    pub about: String,
    /// Client protocols over TLS for the k6 tests and the one-request view: `h1` and/or `h2`.
    pub protocols: Vec<Hop>,
    /// Client protocols of the JMeter thread groups: the published runs used cleartext (`h1c`,
    /// and `h2c` for the HTTP/2 group); `h1` and `h2` add TLS rows. (Absent from the
    /// `results.json` of earlier builds, whose JMeter cells ran over TLS.)
    #[serde(default)]
    pub jmeter_protocols: Vec<Hop>,
    /// JMeter's "system stress test" thread groups (2,915 and 5,900 users), run over cleartext
    /// HTTP/1.1 and h2c as published.
    #[serde(default)]
    pub jmeter_stress: Vec<JmeterConfig>,
    /// JMeter thread groups (configurations 1 and 2).
    pub jmeter: Vec<JmeterConfig>,
    /// The k6 load test's configurations (1: 10 VUs, 2: 100 VUs); earlier builds wrote one
    /// table, read as configuration 1.
    #[serde(deserialize_with = "one_or_many")]
    pub k6: Vec<K6Config>,
    /// The k6 stress test.
    pub stress: StressSpec,
    /// Start-up runs per component.
    pub startup_runs: usize,
}

/// A JMeter thread group: users over a ramp, each sending `iterations` requests.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct JmeterConfig {
    /// `1`, `2`.
    pub name: String,
    /// Threads.
    pub users: usize,
    /// Ramp-up.
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub ramp_up: Duration,
    /// Scheduler duration (the run ends earlier when every thread is done).
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub duration: Duration,
    /// Loop count per thread.
    pub iterations: u64,
}

/// One table or a list of them.
fn one_or_many<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany<T> {
        Many(Vec<T>),
        One(T),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::Many(v) => v,
        OneOrMany::One(t) => vec![t],
    })
}

fn first_configuration() -> String {
    "1".into()
}

/// k6 VUs in a loop with a think time.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct K6Config {
    /// `1`, `2`.
    #[serde(default = "first_configuration")]
    pub name: String,
    /// VUs.
    pub users: usize,
    /// `sleep()` per iteration.
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub think_time: Duration,
    /// Run length.
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub duration: Duration,
}

/// Users added at a pace until the first failure.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StressSpec {
    /// Users added per second.
    pub add_per_s: f64,
    /// Think time per iteration.
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub think_time: Duration,
    /// Most users.
    pub max_users: usize,
    /// Longest run.
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub max_duration: Duration,
}

/// `[delay]`: the Spring Boot async study's load against a slow back-end.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DelaySpec {
    /// `quick`, `standard`, `published`.
    pub profiles: BTreeMap<String, DelayProfile>,
}

/// A delay profile.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DelayProfile {
    /// What the profile is for.
    pub about: String,
    /// Back-end delay, ms.
    pub delay_ms: u64,
    /// Arrival rates, requests per second (one cell each).
    pub rates: Vec<f64>,
    /// Attack length.
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub duration: Duration,
    /// Per-request timeout.
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub timeout: Duration,
}

/// `[parking]`: entrance→exit cycles at the barriers, and the database's own limit.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ParkingSpec {
    /// `quick`, `standard`, `published`.
    pub profiles: BTreeMap<String, ParkingProfile>,
}

/// The system a parking cell loads: `pms up` on a database, or the services apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// `pms up` on a PostgreSQL (the suite's throwaway one, or `--database-url`), with
    /// `pgbench` beside.
    Postgres,
    /// `pms up`'s default SQLite files.
    Sqlite,
    /// The distributed mode: `pms users`, `pms parks`, `pms payments` and `pms gateway` as
    /// processes of their own, on the same PostgreSQL, their events through a `nats-server`.
    Distributed,
}

impl Backend {
    /// `postgres`, `sqlite`, `distributed`: the name in cell ids.
    pub fn id(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
            Backend::Distributed => "distributed",
        }
    }

    /// Whether it runs on the suite's PostgreSQL (and so has `pgbench` beside it).
    pub fn on_postgres(self) -> bool {
        matches!(self, Backend::Postgres | Backend::Distributed)
    }

    /// The name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Backend::Postgres => "PostgreSQL",
            Backend::Sqlite => "SQLite",
            Backend::Distributed => "PostgreSQL, services apart over NATS",
        }
    }
}

/// A parking profile.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ParkingProfile {
    /// What the profile is for.
    pub about: String,
    /// Concurrent barrier clients (one cell each, per database).
    pub barriers: Vec<usize>,
    /// The databases, in report order.
    pub backends: Vec<Backend>,
    /// Whole run per cell.
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub duration: Duration,
    /// Of which warm-up (not measured).
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub warmup: Duration,
    /// `pgbench -i -s`: the TPC-B-like tables' scale (at least the largest client count, as
    /// pgbench advises, so branches do not become the bottleneck).
    pub pgbench_scale: u32,
    /// Barrier cells at a fixed offered rate (one per pair, per database), beside the
    /// closed-loop ones: latency at a given load rather than at saturation.
    #[serde(default)]
    pub paced: Vec<Paced>,
    /// A soak cell per database: barriers on a fixed schedule with people beside them (sign-ins
    /// and front-office pages), for a long run reported window by window, with the memory of
    /// every process of the system over time.
    #[serde(default)]
    pub soak: Option<Soak>,
}

/// A soak: barrier clients on a fixed schedule, people beside them, figures per window.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Soak {
    /// Barrier clients.
    pub barriers: usize,
    /// Barrier calls per second offered by all of them together.
    pub rate: f64,
    /// The figures are reported per window of this length.
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub window: Duration,
    /// `pms up --outbox-retention`: how long the outboxes keep what every reader has passed
    /// (`None`: the default week). A soak writes in minutes what a site writes in weeks, so a
    /// window scaled down with it holds the outboxes at the size a site's settle at.
    #[serde(
        default,
        deserialize_with = "some_duration",
        serialize_with = "show_some_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub outbox_retention: Option<Duration>,
}

/// Barrier clients calling on a fixed schedule.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Paced {
    /// Barrier clients.
    pub barriers: usize,
    /// Barrier calls per second offered by all of them together.
    pub rate: f64,
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    pms_bench::duration::parse(&text).map_err(serde::de::Error::custom)
}

fn show_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&pms_bench::duration::show(*d))
}

fn some_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

fn show_some_duration<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => show_duration(d, s),
        None => s.serialize_none(),
    }
}

/// A suite file that does not make sense.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Not TOML, or not the schema.
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
    /// Parsed, but inconsistent.
    #[error("{0}")]
    Invalid(String),
}

impl SuiteSpec {
    /// Its profiles: `quick`, `standard` and `published`, first, then any others it defines
    /// (the parking suite's `soak`), by name.
    pub fn profiles(&self) -> Vec<&str> {
        let names: Vec<&str> = match (&self.proxy, &self.gateway, &self.delay, &self.parking) {
            (Some(p), ..) => p.profiles.keys().map(String::as_str).collect(),
            (_, Some(g), ..) => g.profiles.keys().map(String::as_str).collect(),
            (_, _, Some(d), _) => d.profiles.keys().map(String::as_str).collect(),
            (.., Some(k)) => k.profiles.keys().map(String::as_str).collect(),
            _ => Vec::new(),
        };
        let mut ordered: Vec<&str> = super::PROFILES
            .iter()
            .copied()
            .filter(|p| names.contains(p))
            .collect();
        ordered.extend(names.into_iter().filter(|n| !super::PROFILES.contains(n)));
        ordered
    }

    /// Parses and checks a suite file's text.
    ///
    /// # Errors
    /// What is wrong, naming the key.
    pub fn parse(text: &str) -> Result<Self, SpecError> {
        let spec: SuiteSpec = toml::from_str(text)?;
        spec.check()?;
        Ok(spec)
    }

    fn check(&self) -> Result<(), SpecError> {
        let bad = |m: String| Err(SpecError::Invalid(m));
        let kinds = [
            self.proxy.is_some(),
            self.gateway.is_some(),
            self.delay.is_some(),
            self.parking.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return bad("a suite has exactly one of [proxy], [gateway], [delay], [parking]".into());
        }
        let profiles = self.profiles();
        for needed in super::PROFILES {
            if !profiles.contains(needed) {
                return bad(format!("profile {needed:?} is missing"));
            }
        }
        if let Some(proxy) = &self.proxy {
            for (name, p) in &proxy.profiles {
                if let Some(ids) = &p.scenarios {
                    for id in ids {
                        if !proxy.scenarios.iter().any(|s| &s.id == id) {
                            return bad(format!(
                                "proxy.profiles.{name}.scenarios: no scenario {id:?}"
                            ));
                        }
                    }
                }
                if p.warmup >= p.duration {
                    return bad(format!(
                        "proxy.profiles.{name}: warmup must be shorter than duration"
                    ));
                }
                if p.users.contains(&0) || p.sizes.iter().any(|s| *s < pms_payload::MIN_SIZE) {
                    return bad(format!(
                        "proxy.profiles.{name}: users must be > 0 and sizes >= {}",
                        pms_payload::MIN_SIZE
                    ));
                }
            }
            for s in &proxy.scenarios {
                if !matches!(s.client, Hop::H1c | Hop::H1 | Hop::H2) {
                    return bad(format!("scenario {}: client is h1c, h1 or h2", s.id));
                }
                if !matches!(s.backend, Hop::H1c | Hop::H1 | Hop::H2) {
                    return bad(format!("scenario {}: backend is h1c, h1 or h2", s.id));
                }
                if s.upstream.tls() != s.backend.tls() {
                    return bad(format!(
                        "scenario {}: upstream {:?} cannot talk to backend {:?}",
                        s.id, s.upstream, s.backend
                    ));
                }
                for peer in &s.peers {
                    if !super::peers::KNOWN.contains(&peer.as_str()) {
                        return bad(format!("scenario {}: unknown peer {peer:?}", s.id));
                    }
                }
            }
        }
        if let Some(g) = &self.gateway {
            for (name, p) in &g.profiles {
                if p.protocols.iter().any(|h| !matches!(h, Hop::H1 | Hop::H2)) {
                    return bad(format!("gateway.profiles.{name}.protocols: h1 or h2"));
                }
                if p.jmeter_protocols.contains(&Hop::Auto) {
                    return bad(format!(
                        "gateway.profiles.{name}.jmeter_protocols: h1c, h2c, h1 or h2"
                    ));
                }
            }
        }
        if let Some(k) = &self.parking {
            for (name, p) in &k.profiles {
                let cells = !p.barriers.is_empty() || !p.paced.is_empty() || p.soak.is_some();
                if !cells || p.barriers.contains(&0) || p.backends.is_empty() {
                    return bad(format!(
                        "parking.profiles.{name}: backends and barriers (or paced, or soak) must \
                         be given, barriers > 0"
                    ));
                }
                if let Some(soak) = &p.soak {
                    if soak.barriers == 0
                        || !soak.rate.is_finite()
                        || soak.rate <= 0.0
                        || soak.window.is_zero()
                        || soak.window > p.duration.saturating_sub(p.warmup)
                    {
                        return bad(format!(
                            "parking.profiles.{name}.soak: barriers > 0, a rate above 0, and a \
                             window no longer than the measured time"
                        ));
                    }
                }
                if p.warmup >= p.duration {
                    return bad(format!(
                        "parking.profiles.{name}: warmup must be shorter than duration"
                    ));
                }
                if p.pgbench_scale == 0 {
                    return bad(format!("parking.profiles.{name}.pgbench_scale: at least 1"));
                }
                if p.paced
                    .iter()
                    .any(|x| x.barriers == 0 || !x.rate.is_finite() || x.rate <= 0.0)
                {
                    return bad(format!(
                        "parking.profiles.{name}.paced: barriers > 0 and a rate above 0"
                    ));
                }
            }
        }
        for r in &self.reference {
            for m in r.metrics.keys() {
                if super::metrics::describe(m).is_none() {
                    return bad(format!("reference {}: unknown metric {m:?}", r.cell));
                }
            }
        }
        Ok(())
    }
}
