//! Controller for Kubernetes 1.37 Workload API gangs (`scheduling.k8s.io/v1beta1`).
//!
//! Workloads, PodGroups and pods are each watched once into a reflector store; a reconcile reads
//! its namespace's PodGroups and pods from those stores (no LIST per reconcile) and the PDBs from
//! the shared PDB cache. Only changes a decision can depend on trigger a reconcile: not the
//! status updates of Workloads, PodGroups and pods (a pod going Pending → Running changes
//! nothing; Running → Failed does), and not the disruption controller's PDB status.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use kube::api::{DynamicObject, ListParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use super::apps::{owner_of_kind, pdb_changes};
use super::carry_out::{Subject, carry_out};
use super::lws::lws_resource;
use super::pdb_cache::namespace_pdbs;
use super::queue::{counted, counted_policy_changes, counted_stream, drain_controller};
use super::triggers::{meaningful_changes, workload_fingerprint};
use super::{Context, DEBOUNCE, Error, error_policy, reference_of, strip_legacy_finalizer, timed};
use crate::crd::{ClusterPDBPolicy, PDBPolicy};
use crate::desired::{Decision, Policies, RETRY_AFTER, WorkloadKind};
use crate::gang_decision::{GangFacts, LeaderWorkerSetFact, leader_worker_set_names};
use crate::gang_record::GangRecord;
use crate::pdb::{is_owned_by, pdb_name};
use crate::workload_api::{
    GangShape, GangWorkloadView, PodGroupView, PodView, classify_workload, desired_pdb_for_gang,
    gang_members,
};

/// The PodGroups and pods of one namespace, as the decision reads them.
pub struct GangObjects {
    pub groups: Vec<PodGroupView>,
    pub pods: Vec<PodView>,
}

impl GangObjects {
    /// From the controller's reflector stores.
    pub fn from_caches(caches: &GangCaches, namespace: &str) -> Self {
        let in_ns = |m: &kube::api::ObjectMeta| m.namespace.as_deref() == Some(namespace);
        Self {
            groups: caches
                .groups
                .state()
                .iter()
                .filter(|g| in_ns(&g.metadata))
                .map(|g| PodGroupView::from_pod_group(g))
                .collect(),
            pods: caches
                .pods
                .state()
                .iter()
                .filter(|p| in_ns(&p.metadata))
                .map(|p| PodView::from_pod(p))
                .collect(),
        }
    }

    /// By two LISTs (for `explain`, which has no caches).
    pub async fn list(client: &Client, namespace: &str) -> Result<Self, kube::Error> {
        let groups: Api<PodGroup> = Api::namespaced(client.clone(), namespace);
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let lp = ListParams::default();
        Ok(Self {
            groups: groups
                .list(&lp)
                .await?
                .items
                .iter()
                .map(PodGroupView::from_pod_group)
                .collect(),
            pods: pods
                .list(&lp)
                .await?
                .items
                .iter()
                .map(PodView::from_pod)
                .collect(),
        })
    }
}

/// Whether each LeaderWorkerSet in `names` exists (a GET; 404, also from a cluster without the
/// LeaderWorkerSet API, means absent) and which managed PDB among `pdbs` it owns.
pub async fn leader_worker_set_facts(
    client: &Client,
    namespace: &str,
    names: BTreeSet<String>,
    pdbs: &[PodDisruptionBudget],
) -> Result<BTreeMap<String, LeaderWorkerSetFact>, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &lws_resource());
    let mut facts = BTreeMap::new();
    for name in names {
        let fact = match api.get_opt(&name).await {
            Ok(Some(lws)) => {
                let uid = lws.metadata.uid.unwrap_or_default();
                let pdb = pdbs
                    .iter()
                    .find(|p| p.name_any() == pdb_name(&name) && is_owned_by(p, &uid))
                    .map(|p| p.name_any());
                LeaderWorkerSetFact::Present { pdb }
            }
            Ok(None) => LeaderWorkerSetFact::Absent,
            Err(kube::Error::Api(s)) if s.code == 404 => LeaderWorkerSetFact::Absent,
            Err(e) => return Err(e),
        };
        facts.insert(name, fact);
    }
    Ok(facts)
}

