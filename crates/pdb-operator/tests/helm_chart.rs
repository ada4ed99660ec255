//! The Helm chart (deploy/helm/pdb-operator) ships what deploy/ ships: the generated CRDs, the
//! same least-privilege RBAC, and a Deployment wired to the operator's flags. The live test
//! installs the rendered chart on the local control plane and runs the operator with the chart's
//! ServiceAccount token.
//!
//! Needs the helm binary in `ORB_HELM`:
//! `export ORB_HELM="$(tools/control-plane/build-helm.sh | tail -n1)"`. Plain `cargo test` lists
//! the helm tests as ignored (a newcomer has no helm yet); `./scripts/test.sh` builds helm and runs
//! them, and one that runs without `ORB_HELM` still fails instead of skipping.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::discovery::{Scope, pinned_kind};
use kube::{Api, Client, Config};
use kube_fixture::TestCluster;
use kube_fixture::helm::rule_set;
use pdb_operator::crd::crds_yaml;
use serde_json::{Value, json};

const CHART_CRDS: &str = include_str!("../deploy/helm/pdb-operator/crds/crds.yaml");
const RBAC: &str = include_str!("../deploy/rbac.yaml");
const ADMISSION_POLICY: &str = include_str!("../deploy/admission-policy.yaml");

fn chart_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/helm/pdb-operator")
}

