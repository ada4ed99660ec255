//! [`KeptCache`]: values a process made or read once (from the database, or written out),
//! handed out again while their owner proves them current, least recently used dropped first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// What a kept value counts against its cache's limit (machines of a list, names of a
/// request).
pub trait Weighed {
    fn weight(&self) -> usize;
}

/// At most this many values are kept, however light: each counts as at least
/// `LIMIT / MAX_ENTRIES` against the limit. A kept value also costs its key, its row and the
/// copies it shares, whatever its weight; without the floor a daemon polled about many small
/// requests kept every one it ever read (the disruption soak, issue #51: +0.6 MiB a minute).
pub const MAX_ENTRIES: usize = 100;

/// What `value` counts against a cache of `limit`: its weight, and at least a
/// [`MAX_ENTRIES`]th of the limit.
fn cost(value: &impl Weighed, limit: usize) -> usize {
    value.weight().max(limit / MAX_ENTRIES)
}

/// Values by key, up to `LIMIT` in weight (see `cost`). Each is handed out only when its
/// owner proves it current: by the token it was last proven at ([`KeptCache::get_unchanged`];
/// the store's commit token: nothing committed since), or by a check of its own
/// ([`KeptCache::kept_if`]).
#[derive(Debug)]
pub struct KeptCache<V, const LIMIT: usize>(Arc<Mutex<Inner<V>>>);

impl<V, const LIMIT: usize> Clone for KeptCache<V, LIMIT> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<V, const LIMIT: usize> Default for KeptCache<V, LIMIT> {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Inner {
            entries: HashMap::new(),
            weight: 0,
            clock: 0,
        })))
    }
}

#[derive(Debug)]
struct Inner<V> {
    entries: HashMap<String, Kept<V>>,
    weight: usize,
    clock: u64,
}

#[derive(Debug)]
pub struct Kept<V> {
    /// Shared with the copies handed out (a clone is cheap for the values kept here).
    pub value: V,
    last_used: u64,
    /// The owner's token as of when the value was last read or proven current (the store's:
    /// its commit token, read just before; while the database's token still equals it,
    /// nothing was committed since). `None`: no token.
    pub proven: Option<String>,
}

impl<V: Clone + Weighed, const LIMIT: usize> KeptCache<V, LIMIT> {
    fn lock(&self) -> MutexGuard<'_, Inner<V>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a value is kept under `key` (a later read may still find it stale).
    pub fn holds(&self, key: &str) -> bool {
        self.lock().entries.contains_key(key)
    }

    /// The value kept under `key` if it was proven current as of `token` (nothing was
    /// committed since).
    pub fn get_unchanged(&self, key: &str, token: &str) -> Option<V> {
        self.kept_if(key, |kept| kept.proven.as_deref() == Some(token))
    }

    /// The value kept under `key` if `current` says it is (it may record a new proof), which
    /// counts as a use.
    pub fn kept_if(&self, key: &str, current: impl FnOnce(&mut Kept<V>) -> bool) -> Option<V> {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        let kept = inner.entries.get_mut(key)?;
        if !current(kept) {
            return None;
        }
        kept.last_used = now;
        Some(kept.value.clone())
    }

    /// Lets `change` replace the value kept under `key`, if any, with an equal one; not a use.
    pub fn replace_with(&self, key: &str, change: impl FnOnce(&mut V)) {
        if let Some(kept) = self.lock().entries.get_mut(key) {
            change(&mut kept.value);
        }
    }

    pub fn forget(&self, key: &str) {
        let mut inner = self.lock();
        if let Some(old) = inner.entries.remove(key) {
            inner.weight -= cost(&old.value, LIMIT);
        }
    }

    /// Keeps `value` under `key`, proven current as of `token`; a value heavier than the
    /// whole limit is not kept, and the least recently used make room.
    pub fn put(&self, key: String, value: V, token: Option<String>) {
        self.forget(&key);
        let added = cost(&value, LIMIT);
        if added > LIMIT {
            return;
        }
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        inner.weight += added;
        inner.entries.insert(
            key,
            Kept {
                value,
                last_used: now,
                proven: token,
            },
        );
        while inner.weight > LIMIT {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, kept)| kept.last_used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(dropped) = inner.entries.remove(&oldest) {
                inner.weight -= cost(&dropped.value, LIMIT);
            }
        }
    }
}

impl Weighed for crate::machine::MachineList {
    /// Its machines.
    fn weight(&self) -> usize {
        self.len()
    }
}

impl Weighed for crate::request::Request {
    /// The row and the names it lists.
    fn weight(&self) -> usize {
        1 + self.resource_ids.len() + self.machine_ids.len() + self.unknown_machines.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone)]
    struct Names(usize);

    impl Weighed for Names {
        fn weight(&self) -> usize {
            self.0
        }
    }

    fn kept<const LIMIT: usize>(cache: &KeptCache<Names, LIMIT>) -> (usize, usize) {
        let inner = cache.lock();
        (inner.entries.len(), inner.weight)
    }

    #[test]
    fn light_values_are_kept_up_to_max_entries_only() {
        let cache = KeptCache::<Names, 20_000>::default();
        for i in 0..10 * MAX_ENTRIES {
            cache.put(format!("r{i}"), Names(2), None);
        }
        assert_eq!(kept(&cache), (MAX_ENTRIES, 20_000));
        // The most recent ones stay.
        assert!(cache.holds(&format!("r{}", 10 * MAX_ENTRIES - 1)));
        assert!(!cache.holds("r0"));
    }

    #[test]
    fn heavy_values_count_their_weight_and_forget_gives_it_back() {
        let cache = KeptCache::<Names, 20_000>::default();
        cache.put("big".into(), Names(15_000), None);
        cache.put("small".into(), Names(1), None);
        assert_eq!(kept(&cache), (2, 15_200));
        cache.put("other".into(), Names(6_000), None);
        assert!(!cache.holds("big"), "the least recently used makes room");
        assert_eq!(kept(&cache), (2, 6_200));
        cache.forget("other");
        cache.forget("small");
        assert_eq!(kept(&cache), (0, 0));
        cache.put("too big".into(), Names(20_001), None);
        assert_eq!(kept(&cache), (0, 0));
    }
}
