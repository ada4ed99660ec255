//! The desired-state functions the reconcile loops call: given what a workload looks like, the
//! policies and the time, either the PDB to server-side apply or why there is none.
//! No IO here; the controller gathers the inputs and carries out the [`Decision`].

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::budget::{BudgetRule, BudgetValue, Step, clamp_pod_budget, step};
use crate::crd::{ClusterPDBPolicy, PDBPolicy};
use crate::enforcement::{EffectiveConfig, EventNote, Resolved, resolve_configuration};
use crate::gang::{GroupBudget, budget_for_leader_worker_set};
use crate::names::{keys, reasons};
use crate::pdb::{Owner, build_pdb, collect_windows, evaluate_windows};
use crate::resolve::{WorkloadMeta, policy_refs};
use crate::windows::WindowState;

/// How long to wait before retrying a decision that depends on other objects changing.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// The four managed kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    LeaderWorkerSet,
    Workload,
}

impl WorkloadKind {
    pub fn api_version(self) -> &'static str {
        match self {
            Self::Deployment | Self::StatefulSet => "apps/v1",
            Self::LeaderWorkerSet => "leaderworkerset.x-k8s.io/v1",
            Self::Workload => "scheduling.k8s.io/v1beta1",
        }
    }
    pub fn kind(self) -> &'static str {
        match self {
            Self::Deployment => "Deployment",
            Self::StatefulSet => "StatefulSet",
            Self::LeaderWorkerSet => "LeaderWorkerSet",
            Self::Workload => "Workload",
        }
    }
    /// Controller name, also the `controller` metric label.
    pub fn controller_name(self) -> &'static str {
        match self {
            Self::Deployment => "deployment-pdb",
            Self::StatefulSet => "statefulset-pdb",
            Self::LeaderWorkerSet => "leaderworkerset-pdb",
            Self::Workload => "workload-pdb",
        }
    }
    pub fn unmanaged_reason(self) -> &'static str {
        match self {
            Self::Deployment => reasons::DEPLOYMENT_UNMANAGED,
            Self::StatefulSet => reasons::STATEFULSET_UNMANAGED,
            Self::LeaderWorkerSet => reasons::LEADERWORKERSET_UNMANAGED,
            Self::Workload => reasons::WORKLOAD_UNMANAGED,
        }
    }
    pub fn skipped_reason(self) -> &'static str {
        match self {
            Self::Deployment => reasons::DEPLOYMENT_SKIPPED,
            Self::StatefulSet => reasons::STATEFULSET_SKIPPED,
            Self::LeaderWorkerSet => reasons::LEADERWORKERSET_SKIPPED,
            Self::Workload => reasons::WORKLOAD_SKIPPED,
        }
    }
}

/// The policies visible to one reconcile.
#[derive(Clone, Copy, Debug, Default)]
pub struct Policies<'a> {
    /// PDBPolicy objects (any namespace; each reaches only its own).
    pub namespaced: &'a [PDBPolicy],
    pub cluster: &'a [ClusterPDBPolicy],
    /// `--legacy-cross-namespace-policies`: namespaced policies without `namespaces` reach all.
    pub legacy_cross_namespace: bool,
}

/// A Deployment or StatefulSet as the budget logic sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadView {
    pub kind: WorkloadKind,
    pub meta: WorkloadMeta,
    pub uid: String,
    /// `spec.replicas`; unset means 1.
    pub replicas: Option<i32>,
    /// The workload's full `spec.selector` (matchLabels and matchExpressions).
    pub selector: LabelSelector,
    /// `spec.template.metadata.labels`, used for overlap checks.
    pub pod_labels: BTreeMap<String, String>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
}

/// A workload object that lacks something the operator needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    #[error("{kind} has no metadata.{field}; only objects read from the API server can be managed")]
    MissingMetadata {
        kind: &'static str,
        field: &'static str,
    },
}

