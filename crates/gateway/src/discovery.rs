//! Where each upstream's endpoints come from, and what goes with one set of them.
//!
//! An upstream's endpoints are either listed in its configuration — one [`EndpointSet`] for the
//! gateway's life — or discovered: its `discover.dns` name is resolved at start and every
//! `interval` after, and a resolution that finds other addresses than the last publishes a new
//! [`EndpointSet`] (each address an endpoint `http://address:port`, in address order, at most
//! `max_endpoints`) with its own readiness verdicts and checks. Each worker then builds its
//! clients and pools for the upstream anew (`backend`); requests under way finish on the old
//! ones. A resolution that fails or finds nothing keeps the set there is: a DNS hiccup never
//! empties an upstream. Until a first resolution finds something, the upstream has no endpoint
//! and its requests are answered 502.
//!
//! A Kubernetes headless Service is the intended source: its name resolves to the addresses of
//! its ready pods, so a pod that is replaced, scaled in or not ready leaves the set within an
//! interval, and one that is added joins it.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{Discovery, UpstreamSettings};
use crate::health::Verdicts;
use crate::metrics::Metrics;
use crate::probe;

/// Longest wait for one resolution (the system resolver's own retries included).
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// One set of an upstream's endpoints: its settings with those endpoints, and what the active
/// checks conclude about them.
#[derive(Debug)]
pub(crate) struct EndpointSet {
    /// The upstream's settings, `endpoints` being this set.
    pub(crate) settings: UpstreamSettings,
    /// The active checks' verdicts, by endpoint index.
    pub(crate) verdicts: Arc<Verdicts>,
}

impl EndpointSet {
    fn new(settings: UpstreamSettings) -> Self {
        let verdicts = Arc::new(Verdicts::new(settings.endpoints.len()));
        Self { settings, verdicts }
    }
}

/// One upstream's endpoints as they are now, and the tasks that keep them so.
#[derive(Debug)]
pub(crate) struct Watched {
    /// The current set; it changes only for a discovered upstream.
    pub(crate) current: watch::Receiver<Arc<EndpointSet>>,
    /// The readiness checks (listed endpoints) or the resolver, which owns its checks.
    pub(crate) tasks: Tasks,
}

/// Tasks that end when this is dropped.
#[derive(Debug, Default)]
pub(crate) struct Tasks(pub(crate) Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// What a name resolves to, on a port.
pub(crate) type Lookup = Arc<
    dyn Fn(String, u16) -> Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send>>
        + Send
        + Sync,
>;

/// The system's resolver (`getaddrinfo`: `/etc/hosts`, then DNS, as the machine is set up).
fn system_lookup() -> Lookup {
    Arc::new(|host, port| {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect())
        })
    })
}

/// Starts keeping `s`'s endpoints current, on the caller's runtime: checks their readiness, and
/// for a discovered upstream resolves its name now (waiting at most [`LOOKUP_TIMEOUT`]) and
/// every interval after.
///
/// # Errors
/// When the upstream's TLS trust cannot be loaded for its checks.
pub(crate) async fn watch(
    s: &UpstreamSettings,
    metrics: &Arc<Metrics>,
) -> Result<Watched, pms_net::TlsError> {
    watch_with(s, metrics, system_lookup()).await
}

/// [`watch()`], resolving with `lookup`.
pub(crate) async fn watch_with(
    s: &UpstreamSettings,
    metrics: &Arc<Metrics>,
    lookup: Lookup,
) -> Result<Watched, pms_net::TlsError> {
    let Some(discovery) = s.discovery.clone() else {
        let set = EndpointSet::new(s.clone());
        let checks = probe::spawn(&set.settings, &set.verdicts, metrics)?;
        let (_, current) = watch::channel(Arc::new(set));
        return Ok(Watched {
            current,
            tasks: Tasks(checks),
        });
    };
    // The checks' TLS trust is loaded now, so that a bad one stops the start as it does for
    // listed endpoints, rather than each new set failing later.
    crate::upstream::client_tls(s)?;
    tracing::info!(
        upstream = %s.name,
        name = %discovery.host,
        port = discovery.port,
        interval_ms = discovery.interval.as_millis(),
        "discovering the upstream's endpoints by DNS"
    );
    let mut resolver = Resolver {
        base: s.clone(),
        discovery,
        lookup,
        metrics: Arc::clone(metrics),
        addrs: Vec::new(),
        checks: Tasks::default(),
        failing: false,
    };
    let first = match resolver.resolve().await {
        Some(addrs) => resolver.publish(addrs),
        None => {
            tracing::warn!(
                upstream = %s.name,
                "no endpoint yet: the upstream's requests are answered 502 until its name resolves"
            );
            Arc::new(EndpointSet::new(s.clone()))
        }
    };
    let (tx, current) = watch::channel(first);
    Ok(Watched {
        current,
        tasks: Tasks(vec![tokio::spawn(resolver.follow(tx))]),
    })
}

