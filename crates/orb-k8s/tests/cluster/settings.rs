//! Provider settings that must change what orb does, proven on the real local control plane:
//! the controller status cache TTL (`controller_status_cache_ttl_seconds`, default and off),
//! a template that tries to switch the audit off (refused, nothing created), and cancel's
//! namespace when a request has no bookkeeping (the same resolution as acquire).
//! Needs the control plane (`tools/control-plane/cp up`).

use crate::common::{WAIT, acquire, status_input, template, wait_verdict};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube_fixture::fault_proxy::{FaultProxy, RequestMatch};
use kube_fixture::{Check, TestCluster, wait_for};
use orb_core::ids::RequestId;
use orb_core::provider::{AcquireInput, CancelInput, Provider, ProviderError};
use orb_core::template::ProviderApi;
use orb_k8s::K8sProvider;
use orb_k8s::config::{ConfigLayers, FileLayer};
use serde_json::{Value, json};

/// A provider on `namespace` whose every call goes through `proxy` (which records them).
fn provider_through(proxy: &FaultProxy, namespace: &str, settings: Value) -> K8sProvider {
    let mut block = serde_json::Map::new();
    block.insert("namespace".into(), json!(namespace));
    if let Value::Object(extra) = settings {
        block.extend(extra);
    }
    let resolved = ConfigLayers::new(
        Some(FileLayer {
            path: "test-config.json".into(),
            block,
        }),
        Vec::<(String, String)>::new(),
    )
    .resolve(None)
    .expect("valid test config");
    K8sProvider::with_client(proxy.client(), resolved, "default")
}

/// GETs of `deployments/<name>` the proxy has forwarded so far.
fn deployment_gets(proxy: &FaultProxy, namespace: &str, name: &str) -> usize {
    proxy
        .requests_matching(&RequestMatch::path(&format!(
            "/namespaces/{namespace}/deployments/{name}"
        )))
        .iter()
        .filter(|r| r.method == http::Method::GET)
        .count()
}

/// With the default TTL (5 s) a settled Deployment's state is read once and reused; with
/// `controller_status_cache_ttl_seconds: 0` every status read asks the apiserver. (The
/// three reads take well under the 5 s, even on a busy 2-core machine.)
#[rstest::rstest]
#[case::default_ttl(json!({}), 0)]
#[case::ttl_off(json!({"controller_status_cache_ttl_seconds": 0}), 3)]
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn the_status_cache_ttl_decides_whether_a_settled_controller_is_read_again(
    #[case] settings: Value,
    #[case] extra_gets: usize,
) {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("status-ttl").await;
    let identity = crate::common::broker_identity(&cluster, &ns, &settings).await;
    let proxy = FaultProxy::start(&identity.as_cluster()).await;
    let h = crate::common::Harness {
        provider: provider_through(&proxy, ns.name(), settings),
        cluster,
        ns,
    };
    let t = template("ttl", Some(ProviderApi::Deployment));
    let (id, outcome) = acquire(&h, &t, 2).await;
    let input = status_input(&id, &t, 2, &outcome);
    wait_verdict(&h, &input, "fulfilled").await;
    let name = outcome.resource_ids[0].clone();
    // The verdict is read from the pods, so it can run ahead of the Deployment's own
    // status (readyReplicas is written by the controller-manager a moment later). Only a
    // settled state is cached: wait until the Deployment says 2 ready, then let one status
    // read see it, and count from there.
    let deployments: Api<Deployment> = Api::namespaced(h.cluster.client.clone(), h.ns.name());
    wait_for(
        "the Deployment to report 2 ready replicas",
        WAIT,
        || async {
            let d = deployments.get(&name).await.expect("get deployment");
            match d.status.and_then(|s| s.ready_replicas) {
                Some(2) => Check::Done(()),
                seen => Check::NotYet(format!("readyReplicas {seen:?}")),
            }
        },
    )
    .await;
    h.provider.status(input.clone()).await.expect("status");
    let before = deployment_gets(&proxy, h.ns.name(), &name);
    for _ in 0..3 {
        h.provider.status(input.clone()).await.expect("status");
    }
    assert_eq!(
        deployment_gets(&proxy, h.ns.name(), &name) - before,
        extra_gets,
        "GETs of deployment {name} for three status reads"
    );
}

/// Must show of issue 24: a template trying to switch the audit off with a privileged pod
/// is refused before anything is created, and the error names the key.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_template_switching_the_audit_off_is_refused_and_creates_nothing() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("no-audit-off").await;
    let identity = crate::common::broker_identity(&cluster, &ns, &json!({})).await;
    let provider = crate::common::provider_for(&identity.as_cluster(), ns.name(), json!({}));
    let mut t = template("sneaky", Some(ProviderApi::Pod));
    t.provider_config = Some(json!({
        "audit_high_risk_pod_fields": false,
        "reject_high_risk_pod_fields": false
    }));
    t.pod_spec_override = Some(json!({
        "hostPID": true,
        "containers": [{"name": "orb", "securityContext": {"privileged": true}}]
    }));
    let err = provider
        .acquire(AcquireInput {
            request_id: RequestId::new_acquire(),
            template: t.clone(),
            count: 2,
        })
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ProviderError::Rejected(_)), "{text}");
    assert!(
        text.contains("may not override \"audit_high_risk_pod_fields\"")
            && text.contains("ORB_K8S_AUDIT_HIGH_RISK_POD_FIELDS"),
        "{text}"
    );
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    assert!(
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "nothing may be created"
    );
}

/// Cancel of a request whose bookkeeping was lost looks where an acquire of a template
/// without a namespace goes: the detected namespace, not `default`.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn cancel_without_bookkeeping_uses_the_detected_namespace() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("cancel-ns").await;
    // No `namespace` in the config: the detected one (here the test namespace) applies.
    let resolved = ConfigLayers::new(None, Vec::<(String, String)>::new())
        .resolve(None)
        .unwrap();
    let provider = K8sProvider::with_client(cluster.client.clone(), resolved, ns.name());
    let t = template("cancelled", Some(ProviderApi::Deployment));
    let id = RequestId::new_acquire();
    let outcome = provider
        .acquire(AcquireInput {
            request_id: id.clone(),
            template: t,
            count: 1,
        })
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns.name());
    assert!(
        deployments
            .get_opt(&outcome.resource_ids[0])
            .await
            .unwrap()
            .is_some()
    );
    let cancelled = provider
        .cancel(CancelInput {
            request_id: id,
            provider_api: Some(orb_core::ProviderApi::Deployment),
            provider_data: Value::Null,
        })
        .await
        .unwrap();
    // The Deployment, and its pod if the ReplicaSet made it already.
    assert!(
        cancelled.deleted.contains(&outcome.resource_ids[0]),
        "{cancelled:?}"
    );
    wait_for("the Deployment to go", WAIT, || async {
        match deployments.get_opt(&outcome.resource_ids[0]).await {
            Ok(None) => Check::Done(()),
            other => Check::NotYet(format!("{:?}", other.map(|d| d.is_some()))),
        }
    })
    .await;
}
