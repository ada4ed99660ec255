//! Gang decisions while the cluster moves (issue #19): drains against a remembered size,
//! Failed members, the single-mode clamp event, start-up settling, deferral of forming gangs.

use super::tests::{applied, decide, decide_with, gang, groups, now, pods, reason};
use super::*;
use crate::desired::DesiredPdb;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rstest::rstest;

pub(super) fn remembered(pairs: &[(&str, u32)]) -> GangRecord {
    GangRecord {
        sizes: pairs.iter().map(|(g, n)| (g.to_string(), *n)).collect(),
        selector: Some(BTreeMap::from([("app".to_string(), "trainer".to_string())])),
        ..Default::default()
    }
}

pub(super) fn with_record(
    w: &GangWorkloadView,
    g: &[PodGroupView],
    p: &[PodView],
    record: GangRecord,
    class: &str,
) -> Decision {
    decide_with(
        w,
        &GangFacts {
            pod_groups: g,
            pods: p,
            record: Some(record),
            ..Default::default()
        },
        class,
    )
}

fn reasons_of(d: &DesiredPdb) -> Vec<&'static str> {
    d.events.iter().map(|e| e.reason).collect()
}

/// `record` with every group short of its size since `secs` before now.
pub(super) fn short_for(mut record: GangRecord, secs: u64) -> GangRecord {
    let since = now() - jiff::SignedDuration::from_secs(secs as i64);
    record.short_since = record.sizes.keys().map(|g| (g.clone(), since)).collect();
    record
}

// Issue #19, "Must show" 1 as a table: single mode, 1 group of 6, minCount 3, standard. The
// drain evicts one pod after another; the budget and the PDB stay. A normal drain is not stuck
// (issue #52): no WorkloadDrainBlocked, even at minCount, until members stay missing.
#[rstest]
#[case::all_there(6)]
#[case::one_evicted(5)]
#[case::two_evicted(4)]
#[case::three_evicted(3)]
fn a_single_mode_pdb_holds_through_a_drain(#[case] live: usize) {
    let d = applied(with_record(
        &gang(3, "single"),
        &groups(1, 3),
        &pods(&[live]),
        remembered(&[("trainer-workers-0", 6)]),
        "standard",
    ));
    assert_eq!(
        d.pdb.spec.clone().unwrap().min_available,
        Some(IntOrString::Int(3))
    );
    assert!(
        !reasons_of(&d).contains(&reasons::WORKLOAD_DRAIN_BLOCKED),
        "{:?}",
        d.events
    );
    // Short of its size, the group remembers since when (now), to count out after a while.
    let annotations = d.pdb.metadata.annotations.unwrap();
    let since = if live < 6 {
        format!("@{}", now().as_second())
    } else {
        String::new()
    };
    assert_eq!(
        annotations[keys::GANG_SIZES],
        format!("trainer-workers-0=6/3{since}")
    );
}

#[test]
fn without_its_record_a_drained_gang_would_lose_its_pdb() {
    // What the record prevents: from the 3 pods left alone, minCount 3 leaves none evictable.
    let d = decide(&gang(3, "single"), &groups(1, 3), &pods(&[3]), "standard");
    assert_eq!(reason(d), Some(reasons::WORKLOAD_SKIPPED));
}

// Issue #52: the drain is stuck only once the budget has allowed no eviction for
// DRAIN_STUCK_AFTER with members missing; before that the operator looks again then.
#[rstest]
#[case::just_reached_min_count(0, false)]
#[case::almost_stuck(DRAIN_STUCK_AFTER.as_secs() - 60, false)]
#[case::stuck(DRAIN_STUCK_AFTER.as_secs(), true)]
fn the_blocked_event_waits_for_a_stuck_drain_and_never_advises_deleting_the_pdb(
    #[case] missing_for: u64,
    #[case] stuck: bool,
) {
    let d = applied(with_record(
        &gang(3, "single"),
        &groups(1, 3),
        &pods(&[3]),
        short_for(remembered(&[("trainer-workers-0", 6)]), missing_for),
        "standard",
    ));
    let note = d
        .events
        .iter()
        .find(|e| e.reason == reasons::WORKLOAD_DRAIN_BLOCKED);
    assert_eq!(note.is_some(), stuck, "{:?}", d.events);
    if !stuck {
        let left = DRAIN_STUCK_AFTER - Duration::from_secs(missing_for);
        assert!(d.requeue_after <= left, "{:?}", d.requeue_after);
        return;
    }
    let note = note.unwrap();
    assert!(
        note.message.contains("trainer-workers-0 (3 of 6)"),
        "{}",
        note.message
    );
    // Deleting the PDB mid-drain leaves the gang with no budget at all (issue #52).
    assert!(
        !note.message.contains("delete") && note.message.contains("lower its minCount"),
        "{}",
        note.message
    );
}

