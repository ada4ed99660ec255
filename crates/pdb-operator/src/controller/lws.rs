//! Controller for LeaderWorkerSets (`leaderworkerset.x-k8s.io/v1`, read as untyped objects):
//! whole-group budgets (note §10) with the selector `leaderworkerset.sigs.k8s.io/name=<lws>`.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::Stream;
use jiff::Timestamp;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Preconditions,
};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};

use super::apps::{owner_of_kind, pdb_changes};
use super::carry_out::{Subject, carry_out};
use super::queue::{counted, counted_policy_changes, counted_stream, drain_controller};
use super::triggers::{meaningful_changes, workload_fingerprint};
use super::{Context, DEBOUNCE, Error, error_policy, strip_legacy_finalizer, timed};
use crate::crd::{ClusterPDBPolicy, PDBPolicy};
use crate::desired::{
    Decision, LeaderWorkerSetView, Policies, ViewError, WorkloadKind,
    desired_pdb_for_leader_worker_set,
};
use crate::enforcement::EventNote;
use crate::names::keys;
use crate::names::reasons;
use crate::pdb::is_gang_pdb_over_leader_worker_set;
use crate::resolve::WorkloadMeta;

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

/// The label every pod of LeaderWorkerSet `name` carries (what its PDB selects).
pub fn lws_pod_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(keys::LWS_NAME.to_string(), name.to_string())])
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
    timed(&ctx, WorkloadKind::LeaderWorkerSet, &o.metadata, async {
        let view = lws_view(&o)?;
        let ar = lws_resource();
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &view.meta.namespace, &ar);
        strip_legacy_finalizer(&api, &o.metadata).await?;
        let decision = decide_lws(&view, &ctx.policies(), ctx.legacy_cross_namespace);
        if matches!(decision, Decision::Apply(_)) {
            take_over_from_gangs(&ctx, &view.meta.namespace, &view.meta.name, &o).await?;
        }
        let subject = Subject {
            kind: WorkloadKind::LeaderWorkerSet,
            namespace: view.meta.namespace.clone(),
            name: view.meta.name.clone(),
            uid: view.uid.clone(),
            reference: o.object_ref(&ar),
            pod_labels: pod_label_sets(&ctx, &view.meta.namespace, &view.meta.name).await?,
        };
        carry_out(&ctx, &subject, decision).await
    })
    .await
}

/// The label sets of LeaderWorkerSet `name`'s pods (one LIST by its label), and the label
/// itself: a PDB another writes over those pods may select any label they carry, not only the
/// one the LeaderWorkerSet's own PDB selects (issue #52: a user's PDB on a team label was never
/// seen, and both PDBs stayed).
async fn pod_label_sets(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Vec<BTreeMap<String, String>>, Error> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let lp = ListParams::default().labels(&format!("{}={name}", keys::LWS_NAME));
    let mut sets: Vec<BTreeMap<String, String>> = pods
        .list_metadata(&lp)
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.labels)
        .collect();
    sets.push(lws_pod_labels(name));
    sets.sort();
    sets.dedup();
    Ok(sets)
}

/// Deletes the Workload gangs' PDBs over the pods of LeaderWorkerSet `name` before its own PDB
/// is written ([`is_gang_pdb_over_leader_worker_set`]): two PDBs over one pod make every
/// eviction of it fail. The gang's controller, seeing the LeaderWorkerSet, writes none again.
async fn take_over_from_gangs(
    ctx: &Context,
    namespace: &str,
    name: &str,
    lws: &DynamicObject,
) -> Result<(), Error> {
    let api: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(ctx.client.clone(), namespace);
    let pdbs = match &ctx.pdbs {
        Some(cache) => cache.in_namespace(namespace),
        None => api.list(&Default::default()).await?.items,
    };
    for pdb in pdbs
        .iter()
        .filter(|p| is_gang_pdb_over_leader_worker_set(p, name))
    {
        let pdb_name = pdb.name_any();
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pdb.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&pdb_name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
        ctx.recent_writes.forget(namespace, &pdb_name);
        // Gone now, before the watch says so: the overlap check that follows must not yield to it.
        if let Some(cache) = &ctx.pdbs {
            cache.apply(&watcher::Event::Delete(pdb.clone()));
        }
        ctx.metrics
            .pdbs_deleted
            .get_or_create(&vec![
                ("namespace", namespace.to_string()),
                ("reason", "leaderworkerset_takes_over".to_string()),
            ])
            .inc();
        let owner = owner_of_kind(pdb, "Workload").unwrap_or_default();
        ctx.announce(
            &lws.object_ref(&lws_resource()),
            EventNote::normal(
                reasons::PDB_DELETED,
                format!(
                    "Deleted PodDisruptionBudget {pdb_name} of Workload {owner}: its pods belong to LeaderWorkerSet {name}, whose own PDB replaces it (never two over one pod)"
                ),
            ),
        );
    }
    Ok(())
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
    let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
    let store = writer.as_reader();
    ctx.live
        .register(WorkloadKind::LeaderWorkerSet.kind(), store.clone());
    let sets = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|o: &mut DynamicObject| o.metadata.managed_fields = None)
        .reflect(writer);
    let (kind, queue) = (WorkloadKind::LeaderWorkerSet, ctx.queue.clone());
    // Its own PDB (not the echo of its own write), and every other LeaderWorkerSet of the
    // namespace for any other PDB: one over its pods makes it yield, one going lets it take over.
    let (for_pdbs, recent) = (store.clone(), ctx.recent_writes.clone());
    let by_pdb = move |pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget| {
        let ns = pdb.namespace();
        let within = |r: ObjectRef<DynamicObject>| match &ns {
            Some(ns) => r.within(ns),
            None => r,
        };
        let owner = owner_of_kind(&pdb, "LeaderWorkerSet");
        let mut refs: Vec<ObjectRef<DynamicObject>> = owner
            .iter()
            .filter(|_| !recent.is_echo(&pdb))
            .map(|o| within(ObjectRef::new_with(o, lws_resource())))
            .collect();
        // Its pods may carry any label the PDB selects (few LeaderWorkerSets per namespace).
        refs.extend(
            for_pdbs
                .state()
                .iter()
                .filter(|o| o.namespace() == ns && owner.as_deref() != Some(&o.name_any()))
                .map(|o| ObjectRef::from_obj_with(o.as_ref(), lws_resource())),
        );
        refs
    };
    let stream = Controller::for_stream_with(
        counted_stream(
            kind,
            queue.clone(),
            meaningful_changes(sets, workload_fingerprint::<DynamicObject>),
        ),
        store.clone(),
        ar,
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
    .run(reconcile_lws, error_policy(kind), ctx);
    drain_controller(kind, queue, stream).await;
}
