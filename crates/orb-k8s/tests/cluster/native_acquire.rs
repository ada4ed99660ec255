//! The native spec hatch through `K8sProvider::acquire` on the real local control plane.
//!
//! - Both seed 002 examples with both switches on: the created objects carry the operator's
//!   fields and orb's identity labels, and the provider's status reaches fulfilled.
//! - Either switch off: the typed builders create the object and the native fields are absent.
//! - One high-risk field per kind: acquire is Rejected and no Pod, Deployment, StatefulSet,
//!   Job (or Service) exists in the namespace.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use orb_core::ids::RequestId;
use orb_core::provider::{AcquireInput, Provider, ProviderError};
use orb_core::template::Template;
use orb_k8s::K8sProvider;
use rstest::rstest;
use serde_json::{Value, json};

use crate::common::{Harness, provider_for, status_input, wait_verdict};

/// A harness whose provider has `native_spec_enabled` and the application switch as given.
async fn native_harness(prefix: &str, provider_on: bool, application_on: bool) -> Harness {
    let mut h = crate::common::harness(prefix, json!({})).await;
    let identity = crate::common::broker_identity(&h.cluster, &h.ns, &json!({})).await;
    let provider: K8sProvider = provider_for(
        &identity.as_cluster(),
        h.ns.name(),
        json!({"native_spec_enabled": provider_on}),
    );
    h.provider = provider.with_native_spec_context(application_on, None);
    h
}

/// A template exactly as an operator writes it in seed 002's spelling.
fn seed_template(value: Value) -> Template {
    orb_core::template::wire::template_from_value(&value, None, "seed 002")
        .expect("the seed example parses")
        .template
}

/// Seed 002's full Pod override; images are ones the local cluster runs (busybox:1.36).
fn full_pod_override(namespace: &str) -> Template {
    seed_template(json!({
        "template_id": "ml-worker",
        "provider_type": "k8s",
        "provider_api": "Pod",
        "image_id": "busybox:1.36",
        "command": ["sh", "-c", "sleep 3600"],
        "namespace": namespace,
        "max_instances": 16,
        "native_spec": {"spec": {
            "initContainers": [{
                "name": "warm-cache",
                "image": "busybox:1.36",
                "command": ["sh", "-c", "true"]
            }],
            "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
            "topologySpreadConstraints": [{
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule"
            }]
        }}
    }))
}

/// Seed 002's partial Deployment override.
fn partial_deployment_override(namespace: &str) -> Template {
    seed_template(json!({
        "template_id": "long-running-service",
        "provider_type": "k8s",
        "provider_api": "Deployment",
        "image_id": "busybox:1.36",
        "command": ["sh", "-c", "sleep 3600"],
        "namespace": namespace,
        "max_instances": 8,
        "native_spec": {"spec": {"strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "0"}
        }}}
    }))
}

async fn try_acquire(
    h: &Harness,
    template: &Template,
    count: u32,
) -> (
    RequestId,
    Result<orb_core::provider::AcquireOutcome, ProviderError>,
) {
    let request_id = RequestId::new_acquire();
    let outcome = h
        .provider
        .acquire(AcquireInput {
            request_id: request_id.clone(),
            template: template.clone(),
            count,
        })
        .await;
    (request_id, outcome)
}

fn assert_identity(labels: &std::collections::BTreeMap<String, String>, request_id: &RequestId) {
    assert_eq!(
        labels.get("orb.io/managed").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        labels.get("orb.io/request-id").map(String::as_str),
        Some(request_id.as_str())
    );
}

