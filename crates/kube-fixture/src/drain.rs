//! Draining a node as `kubectl drain` does: cordon it, then evict each of its pods through the
//! Eviction API, which honours PodDisruptionBudgets. An eviction a budget refuses (429) is
//! retried every second until it passes or the time is up; DaemonSet pods stay, as with
//! `--ignore-daemonsets`. Tests drain only nodes of their own (`node_with_room`): the
//! simulated nodes run every other test's pods.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{EvictParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

/// Cordons `node` and evicts its pods, retrying refused evictions until `within` has passed.
/// Returns the pods evicted (already gone ones are not counted), sorted; an error names the
/// pods still refused at the end, or the call that failed.
pub async fn drain(client: &Client, node: &str, within: Duration) -> Result<Vec<String>, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let cordon = serde_json::json!({"spec": {"unschedulable": true}});
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&cordon))
        .await
        .map_err(|e| format!("cordoning node {node}: {e}"))?;
    let pods: Vec<Pod> = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(|e| format!("listing the pods of node {node}: {e}"))?
        .items
        .into_iter()
        .filter(|p| {
            !p.owner_references()
                .iter()
                .any(|o| o.kind == "DaemonSet" && o.controller == Some(true))
        })
        .collect();
    let deadline = tokio::time::Instant::now() + within;
    let mut evicted = Vec::new();
    let mut refused = Vec::new();
    for pod in pods {
        let name = pod.name_any();
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        loop {
            match api.evict(&name, &EvictParams::default()).await {
                Ok(_) => {
                    evicted.push(name);
                    break;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => break,
                Err(kube::Error::Api(e))
                    if e.code == 429 && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => {
                    refused.push(format!("{name}: {e}"));
                    break;
                }
            }
        }
    }
    if !refused.is_empty() {
        return Err(format!(
            "draining node {node}: these pods could not be evicted within {within:?}: {}",
            refused.join("; ")
        ));
    }
    evicted.sort();
    Ok(evicted)
}
