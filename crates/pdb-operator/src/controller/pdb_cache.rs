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
//! new workload.) Only the PDBs a decision can depend on are copied out of the cache: the one
//! named `<name>-pdb` and those selecting the workload's pods.
//!
//! The same watch also feeds every controller's PDB triggers ([`PdbEvents`]): one watch of the
//! scope's PDBs instead of one per controller (four with the Workload API on), which in a burst
//! of 1,000 new PDBs, each updated by the disruption controller, was that many more events for
//! the apiserver to encode and the operator to decode.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::{WatchStreamExt, watcher};

use super::Error;

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

/// The scope's PDBs by namespace and name, each with its selector parsed once and indexed by a
/// label its pods must carry. A reconcile reads its own namespace only, and only the PDBs that
/// could select its pods: reading a reflector store's whole state and matching every PDB's
/// selector per reconcile made a resync of 5,000 Deployments in one namespace cost 2 ms of CPU
/// a reconcile (perf: selector clones, namespace comparisons, then the matching itself), O(n²)
/// over the resync.
pub struct PdbCache {
    state: RwLock<CacheState>,
    ready: tokio::sync::watch::Sender<bool>,
}

type ByNamespace = HashMap<String, Namespace>;

#[derive(Default)]
struct CacheState {
    by_ns: ByNamespace,
    /// A relist in progress (`Init` .. `InitDone`); the old content answers until it is done.
    relist: Option<ByNamespace>,
}

/// A label `key=value`.
type Label = (String, String);

/// The PDBs of one namespace.
#[derive(Default)]
struct Namespace {
    by_name: BTreeMap<String, Cached>,
    /// Names of the PDBs whose selector requires this label (each under one label it requires).
    by_label: HashMap<Label, BTreeSet<String>>,
    /// Names of the PDBs whose selector requires no single label (empty, expressions only):
    /// looked at for every workload.
    unindexed: BTreeSet<String>,
}

#[derive(Clone)]
struct Cached {
    pdb: Arc<PodDisruptionBudget>,
    /// `None`: no selector, or one that does not parse; it selects no pod (as `pdb_selects`).
    selector: Option<Selector>,
    /// The label it is indexed under (`None`: in `unindexed`, or selects nothing).
    indexed_by: Option<Label>,
}

impl Cached {
    fn selects_any(&self, pod_labels: &[BTreeMap<String, String>]) -> bool {
        self.selector
            .as_ref()
            .is_some_and(|s| pod_labels.iter().any(|l| s.matches(l)))
    }
}

/// Labels a pod must carry to be selected by `sel`: its matchLabels, and `In` expressions of a
/// single value.
fn required_labels(sel: &LabelSelector) -> Vec<Label> {
    let mut labels: Vec<Label> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for e in sel.match_expressions.iter().flatten() {
        if let (Some([v]), "In") = (e.values.as_deref(), e.operator.as_str()) {
            labels.push((e.key.clone(), v.clone()));
        }
    }
    labels
}

impl Namespace {
    fn insert(&mut self, p: &PodDisruptionBudget) {
        let name = p.name_any();
        self.remove(&name);
        let label_selector = p.spec.as_ref().and_then(|s| s.selector.clone());
        let selector = label_selector
            .clone()
            .and_then(|s| Selector::try_from(s).ok());
        let mut indexed_by = None;
        if selector.is_some() {
            // Under the required label with the fewest PDBs so far: a label every workload of
            // the namespace carries (`team=x`) would otherwise collect them all.
            let required = label_selector.as_ref().map(required_labels);
            indexed_by = required
                .into_iter()
                .flatten()
                .min_by_key(|l| self.by_label.get(l).map_or(0, BTreeSet::len));
            match &indexed_by {
                Some(l) => self
                    .by_label
                    .entry(l.clone())
                    .or_default()
                    .insert(name.clone()),
                None => self.unindexed.insert(name.clone()),
            };
        }
        let cached = Cached {
            pdb: Arc::new(p.clone()),
            selector,
            indexed_by,
        };
        self.by_name.insert(name, cached);
    }

