//! The pdb-operator image, run on this machine as the Helm chart's pod would run it
//! (kube_fixture::pod_template: the installed chart's Deployment, a TokenRequest token of its
//! ServiceAccount at /var/run/secrets/kubernetes.io/serviceaccount, the in-cluster variables,
//! POD_NAME/POD_NAMESPACE from the downward API, a read-only root, the pod's user): with no
//! kubeconfig it finds the service account itself, takes the leader Lease, writes a
//! Deployment's PDB and, for a PDBPolicy, a Workload gang's PDB (Workloads, PodGroups and the
//! pod watch) and the policy's status.
//! Every request RBAC refused its ServiceAccount fails the test, by verb and resource, from
//! the apiserver's audit log.
//!
//! Needs root (the pod sandbox), `ORB_IMAGES_DIR` (scripts/build-images.sh) and `ORB_HELM`.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use kube_fixture::audit::{assert_nothing_refused, denials, refusal_report};
use kube_fixture::helm::Release;
use kube_fixture::pod_sandbox::Images;
use kube_fixture::pod_template::pod_from_template;
use kube_fixture::{Check, TestCluster, wait_for};
use pdb_operator::crd::PDBPolicy;
use serde_json::json;

const CHART_CRDS: &str = include_str!("../../deploy/helm/pdb-operator/crds/crds.yaml");
const WAIT: Duration = Duration::from_secs(60);
const GRANTED_BY: &str =
    "the chart's RBAC (crates/pdb-operator/deploy/helm/pdb-operator/templates)";

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/helm/pdb-operator")
}

/// GET `path` on 127.0.0.1:`port`: (status, body), or None when nothing listens yet.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    let code = reply.split_whitespace().nth(1)?.parse().ok()?;
    let body = reply.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

