//! The watch cache of managed pods that `orb serve` answers status reads from.
//!
//! One list-then-watch loop per managed namespace (one cluster-scoped loop for
//! `namespaces: ["*"]`), selecting `<label_prefix>/managed=true`. Each loop:
//! - LISTs, and replaces everything it holds for its scope in one step (a relist can neither
//!   lose a pod nor keep a deleted one, and never duplicates one);
//! - WATCHes from the LIST's resourceVersion with bookmarks on, so a quiet watch still
//!   advances its resourceVersion;
//! - on 410 Gone (the resourceVersion was compacted) LISTs again and resumes;
//! - on any other error backs off (1 s doubling to 30 s) and resumes from the last
//!   resourceVersion it saw;
//! - with `periodic_resync_interval_seconds > 0` does a full LIST at that interval anyway.
//!
//! A read ([`PodCache::pods_of`]) is served only when the loop covering the namespace has
//! listed at least once and has not been failing for longer than
//! `stale_cache_timeout_seconds`; otherwise the caller LISTs. Stored pods keep only the
//! fields readers use ([`crate::kept`]: no `managedFields`, volumes, env, probes, images or IP
//! lists), and LISTs are paginated, so 10,000 pods fit in tens of megabytes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;

use crate::config::NamespaceScope;
use crate::labels::LabelKeys;
use crate::metrics::{K8sMetrics, ReasonLabels, WatchEventLabels};

use crate::kept::Kept;
use crate::pod_read::PodRead;

/// Server-side timeout of one WATCH call; the loop resumes from its resourceVersion after it.
const WATCH_TIMEOUT_SECS: u32 = 290;
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Pods of one request: `(namespace, request id)` → pod name → what is kept of the pod.
/// Behind an `Arc`: a B-tree node holds eleven values inline, about half of them empty after
/// a LIST's ascending inserts, and a read hands the pods out without copying them.
type Index = HashMap<(String, String), BTreeMap<String, Arc<Kept>>>;

/// What one loop (one namespace, or the whole cluster) has achieved.
#[derive(Debug, Clone, Default)]
struct LoopHealth {
    /// A LIST has been applied at least once.
    synced: bool,
    /// Since when calls have been failing (`None` while healthy).
    failing_since: Option<Instant>,
    /// The last resourceVersion applied (LIST, event or bookmark).
    resource_version: Option<String>,
    /// The apiserver refused the last WATCH (401/403): what the cache holds is a LIST that no
    /// event will ever bring up to date, so reads must not use it until a watch runs again.
    refused: bool,
}

#[derive(Debug, Default)]
struct State {
    index: Index,
    /// Keyed by the loop's scope: a namespace, or [`CLUSTER`].
    loops: BTreeMap<String, LoopHealth>,
    pods: usize,
}

const CLUSTER: &str = "*";

/// Why a read was not served from the cache (the caller LISTs instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// No loop covers this namespace (e.g. a template's namespace outside `namespaces`).
    NotWatched,
    /// The loop has not completed its first LIST yet.
    NotSynced,
    /// The loop has been failing for longer than `stale_cache_timeout_seconds`.
    Stale { failing_for: Duration },
    /// The apiserver refuses to let the loop watch (RBAC without `watch` on pods).
    Refused,
}

/// A snapshot of the cache's health, for `/readyz` and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheHealth {
    pub pods: usize,
    /// Scope → (synced, failing for).
    pub loops: BTreeMap<String, (bool, Option<Duration>)>,
}

pub struct PodCache {
    keys: LabelKeys,
    scope: NamespaceScope,
    stale_after: Duration,
    resync_every: Option<Duration>,
    state: RwLock<State>,
    metrics: K8sMetrics,
    /// Requests whose pods changed since [`PodCache::take_changed`] last ran, so `orb serve`
    /// can record what happened to them without anyone polling.
    changed: std::sync::Mutex<std::collections::BTreeSet<String>>,
    changed_notify: tokio::sync::Notify,
}

impl PodCache {
    pub fn new(
        label_prefix: &str,
        scope: NamespaceScope,
        stale_after: Duration,
        resync_every: Option<Duration>,
        metrics: K8sMetrics,
    ) -> Self {
        Self {
            keys: LabelKeys::new(label_prefix),
            scope,
            stale_after,
            resync_every,
            state: RwLock::default(),
            metrics,
            changed: Default::default(),
            changed_notify: tokio::sync::Notify::new(),
        }
    }

