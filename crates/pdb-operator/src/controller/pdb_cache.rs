//! The PDBs a reconcile looks at, from one watch shared by every controller instead of a
//! LIST of the namespace per reconcile: with 1,000 PDBs in a namespace each LIST returned
//! about a megabyte, so 1,000 reconciles cost O(n²) (bench `operator_scale`: a full resync
//! took 55 s, the p99 from Deployment to PDB 140 s).
//!
//! The cache may lag a write by a watch round-trip, so a PDB this operator wrote a moment ago
//! could be taken for missing (and counted and announced as created twice). [`RecentWrites`]
//! closes that gap: it keeps what our own writes returned until the watch has delivered them.
//! A PDB someone else created in that same moment is caught by the create itself, which is a
//! server-side apply without `force`: it fails with a conflict instead of taking the PDB over.
//! (This replaced a GET of `<name>-pdb` on every cache miss: one API call of three for each
//! new workload.) Only the PDBs a decision can depend on are copied out of the cache
//! ([`super::cached_pdbs`]): the one named `<name>-pdb` and those selecting the workload's
//! pods.
//!
//! The same watch also feeds every controller's PDB triggers ([`PdbEvents`]): one watch of the
//! scope's PDBs instead of one per controller (four with the Workload API on), which in a burst
//! of 1,000 new PDBs, each updated by the disruption controller, was that many more events for
//! the apiserver to encode and the operator to decode.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};

use super::Error;
use super::cached_pdbs::PdbCache;

/// How long a write is remembered at most when the watch never shows it (it was deleted
/// before the watch delivered it, and a relist skipped both events).
const REMEMBER_FOR: Duration = Duration::from_secs(60);

/// PDBs this operator wrote in the last minute, by namespace and name.
#[derive(Default)]
pub struct RecentWrites {
    inner: Mutex<HashMap<(String, String), Written>>,
}

/// One write of ours.
struct Written {
    /// What the apiserver returned, until the shared watch has shown it.
    pdb: Option<PodDisruptionBudget>,
    /// The `resourceVersion` it produced, for [`RecentWrites::is_echo`].
    resource_version: Option<String>,
    at: Instant,
}

impl RecentWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Written>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn key(p: &PodDisruptionBudget) -> (String, String) {
        (p.namespace().unwrap_or_default(), p.name_any())
    }

    /// Keeps `written` (what the apiserver returned for our write) until the watch shows it.
    pub fn remember(&self, written: &PodDisruptionBudget) {
        self.remember_at(written, Instant::now());
    }

    fn remember_at(&self, written: &PodDisruptionBudget, now: Instant) {
        let mut kept = written.clone();
        kept.metadata.managed_fields = None;
        let mut map = self.lock();
        map.retain(|_, w| now.saturating_duration_since(w.at) < REMEMBER_FOR);
        map.insert(
            Self::key(written),
            Written {
                resource_version: kept.metadata.resource_version.clone(),
                pdb: Some(kept),
                at: now,
            },
        );
    }

    /// Our own delete of `namespace/name` went through.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.lock()
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Whether a watch event of `p` is the echo of our own last write (same resourceVersion):
    /// it carries exactly what the decision wrote, so it needs no second look at the owner.
    /// Half the reconciles of a burst of new workloads were these echoes.
    pub fn is_echo(&self, p: &PodDisruptionBudget) -> bool {
        let Some(rv) = &p.metadata.resource_version else {
            return false;
        };
        self.lock()
            .get(&Self::key(p))
            .is_some_and(|w| w.resource_version.as_ref() == Some(rv))
    }

    /// The watch delivered `seen` (and the store holds it): the write of the same object
    /// (same UID) needs no remembering any more (its version still counts for echoes).
    pub fn seen(&self, seen: &PodDisruptionBudget) {
        let mut map = self.lock();
        if let Some(w) = map.get_mut(&Self::key(seen))
            && w.pdb
                .as_ref()
                .is_some_and(|p| p.metadata.uid == seen.metadata.uid)
        {
            w.pdb = None;
        }
    }

    /// Our write of `namespace/name`, if the watch has not shown it yet.
    pub fn get(&self, namespace: &str, name: &str) -> Option<PodDisruptionBudget> {
        self.get_at(namespace, name, Instant::now())
    }

    fn get_at(&self, namespace: &str, name: &str, now: Instant) -> Option<PodDisruptionBudget> {
        self.lock()
            .get(&(namespace.to_string(), name.to_string()))
            .filter(|w| now.saturating_duration_since(w.at) < REMEMBER_FOR)
            .and_then(|w| w.pdb.clone())
    }
}