/// The operator's process; SIGKILLed when dropped if the test did not stop it.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane, helm and the images; ./scripts/test.sh runs it (or cp up, set ORB_HELM and ORB_IMAGES_DIR, then cargo test -- --include-ignored)"]
async fn the_image_runs_the_operator_as_the_charts_service_account() {
    let images = Images::from_env();
    let cluster = TestCluster::connect().await;
    // CRDs are shared by every test: installed once from the chart's crds/ and never deleted
    // (helm skips them when they exist).
    let crds: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(CHART_CRDS).expect("chart CRDs parse");
    for crd in &crds {
        install_crd(&cluster.client, crd).await;
    }
    let ns = cluster.namespace("pdbop-ic").await;
    let n = ns.name().to_string();
    let fullname = format!("{n}-op");
    let (health, metrics) = (kube_fixture::free_port(), kube_fixture::free_port());
    let _release = Release::install(
        &cluster.kubeconfig,
        &chart(),
        "op",
        &n,
        &json!({"fullnameOverride": fullname, "replicas": 1, "watchNamespace": n,
                "healthPort": health, "metricsPort": metrics}),
    );
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), &n);
    let deployment = deployments.get(&fullname).await.unwrap();
    let template = serde_json::to_value(deployment.spec.template).unwrap();
    let pod_name = format!("{fullname}-0");
    let pod = pod_from_template(&cluster, &n, &pod_name, &template, &images).await;
    assert_eq!(pod.service_account, (n.clone(), fullname.clone()));
    let mut operator = Running(
        pod.command()
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the pod sandbox starts"),
    );
    let stderr = operator.0.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::BufReader::new(stderr).read_to_string(&mut text);
        text
    });
    wait_for("the operator's /readyz", WAIT, || async {
        match get(health, "/readyz") {
            Some((200, _)) => Check::Done(()),
            other => Check::NotYet(format!("{other:?}")),
        }
    })
    .await;

    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), &n);
    wait_for("the pod to hold the Lease", WAIT, || async {
        let holder = leases
            .get_opt(pdb_operator::runtime::LEASE_NAME)
            .await
            .unwrap()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity);
        match holder {
            Some(h) if h == pod_name => Check::Done(()),
            other => Check::NotYet(format!("holder {other:?}")),
        }
    })
    .await;

    let web: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {"pdboperator.io/availability-class": "standard"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &web)
        .await
        .unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), &n);
    wait_pdb(&pdbs, "web-pdb", "minAvailable 50%", |p| {
        min_available(p) == Some(json!("50%"))
    })
    .await;
    wait_event(&cluster.client, &n, "web", "PDBCreated").await;

    // A policy selecting a Workload gang: the operator reads Workloads and PodGroups, starts
    // its pod watch for the gang's pods, writes the gang's PDB and the policy's status.
    let pp = PostParams::default();
    let policy: PDBPolicy = serde_json::from_value(json!({
        "apiVersion": "availability.pdboperator.io/v1alpha1", "kind": "PDBPolicy",
        "metadata": {"name": "gangs-standard"},
        "spec": {"availabilityClass": "standard", "workloadSelector": {"matchLabels": {"tier": "x"}}}
    }))
    .unwrap();
    let policies: Api<PDBPolicy> = Api::namespaced(cluster.client.clone(), &n);
    policies.create(&pp, &policy).await.unwrap();
    let workload: Workload = serde_json::from_value(json!({
        "metadata": {"name": "gang", "labels": {"tier": "x"}},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}},
                                        "disruptionMode": {"all": {}}}]}
    }))
    .unwrap();
    Api::<Workload>::namespaced(cluster.client.clone(), &n)
        .create(&pp, &workload)
        .await
        .unwrap();
    for g in 0..2 {
        let group: PodGroup = serde_json::from_value(json!({
            "metadata": {"name": format!("gang-{g}")},
            "spec": {"workloadRef": {"workloadName": "gang", "templateName": "workers"},
                     "schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}}}
        }))
        .unwrap();
        Api::<PodGroup>::namespaced(cluster.client.clone(), &n)
            .create(&pp, &group)
            .await
            .unwrap();
        for i in 0..2 {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("gang-{g}-{i}"), "labels": {"job": "gang"}},
                "spec": {"schedulingGroup": {"podGroupName": format!("gang-{g}")},
                         "containers": [{"name": "c", "image": "busybox:1.36"}]}
            }))
            .unwrap();
            Api::<Pod>::namespaced(cluster.client.clone(), &n)
                .create(&pp, &pod)
                .await
                .unwrap();
        }
    }
    // 2 groups x 2 pods, standard class, all mode: ceil(50% x 2) = 1 group -> 2 pods. A
    // permission the chart lacks fails the wait at once, by verb and resource.
    wait_for("the gang's PDB and the policy's status", WAIT, || async {
        let refused = denials(&cluster, &n, &fullname).await;
        if let Some(report) = refusal_report(&refused, &n, &fullname, GRANTED_BY) {
            panic!("{report}");
        }
        let pdb = pdbs.get_opt("gang-pdb").await.unwrap();
        let status = policies
            .get("gangs-standard")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        match pdb {
            Some(p) if min_available(&p) == Some(json!(2)) && status.workload_count == 1 => {
                Check::Done(())
            }
            other => Check::NotYet(format!(
                "gang-pdb {:?}, policy status {status:?}",
                other.map(|p| p.spec)
            )),
        }
    })
    .await;

    let (code, text) = get(metrics, "/metrics").expect("the metrics listener answers");
    assert_eq!(code, 200);
    assert!(
        !text.contains("error_type=\"forbidden\""),
        "a reconcile was forbidden with the chart's RBAC:\n{text}"
    );
    assert_nothing_refused(&cluster, &n, &fullname, GRANTED_BY).await;

    // SIGTERM, as the kubelet stops a pod: a clean exit.
    let pid = operator.0.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = operator.0.wait().unwrap();
    let log = log.join().unwrap();
    assert!(status.success(), "pdb-operator exited {status}:\n{log}");
}
