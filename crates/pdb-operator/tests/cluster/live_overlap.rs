//! The operator against the real local control plane: at most one PDB selects any pod (issue
//! #52). Two PDBs over one pod make the eviction API answer 500 to every eviction of it, so
//! `kubectl drain` aborts. A user's PDB that appears over pods the operator protects makes the
//! operator delete its own at once and take over again when the user's goes; two of the
//! operator's controllers over the same pods end with one PDB.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kube_fixture::{Check, TestCluster, wait_for};
use pdb_operator::crd::PDBPolicy;
use pdb_operator::pdb::pdb_selects;
use serde_json::{Value, json};

/// "Within a few seconds": the operator yields on the PDB watch event, not on a resync.
const YIELD_WITHIN: Duration = Duration::from_secs(10);

/// For each live pod matching `selector`, the PDBs of the namespace that select it.
async fn pdbs_per_pod(c: &Client, ns: &str, selector: &str) -> BTreeMap<String, Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(c.clone(), ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), ns);
    let all = pdbs.list(&ListParams::default()).await.unwrap().items;
    pods.list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let over: Vec<String> = all
                .iter()
                .filter(|b| pdb_selects(b, p.metadata.labels.as_ref().unwrap()))
                .map(|b| b.name_any())
                .collect();
            (p.name_any(), over)
        })
        .collect()
}

/// Waits until every pod matching `selector` is selected by exactly the PDB `name` (within
/// [`YIELD_WITHIN`]).
async fn wait_only_pdb(c: &Client, ns: &str, selector: &str, name: &str) {
    wait_for(
        &format!("only {name} selects the pods {selector}"),
        YIELD_WITHIN,
        || async {
            let seen = pdbs_per_pod(c, ns, selector).await;
            if !seen.is_empty() && seen.values().all(|over| over == &[name.to_string()]) {
                Check::Done(())
            } else {
                Check::NotYet(format!("{seen:?}"))
            }
        },
    )
    .await;
}

/// Evicts one pod matching `selector`: allowed (200) or refused by the budget (429), never
/// the 500 of a pod under two PDBs.
async fn evict_one_not_500(c: &Client, ns: &str, selector: &str) {
    let pods: Api<Pod> = Api::namespaced(c.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap();
    let pod = list.items.first().expect("a pod to evict").name_any();
    match evict(&pods, &pod).await {
        Ok(()) => {}
        Err((429, _)) => {}
        Err((code, message)) => panic!("evicting {pod}: HTTP {code}: {message}"),
    }
}

/// A user's PDB over pods labelled `app=<app>`, not managed by the operator.
async fn create_user_pdb(c: &Client, ns: &str, name: &str, app: &str) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), ns);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
}

/// Waits for the policy's `PDBConflict` condition with `status`; returns its message.
async fn wait_policy_conflict(c: &Client, ns: &str, policy: &str, status: &str) -> String {
    let api: Api<PDBPolicy> = Api::namespaced(c.clone(), ns);
    wait_for(
        &format!("policy {policy}: PDBConflict={status}"),
        WAIT,
        || async {
            let st = api.get(policy).await.unwrap().status.unwrap_or_default();
            match st.conditions.iter().find(|c| c.type_ == "PDBConflict") {
                Some(cond) if cond.status == status => Check::Done(cond.message.clone()),
                _ => Check::NotYet(format!("{:?}", st.conditions)),
            }
        },
    )
    .await
}

