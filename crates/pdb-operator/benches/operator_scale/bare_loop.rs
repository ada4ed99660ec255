//! The limit the operator is compared with: the least a PDB controller can do on the same
//! cluster. It watches the namespace's Deployments and, for each one it has not seen, applies
//! `<name>-pdb` (minAvailable "50%", the Deployment's selector, a controller ownerReference —
//! the PDB the operator writes for the bench's `standard` policy, less labels and
//! annotations) by server-side apply, at most `concurrency` applies at once (0: no limit).
//! No policies, no events, no status, no metrics.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

fn pdb_for(d: &Deployment) -> serde_json::Value {
    let owner = d
        .controller_owner_ref(&())
        .expect("a Deployment read from the API");
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": format!("{}-pdb", d.name_any()), "ownerReferences": [owner]},
        "spec": {"minAvailable": "50%", "selector": &d.spec.selector}
    })
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
            let pdbs = pdbs.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let params = PatchParams::apply("bench-bare-loop");
                let name = format!("{}-pdb", d.name_any());
                // A throttled apply is tried again, as any controller would.
                for _ in 0..10 {
                    match pdbs.patch(&name, &params, &Patch::Apply(pdb_for(&d))).await {
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
