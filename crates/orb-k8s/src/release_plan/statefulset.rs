//! Releasing machines of a StatefulSet: only the highest ordinals can go, because the
//! controller removes pods from the top. A failed ordinal above the named ones delivers
//! nothing and would otherwise block every shrink, so it goes with them (and is reported).

use std::collections::BTreeSet;

use super::plan_pod_release;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatefulSetReleasePlan {
    /// Scale to this many replicas; the controller removes the ordinals above it.
    ScaleTo {
        replicas: u32,
        /// Named pods with ordinals already beyond `replicas`: gone or going.
        already_gone: Vec<String>,
        /// Failed pods above the named ones that go with them though nobody named them.
        taken_along: Vec<String>,
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

/// `failed` are the ordinals whose pods are failed now (they may go without being named
/// when every survivor above the named ones is failed).
pub fn plan_statefulset_release(
    set: &str,
    replicas: u32,
    victims: &[String],
    failed: &BTreeSet<u32>,
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
    let names = |ords: &mut dyn Iterator<Item = u32>| {
        ords.map(|o| format!("{set}-{o}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let taken_along: Vec<String> = if survivors_above.iter().all(|o| failed.contains(o)) {
        survivors_above
            .iter()
            .map(|o| format!("{set}-{o}"))
            .collect()
    } else {
        let stranded: Vec<u32> = named
            .iter()
            .copied()
            .filter(|o| survivors_above.iter().any(|s| s > o))
            .collect();
        return Err(StatefulSetReleaseError::NotTail {
            named: names(&mut stranded.iter().copied()),
            must_join: names(&mut survivors_above.iter().copied()),
        });
    };
    if lowest == 0 {
        return Ok(StatefulSetReleasePlan::DeleteStatefulSet);
    }
    Ok(StatefulSetReleasePlan::ScaleTo {
        replicas: lowest,
        already_gone,
        taken_along,
    })
}

#[cfg(test)]
mod tests {
    use super::super::names;
    use super::*;
    use rstest::rstest;

    fn plan(
        replicas: u32,
        victims: &[&str],
        failed: &[u32],
    ) -> Result<StatefulSetReleasePlan, StatefulSetReleaseError> {
        plan_statefulset_release(
            "s",
            replicas,
            &names(victims),
            &failed.iter().copied().collect(),
        )
    }

    #[rstest]
    #[case::tail_one(5, &["s-4"], StatefulSetReleasePlan::ScaleTo { replicas: 4, already_gone: vec![], taken_along: vec![] })]
    #[case::tail_two_any_order(5, &["s-3", "s-4"], StatefulSetReleasePlan::ScaleTo { replicas: 3, already_gone: vec![], taken_along: vec![] })]
    #[case::all(3, &["s-0", "s-1", "s-2"], StatefulSetReleasePlan::DeleteStatefulSet)]
    #[case::set_name(3, &["s"], StatefulSetReleasePlan::DeleteStatefulSet)]
    #[case::beyond_replicas(3, &["s-4"], StatefulSetReleasePlan::NothingToDo { already_gone: names(&["s-4"]) })]
    #[case::tail_plus_gone(3, &["s-2", "s-3"], StatefulSetReleasePlan::ScaleTo { replicas: 2, already_gone: names(&["s-3"]), taken_along: vec![] })]
    fn statefulset_tail_release(
        #[case] replicas: u32,
        #[case] victims: &[&str],
        #[case] want: StatefulSetReleasePlan,
    ) {
        assert_eq!(plan(replicas, victims, &[]), Ok(want));
    }

    /// A failed top ordinal is part of the tail: it no longer blocks the shrink.
    #[rstest]
    #[case::failed_top(3, &["s-1"], &[2], StatefulSetReleasePlan::ScaleTo { replicas: 1, already_gone: vec![], taken_along: names(&["s-2"]) })]
    #[case::failed_top_named(3, &["s-1", "s-2"], &[2], StatefulSetReleasePlan::ScaleTo { replicas: 1, already_gone: vec![], taken_along: vec![] })]
    #[case::failed_top_two(4, &["s-1"], &[2, 3], StatefulSetReleasePlan::ScaleTo { replicas: 1, already_gone: vec![], taken_along: names(&["s-2", "s-3"]) })]
    #[case::from_zero(2, &["s-0"], &[1], StatefulSetReleasePlan::DeleteStatefulSet)]
    fn failed_ordinals_above_go_along(
        #[case] replicas: u32,
        #[case] victims: &[&str],
        #[case] failed: &[u32],
        #[case] want: StatefulSetReleasePlan,
    ) {
        assert_eq!(plan(replicas, victims, failed), Ok(want));
    }

    #[rstest]
    #[case::middle(3, &["s-1"], &[], "s-1 cannot go alone: also release s-2")]
    #[case::first_of_three(3, &["s-0", "s-2"], &[], "s-0 cannot go alone: also release s-1")]
    #[case::two_gaps(5, &["s-1", "s-3"], &[], "s-1, s-3 cannot go alone: also release s-2, s-4")]
    #[case::a_healthy_pod_above_a_failed_one(4, &["s-1"], &[2], "s-1 cannot go alone: also release s-2, s-3")]
    fn statefulset_non_tail_release_names_what_must_join(
        #[case] replicas: u32,
        #[case] victims: &[&str],
        #[case] failed: &[u32],
        #[case] needle: &str,
    ) {
        let err = plan(replicas, victims, failed).unwrap_err();
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
        let err = plan(3, &["other-1"], &[]).unwrap_err();
        assert!(
            matches!(err, StatefulSetReleaseError::NotAMember { .. }),
            "{err}"
        );
    }
}