fn meta_of(
    kind: WorkloadKind,
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Result<(WorkloadMeta, String), ViewError> {
    let missing = |field| ViewError::MissingMetadata {
        kind: kind.kind(),
        field,
    };
    Ok((
        WorkloadMeta {
            namespace: m.namespace.clone().ok_or_else(|| missing("namespace"))?,
            name: m.name.clone().ok_or_else(|| missing("name"))?,
            labels: m.labels.clone().unwrap_or_default(),
            annotations: m.annotations.clone().unwrap_or_default(),
        },
        m.uid.clone().ok_or_else(|| missing("uid"))?,
    ))
}

impl WorkloadView {
    pub fn from_deployment(d: &Deployment) -> Result<Self, ViewError> {
        let (meta, uid) = meta_of(WorkloadKind::Deployment, &d.metadata)?;
        let spec = &d.spec;
        Ok(Self {
            kind: WorkloadKind::Deployment,
            uid,
            replicas: spec.replicas,
            selector: spec.selector.clone(),
            pod_labels: spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.clone())
                .unwrap_or_default(),
            terminating: d.metadata.deletion_timestamp.is_some(),
            meta,
        })
    }

    pub fn from_stateful_set(s: &StatefulSet) -> Result<Self, ViewError> {
        let (meta, uid) = meta_of(WorkloadKind::StatefulSet, &s.metadata)?;
        let spec = &s.spec;
        Ok(Self {
            kind: WorkloadKind::StatefulSet,
            uid,
            replicas: spec.replicas,
            selector: spec.selector.clone(),
            pod_labels: spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.clone())
                .unwrap_or_default(),
            terminating: s.metadata.deletion_timestamp.is_some(),
            meta,
        })
    }

    fn owner(&self) -> Owner {
        Owner {
            api_version: self.kind.api_version().into(),
            kind: self.kind.kind().into(),
            name: self.meta.name.clone(),
            uid: self.uid.clone(),
        }
    }
}

/// A PDB to apply, with everything the controller reports about it.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredPdb {
    /// The full object for server-side apply (field manager `pdb-operator`, force). The
    /// controller adds `pdboperator.io/creation-time` (kept from the live object, or now on create).
    pub pdb: PodDisruptionBudget,
    pub config: EffectiveConfig,
    /// Budget written outside maintenance windows.
    pub budget: BudgetRule,
    pub window: WindowState,
    /// True while a window is open: relax an existing PDB, but never create one.
    pub only_if_exists: bool,
    /// Events to post now (clamp, policy conflicts, override outcomes, bad annotations).
    pub events: Vec<EventNote>,
    /// The arithmetic and enforcement steps, for `plan` / `explain` and logs.
    pub steps: Vec<Step>,
    /// When to look again (next window boundary, at most 1 h).
    pub requeue_after: Duration,
}

impl DesiredPdb {
    /// `MaintenanceWindowActive` / `MaintenanceWindowEnded` when the live PDB's maintenance
    /// state differs from the desired one.
    pub fn window_transition_event(&self, live: Option<&PodDisruptionBudget>) -> Option<EventNote> {
        let live_open = live
            .and_then(|p| p.metadata.annotations.as_ref())
            .and_then(|a| a.get(keys::MAINTENANCE_MODE))
            .is_some_and(|v| v == "true");
        match (live.is_some(), live_open, self.window.open) {
            (true, false, true) => Some(EventNote::normal(
                reasons::MAINTENANCE_WINDOW_ACTIVE,
                "Maintenance window open: PodDisruptionBudget relaxed to minAvailable 0",
            )),
            (true, true, false) => Some(EventNote::normal(
                reasons::MAINTENANCE_WINDOW_ENDED,
                format!(
                    "Maintenance window ended: budget restored ({})",
                    self.budget
                ),
            )),
            _ => None,
        }
    }
}

/// No PDB should exist for this workload.
#[derive(Clone, Debug, PartialEq)]
pub struct NoPdb {
    /// The main event (`<Kind>Unmanaged`, `<Kind>Skipped`, `WorkloadPDBDeferred`, ...); `None`
    /// for silent cases (terminating workload, pods left to the LeaderWorkerSet path).
    pub event: Option<EventNote>,
    /// Other events (invalid annotations, policy conflicts).
    pub events: Vec<EventNote>,
    /// Delete the PDB this workload owns, if any. False only while terminating (GC does it).
    pub delete_owned_pdb: bool,
    /// `reason` label for `pdb_operator_pdbs_deleted_total` / compliance status.
    pub cause: &'static str,
    /// Retry later even without a change (deferred or unresolvable selectors).
    pub retry_after: Option<Duration>,
    pub steps: Vec<Step>,
}

