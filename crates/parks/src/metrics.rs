//! The parks service's Prometheus metrics (`GET /metrics`): entrances and exits by outcome and
//! refusal reason, and each event consumer's position and lag. One registry per service
//! instance, no globals.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Passage {
    direction: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Source {
    source: &'static str,
}

/// The counters.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    passages: Family<Passage, Counter>,
    lag: Family<Source, Gauge>,
    backlog: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("pms_parks");
        let passages = Family::<Passage, Counter>::default();
        registry.register(
            "barrier_passages",
            "Barrier requests by direction and outcome (opened, or the refusal reason)",
            passages.clone(),
        );
        let lag = Family::<Source, Gauge>::default();
        registry.register(
            "consumer_lag_events",
            "Events of each producer not yet applied here",
            lag.clone(),
        );
        let backlog = Gauge::default();
        registry.register(
            "outbox_backlog_events",
            "Events in this service's outbox, all time (consumers read them in place)",
            backlog.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            passages,
            lag,
            backlog,
        }
    }
}

impl Metrics {
    /// Counts a barrier request: `outcome` is `opened` or a refusal reason.
    pub fn passage(&self, direction: &'static str, outcome: &'static str) {
        self.passages
            .get_or_create(&Passage { direction, outcome })
            .inc();
    }

    /// Sets how far behind `source` the consumer is.
    pub fn set_lag(&self, source: &'static str, events: i64) {
        self.lag.get_or_create(&Source { source }).set(events);
    }

    /// Sets the outbox size.
    pub fn set_backlog(&self, events: i64) {
        self.backlog.set(events);
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}
