//! Strict, flexible and advisory policies against workload annotations (scenarios 18-23, 36).

use super::*;

// ---------------------------------------------------------------------------------------------
// Scenarios 18–23 and 36 (flexible default minimum): every enforcement mode on real objects.

#[tokio::test]
#[ignore = "needs the local control plane; ./scripts/test.sh runs it (or tools/control-plane/cp up, then cargo test -- --include-ignored)"]
async fn strict_flexible_and_advisory_policies_treat_annotations_as_the_decision_table_says() {
    let s = scenario_with_metrics("pdbop-enforce").await;
    let (c, n, addr) = (&s.cluster.client, s.ns.name(), s.addr);
    let (deployments, pdbs) = (s.deployments.clone(), s.pdbs.clone());
    let sel = |case: &str| json!({"matchLabels": {"case": case}});
    let policies = [
        (
            "strict",
            json!({"availabilityClass": "mission-critical", "enforcement": "strict", "workloadSelector": sel("strict")}),
        ),
        (
            "flex19",
            json!({"availabilityClass": "standard", "enforcement": "flexible", "minimumClass": "standard", "workloadSelector": sel("flex19")}),
        ),
        (
            "flex20",
            json!({"availabilityClass": "high-availability", "enforcement": "flexible", "minimumClass": "standard", "workloadSelector": sel("flex20")}),
        ),
        (
            "flex20c",
            json!({"availabilityClass": "mission-critical", "enforcement": "flexible", "minimumClass": "mission-critical", "workloadSelector": sel("flex20c")}),
        ),
        (
            "flex36",
            json!({"availabilityClass": "high-availability", "enforcement": "flexible", "workloadSelector": sel("flex36")}),
        ),
        (
            "adv",
            json!({"availabilityClass": "standard", "workloadSelector": sel("adv")}),
        ),
        (
            "advno",
            json!({"availabilityClass": "standard", "enforcement": "advisory", "allowOverride": false, "workloadSelector": sel("advno")}),
        ),
        (
            "reason",
            json!({"availabilityClass": "standard", "overrideRequiresReason": true, "workloadSelector": sel("reason")}),
        ),
        (
            "approve",
            json!({"availabilityClass": "standard", "overrideRequiresAnnotation": "approved-by", "workloadSelector": sel("approve")}),
        ),
    ];
    for (name, spec) in policies {
        create_policy(c, n, name, spec).await;
    }
    let ann = |class: &str, extra: Value| {
        let mut a = json!({"pdboperator.io/availability-class": class});
        for (k, v) in extra.as_object().unwrap() {
            a[k] = v.clone();
        }
        a
    };
    let none = json!({});
    let workloads = [
        ("s18", "strict", ann("non-critical", none.clone())),
        ("f19-low", "flex19", ann("non-critical", none.clone())),
        ("f19-high", "flex19", ann("mission-critical", none.clone())),
        ("f20-std", "flex20", ann("standard", none.clone())),
        ("f20-low", "flex20", ann("non-critical", none.clone())),
        ("f20-custom", "flex20c", ann("custom", none.clone())),
        ("f36", "flex36", ann("standard", none.clone())),
        ("a21", "adv", ann("mission-critical", none.clone())),
        ("a21-no", "advno", ann("mission-critical", none.clone())),
        (
            "a22-noreason",
            "reason",
            ann("mission-critical", none.clone()),
        ),
        (
            "a22-reason",
            "reason",
            ann(
                "mission-critical",
                json!({"pdboperator.io/override-reason": "peak season"}),
            ),
        ),
        (
            "a23-missing",
            "approve",
            ann("mission-critical", none.clone()),
        ),
        (
            "a23-empty",
            "approve",
            ann("mission-critical", json!({"approved-by": ""})),
        ),
        (
            "a23-ok",
            "approve",
            ann("mission-critical", json!({"approved-by": "alice"})),
        ),
    ];
    for (name, case, annotations) in workloads {
        create_paused(&deployments, name, 10, json!({"case": case}), annotations).await;
    }
    // The same rows for StatefulSets (Ours: every kind gets the events).
    let sets: Api<StatefulSet> = Api::namespaced(c.clone(), n);
    for (name, case, class) in [
        ("s18-sts", "strict", "non-critical"),
        ("f19-sts", "flex19", "non-critical"),
    ] {
        let sts = stateful_set(
            name,
            name,
            10,
            json!({"case": case}),
            json!({"pdboperator.io/availability-class": class}),
        );
        sets.create(
            &PostParams::default(),
            &serde_json::from_value(sts).unwrap(),
        )
        .await
        .unwrap();
    }

    // (workload, minAvailable, policy-source, enforcement-mode, effective class label)
    let expected = [
        ("s18", "90%", "strict", "strict", "mission-critical"),
        ("f19-low", "50%", "flex19", "flexible", "standard"),
        ("f19-high", "90%", "flex19", "flexible", "mission-critical"),
        ("f20-std", "50%", "flex20", "flexible", "standard"),
        ("f20-low", "50%", "flex20", "flexible", "standard"),
        (
            "f20-custom",
            "90%",
            "flex20c",
            "flexible",
            "mission-critical",
        ),
        ("f36", "75%", "flex36", "flexible", "high-availability"),
        ("a21", "90%", "adv", "advisory", "mission-critical"),
        ("a21-no", "50%", "advno", "advisory", "standard"),
        ("a22-noreason", "50%", "reason", "advisory", "standard"),
        (
            "a22-reason",
            "90%",
            "reason",
            "advisory",
            "mission-critical",
        ),
        ("a23-missing", "50%", "approve", "advisory", "standard"),
        ("a23-empty", "50%", "approve", "advisory", "standard"),
        ("a23-ok", "90%", "approve", "advisory", "mission-critical"),
    ];
    for (name, min, source, mode, class) in expected {
        let p = wait_min(&pdbs, name, json!(min)).await;
        assert_eq!(
            annotation(&p, "pdboperator.io/policy-source"),
            Some(source),
            "{name}"
        );
        assert_eq!(
            annotation(&p, "pdboperator.io/enforcement-mode"),
            Some(mode),
            "{name}"
        );
        assert_eq!(
            p.labels()["pdboperator.io/availability-class"],
            class,
            "{name}"
        );
        assert_eq!(max_unavailable(&p), None, "{name}");
    }

    // Events of the decision table (note §5).
    wait_deploy_event(
        c,
        n,
        "s18",
        "PolicyEnforced",
        "Annotation override blocked by strict policy strict",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "f19-low",
        "BelowMinimum",
        "Annotation non-critical below minimum standard",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "f19-high",
        "AnnotationAccepted",
        "Annotation mission-critical accepted by flexible policy flex19 (minimum standard)",
    )
    .await;
    wait_deploy_event(c, n, "f20-std", "AnnotationAccepted", "").await;
    wait_deploy_event(
        c,
        n,
        "f20-low",
        "BelowMinimum",
        "Annotation non-critical below minimum standard, using standard",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "f20-custom",
        "BelowMinimum",
        "Annotation custom below minimum mission-critical",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "f36",
        "BelowMinimum",
        "Annotation standard below minimum high-availability, using high-availability",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "a22-noreason",
        "OverrideRequiresReason",
        "pdboperator.io/override-reason",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "a23-missing",
        "OverrideRequiresAnnotation",
        "approved-by",
    )
    .await;
    wait_deploy_event(
        c,
        n,
        "a23-empty",
        "OverrideRequiresAnnotation",
        "approved-by",
    )
    .await;
    // Accepted overrides and the silent rows raise no warning.
    for (name, reason) in [
        ("a21", "OverrideRequiresAnnotation"),
        ("a21-no", "OverrideRequiresAnnotation"),
        ("a22-reason", "OverrideRequiresReason"),
        ("a23-ok", "OverrideRequiresAnnotation"),
        ("f19-high", "BelowMinimum"),
        ("f20-std", "BelowMinimum"),
    ] {
        assert!(
            events_of(c, n, "Deployment", name, reason).await.is_empty(),
            "{name}: no {reason}"
        );
    }

    let p = wait_min(&pdbs, "s18-sts", json!("90%")).await;
    assert_eq!(p.owner_references()[0].kind, "StatefulSet");
    wait_event_of(
        c,
        n,
        "StatefulSet",
        "s18-sts",
        "PolicyEnforced",
        "blocked by strict policy strict",
    )
    .await;
    wait_min(&pdbs, "f19-sts", json!("50%")).await;
    wait_event_of(
        c,
        n,
        "StatefulSet",
        "f19-sts",
        "BelowMinimum",
        "Annotation non-critical below minimum standard",
    )
    .await;

    // Override counter: every (result, reason) pair of note §5.
    for (result, reason) in [
        ("blocked", "strict-enforcement"),
        ("accepted", "meets-minimum"),
        ("rejected", "below-minimum"),
        ("blocked", "override-not-allowed"),
        ("blocked", "missing-required-annotation"),
        ("blocked", "missing-reason"),
        ("accepted", "advisory-mode"),
    ] {
        wait_metric(
            addr,
            "pdb_operator_override_attempts_total",
            &[("result", result), ("reason", reason), ("namespace", n)],
            |v| v >= 1.0,
        )
        .await;
    }
}
