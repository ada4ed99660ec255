//! Namespacing modes on the real control plane: multi-namespace (`namespaces: [a, b]`) places
//! machines in whichever listed namespace a template names and refuses any other before
//! creating anything; cluster-wide (`namespaces: ["*"]`) accepts every namespace.

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube_fixture::TestCluster;
use orb_core::ids::RequestId;
use orb_core::machine::MachineStatus;
use orb_core::provider::{AcquireInput, Provider, ProviderError};
use orb_core::template::ProviderApi;
use serde_json::json;

async fn pods_in(cluster: &TestCluster, ns: &str) -> usize {
    Api::<Pod>::namespaced(cluster.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list pods")
        .items
        .len()
}

/// A provider as the shipped identity: a Role in each listed namespace, or the ClusterRole.
async fn harness_for(
    cluster: &TestCluster,
    ns: &kube_fixture::TestNamespace,
    settings: serde_json::Value,
) -> Harness {
    let identity = broker_identity(cluster, ns, &settings).await;
    Harness {
        cluster: cluster.clone(),
        ns: kube_fixture::TestNamespace::detached(ns.name()),
        provider: provider_for(&identity.as_cluster(), ns.name(), settings),
    }
}

async fn acquire_running_in(h: &Harness, namespace: &str) {
    let mut t = template(&format!("in-{namespace}"), Some(ProviderApi::Pod));
    t.namespace = Some(namespace.to_string());
    let (req, outcome) = acquire(h, &t, 2).await;
    let report = wait_verdict(h, &status_input(&req, &t, 2, &outcome), "fulfilled").await;
    assert_eq!(
        ids_with(&report, MachineStatus::Running).len(),
        2,
        "{report:?}"
    );
    let pods = Api::<Pod>::namespaced(h.cluster.client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("orb.io/request-id={req}")))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 2, "the machines live in {namespace}");
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn multi_namespace_mode_serves_listed_namespaces_and_refuses_others() {
    let cluster = TestCluster::connect().await;
    let a = cluster.namespace("multi-a").await;
    let b = cluster.namespace("multi-b").await;
    let outside = cluster.namespace("multi-out").await;
    let h = harness_for(&cluster, &a, json!({"namespaces": [a.name(), b.name()]})).await;

    acquire_running_in(&h, a.name()).await;
    acquire_running_in(&h, b.name()).await;

    let mut t = template("outside", Some(ProviderApi::Pod));
    t.namespace = Some(outside.name().to_string());
    let refused = h
        .provider
        .acquire(AcquireInput {
            request_id: RequestId::new_acquire(),
            template: t,
            count: 2,
        })
        .await
        .expect_err("a namespace outside the list must be refused");
    match &refused {
        ProviderError::Rejected(msg) => assert!(msg.contains(outside.name()), "{msg}"),
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(
        pods_in(&cluster, outside.name()).await,
        0,
        "nothing was created"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn cluster_wide_mode_accepts_any_namespace() {
    let cluster = TestCluster::connect().await;
    let one = cluster.namespace("wide-a").await;
    let two = cluster.namespace("wide-b").await;
    let h = harness_for(
        &cluster,
        &one,
        json!({"namespaces": ["*"], "namespace": null}),
    )
    .await;
    acquire_running_in(&h, one.name()).await;
    acquire_running_in(&h, two.name()).await;
}
