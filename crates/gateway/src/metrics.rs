//! Prometheus metrics of one gateway instance (no globals, so tests can run several gateways in
//! one process). Handles for known label sets are created up front and cloned into the places that
//! count, so the request path does no label allocation.

use std::sync::{Arc, OnceLock};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// A label value that clones without allocating.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label(pub Arc<str>);

impl EncodeLabelValue for Label {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&&*self.0, encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteStatus {
    route: Label,
    status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteOnly {
    route: Label,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct UpstreamOnly {
    upstream: Label,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct UpstreamEndpoint {
    upstream: Label,
    endpoint: Label,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ListenerOnly {
    listener: Label,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ListenerResult {
    listener: Label,
    result: &'static str,
}

/// What the fast path counts (`pms_gateway_http1_fast_path_total` by `outcome`).
#[derive(Debug, Clone, Default)]
pub struct FastPathCounters {
    /// Requests it relayed.
    pub relayed: Counter,
    /// Connections it handed to hyper.
    pub handed_over: Counter,
    /// Requests hyper's server received that went out over the fast path's connections.
    pub bridged: Counter,
    /// Request heads it answered with an error and closed on (not HTTP, or too large).
    pub refused: Counter,
}

/// One upstream's counters.
#[derive(Debug, Clone, Default)]
pub struct UpstreamCounters {
    /// Requests sent.
    pub requests: Counter,
    /// Connections opened.
    pub opened: Counter,
    /// Connections that could not be made.
    pub connect_failures: Counter,
    /// Times an endpoint started being skipped.
    pub ejections: Counter,
    /// Requests sent again to another endpoint after a 503 or a connection closed unanswered.
    pub retries: Counter,
}

/// The registry and the metric families.
pub struct Metrics {
    registry: Registry,
    requests: Family<RouteStatus, Counter>,
    duration: Family<RouteOnly, Histogram>,
    upstream_requests: Family<UpstreamOnly, Counter>,
    upstream_opened: Family<UpstreamOnly, Counter>,
    upstream_connect_failures: Family<UpstreamOnly, Counter>,
    upstream_ejections: Family<UpstreamOnly, Counter>,
    upstream_retries: Family<UpstreamOnly, Counter>,
    endpoint_ready: Family<UpstreamEndpoint, Gauge>,
    connections_active: Family<ListenerOnly, Gauge>,
    connections_total: Family<ListenerOnly, Counter>,
    tls_handshakes: Family<ListenerResult, Counter>,
    fast_path: Family<Outcome, Counter>,
    rate_limited: Family<RouteOnly, Counter>,
    access_log_dropped: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every family registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("pms_gateway");
        let requests = Family::<RouteStatus, Counter>::default();
        let duration = Family::<RouteOnly, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.000_1, 2.0, 18))) as fn() -> Histogram,
        );
        let upstream_requests = Family::<UpstreamOnly, Counter>::default();
        let upstream_opened = Family::<UpstreamOnly, Counter>::default();
        let upstream_connect_failures = Family::<UpstreamOnly, Counter>::default();
        let upstream_ejections = Family::<UpstreamOnly, Counter>::default();
        let upstream_retries = Family::<UpstreamOnly, Counter>::default();
        let endpoint_ready = Family::<UpstreamEndpoint, Gauge>::default();
        let connections_active = Family::<ListenerOnly, Gauge>::default();
        let connections_total = Family::<ListenerOnly, Counter>::default();
        let tls_handshakes = Family::<ListenerResult, Counter>::default();
        let fast_path = Family::<Outcome, Counter>::default();
        let rate_limited = Family::<RouteOnly, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by route and status",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from request head to response head, by route",
            duration.clone(),
        );
        registry.register(
            "upstream_requests",
            "Requests sent to an upstream (reused connections = requests - opened)",
            upstream_requests.clone(),
        );
        registry.register(
            "upstream_connections_opened",
            "Upstream connections opened",
            upstream_opened.clone(),
        );
        registry.register(
            "upstream_connect_failures",
            "Connections to an upstream that could not be made (refused, unreachable, connect \
             or TLS handshake timed out)",
            upstream_connect_failures.clone(),
        );
        registry.register(
            "upstream_ejections",
            "Times an upstream endpoint started being skipped: by a worker after a failed \
             connect or 5xx answers in a row, or by every worker after failed readiness checks",
            upstream_ejections.clone(),
        );
        registry.register(
            "upstream_retries",
            "Requests sent to a second endpoint after a 503 or a connection closed unanswered \
             (within the retry budget)",
            upstream_retries.clone(),
        );
        registry.register(
            "upstream_endpoint_ready",
            "1 while an upstream endpoint passes its readiness checks, 0 while it fails them \
             (upstreams with a health_check and several endpoints)",
            endpoint_ready.clone(),
        );
        registry.register(
            "connections_active",
            "Client connections open now, by listener",
            connections_active.clone(),
        );
        registry.register(
            "connections",
            "Client connections accepted, by listener",
            connections_total.clone(),
        );
        registry.register(
            "tls_handshakes",
            "TLS handshakes by listener and result",
            tls_handshakes.clone(),
        );
        registry.register(
            "http1_fast_path",
            "HTTP/1.1 requests relayed by the fast path, connections it handed to hyper, \
             requests hyper received that went out over its upstream connections, and request \
             heads it refused (not HTTP, or over the size limit)",
            fast_path.clone(),
        );
        registry.register(
            "rate_limited",
            "Requests refused with 429 because their client or subject used up the route's \
             rate limit, by route",
            rate_limited.clone(),
        );
        let access_log_dropped = Counter::default();
        registry.register(
            "access_log_dropped",
            "Access log lines dropped because the writer fell behind, or stopped after a write \
             failed",
            access_log_dropped.clone(),
        );
        Self {
            registry,
            access_log_dropped,
            requests,
            duration,
            upstream_requests,
            upstream_opened,
            upstream_connect_failures,
            upstream_ejections,
            upstream_retries,
            endpoint_ready,
            connections_active,
            connections_total,
            tls_handshakes,
            fast_path,
            rate_limited,
        }
    }

