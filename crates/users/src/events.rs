//! What the users service does with other services' events: the payments service asks for the
//! coins of an invoice (`coins.requested`, v1) and the wallet pays what it has, once per invoice
//! ([`crate::store::coins`]). Anything else is skipped; unreadable events are parked.

use std::sync::Arc;

use pms_events::{ApplyError, Consumer, Event, Handler, Outbox, Outcome};

use crate::store::coins::{CoinsRequested, CONSUMER};
use crate::App;

/// The users service's events that tell of something that happened once (a wallet paid an
/// invoice's coins), which its outbox lets go once every reader passed them and the retention
/// window is over (`pms_events::retention`). Customers' events carry their state and are kept.
pub const PASSING_EVENTS: &[&str] = &["wallet.coins_debited"];

/// Applies the payments service's events.
#[derive(Debug, Clone)]
pub struct FromPayments(pub App);

impl Handler for FromPayments {
    async fn apply(&self, event: &Event) -> Result<Outcome, ApplyError> {
        match event.event_type.as_str() {
            "coins.requested" => {
                let r: CoinsRequested = event.decode(&[1]).map_err(ApplyError::Park)?;
                let coins = self
                    .0
                    .store
                    .debit_for_invoice(&r, event)
                    .await
                    .map_err(|e| ApplyError::Retry(e.to_string()))?;
                tracing::info!(
                    user = r.customer_id,
                    invoice = r.invoice_id,
                    coins,
                    "coins spent on an invoice"
                );
                self.0.outbox.committed();
                Ok(Outcome::Applied)
            }
            _ => Ok(Outcome::Ignored),
        }
    }
}

/// Starts the consumer of the payments service's outbox until `shutdown` holds `true`.
pub fn spawn_consumer(
    app: &App,
    payments: Outbox,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    app.metrics.watch_sources(vec![payments.clone()]);
    Consumer {
        name: CONSUMER,
        source: payments,
        db: app.store.db().clone(),
        handler: Arc::new(FromPayments(app.clone())),
    }
    .spawn(shutdown)
}

/// The distributed mode: this service's outbox relayed to NATS JetStream, and the payments
/// service's events consumed from it, until `shutdown` holds `true`.
pub fn spawn_nats(
    app: &App,
    nats: pms_events::nats::Nats,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    use pms_events::nats::{relay, NatsConsumer};
    app.metrics.watch_relay();
    vec![
        tokio::spawn(relay(nats.clone(), app.outbox.clone(), shutdown.clone())),
        NatsConsumer {
            name: CONSUMER,
            source: "payments",
            db: app.store.db().clone(),
            handler: Arc::new(FromPayments(app.clone())),
            nats,
            gauges: app.metrics.broker_consumer("payments"),
        }
        .spawn(shutdown),
    ]
}
