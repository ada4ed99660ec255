//! Kubernetes 1.37 Workload API gangs (`scheduling.k8s.io/v1beta1` Workload + PodGroup) as the
//! budget logic sees them: the declared shape, the pods of each group, and a selector that covers
//! exactly those pods (seed 003; note §11). Pods join a group through
//! `spec.schedulingGroup.podGroupName`, a spec field a PDB cannot select on, so the selector is
//! derived from shared labels. The decision itself is in [`crate::gang_decision`].

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload, WorkloadSpec};

use crate::desired::ViewError;
use crate::gang::DisruptionMode;
use crate::resolve::WorkloadMeta;

pub use crate::gang_decision::{GangFacts, LeaderWorkerSetFact, desired_pdb_for_gang};

/// A pod as gang logic sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    /// `spec.schedulingGroup.podGroupName`.
    pub pod_group_name: Option<String>,
    /// Phase Succeeded or Failed, or being deleted: no longer a live member of its group.
    pub inactive: bool,
    /// `metadata.creationTimestamp` (start-up settling).
    pub created: Option<Timestamp>,
}

impl PodView {
    pub fn from_pod(p: &Pod) -> Self {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        Self {
            name: p.metadata.name.clone().unwrap_or_default(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
            labels: p.metadata.labels.clone().unwrap_or_default(),
            pod_group_name: p
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_group.as_ref())
                .and_then(|g| g.pod_group_name.clone()),
            inactive: matches!(phase, Some("Succeeded" | "Failed"))
                || p.metadata.deletion_timestamp.is_some(),
            created: p.metadata.creation_timestamp.as_ref().map(|t| t.0),
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
    /// `metadata.creationTimestamp` (start-up settling).
    pub created: Option<Timestamp>,
}

impl PodGroupView {
    pub fn from_pod_group(g: &PodGroup) -> Self {
        let r = g.spec.workload_ref.as_ref();
        Self {
            name: g.metadata.name.clone().unwrap_or_default(),
            workload_name: r.map(|r| r.workload_name.clone()),
            template_name: r.map(|r| r.template_name.clone()),
            min_count: g.spec.scheduling_policy.gang.as_ref().map(|x| x.min_count),
            created: g.metadata.creation_timestamp.as_ref().map(|t| t.0),
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

/// Labels that say where a pod runs or which revision made it, not what it is: the ones the
/// API server copies from the node when a pod is bound (PodTopologyLabels admission), and the
/// ones the Deployment and StatefulSet controllers add to each pod. A replacement pod on another
/// node or of a later rollout would fall outside a selector built on them, and the apps
/// controllers, which read only the pod template, could not see the gang's PDB over their pods
/// (see `pdb::find_pdb_conflict`); so they never become part of one.
pub fn is_placement_or_revision_label(key: &str) -> bool {
    const REVISION: [&str; 4] = [
        "pod-template-hash",
        "controller-revision-hash",
        "statefulset.kubernetes.io/pod-name",
        "apps.kubernetes.io/pod-index",
    ];
    key.starts_with("topology.kubernetes.io/")
        || key == "kubernetes.io/hostname"
        || REVISION.contains(&key)
}

/// The pods of a gang's PodGroups.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GangPods<'p> {
    /// Live members: not Succeeded/Failed, not being deleted. Only they count.
    pub live: Vec<&'p PodView>,
    /// Pods of the groups that have finished or are being deleted. They are not members, but
    /// they are not strangers either: a selector may cover them (the disruption controller
    /// never counts them as healthy).
    pub inactive: Vec<&'p PodView>,
}

impl GangPods<'_> {
    fn uids(&self) -> BTreeSet<&str> {
        self.live
            .iter()
            .chain(&self.inactive)
            .map(|p| p.uid.as_str())
            .collect()
    }
}

fn selects(selector: &BTreeMap<String, String>, p: &PodView) -> bool {
    selector.iter().all(|(k, v)| p.labels.get(k) == Some(v))
}

/// A selector for the gang's live members that selects no live pod outside its groups among
/// `namespace_pods` (compared by uid). Finished and terminating pods are no strangers: the
/// eviction API deletes them without consulting any budget, so a PDB over them harms nothing.
///
/// `previous`, the selector of the PDB written last time, is kept while it is still exact: when
/// the pods that differed in a label (say `role=leader`) are evicted, the shared labels of
/// those left grow, and a selector built from them would leave out the replacements.
/// Otherwise the selector is the label pairs every live member shares (placement labels
/// excluded).
pub fn derive_gang_selector(
    gang: &GangPods<'_>,
    namespace_pods: &[&PodView],
    previous: Option<&BTreeMap<String, String>>,
) -> Result<BTreeMap<String, String>, SelectorProblem> {
    let ours = gang.uids();
    let strangers = |selector: &BTreeMap<String, String>| -> Vec<String> {
        namespace_pods
            .iter()
            .filter(|p| !p.inactive && !ours.contains(p.uid.as_str()) && selects(selector, p))
            .map(|p| p.name.clone())
            .collect()
    };
    if let Some(prev) = previous
        && !prev.is_empty()
        && !prev.keys().any(|k| is_placement_or_revision_label(k))
        && gang.live.iter().all(|p| selects(prev, p))
        && strangers(prev).is_empty()
    {
        return Ok(prev.clone());
    }
    let Some((first, rest)) = gang.live.split_first() else {
        return Err(SelectorProblem::NoSharedLabels);
    };
    let mut shared = first.labels.clone();
    shared.retain(|k, _| !is_placement_or_revision_label(k));
    for p in rest {
        shared.retain(|k, v| p.labels.get(k) == Some(v));
    }
    if shared.is_empty() {
        return Err(SelectorProblem::NoSharedLabels);
    }
    let others = strangers(&shared);
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
/// `spec.schedulingGroup.podGroupName` names one of them. The controller also uses the live
/// members' labels for its PDB overlap check (`pdb::find_pdb_conflict`).
pub fn gang_members<'a, 'p>(
    workload_name: &str,
    template: &str,
    pod_groups: &'a [PodGroupView],
    namespace_pods: &'p [PodView],
) -> (Vec<&'a PodGroupView>, GangPods<'p>) {
    let groups: Vec<&PodGroupView> = pod_groups
        .iter()
        .filter(|g| {
            g.workload_name.as_deref() == Some(workload_name)
                && g.template_name.as_deref() == Some(template)
        })
        .collect();
    let group_names: BTreeSet<&str> = groups.iter().map(|g| g.name.as_str()).collect();
    let (inactive, live): (Vec<&PodView>, Vec<&PodView>) = namespace_pods
        .iter()
        .filter(|p| {
            p.pod_group_name
                .as_deref()
                .is_some_and(|g| group_names.contains(g))
        })
        .partition(|p| p.inactive);
    (groups, GangPods { live, inactive })
}

pub(crate) fn render_selector(s: &BTreeMap<String, String>) -> String {
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
    /// `metadata.creationTimestamp` (start-up settling: its PodGroups and pods follow it, on
    /// watches of their own that may deliver them after the Workload).
    pub created: Option<Timestamp>,
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
            created: w.metadata.creation_timestamp.as_ref().map(|t| t.0),
        })
    }
}

#[cfg(test)]
mod tests;
