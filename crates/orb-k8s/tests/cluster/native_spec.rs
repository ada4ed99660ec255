//! The native spec hatch (seed 002) against the real local control plane.
//!
//! - Both seed examples, rendered with `render_native_body` and created for real: the objects
//!   carry the operator's fields and orb's identity, and the Deployment's pods become Ready.
//! - `server_dry_run` (what `orb templates validate --server` calls): the apiserver accepts the
//!   seed Deployment without storing it, and rejects an invalid field with its message.
//! - Every high-risk pod field, for every kind, is refused by `enforce_audit_policy` and
//!   nothing reaches the namespace. These tests exercise the library layer through [`submit`]
//!   (render, audit, create); the same refusal through `K8sProvider::acquire` is covered by
//!   [`crate::native_acquire`].

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use kube_fixture::{Check, TestCluster, wait_for};
use orb_core::ProviderApi;
use orb_core::template::Template;
use orb_k8s::audit::{AuditMode, AuditRejection, HighRiskField, enforce_audit_policy};
use orb_k8s::config::K8sProviderConfig;
use orb_k8s::dry_run::{DryRunVerdict, api_resource, server_dry_run};
use orb_k8s::native_spec::{NativeSpecInput, object_name, render_native_body};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);
const KINDS: [ProviderApi; 4] = [
    ProviderApi::Pod,
    ProviderApi::Deployment,
    ProviderApi::StatefulSet,
    ProviderApi::Job,
];

fn request_id() -> String {
    format!("req-{}", uuid::Uuid::new_v4())
}

/// A template exactly as an operator writes it in seed 002's spelling.
fn seed_template(value: Value) -> Template {
    orb_core::template::wire::template_from_value(&value, None, "seed 002")
        .expect("the seed example parses")
        .template
}

