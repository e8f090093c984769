//! The customers' keys as this process last read them, kept current by a watch of their bucket:
//! sealing and opening need a key per customer per event, and a broker round trip for each
//! put one on every hop of an exit's wait for its invoice (`docs/benchmark-history.md`). An
//! entry is used only while the watch runs; a key the broker replaces or erases is replaced
//! here as the watch tells (within milliseconds), whatever order the read and the watch's news
//! arrive in (the entry's revision decides).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures_util::StreamExt;

use super::MAX_BACKOFF;

/// A customer's key.
pub(crate) type Key = [u8; 32];

/// Keys by owner: the entry's revision, and the key (`None`: erased, or none drawn).
#[derive(Default)]
pub(crate) struct KeyCache {
    /// The watch runs, and what is here is current.
    watching: AtomicBool,
    /// Counts the watch's starts: a read begun before the last one may be stale.
    epoch: AtomicU64,
    keys: Mutex<HashMap<i64, (u64, Option<Key>)>>,
}

/// The owner an entry's name (`customer.<id>`) is about.
pub(crate) fn owner_of(name: &str) -> Option<i64> {
    name.strip_prefix("customer.")?.parse().ok()
}

/// What an entry's value says: a key, or not (erased).
pub(crate) fn key_in(value: &[u8]) -> Option<Key> {
    Key::try_from(value).ok()
}

impl KeyCache {
    /// A cache kept current by a watch of `bucket` (the watch ends when the cache is dropped).
    pub(crate) fn watching(bucket: kv::Store) -> Arc<Self> {
        let cache = Arc::new(Self::default());
        tokio::spawn(watch(bucket, Arc::downgrade(&cache)));
        cache
    }

    /// `owner`'s key as known here (`Some(None)`: erased); `None` when unknown, or while the
    /// watch is down.
    pub(crate) fn get(&self, owner: i64) -> Option<Option<Key>> {
        if !self.watching.load(Ordering::Acquire) {
            return None;
        }
        self.map().get(&owner).map(|(_, key)| *key)
    }

    /// Where a read starts: pass it to [`KeyCache::note`] with what was read.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Notes `owner`'s entry at `revision` as read (begun at `epoch`) or written here, unless
    /// a later one is known, or the read may have missed a change.
    pub(crate) fn note(&self, epoch: u64, owner: i64, revision: u64, key: Option<Key>) {
        if !self.watching.load(Ordering::Acquire) || epoch != self.epoch() {
            return;
        }
        self.learn(owner, revision, key);
    }

    fn learn(&self, owner: i64, revision: u64, key: Option<Key>) {
        let mut keys = self.map();
        if keys.get(&owner).is_none_or(|(known, _)| *known < revision) {
            keys.insert(owner, (revision, key));
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<i64, (u64, Option<Key>)>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The watch (re)started: nothing known before can be trusted.
    fn started(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.map().clear();
        self.watching.store(true, Ordering::Release);
    }

    /// The watch stopped: nothing here is used until it runs again.
    fn stopped(&self) {
        self.watching.store(false, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.map().clear();
    }
}

/// Follows every change of `bucket` into `cache`, again after a failure, for as long as the
/// cache is in use.
async fn watch(bucket: kv::Store, cache: Weak<KeyCache>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match bucket.watch_all().await {
            Ok(mut changes) => {
                match cache.upgrade() {
                    Some(cache) => cache.started(),
                    None => return,
                }
                backoff = Duration::from_millis(100);
                while let Some(change) = changes.next().await {
                    let Some(cache) = cache.upgrade() else {
                        return;
                    };
                    let Ok(change) = change else { break };
                    if let Some(owner) = owner_of(&change.key) {
                        let key = match change.operation {
                            kv::Operation::Put => key_in(&change.value),
                            kv::Operation::Delete | kv::Operation::Purge => None,
                        };
                        cache.learn(owner, change.revision, key);
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "the keys' watch waiting for the broker"),
        }
        match cache.upgrade() {
            Some(cache) => cache.stopped(),
            None => return,
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_later_revision_wins_and_a_read_from_before_a_restart_is_dropped() {
        let cache = KeyCache::default();
        cache.note(cache.epoch(), 6, 3, Some([1; 32]));
        assert_eq!(cache.get(6), None, "nothing is used without the watch");
        cache.started();
        let epoch = cache.epoch();
        cache.note(epoch, 6, 5, None);
        cache.note(epoch, 6, 4, Some([1; 32]));
        assert_eq!(
            cache.get(6),
            Some(None),
            "the erasure (5) stays over the older read"
        );
        cache.learn(6, 7, Some([2; 32]));
        assert_eq!(cache.get(6), Some(Some([2; 32])));
        cache.stopped();
        cache.started();
        cache.note(epoch, 7, 9, Some([3; 32]));
        assert_eq!(cache.get(7), None, "read before the restart");
        assert_eq!(cache.get(6), None, "cleared");
        assert_eq!(owner_of("customer.12"), Some(12));
        assert_eq!(owner_of("other.12"), None);
    }
}
