//! Class values, the drain clamp, function boost, invalid annotations and custom budgets
//! (scenarios 2-7, 10, 12, 29-31), with real evictions on custom budgets.

use super::*;

// ---------------------------------------------------------------------------------------------
// Scenarios 2, 3, 4, 5, 6, 7, 10: class values, drain clamp, function boost, invalid annotations.

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn annotation_classes_functions_and_invalid_values_give_the_documented_budgets() {
    let s = scenario_with_metrics("pdbop-classes").await;
    let (c, n, addr) = (&s.cluster.client, s.ns.name(), s.addr);
    let (deployments, pdbs) = (s.deployments.clone(), s.pdbs.clone());
    let class = |v: &str| json!({"pdboperator.io/availability-class": v});
    let class_fn = |v: &str, f: &str| json!({"pdboperator.io/availability-class": v, "pdboperator.io/workload-function": f});
    create_policy(
        c,
        n,
        "std-advisory",
        json!({"availabilityClass": "standard", "workloadSelector": {"matchLabels": {"policy": "std"}}}),
    )
    .await;
    let cases: Vec<(&str, i32, Value, Value)> = vec![
        // Scenario 2.
        ("nc", 10, json!({}), class("non-critical")),
        ("ha", 10, json!({}), class("high-availability")),
        ("mc", 10, json!({}), class("mission-critical")),
        // Scenario 3 (the parts live_apps does not cover).
        ("mc9", 9, json!({}), class("mission-critical")),
        ("std2", 2, json!({}), class("standard")),
        ("std10", 10, json!({}), class("standard")),
        // Scenario 4.
        ("sec", 10, json!({}), class_fn("standard", "security")),
        ("ncsec", 10, json!({}), class_fn("non-critical", "security")),
        (
            "mcsec",
            10,
            json!({}),
            class_fn("mission-critical", "security"),
        ),
        (
            "hamgmt",
            10,
            json!({}),
            class_fn("high-availability", "management"),
        ),
        // Scenario 5, 6.
        ("bad", 10, json!({}), class("super-duper-critical")),
        (
            "badpol",
            2,
            json!({"policy": "std"}),
            class("super-duper-critical"),
        ),
        // Scenario 7 (replicas 0), 10.
        ("zero", 0, json!({}), class("standard")),
        ("plain", 3, json!({}), json!({})),
        ("single", 1, json!({}), json!({})),
    ];
    for (name, replicas, labels, annotations) in cases {
        create_paused(&deployments, name, replicas, labels, annotations).await;
    }

    for (name, want) in [("nc", "20%"), ("ha", "75%"), ("mc", "90%")] {
        wait_min(&pdbs, name, json!(want)).await;
    }
    wait_min(&pdbs, "mc9", json!(8)).await;
    let clamp = wait_deploy_event(c, n, "mc9", "BudgetClamped", "").await;
    assert!(clamp.contains('8'), "{clamp}");
    wait_min(&pdbs, "std2", json!("50%")).await;
    // Scenario 12: an annotation-only class change at 10 replicas updates the PDB. (The apps
    // API bumps a Deployment's generation on annotation changes too; the label-only edit
    // without a generation bump is scenario 14 in live_apps.)
    wait_min(&pdbs, "std10", json!("50%")).await;
    deployments
        .patch(
            "std10",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                "pdboperator.io/availability-class": "mission-critical"}}})),
        )
        .await
        .unwrap();
    wait_min(&pdbs, "std10", json!("90%")).await;
    wait_deploy_event(
        c,
        n,
        "std10",
        "PDBUpdated",
        "minAvailable: 50% -> minAvailable: 90%",
    )
    .await;

    for (name, want, function) in [
        ("sec", "75%", "security"),
        ("ncsec", "50%", "security"),
        ("mcsec", "90%", "security"),
        ("hamgmt", "75%", "management"),
    ] {
        let p = wait_min(&pdbs, name, json!(want)).await;
        assert_eq!(
            p.labels()["pdboperator.io/workload-function"],
            function,
            "{name}"
        );
    }

    // Scenario 5 (corrected): warning, no PDB, and the reconcile did not fail.
    let note = wait_deploy_event(
        c,
        n,
        "bad",
        "InvalidConfiguration",
        "invalid availability class",
    )
    .await;
    assert!(note.contains("super-duper-critical"), "{note}");
    // Scenario 6 (corrected): the policy still applies.
    let p = wait_min(&pdbs, "badpol", json!("50%")).await;
    assert_eq!(
        annotation(&p, "pdboperator.io/policy-source"),
        Some("std-advisory")
    );
    wait_deploy_event(
        c,
        n,
        "badpol",
        "InvalidConfiguration",
        "invalid availability class",
    )
    .await;
    // Scenario 7 and 10.
    let skipped =
        wait_deploy_event(c, n, "zero", "DeploymentSkipped", "insufficient replicas").await;
    assert!(skipped.contains("(0)"), "{skipped}");
    wait_deploy_event(
        c,
        n,
        "plain",
        "DeploymentUnmanaged",
        "no availability configuration",
    )
    .await;

    // Scenario 7 (corrected): one unconfigured replica is only Unmanaged, never Skipped.
    wait_deploy_event(c, n, "single", "DeploymentUnmanaged", "").await;
    assert!(
        events_of(c, n, "Deployment", "single", "DeploymentSkipped")
            .await
            .is_empty()
    );
    // Scenario 31: a managed PDB deleted by hand comes back.
    let nc = pdbs.get("nc-pdb").await.unwrap();
    pdbs.delete("nc-pdb", &DeleteParams::default())
        .await
        .unwrap();
    wait_pdb(&pdbs, "nc-pdb", "recreated after a manual delete", |p| {
        p.uid() != nc.uid() && min_available(p) == Some(json!("20%"))
    })
    .await;

    for name in ["bad", "zero", "plain", "single"] {
        assert!(
            pdbs.get_opt(&format!("{name}-pdb"))
                .await
                .unwrap()
                .is_none(),
            "{name} has no PDB"
        );
    }
    assert!(
        events_of(c, n, "Deployment", "std2", "BudgetClamped")
            .await
            .is_empty(),
        "standard at 2 replicas is not clamped"
    );
    // Counted with the event series: a reconcile error would retry and post it again.
    assert_eq!(
        occurrences(c, n, "bad", "InvalidConfiguration").await,
        1,
        "one warning, no retry storm"
    );
    let text = scrape(addr).await.expect("metrics");
    assert_eq!(
        sample(
            &text,
            "pdb_operator_reconciliation_errors_total",
            &[("controller", "deployment-pdb")]
        ),
        None,
        "no reconcile failed: {text}"
    );
    s.op.assert_running();
}

