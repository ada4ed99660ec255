//! The native-spec hatch through the `orb` binary on the real control plane: it fires only when
//! the provider's `native_spec_enabled` and config.json's `native_spec.enabled` are both on;
//! with either off, the typed builder runs and the template's native_spec is ignored.

use std::path::Path;

use assert_cmd::Command;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube_fixture::TestCluster;
use serde_json::{Value, json};

fn write_config(root: &Path, kubeconfig: &Path, ns: &str, provider_on: bool, app_on: bool) {
    let config = root.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.json"),
        json!({
            "providers": [{"name": "kube", "type": "k8s", "config": {
                "kubeconfig_path": kubeconfig, "namespace": ns,
                "native_spec_enabled": provider_on}}],
            "native_spec": {"enabled": app_on}
        })
        .to_string(),
    )
    .unwrap();
    // The operator's native spec adds an annotation and an init container; the typed builder
    // would produce neither.
    std::fs::write(
        config.join("kube_templates.json"),
        json!({"templates": [{
            "templateId": "native", "maxNumber": 5, "imageId": "busybox:1.36",
            "providerApi": "Pod",
            "nativeSpec": {
                "metadata": {"annotations": {"example.com/rendered-for": "{{ request_id }}"}},
                "spec": {
                    "initContainers": [{"name": "warm-up", "image": "busybox:1.36", "command": ["true"]}],
                    "containers": [{"name": "worker", "image": "{{ image }}", "command": ["sleep", "3600"]}]
                }
            }
        }]})
        .to_string(),
    )
    .unwrap();
}

fn orb(root: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::cargo_bin("orb").unwrap();
    for (k, _) in std::env::vars() {
        if k.starts_with("ORB_") || k.starts_with("HF_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("ORB_ROOT_DIR", root).env("HOME", root);
    cmd.args(args).output().unwrap()
}

async fn acquire_one(provider_on: bool, app_on: bool) -> (Pod, String) {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("native-cli").await;
    let identity = cluster.broker_identity(&ns).await;
    let root = tempfile::tempdir().unwrap();
    write_config(
        root.path(),
        &identity.kubeconfig,
        ns.name(),
        provider_on,
        app_on,
    );
    let out = orb(
        root.path(),
        &[
            "machines",
            "request",
            "native",
            "1",
            "--wait",
            "--timeout",
            "60",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "request failed: {stderr}");
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    let request_id = reply["request"]["request_id"].as_str().unwrap().to_string();
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    let mut list = pods
        .list(&ListParams::default().labels(&format!("orb.io/request-id={request_id}")))
        .await
        .unwrap()
        .items;
    assert_eq!(list.len(), 1, "one pod for the request");
    (list.remove(0), stderr)
}

fn init_container_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .map(|cs| cs.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn both_switches_on_sends_the_operators_body_with_orbs_identity() {
    let (pod, _) = acquire_one(true, true).await;
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let request_id = labels
        .get("orb.io/request-id")
        .expect("orb's request label");
    assert_eq!(
        annotations.get("example.com/rendered-for"),
        Some(request_id)
    );
    assert_eq!(init_container_names(&pod), vec!["warm-up".to_string()]);
    assert_eq!(
        labels.get("orb.io/managed").map(String::as_str),
        Some("true")
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn application_switch_off_runs_the_typed_builder() {
    let (pod, _) = acquire_one(true, false).await;
    assert!(
        init_container_names(&pod).is_empty(),
        "native fields must not be sent"
    );
    let annotations = pod.metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key("example.com/rendered-for"));
    assert!(
        pod.metadata
            .labels
            .unwrap_or_default()
            .contains_key("orb.io/request-id"),
        "the typed pod still carries orb's identity"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn provider_switch_off_runs_the_typed_builder() {
    let (pod, _) = acquire_one(false, true).await;
    assert!(
        init_container_names(&pod).is_empty(),
        "native fields must not be sent"
    );
}
