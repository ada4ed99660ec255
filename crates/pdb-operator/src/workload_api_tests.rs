use super::*;
use crate::crd::{PDBPolicy, PDBPolicySpec};
use crate::desired::DesiredPdb;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rstest::rstest;
use serde_json::json;

fn now() -> Timestamp {
    "2026-06-24T12:00:00Z".parse().unwrap()
}

fn trainer(templates: serde_json::Value) -> GangWorkloadView {
    let w: Workload = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "trainer", "namespace": "default", "uid": "uid-trainer", "labels": {"app": "trainer"}},
        "spec": templates,
    }))
    .unwrap();
    GangWorkloadView::from_workload(&w).unwrap()
}

fn gang(min_count: i32, mode: &str) -> GangWorkloadView {
    trainer(json!({"podGroupTemplates": [{
        "name": "workers",
        "schedulingPolicy": {"gang": {"minCount": min_count}},
        "disruptionMode": {mode: {}},
    }]}))
}

fn groups(n: usize, min_count: i32) -> Vec<PodGroupView> {
    (0..n)
        .map(|i| PodGroupView {
            name: format!("trainer-workers-{i}"),
            workload_name: Some("trainer".into()),
            template_name: Some("workers".into()),
            min_count: Some(min_count),
        })
        .collect()
}

fn pods(sizes: &[usize]) -> Vec<PodView> {
    let mut out = Vec::new();
    for (g, size) in sizes.iter().enumerate() {
        for i in 0..*size {
            let role = if i == 0 { "leader" } else { "worker" };
            out.push(PodView {
                name: format!("trainer-{g}-{i}"),
                uid: format!("uid-{g}-{i}"),
                labels: BTreeMap::from([
                    ("app".to_string(), "trainer".to_string()),
                    ("role".to_string(), role.to_string()),
                ]),
                pod_group_name: Some(format!("trainer-workers-{g}")),
            });
        }
    }
    out
}

