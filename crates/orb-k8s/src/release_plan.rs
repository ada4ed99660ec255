//! What each handler does to release named machines, decided before any call is made.
//!
//! - Pod: delete exactly the named pods; nothing named, nothing called.
//! - Deployment: mark the victims with a low `pod-deletion-cost`, then lower `replicas` by the
//!   number marked, so the ReplicaSet removes exactly them; every pod (or the Deployment's own
//!   name) named → delete the Deployment. Pods are never deleted directly (the ReplicaSet
//!   would only replace them).
//! - StatefulSet: only the highest ordinals can go (`replicas = max surviving ordinal + 1`);
//!   anything else is refused, naming the ordinals that would have to go with it.
//! - Job: the Job is deleted whatever ids are named.

use std::collections::BTreeSet;

/// Annotation the ReplicaSet controller sorts by when it scales down (stable since 1.22).
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The cost put on victims: far below the default of 0.
pub const VICTIM_DELETION_COST: &str = "-9999";

/// Bare pods: the names to delete (deduplicated, in order).
pub fn plan_pod_release(victims: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    victims
        .iter()
        .filter(|v| seen.insert(v.as_str()))
        .cloned()
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeploymentReleasePlan {
    /// Every live pod (or the Deployment itself) was named.
    DeleteDeployment,
    /// Annotate these pods, then lower replicas by the number annotated.
    ScaleDown {
        victims: Vec<String>,
        /// Named pods the Deployment no longer has: released already, nothing to do.
        already_gone: Vec<String>,
    },
    /// None of the named pods exists any more.
    NothingToDo { already_gone: Vec<String> },
}

/// `live_pods` are the Deployment's current pods (not being deleted).
pub fn plan_deployment_release(
    deployment_name: &str,
    live_pods: &[String],
    victims: &[String],
) -> DeploymentReleasePlan {
    let victims = plan_pod_release(victims);
    if victims.iter().any(|v| v == deployment_name) {
        return DeploymentReleasePlan::DeleteDeployment;
    }
    // Sets, not slices: returning all of 10,000 pods was quadratic (about 0.3 s) before.
    let live: std::collections::HashSet<&str> = live_pods.iter().map(String::as_str).collect();
    let (present, already_gone): (Vec<String>, Vec<String>) =
        victims.into_iter().partition(|v| live.contains(v.as_str()));
    if present.is_empty() {
        return DeploymentReleasePlan::NothingToDo { already_gone };
    }
    let named: std::collections::HashSet<&str> = present.iter().map(String::as_str).collect();
    if live.iter().all(|p| named.contains(p)) {
        return DeploymentReleasePlan::DeleteDeployment;
    }
    DeploymentReleasePlan::ScaleDown {
        victims: present,
        already_gone,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleDecision {
    /// Lower replicas by this many (the victims successfully marked).
    LowerBy(u32),
    /// Too many marks failed: scaling now would remove pods nobody named.
    Abort { failed: usize, attempted: usize },
}

/// After annotating: half or more failures aborts without scaling; otherwise only the marked
/// victims are scaled away (an unmarked victim would make the ReplicaSet pick a random pod).
pub fn decide_scale_after_marking(marked: usize, failed: usize) -> ScaleDecision {
    let attempted = marked + failed;
    if attempted == 0 || failed * 2 >= attempted {
        ScaleDecision::Abort { failed, attempted }
    } else {
        ScaleDecision::LowerBy(marked as u32)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatefulSetReleasePlan {
    /// Scale to this many replicas; the controller removes the ordinals above it.
    ScaleTo {
        replicas: u32,
        /// Named pods with ordinals already beyond `replicas`: gone or going.
        already_gone: Vec<String>,
    },
    /// Every ordinal goes: delete the StatefulSet (and its Service).
    DeleteStatefulSet,
    NothingToDo {
        already_gone: Vec<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatefulSetReleaseError {
    #[error(
        "{name:?} is not a pod of StatefulSet {set:?} (expected {set}-<ordinal>, e.g. {set}-0); \
         return only machines of this request"
    )]
    NotAMember { set: String, name: String },
    #[error(
        "StatefulSet release must take the highest ordinals; {named} cannot go alone: also \
         release {must_join}, or keep {named}. Nothing was changed. (Use providerApi Deployment \
         to return any single host.)"
    )]
    NotTail { named: String, must_join: String },
}

/// Parses `<set>-<ordinal>`; ordinals with signs, leading zeros or other characters are not
/// ordinals the controller would ever create.
pub fn statefulset_ordinal(set: &str, pod: &str) -> Option<u32> {
    let digits = pod.strip_prefix(set)?.strip_prefix('-')?;
    let canonical = !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if canonical { digits.parse().ok() } else { None }
}

pub fn plan_statefulset_release(
    set: &str,
    replicas: u32,
    victims: &[String],
) -> Result<StatefulSetReleasePlan, StatefulSetReleaseError> {
    if victims.iter().any(|v| v == set) {
        return Ok(StatefulSetReleasePlan::DeleteStatefulSet);
    }
    let mut named = BTreeSet::new();
    let mut already_gone = Vec::new();
    for victim in plan_pod_release(victims) {
        let ordinal = statefulset_ordinal(set, &victim).ok_or_else(|| {
            StatefulSetReleaseError::NotAMember {
                set: set.to_string(),
                name: victim.clone(),
            }
        })?;
        if ordinal >= replicas {
            already_gone.push(victim);
        } else {
            named.insert(ordinal);
        }
    }
    let Some(&lowest) = named.iter().next() else {
        return Ok(StatefulSetReleasePlan::NothingToDo { already_gone });
    };
    let survivors_above: Vec<u32> = (lowest..replicas).filter(|o| !named.contains(o)).collect();
    if !survivors_above.is_empty() {
        let names = |ords: &mut dyn Iterator<Item = u32>| {
            ords.map(|o| format!("{set}-{o}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let stranded: Vec<u32> = named
            .iter()
            .copied()
            .filter(|o| survivors_above.iter().any(|s| s > o))
            .collect();
        return Err(StatefulSetReleaseError::NotTail {
            named: names(&mut stranded.iter().copied()),
            must_join: names(&mut survivors_above.iter().copied()),
        });
    }
    if lowest == 0 {
        return Ok(StatefulSetReleasePlan::DeleteStatefulSet);
    }
    Ok(StatefulSetReleasePlan::ScaleTo {
        replicas: lowest,
        already_gone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[rstest]
    #[case::empty(&[], &[])]
    #[case::dedup(&["a", "b", "a"], &["a", "b"])]
    fn pod_release_deletes_exactly_the_named_pods(#[case] victims: &[&str], #[case] want: &[&str]) {
        assert_eq!(plan_pod_release(&names(victims)), names(want));
    }

    const LIVE: &[&str] = &["d-1", "d-2", "d-3", "d-4", "d-5"];

    #[rstest]
    #[case::two_of_five(&["d-1", "d-2"], DeploymentReleasePlan::ScaleDown { victims: names(&["d-1", "d-2"]), already_gone: vec![] })]
    #[case::every_pod(LIVE, DeploymentReleasePlan::DeleteDeployment)]
    #[case::deployment_name(&["d"], DeploymentReleasePlan::DeleteDeployment)]
    #[case::some_gone(&["d-1", "d-9"], DeploymentReleasePlan::ScaleDown { victims: names(&["d-1"]), already_gone: names(&["d-9"]) })]
    #[case::all_gone(&["d-8", "d-9"], DeploymentReleasePlan::NothingToDo { already_gone: names(&["d-8", "d-9"]) })]
    #[case::every_live_pod_plus_a_gone_one(&["d-1", "d-2", "d-3", "d-4", "d-5", "d-9"], DeploymentReleasePlan::DeleteDeployment)]
    fn deployment_release(#[case] victims: &[&str], #[case] want: DeploymentReleasePlan) {
        assert_eq!(
            plan_deployment_release("d", &names(LIVE), &names(victims)),
            want
        );
    }

    #[rstest]
    #[case::none_failed(2, 0, ScaleDecision::LowerBy(2))]
    #[case::four_of_ten_failed(6, 4, ScaleDecision::LowerBy(6))]
    #[case::five_of_ten_failed(5, 5, ScaleDecision::Abort { failed: 5, attempted: 10 })]
    #[case::one_of_one_failed(0, 1, ScaleDecision::Abort { failed: 1, attempted: 1 })]
    #[case::one_of_two_failed(1, 1, ScaleDecision::Abort { failed: 1, attempted: 2 })]
    #[case::one_of_three_failed(2, 1, ScaleDecision::LowerBy(2))]
    fn half_or_more_failed_marks_abort_the_scale(
        #[case] marked: usize,
        #[case] failed: usize,
        #[case] want: ScaleDecision,
    ) {
        assert_eq!(decide_scale_after_marking(marked, failed), want);
    }

    #[rstest]
    #[case::tail_one(5, &["s-4"], StatefulSetReleasePlan::ScaleTo { replicas: 4, already_gone: vec![] })]
    #[case::tail_two_any_order(5, &["s-3", "s-4"], StatefulSetReleasePlan::ScaleTo { replicas: 3, already_gone: vec![] })]
    #[case::all(3, &["s-0", "s-1", "s-2"], StatefulSetReleasePlan::DeleteStatefulSet)]
    #[case::set_name(3, &["s"], StatefulSetReleasePlan::DeleteStatefulSet)]
    #[case::beyond_replicas(3, &["s-4"], StatefulSetReleasePlan::NothingToDo { already_gone: names(&["s-4"]) })]
    #[case::tail_plus_gone(3, &["s-2", "s-3"], StatefulSetReleasePlan::ScaleTo { replicas: 2, already_gone: names(&["s-3"]) })]
    fn statefulset_tail_release(
        #[case] replicas: u32,
        #[case] victims: &[&str],
        #[case] want: StatefulSetReleasePlan,
    ) {
        assert_eq!(
            plan_statefulset_release("s", replicas, &names(victims)),
            Ok(want)
        );
    }

    #[rstest]
    #[case::middle(3, &["s-1"], "s-1 cannot go alone: also release s-2")]
    #[case::first_of_three(3, &["s-0", "s-2"], "s-0 cannot go alone: also release s-1")]
    #[case::two_gaps(5, &["s-1", "s-3"], "s-1, s-3 cannot go alone: also release s-2, s-4")]
    fn statefulset_non_tail_release_names_what_must_join(
        #[case] replicas: u32,
        #[case] victims: &[&str],
        #[case] needle: &str,
    ) {
        let err = plan_statefulset_release("s", replicas, &names(victims)).unwrap_err();
        assert!(err.to_string().contains(needle), "{err}");
        assert!(err.to_string().contains("Nothing was changed"), "{err}");
    }

    #[rstest]
    #[case("s-0", Some(0))]
    #[case("s-12", Some(12))]
    #[case("s-01", None)]
    #[case("s-+1", None)]
    #[case("s-", None)]
    #[case("t-1", None)]
    #[case("s-1a", None)]
    fn ordinals_are_canonical(#[case] pod: &str, #[case] want: Option<u32>) {
        assert_eq!(statefulset_ordinal("s", pod), want);
    }

    #[test]
    fn foreign_pod_names_are_refused() {
        let err = plan_statefulset_release("s", 3, &names(&["other-1"])).unwrap_err();
        assert!(
            matches!(err, StatefulSetReleaseError::NotAMember { .. }),
            "{err}"
        );
    }
}
