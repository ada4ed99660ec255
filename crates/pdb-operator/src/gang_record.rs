//! What a Workload gang's own PDB remembers between decisions: the highest count of live pods
//! seen in each PodGroup and the minCount it had then (annotation `pdboperator.io/gang-sizes`,
//! `<group>=<size>/<minCount>`), and the selector written last.
//!
//! The Workload API (v1beta1) declares no group size, only `minCount`. A budget computed from
//! the pods seen *now* shrinks with every eviction, so a drain would lower it step by step until
//! minCount "left no pod evictable" and the PDB went away, exactly when the gang needed it
//! (issue #19). So a drain never lowers a size: `max(live now, most ever seen, minCount)`. Only
//! the owner's own signal does: a lowered minCount (the API's way to shrink a gang) drops the
//! remembered size to the live pods (issue #52). A group that never reached minCount is still
//! forming: the scheduler holds its pods, so it is left out of the budget until it fills. A
//! group that stays short of its size for [`MEMBER_WAIT`] (a member that failed and is not
//! replaced, pods its owner removed) is counted at what is live, so nothing blocks for ever.
//! Sizes live on the PDB, so an operator restart keeps them, and they go with it.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::budget::{Step, step};
use crate::gang::{DisruptionMode, ObservedGroup};
use crate::names::keys;

/// What the Workload's managed PDB says about the gang it was written for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GangRecord {
    /// Highest number of live pods seen per PodGroup name.
    pub sizes: BTreeMap<String, u32>,
    /// The group's minCount when its size was last written (absent in records written before
    /// it was kept): a lower minCount now is the owner shrinking the gang.
    pub min_counts: BTreeMap<String, u32>,
    /// Since when each short group has had fewer live pods than its size.
    pub short_since: BTreeMap<String, Timestamp>,
    /// `spec.selector.matchLabels` of the PDB.
    pub selector: Option<BTreeMap<String, String>>,
}

impl GangRecord {
    /// Reads the record from the PDB the Workload owns.
    pub fn from_pdb(pdb: &PodDisruptionBudget) -> Self {
        let entries = pdb
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::GANG_SIZES))
            .map(|v| parse_sizes(v))
            .unwrap_or_default();
        let sizes = entries.iter().map(|(g, e)| (g.clone(), e.size)).collect();
        let min_counts = entries
            .iter()
            .filter_map(|(g, e)| Some((g.clone(), e.min_count?)))
            .collect();
        let short_since = entries
            .into_iter()
            .filter_map(|(g, e)| Some((g, e.short_since?)))
            .collect();
        let selector = pdb
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .filter(|s| s.match_expressions.as_ref().is_none_or(Vec::is_empty))
            .and_then(|s| s.match_labels.clone())
            .filter(|m| !m.is_empty());
        Self {
            sizes,
            min_counts,
            short_since,
            selector,
        }
    }
}

/// How long a group may stay short of its size before the missing members are counted out.
/// A drain's evicted pods are recreated by their owner within this time (a recreated pod is
/// live while Pending); a member that failed for good, or was removed, is not.
pub const MEMBER_WAIT: Duration = Duration::from_secs(10 * 60);

/// One group's entry in the record: `size[/minCount][@unix seconds short since]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remembered {
    pub size: u32,
    /// Absent in entries written before minCount was kept.
    pub min_count: Option<u32>,
    pub short_since: Option<Timestamp>,
}

/// Parses `g0=2/2,g1=3,g2=4/2@1765130000` and its compact form (see [`render_sizes`]). An
/// entry that does not parse is dropped (someone edited the annotation): that group then starts
/// again from what is live, and so do the entries after it that build on its name or value.
pub fn parse_sizes(text: &str) -> BTreeMap<String, Remembered> {
    let mut out = BTreeMap::new();
    let mut previous: Option<(String, Remembered)> = None;
    for entry in text.split(',') {
        previous = parse_entry(entry.trim(), previous.as_ref());
        if let Some((name, r)) = &previous {
            out.insert(name.clone(), r.clone());
        }
    }
    out
}

