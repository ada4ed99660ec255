//! Releasing machines of a Deployment: which pods the ReplicaSet would remove, and whether the
//! `pod-deletion-cost` mark is enough to make it remove exactly the named ones.
//!
//! The ReplicaSet controller ranks the pods it may remove on scale-down (Kubernetes
//! `ActivePodsWithRanks`): unscheduled before scheduled, `Pending` < `Unknown` < `Running`,
//! not Ready before Ready, and only then the lower `pod-deletion-cost`. A Running, Ready victim
//! marked -9999 therefore still loses to any Pending or not-Ready pod: scaling down would
//! remove that pod instead. The plan sees this before anything changes and evicts the victims
//! itself in that case (the Eviction API honours PodDisruptionBudgets, as a scale-down does).

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::{POD_DELETION_COST, VICTIM_DELETION_COST, plan_pod_release};

/// The phases the ReplicaSet ranks; terminal pods are not candidates for removal at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PodPhase {
    Pending,
    Unknown,
    Running,
}

/// What the ReplicaSet ranks one pod by, up to the deletion cost. The later tie-breaks
/// (co-location, time Ready, restarts, age) cannot be predicted here, so a mark that would
/// only win on them does not count as winning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRank {
    pub name: String,
    pub scheduled: bool,
    pub phase: PodPhase,
    pub ready: bool,
    pub deletion_cost: i64,
}

impl PodRank {
    /// The rank of a live pod; `None` for pods the ReplicaSet no longer counts (terminal or
    /// being deleted).
    pub fn of(pod: &Pod) -> Option<Self> {
        if pod.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let status = pod.status.as_ref();
        let phase = match status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending") {
            "Pending" => PodPhase::Pending,
            "Running" => PodPhase::Running,
            "Unknown" => PodPhase::Unknown,
            _ => return None,
        };
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        Some(Self {
            name: pod.name_any(),
            scheduled: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty()),
            phase,
            ready,
            // The controller reads a missing or malformed cost as 0.
            deletion_cost: pod
                .annotations()
                .get(POD_DELETION_COST)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0),
        })
    }

    fn class(&self) -> (bool, PodPhase, bool) {
        (self.scheduled, self.phase, self.ready)
    }
}

fn victim_cost() -> i64 {
    VICTIM_DELETION_COST.parse().unwrap_or(i64::MIN)
}

