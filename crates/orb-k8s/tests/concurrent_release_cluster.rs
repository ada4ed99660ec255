//! Two returns of the same Deployment at once. Each lowers `spec.replicas` with a
//! resourceVersion precondition; when both read the same version, the second write gets a 409
//! and must re-read and retry. Without the precondition one update is lost (5 → 4 instead of
//! 3) and the ReplicaSet keeps an unnamed pod alive; without the retry one return fails.

#[allow(dead_code)]
#[path = "cluster/common.rs"]
mod common;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use orb_core::machine::MachineStatus;
use orb_core::template::ProviderApi;
use serde_json::json;

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn concurrent_deployment_returns_each_lower_replicas_by_their_own_victims() {
    let h = harness("deploy-race", json!({})).await;
    let t = template("svc", Some(ProviderApi::Deployment));
    let (req, outcome) = acquire(&h, &t, 6).await;
    let name = outcome.resource_ids[0].clone();
    let report = wait_verdict(&h, &status_input(&req, &t, 6, &outcome), "fulfilled").await;
    let all = ids_with(&report, MachineStatus::Running);
    assert_eq!(all.len(), 6);

    // Two rounds of two simultaneous single-pod returns (6 → 4 → 2), each a scale-down.
    let mut live = all.clone();
    for round in 0..2 {
        let (a, b) = (live[0].clone(), live[1].clone());
        let (va, vb) = ([a.as_str()], [b.as_str()]);
        let (ra, rb) = tokio::join!(
            release(&h, &req, &outcome, "Deployment", &va),
            release(&h, &req, &outcome, "Deployment", &vb),
        );
        let ra = ra.unwrap_or_else(|e| panic!("round {round}: return of {a} failed: {e}"));
        let rb = rb.unwrap_or_else(|e| panic!("round {round}: return of {b} failed: {e}"));
        assert_eq!(ra.released, vec![a.clone()], "round {round}");
        assert_eq!(rb.released, vec![b.clone()], "round {round}");
        live.retain(|n| *n != a && *n != b);
        wait_live_pods(&h, &req, &live).await;
        let deployments: Api<Deployment> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
        assert_eq!(
            deployments.get(&name).await.unwrap().spec.replicas,
            Some(live.len() as i32),
            "round {round}: both scale-downs must count"
        );
    }
}
