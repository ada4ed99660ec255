//! Garbage collection, legacy finalizers, name conflicts across kinds and an idle
//! maintenance window (scenarios 9, 33-35, 40).

use super::*;

// ---------------------------------------------------------------------------------------------
// Scenarios 9 and 35: garbage collection and the reference operator's leftovers.

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn deleted_workloads_lose_their_pdb_by_gc_and_legacy_finalizers_are_stripped() {
    let cluster = TestCluster::connect().await;
    install_policy_crds(&cluster.client).await;
    let ns = cluster.namespace("pdbop-legacy").await;
    let n = ns.name();
    let c = &cluster.client;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    let sets: Api<StatefulSet> = Api::namespaced(c.clone(), n);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), n);
    let standard = json!({"pdboperator.io/availability-class": "standard"});
    let legacy = json!(["pdboperator.io/pdb-cleanup"]);

    // Before the operator runs: a Deployment the reference operator left with its finalizer,
    // already deleted (so it hangs in Terminating) ...
    let mut old = deployment_spec("old", 2, json!({}), standard.clone(), true);
    old.metadata.finalizers = Some(vec!["pdboperator.io/pdb-cleanup".into()]);
    deployments
        .create(&PostParams::default(), &old)
        .await
        .unwrap();
    deployments
        .delete("old", &DeleteParams::default())
        .await
        .unwrap();
    // ... one still alive with the finalizer ...
    let mut kept = deployment_spec("kept", 2, json!({}), standard.clone(), true);
    kept.metadata.finalizers = Some(vec!["pdboperator.io/pdb-cleanup".into()]);
    deployments
        .create(&PostParams::default(), &kept)
        .await
        .unwrap();
    // ... and (scenario 35) an LWS-internal StatefulSet with a stale managed PDB and the finalizer.
    let mut sts = stateful_set(
        "vllm",
        "vllm",
        2,
        json!({"leaderworkerset.sigs.k8s.io/name": "vllm"}),
        standard.clone(),
    );
    sts["metadata"]["finalizers"] = legacy.clone();
    let sts: StatefulSet = serde_json::from_value(sts).unwrap();
    let sts = sets.create(&PostParams::default(), &sts).await.unwrap();
    let stale: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "vllm-pdb", "labels": {"pdboperator.io/managed-by": "pdb-operator"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm",
                                          "uid": sts.uid().unwrap(), "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "vllm"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &stale).await.unwrap();

    let _op = start_operator(&cluster, n);
    // Scenario 9 (corrected): the finalizer goes and the deletion completes.
    wait_for("Terminating Deployment old gone", WAIT, || async {
        match deployments.get_opt("old").await {
            Ok(None) => Check::Done(()),
            Ok(Some(d)) => Check::NotYet(format!("finalizers {:?}", d.finalizers())),
            Err(e) => Check::NotYet(e.to_string()),
        }
    })
    .await;
    wait_for("legacy finalizer stripped from kept", WAIT, || async {
        let d = deployments.get("kept").await.unwrap();
        if d.finalizers().is_empty() {
            Check::Done(())
        } else {
            Check::NotYet(format!("{:?}", d.finalizers()))
        }
    })
    .await;
    let pdb = wait_min(&pdbs, "kept", json!("50%")).await;
    let kept_uid = deployments.get("kept").await.unwrap().uid().unwrap();
    assert_eq!(pdb.owner_references()[0].uid, kept_uid);
    // Deleting the managed Deployment: the garbage collector removes the PDB via its ownerReference.
    deployments
        .delete(
            "kept",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    wait_no_pdb(&pdbs, "kept-pdb").await;
    assert!(
        deployments.get_opt("kept").await.unwrap().is_none(),
        "deleted without any finalizer"
    );

    // Scenario 35.
    wait_no_pdb(&pdbs, "vllm-pdb").await;
    wait_for(
        "legacy finalizer stripped from StatefulSet vllm",
        WAIT,
        || async {
            let s = sets.get("vllm").await.unwrap();
            if s.finalizers().is_empty() {
                Check::Done(())
            } else {
                Check::NotYet(format!("{:?}", s.finalizers()))
            }
        },
    )
    .await;
    // No new PDB and no Unmanaged/Skipped noise: the LeaderWorkerSet path owns those pods.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        pdbs.get_opt("vllm-pdb").await.unwrap().is_none(),
        "no PDB for an LWS-internal StatefulSet"
    );
    assert!(
        events_of(c, n, "StatefulSet", "vllm", "PDBCreated")
            .await
            .is_empty()
    );
}

