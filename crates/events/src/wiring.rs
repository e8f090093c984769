//! How a service takes in the other services' events, said once: its handlers listed by the
//! producer they read, started either in one process (each reading the producer's outbox table)
//! or in the distributed mode (this service's outbox relayed to NATS JetStream and each
//! producer's stream read from it), as [`Sources`] says, with the gauges `/metrics` shows wired
//! up.
//!
//! A service then says only which handler reads which producer:
//!
//! ```ignore
//! Wiring::new(CONSUMER, &app.outbox, &app.metrics, from, stop)
//!     .consume("users", FromUsers(app.clone()))
//!     .consume("payments", FromPayments(app.clone()))
//!     .spawn()
//! ```

use std::sync::Arc;

use pms_service::store::Db;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::consumer::{Consumer, Handler};
use crate::metrics::EventMetrics;
use crate::nats::{relay, Nats, NatsConsumer};
use crate::outbox::Outbox;

/// Where a service reads the other services' events.
#[derive(Debug, Clone)]
pub enum Sources {
    /// One process (`pms up`): the producers' outboxes, read directly (every service's may be
    /// given; each consumer takes its producer's by name).
    InProcess(Vec<Outbox>),
    /// The distributed mode: this service's outbox is relayed to the broker, and each producer's
    /// stream read from it.
    Nats(Nats),
}

impl Sources {
    /// The broker, in the distributed mode.
    pub fn nats(&self) -> Option<&Nats> {
        match self {
            Self::Nats(nats) => Some(nats),
            Self::InProcess(_) => None,
        }
    }
}

/// A producer named by a consumer that [`Sources::InProcess`] did not give.
#[derive(Debug, thiserror::Error)]
#[error("no outbox of {0:?} was given to read its events from")]
pub struct MissingSource(pub &'static str);

/// One service's consumers of the other services' events, started as they are listed.
#[must_use = "`spawn` hands over the tasks"]
pub struct Wiring<'a> {
    name: &'static str,
    db: Db,
    metrics: &'a EventMetrics,
    sources: Sources,
    shutdown: watch::Receiver<bool>,
    watched: Vec<Outbox>,
    tasks: Vec<JoinHandle<()>>,
    missing: Option<&'static str>,
}

impl<'a> Wiring<'a> {
    /// The consumers of service `name`, keeping their positions in its database (the one its
    /// `own` outbox is in), until `shutdown` holds `true`; over NATS, `own` outbox relayed to the
    /// broker (started here).
    pub fn new(
        name: &'static str,
        own: &Outbox,
        metrics: &'a EventMetrics,
        sources: Sources,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        let mut tasks = Vec::new();
        if let Sources::Nats(nats) = &sources {
            metrics.watch_relay();
            tasks.push(tokio::spawn(relay(
                nats.clone(),
                own.clone(),
                shutdown.clone(),
            )));
        }
        Self {
            name,
            db: own.db().clone(),
            metrics,
            sources,
            shutdown,
            watched: Vec::new(),
            tasks,
            missing: None,
        }
    }

    /// `handler` applies the events of producer `source`, in order, each once.
    pub fn consume<H: Handler>(mut self, source: &'static str, handler: H) -> Self {
        let handler = Arc::new(handler);
        let task = match &self.sources {
            Sources::InProcess(outboxes) => {
                let Some(outbox) = outboxes.iter().find(|o| o.source == source) else {
                    self.missing.get_or_insert(source);
                    return self;
                };
                self.watched.push(outbox.clone());
                Consumer {
                    name: self.name,
                    source: outbox.clone(),
                    db: self.db.clone(),
                    handler,
                }
                .spawn(self.shutdown.clone())
            }
            Sources::Nats(nats) => NatsConsumer {
                name: self.name,
                source,
                db: self.db.clone(),
                handler,
                nats: nats.clone(),
                gauges: self.metrics.broker_consumer(source),
            }
            .spawn(self.shutdown.clone()),
        };
        self.tasks.push(task);
        self
    }

    /// The consumers' tasks (and the relay's); `/metrics` shows how far behind they are.
    ///
    /// # Errors
    /// [`MissingSource`] when a producer's outbox was not among the [`Sources::InProcess`]
    /// (then nothing is left running).
    pub fn spawn(self) -> Result<Vec<JoinHandle<()>>, MissingSource> {
        if let Some(source) = self.missing {
            for task in &self.tasks {
                task.abort();
            }
            return Err(MissingSource(source));
        }
        if !self.watched.is_empty() {
            self.metrics.watch_sources(self.watched);
        }
        Ok(self.tasks)
    }
}

/// What tells the consumers to stop: `true`.
pub type Shutdown = watch::Receiver<bool>;

/// The tasks a service's event wiring started.
pub type Tasks = Vec<JoinHandle<()>>;

#[cfg(test)]
mod tests;
