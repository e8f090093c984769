//! The parks service's Prometheus metrics (`GET /metrics`): entrances and exits by outcome and
//! refusal reason, and how exits got their price, beside the event gauges every service shows
//! ([`EventMetrics`]). One registry per service instance, no globals.

use pms_events::metrics::EventMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Passage {
    direction: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ExitPrice {
    how: &'static str,
}

/// How an exit's answer got its price (`pms_parks_exit_prices_total{how}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceSource {
    /// Quoted by the exit itself (a stay not paid with coins).
    Quoted,
    /// Handed over as the invoice arrived (the consumer, or the broker's live feed).
    Handed,
    /// Read from the visit at the end of the wait: the invoice arrived, but nothing told this
    /// process.
    Read,
    /// Not known by the end of the wait: "your invoice will follow".
    Missing,
}

/// The counters.
#[derive(Debug)]
pub struct Metrics {
    /// The registry, with the event gauges.
    pub events: EventMetrics,
    passages: Family<Passage, Counter>,
    exit_prices: Family<ExitPrice, Counter>,
    long_poll_reads: Counter,
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
        let exit_prices = Family::<ExitPrice, Counter>::default();
        events.registry().register(
            "exit_prices",
            "Exits answered after closing their visit, by how the price was known: quoted (by the exit itself), handed (the invoice reached this process), read (from the visit at the end of the wait) or missing",
            exit_prices.clone(),
        );
        let long_poll_reads = Counter::default();
        events.registry().register(
            "long_poll_reads",
            "Versions read by the display and page long polls (at their start, and each time a change may concern them)",
            long_poll_reads.clone(),
        );
        Self {
            events,
            passages,
            exit_prices,
            long_poll_reads,
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

    /// Counts a long poll's read of its version.
    pub fn long_poll_read(&self) {
        self.long_poll_reads.inc();
    }

    /// Counts an exit's answer by how its price was known.
    pub fn exit_price(&self, source: PriceSource) {
        let how = match source {
            PriceSource::Quoted => "quoted",
            PriceSource::Handed => "handed",
            PriceSource::Read => "read",
            PriceSource::Missing => "missing",
        };
        self.exit_prices.get_or_create(&ExitPrice { how }).inc();
    }
}
