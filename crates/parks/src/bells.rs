//! What wakes the long polls of this process: one bell for the parks as a whole (the front
//! office's `/parks/changes`) and one per park (its displays). A change in one park rings its
//! bell and the whole's, so a display waiting in another park does not read its version again
//! for it; a change whose park is not known here (a spot switched by number, the distributed
//! mode's periodic check) rings every bell.
//!
//! A bell only says "read your version again": the versions themselves come from the database
//! ([`crate::store::displays`]), so a ring too many costs a read and a ring missed by one replica
//! is made up by the distributed mode's periodic check.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::watch;

/// The bells. Cheap to ring; a park's bell is made when its first display waits.
#[derive(Debug)]
pub struct Bells {
    all: watch::Sender<()>,
    parks: Mutex<HashMap<i64, watch::Sender<()>>>,
}

impl Default for Bells {
    fn default() -> Self {
        Self {
            all: watch::Sender::new(()),
            parks: Mutex::default(),
        }
    }
}

impl Bells {
    /// Rung on any change.
    pub fn any(&self) -> watch::Receiver<()> {
        self.all.subscribe()
    }

    /// Rung on a change in park `id` (and on changes of unknown park).
    pub fn park(&self, id: i64) -> watch::Receiver<()> {
        let mut parks = self.parks.lock().unwrap_or_else(PoisonError::into_inner);
        parks
            .entry(id)
            .or_insert_with(|| watch::Sender::new(()))
            .subscribe()
    }

    /// Something in park `id` changed.
    pub fn ring(&self, id: i64) {
        self.all.send_replace(());
        let parks = self.parks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(bell) = parks.get(&id) {
            bell.send_replace(());
        }
    }

    /// Something changed, in a park not known here or in every park.
    pub fn ring_all(&self) {
        self.all.send_replace(());
        let parks = self.parks.lock().unwrap_or_else(PoisonError::into_inner);
        for bell in parks.values() {
            bell.send_replace(());
        }
    }

    /// Long polls waiting on park `id`'s bell now.
    pub fn waiting_in(&self, id: i64) -> usize {
        let parks = self.parks.lock().unwrap_or_else(PoisonError::into_inner);
        parks.get(&id).map_or(0, watch::Sender::receiver_count)
    }

    /// Long polls waiting now, on any bell.
    pub fn waiting(&self) -> usize {
        let parks = self.parks.lock().unwrap_or_else(PoisonError::into_inner);
        self.all.receiver_count()
            + parks
                .values()
                .map(watch::Sender::receiver_count)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_park_s_change_rings_its_bell_and_the_whole_s_only() {
        let bells = Bells::default();
        let (mut any, mut one, two) = (bells.any(), bells.park(1), bells.park(2));
        bells.ring(1);
        assert!(any.has_changed().unwrap());
        assert!(one.has_changed().unwrap());
        assert!(!two.has_changed().unwrap(), "park 2 was not rung");
        any.mark_unchanged();
        one.mark_unchanged();
        bells.ring(3);
        assert!(
            any.has_changed().unwrap(),
            "a park nobody waits on still rings the whole"
        );
        assert!(!one.has_changed().unwrap());
        bells.ring_all();
        assert!(one.has_changed().unwrap() && two.has_changed().unwrap());
        assert_eq!(bells.waiting(), 3);
        assert_eq!((bells.waiting_in(2), bells.waiting_in(3)), (1, 0));
        drop((any, one, two));
        assert_eq!(bells.waiting(), 0);
    }
}
