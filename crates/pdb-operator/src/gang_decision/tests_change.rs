//! Gangs whose shape changes under a PDB (issue #52): a PodGroup added in single mode, a
//! lowered minCount, and pods outside the known groups.

use super::tests::{applied, decide, gang, groups, now, pods, reason};
use super::tests_drain::{remembered, with_record};
use super::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rstest::rstest;

fn min_available(d: Decision) -> Option<IntOrString> {
    applied(d).pdb.spec.unwrap().min_available
}

// A second group is added to a single-mode gang of 6 (minCount 3, standard): while it fills
// it is left out of the budget, so the PDB stays, also when a drain has left the first group at
// minCount. Before, the new group counted at minCount, slack fell to 0 and the PDB was deleted.
// Its live pods are added to minAvailable (3 + second): the selector covers them, so once Ready
// they count as healthy and, left out, would let a drain take the first group below minCount.
#[rstest]
#[case::first_pod(6, 1)]
#[case::at_min_count_but_just_created(6, 3)]
#[case::mid_drain(3, 2)]
fn a_pod_group_being_added_keeps_the_single_mode_pdb(#[case] first: usize, #[case] second: usize) {
    let mut all = pods(&[first, second]);
    for p in all.iter_mut().filter(|p| p.name.starts_with("trainer-1-")) {
        p.created = Some(now() - jiff::SignedDuration::from_secs(1));
    }
    let d = applied(with_record(
        &gang(3, "single"),
        &groups(2, 3),
        &all,
        remembered(&[("trainer-workers-0", 6)]),
        "standard",
    ));
    assert_eq!(
        d.pdb.spec.clone().unwrap().min_available,
        Some(IntOrString::Int(3 + second as i32))
    );
    let sizes = &d.pdb.metadata.annotations.unwrap()[keys::GANG_SIZES];
    assert!(
        sizes.starts_with("trainer-workers-0=6/3") && !sizes.contains("trainer-workers-1"),
        "a forming group is not remembered: {sizes}"
    );
    assert!(d.requeue_after <= STARTUP_SETTLE || second < 3);
}

#[test]
fn a_filled_pod_group_joins_the_budget() {
    // 6 + 4 pods, both settled: slack min(3, 1) = 1, so minAvailable = max(5, 10 - 1) = 9.
    assert_eq!(
        min_available(with_record(
            &gang(3, "single"),
            &groups(2, 3),
            &pods(&[6, 4]),
            remembered(&[("trainer-workers-0", 6)]),
            "standard",
        )),
        Some(IntOrString::Int(9))
    );
}

// minCount lowered from 3 to 2 on a gang remembered at 6 with 3 live (a drain at its floor,
// no eviction allowed): the size follows the live pods, 3, so one more pod may go.
#[test]
fn a_lowered_min_count_lets_the_drain_go_on() {
    let mut record = remembered(&[("trainer-workers-0", 6)]);
    record.min_counts.insert("trainer-workers-0".into(), 3);
    let d = applied(with_record(
        &gang(2, "single"),
        &groups(1, 2),
        &pods(&[3]),
        record,
        "standard",
    ));
    assert_eq!(
        d.pdb.spec.clone().unwrap().min_available,
        Some(IntOrString::Int(2))
    );
    assert_eq!(
        d.pdb.metadata.annotations.unwrap()[keys::GANG_SIZES],
        "trainer-workers-0=3/2"
    );
}

fn with_gang_labels(name: &str) -> PodView {
    PodView {
        name: name.into(),
        uid: format!("uid-{name}"),
        labels: BTreeMap::from([("app".to_string(), "trainer".to_string())]),
        ..Default::default()
    }
}

// Pods outside the gang's groups that the eviction API never weighs against a budget, or whose
// PodGroup is not in sight yet, leave the PDB in place.
#[rstest]
#[case::finished_pod_of_an_old_run(true, None, 3600)]
#[case::pod_seen_before_its_pod_group(false, Some("trainer-workers-9"), 5)]
fn pods_outside_the_known_groups_do_not_break_the_selector(
    #[case] inactive: bool,
    #[case] group: Option<&str>,
    #[case] age_secs: i64,
) {
    let mut other = with_gang_labels("other");
    other.inactive = inactive;
    other.pod_group_name = group.map(String::from);
    other.created = Some(now() - jiff::SignedDuration::from_secs(age_secs));
    assert_eq!(
        min_available(decide_four_gangs_of_two_and(other)),
        Some(IntOrString::Int(6))
    );
}

#[test]
fn a_pod_whose_pod_group_never_shows_up_is_a_stranger_after_a_while() {
    let mut other = with_gang_labels("other");
    other.pod_group_name = Some("nowhere".into());
    other.created = Some(now() - jiff::SignedDuration::try_from(GROUP_WAIT).unwrap());
    assert_eq!(
        reason(decide_four_gangs_of_two_and(other)),
        Some(reasons::WORKLOAD_SELECTOR_UNRESOLVABLE)
    );
}

/// The decision for 4 all-mode groups of 2 (minCount 2, mission-critical) and `other`.
fn decide_four_gangs_of_two_and(other: PodView) -> Decision {
    let mut all = pods(&[2, 2, 2, 2]);
    all.push(other);
    decide(&gang(2, "all"), &groups(4, 2), &all, "mission-critical")
}