/// Runs helm with `args`; returns (success, stdout, stderr).
fn helm(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(kube_fixture::helm::helm_binary())
        .args(args)
        .output()
        .expect("helm runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `helm template <release> <chart> --namespace <ns> --set <each>`, parsed into objects.
fn render(release: &str, ns: &str, sets: &[&str]) -> Vec<Value> {
    let chart = chart_dir();
    let mut args = vec![
        "template",
        release,
        chart.to_str().unwrap(),
        "--namespace",
        ns,
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    let (ok, stdout, stderr) = helm(&args);
    assert!(ok, "helm template {sets:?} failed:\n{stderr}");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout)
        .unwrap_or_else(|e| panic!("helm template output is not YAML ({e}):\n{stdout}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

fn kinds_and_names(docs: &[Value], kinds: &[&str]) -> BTreeSet<(String, String)> {
    docs.iter()
        .filter(|d| kinds.iter().any(|k| d["kind"] == *k))
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_string(),
                d["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn container_args(docs: &[Value], deployment: &str) -> Vec<String> {
    let d = find(docs, "Deployment", deployment).expect("rendered Deployment");
    d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn chart_crds_are_the_generated_crds() {
    let generated = crds_yaml().expect("CRDs render");
    pretty_assertions::assert_eq!(
        CHART_CRDS,
        generated,
        "deploy/helm/pdb-operator/crds/crds.yaml is stale; regenerate it with \
         `cargo run -p pdb-operator -- crd > crates/pdb-operator/deploy/helm/pdb-operator/crds/crds.yaml`"
    );
}

#[test]
fn chart_version_follows_the_cargo_version() {
    let chart: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap())
            .unwrap();
    assert_eq!(
        chart["version"],
        env!("CARGO_PKG_VERSION"),
        "Chart.yaml version"
    );
    assert_eq!(
        chart["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "Chart.yaml appVersion (the default image tag)"
    );
}

#[test]
#[ignore = "needs helm in ORB_HELM; ./scripts/test.sh runs it (or set ORB_HELM from tools/control-plane/build-helm.sh, then cargo test -- --include-ignored)"]
fn helm_lint_passes() {
    let chart = chart_dir();
    let (ok, stdout, stderr) = helm(&["lint", "--strict", chart.to_str().unwrap()]);
    assert!(ok, "helm lint failed:\n{stdout}\n{stderr}");
}

#[test]
#[ignore = "needs helm in ORB_HELM; ./scripts/test.sh runs it (or set ORB_HELM from tools/control-plane/build-helm.sh, then cargo test -- --include-ignored)"]
fn default_render_grants_exactly_the_rules_of_deploy_rbac() {
    // Release "pdb-operator" in pdb-operator-system gives deploy/'s object names.
    let rendered = render("pdb-operator", "pdb-operator-system", &[]);
    let shipped: Vec<Value> = serde_saphyr::from_multiple(RBAC).expect("rbac.yaml parses");
    let rbac_kinds = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ];
    assert_eq!(
        kinds_and_names(&rendered, &rbac_kinds),
        kinds_and_names(&shipped, &rbac_kinds),
        "the chart's RBAC objects differ from deploy/rbac.yaml's"
    );
    for want in shipped.iter().filter(|d| d["kind"] != "ServiceAccount") {
        let (kind, name) = (want["kind"].as_str().unwrap(), &want["metadata"]["name"]);
        let got = find(&rendered, kind, name.as_str().unwrap()).unwrap();
        if kind.ends_with("Binding") {
            assert_eq!(got["roleRef"], want["roleRef"], "{kind} {name} roleRef");
            assert_eq!(got["subjects"], want["subjects"], "{kind} {name} subjects");
        } else {
            assert_eq!(
                rule_set(&got["rules"]),
                rule_set(&want["rules"]),
                "{kind} {name} rules"
            );
            for (label, value) in want["metadata"]["labels"].as_object().into_iter().flatten() {
                assert_eq!(
                    &got["metadata"]["labels"][label], value,
                    "{kind} {name} label {label}"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs helm in ORB_HELM; ./scripts/test.sh runs it (or set ORB_HELM from tools/control-plane/build-helm.sh, then cargo test -- --include-ignored)"]
fn default_render_runs_the_operator_like_deploy_does() {
    let rendered = render("pdb-operator", "pdb-operator-system", &[]);
    let args = container_args(&rendered, "pdb-operator");
    assert_eq!(
        args,
        [
            "run",
            "--leader-elect=true",
            "--health-probe-bind-address=:8081",
            "--metrics-bind-address=:8443"
        ]
    );
    let d = find(&rendered, "Deployment", "pdb-operator").unwrap();
    assert_eq!(d["spec"]["replicas"], 2);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "pdb-operator");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"],
        format!("localhost/pdb-operator:{}", env!("CARGO_PKG_VERSION")),
        "the image scripts/build-images.sh builds, tagged with the Cargo version"
    );
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "health"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "health"})
    );
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}})
    );
    let svc = find(&rendered, "Service", "pdb-operator-metrics").expect("metrics Service");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
    assert_eq!(svc["spec"]["ports"][0]["port"], 8443);
    assert_eq!(
        svc["spec"]["selector"],
        d["spec"]["selector"]["matchLabels"]
    );
    let pdb = find(&rendered, "PodDisruptionBudget", "pdb-operator").expect("operator's PDB");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
}

#[test]
#[ignore = "needs helm in ORB_HELM; ./scripts/test.sh runs it (or set ORB_HELM from tools/control-plane/build-helm.sh, then cargo test -- --include-ignored)"]
fn default_render_ships_the_admission_policy_of_deploy() {
    let rendered = render("pdb-operator", "pdb-operator-system", &[]);
    let shipped: Vec<Value> =
        serde_saphyr::from_multiple(ADMISSION_POLICY).expect("admission-policy.yaml parses");
    for want in &shipped {
        let (kind, name) = (
            want["kind"].as_str().unwrap(),
            want["metadata"]["name"].as_str().unwrap(),
        );
        let got = find(&rendered, kind, name)
            .unwrap_or_else(|| panic!("the chart renders no {kind} {name}"));
        pretty_assertions::assert_eq!(&got["spec"], &want["spec"], "{kind} {name} spec");
    }
    let off = render(
        "pdb-operator",
        "pdb-operator-system",
        &["admissionPolicy.enabled=false"],
    );
    assert!(
        kinds_and_names(
            &off,
            &[
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding"
            ]
        )
        .is_empty(),
        "admissionPolicy.enabled=false still renders the admission policy"
    );
}

#[test]
#[ignore = "needs helm in ORB_HELM; ./scripts/test.sh runs it (or set ORB_HELM from tools/control-plane/build-helm.sh, then cargo test -- --include-ignored)"]
fn values_override_name_namespace_scope_and_scheduling() {
    let rendered = render(
        "rel",
        "ops",
        &[
            "fullnameOverride=avail",
            "replicas=1",
            "leaderElection.enabled=false",
            "watchNamespace=team-a",
            "image.repository=registry.example/pdb-operator",
            "image.tag=1.2.3",
            "nodeSelector.pool=system",
            "tolerations[0].key=dedicated",
            "tolerations[0].operator=Exists",
        ],
    );
    assert_eq!(
        container_args(&rendered, "avail"),
        [
            "run",
            "--leader-elect=false",
            "--health-probe-bind-address=:8081",
            "--metrics-bind-address=:8443",
            "--watch-namespace=team-a"
        ]
    );
    let pod = &find(&rendered, "Deployment", "avail").unwrap()["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        "registry.example/pdb-operator:1.2.3"
    );
    assert_eq!(pod["nodeSelector"], json!({"pool": "system"}));
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "dedicated", "operator": "Exists"}])
    );
    let binding = find(&rendered, "ClusterRoleBinding", "avail").unwrap();
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "avail", "namespace": "ops"}])
    );
    assert!(
        kinds_and_names(&rendered, &["Role", "RoleBinding", "PodDisruptionBudget"]).is_empty(),
        "no Lease role and no operator PDB for one replica without leader election"
    );
}

