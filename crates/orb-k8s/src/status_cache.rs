//! A short-lived cache of controller states (`controller_status_cache_ttl_seconds`), so
//! frequent polls of a finished workload skip the GET. Only settled states are served: an
//! in-progress snapshot must never hide a change (the reference's regression #253), and an
//! entry recorded for another requested count is never served.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::fulfilment::ControllerState;

#[derive(Debug, Clone)]
struct Entry {
    fetched_at: Instant,
    requested: u32,
    state: ControllerState,
}

/// Keyed by (kind, namespace, name).
#[derive(Debug, Default)]
pub struct ControllerStatusCache {
    ttl: Option<Duration>,
    entries: Mutex<HashMap<(String, String, String), Entry>>,
}

impl ControllerStatusCache {
    /// `ttl = None` disables the cache (every read goes to the apiserver).
    pub fn new(ttl: Option<Duration>) -> Self {
        Self {
            ttl,
            entries: Mutex::default(),
        }
    }

    /// How long a settled state is reused; `None` when caching is off.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }

    fn key(kind: &str, namespace: &str, name: &str) -> (String, String, String) {
        (kind.to_string(), namespace.to_string(), name.to_string())
    }

    /// A cached state still within the TTL at `now`, recorded for the same requested count,
    /// and settled. Anything else is a miss.
    pub fn get(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        requested: u32,
        now: Instant,
    ) -> Option<ControllerState> {
        let ttl = self.ttl?;
        let entries = self.entries.lock().ok()?;
        let entry = entries.get(&Self::key(kind, namespace, name))?;
        let fresh = now.saturating_duration_since(entry.fetched_at) < ttl;
        (fresh && entry.requested == requested && entry.state.is_settled(requested))
            .then(|| entry.state.clone())
    }

    /// Records a state read at `fetched_at` (taken before the GET was sent).
    pub fn put(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        requested: u32,
        state: ControllerState,
        fetched_at: Instant,
    ) {
        let Some(ttl) = self.ttl else {
            return;
        };
        if let Ok(mut entries) = self.entries.lock() {
            // Expired entries can never be served again: without this, every controller
            // ever read stayed (one per acquire in a long-running `orb serve`).
            entries.retain(|_, e| fetched_at.saturating_duration_since(e.fetched_at) < ttl);
            entries.insert(
                Self::key(kind, namespace, name),
                Entry {
                    fetched_at,
                    requested,
                    state,
                },
            );
        }
    }

    /// Drops an entry (after this process changed the controller).
    pub fn invalidate(&self, kind: &str, namespace: &str, name: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(&Self::key(kind, namespace, name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn ready(n: u32) -> ControllerState {
        ControllerState {
            desired: n,
            ready: n,
            ..ControllerState::default()
        }
    }

    #[rstest]
    #[case::fresh_and_settled(Some(5), 3, ready(3), 1, 3, true)]
    #[case::expired(Some(5), 3, ready(3), 6, 3, false)]
    #[case::requested_count_changed(Some(5), 3, ready(3), 1, 2, false)]
    #[case::not_settled(Some(5), 3, ControllerState { desired: 3, ready: 1, ..ControllerState::default() }, 1, 3, false)]
    #[case::job_all_ready_but_running(Some(5), 3, ControllerState { runs_to_completion: true, ..ready(3) }, 1, 3, false)]
    #[case::job_complete(Some(5), 3, ControllerState { runs_to_completion: true, complete: true, ..ready(0) }, 1, 3, true)]
    #[case::disabled(None, 3, ready(3), 0, 3, false)]
    fn serves_only_fresh_settled_entries_for_the_same_count(
        #[case] ttl_secs: Option<u64>,
        #[case] recorded_for: u32,
        #[case] state: ControllerState,
        #[case] after_secs: u64,
        #[case] asked_for: u32,
        #[case] hit: bool,
    ) {
        let cache = ControllerStatusCache::new(ttl_secs.map(Duration::from_secs));
        let t0 = Instant::now();
        cache.put("Deployment", "ns", "d", recorded_for, state.clone(), t0);
        let got = cache.get(
            "Deployment",
            "ns",
            "d",
            asked_for,
            t0 + Duration::from_secs(after_secs),
        );
        assert_eq!(got, hit.then_some(state));
    }

    #[test]
    fn a_put_drops_the_entries_past_their_ttl() {
        let cache = ControllerStatusCache::new(Some(Duration::from_secs(5)));
        let t0 = Instant::now();
        for i in 0..100 {
            cache.put("Job", "ns", &format!("j{i}"), 1, ready(1), t0);
        }
        cache.put(
            "Job",
            "ns",
            "fresh",
            1,
            ready(1),
            t0 + Duration::from_secs(4),
        );
        assert_eq!(cache.entries.lock().unwrap().len(), 101);
        cache.put(
            "Job",
            "ns",
            "later",
            1,
            ready(1),
            t0 + Duration::from_secs(6),
        );
        let entries = cache.entries.lock().unwrap();
        let mut names: Vec<_> = entries.keys().map(|(_, _, name)| name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["fresh", "later"]);
    }

    #[test]
    fn invalidate_forgets_the_entry() {
        let cache = ControllerStatusCache::new(Some(Duration::from_secs(5)));
        let t0 = Instant::now();
        cache.put("Job", "ns", "j", 2, ready(2), t0);
        cache.invalidate("Job", "ns", "j");
        assert_eq!(cache.get("Job", "ns", "j", 2, t0), None);
    }
}