fn failed(mut p: PodView) -> PodView {
    p.inactive = true;
    p
}

#[test]
fn failed_pods_are_not_members() {
    // Issue #19, "Must show" 2: 4 Running + 1 Failed, minCount 3, mission-critical → 3 of 4, so
    // one disruption is allowed (a Failed member counted as one gave 4 of 4: none).
    let mut all = pods(&[5]);
    all[4] = failed(all[4].clone());
    let d = applied(decide(
        &gang(3, "single"),
        &groups(1, 3),
        &all,
        "mission-critical",
    ));
    assert_eq!(
        d.pdb.spec.clone().unwrap().min_available,
        Some(IntOrString::Int(3))
    );
    assert!(
        reasons_of(&d).contains(&reasons::BUDGET_CLAMPED),
        "{:?}",
        d.events
    );
    assert!(!reasons_of(&d).contains(&reasons::WORKLOAD_DRAIN_BLOCKED));
    assert_eq!(
        d.pdb.metadata.annotations.unwrap()[keys::GANG_SIZES],
        "trainer-workers-0=4/3"
    );
}

#[test]
fn a_member_that_fails_after_the_pdb_keeps_its_place_and_blocks_with_a_reason() {
    let mut all = pods(&[5]);
    all[4] = failed(all[4].clone());
    let d = applied(with_record(
        &gang(3, "single"),
        &groups(1, 3),
        &all,
        short_for(
            remembered(&[("trainer-workers-0", 5)]),
            DRAIN_STUCK_AFTER.as_secs(),
        ),
        "mission-critical",
    ));
    assert_eq!(
        d.pdb.spec.clone().unwrap().min_available,
        Some(IntOrString::Int(4))
    );
    assert!(
        reasons_of(&d).contains(&reasons::WORKLOAD_DRAIN_BLOCKED),
        "{:?}",
        d.events
    );
}

#[test]
fn single_mode_clamp_posts_budget_clamped() {
    // W10: 1 × 8, minCount 3, mission-critical: ceil(7.2) = 8 → 7.
    let d = applied(decide(
        &gang(3, "single"),
        &groups(1, 3),
        &pods(&[8]),
        "mission-critical",
    ));
    assert_eq!(
        d.pdb.spec.clone().unwrap().min_available,
        Some(IntOrString::Int(7))
    );
    let clamp = d
        .events
        .iter()
        .find(|e| e.reason == reasons::BUDGET_CLAMPED)
        .unwrap();
    assert!(
        clamp.message.starts_with("Workload trainer:"),
        "{}",
        clamp.message
    );
}

#[test]
fn an_all_mode_gang_keeps_its_budget_while_a_group_is_away() {
    let d = applied(with_record(
        &gang(1, "all"),
        &groups(4, 1),
        &pods(&[0, 2, 2, 2]),
        short_for(
            remembered(&[
                ("trainer-workers-0", 2),
                ("trainer-workers-1", 2),
                ("trainer-workers-2", 2),
                ("trainer-workers-3", 2),
            ]),
            DRAIN_STUCK_AFTER.as_secs(),
        ),
        "mission-critical",
    ));
    assert_eq!(
        d.pdb.spec.clone().unwrap().min_available,
        Some(IntOrString::Int(6))
    );
    assert!(reasons_of(&d).contains(&reasons::WORKLOAD_DRAIN_BLOCKED));
}

fn created(mut pods: Vec<PodView>, seconds_before_now: i64) -> Vec<PodView> {
    let at = now() - jiff::SignedDuration::from_secs(seconds_before_now);
    for p in &mut pods {
        p.created = Some(at);
    }
    pods
}

