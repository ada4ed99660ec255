//! Budgets for pods that restart in groups: LeaderWorkerSet groups (note §10) and Kubernetes
//! 1.37 Workload API gangs (seed 003, note §11.4). All results are integer minAvailable values.

use crate::budget::{
    BudgetRule, BudgetValue, PodBudget, Step, ceil_percent, clamp_pod_budget, min_available_pods,
    step,
};

/// Outcome of group math: a budget, or a reason no PDB can be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupBudget {
    /// Integer minAvailable over all pods.
    Groups {
        min_available: u32,
        /// Set when the drain-safety clamp lowered a pod-level value (Workload single mode);
        /// the text becomes a `BudgetClamped` event.
        clamped: Option<String>,
        steps: Vec<Step>,
    },
    /// Group size 1: the pod-level budget with the drain clamp applied.
    PodLevel(PodBudget),
    /// No budget is possible; the text explains why (becomes a Warning event).
    Impossible { why: String, steps: Vec<Step> },
}

/// Whole groups that must stay up: `ceil(p × G)` for a percentage, `ceil(m / S)` for a pod count,
/// clamped to `G - 1` so one group can always be drained. A maxUnavailable value is first turned
/// into the pod-level minAvailable `total - ceil(value over total)`.
fn groups_to_keep(
    rule: BudgetRule,
    groups: u32,
    size: u32,
    total: u32,
    steps: &mut Vec<Step>,
) -> u32 {
    let wanted = match rule {
        BudgetRule::MinAvailable(BudgetValue::Percent(p)) => {
            let g = ceil_percent(p, groups);
            steps.push(step(format!("ceil({}% × {groups} groups)", p), g));
            g
        }
        BudgetRule::MinAvailable(BudgetValue::Count(m)) => {
            let g = m.div_ceil(size.max(1));
            steps.push(step(format!("ceil({m} pods / {size} per group)"), g));
            g
        }
        BudgetRule::MaxUnavailable(_) => {
            let m = min_available_pods(rule, total);
            steps.push(step(format!("{rule} as pod minAvailable over {total}"), m));
            let g = m.div_ceil(size.max(1));
            steps.push(step(format!("ceil({m} pods / {size} per group)"), g));
            g
        }
    };
    let kept = wanted.min(groups - 1);
    if kept != wanted {
        steps.push(step("clamped to groups - 1", kept));
    }
    kept
}

/// LeaderWorkerSet budget: `groups = spec.replicas`, `size = leaderWorkerTemplate.size`.
/// Fewer than 2 groups → impossible; size 1 → pod-level budget with the drain clamp.
pub fn budget_for_leader_worker_set(rule: BudgetRule, groups: u32, size: u32) -> GroupBudget {
    let total = groups * size.max(1);
    let mut steps = vec![
        step("groups (spec.replicas)", groups),
        step("group size", size),
    ];
    if groups < 2 {
        return GroupBudget::Impossible {
            why: format!(
                "LeaderWorkerSet has {groups} group(s); a single group restarts as a unit, so any PDB would permanently block node drains"
            ),
            steps,
        };
    }
    if size <= 1 {
        return GroupBudget::PodLevel(clamp_pod_budget(rule, total));
    }
    steps.push(step("requested", rule));
    let kept = groups_to_keep(rule, groups, size, total, &mut steps);
    let min_available = kept * size;
    steps.push(step(
        format!("minAvailable = {kept} × {size}"),
        min_available,
    ));
    GroupBudget::Groups {
        min_available,
        clamped: None,
        steps,
    }
}

/// How a gang's pods may be disrupted (`podGroupTemplates[].disruptionMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisruptionMode {
    /// `{all: {}}`: the group restarts as a unit.
    All,
    /// `{single: {}}` or unset: pods are disrupted one at a time.
    Single,
}

impl std::fmt::Display for DisruptionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::All => "all",
            Self::Single => "single",
        })
    }
}

/// One PodGroup as the budget sees it: its size (see [`crate::gang_record::group_sizes`]: the
/// live pods, the most ever seen, and minCount, whichever is highest) and its gang minCount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedGroup {
    pub name: String,
    pub pods: u32,
    pub min_count: u32,
}

