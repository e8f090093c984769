//! The parks service's Prometheus metrics (`GET /metrics`): entrances and exits by outcome and
//! refusal reason, how exits got their price, and the barriers' clocks (their offsets, and the
//! passages whose time was not taken as said), beside the event gauges every service shows
//! ([`EventMetrics`]). One registry per service instance, no globals.

use std::sync::atomic::AtomicU64;

use jiff::SignedDuration;
use pms_events::metrics::EventMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::clock::Replaced;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Passage {
    direction: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ExitPrice {
    how: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BarrierLabel {
    barrier: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TimeReplaced {
    direction: &'static str,
    why: &'static str,
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
    clock_offsets: Family<BarrierLabel, Gauge<f64, AtomicU64>>,
    times_replaced: Family<TimeReplaced, Counter>,
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
        let clock_offsets = Family::<BarrierLabel, Gauge<f64, AtomicU64>>::default();
        events.registry().register(
            "barrier_clock_offset_seconds",
            "How far each barrier's time was ahead of the server's clock (negative: behind) in its last passage seen here",
            clock_offsets.clone(),
        );
        let times_replaced = Family::<TimeReplaced, Counter>::default();
        events.registry().register(
            "passage_times_replaced",
            "Passages recorded at another time than their barrier said, by direction and why (ahead, late, before_last_exit, before_entrance)",
            times_replaced.clone(),
        );
        Self {
            events,
            passages,
            exit_prices,
            long_poll_reads,
            clock_offsets,
            times_replaced,
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

    /// Sets barrier `barrier`'s clock offset, as its latest passage showed it.
    pub fn clock_offset(&self, barrier: i64, offset: SignedDuration) {
        self.clock_offsets
            .get_or_create(&BarrierLabel { barrier })
            .set(offset.as_secs_f64());
    }

    /// Counts a passage recorded at another time than its barrier said.
    pub fn time_replaced(&self, direction: &'static str, why: Replaced) {
        self.times_replaced
            .get_or_create(&TimeReplaced {
                direction,
                why: why.reason(),
            })
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