#[test]
#[ignore = "needs helm in ORB_HELM; ./scripts/test.sh runs it (or set ORB_HELM from tools/control-plane/build-helm.sh, then cargo test -- --include-ignored)"]
fn several_replicas_without_leader_election_are_refused() {
    let chart = chart_dir();
    let (ok, _, stderr) = helm(&[
        "template",
        "rel",
        chart.to_str().unwrap(),
        "--set",
        "leaderElection.enabled=false",
    ]);
    assert!(!ok, "rendered 2 replicas without leader election");
    assert!(
        stderr.contains("replicas > 1 needs leaderElection.enabled=true"),
        "{stderr}"
    );
}

/// Deletes the cluster-scoped objects the live test applied, even when it fails. Runs on a
/// runtime of its own with a fresh client (the test's runtime is blocked while this runs).
struct ClusterScoped {
    kubeconfig: PathBuf,
    objects: Vec<(ApiResource, String)>,
}

impl Drop for ClusterScoped {
    fn drop(&mut self) {
        let (kubeconfig, objects) = (self.kubeconfig.clone(), std::mem::take(&mut self.objects));
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let Ok(rt) = rt else { return };
            rt.block_on(async move {
                let Ok(client) = kube_fixture::client_from(&kubeconfig).await else {
                    return;
                };
                for (ar, name) in objects {
                    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
                    let _ = api.delete(&name, &DeleteParams::default()).await;
                }
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
        .unwrap_or_else(|e| panic!("token for the chart's ServiceAccount {sa}: {e}"))
        .status
        .and_then(|s| s.token)
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

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn chart_installs_and_its_service_account_runs_the_operator() {
    let cluster = TestCluster::connect().await;
    // CRDs are shared by every test: installed from the chart's crds/ (same content as the
    // generated ones) and never deleted.
    let crds: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(CHART_CRDS).expect("chart CRDs parse");
    for crd in &crds {
        install_crd(&cluster.client, crd).await;
    }
    let ns = cluster.namespace("pdbop-helm").await;
    let n = ns.name().to_string();
    let fullname = format!("{n}-op");
    let watch = format!("watchNamespace={n}");
    let name_override = format!("fullnameOverride={fullname}");
    let rendered = render("helm-test", &n, &[&name_override, &watch]);

    let mut cleanup = ClusterScoped {
        kubeconfig: cluster.kubeconfig.clone(),
        objects: Vec::new(),
    };
    let apply = PatchParams::apply("pdb-operator-helm-test").force();
    for obj in &rendered {
        let (api_version, kind) = (
            obj["apiVersion"].as_str().unwrap(),
            obj["kind"].as_str().unwrap(),
        );
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = pinned_kind(&cluster.client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("the cluster does not serve {api_version} {kind}: {e}"));
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => {
                assert!(
                    name.starts_with(&fullname),
                    "cluster-scoped {kind} {name} does not carry the release's unique name"
                );
                cleanup.objects.push((ar.clone(), name.clone()));
                Api::all_with(cluster.client.clone(), &ar)
            }
            Scope::Namespaced => {
                assert_eq!(obj["metadata"]["namespace"], n.as_str(), "{kind} {name}");
                Api::namespaced_with(cluster.client.clone(), &n, &ar)
            }
        };
        api.patch(&name, &apply, &Patch::Apply(obj))
            .await
            .unwrap_or_else(|e| panic!("server-side apply of {kind} {name}: {e}"));
    }
    assert!(
        !cleanup.objects.is_empty(),
        "the chart rendered no cluster-scoped RBAC"
    );
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), &n);
    assert!(
        deployments.get_opt(&fullname).await.unwrap().is_some(),
        "the chart's Deployment {fullname} was not created"
    );

    let sa_client = service_account_client(&cluster, &n, &fullname).await;
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut opts = pdb_operator::runtime::RunOptions::for_namespace(&n);
    opts.leader_elect = true;
    opts.identity = "helm-chart-test".into();
    opts.health_addr = Some(addr);
    let _op = AbortOnDrop(tokio::spawn(pdb_operator::runtime::run(sa_client, opts)));

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

    let text = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .expect("health/metrics listener up");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.unwrap();
        buf
    };
    assert!(
        !text.contains("error_type=\"forbidden\""),
        "a reconcile was forbidden with the chart's RBAC:\n{text}"
    );
}
