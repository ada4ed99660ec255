//! Smoke tests that prove the local control plane is the real thing: each one depends on a
//! behaviour of an upstream controller or admission path that a hand-written fake would lack.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use kube::api::{EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_fixture::{Check, TestCluster, wait_for};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

fn pod_template(app: &str) -> serde_json::Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "worker", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}
    })
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Pod names matching `app=<app>` that are not being deleted, with their readiness.
async fn live_pods(pods: &Api<Pod>, app: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

async fn wait_ready_pods(pods: &Api<Pod>, app: &str, n: usize) -> Vec<Pod> {
    wait_for(&format!("{n} Ready pods with app={app}"), WAIT, || async {
        let live = live_pods(pods, app).await;
        let ready = live.iter().filter(|p| is_ready(p)).count();
        if live.len() == n && ready == n {
            Check::Done(live)
        } else {
            Check::NotYet(format!("{} live pods, {ready} Ready", live.len()))
        }
    })
    .await
}

async fn create_deployment(api: &Api<Deployment>, name: &str, replicas: i32) {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": pod_template(name)}
    }))
    .unwrap();
    api.create(&PostParams::default(), &d)
        .await
        .expect("create deployment");
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn deployment_of_three_reaches_three_ready_pods() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("smoke-deploy").await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    create_deployment(&deployments, "web", 3).await;

    let ready = wait_ready_pods(&pods, "web", 3).await;
    assert_eq!(ready.len(), 3);
    for p in &ready {
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
        assert!(
            ip.is_some(),
            "pod {} is Ready but has no pod IP",
            p.name_any()
        );
        assert!(
            p.spec.as_ref().and_then(|s| s.node_name.clone()).is_some(),
            "pod not bound"
        );
    }
    wait_for("Deployment status readyReplicas=3", WAIT, || async {
        let d = deployments.get("web").await.expect("get deployment");
        let r = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
        if r == 3 {
            Check::Done(())
        } else {
            Check::NotYet(format!("readyReplicas={r}"))
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn scale_down_removes_exactly_the_pod_with_lowest_deletion_cost() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("smoke-cost").await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    create_deployment(&deployments, "cost", 3).await;
    let before = wait_ready_pods(&pods, "cost", 3).await;

    // Pick the middle pod by name so the choice is not the ReplicaSet's own default pick
    // (which would prefer e.g. the youngest pod).
    let mut names: Vec<String> = before.iter().map(|p| p.name_any()).collect();
    names.sort();
    let victim = names[1].clone();
    pods.patch(
        &victim,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-9999"}}})),
    )
    .await
    .expect("annotate victim");
    deployments
        .patch(
            "cost",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scale to 2");

    let after = wait_ready_pods(&pods, "cost", 2).await;
    let mut remaining: Vec<String> = after.iter().map(|p| p.name_any()).collect();
    remaining.sort();
    let mut expected: Vec<String> = names.iter().filter(|n| **n != victim).cloned().collect();
    expected.sort();
    assert_eq!(
        remaining, expected,
        "the annotated pod {victim} should be the one removed"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn statefulset_scale_down_removes_the_highest_ordinal() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("smoke-sts").await;
    let sets: Api<StatefulSet> = Api::namespaced(cluster.client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 3, "serviceName": "db", "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": "db"}}, "template": pod_template("db")}
    }))
    .unwrap();
    sets.create(&PostParams::default(), &sts)
        .await
        .expect("create statefulset");
    wait_ready_pods(&pods, "db", 3).await;

    sets.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .expect("scale to 2");
    let after = wait_ready_pods(&pods, "db", 2).await;
    let mut names: Vec<String> = after.iter().map(|p| p.name_any()).collect();
    names.sort();
    assert_eq!(names, vec!["db-0".to_string(), "db-1".to_string()]);
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn job_with_two_completions_reaches_complete() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("smoke-job").await;
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), ns.name());
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "batch"},
        "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0,
                 "template": {"metadata": {"labels": {"app": "batch"}},
                              "spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "w", "image": "busybox:1.36", "command": ["true"]}]}}}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create job");

    wait_for(
        "Job condition Complete=True with 2 succeeded",
        WAIT,
        || async {
            let j = jobs.get("batch").await.expect("get job");
            let st = j.status.unwrap_or_default();
            let complete = st
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True");
            let ok = st.succeeded.unwrap_or(0);
            if complete && ok == 2 {
                Check::Done(())
            } else {
                Check::NotYet(format!("succeeded={ok}, complete={complete}"))
            }
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn workload_api_is_served_and_accepts_a_workload_and_a_podgroup() {
    let cluster = TestCluster::connect().await;
    let resources = cluster
        .client
        .list_api_group_resources("scheduling.k8s.io/v1beta1")
        .await
        .expect("discovery of scheduling.k8s.io/v1beta1");
    let names: Vec<&str> = resources
        .resources
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert!(names.contains(&"workloads"), "served resources: {names:?}");
    assert!(names.contains(&"podgroups"), "served resources: {names:?}");

    let ns = cluster.namespace("smoke-gang").await;
    let workloads: Api<Workload> = Api::namespaced(cluster.client.clone(), ns.name());
    let groups: Api<PodGroup> = Api::namespaced(cluster.client.clone(), ns.name());
    let w: Workload = serde_json::from_value(json!({
        "metadata": {"name": "trainer"},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}},
                                        "disruptionMode": {"all": {}}}]}
    }))
    .unwrap();
    workloads
        .create(&PostParams::default(), &w)
        .await
        .expect("create Workload");
    let g: PodGroup = serde_json::from_value(json!({
        "metadata": {"name": "trainer-workers-0"},
        "spec": {"workloadRef": {"workloadName": "trainer", "templateName": "workers"},
                 "schedulingPolicy": {"gang": {"minCount": 2}}}
    }))
    .unwrap();
    let created = groups
        .create(&PostParams::default(), &g)
        .await
        .expect("create PodGroup");
    let back = groups
        .get("trainer-workers-0")
        .await
        .expect("read PodGroup back");
    assert_eq!(
        back.spec
            .workload_ref
            .as_ref()
            .map(|r| r.workload_name.as_str()),
        Some("trainer")
    );
    // A real 1.37 apiserver defaults disruptionMode and stamps the protection finalizer.
    assert!(
        back.spec.disruption_mode.is_some(),
        "disruptionMode was not defaulted: {:?}",
        back.spec
    );
    assert!(created.metadata.uid.is_some());
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn pdb_refuses_an_eviction_that_would_break_min_available() {
    let cluster = TestCluster::connect().await;
    let ns = cluster.namespace("smoke-pdb").await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), ns.name());
    create_deployment(&deployments, "guarded", 2).await;
    let ready = wait_ready_pods(&pods, "guarded", 2).await;

    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("create pdb");
    // The disruption controller must have observed the pods before the budget is enforced.
    wait_for(
        "PDB status currentHealthy=2, disruptionsAllowed=0",
        WAIT,
        || async {
            let p = pdbs.get("guarded").await.expect("get pdb");
            let st = p.status.unwrap_or_default();
            let (healthy, allowed) = (
                st.current_healthy.unwrap_or(0),
                st.disruptions_allowed.unwrap_or(-1),
            );
            if healthy == 2 && allowed == 0 && st.observed_generation.is_some() {
                Check::Done(())
            } else {
                Check::NotYet(format!(
                    "currentHealthy={healthy}, disruptionsAllowed={allowed}"
                ))
            }
        },
    )
    .await;

    let victim = ready[0].name_any();
    let err = pods
        .evict(&victim, &EvictParams::default())
        .await
        .expect_err("eviction must be refused while the PDB allows no disruption");
    match err {
        kube::Error::Api(status) => assert_eq!(status.code, 429, "unexpected refusal: {status:?}"),
        other => panic!("expected HTTP 429 from the eviction API, got {other}"),
    }
    let still: BTreeMap<String, bool> = live_pods(&pods, "guarded")
        .await
        .iter()
        .map(|p| (p.name_any(), is_ready(p)))
        .collect();
    assert!(
        still.contains_key(&victim),
        "the refused eviction removed {victim} anyway"
    );
}
