//! The events' Prometheus metrics a service shows on `/metrics`, with the prefix `pms_<service>`:
//!
//! | metric | what |
//! |---|---|
//! | `outbox_events` | events in its outbox, all time |
//! | `outbox_unpublished_events` | of which not yet on the broker (only when a relay runs) |
//! | `outbox_holes_settled_total` | holes in its ids this process's readers settled under the outbox lock |
//! | `outbox_holes_unsettled_total` | reads that found that lock held too long and stopped at the hole |
//! | `outbox_pruned_events_total` | events this process's pruner deleted from its outbox ([`crate::retention`]) |
//! | `outbox_reader_behind_events{reader}` | its outbox's events after each reader's note: what the outbox keeps for it |
//! | `consumer_lag_events{source}` | that producer's events not applied here yet |
//! | `consumer_lag_seconds{source}` | how old the oldest of them is (0 when caught up) |
//! | `parked_events{source}` | that producer's events parked here (unreadable; see `pms events`) |
//! | `redelivered_events_total{source}` | broker deliveries of an event already applied (skipped) |
//! | `event_gaps_total{source}` | gaps in a producer's events on the broker, set aside as missing |
//!
//! Embedded consumers (reading a producer's outbox in place) are measured when the metrics are
//! rendered; broker consumers report as they go through [`ConsumerGauges`], from the broker's
//! pending count and what each message carries. The service registers its own metrics in the
//! same registry ([`EventMetrics::registry`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use pms_service::store::Db;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::outbox::Outbox;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Reader {
    reader: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Source {
    source: String,
}

impl Source {
    fn of(source: &str) -> Self {
        Self {
            source: source.to_owned(),
        }
    }
}

/// Seconds, as a float gauge.
type Seconds = Gauge<f64, AtomicU64>;

/// What a broker consumer of one producer reports as it applies messages (handles on the
/// service's metrics; [`Default`] gives detached ones, for tests).
#[derive(Debug, Clone, Default)]
pub struct ConsumerGauges {
    lag: Gauge,
    lag_seconds: Seconds,
    redelivered: Counter,
    gaps: Counter,
}

impl ConsumerGauges {
    /// A message was delivered with `pending` more after it; the event in it was written
    /// `age` ago.
    pub fn delivered(&self, pending: u64, age: std::time::Duration) {
        self.lag.set(i64::try_from(pending).unwrap_or(i64::MAX));
        self.lag_seconds
            .set(if pending == 0 { 0.0 } else { age.as_secs_f64() });
    }

    /// `pending` events wait to be delivered (a reader starting): the lag's count, until the
    /// first delivery says more.
    pub fn behind(&self, pending: u64) {
        self.lag.set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    /// This replica stopped reading the stream (another holds its lease): no lag of its own.
    pub fn stopped(&self) {
        self.lag.set(0);
        self.lag_seconds.set(0.0);
    }

    /// A delivery of something already delivered or applied.
    pub fn redelivered(&self) {
        self.redelivered.inc();
    }

    /// Events found missing before one that arrived (set aside as missing).
    pub fn gap(&self) {
        self.gaps.inc();
    }

    /// Gaps counted so far.
    pub fn gaps(&self) -> u64 {
        self.gaps.get()
    }

    /// Redeliveries counted so far.
    pub fn redeliveries(&self) -> u64 {
        self.redelivered.get()
    }
}

/// One service's registry with the event gauges in it.
#[derive(Debug)]
pub struct EventMetrics {
    consumer: &'static str,
    registry: Mutex<Registry>,
    outbox: Gauge,
    unpublished: Gauge,
    holes_settled: Counter,
    holes_unsettled: Counter,
    pruned: Counter,
    behind: Family<Reader, Gauge>,
    relayed: AtomicBool,
    lag: Family<Source, Gauge>,
    lag_seconds: Family<Source, Seconds>,
    parked: Family<Source, Gauge>,
    redelivered: Family<Source, Counter>,
    gaps: Family<Source, Counter>,
    sources: OnceLock<Vec<Outbox>>,
}

impl EventMetrics {
    /// A registry with prefix `pms_<service>`; `service` is also the consumer name.
    pub fn new(service: &'static str) -> Self {
        let mut registry = Registry::with_prefix(format!("pms_{service}"));
        let outbox = Gauge::default();
        registry.register(
            "outbox_events",
            "Events in this service's outbox, all time (consumers read them in place)",
            outbox.clone(),
        );
        let unpublished = Gauge::default();
        let holes_settled = Counter::default();
        registry.register(
            "outbox_holes_settled",
            "Holes in this service's outbox ids that readers in this process settled under the outbox lock",
            holes_settled.clone(),
        );
        let holes_unsettled = Counter::default();
        registry.register(
            "outbox_holes_unsettled",
            "Reads of this service's outbox that found its lock held too long and stopped at a hole",
            holes_unsettled.clone(),
        );
        let pruned = Counter::default();
        registry.register(
            "outbox_pruned_events",
            "Events this process deleted from this service's outbox: every reader had passed them and the retention window was over",
            pruned.clone(),
        );
        let behind = Family::<Reader, Gauge>::default();
        registry.register(
            "outbox_reader_behind_events",
            "Events of this service's outbox after each reader's note: what the outbox keeps for it",
            behind.clone(),
        );
        let lag = Family::<Source, Gauge>::default();
        registry.register(
            "consumer_lag_events",
            "Events of each producer not yet applied here",
            lag.clone(),
        );
        let lag_seconds = Family::<Source, Seconds>::default();
        registry.register(
            "consumer_lag_seconds",
            "Age of the oldest event of each producer not yet applied here (0 when caught up)",
            lag_seconds.clone(),
        );
        let parked = Family::<Source, Gauge>::default();
        registry.register(
            "parked_events",
            "Events of each producer parked here: unreadable, set aside, see pms events",
            parked.clone(),
        );
        let redelivered = Family::<Source, Counter>::default();
        registry.register(
            "redelivered_events",
            "Broker deliveries of an event already delivered or applied",
            redelivered.clone(),
        );
        let gaps = Family::<Source, Counter>::default();
        registry.register(
            "event_gaps",
            "Gaps in each producer's events seen on the broker: events that never came before one that did, set aside as missing",
            gaps.clone(),
        );
        Self {
            consumer: service,
            registry: Mutex::new(registry),
            outbox,
            unpublished,
            holes_settled,
            holes_unsettled,
            pruned,
            behind,
            relayed: AtomicBool::new(false),
            lag,
            lag_seconds,
            parked,
            redelivered,
            gaps,
            sources: OnceLock::new(),
        }
    }