    /// The requests whose pods changed since the last call (and forgets them).
    pub fn take_changed(&self) -> Vec<String> {
        let mut changed = self
            .changed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::take(&mut *changed).into_iter().collect()
    }

    /// Waits until some request's pods change.
    pub async fn wait_changed(&self) {
        self.changed_notify.notified().await;
    }

    fn note_changed(&self, requests: impl IntoIterator<Item = String>) {
        let mut changed = self
            .changed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = changed.len();
        changed.extend(requests);
        if changed.len() > before {
            self.changed_notify.notify_one();
        }
    }

    /// The cache `orb serve` runs for `provider`, exactly as its configuration says: `None`
    /// with `watch_enabled=false` (status reads then LIST), else the provider's label prefix
    /// and namespace scope, `stale_cache_timeout_seconds` and
    /// `periodic_resync_interval_seconds`, counted in the provider's metrics.
    pub fn for_provider(provider: &crate::K8sProvider) -> Option<Self> {
        let config = provider.config();
        config.watch_enabled.then(|| {
            Self::new(
                &config.label_prefix,
                provider.watch_scope(),
                config.stale_cache_timeout(),
                config.periodic_resync_interval(),
                provider.metrics().clone(),
            )
        })
    }

    /// How long a failing loop's last view may still answer reads.
    pub fn stale_after(&self) -> Duration {
        self.stale_after
    }

    /// The periodic full LIST, when on.
    pub fn resync_every(&self) -> Option<Duration> {
        self.resync_every
    }

    /// The namespaces the cache watches.
    pub fn scope(&self) -> &NamespaceScope {
        &self.scope
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The loop scope that covers `namespace`, if any.
    fn scope_of(&self, namespace: &str) -> Option<&str> {
        match &self.scope {
            NamespaceScope::ClusterWide => Some(CLUSTER),
            NamespaceScope::Single(ns) => (ns == namespace).then_some(ns.as_str()),
            NamespaceScope::Multi(list) => list
                .iter()
                .find(|n| n.as_str() == namespace)
                .map(String::as_str),
        }
    }

    /// The scopes this cache runs loops for.
    pub fn scopes(&self) -> Vec<String> {
        match &self.scope {
            NamespaceScope::ClusterWide => vec![CLUSTER.to_string()],
            NamespaceScope::Single(ns) => vec![ns.clone()],
            NamespaceScope::Multi(list) => list.clone(),
        }
    }

    /// The live pods of request `request_id` in `namespace`, when the cache may answer.
    pub fn pods_of(&self, namespace: &str, request_id: &str) -> Result<Vec<Arc<Kept>>, Miss> {
        self.pods_of_at(namespace, request_id, Instant::now())
    }

    fn pods_of_at(
        &self,
        namespace: &str,
        request_id: &str,
        now: Instant,
    ) -> Result<Vec<Arc<Kept>>, Miss> {
        let scope = self.scope_of(namespace).ok_or(Miss::NotWatched)?;
        let state = self.read();
        let health = state.loops.get(scope).ok_or(Miss::NotSynced)?;
        if !health.synced {
            return Err(Miss::NotSynced);
        }
        if health.refused {
            return Err(Miss::Refused);
        }
        if let Some(since) = health.failing_since {
            let failing_for = now.saturating_duration_since(since);
            if failing_for > self.stale_after {
                return Err(Miss::Stale { failing_for });
            }
        }
        let key = (namespace.to_string(), request_id.to_string());
        Ok(state
            .index
            .get(&key)
            .map(|pods| pods.values().cloned().collect())
            .unwrap_or_default())
    }

    /// Every cached pod of `namespace` (all namespaces with `None`), sorted by namespace and
    /// name. For tests and the orphan GC.
    pub fn all_pods(&self, namespace: Option<&str>) -> Vec<Pod> {
        let state = self.read();
        let mut pods: Vec<Pod> = state
            .index
            .iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
            .flat_map(|(_, pods)| pods.values().map(|k| k.to_pod()))
            .collect();
        pods.sort_by_key(|a| (a.namespace(), a.name_any()));
        pods
    }

    pub fn health(&self) -> CacheHealth {
        let now = Instant::now();
        let state = self.read();
        CacheHealth {
            pods: state.pods,
            loops: state
                .loops
                .iter()
                .map(|(scope, h)| {
                    (
                        scope.clone(),
                        (
                            h.synced,
                            h.failing_since.map(|s| now.saturating_duration_since(s)),
                        ),
                    )
                })
                .collect(),
        }
    }

    /// True while any loop is failing (a cheap check before anything is decoded).
    pub fn any_failing(&self) -> bool {
        self.read()
            .loops
            .values()
            .any(|h| h.failing_since.is_some())
    }

    /// How long the loop covering `namespace` has been failing, while its last view still
    /// answers reads (a status read served from it may be out of date by that much).
    pub fn failing_for(&self, namespace: &str) -> Option<Duration> {
        self.failing_for_at(namespace, Instant::now())
    }

    fn failing_for_at(&self, namespace: &str, now: Instant) -> Option<Duration> {
        let scope = self.scope_of(namespace)?;
        let state = self.read();
        let since = state.loops.get(scope)?.failing_since?;
        Some(now.saturating_duration_since(since))
    }

    /// True when every loop has listed and none is past `stale_cache_timeout_seconds`: reads
    /// in the managed namespaces are served from memory.
    pub fn serving(&self) -> bool {
        let now = Instant::now();
        let state = self.read();
        let scopes = self.scopes();
        scopes.iter().all(|scope| {
            state.loops.get(scope).is_some_and(|h| {
                h.synced
                    && !h.refused
                    && h.failing_since
                        .is_none_or(|s| now.saturating_duration_since(s) <= self.stale_after)
            })
        })
    }

    fn request_key(&self, pod: &Kept) -> Option<(String, String)> {
        let request = pod.label(&self.keys.request_id())?.to_string();
        Some((pod.metadata.namespace.clone().unwrap_or_default(), request))
    }
}

impl PodCache {
    fn recount(&self, state: &mut State) {
        state.pods = state.index.values().map(BTreeMap::len).sum();
        self.metrics.cache_pods.set(state.pods as i64);
        let serving = self.scopes().iter().all(|s| {
            state
                .loops
                .get(s)
                .is_some_and(|h| h.synced && h.failing_since.is_none())
        });
        self.metrics.cache_serving.set(i64::from(serving));
    }

