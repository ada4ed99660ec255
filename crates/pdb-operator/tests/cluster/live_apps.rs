//! The operator against the real local control plane: Deployments and StatefulSets (note §16
//! scenarios), with real policy/v1 evictions checked against the computed budgets.
//! Each test runs its own operator in-process, scoped to the test's namespace.

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_fixture::TestCluster;
use pdb_operator::crd::{ClusterPDBPolicy, PDBPolicy};
use serde_json::{Value, json};

fn deployment(name: &str, replicas: i32, labels: Value, annotations: Value) -> Deployment {
    gated_deployment(name, replicas, labels, annotations, false)
}

/// With `gated`, pods start behind [`HOLD_GATE`] (see there why).
fn gated_deployment(
    name: &str,
    replicas: i32,
    labels: Value,
    annotations: Value,
    gated: bool,
) -> Deployment {
    let gates = if gated {
        json!([{"name": HOLD_GATE}])
    } else {
        json!([])
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"schedulingGates": gates,
                         "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}
            }
        }
    }))
    .unwrap()
}

async fn patch_deployment(api: &Api<Deployment>, name: &str, patch: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching deployment {name}: {e}"));
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn annotated_deployment_gets_its_class_budget_and_follows_changes() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-annot").await;
    let _op = start_operator(&cluster, ns.name());
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns.name());
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), ns.name());
    let standard = json!({"pdboperator.io/availability-class": "standard"});
    deployments
        .create(
            &PostParams::default(),
            &deployment("a", 3, json!({}), standard),
        )
        .await
        .unwrap();

    // Scenario 1: "50%", full selector, controller ownerReference, labels, annotations.
    let pdb = wait_pdb(&pdbs, "a-pdb", "minAvailable 50%", |p| {
        min_available(p) == Some(json!("50%"))
    })
    .await;
    let spec = pdb.spec.clone().unwrap();
    assert_eq!(
        serde_json::to_value(&spec.selector).unwrap(),
        json!({"matchLabels": {"app": "a"}})
    );
    let owner = &pdb.owner_references()[0];
    let d = deployments.get("a").await.unwrap();
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Deployment", "a", d.uid().unwrap().as_str())
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    let l = pdb.labels();
    assert_eq!(l["pdboperator.io/managed-by"], "pdb-operator");
    assert_eq!(l["pdboperator.io/availability-class"], "standard");
    assert_eq!(l["pdboperator.io/workload-function"], "core");
    let a = pdb.annotations();
    for k in [
        "pdboperator.io/created-by",
        "pdboperator.io/creation-time",
        "pdboperator.io/description",
    ] {
        assert!(a.contains_key(k), "annotation {k} missing: {a:?}");
    }
    assert!(
        d.finalizers().is_empty(),
        "no finalizer on users' workloads: {:?}",
        d.finalizers()
    );
    let created = wait_event(&cluster.client, ns.name(), "a", "PDBCreated").await;
    assert!(created.contains("class: standard"), "{created}");

    // Scenario 12/3: metadata-only annotation change → mission-critical at 3 replicas clamps to 2.
    patch_deployment(
        &deployments,
        "a",
        json!({"metadata": {"annotations": {"pdboperator.io/availability-class": "mission-critical"}}}),
    )
    .await;
    wait_pdb(&pdbs, "a-pdb", "minAvailable 2 (clamped)", |p| {
        min_available(p) == Some(json!(2))
    })
    .await;
    wait_event(&cluster.client, ns.name(), "a", "BudgetClamped").await;
    wait_event(&cluster.client, ns.name(), "a", "PDBUpdated").await;

    // Scenario 31: a manual edit is reverted.
    pdbs.patch(
        "a-pdb",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": 0}})),
    )
    .await
    .unwrap();
    wait_pdb(&pdbs, "a-pdb", "manual edit reverted to 2", |p| {
        min_available(p) == Some(json!(2))
    })
    .await;

    // Scenario 8/7: replicas 3 → 1 deletes the PDB with DeploymentSkipped; back to 3 recreates it.
    patch_deployment(&deployments, "a", json!({"spec": {"replicas": 1}})).await;
    wait_no_pdb(&pdbs, "a-pdb").await;
    let skipped = wait_event(&cluster.client, ns.name(), "a", "DeploymentSkipped").await;
    assert!(skipped.contains("insufficient replicas"), "{skipped}");
    wait_event(&cluster.client, ns.name(), "a", "PDBDeleted").await;
    patch_deployment(&deployments, "a", json!({"spec": {"replicas": 3}})).await;
    wait_pdb(&pdbs, "a-pdb", "recreated", |p| {
        min_available(p) == Some(json!(2))
    })
    .await;

    // Scenario 11: removing the annotation removes the PDB, DeploymentUnmanaged.
    patch_deployment(
        &deployments,
        "a",
        json!({"metadata": {"annotations": {"pdboperator.io/availability-class": null}}}),
    )
    .await;
    wait_no_pdb(&pdbs, "a-pdb").await;
    wait_event(&cluster.client, ns.name(), "a", "DeploymentUnmanaged").await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn evictions_are_allowed_or_refused_exactly_as_the_budget_says() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-evict").await;
    let _op = start_operator(&cluster, ns.name());
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns.name());
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    let standard = json!({"pdboperator.io/availability-class": "standard"});
    deployments
        .create(
            &PostParams::default(),
            &gated_deployment("web", 4, json!({}), standard, true),
        )
        .await
        .unwrap();
    let ready = ungate_and_wait_ready(&pods, "app=web", 4).await;
    // standard on 4 pods: minAvailable "50%" = ceil(2.0) = 2 → 2 evictions allowed.
    wait_pdb(&pdbs, "web-pdb", "50%", |p| {
        min_available(p) == Some(json!("50%"))
    })
    .await;
    wait_disruptions(&pdbs, "web-pdb", 4, 2).await;
    let names: Vec<String> = ready.iter().map(|p| p.name_any()).collect();
    // Replacement pods stay gated (Pending), so they never count as healthy.
    let first = evict(&pods, &names[0]).await;
    let second = evict(&pods, &names[1]).await;
    let third = evict(&pods, &names[2]).await;
    assert_eq!(first, Ok(()), "1st eviction");
    assert_eq!(second, Ok(()), "2nd eviction");
    let (code, message) = third.expect_err("3rd eviction must be refused");
    assert_eq!(code, 429, "{message}");
    assert!(message.contains("disruption budget"), "{message}");
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn statefulset_of_three_high_availability_allows_exactly_one_eviction() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-sts").await;
    let _op = start_operator(&cluster, ns.name());
    let sets: Api<StatefulSet> = Api::namespaced(cluster.client.clone(), ns.name());
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns.name());
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "redis", "annotations": {"pdboperator.io/availability-class": "high-availability"}},
        "spec": {"replicas": 3, "serviceName": "redis", "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": "redis"}},
                 "template": {"metadata": {"labels": {"app": "redis"}},
                              "spec": {"schedulingGates": [{"name": HOLD_GATE}],
                                       "containers": [{"name": "c", "image": "busybox:1.36"}]}}}
    }))
    .unwrap();
    sets.create(&PostParams::default(), &sts).await.unwrap();
    ungate_and_wait_ready(&pods, "app=redis", 3).await;
    // Scenario 34 (corrected): ceil(75% × 3) = 3 ≥ 3 → clamped to 2 → one eviction allowed.
    let pdb = wait_pdb(&pdbs, "redis-pdb", "minAvailable 2", |p| {
        min_available(p) == Some(json!(2))
    })
    .await;
    assert_eq!(pdb.owner_references()[0].kind, "StatefulSet");
    wait_event(&cluster.client, ns.name(), "redis", "BudgetClamped").await;
    wait_disruptions(&pdbs, "redis-pdb", 3, 1).await;
    assert_eq!(
        evict(&pods, "redis-0").await,
        Ok(()),
        "draining one pod succeeds"
    );
    let (code, message) = evict(&pods, "redis-1")
        .await
        .expect_err("second eviction refused");
    assert_eq!(code, 429, "{message}");
}

