//! Exits waiting for their visit's price: those paid with coins, which the exit cannot price
//! itself ([`crate::store::quotes`]). An exit registers after its visit is closed, and
//! whatever learns of the visit's invoice first hands the price straight to it: the consumer of
//! payments' events as it reads the invoice (before its own transaction: the invoice is already
//! committed in payments), or, in the distributed mode, the broker's live feed of invoices, which
//! reaches every replica and not only the one whose consumer applies it. No database read in the
//! common case, however many exits wait at once (waking every waiter on every invoice made each
//! of them read its visit again, which grew with the square of the exits in flight).
//!
//! A price handed over before its exit registered (the invoice can overtake the exit's own task)
//! is remembered for a while: the last [`RECENT`] prices nobody was waiting for.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// A visit's price and PARKY discount, as the barrier shows them (`1.2`, `0.0`).
pub type Price = (String, String);

/// How many prices nobody waited for are remembered, for an exit that registers late.
pub const RECENT: usize = 1024;

/// The exits waiting, by visit id, and the prices lately handed over to nobody.
#[derive(Debug, Default)]
pub struct PriceWaiters(Mutex<Board>);

#[derive(Debug, Default)]
struct Board {
    waiting: HashMap<i64, Vec<oneshot::Sender<Price>>>,
    recent: HashMap<i64, Price>,
    /// `recent`'s visits, oldest first.
    order: VecDeque<i64>,
}

impl PriceWaiters {
    fn board(&self) -> MutexGuard<'_, Board> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers an exit waiting for `visit`'s price; the registration ends when the returned
    /// [`Waiting`] is dropped. A price handed over lately is there at once.
    pub fn wait(&self, visit: i64) -> Waiting<'_> {
        let (tx, rx) = oneshot::channel();
        let mut board = self.board();
        match board.recent.get(&visit) {
            Some(price) => {
                let _ = tx.send(price.clone());
            }
            None => board.waiting.entry(visit).or_default().push(tx),
        }
        Waiting {
            board: self,
            visit,
            rx,
        }
    }

    /// Hands `price` to every exit waiting for `visit`, or remembers it when none is.
    pub fn settle(&self, visit: i64, price: &Price) {
        let mut board = self.board();
        match board.waiting.remove(&visit) {
            Some(list) => {
                for tx in list {
                    let _ = tx.send(price.clone());
                }
            }
            None => {
                if board.recent.insert(visit, price.clone()).is_none() {
                    board.order.push_back(visit);
                    if board.order.len() > RECENT {
                        if let Some(oldest) = board.order.pop_front() {
                            board.recent.remove(&oldest);
                        }
                    }
                }
            }
        }
    }

    /// Visits with an exit waiting.
    pub fn len(&self) -> usize {
        self.board().waiting.len()
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
        let mut board = self.board.board();
        if let Some(list) = board.waiting.get_mut(&self.visit) {
            list.retain(|tx| !tx.is_closed());
            if list.is_empty() {
                board.waiting.remove(&self.visit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(p: &str) -> Price {
        (p.into(), "0.0".into())
    }

    #[tokio::test]
    async fn the_price_reaches_every_exit_waiting_for_that_visit_only() {
        let board = PriceWaiters::default();
        let mut first = board.wait(7);
        let mut retried = board.wait(7);
        let other = board.wait(8);
        assert_eq!(board.len(), 2);
        board.settle(7, &price("1.2"));
        assert_eq!(first.price().await, Some(price("1.2")));
        assert_eq!(retried.price().await, Some(price("1.2")));
        drop((first, retried));
        assert_eq!(board.len(), 1, "visit 8 still waits");
        drop(other);
        assert!(board.is_empty(), "a dropped wait leaves nothing behind");
    }

    #[tokio::test]
    async fn a_price_that_came_before_its_exit_is_there_when_it_registers() {
        let board = PriceWaiters::default();
        board.settle(9, &price("0.6"));
        assert!(board.is_empty(), "nobody waits");
        let mut late = board.wait(9);
        assert_eq!(late.price().await, Some(price("0.6")));
        drop(late);
        assert!(board.is_empty());
        // Only the last RECENT are kept.
        for visit in 100..100 + i64::try_from(RECENT).expect("small") {
            board.settle(visit, &price("1.0"));
        }
        let forgotten = board.wait(9);
        assert_eq!(board.len(), 1, "visit 9's price was forgotten, so it waits");
        drop(forgotten);
        let mut kept = board.wait(100);
        assert_eq!(kept.price().await, Some(price("1.0")));
    }
}