    fn remove(&mut self, name: &str) {
        let Some(old) = self.by_name.remove(name) else {
            return;
        };
        match old.indexed_by {
            Some(l) => {
                if let Some(names) = self.by_label.get_mut(&l) {
                    names.remove(name);
                    if names.is_empty() {
                        self.by_label.remove(&l);
                    }
                }
            }
            None => {
                self.unindexed.remove(name);
            }
        }
    }

    /// Names of the PDBs that may select a pod with one of `pod_labels`.
    fn candidates(&self, pod_labels: &[BTreeMap<String, String>]) -> BTreeSet<&str> {
        let mut names: BTreeSet<&str> = self.unindexed.iter().map(String::as_str).collect();
        for labels in pod_labels {
            for (k, v) in labels {
                if let Some(found) = self.by_label.get(&(k.clone(), v.clone())) {
                    names.extend(found.iter().map(String::as_str));
                }
            }
        }
        names
    }
}

fn key_of(p: &PodDisruptionBudget) -> (String, String) {
    (p.namespace().unwrap_or_default(), p.name_any())
}

fn insert(map: &mut ByNamespace, p: &PodDisruptionBudget) {
    map.entry(p.namespace().unwrap_or_default())
        .or_default()
        .insert(p);
}

impl Default for PdbCache {
    fn default() -> Self {
        Self {
            state: RwLock::default(),
            ready: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl PdbCache {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, CacheState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one watch event in, as a reflector store does: a relist replaces the content
    /// when it is complete, and the first complete list makes the cache ready.
    pub fn apply(&self, ev: &watcher::Event<PodDisruptionBudget>) {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        match ev {
            watcher::Event::Apply(p) => insert(&mut state.by_ns, p),
            watcher::Event::Delete(p) => {
                let (ns, name) = key_of(p);
                if let Some(pdbs) = state.by_ns.get_mut(&ns) {
                    pdbs.remove(&name);
                    if pdbs.by_name.is_empty() {
                        state.by_ns.remove(&ns);
                    }
                }
            }
            watcher::Event::Init => state.relist = Some(ByNamespace::new()),
            watcher::Event::InitApply(p) => insert(state.relist.get_or_insert_default(), p),
            watcher::Event::InitDone => {
                state.by_ns = state.relist.take().unwrap_or_default();
                drop(state);
                self.ready.send_replace(true);
            }
        }
    }

    /// Returns once the first complete list has been taken in.
    pub async fn wait_until_ready(&self) {
        let _ = self.ready.subscribe().wait_for(|ready| *ready).await;
    }

    /// Every cached PDB.
    pub fn all(&self) -> Vec<Arc<PodDisruptionBudget>> {
        self.read()
            .by_ns
            .values()
            .flat_map(|pdbs| pdbs.by_name.values().map(|c| c.pdb.clone()))
            .collect()
    }

    /// The cached PDBs of `namespace`, by name.
    pub fn in_namespace(&self, namespace: &str) -> Vec<PodDisruptionBudget> {
        self.read()
            .by_ns
            .get(namespace)
            .map(|pdbs| pdbs.by_name.values().map(|c| (*c.pdb).clone()).collect())
            .unwrap_or_default()
    }

    /// The cached PDBs of `namespace` that the workload's decision can depend on (the one
    /// named `name`, and every one selecting a pod with one of `pod_labels`: see
    /// [`crate::pdb::find_pdb_conflict`]), by name, and whether one of them is named `name`.
    pub fn for_workload(
        &self,
        namespace: &str,
        name: &str,
        pod_labels: &[BTreeMap<String, String>],
    ) -> (Vec<PodDisruptionBudget>, bool) {
        let state = self.read();
        let Some(pdbs) = state.by_ns.get(namespace) else {
            return (Vec::new(), false);
        };
        let mut names = pdbs.candidates(pod_labels);
        let has_name = pdbs.by_name.contains_key(name);
        if has_name {
            names.insert(name);
        }
        let list = names
            .into_iter()
            .filter_map(|n| pdbs.by_name.get(n).map(|c| (n, c)))
            .filter(|(n, c)| *n == name || c.selects_any(pod_labels))
            .map(|(_, c)| (*c.pdb).clone())
            .collect();
        (list, has_name)
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

    use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn pdb(ns: &str, name: &str, app: &str) -> Arc<PodDisruptionBudget> {
        let mut p = PodDisruptionBudget::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        p.spec = Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        Arc::new(p)
    }

    fn pods(app: &str) -> Vec<BTreeMap<String, String>> {
        vec![[("app".to_string(), app.to_string())].into()]
    }

    fn cache_of(pdbs: &[Arc<PodDisruptionBudget>]) -> PdbCache {
        let cache = PdbCache::default();
        cache.apply(&watcher::Event::Init);
        for p in pdbs {
            cache.apply(&watcher::Event::InitApply((**p).clone()));
        }
        cache.apply(&watcher::Event::InitDone);
        cache
    }

    fn names(list: &[PodDisruptionBudget]) -> Vec<String> {
        list.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn the_named_pdb_and_those_over_the_pods_of_the_namespace_are_returned() {
        let cache = cache_of(&[
            pdb("a", "x-pdb", "other"),
            pdb("b", "x-pdb", "x"),
            pdb("a", "user", "x"),
            pdb("a", "y-pdb", "y"),
            pdb("b", "user-b", "x"),
        ]);
        let (list, has) = cache.for_workload("a", "x-pdb", &pods("x"));
        assert_eq!(names(&list), ["user", "x-pdb"]);
        assert!(has);
        assert_eq!(names(&cache.in_namespace("b")), ["user-b", "x-pdb"]);
        assert_eq!(cache.all().len(), 5);
    }

    #[test]
    fn a_name_missing_from_the_namespace_is_reported() {
        let cache = cache_of(&[pdb("b", "x-pdb", "x")]);
        let (list, has) = cache.for_workload("a", "x-pdb", &pods("x"));
        assert!(list.is_empty());
        assert!(!has, "x-pdb exists only in another namespace");
    }

    #[test]
    fn selectors_match_as_pdb_selects_does() {
        let mut none = (*pdb("a", "no-selector", "x")).clone();
        none.spec.as_mut().unwrap().selector = None;
        let mut empty = (*pdb("a", "empty-selector", "x")).clone();
        empty.spec.as_mut().unwrap().selector = Some(LabelSelector::default());
        let mut bad = (*pdb("a", "bad-selector", "x")).clone();
        bad.spec.as_mut().unwrap().selector = Some(LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "app".into(),
                    operator: "Sideways".into(),
                    values: None,
                },
            ]),
            ..Default::default()
        });
        let all = [none, empty, bad, (*pdb("a", "other", "y")).clone()];
        let cache = cache_of(&all.clone().map(Arc::new));
        let labels = pods("x");
        let (list, _) = cache.for_workload("a", "w-pdb", &labels);
        let expected: Vec<String> = all
            .iter()
            .filter(|p| crate::pdb::pdb_selects(p, &labels[0]))
            .map(|p| p.name_any())
            .collect();
        assert_eq!(names(&list), expected);
        assert_eq!(names(&list), ["empty-selector"]);
    }

    /// A PDB over `match_labels` and `expressions` (`key`, operator, values).
    fn pdb_over(
        name: &str,
        match_labels: &[(&str, &str)],
        expressions: &[(&str, &str, &[&str])],
    ) -> PodDisruptionBudget {
        let mut p = (*pdb("a", name, "unused")).clone();
        let sel = LabelSelector {
            match_labels: Some(
                match_labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            match_expressions: Some(
                expressions
                    .iter()
                    .map(|(k, op, vs)| {
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                            key: k.to_string(),
                            operator: op.to_string(),
                            values: Some(vs.iter().map(|v| v.to_string()).collect()),
                        }
                    })
                    .collect(),
            ),
        };
        p.spec.as_mut().unwrap().selector = Some(sel);
        p
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<BTreeMap<String, String>> {
        vec![
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ]
    }

    #[test]
    fn a_pdb_is_found_through_any_label_it_requires_and_moves_when_its_selector_changes() {
        let cache = cache_of(&[]);
        for i in 0..3 {
            let name = format!("w{i}-pdb");
            let app = format!("w{i}");
            let p = pdb_over(&name, &[("team", "t"), ("app", &app)], &[]);
            cache.apply(&watcher::Event::Apply(p));
        }
        let (list, _) = cache.for_workload("a", "w1-pdb", &labels(&[("team", "t"), ("app", "w1")]));
        assert_eq!(names(&list), ["w1-pdb"]);
        let (list, _) = cache.for_workload("a", "x-pdb", &labels(&[("team", "t")]));
        assert!(
            list.is_empty(),
            "each needs its app label too: {:?}",
            names(&list)
        );

        cache.apply(&watcher::Event::Apply(pdb_over(
            "w1-pdb",
            &[("app", "moved")],
            &[],
        )));
        let (list, _) = cache.for_workload("a", "x-pdb", &labels(&[("team", "t"), ("app", "w1")]));
        assert!(list.is_empty(), "{:?}", names(&list));
        let (list, _) = cache.for_workload("a", "x-pdb", &labels(&[("app", "moved")]));
        assert_eq!(names(&list), ["w1-pdb"]);
        cache.apply(&watcher::Event::Delete(pdb_over("w1-pdb", &[], &[])));
        let (list, _) = cache.for_workload("a", "x-pdb", &labels(&[("app", "moved")]));
        assert!(list.is_empty());
    }

    /// The index answers exactly what matching every PDB with `pdb_selects` answers, over
    /// selectors of every shape (pseudo-random, same cases every run).
    #[test]
    fn the_index_answers_as_matching_every_pdb_does() {
        let keys = ["app", "team", "tier"];
        let values = ["a", "b", "c"];
        let ops = ["In", "NotIn", "Exists", "DoesNotExist"];
        let mut seed: u64 = 0x5eed;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n
        };
        let mut all = Vec::new();
        for i in 0..200 {
            let mut ml = Vec::new();
            for _ in 0..next(3) {
                ml.push((keys[next(3)], values[next(3)]));
            }
            let mut ex: Vec<(&str, &str, &[&str])> = Vec::new();
            for _ in 0..next(2) {
                let op = ops[next(4)];
                let vals: &[&str] = match (op, next(2)) {
                    ("In" | "NotIn", 0) => &values[..1],
                    ("In" | "NotIn", _) => &values[1..],
                    _ => &[],
                };
                ex.push((keys[next(3)], op, vals));
            }
            all.push(pdb_over(&format!("p{i}"), &ml, &ex));
        }
        let cache = cache_of(&all.iter().cloned().map(Arc::new).collect::<Vec<_>>());
        for _ in 0..300 {
            let mut pod = BTreeMap::new();
            for k in keys {
                if next(3) > 0 {
                    pod.insert(k.to_string(), values[next(3)].to_string());
                }
            }
            let pods = vec![pod];
            let (list, _) = cache.for_workload("a", "none", &pods);
            let expected: Vec<String> = all
                .iter()
                .filter(|p| crate::pdb::pdb_selects(p, &pods[0]))
                .map(|p| p.name_any())
                .collect();
            let mut got = names(&list);
            got.sort();
            let mut expected = expected;
            expected.sort();
            assert_eq!(got, expected, "pod labels {:?}", pods[0]);
        }
    }

    #[tokio::test]
    async fn changes_apply_at_once_and_a_relist_when_it_is_complete() {
        let cache = PdbCache::default();
        assert!(
            futures::FutureExt::now_or_never(cache.wait_until_ready()).is_none(),
            "not ready before the first list"
        );
        let cache = cache_of(&[pdb("a", "old-pdb", "x")]);
        cache.wait_until_ready().await;
        cache.apply(&watcher::Event::Apply((*pdb("a", "new-pdb", "x")).clone()));
        cache.apply(&watcher::Event::Delete((*pdb("a", "old-pdb", "x")).clone()));
        assert_eq!(names(&cache.in_namespace("a")), ["new-pdb"]);
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitApply(
            (*pdb("a", "relisted-pdb", "x")).clone(),
        ));
        assert_eq!(
            names(&cache.in_namespace("a")),
            ["new-pdb"],
            "a relist in progress leaves the old content"
        );
        cache.apply(&watcher::Event::InitDone);
        assert_eq!(names(&cache.in_namespace("a")), ["relisted-pdb"]);
    }

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
