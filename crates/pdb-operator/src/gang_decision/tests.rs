use super::*;
use crate::crd::{PDBPolicy, PDBPolicySpec};
use crate::desired::DesiredPdb;
use k8s_openapi::api::scheduling::v1beta1::Workload;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rstest::rstest;
use serde_json::json;

pub(super) fn now() -> Timestamp {
    "2026-06-24T12:00:00Z".parse().unwrap()
}

pub(super) fn trainer(templates: serde_json::Value) -> GangWorkloadView {
    let w: Workload = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "trainer", "namespace": "default", "uid": "uid-trainer", "labels": {"app": "trainer"}},
        "spec": templates,
    }))
    .unwrap();
    GangWorkloadView::from_workload(&w).unwrap()
}

pub(super) fn gang(min_count: i32, mode: &str) -> GangWorkloadView {
    trainer(json!({"podGroupTemplates": [{
        "name": "workers",
        "schedulingPolicy": {"gang": {"minCount": min_count}},
        "disruptionMode": {mode: {}},
    }]}))
}

pub(super) fn groups(n: usize, min_count: i32) -> Vec<PodGroupView> {
    (0..n)
        .map(|i| PodGroupView {
            name: format!("trainer-workers-{i}"),
            workload_name: Some("trainer".into()),
            template_name: Some("workers".into()),
            min_count: Some(min_count),
            created: None,
        })
        .collect()
}

pub(super) fn pods(sizes: &[usize]) -> Vec<PodView> {
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
                ..Default::default()
            });
        }
    }
    out
}

pub(super) fn policy(class: &str) -> Vec<PDBPolicy> {
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

pub(super) fn decide(
    w: &GangWorkloadView,
    g: &[PodGroupView],
    p: &[PodView],
    class: &str,
) -> Decision {
    decide_with(
        w,
        &GangFacts {
            pod_groups: g,
            pods: p,
            ..Default::default()
        },
        class,
    )
}

pub(super) fn decide_with(w: &GangWorkloadView, facts: &GangFacts<'_>, class: &str) -> Decision {
    let policies = policy(class);
    desired_pdb_for_gang(
        w,
        facts,
        &Policies {
            namespaced: &policies,
            ..Default::default()
        },
        now(),
    )
}

pub(super) fn applied(d: Decision) -> DesiredPdb {
    match d {
        Decision::Apply(p) => *p,
        Decision::NoPdb(n) => panic!("expected a PDB, got {n:?}"),
    }
}

pub(super) fn reason(d: Decision) -> Option<&'static str> {
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
        ..Default::default()
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

fn lws_pods() -> Vec<PodView> {
    let mut all = pods(&[2, 2]);
    for p in &mut all {
        p.labels.insert(keys::LWS_NAME.into(), "vllm".into());
    }
    all
}

fn with_lws(fact: LeaderWorkerSetFact, all: &[PodView], g: &[PodGroupView]) -> Decision {
    decide_with(
        &gang(2, "all"),
        &GangFacts {
            pod_groups: g,
            pods: all,
            leader_worker_sets: BTreeMap::from([("vllm".to_string(), fact)]),
            ..Default::default()
        },
        "standard",
    )
}

#[test]
fn leader_worker_set_pods_are_left_to_its_pdb() {
    // Scenario 52: the LeaderWorkerSet exists and its PDB covers the pods.
    let (all, g) = (lws_pods(), groups(2, 2));
    let present = LeaderWorkerSetFact::Present {
        pdb: Some("vllm-pdb".into()),
    };
    match with_lws(present, &all, &g) {
        Decision::NoPdb(n) => {
            assert!(n.event.is_none() && n.delete_owned_pdb);
            let said: Vec<&str> = n.steps.iter().map(|s| s.value.as_str()).collect();
            assert!(
                said.iter()
                    .any(|s| s.contains("its PDB vllm-pdb covers them")),
                "{said:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn leader_worker_set_without_a_pdb_is_reported() {
    let (all, g) = (lws_pods(), groups(2, 2));
    match with_lws(LeaderWorkerSetFact::Present { pdb: None }, &all, &g) {
        Decision::NoPdb(n) => {
            let e = n.event.unwrap();
            assert_eq!(e.reason, reasons::WORKLOAD_LWS_UNCOVERED);
            assert!(e.message.contains("LeaderWorkerSet vllm"), "{}", e.message);
            assert_eq!(n.retry_after, Some(RETRY_AFTER));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn lws_labelled_pods_without_a_leader_worker_set_are_protected_here() {
    let (all, g) = (lws_pods(), groups(2, 2));
    let d = applied(with_lws(LeaderWorkerSetFact::Absent, &all, &g));
    assert_eq!(d.pdb.spec.unwrap().min_available, Some(IntOrString::Int(2)));
    assert!(
        d.steps
            .iter()
            .any(|s| s.value.contains("no such LeaderWorkerSet exists")),
        "{:?}",
        d.steps
    );
}

#[test]
fn unconfigured_workload_only_gets_unmanaged() {
    // Scenario 54: no pods and no configuration.
    let g = groups(4, 2);
    let facts = GangFacts {
        pod_groups: &g,
        ..Default::default()
    };
    let d = desired_pdb_for_gang(&gang(2, "all"), &facts, &Policies::default(), now());
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
