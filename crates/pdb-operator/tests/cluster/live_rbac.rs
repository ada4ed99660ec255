//! The shipped least-privilege RBAC is enough: the rules of `deploy/rbac.yaml` are installed
//! (under names unique to this test), and the operator runs with that ServiceAccount's token —
//! leader election, a Deployment PDB, a Workload gang PDB and policy status all work, and no
//! reconcile fails as forbidden.

use crate::common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use kube::api::{DeleteParams, PostParams};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use kube_fixture::{Check, TestCluster, wait_for};
use pdb_operator::crd::PDBPolicy;
use serde_json::{Value, json};

const RBAC: &str = include_str!("../../deploy/rbac.yaml");

fn shipped(kind: &str, name: &str) -> Value {
    let docs: Vec<Value> = serde_saphyr::from_multiple(RBAC).expect("rbac.yaml parses");
    docs.into_iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name} in deploy/rbac.yaml"))
}

/// Removes the test's cluster-scoped RBAC objects even when the test fails. The delete runs on
/// a runtime of its own with a fresh client (the test's client is bound to the test runtime,
/// which is blocked while this runs).
struct ClusterRbac {
    kubeconfig: std::path::PathBuf,
    name: String,
}

impl Drop for ClusterRbac {
    fn drop(&mut self) {
        let (kubeconfig, name) = (self.kubeconfig.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let Ok(rt) = rt else { return };
            rt.block_on(async move {
                let Ok(client) = kube_fixture::client_from(&kubeconfig).await else {
                    return;
                };
                let dp = DeleteParams::default();
                let _ = Api::<ClusterRoleBinding>::all(client.clone())
                    .delete(&name, &dp)
                    .await;
                let _ = Api::<ClusterRole>::all(client).delete(&name, &dp).await;
            });
        })
        .join();
    }
}

async fn service_account_client(cluster: &TestCluster, ns: &str, sa: &str) -> Client {
    let sas: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), ns);
    let tr: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let token = sas
        .create_token_request(sa, &PostParams::default(), &tr)
        .await
        .expect("token for the operator's ServiceAccount")
        .status
        .expect("token status")
        .token
        .expect("token issued");
    let kc = Kubeconfig::read_from(&cluster.kubeconfig).unwrap();
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info = AuthInfo {
        token: Some(token.into()),
        ..AuthInfo::default()
    };
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn operator_runs_with_the_shipped_rbac_and_nothing_is_forbidden() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-rbac").await;
    let n = ns.name().to_string();
    let c = cluster.client.clone();
    let pp = PostParams::default();

    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "pdb-operator"}})).unwrap();
    Api::<ServiceAccount>::namespaced(c.clone(), &n)
        .create(&pp, &sa)
        .await
        .unwrap();
    let unique = format!("{n}-pdb-operator");
    let _cleanup = ClusterRbac {
        kubeconfig: cluster.kubeconfig.clone(),
        name: unique.clone(),
    };
    let mut role = shipped("ClusterRole", "pdb-operator");
    role["metadata"] = json!({"name": unique});
    let role: ClusterRole = serde_json::from_value(role).unwrap();
    Api::<ClusterRole>::all(c.clone())
        .create(&pp, &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": unique},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": unique},
        "subjects": [{"kind": "ServiceAccount", "name": "pdb-operator", "namespace": n}]
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(c.clone())
        .create(&pp, &binding)
        .await
        .unwrap();
    let mut lease_role = shipped("Role", "pdb-operator-leader-election");
    lease_role["metadata"] = json!({"name": "pdb-operator-leader-election"});
    let lease_role: Role = serde_json::from_value(lease_role).unwrap();
    Api::<Role>::namespaced(c.clone(), &n)
        .create(&pp, &lease_role)
        .await
        .unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "pdb-operator-leader-election"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pdb-operator-leader-election"},
        "subjects": [{"kind": "ServiceAccount", "name": "pdb-operator", "namespace": n}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(c.clone(), &n)
        .create(&pp, &rb)
        .await
        .unwrap();

    let sa_client = service_account_client(&cluster, &n, "pdb-operator").await;
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut opts = pdb_operator::runtime::RunOptions::for_namespace(&n);
    opts.leader_elect = true;
    opts.identity = "rbac-test".into();
    opts.health_addr = Some(addr);
    let op = tokio::spawn(pdb_operator::runtime::run(sa_client, opts));
    let _abort = AbortOnDrop(op);

    // A policy-driven Deployment and the seed's gang.
    let policy: PDBPolicy = serde_json::from_value(json!({
        "apiVersion": "availability.pdboperator.io/v1alpha1", "kind": "PDBPolicy",
        "metadata": {"name": "all-standard"},
        "spec": {"availabilityClass": "standard", "workloadSelector": {"matchLabels": {"tier": "x"}}}
    }))
    .unwrap();
    Api::<PDBPolicy>::namespaced(c.clone(), &n)
        .create(&pp, &policy)
        .await
        .unwrap();
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"tier": "x"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(c.clone(), &n)
        .create(&pp, &d)
        .await
        .unwrap();
    let w: Workload = serde_json::from_value(json!({
        "metadata": {"name": "gang", "labels": {"tier": "x"}},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}},
                                        "disruptionMode": {"all": {}}}]}
    }))
    .unwrap();
    Api::<Workload>::namespaced(c.clone(), &n)
        .create(&pp, &w)
        .await
        .unwrap();
    for g in 0..2 {
        let pg: PodGroup = serde_json::from_value(json!({
            "metadata": {"name": format!("gang-{g}")},
            "spec": {"workloadRef": {"workloadName": "gang", "templateName": "workers"},
                     "schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}}}
        }))
        .unwrap();
        Api::<PodGroup>::namespaced(c.clone(), &n)
            .create(&pp, &pg)
            .await
            .unwrap();
        for i in 0..2 {
            let p: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("gang-{g}-{i}"), "labels": {"job": "gang"}},
                "spec": {"schedulingGroup": {"podGroupName": format!("gang-{g}")},
                         "containers": [{"name": "c", "image": "busybox:1.36"}]}
            }))
            .unwrap();
            Api::<Pod>::namespaced(c.clone(), &n)
                .create(&pp, &p)
                .await
                .unwrap();
        }
    }

    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), &n);
    wait_pdb(&pdbs, "web-pdb", "50%", |p| {
        min_available(p) == Some(json!("50%"))
    })
    .await;
    // 2 groups × 2, standard all mode: ceil(50% × 2) = 1 group → 2.
    wait_pdb(&pdbs, "gang-pdb", "2", |p| {
        min_available(p) == Some(json!(2))
    })
    .await;
    wait_event(&c, &n, "web", "PDBCreated").await;
    let policies: Api<PDBPolicy> = Api::namespaced(c.clone(), &n);
    wait_for(
        "policy status written by the ServiceAccount",
        WAIT,
        || async {
            let st = policies
                .get("all-standard")
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            if st.workload_count == 2 {
                Check::Done(())
            } else {
                Check::NotYet(format!("{st:?}"))
            }
        },
    )
    .await;
    let metrics = tokio::net::TcpStream::connect(addr).await;
    assert!(metrics.is_ok(), "health/metrics listener up");
    let text = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = metrics.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.unwrap();
        buf
    };
    assert!(
        !text.contains("error_type=\"forbidden\""),
        "a reconcile was forbidden:\n{text}"
    );
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