/// What the reconcile loop should do.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Apply(Box<DesiredPdb>),
    NoPdb(NoPdb),
}

impl Decision {
    /// When to reconcile again without any change: the next maintenance-window boundary for a
    /// PDB, or the 30 s retry of a deferred / unresolvable decision.
    pub fn requeue_after(&self) -> Option<Duration> {
        match self {
            Self::Apply(d) => Some(d.requeue_after),
            Self::NoPdb(n) => n.retry_after,
        }
    }

    /// Every event to post on the workload for this decision, main event first.
    pub fn events(&self) -> Vec<&EventNote> {
        match self {
            Self::Apply(d) => d.events.iter().collect(),
            Self::NoPdb(n) => n.event.iter().chain(&n.events).collect(),
        }
    }

    /// The enforcement steps and arithmetic behind the decision.
    pub fn steps(&self) -> &[Step] {
        match self {
            Self::Apply(d) => &d.steps,
            Self::NoPdb(n) => &n.steps,
        }
    }
}

pub(crate) fn no_pdb(
    event: Option<EventNote>,
    resolved_events: Vec<EventNote>,
    cause: &'static str,
    steps: Vec<Step>,
) -> Decision {
    Decision::NoPdb(NoPdb {
        event,
        events: resolved_events,
        delete_owned_pdb: true,
        cause,
        retry_after: None,
        steps,
    })
}

/// Resolution shared by every kind: `Err` carries the `<Kind>Unmanaged` decision.
pub(crate) fn resolve_or_unmanaged(
    kind: WorkloadKind,
    meta: &WorkloadMeta,
    policies: &Policies<'_>,
) -> Result<(EffectiveConfig, Vec<EventNote>, Vec<Step>), Box<Decision>> {
    let candidates = policy_refs(policies.namespaced, policies.cluster);
    let Resolved {
        config,
        events,
        steps,
    } = resolve_configuration(meta, &candidates, policies.legacy_cross_namespace);
    match config {
        Some(c) => Ok((c, events, steps)),
        None => Err(Box::new(no_pdb(
            Some(EventNote::normal(
                kind.unmanaged_reason(),
                format!(
                    "{} {} has no availability configuration",
                    kind.kind(),
                    meta.name
                ),
            )),
            events,
            "unmanaged",
            steps,
        ))),
    }
}

/// Final assembly shared by every kind: windows, the PDB object, requeue time.
pub(crate) fn finish(
    owner: &Owner,
    meta: &WorkloadMeta,
    config: EffectiveConfig,
    budget: BudgetRule,
    selector: LabelSelector,
    now: Timestamp,
    (mut events, mut steps): (Vec<EventNote>, Vec<Step>),
) -> Decision {
    let windows = collect_windows(meta, &config, &mut events);
    let window = evaluate_windows(&windows, now);
    let at = |t: Option<Timestamp>| t.map_or_else(|| "-".to_string(), crate::pdb::rfc3339);
    if window.open {
        let text = format!(
            "open since {} until {}: minAvailable 0",
            at(window.open_since),
            at(window.next_transition)
        );
        steps.push(step("maintenance window", text));
    } else if !windows.is_empty() {
        let text = format!("closed; next opens {}", at(window.next_transition));
        steps.push(step("maintenance window", text));
    }
    let pdb = build_pdb(owner, meta, &config, budget, selector, &window);
    let requeue_after = window.requeue_after(now);
    Decision::Apply(Box::new(DesiredPdb {
        pdb,
        config,
        budget,
        only_if_exists: window.open,
        window,
        events,
        steps,
        requeue_after,
    }))
}