fn policy(class: &str) -> Vec<PDBPolicy> {
    let spec: PDBPolicySpec = serde_json::from_value(json!({
        "availabilityClass": class,
        "enforcement": "strict",
        "workloadSelector": {"matchLabels": {"app": "trainer"}},
    }))
    .unwrap();
    vec![PDBPolicy {
        metadata: ObjectMeta {
            name: Some("training-critical".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec,
        status: None,
    }]
}

fn decide(w: &GangWorkloadView, g: &[PodGroupView], p: &[PodView], class: &str) -> Decision {
    let policies = policy(class);
    desired_pdb_for_gang(
        w,
        g,
        p,
        &Policies {
            namespaced: &policies,
            ..Default::default()
        },
        now(),
    )
}

fn applied(d: Decision) -> DesiredPdb {
    match d {
        Decision::Apply(p) => *p,
        Decision::NoPdb(n) => panic!("expected a PDB, got {n:?}"),
    }
}

fn reason(d: Decision) -> Option<&'static str> {
    match d {
        Decision::NoPdb(n) => n.event.map(|e| e.reason),
        Decision::Apply(p) => panic!("expected no PDB, got {:?}", p.pdb),
    }
}

#[test]
fn seed_worked_example_four_groups_of_two_mission_critical() {
    // Scenario 46 / seed 003: minAvailable 6, selector {app: trainer}, owned by the Workload.
    let d = applied(decide(
        &gang(2, "all"),
        &groups(4, 2),
        &pods(&[2, 2, 2, 2]),
        "mission-critical",
    ));
    let spec = d.pdb.spec.clone().unwrap();
    assert_eq!(spec.min_available, Some(IntOrString::Int(6)));
    let rows: Vec<(String, String)> = d
        .steps
        .iter()
        .map(|s| (s.label.clone(), s.value.clone()))
        .collect();
    assert!(
        rows.contains(&("ceil(90% × 4 groups)".into(), "4".into())),
        "{rows:?}"
    );
    assert!(
        rows.contains(&("clamped to groups - 1".into(), "3".into())),
        "{rows:?}"
    );
    assert!(
        rows.contains(&("minAvailable = 3 × 2".into(), "6".into())),
        "{rows:?}"
    );
    insta::assert_json_snapshot!("seed_003_trainer_pdb", d.pdb);
}

// Note §11.4 shape table through the whole decision (W1–W13, W16).
#[rstest]
#[case::w3_standard(2, "all", &[2, 2, 2, 2], "standard", Some(4), None)]
#[case::w4_non_critical(2, "all", &[2, 2, 2], "non-critical", Some(2), None)]
#[case::w5_single_all_group(8, "all", &[8], "mission-critical", None, Some(reasons::WORKLOAD_SKIPPED))]
#[case::w6(3, "single", &[6], "standard", Some(3), None)]
#[case::w9(4, "single", &[4], "non-critical", None, Some(reasons::WORKLOAD_SKIPPED))]
#[case::w10(3, "single", &[8], "mission-critical", Some(7), None)]
#[case::w11(3, "single", &[4, 4, 4], "standard", Some(11), None)]
#[case::w12(2, "single", &[4, 4], "standard", Some(6), None)]
#[case::w13(4, "single", &[4, 4], "standard", None, Some(reasons::WORKLOAD_SKIPPED))]
#[case::w16_no_pods(2, "all", &[0, 0], "standard", None, Some(reasons::WORKLOAD_PDB_DEFERRED))]
fn shape_table(
    #[case] min_count: i32,
    #[case] mode: &str,
    #[case] sizes: &[usize],
    #[case] class: &str,
    #[case] want: Option<i32>,
    #[case] event: Option<&str>,
) {
    let d = decide(
        &gang(min_count, mode),
        &groups(sizes.len(), min_count),
        &pods(sizes),
        class,
    );
    match want {
        Some(m) => assert_eq!(
            applied(d).pdb.spec.unwrap().min_available,
            Some(IntOrString::Int(m))
        ),
        None => assert_eq!(reason(d), event),
    }
}

#[test]
fn single_all_mode_group_message_says_why() {
    match decide(
        &gang(8, "all"),
        &groups(1, 8),
        &pods(&[8]),
        "mission-critical",
    ) {
        Decision::NoPdb(n) => assert!(n.event.unwrap().message.contains("restarts as a unit")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn deferral_retries_after_thirty_seconds() {
    match decide(&gang(2, "all"), &groups(4, 2), &[], "standard") {
        Decision::NoPdb(n) => {
            assert_eq!(n.event.unwrap().reason, reasons::WORKLOAD_PDB_DEFERRED);
            assert_eq!(n.retry_after, Some(RETRY_AFTER));
            assert!(n.delete_owned_pdb);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unsupported_shapes() {
    // Scenario 51.
    let two = trainer(json!({"podGroupTemplates": [
        {"name": "a", "schedulingPolicy": {"gang": {"minCount": 2}}},
        {"name": "b", "schedulingPolicy": {"gang": {"minCount": 2}}},
    ]}));
    assert_eq!(
        reason(decide(&two, &groups(2, 2), &pods(&[2, 2]), "standard")),
        Some(reasons::WORKLOAD_UNSUPPORTED)
    );
    let composite = trainer(json!({"compositePodGroupTemplates": [
        {"name": "c", "schedulingPolicy": {"gang": {"minGroupCount": 2}}},
    ]}));
    assert_eq!(
        reason(decide(
            &composite,
            &groups(2, 2),
            &pods(&[2, 2]),
            "standard"
        )),
        Some(reasons::WORKLOAD_UNSUPPORTED)
    );
    let basic =
        trainer(json!({"podGroupTemplates": [{"name": "a", "schedulingPolicy": {"basic": {}}}]}));
    assert_eq!(
        reason(decide(&basic, &groups(2, 2), &pods(&[2, 2]), "standard")),
        None
    );
}

#[test]
fn stranger_pod_makes_the_selector_unresolvable() {
    // Scenario 53 / W15.
    let mut all = pods(&[2, 2, 2, 2]);
    all.push(PodView {
        name: "stranger".into(),
        uid: "uid-stranger".into(),
        labels: BTreeMap::from([("app".to_string(), "trainer".to_string())]),
        pod_group_name: None,
    });
    match decide(&gang(2, "all"), &groups(4, 2), &all, "mission-critical") {
        Decision::NoPdb(n) => {
            let e = n.event.unwrap();
            assert_eq!(e.reason, reasons::WORKLOAD_SELECTOR_UNRESOLVABLE);
            assert!(e.message.contains("stranger"), "{}", e.message);
            assert_eq!(n.retry_after, Some(RETRY_AFTER));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn selector_keeps_only_shared_labels() {
    let members = pods(&[2, 2]);
    let refs: Vec<&PodView> = members.iter().collect();
    assert_eq!(
        derive_gang_selector(&refs, &members),
        Ok(BTreeMap::from([("app".to_string(), "trainer".to_string())]))
    );
    let disjoint = [
        PodView {
            name: "a".into(),
            uid: "1".into(),
            labels: BTreeMap::from([("x".into(), "1".into())]),
            pod_group_name: None,
        },
        PodView {
            name: "b".into(),
            uid: "2".into(),
            labels: BTreeMap::from([("y".into(), "1".into())]),
            pod_group_name: None,
        },
    ];
    let refs: Vec<&PodView> = disjoint.iter().collect();
    assert_eq!(
        derive_gang_selector(&refs, &disjoint),
        Err(SelectorProblem::NoSharedLabels)
    );
}

#[test]
fn leader_worker_set_pods_are_left_alone() {
    // Scenario 52.
    let mut all = pods(&[2, 2]);
    for p in &mut all {
        p.labels.insert(keys::LWS_NAME.into(), "vllm".into());
    }
    match decide(&gang(2, "all"), &groups(2, 2), &all, "standard") {
        Decision::NoPdb(n) => assert!(n.event.is_none() && n.delete_owned_pdb),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unconfigured_workload_only_gets_unmanaged() {
    // Scenario 54: no pods and no configuration.
    let d = desired_pdb_for_gang(
        &gang(2, "all"),
        &groups(4, 2),
        &[],
        &Policies::default(),
        now(),
    );
    assert_eq!(reason(d), Some(reasons::WORKLOAD_UNMANAGED));
}

#[test]
fn restarting_group_keeps_the_budget() {
    // One all-mode group is down (0 pods); the budget must not loosen to 4.
    let d = applied(decide(
        &gang(2, "all"),
        &groups(4, 2),
        &pods(&[0, 2, 2, 2]),
        "mission-critical",
    ));
    assert_eq!(d.pdb.spec.unwrap().min_available, Some(IntOrString::Int(6)));
}

#[test]
fn uneven_all_mode_groups() {
    // Scenario 55 / W14: groups 4, 2, 2 under mission-critical → 4.
    let d = applied(decide(
        &gang(0, "all"),
        &groups(3, 0),
        &pods(&[4, 2, 2]),
        "mission-critical",
    ));
    assert_eq!(d.pdb.spec.unwrap().min_available, Some(IntOrString::Int(4)));
}

#[test]
fn members_come_from_the_workloads_own_groups() {
    let mut all = pods(&[2, 2]);
    // A pod of another Workload's group with the same labels is not a member.
    all.push(PodView {
        name: "other-0".into(),
        uid: "uid-other".into(),
        labels: BTreeMap::from([("app".to_string(), "trainer".to_string())]),
        pod_group_name: Some("other-workers-0".into()),
    });
    let mut g = groups(2, 2);
    g.push(PodGroupView {
        name: "other-workers-0".into(),
        workload_name: Some("other".into()),
        template_name: Some("workers".into()),
        min_count: Some(1),
    });
    let (found, members) = gang_members("trainer", "workers", &g, &all);
    assert_eq!(found.len(), 2);
    assert_eq!(members.len(), 4);
    assert!(members.iter().all(|p| p.name.starts_with("trainer-")));
}

#[test]
fn placement_labels_copied_from_the_node_never_enter_the_selector() {
    let pod = |name: &str, uid: &str| PodView {
        name: name.into(),
        uid: uid.into(),
        labels: [
            ("app".to_string(), "trainer".to_string()),
            (
                "topology.kubernetes.io/zone".to_string(),
                "zone-0".to_string(),
            ),
            ("kubernetes.io/hostname".to_string(), "node-0".to_string()),
        ]
        .into(),
        pod_group_name: Some("g".into()),
    };
    let (a, b) = (pod("a", "1"), pod("b", "2"));
    let selector = derive_gang_selector(&[&a, &b], &[a.clone(), b.clone()]).unwrap();
    assert_eq!(
        selector,
        [("app".to_string(), "trainer".to_string())].into()
    );
}
