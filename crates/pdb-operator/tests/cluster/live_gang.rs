//! The operator against the real local control plane (Kubernetes 1.37, GenericWorkload on):
//! Workload API gangs — seed 003's worked example with real evictions in both orders, deferral,
//! the rows of the declared-shape table (drains and start-up: live_gang_drain;
//! LeaderWorkerSets: live_lws).

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1beta1::Workload;
use kube::api::DeleteParams;
use kube::{Api, Client, ResourceExt};
use kube_fixture::{Check, TestCluster, wait_for};
use serde_json::json;

/// [`create_trainer_gang`] in namespace `n`; returns once the PDB allows its 2 evictions.
async fn seed_gang(c: &Client, n: &str) -> PodDisruptionBudget {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    create_trainer_gang(c, n).await;
    // Scenario 46: ceil(0.9 × 4) = 4 → clamped to 3 groups → minAvailable 3 × 2 = 6, over the
    // labels every member shares (role differs).
    let pdb = wait_pdb(
        &pdbs,
        "trainer-pdb",
        "minAvailable 6, selector app=trainer",
        |p| {
            min_available(p) == Some(json!(6))
                && serde_json::to_value(&p.spec.as_ref().unwrap().selector).unwrap()
                    == json!({"matchLabels": {"app": "trainer"}})
        },
    )
    .await;
    wait_disruptions(&pdbs, "trainer-pdb", 8, 2).await;
    pdb
}

/// Evicts `pod` (which must be allowed), waits until it is gone and the operator has looked at
/// the gang again, and checks that the PDB kept minAvailable `min`.
async fn evict_and_settle(c: &Client, n: &str, addr: std::net::SocketAddr, pod: &str, min: i32) {
    let pods: Api<Pod> = Api::namespaced(c.clone(), n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    let before = reconciles(addr, "workload-pdb").await;
    assert_eq!(evict(&pods, pod).await, Ok(()), "evicting {pod}");
    wait_pod_gone(&pods, pod).await;
    wait_settled(addr, "workload-pdb", before).await;
    let pdb = pdbs.get_opt("trainer-pdb").await.unwrap();
    let pdb = pdb.unwrap_or_else(|| panic!("the PDB is gone after evicting {pod}"));
    assert_eq!(
        min_available(&pdb),
        Some(json!(min)),
        "after evicting {pod}"
    );
}

fn assert_row(text: &str, label: &str, value: &str) {
    let found = text.lines().any(|l| {
        let cells: Vec<&str> = l.split('|').map(str::trim).collect();
        cells.len() >= 3 && cells[1] == label && cells[2] == value
    });
    assert!(found, "no row {label:?} = {value:?} in\n{text}");
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn seed_worked_example_four_groups_of_two_with_real_evictions() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-seed").await;
    let (c, n) = (&cluster.client, ns.name());
    let (_op, addr) = start_operator_with_metrics(&cluster, n);
    let pods: Api<Pod> = Api::namespaced(c.clone(), n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    let pdb = seed_gang(c, n).await;
    let owner = &pdb.owner_references()[0];
    assert_eq!(
        (owner.api_version.as_str(), owner.kind.as_str()),
        ("scheduling.k8s.io/v1beta1", "Workload")
    );
    let w: Workload = Api::namespaced(c.clone(), n).get("trainer").await.unwrap();
    assert!(
        w.finalizers().is_empty(),
        "no finalizer on the Workload: {:?}",
        w.finalizers()
    );

    // Scenario 56, favourable order: both pods of group 0 go, the operator looks again after
    // each, and the first eviction from group 1 is refused (not merely before a reconcile ran).
    evict_and_settle(c, n, addr, "trainer-0-0", 6).await;
    evict_and_settle(c, n, addr, "trainer-0-1", 6).await;
    let (code, message) = evict(&pods, "trainer-1-0")
        .await
        .expect_err("group 1 must be protected");
    assert_eq!(code, 429, "{message}");
    assert!(message.contains("disruption budget"), "{message}");

    // `explain` prints the seed's arithmetic for the live objects, and the Workload's own gang.
    let out = assert_cmd::Command::cargo_bin("pdb-operator")
        .unwrap()
        .env("KUBECONFIG", &cluster.kubeconfig)
        .args(["explain", "workload/trainer", "-n", n])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!(
            "Workload {n}/trainer (4 pod group(s) of template workers, 6 live pod(s), 0 finished or terminating)"
        )),
        "{text}"
    );
    assert_row(&text, "ceil(90% × 4 groups)", "4");
    assert_row(&text, "clamped to groups - 1", "3");
    assert_row(
        &text,
        "size of trainer-workers-0 (0 live)",
        "2 (2 seen before)",
    );
    assert!(
        text.contains("=> PodDisruptionBudget trainer-pdb: minAvailable: 6"),
        "{text}"
    );
    assert!(
        text.contains("In the cluster: PodDisruptionBudget trainer-pdb"),
        "{text}"
    );

    // The first group comes back → one group's worth of evictions is allowed again.
    for i in 0..2 {
        let role = if i == 0 { "leader" } else { "worker" };
        create_pod(
            c,
            n,
            &format!("trainer-0-{i}"),
            Some("trainer-workers-0"),
            json!({"app": "trainer", "role": role}),
        )
        .await;
    }
    wait_ready_pods(&pods, "app=trainer", 8).await;
    wait_disruptions(&pdbs, "trainer-pdb", 8, 2).await;
    assert_eq!(
        evict(&pods, "trainer-1-0").await,
        Ok(()),
        "allowed once group 0 is back"
    );
}

