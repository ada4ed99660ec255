use super::*;
use crate::budget::BudgetValue::{Count, Percent};
use crate::crd::PDBPolicySpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rstest::rstest;
use serde_json::json;

fn now() -> Timestamp {
    "2026-06-24T12:00:00Z".parse().unwrap()
}

fn deployment(name: &str, replicas: Option<i32>, annotations: &[(&str, &str)]) -> WorkloadView {
    let app = BTreeMap::from([("app".to_string(), name.to_string())]);
    WorkloadView {
        kind: WorkloadKind::Deployment,
        meta: WorkloadMeta {
            namespace: "default".into(),
            name: name.into(),
            labels: app.clone(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        },
        uid: format!("uid-{name}"),
        replicas,
        selector: LabelSelector {
            match_labels: Some(app.clone()),
            match_expressions: None,
        },
        pod_labels: app,
        terminating: false,
    }
}

fn policy(name: &str, spec: serde_json::Value) -> PDBPolicy {
    let spec: PDBPolicySpec = serde_json::from_value(spec).unwrap();
    PDBPolicy {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

fn apply(d: Decision) -> DesiredPdb {
    match d {
        Decision::Apply(p) => *p,
        Decision::NoPdb(n) => panic!("expected a PDB, got {n:?}"),
    }
}

fn none(d: Decision) -> NoPdb {
    match d {
        Decision::NoPdb(n) => n,
        Decision::Apply(p) => panic!("expected no PDB, got {:?}", p.pdb),
    }
}

fn min_available(p: &DesiredPdb) -> Option<IntOrString> {
    p.pdb.spec.as_ref().and_then(|s| s.min_available.clone())
}

const CLASS: &str = keys::AVAILABILITY_CLASS;

#[test]
fn scenario_1_annotation_standard_pdb_shape() {
    let d = apply(desired_pdb_for_workload(
        &deployment("a", Some(3), &[(CLASS, "standard")]),
        &Policies::default(),
        now(),
    ));
    assert!(d.events.is_empty());
    insta::assert_json_snapshot!("scenario_1_deployment_standard", d.pdb);
}

// Scenarios 2 and 3: class values and the drain clamp at replicas n.
#[rstest]
#[case::nc_10("non-critical", 10, IntOrString::String("20%".into()), false)]
#[case::ha_10("high-availability", 10, IntOrString::String("75%".into()), false)]
#[case::mc_10("mission-critical", 10, IntOrString::String("90%".into()), false)]
#[case::ha_3("high-availability", 3, IntOrString::Int(2), true)]
#[case::mc_3("mission-critical", 3, IntOrString::Int(2), true)]
#[case::mc_2("mission-critical", 2, IntOrString::Int(1), true)]
#[case::mc_9("mission-critical", 9, IntOrString::Int(8), true)]
#[case::standard_2("standard", 2, IntOrString::String("50%".into()), false)]
fn class_budgets(
    #[case] class: &str,
    #[case] replicas: i32,
    #[case] want: IntOrString,
    #[case] clamped: bool,
) {
    let d = apply(desired_pdb_for_workload(
        &deployment("a", Some(replicas), &[(CLASS, class)]),
        &Policies::default(),
        now(),
    ));
    assert_eq!(min_available(&d), Some(want));
    assert_eq!(
        d.events.iter().any(|e| e.reason == reasons::BUDGET_CLAMPED),
        clamped
    );
}

// Scenario 7: replicas 1, 0 or unset → Skipped; unconfigured → only Unmanaged (scenario 10).
#[rstest]
#[case::one(Some(1))]
#[case::zero(Some(0))]
#[case::unset(None)]
fn too_few_replicas(#[case] replicas: Option<i32>) {
    let n = none(desired_pdb_for_workload(
        &deployment("a", replicas, &[(CLASS, "standard")]),
        &Policies::default(),
        now(),
    ));
    let e = n.event.unwrap();
    assert_eq!(e.reason, reasons::DEPLOYMENT_SKIPPED);
    assert!(e.message.contains("insufficient replicas"), "{}", e.message);
    assert!(n.delete_owned_pdb);
    let n = none(desired_pdb_for_workload(
        &deployment("a", replicas, &[]),
        &Policies::default(),
        now(),
    ));
    assert_eq!(n.event.unwrap().reason, reasons::DEPLOYMENT_UNMANAGED);
}

#[test]
fn unconfigured_workload_is_unmanaged_and_its_pdb_removed() {
    let n = none(desired_pdb_for_workload(
        &deployment("a", Some(3), &[]),
        &Policies::default(),
        now(),
    ));
    assert_eq!(n.event.unwrap().reason, reasons::DEPLOYMENT_UNMANAGED);
    assert!(n.delete_owned_pdb);
    assert_eq!(n.cause, "unmanaged");
}

#[test]
fn scenario_13_policy_driven_pdb_records_the_policy() {
    let policies = [policy(
        "frontend",
        json!({"availabilityClass": "standard", "workloadSelector": {"matchLabels": {"tier": "frontend"}}}),
    )];
    let mut w = deployment("web", Some(2), &[]);
    w.meta.labels.insert("tier".into(), "frontend".into());
    let p = Policies {
        namespaced: &policies,
        ..Default::default()
    };
    let d = apply(desired_pdb_for_workload(&w, &p, now()));
    assert_eq!(min_available(&d), Some(IntOrString::String("50%".into())));
    insta::assert_json_snapshot!("scenario_13_policy_standard", d.pdb);
}

#[test]
fn full_selector_is_copied_including_expressions() {
    let mut w = deployment("a", Some(4), &[(CLASS, "standard")]);
    w.selector = LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "app".into(),
            operator: "In".into(),
            values: Some(vec!["a".into(), "b".into()]),
        }]),
    };
    let d = apply(desired_pdb_for_workload(&w, &Policies::default(), now()));
    assert_eq!(d.pdb.spec.unwrap().selector, Some(w.selector));
}