/// The pods among `others` the ReplicaSet would remove before (or tied with) the marked
/// `victims`. Empty means the marks win: lowering replicas removes exactly the victims.
pub fn pods_taken_before_marked(victims: &[&PodRank], others: &[&PodRank]) -> Vec<String> {
    let Some(highest_victim) = victims.iter().map(|v| v.class()).max() else {
        return Vec::new();
    };
    let mark = victim_cost();
    let mut taken: Vec<String> = others
        .iter()
        .filter(|o| {
            let class = o.class();
            class < highest_victim || (class == highest_victim && o.deletion_cost <= mark)
        })
        .map(|o| o.name.clone())
        .collect();
    taken.sort();
    taken
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeploymentReleasePlan {
    /// Every machine orb keeps of the request (or the Deployment itself) was named.
    DeleteDeployment,
    /// Annotate these pods, then lower replicas by the number annotated.
    ScaleDown {
        victims: Vec<String>,
        /// Named pods the Deployment no longer has: released already, nothing to do.
        already_gone: Vec<String>,
    },
    /// The ReplicaSet would remove `instead` first: evict the victims and leave replicas as
    /// they are (a scale-down would let it choose, and it would choose `instead`).
    Evict {
        victims: Vec<String>,
        already_gone: Vec<String>,
        instead: Vec<String>,
    },
    /// None of the named pods exists any more.
    NothingToDo { already_gone: Vec<String> },
}

/// `live` are the Deployment's current pods (not being deleted). `kept` are the machines orb
/// keeps of this request (stored, not gone, in no return, not named); `None` when the caller
/// does not know, and then every live pod counts as kept unless named.
pub fn plan_deployment_release(
    deployment_name: &str,
    live: &[PodRank],
    kept: Option<&[String]>,
    victims: &[String],
) -> DeploymentReleasePlan {
    let victims = plan_pod_release(victims);
    if victims.iter().any(|v| v == deployment_name) {
        return DeploymentReleasePlan::DeleteDeployment;
    }
    // Sets, not slices: returning all of 10,000 pods was quadratic (about 0.3 s) before.
    let live_names: HashSet<&str> = live.iter().map(|p| p.name.as_str()).collect();
    let (present, already_gone): (Vec<String>, Vec<String>) = victims
        .into_iter()
        .partition(|v| live_names.contains(v.as_str()));
    let named: HashSet<&str> = present
        .iter()
        .chain(&already_gone)
        .map(String::as_str)
        .collect();
    let nothing_kept = match kept {
        Some(kept) => kept.iter().all(|k| named.contains(k.as_str())),
        None => !present.is_empty() && live.iter().all(|p| named.contains(p.name.as_str())),
    };
    if nothing_kept && !named.is_empty() {
        // A replacement pod orb never stored goes with the Deployment: nobody asked for it.
        return DeploymentReleasePlan::DeleteDeployment;
    }
    if present.is_empty() {
        return DeploymentReleasePlan::NothingToDo { already_gone };
    }
    let present_set: HashSet<&str> = present.iter().map(String::as_str).collect();
    let (victim_ranks, other_ranks): (Vec<&PodRank>, Vec<&PodRank>) = live
        .iter()
        .partition(|p| present_set.contains(p.name.as_str()));
    // A marked pod orb does not keep is the victim of another return in flight, which lowers
    // replicas for it: it goes either way, so it takes nothing from this return. Only a mark
    // on a pod orb keeps (left by a return that never scaled) would make the ReplicaSet remove
    // a machine nobody named. Without `kept` every marked pod counts as such a leftover.
    let kept_set: Option<HashSet<&str>> =
        kept.map(|k| k.iter().map(String::as_str).collect::<HashSet<_>>());
    let mark = victim_cost();
    let other_ranks: Vec<&PodRank> = other_ranks
        .into_iter()
        .filter(|o| match &kept_set {
            Some(kept) => o.deletion_cost > mark || kept.contains(o.name.as_str()),
            None => true,
        })
        .collect();
    let instead = pods_taken_before_marked(&victim_ranks, &other_ranks);
    if instead.is_empty() {
        DeploymentReleasePlan::ScaleDown {
            victims: present,
            already_gone,
        }
    } else {
        DeploymentReleasePlan::Evict {
            victims: present,
            already_gone,
            instead,
        }
    }
}

/// The replacements the ReplicaSet made for evicted victims that a scale-down may take back
/// (each marked with the victim cost) without risking a pod of `unnamed`. The replacement's
/// rank only rises (scheduled, Running, Ready) between this look and the ReplicaSet's, so it
/// is safe when it stays first whatever it becomes: every unnamed pod is scheduled, Running
/// and Ready; or when the scheduler found no room for it (`unschedulable`, it stays unassigned)
/// and no unnamed pod ranks below it. Otherwise it stays, and goes with the Deployment.
pub fn replacements_to_scale_away(
    replacements: &[(PodRank, bool)],
    unnamed: &[PodRank],
) -> Vec<String> {
    let top = (true, PodPhase::Running, true);
    let all_ready = unnamed.iter().all(|p| p.class() == top);
    let mut safe: Vec<String> = replacements
        .iter()
        .filter(|(rank, unschedulable)| {
            all_ready
                || (*unschedulable
                    && pods_taken_before_marked(&[rank], &unnamed.iter().collect::<Vec<_>>())
                        .is_empty())
        })
        .map(|(rank, _)| rank.name.clone())
        .collect();
    safe.sort();
    safe
}

#[cfg(test)]
mod tests {
    use super::super::names;
    use super::*;
    use rstest::rstest;

    fn ready(name: &str) -> PodRank {
        PodRank {
            name: name.into(),
            scheduled: true,
            phase: PodPhase::Running,
            ready: true,
            deletion_cost: 0,
        }
    }

    fn unscheduled(name: &str) -> PodRank {
        PodRank {
            scheduled: false,
            phase: PodPhase::Pending,
            ready: false,
            ..ready(name)
        }
    }

    fn not_ready(name: &str) -> PodRank {
        PodRank {
            ready: false,
            ..ready(name)
        }
    }

    fn live_ready(names: &[&str]) -> Vec<PodRank> {
        names.iter().map(|n| ready(n)).collect()
    }

    const LIVE: &[&str] = &["d-1", "d-2", "d-3", "d-4", "d-5"];

    #[rstest]
    #[case::two_of_five(&["d-1", "d-2"], DeploymentReleasePlan::ScaleDown { victims: names(&["d-1", "d-2"]), already_gone: vec![] })]
    #[case::every_pod(LIVE, DeploymentReleasePlan::DeleteDeployment)]
    #[case::deployment_name(&["d"], DeploymentReleasePlan::DeleteDeployment)]
    #[case::some_gone(&["d-1", "d-9"], DeploymentReleasePlan::ScaleDown { victims: names(&["d-1"]), already_gone: names(&["d-9"]) })]
    #[case::all_gone(&["d-8", "d-9"], DeploymentReleasePlan::NothingToDo { already_gone: names(&["d-8", "d-9"]) })]
    #[case::every_live_pod_plus_a_gone_one(&["d-1", "d-2", "d-3", "d-4", "d-5", "d-9"], DeploymentReleasePlan::DeleteDeployment)]
    fn without_knowing_what_orb_keeps_every_live_pod_counts(
        #[case] victims: &[&str],
        #[case] want: DeploymentReleasePlan,
    ) {
        assert_eq!(
            plan_deployment_release("d", &live_ready(LIVE), None, &names(victims)),
            want
        );
    }

    /// The full-return rule counts what orb stored, not what runs: a replacement pod the
    /// ReplicaSet made that orb never stored does not keep the Deployment alive.
    #[rstest]
    #[case::replacement_unknown_to_orb(&["d-1", "d-2"], &["d-1", "d-2", "d-new"], &[], DeploymentReleasePlan::DeleteDeployment)]
    #[case::named_one_already_replaced(&["d-1", "d-2"], &["d-2", "d-new"], &[], DeploymentReleasePlan::DeleteDeployment)]
    #[case::orb_keeps_one(&["d-1"], &["d-1", "d-2"], &["d-2"], DeploymentReleasePlan::ScaleDown { victims: names(&["d-1"]), already_gone: vec![] })]
    #[case::orb_keeps_a_replacement_it_stored(&["d-1"], &["d-1", "d-new"], &["d-new"], DeploymentReleasePlan::ScaleDown { victims: names(&["d-1"]), already_gone: vec![] })]
    fn a_full_return_is_every_machine_orb_keeps(
        #[case] victims: &[&str],
        #[case] live: &[&str],
        #[case] kept: &[&str],
        #[case] want: DeploymentReleasePlan,
    ) {
        let kept = names(kept);
        assert_eq!(
            plan_deployment_release("d", &live_ready(live), Some(&kept), &names(victims)),
            want
        );
    }

    /// The mark loses to any pod the ReplicaSet ranks lower: the plan evicts the victims then,
    /// and names the pods that would have gone instead.
    #[rstest]
    #[case::pending_pods_present(&[ready("v"), ready("keep"), unscheduled("p1"), unscheduled("p2")], &["p1", "p2"])]
    #[case::not_ready_pod_present(&[ready("v"), not_ready("slow")], &["slow"])]
    #[case::leftover_mark_on_another_pod(&[ready("v"), PodRank { deletion_cost: -9999, ..ready("old") }], &["old"])]
    fn ranking_before_the_cost_decides(#[case] live: &[PodRank], #[case] instead: &[&str]) {
        let plan = plan_deployment_release("d", live, None, &names(&["v"]));
        assert_eq!(
            plan,
            DeploymentReleasePlan::Evict {
                victims: names(&["v"]),
                already_gone: vec![],
                instead: names(instead),
            }
        );
    }

    /// Two returns of one Deployment at once: the other's victim already carries the mark when
    /// this return reads the pods. Orb no longer keeps that pod (it is in the other return),
    /// so both marks plus both scale-downs remove exactly the two victims; evicting here would
    /// let this scale-down take an unnamed pod before the eviction lands.
    #[test]
    fn a_mark_on_another_returns_victim_takes_nothing_from_this_return() {
        let live = [
            ready("v"),
            PodRank {
                deletion_cost: -9999,
                ..ready("theirs")
            },
            ready("keep"),
        ];
        let kept = names(&["keep"]);
        assert_eq!(
            plan_deployment_release("d", &live, Some(&kept), &names(&["v"])),
            DeploymentReleasePlan::ScaleDown {
                victims: names(&["v"]),
                already_gone: vec![],
            }
        );
        // The same mark on a pod orb keeps is a leftover: the ReplicaSet would remove it.
        let kept = names(&["keep", "theirs"]);
        assert_eq!(
            plan_deployment_release("d", &live, Some(&kept), &names(&["v"])),
            DeploymentReleasePlan::Evict {
                victims: names(&["v"]),
                already_gone: vec![],
                instead: names(&["theirs"]),
            }
        );
    }

    #[rstest]
    #[case::victim_pending_others_ready(&[unscheduled("v"), ready("a")])]
    #[case::victim_and_others_pending(&[unscheduled("v"), unscheduled("a")])]
    #[case::victim_not_ready_other_ready(&[not_ready("v"), ready("a")])]
    #[case::other_with_higher_cost(&[ready("v"), PodRank { deletion_cost: 100, ..ready("a") }])]
    fn the_mark_wins_when_nothing_ranks_below_the_victims(#[case] live: &[PodRank]) {
        assert!(matches!(
            plan_deployment_release("d", live, None, &names(&["v"])),
            DeploymentReleasePlan::ScaleDown { .. }
        ));
    }

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn ranks_are_read_from_the_pod() {
        let running = pod(serde_json::json!({
            "metadata": {"name": "a", "annotations": {POD_DELETION_COST: "-9999"}},
            "spec": {"nodeName": "n1", "containers": []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }));
        assert_eq!(
            PodRank::of(&running),
            Some(PodRank {
                deletion_cost: -9999,
                ..ready("a")
            })
        );
        let waiting = pod(serde_json::json!({
            "metadata": {"name": "b", "annotations": {POD_DELETION_COST: "not a number"}},
            "spec": {"containers": []},
            "status": {"phase": "Pending"}
        }));
        assert_eq!(PodRank::of(&waiting), Some(unscheduled("b")));
        let done = pod(serde_json::json!({
            "metadata": {"name": "c"}, "spec": {"containers": []}, "status": {"phase": "Failed"}
        }));
        assert_eq!(PodRank::of(&done), None, "terminal pods are not ranked");
    }

    #[rstest]
    #[case::siblings_all_ready(&[(unscheduled("r"), false)], vec![ready("a")], &["r"])]
    #[case::no_room_for_it(&[(unscheduled("r"), true)], vec![not_ready("a"), unscheduled("b")], &["r"])]
    #[case::it_may_start_before_a_not_ready_sibling(&[(unscheduled("r"), false)], vec![not_ready("a")], &[])]
    #[case::it_already_runs(&[(ready("r"), false)], vec![not_ready("a")], &[])]
    fn a_replacement_is_scaled_away_only_while_it_stays_first_in_line(
        #[case] replacements: &[(PodRank, bool)],
        #[case] unnamed: Vec<PodRank>,
        #[case] expected: &[&str],
    ) {
        assert_eq!(
            replacements_to_scale_away(replacements, &unnamed),
            names(expected)
        );
    }
}