async fn request_pods(h: &Harness, request_id: &RequestId) -> Vec<Pod> {
    Api::<Pod>::namespaced(h.cluster.client.clone(), h.ns.name())
        .list(&ListParams::default().labels(&format!("orb.io/request-id={request_id}")))
        .await
        .expect("list pods")
        .items
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn seed_full_pod_override_is_acquired_with_the_operators_fields_and_fulfils() {
    let h = native_harness("nacq-pod", true, true).await;
    let template = full_pod_override(h.ns.name());
    let (request_id, outcome) = try_acquire(&h, &template, 2).await;
    let outcome = outcome.expect("the seed Pod override is acquired");

    let pods = request_pods(&h, &request_id).await;
    assert_eq!(pods.len(), 2, "one pod per machine");
    for pod in &pods {
        let spec = pod.spec.as_ref().unwrap();
        let init = &spec.init_containers.as_ref().expect("initContainers kept")[0];
        assert_eq!(init.name, "warm-cache");
        let security = spec
            .security_context
            .as_ref()
            .expect("securityContext kept");
        assert_eq!(
            (security.run_as_user, security.fs_group),
            (Some(1000), Some(2000))
        );
        let spread = &spec
            .topology_spread_constraints
            .as_ref()
            .expect("spread kept")[0];
        assert_eq!(spread.topology_key, "topology.kubernetes.io/zone");
        assert_eq!(spread.when_unsatisfiable, "DoNotSchedule");
        assert_eq!(spec.containers[0].image.as_deref(), Some("busybox:1.36"));
        let labels = pod.labels();
        assert_identity(labels, &request_id);
        assert_eq!(
            labels.get("orb.io/machine-id").map(String::as_str),
            Some(pod.name_any().as_str())
        );
        assert_eq!(
            labels.get("orb.io/template-id").map(String::as_str),
            Some("ml-worker")
        );
    }
    let input = status_input(&request_id, &template, 2, &outcome);
    let report = wait_verdict(&h, &input, "fulfilled").await;
    assert_eq!(report.machines.len(), 2);
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn seed_partial_deployment_override_is_acquired_with_its_strategy_and_fulfils() {
    let h = native_harness("nacq-deploy", true, true).await;
    let template = partial_deployment_override(h.ns.name());
    let (request_id, outcome) = try_acquire(&h, &template, 2).await;
    let outcome = outcome.expect("the seed Deployment override is acquired");

    let deployments = Api::<Deployment>::namespaced(h.cluster.client.clone(), h.ns.name())
        .list(&ListParams::default())
        .await
        .expect("list deployments")
        .items;
    assert_eq!(deployments.len(), 1);
    let deployment = &deployments[0];
    let spec = &deployment.spec;
    let strategy = spec.strategy.as_ref().expect("strategy kept");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let rolling = strategy.rolling_update.as_ref().unwrap();
    assert_eq!(rolling.max_surge, Some(IntOrString::String("25%".into())));
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));
    assert_eq!(spec.replicas, Some(2));
    assert_identity(deployment.labels(), &request_id);
    let pod_labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_identity(pod_labels, &request_id);

    let input = status_input(&request_id, &template, 2, &outcome);
    let report = wait_verdict(&h, &input, "fulfilled").await;
    assert_eq!(report.machines.len(), 2);
    for pod in request_pods(&h, &request_id).await {
        assert_identity(pod.labels(), &request_id);
    }
}

#[rstest]
#[case::provider_switch_off(false, true)]
#[case::application_switch_off(true, false)]
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn with_a_switch_off_the_typed_object_is_created_without_the_native_fields(
    #[case] provider_on: bool,
    #[case] application_on: bool,
) {
    let h = native_harness("nacq-off", provider_on, application_on).await;
    let template = seed_template(json!({
        "template_id": "typed-anyway",
        "provider_api": "Deployment",
        "image_id": "busybox:1.36",
        "command": ["sh", "-c", "sleep 3600"],
        "namespace": h.ns.name(),
        "native_spec": {"spec": {
            "minReadySeconds": 7,
            "template": {"spec": {"hostname": "from-native"}}
        }}
    }));
    let (request_id, outcome) = try_acquire(&h, &template, 1).await;
    outcome.expect("the typed builders create the Deployment");

    let deployments = Api::<Deployment>::namespaced(h.cluster.client.clone(), h.ns.name())
        .list(&ListParams::default())
        .await
        .expect("list deployments")
        .items;
    assert_eq!(deployments.len(), 1);
    let spec = &deployments[0].spec;
    assert_eq!(spec.min_ready_seconds, None, "native field applied");
    let pod_spec = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod_spec.hostname, None, "native pod field applied");
    assert_eq!(pod_spec.containers[0].name, "orb");
    assert_identity(deployments[0].labels(), &request_id);
}

