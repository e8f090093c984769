//! What the parks service does with other services' events, and the consumers that feed them.
//!
//! | source | event | effect |
//! |---|---|---|
//! | users | `customer.registered`, `customer.changed` (v1) | upsert the customer and replace their vehicles |
//! | users | `customer.closed` (v1) | erase the customer's personal data ([`crate::store::closure`]) |
//! | payments | `invoice.issued` (v1) | the visit's price, discount and invoice id, and the price on its exit's displays; the exit waiting for it is handed the price |
//!
//! Anything else is skipped. Unknown versions and malformed payloads are parked.
//!
//! An invoice's price goes to the exit waiting for it as soon as the invoice is read
//! ([`crate::prices`]); in the distributed mode every replica also follows the invoices live
//! ([`spawn_price_feed`]), because the one whose consumer applies an invoice need not be the one
//! whose barrier call waits for it.
//!
//! Likewise the long polls of displays and live pages: in the distributed mode each replica
//! wakes its own as any replica's parks events go by, and once a second besides
//! ([`spawn_change_feed`]), since display messages and spot switches write no event.

use pms_events::wiring::{MissingSource, Shutdown, Sources, Tasks, Wiring};
use pms_events::{Applied, ApplyError, Event, Handler, Outcome};

use crate::store::replica::{CustomerDoc, InvoiceDoc, CONSUMER};
use crate::store::StoreError;
use crate::{rules, App};
use pms_vocab::customer::CustomerClosedDoc;

/// The parks service's events that tell of something that happened once (a car went in or
/// out), which its outbox lets go once every reader passed them and the retention window is
/// over (`pms_events::retention`). Price tables' versions are kept: invoices are priced with them.
pub const PASSING_EVENTS: &[&str] = &["visit.opened", "visit.closed"];

/// Applies the users service's events.
#[derive(Debug, Clone)]
pub struct FromUsers(pub App);

/// Applies the payments service's events.
#[derive(Debug, Clone)]
pub struct FromPayments(pub App);

fn failed(e: StoreError) -> ApplyError {
    ApplyError::Retry(e.to_string())
}

impl Handler for FromUsers {
    async fn apply(&self, event: &Event) -> Result<Outcome, ApplyError> {
        match event.event_type.as_str() {
            "customer.registered" | "customer.changed" => {
                let c: CustomerDoc = event.decode(&[1]).map_err(ApplyError::Park)?;
                self.0
                    .store
                    .apply_customer(&c, event)
                    .await
                    .map_err(failed)?;
                Ok(Outcome::Applied)
            }
            "customer.closed" => {
                let c: CustomerClosedDoc = event.decode(&[1]).map_err(ApplyError::Park)?;
                let erased = self
                    .0
                    .store
                    .apply_closure(&c, event, self.0.erase_after_exit)
                    .await
                    .map_err(failed)?;
                if erased {
                    // A display may have stopped greeting them.
                    self.0.changed();
                }
                Ok(Outcome::Applied)
            }
            _ => Ok(Outcome::Ignored),
        }
    }
}

impl FromPayments {
    /// After `invoices` were applied: the followers of their parks' displays are told, and an
    /// invoice for a visit this service does not know is reported.
    fn applied(&self, invoices: &[InvoiceDoc], known: &[bool]) {
        for (i, known) in invoices.iter().zip(known) {
            if !known {
                tracing::warn!(
                    visit = i.visit_id,
                    invoice = i.invoice_id,
                    "an invoice for a visit parks does not know"
                );
                continue;
            }
            match i.park_id {
                Some(park) => self.0.bells.ring(park),
                None => self.0.changed(),
            }
        }
    }
}

/// Hands each invoice's price to the exits of `app` waiting for it. The consumer does it as
/// soon as it has read the invoices, before its own transaction: they are committed in payments
/// already, and the barrier's answer need not wait for this service's copy.
fn hand_over(app: &App, invoices: &[InvoiceDoc]) {
    for i in invoices {
        let shown = (
            rules::shown_money(&i.final_price),
            rules::shown_money(&i.discount),
        );
        app.prices.settle(i.visit_id, &shown);
    }
}