/// Events of the shared PDB watch a subscriber has not taken yet, at most.
const FAN_OUT_BUFFER: usize = 4096;

/// The shared PDB watch's events, for each controller to subscribe to.
#[derive(Clone)]
pub struct PdbEvents {
    tx: tokio::sync::broadcast::Sender<watcher::Event<PodDisruptionBudget>>,
    cache: Arc<PdbCache>,
}

impl PdbEvents {
    /// The watch events from now on. A subscriber that falls more than [`FAN_OUT_BUFFER`]
    /// events behind gets the store's content as a relist instead (`Init`, `InitApply` each,
    /// `InitDone`), as after a broken watch: what changed meanwhile triggers, a deletion it
    /// missed does not.
    pub fn subscribe(
        &self,
    ) -> impl futures::Stream<Item = Result<watcher::Event<PodDisruptionBudget>, watcher::Error>>
    + Send
    + 'static {
        use tokio::sync::broadcast::error::RecvError;
        let (rx, cache) = (self.tx.subscribe(), self.cache.clone());
        futures::stream::unfold((rx, cache), |(mut rx, cache)| async move {
            let batch: Vec<watcher::Event<PodDisruptionBudget>> = match rx.recv().await {
                Ok(ev) => vec![ev],
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "PodDisruptionBudget triggers fell behind; relisting from the cache"
                    );
                    std::iter::once(watcher::Event::Init)
                        .chain(
                            cache
                                .all()
                                .iter()
                                .map(|p| watcher::Event::InitApply((**p).clone())),
                        )
                        .chain(std::iter::once(watcher::Event::InitDone))
                        .collect()
                }
                Err(RecvError::Closed) => return None,
            };
            Some((
                futures::stream::iter(batch.into_iter().map(Ok)),
                (rx, cache),
            ))
        })
        .flatten()
    }
}

/// Watches `api` (the operator's scope) into a [`PdbCache`]; managedFields are dropped to save
/// memory. Every object the cache takes in is struck off `recent` (after the cache holds it),
/// and every event is passed on to the [`PdbEvents`] subscribers.
pub fn watch_pdbs(
    api: Api<PodDisruptionBudget>,
    recent: Arc<RecentWrites>,
) -> (Arc<PdbCache>, PdbEvents, impl Future<Output = ()> + Send) {
    let cache = Arc::new(PdbCache::default());
    let (tx, _) = tokio::sync::broadcast::channel(FAN_OUT_BUFFER);
    let events = PdbEvents {
        tx: tx.clone(),
        cache: cache.clone(),
    };
    let writer = cache.clone();
    let fut = async move {
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|p| {
                p.metadata.managed_fields = None;
            });
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => {
                    writer.apply(&ev);
                    if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) = &ev {
                        recent.seen(p);
                    }
                    // No subscriber yet is fine: controllers start after the first list.
                    let _ = tx.send(ev);
                }
                Err(e) => tracing::warn!(error = %e, "PodDisruptionBudget watch error; retrying"),
            }
        }
    };
    (cache, events, fut)
}

