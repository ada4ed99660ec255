//! The desired PDB for a Workload gang (note §11.2 order, configuration resolved first).
//!
//! Beyond seed 003's shape table, three rules keep a budget meaningful while the cluster moves
//! (issues #19, #52): only live pods are members; a drain never lowers a gang's size, only its
//! owner does (a lowered minCount, or members not replaced for a while; see
//! [`crate::gang_record`]), so a PDB once written holds through a drain; a gang that is still
//! starting (the Workload, then its PodGroups and pods appearing one by one) gets no decision
//! until nothing has joined it for [`STARTUP_SETTLE`], and a PodGroup added later stays out of
//! the budget until it has formed; and pods the eviction API never weighs (finished ones) or
//! that wait for their PodGroup ([`GROUP_WAIT`]) do not make the selector inexact.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::budget::{BudgetRule, BudgetValue, Step, step};
use crate::desired::{
    Decision, NoPdb, Policies, RETRY_AFTER, WorkloadKind, finish, no_pdb, resolve_or_unmanaged,
};
use crate::enforcement::EventNote;
use crate::gang::{DisruptionMode, GroupBudget, budget_for_gang};
use crate::gang_record::{
    GangRecord, GroupNow, MEMBER_WAIT, group_sizes, of_several_revisions, render_sizes,
    short_groups,
};
use crate::names::{keys, reasons};
use crate::pdb::Owner;
use crate::workload_api::{
    GangShape, GangWorkloadView, PodGroupView, PodView, SelectorProblem, classify_workload,
    derive_gang_selector, gang_members, render_selector,
};

/// How long a gang without a PDB must go without a new pod or PodGroup (or the Workload itself
/// being new) before it is decided.
/// A Job or JobSet creates its pods within a few seconds; deciding on the first of them would
/// post `WorkloadSkipped` (one pod is below minCount), then write a PDB with that pod's every
/// label as selector, then widen it, once per pod.
pub const STARTUP_SETTLE: Duration = Duration::from_secs(5);

/// A LeaderWorkerSet named by a gang pod's `leaderworkerset.sigs.k8s.io/name` label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderWorkerSetFact {
    /// No such LeaderWorkerSet (or no LeaderWorkerSet API): nothing else protects the pods.
    Absent,
    /// It exists; `pdb` is the managed PDB it owns, if any.
    Present { pdb: Option<String> },
}

/// Everything a gang decision reads besides the Workload and the policies.
#[derive(Clone, Debug, Default)]
pub struct GangFacts<'a> {
    /// PodGroups in the Workload's namespace.
    pub pod_groups: &'a [PodGroupView],
    /// Every pod in the namespace.
    pub pods: &'a [PodView],
    /// What the PDB this Workload owns remembers; `None` when it owns none.
    pub record: Option<GangRecord>,
    /// The LeaderWorkerSets named by live members' labels ([`leader_worker_set_names`]); a
    /// name missing here counts as [`LeaderWorkerSetFact::Absent`].
    pub leader_worker_sets: BTreeMap<String, LeaderWorkerSetFact>,
}

/// The LeaderWorkerSets the live members of `workload`'s gang name, for the caller to look up.
pub fn leader_worker_set_names(
    workload: &GangWorkloadView,
    pod_groups: &[PodGroupView],
    pods: &[PodView],
) -> BTreeSet<String> {
    let GangShape::Gang { template, .. } = classify_workload(&workload.spec) else {
        return BTreeSet::new();
    };
    let (_, gang) = gang_members(&workload.meta.name, &template, pod_groups, pods);
    gang.live
        .iter()
        .filter_map(|p| p.labels.get(keys::LWS_NAME).cloned())
        .collect()
}

