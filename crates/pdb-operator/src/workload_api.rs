//! Kubernetes 1.37 Workload API gangs (`scheduling.k8s.io/v1beta1` Workload + PodGroup): the
//! declared shape, the pods of each group, a selector that covers exactly those pods, and the
//! desired PDB (seed 003; note §11). Pods join a group through `spec.schedulingGroup.podGroupName`,
//! a spec field a PDB cannot select on, so the selector is derived from shared labels.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload, WorkloadSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::budget::{BudgetRule, BudgetValue, step};
use crate::desired::{
    Decision, NoPdb, Policies, RETRY_AFTER, ViewError, WorkloadKind, finish, no_pdb,
    resolve_or_unmanaged,
};
use crate::enforcement::EventNote;
use crate::gang::{DisruptionMode, GroupBudget, ObservedGroup, budget_for_gang};
use crate::names::{keys, reasons};
use crate::pdb::Owner;
use crate::resolve::WorkloadMeta;

/// A pod as gang logic sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    /// `spec.schedulingGroup.podGroupName`.
    pub pod_group_name: Option<String>,
}

impl PodView {
    pub fn from_pod(p: &Pod) -> Self {
        Self {
            name: p.metadata.name.clone().unwrap_or_default(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
            labels: p.metadata.labels.clone().unwrap_or_default(),
            pod_group_name: p
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_group.as_ref())
                .and_then(|g| g.pod_group_name.clone()),
        }
    }
}

/// A PodGroup as gang logic sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodGroupView {
    pub name: String,
    /// `spec.workloadRef.workloadName` / `.templateName`.
    pub workload_name: Option<String>,
    pub template_name: Option<String>,
    /// `spec.schedulingPolicy.gang.minCount`.
    pub min_count: Option<i32>,
}

impl PodGroupView {
    pub fn from_pod_group(g: &PodGroup) -> Self {
        let r = g.spec.workload_ref.as_ref();
        Self {
            name: g.metadata.name.clone().unwrap_or_default(),
            workload_name: r.map(|r| r.workload_name.clone()),
            template_name: r.map(|r| r.template_name.clone()),
            min_count: g.spec.scheduling_policy.gang.as_ref().map(|x| x.min_count),
        }
    }
}

/// The declared gang shape of a Workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GangShape {
    /// No gang template: the pods' owners (Deployment, Job, ...) are handled on their own paths.
    BasicOnly,
    /// Several gang templates or composite templates; the text says which.
    Unsupported(String),
    Gang {
        template: String,
        min_count: u32,
        mode: DisruptionMode,
    },
}

/// Reads the shape from `spec.podGroupTemplates` / `spec.compositePodGroupTemplates`.
pub fn classify_workload(spec: &WorkloadSpec) -> GangShape {
    let composite = spec
        .composite_pod_group_templates
        .as_ref()
        .map_or(0, Vec::len);
    if composite > 0 {
        return GangShape::Unsupported(format!(
            "it declares {composite} composite pod group template(s)"
        ));
    }
    let gangs: Vec<_> = spec
        .pod_group_templates
        .iter()
        .flatten()
        .filter(|t| t.scheduling_policy.gang.is_some())
        .collect();
    match gangs.as_slice() {
        [] => GangShape::BasicOnly,
        [t] => GangShape::Gang {
            template: t.name.clone(),
            min_count: t
                .scheduling_policy
                .gang
                .as_ref()
                .map_or(0, |g| g.min_count.max(0) as u32),
            mode: match &t.disruption_mode {
                Some(m) if m.all.is_some() => DisruptionMode::All,
                _ => DisruptionMode::Single,
            },
        },
        many => GangShape::Unsupported(format!(
            "it declares {} gang pod group templates",
            many.len()
        )),
    }
}

/// Why no exact selector exists for a gang's pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectorProblem {
    NoSharedLabels,
    /// The shared labels also select these pods outside the gang.
    SelectsOthers {
        selector: BTreeMap<String, String>,
        others: Vec<String>,
    },
}

/// Labels the API server copies from the node when a pod is bound (PodTopologyLabels
/// admission). They say where a pod runs, not what it is: a replacement pod on another node
/// would fall outside a selector built on them, so they never become part of one.
pub fn is_placement_label(key: &str) -> bool {
    key.starts_with("topology.kubernetes.io/") || key == "kubernetes.io/hostname"
}

/// The label pairs every member shares (placement labels excluded), verified to select exactly the members among
/// `namespace_pods` (compared by uid, any phase).
pub fn derive_gang_selector(
    members: &[&PodView],
    namespace_pods: &[PodView],
) -> Result<BTreeMap<String, String>, SelectorProblem> {
    let Some((first, rest)) = members.split_first() else {
        return Err(SelectorProblem::NoSharedLabels);
    };
    let mut shared = first.labels.clone();
    shared.retain(|k, _| !is_placement_label(k));
    for p in rest {
        shared.retain(|k, v| p.labels.get(k) == Some(v));
    }
    if shared.is_empty() {
        return Err(SelectorProblem::NoSharedLabels);
    }
    let member_uids: BTreeSet<&str> = members.iter().map(|p| p.uid.as_str()).collect();
    let others: Vec<String> = namespace_pods
        .iter()
        .filter(|p| !member_uids.contains(p.uid.as_str()))
        .filter(|p| shared.iter().all(|(k, v)| p.labels.get(k) == Some(v)))
        .map(|p| p.name.clone())
        .collect();
    if others.is_empty() {
        Ok(shared)
    } else {
        Err(SelectorProblem::SelectsOthers {
            selector: shared,
            others,
        })
    }
}