    /// Replaces everything held for `scope` with a LIST's items.
    fn replace<P: Into<Kept>>(
        &self,
        scope: &str,
        items: impl IntoIterator<Item = P>,
        resource_version: Option<String>,
    ) {
        let mut fresh: Index = HashMap::new();
        for pod in items {
            let pod = Arc::new(pod.into());
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Some(key) = self.request_key(&pod) {
                fresh
                    .entry(key)
                    .or_default()
                    .insert(pod.name().to_string(), pod);
            }
        }
        let mut state = self.write();
        // A relist may have missed events: every request it touched may have changed.
        let touched: Vec<String> = state
            .index
            .keys()
            .chain(fresh.keys())
            .filter(|(ns, _)| scope == CLUSTER || ns == scope)
            .map(|(_, request)| request.clone())
            .collect();
        if scope == CLUSTER {
            state.index = fresh;
        } else {
            state.index.retain(|(ns, _), _| ns != scope);
            state.index.extend(fresh);
        }
        let health = state.loops.entry(scope.to_string()).or_default();
        health.synced = true;
        health.failing_since = None;
        health.resource_version = resource_version;
        self.recount(&mut state);
        drop(state);
        self.note_changed(touched);
    }

    /// Applies one ADDED/MODIFIED (or, with `deleted`, DELETED) event. A pod being deleted
    /// counts as gone: status reads report live pods only.
    fn apply(&self, scope: &str, pod: impl Into<Kept>, deleted: bool) {
        let pod: Kept = pod.into();
        let rv = pod.resource_version();
        let gone = deleted || pod.metadata.deletion_timestamp.is_some();
        let mut state = self.write();
        let key = self.request_key(&pod);
        let request = key.as_ref().map(|(_, request)| request.clone());
        if let Some(key) = key {
            let name = pod.name_any();
            if gone {
                if let Some(pods) = state.index.get_mut(&key) {
                    pods.remove(&name);
                    if pods.is_empty() {
                        state.index.remove(&key);
                    }
                }
            } else {
                state
                    .index
                    .entry(key)
                    .or_default()
                    .insert(name, Arc::new(pod));
            }
        }
        let health = state.loops.entry(scope.to_string()).or_default();
        health.failing_since = None;
        if rv.is_some() {
            health.resource_version = rv;
        }
        self.recount(&mut state);
        drop(state);
        self.note_changed(request);
    }

