//! Exits waiting for their visit's price. An exit registers before it looks at the visit, and
//! the consumer that applies the visit's invoice hands the price straight to it: one database
//! read per exit, however many exits wait at once (waking every waiter on every invoice made
//! each of them read its visit again, which grew with the square of the exits in flight).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// A visit's price and PARKY discount, as the barrier shows them (`1.2`, `0.0`).
pub type Price = (String, String);

/// The exits waiting, by visit id.
#[derive(Debug, Default)]
pub struct PriceWaiters(Mutex<HashMap<i64, Vec<oneshot::Sender<Price>>>>);

impl PriceWaiters {
    fn waiting(&self) -> MutexGuard<'_, HashMap<i64, Vec<oneshot::Sender<Price>>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers an exit waiting for `visit`'s price; the registration ends when the returned
    /// [`Waiting`] is dropped.
    pub fn wait(&self, visit: i64) -> Waiting<'_> {
        let (tx, rx) = oneshot::channel();
        self.waiting().entry(visit).or_default().push(tx);
        Waiting {
            board: self,
            visit,
            rx,
        }
    }

    /// Hands `price` to every exit waiting for `visit`.
    pub fn settle(&self, visit: i64, price: &Price) {
        for tx in self.waiting().remove(&visit).into_iter().flatten() {
            let _ = tx.send(price.clone());
        }
    }

    /// Visits with an exit waiting.
    pub fn len(&self) -> usize {
        self.waiting().len()
    }

    /// Whether no exit waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One exit's registration: await [`Waiting::price`].
#[derive(Debug)]
pub struct Waiting<'a> {
    board: &'a PriceWaiters,
    visit: i64,
    rx: oneshot::Receiver<Price>,
}

impl Waiting<'_> {
    /// The price, once the invoice is applied; `None` if the board is dropped first.
    pub async fn price(&mut self) -> Option<Price> {
        (&mut self.rx).await.ok()
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        // Closed first, so that this exit's sender reads as closed below.
        self.rx.close();
        let mut waiting = self.board.waiting();
        if let Some(list) = waiting.get_mut(&self.visit) {
            list.retain(|tx| !tx.is_closed());
            if list.is_empty() {
                waiting.remove(&self.visit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_price_reaches_every_exit_waiting_for_that_visit_only() {
        let board = PriceWaiters::default();
        let mut first = board.wait(7);
        let mut retried = board.wait(7);
        let other = board.wait(8);
        assert_eq!(board.len(), 2);
        board.settle(7, &("1.2".into(), "0.0".into()));
        assert_eq!(first.price().await, Some(("1.2".into(), "0.0".into())));
        assert_eq!(retried.price().await, Some(("1.2".into(), "0.0".into())));
        drop((first, retried));
        assert_eq!(board.len(), 1, "visit 8 still waits");
        drop(other);
        assert!(board.is_empty(), "a dropped wait leaves nothing behind");
        // A price nobody waits for is dropped.
        board.settle(9, &("0.6".into(), "0.0".into()));
        assert!(board.is_empty());
    }
}