/// A discovered upstream's resolver.
struct Resolver {
    /// The upstream's settings, with no endpoints.
    base: UpstreamSettings,
    discovery: Discovery,
    lookup: Lookup,
    metrics: Arc<Metrics>,
    /// The addresses of the current set.
    addrs: Vec<SocketAddr>,
    /// The current set's readiness checks.
    checks: Tasks,
    /// Whether the last resolution failed (to log a failing streak once).
    failing: bool,
}

impl Resolver {
    /// Resolves every interval until every receiver is gone, publishing each new set on `tx`.
    async fn follow(mut self, tx: watch::Sender<Arc<EndpointSet>>) {
        let mut tick = tokio::time::interval(self.discovery.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is now, and `watch_with` has just resolved.
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(addrs) = self.resolve().await else {
                continue;
            };
            if addrs != self.addrs && tx.send(self.publish(addrs)).is_err() {
                return;
            }
        }
    }

    /// The addresses the name resolves to now, in order, without repeats, at most
    /// `max_endpoints`; `None` (logged) when the resolution fails or finds nothing.
    async fn resolve(&mut self) -> Option<Vec<SocketAddr>> {
        let d = &self.discovery;
        let found =
            tokio::time::timeout(LOOKUP_TIMEOUT, (self.lookup)(d.host.clone(), d.port)).await;
        let why = match found {
            Ok(Ok(mut addrs)) if !addrs.is_empty() => {
                addrs.sort_unstable();
                addrs.dedup();
                if addrs.len() > d.max_endpoints {
                    tracing::warn!(
                        upstream = %self.base.name,
                        found = addrs.len(),
                        max_endpoints = d.max_endpoints,
                        "the name resolves to more addresses than max_endpoints; the first are used"
                    );
                    addrs.truncate(d.max_endpoints);
                }
                if self.failing {
                    self.failing = false;
                    tracing::info!(upstream = %self.base.name, name = %d.host, "the upstream's name resolves again");
                }
                return Some(addrs);
            }
            Ok(Ok(_)) => "it resolved to no address".to_owned(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {LOOKUP_TIMEOUT:?}"),
        };
        if !self.failing {
            self.failing = true;
            tracing::warn!(
                upstream = %self.base.name,
                name = %d.host,
                error = %why,
                endpoints = self.addrs.len(),
                "resolving the upstream's name failed; its endpoints stay as they were"
            );
        }
        None
    }

    /// Makes `addrs` the current set: logs what changed, drops the readiness gauges of the
    /// endpoints gone, and starts checking the new set.
    fn publish(&mut self, addrs: Vec<SocketAddr>) -> Arc<EndpointSet> {
        let name = &self.base.name;
        let gone: Vec<_> = self.addrs.iter().filter(|a| !addrs.contains(a)).collect();
        let new: Vec<_> = addrs.iter().filter(|a| !self.addrs.contains(a)).collect();
        tracing::info!(
            upstream = %name,
            endpoints = addrs.len(),
            added = ?new,
            removed = ?gone,
            "the upstream's endpoints changed"
        );
        for a in gone {
            self.metrics.forget_endpoint(name, &format!("http://{a}"));
        }
        let mut settings = self.base.clone();
        settings.endpoints = addrs
            .iter()
            .filter_map(|a| match format!("http://{a}").parse::<http::Uri>() {
                Ok(uri) => Some(uri),
                Err(_) => {
                    tracing::warn!(upstream = %name, address = %a, "an address that makes no URL is left out");
                    None
                }
            })
            .collect();
        let set = EndpointSet::new(settings);
        // The old set's checks end here; the new set's verdicts start with every endpoint ready.
        self.checks = match probe::spawn(&set.settings, &set.verdicts, &self.metrics) {
            Ok(checks) => Tasks(checks),
            Err(e) => {
                tracing::error!(upstream = %name, error = %e, "the new endpoints' readiness cannot be checked");
                Tasks::default()
            }
        };
        self.addrs = addrs;
        Arc::new(set)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use super::*;

    /// One scripted resolution: the addresses, or why there are none.
    type Answer = Result<Vec<SocketAddr>, String>;

    /// A resolver that answers from a script, one answer per call, repeating the last.
    #[derive(Clone, Default)]
    pub(crate) struct Script {
        answers: Arc<Mutex<VecDeque<Answer>>>,
        calls: Arc<AtomicUsize>,
    }

    impl Script {
        pub(crate) fn new(answers: Vec<Result<Vec<SocketAddr>, &str>>) -> Self {
            let answers = answers
                .into_iter()
                .map(|a| a.map_err(str::to_owned))
                .collect();
            Self {
                answers: Arc::new(Mutex::new(answers)),
                calls: Arc::default(),
            }
        }

        pub(crate) fn lookup(&self) -> Lookup {
            let script = self.clone();
            Arc::new(move |_, _| {
                script.calls.fetch_add(1, Ordering::SeqCst);
                let mut answers = script.answers.lock().unwrap_or_else(|e| e.into_inner());
                let answer = if answers.len() > 1 {
                    answers.pop_front()
                } else {
                    answers.front().cloned()
                };
                Box::pin(async move {
                    answer
                        .unwrap_or_else(|| Ok(Vec::new()))
                        .map_err(io::Error::other)
                })
            })
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    pub(crate) fn discovered(extra: &str) -> UpstreamSettings {
        let toml = format!(
            "[[listeners]]\nname = \"l\"\nlisten = \"127.0.0.1:0\"\n\
             [[upstreams]]\nname = \"pods\"\n\
             discover = {{ dns = \"http://pods.test:8080\", interval_ms = 100{extra} }}\n\
             [[routes]]\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"pods\"\n"
        );
        let settings = crate::config::parse(&toml, "gw.toml")
            .and_then(|raw| raw.resolve("gw.toml", std::path::Path::new("."), &|_| None))
            .unwrap_or_else(|e| panic!("{e:?}\n{toml}"));
        settings.upstreams.into_iter().next().expect("one upstream")
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("an address")
    }

    fn endpoints(set: &EndpointSet) -> Vec<String> {
        set.settings
            .endpoints
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_set_is_published_only_when_the_addresses_change_and_failures_keep_the_old() {
        let (a, b, c) = (
            addr("10.0.0.1:8080"),
            addr("10.0.0.2:8080"),
            addr("[fd00::3]:8080"),
        );
        let script = Script::new(vec![
            Ok(vec![b, a, a]),
            Err("no such host"),
            Ok(vec![]),
            Ok(vec![a, b]),
            Ok(vec![c, b]),
            Ok(vec![b, c]),
        ]);
        let metrics = Arc::new(Metrics::new());
        let w = watch_with(&discovered(""), &metrics, script.lookup())
            .await
            .expect("watching");
        let mut current = w.current.clone();
        assert_eq!(
            endpoints(&current.borrow_and_update()),
            ["http://10.0.0.1:8080/", "http://10.0.0.2:8080/"],
            "in address order, without repeats"
        );
        // A failure, an empty answer and the same set again publish nothing; a new set does.
        current.changed().await.expect("a new set");
        assert_eq!(script.calls(), 5, "published on the fifth resolution");
        assert_eq!(
            endpoints(&current.borrow_and_update()),
            ["http://10.0.0.2:8080/", "http://[fd00::3]:8080/"]
        );
        // The same addresses in another order are the same set.
        while script.calls() < 8 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!current.has_changed().expect("the resolver runs"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_name_that_does_not_resolve_at_start_leaves_the_upstream_empty_until_it_does() {
        let a = addr("10.0.0.1:8080");
        let script = Script::new(vec![Err("no such host"), Ok(vec![a])]);
        let metrics = Arc::new(Metrics::new());
        let w = watch_with(&discovered(""), &metrics, script.lookup())
            .await
            .expect("watching");
        let mut current = w.current.clone();
        assert!(current.borrow_and_update().settings.endpoints.is_empty());
        current.changed().await.expect("a set");
        assert_eq!(endpoints(&current.borrow()), ["http://10.0.0.1:8080/"]);
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_max_endpoints_are_taken_and_the_gone_ones_leave_the_metrics() {
        let (a, b, c) = (
            addr("10.0.0.1:80"),
            addr("10.0.0.2:80"),
            addr("10.0.0.3:80"),
        );
        let script = Script::new(vec![Ok(vec![c, b, a]), Ok(vec![c])]);
        let metrics = Arc::new(Metrics::new());
        let settings = discovered(", max_endpoints = 2 }\nhealth_check = { path = \"/readyz\"");
        let w = watch_with(&settings, &metrics, script.lookup())
            .await
            .expect("watching");
        let mut current = w.current.clone();
        assert_eq!(
            endpoints(&current.borrow_and_update()),
            ["http://10.0.0.1:80/", "http://10.0.0.2:80/"]
        );
        let gauges = metrics.render();
        assert!(
            gauges.contains("endpoint=\"http://10.0.0.1:80\""),
            "{gauges}"
        );
        current.changed().await.expect("a new set");
        let gauges = metrics.render();
        assert!(
            !gauges.contains("endpoint=\"http://10.0.0.1:80\""),
            "{gauges}"
        );
        assert!(
            !gauges.contains("endpoint=\"http://10.0.0.2:80\""),
            "{gauges}"
        );
    }
}