    fn set_failing(&self, scope: &str) {
        let mut state = self.write();
        let health = state.loops.entry(scope.to_string()).or_default();
        health.failing_since.get_or_insert_with(Instant::now);
        self.recount(&mut state);
    }

    /// Marks the scope's watch refused; the caller goes on to [`Self::fail_and_wait`], which
    /// marks it failing as any other failed call.
    fn set_refused(&self, scope: &str) {
        self.write()
            .loops
            .entry(scope.to_string())
            .or_default()
            .refused = true;
    }

    fn set_healthy(&self, scope: &str, resource_version: Option<String>) {
        let mut state = self.write();
        let health = state.loops.entry(scope.to_string()).or_default();
        health.failing_since = None;
        health.refused = false;
        if resource_version.is_some() {
            health.resource_version = resource_version;
        }
        self.recount(&mut state);
    }

    fn count_event(&self, event: &'static str) {
        self.metrics
            .watch_events
            .get_or_create(&WatchEventLabels { event })
            .inc();
    }

    fn count_restart(&self, reason: &'static str) {
        self.metrics
            .watch_reconnects
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Runs one loop per scope until `shutdown` turns true. Returns when all have stopped.
    pub async fn run(self: Arc<Self>, client: Client, shutdown: watch::Receiver<bool>) {
        let loops = self.scopes().into_iter().map(|scope| {
            let api: Api<Kept> = if scope == CLUSTER {
                Api::all(client.clone())
            } else {
                Api::namespaced(client.clone(), &scope)
            };
            let cache = self.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move { cache.run_scope(scope, api, None, shutdown).await })
        });
        for handle in loops.collect::<Vec<_>>() {
            let _ = handle.await;
        }
    }