// ---------------------------------------------------------------------------------------------
// Scenarios 29, 30, 36 (custom default): custom budgets, with real evictions.

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn custom_budgets_reach_the_pdb_and_real_evictions_follow_them() {
    let s = scenario("pdbop-custom").await;
    let (c, n) = (&s.cluster.client, s.ns.name());
    let (deployments, pdbs) = (s.deployments.clone(), s.pdbs.clone());
    let pods: Api<Pod> = Api::namespaced(c.clone(), n);
    let custom = |cfg: Value, case: &str| {
        json!({"availabilityClass": "custom", "customPDBConfig": cfg,
               "workloadSelector": {"matchLabels": {"case": case}}})
    };
    create_policy(c, n, "min3", custom(json!({"minAvailable": 3}), "min3")).await;
    create_policy(
        c,
        n,
        "max1",
        custom(
            json!({"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
            "max1",
        ),
    )
    .await;
    create_policy(c, n, "min5", custom(json!({"minAvailable": 5}), "min5")).await;
    create_policy(c, n, "max0", custom(json!({"maxUnavailable": 0}), "max0")).await;
    create_paused(&deployments, "c3", 5, json!({"case": "min3"}), json!({})).await;
    create_paused(&deployments, "cmax0", 2, json!({"case": "max0"}), json!({})).await;
    for (name, replicas, case) in [("cmax", 3, "max1"), ("c5", 5, "min5")] {
        deployments
            .create(
                &PostParams::default(),
                &deployment_spec(name, replicas, json!({"case": case}), json!({}), false),
            )
            .await
            .unwrap();
    }

    // Scenario 29 and 36: minAvailable stays an integer; the apiserver defaulted the eviction
    // policy to IfHealthyBudget and it reaches the PDB.
    let p = wait_min(&pdbs, "c3", json!(3)).await;
    assert_eq!(max_unavailable(&p), None);
    assert_eq!(
        p.spec
            .as_ref()
            .unwrap()
            .unhealthy_pod_eviction_policy
            .as_deref(),
        Some("IfHealthyBudget")
    );
    // Scenario 30: maxUnavailable 0 → 1.
    let p = wait_pdb(&pdbs, "cmax0-pdb", "maxUnavailable 1", |p| {
        max_unavailable(p) == Some(json!(1))
    })
    .await;
    assert_eq!(min_available(&p), None);
    wait_deploy_event(c, n, "cmax0", "BudgetClamped", "").await;

    // Scenario 29 (corrected): maxUnavailable 1 and AlwaysAllow on the PDB; one eviction allowed.
    let p = wait_pdb(&pdbs, "cmax-pdb", "maxUnavailable 1", |p| {
        max_unavailable(p) == Some(json!(1))
    })
    .await;
    assert_eq!(min_available(&p), None);
    assert_eq!(
        p.spec
            .as_ref()
            .unwrap()
            .unhealthy_pod_eviction_policy
            .as_deref(),
        Some("AlwaysAllow")
    );
    let ready = ungate_and_wait_ready(&pods, "app=cmax", 3).await;
    wait_disruptions(&pdbs, "cmax-pdb", 3, 1).await;
    assert_eq!(
        evict(&pods, &ready[0].name_any()).await,
        Ok(()),
        "1st eviction under maxUnavailable 1"
    );
    let (code, message) = evict(&pods, &ready[1].name_any())
        .await
        .expect_err("2nd eviction refused");
    assert_eq!(code, 429, "{message}");
    assert!(message.contains("disruption budget"), "{message}");

    // Scenario 30 (corrected): custom minAvailable 5 of 5 → 4 + BudgetClamped; one eviction.
    wait_min(&pdbs, "c5", json!(4)).await;
    let clamp = wait_deploy_event(c, n, "c5", "BudgetClamped", "").await;
    assert!(clamp.contains('4'), "{clamp}");
    let ready = ungate_and_wait_ready(&pods, "app=c5", 5).await;
    wait_disruptions(&pdbs, "c5-pdb", 5, 1).await;
    assert_eq!(
        evict(&pods, &ready[0].name_any()).await,
        Ok(()),
        "1st eviction of the clamped budget"
    );
    let (code, message) = evict(&pods, &ready[1].name_any())
        .await
        .expect_err("2nd eviction refused");
    assert_eq!(code, 429, "{message}");
}
