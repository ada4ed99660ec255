//! Controllers for `apps/v1` Deployments and StatefulSets.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::SelectorExt;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};

use super::carry_out::{Subject, carry_out};
use super::pdb_cache::RecentWrites;
use super::queue::{counted, counted_policy_changes, counted_stream, drain_controller};
use super::triggers::{meaningful_changes, pdb_fingerprint, workload_fingerprint};
use super::{Context, DEBOUNCE, Error, error_policy, reference_of, strip_legacy_finalizer, timed};
use crate::desired::{Policies, WorkloadKind, WorkloadView, desired_pdb_for_workload};
use crate::pdb::pdb_selector;

/// Inputs and the decision for one Deployment or StatefulSet (also used by `explain`).
pub fn decide(
    view: &WorkloadView,
    ctx_policies: &(
        Vec<crate::crd::PDBPolicy>,
        Vec<crate::crd::ClusterPDBPolicy>,
    ),
    legacy: bool,
) -> crate::desired::Decision {
    let policies = Policies {
        namespaced: &ctx_policies.0,
        cluster: &ctx_policies.1,
        legacy_cross_namespace: legacy,
    };
    desired_pdb_for_workload(view, &policies, Timestamp::now())
}

async fn reconcile_view<K>(
    api: Api<K>,
    obj: &K,
    view: WorkloadView,
    ctx: &Context,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    strip_legacy_finalizer(&api, obj.meta()).await?;
    let decision = decide(&view, &ctx.policies(), ctx.legacy_cross_namespace);
    let subject = Subject {
        kind: view.kind,
        namespace: view.meta.namespace.clone(),
        name: view.meta.name.clone(),
        uid: view.uid.clone(),
        reference: reference_of(obj),
        pod_labels: vec![view.pod_labels.clone()],
    };
    carry_out(ctx, &subject, decision).await
}

async fn reconcile_deployment(d: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    timed(&ctx, WorkloadKind::Deployment, &d.metadata, async {
        let view = WorkloadView::from_deployment(&d)?;
        let api = Api::namespaced(ctx.client.clone(), &view.meta.namespace);
        reconcile_view(api, d.as_ref(), view, &ctx).await
    })
    .await
}

async fn reconcile_stateful_set(s: Arc<StatefulSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    timed(&ctx, WorkloadKind::StatefulSet, &s.metadata, async {
        let view = WorkloadView::from_stateful_set(&s)?;
        let api = Api::namespaced(ctx.client.clone(), &view.meta.namespace);
        reconcile_view(api, s.as_ref(), view, &ctx).await
    })
    .await
}

/// PDB → workloads to look at again: its controller owner when that is of kind `kind` (not for
/// the echo of the owner's own write), and every other workload in its namespace whose pods it
/// selects: a PDB appearing over their pods makes them yield, one going lets them take over.
pub fn pdb_mapper<K>(
    kind: &'static str,
    store: Store<K>,
    recent: Arc<RecentWrites>,
    pod_labels: fn(&K) -> Option<&PodLabels>,
) -> impl Fn(PodDisruptionBudget) -> Vec<ObjectRef<K>> + Send + Sync + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    move |pdb| {
        let ns = pdb.namespace();
        let owner = owner_of_kind(&pdb, kind);
        let mut refs = Vec::new();
        if let Some(owner) = &owner
            && !recent.is_echo(&pdb)
        {
            let mut r = ObjectRef::new(owner);
            if let Some(ns) = &ns {
                r = r.within(ns);
            }
            refs.push(r);
        }
        let Some(selector) = pdb_selector(&pdb) else {
            return refs;
        };
        refs.extend(
            store
                .state()
                .iter()
                .filter(|w| w.namespace() == ns && owner.as_deref() != Some(&w.name_any()))
                .filter(|w| pod_labels(w).is_some_and(|l| selector.matches(l)))
                .map(|w| ObjectRef::from_obj(w.as_ref())),
        );
        refs
    }
}

/// The name of `pdb`'s controller owner when it is of `kind`.
pub(crate) fn owner_of_kind(pdb: &PodDisruptionBudget, kind: &str) -> Option<String> {
    pdb.owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == kind)
        .map(|o| o.name.clone())
}