    /// One scope's loop. `start_from` skips the first LIST and watches from that
    /// resourceVersion (tests use an old one to exercise the 410 path).
    pub async fn run_scope(
        self: Arc<Self>,
        scope: String,
        api: Api<Kept>,
        start_from: Option<String>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let selector = self.keys.managed_selector();
        let mut resource_version = start_from;
        let mut backoff = BACKOFF_START;
        let mut next_resync = self.resync_every.map(|every| Instant::now() + every);
        if resource_version.is_some() {
            // Watching from a given point counts as synced from an empty start.
            self.replace(&scope, Vec::<Kept>::new(), resource_version.clone());
        }
        loop {
            if *shutdown.borrow() {
                return;
            }
            let resync_due = next_resync.is_some_and(|at| Instant::now() >= at);
            if resource_version.is_none() || resync_due {
                if resync_due {
                    self.count_restart("resync");
                }
                match list_all(&api, &selector).await {
                    Ok((items, rv)) => {
                        self.replace(&scope, items, rv.clone());
                        resource_version = rv;
                        backoff = BACKOFF_START;
                        next_resync = self.resync_every.map(|every| Instant::now() + every);
                    }
                    Err(e) => {
                        if self
                            .fail_and_wait(&scope, "listing", &e, &mut backoff, &mut shutdown)
                            .await
                        {
                            return;
                        }
                        continue;
                    }
                }
            }
            let params = WatchParams::default()
                .labels(&selector)
                .timeout(WATCH_TIMEOUT_SECS);
            let from = resource_version.clone().unwrap_or_default();
            let stream = match api.watch(&params, &from).await {
                Ok(stream) => stream,
                Err(e) if is_gone(&e) => {
                    self.count_restart("relist");
                    resource_version = None;
                    continue;
                }
                Err(e) => {
                    if is_refused(&e) {
                        // Reads LIST instead, and once a watch is allowed again it starts
                        // from a fresh LIST, not from what was missed meanwhile.
                        self.set_refused(&scope);
                        resource_version = None;
                    }
                    if self
                        .fail_and_wait(&scope, "watching", &e, &mut backoff, &mut shutdown)
                        .await
                    {
                        return;
                    }
                    continue;
                }
            };
            self.set_healthy(&scope, None);
            backoff = BACKOFF_START;
            let mut stream = std::pin::pin!(stream);
            let resync_sleep = async {
                match next_resync {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            let mut resync_sleep = std::pin::pin!(resync_sleep);
            loop {
                tokio::select! {
                    _ = shutdown.changed() => return,
                    _ = &mut resync_sleep => break,
                    item = stream.next() => match item {
                        None => {
                            // The server ended the watch (its timeout): resume from here.
                            break;
                        }
                        Some(Ok(WatchEvent::Added(pod))) => {
                            self.count_event("added");
                            resource_version = pod.resource_version().or(resource_version);
                            self.apply(&scope, pod, false);
                        }
                        Some(Ok(WatchEvent::Modified(pod))) => {
                            self.count_event("modified");
                            resource_version = pod.resource_version().or(resource_version);
                            self.apply(&scope, pod, false);
                        }
                        Some(Ok(WatchEvent::Deleted(pod))) => {
                            self.count_event("deleted");
                            resource_version = pod.resource_version().or(resource_version);
                            self.apply(&scope, pod, true);
                        }
                        Some(Ok(WatchEvent::Bookmark(bookmark))) => {
                            self.count_event("bookmark");
                            let rv = bookmark.metadata.resource_version;
                            self.set_healthy(&scope, Some(rv.clone()));
                            resource_version = Some(rv);
                        }
                        Some(Ok(WatchEvent::Error(status))) => {
                            self.count_event("error");
                            if status.code == 410 {
                                self.count_restart("relist");
                                resource_version = None;
                            } else {
                                tracing::warn!(scope, "the pod watch reported {}: {}", status.code, status.message);
                                self.count_restart("error");
                            }
                            break;
                        }
                        Some(Err(e)) => {
                            tracing::warn!(scope, "the pod watch broke: {e}; resuming");
                            self.count_restart("error");
                            break;
                        }
                    }
                }
            }
        }
    }

    /// A failed LIST or WATCH call: marks the scope failing, counts the restart, waits
    /// `backoff` and doubles it. True when shutdown was asked for meanwhile.
    async fn fail_and_wait(
        &self,
        scope: &str,
        doing: &str,
        error: &kube::Error,
        backoff: &mut Duration,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        tracing::warn!(
            scope,
            "{doing} managed pods failed: {error}; retrying in {backoff:?}"
        );
        self.set_failing(scope);
        self.count_restart("error");
        let stop = sleep_or_shutdown(*backoff, shutdown).await;
        *backoff = (*backoff * 2).min(BACKOFF_MAX);
        stop
    }

    /// The resourceVersion a scope's loop last applied (tests).
    pub fn resource_version(&self, scope: &str) -> Option<String> {
        self.read()
            .loops
            .get(scope)
            .and_then(|h| h.resource_version.clone())
    }
}

/// Items per LIST page: a full LIST of 10,000 pods in one answer would need its whole JSON
/// in memory at once.
const LIST_PAGE: u32 = 500;

/// Every managed pod of `api`'s scope, page by page (each next page asked for while the
/// current one arrives, see [`crate::protobuf_list::list_kept_pages`]), and the
/// resourceVersion to watch from (the first page's: a paginated LIST is one consistent
/// snapshot).
async fn list_all(
    api: &Api<Kept>,
    selector: &str,
) -> Result<(Vec<Kept>, Option<String>), kube::Error> {
    let mut items = Vec::new();
    let mut resource_version = None;
    let params = ListParams::default().labels(selector).limit(LIST_PAGE);
    crate::protobuf_list::list_kept_pages(api, &params, |page| {
        if resource_version.is_none() {
            resource_version = page.resource_version;
        }
        items.extend(page.items);
    })
    .await?;
    Ok((items, resource_version))
}

fn is_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 410)
}

fn is_refused(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401 || s.code == 403)
}

