//! What the users service does with other services' events: the payments service asks for the
//! coins of an invoice (`coins.requested`, v1) and the wallet pays what it has, once per invoice;
//! the parks service closes a visit (`visit.closed`, v1) and the coins it earned are credited,
//! once per visit, with the inviter's coins when it is an invited customer's first
//! ([`crate::store::coins`], [`crate::store::awards`]); a run of closed visits is credited in one
//! transaction. Anything else is skipped; unreadable
//! events are parked.

use pms_events::wiring::{MissingSource, Shutdown, Sources, Tasks, Wiring};
use pms_events::{Applied, ApplyError, Event, Handler, Outcome};

use crate::store::coins::{CoinsRequested, VisitEarned, CONSUMER};
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

/// Applies the parks service's events.
#[derive(Debug, Clone)]
pub struct FromParks(pub App);

impl Handler for FromParks {
    async fn apply(&self, event: &Event) -> Result<Outcome, ApplyError> {
        match event.event_type.as_str() {
            "visit.closed" => {
                let v: VisitEarned = event.decode(&[1]).map_err(ApplyError::Park)?;
                let credited = self
                    .0
                    .store
                    .credit_for_visit(&v, self.0.awards.invitation, event)
                    .await
                    .map_err(|e| ApplyError::Retry(e.to_string()))?;
                log_credits(std::slice::from_ref(&v), &[credited]);
                Ok(Outcome::Applied)
            }
            _ => Ok(Outcome::Ignored),
        }
    }

    /// Closed visits (and events of no interest), until one that would be parked: their coins
    /// credited in one transaction ([`crate::store::Store::credit_for_visits`]).
    async fn apply_run(&self, events: &[Event]) -> Result<usize, ApplyError> {
        let mut visits = Vec::new();
        let mut taken = 0usize;
        for event in events {
            if event.event_type == "visit.closed" {
                let Ok(v) = event.decode::<VisitEarned>(&[1]) else {
                    break;
                };
                visits.push(v);
            }
            taken += 1;
        }
        let Some(last) = taken.checked_sub(1).map(|i| &events[i]) else {
            return Ok(0);
        };
        let credited = self
            .0
            .store
            .credit_for_visits(
                &visits,
                self.0.awards.invitation,
                Applied::run(&events[0], last),
            )
            .await
            .map_err(|e| ApplyError::Retry(e.to_string()))?;
        log_credits(&visits, &credited);
        Ok(taken)
    }
}

/// Logs the coins `visits` earned their customers and inviters.
fn log_credits(visits: &[VisitEarned], credited: &[(i64, i64)]) {
    for (v, &(earned, invited)) in visits.iter().zip(credited) {
        if earned > 0 || invited > 0 {
            tracing::info!(
                user = v.customer_id,
                visit = v.visit_id,
                earned,
                invited,
                "coins earned"
            );
        }
    }
}

/// Takes in the payments service's events (coins to spend) and the parks service's (coins
/// earned), from where `from` says (over NATS relaying this service's outbox too), until
/// `stop` holds `true`.
///
/// # Errors
/// [`MissingSource`] when an outbox is not among the in-process sources.
pub fn spawn_consumers(app: &App, from: Sources, stop: Shutdown) -> Result<Tasks, MissingSource> {
    Wiring::new(CONSUMER, &app.outbox, &app.metrics, from, stop)
        .consume("payments", FromPayments(app.clone()))
        .consume("parks", FromParks(app.clone()))
        .spawn()
}