// ---------------------------------------------------------------------------------------------
// Scenarios 33 and 34 (policy-driven StatefulSet).

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn deployment_and_statefulset_sharing_a_name_get_one_pdb_and_statefulsets_follow_policies() {
    let s = scenario("pdbop-samename").await;
    let (c, n) = (&s.cluster.client, s.ns.name());
    let (deployments, pdbs) = (s.deployments.clone(), s.pdbs.clone());
    let sets: Api<StatefulSet> = Api::namespaced(c.clone(), n);
    let standard = json!({"pdboperator.io/availability-class": "standard"});

    // Scenario 34: policy-driven StatefulSet of 4.
    create_policy(
        c,
        n,
        "databases",
        json!({"availabilityClass": "high-availability",
        "workloadSelector": {"matchLabels": {"kind": "db"}}}),
    )
    .await;
    let redis: StatefulSet = serde_json::from_value(stateful_set(
        "redis",
        "redis",
        4,
        json!({"kind": "db"}),
        json!({}),
    ))
    .unwrap();
    sets.create(&PostParams::default(), &redis).await.unwrap();

    // Scenario 33: the Deployment takes web-pdb first (different pods, same name).
    let mut web = deployment_spec("web", 2, json!({}), standard.clone(), true);
    web.spec.template.metadata.as_mut().unwrap().labels = Some(labels(&[("app", "web-d")]));
    web.spec.selector.match_labels = Some(labels(&[("app", "web-d")]));
    deployments
        .create(&PostParams::default(), &web)
        .await
        .unwrap();
    let first = wait_pdb(&pdbs, "web-pdb", "owned by the Deployment", |p| {
        p.owner_references()
            .first()
            .is_some_and(|o| o.kind == "Deployment")
    })
    .await;
    let web_sts: StatefulSet =
        serde_json::from_value(stateful_set("web", "web-s", 2, json!({}), standard.clone()))
            .unwrap();
    sets.create(&PostParams::default(), &web_sts).await.unwrap();
    let note = wait_event_of(c, n, "StatefulSet", "web", "PDBConflict", "web-pdb").await;
    assert!(
        events_of(c, n, "Deployment", "web", "PDBConflict")
            .await
            .is_empty(),
        "{note}"
    );

    let p = wait_min(&pdbs, "redis", json!("75%")).await;
    assert_eq!(p.owner_references()[0].kind, "StatefulSet");
    assert_eq!(
        annotation(&p, "pdboperator.io/policy-source"),
        Some("databases")
    );
    let policies: Api<PDBPolicy> = Api::namespaced(c.clone(), n);
    let want = vec![format!("{n}/StatefulSet/redis")];
    wait_for("policy status lists the StatefulSet", WAIT, || async {
        let st = policies
            .get("databases")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        if st.applied_to_workloads == want && st.pdbs_managed == vec![format!("{n}/redis-pdb")] {
            Check::Done(())
        } else {
            Check::NotYet(format!("{st:?}"))
        }
    })
    .await;

    // The StatefulSet never patched the Deployment's PDB. The disruption controller keeps
    // writing the status (and so the resourceVersion), so compare what the operator writes:
    // the spec (generation), the owner and the annotations.
    let now = pdbs.get("web-pdb").await.unwrap();
    assert_eq!(
        now.metadata.generation, first.metadata.generation,
        "web-pdb spec untouched"
    );
    assert_eq!(
        now.owner_references(),
        first.owner_references(),
        "web-pdb owner untouched"
    );
    assert_eq!(
        now.annotations(),
        first.annotations(),
        "web-pdb annotations untouched"
    );
    assert_eq!(
        serde_json::to_value(&now.spec.as_ref().unwrap().selector).unwrap(),
        json!({"matchLabels": {"app": "web-d"}})
    );
    // Once the Deployment (and by GC its PDB) is gone, the StatefulSet's 30 s retry takes the name.
    deployments
        .delete(
            "web",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let p = wait_pdb(&pdbs, "web-pdb", "owned by the StatefulSet", |p| {
        p.owner_references()
            .first()
            .is_some_and(|o| o.kind == "StatefulSet")
    })
    .await;
    assert_eq!(
        serde_json::to_value(&p.spec.as_ref().unwrap().selector).unwrap(),
        json!({"matchLabels": {"app": "web-s"}})
    );
}

// ---------------------------------------------------------------------------------------------
// Scenario 40: an idle workload is relaxed and restored at the window bounds by the clock alone.

/// `HH:MM` of `t` in UTC.
fn hhmm(t: jiff::Timestamp) -> String {
    let z = t.to_zoned(jiff::tz::TimeZone::UTC);
    format!("{:02}:{:02}", z.hour(), z.minute())
}

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn idle_workload_is_relaxed_and_restored_at_the_window_bounds_without_any_change() {
    let s = scenario_with_metrics("pdbop-idle").await;
    let (c, n, addr) = (&s.cluster.client, s.ns.name(), s.addr);
    let (deployments, pdbs) = (s.deployments.clone(), s.pdbs.clone());

    // The operator reads the real clock (no injection), so the window is the next whole minute
    // (the one after if fewer than 20 s remain, so the PDB exists before it opens).
    let now = jiff::Timestamp::now();
    let secs = now.as_second();
    let mut start = secs - secs.rem_euclid(60) + 60;
    if start - secs < 20 {
        start += 60;
    }
    let start = jiff::Timestamp::from_second(start).unwrap();
    let end = start + jiff::SignedDuration::from_secs(60);
    create_policy(
        c,
        n,
        "nightly",
        json!({"availabilityClass": "standard",
        "workloadSelector": {"matchLabels": {"app": "idle"}},
        "maintenanceWindows": [{"start": hhmm(start), "end": hhmm(end), "timezone": "UTC"}]}),
    )
    .await;
    create_paused(&deployments, "idle", 4, json!({"app": "idle"}), json!({})).await;
    let before = wait_min(&pdbs, "idle", json!("50%")).await;
    assert!(
        jiff::Timestamp::now() < start,
        "PDB written before the window opened"
    );
    assert_eq!(annotation(&before, "pdboperator.io/maintenance-mode"), None);
    let idle = deployments.get("idle").await.unwrap();

    let relaxed = wait_for(
        "PDB relaxed at the window start",
        Duration::from_secs(150),
        || async {
            match pdbs.get("idle-pdb").await {
                Ok(p) if min_available(&p) == Some(json!(0)) => {
                    Check::Done((p, jiff::Timestamp::now()))
                }
                Ok(p) => Check::NotYet(format!("{:?}", p.spec)),
                Err(e) => Check::NotYet(e.to_string()),
            }
        },
    )
    .await;
    let (p, seen) = relaxed;
    assert!(seen >= start, "not relaxed before {start}: seen at {seen}");
    assert!(
        seen < start + jiff::SignedDuration::from_secs(15),
        "relaxed at {seen}, window opened {start}"
    );
    assert_eq!(
        annotation(&p, "pdboperator.io/maintenance-mode"),
        Some("true")
    );
    assert_eq!(
        annotation(&p, "pdboperator.io/maintenance-start"),
        Some(start.strftime("%Y-%m-%dT%H:%M:%SZ").to_string().as_str())
    );
    wait_deploy_event(c, n, "idle", "MaintenanceWindowActive", "").await;
    wait_metric(
        addr,
        "pdb_operator_maintenance_window_active",
        &[("namespace", n), ("deployment", "idle")],
        |v| v == 1.0,
    )
    .await;

    let restored = wait_for(
        "PDB restored at the window end",
        Duration::from_secs(150),
        || async {
            match pdbs.get("idle-pdb").await {
                Ok(p) if min_available(&p) == Some(json!("50%")) => {
                    Check::Done((p, jiff::Timestamp::now()))
                }
                Ok(p) => Check::NotYet(format!("{:?}", p.spec)),
                Err(e) => Check::NotYet(e.to_string()),
            }
        },
    )
    .await;
    let (p, seen) = restored;
    assert!(seen >= end, "not restored before {end}: seen at {seen}");
    assert!(
        seen < end + jiff::SignedDuration::from_secs(15),
        "restored at {seen}, window closed {end}"
    );
    assert_eq!(annotation(&p, "pdboperator.io/maintenance-mode"), None);
    assert_eq!(annotation(&p, "pdboperator.io/maintenance-start"), None);
    wait_deploy_event(c, n, "idle", "MaintenanceWindowEnded", "").await;
    // Nothing but the clock moved: the Deployment is the object it was.
    let after = deployments.get("idle").await.unwrap();
    assert_eq!(
        after.resource_version(),
        idle.resource_version(),
        "no change to the Deployment"
    );
}