fn parse_entry(
    entry: &str,
    previous: Option<&(String, Remembered)>,
) -> Option<(String, Remembered)> {
    let (name, value) = match entry.split_once('=') {
        Some((n, v)) => (n.trim(), Some(v.trim())),
        None => (entry, None),
    };
    let name = match name.split_once('~') {
        Some((shared, suffix)) => {
            let shared: usize = shared.parse().ok()?;
            format!("{}{suffix}", previous?.0.get(..shared)?)
        }
        None => name.to_string(),
    };
    let Some(value) = value else {
        // Only a shortened name may leave out its value: a bare word is an edit, dropped.
        let same = previous.filter(|_| entry.contains('~'))?.1.clone();
        return (!name.is_empty()).then_some((name, same));
    };
    let (value, since) = match value.split_once('@') {
        Some((v, t)) => (
            v,
            Some(Timestamp::from_second(t.trim().parse().ok()?).ok()?),
        ),
        None => (value, None),
    };
    let (n, m) = match value.split_once('/') {
        Some((n, m)) => (n, Some(m.trim().parse().ok()?)),
        None => (value, None),
    };
    let entry = Remembered {
        size: n.trim().parse().ok()?,
        min_count: m,
        short_since: since,
    };
    (!name.is_empty()).then_some((name, entry))
}

/// The annotation value for `sizes`, in PodGroup name order. Compact so that the record of a
/// gang of 10,000 PodGroups fits the 256 KiB annotation limit: a name sharing more than two
/// leading characters with the previous one is written `<shared>~<rest>` (PodGroup names never
/// hold `~`), and such an entry leaves out `=<value>` when it is the previous entry's value.
/// `gang-0=2/2,gang-1=2/2,gang-10=3/3` is written `gang-0=2/2,5~1,6~0=3/3`.
pub fn render_sizes(sizes: &BTreeMap<String, Remembered>) -> String {
    let mut out = String::new();
    let mut previous: Option<(&str, &Remembered)> = None;
    for (g, r) in sizes {
        if !out.is_empty() {
            out.push(',');
        }
        let shared = previous.map_or(0, |(p, _)| {
            p.bytes().zip(g.bytes()).take_while(|(a, b)| a == b).count()
        });
        if shared > 2 {
            out += &format!("{shared}~{}", &g[shared..]);
        } else {
            out += g;
        }
        if shared <= 2 || previous.is_none_or(|(_, p)| p != r) {
            out += &format!("={}", r.size);
            if let Some(m) = r.min_count {
                out += &format!("/{m}");
            }
            if let Some(t) = r.short_since {
                out += &format!("@{}", t.as_second());
            }
        }
        previous = Some((g, r));
    }
    out
}

/// One PodGroup of the gang as observed now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupNow {
    pub name: String,
    /// Live member pods (not Succeeded/Failed, not being deleted).
    pub live: u32,
    pub min_count: u32,
    /// The group or one of its pods was created moments ago: a new group may still be filling.
    pub settling: bool,
    /// Its live pods are of more than one revision ([`REVISION_LABELS`]): its owner is rolling
    /// them out, and the pods above the group's size are a surge, not a bigger group.
    pub rolling: bool,
}

/// The labels that name the revision of a pod's template: the ReplicaSet's, the
/// StatefulSet's (or DaemonSet's), and the LeaderWorkerSet's.
pub const REVISION_LABELS: [&str; 3] = [
    "pod-template-hash",
    "controller-revision-hash",
    "leaderworkerset.sigs.k8s.io/template-revision-hash",
];

/// Whether `pods` (each one's labels) carry more than one template revision.
pub fn of_several_revisions<'a>(
    pods: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
) -> bool {
    let revisions: std::collections::BTreeSet<Vec<Option<&String>>> = pods
        .into_iter()
        .map(|labels| REVISION_LABELS.iter().map(|k| labels.get(*k)).collect())
        .collect();
    revisions.len() > 1
}

