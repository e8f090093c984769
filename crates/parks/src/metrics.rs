//! The parks service's Prometheus metrics (`GET /metrics`): entrances and exits by outcome and
//! refusal reason, beside the event gauges every service shows ([`EventMetrics`]). One registry
//! per service instance, no globals.

use pms_events::metrics::EventMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Passage {
    direction: &'static str,
    outcome: &'static str,
}

/// The counters.
#[derive(Debug)]
pub struct Metrics {
    /// The registry, with the event gauges.
    pub events: EventMetrics,
    passages: Family<Passage, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let events = EventMetrics::new("parks");
        let passages = Family::<Passage, Counter>::default();
        events.registry().register(
            "barrier_passages",
            "Barrier requests by direction and outcome (opened, or the refusal reason)",
            passages.clone(),
        );
        Self { events, passages }
    }
}

impl Metrics {
    /// Counts a barrier request: `outcome` is `opened` or a refusal reason.
    pub fn passage(&self, direction: &'static str, outcome: &'static str) {
        self.passages
            .get_or_create(&Passage { direction, outcome })
            .inc();
    }
}