/// The PDBs of the namespace `api` points at that matter for the workload: from `cache` when
/// there is one (plus our own write of `name` when the cache does not show it yet), else one
/// LIST of all.
pub async fn namespace_pdbs(
    cache: Option<&PdbCache>,
    recent: &RecentWrites,
    api: &Api<PodDisruptionBudget>,
    namespace: &str,
    name: &str,
    pod_labels: &[BTreeMap<String, String>],
) -> Result<Vec<PodDisruptionBudget>, Error> {
    let Some(cache) = cache else {
        return Ok(api.list(&ListParams::default()).await?.items);
    };
    let (mut list, has_name) = cache.for_workload(namespace, name, pod_labels);
    if !has_name && let Some(p) = recent.get(namespace, name) {
        list.push(p);
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::controller::cached_pdbs::tests::pdb;

    fn written(ns: &str, name: &str, uid: &str) -> PodDisruptionBudget {
        let mut p = (*pdb(ns, name, "x")).clone();
        p.metadata.uid = Some(uid.into());
        p
    }

    #[test]
    fn a_write_is_remembered_until_the_watch_shows_the_same_object() {
        let recent = RecentWrites::default();
        recent.remember(&written("a", "x-pdb", "u1"));
        assert!(recent.get("a", "x-pdb").is_some());
        assert!(recent.get("b", "x-pdb").is_none(), "another namespace");
        recent.seen(&written("a", "x-pdb", "u0"));
        assert!(
            recent.get("a", "x-pdb").is_some(),
            "an older object of the same name is not our write"
        );
        recent.seen(&written("a", "x-pdb", "u1"));
        assert!(recent.get("a", "x-pdb").is_none());
    }

    #[test]
    fn a_delete_or_old_age_forgets_a_write() {
        let recent = RecentWrites::default();
        recent.remember(&written("a", "x-pdb", "u1"));
        recent.forget("a", "x-pdb");
        assert!(recent.get("a", "x-pdb").is_none());
        let then = Instant::now();
        recent.remember_at(&written("a", "y-pdb", "u2"), then);
        assert!(
            recent
                .get_at("a", "y-pdb", then + REMEMBER_FOR / 2)
                .is_some()
        );
        assert!(recent.get_at("a", "y-pdb", then + REMEMBER_FOR).is_none());
    }

    #[tokio::test]
    async fn a_subscriber_gets_the_events_and_one_that_fell_behind_a_relist() {
        let cache = Arc::new(PdbCache::default());
        let (tx, _) = tokio::sync::broadcast::channel(FAN_OUT_BUFFER);
        let events = PdbEvents {
            tx: tx.clone(),
            cache: cache.clone(),
        };
        let kept = (*pdb("a", "kept-pdb", "x")).clone();
        cache.apply(&watcher::Event::Apply(kept.clone()));
        let mut on_time = Box::pin(events.subscribe());
        let late = events.subscribe();
        tx.send(watcher::Event::Apply(kept.clone())).unwrap();
        let first = on_time.next().await.unwrap().unwrap();
        assert!(matches!(first, watcher::Event::Apply(p) if p.name_any() == "kept-pdb"));
        for _ in 0..FAN_OUT_BUFFER {
            tx.send(watcher::Event::Delete(kept.clone())).unwrap();
        }
        let relist: Vec<_> = Box::pin(late)
            .take(3)
            .map(|e| match e.unwrap() {
                watcher::Event::Init => "Init".to_string(),
                watcher::Event::InitApply(p) => format!("InitApply {}", p.name_any()),
                watcher::Event::InitDone => "InitDone".to_string(),
                other => format!("{other:?}"),
            })
            .collect()
            .await;
        assert_eq!(relist, ["Init", "InitApply kept-pdb", "InitDone"]);
    }

    #[test]
    fn only_the_version_our_write_produced_is_an_echo() {
        let recent = RecentWrites::default();
        let mut ours = written("a", "x-pdb", "u1");
        ours.metadata.resource_version = Some("10".into());
        recent.remember(&ours);
        assert!(recent.is_echo(&ours));
        let mut later = ours.clone();
        later.metadata.resource_version = Some("11".into());
        assert!(!recent.is_echo(&later), "someone changed it after us");
        recent.seen(&ours);
        assert!(recent.is_echo(&ours), "the other watch may see it later");
        recent.forget("a", "x-pdb");
        assert!(!recent.is_echo(&ours));
    }
}