/// Desired PDB for a Deployment or StatefulSet (order of note §9 "Ours"): terminating → nothing;
/// LWS-owned StatefulSet → remove ours; no configuration → `<Kind>Unmanaged`; replicas < 2 →
/// `<Kind>Skipped`; otherwise class/custom budget, drain clamp, window, PDB.
pub fn desired_pdb_for_workload(
    view: &WorkloadView,
    policies: &Policies<'_>,
    now: Timestamp,
) -> Decision {
    if view.terminating {
        return Decision::NoPdb(NoPdb {
            event: None,
            events: vec![],
            delete_owned_pdb: false,
            cause: "workload_deleted",
            retry_after: None,
            steps: vec![step(
                "workload",
                "terminating; the garbage collector removes the PDB",
            )],
        });
    }
    if view.kind == WorkloadKind::StatefulSet && view.meta.labels.contains_key(keys::LWS_NAME) {
        return no_pdb(
            None,
            vec![],
            "leaderworkerset_owned",
            vec![step(
                "workload",
                "StatefulSet belongs to a LeaderWorkerSet; its PDB comes from there",
            )],
        );
    }
    let (config, events, mut steps) = match resolve_or_unmanaged(view.kind, &view.meta, policies) {
        Ok(r) => r,
        Err(d) => return *d,
    };
    let replicas = view.replicas.unwrap_or(1);
    if replicas < 2 {
        steps.push(step("replicas", replicas));
        let msg = format!(
            "{} {} skipped for PDB management: insufficient replicas ({replicas}); a PDB needs at least 2",
            view.kind.kind(),
            view.meta.name
        );
        return no_pdb(
            Some(EventNote::normal(view.kind.skipped_reason(), msg)),
            events,
            "insufficient_replicas",
            steps,
        );
    }
    let budget = clamp_pod_budget(config.rule, replicas as u32);
    steps.extend(budget.steps.iter().cloned());
    let mut events = events;
    if let Some(why) = &budget.clamped {
        events.push(EventNote::normal(reasons::BUDGET_CLAMPED, why.clone()));
    }
    finish(
        &view.owner(),
        &view.meta,
        config,
        budget.rule,
        view.selector.clone(),
        now,
        (events, steps),
    )
}

/// A LeaderWorkerSet as the budget logic sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaderWorkerSetView {
    pub meta: WorkloadMeta,
    pub uid: String,
    /// `spec.replicas` (groups); unset means 1.
    pub replicas: Option<i32>,
    /// `spec.leaderWorkerTemplate.size` (pods per group, leader included); unset means 1.
    pub size: Option<i32>,
    pub terminating: bool,
}

/// Desired PDB for a LeaderWorkerSet: whole groups (note §10), selector
/// `leaderworkerset.sigs.k8s.io/name=<lws>`.
pub fn desired_pdb_for_leader_worker_set(
    view: &LeaderWorkerSetView,
    policies: &Policies<'_>,
    now: Timestamp,
) -> Decision {
    let kind = WorkloadKind::LeaderWorkerSet;
    if view.terminating {
        return Decision::NoPdb(NoPdb {
            event: None,
            events: vec![],
            delete_owned_pdb: false,
            cause: "workload_deleted",
            retry_after: None,
            steps: vec![],
        });
    }
    let (config, mut events, mut steps) = match resolve_or_unmanaged(kind, &view.meta, policies) {
        Ok(r) => r,
        Err(d) => return *d,
    };
    let groups = view.replicas.unwrap_or(1).max(0) as u32;
    let size = view.size.unwrap_or(1).max(1) as u32;
    let budget = match budget_for_leader_worker_set(config.rule, groups, size) {
        GroupBudget::Groups {
            min_available,
            steps: s,
            ..
        } => {
            steps.extend(s);
            BudgetRule::MinAvailable(BudgetValue::Count(min_available))
        }
        GroupBudget::PodLevel(b) => {
            steps.extend(b.steps.iter().cloned());
            if let Some(why) = &b.clamped {
                events.push(EventNote::normal(reasons::BUDGET_CLAMPED, why.clone()));
            }
            b.rule
        }
        GroupBudget::Impossible { why, steps: s } => {
            steps.extend(s);
            return no_pdb(
                Some(EventNote::warning(reasons::LEADERWORKERSET_SKIPPED, why)),
                events,
                "single_group",
                steps,
            );
        }
    };
    let owner = Owner {
        api_version: kind.api_version().into(),
        kind: kind.kind().into(),
        name: view.meta.name.clone(),
        uid: view.uid.clone(),
    };
    let selector = LabelSelector {
        match_labels: Some(BTreeMap::from([(
            keys::LWS_NAME.to_string(),
            view.meta.name.clone(),
        )])),
        match_expressions: None,
    };
    finish(
        &owner,
        &view.meta,
        config,
        budget,
        selector,
        now,
        (events, steps),
    )
}

#[cfg(test)]
mod tests;