/// The decision for a Workload and the labels of its live members (for the overlap check).
pub fn decide_gang(
    view: &GangWorkloadView,
    objects: &GangObjects,
    record: Option<GangRecord>,
    leader_worker_sets: BTreeMap<String, LeaderWorkerSetFact>,
    policies: &(Vec<PDBPolicy>, Vec<ClusterPDBPolicy>),
    legacy: bool,
) -> (Decision, Vec<BTreeMap<String, String>>) {
    let p = Policies {
        namespaced: &policies.0,
        cluster: &policies.1,
        legacy_cross_namespace: legacy,
    };
    let facts = GangFacts {
        pod_groups: &objects.groups,
        pods: &objects.pods,
        record,
        leader_worker_sets,
    };
    let decision = desired_pdb_for_gang(view, &facts, &p, Timestamp::now());
    let member_labels = match classify_workload(&view.spec) {
        GangShape::Gang { template, .. } => {
            let (_, gang) =
                gang_members(&view.meta.name, &template, &objects.groups, &objects.pods);
            gang.live.iter().map(|m| m.labels.clone()).collect()
        }
        _ => Vec::new(),
    };
    (decision, member_labels)
}

/// The reflected PodGroups and pods of the scope.
#[derive(Clone)]
pub struct GangCaches {
    pub groups: Store<PodGroup>,
    pub pods: Store<Pod>,
    /// True once both stores hold their first list. Reconciles wait on this, not on
    /// `Store::wait_until_ready`: that future wakes only the last of several waiters (kube-runtime
    /// 5's `DelayedInit` keeps one waker), which left the first Workload of a fresh operator
    /// waiting forever while the others went ahead.
    pub ready: tokio::sync::watch::Receiver<bool>,
}

impl GangCaches {
    /// Caches over `groups` and `pods`, and one task that waits (alone) for their first lists.
    fn new(groups: Store<PodGroup>, pods: Store<Pod>) -> Self {
        let (tx, ready) = tokio::sync::watch::channel(false);
        let (g, p) = (groups.clone(), pods.clone());
        tokio::spawn(async move {
            let _ = g.wait_until_ready().await;
            let _ = p.wait_until_ready().await;
            let _ = tx.send(true);
        });
        Self {
            groups,
            pods,
            ready,
        }
    }

    async fn wait_until_ready(&self) {
        let mut ready = self.ready.clone();
        let _ = ready.wait_for(|r| *r).await;
    }
}

/// What the Workload controller's reconciles share: the operator's context and its caches.
pub struct GangContext {
    pub ctx: Arc<Context>,
    pub caches: GangCaches,
}

impl AsRef<Context> for GangContext {
    fn as_ref(&self) -> &Context {
        &self.ctx
    }
}

async fn reconcile_workload(w: Arc<Workload>, g: Arc<GangContext>) -> Result<Action, Error> {
    let ctx = g.ctx.as_ref();
    timed(ctx, WorkloadKind::Workload, &w.metadata, async {
        let view = GangWorkloadView::from_workload(&w)?;
        let ns = view.meta.namespace.clone();
        let api: Api<Workload> = Api::namespaced(ctx.client.clone(), &ns);
        strip_legacy_finalizer(&api, &w.metadata).await?;
        // Deciding before the first list of pods would find no pods and warn.
        g.caches.wait_until_ready().await;
        let objects = GangObjects::from_caches(&g.caches, &ns);
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &ns);
        let name = pdb_name(&view.meta.name);
        let cached = namespace_pdbs(
            ctx.pdbs.as_deref(),
            &ctx.recent_writes,
            &pdbs,
            &ns,
            &name,
            &[],
        )
        .await?;
        let record = cached
            .iter()
            .find(|p| p.name_any() == name && is_owned_by(p, &view.uid))
            .map(GangRecord::from_pdb);
        let names = leader_worker_set_names(&view, &objects.groups, &objects.pods);
        let lws = if names.is_empty() {
            BTreeMap::new()
        } else {
            let all: Vec<PodDisruptionBudget> = match &ctx.pdbs {
                Some(cache) => cache.in_namespace(&ns),
                None => pdbs.list(&ListParams::default()).await?.items,
            };
            leader_worker_set_facts(&ctx.client, &ns, names, &all).await?
        };
        let (decision, pod_labels) = decide_gang(
            &view,
            &objects,
            record,
            lws,
            &ctx.policies(),
            ctx.legacy_cross_namespace,
        );
        // A stranger pod can make the derived selector inexact; the pod watch catches it, and a
        // managed gang PDB is also looked at again every 30 s (note §11.3).
        let recheck = match &decision {
            Decision::Apply(want) => Some(want.requeue_after.min(RETRY_AFTER)),
            Decision::NoPdb(_) => None,
        };
        let subject = Subject {
            kind: WorkloadKind::Workload,
            namespace: ns,
            name: view.meta.name.clone(),
            uid: view.uid.clone(),
            reference: reference_of(w.as_ref()),
            pod_labels,
        };
        let action = carry_out(ctx, &subject, decision).await?;
        Ok(recheck.map_or(action, Action::requeue))
    })
    .await
}