fn policy(name: &str, spec: Value) -> PDBPolicy {
    serde_json::from_value(json!({
        "apiVersion": "availability.pdboperator.io/v1alpha1",
        "kind": "PDBPolicy",
        "metadata": {"name": name},
        "spec": spec
    }))
    .unwrap()
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn policy_sets_the_budget_reports_status_and_its_deletion_removes_the_pdb() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-policy").await;
    let _op = start_operator(&cluster, ns.name());
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns.name());
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), ns.name());
    let policies: Api<PDBPolicy> = Api::namespaced(cluster.client.clone(), ns.name());
    policies
        .create(
            &PostParams::default(),
            &policy(
                "frontend",
                json!({"availabilityClass": "standard", "workloadSelector": {"matchLabels": {"tier": "frontend"}}}),
            ),
        )
        .await
        .unwrap();
    // Scenario 14: the label arrives after the Deployment exists.
    deployments
        .create(
            &PostParams::default(),
            &deployment("fe", 2, json!({}), json!({})),
        )
        .await
        .unwrap();
    wait_event(&cluster.client, ns.name(), "fe", "DeploymentUnmanaged").await;
    assert!(pdbs.get_opt("fe-pdb").await.unwrap().is_none());
    patch_deployment(
        &deployments,
        "fe",
        json!({"metadata": {"labels": {"tier": "frontend"}}}),
    )
    .await;

    // Scenario 13.
    let pdb = wait_pdb(&pdbs, "fe-pdb", "50% from the policy", |p| {
        min_available(p) == Some(json!("50%"))
    })
    .await;
    assert_eq!(
        pdb.annotations()["pdboperator.io/policy-source"],
        "frontend"
    );
    assert_eq!(
        pdb.annotations()["pdboperator.io/enforcement-mode"],
        "advisory"
    );

    // Scenario 38: policy status.
    let ns_name = ns.name().to_string();
    kube_fixture::wait_for("policy status lists fe", WAIT, || async {
        let p = policies.get("frontend").await.unwrap();
        let st = p.status.unwrap_or_default();
        let ready = st
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True" && c.reason == "ComponentsMatched");
        let want = vec![format!("{ns_name}/Deployment/fe")];
        if ready
            && st.applied_to_workloads == want
            && st.workload_count == 1
            && st.pdbs_managed == vec![format!("{ns_name}/fe-pdb")]
            && st.observed_generation.is_some()
        {
            kube_fixture::Check::Done(())
        } else {
            kube_fixture::Check::NotYet(format!("{st:?}"))
        }
    })
    .await;

    // Scenario 15: policy deleted → PDB deleted, DeploymentUnmanaged.
    policies
        .delete("frontend", &DeleteParams::default())
        .await
        .unwrap();
    wait_no_pdb(&pdbs, "fe-pdb").await;
    wait_event(&cluster.client, ns.name(), "fe", "PDBDeleted").await;
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn cluster_policy_limited_to_the_namespace_applies_and_tie_goes_to_the_namespaced_one() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-cluster").await;
    let _op = start_operator(&cluster, ns.name());
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns.name());
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), ns.name());
    let cluster_policies: Api<ClusterPDBPolicy> = Api::all(cluster.client.clone());
    let cp_name = format!("{}-defaults", ns.name());
    let cp: ClusterPDBPolicy = serde_json::from_value(json!({
        "apiVersion": "availability.pdboperator.io/v1alpha1",
        "kind": "ClusterPDBPolicy",
        "metadata": {"name": cp_name},
        "spec": {"availabilityClass": "mission-critical",
                 "workloadSelector": {"matchLabels": {"team": "x"}, "namespaces": [ns.name()]}}
    }))
    .unwrap();
    cluster_policies
        .create(&PostParams::default(), &cp)
        .await
        .unwrap();
    let guard = ClusterPolicyGuard {
        kubeconfig: cluster.kubeconfig.clone(),
        name: cp_name.clone(),
    };
    deployments
        .create(
            &PostParams::default(),
            &deployment("api", 2, json!({"team": "x"}), json!({})),
        )
        .await
        .unwrap();
    // mission-critical on 2 replicas: ceil(1.8) = 2 ≥ 2 → clamped to 1.
    let pdb = wait_pdb(
        &pdbs,
        "api-pdb",
        "minAvailable 1 from the cluster policy",
        |p| min_available(p) == Some(json!(1)),
    )
    .await;
    assert_eq!(pdb.annotations()["pdboperator.io/policy-source"], cp_name);

    // Same priority, namespaced policy → it wins the tie (note §4.1).
    let policies: Api<PDBPolicy> = Api::namespaced(cluster.client.clone(), ns.name());
    policies
        .create(
            &PostParams::default(),
            &policy(
                "team-x",
                json!({"availabilityClass": "standard", "workloadSelector": {"matchLabels": {"team": "x"}}}),
            ),
        )
        .await
        .unwrap();
    let pdb = wait_pdb(&pdbs, "api-pdb", "50% from the namespaced policy", |p| {
        min_available(p) == Some(json!("50%"))
    })
    .await;
    assert_eq!(pdb.annotations()["pdboperator.io/policy-source"], "team-x");
    wait_event(&cluster.client, ns.name(), "api", "PolicyConflict").await;
    drop(guard);
    assert!(
        cluster_policies.get_opt(&cp_name).await.unwrap().is_none()
            || cluster_policies
                .get(&cp_name)
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some(),
        "cluster policy {cp_name} removed"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn users_pdb_over_the_same_pods_is_never_touched_and_no_second_pdb_is_written() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-user").await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), ns.name());
    let team: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "team-pdb"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "a"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &team).await.unwrap();
    let _op = start_operator(&cluster, ns.name());
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns.name());
    deployments
        .create(
            &PostParams::default(),
            &deployment(
                "a",
                2,
                json!({}),
                json!({"pdboperator.io/availability-class": "standard"}),
            ),
        )
        .await
        .unwrap();
    // Scenario 32.
    let note = wait_event(&cluster.client, ns.name(), "a", "PDBConflict").await;
    assert!(note.contains("team-pdb"), "{note}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        pdbs.get_opt("a-pdb").await.unwrap().is_none(),
        "no second PDB"
    );
    let team = pdbs.get("team-pdb").await.unwrap();
    assert!(
        team.labels().is_empty() && team.owner_references().is_empty(),
        "team-pdb untouched"
    );
    assert_eq!(
        serde_json::to_value(team.spec.unwrap().max_unavailable).unwrap(),
        json!(1)
    );
    // Once the user's PDB is gone, ours appears (the PDB watch re-triggers the Deployment).
    pdbs.delete("team-pdb", &DeleteParams::default())
        .await
        .unwrap();
    wait_pdb(&pdbs, "a-pdb", "created after team-pdb left", |p| {
        min_available(p) == Some(json!("50%"))
    })
    .await;
}

