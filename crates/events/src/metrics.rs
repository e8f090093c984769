//! The events' Prometheus metrics a service shows on `/metrics`: its outbox's size
//! (`<prefix>_outbox_events`) and, per producer it consumes in place, how many of that producer's
//! events it has not applied yet (`<prefix>_consumer_lag_events{source}`). The service registers
//! its own metrics in the same registry ([`EventMetrics::registry`]).

use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use pms_service::store::Db;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::outbox::Outbox;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Source {
    source: &'static str,
}

/// One service's registry with the event gauges in it.
#[derive(Debug)]
pub struct EventMetrics {
    consumer: &'static str,
    registry: Mutex<Registry>,
    outbox: Gauge,
    lag: Family<Source, Gauge>,
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
        let lag = Family::<Source, Gauge>::default();
        registry.register(
            "consumer_lag_events",
            "Events of each producer not yet applied here",
            lag.clone(),
        );
        Self {
            consumer: service,
            registry: Mutex::new(registry),
            outbox,
            lag,
            sources: OnceLock::new(),
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
        if let Ok(head) = own.head().await {
            self.outbox.set(head);
        }
        for source in self.sources.get().into_iter().flatten() {
            let position = crate::consumer::position(db, self.consumer, source.source).await;
            if let (Ok(head), Ok(position)) = (source.head().await, position) {
                self.lag
                    .get_or_create(&Source {
                        source: source.source,
                    })
                    .set(head - position);
            }
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry()).is_err() {
            out.clear();
        }
        out
    }
}