/// The gang's groups as the budget sees them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GangSizes {
    /// Formed groups with their sizes, for [`crate::gang::budget_for_gang`].
    pub observed: Vec<ObservedGroup>,
    /// What to remember on the PDB about each formed group.
    pub remember: BTreeMap<String, Remembered>,
    /// Groups still forming, as `name (live of minCount N)`.
    pub forming: Vec<String>,
    /// Groups whose missing members were counted out after [`MEMBER_WAIT`], as
    /// `name (size N → live)`.
    pub counted_out: Vec<String>,
    pub steps: Vec<Step>,
}

/// The size of each group for the budget: `max(live, remembered, minCount)`, where the
/// remembered size is forgotten when minCount was lowered since. A group the record does not
/// know is *forming* (new, or a gang still being created) while it has fewer live pods than
/// minCount or is still settling: the scheduler places none of its pods until minCount are
/// there, and a group caught at exactly minCount on its way up would leave no slack, so it is
/// left out of the budget instead of taking the PDB away. Before the first PDB of an all-mode gang
/// there is no record to tell a new group from one restarting as a unit, so a short group counts
/// at minCount: the budget then waits for it rather than let a second group go. A group short
/// of its remembered size for [`MEMBER_WAIT`] is sized at its live pods again (never below
/// minCount, so a drain still cannot take it under). Groups that no longer exist are forgotten.
pub fn group_sizes(
    groups: &[GroupNow],
    record: Option<&GangRecord>,
    mode: DisruptionMode,
    now: Timestamp,
) -> GangSizes {
    let new_groups_form = record.is_some() || mode == DisruptionMode::Single;
    let mut out = GangSizes::default();
    for g in groups {
        let mut seen = record.and_then(|r| r.sizes.get(&g.name)).copied();
        let lowered_from = record
            .and_then(|r| r.min_counts.get(&g.name))
            .filter(|m| **m > g.min_count);
        if let Some(from) = lowered_from {
            out.steps.push(step(
                format!("minCount of {} lowered from {from}", g.name),
                format!("{}; its size follows the live pods", g.min_count),
            ));
            seen = None;
        } else if new_groups_form && seen.is_none() && (g.live < g.min_count || g.settling) {
            let filling = if g.live < g.min_count {
                ""
            } else {
                ", filling"
            };
            out.forming.push(format!(
                "{} ({} of minCount {}{filling})",
                g.name, g.live, g.min_count
            ));
            continue;
        }
        // A rollout's surge pods (a new revision's pod before the old one goes) never raise
        // the size: it stays what it was when the rollout began, the group's declared size.
        let mut live = g.live;
        if g.rolling
            && let Some(s) = seen.filter(|s| g.live > *s)
        {
            out.steps.push(step(
                format!("{} rolling out ({} live)", g.name, g.live),
                format!("size {s} kept; the pods above it are a surge"),
            ));
            live = s;
        }
        let mut short_since = None;
        if let Some(s) = seen.filter(|s| g.live < *s) {
            let since = record
                .and_then(|r| r.short_since.get(&g.name))
                .copied()
                .unwrap_or(now);
            let waited = now.duration_since(since);
            if waited >= jiff::SignedDuration::try_from(MEMBER_WAIT).unwrap_or_default() {
                out.counted_out
                    .push(format!("{} (size {s} → {})", g.name, g.live));
                seen = None;
            } else {
                short_since = Some(since);
            }
        }
        let size = live.max(seen.unwrap_or(0)).max(g.min_count);
        if size != live {
            let why = match seen {
                Some(s) if s == size => format!("{s} seen before"),
                _ => format!("minCount {}", g.min_count),
            };
            out.steps.push(step(
                format!("size of {} ({} live)", g.name, g.live),
                format!("{size} ({why})"),
            ));
        }
        out.remember.insert(
            g.name.clone(),
            Remembered {
                size: live.max(seen.unwrap_or(0)),
                min_count: Some(g.min_count),
                short_since,
            },
        );
        out.observed.push(ObservedGroup {
            name: g.name.clone(),
            pods: size,
            min_count: g.min_count,
        });
    }
    if !out.forming.is_empty() {
        out.steps.push(step(
            "forming, left out until they reach minCount and settle",
            out.forming.join(", "),
        ));
    }
    out
}

