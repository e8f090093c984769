//! The relay: one service's outbox published to the broker, in id order, by the replica that
//! holds the outbox's relay lease; a person's data sealed ([`super::sealing`]), and the keys of
//! closed accounts erased when their time comes.

use std::time::Duration;

use super::{nats_error, sealing, wire, Nats, NatsError, MAX_BACKOFF};
use crate::outbox::Outbox;
use crate::retention::{acknowledge, Notes, RELAY};

/// Events read from the outbox per relay round (sent in as few messages as their size allows).
const RELAY_BATCH: i64 = 1000;
/// How often the relay looks at the outbox when nobody rings: the bell rings in the replica
/// that holds the relay's lease only, so the other replicas' events wait up to this long.
const RELAY_POLL: Duration = Duration::from_millis(25);
/// How often the relay erases the keys of closed accounts whose time has come.
const ERASE_KEYS_EVERY: Duration = Duration::from_secs(60);

/// The publisher of one outbox: reads on after what it published last (from the database at
/// first, then from memory), publishes in id order, and marks what the broker acknowledged.
struct Relay<'a> {
    nats: &'a Nats,
    outbox: &'a Outbox,
    /// Everything up to this id is on the broker (`None`: read it from the outbox first).
    through: Option<i64>,
}

impl Relay<'_> {
    /// Publishes up to [`RELAY_BATCH`] events after what is on the broker, in messages of runs
    /// of them ([`wire`]), one message after the other, each once the broker acknowledged the
    /// one before: the stream holds each producer's events in id order. Returns how many. With
    /// `mark` false it leaves the rows unmarked, as a relay that dies right after publishing
    /// would (tests).
    ///
    /// Why one message at a time: with several in flight, one that fails while the next
    /// succeeds puts later events on the stream first, and the earlier ones behind them when
    /// they are sent again; consumers would see the order broken.
    async fn round(&mut self, mark: bool) -> Result<usize, NatsError> {
        let after = match self.through {
            Some(id) => id,
            None => self.outbox.published_through().await.map_err(nats_error)?,
        };
        let events = self
            .outbox
            .read_after(after, RELAY_BATCH)
            .await
            .map_err(nats_error)?;
        let (Some(first), Some(last)) = (events.first(), events.last()) else {
            self.through = Some(after);
            return Ok(0);
        };
        let carried = sealing::seal(&self.nats.keyring, &events).await?;
        let messages = wire::messages(self.outbox.source, &carried).map_err(nats_error)?;
        for message in messages {
            if let Err(e) = self.nats.publish(message).await {
                self.through = None;
                return Err(e);
            }
        }
        // Closures on the broker: their customers' keys go after the delay (scheduled before
        // the rows are marked, so a relay that dies here schedules them again).
        let closed: Vec<i64> = events
            .iter()
            .filter_map(|e| pms_vocab::personal::closes(&e.event_type, &e.payload))
            .collect();
        for &owner in &closed {
            if let Err(e) = self.nats.keyring.schedule(owner).await {
                self.through = None;
                return Err(e);
            }
        }
        if !closed.is_empty() {
            self.nats.keyring.sweep().await?;
        }
        if mark {
            if let Err(e) = self.outbox.mark_published(first.id, last.id).await {
                self.through = None;
                return Err(nats_error(e));
            }
            self.through = Some(last.id);
        }
        Ok(events.len())
    }
}

/// Publishes what `outbox` has not published yet, once; returns how many. With `mark` false
/// it leaves the rows unmarked, as a relay that dies right after publishing would (tests).
///
/// # Errors
/// When the broker or the database is away.
pub async fn relay_once(nats: &Nats, outbox: &Outbox, mark: bool) -> Result<usize, NatsError> {
    Relay {
        nats,
        outbox,
        through: None,
    }
    .round(mark)
    .await
}

/// The relay of one service's outbox until `shutdown` holds `true`: in the replica that holds
/// the outbox's relay lease ([`crate::lease`]), the others standing by.
pub async fn relay(nats: Nats, outbox: Outbox, shutdown: tokio::sync::watch::Receiver<bool>) {
    let name = format!("relay:{}", outbox.source);
    crate::lease::while_held(outbox.db().clone(), name, shutdown, || {
        relay_while_leased(&nats, &outbox)
    })
    .await;
}

/// Publishes `outbox` as it fills, for as long as it is not stopped.
async fn relay_while_leased(nats: &Nats, outbox: &Outbox) {
    let bell = outbox.bell();
    let mut relay = Relay {
        nats,
        outbox,
        through: None,
    };
    let mut backoff = Duration::from_millis(100);
    let mut notes = Notes::default();
    let mut keys_erased_at = tokio::time::Instant::now();
    loop {
        let rung = bell.notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        let round = relay.round(true).await;
        if keys_erased_at.elapsed() >= ERASE_KEYS_EVERY {
            keys_erased_at = tokio::time::Instant::now();
            match nats.erase_due_keys().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(keys = n, "erased the keys of closed accounts"),
                Err(e) => tracing::warn!(error = %e, "closed accounts' keys not erased yet"),
            }
        }
        if let (Some(through), true) = (relay.through, notes.due()) {
            // Everything through here is on the broker: the outbox need not keep it for us.
            match acknowledge(outbox, RELAY, through).await {
                Ok(()) => notes.written(),
                Err(e) => {
                    tracing::debug!(source = outbox.source, error = %e, "relay's note not written")
                }
            }
        }
        let pause = match round {
            Ok(n) if n as i64 == RELAY_BATCH => continue,
            Ok(_) => {
                backoff = Duration::from_millis(100);
                RELAY_POLL
            }
            Err(e) => {
                tracing::warn!(source = outbox.source, error = %e, retry_in = ?backoff, "event relay waiting");
                let wait = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                wait
            }
        };
        tokio::select! {
            () = &mut rung => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
}
