//! `orb doctor` on the real control plane: everything passes as cluster admin and as the
//! shipped identity (docs/rbac.yaml's Role); that Role without `pods/eviction` is told so; a
//! ServiceAccount bound only to the built-in read-only "view" role is told exactly which verbs
//! it lacks; an apiserver that does not answer is reported as a connectivity failure. Exit 0 / 3.

use std::path::Path;

use assert_cmd::Command;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use kube_fixture::TestCluster;
use serde_json::{Value, json};

fn write_config(root: &Path, kubeconfig: &Path, ns: &str) {
    let config = root.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.json"),
        json!({"providers": [{"name": "kube", "type": "k8s",
                              "config": {"kubeconfig_path": kubeconfig, "namespace": ns}}]})
        .to_string(),
    )
    .unwrap();
}

fn doctor(root: &Path) -> (Option<i32>, Value) {
    let mut cmd = Command::cargo_bin("orb").unwrap();
    for (k, _) in std::env::vars() {
        if k.starts_with("ORB_") || k.starts_with("HF_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .env("ORB_ROOT_DIR", root)
        .env("HOME", root)
        .args(["doctor", "-o", "json"])
        .output()
        .unwrap();
    let reply = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), reply)
}

fn check<'a>(reply: &'a Value, name: &str) -> &'a Value {
    reply["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no check {name:?} in {reply}"))
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn admin_passes_every_check() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("doctor-admin").await;
    let root = tempfile::tempdir().unwrap();
    write_config(root.path(), &cluster.kubeconfig, ns.name());
    let (code, reply) = doctor(root.path());
    assert_eq!(code, Some(0), "{reply}");
    assert_eq!(reply["failed"], 0);
    assert_eq!(check(&reply, "connectivity")["ok"], true);
    assert_eq!(check(&reply, "server version")["ok"], true);
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn the_shipped_role_passes_and_without_eviction_is_told_so() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("doctor-role").await;
    let identity = cluster.broker_identity(&ns).await;
    let root = tempfile::tempdir().unwrap();
    write_config(root.path(), &identity.kubeconfig, ns.name());
    let (code, reply) = doctor(root.path());
    assert_eq!(
        code,
        Some(0),
        "docs/rbac.yaml's Role passes every check: {reply}"
    );

    // The Role as it shipped before the Deployment release's eviction was granted.
    let roles: Api<Role> = Api::namespaced(cluster.client.clone(), ns.name());
    let name = format!("orb-broker-{}", ns.name());
    let mut role = roles.get(&name).await.unwrap();
    role.rules.get_or_insert_default().retain(|r| {
        !r.resources
            .iter()
            .flatten()
            .any(|res| res == "pods/eviction")
    });
    roles
        .replace(&name, &PostParams::default(), &role)
        .await
        .unwrap();
    let (code, reply) = doctor(root.path());
    assert_eq!(code, Some(3), "{reply}");
    let eviction = check(
        &reply,
        &format!("rbac: create core/pods/eviction in {}", ns.name()),
    );
    assert_eq!(eviction["ok"], false, "{eviction}");
    assert_eq!(reply["failed"], 1, "only the eviction is missing: {reply}");
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_read_only_account_is_told_which_verbs_it_lacks() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("doctor-view").await;
    let sas: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), ns.name());
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "reader"}})).unwrap(),
    )
    .await
    .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "reader-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns.name()}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(cluster.client.clone(), ns.name())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    let issued: TokenRequest = sas
        .create_subresource("token", "reader", &PostParams::default(), &request)
        .await
        .unwrap();
    let token = issued.status.and_then(|s| s.token).expect("a token");

    let admin: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&cluster.kubeconfig).unwrap()).unwrap();
    let root = tempfile::tempdir().unwrap();
    let kubeconfig = root.path().join("reader.kubeconfig");
    std::fs::write(
        &kubeconfig,
        json!({"apiVersion": "v1", "kind": "Config",
               "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
               "users": [{"name": "reader", "user": {"token": token}}],
               "contexts": [{"name": "reader", "context": {"cluster": "local", "user": "reader"}}],
               "current-context": "reader"})
        .to_string(),
    )
    .unwrap();
    write_config(root.path(), &kubeconfig, ns.name());

    let (code, reply) = doctor(root.path());
    assert_eq!(code, Some(3), "{reply}");
    let ns = ns.name();
    assert_eq!(
        check(&reply, &format!("rbac: get core/pods in {ns}"))["ok"],
        true
    );
    let create = check(&reply, &format!("rbac: create core/pods in {ns}"));
    assert_eq!(create["ok"], false);
    assert!(
        create["fix"].as_str().unwrap().contains("docs/rbac.yaml"),
        "{create}"
    );
    assert_eq!(
        check(&reply, &format!("rbac: patch apps/deployments in {ns}"))["ok"],
        false
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn an_unreachable_apiserver_is_a_connectivity_failure() {
    let cluster = TestCluster::connect().await;
    let admin: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&cluster.kubeconfig).unwrap()).unwrap();
    let root = tempfile::tempdir().unwrap();
    // Same credentials, but a loopback port nothing listens on.
    let mut cluster_entry = admin["clusters"][0]["cluster"].clone();
    cluster_entry["server"] = json!("https://127.0.0.1:1");
    let kubeconfig = root.path().join("nowhere.kubeconfig");
    let mut doc = admin.clone();
    doc["clusters"][0]["cluster"] = cluster_entry;
    std::fs::write(&kubeconfig, doc.to_string()).unwrap();
    write_config(root.path(), &kubeconfig, "default");
    let (code, reply) = doctor(root.path());
    assert_eq!(code, Some(3), "{reply}");
    let c = check(&reply, "connectivity");
    assert_eq!(c["ok"], false);
    assert!(
        c["fix"].as_str().unwrap().contains("kubeconfig_path"),
        "{c}"
    );
}