impl Handler for FromPayments {
    async fn apply(&self, event: &Event) -> Result<Outcome, ApplyError> {
        match event.event_type.as_str() {
            "invoice.issued" => {
                let i: InvoiceDoc = event.decode(&[1]).map_err(ApplyError::Park)?;
                hand_over(&self.0, std::slice::from_ref(&i));
                let known = self
                    .0
                    .store
                    .apply_invoice(&i, event)
                    .await
                    .map_err(failed)?;
                self.applied(&[i], &[known]);
                Ok(Outcome::Applied)
            }
            _ => Ok(Outcome::Ignored),
        }
    }

    /// Invoices (and events of no interest), until one that would be parked.
    async fn apply_run(&self, events: &[Event]) -> Result<usize, ApplyError> {
        let mut invoices = Vec::new();
        let mut taken = 0usize;
        for event in events {
            if event.event_type == "invoice.issued" {
                let Ok(i) = event.decode::<InvoiceDoc>(&[1]) else {
                    break;
                };
                invoices.push(i);
            }
            taken += 1;
        }
        let Some(last) = taken.checked_sub(1).map(|i| &events[i]) else {
            return Ok(0);
        };
        hand_over(&self.0, &invoices);
        let known = self
            .0
            .store
            .apply_invoices(&invoices, Applied::run(&events[0], last))
            .await
            .map_err(failed)?;
        self.applied(&invoices, &known);
        Ok(taken)
    }
}

/// Takes in the users' and payments' events, from where `from` says, until `stop` holds
/// `true`; in the distributed mode also relays this service's outbox and feeds this replica's
/// exits their prices and its long polls their changes from the broker.
///
/// # Errors
/// [`MissingSource`] when the users' or payments' outbox is not among the in-process sources.
pub fn spawn_consumers(app: &App, from: Sources, stop: Shutdown) -> Result<Tasks, MissingSource> {
    let nats = from.nats().cloned();
    let wiring = Wiring::new(
        CONSUMER,
        &app.outbox,
        &app.metrics.events,
        from,
        stop.clone(),
    );
    let mut tasks = wiring
        .consume("users", FromUsers(app.clone()))
        .consume("payments", FromPayments(app.clone()))
        .spawn()?;
    if let Some(nats) = nats {
        tasks.push(spawn_price_feed(app, nats.clone(), stop.clone()));
        tasks.push(spawn_change_feed(app, nats, stop));
    }
    Ok(tasks)
}

/// How often, in the distributed mode, the long polls read their version again even though
/// no event told of a change (a display message or spot switch made through another replica).
pub const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Wakes this replica's long polls as the broker gets each parks event (an entrance or exit
/// through any replica: the bell of its `parkId`), and every [`RECHECK`] (every bell), until
/// `shutdown` holds `true`.
pub fn spawn_change_feed(
    app: &App,
    nats: pms_events::nats::Nats,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let app = app.clone();
    tokio::spawn(async move {
        let ring = app.clone();
        let feed = nats.follow("parks", ">", shutdown, move |event| {
            match event.payload["parkId"].as_i64() {
                Some(park) => ring.bells.ring(park),
                None => ring.changed(),
            }
        });
        let recheck = async {
            let mut every = tokio::time::interval(RECHECK);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                app.changed();
            }
        };
        tokio::select! {
            () = feed => {}
            () = recheck => {}
        }
    })
}

/// Every invoice as the broker gets it, handed to this replica's waiting exits, until
/// `shutdown` holds `true`. The broker consumer of payments' events runs in one replica only
/// (its lease), and the exit waiting for an invoice may be on another
/// (`pms_events::nats::Nats::follow`).
pub fn spawn_price_feed(
    app: &App,
    nats: pms_events::nats::Nats,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let app = app.clone();
    tokio::spawn(
        nats.follow("payments", "invoice.issued", shutdown, move |event| {
            match event.decode::<InvoiceDoc>(&[1]) {
                Ok(i) => hand_over(&app, &[i]),
                // The broker consumer parks it; nothing to hand over.
                Err(e) => {
                    tracing::debug!(event = event.id, error = %e, "an invoice the price feed cannot read")
                }
            }
        }),
    )
}