fn window_around_now() -> String {
    // A window from one hour ago to one hour ahead (overnight windows wrap correctly).
    let now = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC);
    let start = now
        .checked_sub(jiff::SignedDuration::from_hours(1))
        .unwrap();
    let end = now
        .checked_add(jiff::SignedDuration::from_hours(1))
        .unwrap();
    format!(
        "{:02}:{:02}-{:02}:{:02} UTC",
        start.hour(),
        start.minute(),
        end.hour(),
        end.minute()
    )
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn maintenance_window_relaxes_the_pdb_and_restores_it_afterwards() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-window").await;
    let _op = start_operator(&cluster, ns.name());
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns.name());
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), ns.name());
    deployments
        .create(
            &PostParams::default(),
            &deployment(
                "m",
                2,
                json!({}),
                json!({"pdboperator.io/availability-class": "standard"}),
            ),
        )
        .await
        .unwrap();
    wait_pdb(&pdbs, "m-pdb", "50%", |p| {
        min_available(p) == Some(json!("50%"))
    })
    .await;

    // Scenario 39: an open window relaxes the existing PDB to minAvailable 0.
    patch_deployment(
        &deployments,
        "m",
        json!({"metadata": {"annotations": {"pdboperator.io/maintenance-window": window_around_now()}}}),
    )
    .await;
    let relaxed = wait_pdb(&pdbs, "m-pdb", "relaxed to 0", |p| {
        min_available(p) == Some(json!(0))
    })
    .await;
    assert_eq!(
        relaxed.annotations()["pdboperator.io/maintenance-mode"],
        "true"
    );
    assert!(
        relaxed
            .annotations()
            .contains_key("pdboperator.io/maintenance-start")
    );
    wait_event(&cluster.client, ns.name(), "m", "MaintenanceWindowActive").await;

    // Window gone → budget and annotations restored.
    patch_deployment(
        &deployments,
        "m",
        json!({"metadata": {"annotations": {"pdboperator.io/maintenance-window": null}}}),
    )
    .await;
    let restored = wait_pdb(&pdbs, "m-pdb", "restored to 50%", |p| {
        min_available(p) == Some(json!("50%"))
    })
    .await;
    assert!(
        !restored
            .annotations()
            .contains_key("pdboperator.io/maintenance-mode")
    );
    assert!(
        !restored
            .annotations()
            .contains_key("pdboperator.io/maintenance-start")
    );
    wait_event(&cluster.client, ns.name(), "m", "MaintenanceWindowEnded").await;

    // A workload created during a window gets no PDB (none is created while relaxed).
    deployments
        .create(
            &PostParams::default(),
            &deployment(
                "late",
                2,
                json!({}),
                json!({"pdboperator.io/availability-class": "standard",
                       "pdboperator.io/maintenance-window": window_around_now()}),
            ),
        )
        .await
        .unwrap();
    // Give the operator time to see it (it reconciles within a second on this cluster).
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        pdbs.get_opt("late-pdb").await.unwrap().is_none(),
        "no PDB created inside a window"
    );
    assert!(
        events_for(&cluster.client, ns.name(), "late", "PDBCreated")
            .await
            .is_empty()
    );
}
