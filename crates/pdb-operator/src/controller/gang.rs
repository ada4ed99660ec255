//! Controllers for Kubernetes 1.37 Workload API gangs (`scheduling.k8s.io/v1beta1`) and
//! LeaderWorkerSets (`leaderworkerset.x-k8s.io/v1`, read as untyped objects).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::Stream;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};

use super::apps::{drain_controller, pdb_mapper};
use super::carry_out::{Subject, carry_out};
use super::{Context, DEBOUNCE, Error, error_policy, reference_of, strip_legacy_finalizer, timed};
use crate::crd::{ClusterPDBPolicy, PDBPolicy};
use crate::desired::{
    Decision, LeaderWorkerSetView, Policies, RETRY_AFTER, ViewError, WorkloadKind,
    desired_pdb_for_leader_worker_set,
};
use crate::names::keys;
use crate::resolve::WorkloadMeta;
use crate::workload_api::{
    GangShape, GangWorkloadView, PodGroupView, PodView, classify_workload, desired_pdb_for_gang,
    gang_members,
};

/// The inputs of a gang decision, read live from the Workload's namespace.
pub struct GangInputs {
    pub groups: Vec<PodGroupView>,
    pub pods: Vec<PodView>,
}

/// Lists the PodGroups and pods of `namespace`.
pub async fn gang_inputs(client: &Client, namespace: &str) -> Result<GangInputs, kube::Error> {
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let lp = ListParams::default();
    Ok(GangInputs {
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

/// The decision for a Workload and the labels of its member pods (for the overlap check).
pub fn decide_gang(
    view: &GangWorkloadView,
    inputs: &GangInputs,
    policies: &(Vec<PDBPolicy>, Vec<ClusterPDBPolicy>),
    legacy: bool,
) -> (Decision, Vec<BTreeMap<String, String>>) {
    let p = Policies {
        namespaced: &policies.0,
        cluster: &policies.1,
        legacy_cross_namespace: legacy,
    };
    let decision = desired_pdb_for_gang(view, &inputs.groups, &inputs.pods, &p, Timestamp::now());
    let member_labels = match classify_workload(&view.spec) {
        GangShape::Gang { template, .. } => {
            let (_, members) =
                gang_members(&view.meta.name, &template, &inputs.groups, &inputs.pods);
            members.iter().map(|m| m.labels.clone()).collect()
        }
        _ => Vec::new(),
    };
    (decision, member_labels)
}

async fn reconcile_workload(w: Arc<Workload>, ctx: Arc<Context>) -> Result<Action, Error> {
    timed(&ctx, WorkloadKind::Workload, async {
        let view = GangWorkloadView::from_workload(&w)?;
        let api: Api<Workload> = Api::namespaced(ctx.client.clone(), &view.meta.namespace);
        strip_legacy_finalizer(&api, &w.metadata).await?;
        let inputs = gang_inputs(&ctx.client, &view.meta.namespace).await?;
        let (decision, pod_labels) =
            decide_gang(&view, &inputs, &ctx.policies(), ctx.legacy_cross_namespace);
        // Any pod in the namespace can make the derived selector inexact, so a managed gang
        // PDB is re-verified every 30 s besides the pod watch (note §11.3).
        let recheck = match &decision {
            Decision::Apply(want) => Some(want.requeue_after.min(RETRY_AFTER)),
            Decision::NoPdb(_) => None,
        };
        let subject = Subject {
            kind: WorkloadKind::Workload,
            namespace: view.meta.namespace.clone(),
            name: view.meta.name.clone(),
            uid: view.uid.clone(),
            reference: reference_of(w.as_ref()),
            pod_labels,
        };
        let action = carry_out(&ctx, &subject, decision).await?;
        Ok(recheck.map_or(action, Action::requeue))
    })
    .await
}

/// Runs the Workload controller. Besides Workloads and their PDBs it watches PodGroups (mapped
/// through `spec.workloadRef`) and every pod in the watched namespaces: a new pod can be a gang
/// member or a stranger that makes the derived selector inexact.
pub async fn run_workloads(
    ctx: Arc<Context>,
    policy_changes: impl Stream<Item = ()> + Send + 'static,
    concurrency: u16,
) {
    let api: Api<Workload> = ctx.scope.api(&ctx.client);
    let pdbs: Api<PodDisruptionBudget> = ctx.scope.api(&ctx.client);
    let groups: Api<PodGroup> = ctx.scope.api(&ctx.client);
    let pods: Api<Pod> = ctx.scope.api(&ctx.client);
    let ctrl = Controller::new(api, watcher::Config::default());
    let store = ctrl.store();
    let pod_store = store.clone();
    let no_labels: fn(&Workload) -> BTreeMap<String, String> = |_| BTreeMap::new();
    let stream = ctrl
        .watches(
            pdbs,
            watcher::Config::default(),
            pdb_mapper("Workload", store.clone(), no_labels),
        )
        .watches(groups, watcher::Config::default(), |g: PodGroup| {
            let ns = g.namespace();
            g.spec.workload_ref.map(|r| {
                let o = ObjectRef::<Workload>::new(&r.workload_name);
                match ns {
                    Some(ns) => o.within(&ns),
                    None => o,
                }
            })
        })
        .watches(pods, watcher::Config::default(), move |p: Pod| {
            let ns = p.namespace();
            pod_store
                .state()
                .iter()
                .filter(|w| w.namespace() == ns)
                .map(|w| ObjectRef::from_obj(w.as_ref()))
                .collect::<Vec<_>>()
        })
        .reconcile_all_on(policy_changes)
        .with_config(
            ControllerConfig::default()
                .debounce(DEBOUNCE)
                .concurrency(concurrency),
        )
        .run(
            reconcile_workload,
            error_policy(WorkloadKind::Workload),
            ctx,
        );
    drain_controller("workload-pdb", stream).await;
}

/// `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet.
pub fn lws_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
        "leaderworkersets",
    )
}

/// Reads the fields the budget needs from an untyped LeaderWorkerSet.
pub fn lws_view(o: &DynamicObject) -> Result<LeaderWorkerSetView, ViewError> {
    let missing = |field| ViewError::MissingMetadata {
        kind: "LeaderWorkerSet",
        field,
    };
    let int = |ptr: &str| {
        o.data
            .pointer(ptr)
            .and_then(|v| v.as_i64())
            .map(|v| v as i32)
    };
    Ok(LeaderWorkerSetView {
        meta: WorkloadMeta {
            namespace: o
                .metadata
                .namespace
                .clone()
                .ok_or_else(|| missing("namespace"))?,
            name: o.metadata.name.clone().ok_or_else(|| missing("name"))?,
            labels: o.metadata.labels.clone().unwrap_or_default(),
            annotations: o.metadata.annotations.clone().unwrap_or_default(),
        },
        uid: o.metadata.uid.clone().ok_or_else(|| missing("uid"))?,
        replicas: int("/spec/replicas"),
        size: int("/spec/leaderWorkerTemplate/size"),
        terminating: o.metadata.deletion_timestamp.is_some(),
    })
}

/// The decision for a LeaderWorkerSet.
pub fn decide_lws(
    view: &LeaderWorkerSetView,
    policies: &(Vec<PDBPolicy>, Vec<ClusterPDBPolicy>),
    legacy: bool,
) -> Decision {
    let p = Policies {
        namespaced: &policies.0,
        cluster: &policies.1,
        legacy_cross_namespace: legacy,
    };
    desired_pdb_for_leader_worker_set(view, &p, Timestamp::now())
}

async fn reconcile_lws(o: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    timed(&ctx, WorkloadKind::LeaderWorkerSet, async {
        let view = lws_view(&o)?;
        let ar = lws_resource();
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &view.meta.namespace, &ar);
        strip_legacy_finalizer(&api, &o.metadata).await?;
        let decision = decide_lws(&view, &ctx.policies(), ctx.legacy_cross_namespace);
        let subject = Subject {
            kind: WorkloadKind::LeaderWorkerSet,
            namespace: view.meta.namespace.clone(),
            name: view.meta.name.clone(),
            uid: view.uid.clone(),
            reference: o.object_ref(&ar),
            pod_labels: vec![BTreeMap::from([(
                keys::LWS_NAME.to_string(),
                view.meta.name.clone(),
            )])],
        };
        carry_out(&ctx, &subject, decision).await
    })
    .await
}