/// One line about the Workload's own gang for `plan` and `explain`: its PodGroups and their live
/// and finished pods (not the namespace's).
pub fn gang_summary(
    workload: &GangWorkloadView,
    pod_groups: &[PodGroupView],
    pods: &[PodView],
) -> String {
    match classify_workload(&workload.spec) {
        GangShape::Gang { template, .. } => {
            let (groups, gang) = gang_members(&workload.meta.name, &template, pod_groups, pods);
            format!(
                "{} pod group(s) of template {template}, {} live pod(s), {} finished or terminating",
                groups.len(),
                gang.live.len(),
                gang.inactive.len()
            )
        }
        GangShape::BasicOnly => "no gang template".into(),
        GangShape::Unsupported(why) => format!("unsupported: {why}"),
    }
}

fn retry(
    event: EventNote,
    events: Vec<EventNote>,
    cause: &'static str,
    steps: Vec<Step>,
) -> Decision {
    Decision::NoPdb(NoPdb {
        event: Some(event),
        events,
        delete_owned_pdb: true,
        cause,
        retry_after: Some(RETRY_AFTER),
        steps,
    })
}

/// Time left before a gang without a PDB may be decided: [`STARTUP_SETTLE`] after the newest of
/// the Workload, its PodGroups and its pods was created. The Workload counts because its
/// PodGroups and pods arrive on watches of their own: a brand-new Workload may be seen before
/// any of them. Clock skew cannot stall it: each wait is at most the window.
fn settling(
    workload: Option<Timestamp>,
    groups: &[&PodGroupView],
    pods: &[&PodView],
    now: Timestamp,
) -> Option<Duration> {
    let newest = groups
        .iter()
        .filter_map(|g| g.created)
        .chain(pods.iter().filter_map(|p| p.created))
        .chain(workload)
        .max()?;
    let age = now.duration_since(newest);
    let settle = jiff::SignedDuration::try_from(STARTUP_SETTLE).ok()?;
    (age < settle).then(|| {
        let left = Duration::try_from(settle - age.max(jiff::SignedDuration::ZERO))
            .unwrap_or(STARTUP_SETTLE);
        left.clamp(Duration::from_millis(100), STARTUP_SETTLE)
    })
}

/// How long a pod naming a PodGroup the operator has not seen may wait for it before it counts
/// as a stranger. The pod and PodGroup watches are separate, so a new group's pods can arrive
/// first; and until the PodGroup exists the scheduler holds the pod Pending, which the eviction
/// API never checks against a budget.
pub const GROUP_WAIT: Duration = Duration::from_secs(60);

/// The namespace's pods that may make a selector inexact: not those still waiting (less than
/// [`GROUP_WAIT`]) for a PodGroup that is not in sight.
fn stranger_candidates<'p>(facts: &GangFacts<'p>, now: Timestamp) -> Vec<&'p PodView> {
    let known: BTreeSet<&str> = facts.pod_groups.iter().map(|g| g.name.as_str()).collect();
    let wait = jiff::SignedDuration::try_from(GROUP_WAIT).unwrap_or_default();
    facts
        .pods
        .iter()
        .filter(|p| {
            let awaiting = p
                .pod_group_name
                .as_deref()
                .is_some_and(|g| !known.contains(g))
                && p.created.is_some_and(|c| now.duration_since(c) < wait);
            !awaiting
        })
        .collect()
}

/// How long a gang's budget may allow no eviction, with members missing, before a drain waiting
/// on it counts as stuck and `WorkloadDrainBlocked` says so. A normal drain reaches "no eviction
/// allowed" at every step until the owner recreates the evicted pod (seconds to a minute or two);
/// a member still missing after this is not coming back soon. Between this and [`MEMBER_WAIT`]
/// the drain waits with a reason; after it the missing members are counted out.
pub const DRAIN_STUCK_AFTER: Duration = Duration::from_secs(5 * 60);

/// Time left before members missing since `since` make a drain stuck; `None` once they do.
fn stuck_in(since: Timestamp, now: Timestamp) -> Option<Duration> {
    let waited = Duration::try_from(now.duration_since(since)).unwrap_or_default();
    DRAIN_STUCK_AFTER
        .checked_sub(waited)
        .filter(|left| !left.is_zero())
        .map(|left| left.max(Duration::from_secs(1)))
}

