//! What the payments service does with other services' events, and the consumers that feed it.
//!
//! | source | event | effect |
//! |---|---|---|
//! | parks | `price_table.changed` (v1) | store the version |
//! | parks | `visit.opened` (v1) | note the open visit (for quotes) |
//! | parks | `visit.closed` (v1) | issue the invoice, or ask users for the coins first |
//! | users | `customer.registered`, `customer.changed` (v1) | upsert the customer and vehicles |
//! | users | `customer.closed` (v1) | forget the customer and their vehicles; invoices stay |
//! | users | `wallet.coins_debited` (v1) | finish the invoice with its discount |
//!
//! Anything else is skipped. Unknown versions, malformed payloads and visits that cannot be
//! priced are parked.

use pms_events::wiring::{MissingSource, Shutdown, Sources, Tasks, Wiring};
use pms_events::{Applied, ApplyError, Event, Handler, Outcome};

use crate::store::invoices::{CoinsDebited, IssueError, ParksChange, Tables, VisitClosed};
use crate::store::replica::{CustomerDoc, PriceTableDoc, VisitOpened, CONSUMER};
use crate::App;
use pms_vocab::customer::CustomerClosedDoc;

/// The payments service's events, every one of which tells of something that happened once (an
/// invoice issued, its coins asked for): its outbox lets them go once every reader passed them
/// and the retention window is over (`pms_events::retention`).
pub const PASSING_EVENTS: &[&str] = &["coins.requested", "invoice.issued"];

/// Applies the parks service's events.
#[derive(Debug, Clone)]
pub struct FromParks(pub App);

/// Applies the users service's events.
#[derive(Debug, Clone)]
pub struct FromUsers(pub App);

fn retry(e: impl std::fmt::Display) -> ApplyError {
    ApplyError::Retry(e.to_string())
}

impl Handler for FromParks {
    async fn apply(&self, event: &Event) -> Result<Outcome, ApplyError> {
        let store = &self.0.store;
        match event.event_type.as_str() {
            "price_table.changed" => {
                let t: PriceTableDoc = event.decode(&[1]).map_err(ApplyError::Park)?;
                t.table
                    .to_table()
                    .map_err(|e| ApplyError::Park(format!("invalid table: {e}")))?;
                store.apply_price_table(&t, event).await.map_err(retry)?;
            }
            "visit.opened" => {
                let v: VisitOpened = event.decode(&[1]).map_err(ApplyError::Park)?;
                store
                    .apply_parks_run(&[ParksChange::Opened(v)], Applied::one(event))
                    .await
                    .map_err(retry)?;
            }
            "visit.closed" => {
                let v: VisitClosed = event.decode(&[1]).map_err(ApplyError::Park)?;
                match store.issue(&v, event).await {
                    Ok(()) => {}
                    Err(IssueError::Unpriceable(reason)) => return Err(ApplyError::Park(reason)),
                    Err(IssueError::Store(e)) => return Err(retry(e)),
                }
                self.0.outbox.committed();
            }
            _ => return Ok(Outcome::Ignored),
        }
        Ok(Outcome::Applied)
    }

    /// Visits opened and closed (and events of no interest), until a price table change
    /// (applied alone, so the visits after it are priced with it) or an event that would be
    /// parked.
    async fn apply_run(&self, events: &[Event]) -> Result<usize, ApplyError> {
        let store = &self.0.store;
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let mut taken = 0usize;
        for event in events {
            let change = match event.event_type.as_str() {
                "price_table.changed" => break,
                "visit.opened" => match event.decode(&[1]) {
                    Ok(v) => Some(ParksChange::Opened(v)),
                    Err(_) => break,
                },
                "visit.closed" => {
                    let Ok(v) = event.decode::<VisitClosed>(&[1]) else {
                        break;
                    };
                    match store.price(v, &mut tables).await {
                        Ok(priced) => Some(ParksChange::Closed(priced)),
                        Err(IssueError::Unpriceable(_)) => break,
                        Err(IssueError::Store(e)) => return Err(retry(e)),
                    }
                }
                _ => None,
            };
            changes.extend(change);
            taken += 1;
        }
        let Some(last) = taken.checked_sub(1).map(|i| &events[i]) else {
            return Ok(0);
        };
        let appended = store
            .apply_parks_run(&changes, Applied::run(&events[0], last))
            .await
            .map_err(retry)?;
        if appended > 0 {
            self.0.outbox.committed();
        }
        Ok(taken)
    }
}

impl Handler for FromUsers {
    async fn apply(&self, event: &Event) -> Result<Outcome, ApplyError> {
        let store = &self.0.store;
        match event.event_type.as_str() {
            "customer.registered" | "customer.changed" => {
                let c: CustomerDoc = event.decode(&[1]).map_err(ApplyError::Park)?;
                store.apply_customer(&c, event).await.map_err(retry)?;
            }
            "customer.closed" => {
                let c: CustomerClosedDoc = event.decode(&[1]).map_err(ApplyError::Park)?;
                store.apply_closure(c.user_id, event).await.map_err(retry)?;
            }
            "wallet.coins_debited" => {
                let d: CoinsDebited = event.decode(&[1]).map_err(ApplyError::Park)?;
                store.finish_coins(&d, event).await.map_err(retry)?;
                self.0.outbox.committed();
            }
            _ => return Ok(Outcome::Ignored),
        }
        Ok(Outcome::Applied)
    }
}

/// Takes in the parks' and users' events, from where `from` says (over NATS relaying this
/// service's outbox too), until `stop` holds `true`.
///
/// # Errors
/// [`MissingSource`] when the parks' or users' outbox is not among the in-process sources.
pub fn spawn_consumers(app: &App, from: Sources, stop: Shutdown) -> Result<Tasks, MissingSource> {
    Wiring::new(CONSUMER, &app.outbox, &app.metrics, from, stop)
        .consume("parks", FromParks(app.clone()))
        .consume("users", FromUsers(app.clone()))
        .spawn()
}