/// Seed 002's full Pod override, in `namespace`.
fn full_pod_override(namespace: &str) -> Template {
    seed_template(json!({
        "template_id": "ml-worker",
        "provider_type": "k8s",
        "provider_api": "Pod",
        "image_id": "registry.example.com/ml-worker:1",
        "namespace": namespace,
        "max_instances": 16,
        "native_spec": {"spec": {
            "initContainers": [{
                "name": "warm-cache",
                "image": "registry.example.com/cache-warmer:1",
                "command": ["sh", "-c", "/usr/local/bin/warm"]
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

/// Seed 002's partial Deployment override, in `namespace`. The native spec is the seed's; the
/// image is one the local cluster can run (the seed's registry does not exist), with a command
/// that keeps it running so its pods can become Ready.
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

/// Renders `template`'s native body for a request of `count` machines.
fn render(template: &Template, kind: ProviderApi, request_id: &str, count: u32) -> Value {
    let config = K8sProviderConfig::default();
    let name = object_name(kind, &config.naming, request_id).expect("a valid name");
    let input = NativeSpecInput {
        template,
        config: &config,
        request_id,
        name: &name,
        namespace: template
            .namespace
            .as_deref()
            .expect("the test sets a namespace"),
        count,
        config_dir: None,
    };
    render_native_body(kind, &input).expect("the native spec renders")
}

/// Audit with the default policy (reject), then create: nothing is sent when the audit
/// refuses the body.
async fn submit(
    client: &Client,
    kind: ProviderApi,
    body: &Value,
) -> Result<DynamicObject, AuditRejection> {
    let config = K8sProviderConfig::default();
    enforce_audit_policy(AuditMode::from_config(&config), body)?;
    let namespace = body["metadata"]["namespace"].as_str().expect("namespace");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &api_resource(kind));
    let object: DynamicObject = serde_json::from_value(body.clone()).expect("an object");
    Ok(api
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating the {kind} failed: {e}")))
}

fn assert_identity(labels: &std::collections::BTreeMap<String, String>, request_id: &str) {
    assert_eq!(
        labels.get("orb.io/managed").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        labels.get("orb.io/request-id").map(String::as_str),
        Some(request_id)
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn seed_full_pod_override_is_created_with_the_operators_fields_and_orbs_identity() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("native-pod").await;
    let template = full_pod_override(ns.name());
    let request_id = request_id();
    let body = render(&template, ProviderApi::Pod, &request_id, 1);
    submit(&cluster.client, ProviderApi::Pod, &body)
        .await
        .expect("the seed's security context passes the audit");

    let name = body["metadata"]["name"].as_str().unwrap();
    let pod = Api::<Pod>::namespaced(cluster.client.clone(), ns.name())
        .get(name)
        .await
        .expect("the pod exists");
    let spec = pod.spec.as_ref().unwrap();
    let init = &spec.init_containers.as_ref().expect("initContainers kept")[0];
    assert_eq!(init.name, "warm-cache");
    assert_eq!(
        init.image.as_deref(),
        Some("registry.example.com/cache-warmer:1")
    );
    assert_eq!(
        init.command.as_deref(),
        Some(&["sh".to_string(), "-c".into(), "/usr/local/bin/warm".into()][..])
    );
    let security = spec
        .security_context
        .as_ref()
        .expect("securityContext kept");
    assert_eq!(security.run_as_user, Some(1000));
    assert_eq!(security.fs_group, Some(2000));
    let spread = &spec
        .topology_spread_constraints
        .as_ref()
        .expect("spread kept")[0];
    assert_eq!(
        (
            spread.max_skew,
            spread.topology_key.as_str(),
            spread.when_unsatisfiable.as_str()
        ),
        (1, "topology.kubernetes.io/zone", "DoNotSchedule")
    );
    // The default template's container and restart policy, under the operator's fields.
    assert_eq!(spec.containers[0].name, "orb");
    assert_eq!(
        spec.containers[0].image.as_deref(),
        Some("registry.example.com/ml-worker:1")
    );
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    // orb's identity.
    let labels = pod.labels();
    assert_identity(labels, &request_id);
    assert_eq!(
        labels.get("orb.io/machine-id").map(String::as_str),
        Some(name)
    );
    assert_eq!(
        labels.get("orb.io/template-id").map(String::as_str),
        Some("ml-worker")
    );
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn seed_partial_deployment_override_is_created_and_its_pods_become_ready() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("native-deploy").await;
    let template = partial_deployment_override(ns.name());
    let request_id = request_id();
    let body = render(&template, ProviderApi::Deployment, &request_id, 2);
    submit(&cluster.client, ProviderApi::Deployment, &body)
        .await
        .expect("the seed Deployment passes the audit");

    let name = body["metadata"]["name"].as_str().unwrap();
    let deployment = Api::<Deployment>::namespaced(cluster.client.clone(), ns.name())
        .get(name)
        .await
        .expect("the deployment exists");
    let spec = &deployment.spec;
    let strategy = spec.strategy.as_ref().expect("strategy kept");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let rolling = strategy.rolling_update.as_ref().unwrap();
    assert_eq!(rolling.max_surge, Some(IntOrString::String("25%".into())));
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));
    // orb's identity: replica count, selector, labels on the object and its pods.
    assert_eq!(spec.replicas, Some(2));
    let selector = spec.selector.match_labels.as_ref().unwrap();
    assert_eq!(
        selector.get("orb.io/request-id").map(String::as_str),
        Some(request_id.as_str())
    );
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

    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    let selector = format!("orb.io/request-id={request_id}");
    let ready = wait_for("2 Ready pods of the seed Deployment", WAIT, || async {
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("list pods");
        let ready: Vec<Pod> = list.items.into_iter().filter(is_ready).collect();
        if ready.len() == 2 {
            Check::Done(ready)
        } else {
            Check::NotYet(format!("{} Ready", ready.len()))
        }
    })
    .await;
    for pod in &ready {
        assert_identity(pod.labels(), &request_id);
        assert_eq!(
            pod.spec.as_ref().unwrap().containers[0].image.as_deref(),
            Some("busybox:1.36")
        );
    }
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn server_dry_run_accepts_the_seed_deployment_without_storing_it() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("native-dry").await;
    let template = partial_deployment_override(ns.name());
    let body = render(&template, ProviderApi::Deployment, &request_id(), 3);
    let verdict = server_dry_run(&cluster.client, &body)
        .await
        .expect("the apiserver answers");
    let DryRunVerdict::Accepted { object } = verdict else {
        panic!("the seed Deployment was rejected: {verdict:?}");
    };
    // The apiserver's view, with its defaults, and the operator's strategy in it.
    assert_eq!(
        object["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
        "25%"
    );
    assert_eq!(object["spec"]["replicas"], 3);
    let name = body["metadata"]["name"].as_str().unwrap();
    let stored = Api::<Deployment>::namespaced(cluster.client.clone(), ns.name())
        .get_opt(name)
        .await
        .expect("get");
    assert!(stored.is_none(), "a dry run must not store the object");
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn server_dry_run_reports_the_apiservers_rejection_of_an_invalid_field() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("native-dry-bad").await;
    let template = seed_template(json!({
        "template_id": "bad-dns",
        "provider_api": "Pod",
        "image_id": "busybox:1.36",
        "namespace": ns.name(),
        "native_spec": {"spec": {"dnsPolicy": "Sometimes"}}
    }));
    let body = render(&template, ProviderApi::Pod, &request_id(), 1);
    let verdict = server_dry_run(&cluster.client, &body)
        .await
        .expect("the apiserver answers");
    let DryRunVerdict::Rejected {
        code,
        reason,
        message,
    } = verdict
    else {
        panic!("an invalid restartPolicy was accepted: {verdict:?}");
    };
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(
        message.contains("spec.dnsPolicy") && message.contains("Sometimes"),
        "{message}"
    );
    let pods = Api::<Pod>::namespaced(cluster.client.clone(), ns.name())
        .list(&ListParams::default())
        .await
        .expect("list");
    assert!(pods.items.is_empty());
}

/// One high-risk setting as a pod spec fragment (lists are replaced by the native merge, so
/// containers carry their name and image).
fn high_risk_patches() -> Vec<(HighRiskField, &'static str, Value)> {
    let container = |security: Value| json!({"containers": [{"name": "orb", "image": "{{ image }}", "securityContext": security}]});
    vec![
        (
            HighRiskField::HostNetwork,
            "hostNetwork",
            json!({"hostNetwork": true}),
        ),
        (HighRiskField::HostPid, "hostPID", json!({"hostPID": true})),
        (HighRiskField::HostIpc, "hostIPC", json!({"hostIPC": true})),
        (
            HighRiskField::HostPathVolume,
            "volumes[0].hostPath",
            json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
        ),
        (
            HighRiskField::HostPort,
            "containers[0].ports[0].hostPort",
            json!({"containers": [{"name": "orb", "image": "{{ image }}",
                                   "ports": [{"containerPort": 80, "hostPort": 8080}]}]}),
        ),
        (
            HighRiskField::Privileged,
            "containers[0].securityContext.privileged",
            container(json!({"privileged": true})),
        ),
        (
            HighRiskField::AllowPrivilegeEscalation,
            "containers[0].securityContext.allowPrivilegeEscalation",
            container(json!({"allowPrivilegeEscalation": true})),
        ),
        (
            HighRiskField::RunAsRoot,
            "containers[0].securityContext.runAsUser",
            container(json!({"runAsUser": 0})),
        ),
        (
            HighRiskField::RunAsRoot,
            "securityContext.runAsUser",
            json!({"securityContext": {"runAsUser": 0}}),
        ),
        (
            HighRiskField::AddedCapability,
            "containers[0].securityContext.capabilities.add[0]",
            container(json!({"capabilities": {"add": ["SYS_ADMIN"]}})),
        ),
        (
            HighRiskField::ProcMountUnmasked,
            "containers[0].securityContext.procMount",
            container(json!({"procMount": "Unmasked"})),
        ),
        (
            HighRiskField::SeccompUnconfined,
            "securityContext.seccompProfile.type",
            json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
        ),
        (
            HighRiskField::AppArmorUnconfined,
            "containers[0].securityContext.appArmorProfile.type",
            container(json!({"appArmorProfile": {"type": "Unconfined"}})),
        ),
    ]
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn every_high_risk_field_of_every_kind_is_refused_and_nothing_is_created() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("native-audit").await;
    let patches = high_risk_patches();
    // Every field of the audit's list is exercised here.
    for field in HighRiskField::ALL {
        assert!(
            patches.iter().any(|(f, ..)| *f == field),
            "{field:?} has no case"
        );
    }
    for kind in KINDS {
        let pod_spec_path = if kind == ProviderApi::Pod {
            "spec"
        } else {
            "spec.template.spec"
        };
        for (field, path, patch) in &patches {
            let native_spec = if kind == ProviderApi::Pod {
                json!({"spec": patch})
            } else {
                json!({"spec": {"template": {"spec": patch}}})
            };
            let template = seed_template(json!({
                "template_id": "risky",
                "provider_api": kind.as_str(),
                "image_id": "busybox:1.36",
                "namespace": ns.name(),
                "native_spec": native_spec,
            }));
            let body = render(&template, kind, &request_id(), 2);
            let rejection = submit(&cluster.client, kind, &body)
                .await
                .expect_err(&format!("{kind} with {path} must be refused"));
            let expected_path = format!("{pod_spec_path}.{path}");
            assert!(
                rejection
                    .findings
                    .iter()
                    .any(|f| f.field == *field && f.path == expected_path),
                "{kind}: expected {field:?} at {expected_path}, got {:?}",
                rejection.findings
            );
            assert_eq!(rejection.kind, kind.as_str());
            assert!(
                rejection.to_string().contains(&expected_path),
                "the message names the path: {rejection}"
            );
        }
    }
    let client = &cluster.client;
    let list = ListParams::default();
    let pods = Api::<Pod>::namespaced(client.clone(), ns.name())
        .list(&list)
        .await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns.name())
        .list(&list)
        .await;
    let sets = Api::<StatefulSet>::namespaced(client.clone(), ns.name())
        .list(&list)
        .await;
    let jobs = Api::<Job>::namespaced(client.clone(), ns.name())
        .list(&list)
        .await;
    assert_eq!(
        (
            pods.expect("list pods").items.len(),
            deployments.expect("list deployments").items.len(),
            sets.expect("list statefulsets").items.len(),
            jobs.expect("list jobs").items.len(),
        ),
        (0, 0, 0, 0),
        "nothing may reach the cluster after a rejection"
    );
}