/// Scenario 56 in the unfavourable order: the first eviction takes one pod of group 0. With
/// `disruptionMode: all` the group restarts as a unit, so its controller deletes the other pod
/// (done here by the test, as no JobSet controller runs on this cluster). The budget keeps
/// group 0 at its size, so the first eviction from group 1 is refused.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn seed_example_evicted_across_groups() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-seed-across").await;
    let (c, n) = (&cluster.client, ns.name());
    let (_op, addr) = start_operator_with_metrics(&cluster, n);
    let pods: Api<Pod> = Api::namespaced(c.clone(), n);
    seed_gang(c, n).await;
    evict_and_settle(c, n, addr, "trainer-0-0", 6).await;
    let before = reconciles(addr, "workload-pdb").await;
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete("trainer-0-1", &now).await.unwrap();
    wait_pod_gone(&pods, "trainer-0-1").await;
    wait_settled(addr, "workload-pdb", before).await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    wait_disruptions(&pdbs, "trainer-pdb", 6, 0).await;
    let (code, message) = evict(&pods, "trainer-1-0")
        .await
        .expect_err("group 1 must be protected while group 0 restarts");
    assert_eq!(code, 429, "{message}");
    let pdb = pdbs.get("trainer-pdb").await.unwrap();
    assert_eq!(min_available(&pdb), Some(json!(6)));
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn workload_before_its_pods_is_deferred_then_protected() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-defer").await;
    let c = &cluster.client;
    let _op = start_operator(&cluster, ns.name());
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), ns.name());
    strict_policy(c, ns.name(), "train", "mission-critical", "job").await;
    create_workload(
        c,
        ns.name(),
        "job",
        json!({"app": "job"}),
        json!([gang_template("workers", 2, "all")]),
    )
    .await;
    for g in 0..4 {
        create_pod_group(
            c,
            ns.name(),
            "job",
            "workers",
            &format!("job-workers-{g}"),
            2,
            "all",
        )
        .await;
    }
    // Scenario 48 / W16.
    let note = wait_event(c, ns.name(), "job", "WorkloadPDBDeferred").await;
    assert!(note.contains("No pods for Workload job yet"), "{note}");
    assert!(pdbs.get_opt("job-pdb").await.unwrap().is_none());
    for g in 0..4 {
        for i in 0..2 {
            create_pod(
                c,
                ns.name(),
                &format!("job-{g}-{i}"),
                Some(&format!("job-workers-{g}")),
                json!({"app": "job"}),
            )
            .await;
        }
    }
    wait_pdb(&pdbs, "job-pdb", "minAvailable 6 once pods exist", |p| {
        min_available(p) == Some(json!(6))
    })
    .await;
    // Scenario 53 (corrected): a stranger pod with the shared label, created after the PDB
    // exists, makes the selector inexact → PDB deleted, WorkloadSelectorUnresolvable.
    create_pod(c, ns.name(), "intruder", None, json!({"app": "job"})).await;
    wait_no_pdb(&pdbs, "job-pdb").await;
    let note = wait_event(c, ns.name(), "job", "WorkloadSelectorUnresolvable").await;
    assert!(note.contains("intruder"), "{note}");

    // Scenario 48: all gang pods deleted later → deferred again.
    let pods: Api<Pod> = Api::namespaced(c.clone(), ns.name());
    let zero = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    for g in 0..4 {
        for i in 0..2 {
            pods.delete(&format!("job-{g}-{i}"), &zero).await.unwrap();
        }
    }
    wait_for(
        "WorkloadPDBDeferred reported a second time",
        WAIT,
        || async {
            let n = occurrences(c, ns.name(), "job", "WorkloadPDBDeferred").await;
            if n >= 2 {
                Check::Done(())
            } else {
                Check::NotYet(format!("{n} occurrence(s)"))
            }
        },
    )
    .await;
    assert!(pdbs.get_opt("job-pdb").await.unwrap().is_none());
}