#[test]
fn custom_max_unavailable_and_eviction_policy_reach_the_pdb() {
    // Scenario 29 (corrected).
    let policies = [policy(
        "custom",
        json!({"availabilityClass": "custom", "customPDBConfig": {"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"}, "workloadSelector": {"matchLabels": {"app": "a"}}}),
    )];
    let p = Policies {
        namespaced: &policies,
        ..Default::default()
    };
    let d = apply(desired_pdb_for_workload(
        &deployment("a", Some(5), &[]),
        &p,
        now(),
    ));
    let spec = d.pdb.spec.unwrap();
    assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(spec.min_available, None);
    assert_eq!(
        spec.unhealthy_pod_eviction_policy.as_deref(),
        Some("AlwaysAllow")
    );
}

#[test]
fn maintenance_window_relaxes_and_names_its_start() {
    // Scenario 39: clock Wed 03:00 UTC, window 02:00-04:00.
    let policies = [policy(
        "mw",
        json!({"availabilityClass": "standard", "maintenanceWindows": [{"start": "02:00", "end": "04:00"}], "workloadSelector": {"matchLabels": {"app": "a"}}}),
    )];
    let p = Policies {
        namespaced: &policies,
        ..Default::default()
    };
    let at_three: Timestamp = "2026-06-24T03:00:00Z".parse().unwrap();
    let d = apply(desired_pdb_for_workload(
        &deployment("a", Some(4), &[]),
        &p,
        at_three,
    ));
    assert!(d.only_if_exists, "no PDB is created during a window");
    assert_eq!(min_available(&d), Some(IntOrString::Int(0)));
    let ann = d.pdb.metadata.annotations.clone().unwrap();
    assert_eq!(
        ann.get(keys::MAINTENANCE_MODE).map(String::as_str),
        Some("true")
    );
    assert_eq!(
        ann.get(keys::MAINTENANCE_START).map(String::as_str),
        Some("2026-06-24T02:00:00Z")
    );
    assert_eq!(d.requeue_after, Duration::from_secs(3600));
    assert_eq!(d.budget, BudgetRule::MinAvailable(Percent(50)));

    // At 04:00 the budget is back and both annotations are gone.
    let at_four: Timestamp = "2026-06-24T04:00:00Z".parse().unwrap();
    let restored = apply(desired_pdb_for_workload(
        &deployment("a", Some(4), &[]),
        &p,
        at_four,
    ));
    assert!(!restored.only_if_exists);
    assert_eq!(
        min_available(&restored),
        Some(IntOrString::String("50%".into()))
    );
    let ann = restored.pdb.metadata.annotations.clone().unwrap();
    assert!(
        !ann.contains_key(keys::MAINTENANCE_MODE) && !ann.contains_key(keys::MAINTENANCE_START)
    );
    assert_eq!(
        restored
            .window_transition_event(Some(&d.pdb))
            .unwrap()
            .reason,
        reasons::MAINTENANCE_WINDOW_ENDED
    );
    assert_eq!(
        d.window_transition_event(Some(&restored.pdb))
            .unwrap()
            .reason,
        reasons::MAINTENANCE_WINDOW_ACTIVE
    );
}