/// A pod spec with one high-risk setting; lists are replaced by the native merge, so the
/// container carries its name and image.
fn risky_pod_spec(kind: &str) -> Value {
    let container = |security: Value| json!([{"name": "orb", "image": "busybox:1.36", "securityContext": security}]);
    match kind {
        "Pod" => json!({"hostNetwork": true}),
        "Deployment" => json!({"containers": container(json!({"privileged": true}))}),
        "StatefulSet" => json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
        _ => json!({"containers": container(json!({"runAsUser": 0}))}),
    }
}

async fn count_of<K>(client: &Client, namespace: &str) -> usize
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    Api::<K>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .len()
}

#[rstest]
#[case::pod("Pod", "spec.hostNetwork")]
#[case::deployment(
    "Deployment",
    "spec.template.spec.containers[0].securityContext.privileged"
)]
#[case::statefulset("StatefulSet", "spec.template.spec.volumes[0].hostPath")]
#[case::job("Job", "spec.template.spec.containers[0].securityContext.runAsUser")]
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_high_risk_native_field_is_rejected_and_nothing_is_created(
    #[case] kind: &str,
    #[case] path: &str,
) {
    let h = native_harness(
        &format!("nacq-risk-{}", kind.to_ascii_lowercase()),
        true,
        true,
    )
    .await;
    let native_spec = match kind {
        "Pod" => json!({"spec": risky_pod_spec(kind)}),
        _ => json!({"spec": {"template": {"spec": risky_pod_spec(kind)}}}),
    };
    let template = seed_template(json!({
        "template_id": "risky",
        "provider_api": kind,
        "image_id": "busybox:1.36",
        "command": ["sh", "-c", "sleep 3600"],
        "namespace": h.ns.name(),
        "native_spec": native_spec
    }));
    let (_, outcome) = try_acquire(&h, &template, 2).await;
    let err = outcome.expect_err("a high-risk field must be rejected");
    let ProviderError::Rejected(message) = &err else {
        panic!("expected Rejected, got {err:?}");
    };
    assert!(message.contains(path), "{message}");

    let (client, ns) = (&h.cluster.client, h.ns.name());
    let counts = [
        ("Pod", count_of::<Pod>(client, ns).await),
        ("Deployment", count_of::<Deployment>(client, ns).await),
        ("StatefulSet", count_of::<StatefulSet>(client, ns).await),
        ("Job", count_of::<Job>(client, ns).await),
        ("Service", count_of::<Service>(client, ns).await),
    ];
    assert!(
        counts.iter().all(|(_, n)| *n == 0),
        "objects exist after a rejection: {counts:?}"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_native_statefulset_is_acquired_with_its_headless_service_and_fulfils() {
    let h = native_harness("nacq-sts", true, true).await;
    let template = seed_template(json!({
        "template_id": "peers",
        "provider_api": "StatefulSet",
        "image_id": "busybox:1.36",
        "command": ["sh", "-c", "sleep 3600"],
        "namespace": h.ns.name(),
        "native_spec": {"spec": {"podManagementPolicy": "Parallel"}}
    }));
    let (request_id, outcome) = try_acquire(&h, &template, 2).await;
    let outcome = outcome.expect("the native StatefulSet is acquired");
    let sets = Api::<StatefulSet>::namespaced(h.cluster.client.clone(), h.ns.name())
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(sets.len(), 1);
    assert_eq!(
        sets[0].spec.pod_management_policy.as_deref(),
        Some("Parallel")
    );
    assert_identity(sets[0].labels(), &request_id);
    let service_name = sets[0].spec.service_name.clone().expect("serviceName");
    let service = Api::<Service>::namespaced(h.cluster.client.clone(), h.ns.name())
        .get(&service_name)
        .await
        .expect("the headless Service exists");
    assert_eq!(
        service.spec.as_ref().unwrap().cluster_ip.as_deref(),
        Some("None")
    );
    let input = status_input(&request_id, &template, 2, &outcome);
    wait_verdict(&h, &input, "fulfilled").await;
}
