//! Rows read from the database lately, used again for [`TTL`] without reading them again: the
//! barriers every passage names and the keys every device request checks. A change made through
//! this replica drops or replaces its copy at once; another replica's change is read within the
//! TTL.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a copy is used without reading the row again.
pub const TTL: Duration = Duration::from_secs(10);

/// Copies by key, each with when it was read.
#[derive(Debug)]
pub struct Recent<K, V>(pub(crate) Mutex<HashMap<K, (V, Instant)>>);

impl<K, V> Default for Recent<K, V> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<K: Eq + Hash, V: Clone> Recent<K, V> {
    fn copies(&self) -> std::sync::MutexGuard<'_, HashMap<K, (V, Instant)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `key`'s copy, when read within the TTL.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        self.copies()
            .get(key)
            .filter(|(_, at)| at.elapsed() < TTL)
            .map(|(v, _)| v.clone())
    }

    /// Keeps `value` as `key`'s copy, read now.
    pub(crate) fn put(&self, key: K, value: V) {
        self.copies().insert(key, (value, Instant::now()));
    }

    /// Drops `key`'s copy: it changed, so the next use reads it again.
    pub(crate) fn forget(&self, key: &K) {
        self.copies().remove(key);
    }

    /// Drops every copy.
    pub(crate) fn clear(&self) {
        self.copies().clear();
    }

    /// Changes `key`'s copy with `change`, when there is one, without making it any younger.
    pub(crate) fn update(&self, key: &K, change: impl FnOnce(&mut V)) {
        if let Some((value, _)) = self.copies().get_mut(key) {
            change(value);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.copies().len()
    }
}