    /// The counter of access log lines dropped.
    pub fn access_log_dropped(&self) -> Counter {
        self.access_log_dropped.clone()
    }

    /// The fast path's counters.
    pub fn fast_path(&self) -> FastPathCounters {
        // One call each: `get_or_create` holds a read lock until its guard is dropped, and
        // creating the next series takes the write lock.
        let get = |outcome| self.fast_path.get_or_create(&Outcome { outcome }).clone();
        FastPathCounters {
            relayed: get("relayed"),
            handed_over: get("handed_over"),
            bridged: get("bridged"),
            refused: get("refused"),
        }
    }

    /// Renders the Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Handles for one route.
    pub fn route(&self, name: &str) -> RouteMetrics {
        let route = Label(name.into());
        let duration = self
            .duration
            .get_or_create(&RouteOnly {
                route: route.clone(),
            })
            .clone();
        RouteMetrics {
            duration,
            requests: self.requests.clone(),
            route,
            usual: Arc::default(),
        }
    }

    /// The count of requests route `name`'s rate limit refused.
    pub fn rate_limited(&self, name: &str) -> Counter {
        self.rate_limited
            .get_or_create(&RouteOnly {
                route: Label(name.into()),
            })
            .clone()
    }

    /// Counts requests that matched no route.
    pub fn unrouted(&self) -> RouteMetrics {
        self.route("(none)")
    }

    /// Handles for one upstream.
    pub fn upstream(&self, name: &str) -> UpstreamCounters {
        let key = UpstreamOnly {
            upstream: Label(name.into()),
        };
        // One statement per handle, as in `listener`.
        let requests = self.upstream_requests.get_or_create(&key).clone();
        let opened = self.upstream_opened.get_or_create(&key).clone();
        let connect_failures = self.upstream_connect_failures.get_or_create(&key).clone();
        let ejections = self.upstream_ejections.get_or_create(&key).clone();
        let retries = self.upstream_retries.get_or_create(&key).clone();
        UpstreamCounters {
            requests,
            opened,
            connect_failures,
            ejections,
            retries,
        }
    }

    /// The readiness gauge of one endpoint (`scheme://authority`) of upstream `name`.
    pub fn endpoint_ready(&self, name: &str, endpoint: &str) -> Gauge {
        let key = UpstreamEndpoint {
            upstream: Label(name.into()),
            endpoint: Label(endpoint.into()),
        };
        self.endpoint_ready.get_or_create(&key).clone()
    }