/// The PodGroups created from `template` of Workload `workload_name`, and the pods whose
/// `spec.schedulingGroup.podGroupName` names one of them. The controller also uses the member
/// pods' labels for its PDB overlap check (`pdb::find_pdb_conflict`).
pub fn gang_members<'a, 'p>(
    workload_name: &str,
    template: &str,
    pod_groups: &'a [PodGroupView],
    namespace_pods: &'p [PodView],
) -> (Vec<&'a PodGroupView>, Vec<&'p PodView>) {
    let groups: Vec<&PodGroupView> = pod_groups
        .iter()
        .filter(|g| {
            g.workload_name.as_deref() == Some(workload_name)
                && g.template_name.as_deref() == Some(template)
        })
        .collect();
    let group_names: BTreeSet<&str> = groups.iter().map(|g| g.name.as_str()).collect();
    let members = namespace_pods
        .iter()
        .filter(|p| {
            p.pod_group_name
                .as_deref()
                .is_some_and(|g| group_names.contains(g))
        })
        .collect();
    (groups, members)
}

fn render_selector(s: &BTreeMap<String, String>) -> String {
    s.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A Workload object as the budget logic sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct GangWorkloadView {
    pub meta: WorkloadMeta,
    pub uid: String,
    pub spec: WorkloadSpec,
    pub terminating: bool,
}

impl GangWorkloadView {
    pub fn from_workload(w: &Workload) -> Result<Self, ViewError> {
        let missing = |field| ViewError::MissingMetadata {
            kind: "Workload",
            field,
        };
        Ok(Self {
            meta: WorkloadMeta {
                namespace: w
                    .metadata
                    .namespace
                    .clone()
                    .ok_or_else(|| missing("namespace"))?,
                name: w.metadata.name.clone().ok_or_else(|| missing("name"))?,
                labels: w.metadata.labels.clone().unwrap_or_default(),
                annotations: w.metadata.annotations.clone().unwrap_or_default(),
            },
            uid: w.metadata.uid.clone().ok_or_else(|| missing("uid"))?,
            spec: w.spec.clone(),
            terminating: w.metadata.deletion_timestamp.is_some(),
        })
    }
}

fn retry(
    event: EventNote,
    events: Vec<EventNote>,
    cause: &'static str,
    steps: Vec<crate::budget::Step>,
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

/// Desired PDB for a Workload (note §11.2 order, configuration resolved first):
/// unconfigured → `WorkloadUnmanaged`; basic only → nothing (silent); several gang or composite
/// templates → `WorkloadUnsupported`; no pods yet → `WorkloadPDBDeferred` (retry 30 s); pods of
/// a LeaderWorkerSet → nothing (silent); no exact selector → `WorkloadSelectorUnresolvable`
/// (retry 30 s); no possible budget → `WorkloadSkipped`; otherwise the PDB.
///
/// `pod_groups` are the PodGroups in the Workload's namespace; `namespace_pods` every pod there.
pub fn desired_pdb_for_gang(
    workload: &GangWorkloadView,
    pod_groups: &[PodGroupView],
    namespace_pods: &[PodView],
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
    let (config, events, mut steps) =
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
    let (groups, members) = gang_members(name, &template, pod_groups, namespace_pods);
    if members.is_empty() {
        let msg = format!(
            "No pods for Workload {name} yet ({} pod group(s) found); PDB deferred until they exist, retrying every 30s",
            groups.len()
        );
        return retry(
            EventNote::warning(reasons::WORKLOAD_PDB_DEFERRED, msg),
            events,
            "no_pods",
            steps,
        );
    }
    if members
        .iter()
        .any(|p| p.labels.contains_key(keys::LWS_NAME))
    {
        steps.push(step(
            "pods",
            "carry leaderworkerset.sigs.k8s.io/name; the LeaderWorkerSet PDB covers them",
        ));
        return no_pdb(None, events, "leaderworkerset_owned", steps);
    }
    let selector = match derive_gang_selector(&members, namespace_pods) {
        Ok(s) => s,
        Err(problem) => {
            let msg = match problem {
                SelectorProblem::NoSharedLabels => {
                    format!(
                        "Pods of Workload {name} share no label, so no PDB selector can cover exactly them; retrying every 30s"
                    )
                }
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
    let observed: Vec<ObservedGroup> = groups
        .iter()
        .map(|g| {
            let pods = members
                .iter()
                .filter(|p| p.pod_group_name.as_deref() == Some(g.name.as_str()))
                .count() as u32;
            let min_count = g.min_count.map_or(template_min, |m| m.max(0) as u32);
            // In all mode a group restarts as a unit; while it restarts it still counts at its
            // gang size, so the budget does not loosen exactly when a group is down.
            let pods = if mode == DisruptionMode::All {
                pods.max(min_count)
            } else {
                pods
            };
            ObservedGroup {
                name: g.name.clone(),
                pods,
                min_count,
            }
        })
        .collect();
    let min_available = match budget_for_gang(config.rule, mode, &observed) {
        GroupBudget::Groups {
            min_available,
            steps: s,
        } => {
            steps.extend(s);
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
    finish(
        &owner,
        &workload.meta,
        config,
        BudgetRule::MinAvailable(BudgetValue::Count(min_available)),
        selector,
        now,
        (events, steps),
    )
}

#[cfg(test)]
#[path = "workload_api_tests.rs"]
mod tests;
