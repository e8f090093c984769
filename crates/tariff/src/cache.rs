//! Price table versions parsed once per process. A park's table version never changes once
//! written, so a service that prices stays keeps each version it parsed by (park id, version)
//! and reads the database only for a version it has not seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Most versions kept; past it the cache starts again (a park's manager would have to replace
/// its table thousands of times for it to matter).
pub const MAX_VERSIONS: usize = 1024;

/// Parsed versions (`T`: the table, with whatever its service keeps beside it), by (park id,
/// version).
#[derive(Debug)]
pub struct Versions<T>(Mutex<HashMap<(i64, i64), Arc<T>>>);

impl<T> Default for Versions<T> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<T> Versions<T> {
    /// Version `version` of park `park_id`'s table, if kept.
    pub fn get(&self, park_id: i64, version: i64) -> Option<Arc<T>> {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        kept.get(&(park_id, version)).cloned()
    }

    /// Keeps `table` as version `version` of park `park_id`'s table and hands it back.
    pub fn keep(&self, park_id: i64, version: i64, table: T) -> Arc<T> {
        let table = Arc::new(table);
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() >= MAX_VERSIONS {
            kept.clear();
        }
        kept.insert((park_id, version), Arc::clone(&table));
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_kept_by_park_and_version() {
        let versions = Versions::default();
        assert!(versions.get(1, 1).is_none());
        let kept = versions.keep(1, 1, "one");
        assert!(Arc::ptr_eq(&kept, &versions.get(1, 1).expect("kept")));
        assert!(versions.get(2, 1).is_none() && versions.get(1, 2).is_none());
        for v in 0..i64::try_from(MAX_VERSIONS).expect("small") {
            versions.keep(9, v, "many");
        }
        assert!(versions.get(1, 1).is_none(), "started again past the bound");
    }
}