    /// Drops the readiness gauge of an endpoint discovery no longer finds.
    pub fn forget_endpoint(&self, name: &str, endpoint: &str) {
        self.endpoint_ready.remove(&UpstreamEndpoint {
            upstream: Label(name.into()),
            endpoint: Label(endpoint.into()),
        });
    }

    /// A connection observer for one listener.
    pub fn listener(&self, name: &str) -> ListenerObserver {
        // One statement per handle: `get_or_create` returns a read guard, and holding one while
        // creating another entry in the same family would deadlock.
        let listener = Label(name.into());
        let key = ListenerOnly {
            listener: listener.clone(),
        };
        let active = self.connections_active.get_or_create(&key).clone();
        let total = self.connections_total.get_or_create(&key).clone();
        let ok = ListenerResult {
            listener: listener.clone(),
            result: "ok",
        };
        let tls_ok = self.tls_handshakes.get_or_create(&ok).clone();
        let failed = ListenerResult {
            listener,
            result: "failed",
        };
        let tls_failed = self.tls_handshakes.get_or_create(&failed).clone();
        ListenerObserver {
            active,
            total,
            tls_ok,
            tls_failed,
        }
    }
}

/// The statuses whose per-route counters are kept at hand (see [`RouteMetrics::observe`]).
const USUAL_STATUSES: [u16; 14] = [
    200, 201, 204, 304, 400, 401, 403, 404, 409, 429, 500, 502, 503, 504,
];

/// Per-route handles.
#[derive(Debug, Clone)]
pub struct RouteMetrics {
    route: Label,
    duration: Histogram,
    requests: Family<RouteStatus, Counter>,
    /// The counters of [`USUAL_STATUSES`], each taken from `requests` the first time it counts.
    usual: Arc<[OnceLock<Counter>; USUAL_STATUSES.len()]>,
}

impl RouteMetrics {
    /// Records one answered request. A usual status is counted without a look-up in the
    /// family (hashing the label set, a lock, the label's reference count): that was 2 % of a
    /// relayed request's instructions. A series appears in `/metrics` once counted, either way.
    pub fn observe(&self, status: u16, seconds: f64) {
        self.duration.observe(seconds);
        match USUAL_STATUSES.iter().position(|&s| s == status) {
            Some(i) => self.usual[i].get_or_init(|| self.counter(status)).inc(),
            None => self.counter(status).inc(),
        };
    }

    fn counter(&self, status: u16) -> Counter {
        self.requests
            .get_or_create(&RouteStatus {
                route: self.route.clone(),
                status,
            })
            .clone()
    }
}

/// Connection metrics of one listener; plugs into the serve loop.
#[derive(Debug, Clone)]
pub struct ListenerObserver {
    active: Gauge,
    total: Counter,
    tls_ok: Counter,
    tls_failed: Counter,
}

impl pms_net::serve::Observer for ListenerObserver {
    fn connection_opened(&self) {
        self.active.inc();
        self.total.inc();
    }
    fn connection_closed(&self) {
        self.active.dec();
    }
    fn tls_handshake(&self, ok: bool) {
        if ok {
            self.tls_ok.inc();
        } else {
            self.tls_failed.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usual_and_other_statuses_are_counted_once_each_and_only_once_seen() {
        let metrics = Metrics::new();
        let route = metrics.route("users");
        // Clones share the counters, as the workers' copies do.
        let other_copy = route.clone();
        route.observe(200, 0.001);
        other_copy.observe(200, 0.001);
        route.observe(418, 0.001);
        route.observe(504, 0.001);
        let text = metrics.render();
        let count = |status: u16| {
            let series =
                format!("pms_gateway_requests_total{{route=\"users\",status=\"{status}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(series.as_str()))
                .map(|n| n.parse::<u64>().expect("a count"))
        };
        assert_eq!(count(200), Some(2), "{text}");
        assert_eq!(count(418), Some(1), "{text}");
        assert_eq!(count(504), Some(1), "{text}");
        assert_eq!(
            count(201),
            None,
            "a status never answered has no series: {text}"
        );
    }
}