/// What a gang decision reads of a pod: its labels, its group, whether it is live.
fn gang_pod_fingerprint(p: &Pod) -> u64 {
    let v = PodView::from_pod(p);
    let mut h = DefaultHasher::new();
    (v.labels, v.pod_group_name, v.inactive).hash(&mut h);
    h.finish()
}

/// What a gang decision reads of a PodGroup: its spec (generation), labels, Workload and
/// whether it is being deleted.
fn pod_group_fingerprint(g: &PodGroup) -> u64 {
    let mut h = DefaultHasher::new();
    g.metadata.generation.hash(&mut h);
    g.metadata.labels.hash(&mut h);
    g.metadata.deletion_timestamp.is_some().hash(&mut h);
    g.spec
        .workload_ref
        .as_ref()
        .map(|r| (&r.workload_name, &r.template_name))
        .hash(&mut h);
    h.finish()
}

/// A pod as the caches keep it: what [`PodView::from_pod`] reads and nothing else (a full pod is
/// several kilobytes, and every pod of the scope is kept).
fn slim_pod(p: &mut Pod) {
    p.metadata.managed_fields = None;
    p.metadata.annotations = None;
    p.metadata.owner_references = None;
    p.spec = Some(PodSpec {
        scheduling_group: p.spec.as_mut().and_then(|s| s.scheduling_group.take()),
        ..Default::default()
    });
    p.status = Some(PodStatus {
        phase: p.status.as_mut().and_then(|s| s.phase.take()),
        ..Default::default()
    });
}

fn in_namespace<K: Resource<DynamicType = ()>>(name: &str, ns: Option<String>) -> ObjectRef<K> {
    let o = ObjectRef::<K>::new(name);
    match ns {
        Some(ns) => o.within(&ns),
        None => o,
    }
}

/// Every Workload of `ns` in `store`.
fn workloads_in(store: &Store<Workload>, ns: Option<String>) -> Vec<ObjectRef<Workload>> {
    store
        .state()
        .iter()
        .filter(|w| w.namespace() == ns)
        .map(|w| ObjectRef::from_obj(w.as_ref()))
        .collect()
}

