//! The front office's Prometheus metrics (`GET /metrics` on its own port, never routed by the
//! gateway): answers by status code and, when this process keeps them, the sessions held now.
//! One registry per instance.

use std::sync::atomic::AtomicI64;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Answer {
    status: u16,
}

/// The counters and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    answers: Family<Answer, Counter>,
    sessions: Option<Gauge<i64, AtomicI64>>,
}

impl Metrics {
    /// The registry, with the sessions gauge when `sessions_here` (sessions in this process's
    /// memory; shared ones are not one replica's to count).
    pub fn new(sessions_here: bool) -> Self {
        let mut registry = Registry::with_prefix("pms_web");
        let answers = Family::<Answer, Counter>::default();
        registry.register(
            "requests",
            "Answers of the front office by status code",
            answers.clone(),
        );
        let sessions = sessions_here.then(|| {
            let gauge = Gauge::<i64, AtomicI64>::default();
            registry.register(
                "sessions",
                "Browser sessions held (signed in or not)",
                gauge.clone(),
            );
            gauge
        });
        Self {
            registry: Mutex::new(registry),
            answers,
            sessions,
        }
    }

    /// Counts an answer with `status`.
    pub fn answered(&self, status: u16) {
        self.answers.get_or_create(&Answer { status }).inc();
    }

    /// The text exposition, with `sessions` as the sessions gauge (when it has one).
    pub fn render(&self, sessions: Option<u64>) -> String {
        if let (Some(gauge), Some(n)) = (&self.sessions, sessions) {
            gauge.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        let registry = self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::error!(error = %e, "encoding the metrics");
        }
        out
    }
}