#[test]
fn a_starting_gang_is_decided_once_nothing_joined_for_a_while() {
    let (g, young) = (groups(1, 3), created(pods(&[1]), 1));
    match decide(&gang(3, "single"), &g, &young, "standard") {
        Decision::NoPdb(n) => {
            assert_eq!((n.event, n.cause), (None, "starting"));
            assert_eq!(n.retry_after, Some(Duration::from_secs(4)));
            assert!(!n.delete_owned_pdb);
        }
        other => panic!("{other:?}"),
    }
    let settled = created(pods(&[6]), STARTUP_SETTLE.as_secs() as i64);
    let d = applied(decide(&gang(3, "single"), &g, &settled, "standard"));
    assert_eq!(d.pdb.spec.unwrap().min_available, Some(IntOrString::Int(3)));
}

#[test]
fn a_gang_with_a_pdb_is_not_held_back_by_a_new_pod() {
    let young = created(pods(&[7]), 0);
    let d = applied(with_record(
        &gang(3, "single"),
        &groups(1, 3),
        &young,
        remembered(&[("trainer-workers-0", 6)]),
        "standard",
    ));
    assert_eq!(
        d.pdb.metadata.annotations.unwrap()[keys::GANG_SIZES],
        "trainer-workers-0=7/3",
        "a group that grows is remembered at its new size"
    );
}

#[test]
fn a_young_pod_group_without_pods_waits_before_the_deferral() {
    let mut g = groups(2, 2);
    for x in &mut g {
        x.created = Some(now() - jiff::SignedDuration::from_secs(2));
    }
    match decide(&gang(2, "all"), &g, &[], "standard") {
        Decision::NoPdb(n) => assert_eq!((n.event, n.cause), (None, "starting")),
        other => panic!("{other:?}"),
    }
}

/// The Workload's PodGroups and pods come on watches of their own and may be seen after it: a
/// Workload created a moment ago with nothing of its gang in sight yet is starting, not
/// deferred; once it is older than the window with still nothing, it is deferred.
#[test]
fn a_young_workload_whose_gang_is_not_in_sight_yet_waits_before_the_deferral() {
    let mut w = gang(3, "single");
    w.created = Some(now() - jiff::SignedDuration::from_secs(1));
    match decide(&w, &[], &[], "standard") {
        Decision::NoPdb(n) => {
            assert_eq!((n.event, n.cause), (None, "starting"));
            assert_eq!(n.retry_after, Some(Duration::from_secs(4)));
            assert!(!n.delete_owned_pdb);
        }
        other => panic!("{other:?}"),
    }
    w.created = Some(now() - jiff::SignedDuration::from_secs(STARTUP_SETTLE.as_secs() as i64));
    match decide(&w, &[], &[], "standard") {
        Decision::NoPdb(n) => {
            assert_eq!(n.event.unwrap().reason, reasons::WORKLOAD_PDB_DEFERRED);
            assert_eq!(n.cause, "no_pods");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn deferral_counts_finished_pods() {
    let all: Vec<PodView> = pods(&[2]).into_iter().map(failed).collect();
    match decide(&gang(2, "all"), &groups(2, 2), &all, "standard") {
        Decision::NoPdb(n) => {
            let e = n.event.unwrap();
            assert_eq!(e.reason, reasons::WORKLOAD_PDB_DEFERRED);
            assert!(
                e.message.contains("2 finished or terminating"),
                "{}",
                e.message
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_single_mode_gang_below_min_count_without_a_pdb_is_deferred_not_skipped() {
    match decide(&gang(3, "single"), &groups(1, 3), &pods(&[2]), "standard") {
        Decision::NoPdb(n) => {
            let e = n.event.unwrap();
            assert_eq!(e.reason, reasons::WORKLOAD_PDB_DEFERRED);
            assert!(
                e.message.contains("trainer-workers-0 (2 of minCount 3)"),
                "{}",
                e.message
            );
            assert_eq!(n.retry_after, Some(RETRY_AFTER));
        }
        other => panic!("{other:?}"),
    }
    // A formed gang whose minCount covers every pod is still skipped (W9).
    assert_eq!(
        reason(decide(
            &gang(3, "single"),
            &groups(1, 3),
            &pods(&[3]),
            "standard"
        )),
        Some(reasons::WORKLOAD_SKIPPED)
    );
}