/// Desired PDB for a Workload: unconfigured → `WorkloadUnmanaged`; basic only → nothing
/// (silent); several gang or composite templates → `WorkloadUnsupported`; still starting and
/// no PDB yet → wait (silent); no live pods → `WorkloadPDBDeferred` (retry 30 s); pods of an
/// existing LeaderWorkerSet → nothing when its PDB covers them, else
/// `WorkloadLeaderWorkerSetUncovered`; no exact selector → `WorkloadSelectorUnresolvable` (retry
/// 30 s); a single-mode gang below minCount that never had a PDB → `WorkloadPDBDeferred` (it
/// has not formed); no possible budget → `WorkloadSkipped`; otherwise the PDB, with `BudgetClamped` when
/// the drain clamp lowered it and `WorkloadDrainBlocked` when the budget has allowed no eviction
/// for [`DRAIN_STUCK_AFTER`] because members are missing.
pub fn desired_pdb_for_gang(
    workload: &GangWorkloadView,
    facts: &GangFacts<'_>,
    policies: &Policies<'_>,
    now: Timestamp,
) -> Decision {
    let name = &workload.meta.name;
    if workload.terminating {
        return Decision::NoPdb(NoPdb {
            event: None,
            events: vec![],
            delete_owned_pdb: false,
            cause: "workload_deleted",
            retry_after: None,
            steps: vec![],
        });
    }
    let (config, mut events, mut steps) =
        match resolve_or_unmanaged(WorkloadKind::Workload, &workload.meta, policies) {
            Ok(r) => r,
            Err(d) => return *d,
        };
    let (template, template_min, mode) = match classify_workload(&workload.spec) {
        GangShape::BasicOnly => {
            steps.push(step(
                "shape",
                "no gang template; the pods' own controllers apply",
            ));
            return no_pdb(None, events, "no_gang", steps);
        }
        GangShape::Unsupported(why) => {
            let msg = format!(
                "Workload {name} is not supported yet: {why}; only one gang pod group template is handled"
            );
            return no_pdb(
                Some(EventNote::warning(reasons::WORKLOAD_UNSUPPORTED, msg)),
                events,
                "unsupported",
                steps,
            );
        }
        GangShape::Gang {
            template,
            min_count,
            mode,
        } => (template, min_count, mode),
    };
    steps.push(step(
        "gang template",
        format!("{template} (minCount {template_min}, mode {mode})"),
    ));
    let (groups, gang) = gang_members(name, &template, facts.pod_groups, facts.pods);
    if facts.record.is_none() {
        let all_pods: Vec<&PodView> = gang.live.iter().chain(&gang.inactive).copied().collect();
        if let Some(left) = settling(workload.created, &groups, &all_pods, now) {
            steps.push(step(
                "start-up",
                format!(
                    "the Workload, a PodGroup or a pod appeared less than {}s ago; deciding once none has for {}s",
                    STARTUP_SETTLE.as_secs(),
                    STARTUP_SETTLE.as_secs()
                ),
            ));
            return Decision::NoPdb(NoPdb {
                event: None,
                events,
                delete_owned_pdb: false,
                cause: "starting",
                retry_after: Some(left),
                steps,
            });
        }
    }
    if gang.live.is_empty() {
        let msg = format!(
            "No pods for Workload {name} yet ({} pod group(s) found, {} finished or terminating pod(s)); PDB deferred until live pods exist, retrying every 30s",
            groups.len(),
            gang.inactive.len()
        );
        return retry(
            EventNote::warning(reasons::WORKLOAD_PDB_DEFERRED, msg),
            events,
            "no_pods",
            steps,
        );
    }
    let lws: BTreeSet<&String> = gang
        .live
        .iter()
        .filter_map(|p| p.labels.get(keys::LWS_NAME))
        .collect();
    if !lws.is_empty() {
        let fact = |n: &String| {
            facts
                .leader_worker_sets
                .get(n)
                .cloned()
                .unwrap_or(LeaderWorkerSetFact::Absent)
        };
        let covering: Vec<String> = lws
            .iter()
            .filter_map(|n| match fact(n) {
                LeaderWorkerSetFact::Present { pdb } => pdb,
                LeaderWorkerSetFact::Absent => None,
            })
            .collect();
        let present: Vec<&String> = lws
            .iter()
            .copied()
            .filter(|n| fact(n) != LeaderWorkerSetFact::Absent)
            .collect();
        let listed = |v: &[&String]| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
        if !covering.is_empty() {
            steps.push(step(
                "pods",
                format!(
                    "belong to LeaderWorkerSet {}; its PDB {} covers them",
                    listed(&present),
                    covering.join(", ")
                ),
            ));
            return no_pdb(None, events, "leaderworkerset_owned", steps);
        }
        if !present.is_empty() {
            let msg = format!(
                "Pods of Workload {name} belong to LeaderWorkerSet {}, which has no PodDisruptionBudget (see its events); the Workload writes none so that no pod is ever selected by two budgets. Give the LeaderWorkerSet an availability class to protect them; retrying every 30s",
                listed(&present)
            );
            return retry(
                EventNote::warning(reasons::WORKLOAD_LWS_UNCOVERED, msg),
                events,
                "leaderworkerset_unprotected",
                steps,
            );
        }
        steps.push(step(
            "pods",
            format!(
                "carry {}={} but no such LeaderWorkerSet exists; this Workload's PDB covers them",
                keys::LWS_NAME,
                lws.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
            ),
        ));
    }
    let previous = facts.record.as_ref().and_then(|r| r.selector.as_ref());
    let candidates = stranger_candidates(facts, now);
    let selector = match derive_gang_selector(&gang, &candidates, previous) {
        Ok(s) => s,
        Err(problem) => {
            let msg = match problem {
                SelectorProblem::NoSharedLabels => format!(
                    "Pods of Workload {name} share no label, so no PDB selector can cover exactly them; retrying every 30s"
                ),
                SelectorProblem::SelectsOthers { selector, others } => format!(
                    "Selector {} shared by the pods of Workload {name} also selects other pods ({}); no exact selector exists, retrying every 30s",
                    render_selector(&selector),
                    others.join(", ")
                ),
            };
            return retry(
                EventNote::warning(reasons::WORKLOAD_SELECTOR_UNRESOLVABLE, msg),
                events,
                "selector_unresolvable",
                steps,
            );
        }
    };
    steps.push(step("derived selector", render_selector(&selector)));
    let mut settle_left: Option<Duration> = None;
    let now_groups: Vec<GroupNow> = groups
        .iter()
        .map(|g| {
            let members: Vec<&PodView> = gang
                .live
                .iter()
                .filter(|p| p.pod_group_name.as_deref() == Some(g.name.as_str()))
                .copied()
                .collect();
            let left = settling(None, &[*g], &members, now);
            if let Some(l) = left {
                settle_left = Some(settle_left.map_or(l, |s| s.min(l)));
            }
            GroupNow {
                name: g.name.clone(),
                live: members.len() as u32,
                min_count: g.min_count.map_or(template_min, |m| m.max(0) as u32),
                settling: left.is_some(),
                rolling: of_several_revisions(members.iter().map(|p| &p.labels)),
            }
        })
        .collect();
    let sizes = group_sizes(&now_groups, facts.record.as_ref(), mode, now);
    if !sizes.counted_out.is_empty() {
        events.push(EventNote::warning(
            reasons::WORKLOAD_MEMBERS_COUNTED_OUT,
            format!(
                "Workload {name}: pods missing for more than {}m were not replaced, so they no longer count: {}",
                MEMBER_WAIT.as_secs() / 60,
                sizes.counted_out.join(", ")
            ),
        ));
    }
    steps.extend(sizes.steps);
    let observed = sizes.observed;
    if observed.is_empty() {
        let msg = format!(
            "Workload {name} has not formed yet: {} live; PDB deferred until its groups reach minCount, retrying every 30s",
            sizes.forming.join(", ")
        );
        return retry(
            EventNote::warning(reasons::WORKLOAD_PDB_DEFERRED, msg),
            events,
            "gang_forming",
            steps,
        );
    }
    let min_available = match budget_for_gang(config.rule, mode, &observed) {
        GroupBudget::Groups {
            min_available,
            clamped,
            steps: s,
        } => {
            steps.extend(s);
            if let Some(why) = clamped {
                events.push(EventNote::normal(
                    reasons::BUDGET_CLAMPED,
                    format!("Workload {name}: {why}"),
                ));
            }
            min_available
        }
        GroupBudget::PodLevel(b) => {
            // budget_for_gang never returns pod-level budgets; keep the arithmetic honest anyway.
            steps.extend(b.steps);
            return no_pdb(None, events, "unsupported", steps);
        }
        GroupBudget::Impossible { why, steps: s } => {
            steps.extend(s);
            let cause = if mode == DisruptionMode::All {
                "single_group"
            } else {
                "min_count_blocks_drains"
            };
            return no_pdb(
                Some(EventNote::warning(
                    reasons::WORKLOAD_SKIPPED,
                    format!("Workload {name}: {why}"),
                )),
                events,
                cause,
                steps,
            );
        }
    };
    let formed = |g: &&GroupNow| observed.iter().any(|o| o.name == g.name);
    let live: u32 = now_groups.iter().filter(formed).map(|g| g.live).sum();
    // The selector covers a forming group's pods too, so once Ready they count towards the PDB's
    // currentHealthy; held in minAvailable, they cannot pay for evictions from formed groups.
    let forming_live: u32 = now_groups
        .iter()
        .filter(|g| !formed(g))
        .map(|g| g.live)
        .sum();
    if forming_live > 0 {
        steps.push(step(
            "plus the forming groups' live pods",
            min_available + forming_live,
        ));
    }
    // A drain stuck on this gang: no eviction allowed, and a member missing for DRAIN_STUCK_AFTER
    // (a normal drain's evicted pods are recreated well before). Until then, look again then.
    let missing_since = sizes.remember.values().filter_map(|r| r.short_since).min();
    let stuck_in = (live <= min_available)
        .then(|| stuck_in(missing_since.unwrap_or(now), now))
        .flatten();
    let blocked = (live <= min_available && stuck_in.is_none()).then(|| {
        let total: u32 = observed.iter().map(|g| g.pods).sum();
        EventNote::warning(
            reasons::WORKLOAD_DRAIN_BLOCKED,
            format!(
                "Workload {name} has {live} of its {total} gang pods live (short: {}) and no eviction has been allowed for {}m or more: a drain is stuck on it until the missing pods are back, or until they are counted out {}m after they went. To shrink the gang on purpose, lower its minCount: the size then follows the pods that exist",
                short_groups(&now_groups, &observed).join(", "),
                DRAIN_STUCK_AFTER.as_secs() / 60,
                MEMBER_WAIT.as_secs() / 60,
            ),
        )
    });
    let owner = Owner {
        api_version: WorkloadKind::Workload.api_version().into(),
        kind: WorkloadKind::Workload.kind().into(),
        name: name.clone(),
        uid: workload.uid.clone(),
    };
    let selector = LabelSelector {
        match_labels: Some(selector),
        match_expressions: None,
    };
    let mut decision = finish(
        &owner,
        &workload.meta,
        config,
        BudgetRule::MinAvailable(BudgetValue::Count(min_available + forming_live)),
        selector,
        now,
        (events, steps),
    );
    if let Decision::Apply(want) = &mut decision {
        want.pdb
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(keys::GANG_SIZES.into(), render_sizes(&sizes.remember));
        if !sizes.forming.is_empty()
            && let Some(left) = settle_left
        {
            want.requeue_after = want.requeue_after.min(left);
        }
        if let Some(note) = blocked
            && !want.window.open
        {
            want.events.push(note);
        }
        if let Some(left) = stuck_in {
            want.requeue_after = want.requeue_after.min(left);
        }
    }
    decision
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_drain;

#[cfg(test)]
mod tests_change;