/// Runs the LeaderWorkerSet controller.
pub async fn run_leader_worker_sets(
    ctx: Arc<Context>,
    policy_changes: impl Stream<Item = ()> + Send + 'static,
    concurrency: u16,
) {
    let ar = lws_resource();
    let api: Api<DynamicObject> = match &ctx.scope {
        super::Scope::AllNamespaces => Api::all_with(ctx.client.clone(), &ar),
        super::Scope::Namespace(ns) => Api::namespaced_with(ctx.client.clone(), ns, &ar),
    };
    let pdbs: Api<PodDisruptionBudget> = ctx.scope.api(&ctx.client);
    let ctrl = Controller::new_with(api, watcher::Config::default(), ar);
    let stream = ctrl
        .watches(
            pdbs,
            watcher::Config::default(),
            |pdb: PodDisruptionBudget| {
                let ns = pdb.namespace();
                pdb.owner_references()
                    .iter()
                    .find(|o| o.controller == Some(true) && o.kind == "LeaderWorkerSet")
                    .map(|o| {
                        let r = ObjectRef::new_with(&o.name, lws_resource());
                        match &ns {
                            Some(ns) => r.within(ns),
                            None => r,
                        }
                    })
            },
        )
        .reconcile_all_on(policy_changes)
        .with_config(
            ControllerConfig::default()
                .debounce(DEBOUNCE)
                .concurrency(concurrency),
        )
        .run(
            reconcile_lws,
            error_policy(WorkloadKind::LeaderWorkerSet),
            ctx,
        );
    drain_controller("leaderworkerset-pdb", stream).await;
}
