//! The operator's shipped identity for a test that runs the real binary: ServiceAccount
//! `pdb-operator` of the test namespace bound to the ClusterRole and the leader-election Role of
//! `deploy/rbac.yaml`, and a kubeconfig carrying its token. The cluster-scoped objects are owned
//! by the namespace, so they go when it goes, pass or panic.

use std::path::PathBuf;

use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::PostParams;
use kube::{Api, Client};
use kube_fixture::{Check, TestCluster, wait_for};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::WAIT;

const SHIPPED_RBAC: &str = include_str!("../../deploy/rbac.yaml");
const SERVICE_ACCOUNT: &str = "pdb-operator";

fn shipped_rules(kind: &str) -> Value {
    let docs: Vec<Value> = serde_saphyr::from_multiple(SHIPPED_RBAC).expect("rbac.yaml parses");
    docs.into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("a {kind} in deploy/rbac.yaml"))["rules"]
        .clone()
}

async fn create<K>(api: &Api<K>, object: Value)
where
    K: kube::Resource + Clone + std::fmt::Debug + DeserializeOwned + Serialize,
{
    let typed: K = serde_json::from_value(object.clone()).unwrap();
    api.create(&PostParams::default(), &typed)
        .await
        .unwrap_or_else(|e| panic!("creating {object}: {e}"));
}

/// Waits until the authorizer grants the ServiceAccount the first verb of `rules` (a new
/// binding reaches the RBAC authorizer through its informer, behind the test's first call).
async fn granted(admin: &Client, ns: &str, namespace: Option<&str>, rules: &Value) {
    let rule = &rules[0];
    let first = |key: &str| rule[key][0].as_str().unwrap_or_default().to_string();
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {
        "user": format!("system:serviceaccount:{ns}:{SERVICE_ACCOUNT}"),
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"), "system:authenticated"],
        "resourceAttributes": {"group": first("apiGroups"), "resource": first("resources"),
            "verb": first("verbs"), "namespace": namespace},
    }}))
    .unwrap();
    let reviews: Api<SubjectAccessReview> = Api::all(admin.clone());
    wait_for(&format!("the authorizer to grant {rule}"), WAIT, || {
        let (reviews, review) = (reviews.clone(), review.clone());
        async move {
            match reviews.create(&PostParams::default(), &review).await {
                Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => Check::Done(()),
                other => Check::NotYet(format!("{other:?}")),
            }
        }
    })
    .await;
}

/// Installs the shipped identity in `ns` (its Lease Role there too) and returns the path of a
/// kubeconfig for it, under the system temporary directory.
pub async fn operator_identity(cluster: &TestCluster, ns: &str) -> PathBuf {
    let c = &cluster.client;
    let sas: Api<ServiceAccount> = Api::namespaced(c.clone(), ns);
    create(&sas, json!({"metadata": {"name": SERVICE_ACCOUNT}})).await;
    let uid = Api::<Namespace>::all(c.clone())
        .get(ns)
        .await
        .expect("the test namespace")
        .metadata
        .uid;
    let name = format!("{SERVICE_ACCOUNT}-{ns}");
    let meta = json!({"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace",
        "name": ns, "uid": uid}]});
    let binding = |kind: &str| {
        json!({"metadata": meta, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
               "kind": kind, "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": ns}]})
    };
    let cluster_rules = shipped_rules("ClusterRole");
    let lease_rules = shipped_rules("Role");
    create(
        &Api::<ClusterRole>::all(c.clone()),
        json!({"metadata": meta, "rules": cluster_rules}),
    )
    .await;
    create(
        &Api::<ClusterRoleBinding>::all(c.clone()),
        binding("ClusterRole"),
    )
    .await;
    create(
        &Api::<Role>::namespaced(c.clone(), ns),
        json!({"metadata": {"name": name}, "rules": lease_rules}),
    )
    .await;
    let mut role_binding = binding("Role");
    role_binding["metadata"] = json!({"name": name});
    create(&Api::<RoleBinding>::namespaced(c.clone(), ns), role_binding).await;
    granted(c, ns, None, &cluster_rules).await;
    granted(c, ns, Some(ns), &lease_rules).await;

    let request = json!({"spec": {"expirationSeconds": 4 * 3600}});
    let request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(request).unwrap();
    let token = sas
        .create_token_request(SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await
        .expect("a token for the operator's ServiceAccount")
        .status
        .expect("token status")
        .token;
    let admin: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&cluster.kubeconfig).unwrap())
            .expect("the admin kubeconfig parses");
    let doc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": SERVICE_ACCOUNT,
                      "context": {"cluster": "local", "user": SERVICE_ACCOUNT, "namespace": ns}}],
        "current-context": SERVICE_ACCOUNT,
    });
    let path = std::env::temp_dir().join(format!("{ns}-pdb-operator.kubeconfig"));
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}
