//! PDBs the operator wrote that no workload controls any more ([`crate::pdb::is_orphaned`]): a
//! workload deleted with `propagationPolicy: Orphan` leaves its PDB behind without an owner
//! reference. It would keep protecting pods nobody decides about, and look foreign to a new
//! workload of the same name, so it is deleted as soon as the shared PDB watch shows it (and,
//! for those already there at start-up or missed by a lagging subscriber, every sweep).

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::watcher;

use super::Context;
use crate::pdb::is_orphaned;
use crate::runtime::SWEEP_INTERVAL;

/// Runs for ever: deletes each orphaned PDB the shared watch shows, and those in the cache at
/// every [`SWEEP_INTERVAL`].
pub async fn delete_orphaned_pdbs(ctx: Arc<Context>) {
    let (Some(cache), Some(events)) = (ctx.pdbs.clone(), ctx.pdb_events.as_ref()) else {
        return std::future::pending().await;
    };
    let events = events.subscribe();
    futures::pin_mut!(events);
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        let found: Vec<PodDisruptionBudget> = tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => vec![p],
                Some(_) => vec![],
                None => return std::future::pending().await,
            },
            _ = sweep.tick() => cache.all().iter().map(|p| (**p).clone()).collect(),
        };
        for pdb in found.into_iter().filter(is_orphaned) {
            delete_orphan(&ctx, &pdb).await;
        }
    }
}

/// Deletes `pdb` (that object only: its uid is a precondition); a failure is logged and the
/// next sweep tries again.
async fn delete_orphan(ctx: &Context, pdb: &PodDisruptionBudget) {
    let (namespace, name) = (pdb.namespace().unwrap_or_default(), pdb.name_any());
    let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &namespace);
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pdb.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(&name, &dp).await {
        Ok(_) => {
            ctx.recent_writes.forget(&namespace, &name);
            ctx.metrics
                .pdbs_deleted
                .get_or_create(&vec![
                    ("namespace", namespace.clone()),
                    ("reason", "owner_gone".to_string()),
                ])
                .inc();
            tracing::info!(%namespace, pdb = %name, "deleted a PodDisruptionBudget whose workload is gone");
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => tracing::warn!(%namespace, pdb = %name, error = %e,
            "deleting a PodDisruptionBudget whose workload is gone failed; next sweep retries"),
    }
}