type PodLabels = std::collections::BTreeMap<String, String>;

// By reference: the PDB mapper matches every workload of the namespace on each PDB change.
fn deployment_pod_labels(d: &Deployment) -> Option<&PodLabels> {
    d.spec.template.metadata.as_ref()?.labels.as_ref()
}

fn stateful_set_pod_labels(s: &StatefulSet) -> Option<&PodLabels> {
    s.spec.template.metadata.as_ref()?.labels.as_ref()
}

/// PDB changes that can alter a decision: not the disruption controller's status updates. The
/// echo of our own write is left to the mappers: it tells other workloads over the same pods
/// (of any kind) to yield, only its owner need not look again. From the shared PDB watch when
/// there is one, else a watch of its own.
pub(crate) fn pdb_changes(
    ctx: &Context,
) -> impl Stream<Item = Result<PodDisruptionBudget, watcher::Error>> + Send + 'static {
    let events = match &ctx.pdb_events {
        Some(shared) => shared.subscribe().boxed(),
        None => {
            let pdbs: Api<PodDisruptionBudget> = ctx.scope.api(&ctx.client);
            watcher(pdbs, watcher::Config::default())
                .default_backoff()
                .boxed()
        }
    };
    meaningful_changes(events, pdb_fingerprint)
}

/// One apps/v1 kind: how its reflected copies are slimmed, where its pod labels are, and its
/// reconcile.
struct AppsKind<K> {
    kind: WorkloadKind,
    /// Keeps what decisions and `pdb_mapper` read: metadata less managedFields, the spec less
    /// the pod template's spec (most of the memory of 1,000 workloads).
    slim: fn(&mut K),
    pod_labels: fn(&K) -> Option<&PodLabels>,
}

async fn run_apps<K, R, Fut>(
    ctx: Arc<Context>,
    policy_changes: impl Stream<Item = ()> + Send + 'static,
    concurrency: u16,
    app: AppsKind<K>,
    reconcile: R,
) where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    R: FnMut(Arc<K>, Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = Result<Action, Error>> + Send + 'static,
{
    let api: Api<K> = ctx.scope.api(&ctx.client);
    let (store, writer) = reflector::store();
    ctx.live.register(app.kind.kind(), store.clone());
    let workloads = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(app.slim)
        .reflect(writer);
    let (kind, queue) = (app.kind, ctx.queue.clone());
    let stream = Controller::for_stream(
        counted_stream(
            kind,
            queue.clone(),
            meaningful_changes(workloads, workload_fingerprint::<K>),
        ),
        store.clone(),
    )
    .watches_stream(
        pdb_changes(&ctx),
        counted(
            kind,
            queue.clone(),
            pdb_mapper(
                kind.kind(),
                store.clone(),
                ctx.recent_writes.clone(),
                app.pod_labels,
            ),
        ),
    )
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
    .run(reconcile, error_policy(kind), ctx);
    drain_controller(kind, queue, stream).await;
}

/// Runs the Deployment controller until `policy_changes` ends or the task is aborted.
pub async fn run_deployments(
    ctx: Arc<Context>,
    policy_changes: impl Stream<Item = ()> + Send + 'static,
    concurrency: u16,
) {
    let app = AppsKind {
        kind: WorkloadKind::Deployment,
        slim: |w: &mut Deployment| {
            w.metadata.managed_fields = None;
            w.status = None;
            w.spec.template.spec = None;
        },
        pod_labels: deployment_pod_labels,
    };
    run_apps(ctx, policy_changes, concurrency, app, reconcile_deployment).await;
}

/// Runs the StatefulSet controller until `policy_changes` ends or the task is aborted.
pub async fn run_stateful_sets(
    ctx: Arc<Context>,
    policy_changes: impl Stream<Item = ()> + Send + 'static,
    concurrency: u16,
) {
    let app = AppsKind {
        kind: WorkloadKind::StatefulSet,
        slim: |w: &mut StatefulSet| {
            w.metadata.managed_fields = None;
            w.status = None;
            w.spec.template.spec = None;
        },
        pod_labels: stateful_set_pod_labels,
    };
    run_apps(
        ctx,
        policy_changes,
        concurrency,
        app,
        reconcile_stateful_set,
    )
    .await;
}
