//! What each handler does to release named machines, decided before any call is made.
//!
//! - Pod: delete exactly the named pods; nothing named, nothing called.
//! - Deployment ([`deployment`]): mark the victims with a low `pod-deletion-cost`, then lower
//!   `replicas` by the number marked, so the ReplicaSet removes exactly them. When the
//!   ReplicaSet would remove other pods first (they are Pending or not Ready, which it ranks
//!   before any cost), lower `replicas` and evict exactly the victims instead. Every machine
//!   orb keeps of the request named (or the Deployment's own name) → delete the Deployment.
//! - StatefulSet ([`statefulset`]): only the highest ordinals can go (`replicas = max
//!   surviving ordinal + 1`); failed ordinals above the named ones go with them; anything else
//!   is refused, naming the ordinals that would have to go too.
//! - Job: the Job is deleted whatever ids are named, and every host of it goes.

mod deployment;
mod statefulset;

use std::collections::BTreeSet;

pub use deployment::{
    DeploymentReleasePlan, PodPhase, PodRank, plan_deployment_release, replacements_to_scale_away,
};
pub use statefulset::{
    StatefulSetReleaseError, StatefulSetReleasePlan, plan_statefulset_release, statefulset_ordinal,
};

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

#[cfg(test)]
fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::empty(&[], &[])]
    #[case::dedup(&["a", "b", "a"], &["a", "b"])]
    fn pod_release_deletes_exactly_the_named_pods(#[case] victims: &[&str], #[case] want: &[&str]) {
        assert_eq!(plan_pod_release(&names(victims)), names(want));
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
}