/// A Deployment `name` of `replicas` labelled and selecting `app=<name>`; `pod_spec_extra` is
/// merged into its pod spec.
fn deployment(name: &str, replicas: i32, pod_spec_extra: Value) -> Deployment {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox:1.36"}]});
    for (k, v) in pod_spec_extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}
        }
    }))
    .unwrap()
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_users_pdb_after_the_deployments_makes_the_operator_yield_and_take_over_again() {
    let t = OperatorNamespace::start("pdbop-yield-deploy").await;
    let (c, n) = (&t.cluster.client, t.ns.name());
    let pdbs = &t.pdbs;
    strict_policy(c, n, "web-standard", "standard", "web").await;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    deployments
        .create(&PostParams::default(), &deployment("web", 3, json!({})))
        .await
        .unwrap();
    wait_ready_pods(&Api::namespaced(c.clone(), n), "app=web", 3).await;
    wait_pdb(pdbs, "web-pdb", "minAvailable 50%", |p| {
        min_available(p) == Some(json!("50%"))
    })
    .await;

    create_user_pdb(c, n, "team-pdb", "web").await;
    wait_only_pdb(c, n, "app=web", "team-pdb").await;
    evict_one_not_500(c, n, "app=web").await;
    // The yield is one PDBConflict; the looks that follow ("none is written") are events of
    // their own, since a changed message is a new event.
    wait_for("PDBConflict saying web-pdb is deleted", WAIT, || async {
        let notes: Vec<String> = events_for(c, n, "web", "PDBConflict")
            .await
            .into_iter()
            .filter_map(|e| e.note)
            .collect();
        if notes
            .iter()
            .any(|m| m.contains("team-pdb") && m.contains("web-pdb is deleted"))
        {
            Check::Done(())
        } else {
            Check::NotYet(format!("{notes:?}"))
        }
    })
    .await;
    let message = wait_policy_conflict(c, n, "web-standard", "True").await;
    assert!(
        message.contains(&format!("{n}/Deployment/web")),
        "{message}"
    );
    // `explain` shows why there is no PDB of ours.
    let out = assert_cmd::Command::cargo_bin("pdb-operator")
        .unwrap()
        .env("KUBECONFIG", &t.cluster.kubeconfig)
        .args(["explain", "deployment/web", "-n", n])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("PDB conflict") && text.contains("team-pdb"),
        "{text}"
    );

    pdbs.delete("team-pdb", &DeleteParams::default())
        .await
        .unwrap();
    wait_pdb(pdbs, "web-pdb", "back after team-pdb left", |p| {
        min_available(p) == Some(json!("50%"))
    })
    .await;
    wait_only_pdb(c, n, "app=web", "web-pdb").await;
    wait_policy_conflict(c, n, "web-standard", "False").await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn a_users_pdb_after_the_gangs_makes_the_operator_yield_and_take_over_again() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-yield-gang").await;
    let (c, n) = (&cluster.client, ns.name());
    let (_op, addr) = start_operator_with_metrics(&cluster, n);
    let pdbs = &Api::<PodDisruptionBudget>::namespaced(c.clone(), n);
    create_trainer_gang(c, n).await;
    wait_pdb(pdbs, "trainer-pdb", "minAvailable 6", |p| {
        min_available(p) == Some(json!(6))
    })
    .await;

    create_user_pdb(c, n, "team-pdb", "trainer").await;
    wait_only_pdb(c, n, "app=trainer", "team-pdb").await;
    evict_one_not_500(c, n, "app=trainer").await;
    let note = wait_event(c, n, "trainer", "PDBConflict").await;
    assert!(note.contains("team-pdb"), "{note}");
    // Issue #52 defect 6: the PDB in force over the gang counts: the policy names it, and the
    // gang's compliance is 1 (protected, by team-pdb) with reason pdb_conflict.
    let message = wait_policy_conflict(c, n, "training-critical", "True").await;
    assert!(
        message.contains(&format!("{n}/Workload/trainer (to {n}/team-pdb)")),
        "{message}"
    );
    let compliance = metric_sum(
        &metrics_text(addr).await,
        "pdb_operator_compliance_status",
        &[("deployment", "trainer"), ("reason", "pdb_conflict")],
    );
    assert_eq!(compliance, 1.0, "the gang is protected by team-pdb");

    pdbs.delete("team-pdb", &DeleteParams::default())
        .await
        .unwrap();
    wait_pdb(pdbs, "trainer-pdb", "back after team-pdb left", |_| true).await;
    wait_only_pdb(c, n, "app=trainer", "trainer-pdb").await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn one_policy_over_a_workload_and_the_deployment_of_its_pods_leaves_one_pdb() {
    let t = OperatorNamespace::start("pdbop-overlap").await;
    let (c, n) = (&t.cluster.client, t.ns.name());
    // The Deployment's pods are the members of a single-mode gang: PodGroup mix-workers-0 of
    // Workload mix-gang. One policy (app=mix) comes to match both.
    create_workload(
        c,
        n,
        "mix-gang",
        json!({"app": "mix"}),
        json!([gang_template("workers", 2, "single")]),
    )
    .await;
    create_pod_group(c, n, "mix-gang", "workers", "mix-workers-0", 2, "single").await;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    let mut d = deployment(
        "mix",
        4,
        json!({"schedulingGroup": {"podGroupName": "mix-workers-0"}}),
    );
    // Not matched by the policy yet: the Workload's PDB comes first.
    d.metadata.labels = Some(labels(&[("app", "mix-later")]));
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    wait_ready_pods(&Api::namespaced(c.clone(), n), "app=mix", 4).await;
    strict_policy(c, n, "mix-standard", "standard", "mix").await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    wait_pdb(&pdbs, "mix-gang-pdb", "the gang's PDB", |_| true).await;
    wait_only_pdb(c, n, "app=mix", "mix-gang-pdb").await;

    // Now the same policy matches the Deployment too: its pods are protected already, so it
    // writes no second PDB (and says why).
    deployments
        .patch(
            "mix",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "mix"}}})),
        )
        .await
        .unwrap();
    for _ in 0..12 {
        let seen = pdbs_per_pod(c, n, "app=mix").await;
        assert!(
            seen.values()
                .all(|over| over == &["mix-gang-pdb".to_string()]),
            "{seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let note = wait_event(c, n, "mix", "PDBConflict").await;
    assert!(note.contains("mix-gang-pdb"), "{note}");
    evict_one_not_500(c, n, "app=mix").await;
}

/// Two Deployments whose selectors both cover every `app=shared` pod, configured by one policy
/// at once: both controllers' reconciles run side by side and may both create; the younger PDB
/// (creation time, then name) yields, so one remains.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn two_deployments_over_the_same_pods_matched_at_once_end_with_one_pdb() {
    let t = OperatorNamespace::start("pdbop-race").await;
    let (c, n) = (&t.cluster.client, t.ns.name());
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    for part in ["a", "b"] {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": part, "labels": {"app": "race"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "shared"}},
                "template": {"metadata": {"labels": {"app": "shared", "part": part}},
                             "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}
            }
        }))
        .unwrap();
        deployments
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
    }
    wait_ready_pods(&Api::namespaced(c.clone(), n), "app=shared", 4).await;
    strict_policy(c, n, "race-standard", "standard", "race").await;
    let one = wait_for(
        "exactly one PDB over every pod app=shared",
        YIELD_WITHIN,
        || async {
            let seen = pdbs_per_pod(c, n, "app=shared").await;
            let first = seen.values().next().cloned().unwrap_or_default();
            if first.len() == 1 && seen.values().all(|over| over == &first) {
                Check::Done(first[0].clone())
            } else {
                Check::NotYet(format!("{seen:?}"))
            }
        },
    )
    .await;
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let seen = pdbs_per_pod(c, n, "app=shared").await;
        assert!(
            seen.values().all(|over| over == std::slice::from_ref(&one)),
            "{seen:?}"
        );
    }
    let other = if one == "a-pdb" { "b" } else { "a" };
    let note = wait_event(c, n, other, "PDBConflict").await;
    assert!(note.contains(&one), "{note}");
    evict_one_not_500(c, n, "app=shared").await;
}