/// Runs the Workload controller. Besides Workloads it watches PodGroups (mapped through
/// `spec.workloadRef`), every pod in the watched namespaces (a new pod can be a gang member or
/// a stranger that makes a derived selector inexact, so a pod change looks at every Workload
/// of its namespace) and PDBs (the Workload's own, or one another controller writes over its
/// pods, such as a LeaderWorkerSet's).
pub async fn run_workloads(
    ctx: Arc<Context>,
    policy_changes: impl Stream<Item = ()> + Send + 'static,
    concurrency: u16,
) {
    let (store, writer) = reflector::store::<Workload>();
    ctx.live
        .register(WorkloadKind::Workload.kind(), store.clone());
    let workloads = watcher(ctx.scope.api(&ctx.client), watcher::Config::default())
        .default_backoff()
        .modify(|w: &mut Workload| w.metadata.managed_fields = None)
        .reflect(writer);
    let (groups, group_writer) = reflector::store::<PodGroup>();
    let group_events = watcher(ctx.scope.api(&ctx.client), watcher::Config::default())
        .default_backoff()
        .modify(|g: &mut PodGroup| {
            g.metadata.managed_fields = None;
            g.status = None;
        })
        .reflect(group_writer);
    // Pods are watched from the first Workload on: a cluster that serves the Workload API but
    // runs no gangs (most, today) would otherwise send the operator every pod change for
    // nothing (in the bench's burst, 2,000 pods starting).
    let (first_seen, first_workload) = tokio::sync::watch::channel(false);
    let workloads = workloads.inspect(move |ev| {
        if matches!(
            ev,
            Ok(watcher::Event::Apply(_) | watcher::Event::InitApply(_))
        ) {
            first_seen.send_if_modified(|seen| !std::mem::replace(seen, true));
        }
    });
    let (pods, pod_writer) = reflector::store::<Pod>();
    let pods_api: Api<Pod> = ctx.scope.api(&ctx.client);
    let mut pod_writer = Some(pod_writer);
    let pod_events = futures::stream::once(async move {
        let mut first_workload = first_workload;
        let _ = first_workload.wait_for(|seen| *seen).await;
    })
    .flat_map(move |()| {
        watcher(pods_api.clone(), watcher::Config::default())
            .default_backoff()
            .modify(slim_pod)
            .reflect(pod_writer.take().expect("the pod watch starts once"))
    });
    let (for_pods, for_pdbs) = (store.clone(), store.clone());
    let (kind, queue) = (WorkloadKind::Workload, ctx.queue.clone());
    let by_group = |g: PodGroup| {
        let ns = g.namespace();
        g.spec
            .workload_ref
            .map(|r| in_namespace::<Workload>(&r.workload_name, ns))
    };
    // Its own PDB (not the echo of its own write), and every Workload of the namespace for any
    // other PDB: one over its members makes it yield, one going lets it take over.
    let recent = ctx.recent_writes.clone();
    let by_pdb = move |pdb: PodDisruptionBudget| {
        let owner = owner_of_kind(&pdb, "Workload");
        workloads_in(&for_pdbs, pdb.namespace())
            .into_iter()
            .filter(|w| owner.as_deref() != Some(w.name.as_str()) || !recent.is_echo(&pdb))
            .collect::<Vec<_>>()
    };
    let stream = Controller::for_stream(
        counted_stream(
            kind,
            queue.clone(),
            meaningful_changes(workloads, workload_fingerprint::<Workload>),
        ),
        store.clone(),
    )
    .watches_stream(
        meaningful_changes(group_events, pod_group_fingerprint),
        counted(kind, queue.clone(), by_group),
    )
    .watches_stream(
        meaningful_changes(pod_events, gang_pod_fingerprint),
        counted(kind, queue.clone(), move |p: Pod| {
            workloads_in(&for_pods, p.namespace())
        }),
    )
    .watches_stream(pdb_changes(&ctx), counted(kind, queue.clone(), by_pdb))
    .reconcile_all_on(counted_policy_changes(
        kind,
        queue.clone(),
        store,
        policy_changes,
    ))
    .with_config(
        ControllerConfig::default()
            .debounce(DEBOUNCE)
            .concurrency(concurrency),
    )
    .run(
        reconcile_workload,
        error_policy(WorkloadKind::Workload),
        Arc::new(GangContext {
            ctx,
            caches: GangCaches::new(groups, pods),
        }),
    );
    drain_controller(kind, queue, stream).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(phase: &str, labels: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u", "labels": labels,
                         "annotations": {"big": "x"}, "managedFields": [{"manager": "m"}]},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                     "schedulingGroup": {"podGroupName": "g"}},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn every_reconcile_waiting_for_the_caches_is_woken() {
        let (groups, mut group_writer) = reflector::store::<PodGroup>();
        let (pods, mut pod_writer) = reflector::store::<Pod>();
        let caches = GangCaches::new(groups, pods);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let c = caches.clone();
                tokio::spawn(async move { c.wait_until_ready().await })
            })
            .collect();
        tokio::task::yield_now().await;
        group_writer.apply_watcher_event(&watcher::Event::InitDone);
        pod_writer.apply_watcher_event(&watcher::Event::InitDone);
        for w in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(5), w)
                .await
                .expect("a waiter was never woken")
                .unwrap();
        }
    }

    #[test]
    fn a_slim_pod_reads_the_same_as_the_full_one() {
        let full = pod("Running", json!({"app": "t"}));
        let mut slim = full.clone();
        slim_pod(&mut slim);
        assert_eq!(PodView::from_pod(&slim), PodView::from_pod(&full));
        assert!(slim.spec.unwrap().containers.is_empty());
    }

    #[test]
    fn only_membership_and_liveness_changes_trigger() {
        let running = pod("Running", json!({"app": "t"}));
        let pending = pod("Pending", json!({"app": "t"}));
        assert_eq!(
            gang_pod_fingerprint(&running),
            gang_pod_fingerprint(&pending),
            "Pending → Running changes no decision"
        );
        assert_ne!(
            gang_pod_fingerprint(&running),
            gang_pod_fingerprint(&pod("Failed", json!({"app": "t"})))
        );
        assert_ne!(
            gang_pod_fingerprint(&running),
            gang_pod_fingerprint(&pod("Running", json!({"app": "u"})))
        );
    }
}
