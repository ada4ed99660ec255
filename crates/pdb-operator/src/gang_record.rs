//! What a Workload gang's own PDB remembers between decisions: the highest count of live pods
//! seen in each PodGroup (annotation `pdboperator.io/gang-sizes`) and the selector written last.
//!
//! The Workload API (v1beta1) declares no group size, only `minCount`. A budget computed from
//! the pods seen *now* shrinks with every eviction, so a drain would lower it step by step until
//! minCount "left no pod evictable" and the PDB went away, exactly when the gang needed it
//! (issue #19). Sizes therefore only grow: `max(live now, most ever seen, minCount)`. They live
//! on the PDB, so an operator restart keeps them, and they go with it.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::budget::{Step, step};
use crate::gang::ObservedGroup;
use crate::names::keys;

/// What the Workload's managed PDB says about the gang it was written for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GangRecord {
    /// Highest number of live pods seen per PodGroup name.
    pub sizes: BTreeMap<String, u32>,
    /// `spec.selector.matchLabels` of the PDB.
    pub selector: Option<BTreeMap<String, String>>,
}

impl GangRecord {
    /// Reads the record from the PDB the Workload owns.
    pub fn from_pdb(pdb: &PodDisruptionBudget) -> Self {
        let sizes = pdb
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::GANG_SIZES))
            .map(|v| parse_sizes(v))
            .unwrap_or_default();
        let selector = pdb
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .filter(|s| s.match_expressions.as_ref().is_none_or(Vec::is_empty))
            .and_then(|s| s.match_labels.clone())
            .filter(|m| !m.is_empty());
        Self { sizes, selector }
    }
}

/// Parses `g0=2,g1=2`. An entry that does not parse is dropped (someone edited the
/// annotation): that group then starts again from what is live.
pub fn parse_sizes(text: &str) -> BTreeMap<String, u32> {
    text.split(',')
        .filter_map(|entry| {
            let (name, n) = entry.trim().split_once('=')?;
            let n: u32 = n.trim().parse().ok()?;
            (!name.trim().is_empty()).then(|| (name.trim().to_string(), n))
        })
        .collect()
}

/// The annotation value for `sizes`, in PodGroup name order.
pub fn render_sizes(sizes: &BTreeMap<String, u32>) -> String {
    sizes
        .iter()
        .map(|(g, n)| format!("{g}={n}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// One PodGroup of the gang as observed now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupNow {
    pub name: String,
    /// Live member pods (not Succeeded/Failed, not being deleted).
    pub live: u32,
    pub min_count: u32,
}

/// The size of each group for the budget: `max(live, remembered, minCount)`. Returns the
/// groups for [`crate::gang::budget_for_gang`], the sizes to remember (only groups that still
/// exist), and a step per group whose size is not simply its live count.
pub fn group_sizes(
    groups: &[GroupNow],
    record: Option<&GangRecord>,
) -> (Vec<ObservedGroup>, BTreeMap<String, u32>, Vec<Step>) {
    let mut observed = Vec::with_capacity(groups.len());
    let mut remember = BTreeMap::new();
    let mut steps = Vec::new();
    for g in groups {
        let seen = record.and_then(|r| r.sizes.get(&g.name)).copied();
        let size = g.live.max(seen.unwrap_or(0)).max(g.min_count);
        if size != g.live {
            let why = match seen {
                Some(s) if s == size => format!("{s} seen before"),
                _ => format!("minCount {}", g.min_count),
            };
            steps.push(step(
                format!("size of {} ({} live)", g.name, g.live),
                format!("{size} ({why})"),
            ));
        }
        remember.insert(g.name.clone(), g.live.max(seen.unwrap_or(0)));
        observed.push(ObservedGroup {
            name: g.name.clone(),
            pods: size,
            min_count: g.min_count,
        });
    }
    (observed, remember, steps)
}

/// Groups with fewer live pods than their size, as `name (live of size)`.
pub fn short_groups(groups: &[GroupNow], observed: &[ObservedGroup]) -> Vec<String> {
    groups
        .iter()
        .zip(observed)
        .filter(|(g, o)| g.live < o.pods)
        .map(|(g, o)| format!("{} ({} of {})", g.name, g.live, o.pods))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn now(name: &str, live: u32, min_count: u32) -> GroupNow {
        GroupNow {
            name: name.into(),
            live,
            min_count,
        }
    }

    fn record(pairs: &[(&str, u32)]) -> GangRecord {
        GangRecord {
            sizes: pairs.iter().map(|(g, n)| (g.to_string(), *n)).collect(),
            selector: None,
        }
    }

    #[rstest]
    #[case::fresh_gang(6, None, 3, 6)]
    #[case::drained_by_three(3, Some(6), 3, 6)]
    #[case::grew(8, Some(6), 3, 8)]
    #[case::still_starting(1, None, 3, 3)]
    #[case::min_count_raised_above_history(6, Some(6), 7, 7)]
    fn a_size_never_falls_below_history_or_min_count(
        #[case] live: u32,
        #[case] seen: Option<u32>,
        #[case] min_count: u32,
        #[case] want: u32,
    ) {
        let r = seen.map(|s| record(&[("g", s)]));
        let (observed, remember, _) = group_sizes(&[now("g", live, min_count)], r.as_ref());
        assert_eq!(observed[0].pods, want);
        assert_eq!(
            remember["g"],
            live.max(seen.unwrap_or(0)),
            "minCount alone is never remembered as a size seen"
        );
    }

    #[test]
    fn groups_that_no_longer_exist_are_forgotten() {
        let r = record(&[("old", 9), ("g", 4)]);
        let (_, remember, steps) = group_sizes(&[now("g", 2, 1)], Some(&r));
        assert_eq!(remember, BTreeMap::from([("g".to_string(), 4)]));
        assert_eq!(steps[0].value, "4 (4 seen before)");
    }

    #[test]
    fn sizes_round_trip_and_bad_entries_are_dropped() {
        let sizes = parse_sizes("trainer-workers-0=2, trainer-workers-1=3,broken,x=-1,=4");
        assert_eq!(
            sizes,
            BTreeMap::from([
                ("trainer-workers-0".to_string(), 2),
                ("trainer-workers-1".to_string(), 3)
            ])
        );
        assert_eq!(
            render_sizes(&sizes),
            "trainer-workers-0=2,trainer-workers-1=3"
        );
    }

    #[test]
    fn the_record_is_read_from_the_pdb() {
        let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"annotations": {keys::GANG_SIZES: "g=6"}},
            "spec": {"selector": {"matchLabels": {"app": "t"}}, "minAvailable": 3}
        }))
        .unwrap();
        let r = GangRecord::from_pdb(&pdb);
        assert_eq!(r.sizes["g"], 6);
        assert_eq!(
            r.selector,
            Some(BTreeMap::from([("app".to_string(), "t".to_string())]))
        );
    }

    #[test]
    fn short_groups_name_what_is_missing() {
        let groups = [now("a", 3, 3), now("b", 2, 1)];
        let (observed, _, _) = group_sizes(&groups, Some(&record(&[("a", 6), ("b", 2)])));
        assert_eq!(short_groups(&groups, &observed), ["a (3 of 6)"]);
    }
}