#[test]
fn bad_annotation_window_warns_and_is_ignored() {
    let d = apply(desired_pdb_for_workload(
        &deployment(
            "a",
            Some(4),
            &[
                (CLASS, "standard"),
                (keys::MAINTENANCE_WINDOW, "25:00-04:00"),
            ],
        ),
        &Policies::default(),
        now(),
    ));
    assert_eq!(d.events[0].reason, reasons::INVALID_CONFIGURATION);
    assert!(!d.window.open);
}

#[test]
fn lws_labelled_statefulset_gets_no_pdb() {
    let mut w = deployment("vllm", Some(4), &[(CLASS, "standard")]);
    w.kind = WorkloadKind::StatefulSet;
    w.meta.labels.insert(keys::LWS_NAME.into(), "vllm".into());
    let n = none(desired_pdb_for_workload(&w, &Policies::default(), now()));
    assert!(n.event.is_none() && n.delete_owned_pdb);
}

#[test]
fn terminating_workload_is_left_to_garbage_collection() {
    let mut w = deployment("a", Some(4), &[(CLASS, "standard")]);
    w.terminating = true;
    assert!(!none(desired_pdb_for_workload(&w, &Policies::default(), now())).delete_owned_pdb);
}

#[test]
fn workload_name_annotation_becomes_a_label() {
    let d = apply(desired_pdb_for_workload(
        &deployment(
            "web-7",
            Some(4),
            &[
                (CLASS, "standard"),
                (keys::WORKLOAD_NAME, "webapp-component"),
            ],
        ),
        &Policies::default(),
        now(),
    ));
    assert_eq!(
        d.pdb
            .metadata
            .labels
            .unwrap()
            .get(keys::WORKLOAD)
            .map(String::as_str),
        Some("webapp-component")
    );
}

fn lws(replicas: i32, size: i32) -> LeaderWorkerSetView {
    LeaderWorkerSetView {
        meta: WorkloadMeta {
            namespace: "default".into(),
            name: "vllm".into(),
            labels: BTreeMap::from([("app".to_string(), "vllm".to_string())]),
            annotations: BTreeMap::new(),
        },
        uid: "uid-vllm".into(),
        replicas: Some(replicas),
        size: Some(size),
        terminating: false,
    }
}

#[test]
fn scenario_42_leader_worker_set() {
    let policies = [policy(
        "mc",
        json!({"availabilityClass": "mission-critical", "workloadSelector": {"matchLabels": {"app": "vllm"}}}),
    )];
    let p = Policies {
        namespaced: &policies,
        ..Default::default()
    };
    let d = apply(desired_pdb_for_leader_worker_set(&lws(4, 8), &p, now()));
    assert_eq!(d.budget, BudgetRule::MinAvailable(Count(24)));
    insta::assert_json_snapshot!("scenario_42_leader_worker_set", d.pdb);
}

#[rstest]
#[case::single_group(1, 8, None)]
#[case::size_one_ha_4(4, 1, Some(IntOrString::String("75%".into())))]
#[case::size_one_ha_3(3, 1, Some(IntOrString::Int(2)))]
fn scenario_43_leader_worker_set_edges(
    #[case] replicas: i32,
    #[case] size: i32,
    #[case] want: Option<IntOrString>,
) {
    let policies = [policy(
        "ha",
        json!({"availabilityClass": "high-availability", "workloadSelector": {"matchLabels": {"app": "vllm"}}}),
    )];
    let p = Policies {
        namespaced: &policies,
        ..Default::default()
    };
    match (
        desired_pdb_for_leader_worker_set(&lws(replicas, size), &p, now()),
        want,
    ) {
        (Decision::Apply(d), Some(v)) => assert_eq!(min_available(&d), Some(v)),
        (Decision::NoPdb(n), None) => {
            assert_eq!(n.event.unwrap().reason, reasons::LEADERWORKERSET_SKIPPED)
        }
        (other, want) => panic!("got {other:?}, wanted {want:?}"),
    }
}

#[test]
fn decision_helpers_expose_requeue_and_events() {
    let d = desired_pdb_for_workload(
        &deployment("a", Some(3), &[(CLASS, "mission-critical")]),
        &Policies::default(),
        now(),
    );
    assert_eq!(d.requeue_after(), Some(Duration::from_secs(3600)));
    assert_eq!(
        d.events().iter().map(|e| e.reason).collect::<Vec<_>>(),
        vec![reasons::BUDGET_CLAMPED]
    );
    assert!(
        d.steps()
            .iter()
            .any(|s| s.label == "clamped to pods - 1" && s.value == "2")
    );
    let n = desired_pdb_for_workload(&deployment("a", Some(3), &[]), &Policies::default(), now());
    assert_eq!(n.requeue_after(), None);
    assert_eq!(n.events()[0].reason, reasons::DEPLOYMENT_UNMANAGED);
}