    /// A relay publishes this service's outbox to the broker: show its backlog from now on.
    pub fn watch_relay(&self) {
        if !self.relayed.swap(true, Ordering::Relaxed) {
            self.registry().register(
                "outbox_unpublished_events",
                "Events in this service's outbox not yet published to the broker",
                self.unpublished.clone(),
            );
        }
    }

    /// The handles a broker consumer of `source`'s events reports through.
    pub fn broker_consumer(&self, source: &str) -> ConsumerGauges {
        let label = Source::of(source);
        ConsumerGauges {
            lag: self.lag.get_or_create(&label).clone(),
            lag_seconds: self.lag_seconds.get_or_create(&label).clone(),
            redelivered: self.redelivered.get_or_create(&label).clone(),
            gaps: self.gaps.get_or_create(&label).clone(),
        }
    }

    /// The registry, for the service's own metrics.
    pub fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The outboxes this service consumes in place (set once, when its consumers start).
    pub fn watch_sources(&self, sources: Vec<Outbox>) {
        let _ = self.sources.set(sources);
    }

    /// Refreshes the gauges from `own` outbox and this service's positions in `db`, then
    /// renders the text exposition.
    pub async fn render(&self, own: &Outbox, db: &Db) -> String {
        let head = own.head().await;
        if let Ok(head) = head {
            self.outbox.set(head);
        }
        self.pruned
            .inner()
            .store(own.pruned_events(), Ordering::Relaxed);
        if let (Ok(head), Ok(readers)) = (head, crate::retention::readers(own).await) {
            self.behind.clear();
            for r in readers {
                let label = Reader { reader: r.reader };
                self.behind.get_or_create(&label).set(head - r.through);
            }
        }
        // The outbox counts as its readers go; the counters show its counts.
        let (settled, unsettled) = own.holes();
        self.holes_settled.inner().store(settled, Ordering::Relaxed);
        self.holes_unsettled
            .inner()
            .store(unsettled, Ordering::Relaxed);
        if self.relayed.load(Ordering::Relaxed) {
            if let Ok(n) = own.backlog().await {
                self.unpublished.set(n);
            }
        }
        for source in self.sources.get().into_iter().flatten() {
            let label = Source::of(source.source);
            let position = crate::position::position(db, self.consumer, source.source).await;
            if let (Ok(head), Ok(position)) = (source.head().await, position) {
                self.lag.get_or_create(&label).set(head - position);
                let age = if head > position {
                    source
                        .read_visible(position, 1)
                        .await
                        .ok()
                        .and_then(|next| next.first().map(|e| e.age().as_secs_f64()))
                } else {
                    Some(0.0)
                };
                if let Some(age) = age {
                    self.lag_seconds.get_or_create(&label).set(age);
                }
            }
        }
        if let Ok(parked) = parked_by_source(db, self.consumer).await {
            for (source, n) in parked {
                self.parked.get_or_create(&Source::of(&source)).set(n);
            }
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry()).is_err() {
            out.clear();
        }
        out
    }
}

/// Parked events per producer for `consumer`.
async fn parked_by_source(db: &Db, consumer: &str) -> Result<Vec<(String, i64)>, sqlx::Error> {
    pms_service::repeatable!(db, |conn| sqlx::query_as::<_, (String, i64)>(
        "SELECT source, COUNT(*) FROM parked_events WHERE consumer = $1 GROUP BY source"
    )
    .bind(consumer)
    .fetch_all(&mut *conn)
    .await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_consumers_report_lag_and_redeliveries_under_their_source() {
        let m = EventMetrics::new("parks");
        let g = m.broker_consumer("users");
        g.delivered(3, std::time::Duration::from_secs(2));
        g.redelivered();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &m.registry()).expect("encode");
        assert!(
            text.contains("pms_parks_consumer_lag_events{source=\"users\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("pms_parks_consumer_lag_seconds{source=\"users\"} 2.0"),
            "{text}"
        );
        assert!(
            text.contains("pms_parks_redelivered_events_total{source=\"users\"} 1"),
            "{text}"
        );
        g.delivered(0, std::time::Duration::from_secs(9));
        assert_eq!(g.redeliveries(), 1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &m.registry()).expect("encode");
        assert!(
            text.contains("pms_parks_consumer_lag_seconds{source=\"users\"} 0.0"),
            "caught up: {text}"
        );
    }
}
