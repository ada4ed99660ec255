//! The PDBs a reconcile looks at, from one reflector shared by every controller instead of a
//! LIST of the namespace per reconcile: with 1,000 PDBs in a namespace each LIST returned
//! about a megabyte, so 1,000 reconciles cost O(n²) (bench `operator_scale`: a full resync
//! took 55 s, the p99 from Deployment to PDB 140 s).
//!
//! The cache may lag a write by a watch round-trip. The workload's own `<name>-pdb` is
//! therefore read directly when the cache does not hold it, so a PDB written a moment ago is
//! never taken for missing (which would count and announce it as created twice). Only the PDBs
//! a decision can depend on are copied out of the cache: the one named `<name>-pdb` and those
//! selecting the workload's pods (the bench's profile was dominated by copying all 1,000).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use super::Error;
use crate::pdb::pdb_selects;

/// Reflects `api` (the operator's scope) into a store; managedFields are dropped to save memory.
pub fn watch_pdbs(
    api: Api<PodDisruptionBudget>,
) -> (Store<PodDisruptionBudget>, impl Future<Output = ()> + Send) {
    let (reader, writer) = reflector::store();
    let fut = async move {
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|p| {
                p.meta_mut().managed_fields = None;
            })
            .reflect(writer);
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            if let Err(e) = ev {
                tracing::warn!(error = %e, "PodDisruptionBudget watch error; retrying");
            }
        }
    };
    (reader, fut)
}

/// The cached PDBs of `namespace` that the workload's decision can depend on (the one named
/// `name`, and every one selecting a pod with one of `pod_labels`: see
/// [`crate::pdb::find_pdb_conflict`]), and whether one of them is named `name`.
pub fn pdbs_in_namespace(
    cached: &[Arc<PodDisruptionBudget>],
    namespace: &str,
    name: &str,
    pod_labels: &[BTreeMap<String, String>],
) -> (Vec<PodDisruptionBudget>, bool) {
    let list: Vec<PodDisruptionBudget> = cached
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
        .filter(|p| {
            p.metadata.name.as_deref() == Some(name) || pod_labels.iter().any(|l| pdb_selects(p, l))
        })
        .map(|p| (**p).clone())
        .collect();
    let has_name = list.iter().any(|p| p.name_any() == name);
    (list, has_name)
}

/// The PDBs of the namespace `api` points at that matter for the workload: from `cache` when
/// there is one (plus a direct read of `name` when the cache lacks it), else one LIST of all.
pub async fn namespace_pdbs(
    cache: Option<&Store<PodDisruptionBudget>>,
    api: &Api<PodDisruptionBudget>,
    namespace: &str,
    name: &str,
    pod_labels: &[BTreeMap<String, String>],
) -> Result<Vec<PodDisruptionBudget>, Error> {
    let Some(store) = cache else {
        return Ok(api.list(&ListParams::default()).await?.items);
    };
    let (mut list, has_name) = pdbs_in_namespace(&store.state(), namespace, name, pod_labels);
    if !has_name && let Some(p) = api.get_opt(name).await? {
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

    #[test]
    fn the_named_pdb_and_those_over_the_pods_of_the_namespace_are_returned() {
        let cached = [
            pdb("a", "x-pdb", "other"),
            pdb("b", "x-pdb", "x"),
            pdb("a", "user", "x"),
            pdb("a", "y-pdb", "y"),
            pdb("b", "user-b", "x"),
        ];
        let (list, has) = pdbs_in_namespace(&cached, "a", "x-pdb", &pods("x"));
        let names: Vec<_> = list.iter().map(|p| p.name_any()).collect();
        assert_eq!(names, ["x-pdb", "user"]);
        assert!(has);
    }

    #[test]
    fn a_name_missing_from_the_namespace_is_reported() {
        let cached = [pdb("b", "x-pdb", "x")];
        let (list, has) = pdbs_in_namespace(&cached, "a", "x-pdb", &pods("x"));
        assert!(list.is_empty());
        assert!(!has, "x-pdb exists only in another namespace");
    }
}