/// Formed groups with fewer live pods than their size, as `name (live of size)`.
pub fn short_groups(groups: &[GroupNow], observed: &[ObservedGroup]) -> Vec<String> {
    observed
        .iter()
        .filter_map(|o| {
            let g = groups.iter().find(|g| g.name == o.name)?;
            (g.live < o.pods).then(|| format!("{} ({} of {})", g.name, g.live, o.pods))
        })
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
            settling: false,
            rolling: false,
        }
    }

    // Issue #52: a surge (7 live of a remembered 6 while two revisions run) keeps the size at
    // 6, so the group is whole again, not short, once the old pod goes; 7 live of one revision
    // is a bigger group.
    #[rstest]
    #[case::surge(7, true, 6)]
    #[case::scaled_up(7, false, 7)]
    #[case::rolling_below_size(5, true, 6)]
    fn a_rollout_surge_never_raises_the_size(
        #[case] live: u32,
        #[case] rolling: bool,
        #[case] want: u32,
    ) {
        let r = with_min_count(record(&[("g", 6)]), "g", 3);
        let g = GroupNow {
            rolling,
            ..now("g", live, 3)
        };
        let sizes = group_sizes(&[g], Some(&r), DisruptionMode::Single, t0());
        assert_eq!(sizes.observed[0].pods, want);
        assert_eq!(sizes.remember["g"].size, want);
    }

    #[test]
    fn two_template_revisions_are_a_rollout() {
        let pod = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        let (a, b) = (pod("pod-template-hash", "a"), pod("pod-template-hash", "b"));
        assert!(of_several_revisions([&a, &b]));
        assert!(!of_several_revisions([&a, &a.clone()]));
        let plain = pod("app", "x");
        assert!(!of_several_revisions([&plain, &plain.clone()]));
    }

    fn record(pairs: &[(&str, u32)]) -> GangRecord {
        GangRecord {
            sizes: pairs.iter().map(|(g, n)| (g.to_string(), *n)).collect(),
            ..Default::default()
        }
    }

    fn t0() -> Timestamp {
        "2026-12-07T12:00:00Z".parse().unwrap()
    }

    fn kept(size: u32, min_count: u32) -> Remembered {
        Remembered {
            size,
            min_count: Some(min_count),
            short_since: None,
        }
    }

    fn with_min_count(mut r: GangRecord, g: &str, m: u32) -> GangRecord {
        r.min_counts.insert(g.into(), m);
        r
    }

    #[rstest]
    #[case::fresh_gang(6, None, 3, 6)]
    #[case::drained_by_three(3, Some(6), 3, 6)]
    #[case::grew(8, Some(6), 3, 8)]
    #[case::min_count_raised_above_history(6, Some(6), 7, 7)]
    fn a_size_never_falls_below_history_or_min_count(
        #[case] live: u32,
        #[case] seen: Option<u32>,
        #[case] min_count: u32,
        #[case] want: u32,
    ) {
        let r = seen.map(|s| record(&[("g", s)]));
        let sizes = group_sizes(
            &[now("g", live, min_count)],
            r.as_ref(),
            DisruptionMode::Single,
            t0(),
        );
        assert_eq!(sizes.observed[0].pods, want);
        assert_eq!(
            sizes.remember["g"].size,
            live.max(seen.unwrap_or(0)),
            "minCount alone is never remembered as a size seen"
        );
    }

    #[test]
    fn groups_that_no_longer_exist_are_forgotten() {
        let r = record(&[("old", 9), ("g", 4)]);
        let sizes = group_sizes(&[now("g", 2, 1)], Some(&r), DisruptionMode::Single, t0());
        assert_eq!(sizes.remember.keys().collect::<Vec<_>>(), ["g"]);
        assert_eq!(sizes.remember["g"].size, 4);
        assert_eq!(sizes.steps[0].value, "4 (4 seen before)");
    }

    // Issue #52: only the owner shrinks a gang. A drain (live below the size) keeps the size; a
    // lowered minCount drops it to the live pods at once; a raised or unchanged one does not.
    #[rstest]
    #[case::drain_keeps_the_size(3, 6, 3, 3, 6, 6)]
    #[case::min_count_lowered(4, 6, 3, 2, 4, 4)]
    #[case::lowered_below_live_follows_live(5, 6, 4, 2, 5, 5)]
    #[case::lowered_mid_drain_keeps_min_count(1, 6, 3, 2, 2, 1)]
    #[case::min_count_raised(4, 6, 3, 4, 6, 6)]
    fn a_lowered_min_count_shrinks_the_remembered_size(
        #[case] live: u32,
        #[case] seen: u32,
        #[case] recorded_min: u32,
        #[case] min_count: u32,
        #[case] want_size: u32,
        #[case] want_remembered: u32,
    ) {
        let r = with_min_count(record(&[("g", seen)]), "g", recorded_min);
        let sizes = group_sizes(
            &[now("g", live, min_count)],
            Some(&r),
            DisruptionMode::Single,
            t0(),
        );
        assert_eq!(sizes.observed[0].pods, want_size);
        assert_eq!(sizes.remember["g"].size, want_remembered);
        assert_eq!(sizes.remember["g"].min_count, Some(min_count));
    }

    // Issue #52: a group short of its size (a member failed and is not replaced) keeps its size
    // for MEMBER_WAIT, remembering since when; then it is sized at its live pods, never below
    // minCount. A group that is whole again forgets the time.
    #[rstest]
    #[case::just_went_short(4, None, 0, 5, Some(0), false)]
    #[case::short_for_a_while(4, Some(0), 300, 5, Some(0), false)]
    #[case::short_too_long(4, Some(0), 600, 4, None, true)]
    #[case::floor_is_min_count(2, Some(0), 900, 3, None, true)]
    #[case::whole_again(5, Some(0), 900, 5, None, false)]
    fn a_member_that_is_not_replaced_is_counted_out_after_a_while(
        #[case] live: u32,
        #[case] short_since: Option<i64>,
        #[case] now_secs: i64,
        #[case] want_size: u32,
        #[case] want_since: Option<i64>,
        #[case] counted_out: bool,
    ) {
        let at = |s: i64| t0() + jiff::SignedDuration::from_secs(s);
        let mut r = with_min_count(record(&[("g", 5)]), "g", 3);
        if let Some(s) = short_since {
            r.short_since.insert("g".into(), at(s));
        }
        let sizes = group_sizes(
            &[now("g", live, 3)],
            Some(&r),
            DisruptionMode::Single,
            at(now_secs),
        );
        assert_eq!(sizes.observed[0].pods, want_size);
        assert_eq!(sizes.remember["g"].short_since, want_since.map(at));
        assert_eq!(sizes.counted_out.len(), usize::from(counted_out));
    }

    // Issue #52: a group the PDB does not know yet and below minCount is forming: out of the
    // budget and not remembered, so it cannot take the slack of the formed groups to zero.
    #[rstest]
    #[case::new_group_filling(None, 1, 3, true)]
    #[case::new_group_full(None, 3, 3, false)]
    #[case::known_group_drained(Some(3), 1, 3, false)]
    #[case::first_pdb_group_not_full(Some(0), 2, 3, false)]
    fn a_new_group_below_min_count_is_forming(
        #[case] seen: Option<u32>,
        #[case] live: u32,
        #[case] min_count: u32,
        #[case] forming: bool,
    ) {
        let mut r = record(&[("old", 6)]);
        if let Some(s) = seen {
            r.sizes.insert("g".into(), s);
        }
        let sizes = group_sizes(
            &[now("old", 6, 3), now("g", live, min_count)],
            Some(&r),
            DisruptionMode::Single,
            t0(),
        );
        assert_eq!(sizes.forming.len(), usize::from(forming), "{sizes:?}");
        assert_eq!(sizes.observed.len(), if forming { 1 } else { 2 });
        assert_eq!(sizes.remember.contains_key("g"), !forming);
    }

    #[test]
    fn sizes_round_trip_and_bad_entries_are_dropped() {
        let text =
            "trainer-workers-0=2/2, trainer-workers-1=3,g=4/2@1796644800,broken,x=-1,=4,y=2/z";
        let sizes = parse_sizes(text);
        assert_eq!(sizes.len(), 3, "{sizes:?}");
        assert_eq!(sizes["trainer-workers-0"], kept(2, 2));
        assert_eq!(sizes["trainer-workers-1"].min_count, None);
        assert_eq!(sizes["g"].short_since, Some(t0()));
        assert_eq!(
            render_sizes(&sizes),
            "g=4/2@1796644800,trainer-workers-0=2/2,16~1=3"
        );
        assert_eq!(parse_sizes(&render_sizes(&sizes)), sizes);
    }

    // Issue #52: the record of a gang of 10,000 PodGroups fits the 256 KiB annotation limit,
    // half of its groups short since a drain, and reads back the same.
    #[test]
    fn the_record_of_ten_thousand_pod_groups_fits_an_annotation() {
        let sizes: BTreeMap<String, Remembered> = (0..10_000)
            .map(|i| {
                let mut r = kept(8, 4);
                if i % 2 == 0 {
                    r.short_since = Some(t0());
                }
                (format!("trainer-0123456789-workers-{i}"), r)
            })
            .collect();
        let text = render_sizes(&sizes);
        // 135 KB; the uncompacted form was 470 KB. What is left is for the PDB's other annotations.
        assert!(text.len() < 192 * 1024, "{} bytes", text.len());
        assert_eq!(parse_sizes(&text), sizes);
        assert_eq!(
            parse_sizes("gang-0=2/2,5~1,6~0=3/3"),
            BTreeMap::from([
                ("gang-0".into(), kept(2, 2)),
                ("gang-1".into(), kept(2, 2)),
                ("gang-10".into(), kept(3, 3)),
            ])
        );
        assert_eq!(
            parse_sizes("g-0=2/2,9~1,g-2=1,2~3")
                .keys()
                .collect::<Vec<_>>(),
            ["g-0", "g-2", "g-3"],
            "a name that does not build on its predecessor is dropped"
        );
    }

    #[test]
    fn the_record_is_read_from_the_pdb() {
        let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"annotations": {keys::GANG_SIZES: "g=6/3,h=2"}},
            "spec": {"selector": {"matchLabels": {"app": "t"}}, "minAvailable": 3}
        }))
        .unwrap();
        let r = GangRecord::from_pdb(&pdb);
        assert_eq!(r.sizes["g"], 6);
        assert_eq!(r.min_counts, BTreeMap::from([("g".to_string(), 3)]));
        assert_eq!(
            r.selector,
            Some(BTreeMap::from([("app".to_string(), "t".to_string())]))
        );
    }

    #[test]
    fn short_groups_name_what_is_missing() {
        let groups = [now("a", 3, 3), now("b", 2, 1)];
        let sizes = group_sizes(
            &groups,
            Some(&record(&[("a", 6), ("b", 2)])),
            DisruptionMode::Single,
            t0(),
        );
        assert_eq!(short_groups(&groups, &sizes.observed), ["a (3 of 6)"]);
    }
}