/// Rows of seed 003's shape table, each a Workload with its own label in one namespace.
#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn declared_shapes_give_the_documented_budgets_or_events() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-shapes").await;
    let c = &cluster.client;
    let n = ns.name();
    let _op = start_operator(&cluster, n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);

    // Single all-mode group (W5): no PDB, WorkloadSkipped "restarts as a unit".
    strict_policy(c, n, "p-solo", "mission-critical", "solo").await;
    create_workload(
        c,
        n,
        "solo",
        json!({"app": "solo"}),
        json!([gang_template("workers", 4, "all")]),
    )
    .await;
    create_gang(
        c,
        n,
        Gang {
            name: "solo",
            app: "solo",
            groups: 1,
            per_group: 4,
            min_count: 4,
            mode: "all",
        },
    )
    .await;

    // Single mode, one group 1 × 4, minCount 3, standard (W8): floored at minCount → 3.
    strict_policy(c, n, "p-one", "standard", "one").await;
    create_workload(
        c,
        n,
        "one",
        json!({"app": "one"}),
        json!([gang_template("workers", 3, "single")]),
    )
    .await;
    create_gang(
        c,
        n,
        Gang {
            name: "one",
            app: "one",
            groups: 1,
            per_group: 4,
            min_count: 3,
            mode: "single",
        },
    )
    .await;

    // Single mode, several groups 2 × 4, minCount 2, standard (W12, corrected): 6.
    strict_policy(c, n, "p-two", "standard", "two").await;
    create_workload(
        c,
        n,
        "two",
        json!({"app": "two"}),
        json!([gang_template("workers", 2, "single")]),
    )
    .await;
    create_gang(
        c,
        n,
        Gang {
            name: "two",
            app: "two",
            groups: 2,
            per_group: 4,
            min_count: 2,
            mode: "single",
        },
    )
    .await;

    // minCount covering every pod (W9): no PDB, WorkloadSkipped naming minCount 4.
    strict_policy(c, n, "p-full", "non-critical", "full").await;
    create_workload(
        c,
        n,
        "full",
        json!({"app": "full"}),
        json!([gang_template("workers", 4, "single")]),
    )
    .await;
    create_gang(
        c,
        n,
        Gang {
            name: "full",
            app: "full",
            groups: 1,
            per_group: 4,
            min_count: 4,
            mode: "single",
        },
    )
    .await;

    // Two gang templates: WorkloadUnsupported.
    strict_policy(c, n, "p-multi", "standard", "multi").await;
    create_workload(
        c,
        n,
        "multi",
        json!({"app": "multi"}),
        json!([
            gang_template("workers", 2, "all"),
            gang_template("ps", 1, "all")
        ]),
    )
    .await;

    // A stranger pod sharing the labels (W15): WorkloadSelectorUnresolvable.
    strict_policy(c, n, "p-crowd", "mission-critical", "crowd").await;
    create_workload(
        c,
        n,
        "crowd",
        json!({"app": "crowd"}),
        json!([gang_template("workers", 2, "all")]),
    )
    .await;
    create_gang(
        c,
        n,
        Gang {
            name: "crowd",
            app: "crowd",
            groups: 2,
            per_group: 2,
            min_count: 2,
            mode: "all",
        },
    )
    .await;
    create_pod(
        c,
        n,
        "stranger",
        None,
        json!({"app": "crowd", "role": "worker"}),
    )
    .await;
    create_pod(
        c,
        n,
        "stranger-2",
        None,
        json!({"app": "crowd", "role": "leader"}),
    )
    .await;

    // Unconfigured Workload: only WorkloadUnmanaged.
    create_workload(
        c,
        n,
        "plain",
        json!({"app": "plain"}),
        json!([gang_template("workers", 2, "all")]),
    )
    .await;

    wait_pdb(&pdbs, "one-pdb", "minAvailable 3", |p| {
        min_available(p) == Some(json!(3))
    })
    .await;
    wait_pdb(&pdbs, "two-pdb", "minAvailable 6", |p| {
        min_available(p) == Some(json!(6))
    })
    .await;
    let solo = wait_event(c, n, "solo", "WorkloadSkipped").await;
    assert!(solo.contains("restarts as a unit"), "{solo}");
    let full = wait_event(c, n, "full", "WorkloadSkipped").await;
    assert!(full.contains("minCount 4"), "{full}");
    wait_event(c, n, "multi", "WorkloadUnsupported").await;
    let crowd = wait_event(c, n, "crowd", "WorkloadSelectorUnresolvable").await;
    assert!(crowd.contains("stranger"), "{crowd}");
    wait_event(c, n, "plain", "WorkloadUnmanaged").await;
    for name in [
        "solo-pdb",
        "full-pdb",
        "multi-pdb",
        "crowd-pdb",
        "plain-pdb",
    ] {
        assert!(
            pdbs.get_opt(name).await.unwrap().is_none(),
            "{name} must not exist"
        );
    }
    // Scenario 53 (corrected): the stranger leaves → the selector is exact → PDB.
    let pods: Api<Pod> = Api::namespaced(c.clone(), n);
    for s in ["stranger", "stranger-2"] {
        pods.delete(
            s,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
    // 2 groups × 2 under mission-critical, all mode: ceil(1.8) = 2 → clamped to 1 group → 2.
    wait_pdb(
        &pdbs,
        "crowd-pdb",
        "minAvailable 2 once the strangers left",
        |p| min_available(p) == Some(json!(2)),
    )
    .await;
}
