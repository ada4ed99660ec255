//! LeaderWorkerSet against the real local control plane. The upstream LeaderWorkerSet
//! controller is not available here, so the test installs a minimal LeaderWorkerSet CRD and
//! creates the pods the LWS controller would create, with its labels.

mod common;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, PostParams};
use kube::{Api, ResourceExt};
use kube_fixture::TestCluster;
use serde_json::json;

/// A minimal LeaderWorkerSet CRD: the upstream LWS controller is not available here, so the
/// test installs only the API (idempotently, never deleted) and creates the pods the LWS
/// controller would create, with its labels.
fn lws_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "leaderworkersets.leaderworkerset.x-k8s.io"},
        "spec": {
            "group": "leaderworkerset.x-k8s.io",
            "scope": "Namespaced",
            "names": {"plural": "leaderworkersets", "singular": "leaderworkerset",
                      "kind": "LeaderWorkerSet", "listKind": "LeaderWorkerSetList", "shortNames": ["lws"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {"type": "object",
                              "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                             "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn leader_worker_set_budget_is_whole_groups() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    install_crd(&cluster.client, &lws_crd()).await;
    let ns = cluster.namespace("pdbop-lws").await;
    let c = &cluster.client;
    let n = ns.name();
    let _op = start_operator(&cluster, n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    let pods: Api<Pod> = Api::namespaced(c.clone(), n);
    strict_policy(c, n, "serving", "mission-critical", "vllm").await;
    let ar = pdb_operator::controller::gang::lws_resource();
    let lws_api: Api<DynamicObject> = Api::namespaced_with(c.clone(), n, &ar);
    let lws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "labels": {"app": "vllm"}},
        "spec": {"replicas": 4, "leaderWorkerTemplate": {"size": 2}}
    }))
    .unwrap();
    // Discovery may still be starting; the CRD was just installed.
    let created = lws_api.create(&PostParams::default(), &lws).await.unwrap();
    for g in 0..4 {
        for w in 0..2 {
            let gs = g.to_string();
            let ws = w.to_string();
            create_pod(
                c,
                n,
                &format!("vllm-{g}-{w}"),
                None,
                json!({"leaderworkerset.sigs.k8s.io/name": "vllm",
                       "leaderworkerset.sigs.k8s.io/group-index": gs,
                       "leaderworkerset.sigs.k8s.io/worker-index": ws}),
            )
            .await;
        }
    }
    wait_ready_pods(&pods, "leaderworkerset.sigs.k8s.io/name=vllm", 8).await;
    // L8: "90%" over 4 groups of 2: ceil(3.6) = 4 → clamp 3 groups → 6; 2 evictions allowed.
    let pdb = wait_pdb(&pdbs, "vllm-pdb", "minAvailable 6", |p| {
        min_available(p) == Some(json!(6))
    })
    .await;
    assert_eq!(
        serde_json::to_value(&pdb.spec.as_ref().unwrap().selector).unwrap(),
        json!({"matchLabels": {"leaderworkerset.sigs.k8s.io/name": "vllm"}})
    );
    let owner = &pdb.owner_references()[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.uid.as_str()
        ),
        (
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            created.uid().unwrap().as_str()
        )
    );
    wait_disruptions(&pdbs, "vllm-pdb", 8, 2).await;
    assert_eq!(evict(&pods, "vllm-0-0").await, Ok(()));
    assert_eq!(evict(&pods, "vllm-0-1").await, Ok(()));
    let (code, message) = evict(&pods, "vllm-1-0")
        .await
        .expect_err("second group protected");
    assert_eq!(code, 429, "{message}");
}
