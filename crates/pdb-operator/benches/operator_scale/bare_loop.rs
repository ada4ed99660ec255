//! The limit the operator is compared with: the least a PDB controller can do on the same
//! cluster. It watches the namespace's Deployments and, for each one it has not seen, applies
//! `<name>-pdb` by server-side apply, at most `concurrency` applies at once (0: no limit). The
//! PDB is the very object the operator writes for the bench's `standard` policy (built by the
//! operator's own `desired_pdb_for_workload`, labels, annotations and ownerReference
//! included), because the apiserver's cost of an apply grows with the fields it tracks: a
//! thinner PDB would measure a cheaper write, not a leaner controller. No policy watch, no
//! events, no status, no metrics, no caches.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use pdb_operator::crd::PDBPolicy;
use pdb_operator::desired::{Decision, Policies, WorkloadView, desired_pdb_for_workload};
use pdb_operator::names::keys;

/// The bench's `standard` PDBPolicy in `namespace` (what `operator_burst` creates).
pub fn bench_policy(namespace: &str) -> PDBPolicy {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "availability.pdboperator.io/v1alpha1", "kind": "PDBPolicy",
        "metadata": {"name": "bench-standard", "namespace": namespace},
        "spec": {"availabilityClass": "standard",
                 "workloadSelector": {"matchLabels": {"bench": "yes"}}}
    }))
    .expect("the bench policy is a valid PDBPolicy")
}

/// The PDB the operator would write for `d` under `policy`, as it sends it on create.
fn pdb_for(d: &Deployment, policy: &PDBPolicy) -> PodDisruptionBudget {
    let view = WorkloadView::from_deployment(d).expect("a Deployment read from the API");
    let policies = Policies {
        namespaced: std::slice::from_ref(policy),
        cluster: &[],
        legacy_cross_namespace: false,
    };
    let now = jiff::Timestamp::now();
    let Decision::Apply(want) = desired_pdb_for_workload(&view, &policies, now) else {
        panic!("the bench policy gives {} no PDB", d.name_any());
    };
    let mut pdb = want.pdb;
    pdb.metadata
        .annotations
        .get_or_insert_default()
        .insert(keys::CREATION_TIME.into(), pdb_operator::pdb::rfc3339(now));
    pdb
}

/// Starts the loop on `namespace`; abort the handle to stop it.
pub fn start(client: Client, namespace: &str, concurrency: usize) -> tokio::task::JoinHandle<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, namespace);
    let permits = if concurrency == 0 {
        tokio::sync::Semaphore::MAX_PERMITS
    } else {
        concurrency
    };
    let limit = Arc::new(tokio::sync::Semaphore::new(permits));
    let policy = Arc::new(bench_policy(namespace));
    tokio::spawn(async move {
        let mut seen = HashSet::new();
        let stream = watcher(deployments, watcher::Config::default())
            .default_backoff()
            .applied_objects();
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            let Ok(d) = ev else { continue };
            if !seen.insert(d.name_any()) {
                continue;
            }
            let permit = limit.clone().acquire_owned().await.expect("never closed");
            let (pdbs, policy) = (pdbs.clone(), policy.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let params = PatchParams::apply("bench-bare-loop");
                let pdb = pdb_for(&d, &policy);
                let name = format!("{}-pdb", d.name_any());
                // A throttled apply is tried again, as any controller would.
                for _ in 0..10 {
                    match pdbs.patch(&name, &params, &Patch::Apply(&pdb)).await {
                        Ok(_) => return,
                        Err(e) => {
                            eprintln!("bench: bare loop apply of {name} failed ({e}); again");
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        }
                    }
                }
            });
        }
    })
}