/// Workload API gang budget (seed 003 shape table).
///
/// * all mode: whole groups as for LeaderWorkerSet; with uneven groups the `k = G - groups`
///   largest groups may be down at once, so `minAvailable = total - sum(k largest)`.
/// * single mode: `slack = min over groups (pods - minCount)`; no slack → impossible;
///   otherwise `minAvailable = max(min(ceil(p × N), N - 1), N - slack)`, so one eviction can
///   never push any gang below its minCount and at least one pod stays evictable.
pub fn budget_for_gang(
    rule: BudgetRule,
    mode: DisruptionMode,
    groups: &[ObservedGroup],
) -> GroupBudget {
    let g = groups.len() as u32;
    let total: u32 = groups.iter().map(|x| x.pods).sum();
    let sizes: Vec<String> = groups.iter().map(|x| x.pods.to_string()).collect();
    let mut steps = vec![
        step("pod groups", g),
        step("pods per group", sizes.join(", ")),
        step("total pods", total),
        step("requested", rule),
    ];
    match mode {
        DisruptionMode::All => {
            if g < 2 {
                return GroupBudget::Impossible {
                    why: format!(
                        "a single pod group with disruptionMode all restarts as a unit, so any PDB would permanently block node drains ({g} group(s))"
                    ),
                    steps,
                };
            }
            let largest = groups.iter().map(|x| x.pods).max().unwrap_or(1);
            let kept = groups_to_keep(rule, g, largest, total, &mut steps);
            let may_go = g - kept;
            let mut by_size: Vec<u32> = groups.iter().map(|x| x.pods).collect();
            by_size.sort_unstable_by(|a, b| b.cmp(a));
            let evictable: u32 = by_size.iter().take(may_go as usize).sum();
            let min_available = total - evictable;
            if by_size.iter().all(|s| *s == largest) {
                steps.push(step(
                    format!("minAvailable = {kept} × {largest}"),
                    min_available,
                ));
            } else {
                steps.push(step(
                    format!("minAvailable = {total} - {evictable} ({may_go} largest group(s))"),
                    min_available,
                ));
            }
            GroupBudget::Groups {
                min_available,
                clamped: None,
                steps,
            }
        }
        DisruptionMode::Single => {
            let slack = groups
                .iter()
                .map(|x| i64::from(x.pods) - i64::from(x.min_count))
                .min()
                .unwrap_or(0);
            let tightest = groups.iter().map(|x| x.min_count).max().unwrap_or(0);
            steps.push(step("slack = min(pods - minCount)", slack));
            if slack <= 0 || total < 2 {
                return GroupBudget::Impossible {
                    why: format!(
                        "gang minCount {tightest} leaves no pod evictable in a group, so any PDB would permanently block node drains"
                    ),
                    steps,
                };
            }
            let requested = min_available_pods(rule, total);
            if let BudgetRule::MinAvailable(BudgetValue::Percent(p)) = rule {
                steps.push(step(format!("ceil({p}% × {total})"), requested));
            }
            let capped = requested.min(total - 1);
            let clamped = (capped != requested).then(|| {
                steps.push(step("clamped to pods - 1", capped));
                format!(
                    "{rule} over {total} gang pods would block every voluntary eviction; kept {capped} so one pod can be drained"
                )
            });
            let floor = total - slack as u32;
            let min_available = capped.max(floor);
            steps.push(step(
                format!("floored at pods - slack ({floor})"),
                min_available,
            ));
            GroupBudget::Groups {
                min_available,
                clamped,
                steps,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BudgetValue::{Count, Percent};
    use rstest::rstest;

    fn min(v: BudgetValue) -> BudgetRule {
        BudgetRule::MinAvailable(v)
    }

    fn groups(sizes: &[u32], min_count: u32) -> Vec<ObservedGroup> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, pods)| ObservedGroup {
                name: format!("g-{i}"),
                pods: *pods,
                min_count,
            })
            .collect()
    }

    fn min_available(b: &GroupBudget) -> Option<u32> {
        match b {
            GroupBudget::Groups { min_available, .. } => Some(*min_available),
            _ => None,
        }
    }

    // Note §10 rows L1–L14 (pure function parts).
    #[rstest]
    #[case::l1(min(Percent(50)), 4, 8, Some(16))]
    #[case::l2(min(Percent(90)), 4, 8, Some(24))]
    #[case::l3(min(Percent(90)), 2, 8, Some(8))]
    #[case::l4(min(Percent(20)), 4, 8, Some(8))]
    #[case::l5(min(Count(12)), 4, 8, Some(16))]
    #[case::l6(min(Count(32)), 4, 8, Some(24))]
    #[case::l8(min(Percent(90)), 4, 2, Some(6))]
    #[case::l12_single_group(min(Percent(90)), 1, 8, None)]
    #[case::l14_max_unavailable(BudgetRule::MaxUnavailable(Count(8)), 4, 8, Some(24))]
    fn leader_worker_set_groups(
        #[case] rule: BudgetRule,
        #[case] g: u32,
        #[case] s: u32,
        #[case] want: Option<u32>,
    ) {
        let got = budget_for_leader_worker_set(rule, g, s);
        assert_eq!(min_available(&got), want, "{got:?}");
        if let Some(m) = want {
            assert!(m <= g * s - s, "one whole group must stay evictable");
        }
    }

    #[rstest]
    #[case::l9(min(Percent(90)), 4, min(Count(3)))]
    #[case::l10(min(Percent(75)), 3, min(Count(2)))]
    #[case::l11(min(Percent(75)), 4, min(Percent(75)))]
    fn leader_worker_set_size_one_is_pod_level(
        #[case] rule: BudgetRule,
        #[case] g: u32,
        #[case] want: BudgetRule,
    ) {
        match budget_for_leader_worker_set(rule, g, 1) {
            GroupBudget::PodLevel(b) => assert_eq!(b.rule, want),
            other => panic!("expected pod level, got {other:?}"),
        }
    }

    #[test]
    fn single_group_lws_explains_why() {
        match budget_for_leader_worker_set(min(Percent(90)), 1, 8) {
            GroupBudget::Impossible { why, .. } => {
                assert!(why.contains("restarts as a unit"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }

    // Note §11.4 rows W1–W14 ("Ours" column).
    #[rstest]
    #[case::w1_seed(&[2, 2, 2, 2], 2, DisruptionMode::All, 90, Some(6))]
    #[case::w2(&[8, 8, 8, 8], 8, DisruptionMode::All, 90, Some(24))]
    #[case::w3(&[2, 2, 2, 2], 2, DisruptionMode::All, 50, Some(4))]
    #[case::w4(&[2, 2, 2], 2, DisruptionMode::All, 20, Some(2))]
    #[case::w5(&[8], 8, DisruptionMode::All, 90, None)]
    #[case::w6(&[6], 3, DisruptionMode::Single, 50, Some(3))]
    #[case::w7(&[8], 6, DisruptionMode::Single, 50, Some(6))]
    #[case::w8(&[4], 3, DisruptionMode::Single, 50, Some(3))]
    #[case::w9(&[4], 4, DisruptionMode::Single, 20, None)]
    #[case::w10(&[8], 3, DisruptionMode::Single, 90, Some(7))]
    #[case::w11(&[4, 4, 4], 3, DisruptionMode::Single, 50, Some(11))]
    #[case::w12(&[4, 4], 2, DisruptionMode::Single, 50, Some(6))]
    #[case::w13(&[4, 4], 4, DisruptionMode::Single, 50, None)]
    #[case::w14_uneven(&[4, 2, 2], 0, DisruptionMode::All, 90, Some(4))]
    fn workload_shape_table(
        #[case] sizes: &[u32],
        #[case] min_count: u32,
        #[case] mode: DisruptionMode,
        #[case] percent: u32,
        #[case] want: Option<u32>,
    ) {
        let got = budget_for_gang(min(Percent(percent)), mode, &groups(sizes, min_count));
        assert_eq!(min_available(&got), want, "{got:?}");
        let total: u32 = sizes.iter().sum();
        if let Some(m) = want {
            assert!(m < total, "at least one pod must be evictable");
        }
    }

    #[test]
    fn seed_worked_example_steps() {
        let got = budget_for_gang(
            min(Percent(90)),
            DisruptionMode::All,
            &groups(&[2, 2, 2, 2], 2),
        );
        let GroupBudget::Groups {
            steps,
            min_available,
            ..
        } = got
        else {
            panic!("expected a budget")
        };
        assert_eq!(min_available, 6);
        let pairs: Vec<(String, String)> = steps.into_iter().map(|s| (s.label, s.value)).collect();
        assert!(
            pairs.contains(&("ceil(90% × 4 groups)".into(), "4".into())),
            "{pairs:?}"
        );
        assert!(
            pairs.contains(&("clamped to groups - 1".into(), "3".into())),
            "{pairs:?}"
        );
        assert!(
            pairs.contains(&("minAvailable = 3 × 2".into(), "6".into())),
            "{pairs:?}"
        );
    }

    #[test]
    fn single_mode_skip_names_min_count() {
        let got = budget_for_gang(min(Percent(20)), DisruptionMode::Single, &groups(&[4], 4));
        let GroupBudget::Impossible { why, .. } = got else {
            panic!()
        };
        assert!(why.contains("minCount 4"), "{why}");
    }

    #[rstest]
    #[case::w10_mission_critical(&[8], 3, 90, true)]
    #[case::w6_standard(&[6], 3, 50, false)]
    #[case::floor_decides(&[4, 4, 4], 3, 50, false)]
    fn single_mode_reports_the_drain_clamp(
        #[case] sizes: &[u32],
        #[case] min_count: u32,
        #[case] percent: u32,
        #[case] want_clamp: bool,
    ) {
        let got = budget_for_gang(
            min(Percent(percent)),
            DisruptionMode::Single,
            &groups(sizes, min_count),
        );
        let GroupBudget::Groups { clamped, .. } = &got else {
            panic!("{got:?}")
        };
        assert_eq!(clamped.is_some(), want_clamp, "{got:?}");
        if let Some(why) = clamped {
            assert!(why.contains("one pod can be drained"), "{why}");
        }
    }

    #[test]
    fn single_mode_never_lets_one_eviction_break_a_gang() {
        // 3 × 4 pods, minCount 3: any one eviction leaves every gang at >= 3 pods only when
        // minAvailable >= total - slack.
        let got = budget_for_gang(
            min(Percent(50)),
            DisruptionMode::Single,
            &groups(&[4, 4, 4], 3),
        );
        assert_eq!(min_available(&got), Some(11));
    }
}