/// Sleeps `delay`; true when shutdown was asked for meanwhile.
pub async fn sleep_or_shutdown(delay: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(delay) => *shutdown.borrow(),
        _ = shutdown.changed() => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support;

    fn pod(ns: &str, name: &str, request: Option<&str>) -> Pod {
        let pod = test_support::pod(name)
            .namespace(ns)
            .label("orb.io/managed", "true")
            .resource_version("7");
        match request {
            Some(r) => pod.label("orb.io/request-id", r),
            None => pod,
        }
        .build()
    }

    fn cache(scope: NamespaceScope) -> PodCache {
        PodCache::new(
            "orb.io",
            scope,
            Duration::from_secs(10),
            None,
            K8sMetrics::new(),
        )
    }

    fn names(pods: &[Arc<Kept>]) -> Vec<String> {
        pods.iter().map(|p| p.name().to_string()).collect()
    }

    #[test]
    fn reads_miss_until_the_first_list_and_for_unwatched_namespaces() {
        let c = cache(NamespaceScope::Multi(vec!["a".into(), "b".into()]));
        assert_eq!(c.pods_of("a", "req-1"), Err(Miss::NotSynced));
        assert_eq!(c.pods_of("z", "req-1"), Err(Miss::NotWatched));
        c.replace("a", vec![pod("a", "p1", Some("req-1"))], Some("5".into()));
        assert_eq!(names(&c.pods_of("a", "req-1").unwrap()), ["p1"]);
        assert_eq!(c.pods_of("b", "req-1"), Err(Miss::NotSynced));
        assert!(!c.serving(), "b has not listed yet");
    }

    #[test]
    fn a_relist_replaces_only_its_own_namespace_and_drops_what_is_gone() {
        let c = cache(NamespaceScope::Multi(vec!["a".into(), "b".into()]));
        c.replace(
            "a",
            vec![pod("a", "p1", Some("r")), pod("a", "p2", Some("r"))],
            None,
        );
        c.replace("b", vec![pod("b", "q1", Some("r"))], None);
        c.replace(
            "a",
            vec![pod("a", "p2", Some("r")), pod("a", "p3", Some("r"))],
            None,
        );
        assert_eq!(names(&c.pods_of("a", "r").unwrap()), ["p2", "p3"]);
        assert_eq!(names(&c.pods_of("b", "r").unwrap()), ["q1"]);
        assert_eq!(c.health().pods, 3);
        assert!(c.serving());
    }

    #[test]
    fn events_add_update_and_remove_without_duplicates() {
        let c = cache(NamespaceScope::Single("a".into()));
        c.replace("a", Vec::<Pod>::new(), None);
        c.apply("a", pod("a", "p1", Some("r")), false);
        c.apply("a", pod("a", "p1", Some("r")), false);
        c.apply("a", pod("a", "p2", Some("r")), false);
        assert_eq!(names(&c.pods_of("a", "r").unwrap()), ["p1", "p2"]);
        c.apply("a", pod("a", "p1", Some("r")), true);
        assert_eq!(names(&c.pods_of("a", "r").unwrap()), ["p2"]);
        let mut terminating = pod("a", "p2", Some("r"));
        terminating.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        c.apply("a", terminating, false);
        assert!(c.pods_of("a", "r").unwrap().is_empty());
        assert_eq!(c.health().pods, 0);
    }

    #[test]
    fn pods_without_a_request_label_are_not_indexed() {
        let c = cache(NamespaceScope::ClusterWide);
        c.replace(
            "*",
            vec![pod("x", "lost", None), pod("y", "p", Some("r"))],
            None,
        );
        assert_eq!(c.health().pods, 1);
        assert_eq!(names(&c.pods_of("y", "r").unwrap()), ["p"]);
    }

    #[test]
    fn a_loop_failing_past_the_stale_timeout_stops_serving_reads() {
        let c = cache(NamespaceScope::Single("a".into()));
        c.replace("a", vec![pod("a", "p1", Some("r"))], None);
        c.set_failing("a");
        let now = Instant::now();
        assert!(c.pods_of_at("a", "r", now + Duration::from_secs(5)).is_ok());
        assert!(matches!(
            c.pods_of_at("a", "r", now + Duration::from_secs(11)),
            Err(Miss::Stale { .. })
        ));
        c.set_healthy("a", None);
        assert!(
            c.pods_of_at("a", "r", now + Duration::from_secs(11))
                .is_ok()
        );
    }

    #[test]
    fn a_refused_watch_stops_serving_reads_at_once_until_a_watch_runs() {
        let c = cache(NamespaceScope::Single("a".into()));
        c.replace("a", vec![pod("a", "p1", Some("r"))], None);
        assert!(c.serving());
        // RBAC without `watch`: the LIST went through, no event will ever follow it.
        c.set_refused("a");
        assert_eq!(c.pods_of("a", "r").map(|p| p.len()), Err(Miss::Refused));
        assert!(!c.serving());
        // The loop LISTs again before its next watch; that alone does not make it usable.
        c.replace("a", vec![pod("a", "p1", Some("r"))], None);
        assert_eq!(c.pods_of("a", "r").map(|p| p.len()), Err(Miss::Refused));
        c.set_healthy("a", None);
        assert_eq!(names(&c.pods_of("a", "r").unwrap()), ["p1"]);
        assert!(c.serving());
    }

    #[test]
    fn a_failing_loop_says_for_how_long_and_a_healthy_one_says_nothing() {
        let c = cache(NamespaceScope::Single("a".into()));
        c.replace("a", vec![pod("a", "p1", Some("r"))], None);
        assert_eq!(c.failing_for("a"), None);
        assert!(!c.any_failing());
        c.set_failing("a");
        assert!(c.any_failing());
        let now = Instant::now();
        let failing = c.failing_for_at("a", now + Duration::from_secs(4)).unwrap();
        assert!(failing >= Duration::from_secs(4), "{failing:?}");
        assert_eq!(c.failing_for("elsewhere"), None, "not watched");
        c.set_healthy("a", None);
        assert_eq!(c.failing_for("a"), None);
    }

    #[test]
    fn only_what_status_reads_use_is_kept() {
        let c = cache(NamespaceScope::Single("a".into()));
        let mut p = pod("a", "p1", Some("r"));
        p.metadata.managed_fields = Some(vec![Default::default()]);
        p.spec = Some(
            serde_json::from_value(serde_json::json!({
                "nodeName": "n1",
                "restartPolicy": "OnFailure",
                "terminationGracePeriodSeconds": 7,
                "volumes": [{"name": "v", "emptyDir": {}}],
                "containers": [{
                    "name": "c", "image": "busybox", "env": [{"name": "X", "value": "1"}],
                    "resources": {"requests": {"cpu": "1"}},
                }],
            }))
            .unwrap(),
        );
        let status = Some(serde_json::from_value(serde_json::json!({"phase": "Running"})).unwrap());
        p.status = status.clone();
        c.replace("a", vec![p], None);
        let kept = c.pods_of("a", "r").unwrap()[0].to_pod();
        assert!(kept.metadata.managed_fields.is_none());
        let spec = kept.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.restart_policy.as_deref(), Some("OnFailure"));
        assert_eq!(spec.termination_grace_period_seconds, Some(7));
        assert!(spec.volumes.is_none());
        assert!(spec.containers.is_empty(), "no reader uses them");
        assert_eq!(kept.status, status);
    }

    #[test]
    fn the_requests_whose_pods_changed_are_handed_out_once() {
        let c = cache(NamespaceScope::Multi(vec!["a".into(), "b".into()]));
        c.replace("a", vec![pod("a", "p1", Some("r1"))], None);
        c.replace("b", vec![pod("b", "q1", Some("r2"))], None);
        assert_eq!(
            c.take_changed(),
            ["r1", "r2"],
            "a relist touches what it lists"
        );
        assert!(c.take_changed().is_empty(), "handed out once");
        c.apply("a", pod("a", "p1", Some("r1")), true);
        c.apply("b", pod("b", "q2", Some("r3")), false);
        assert_eq!(c.take_changed(), ["r1", "r3"]);
        // A relist of one namespace also names requests whose pods it no longer lists.
        c.apply("a", pod("a", "p9", Some("r4")), false);
        c.take_changed();
        c.replace("a", Vec::<Pod>::new(), None);
        assert_eq!(c.take_changed(), ["r4"]);
    }
}
